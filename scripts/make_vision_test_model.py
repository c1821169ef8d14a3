#!/usr/bin/python3
"""Writes tests/data/vision/demo_vision: the demo model (models/demo: its trained text weights,
tokenizer and chat template) with the tiny random vision tower of tests/data/vision/tiny_vision
added in the real multimodal layout (Gemma4ForConditionalGeneration: text under text_config and
model.language_model.*, the tower under model.vision_tower.* / model.embed_vision.*), the image
token ids of the demo tokenizer (<|image> 1529, <|image|> 1531, <image|> 1533), and an image
processor with a 70-token budget. The tower is random, so what the model says about a picture is
noise; the server tests use it for the plumbing (APIs, limits, usage, caching), not for meaning.
Deterministic (numpy, seed 7 for the one new matrix). Run from the repository root."""
import glob
import json
import os
import struct

import numpy as np

SRC_DEMO, SRC_VIS, OUT = "models/demo", "tests/data/vision/tiny_vision", "tests/data/vision/demo_vision"


def st_read(path):
    b = open(path, "rb").read()
    n = struct.unpack("<Q", b[:8])[0]
    h = json.loads(b[8:8 + n])
    base = 8 + n
    return {k: (v["dtype"], v["shape"], b[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
            for k, v in h.items() if k != "__metadata__"}


def st_write(path, tensors):
    header, off, blobs = {}, 0, []
    for k in sorted(tensors):
        dt, shape, data = tensors[k]
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for b in blobs:
            f.write(b)


def bf16(a):
    u = np.asarray(a, np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16).tobytes()


def main():
    os.makedirs(OUT, exist_ok=True)
    text = st_read(os.path.join(SRC_DEMO, "model.safetensors"))
    vis = {}
    for f in sorted(glob.glob(os.path.join(SRC_VIS, "*.safetensors"))):
        vis.update({k: v for k, v in st_read(f).items() if "vision" in k})
    out = {"model.language_model." + k[len("model."):]: v for k, v in text.items()}
    dcfg = json.load(open(os.path.join(SRC_DEMO, "config.json")))
    vcfg = json.load(open(os.path.join(SRC_VIS, "config.json")))
    hidden, vh = dcfg["hidden_size"], vcfg["vision_config"]["hidden_size"]
    for k, v in vis.items():
        if k == "model.embed_vision.embedding_projection.weight":  # [text hidden][vision hidden]
            w = np.random.default_rng(7).normal(0, 0.05, (hidden, vh)).astype(np.float32)
            v = ("BF16", [hidden, vh], bf16(w))
        out[k] = v
    st_write(os.path.join(OUT, "model.safetensors"), out)
    text_cfg = dict(dcfg)
    for k in ("architectures", "transformers_version"):
        text_cfg.pop(k, None)
    cfg = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "dtype": "bfloat16",
           "text_config": text_cfg, "vision_config": vcfg["vision_config"], "audio_config": None,
           "boi_token_id": 1529, "image_token_id": 1531, "eoi_token_id": 1533, "audio_token_id": 1532,
           "boa_token_id": 1530, "eoa_token_id": 1534, "eoa_token_index": 1534, "video_token_id": 1535,
           "bos_token_id": dcfg["bos_token_id"], "eos_token_id": dcfg["eos_token_id"], "pad_token_id": dcfg["pad_token_id"],
           "tie_word_embeddings": True, "vision_soft_tokens_per_image": 70, "transformers_version": dcfg.get("transformers_version")}
    json.dump(cfg, open(os.path.join(OUT, "config.json"), "w"), indent=1)
    proc = json.load(open(os.path.join(SRC_VIS, "processor_config.json")))
    proc["image_processor"]["max_soft_tokens"] = 70
    proc["image_processor"]["image_seq_length"] = 70
    proc["image_seq_length"] = 70
    json.dump(proc, open(os.path.join(OUT, "processor_config.json"), "w"), indent=1)
    for f in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        open(os.path.join(OUT, f), "wb").write(open(os.path.join(SRC_DEMO, f), "rb").read())


if __name__ == "__main__":
    main()
