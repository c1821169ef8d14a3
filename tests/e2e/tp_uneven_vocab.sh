# An uneven vocabulary split: a tiny_tp8-shaped model with a vocab of 777 (777 = 8·97 + 1, so
# rank 0 holds one row more than the others) gives byte-identical logits at TP 1, 2, 4 and 8,
# with threads, from the HF folder and from artifacts.
. tests/e2e/_lib.sh
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - tests/data/golden/tiny_tp8/config.json "$tmp/cfg.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["text_config"]["vocab_size"] = 777
c["text_config"]["vocab_size_per_layer_input"] = 777
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
$G4TP synth --like $tmp/cfg.json --seed 3 --out $tmp/m >/dev/null || { bad "synth"; finish; exit 1; }
$G4TP generate --model $tmp/m --prompt-ids 2,105,17,776,400,0,1 --max-new-tokens 6 --dump-all-logits $tmp/t1.bin > $tmp/ids1
expect_eq "$(stat -c %s $tmp/t1.bin)" "$((777*4*6))" "logits cover the 777-token vocabulary"
for t in 2 4 8; do
  $G4TP generate --model $tmp/m --tp $t --prompt-ids 2,105,17,776,400,0,1 --max-new-tokens 6 --dump-all-logits $tmp/t$t.bin > $tmp/ids$t
  cmp -s $tmp/t1.bin $tmp/t$t.bin && ok "vocab 777: TP $t logits byte-identical to TP 1" || bad "vocab 777: TP $t logits differ"
  $G4TP shard --model $tmp/m --tp $t --out $tmp/a$t >/dev/null 2>&1 || bad "shard tp $t"
  $G4TP generate --model $tmp/a$t --prompt-ids 2,105,17,776,400,0,1 --max-new-tokens 6 --dump-all-logits $tmp/a$t.bin >/dev/null
  cmp -s $tmp/t1.bin $tmp/a$t.bin && ok "vocab 777: TP $t artifacts byte-identical" || bad "vocab 777: TP $t artifacts differ"
done
rm -rf "$tmp"
finish
