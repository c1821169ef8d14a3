# The sampling fields end to end on the demo model (issue 27 item 1, issue 24 item 8): the OpenAI
# SDK for Node (tests/node/server_sampling.mjs: logit_bias, penalties, seed, min_tokens, errors),
# then curl for /generate (logit_bias bans, min_tokens against stop strings and the end, seeded
# penalties reproducible, 400s naming the field) and the same extensions in Anthropic's Messages
# and the Responses API. Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
KEY=test-key-$$
API_KEY=$KEY srv_start || { bad "server starts"; finish; exit 1; }
if command -v node >/dev/null && [ -f tests/node/node_modules/openai/package.json ]; then
  node_tests tests/node/server_sampling.mjs "OpenAI SDK sampling tests"
else
  bad "node and the openai package are needed (scripts/install-deps.sh; cd tests/node && npm ci)"
fi
H=(-H "Authorization: Bearer $KEY")
Q='"prompt":"What is the capital of France?","temperature":0'
tok() { post /tokenize "{\"prompt\":\"$1\"}" "${H[@]}"; pyget "d['tokens'][0]"; }
THE=$(tok The); TURN=$(tok '<turn|>'); PARIS=$(tok ' Paris')

post /generate "{$Q}" "${H[@]}"
expect_eq "$(pyget "d['response']")" "The capital of France is Paris." "/generate: the greedy answer"
post /generate "{$Q,\"logit_bias\":{\"$THE\":-100,\"$TURN\":-100},\"max_new_tokens\":6}" "${H[@]}"
expect_eq "$(pyget "d['response']")" "capital of France is Paris." "/generate: logit_bias -100 bans the first token (and the end)"
post /generate "{$Q,\"logit_bias\":{\"$PARIS\":100},\"max_new_tokens\":2}" "${H[@]}"
expect_eq "$(pyget "d['response']")" "Paris Paris" "/generate: logit_bias +100 forces a token"

# stop strings and min_tokens: "France" ends in token 4, "Paris" in token 6; a stop string may end
# the answer from token min_tokens + 1 on (vLLM), the end of turn from token min_tokens + 1 too
post /generate "{$Q,\"stop\":[\"France\",\"Paris\"]}" "${H[@]}"
expect_eq "$(pyget "d['response']")" "The capital of" "/generate: the first stop string ends the answer"
post /generate "{$Q,\"stop\":[\"France\",\"Paris\"],\"min_tokens\":5}" "${H[@]}"
expect_eq "$(pyget "d['response'] + '|' + d['finish_reason']")" "The capital of France is|stop" "/generate: min_tokens 5 passes 'France', stops at 'Paris'"
post /generate "{$Q,\"stop\":[\"France\",\"Paris\"],\"min_tokens\":6}" "${H[@]}"
expect_eq "$(pyget "d['response']")" "The capital of France is Paris." "/generate: min_tokens 6 passes both"
post /generate "{$Q,\"min_tokens\":12,\"max_new_tokens\":20}" "${H[@]}"
if pyck "d['completion_tokens'] >= 12 and d['response'].startswith('The capital of France is Paris.')"; then ok "/generate: min_tokens holds the end back"; else bad "/generate: min_tokens: $BODY"; fi

S='"prompt":"What is the capital of France?","temperature":1,"seed":9,"min_tokens":32,"max_new_tokens":32'
post /generate "{$S,\"repetition_penalty\":1.3,\"presence_penalty\":0.5,\"frequency_penalty\":0.5}" "${H[@]}"
A=$(pyget "d['response']")
post /generate "{$S,\"repetition_penalty\":1.3,\"presence_penalty\":0.5,\"frequency_penalty\":0.5}" "${H[@]}"
expect_eq "$(pyget "d['response']")" "$A" "/generate: seeded sampling with penalties is reproducible"
post /generate "{$S}" "${H[@]}"
[ "$(pyget "d['response']")" != "$A" ] && ok "/generate: the penalties change the seeded answer" || bad "/generate: penalties changed nothing"

for c in '"repetition_penalty":0:repetition_penalty' '"presence_penalty":2.1:presence_penalty' '"frequency_penalty":"x":frequency_penalty' \
         '"logit_bias":{"-3":1}:logit_bias' '"logit_bias":{"1":-100.5}:logit_bias' '"logit_bias":{"99999":1}:logit_bias' '"min_tokens":-1:min_tokens' \
         '"min_tokens":9,"max_new_tokens":8:min_tokens'; do
  field=${c%:*}; param=${c##*:}
  post /generate "{$Q,$field}" "${H[@]}"
  if [ "$CODE" = 400 ] && pyck "d['error']['param'] == '$param'"; then ok "/generate: {$field} is a 400 naming $param"; else bad "/generate {$field}: $CODE $BODY"; fi
done

# with a constrained answer the mask still applies: a bias cannot bring in a token the format
# forbids, a ban leaves the other spellings, and min_tokens gives way where only the end is left
C='"messages":[{"role":"user","content":"What is the capital of France?"}],"temperature":0,"guided_choice":["Paris","Lyon"]'
P=$(tok P)
for extra in "\"logit_bias\":{\"$PARIS\":100}" "\"logit_bias\":{\"$P\":-100}" '"min_tokens":8,"max_tokens":10'; do
  post /v1/chat/completions "{$C,$extra}" "${H[@]}"
  expect_eq "$(pyget "d['choices'][0]['message']['content'] + '|' + d['choices'][0]['finish_reason']")" "Paris|stop" "guided_choice with {$extra}"
done

# the same fields in Anthropic's Messages and the Responses API (extensions there)
post /v1/messages "{\"model\":\"g4tp-demo\",\"max_tokens\":3,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"What is the capital of France?\"}],\"logit_bias\":{\"$PARIS\":100}}" "${H[@]}"
expect_eq "$(pyget "d['content'][0]['text']")" "Paris Paris Paris" "Anthropic: logit_bias"
post /v1/messages '{"model":"g4tp-demo","max_tokens":3,"messages":[{"role":"user","content":"hi"}],"frequency_penalty":5}' "${H[@]}"
if [ "$CODE" = 400 ] && pyck "d['type'] == 'error' and 'frequency_penalty' in d['error']['message']"; then ok "Anthropic: a bad penalty is a 400"; else bad "Anthropic: $CODE $BODY"; fi
post /v1/responses "{\"model\":\"g4tp-demo\",\"max_output_tokens\":3,\"temperature\":0,\"input\":\"What is the capital of France?\",\"logit_bias\":{\"$PARIS\":100}}" "${H[@]}"
expect_eq "$(pyget "d['output'][0]['content'][0]['text']")" "Paris Paris Paris" "Responses: logit_bias"
post /v1/responses '{"model":"g4tp-demo","input":"hi","min_tokens":-2}' "${H[@]}"
expect_error 400 invalid_value "Responses: a bad min_tokens is a 400"
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"
finish
