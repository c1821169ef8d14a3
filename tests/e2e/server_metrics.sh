#!/usr/bin/env bash
# /metrics as operators' tooling reads it (docs/server.md, "Metrics"): after traffic on every
# API, Prometheus' own linter (`promtool check metrics`, Debian package prometheus) accepts the
# exposition — g4tp's names with no complaint at all, vLLM's names with only the one promtool
# makes about every vLLM server (colons are reserved for recording rules); the vLLM-compatible
# series carry model_name (escaped), vLLM's types and buckets, and numbers that moved; and the
# Grafana dashboard in packaging/ is well-formed, its queries are valid PromQL (promtool check
# rules) and every metric it queries is on the live server's /metrics; docs/server.md names
# every metric.
set -u
cd "$(dirname "$0")/../.."
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
DASH=packaging/grafana-dashboard.json
HAVE_PROMTOOL=1; command -v promtool >/dev/null || HAVE_PROMTOOL=0

MODEL='g4 "demo"\x'  # a label value that must be escaped
srv_start --model-name "$MODEL" || { bad "server starts"; finish; exit 1; }
Q='What is the capital of France?'
CHAT="{\"messages\":[{\"role\":\"user\",\"content\":\"$Q\"}],\"temperature\":0,\"max_tokens\":12}"
post /v1/chat/completions "$CHAT"; expect_eq "$CODE" 200 "chat"
post /v1/chat/completions "$CHAT"; expect_eq "$CODE" 200 "chat again (prefix cache hit)"
post /v1/chat/completions "${CHAT%\}},\"stream\":true,\"n\":2}"; expect_eq "$CODE" 200 "chat streamed, n 2"
post /v1/completions '{"prompt":"The capital of","max_tokens":3,"temperature":0}'; expect_eq "$CODE" 200 "completions"
post /v1/messages "{\"model\":\"$(printf '%s' "$MODEL" | sed 's/\\/\\\\/g; s/"/\\"/g')\",\"max_tokens\":8,\"messages\":[{\"role\":\"user\",\"content\":\"$Q\"}]}"
expect_eq "$CODE" 200 "messages"
post /v1/responses "{\"input\":\"$Q\",\"max_output_tokens\":8}"; expect_eq "$CODE" 200 "responses"
post /generate '{"prompt":"Hi","max_new_tokens":2}'; expect_eq "$CODE" 200 "/generate"
post /v1/chat/completions '{"messages":[]}'; expect_eq "$CODE" 400 "a 400"
curl -s --max-time 30 "$URL/metrics" > "$SRV_TMP/metrics"
srv_stop

# promtool: g4tp's series clean; vLLM's series: only the colon complaint, one per vLLM name
if [ $HAVE_PROMTOOL = 1 ]; then
  promtool check metrics < "$SRV_TMP/metrics" > "$SRV_TMP/lint" 2>&1; rc=$?
  other=$(grep -v "^vllm:[a-z0-9_]* metric names should not contain ':'$" "$SRV_TMP/lint")
  [ -z "$other" ] && ok "promtool: no complaint but vLLM's colons (rc $rc)" || bad "promtool says: $other"
  grep -v '^vllm:\|^# [A-Z]* vllm:' "$SRV_TMP/metrics" | promtool check metrics > "$SRV_TMP/lint2" 2>&1 \
    && ok "promtool: g4tp's series pass clean" || bad "promtool on g4tp's series: $(cat "$SRV_TMP/lint2")"
else
  echo "note: promtool not installed (Debian: prometheus; scripts/install-deps.sh): the lint checks are skipped"
fi

python3 - "$SRV_TMP/metrics" "$MODEL" <<'PY' && ok "vLLM-compatible series: types, model_name, buckets, values" || bad "vLLM-compatible series"
import re, sys
text = open(sys.argv[1]).read()
label = 'model_name="' + sys.argv[2].replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n') + '"'
types = dict(re.findall(r'^# TYPE (\S+) (\S+)$', text, re.M))
want = {'vllm:num_requests_running': 'gauge', 'vllm:num_requests_waiting': 'gauge', 'vllm:kv_cache_usage_perc': 'gauge',
        'vllm:prefix_cache_queries_total': 'counter', 'vllm:prefix_cache_hits_total': 'counter',
        'vllm:time_to_first_token_seconds': 'histogram', 'vllm:inter_token_latency_seconds': 'histogram',
        'vllm:e2e_request_latency_seconds': 'histogram', 'vllm:prompt_tokens_total': 'counter',
        'vllm:generation_tokens_total': 'counter', 'vllm:request_success_total': 'counter', 'vllm:num_preemptions_total': 'counter'}
bad = [f'{n}: {types.get(n)}' for n, t in want.items() if types.get(n) != t]
samples = {}
for line in text.splitlines():
    if line.startswith('vllm:'):
        name_labels, value = line.rsplit(' ', 1)
        if label not in name_labels: bad.append('no model_name: ' + line)
        samples[name_labels] = float(value)
def v(key): return samples.get(key.replace('L', label), -1)
for key, lo in (('vllm:prefix_cache_hits_total{L}', 1), ('vllm:prefix_cache_queries_total{L}', 1), ('vllm:time_to_first_token_seconds_count{L}', 8),
                ('vllm:inter_token_latency_seconds_count{L}', 1), ('vllm:e2e_request_latency_seconds_count{L}', 8),
                ('vllm:generation_tokens_total{L}', 8), ('vllm:request_success_total{L,finished_reason="stop"}', 1)):
    if v(key) < lo: bad.append(f'{key} = {v(key)} (want >= {lo})')
if v('vllm:num_requests_running{L}') != 0: bad.append('running after the traffic')
buckets = lambda n: [m for m in re.findall(n + r'_bucket\{[^}]*le="([^"]+)"\}', text)]
if buckets('vllm:time_to_first_token_seconds') != ['0.001', '0.005', '0.01', '0.02', '0.04', '0.06', '0.08', '0.1', '0.25', '0.5', '0.75', '1.0',
        '2.5', '5.0', '7.5', '10.0', '20.0', '40.0', '80.0', '160.0', '640.0', '2560.0', '+Inf']: bad.append('TTFT buckets')
if buckets('vllm:inter_token_latency_seconds') != ['0.01', '0.025', '0.05', '0.075', '0.1', '0.15', '0.2', '0.3', '0.4', '0.5', '0.75', '1.0',
        '2.5', '5.0', '7.5', '10.0', '20.0', '40.0', '80.0', '+Inf']: bad.append('ITL buckets')
for n, t in types.items():  # every metric: HELP, counters end in _total and nothing else does, latencies in seconds
    if not re.search(r'^# HELP ' + re.escape(n) + r' \S', text, re.M): bad.append('no HELP: ' + n)
    if (t == 'counter') != n.endswith('_total'): bad.append(f'{n} is a {t}')
    if ('latency' in n or 'duration' in n or 'time_to' in n) and not n.endswith('_seconds'): bad.append('unit: ' + n)
if bad: print('\n'.join(bad))
sys.exit(1 if bad else 0)
PY

# docs/server.md names every metric the server exports
missing=$(sed -n 's/^# TYPE \([^ ]*\) .*/\1/p' "$SRV_TMP/metrics" | while read -r n; do grep -q "\`$n[\`{,]" docs/server.md || echo "$n"; done)
[ -z "$missing" ] && ok "docs/server.md names every metric" || bad "not in docs/server.md: $missing"

# the dashboard: JSON, PromQL that parses, every metric it queries exported
python3 - "$DASH" "$SRV_TMP/metrics" "$SRV_TMP/rules.yml" <<'PY' && ok "dashboard: JSON, panels, every queried metric on /metrics" || bad "dashboard"
import json, re, sys
d = json.load(open(sys.argv[1]))
text = open(sys.argv[2]).read()
names = set(re.findall(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)', text, re.M))
exprs, bad = [], []
for p in d['panels']:
    if not p.get('targets'): bad.append('no targets: ' + p.get('title', '?'))
    exprs += [t['expr'] for t in p.get('targets', [])]
for v in d['templating']['list']:
    if isinstance(v.get('query'), dict): exprs.append(v['query']['query'].replace('label_values(', '').split(',')[0])
used = set()
for e in exprs:
    used |= set(re.findall(r'\b((?:vllm:|g4tp_)[a-zA-Z0-9_:]*)', e))
for n in sorted(used):
    if n not in names: bad.append('not on /metrics: ' + n)
if len(used) < 10: bad.append('only %d metrics queried' % len(used))
with open(sys.argv[3], 'w') as f:  # each query as a recording rule, for promtool to parse
    f.write('groups:\n- name: dashboard\n  rules:\n')
    for i, e in enumerate(exprs):
        e = e.replace('$__rate_interval', '5m').replace('$model_name', 'm')
        f.write('  - record: dashboard:query_%d\n    expr: %s\n' % (i, json.dumps(e)))
if bad: print('\n'.join(bad))
sys.exit(1 if bad else 0)
PY
if [ $HAVE_PROMTOOL = 1 ]; then
  promtool check rules "$SRV_TMP/rules.yml" > "$SRV_TMP/rules.out" 2>&1 && ok "dashboard: every query is valid PromQL" \
    || bad "dashboard PromQL: $(cat "$SRV_TMP/rules.out")"
fi
finish
