#!/usr/bin/python3
"""How much of the q8_0 logits error is the format itself? For each checkpoint this writes a copy
whose 2-D weights (all but the tied embedding) are replaced by their q8_0 round trip (blocks of
32, scale max|w|/127 stored as f16, round half away from zero: the rule g4tp quantizes with),
stored as F32, and runs `g4tp generate --dtype f32` on the original and on the copy. The NMSE of
the last position's logits is the floor of any q8_0 engine on that checkpoint (fp32
activations); the engine's own q8_0 path (activations quantized too) is printed next to it.
Needs numpy (Debian's python3-numpy) and a built g4tp.

  /usr/bin/python3 bench/q8_nmse_floor.py [--g4tp build/g4tp] [--only REGEX] tests/data/golden/tiny_default

--only REGEX round-trips only the tensors whose names match (e.g. 'mlp', 'self_attn'): which
part of the model the error comes from. --block N uses int8 blocks of N instead of 32 (would a
finer int8 format do?).
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile

import numpy as np

PROMPTS = {"p1": [2], "p16": [2, 105, 17, 33, 44, 55, 66, 77, 88, 99, 111, 122, 133, 144, 155, 166],
           "p40": [2] + [(i * 37 + 11) % 500 for i in range(39)]}  # the golden prompts


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = np.frombuffer(data[a:b], dtype=np.uint8)
        if t["dtype"] == "BF16":
            v = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        elif t["dtype"] == "F32":
            v = raw.view(np.float32)
        else:
            raise SystemExit(f"{path}: {name}: dtype {t['dtype']} not handled here")
        out[name] = v.reshape(t["shape"])
    return out


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, v in tensors.items():
        b = np.ascontiguousarray(v, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [off, off + len(b)]}
        off += len(b)
        blobs.append(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def q8_roundtrip(w, block=32):
    b = w.reshape(-1, block).astype(np.float32)
    d = (np.abs(b).max(1, keepdims=True) / 127).astype(np.float16).astype(np.float32)
    inv = np.where(d > 0, 1 / np.where(d > 0, d, 1), 0).astype(np.float32)
    y = b * inv
    q = np.trunc(y + np.copysign(np.float32(0.5), y))  # roundf: half away from zero
    return (q * d).reshape(w.shape).astype(np.float32)


def logits(g4tp, model, ids, dtype, tmp):
    out = os.path.join(tmp, "logits.bin")
    subprocess.run([g4tp, "generate", "--model", model, "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", "1",
                    "--dtype", dtype, "--dump-logits", out], check=True, stdout=subprocess.DEVNULL)
    return np.fromfile(out, dtype="<f4").astype(np.float64)


def nmse(a, ref):
    return float(((a - ref) ** 2).sum() / (ref ** 2).sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--g4tp", default="build/g4tp")
    ap.add_argument("--only", default="", help="round-trip only tensors whose names match this regex")
    ap.add_argument("--block", type=int, default=32, help="int8 block size of the round trip (default 32, q8_0)")
    ap.add_argument("models", nargs="+", help="Hugging Face checkpoint folders")
    a = ap.parse_args()
    for model in a.models:
        name = os.path.basename(os.path.normpath(model))
        with tempfile.TemporaryDirectory() as tmp:
            rt = os.path.join(tmp, "q8rt")
            os.mkdir(rt)
            for f in os.listdir(model):
                src = os.path.join(model, f)
                if f.endswith(".safetensors"):
                    t = read_safetensors(src)
                    write_safetensors(os.path.join(rt, f), {k: (q8_roundtrip(v, a.block) if v.ndim == 2 and "embed" not in k and v.shape[1] % a.block == 0
                                                                                  and re.search(a.only, k) else v)
                                                            for k, v in t.items()})
                elif f.endswith(".json"):
                    shutil.copy(src, rt)
            for p, ids in PROMPTS.items():
                ref = logits(a.g4tp, model, ids, "f32", tmp)
                floor = nmse(logits(a.g4tp, rt, ids, "f32", tmp), ref)
                try:
                    eng = "%.3g" % nmse(logits(a.g4tp, model, ids, "q8_0", tmp), ref)
                except subprocess.CalledProcessError:
                    eng = "refused (blocks would straddle slices)"
                print(f"{name} {p}: weights-only q8_0 round trip NMSE {floor:.3g}; g4tp --dtype q8_0 NMSE {eng}")


if __name__ == "__main__":
    main()
