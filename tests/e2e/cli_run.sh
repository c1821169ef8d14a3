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
finish
