# The prefix cache as a client sees it (docs/kvcache.md): a chat's next turn and a repeated
# long system prompt report usage.prompt_tokens_details.cached_tokens (chat, completions,
# streaming usage), /generate reports cached_tokens, /metrics counts queries, hit tokens, KV
# pages and blocks and preemptions; answers are the same with and without the cache;
# --no-prefix-cache reports 0; a prompt beyond the context is still a 400; `g4tp chat`
# computes only each turn's new tokens; a KV budget too small for one sequence is refused at
# start naming the flag.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash

srv_start || { bad "server starts"; finish; exit 1; }
SYS=$(python3 -c "print(' '.join(['You are a careful assistant who answers geography questions briefly.']*12))")
chat() { # chat JSON_MESSAGES [extra fields]: posts, sets BODY
  post /v1/chat/completions "{\"messages\":$1,\"temperature\":0${2:-}}"
}
M1="[{\"role\":\"system\",\"content\":\"$SYS\"},{\"role\":\"user\",\"content\":\"What is the capital of France?\"}]"
chat "$M1"
pyck "d['usage']['prompt_tokens_details']['cached_tokens']==0" && ok "first request: nothing cached" || bad "first: $BODY"
A1=$(pyget "d['choices'][0]['message']['content']")
P1=$(pyget "d['usage']['prompt_tokens']")
M2="[{\"role\":\"system\",\"content\":\"$SYS\"},{\"role\":\"user\",\"content\":\"What is the capital of France?\"},{\"role\":\"assistant\",\"content\":\"$A1\"},{\"role\":\"user\",\"content\":\"What is the capital of Japan?\"}]"
chat "$M2"
pyck "d['usage']['prompt_tokens_details']['cached_tokens']>=$P1-8 and d['usage']['prompt_tokens_details']['cached_tokens']<d['usage']['prompt_tokens'] and d['choices'][0]['message']['content']=='The capital of Japan is Tokyo.'" \
  && ok "next turn: the previous turn comes from the cache" || bad "next turn: $BODY"
# the same system prompt, another question: the system prompt is reused
chat "[{\"role\":\"system\",\"content\":\"$SYS\"},{\"role\":\"user\",\"content\":\"What is the capital of Peru?\"}]"
pyck "d['usage']['prompt_tokens_details']['cached_tokens']>=$P1-16 and d['choices'][0]['message']['content']=='The capital of Peru is Lima.'" \
  && ok "shared system prompt reused" || bad "system prompt: $BODY"
# streaming usage carries it too
STREAM=$(curl -H 'Content-Type: application/json' -sN --max-time $((60*SLOW)) "$URL/v1/chat/completions" -d "{\"messages\":$M2,\"temperature\":0,\"stream\":true,\"stream_options\":{\"include_usage\":true}}")
printf '%s' "$STREAM" | python3 -c "
import json,sys
ch=[json.loads(l[6:]) for l in sys.stdin.read().split('\n') if l.startswith('data: {')]
u=ch[-1]['usage']
assert u['prompt_tokens_details']['cached_tokens']>0 and u['prompt_tokens_details']['cached_tokens']<u['prompt_tokens'], u
" && ok "streaming usage: cached_tokens" || bad "streaming usage: $STREAM"
# completions and /generate
post /v1/completions "{\"prompt\":\"$SYS The capital of\",\"max_tokens\":2,\"temperature\":0}"
post /v1/completions "{\"prompt\":\"$SYS The capital of\",\"max_tokens\":2,\"temperature\":0}"
pyck "d['usage']['prompt_tokens_details']['cached_tokens']>0" && ok "completions: cached_tokens" || bad "completions: $BODY"
post /generate "{\"prompt\":\"What is the capital of France?\",\"temperature\":0}"
post /generate "{\"prompt\":\"What is the capital of France?\",\"temperature\":0}"
pyck "d['cached_tokens']>0 and d['cached_tokens']<d['prompt_tokens'] and d['response']=='The capital of France is Paris.'" \
  && ok "/generate: cached_tokens" || bad "/generate: $BODY"
# /metrics
q=$(metric g4tp_prefix_cache_queries_total); h=$(metric g4tp_prefix_cache_hit_tokens_total); t=$(metric g4tp_kv_pages)
[ "${q:-0}" -ge 8 ] && [ "${h:-0}" -gt 0 ] && [ "${t:-0}" -gt 0 ] && ok "/metrics: prefix cache queries $q, hit tokens $h, $t pages" || bad "/metrics: q=$q h=$h t=$t"
curl -s "$URL/metrics" | grep -q '^g4tp_kv_blocks_used{kind="full"} [0-9]' && curl -s "$URL/metrics" | grep -q '^g4tp_preemptions_total 0' \
  && ok "/metrics: blocks used, preemptions" || bad "/metrics: blocks/preemptions"
srv_stop

# without the cache: the same answer, nothing cached
srv_start --no-prefix-cache --max-ctx 1024 || { bad "server --no-prefix-cache starts"; finish; exit 1; }
chat "$M2"
pyck "d['usage']['prompt_tokens_details']['cached_tokens']==0 and d['choices'][0]['message']['content']=='The capital of Japan is Tokyo.'" \
  && ok "--no-prefix-cache: same answer, 0 cached" || bad "--no-prefix-cache: $BODY"
LONG=$(python3 -c "print('word '*1200)")
post /v1/completions "{\"prompt\":\"$LONG\",\"max_tokens\":2}"
expect_eq "$CODE" 400 "a prompt beyond the context is a 400"
srv_stop

# a pool too small for one sequence: refused at start, naming the flag
out=$($G4TP serve --port 0 --kv-budget-mb 1 --max-ctx 2048 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s' "$out" | grep -q -- "--kv-budget-mb" && ok "too small a KV budget is refused naming the flag" || bad "small budget: rc=$rc $out"

# g4tp chat: each turn after the first takes the conversation so far from the cache
out=$(printf 'What is the capital of France?\nWhat is the capital of Japan?\nWhat is the capital of Peru?\n' | $G4TP chat --temperature 0 --stats 2>&1)
printf '%s' "$out" | python3 -c "
import re,sys
s=sys.stdin.read()
st=[tuple(map(int,m)) for m in re.findall(r'\[prompt (\d+) tokens, (\d+) from the cache', s)]
assert len(st)==3 and st[0][1]==0, st
# the template renders the previous answer without its generation marker: what it had before that is reused
assert st[1][1]>=16 and st[2][1]>=st[1][0]-16, st
assert 'The capital of Peru is Lima.' in s
" && ok "chat: later turns reuse the conversation" || bad "chat --stats: $out"
finish
