#!/usr/bin/env bash
# The KV cache on disk (docs/kvcache.md "On disk"; issue 27 item 2): time to first token of a
# ~4k-token prompt in a fresh server, cold (nothing cached) against restored (--kv-cache-dir
# written by a previous server), alternating; also how long the restart took to read the files.
#   bench/kv_disk_bench.sh [BUILD_DIR] [MODEL_DIR] [PAIRS] [EXTRA SERVE ARGS...]
# MODEL_DIR defaults to the demo; /tmp/g4tp-syn31-tok (bench/kv_bench.sh makes it) is the
# 31B-width model with 2 layers. PARAS (default 260, ~4k tokens) sets the prompt length, MAXCTX
# (default 8192) --max-ctx: the demo takes PARAS=110 MAXCTX=2048.
set -u
B=${1:-build}; M=${2:-models/demo}; PAIRS=${3:-2}; shift $(( $# < 3 ? $# : 3 ))
G4TP=$B/g4tp
T=$(mktemp -d /tmp/g4tp-kvdisk-bench.XXXXXX); trap 'kill $PID 2>/dev/null; rm -rf "$T"' EXIT
PROMPT=$(python3 -c "import os; print(' '.join('Paragraph %d of a long shared document about rivers, mountains and capital cities.' % i for i in range(int(os.environ.get('PARAS', '260')))))")
BODY=$(printf '{"prompt":"%s What is the capital of France?","max_new_tokens":1,"temperature":0}' "$PROMPT")
start() { # start LOGFILE ARGS...: sets PID, URL
  local log=$1; shift
  "$G4TP" serve --model "$M" --port 0 --max-ctx "${MAXCTX:-8192}" "$@" 2>"$log" & PID=$!
  for i in $(seq 1 3000); do
    URL=$(sed -n 's/.*listening on \(http:\/\/[^ ]*\).*/\1/p' "$log" | head -1)
    [ -n "$URL" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "$URL/health")" = 200 ] && return 0
    sleep 0.1
  done
  echo "server did not start"; cat "$log"; exit 1
}
stop() { kill -TERM $PID; wait $PID 2>/dev/null; }
ttft() { curl -s "$URL/generate" -H 'Content-Type: application/json' -d "$BODY" | python3 -c "import json,sys; d=json.load(sys.stdin); 'prompt_tokens' in d or sys.exit(str(d)); print('%.1f' % d['time_to_first_token_ms'], d['prompt_tokens'], d['cached_tokens'])"; }
echo "model $M, $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(date -u +%F' '%H:%M) UTC, args: $*"
printf '| pair | cold TTFT ms | restored TTFT ms | prompt tokens | restored from disk | restart read s |\n|---|---:|---:|---:|---:|---:|\n'
for p in $(seq 1 "$PAIRS"); do
  start "$T/cold.log" "$@"; read -r C N _ < <(ttft); stop
  rm -rf "$T/kv"; start "$T/w.log" --kv-cache-dir "$T/kv" --kv-cache-min-tokens 64 "$@"; ttft >/dev/null
  for i in $(seq 1 600); do curl -s "$URL/metrics" | grep -q '^g4tp_kv_disk_saves_total 1' && break; sleep 0.1; done; stop
  start "$T/r.log" --kv-cache-dir "$T/kv" --kv-cache-min-tokens 64 "$@"
  RS=$(sed -n 's/.*into the prefix cache in \([0-9.]*\) s.*/\1/p' "$T/r.log")
  read -r R _ H < <(ttft); stop
  printf '| %d | %s | %s | %s | %s | %s |\n' "$p" "$C" "$R" "$N" "$H" "$RS"
done
