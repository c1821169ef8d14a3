# g4tp serve under load, with curl: concurrent streaming clients each get exactly the tokens
# they get alone; a client that disconnects (streaming or not) stops its generation and frees
# its KV cache, also while its tokens produce no bytes; a client that only half-closes gets its
# whole answer; a full queue answers 503 with Retry-After; SIGTERM drains short requests and
# cancels long ones, then exits cleanly. Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
N=16; [ "${G4_SAN:-0}" = 1 ] && N=8   # moderate client counts under ASan

# stream_text FILE: the concatenated content of an SSE chat stream (+ finish reason), or FAIL
stream_text() {
  python3 -c "
import json,sys
ev=[l[6:] for l in open(sys.argv[1]).read().split('\n') if l.startswith('data: ')]
if not ev or ev[-1]!='[DONE]': print('FAIL: no [DONE]'); sys.exit()
ch=[json.loads(e) for e in ev[:-1]]
t=''.join((c['choices'][0]['delta'].get('content') or '') if 'delta' in c['choices'][0] else c['choices'][0]['text'] for c in ch if c.get('choices'))
f=[c['choices'][0]['finish_reason'] for c in ch if c.get('choices') and c['choices'][0]['finish_reason']]
u=[c['usage']['completion_tokens'] for c in ch if c.get('usage')]
print(json.dumps([t,f,u]))" "$1"
}

run_clients() { # MODEL_TAG BODY_TEMPLATE_PY: runs solo then N concurrent, compares
  local tag=$1 i
  for i in $(seq 0 $((N-1))); do
    python3 -c "$2" $i > "$SRV_TMP/$tag.body.$i"
    curl -H 'Content-Type: application/json' -sN --max-time $((120*SLOW)) "$URL/v1/chat/completions" -d @"$SRV_TMP/$tag.body.$i" > "$SRV_TMP/$tag.solo.$i"
  done
  local pids=()
  for i in $(seq 0 $((N-1))); do
    curl -H 'Content-Type: application/json' -sN --max-time $((300*SLOW)) "$URL/v1/chat/completions" -d @"$SRV_TMP/$tag.body.$i" > "$SRV_TMP/$tag.conc.$i" &
    pids+=($!)
  done
  local peak=0 r
  while kill -0 "${pids[@]}" 2>/dev/null; do
    r=$(metric g4tp_num_requests_running); [ -n "$r" ] && [ "$r" -gt "$peak" ] && peak=$r
    sleep 0.05
  done
  wait "${pids[@]}"
  local same=0
  for i in $(seq 0 $((N-1))); do
    a=$(stream_text "$SRV_TMP/$tag.solo.$i"); b=$(stream_text "$SRV_TMP/$tag.conc.$i")
    if [ "$a" = "$b" ] && [[ "$a" != FAIL* ]]; then same=$((same+1)); else echo "# client $i: alone $a, together $b"; fi
  done
  expect_eq "$same" "$N" "$tag: $N concurrent streaming clients each get exactly their solo tokens"
  PEAK=$peak
}

# ---- the demo model: 16 concurrent streams, greedy and seeded ----
srv_start || { bad "server starts"; finish; exit 1; }
run_clients demo '
import json,sys
i=int(sys.argv[1]); c=["France","Japan","Peru","Chile","Italy","Spain","Kenya","Egypt","Norway","Canada","Brazil","India","Ghana","Nepal","Cuba","Fiji"][i]
b={"messages":[{"role":"user","content":"What is the capital of %s?"%c}],"stream":True,"max_tokens":24,"stream_options":{"include_usage":True}}
if i%2: b.update(temperature=1.0,seed=1000+i)
else: b.update(temperature=0)
print(json.dumps(b))'
grep -q "Paris" "$SRV_TMP/demo.conc.0" && ok "demo: client 0 got Paris" || bad "demo client 0: $(stream_text "$SRV_TMP/demo.conc.0")"
srv_stop
expect_eq "$SRV_RC" 0 "demo server exits cleanly"

# ---- a slow random-weight model: long generations that overlap for certain ----
make_slow_model || { bad "synth slow model"; finish; exit 1; }
srv_start --model "$SLOW_MODEL" --max-ctx 2048 || { bad "slow server starts"; finish; exit 1; }
run_clients slow '
import json,sys
i=int(sys.argv[1])
b={"messages":[{"role":"user","content":"Tell me about number %d"%i}],"stream":True,"max_tokens":40,"stream_options":{"include_usage":True}}
if i%2: b.update(temperature=0.8,seed=7*i)
else: b.update(temperature=0)
print(json.dumps(b))'
[ "$PEAK" -gt 1 ] && ok "slow: requests ran together (peak running $PEAK)" || bad "slow: no overlap seen (peak $PEAK)"

wait_idle() { # seconds: waits until nothing runs; prints the seconds it took or FAIL
  local i
  for i in $(seq 1 $(($1*10))); do
    [ "$(metric g4tp_num_requests_running)" = 0 ] && [ "$(metric g4tp_num_requests_waiting)" = 0 ] && { echo ok; return; }
    sleep 0.1
  done
  echo FAIL
}

# ---- disconnect mid-stream: the generation stops and its cache is freed ----
G0=$(metric g4tp_generation_tokens_total)
C0=$(metric 'g4tp_request_finished_total{finish_reason="cancelled"}')
curl -H 'Content-Type: application/json' -sN --max-time $((2*SLOW)) "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"go on"}],"stream":true,"max_tokens":1900,"temperature":0}' > "$SRV_TMP/cut" 2>/dev/null
grep -q '"content"' "$SRV_TMP/cut" && ok "disconnect: the client got tokens before leaving" || bad "disconnect: no tokens streamed: $(head -c 300 "$SRV_TMP/cut")"
expect_eq "$(wait_idle $((10*SLOW)))" ok "disconnect mid-stream: running goes back to 0"
expect_eq "$(metric g4tp_kv_cache_used_bytes)" 0 "disconnect: KV cache freed"
G1=$(metric g4tp_generation_tokens_total)
[ $((G1 - G0)) -lt 1900 ] && ok "disconnect: generation stopped early ($((G1 - G0)) of 1900 tokens)" || bad "disconnect: generated $((G1 - G0)) tokens"
C1=$(metric 'g4tp_request_finished_total{finish_reason="cancelled"}')
[ "$C1" -gt "$C0" ] && ok "disconnect counted as cancelled" || bad "cancelled not counted: $C0 -> $C1"
# the same for a non-streaming request
G0=$(metric g4tp_generation_tokens_total)
curl -H 'Content-Type: application/json' -s --max-time $((2*SLOW)) "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"go on"}],"max_tokens":1900,"temperature":0}' >/dev/null 2>&1
expect_eq "$(wait_idle $((10*SLOW)))" ok "disconnect while waiting for a whole answer: running goes back to 0"
G1=$(metric g4tp_generation_tokens_total)
[ $((G1 - G0)) -lt 1900 ] && ok "non-streaming disconnect: generation stopped early ($((G1 - G0)) of 1900)" || bad "non-streaming disconnect: generated $((G1 - G0))"
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3,"temperature":0}'
pyck "d['usage']['completion_tokens']==3" && ok "serves normally after disconnects" || bad "after disconnects: $BODY"

# ---- half-close is not a disconnect: a client that shuts down its write side (nc -N, some
# proxies) still reads its whole answer ----
hc_request() { # BODY [HTTP_VERSION]
  raw_http "POST /v1/chat/completions HTTP/${2:-1.1}\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${#1}\r\n\r\n$1" halfclose
}
HC='{"messages":[{"role":"user","content":"go on"}],"max_tokens":100,"temperature":0}'
for v in 1.1 1.0; do
  OUT=$(hc_request "$HC" $v)
  echo "$OUT" | grep -q '^HTTP/1.1 200 ' && echo "$OUT" | grep -q '"completion_tokens":100,' && echo "$OUT" | tail -1 | grep -q eof \
    && ok "half-closed HTTP/$v client gets its whole 200 answer" || bad "half-close HTTP/$v: $(echo "$OUT" | head -c 600)"
done
OUT=$(hc_request '{"messages":[{"role":"user","content":"go on"}],"max_tokens":100,"temperature":0,"stream":true}')
echo "$OUT" | grep -q '"finish_reason":"length"' && echo "$OUT" | grep -q 'data: \[DONE\]' && ok "half-closed client gets its whole stream" || bad "half-close stream: $(echo "$OUT" | tail -c 400)"
srv_stop
expect_eq "$SRV_RC" 0 "slow server exits cleanly"

# ---- a stream whose tokens produce no bytes (the issue's case: after the demo's answer and
# <turn|>, ignore_eos goes on and the output parser drops all that follows): keep-alive
# comments still go out once no byte went out for a second, and find the client gone ----
make_long_demo_model || bad "long-context demo model"
srv_start --model "$LONG_DEMO_MODEL" --max-ctx 32768 || bad "long-context demo server starts"
G0=$(metric g4tp_generation_tokens_total)
C0=$(metric 'g4tp_request_finished_total{finish_reason="cancelled"}')
curl -H 'Content-Type: application/json' -sN --max-time $((2*SLOW)) "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"Tell me a long story."}],"stream":true,"max_tokens":30000,"ignore_eos":true,"temperature":0}' > "$SRV_TMP/silent.out" 2>/dev/null
grep -q '"content":"The' "$SRV_TMP/silent.out" && grep -q '^: keep-alive' "$SRV_TMP/silent.out" && ok "silent stream: the answer, then keep-alives while tokens give no bytes" || bad "silent stream: $(head -c 600 "$SRV_TMP/silent.out")"
expect_eq "$(wait_idle $((20*SLOW)))" ok "silent stream: running goes back to 0 once the client left"
G1=$(metric g4tp_generation_tokens_total)
C1=$(metric 'g4tp_request_finished_total{finish_reason="cancelled"}')
[ $((G1 - G0)) -lt 30000 ] && ok "silent stream: generation stopped early ($((G1 - G0)) of 30000 tokens)" || bad "silent stream: generated $((G1 - G0)) tokens"
[ "$C1" -gt "$C0" ] && ok "silent stream: the client that left is counted as cancelled" || bad "silent stream: cancelled $C0 -> $C1"
srv_stop

# ---- queue full: 503 + Retry-After ----
srv_start --model "$SLOW_MODEL" --max-seqs 1 --max-waiting 1 || bad "queue server starts"
LONG='{"messages":[{"role":"user","content":"go on"}],"stream":true,"max_tokens":1500,"temperature":0}'
curl -H 'Content-Type: application/json' -sN --max-time $((60*SLOW)) "$URL/v1/chat/completions" -d "$LONG" >/dev/null 2>&1 & A=$!
for i in $(seq 1 $((100*SLOW))); do [ "$(metric g4tp_num_requests_running)" = 1 ] && break; sleep 0.1; done
curl -H 'Content-Type: application/json' -sN --max-time $((60*SLOW)) "$URL/v1/chat/completions" -d "$LONG" >/dev/null 2>&1 & B=$!
for i in $(seq 1 $((100*SLOW))); do [ "$(metric g4tp_num_requests_waiting)" = 1 ] && break; sleep 0.1; done
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}' -D "$SRV_TMP/h503"
expect_error 503 server_busy "full queue -> 503"
grep -qi '^Retry-After: [0-9]' "$SRV_TMP/h503" && ok "503 has Retry-After" || bad "no Retry-After: $(cat "$SRV_TMP/h503")"
kill $A $B 2>/dev/null; wait $A $B 2>/dev/null
expect_eq "$(wait_idle $((10*SLOW)))" ok "queued and running requests of gone clients are dropped"
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}'
expect_eq "$CODE" 200 "accepted again once the queue drains"
srv_stop

# ---- SIGTERM: short requests drain, long ones are cancelled, clean exit ----
srv_start --model "$SLOW_MODEL" --drain-seconds 1 || bad "sigterm server starts"
curl -H 'Content-Type: application/json' -sN --max-time $((60*SLOW)) "$URL/v1/chat/completions" -d "$LONG" > "$SRV_TMP/long" 2>/dev/null & A=$!
curl -H 'Content-Type: application/json' -s --max-time $((60*SLOW)) "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"go"}],"max_tokens":1500,"temperature":0}' > "$SRV_TMP/long2" 2>/dev/null & B=$!
for i in $(seq 1 $((100*SLOW))); do [ "$(metric g4tp_num_requests_running)" = 2 ] && break; sleep 0.1; done
srv_stop
expect_eq "$SRV_RC" 0 "SIGTERM with requests in flight: exit 0"
wait $A $B
tail -c 300 "$SRV_TMP/long" | grep -q 'shutting_down' && tail -c 20 "$SRV_TMP/long" | grep -q '\[DONE\]' && ok "SIGTERM: the stream ends with an error chunk and [DONE]" || bad "stream after SIGTERM: $(tail -c 300 "$SRV_TMP/long")"
grep -q '"code":"shutting_down"' "$SRV_TMP/long2" && ok "SIGTERM: the waiting non-streaming client gets a 503 error body" || bad "non-streaming after SIGTERM: $(cat "$SRV_TMP/long2")"
srv_start --model "$SLOW_MODEL" --drain-seconds $((30*SLOW)) || bad "drain server starts"
curl -H 'Content-Type: application/json' -s --max-time $((60*SLOW)) "$URL/v1/chat/completions" -d '{"messages":[{"role":"user","content":"go"}],"max_tokens":40,"temperature":0}' > "$SRV_TMP/short" 2>/dev/null & A=$!
for i in $(seq 1 $((100*SLOW))); do [ "$(metric g4tp_num_requests_running)" = 1 ] && break; sleep 0.05; done
srv_stop
wait $A
expect_eq "$SRV_RC" 0 "SIGTERM with a short request: exit 0"
BODY=$(cat "$SRV_TMP/short")
pyck "d['usage']['completion_tokens']==40 and d['choices'][0]['finish_reason']=='length'" && ok "SIGTERM drains a short request to its end" || bad "drain: $BODY"
finish
