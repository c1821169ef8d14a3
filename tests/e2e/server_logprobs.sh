# g4tp serve on the demo model: logprobs and n (issue 16 items 4, 5). Chat logprobs with
# top_logprobs, whole and streamed (the same entries); completions logprobs N with echo as
# lm-eval-harness sends it (prompt as a batch of one token list, max_tokens 1, logprobs 1):
# one entry per prompt token (the first null) and per generated token, the same whether the
# prompt was in the prefix cache or not; n choices: reproducible with a seed, choice 0 the
# same as n = 1, usage counting every choice, prompt shared through the prefix cache, streamed
# with their indexes; several prompts in one completions request (a batch, choices prompt-major,
# each as its prompt alone); bad values -> 400. Only loopback.
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash

srv_start || { bad "server starts"; finish; exit 1; }
python3 - "$URL" "$SLOW" <<'PY'
import json, math, sys, urllib.request, urllib.error
url, slow = sys.argv[1], int(sys.argv[2])
fails = 0
def check(cond, what, extra=''):
    global fails
    print(('ok - ' if cond else 'not ok - ') + what + ('' if cond else ': ' + str(extra)[:2000]))
    fails += 0 if cond else 1
def post(path, body):
    req = urllib.request.Request(url + path, json.dumps(body).encode(), {'Content-Type': 'application/json'})
    try:
        with urllib.request.urlopen(req, timeout=120 * slow) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
def whole(path, body):
    code, text = post(path, body)
    return code, json.loads(text)
def stream(path, body):
    code, text = post(path, dict(body, stream=True))
    ev = [l[6:] for l in text.split('\n') if l.startswith('data: ')]
    assert ev[-1] == '[DONE]', text[-300:]
    return [json.loads(e) for e in ev[:-1]]
def tok(ids):
    return whole('/tokenize', {'prompt': ids})[1]

Q = [{'role': 'user', 'content': 'What is the capital of France?'}]
# ---- chat logprobs
code, d = whole('/v1/chat/completions', {'messages': Q, 'temperature': 0, 'logprobs': True, 'top_logprobs': 3})
if 'choices' not in d: print(code, d)
c = d['choices'][0]
lp = c['logprobs']['content']
check(code == 200 and c['message']['content'] == 'The capital of France is Paris.', 'chat with logprobs answers', d)
check(len(lp) == d['usage']['completion_tokens'], 'one entry per generated token (the end-of-turn included)', (len(lp), d['usage']))
check(all(set(e) == {'token', 'logprob', 'bytes', 'top_logprobs'} and len(e['top_logprobs']) == 3 for e in lp), 'entries in the OpenAI shape with 3 alternatives', lp[:1])
check(all(e['top_logprobs'][0]['token'] == e['token'] and e['top_logprobs'][0]['logprob'] == e['logprob'] for e in lp),
      'greedy: the chosen token is the best, with the same value', lp)
check(all(e['logprob'] <= 0 and sum(math.exp(t['logprob']) for t in e['top_logprobs']) <= 1 + 1e-6 for e in lp), 'log-probabilities (<= 0, top mass <= 1)')
check(''.join(e['token'] for e in lp).startswith('The capital of France is Paris.') and bytes(sum((e['bytes'] for e in lp), [])).decode().startswith('The capital'),
      'tokens and bytes spell the answer')
ch = stream('/v1/chat/completions', {'messages': Q, 'temperature': 0, 'logprobs': True, 'top_logprobs': 3})
slp = [e for x in ch for e in ((x['choices'][0].get('logprobs') or {}).get('content') or [])]
check(slp == lp, 'streamed logprobs equal the whole answer\'s', (len(slp), len(lp)))
check(all(x['choices'][0]['logprobs'] is None for x in ch if 'role' in x['choices'][0]['delta']), 'the role chunk carries no logprobs')
# tempered: the distribution sampled from (temperature 2 flattens it)
code, t2 = whole('/v1/chat/completions', {'messages': Q, 'temperature': 2, 'seed': 1, 'max_tokens': 1, 'logprobs': True, 'top_logprobs': 1})
code0, t0 = whole('/v1/chat/completions', {'messages': Q, 'temperature': 0, 'max_tokens': 1, 'logprobs': True, 'top_logprobs': 1})
a, b = t2['choices'][0]['logprobs']['content'][0]['top_logprobs'][0], t0['choices'][0]['logprobs']['content'][0]['top_logprobs'][0]
check(a['token'] == b['token'] and a['logprob'] < b['logprob'] < 0, 'temperature 2: the best token is less likely than at temperature 0 (raw)', (a, b))
code, d = whole('/v1/chat/completions', {'messages': Q, 'logprobs': True, 'top_logprobs': 21})
check(code == 400 and d['error']['param'] == 'top_logprobs', 'top_logprobs 21 -> 400', d)
code, d = whole('/v1/chat/completions', {'messages': Q, 'logprobs': 'yes'})
check(code == 400 and d['error']['param'] == 'logprobs', 'logprobs "yes" -> 400', d)

# ---- completions: lm-eval-harness's loglikelihood request
P = 'The capital of France is'
ids = tok(P)['tokens']
req = {'prompt': [ids + tok(' Paris')['tokens']], 'max_tokens': 1, 'logprobs': 1, 'echo': True, 'temperature': 0, 'seed': 1234}
code, d = whole('/v1/completions', req)
c = d['choices'][0]
L = c['logprobs']
n_all = len(ids) + 1 + 1
check(code == 200 and len(L['tokens']) == n_all and len(L['token_logprobs']) == n_all and len(L['top_logprobs']) == n_all and len(L['text_offset']) == n_all,
      'echo: an entry per prompt token and per generated token', d)
check(L['token_logprobs'][0] is None and L['top_logprobs'][0] is None and all(isinstance(x, float) for x in L['token_logprobs'][1:]),
      'the first prompt token has none, every other one has its logprob', L['token_logprobs'])
check(c['text'].startswith(P + ' Paris'), 'echo: the text starts with the prompt', c['text'])
ctx = len(ids)
cont = L['token_logprobs'][ctx:-1]
greedy = all(t == max(top.values()) for t, top in zip(cont, L['top_logprobs'][ctx:-1]))
check(len(cont) == 1 and cont[0] > -1 and greedy, 'lm-eval: " Paris" after the prompt is likely and greedy', (cont, L['top_logprobs'][ctx:-1]))
code, d2 = whole('/v1/completions', dict(req, prompt=[ids + tok(' Berlin')['tokens']]))
b = d2['choices'][0]['logprobs']
check(b['token_logprobs'][ctx] < cont[0] and b['token_logprobs'][ctx] != max(b['top_logprobs'][ctx].values()), 'lm-eval: " Berlin" is less likely and not greedy',
      b['token_logprobs'][ctx:])
check(all(len(t) <= 2 for t in L['top_logprobs'][1:]), 'logprobs 1: the best token and the chosen one')
check(L['text_offset'] == [sum(len(t) for t in L['tokens'][:i]) for i in range(n_all)], 'text_offset counts the token texts', L['text_offset'])
code, d3 = whole('/v1/completions', req)  # the prompt is in the prefix cache now: still every entry, the same numbers
check(d3['choices'][0]['logprobs'] == L, 'a cached prompt gets the same prompt logprobs', d3['choices'][0]['logprobs']['token_logprobs'][:4])
code, d4 = whole('/v1/completions', {'prompt': P, 'max_tokens': 4, 'temperature': 0})
code, d5 = whole('/v1/completions', {'prompt': P, 'max_tokens': 4, 'temperature': 0, 'echo': True})
check(d5['choices'][0]['text'] == P + d4['choices'][0]['text'] and d5['choices'][0]['logprobs'] is None, 'echo without logprobs: the prompt text then the answer', d5)
ch = stream('/v1/completions', {'prompt': P, 'max_tokens': 4, 'temperature': 0, 'echo': True, 'logprobs': 2})
txt = ''.join(x['choices'][0]['text'] for x in ch if x['choices'])
stoks = sum((x['choices'][0]['logprobs']['tokens'] for x in ch if x['choices'] and x['choices'][0]['logprobs']), [])
check(txt == P + d4['choices'][0]['text'] and len(stoks) == len(ids) + d4['usage']['completion_tokens'], 'streamed echo: prompt first, every token\'s logprobs', (txt, stoks))
for bad in ({'logprobs': True}, {'logprobs': 21}, {'echo': 'yes'}, {'top_logprobs': 1}):
    code, d = whole('/v1/completions', dict({'prompt': P}, **bad))
    check(code == 400 and d['error']['code'] == 'invalid_value', 'completions %s -> 400' % json.dumps(bad), d)

# ---- n
body = {'messages': [{'role': 'user', 'content': 'Tell me about Kenya.'}], 'temperature': 2.5, 'seed': 42, 'max_tokens': 8, 'n': 4}
one_prompt = whole('/v1/chat/completions', dict(body, n=1, max_tokens=1))[1]['usage']['prompt_tokens']
code, d = whole('/v1/chat/completions', body)
usage4 = d['usage']
texts = [c['message']['content'] for c in d['choices']]
check(code == 200 and [c['index'] for c in d['choices']] == [0, 1, 2, 3], 'n = 4: four choices in order', d)
check(3 * 8 < d['usage']['completion_tokens'] <= 4 * 8 and d['usage']['prompt_tokens'] == one_prompt, 'usage: the prompt once, every choice\'s tokens', d['usage'])
check(len(set(texts)) > 1, 'the choices differ (a seed per choice)', texts)
code, again = whole('/v1/chat/completions', body)
check([c['message']['content'] for c in again['choices']] == texts, 'the same seed gives the same choices', texts)
code, one = whole('/v1/chat/completions', dict(body, n=1))
check(one['choices'][0]['message']['content'] == texts[0], 'choice 0 equals the n = 1 answer', (one, texts))
fresh = dict(body, messages=[{'role': 'user', 'content': 'Tell me about Chile, the long country at the south of the continent.'}], n=3)
code, d = whole('/v1/chat/completions', fresh)
m = urllib.request.urlopen(url + '/metrics', timeout=30).read().decode()
hits = [float(l.split()[1]) for l in m.split('\n') if l.startswith('g4tp_prefix_cache_hit_tokens_total ')]
check(code == 200 and hits and hits[0] >= 32, 'n choices share the prompt through the prefix cache', hits)
ch = stream('/v1/chat/completions', dict(body, stream_options={'include_usage': True}))
st = {}
fin = {}
for x in ch:
    for c in x['choices']:
        st[c['index']] = st.get(c['index'], '') + (c['delta'].get('content') or '')
        if c['finish_reason']: fin[c['index']] = c['finish_reason']
check([st.get(i) for i in range(4)] == texts and len(fin) == 4 and ch[-1]['usage']['completion_tokens'] == usage4['completion_tokens'], 'streamed n = 4: the same choices, each finished, usage', (st, fin))
code, d = whole('/v1/completions', {'prompt': P, 'n': 2, 'max_tokens': 3, 'temperature': 0})
check(code == 200 and len(d['choices']) == 2 and d['choices'][0]['text'] == d['choices'][1]['text'] == d4['choices'][0]['text'][:len(d['choices'][0]['text'])],
      'completions n = 2', d)
for n in (0, 17, 'two'):
    code, d = whole('/v1/chat/completions', {'messages': Q, 'n': n})
    check(code == 400 and d['error']['param'] == 'n', 'n = %r -> 400' % (n,), d)
code, d = whole('/generate', {'prompt': 'hi', 'n': 2})
check(code == 400 and d['error']['code'] == 'unsupported_value', '/generate n = 2 -> 400', d)
# ---- several prompts in one request (lm-eval-harness with batch_size > 1): choices prompt-major,
# each the answer its prompt gets alone (same seed per choice), usage each prompt once
B = [P, tok('Hello there')['tokens'], 'Tell me about Kenya.']
breq = {'max_tokens': 3, 'temperature': 1.5, 'seed': 7, 'n': 2, 'echo': True, 'logprobs': 1}
code, d = whole('/v1/completions', dict(breq, prompt=B))
alone = [whole('/v1/completions', dict(breq, prompt=p))[1] for p in B]
check(code == 200 and [c['index'] for c in d['choices']] == list(range(6)), 'a batch of 3 prompts, n = 2: six choices in order', d)
want = [dict(c, index=2 * k + c['index']) for k, a in enumerate(alone) for c in a['choices']]
check(d['choices'] == want, 'each choice (text, echo, logprobs) equals its prompt\'s answer alone', (d['choices'], want))
check(d['usage']['prompt_tokens'] == sum(a['usage']['prompt_tokens'] for a in alone) and
      d['usage']['completion_tokens'] == sum(a['usage']['completion_tokens'] for a in alone), 'batch usage: each prompt once, every choice', d['usage'])
ch = stream('/v1/completions', dict(breq, prompt=B, stream_options={'include_usage': True}))
st = {}
for x in ch:
    for c in x['choices']: st[c['index']] = st.get(c['index'], '') + c['text']
check([st.get(i) for i in range(6)] == [c['text'] for c in want] and ch[-1]['usage'] == d['usage'], 'a streamed batch: the same texts per index, the same usage', (st, ch[-1]))
lm = [tok(P)['tokens'] + tok(w)['tokens'] for w in (' Paris', ' Berlin', ' Rome')]
code, d = whole('/v1/completions', {'prompt': lm, 'max_tokens': 1, 'logprobs': 1, 'echo': True, 'temperature': 0})
check(code == 200 and [len(c['logprobs']['token_logprobs']) for c in d['choices']] == [len(x) + 1 for x in lm] and
      all(c['logprobs']['token_logprobs'][0] is None for c in d['choices']), 'lm-eval batch of token lists: every prompt token\'s logprob per choice', d)
code, d = whole('/v1/completions', {'prompt': ['a', []]})
check(code == 400 and d['error']['param'] == 'prompt' and 'prompt[1]' in d['error']['message'], 'a batch with an empty prompt -> 400 naming it', d)
code, d = whole('/v1/completions', {'prompt': ['a', [2] * 2100], 'max_tokens': 2})
check(code == 400 and d['error']['param'] == 'prompt' and d['error']['message'].startswith('prompt[1]: '), 'a batch with a prompt over the context -> 400 naming it', d)
code, d = whole('/v1/completions', {'prompt': ['a'] * 40, 'n': 2})
check(code == 400 and '--max-waiting' in d['error']['message'], 'a batch of more sequences than the queue -> 400', d)
print('PYFAILS %d' % fails)
sys.exit(1 if fails else 0)
PY
[ $? -eq 0 ] && ok "logprobs and n checks" || bad "logprobs and n checks"
srv_stop
expect_eq "$SRV_RC" 0 "server exits cleanly"
grep -qi "ERROR: AddressSanitizer\|runtime error" "$SRV_LOG" && bad "sanitizer report: $(cat "$SRV_LOG")" || ok "no sanitizer report"
finish
