# Speculative decoding from the outside (docs/speculative.md): `g4tp generate --speculative` gives
# the ids and every step's logits byte-identical to plain greedy decoding (both drafters, TP 1/2/4
# as threads and as MPI processes); run and chat answer the same; bench reports the acceptance
# rate and tokens per step; the server's per-request "speculative" field (400 out of range) and
# its /metrics counters; bad assistants and k out of range are refused with clear messages.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
D=tests/data/golden
A=tests/data/assistant
tmp=$(mktemp -d); trap 'rm -rf "$tmp"; srv_cleanup' EXIT
M=$D/tiny_default
p=$(golden_ids $D/tiny_default__p40.json prompt_ids)
$G4TP generate --model $M --prompt-ids "$p" --max-new-tokens 40 --dump-all-logits $tmp/ref.bin >$tmp/ref.txt
for spec in ngram:3,4 ngram:1,15 mtp:$A/asst_copy mtp:$A/asst_ordered:2; do
  for tp in 1 2 4; do
    $G4TP generate --model $M --tp $tp --prompt-ids "$p" --max-new-tokens 40 --speculative $spec --dump-all-logits $tmp/s.bin >$tmp/s.txt 2>$tmp/err
    cmp -s $tmp/ref.txt $tmp/s.txt && cmp -s $tmp/ref.bin $tmp/s.bin && ok "generate --speculative $spec --tp $tp: ids and logits byte-identical" \
      || { bad "generate --speculative $spec --tp $tp differs"; cat $tmp/err; }
  done
done
acc=$($G4TP generate --model $M --prompt-ids "$p" --max-new-tokens 40 --speculative mtp:$A/asst_copy --json | python3 -c "import json,sys;print(json.load(sys.stdin)['speculative']['accepted'])")
[ "$acc" -gt 0 ] && ok "the copying assistant's drafts are accepted ($acc)" || bad "no draft accepted ($acc)"
# MPI ranks
if command -v mpirun >/dev/null; then
  export ASAN_OPTIONS=detect_leaks=0
  MPIRUN="mpirun --oversubscribe --allow-run-as-root --mca btl self,vader --mca plm_rsh_agent false"
  for spec in ngram:3,4 mtp:$A/asst_copy; do
    for n in 2 4; do
      timeout 300 $MPIRUN -np $n $G4TP generate --comm mpi --model $M --prompt-ids "$p" --max-new-tokens 40 --speculative $spec --dump-all-logits $tmp/m.bin >$tmp/m.txt 2>$tmp/err
      cmp -s $tmp/ref.txt $tmp/m.txt && cmp -s $tmp/ref.bin $tmp/m.bin && ok "MPI np=$n --speculative $spec: byte-identical" || { bad "MPI np=$n $spec differs"; cat $tmp/err; }
    done
  done
else
  bad "mpirun missing (scripts/install-deps.sh installs OpenMPI)"
fi
# bad input
out=$($G4TP generate --model $M --prompt-ids 2 --speculative ngram:3,99 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q 'K must be an integer in \[1, 15\]' && ok "k out of range: a clear error" || bad "k out of range: rc=$rc $out"
out=$($G4TP generate --model $M --prompt-ids 2 --speculative eagle:x 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q 'expected ngram\[:N,K\] or mtp:DIR\[:K\]' && ok "unknown drafter: a clear error" || bad "unknown drafter: rc=$rc $out"
mkdir -p $tmp/bb $tmp/bv
cp $A/asst_plain/model.safetensors $tmp/bb/ && cp $A/asst_plain/model.safetensors $tmp/bv/
python3 -c "import json;c=json.load(open('$A/asst_plain/config.json'));c['backbone_hidden_size']=128;json.dump(c,open('$tmp/bb/config.json','w'))"
python3 -c "import json;c=json.load(open('$A/asst_plain/config.json'));c['text_config']['vocab_size']=1000;json.dump(c,open('$tmp/bv/config.json','w'))"
out=$($G4TP generate --model $M --prompt-ids 2 --speculative mtp:$tmp/bb 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "backbone_hidden_size 128 does not match the target's hidden_size 64" && ok "backbone mismatch refused, naming both" || bad "backbone: rc=$rc $out"
out=$($G4TP generate --model $M --prompt-ids 2 --speculative mtp:$tmp/bv 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "vocab_size 1000 does not match the target's vocab_size 512" && ok "vocabulary mismatch refused, naming both" || bad "vocab: rc=$rc $out"
out=$($G4TP generate --model $M --prompt-ids 2 --speculative mtp:$D/tiny_wide 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q 'not "gemma4_assistant"' && ok "a target checkpoint is not an assistant" || bad "not an assistant: rc=$rc $out"
# run: the same answer with and without drafts (greedy and seeded sampling)
for extra in "--temperature 0" "--temperature 0.8 --seed 7"; do
  a=$($G4TP run -p "What is the capital of France?" $extra)
  b=$($G4TP run -p "What is the capital of France?" $extra --speculative ngram:2,6 --speculative-always)
  expect_eq "$b" "$a" "run $extra: the same answer with drafts"
done
# bench: acceptance and tokens per forward step (--speculative-always: by default the measured
# step costs decide whether a round drafts, and on a loaded machine they may say no)
$G4TP bench --prompt-len 48 --gen 24 --prompt-kind repeat --speculative ngram --speculative-always --streams 1,2 --step-curve 4 --json >$tmp/b.json 2>$tmp/err
python3 - $tmp/b.json <<'EOF' && ok "bench reports the step curve, acceptance and tokens per step" || { bad "bench json"; cat $tmp/err; }
import json, sys
d = json.load(open(sys.argv[1]))
s = d["served"]
assert len(s) == 4 and [x["speculative"] for x in s] == [False, True, False, True]
assert all(x["tokens_per_step"] > 0 for x in s) and s[1]["acceptance_rate"] is not None and s[0]["drafts"] == 0
assert [c["tokens"] for c in d["step_curve"]] == [1, 2, 3, 4]
EOF
# the server: per-request field, metrics
srv_start --speculative ngram:3,4 --speculative-always || { bad "server starts"; finish; exit 1; }
Q='{"prompt":"one two three one two three one two","max_tokens":24,"temperature":0,"ignore_eos":true'
post /v1/completions "$Q,\"speculative\":false}"
plain=$(pyget "d['choices'][0]['text']")
before=$(metric g4tp_spec_decode_draft_tokens_total)
post /v1/completions "$Q}"
[ "$CODE" = 200 ] && expect_eq "$(pyget "d['choices'][0]['text']")" "$plain" "completions: the same text with and without drafts"
pyck "d['usage']['completion_tokens']==24" && ok "usage counts the real tokens only" || bad "usage: $BODY"
after=$(metric g4tp_spec_decode_draft_tokens_total)
[ "${after:-0}" -gt "${before:-0}" ] && ok "/metrics counts drafts ($before -> $after)" || bad "metrics drafts $before -> $after"
[ -n "$(metric g4tp_spec_decode_accepted_tokens_total)" ] && ok "/metrics counts accepted drafts" || bad "no accepted metric"
post /v1/completions "$Q,\"speculative\":3}"
[ "$CODE" = 200 ] && expect_eq "$(pyget "d['choices'][0]['text']")" "$plain" "at most 3 drafts per round: the same text"
post /v1/completions "$Q,\"speculative\":16}"
expect_error 400 '*' "speculative 16: a 400"
pyck "'speculative' in d['error']['message']" && ok "the 400 names the field" || bad "400: $BODY"
post /v1/completions "$Q,\"speculative\":\"yes\"}"
expect_error 400 '*' "speculative as a string: a 400"
srv_stop
rm -rf "$tmp"
finish
