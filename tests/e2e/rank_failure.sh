# A rank that fails never hangs the job: within a bounded time g4tp says which rank failed,
# in-flight requests end with an API error (streams: an error event, then [DONE]; others: a 5xx),
# /health says 503 "failed", and the server exits 1. Threads: a follower rank made to fail
# (G4_TEST_FAIL_RANK; a thread cannot be killed alone). MPI, one rank per network namespace when
# namespaces can be made (tests/e2e/_netns.bash), else both on this host over TCP: kill -9 of
# rank 1 during generate and during serve, and SIGTERM to mpirun during serve (the drain is cut to
# what the launcher allows, so streams still end with their error and [DONE]).
. tests/e2e/_lib.sh
. tests/e2e/server_common.bash
. tests/e2e/_netns.bash
trap 'srv_cleanup; netns_cleanup' EXIT
G4TP=$(readlink -f "$G4TP"); D=tests/data/golden; T=$SRV_TMP
make_slow_model || { bad "slow model"; finish; exit 1; }
LIMIT=$((30 * SLOW))   # "bounded": seconds from the failure to the end of the job
p=$(golden_ids $D/tiny_tp8__p40.json prompt_ids)

since() { echo $(( $(date +%s) - $1 )); }
# stream_end FILE: the last two data events of an SSE stream, as "ERROR:<message> DONE" or what is there
stream_end() {
  python3 - "$1" <<'PY'
import json, sys
ev = [l[6:] for l in open(sys.argv[1], errors='replace').read().split('\n') if l.startswith('data: ')]
if len(ev) < 2: print('short stream: %r' % ev); sys.exit()
try: e = json.loads(ev[-2]).get('error')
except Exception: e = None
print(('ERROR:' + e['message'] if e else 'no error event') + ' ' + ('DONE' if ev[-1] == '[DONE]' else 'no [DONE]'))
PY
}
n_chunks() { grep -c '^data: {"id"' "$1" 2>/dev/null; }
wait_chunks() { # FILE N: until the stream has N text chunks (bounded)
  local i; for i in $(seq 1 $((300 * SLOW))); do [ "$(n_chunks "$1")" -ge "$2" ] && return 0; sleep 0.1; done; return 1
}
# clients run as "${CL[@]}" curl ... (CL: empty, or the namespace of rank 0)
CL=()
BODY='{"prompt":"hello","max_tokens":1900,"ignore_eos":true'
start_stream() { "${CL[@]}" curl -H 'Content-Type: application/json' -sN --max-time $((120 * SLOW)) "$URL/v1/completions" -d "$BODY,\"stream\":true}" >$T/stream.out & STREAM_PID=$!; }
# a long stream and a long plain request against URL: STREAM_PID, PLAIN_PID
start_clients() {
  start_stream
  "${CL[@]}" curl -H 'Content-Type: application/json' -s --max-time $((120 * SLOW)) -o $T/plain.out -w '%{http_code}' "$URL/v1/completions" -d "$BODY}" >$T/plain.code &
  PLAIN_PID=$!
}
wait_ready() { local i; for i in $(seq 1 $((300 * SLOW))); do [ "$("${CL[@]}" curl -s -o /dev/null -w '%{http_code}' --max-time 2 $URL/health)" = 200 ] && return 0; sleep 0.2; done; return 1; }
check_clients() { # WHAT RANK_WORDS
  wait $STREAM_PID $PLAIN_PID
  local end; end=$(stream_end $T/stream.out)
  [[ "$end" == ERROR:*"$2"*" DONE" ]] && ok "$1: the stream ends with an error event naming $2, then [DONE]" || bad "$1: stream end: $end"
  local code; code=$(cat $T/plain.code)
  [[ "$code" == 5* ]] && grep -q "$2" $T/plain.out && ok "$1: the plain request gets $code naming $2" || bad "$1: plain: $code $(cat $T/plain.out)"
}
health_failed() { # polls /health until 503 "failed" (bounded)
  local i h
  for i in $(seq 1 $((50 * SLOW))); do
    h=$("${CL[@]}" curl -s --max-time 2 "$URL/health")
    [[ "$h" == *'"status":"failed"'* ]] && { echo "$h"; return 0; }
    sleep 0.1
  done
  echo "$h"; return 1
}

# ---- threads: a follower rank fails in a step ----
t0=$(date +%s)
out=$(G4_TEST_FAIL_RANK=1:3 timeout $LIMIT "$G4TP" generate --tp 2 --model $D/tiny_tp8 --prompt-ids "$p" --max-new-tokens 16 2>&1); rc=$?
[ $rc = 1 ] && [[ "$out" == *"rank 1 failed: injected failure"* ]] && ok "threads generate: rank 1's failure ends the run (rc 1) naming it" \
  || bad "threads generate: rc=$rc $out"
# the failure comes at rank 1's 40th step: both requests run by then
G4_TEST_FAIL_RANK=1:40 srv_launch --model "$SLOW_MODEL" --tp 2 --drain-seconds 3 && srv_wait_ready || { bad "threads serve starts"; finish; exit 1; }
start_clients
h=$(health_failed); [ $? = 0 ] && [[ "$h" == *"rank 1"* ]] && ok "threads serve: /health says 503 failed, naming rank 1" || bad "threads serve: /health: $h"
check_clients "threads serve" "rank 1"
t0=$(date +%s)
for i in $(seq 1 $((LIMIT * 10))); do kill -0 $SRV_PID 2>/dev/null || break; sleep 0.1; done
if kill -0 $SRV_PID 2>/dev/null; then bad "threads serve still runs after the failure"; else
  wait $SRV_PID; expect_eq "$?" 1 "threads serve exits 1 after a rank failure"; SRV_PID=; fi
grep -q "rank 1 failed" $SRV_LOG && ok "threads serve logs the failed rank" || bad "threads serve log: $(tail -5 $SRV_LOG)"

# ---- MPI: kill -9 of rank 1 ----
export ASAN_OPTIONS=detect_leaks=0:${ASAN_OPTIONS:-}  # OpenMPI's own allocations are not ours to chase
netns_setup >$T/netns.log; nrc=$?
if [ $nrc = 0 ]; then
  where="across two namespaces"; RUN=(ns_mpirun -x G4_TEST_MARK=$$); CL=(ip netns exec $NS_A); HOST=$ADDR_A
else
  [ $nrc = 77 ] || { bad "netns setup: $(cat $T/netns.log)"; finish; exit 1; }
  echo "# $(cat $T/netns.log); MPI ranks on this host, over TCP"
  where="on one host"; CL=(); HOST=127.0.0.1
  RUN=(timeout 180 mpirun --oversubscribe --allow-run-as-root -np 2 --bind-to none --mca btl self,tcp --mca plm_rsh_agent false -x G4_TEST_MARK=$$)
fi
# rank R of our job: found by the marker in its environment, never by name alone
rank_pid() {
  local q
  for q in $(pgrep -x g4tp); do
    cat "/proc/$q/environ" 2>/dev/null | tr '\0' '\n' | grep -qx "G4_TEST_MARK=$$" || continue
    cat "/proc/$q/environ" 2>/dev/null | tr '\0' '\n' | grep -qx "OMPI_COMM_WORLD_RANK=$1" && { echo "$q"; return; }
  done
}
wait_rank() { local i q; for i in $(seq 1 $((200 * SLOW))); do q=$(rank_pid "$1"); [ -n "$q" ] && { echo "$q"; return; }; sleep 0.1; done; }

# generate
"${RUN[@]}" "$G4TP" generate --comm mpi --model "$SLOW_MODEL" --prompt-ids 2,100,200 --max-new-tokens 1900 >/dev/null 2>$T/gen.err &
L=$!
r1=$(wait_rank 1); sleep $((2 * SLOW))
t0=$(date +%s); kill -KILL $r1
for i in $(seq 1 $((LIMIT * 10))); do kill -0 $L 2>/dev/null || break; sleep 0.1; done
if kill -0 $L 2>/dev/null; then bad "MPI generate $where: still running $LIMIT s after kill -9 of rank 1"; kill -KILL $L; else
  wait $L; rc=$?; [ $rc != 0 ] && ok "MPI generate $where: kill -9 of rank 1 ends the job in $(since $t0) s (rc $rc)" || bad "MPI generate: rc 0"; fi
# rank 0 names the failed rank, unless the launcher's own kill (OpenMPI aborts the job when a
# process dies) reached it first: then mpirun names it (a race on a slow build, e.g. ASan)
if grep -qE "g4tp generate: error: rank 0: rank 1('s process ended| did not answer)" $T/gen.err; then ok "MPI generate: rank 0 says rank 1 is gone"
elif grep -q "process rank 1 .* exited on signal 9" $T/gen.err && ! grep -q "g4tp generate: error" $T/gen.err; then ok "MPI generate: the launcher ended the job first, naming rank 1"
else bad "MPI generate: $(tail -5 $T/gen.err)"; fi

# serve (the launcher's SIGTERM comes 4 s after its SIGCONT here, so /health can be seen saying 503)
port=18090; URL=http://$HOST:$port
"${RUN[@]}" --mca odls_base_sigkill_timeout 4 "$G4TP" serve --comm mpi --model "$SLOW_MODEL" --host $HOST --port $port --drain-seconds 3 \
  >/dev/null 2>$T/srv.err &
L=$!
wait_ready || bad "MPI serve $where: not ready"
start_clients
wait_chunks $T/stream.out 3 || bad "MPI serve: no tokens streamed"
t0=$(date +%s); kill -KILL "$(rank_pid 1)"
h=$(health_failed); [ $? = 0 ] && [[ "$h" == *"rank 0: rank 1"* ]] && ok "MPI serve $where: /health 503 failed, naming rank 1" || bad "MPI serve: /health: $h"
check_clients "MPI serve $where, kill -9 of rank 1" "rank 1"
for i in $(seq 1 $((LIMIT * 10))); do kill -0 $L 2>/dev/null || break; sleep 0.1; done
if kill -0 $L 2>/dev/null; then bad "MPI serve: the job still runs $LIMIT s after the failure"; kill -KILL $L; else
  wait $L; ok "MPI serve: the job ended $(since $t0) s after kill -9 of rank 1"; fi
grep -q "g4tp serve: rank 0: rank 1" $T/srv.err && ok "MPI serve: rank 0 logs which rank failed" || bad "MPI serve log: $(grep g4tp $T/srv.err)"

# SIGTERM to mpirun with OpenMPI's defaults (SIGKILL 2 s after its first signal): the drain is cut short
"${RUN[@]}" "$G4TP" serve --comm mpi --model "$SLOW_MODEL" --host $HOST --port $port --drain-seconds 10 >/dev/null 2>$T/srv2.err &
L=$!
wait_ready || bad "MPI serve $where: not ready"
start_stream
wait_chunks $T/stream.out 3 || bad "MPI serve: no tokens streamed"
mp=$(for q in $(pgrep -x mpirun); do tr '\0' ' ' <"/proc/$q/cmdline" | grep -q "G4_TEST_MARK=$$" && echo $q; done | head -1)
t0=$(date +%s); kill -TERM "$mp"
wait $STREAM_PID
end=$(stream_end $T/stream.out)
[[ "$end" == ERROR:*" DONE" ]] && ok "SIGTERM to mpirun: the stream ends with an error event, then [DONE]" || bad "SIGTERM to mpirun: stream end: $end"
for i in $(seq 1 $((LIMIT * 10))); do kill -0 $L 2>/dev/null || break; sleep 0.1; done
kill -0 $L 2>/dev/null && { bad "SIGTERM to mpirun: still running after $LIMIT s"; kill -KILL $L; } || ok "SIGTERM to mpirun: the job ended in $(since $t0) s"
grep -q "g4tp serve: stopped" $T/srv2.err && ok "SIGTERM to mpirun: rank 0 drained and stopped before the launcher's SIGKILL" \
  || bad "SIGTERM to mpirun: $(grep g4tp $T/srv2.err)"
finish
