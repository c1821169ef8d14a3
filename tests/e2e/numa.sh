# --numa: each rank on one NUMA node's CPUs and memory, and a line per rank saying where it runs.
# This machine has one node, so a two-node machine is also simulated (G4_NUMA_SYSFS: node0 = CPU 0,
# node1 = CPU 1): rank r takes node r mod nodes, threads and MPI alike, and the output is unchanged.
# The binding comes before the weights are copied (G4_FAULT=engine.bind fails the copy: the line
# saying where the rank runs is already out).
. tests/e2e/_lib.sh
D=tests/data/golden; tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
p=$(golden_ids $D/tiny_tp8__p16.json prompt_ids); want=$(golden_ids $D/tiny_tp8__p16.json generated_ids | cut -d, -f1-4)
node0=$(cat /sys/devices/system/node/node0/cpulist 2>/dev/null || echo "0-$(($(nproc) - 1))")
got=$(timeout 120 $G4TP generate --model $D/tiny_tp8 --tp 2 --numa --prompt-ids "$p" --max-new-tokens 4 2>$tmp/err)
expect_eq "$got" "$want" "--numa: the same ids"
for r in 0 1; do
  grep -qE "^g4tp: rank $r: CPUs [0-9,-]+ \(NUMA node 0 of [0-9]+\), 1 thread; memory " $tmp/err && ok "--numa: rank $r says where it runs" || bad "rank $r: $(cat $tmp/err)"
done
c0=$(sed -n 's/^g4tp: rank 0: CPUs \([0-9]*\) .*/\1/p' $tmp/err); c1=$(sed -n 's/^g4tp: rank 1: CPUs \([0-9]*\) .*/\1/p' $tmp/err)
[ "$(nproc)" -ge 2 ] && { [ -n "$c0" ] && [ "$c0" != "$c1" ] && ok "--numa: ranks sharing a node take different CPUs ($c0, $c1 of node 0: $node0)" || bad "CPUs $c0 / $c1"; }
# the rank's thread is bound before it copies a weight (so --load copy's pages land on its node):
# a failure injected as the weights are bound comes after the rank said where it runs
out=$(G4_FAULT=engine.bind:1 timeout 120 $G4TP generate --model $D/tiny_tp8 --tp 1 --numa --load copy --prompt-ids "$p" --max-new-tokens 1 2>&1)
printf '%s\n' "$out" | grep -n "" | grep -E "rank 0: CPUs|weights" | head -2 | cut -d: -f1 | tr '\n' ' ' > $tmp/order
read -r l_numa l_fail < $tmp/order
[ -n "${l_fail:-}" ] && [ "$l_numa" -lt "$l_fail" ] && printf '%s\n' "$out" | grep -q "out of memory for rank 0's weights" \
  && ok "--numa binds the rank before its weights are copied" || bad "binding order: $out"
if [ "$(nproc)" -ge 2 ]; then
  mkdir -p $tmp/sys/node0 $tmp/sys/node1; echo 0 >$tmp/sys/node0/cpulist; echo 1 >$tmp/sys/node1/cpulist
  got=$(G4_NUMA_SYSFS=$tmp/sys timeout 120 $G4TP generate --model $D/tiny_tp8 --tp 2 --threads 2 --numa --prompt-ids "$p" --max-new-tokens 4 2>$tmp/err)
  expect_eq "$got" "$want" "two simulated nodes: the same ids"
  grep -q "^g4tp: rank 0: CPUs 0 (NUMA node 0 of 2), 2 threads" $tmp/err && grep -q "^g4tp: rank 1: CPUs 1 (NUMA node 1 of 2), 2 threads" $tmp/err \
    && ok "two simulated nodes: rank 0 on node 0 (CPU 0), rank 1 on node 1 (CPU 1)" || bad "two nodes: $(cat $tmp/err)"
  if command -v mpirun >/dev/null; then
    export ASAN_OPTIONS=detect_leaks=0
    got=$(G4_NUMA_SYSFS=$tmp/sys timeout 120 mpirun --oversubscribe --allow-run-as-root -np 2 --bind-to none --mca btl self,vader \
          --mca plm_rsh_agent false -x G4_NUMA_SYSFS $G4TP generate --comm mpi --model $D/tiny_tp8 --numa --prompt-ids "$p" --max-new-tokens 4 2>$tmp/err)
    expect_eq "$got" "$want" "MPI, two simulated nodes: the same ids"
    grep -q "^g4tp: rank 0: CPUs 0 (NUMA node 0 of 2)" $tmp/err && grep -q "^g4tp: rank 1: CPUs 1 (NUMA node 1 of 2)" $tmp/err \
      && ok "MPI: each rank takes the node of its index on the host" || bad "MPI two nodes: $(cat $tmp/err)"
  fi
fi
finish
