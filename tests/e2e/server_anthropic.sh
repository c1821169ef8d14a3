# The Anthropic Messages API of g4tp serve on the demo model (issue 16 item 6): with curl, the
# headers (x-api-key or Bearer, anthropic-version), every error in Anthropic's shape (400, 401,
# 404, 405, 413, and on /v1/messages/count_tokens), the event sequence of a stream; then the
# official SDK (npm @anthropic-ai/sdk in tests/node): node --test tests/node/server_anthropic.mjs.
# Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
command -v node >/dev/null || { bad "node is missing (scripts/install-deps.sh)"; finish; exit 1; }
[ -f tests/node/node_modules/@anthropic-ai/sdk/package.json ] || { bad "the @anthropic-ai/sdk package is missing: (cd tests/node && npm ci)"; finish; exit 1; }
KEY=test-key-$$
API_KEY=$KEY srv_start --max-body-bytes 65536 || { bad "server starts"; finish; exit 1; }

# expect_anth STATUS TYPE WHAT: $CODE and Anthropic's error shape in $BODY
expect_anth() {
  if [ "$CODE" = "$1" ] && pyck "d['type']=='error' and set(d['error'])=={'type','message'} and d['error']['type']=='$2' and d['error']['message']"; then ok "$3"
  else bad "$3: got $CODE $BODY"; fi
}
M='{"model":"g4tp-demo","max_tokens":32,"temperature":0,"messages":[{"role":"user","content":"What is the capital of France?"}]}'
post /v1/messages "$M" -H "x-api-key: $KEY" -H 'anthropic-version: 2023-06-01'
pyck "d['content']==[{'type':'text','text':'The capital of France is Paris.'}] and d['stop_reason']=='end_turn'" && ok "x-api-key: the answer" || bad "x-api-key: $CODE $BODY"
post /v1/messages "$M" -H "Authorization: Bearer $KEY"
expect_eq "$CODE" 200 "Authorization: Bearer works too"
post /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}' -H "x-api-key: $KEY"
expect_eq "$CODE" 200 "x-api-key on the OpenAI routes"
post /v1/messages "$M"
expect_anth 401 authentication_error "no key -> 401 authentication_error"
post /v1/messages "$M" -H "x-api-key: nope"
expect_anth 401 authentication_error "wrong key -> 401"
post /v1/messages "$M" -H "x-api-key: $KEY" -H 'anthropic-version: 1999-01-01'
expect_anth 400 invalid_request_error "unknown anthropic-version -> 400"
post /v1/messages '{"model":"g4tp-demo","messages":[]}' -H "x-api-key: $KEY"
expect_anth 400 invalid_request_error "no max_tokens / empty messages -> 400"
post /v1/messages '{"model":"g4tp-demo","max_tokens":1' -H "x-api-key: $KEY"
expect_anth 400 invalid_request_error "malformed JSON -> 400"
post /v1/messages '{"model":"other","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}' -H "x-api-key: $KEY"
expect_anth 404 not_found_error "unknown model -> 404 not_found_error"
CODE=$(curl -s -o "$SRV_TMP/b" -w '%{http_code}' -H "x-api-key: $KEY" "$URL/v1/messages"); BODY=$(cat "$SRV_TMP/b")
expect_anth 405 invalid_request_error "GET /v1/messages -> 405"
post /v1/messages "{\"model\":\"g4tp-demo\",\"max_tokens\":4,\"messages\":[{\"role\":\"user\",\"content\":\"$(head -c 70000 /dev/zero | tr '\0' a)\"}]}" -H "x-api-key: $KEY"
expect_anth 413 request_too_large "a body over the limit -> 413 request_too_large"
post /v1/messages/count_tokens '{"model":"g4tp-demo","messages":[{"role":"user","content":"What is the capital of France?"}]}' -H "x-api-key: $KEY"
pyck "d=={'input_tokens':d['input_tokens']} and d['input_tokens']>5" && ok "count_tokens" || bad "count_tokens: $CODE $BODY"
post /v1/messages/count_tokens '{"model":"g4tp-demo","messages":"hi"}' -H "x-api-key: $KEY"
expect_anth 400 invalid_request_error "count_tokens with bad messages -> 400"
post /v1/chat/completions '{"messages":[]}' -H "x-api-key: $KEY"
pyck "d['error']['code']=='invalid_value'" && ok "the OpenAI routes keep the OpenAI error shape" || bad "chat error shape: $BODY"

# a stream: message_start, one text block, message_delta with the usage, message_stop
STREAM=$(curl -H 'Content-Type: application/json' -sN --max-time $((60*SLOW)) -H "x-api-key: $KEY" "$URL/v1/messages" -d '{"model":"g4tp-demo","max_tokens":32,"temperature":0,"stream":true,"messages":[{"role":"user","content":"What is the capital of Japan?"}]}')
printf '%s' "$STREAM" | python3 -c "
import json,sys
lines=sys.stdin.read().split('\n')
ev=[(a[7:],json.loads(b[6:])) for a,b in zip(lines,lines[1:]) if a.startswith('event: ')]
names=[n for n,_ in ev]
assert all(d['type']==n for n,d in ev), names
assert names[0]=='message_start' and names[-1]=='message_stop' and names[-2]=='message_delta', names
text=''.join(d['delta']['text'] for n,d in ev if n=='content_block_delta')
assert text=='The capital of Japan is Tokyo.', text
assert names.count('content_block_start')==1 and names.count('content_block_stop')==1, names
u=ev[-2][1]['usage']; assert u['output_tokens']>0 and u['input_tokens']+u['cache_read_input_tokens']>0, u
assert ev[-2][1]['delta']=={'stop_reason':'end_turn','stop_sequence':None}, ev[-2]
" && ok "stream: the event sequence and its text" || bad "stream: $STREAM"

node_tests tests/node/server_anthropic.mjs "Anthropic SDK tests"
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"
grep -qi "ERROR: AddressSanitizer\|runtime error" "$SRV_LOG" && bad "sanitizer report: $(cat "$SRV_LOG")" || ok "no sanitizer report"
finish
