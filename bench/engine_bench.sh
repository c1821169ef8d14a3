#!/usr/bin/env bash
# Engine benchmarks on a synthetic checkpoint with the real 31B widths (hidden 5376, vocab
# 262144, 32 heads, 16/4 KV heads, head dims 256/512, FFN 21504) and 2 layers (one sliding, one
# full): prefill of 512 tokens and decode, bf16, q8_0 and q4_0 (each with its own and a bf16 head),
# TP 1 x 2 threads vs TP 2 x 1 thread
# (threads and MPI), plus all-reduce latency/bandwidth per backend. Prints markdown rows.
#   bench/engine_bench.sh [BUILD_DIR] [MODEL_DIR]
set -u
B=${1:-build}
M=${2:-/tmp/g4tp-syn31b-2l}
G4TP=$B/g4tp
MPIRUN="mpirun --oversubscribe --allow-run-as-root --bind-to none --mca btl self,vader --mca plm_rsh_agent false"
[ -f "$M/config.json" ] || $G4TP synth --like tests/data/spec/gemma-4-31B-it.config.json --layers 2 --out "$M" >/dev/null
row() { # label, then g4tp bench args
  label=$1; shift
  j=$("$@" --json 2>/dev/null | tail -1)
  python3 - "$label" "$j" <<'PY'
import json, sys
label, j = sys.argv[1], sys.argv[2]
try:
    d = json.loads(j)
except Exception:
    print(f"| {label} | failed | | | | | |"); sys.exit()
pf = d.get('decode_paired_bound_fraction')
pf = f"{100*pf:.0f} %" if pf else "n/a"
rf = d.get('decode_read_bound_fraction')
rf = f"{100*rf:.0f} % of read-only {d['read_bandwidth_gb_s']:.1f} GB/s" if rf else "n/a"
print(f"| {label} | {d['prefill_tok_s']:.1f} | {100*d['prefill_bound_fraction']:.0f} % of {d['fma_peak_gflops']:.0f} GFLOP/s | "
      f"{d['decode_tok_s']:.2f} ({d['decode_median_tok_s']:.2f}) | {100*d['decode_bound_fraction']:.0f} % of {d['decode_bound_tok_s']:.2f} ({d['bandwidth_gb_s']:.1f} GB/s); paired {pf}; {rf} | "
      f"{d['ttft_ms']/1000:.1f} s | {d['load_s']:.1f} s, {d['peak_rss_mb']:.0f} MB |")
PY
}
echo "| configuration | prefill tok/s | prefill vs FMA peak | decode tok/s mean (median step) | decode vs bandwidth bound | TTFT | load, peak RSS |"
echo "| --- | ---: | --- | ---: | --- | ---: | --- |"
A="--model $M --prompt-len 512 --gen 16"
for load in copy mmap; do
  row "bf16, TP 1 x 2 threads, --load $load" $G4TP bench $A --threads 2 --load $load
done
row "bf16, TP 2 x 1 thread (threads), --load copy" $G4TP bench $A --tp 2 --threads 1 --load copy
row "q8_0, TP 1 x 2 threads, --load copy" $G4TP bench $A --threads 2 --dtype q8_0 --load copy
row "q8_0, TP 2 x 1 thread (threads), --load copy" $G4TP bench $A --tp 2 --threads 1 --dtype q8_0 --load copy
row "q8_0 with a bf16 head, TP 1 x 2 threads, --load copy" $G4TP bench $A --threads 2 --dtype q8_0 --head-dtype bf16 --load copy
row "q4_0, TP 1 x 2 threads, --load copy" $G4TP bench $A --threads 2 --dtype q4_0 --load copy
row "q4_0, TP 2 x 1 thread (threads), --load copy" $G4TP bench $A --tp 2 --threads 1 --dtype q4_0 --load copy
row "q4_0 with a bf16 head, TP 1 x 2 threads, --load copy" $G4TP bench $A --threads 2 --dtype q4_0 --head-dtype bf16 --load copy
row "bf16, TP 2 x 1 thread (MPI), --load copy" $MPIRUN -np 2 $G4TP bench $A --comm mpi --threads 1 --load copy
echo
$B/bench/bench_comm 2
$MPIRUN -np 2 $B/bench/bench_comm --mpi
