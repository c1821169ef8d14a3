# The text tools on the demo model: render (byte-exact against the golden prompt), tokenize
# (ids, --json, --jsonl, NUL bytes), detokenize (round trip), chat (multi-turn via a pipe), and
# their bad-input errors.
. tests/e2e/_lib.sh
G=tests/data/demo/golden_demo.json
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 - "$G" "$tmp" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])); out = sys.argv[2]
for i, c in enumerate(g["cases"][:5]):
    json.dump({"messages": c["messages"], "add_generation_prompt": True}, open(f"{out}/req{i}.json", "w"))
    open(f"{out}/want{i}.txt", "w").write(c["prompt_text"])
    open(f"{out}/ids{i}.txt", "w").write(" ".join(map(str, c["prompt_ids"])) + "\n")
PY
for i in 0 1 2 3 4; do
  $G4TP render < $tmp/req$i.json > $tmp/got$i.txt
  cmp -s $tmp/got$i.txt $tmp/want$i.txt && ok "render case $i byte-exact" || bad "render case $i differs"
  got=$($G4TP tokenize < $tmp/want$i.txt)
  expect_eq "$got" "$(cat $tmp/ids$i.txt)" "tokenize case $i"
  $G4TP detokenize < $tmp/ids$i.txt > $tmp/back$i.txt
  cmp -s $tmp/back$i.txt $tmp/want$i.txt && ok "detokenize case $i round trip" || bad "detokenize case $i"
done
expect_eq "$(printf 'a b' | $G4TP tokenize --json)" "[429,364,430]" "tokenize --json"
expect_eq "$(printf '"a b"\n"a\\u0000b"\n' | $G4TP tokenize --jsonl | wc -l)" "2" "tokenize --jsonl one line per input (U+0000 inside)"
out=$(printf 'not json\n' | $G4TP tokenize --jsonl 2>&1); rc=$?
expect_eq "$rc" 1 "tokenize --jsonl rejects a non-string line"
out=$(printf '\xff\xfe' | $G4TP tokenize 2>&1); rc=$?
expect_eq "$rc" 1 "tokenize rejects invalid UTF-8"; echo "$out" | grep -qi "utf-8" && ok "message names UTF-8" || bad "message: $out"
out=$(echo '1,2,999999' | $G4TP detokenize 2>&1); rc=$?
expect_eq "$rc" 1 "detokenize rejects an id outside the vocabulary"
out=$(echo '{"messages": [' | $G4TP render 2>&1); rc=$?
expect_eq "$rc" 1 "render rejects malformed JSON"
out=$(echo '{"messages": 3}' | $G4TP render 2>&1); rc=$?
expect_eq "$rc" 1 "render rejects messages that are not a list"
got=$(printf 'What is the capital of France?\nWhat is the capital of Japan?\n' | $G4TP chat --temperature 0)
expect_eq "$got" "$(printf 'The capital of France is Paris.\nThe capital of Japan is Tokyo.')" "chat: two turns through a pipe"
for c in chat tokenize detokenize render; do $G4TP $c --help | grep -q "usage: g4tp $c" && ok "$c --help" || bad "$c --help"; done
rm -rf "$tmp"
finish
