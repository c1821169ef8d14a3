#!/usr/bin/python3
"""Accuracy of g4tp's fast math mode (docs/math.md): on bf16 checkpoints, the logits of
`g4tp generate --math fast` against `--math exact` (NMSE per step over the steps where both
greedy sequences agree, and how many of the greedy ids agree) and, for the golden models, both
against a float64 forward pass (the numpy reference model given by --oracle DIR or $G4TP_ORACLE,
run with --dtype float64; skipped without one: it is not part of this repository).

usage: bench/fastmath_accuracy.py [--g4tp build/g4tp] [--gen 8] [--oracle DIR] [MODEL_DIR:PROMPT_IDS ...]
(default: the goldens tiny_default, tiny_wide, tiny_tp8 at their p16/p40 prompts, and the demo)"""
import argparse, json, os, subprocess, sys, tempfile
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def g4tp(exe, model, ids, gen, math, tmp):
    cmd = [exe, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", str(gen),
           "--math", math, "--dump-all-logits", tmp, "--json"]
    j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
    return j["generated_ids"], np.fromfile(tmp, dtype="<f4").astype(np.float64).reshape(gen, -1)


def nmse(a, ref):
    return float(((a - ref) ** 2).sum() / (ref ** 2).sum())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--g4tp", default=os.path.join(REPO, "build/g4tp"))
    ap.add_argument("--gen", type=int, default=8)
    ap.add_argument("--oracle", default=os.environ.get("G4TP_ORACLE", ""))
    ap.add_argument("cases", nargs="*")
    a = ap.parse_args()
    cases = []
    if a.cases:
        for c in a.cases:
            m, ids = c.rsplit(":", 1)
            cases.append((m, "custom", [int(x) for x in ids.split(",")], False))
    else:
        for g in ("tiny_default", "tiny_wide", "tiny_tp8"):
            for p in ("p16", "p40"):
                gj = os.path.join(REPO, "tests/data/golden", f"{g}__{p}.json")
                if os.path.exists(gj):
                    cases.append((os.path.join(REPO, "tests/data/golden", g), p, json.load(open(gj))["prompt_ids"], True))
        cases.append((os.path.join(REPO, "models/demo"), "p16", json.load(open(os.path.join(REPO, "tests/data/golden/tiny_default__p16.json")))["prompt_ids"], False))
    oracle = os.path.join(a.oracle, "run_oracle.py") if a.oracle else ""  # "": no oracle column
    with tempfile.TemporaryDirectory() as td:
        tmp = os.path.join(td, "logits.bin")
        for model, p, ids, golden in cases:
            ei, el = g4tp(a.g4tp, model, ids, a.gen, "exact", tmp)
            fi, fl = g4tp(a.g4tp, model, ids, a.gen, "fast", tmp)
            same = 0
            while same < a.gen and ei[same] == fi[same]:
                same += 1
            steps = min(same + 1, a.gen)  # step s's logits saw the same tokens while ids[:s] agree
            row = {"model": os.path.basename(model), "prompt": p, "greedy_ids_equal": f"{same}/{a.gen}",
                   "nmse_fast_vs_exact_step0": nmse(fl[0], el[0]),
                   "nmse_fast_vs_exact_steps": nmse(fl[:steps], el[:steps])}
            if golden and os.path.exists(oracle):
                npy = os.path.join(td, "oracle.npy")
                subprocess.run([sys.executable, oracle, "--model", model, "--prompt-ids", ",".join(map(str, ids)),
                                "--max-new-tokens", "1", "--dtype", "float64", "--dump-prompt-logits", npy,
                                "--out", os.devnull], check=True, stdout=subprocess.DEVNULL)
                ref = np.load(npy).astype(np.float64).reshape(-1)
                row["nmse_exact_vs_f64"] = nmse(el[0], ref)
                row["nmse_fast_vs_f64"] = nmse(fl[0], ref)
                row["max_abs_exact_vs_f64"] = float(np.abs(el[0] - ref).max())
                row["max_abs_fast_vs_f64"] = float(np.abs(fl[0] - ref).max())
            print(json.dumps(row))


if __name__ == "__main__":
    main()
