# Structured output compiles are bounded, cancellable and counted (issue 24 items 1-3): the bodies
# that hung the server or took its memory (nested arrays 60 deep, (a{1000}){1000}, an unanchored
# pattern whose subset construction grows quadratically) are answered — a 400 naming the limit,
# or a grammar — several at once, with the server's peak memory bounded and /health 200 all
# along; /metrics counts compiles, refusals by limit, cancellations and time (promtool-clean); a
# client that leaves cancels its compile, and SIGTERM during a compile exits at once. The long
# compile of the last two is held by G4_SERVE_TEST_COMPILE_DELAY_MS (cancellable like a real
# one; tests/unit/test_grammar_limits.c checks that a real compile polls its cancel flag).
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash

chat() { # chat SCHEMA_JSON: a chat request constrained by the schema
  printf '{"messages":[{"role":"user","content":"Describe something."}],"max_tokens":40,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":%s}}}' "$1"
}
nested=$(python3 -c "
import json; s={'type':'integer'}
for i in range(60): s={'type':'array','maxItems':2,'items':s}
print(json.dumps(s))")

srv_start || { bad "server starts"; finish; exit 1; }
c0=$(metric g4tp_grammar_compiles_total)
# several at once, as an attacker would send them
post /v1/chat/completions "$(chat '{"type":"string","pattern":"(a{1000}){1000}"}')" & p1=$!
post /v1/chat/completions "$(chat '{"type":"string","pattern":"(a{300}){300}"}')" & p2=$!
post /v1/chat/completions "$(chat '{"type":"string","pattern":"^(a{0,1000}){1000}$"}')" & p3=$!
health=$(curl -s -o /dev/null -w '%{http_code}' --max-time $((30 * SLOW)) "$URL/health")
wait $p1 $p2 $p3
expect_eq "$health" 200 "/health answers while compiles run"
post /v1/chat/completions "$(chat '{"type":"string","pattern":"(a{1000}){1000}"}')"
expect_error 400 invalid_value "(a{1000}){1000}: a 400"
pyck "'NFA state limit' in d['error']['message'] and d['error']['param']=='response_format.json_schema.schema'" && ok "it names the limit and the field" || bad "message: $BODY"
post /v1/chat/completions "$(chat '{"type":"string","pattern":"(a{300}){300}"}')"
expect_error 400 invalid_value "an unanchored (a{300}){300}: a 400"
pyck "'work limit' in d['error']['message'] or 'memory limit' in d['error']['message']" && ok "it names the limit" || bad "message: $BODY"
post /v1/chat/completions "$(chat "$nested")"
expect_eq "$CODE" 200 "60 nested arrays of at most 2 items compile (they never finished)"
hwm=$(awk '/VmHWM/ {print $2}' /proc/$SRV_PID/status)
[ "$hwm" -lt $((1024 * 1024)) ] && ok "peak memory of the server ${hwm} kB (the limits hold it; it grew to 4.6 GB)" || bad "peak memory ${hwm} kB"
c1=$(metric g4tp_grammar_compiles_total)
[ $((c1 - c0)) -ge 6 ] && ok "compiles counted ($c0 -> $c1)" || bad "g4tp_grammar_compiles_total $c0 -> $c1"
r_nfa=$(curl -s "$URL/metrics" | sed -n 's/^g4tp_grammar_compiles_refused_total{limit="nfa_states"} //p')
[ "${r_nfa:-0}" -ge 3 ] && ok "refusals counted by limit (nfa_states: $r_nfa)" || bad "refused{nfa_states}: $r_nfa"
[ "$(metric g4tp_grammar_compiles_running)" = 0 ] && ok "no compile left running" || bad "compiles running: $(metric g4tp_grammar_compiles_running)"
# the grammar metrics as Prometheus' own tool reads them
if command -v promtool >/dev/null; then
  curl -s "$URL/metrics" | awk '/^# (HELP|TYPE) g4tp_grammar_/ || /^g4tp_grammar_/' > "$SRV_TMP/gm.txt"
  promtool check metrics < "$SRV_TMP/gm.txt" > "$SRV_TMP/promtool.log" 2>&1 && ok "promtool: the grammar metrics are clean" \
    || { bad "promtool on the grammar metrics"; cat "$SRV_TMP/promtool.log"; }
fi
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"

# a client that leaves cancels its compile
G4_SERVE_TEST_COMPILE_DELAY_MS=$((60000 * SLOW)) srv_start || { bad "server starts (compile delay)"; finish; exit 1; }
curl -s -o /dev/null --max-time 1 -H 'Content-Type: application/json' -d "$(chat '{"type":"integer"}')" "$URL/v1/chat/completions"
expect_eq "$?" 28 "the client gave up after 1 s"
for i in $(seq 1 $((300 * SLOW))); do [ "$(metric g4tp_grammar_compiles_cancelled_total)" = 1 ] && break; sleep 0.1; done
expect_eq "$(metric g4tp_grammar_compiles_cancelled_total)" 1 "its compile was cancelled"
expect_eq "$(metric g4tp_grammar_compiles_running)" 0 "no compile left running"
# SIGTERM during a compile: the process exits at once, the client gets its 503
curl -s --max-time $((120 * SLOW)) -H 'Content-Type: application/json' -d "$(chat '{"type":"integer"}')" "$URL/v1/chat/completions" > "$SRV_TMP/term.json" & cpid=$!
for i in $(seq 1 $((300 * SLOW))); do [ "$(metric g4tp_grammar_compiles_running)" = 1 ] && break; sleep 0.1; done
expect_eq "$(metric g4tp_grammar_compiles_running)" 1 "a compile is running"
t0=$(date +%s)
srv_stop
t1=$(date +%s)
wait $cpid
expect_eq "$SRV_RC" 0 "server exits cleanly"
[ $((t1 - t0)) -lt $((20 * SLOW)) ] && ok "SIGTERM during a 60 s compile: exited in $((t1 - t0)) s" || bad "SIGTERM took $((t1 - t0)) s"
python3 -c "import json,sys; d=json.load(open(sys.argv[1])); sys.exit(0 if d['error']['code']=='shutting_down' else 1)" "$SRV_TMP/term.json" \
  && ok "the client was told the server is shutting down" || bad "answer: $(cat "$SRV_TMP/term.json")"
finish
