# g4tp run on the built-in demo model: text in, answer out, at TP 1 and 2, plus bad input.
. tests/e2e/_lib.sh
for tp in 1 2; do
  got=$($G4TP run --tp $tp -p "What is the capital of France?" --temperature 0)
  expect_eq "$got" "The capital of France is Paris." "run --tp $tp answers"
done
got=$($G4TP run -p "What is the capital of Japan?" --temperature 0 --json)
echo "$got" | python3 -c "import json,sys;d=json.load(sys.stdin);assert d['response']=='The capital of Japan is Tokyo.' and d['finish_reason']=='stop', d" && ok "run --json" || bad "run --json: $got"
got=$($G4TP run -p "What is the capital of France?" --stop " Paris" --temperature 0)
expect_eq "$got" "The capital of France is" "run --stop cuts before the stop string"
# seeded sampling is reproducible
a=$($G4TP run -p "What is the capital of Peru?" --temperature 1.5 --seed 7 --max-new-tokens 12)
b=$($G4TP run -p "What is the capital of Peru?" --temperature 1.5 --seed 7 --max-new-tokens 12)
expect_eq "$a" "$b" "same seed, same answer"
out=$($G4TP run 2>&1); rc=$?
expect_eq "$rc" 2 "run without a prompt exits 2"
out=$($G4TP run -p "x" --temperature abc 2>&1); rc=$?
expect_eq "$rc" 2 "bad --temperature exits 2"
out=$($G4TP run -p "What is the capital of France?" --max-ctx 8 2>&1); rc=$?
expect_eq "$rc" 1 "prompt longer than the context exits 1"
echo "$out" | grep -q "context" && ok "message names the context" || bad "message: $out"
$G4TP run --help | grep -q "usage: g4tp run" && ok "run --help" || bad "run --help"

# A side file that is there but cannot be read is an error naming it, never taken as absent
# (the prompt would lose its <bos>, the sampling defaults would be ours). As root a mode-000
# file is still readable, so: a directory and a symlink loop, and mode 000 as nobody (setpriv).
tmp=$(mktemp -d); chmod 755 "$tmp"; trap 'rm -rf "$tmp"' EXIT
cp -r models/demo "$tmp/m"; chmod 755 "$tmp/m"
unreadable() { # file how
  local f=$1 how=$2 out rc
  out=$($G4TP run --model "$tmp/m" -p "What is the capital of France?" --temperature 0 2>&1); rc=$?
  expect_eq "$rc" 1 "$f as $how: run exits 1"
  echo "$out" | grep -q "$f" && ok "$f as $how: the message names it" || bad "$f as $how: $out"
}
for f in tokenizer_config.json generation_config.json; do
  mv "$tmp/m/$f" "$tmp/$f"
  mkdir "$tmp/m/$f"; unreadable $f "a directory"; rmdir "$tmp/m/$f"
  ln -s "$f" "$tmp/m/$f"; unreadable $f "a symlink loop"; rm "$tmp/m/$f"
  mv "$tmp/$f" "$tmp/m/$f"
done
# generation_config.json's stop ids are read by the engine too (g4tp generate)
mv "$tmp/m/generation_config.json" "$tmp/gc"; ln -s gone "$tmp/m/generation_config.json"
out=$($G4TP generate --model "$tmp/m" --prompt-ids 2,105 --max-new-tokens 1 2>&1); rc=$?
expect_eq "$rc" 1 "generate: dangling generation_config.json exits 1"
echo "$out" | grep -q "generation_config.json: a symbolic link to nothing" && ok "generate: the message says so" || bad "generate: $out"
rm "$tmp/m/generation_config.json"
echo '{"eos_token_id": [1, ' > "$tmp/m/generation_config.json"
out=$($G4TP generate --model "$tmp/m" --prompt-ids 2,105 --max-new-tokens 1 2>&1); rc=$?
expect_eq "$rc" 1 "generate: malformed generation_config.json exits 1"
echo "$out" | grep -q "generation_config.json" && ok "generate: the message names it" || bad "generate: $out"
mv "$tmp/gc" "$tmp/m/generation_config.json"
# absent is fine
mv "$tmp/m/tokenizer_config.json" "$tmp/tc"
out=$($G4TP run --model "$tmp/m" -p "What is the capital of France?" --temperature 0 2>&1); rc=$?
expect_eq "$rc" 0 "absent tokenizer_config.json: run works"
mv "$tmp/tc" "$tmp/m/tokenizer_config.json"
if command -v setpriv >/dev/null && [ "$(id -u)" = 0 ] && setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null; then
  for f in tokenizer_config.json generation_config.json; do
    chmod 000 "$tmp/m/$f"
    out=$(setpriv --reuid=nobody --regid=nogroup --clear-groups $G4TP run --model "$tmp/m" -p "What is the capital of France?" --temperature 0 2>&1); rc=$?
    expect_eq "$rc" 1 "$f unreadable by nobody: run exits 1"
    echo "$out" | grep -q "$f: cannot open: Permission denied" && ok "$f: Permission denied" || bad "$f as nobody: $out"
    chmod 644 "$tmp/m/$f"
  done
elif [ "$(id -u)" != 0 ]; then
  chmod 000 "$tmp/m/tokenizer_config.json"
  out=$($G4TP run --model "$tmp/m" -p "What is the capital of France?" --temperature 0 2>&1); rc=$?
  expect_eq "$rc" 1 "unreadable tokenizer_config.json: run exits 1"
  echo "$out" | grep -q "Permission denied" && ok "message: Permission denied" || bad "message: $out"
  chmod 644 "$tmp/m/tokenizer_config.json"
else
  echo "# skipped the EACCES case: setpriv cannot switch to nobody here"
fi
# messages say what the system said: a folder that is a symlink loop, a model.safetensors that
# is a directory or a loop
ln -s loop "$tmp/loop"
out=$($G4TP run --model "$tmp/loop" -p hi 2>&1); rc=$?
expect_eq "$rc" 1 "model folder as a symlink loop exits 1"
echo "$out" | grep -q "model folder $tmp/loop: Too many levels of symbolic links" && ok "message: a symlink loop" || bad "message: $out"
mv "$tmp/m/model.safetensors" "$tmp/w"
mkdir "$tmp/m/model.safetensors"
out=$($G4TP run --model "$tmp/m" -p hi 2>&1); rc=$?
expect_eq "$rc" 1 "model.safetensors as a directory exits 1"
echo "$out" | grep -q "model.safetensors: is a directory" && ok "message: is a directory" || bad "message: $out"
rmdir "$tmp/m/model.safetensors"; ln -s model.safetensors "$tmp/m/model.safetensors"
out=$($G4TP run --model "$tmp/m" -p hi 2>&1); rc=$?
expect_eq "$rc" 1 "model.safetensors as a symlink loop exits 1"
echo "$out" | grep -q "model.safetensors: Too many levels of symbolic links" && ok "message: a symlink loop" || bad "message: $out"
rm "$tmp/m/model.safetensors"
out=$($G4TP run --model "$tmp/m" -p hi 2>&1); rc=$?
echo "$out" | grep -q "no model.safetensors and no model.safetensors.index.json" && ok "absent: says so" || bad "absent: $out"
mv "$tmp/m/config.json" "$tmp/cj"; mkdir "$tmp/m/config.json"
out=$($G4TP run --model "$tmp/m" -p hi 2>&1); rc=$?
echo "$out" | grep -q "config.json: Is a directory" && ok "config.json as a directory: says so" || bad "config.json as a directory: $out"
rm -rf "$tmp"

# Images (issue 25 item 4) on tests/data/vision/demo_vision (the demo's text weights, a random
# tower): run --image counts the image tokens and answers at TP 1 and 2 with the same prompt;
# chat's /image attaches a picture to the next message and later turns take it from the cache.
VM=tests/data/vision/demo_vision; VI=tests/data/vision/images/nonsquare_333x517.png
for tp in 1 2; do
  j=$($G4TP run --model $VM --tp $tp --image $VI -p "What is the capital of France?" --temperature 0 --json)
  expect_eq "$(printf '%s' "$j" | python3 -c "import json,sys; d=json.load(sys.stdin); print(d['response'], d['prompt_tokens'])")" \
    "The capital of France is Paris. 82" "run --image at TP $tp: the answer, and 82 prompt tokens (20 of text, boi + 60 image tokens + eoi)"
done
out=$($G4TP run --image $VI -p "hi" 2>&1); rc=$?
expect_eq "$rc" 1 "run --image on a model without a tower exits 1"
echo "$out" | grep -q "takes no images" && ok "... saying the model takes no images" || bad "message: $out"
out=$($G4TP run --model $VM --image tests/data/vision/README.md -p "hi" 2>&1); rc=$?
expect_eq "$rc" 1 "run --image with a file that is no image exits 1"
out=$(printf '/image %s\nWhat is the capital of France?\nWhat is the capital of Japan?\n/image /nonexistent.png\nWhat is the capital of Peru?\n' "$VI" |
      $G4TP chat --model $VM --temperature 0 --stats 2>&1)
echo "$out" | grep -q "^\[prompt 82 tokens, 0 from the cache" && ok "chat /image: the first turn carries the image" || bad "chat /image: $out"
echo "$out" | grep -q "^\[prompt 106 tokens, 78 from the cache" && ok "chat: the next turn takes the image from the cache" || bad "chat second turn: $out"
echo "$out" | grep -q "cannot open /nonexistent.png" && ok "chat: a missing image file is an error, the chat goes on" || bad "chat missing file: $out"
echo "$out" | grep -q "The capital of Peru is Lima." && ok "chat answers after the error" || bad "chat after error: $out"

# Generated text holding U+0000 (possible at high temperature: byte-fallback tokens) comes out
# whole, in --json and plain, never cut at the NUL.
found=0
for seed in 6 9 1 2 3 4 5 7 8 10; do
  j=$($G4TP run -p "Tell me a story" --seed $seed --temperature 100 --top-k 0 --json --max-new-tokens 1500 2>/dev/null)
  n=$(printf '%s' "$j" | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['response'].count(chr(0)))")
  [ "${n:-0}" -gt 0 ] || continue
  found=1
  plain=$($G4TP run -p "Tell me a story" --seed $seed --temperature 100 --top-k 0 --max-new-tokens 1500 2>/dev/null | od -An -tx1 | tr -d ' \n')
  want=$(printf '%s' "$j" | python3 -c "import json,sys; sys.stdout.buffer.write(json.loads(sys.stdin.read())['response'].encode()+b'\n')" | od -An -tx1 | tr -d ' \n')
  expect_eq "$plain" "$want" "seed $seed: plain output = the --json response, NULs and all"
  break
done
[ $found = 1 ] && ok "a generation with U+0000 was found and kept whole" || bad "no seed produced U+0000 (the check above never ran)"
finish
