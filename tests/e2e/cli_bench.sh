#!/usr/bin/env bash
# g4tp bench: the --json object has every documented key with sane values, the text report has
# its lines, bad options are refused; on a model this small the paired probe is not run (null).
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
PY

out=$($G4TP bench --model $M --prompt-len 8 --gen 4 --tp 2 --threads 1 2>&1)
for line in "^load " "^prefill .* tok/s" "^decode .* of the bandwidth bound" "median step" "against a read-only stream"; do
  if echo "$out" | grep -qE "$line"; then ok "bench text: $line"; else bad "bench text lacks $line: $out"; fi
done
if echo "$out" | grep -q "TP 2 x 1 threads"; then ok "bench text names TP 2 x 1"; else bad "bench text: $out"; fi

$G4TP bench --model $M --gen 0 >/dev/null 2>&1; expect_eq $? 2 "bench --gen 0 refused"
$G4TP bench --model $M --frobnicate >/dev/null 2>&1; expect_eq $? 2 "bench unknown option refused"
$G4TP bench --model /nonexistent --gen 1 >/dev/null 2>&1; expect_eq $? 1 "bench on a missing model fails cleanly"
finish
