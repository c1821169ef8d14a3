# Ranks as MPI processes: mpirun -np N g4tp generate --comm mpi gives the golden ids and logits
# byte-identical to the threads backend at TP=1, for N = 2, 4, 8 on tiny_tp8.
. tests/e2e/_lib.sh
command -v mpirun >/dev/null || { echo "mpirun missing (scripts/install-deps.sh installs OpenMPI)"; exit 1; }
export ASAN_OPTIONS=detect_leaks=0  # OpenMPI's own allocations are not ours to chase
D=tests/data/golden
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
MPIRUN="mpirun --oversubscribe --allow-run-as-root --mca btl self,vader --mca plm_rsh_agent false"
for m in tiny_tp8:2,4,8 tiny_default:2,4 tiny_wide:2; do
  name=${m%%:*}; degrees=${m#*:}
  p=$(golden_ids $D/${name}__p40.json prompt_ids); want=$(golden_ids $D/${name}__p40.json generated_ids)
  $G4TP generate --model $D/$name --prompt-ids "$p" --max-new-tokens 16 --dump-all-logits $tmp/ref.bin >/dev/null
  for n in ${degrees//,/ }; do
    got=$(timeout 300 $MPIRUN -np $n $G4TP generate --comm mpi --model $D/$name --prompt-ids "$p" --max-new-tokens 16 --dump-all-logits $tmp/mpi$n.bin 2>$tmp/err)
    expect_eq "$got" "$want" "$name MPI np=$n greedy ids"
    cmp -s $tmp/ref.bin $tmp/mpi$n.bin && ok "$name MPI np=$n logits byte-identical to TP=1" || { bad "$name MPI np=$n logits differ"; cat $tmp/err; }
  done
done
# ranks on CPUs with different kernel sets agree on the best common one (rank 1 limited to AVX2)
if grep -q avx2 /proc/cpuinfo; then
  p=$(golden_ids $D/tiny_tp8__p16.json prompt_ids)
  isa=$(timeout 120 $MPIRUN -np 1 $G4TP generate --comm mpi --model $D/tiny_tp8 --prompt-ids "$p" --max-new-tokens 2 --json : \
        -np 1 -x G4_ISA=avx2 $G4TP generate --comm mpi --model $D/tiny_tp8 --prompt-ids "$p" --max-new-tokens 2 --json 2>/dev/null \
        | python3 -c "import json,sys;print(json.loads(sys.stdin.read().strip().splitlines()[-1])['isa'])")
  expect_eq "$isa" "avx2" "mixed-CPU ranks use the best kernel set all of them run"
fi
# a rank that cannot start (bad model) ends the job with an error, not a hang
out=$(timeout 120 $MPIRUN -np 2 $G4TP generate --comm mpi --model /nonexistent --prompt-ids 2 2>&1); rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] && ok "failing ranks end the job (rc=$rc)" || bad "failing ranks: rc=$rc $out"
rm -rf "$tmp"
finish
