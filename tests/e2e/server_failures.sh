# Failures inside a running server reach clients as errors, never as shorter answers:
# scheduler allocations that fail (G4_FAULT, src/base/fault.h) end a whole answer with a 503
# JSON error and a stream with an SSE error event; a model file truncated under the memory-mapped
# weights (which used to kill the server with SIGBUS) or overwritten in place (which used to
# change answers silently) gives requests a clear 500, /health 503 naming the file, and the
# process stays up for --drain-seconds, then exits 1; --load copy serves on unchanged.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
Q='{"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0'

# ---- scheduler: text that cannot be queued ----
# every text event from the second one on cannot be copied: the first request gets a token, then
# the error; later ones fail at their first token
G4_FAULT=sched.text:2+ srv_start || bad "server with G4_FAULT starts"
post /v1/chat/completions "$Q}"
expect_error 503 insufficient_memory "whole answer: a lost text event -> 503 JSON, not a shorter 200"
pyck "'out of memory for the text' in d['error']['message']" && ok "the error says what was lost" || bad "message: $BODY"
BODY=$(curl -s -N --max-time $((60 * SLOW)) -H 'Content-Type: application/json' -d "$Q,\"stream\":true}" "$URL/v1/chat/completions")
printf '%s\n' "$BODY" | grep -q '^data: {"error":' && ok "stream: an SSE error event" || bad "stream without an error event: $BODY"
printf '%s\n' "$BODY" | grep -q '"finish_reason":"stop"' && bad "stream ended as a normal stop: $BODY" || ok "the stream does not end with finish_reason stop"
printf '%s\n' "$BODY" | tail -2 | grep -q '^data: \[DONE\]' && ok "the stream still ends with [DONE]" || bad "stream end: $BODY"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && ok "/health stays 200 (the engine is fine)" || bad "/health after request errors"
srv_stop
expect_eq "$SRV_RC" 0 "clean exit"

# ---- model files changed under the server ----
copy_model() { rm -rf "$SRV_TMP/m"; cp -r models/demo "$SRV_TMP/m"; touch -d '-1 hour' "$SRV_TMP/m/model.safetensors"; }
health() { curl -s -w '\n%{http_code}' --max-time 10 "$URL/health"; }
# damage HOW WHAT: starts a server on a copy of the demo model, damages the weights file, checks
damage() {
  copy_model
  srv_start --model "$SRV_TMP/m" --tp 2 --drain-seconds $((30 * SLOW)) || { bad "$2: server starts"; return; }
  post /v1/chat/completions "$Q}"
  [ "$CODE" = 200 ] && ok "$2: answers before" || bad "$2: before: $CODE $BODY"
  case $1 in
    truncate) truncate -s 4096 "$SRV_TMP/m/model.safetensors";;
    overwrite) printf 'xxxx' | dd of="$SRV_TMP/m/model.safetensors" bs=1 seek=2000000 conv=notrunc status=none;;
  esac
  post /v1/chat/completions "$Q}"
  if [ "$CODE" = 500 ] && pyck "'model.safetensors' in d['error']['message'] and 'restart' in d['error']['message']"; then ok "$2: a request gets 500 naming the file"
  else bad "$2: request after: $CODE $BODY"; fi
  kill -0 "$SRV_PID" 2>/dev/null && ok "$2: the process is alive" || bad "$2: the server died: $(tail -3 "$SRV_LOG")"
  out=$(health); CODE=${out##*$'\n'}; BODY=${out%$'\n'*}
  [ "$CODE" = 503 ] && pyck "d['status']=='failed' and 'model.safetensors' in d['error']" && ok "$2: /health 503 naming the file" || bad "$2: /health: $CODE $BODY"
  post /v1/chat/completions "$Q,\"stream\":true}"
  [ "$CODE" = 500 ] || printf '%s\n' "$BODY" | grep -q '^data: {"error":' && ok "$2: a later request fails too" || bad "$2: later request: $CODE $BODY"
  grep -q "g4tp: the model file .*model.safetensors was $3" "$SRV_LOG" && ok "$2: one log line names the file" || bad "$2: log: $(cat "$SRV_LOG")"
  expect_eq "$(grep -c "g4tp: the model file" "$SRV_LOG")" 1 "$2: logged once"
  srv_stop
  expect_eq "$SRV_RC" 1 "$2: exits 1 (a supervisor restarts it)"
}
damage truncate "truncated weights" "truncated"
damage overwrite "weights overwritten in place" "changed in place"

# --load copy: the weights were read at startup
copy_model
srv_start --model "$SRV_TMP/m" --load copy || bad "--load copy server starts"
truncate -s 4096 "$SRV_TMP/m/model.safetensors"
post /v1/chat/completions "$Q}"
[ "$CODE" = 200 ] && pyck "d['choices'][0]['message']['content']=='The capital of France is Paris.'" && ok "--load copy: answers on" || bad "--load copy: $CODE $BODY"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && ok "--load copy: /health 200" || bad "--load copy: /health"
srv_stop
expect_eq "$SRV_RC" 0 "--load copy: clean exit"

finish
