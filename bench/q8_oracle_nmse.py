#!/usr/bin/python3
"""How much of the q8_0 logits error is the format itself? Runs the fp32 numpy oracle
(shared/oracle, not part of this repository) on a checkpoint twice: with the weights as stored
and with every 2-D weight except the tied embedding replaced by its q8_0 round trip (blocks of
32, scale max|w|/127 stored as f16, round half away from zero: the rule g4tp shards with), and
prints the NMSE of the last position's logits. No activation quantization: this is the floor any
q8_0 engine has on that checkpoint.

  /usr/bin/python3 bench/q8_oracle_nmse.py --oracle ../shared/oracle tests/data/golden/tiny_default
"""
import argparse
import json
import os
import sys

import numpy as np


def q8_roundtrip(w):
    b = w.reshape(-1, 32).astype(np.float32)
    d = (np.abs(b).max(1, keepdims=True) / 127).astype(np.float16).astype(np.float32)
    inv = np.where(d > 0, 1 / np.where(d > 0, d, 1), 0)
    q = np.trunc(b * inv + np.copysign(0.5, b * inv))  # roundf: half away from zero
    return (q * d).reshape(w.shape).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle", required=True, help="folder with gemma4_ref.py")
    ap.add_argument("models", nargs="+", help="checkpoint folders with <name>__p*.json goldens beside them")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.oracle))
    from gemma4_ref import Gemma4Ref, load_checkpoint

    for model in a.models:
        cfg, w, _ = load_checkpoint(model)
        wq = {k: (q8_roundtrip(v) if v.ndim == 2 and "embed" not in k and v.shape[1] % 32 == 0 else v) for k, v in w.items()}
        name = os.path.basename(os.path.normpath(model))
        for p in ("p1", "p16", "p40"):
            gold = os.path.join(os.path.dirname(os.path.normpath(model)), f"{name}__{p}.json")
            if not os.path.exists(gold):
                continue
            ids = json.load(open(gold))["prompt_ids"]
            ref = Gemma4Ref(cfg, w).forward(ids)[-1].astype(np.float64)
            out = Gemma4Ref(cfg, wq).forward(ids)[-1].astype(np.float64)
            print(f"{name} {p}: weight-only q8_0 logits NMSE {((out - ref) ** 2).sum() / (ref ** 2).sum():.3g}")


if __name__ == "__main__":
    main()
