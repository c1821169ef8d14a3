#!/usr/bin/python3
"""Accuracy of the block formats (q8_0, q4_0, each with a bf16 / q8_0 / q4_0 tied head) with g4tp
itself: for each model and prompt, the NMSE of the logits at the prompt's last position against
the fp32 path (`--dtype f32`), and against it the format's floor — the same weights round-tripped
through the format (`g4tp shard --dtype D --head-dtype H`, then run with `--dtype f32`, which
dequantizes exactly), i.e. what any engine with fp32 activations would get. On the demo model also
how many of the 34 golden answers stay token-for-token exact. Reports; asserts nothing.

  /usr/bin/python3 bench/quant_accuracy.py [--g4tp build/g4tp] [--demo-cases N]
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np

PROMPTS = {"p1": [2], "p16": [2, 105, 17, 33, 44, 55, 66, 77, 88, 99, 111, 122, 133, 144, 155, 166],
           "p40": [2] + [(i * 37 + 11) % 500 for i in range(39)]}  # the golden prompts
FORMATS = [("q8_0", "bf16"), ("q8_0", "q8_0"), ("q4_0", "bf16"), ("q4_0", "q8_0"), ("q4_0", "q4_0")]


def logits(g4tp, model, ids, tmp, *flags):
    out = os.path.join(tmp, "l.bin")
    subprocess.run([g4tp, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
                    "--max-new-tokens", "1", "--dump-logits", out, *flags], check=True, capture_output=True)
    return np.fromfile(out, dtype=np.float32).astype(np.float64)


def nmse(a, ref):
    return float(((a - ref) ** 2).sum() / (ref ** 2).sum())


def greedy(g4tp, model, ids, n, *flags):
    r = subprocess.run([g4tp, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)),
                        "--max-new-tokens", str(n), "--json", *flags], check=True, capture_output=True, text=True)
    return json.loads(r.stdout)["generated_ids"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--g4tp", default="build/g4tp")
    ap.add_argument("--demo-cases", type=int, default=34)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="g4qacc.")
    demo = json.load(open("tests/data/demo/golden_demo.json"))["cases"][: a.demo_cases]
    models = [("tiny_default", "tests/data/golden/tiny_default", list(PROMPTS.items())),
              ("demo", "models/demo", [(c["name"], c["prompt_ids"]) for c in demo[:8]])]
    print(f"{'model':14} {'weights/head':14} {'engine NMSE (mean, max)':>26} {'floor NMSE (mean, max)':>26}")
    for name, model, prompts in models:
        refs = [logits(a.g4tp, model, ids, tmp, "--dtype", "f32") for _, ids in prompts]
        for d, h in FORMATS:
            art = os.path.join(tmp, f"{name}-{d}-{h}")
            subprocess.run([a.g4tp, "shard", "--model", model, "--tp", "1", "--out", art, "--dtype", d,
                            "--head-dtype", h, "--force", "--quiet"], check=True, capture_output=True)
            eng = [nmse(logits(a.g4tp, model, ids, tmp, "--dtype", d, "--head-dtype", h), r) for (_, ids), r in zip(prompts, refs)]
            flo = [nmse(logits(a.g4tp, art, ids, tmp, "--dtype", "f32"), r) for (_, ids), r in zip(prompts, refs)]
            print(f"{name:14} {d + '/' + h:14} {np.mean(eng):12.3e} {max(eng):12.3e} {np.mean(flo):12.3e} {max(flo):12.3e}")
    print(f"\ndemo answers exact (greedy ids = the golden's), of {len(demo)}:")
    for d, h in [("bf16", "bf16")] + FORMATS:
        ok = sum(greedy(a.g4tp, "models/demo", c["prompt_ids"], len(c["generated_ids"]), "--dtype", d, "--head-dtype", h)
                 == c["generated_ids"] for c in demo)
        print(f"  {d}/{h}: {ok}/{len(demo)}")


if __name__ == "__main__":
    main()
