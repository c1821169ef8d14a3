#!/usr/bin/env bash
# g4tp bench: the --json object has every documented key with sane values, the text report has
# its lines, bad options are refused; on a model this small the paired probe is not run (null), on
# one over 256 MB it is, and the peak RSS leaves its buffer out.
cd "$(dirname "$0")/../.."
source tests/e2e/_lib.sh
M=tests/data/golden/tiny_default

j=$($G4TP bench --model $M --prompt-len 8 --gen 4 --threads 2 --json 2>/dev/null | tail -1)
python3 - "$j" <<'PY' && ok "bench --json: every key, sane values" || bad "bench --json: $j"
import json, sys
d = json.loads(sys.argv[1])
pos = ["prefill_tok_s", "decode_tok_s", "ttft_ms", "load_s", "peak_rss_mb", "weight_bytes_per_token",
       "bandwidth_gb_s", "decode_bound_fraction", "fma_peak_gflops", "prefill_bound_fraction",
       "decode_median_tok_s", "decode_bound_tok_s", "prefill_gflops", "read_bandwidth_gb_s",
       "decode_read_bound_fraction"]
for k in pos:
    assert isinstance(d[k], (int, float)) and d[k] > 0, k
assert d["decode_paired_bound_fraction"] is None      # 4 MB of weights: not measured
assert d["prompt_len"] == 8 and d["gen"] == 4 and d["tp"] == 1 and d["threads"] == 2
assert d["isa"] in ("scalar", "avx2", "avx512")
# the bound is weight bytes over the probe bandwidth
assert abs(d["decode_bound_tok_s"] - d["bandwidth_gb_s"] * 1e9 / d["weight_bytes_per_token"]) < 1e-3 * d["decode_bound_tok_s"]
# and the read-only fraction is decode bytes per second over the read-only stream
rf = d["decode_tok_s"] * d["weight_bytes_per_token"] / (d["read_bandwidth_gb_s"] * 1e9)
assert abs(d["decode_read_bound_fraction"] - rf) < 1e-3 * rf
# the probes stream the weights' bytes (at least 64 MiB), never more than 4 x the last-level cache
assert d["llc_mb"] > 0
mib = 1048576 / 1e6
assert d["probe_mb"] >= 64 * mib - 1e-6 and d["probe_mb"] <= max(64 * mib, 4 * d["llc_mb"], d["weight_bytes_per_token"] / 1e6) + 1e-6, d["probe_mb"]
# a bare read of the weight pages themselves, and the decode against it
assert d["weights_read_gb_s"] > 0
wf = d["decode_tok_s"] * d["weight_bytes_per_token"] / (d["weights_read_gb_s"] * 1e9)
assert abs(d["decode_weights_read_fraction"] - wf) < 1e-3 * wf
# the prefill's own bound: the demo's bf16 weights in exact math against the fp32 FMA peak
assert d["weight_dtype"] == "bf16" and d["prefill_peak_kind"] == "fp32 FMA"
assert abs(d["prefill_peak_fraction"] - d["prefill_bound_fraction"]) < 1e-9
PY

# where the time went: the decode's steps alone, the prefill's 8 tokens (one pass of 8) by phase
python3 - "$j" <<'PY' && ok "bench --json: decode_phases and prefill_phases" || bad "bench phases: $j"
import json, sys
d = json.loads(sys.argv[1])
names = ["qkv", "attention", "o_proj", "gate_up", "down_proj", "head", "allreduce", "other"]
(dp,) = d["decode_phases"]
assert dp["rank"] == 0 and dp["steps"] == 4, dp                 # not the prefill's pass
(pp,) = d["prefill_phases"]
assert pp["rank"] == 0 and pp["tokens"] == 8, pp
assert sorted(pp["ms"]) == sorted(names), pp
for k in ["qkv", "attention", "o_proj", "gate_up", "down_proj", "head"]:
    assert pp["ms"][k] > 0, (k, pp)
# GFLOP/s for the matrix phases only (the head's logits are the last token's), within the peak
assert sorted(pp["gflops"]) == ["down_proj", "gate_up", "o_proj", "qkv"], pp
assert all(0 < g < 1.05 * d["fma_peak_gflops"] for g in pp["gflops"].values()), pp
# the phases are parts of the prefill's wall time
assert sum(pp["ms"].values()) <= d["ttft_ms"] * 1.001 + 0.01, (pp, d["ttft_ms"])
PY

# a prompt whose last chunk is one token (9 at --max-batch 8): that pass is a one-token pass, not
# one of the decode's steps, and the prefill's phases count the 8-token pass
j9=$($G4TP bench --model $M --prompt-len 9 --max-batch 8 --gen 3 --json 2>/dev/null | tail -1)
python3 - "$j9" <<'PY' && ok "bench --json: a one-token prefill chunk is not a decode step" || bad "bench phases, 9 tokens: $j9"
import json, sys
d = json.loads(sys.argv[1])
assert d["decode_phases"][0]["steps"] == 3 and d["prefill_phases"][0]["tokens"] == 8, d
PY

# q8_0 weights: against the int8 dot-product peak where the CPU has AVX512-VNNI
j=$($G4TP bench --model $M --dtype q8_0 --prompt-len 8 --gen 2 --json 2>/dev/null | tail -1)
vnni=0; grep -qw avx512_vnni /proc/cpuinfo && [ "${G4_ISA:-}" = "" ] && vnni=1
python3 - "$j" "$vnni" <<'PY' && ok "bench --json: q8_0 prefill against the int8 peak" || bad "bench q8_0 peak: $j"
import json, sys
d = json.loads(sys.argv[1])
assert d["weight_dtype"] == "q8_0"
if sys.argv[2] == "1" and d["isa"] == "avx512":
    assert d["int8_peak_gops"] > d["fma_peak_gflops"], d          # 64 byte products vs 16 FMAs per instruction
    assert d["prefill_peak_kind"] == "int8 dot product"
    assert abs(d["prefill_peak_fraction"] - d["prefill_gflops"] / d["int8_peak_gops"]) < 1e-4 * d["prefill_peak_fraction"]
else:
    assert d["prefill_peak_kind"] == "fp32 FMA"
PY

# over 256 MB of weights (a 1-layer model with a 131072 x 1024 head): the paired probe runs
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$M/config.json" "$tmp/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["text_config"].update(hidden_size=1024, vocab_size=131072)
json.dump(c, open(sys.argv[2], "w"))
PY
$G4TP synth --like $tmp/config.json --layers 1 --out $tmp/big >/dev/null || bad "synth a 268 MB model"
j=$($G4TP bench --model $tmp/big --tp 2 --prompt-len 4 --gen 4 --json 2>/dev/null | tail -1)
python3 - "$j" "${G4_SAN:-0}" <<'PY' && ok "bench --json over 256 MB: paired probe measured, its buffer not in the peak RSS" || bad "bench paired: $j"
import json, sys
d = json.loads(sys.argv[1])
assert d["weight_bytes_per_token"] > 256e6
assert isinstance(d["decode_paired_bound_fraction"], float) and d["decode_paired_bound_fraction"] > 0
# TP 2 over a checkpoint: o_proj / down_proj are strided column slices; their rows are read alone
assert d["weights_read_gb_s"] > 0 and d["decode_weights_read_fraction"] > 0
# (not under ASan: its shadow memory and quarantine add hundreds of MB of the engine's own)
assert sys.argv[2] == "1" or d["peak_rss_mb"] < d["weight_bytes_per_token"] / 1e6 + 0.5 * d["probe_mb"], (d["peak_rss_mb"], d["probe_mb"])
PY

# --paired-read: after each step a bare read of the same weight pages; the fractions are each
# step's weight rate over the read right after it (median; median of the faster-read half)
j=$($G4TP bench --model $tmp/big --tp 2 --prompt-len 4 --gen 6 --paired-read --json 2>/dev/null | tail -1)
python3 - "$j" <<'PY' && ok "bench --paired-read: per step against a read of its weights, the medians from the pairs" || bad "bench --paired-read: $j"
import json, sys, statistics
d = json.loads(sys.argv[1])
st = d["paired_read_steps"]
assert len(st) == 6 and all(ms > 0 and gbs > 0 for ms, gbs in st), st
fr = [d["weight_bytes_per_token"] / (ms * 1e-3) / (gbs * 1e9) for ms, gbs in st]
assert abs(d["decode_paired_read_fraction"] - statistics.median(fr)) < 1e-3 * statistics.median(fr), (d["decode_paired_read_fraction"], fr)
reads = sorted(g for _, g in st)
# (the json's reals have 6 significant digits: compare within 1e-4, never by rounding)
assert all(abs(a - b) <= 1e-4 * b for a, b in zip(d["paired_read_gb_s"], (reads[0], statistics.median(reads), reads[5]))), d["paired_read_gb_s"]
fast = statistics.median([f for f, (_, g) in zip(fr, st) if g >= statistics.median(reads)])
assert abs(d["decode_paired_read_fast_fraction"] - fast) < 1e-3 * fast, (d["decode_paired_read_fast_fraction"], fast)
PY
out=$($G4TP bench --model $tmp/big --prompt-len 4 --gen 2 --paired-read 2>&1)
echo "$out" | grep -qE "each step against a bare read of its weights right after it .*% median" && ok "bench text: the paired read" || bad "bench text paired read: $out"
$G4TP bench --model $M --gen 1 --comm mpi --paired-read >/dev/null 2>&1; expect_eq $? 2 "bench --paired-read with MPI ranks refused"

# --load copy holds the model once: each matrix's mapped pages leave the resident set once copied
# (mapfile.h g4_mapfile_release; before, the copy and the map both counted: ~2x at the peak).
# 8 layers of hidden 1024, so no one matrix is a large part of the model; a checkpoint (strided
# views into shared files) and its artifacts (one file per rank).
python3 - "$M/config.json" "$tmp/deep.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c["text_config"].update(hidden_size=1024, intermediate_size=4096)
json.dump(c, open(sys.argv[2], "w"))
PY
$G4TP synth --like $tmp/deep.json --out $tmp/deep >/dev/null || bad "synth an 8-layer 210 MB model"
$G4TP shard --model $tmp/deep --tp 2 --out $tmp/deep.art --quiet >/dev/null 2>&1 || bad "shard the 8-layer model"
for src in deep deep.art; do
  j=$($G4TP bench --model $tmp/$src --tp 2 --load copy --prompt-len 4 --gen 2 --json 2>/dev/null | tail -1)
  python3 - "$j" "${G4_SAN:-0}" <<'PY' && ok "--load copy ($src): peak RSS about the model once, not copy + map" || bad "--load copy $src: $j"
import json, sys
d = json.loads(sys.argv[1])
assert d["weights_copied_mb"] * 1e6 >= 0.99 * d["weight_bytes_per_token"], d["weights_copied_mb"]
assert sys.argv[2] == "1" or d["peak_rss_mb"] < 1.4 * d["weight_bytes_per_token"] / 1e6, (d["peak_rss_mb"], d["weight_bytes_per_token"])
PY
done

out=$($G4TP bench --model $M --prompt-len 8 --gen 4 --tp 2 --threads 1 2>&1)
for line in "^load " "^prefill .* tok/s" "^decode .* of the bandwidth bound" "median step" "against a read-only stream" \
  "^phases +rank 0" "^ +rank 1, ms per token" "^prefill by +rank 0, ms in all .*o_proj [0-9.]+ \([0-9]+ %\)" "^ +rank 1, ms in all"; do
  if echo "$out" | grep -qE "$line"; then ok "bench text: $line"; else bad "bench text lacks $line: $out"; fi
done
if echo "$out" | grep -q "TP 2 x 1 threads"; then ok "bench text names TP 2 x 1"; else bad "bench text: $out"; fi

$G4TP bench --model $M --gen 0 >/dev/null 2>&1; expect_eq $? 2 "bench --gen 0 refused"
$G4TP bench --model $M --frobnicate >/dev/null 2>&1; expect_eq $? 2 "bench unknown option refused"
$G4TP bench --model /nonexistent --gen 1 >/dev/null 2>&1; expect_eq $? 1 "bench on a missing model fails cleanly"
finish
