# Helpers for the server end-to-end scripts (sourced after _lib.sh; not a test itself).
# srv_start ARGS...  starts `$G4TP serve --port 0 ARGS` on 127.0.0.1, waits for /health 200;
#                    sets SRV_PID, SRV_LOG, URL. srv_stop sends SIGTERM and waits (sets SRV_RC).
SRV_PID=; SRV_LOG=; URL=
SRV_TMP=$(mktemp -d /tmp/g4tp-srv-test.XXXXXX)
# under ASan everything is several times slower
SLOW=1; [ "${G4_SAN:-0}" = 1 ] && SLOW=4
srv_cleanup() { [ -n "$SRV_PID" ] && kill -KILL "$SRV_PID" 2>/dev/null; rm -rf "$SRV_TMP"; }
trap srv_cleanup EXIT

srv_launch() { # like srv_start without waiting for /health (returns once the port is known)
  SRV_LOG=$(mktemp "$SRV_TMP/log.XXXXXX")
  local pf=(--port 0)
  [ -n "${SRV_PORT_FROM_ENV:-}" ] && pf=()  # let PORT from the environment decide
  "$G4TP" serve "${pf[@]}" "$@" 2>"$SRV_LOG" &
  SRV_PID=$!
  local port="" i
  for i in $(seq 1 $((300 * SLOW))); do
    port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9][0-9]*\).*/\1/p' "$SRV_LOG" | head -1)
    [ -n "$port" ] && break
    kill -0 "$SRV_PID" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$port" ]; then echo "server did not start:"; cat "$SRV_LOG"; return 1; fi
  URL=http://127.0.0.1:$port
}

srv_wait_ready() {
  local i
  for i in $(seq 1 $((600 * SLOW))); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$URL/health")" = 200 ] && return 0
    kill -0 "$SRV_PID" 2>/dev/null || break
    sleep 0.1
  done
  echo "server not ready:"; cat "$SRV_LOG"; return 1
}

srv_start() { srv_launch "$@" && srv_wait_ready; }

srv_stop() {
  kill -TERM "$SRV_PID" 2>/dev/null
  local i
  for i in $(seq 1 $((300 * SLOW))); do kill -0 "$SRV_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$SRV_PID" 2>/dev/null; then kill -KILL "$SRV_PID"; SRV_RC=137; else wait "$SRV_PID"; SRV_RC=$?; fi
  SRV_PID=
}

# post PATH JSON [curl args...]: prints the body, then sets CODE
post() {
  local path=$1 body=$2; shift 2
  local out; out=$(curl -s --max-time $((60 * SLOW)) -w '\n%{http_code}' -H 'Content-Type: application/json' "$@" -d "$body" "$URL$path")
  CODE=${out##*$'\n'}
  BODY=${out%$'\n'*}
}

# jq-like checks in Python: pyck 'EXPR' evaluates EXPR with d = json of $BODY
pyck() { printf '%s' "$BODY" | python3 -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if ($1) else 1)" 2>/dev/null; }
pyget() { printf '%s' "$BODY" | python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

# expect_error STATUS CODE_STRING WHAT: checks $CODE and the OpenAI error shape in $BODY
expect_error() {
  if [ "$CODE" = "$1" ] && pyck "set(d['error'].keys())=={'message','type','param','code'} and d['error']['message'] and (d['error']['code']=='$2' or '$2'=='*')"; then
    ok "$3"
  else bad "$3: got $CODE $BODY"; fi
}

metric() { curl -s --max-time 10 "$URL/metrics" | awk -v n="$1" '$1==n {print $2}'; }

# A slow random-weight model (demo tokenizer and template, wider layers): long generations
# that do not stop early, for cancellation and queueing tests.
# A random-weight model slow enough that the disconnect and shutdown tests catch it mid-generation:
# ~160 MB of weights per token, ~220 tok/s on the 2-vCPU development VM, so 1900 tokens take
# ~8 s against those tests' 2 s client timeouts (intermediate 2048 ran 1900 tokens in ~2 s once
# the batched-decode work made it faster, and the test failed).
make_slow_model() {
  local d=$SRV_TMP/slow
  mkdir -p "$d/cfg"
  python3 -c "
import json,sys;c=json.load(open('models/demo/config.json'));c['hidden_size']=512;c['intermediate_size']=8192;c['num_attention_heads']=8
json.dump(c,open(sys.argv[1],'w'))" "$d/cfg/config.json"
  "$G4TP" synth --like "$d/cfg/config.json" --out "$d/m" >/dev/null || return 1
  cp models/demo/tokenizer.json models/demo/tokenizer_config.json models/demo/chat_template.jinja models/demo/generation_config.json "$d/m/"
  SLOW_MODEL=$d/m
}

# raw_http HEX_OR_TEXT [halfclose]: sends the bytes (printf escapes) on a fresh connection to
# $URL, optionally shuts down its write side, reads until the server closes (or 30 s * SLOW of
# silence) and prints the answer; the last line is "<<eof>>" or "<<timeout>>".
raw_http() {
  python3 - "${URL##*:}" "$1" "${2:-}" $((30 * SLOW)) <<'PY'
import socket, sys
port, data, hc, t = int(sys.argv[1]), sys.argv[2].encode().decode('unicode_escape').encode('latin-1'), sys.argv[3], int(sys.argv[4])
s = socket.create_connection(('127.0.0.1', port)); s.settimeout(t)
s.sendall(data)
if hc: s.shutdown(socket.SHUT_WR)
out, end = b'', '<<eof>>'
try:
    while True:
        b = s.recv(65536)
        if not b: break
        out += b
except (socket.timeout, ConnectionResetError): end = '<<timeout>>'
sys.stdout.write(out.decode('utf-8', 'replace') + '\n' + end + '\n')
PY
}

# The demo model with a 32768-token context (its config says 2048): long generations at the
# demo's speed, e.g. a greedy answer, then <turn|> and, under ignore_eos, tokens whose text the
# output parser drops (everything after the end of the turn) for a long time.
make_long_demo_model() {
  local d=$SRV_TMP/longdemo f
  mkdir -p "$d"
  for f in "$PWD"/models/demo/*; do ln -sf "$f" "$d/"; done
  rm "$d/config.json"
  python3 -c "
import json,sys;c=json.load(open('models/demo/config.json'));c['max_position_embeddings']=32768
json.dump(c,open(sys.argv[1],'w'))" "$d/config.json" || return 1
  LONG_DEMO_MODEL=$d
}

# node_tests FILE WHAT: runs `node --test FILE` against the server ($URL, $KEY) and reports it.
node_tests() {
  if G4TP_URL=$URL G4TP_KEY=$KEY timeout $((300*SLOW)) node --test "$1" > "$SRV_TMP/node.log" 2>&1; then
    ok "$2 ($(grep -c '^ok ' "$SRV_TMP/node.log") passed)"
  else
    bad "$2"; cat "$SRV_TMP/node.log"
  fi
}
