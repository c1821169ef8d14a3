# g4tp generate and inspect from the command line: golden ids, --json, --dump-logits, TP via
# threads, and bad arguments / bad models giving clear errors with the right exit codes.
. tests/e2e/_lib.sh
D=tests/data/golden
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for m in tiny_default tiny_wide tiny_tp8; do
  p=$(golden_ids $D/${m}__p16.json prompt_ids); want=$(golden_ids $D/${m}__p16.json generated_ids)
  got=$($G4TP generate --model $D/$m --prompt-ids "$p" --max-new-tokens 16)
  expect_eq "$got" "$want" "$m p16 greedy ids"
done
p=$(golden_ids $D/tiny_tp8__p40.json prompt_ids)
$G4TP generate --model $D/tiny_tp8 --prompt-ids "$p" --max-new-tokens 4 --dump-logits $tmp/l1.bin >/dev/null
$G4TP generate --model $D/tiny_tp8 --prompt-ids "$p" --max-new-tokens 4 --tp 8 --dump-logits $tmp/l8.bin >/dev/null
if cmp -s $tmp/l1.bin $tmp/l8.bin && [ "$(stat -c %s $tmp/l1.bin)" = 4096 ]; then ok "TP=8 dumped logits equal TP=1 byte for byte"; else bad "TP=8 logits differ"; fi
js=$($G4TP generate --model $D/tiny_default --prompt-ids 2,105,17 --max-new-tokens 3 --json)
echo "$js" | python3 -c "import json,sys;d=json.load(sys.stdin);assert len(d['generated_ids'])==3 and len(d['steps'])==3 and len(d['steps'][0]['top5_ids'])==5" && ok "--json shape" || bad "--json shape: $js"
# stop ids: generation stops at (and includes) the stop id
first=$($G4TP generate --model $D/tiny_default --prompt-ids 2,105,17 --max-new-tokens 5 | cut -d, -f2)
got=$($G4TP generate --model $D/tiny_default --prompt-ids 2,105,17 --max-new-tokens 5 --stop-ids "$first")
expect_eq "$(echo "$got" | tr ',' '\n' | tail -1)" "$first" "stops at a stop id"
# bad input
out=$($G4TP generate --model $D/tiny_default --prompt-ids 2,x 2>&1); rc=$?
expect_eq "$rc" 2 "malformed --prompt-ids exits 2"; echo "$out" | grep -q "comma-separated" && ok "message names the format" || bad "message: $out"
out=$($G4TP generate --model $D/tiny_default --prompt-ids 2,99999 2>&1); rc=$?
expect_eq "$rc" 1 "id outside the vocabulary exits 1"; echo "$out" | grep -q "outside the vocabulary" && ok "message names the vocabulary" || bad "message: $out"
out=$($G4TP generate --model $D/tiny_wide --prompt-ids 2 --tp 4 2>&1); rc=$?
expect_eq "$rc" 1 "impossible TP degree exits 1"; echo "$out" | grep -q "valid degrees: 1, 2" && ok "message lists the valid degrees" || bad "message: $out"
out=$($G4TP generate --model /nonexistent --prompt-ids 2 2>&1); rc=$?
expect_eq "$rc" 1 "missing model exits 1"
out=$($G4TP generate --model $D/tiny_default --prompt-ids 2 --max-ctx 4 --max-new-tokens 10 2>&1); rc=$?
expect_eq "$rc" 1 "prompt + new tokens beyond the context exits 1"; echo "$out" | grep -q "context" && ok "message names the context" || bad "message: $out"
out=$($G4TP frobnicate 2>&1); rc=$?
expect_eq "$rc" 2 "unknown command exits 2"
for c in generate inspect; do $G4TP $c --help | grep -q "usage: g4tp $c" && ok "$c --help" || bad "$c --help"; done
# inspect: the 31B figures from its config alone (spec §2.4)
out=$($G4TP inspect --model tests/data/spec/gemma-4-31B-it.config.json --tp 8)
echo "$out" | grep -q "text model total .*30,697,345,340 .*61,394,690,680" && ok "inspect: 31B total parameters and bytes" || bad "inspect: $out"
echo "$out" | grep -q "+42" && ok "inspect: replication cost shown" || bad "inspect replication"
# images: the placeholder expanded over the file's soft tokens, the oracle's greedy ids (tiny
# vision checkpoint, tests/data/vision), at TP 1 and 2; two images in order; refusals
V=tests/data/vision
P=2,105,17,107,501,33,44,55,106,107,105,77,107,100,88,107,101
for g in square_1000x1000 nonsquare_333x517; do
  want=$(python3 -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['text']['generated_ids'])))" $V/$g/golden.json)
  for tp in 1 2; do
    got=$($G4TP generate --model $V/tiny_vision --tp $tp --prompt-ids $P --image $V/images/$g.png --max-new-tokens 8 2>&1)
    expect_eq "$got" "$want" "generate --image $g at TP $tp: the oracle's ids"
  done
done
want=$(python3 -c "import json,sys;print(','.join(map(str,json.load(open(sys.argv[1]))['text']['generated_ids'])))" $V/two_images/golden.json)
got=$($G4TP generate --model $V/tiny_vision --prompt-ids 2,105,17,107,501,33,501,44,55,106,107,105,77,107,100,88,107,101 \
      --image $V/images/square_1000x1000.png --image $V/images/nonsquare_333x517.png --max-new-tokens 8 2>&1)
expect_eq "$got" "$want" "generate with two images: the oracle's ids"
n=$($G4TP generate --model $V/tiny_vision --prompt-ids $P --image $V/images/square_1000x1000.png --max-new-tokens 1 --json | python3 -c "import json,sys;print(len(json.load(sys.stdin)['prompt_ids']))")
expect_eq "$n" 274 "--json prompt_ids are the expanded prompt (17 - 1 + 258)"
out=$($G4TP generate --model $V/tiny_vision --prompt-ids $P --max-new-tokens 1 2>&1); rc=$?
expect_eq "$rc" 1 "a placeholder without an image exits 1"; echo "$out" | grep -q "1 image placeholder but 0 images" && ok "message counts both" || bad "message: $out"
out=$($G4TP generate --model $D/../../../models/demo --prompt-ids 2,105 --image $V/images/square_1000x1000.png 2>&1); rc=$?
expect_eq "$rc" 1 "an image on a text model exits 1"; echo "$out" | grep -q "takes no images" && ok "message: takes no images" || bad "message: $out"
printf 'not an image' > "$tmp/x.png"
out=$($G4TP generate --model $V/tiny_vision --prompt-ids $P --image "$tmp/x.png" 2>&1); rc=$?
expect_eq "$rc" 1 "a file that is no image exits 1"; echo "$out" | grep -q "x.png" && ok "message names the file" || bad "message: $out"
rm -rf "$tmp"
finish
