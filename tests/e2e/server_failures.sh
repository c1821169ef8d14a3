# Failures inside a running server reach clients as errors, never as shorter answers:
# scheduler allocations that fail (G4_FAULT, src/base/fault.h) end a whole answer with a 503
# JSON error and a stream with an SSE error event.
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

finish
