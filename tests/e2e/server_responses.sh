# The Responses API of g4tp serve on the demo model (issue 16 item 7): with curl, a whole
# answer and a stream (event sequence, sequence numbers, response.completed), the stateless
# refusals and bad fields as OpenAI-shaped 400s; then the official OpenAI SDK's
# client.responses (node --test tests/node/server_responses.mjs). Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
command -v node >/dev/null || { bad "node is missing (scripts/install-deps.sh)"; finish; exit 1; }
[ -f tests/node/node_modules/openai/package.json ] || { bad "the openai package is missing: (cd tests/node && npm ci)"; finish; exit 1; }
KEY=test-key-$$
API_KEY=$KEY srv_start || { bad "server starts"; finish; exit 1; }
AUTH="Authorization: Bearer $KEY"

post /v1/responses '{"model":"g4tp-demo","input":"What is the capital of France?","temperature":0,"instructions":"Be brief."}' -H "$AUTH"
pyck "d['object']=='response' and d['status']=='completed' and d['output'][0]['content'][0]['text']=='The capital of France is Paris.' and d['instructions']=='Be brief.' and d['store'] is False" \
  && ok "a whole response" || bad "response: $CODE $BODY"
STREAM=$(curl -H 'Content-Type: application/json' -sN --max-time $((60*SLOW)) -H "$AUTH" "$URL/v1/responses" -d '{"input":[{"role":"user","content":"What is the capital of Japan?"}],"temperature":0,"stream":true}')
printf '%s' "$STREAM" | python3 -c "
import json,sys
lines=sys.stdin.read().split('\n')
ev=[(a[7:],json.loads(b[6:])) for a,b in zip(lines,lines[1:]) if a.startswith('event: ')]
assert all(d['type']==n for n,d in ev)
assert [d['sequence_number'] for _,d in ev]==list(range(len(ev)))
names=[n for n,_ in ev]
assert names[:2]==['response.created','response.in_progress'] and names[-1]=='response.completed', names
text=''.join(d['delta'] for n,d in ev if n=='response.output_text.delta')
assert text=='The capital of Japan is Tokyo.', text
fin=ev[-1][1]['response']; assert fin['status']=='completed' and fin['output'][0]['content'][0]['text']==text and fin['usage']['output_tokens']>0, fin
assert '[DONE]' not in ''.join(lines)
" && ok "stream: created ... output_text.delta ... completed" || bad "stream: $STREAM"
for c in 'previous_response_id|{"input":"hi","previous_response_id":"resp_1"}' 'store|{"input":"hi","store":true}' \
         'conversation|{"input":"hi","conversation":"conv_1"}' 'input|{"input":{}}' 'tools[0]|{"input":"hi","tools":[{"type":"file_search"}]}' \
         'max_output_tokens|{"input":"hi","max_output_tokens":"3"}'; do
  post /v1/responses "${c#*|}" -H "$AUTH"
  if [ "$CODE" = 400 ] && pyck "d['error']['param']=='${c%%|*}' and d['error']['message']"; then ok "${c%%|*} -> 400"; else bad "${c%%|*}: $CODE $BODY"; fi
done
post /v1/responses '{"input":"hi"}'
expect_error 401 invalid_api_key "no key -> 401 (OpenAI shape)"

node_tests tests/node/server_responses.mjs "OpenAI SDK responses tests"
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"
grep -qi "ERROR: AddressSanitizer\|runtime error" "$SRV_LOG" && bad "sanitizer report: $(cat "$SRV_LOG")" || ok "no sanitizer report"
finish
