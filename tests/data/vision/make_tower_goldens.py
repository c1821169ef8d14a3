#!/usr/bin/env python3
"""Regenerates the vision tower goldens of tests/unit/test_vision.c: small RGB pictures given
to the tower as they are (no resize: their sides are multiples of 48), and the numpy oracle's
soft tokens and standardized pooled features for them (float64 run, stored as float32), on
  tiny_vision/   the shared tiny checkpoint with a real tower (../shared/vision/tiny_vision,
                 copied here as is), and
  tiny_clipped/  the same generator with --clipped (use_clipped_linears: every linear clamps
                 its input and output), with a smaller text model (2 layers) to stay small, and
                 tighter bounds, different per linear, patched in (BOUNDS below) so that each
                 one changes the outputs.
Needs the numpy reference's folder (gemma4_vision_ref.py, make_tiny_vision.py; not part of this
repository) and Debian's numpy:
    /usr/bin/python3 tests/data/vision/make_tower_goldens.py ORACLE_DIR
Writes <name>.u8 (H x W x 3, row-major, RGB; formula_* pictures are computed, not stored),
<model>__<name>.soft.f32 ([n][text hidden]), <model>__<name>.pooled.f32 ([n][vision hidden]) and
goldens.json (what each file is)."""
import json, os, shutil, subprocess, sys

if len(sys.argv) < 2:
    sys.exit("usage: make_tower_goldens.py ORACLE_DIR")
oracle = os.path.abspath(sys.argv[1])
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, oracle)
import numpy as np  # noqa: E402
import gemma4_vision_ref as gv  # noqa: E402

clipped = os.path.join(here, "tiny_clipped")
shutil.rmtree(clipped, ignore_errors=True)
subprocess.check_call([sys.executable, os.path.join(oracle, "make_tiny_vision.py"), "--out", clipped, "--clipped", "--seed", "7",
                       "--layers", "2", "--intermediate", "64", "--vision-pos-size", "64"])

# Tighter, different clip bounds per linear than make_tiny_vision.py's (which never bind on o_proj's
# and down_proj's inputs and are the same for q, k and v), patched into the checkpoint in place:
# every bound below changes the outputs (checked after the goldens are made).
BOUNDS = {"self_attn.q_proj": (-2.5, 2.5, -2.0, 2.0), "self_attn.k_proj": (-1.2, 1.0, -1.5, 1.25),
          "self_attn.v_proj": (-1.75, 2.0, -1.0, 0.75), "self_attn.o_proj": (-0.5, 0.375, -0.25, 0.1875),
          "mlp.gate_proj": (-3.0, 3.0, -1.5, 1.0), "mlp.up_proj": (-1.0, 1.25, -1.5, 1.5),
          "mlp.down_proj": (-0.25, 0.3125, -0.5, 0.4375)}
BOUND_NAMES = ("input_min", "input_max", "output_min", "output_max")

def patch_bounds(model_dir):
    import struct
    for fn in sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors")):
        path = os.path.join(model_dir, fn)
        with open(path, "r+b") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
            for name, t in hdr.items():
                for lin, vals in BOUNDS.items():
                    for b, v in zip(BOUND_NAMES, vals):
                        if name.endswith(f".{lin}.{b}"):
                            assert t["dtype"] == "BF16"
                            f.seek(8 + n + t["data_offsets"][0])
                            f.write(struct.pack("<H", struct.unpack("<I", struct.pack("<f", v))[0] >> 16))  # exact in bf16

patch_bounds(clipped)

# smooth structure plus noise, different per channel, so a patch-order or channel-order bug shows
def picture(h, w, seed):
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.stack([128 + 90 * np.sin(x / (7 + 3 * c) + c) * np.cos(y / (11 - 2 * c)) for c in range(3)], axis=-1)
    img += rng.normal(0, 25, img.shape)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)

# a full 280-token picture (2520 patches: every token block, attention over 2520 keys), made by an
# integer formula the test repeats instead of a 1.9 MB file
def formula_picture(h, w):
    y, x, c = np.mgrid[0:h, 0:w, 0:3].astype(np.int64)
    return ((x * 3 + y * 5 + c * 71 + (x * y) % 97 + ((x ^ y) & 31) * 4) & 255).astype(np.uint8)

pictures = {"img_96x144": (96, 144, 1), "img_144x192": (144, 192, 2), "img_144x240": (144, 240, 3)}
models = {"tiny_vision": list(pictures) + ["formula_672x960"], "tiny_clipped": ["img_96x144", "img_144x240"]}
meta = {"oracle": "gemma4_vision_ref.Gemma4VisionRef.encode, float64, stored as float32", "pictures": {}, "outputs": []}
for name, (h, w, seed) in pictures.items():
    img = picture(h, w, seed)
    img.tofile(os.path.join(here, name + ".u8"))
    meta["pictures"][name] = {"height": h, "width": w}
meta["pictures"]["formula_672x960"] = {"height": 672, "width": 960, "formula": "(x*3 + y*5 + c*71 + (x*y) % 97 + ((x ^ y) & 31) * 4) & 255"}
for model, names in models.items():
    cfg, weights = gv.load_vision(os.path.join(here, model))
    ref = gv.Gemma4VisionRef(cfg, weights, dtype=np.float64)
    for name in names:
        h, w = meta["pictures"][name]["height"], meta["pictures"][name]["width"]
        if name.startswith("formula_"):
            img = formula_picture(h, w)
        else:
            img = np.fromfile(os.path.join(here, name + ".u8"), dtype=np.uint8).reshape(h, w, 3)
        pre = gv.preprocess(img, do_resize=False, dtype=np.float64)
        keep = {}
        soft = ref.encode(pre["pixel_values"], pre["position_ids"], keep=keep)
        base = f"{model}__{name}"
        soft.astype(np.float32).tofile(os.path.join(here, base + ".soft.f32"))
        keep["pooled_std"].astype(np.float32).tofile(os.path.join(here, base + ".pooled.f32"))
        ph, pw = pre["grid"]
        meta["outputs"].append({"model": model, "picture": name, "grid": [ph, pw], "soft_tokens": int(soft.shape[0]),
                                "soft_dim": int(soft.shape[1]), "pooled_dim": int(keep["pooled_std"].shape[1]),
                                "soft_max_abs": float(np.abs(soft).max())})
        print(base, soft.shape, float(np.abs(soft).max()))
# every clip bound of tiny_clipped matters: opening it up moves the soft tokens
cfg, weights = gv.load_vision(clipped)
img = np.fromfile(os.path.join(here, "img_144x240.u8"), dtype=np.uint8).reshape(144, 240, 3)
pre = gv.preprocess(img, do_resize=False, dtype=np.float64)
base = gv.Gemma4VisionRef(cfg, weights, dtype=np.float64).encode(pre["pixel_values"], pre["position_ids"])
for lin in BOUNDS:
    for b in BOUND_NAMES:
        w2 = dict(weights)
        for k in w2:
            if k.endswith(f".{lin}.{b}"):
                w2[k] = np.array(np.inf if b.endswith("max") else -np.inf, dtype=np.float32)
        d = np.abs(gv.Gemma4VisionRef(cfg, w2, dtype=np.float64).encode(pre["pixel_values"], pre["position_ids"]) - base).max()
        print(f"  without {lin}.{b}: soft tokens move by {d:.3g}")
        assert d > 1e-3, (lin, b, d)
with open(os.path.join(here, "goldens.json"), "w") as f:
    json.dump(meta, f, indent=1)
    f.write("\n")
