#!/usr/bin/env bash
# MPI across a real network hop with added latency: two network namespaces (tests/e2e/_netns.bash),
# one rank and one CPU in each, OpenMPI's TCP transport; the link is the veth pair (no added
# latency) or bench/tun_relay holding each packet 0.1 ms or 1 ms per direction. Per link: the
# all-reduce latency by message size (bench_comm) and decode/prefill speed on the 31B-width
# 2-layer synthetic checkpoint (g4tp bench). Needs root. Prints markdown rows.
#   bench/netns_bench.sh [BUILD_DIR] [MODEL_DIR] [DELAYS_US]
set -u
cd "$(dirname "$0")/.."
B=$(readlink -f "${1:-build}"); M=${2:-/tmp/g4tp-syn31b-2l}; DELAYS=${3:-"0 100 1000"}
. tests/e2e/_lib.sh
. tests/e2e/_netns.bash
trap netns_cleanup EXIT
make -s BUILD="$B" "$B/bench/bench_comm" "$B/bench/tun_relay" >/dev/null || exit 1
[ -f "$M/config.json" ] || "$B/g4tp" synth --like tests/data/spec/gemma-4-31B-it.config.json --layers 2 --out "$M" >/dev/null
netns_setup || exit 1
export NS_TIMEOUT=900
echo "| link (one-way delay) | all-reduce 256 B | 21 KiB (one token) | 1 MiB | 4 MiB | decode tok/s mean (median step) | prefill 128 tok/s |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for d in $DELAYS; do
  if [ "$d" = 0 ]; then ns_veth_link; label="veth"; else ns_tun_link "$B/bench/tun_relay" "$d" || exit 1; label="tun relay, $(awk "BEGIN{print $d/1000}") ms"; fi
  c=$(ns_mpirun "$B/bench/bench_comm" --mpi 2>/dev/null)
  lat() { echo "$c" | awk -v s="$1" '$1==s {printf "%.0f us", $2}'; }
  j=$(ns_mpirun "$B/g4tp" bench --comm mpi --model "$M" --prompt-len 128 --gen 16 --json 2>/dev/null | tail -1)
  dec=$(python3 -c "import json,sys;d=json.loads(sys.argv[1]);print('%.2f (%.2f) | %.1f' % (d['decode_tok_s'], d['decode_median_tok_s'], d['prefill_tok_s']))" "$j" 2>/dev/null || echo "failed | failed")
  echo "| $label | $(lat 256) | $(lat 21504) | $(lat 1048576) | $(lat 4194304) | $dec |"
done
