# g4tp serve configuration and access: /health 503 while loading (listener first), API_KEY
# (401 without or with a wrong key), the environment (MODEL_DIR, TP_DEGREE, KV_MAX, HOST,
# PORT) with flags winning, bad settings refused, and serving under MPI (rank 0 serves, the
# other ranks follow). Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
free_port() { python3 -c "import socket;s=socket.socket();s.bind(('127.0.0.1',0));print(s.getsockname()[1]);s.close()"; }

# ---- listener first: 503 while the model loads ----
G4_SERVE_TEST_LOAD_DELAY_MS=$((1500 * SLOW)) srv_launch || bad "server launches"
out=$(curl -s -D "$SRV_TMP/h" -w '\n%{http_code}' --max-time 10 "$URL/health"); CODE=${out##*$'\n'}; BODY=${out%$'\n'*}
[ "$CODE" = 503 ] && pyck "d['status']=='loading'" && ok "/health 503 while loading" || bad "/health while loading: $CODE $BODY"
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}]}' -D "$SRV_TMP/h2"
expect_error 503 model_loading "generation while loading -> 503"
grep -qi '^Retry-After: [0-9]' "$SRV_TMP/h2" && ok "503 while loading has Retry-After" || bad "no Retry-After: $(cat "$SRV_TMP/h2")"
srv_wait_ready && ok "/health 200 once loaded" || bad "never ready"
srv_stop
expect_eq "$SRV_RC" 0 "clean exit"

# ---- prompt preparation is bounded across requests; /health answers meanwhile ----
# the test hook holds each preparation (template + tokenizer) for a while, so that two overlap
G4_SERVE_TEST_RENDER_DELAY_MS=$((4000 * SLOW)) srv_start --render-budget-bytes 64 || bad "server with a render budget starts"
R='{"messages":[{"role":"user","content":"What is the capital of France? Tell me in one word."}]}'
curl -H 'Content-Type: application/json' -s --max-time $((60 * SLOW)) "$URL/tokenize" -d "$R" > "$SRV_TMP/prep1" & A=$!
for i in $(seq 1 $((100 * SLOW))); do [ "$(metric g4tp_num_requests_preparing)" = 1 ] && break; sleep 0.05; done
expect_eq "$(metric g4tp_num_requests_preparing)" 1 "a request is being prepared"
[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$URL/health")" = 200 ] && ok "/health answers while a prompt is being prepared" || bad "/health blocked by a render"
post /v1/chat/completions "$R" -D "$SRV_TMP/h3"
expect_error 503 server_busy "a second large preparation beyond the budget -> 503"
grep -qi '^Retry-After: [0-9]' "$SRV_TMP/h3" && ok "the 503 has Retry-After" || bad "no Retry-After: $(cat "$SRV_TMP/h3")"
expect_eq "$(metric g4tp_num_requests_preparing)" 1 "the first preparation was still running meanwhile"
wait $A
BODY=$(cat "$SRV_TMP/prep1"); pyck "d['count']>0" && ok "the first request is answered" || bad "first request: $BODY"
post /tokenize "$R"
expect_eq "$CODE" 200 "accepted again once the preparation ended"
srv_stop

# ---- API key ----
API_KEY=sekrit-123 srv_start || bad "server with API_KEY starts"
post /v1/chat/completions '{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0}'
expect_error 401 invalid_api_key "no key -> 401"
post /v1/chat/completions '{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0}' -H 'Authorization: Bearer wrong'
expect_error 401 invalid_api_key "wrong key -> 401"
post /v1/chat/completions '{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0}' -H 'Authorization: Bearer sekrit-12'
expect_error 401 invalid_api_key "key prefix -> 401"
post /v1/chat/completions '{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0}' -H 'Authorization: sekrit-123'
expect_error 401 invalid_api_key "key without Bearer -> 401"
post /v1/chat/completions '{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0}' -H 'Authorization: Bearer sekrit-123'
[ "$CODE" = 200 ] && pyck "d['choices'][0]['message']['content']=='The capital of France is Paris.'" && ok "right key -> 200" || bad "right key: $CODE $BODY"
out=$(curl -s -w '\n%{http_code}' "$URL/v1/models"); CODE=${out##*$'\n'}; BODY=${out%$'\n'*}
expect_error 401 invalid_api_key "/v1/models needs the key"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && ok "/health needs no key" || bad "/health with key"
srv_stop
# --api-key wins over API_KEY
API_KEY=env-key srv_start --api-key flag-key || bad "server starts"
post /tokenize '{"prompt":"hi"}' -H 'Authorization: Bearer flag-key'
expect_eq "$CODE" 200 "--api-key wins over API_KEY"
post /tokenize '{"prompt":"hi"}' -H 'Authorization: Bearer env-key'
expect_eq "$CODE" 401 "the env key is overridden"
srv_stop

# ---- environment ----
P=$(free_port)
SRV_PORT_FROM_ENV=1 MODEL_DIR=models/demo KV_MAX=512 PORT=$P HOST=127.0.0.1 TP_DEGREE=2 srv_launch && srv_wait_ready || bad "env-configured server starts"
expect_eq "$URL" "http://127.0.0.1:$P" "PORT and HOST from the environment"
BODY=$(curl -s "$URL/v1/models")
pyck "d['data'][0]['id']=='demo' and d['data'][0]['max_model_len']==512" && ok "MODEL_DIR (id = folder name) and KV_MAX" || bad "env model: $BODY"
grep -q "tp 2" "$SRV_LOG" && ok "TP_DEGREE=2" || bad "TP_DEGREE: $(cat "$SRV_LOG")"
post /generate '{"prompt":"What is the capital of Japan?","temperature":0}'
pyck "d['response']=='The capital of Japan is Tokyo.'" && ok "answers at TP 2" || bad "TP 2 answer: $BODY"
post /generate '{"prompt":"What is the capital of Japan?","max_new_tokens":500}'
expect_error 400 context_length_exceeded "KV_MAX limits the context"
srv_stop
KV_MAX=512 TP_DEGREE=2 srv_start --max-ctx 256 --tp 1 --model-name my-model || bad "flags + env server starts"
BODY=$(curl -s "$URL/v1/models")
pyck "d['data'][0]['id']=='my-model' and d['data'][0]['max_model_len']==256" && ok "flags win over KV_MAX; --model-name" || bad "flags: $BODY"
grep -q "tp 1" "$SRV_LOG" && ok "--tp wins over TP_DEGREE" || bad "--tp: $(cat "$SRV_LOG")"
srv_stop

# ---- bad settings ----
out=$(TP_DEGREE=abc $G4TP serve 2>&1); rc=$?
expect_eq "$rc" 2 "TP_DEGREE=abc is refused (exit 2)"
out=$($G4TP serve --port 70000 2>&1); rc=$?
expect_eq "$rc" 2 "--port 70000 is refused"
out=$($G4TP serve --bogus 2>&1); rc=$?
expect_eq "$rc" 2 "unknown flag is refused"
srv_start || bad "server starts"
PORT_USED=${URL##*:}
out=$(timeout 30 $G4TP serve --port "$PORT_USED" 2>&1); rc=$?
[ "$rc" = 1 ] && echo "$out" | grep -q "cannot listen" && ok "a port in use is an error (exit 1)" || bad "port in use: rc=$rc $out"
srv_stop
out=$(timeout 60 $G4TP serve --port 0 --model /nonexistent 2>&1); rc=$?
[ "$rc" = 1 ] && ok "a missing model is an error (exit 1)" || bad "missing model: rc=$rc $out"
$G4TP serve --help | grep -q "usage: g4tp serve" && ok "serve --help" || bad "serve --help"

# ---- MPI: rank 0 serves, rank 1 follows ----
if command -v mpirun >/dev/null && [ "${G4_SAN:-0}" != 1 ]; then
  MPIRUN="mpirun --oversubscribe --allow-run-as-root --mca btl self,vader --mca plm_rsh_agent false"
  SRV_LOG=$SRV_TMP/mpi.log
  $MPIRUN -np 2 "$G4TP" serve --comm mpi --port 0 2>"$SRV_LOG" >/dev/null &
  MPI_PID=$!
  port=""
  for i in $(seq 1 300); do port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9][0-9]*\).*/\1/p' "$SRV_LOG" | head -1); [ -n "$port" ] && break; sleep 0.1; done
  URL=http://127.0.0.1:$port
  for i in $(seq 1 300); do [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && break; sleep 0.1; done
  [ "$(grep -c 'listening on' "$SRV_LOG")" = 1 ] && ok "MPI: only rank 0 listens" || bad "MPI listeners: $(cat "$SRV_LOG")"
  post /generate '{"prompt":"What is the capital of France?","temperature":0}'
  pyck "d['response']=='The capital of France is Paris.'" && ok "MPI np=2: rank 0 serves the answer" || bad "MPI answer: $BODY $(cat "$SRV_LOG")"
  grep -q "tp 2" "$SRV_LOG" && ok "MPI: tp 2" || bad "MPI tp: $(cat "$SRV_LOG")"
  R0=$(sed -n 's/.*(pid \([0-9]*\),.*/\1/p' "$SRV_LOG" | head -1)
  kill -TERM "$R0"
  for i in $(seq 1 300); do kill -0 $MPI_PID 2>/dev/null || break; sleep 0.1; done
  if kill -0 $MPI_PID 2>/dev/null; then kill -KILL $MPI_PID; bad "MPI: the job did not end after SIGTERM to rank 0"; else wait $MPI_PID; rc=$?; expect_eq "$rc" 0 "MPI: SIGTERM to rank 0 ends every rank cleanly"; fi
else
  echo "# MPI serve check skipped (no mpirun, or the ASan flavour)"
fi

# A port that cannot be had: the message says what the system said.
python3 -c "import socket,time,sys; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)" >"$SRV_TMP/busy" &
BUSY=$!
for i in $(seq 1 50); do [ -s "$SRV_TMP/busy" ] && break; sleep 0.1; done
out=$("$G4TP" serve --port "$(cat "$SRV_TMP/busy")" 2>&1); rc=$?
kill $BUSY 2>/dev/null
[ $rc -ne 0 ] && echo "$out" | grep -q "Address already in use" && ok "port in use: says so" || bad "port in use: rc $rc: $out"
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
  out=$(setpriv --reuid=65534 --regid=65534 --clear-groups "$G4TP" serve --port 81 2>&1); rc=$?
  [ $rc -ne 0 ] && echo "$out" | grep -q "Permission denied" && ok "privileged port as nobody: Permission denied" || bad "port 81 as nobody: rc $rc: $out"
fi
finish
