#!/usr/bin/python3
"""Gemma-4 vision tower (Hugging Face safetensors, as `g4tp synth --vision` writes them) -> an
mmproj GGUF for llama.cpp's libmtmd (PROJECTOR_TYPE_GEMMA4V), with llama.cpp's own gguf-py.

  to_mmproj.py [--gguf-py DIR] [--type f32|bf16] [--use-gelu] MODEL_DIR OUT.gguf

What llama.cpp's convert_hf_to_gguf.py --mmproj writes for Gemma4ForConditionalGeneration
(conversion/gemma.py, class Gemma4VisionAudioModel on MmprojModel, conversion/base.py), vision
part only, without torch:
  * tensors model.vision_tower.* and model.embed_vision.* (names through gguf-py's MMPROJ map:
    v.blk.N.{attn_q,attn_k,attn_v,attn_out,attn_q_norm,attn_k_norm,ln1,ln2,attn_post_norm,
    ffn_post_norm,ffn_gate,ffn_up,ffn_down}, v.patch_embd, v.position_embd, v.std_bias,
    v.std_scale, mm.input_projection); norms used as they are (Gemma-4 multiplies by the weight,
    no 1 + w), nothing transposed but the patch embedding:
  * the patch embedding: HF's input_proj is a Linear over a patch flattened (py, px, c), channel
    fastest; llama.cpp runs a conv2d whose kernel is (c, py, px), so the [H, p*p*3] matrix is
    reshaped to [H, p, p, 3] and permuted to [H, 3, p, p] (oracle VISION.md trap T6);
  * patch embedding and position table f32 (the converter forces both), 1-D tensors f32, the
    other matrices --type (bf16: g4tp's tower runs bf16 weights);
  * metadata: clip.has_vision_encoder, clip.vision.projector_type "gemma4v", projection_dim (the
    text hidden size), image_size 224 (unused, the converter's placeholder), patch_size,
    embedding_length, feed_forward_length, block_count, head_count, layer_norm_epsilon,
    image_mean/std from processor_config.json.
The converter does not write clip.use_gelu, so llama.cpp's tower runs its FFN with gelu_quick
(x * sigmoid(1.702 x)) where HF uses the tanh GELU; --use-gelu writes clip.use_gelu = true
(ggml's tanh GELU) to compare the math rather than the shipped files. Clipped linears
(use_clipped_linears, E2B/E4B) and the audio tower are refused: the 31B has neither.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from to_gguf import open_safetensors, slabs, write_items  # noqa: E402  (same folder)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-py", default=os.path.expanduser("~/.cache/g4tp-peer/llama.cpp/gguf-py"),
                    help="llama.cpp's gguf-py folder (default: the cache peer.py builds)")
    ap.add_argument("--type", choices=["f32", "bf16"], default="bf16", help="the tower's matrices (default bf16)")
    ap.add_argument("--use-gelu", action="store_true", help="write clip.use_gelu (tanh GELU; the converter does not)")
    ap.add_argument("model_dir")
    ap.add_argument("out")
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    import gguf  # noqa: E402  (llama.cpp's own, from the cache)

    T = gguf.GGMLQuantizationType
    with open(os.path.join(a.model_dir, "config.json")) as f:
        cfg = json.load(f)
    vc = cfg.get("vision_config")
    if not vc:
        sys.exit(f"to_mmproj: {a.model_dir}/config.json has no vision_config")
    if vc.get("use_clipped_linears"):
        sys.exit("to_mmproj: clipped linears (E2B/E4B towers) are not handled")
    text_hidden = cfg.get("text_config", cfg)["hidden_size"]
    pp = {}
    ppath = os.path.join(a.model_dir, "processor_config.json")
    if os.path.exists(ppath):
        with open(ppath) as f:
            pp = json.load(f)
        pp = {**pp, **pp.get("image_processor", {})}
    if pp.get("do_normalize"):
        mean, std = pp["image_mean"], pp["image_std"]
    else:
        mean, std = [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]  # Gemma-4: no normalization, the tower does 2x - 1
    if vc.get("pooling_kernel_size", 3) != 3:
        sys.exit("to_mmproj: llama.cpp's loader fixes pooling 3 unless projector.scale_factor: not handled")
    p, H, L = vc["patch_size"], vc["hidden_size"], vc["num_hidden_layers"]
    if H % vc["num_attention_heads"] or H // vc["num_attention_heads"] != vc.get("head_dim", H // vc["num_attention_heads"]):
        sys.exit("to_mmproj: llama.cpp's tower takes head_dim = hidden / heads; this config differs")

    dense = {"f32": T.F32, "bf16": T.BF16}[a.type]
    w = gguf.GGUFWriter(a.out, gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.MMPROJ])
    w.add_type(gguf.GGUFType.MMPROJ)
    w.add_name(os.path.basename(os.path.normpath(a.model_dir)) + "-mmproj")
    w.add_file_type(gguf.LlamaFileType.ALL_F32 if dense == T.F32 else gguf.LlamaFileType.MOSTLY_BF16)
    w.add_clip_has_vision_encoder(True)
    w.add_vision_projection_dim(text_hidden)
    w.add_vision_image_size(224)  # the converter's placeholder: Gemma-4's size is dynamic
    w.add_vision_patch_size(p)
    w.add_vision_embedding_length(H)
    w.add_vision_feed_forward_length(vc["intermediate_size"])
    w.add_vision_block_count(L)
    w.add_vision_head_count(vc["num_attention_heads"])
    w.add_vision_image_mean(mean)
    w.add_vision_image_std(std)
    w.add_clip_vision_projector_type(gguf.VisionProjectorType.GEMMA4V)
    w.add_vision_attention_layernorm_eps(vc.get("layer_norm_eps", 1e-6))  # what the converter reads
    if a.use_gelu:
        w.add_vision_use_gelu(True)

    st = open_safetensors(a.model_dir)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.MMPROJ, max(L, 128))
    items = []
    for name in sorted(st):
        if not (name.startswith("model.vision_tower.") or name.startswith("model.embed_vision.")):
            continue
        dtype, shape, raw = st[name]
        n = name.replace("model.vision_tower.encoder.", "vision_model.model.").replace(".linear.weight", ".weight")
        if n.endswith("layer_scalar") or n.endswith("position_embedding_table"):
            n += ".weight"
        gname = names.get_name(n, try_suffixes=(".weight", ".bias"))
        if gname is None:
            sys.exit(f"to_mmproj: cannot map tensor {name}")
        if name.endswith("patch_embedder.input_proj.weight"):
            if shape != [H, p * p * 3]:
                sys.exit(f"to_mmproj: {name} is {shape}, expected [{H}, {p * p * 3}]")
            # (py, px, c) columns -> conv2d kernel (c, py, px): VISION.md trap T6
            x = next(slabs(dtype, raw, [1, H * p * p * 3], T.F32, gguf)).reshape(H, p, p, 3)
            x = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
            items.append((gname, x.shape, T.F32, x.nbytes, lambda x=x: iter([x])))
            continue
        gt = dense if len(shape) == 2 else T.F32  # position table (3-D) and 1-D tensors stay f32
        numel = int(np.prod(shape))
        nbytes = (4 if gt == T.F32 else 2) * numel
        rows_shape = shape if len(shape) == 2 else [1, numel]
        items.append((gname, tuple(shape), gt, nbytes, lambda d=dtype, r=raw, s=rows_shape, g=gt: slabs(d, r, s, g, gguf)))
    got = {i[0] for i in items}
    for need in ("v.patch_embd.weight", "v.position_embd.weight", "mm.input_projection.weight", f"v.blk.{L - 1}.ffn_down.weight"):
        if need not in got:
            sys.exit(f"to_mmproj: {a.model_dir} has no tensor for {need} (not a Gemma-4 vision checkpoint?)")

    write_items(w, items, T.F32, "to_mmproj")
    print(f"to_mmproj: wrote {a.out} ({len(items)} tensors, {os.path.getsize(a.out) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
