# g4tp shard / synth from the command line: shard then generate --model ARTIFACT_DIR gives the
# golden ids and the HF folder's logits byte for byte; no output at all when stderr is not a
# terminal, a progress bar when it is; refusals exit 1 with clear messages; Ctrl-C leaves no
# folder; and peak RSS of shard does not grow with the model (a 31B-shaped model at small widths,
# 2 vs 12 layers: >= 4x the bytes, peak RSS within 64 MiB).
. tests/e2e/_lib.sh
D=tests/data/golden
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
p=$(golden_ids $D/tiny_tp8__p16.json prompt_ids); want=$(golden_ids $D/tiny_tp8__p16.json generated_ids)

# shard, quiet when stderr is not a terminal
$G4TP shard --model $D/tiny_tp8 --tp 4 --out $tmp/a4 >$tmp/out 2>$tmp/err; rc=$?
expect_eq "$rc" 0 "shard --tp 4 exits 0"
expect_eq "$(cat $tmp/out $tmp/err | wc -c)" 0 "shard prints nothing when not a terminal"
[ -f $tmp/a4/manifest.json ] && [ -f $tmp/a4/rank-00003-of-00004.g4w ] && ok "manifest and rank files written" || bad "files missing: $(ls $tmp/a4)"
ls $tmp | grep -q tmp- && bad "temp folder left behind" || ok "no temp folder left"
got=$($G4TP generate --model $tmp/a4 --tp 4 --verify --prompt-ids "$p" --max-new-tokens 16)
expect_eq "$got" "$want" "generate --model ARTIFACT_DIR --tp 4: golden ids"
$G4TP generate --model $tmp/a4 --tp 4 --prompt-ids "$p" --max-new-tokens 4 --dump-all-logits $tmp/art.bin >/dev/null
$G4TP generate --model $D/tiny_tp8 --tp 4 --prompt-ids "$p" --max-new-tokens 4 --dump-all-logits $tmp/hf.bin >/dev/null
cmp -s $tmp/art.bin $tmp/hf.bin && [ -s $tmp/hf.bin ] && ok "artifact logits byte-identical to the HF folder" || bad "artifact logits differ"

# a progress bar on a terminal
if command -v script >/dev/null; then
  script -qec "$G4TP shard --model $D/tiny_tp8 --tp 2 --out $tmp/tty" /dev/null >$tmp/tty.txt 2>&1
  grep -q "MB/s" $tmp/tty.txt && ok "progress bar on a terminal" || bad "no progress bar on a terminal: $(cat $tmp/tty.txt)"
fi

# MPI: each process maps only its own rank file
if command -v mpirun >/dev/null; then
  $G4TP shard --model $D/tiny_tp8 --tp 4 --out $tmp/m4 2>/dev/null
  got=$(ASAN_OPTIONS=detect_leaks=0 timeout 300 mpirun --oversubscribe --allow-run-as-root --mca btl self,vader --mca plm_rsh_agent false \
        -np 4 $G4TP generate --comm mpi --model $tmp/m4 --verify --prompt-ids "$p" --max-new-tokens 16 2>$tmp/mpierr)
  expect_eq "$got" "$want" "mpirun -np 4 generate --model ARTIFACT_DIR: golden ids"
fi

# refusals
out=$($G4TP generate --model $tmp/a4 --tp 2 --prompt-ids 2 2>&1); rc=$?
expect_eq "$rc" 1 "wrong --tp exits 1"; echo "$out" | grep -q "TP 4" && ok "message says the folder holds TP 4" || bad "message: $out"
out=$($G4TP shard --model $D/tiny_tp8 --tp 4 --out $tmp/a4 2>&1); rc=$?
expect_eq "$rc" 1 "existing output refused"; echo "$out" | grep -q -- "--force" && ok "message names --force" || bad "message: $out"
$G4TP shard --model $D/tiny_tp8 --tp 2 --out $tmp/a4 --force 2>/dev/null && [ "$(python3 -c "import json;print(json.load(open('$tmp/a4/manifest.json'))['tp'])")" = 2 ] \
  && ok "--force replaces the folder" || bad "--force"
out=$($G4TP shard --model $D/tiny_wide --tp 4 --out $tmp/w4 2>&1); rc=$?
expect_eq "$rc" 1 "impossible TP exits 1"; echo "$out" | grep -q "valid degrees: 1, 2" && ok "message lists the valid degrees" || bad "message: $out"
[ -e $tmp/w4 ] && bad "a refused shard left $tmp/w4" || ok "nothing written for a refused shard"
out=$($G4TP shard --model $D/tiny_tp8 --out $tmp/x 2>&1); rc=$?
expect_eq "$rc" 2 "missing --tp exits 2"
# corrupt a byte in the data: --verify refuses naming the tensor
cp -r $tmp/a4 $tmp/bad
python3 - "$tmp/bad/rank-00001-of-00002.g4w" <<'EOF'
import sys
f = open(sys.argv[1], 'r+b'); f.seek(-10, 2); b = f.read(1); f.seek(-10, 2); f.write(bytes([b[0] ^ 1])); f.close()
EOF
out=$($G4TP generate --model $tmp/bad --tp 2 --verify --prompt-ids 2 2>&1); rc=$?
expect_eq "$rc" 1 "corrupt tensor with --verify exits 1"; echo "$out" | grep -q "tensor .*checksum" && ok "message names the tensor" || bad "message: $out"

# Ctrl-C: no output folder, no temp folder
for s in tests/data/artifact/small-31b-like.config.json; do
  $G4TP synth --like $s --layers 2 --out $tmp/s2 && ok "synth 2 layers" || bad "synth 2 layers"
  $G4TP synth --like $s --layers 12 --shard-mb 300 --out $tmp/s12 && ok "synth 12 layers" || bad "synth 12 layers"
done
$G4TP shard --model $tmp/s12 --tp 2 --out $tmp/int 2>/dev/null & pid=$!
sleep 0.3; kill -INT $pid; wait $pid; rc=$?
if [ $rc -eq 130 ]; then
  [ -e $tmp/int ] && bad "interrupted shard left $tmp/int" || ok "Ctrl-C: no output folder"
  ls $tmp | grep -q "int.tmp-" && bad "interrupted shard left its temp folder" || ok "Ctrl-C: temp folder removed"
else
  ok "shard finished before the interrupt (rc=$rc); skipped"
fi

# synth checkpoints load and shard; peak RSS does not grow with the model
n2=$(du -sb $tmp/s2 | cut -f1); n12=$(du -sb $tmp/s12 | cut -f1)
[ $n12 -ge $((4 * n2)) ] && ok "larger synth model is >= 4x the smaller ($n12 vs $n2 bytes)" || bad "sizes $n12 vs $n2"
[ $(ls $tmp/s12/model-*-of-00004.safetensors | wc -l) = 4 ] && ok "--shard-mb splits the checkpoint" || bad "shards: $(ls $tmp/s12)"
$G4TP generate --model $tmp/s2 --prompt-ids 2,105 --max-new-tokens 2 >/dev/null && ok "synth checkpoint loads" || bad "synth checkpoint does not load"
rss() { /usr/bin/time -f %M -o $tmp/rss.txt "$@" >/dev/null 2>&1 || { bad "command failed: $*"; echo 0; return; }; tail -1 $tmp/rss.txt; }
if [ -x /usr/bin/time ]; then
  r2=$(rss $G4TP shard --model $tmp/s2 --tp 2 --out $tmp/s2.art)
  r12=$(rss $G4TP shard --model $tmp/s12 --tp 2 --out $tmp/s12.art)
  echo "# peak RSS: 2 layers ${r2} KiB, 12 layers ${r12} KiB"
  d=$((r12 - r2)); [ $d -lt 0 ] && d=$((-d))
  if [ "${G4_SAN:-0}" = 1 ]; then
    # ASan's shadow memory (1/8 of every byte read through the map) grows with the model
    ok "peak RSS check skipped under ASan (${r2} vs ${r12} KiB)"
  else
    [ $d -lt 65536 ] && ok "shard peak RSS does not grow with the model (${r2} vs ${r12} KiB)" || bad "peak RSS grew: ${r2} vs ${r12} KiB"
  fi
  $G4TP generate --model $tmp/s12 --tp 2 --prompt-ids 2,105,17 --max-new-tokens 2 --dump-logits $tmp/s12hf.bin >/dev/null
  $G4TP generate --model $tmp/s12.art --tp 2 --prompt-ids 2,105,17 --max-new-tokens 2 --dump-logits $tmp/s12art.bin >/dev/null
  cmp -s $tmp/s12hf.bin $tmp/s12art.bin && [ -s $tmp/s12hf.bin ] && ok "31B-shaped artifacts: logits equal the HF folder" || bad "31B-shaped artifacts: logits differ"
else
  bad "/usr/bin/time missing (scripts/install-deps.sh installs the time package)"
fi

# 4-bit: a W4A16 checkpoint shards to q4_0 exactly; an ordinary bf16 one reports its error per tensor.
$G4TP synth --like "tests/data/golden/tiny_default/config.json" --format w4a16 --out $tmp/w4 >/dev/null
out=$($G4TP shard --model $tmp/w4 --tp 2 --out $tmp/w4art --quiet 2>&1)
echo "$out" | grep -q "^quantized 54 tensors: 54 exact" && ok "w4a16 -> q4_0: every tensor exact" || bad "w4a16 shard: $out"
out=$($G4TP shard --model "tests/data/golden/tiny_default" --dtype q4_0 --tp 2 --out $tmp/q4art --quiet 2>&1)
n=$(echo "$out" | grep -c "^nmse .*(bf16 -> q4_0)$")
expect_eq "$n" 55 "bf16 -> q4_0: one nmse line per quantized tensor"
python3 -c "import json,sys; m=json.load(open(sys.argv[1])); sys.exit(0 if m['head_dtype']=='q4_0' else 1)" $tmp/q4art/manifest.json \
  && ok "manifest: the head follows --dtype q4_0" || bad "manifest head_dtype"
# the default (--q4-layout auto) is the layout this machine's kernels read: a reload copies nothing
c=$($G4TP bench --model $tmp/q4art --tp 2 --prompt-len 4 --gen 2 --json 2>/dev/null | python3 -c "import json,sys; print(json.load(sys.stdin)['weights_copied_mb'])")
expect_eq "$c" 0.0 "q4_0 artifact in the default layout: no weight copied at load"
# --q4-layout: written as asked, both load and give the same ids; a bad value is a usage error
for l in blocks grouped; do
  $G4TP shard --model "tests/data/golden/tiny_default" --dtype q4_0 --q4-layout $l --tp 2 --out $tmp/q4$l --quiet >/dev/null 2>&1
  expect_eq "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('q4_layout'))" $tmp/q4$l/manifest.json)" $l "manifest: q4_layout $l"
  $G4TP generate --model $tmp/q4$l --tp 2 --prompt-ids 2,105,17 --max-new-tokens 4 > $tmp/q4$l.ids 2>/dev/null || bad "generate from q4_layout $l"
done
cmp -s $tmp/q4blocks.ids $tmp/q4grouped.ids && [ -s $tmp/q4blocks.ids ] && ok "q4_0 blocks and grouped artifacts: the same ids" || bad "q4 layouts differ"
out=$($G4TP shard --model "tests/data/golden/tiny_default" --q4-layout rows --tp 2 --out $tmp/q4bad 2>&1); rc=$?
expect_eq "$rc" 2 "--q4-layout rows: exit 2"
echo "$out" | grep -q "must be auto, blocks or grouped" && ok "--q4-layout: the message names the choices" || bad "q4-layout message: $out"
finish
