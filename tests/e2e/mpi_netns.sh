# Multi-host MPI across a real network hop: two network namespaces joined by a veth pair
# (tests/e2e/_netns.bash), one rank in each, OpenMPI's TCP transport only. Checks: greedy ids and
# logits byte-identical to TP 1 (the traffic crossed the veth; also over a link that holds every
# packet 1 ms, bench/tun_relay); each rank ran in its own
# namespace and opened only its own artifact file; `g4tp serve --comm mpi` answers from rank 0's
# namespace and across the hop from the other, and SIGUSR1 to mpirun drains and ends the job
# with status 0. Skipped (77) where namespaces cannot be made (not root, no ip).
. tests/e2e/_lib.sh
. tests/e2e/_netns.bash
# the sanitizer flavour adds nothing here that tp_mpi.sh and rank_failure.sh do not check
[ "${G4_SAN:-0}" = 1 ] && { echo "skipped under the sanitizer build (same paths as tp_mpi.sh)"; exit 77; }
trap netns_cleanup EXIT
netns_setup; rc=$?; [ $rc -ne 0 ] && exit $rc
command -v strace >/dev/null || { echo "strace missing (scripts/install-deps.sh installs it)"; exit 1; }
G4TP=$(readlink -f "$G4TP"); D=tests/data/golden; T=$NS_TMP

# --- generate: ids and logits across the hop, each rank in its own namespace ---
p=$(golden_ids $D/tiny_tp8__p40.json prompt_ids); want=$(golden_ids $D/tiny_tp8__p40.json generated_ids)
timeout 120 "$G4TP" generate --model $D/tiny_tp8 --prompt-ids "$p" --max-new-tokens 16 --dump-all-logits $T/ref.bin >/dev/null
timeout 120 "$G4TP" shard --model $D/tiny_tp8 --tp 2 --out $T/art >/dev/null 2>&1 || bad "shard --tp 2"
# each rank: record its namespace and the files it opens, then run g4tp
cat >$T/rank.sh <<EOF
#!/bin/sh
r=\$OMPI_COMM_WORLD_RANK
readlink /proc/self/ns/net >$T/ns.\$r
exec strace -f -qq -e trace=open,openat -o $T/open.\$r "\$@"
EOF
chmod +x $T/rank.sh
rx0=$(ns_rx_bytes $NS_B)
for m in $D/tiny_tp8 $T/art; do
  rm -f $T/open.* $T/ns.*
  got=$(ns_mpirun $T/rank.sh "$G4TP" generate --comm mpi --model $m --prompt-ids "$p" --max-new-tokens 16 \
        --dump-all-logits $T/mpi.bin 2>$T/err)
  expect_eq "$got" "$want" "$(basename $m): greedy ids across the hop"
  cmp -s $T/ref.bin $T/mpi.bin && ok "$(basename $m): logits byte-identical to TP 1" || { bad "$(basename $m): logits differ"; tail -20 $T/err; }
done
rx1=$(ns_rx_bytes $NS_B)
[ $((rx1 - rx0)) -gt 100000 ] && ok "the ranks talked over the veth ($((rx1 - rx0)) bytes into B)" || bad "veth carried $((rx1 - rx0)) bytes"
nsA=$(ip netns exec $NS_A readlink /proc/self/ns/net); nsB=$(ip netns exec $NS_B readlink /proc/self/ns/net)
expect_eq "$(cat $T/ns.0 2>/dev/null) $(cat $T/ns.1 2>/dev/null)" "$nsA $nsB" "rank 0 ran in namespace A, rank 1 in B"
for r in 0 1; do
  mine=$(grep -c "rank-0000$r-of-00002.g4w" $T/open.$r); other=$(grep -c "rank-0000$((1 - r))-of-00002.g4w" $T/open.$r)
  [ "$mine" -gt 0 ] && [ "$other" -eq 0 ] && ok "rank $r opened only its own artifact file" || bad "rank $r opened own=$mine other=$other"
done

# --- the same over a link that holds every packet 1 ms (bench/tun_relay between two TUN devices) ---
if cc -O2 -o $T/tun_relay bench/tun_relay.c 2>$T/cc.err && ns_tun_link $T/tun_relay 1000; then
  got=$(ns_mpirun "$G4TP" generate --comm mpi --model $D/tiny_tp8 --prompt-ids "$p" --max-new-tokens 16 --dump-all-logits $T/mpi.bin 2>$T/err)
  expect_eq "$got" "$want" "greedy ids over a 1 ms link"
  cmp -s $T/ref.bin $T/mpi.bin && ok "logits over a 1 ms link byte-identical to TP 1" || { bad "1 ms link: logits differ"; tail -20 $T/err; }
  ns_veth_link
else bad "the 1 ms link: $(cat $T/cc.err $T/relay.out 2>/dev/null)"; fi

# --- serve: rank 0 listens in A; clients in A and, across the hop, in B ---
port=18080
ns_mpirun "$G4TP" serve --comm mpi --host $ADDR_A --port $port --drain-seconds 5 >$T/srv.out 2>$T/srv.err &
L=$!
code=""
for i in $(seq 1 300); do
  code=$(ip netns exec $NS_A curl -s -o /dev/null -w '%{http_code}' --max-time 2 http://$ADDR_A:$port/health)
  [ "$code" = 200 ] && break
  kill -0 $L 2>/dev/null || break
  sleep 0.2
done
expect_eq "$code" 200 "serve --comm mpi: /health from rank 0's namespace"
q='{"prompt":"What is the capital of France?","temperature":0}'
for ns in $NS_A $NS_B; do
  ans=$(ip netns exec $ns curl -H 'Content-Type: application/json' -s --max-time 60 http://$ADDR_A:$port/generate -d "$q" | python3 -c "import json,sys;print(json.load(sys.stdin)['response'])" 2>&1)
  expect_eq "$ans" "The capital of France is Paris." "serve --comm mpi answers Paris to a client in $([ $ns = $NS_A ] && echo A || echo "B, across the hop")"
done
grep -q "tp 2" $T/srv.err && ok "the server runs tp 2" || bad "server log: $(cat $T/srv.err)"
# SIGUSR1 to mpirun reaches every rank at once: rank 0 drains, the job ends by itself with 0
kill -USR1 "$(ns_pids $NS_A mpirun | head -1)"
for i in $(seq 1 300); do kill -0 $L 2>/dev/null || break; sleep 0.1; done
if kill -0 $L 2>/dev/null; then bad "the job did not end within 30 s of SIGUSR1"; else wait $L; rc=$?; expect_eq "$rc" 0 "SIGUSR1 to mpirun: drained, every rank exited 0"; [ $rc = 0 ] || cat $T/srv.err; fi
grep -q "SIGUSR1: draining" $T/srv.err && ok "rank 0 drained on SIGUSR1" || bad "no drain: $(tail -5 $T/srv.err)"
finish
