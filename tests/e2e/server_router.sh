# Several models in one server (issue 27 item 5; docs/server.md, "Several models"): `g4tp serve
# --models-dir DIR` over a folder holding the demo model and demo_vision (and an artifact folder, a folder
# that is no model): /v1/models lists them, unloaded; the first request naming one is a 503 with Retry-After
# while its server starts, then answers (whole, streamed, Anthropic, with an image); the OpenAI
# SDK's own retries ride over the load; asking for the other model swaps them; unknown models are
# 404 in each API's shape; /models/load and /models/unload; idle unload after
# --sleep-idle-seconds; a model server killed from outside is started again; the memory check;
# the API key; SIGTERM stops the front and the model's server. Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
D=$SRV_TMP/models
mkdir -p "$D/empty"
ln -s "$PWD/models/demo" "$D/demo"
ln -s "$PWD/tests/data/vision/demo_vision" "$D/vision"
echo "not a model" > "$D/notes.txt"
$G4TP shard --model models/demo --tp 2 --out "$D/demo-tp2" >/dev/null 2>&1 || bad "shard the demo for the artifact folder"
KEY=test-key-$$
H=(-H "Authorization: Bearer $KEY")
chat() { printf '{"model":"%s","messages":[{"role":"user","content":"%s"}],"temperature":0%s}' "$1" "$2" "${3:-}"; }
# ask until the model is loaded: the 503s say model_loading with Retry-After; prints the last body
ask() {
  local i out
  for i in $(seq 1 $((300 * SLOW))); do
    out=$(curl -s -D "$SRV_TMP/h" --max-time $((60 * SLOW)) -w '\n%{http_code}' -H 'Content-Type: application/json' "${H[@]}" "$@")
    CODE=${out##*$'\n'}; BODY=${out%$'\n'*}
    [ "$CODE" = 503 ] && grep -qi '^retry-after: 2' "$SRV_TMP/h" && pyck "d['error']['code']=='model_loading'" && { LOADING_SEEN=1; sleep 0.2; continue; }
    return 0
  done
}
child_pids() { pgrep -f -- "--api-key [0-9a-f]{32} --drain-seconds" | tr '\n' ' '; }
status_of() { curl -s "${H[@]}" "$URL/v1/models" | python3 -c "import json,sys; print({m['id']:m['status'] for m in json.load(sys.stdin)['data']}.get(sys.argv[1]))" "$1"; }

API_KEY=$KEY srv_start --models-dir "$D" --sleep-idle-seconds $((3 * SLOW)) --max-ctx 1024 || { bad "the router starts"; finish; exit 1; }
BODY=$(curl -s "${H[@]}" "$URL/v1/models")
pyck "[(m['id'], m['status']) for m in d['data']] == [('demo', 'unloaded'), ('demo-tp2', 'unloaded'), ('vision', 'unloaded')]" && ok "/v1/models lists the model folders and the artifact folder, unloaded (not the empty folder, not the file)" || bad "/v1/models: $BODY"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "$URL/v1/models")" 401 "the API key is asked for"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" 200 "/health: the front is up with no model loaded"
[ -z "$(child_pids)" ] && ok "nothing is loaded before it is asked for" || bad "children at start: $(child_pids)"

LOADING_SEEN=0
ask -d "$(chat demo 'What is the capital of France?')" "$URL/v1/chat/completions"
expect_eq "$LOADING_SEEN" 1 "the first request for a model is a 503 model_loading with Retry-After: 2"
expect_eq "$CODE $(pyget "d['choices'][0]['message']['content']") $(pyget "d['model']")" "200 The capital of France is Paris. demo" "then the model answers"
expect_eq "$(status_of demo)" loaded "/v1/models: demo loaded"
expect_eq "$(curl -s "${H[@]}" "$URL/v1/models/demo" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')" loaded "/v1/models/demo: loaded"
out=$(curl -sN "${H[@]}" -H 'Content-Type: application/json' -d "$(chat demo 'What is the capital of France?' ',"stream":true')" "$URL/v1/chat/completions")
got=$(printf '%s\n' "$out" | python3 -c "
import json,sys
t=''.join(json.loads(l[6:])['choices'][0]['delta'].get('content') or '' for l in sys.stdin if l.startswith('data: {'))
print(t)")
expect_eq "$got" "The capital of France is Paris." "a streamed answer comes through as a stream"
printf '%s' "$out" | tail -c 20 | grep -q 'data: \[DONE\]' && ok "... ending with [DONE]" || bad "stream end: $(printf '%s' "$out" | tail -c 80)"
post /v1/messages '{"model":"demo","max_tokens":32,"temperature":0,"messages":[{"role":"user","content":"What is the capital of Japan?"}]}' "${H[@]}" -H 'anthropic-version: 2023-06-01'
expect_eq "$CODE $(pyget "d['content'][0]['text']")" "200 The capital of Japan is Tokyo." "Anthropic Messages through the router (anthropic-version passed on)"
post /v1/messages '{"model":"demo","messages":[{"role":"user","content":"hi"}]}' "${H[@]}" -H 'anthropic-version: 2023-06-01'
expect_eq "$CODE $(pyget "d['error']['type']")" "400 invalid_request_error" "... and the model's server's own errors come back as they are (no max_tokens: 400)"
post /tokenize '{"prompt":"hi"}' "${H[@]}"
expect_eq "$CODE" 200 "a request naming no model goes to the loaded one"
post /v1/chat/completions "$(chat nope hi)" "${H[@]}"
expect_error 404 not_found "an unknown model: 404"
post /v1/messages '{"model":"nope","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}' "${H[@]}" -H 'anthropic-version: 2023-06-01'
expect_eq "$CODE $(pyget "d['error']['type']")" "404 not_found_error" "... in Anthropic's shape on /v1/messages"
post /v1/chat/completions '{"model":7,"messages":[]}' "${H[@]}"
expect_error 400 invalid_value "a model that is not a string: 400"

# the other model: demo's server is stopped, vision's started
first=$(child_pids)
B64=$(base64 -w0 tests/data/vision/images/nonsquare_333x517.png)
printf '{"model":"vision","temperature":0,"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,%s"}},{"type":"text","text":"What is the capital of France?"}]}]}' "$B64" > "$SRV_TMP/img.json"
LOADING_SEEN=0
ask --data-binary @"$SRV_TMP/img.json" "$URL/v1/chat/completions"
expect_eq "$LOADING_SEEN $CODE $(pyget "d['usage']['prompt_tokens']")" "1 200 82" "asking for the other model swaps them; an image goes through (82 prompt tokens)"
expect_eq "$(status_of demo) $(status_of vision)" "unloaded loaded" "one model loaded at a time"
[ -n "$first" ] && ! kill -0 $first 2>/dev/null && ok "demo's server has exited" || bad "demo's server $first still runs"

# the official SDK retries the 503 (Retry-After) by itself
if command -v node >/dev/null && [ -f tests/node/node_modules/openai/package.json ]; then
  out=$(cd tests/node && G4TP_URL=$URL G4TP_KEY=$KEY timeout $((120 * SLOW)) node -e "
const OpenAI = require('openai'); const c = new OpenAI({ baseURL: process.env.G4TP_URL + '/v1', apiKey: process.env.G4TP_KEY, maxRetries: 10 });
c.chat.completions.create({ model: 'demo', temperature: 0, messages: [{ role: 'user', content: 'What is the capital of Peru?' }] })
  .then((r) => console.log(r.choices[0].message.content)).catch((e) => console.log('ERR', e.status, e.message));" 2>&1)
  expect_eq "$out" "The capital of Peru is Lima." "the OpenAI SDK rides over the load with its own retries"
else bad "node and the openai package are needed"; fi

# an artifact folder (g4tp shard --tp 2) is a model too; the front's flags (--max-ctx) go with it
ask -d "$(chat demo-tp2 'What is the capital of France?')" "$URL/v1/chat/completions"
expect_eq "$CODE $(pyget "d['choices'][0]['message']['content']")" "200 The capital of France is Paris." "an artifact folder is served (its 2 ranks)"
expect_eq "$(curl -s "${H[@]}" "$URL/v1/models/demo-tp2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"])')" loaded "... listed as loaded"
post /v1/chat/completions "$(chat demo-tp2 "$(python3 -c "print('hello ' * 1200)")")" "${H[@]}"
expect_error 400 context_length_exceeded "the model's server runs with the front's engine flags (--max-ctx 1024)"

# /models/load and /models/unload
post /models/unload '{"model":"demo"}' "${H[@]}"
expect_eq "$CODE $(pyget "d['status']")" "200 unloading" "POST /models/unload"
for i in $(seq 1 $((100 * SLOW))); do [ "$(status_of demo)" = unloaded ] && break; sleep 0.1; done
expect_eq "$(status_of demo)" unloaded "... the model is unloaded"
post /models/load '{"model":"vision"}' "${H[@]}"
expect_eq "$CODE $(pyget "d['status']")" "202 loading" "POST /models/load: 202 while it loads"
for i in $(seq 1 $((300 * SLOW))); do [ "$(status_of vision)" = loaded ] && break; sleep 0.1; done
post /models/load '{"model":"vision"}' "${H[@]}"
expect_eq "$CODE $(pyget "d['status']")" "200 loaded" "... 200 once it is loaded"
post /models/load '{"model":"nope"}' "${H[@]}"
expect_error 404 not_found "loading an unknown model: 404"
post /models/load '{}' "${H[@]}"
expect_error 400 invalid_value "loading without a model: 400"

# a model server killed from outside is started again on the next request
kill -KILL $(child_pids) 2>/dev/null
for i in $(seq 1 $((100 * SLOW))); do [ "$(status_of vision)" = unloaded ] && break; sleep 0.1; done
expect_eq "$(status_of vision)" unloaded "a model server that died is seen as unloaded"
ask -d "$(chat vision 'What is the capital of Japan?')" "$URL/v1/chat/completions"
expect_eq "$CODE $(pyget "d['choices'][0]['message']['content']")" "200 The capital of Japan is Tokyo." "... and loaded again when asked for"

# idle: unloaded after --sleep-idle-seconds 3 without requests
for i in $(seq 1 $((150 * SLOW))); do [ "$(status_of vision)" = unloaded ] && break; sleep 0.1; done
expect_eq "$(status_of vision)" unloaded "unloaded after 3 s without requests"
[ -z "$(child_pids)" ] && ok "... its server has exited" || bad "children after idle: $(child_pids)"
m=$(curl -s "$URL/metrics")
echo "$m" | grep -q '^g4tp_router_idle_unloads_total [1-9]' && ok "/metrics counts idle unloads" || bad "metrics: $(echo "$m" | grep router_)"
echo "$m" | grep -q '^g4tp_router_model_state{model="vision",state="unloaded"} 1' && ok "/metrics: each model's state" || bad "metrics state"
if command -v promtool >/dev/null; then
  echo "$m" | awk '/^# (HELP|TYPE) g4tp_router_/ || /^g4tp_router_/' | promtool check metrics >/dev/null 2>"$SRV_TMP/prom.err" && ok "promtool: the router's metrics are clean" || { bad "promtool"; cat "$SRV_TMP/prom.err"; }
fi

# SIGTERM while a model is loaded: the front and the model's server both exit
ask -d "$(chat demo 'What is the capital of France?')" "$URL/v1/chat/completions"
kids=$(child_pids)
srv_stop
expect_eq "$SRV_RC" 0 "SIGTERM: the front exits cleanly"
[ -n "$kids" ] && ! kill -0 $kids 2>/dev/null && ok "... and the model's server with it" || bad "model server left: $kids"

# the memory check: a model larger than the memory available is refused, not started
G4_ROUTER_TEST_MEM_AVAILABLE=1000000 API_KEY=$KEY srv_start --models-dir "$D" || { bad "the router starts"; finish; exit 1; }
post /v1/chat/completions "$(chat demo hi)" "${H[@]}"
expect_error 503 insufficient_memory "a model that does not fit in memory: 503 insufficient_memory"
pyck "'needs about 3.8 MB' in d['error']['message'] and 'available' in d['error']['message']" && ok "... saying what it needs and what is available" || bad "message: $BODY"
[ -z "$(child_pids)" ] && ok "... and nothing is started" || bad "started: $(child_pids)"
srv_stop
out=$($G4TP serve --models-dir "$D" --model models/demo 2>&1); rc=$?
expect_eq "$rc" 2 "--models-dir with --model exits 2"
out=$($G4TP serve --models-dir "$D/empty" --port 0 2>&1); rc=$?
expect_eq "$rc" 1 "a --models-dir without models exits 1"
echo "$out" | grep -q "holds no model" && ok "... saying so" || bad "message: $out"
finish
