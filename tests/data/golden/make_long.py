#!/usr/bin/env python3
"""Regenerates tests/data/golden/tiny_long (a tiny checkpoint with room for 64k positions) and
tiny_long__p33k.json: the fp32 oracle's greedy decode after a 33,000-token prompt, for the
long-context test (tests/unit/test_long.c). Needs the numpy reference model's folder (the one
with run_oracle.py; not part of this repository) and Debian's numpy:
    /usr/bin/python3 tests/data/golden/make_long.py ORACLE_DIR [N]
The oracle takes the prompt in chunks (its forward appends to its cache; one 33k x 33k score
matrix would not fit in memory) with its einsums through BLAS: minutes on two cores."""
import hashlib, json, os, subprocess, sys, time

if len(sys.argv) < 2:
    sys.exit("usage: make_long.py ORACLE_DIR [N]  (the folder with run_oracle.py)")
oracle = os.path.abspath(sys.argv[1])
N = int(sys.argv[2]) if len(sys.argv) > 2 else 33000
NEW, CHUNK = 4, 400
here = os.path.dirname(os.path.abspath(__file__))
out = os.path.join(here, "tiny_long")
args = ["--seed", "14", "--layers", "4", "--sliding-per-full", "3", "--heads", "2", "--kv-heads", "1",
        "--global-kv-heads", "1", "--head-dim", "32", "--global-head-dim", "32", "--hidden", "64",
        "--intermediate", "128", "--sliding-window", "40", "--max-pos", "65536", "--vocab", "512", "--no-vision"]
subprocess.check_call([sys.executable, os.path.join(oracle, "make_tiny.py"), "--out", out] + args)
sys.path.insert(0, oracle)
import numpy as np  # noqa: E402
from gemma4_ref import Gemma4Ref, load_checkpoint  # noqa: E402

# the oracle's einsums through BLAS (the same sums, 20x faster)
_einsum = np.einsum
np.einsum = lambda *a, **k: _einsum(*a, optimize=True, **k)
cfg, weights, _ = load_checkpoint(out)
ref = Gemma4Ref(cfg, weights)
rng = np.random.default_rng(33)
ids = [2] + [int(x) for x in rng.integers(3, 512, size=N - 1)]
t0 = time.time()
for s in range(0, N, CHUNK):
    logits = ref.forward(ids[s:s + CHUNK])
    if s // CHUNK % 10 == 0:
        print(f"{s + CHUNK} positions, {time.time() - t0:.0f} s", flush=True)
last = logits[-1].astype(np.float32)
steps, gen, cur, margin = [], [], last, 1e9
for k in range(NEW):
    chosen = int(np.argmax(cur))
    top = np.argsort(-cur, kind="stable")[:5]
    margin = min(margin, float(cur[top[0]] - cur[top[1]]))
    steps.append({"position": N - 1 + k, "top5_ids": [int(i) for i in top], "top5_values": [float(cur[i]) for i in top],
                  "chosen_id": chosen})
    gen.append(chosen)
    if k < NEW - 1:
        cur = ref.forward([chosen])[-1].astype(np.float32)
files = sorted(f for f in os.listdir(out) if not f.startswith("."))
golden = {
    "prompt_ids": ids, "generated_ids": gen, "steps": steps,
    "prompt_last_logits": {"values": [float(x) for x in last]}, "min_top1_margin": margin,
    "make_tiny_args": args, "prompt": f"[2] + numpy default_rng(33).integers(3, 512, {N - 1})",
    "checkpoint_sha256": {f: hashlib.sha256(open(os.path.join(out, f), "rb").read()).hexdigest() for f in files},
}
with open(os.path.join(here, f"tiny_long__p{N // 1000}k.json"), "w") as f:
    json.dump(golden, f, separators=(",", ":"))
print(f"done in {time.time() - t0:.0f} s: generated {gen}, min top-1 margin {margin:.4f}")
