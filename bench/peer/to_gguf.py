#!/usr/bin/python3
"""Gemma-4 dense checkpoint (Hugging Face safetensors, as `g4tp synth` writes them) -> GGUF for
llama.cpp, with llama.cpp's own gguf-py (GGUFWriter, tensor names, Q4_0 quantizer).

  to_gguf.py [--gguf-py DIR] [--type f32|bf16] [--head-type bf16|q4_0|f32] [--vocab none|stub]
             MODEL_DIR OUT.gguf

The metadata and tensor names are those llama.cpp's convert_hf_to_gguf.py writes for
Gemma4ForConditionalGeneration (conversion/gemma.py, class Gemma4Model): per-layer KV head
counts, the sliding-window pattern, full/sliding head dims and RoPE bases, the final soft-cap,
and the `rope_freqs` factors that make its NeoX RoPE rotate only the proportional part of the
full-attention heads. What differs: no tokenizer is embedded (tokenizer.ggml.model "none" and
gemma4.vocab_size: both engines are fed token ids, never text), the embedding keeps every row,
and there is no torch.

Matrices: `--type f32` converts bf16 to f32 (exact), `--type bf16` copies the bf16 bits. A
compressed-tensors W4A16 checkpoint (pack-quantized int4, symmetric, groups of 32: what
`g4tp synth --format w4a16` writes) becomes Q4_0 directly: a 32-group of a row *is* a Q4_0
block (nibbles q + 8, d = the group's scale as f16), so the conversion is exact; a scale with no
exact f16 value is an error. Its dense embedding (the tied head) is written as `--head-type`
(default q4_0, quantized by gguf-py's Q4_0, llama.cpp's rule).

Tensors are streamed from memory-mapped safetensors a slab of rows at a time, so peak memory is
a few hundred MB whatever the model's size (the 60-layer 31B W4A16 model included).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

ROWS = 2048  # rows per slab when converting a matrix


def open_safetensors(model_dir):
    """name -> (dtype, shape, memmap of its bytes) over every *.safetensors file of the folder."""
    out = {}
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        sys.exit(f"to_gguf: no .safetensors files in {model_dir}")
    for fn in files:
        path = os.path.join(model_dir, fn)
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
        for name, t in header.items():
            if name == "__metadata__":
                continue
            a, b = t["data_offsets"]
            if name in out:
                sys.exit(f"to_gguf: tensor {name} is in two files")
            out[name] = (t["dtype"], list(t["shape"]), data[a:b])
    return out


def as_f32(dtype, raw, shape):
    if dtype == "BF16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    if dtype == "F32":
        return raw.view(np.float32).reshape(shape)
    if dtype == "F16":
        return raw.view(np.float16).astype(np.float32).reshape(shape)
    sys.exit(f"to_gguf: dtype {dtype} not handled")


def text_config(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    return cfg, cfg.get("text_config", cfg)


def layer_of(name):
    parts = name.split(".")
    return int(parts[parts.index("layers") + 1]) if "layers" in parts else None


class Plan:
    """The tensors to write: GGUF name, numpy shape, GGML type, bytes, and a writer of the data."""

    def __init__(self):
        self.items = []

    def add(self, name, shape, gtype, nbytes, write):
        self.items.append((name, shape, gtype, nbytes, write))


def q4_0_from_packed(packed, scale, sdtype, rows, cols, name):
    """Yields Q4_0 bytes (uint8 [r, cols/32*18]) for slabs of rows of a pack-quantized matrix."""
    nb = cols // 32
    for r0 in range(0, rows, ROWS):
        r1 = min(rows, r0 + ROWS)
        p = packed.view(np.uint8).reshape(rows, cols // 2)[r0:r1]  # byte k: elements 2k (low), 2k+1 (high)
        nib = np.empty((r1 - r0, cols), np.uint8)
        nib[:, 0::2] = p & 15
        nib[:, 1::2] = p >> 4
        nib = nib.reshape(r1 - r0, nb, 32)
        qs = nib[:, :, :16] | (nib[:, :, 16:] << 4)  # Q4_0: byte j = element j | element j+16 << 4
        s = as_f32(sdtype, scale.view(np.uint8).reshape(rows, -1)[r0:r1].reshape(-1), (r1 - r0, nb))
        d = s.astype(np.float16)
        bad = d.astype(np.float32) != s
        if bad.any():
            i, j = np.argwhere(bad)[0]
            sys.exit(f"to_gguf: {name}: row {r0 + i} group {j}: scale {s[i, j]!r} has no exact f16 value")
        out = np.empty((r1 - r0, nb, 18), np.uint8)
        out[:, :, :2] = d.view(np.uint8).reshape(r1 - r0, nb, 2)
        out[:, :, 2:] = qs
        yield out.reshape(r1 - r0, nb * 18)


def write_items(w, items, f32, tag):
    """Writes the header, the metadata and the tensors (name, shape, type, bytes, generator of data)."""
    for gname, shape, gt, nbytes, _ in items:
        # quantized shapes go in as element shapes with a uint8 byte count; gguf-py reverses the order
        w.add_tensor_info(gname, shape, np.dtype(np.float32) if gt == f32 else np.dtype(np.uint16),
                          nbytes, raw_dtype=gt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    for gname, shape, gt, nbytes, gen in items:
        w.write_padding(fout, fout.tell())
        done = 0
        for part in gen():
            part.tofile(fout)
            done += part.nbytes
        if done != nbytes:
            sys.exit(f"{tag}: {gname}: wrote {done} bytes, expected {nbytes}")
        w.write_padding(fout, nbytes)
    w.close()


def slabs(dtype, raw, shape, gtype, gguf):
    """Yields the data of a dense tensor as `gtype`, a slab of rows at a time."""
    rows = shape[0] if len(shape) > 1 else 1
    cols = int(np.prod(shape)) // rows
    per = raw.size // rows
    for r0 in range(0, rows, ROWS):
        r1 = min(rows, r0 + ROWS)
        part = raw[r0 * per:r1 * per]
        if gtype == gguf.GGMLQuantizationType.BF16 and dtype == "BF16":
            yield np.asarray(part).view(np.uint16).reshape(r1 - r0, cols)
            continue
        x = as_f32(dtype, np.asarray(part), (r1 - r0, cols))
        if gtype == gguf.GGMLQuantizationType.F32:
            yield np.ascontiguousarray(x, dtype=np.float32)
        elif gtype == gguf.GGMLQuantizationType.BF16:
            u = x.view(np.uint32)
            yield ((u + 0x7fff + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
        else:
            yield gguf.quants.quantize(x, gtype)


GEMMA4_SPECIALS = {  # config.json key -> the token's text in Gemma-4's tokenizer
    "pad_token_id": "<pad>", "bos_token_id": "<bos>", "boi_token_id": "<|image>", "eoi_token_id": "<image|>",
    "image_token_id": "<|image|>", "boa_token_id": "<|audio>", "eoa_token_id": "<audio|>",
    "audio_token_id": "<|audio|>", "video_token_id": "<|video|>",
}


def stub_tokens(cfg, tc):
    """The stub vocabulary (see the module's doc): token texts and kinds ("user", "byte",
    "control"). Byte tokens take the last free ids (low ids stay fillers: "[17]" in a prompt is
    id 17), the specials sit where config.json puts them."""
    n = tc["vocab_size"]
    spec = {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 100: "<|channel>", 101: "<channel|>",
            105: "<|turn>", 106: "<turn|>"}
    for key, text in GEMMA4_SPECIALS.items():
        v = cfg.get(key, tc.get(key))
        if isinstance(v, int) and 0 <= v < n:
            spec[v] = text
    spec = {i: t for i, t in spec.items() if i < n}
    free = [i for i in range(n) if i not in spec]
    if len(free) < 256:
        sys.exit(f"to_gguf: --vocab stub needs 256 free ids for the bytes, vocab {n} has {len(free)}")
    toks, kinds = [f"[{i}]" for i in range(n)], ["user"] * n  # user-defined: matched whole in a prompt
    for b, i in enumerate(free[-256:]):
        toks[i], kinds[i] = f"<0x{b:02X}>", "byte"
    for i, t in spec.items():
        toks[i], kinds[i] = t, "control"
    return toks, kinds


def add_stub_vocab(w, cfg, tc, gguf):
    toks, kinds = stub_tokens(cfg, tc)
    n = len(toks)
    TT = gguf.TokenType
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * n)
    w.add_token_types([{"user": TT.USER_DEFINED, "byte": TT.BYTE, "control": TT.CONTROL}[k] for k in kinds])
    w.add_bos_token_id(2 if n > 2 else 0)
    w.add_eos_token_id(1 if n > 1 else 0)
    w.add_unk_token_id(3 if n > 3 else 0)
    w.add_pad_token_id(0)
    if n > 106:
        w.add_eot_token_id(106)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)  # text is bytes as given: no SentencePiece "▁" before the prompt


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf-py", default=os.path.expanduser("~/.cache/g4tp-peer/llama.cpp/gguf-py"),
                    help="llama.cpp's gguf-py folder (default: the cache run.sh builds)")
    ap.add_argument("--type", choices=["f32", "bf16"], default="bf16", help="dense matrices (default bf16)")
    ap.add_argument("--head-type", choices=["f32", "bf16", "q4_0"], default=None,
                    help="the embedding/tied head (default: --type; q4_0 for a W4A16 checkpoint)")
    ap.add_argument("--vocab", choices=["none", "stub"], default="none",
                    help="none: ids only (default); stub: a byte-level vocabulary for tools that tokenize text")
    ap.add_argument("model_dir")
    ap.add_argument("out")
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    import gguf  # noqa: E402  (llama.cpp's own, from the cache)

    T = gguf.GGMLQuantizationType
    cfg, tc = text_config(a.model_dir)
    if tc.get("enable_moe_block") or tc.get("num_experts"):
        sys.exit("to_gguf: MoE Gemma-4 is not handled (dense only)")
    if tc.get("hidden_size_per_layer_input") or tc.get("num_kv_shared_layers"):
        sys.exit("to_gguf: per-layer inputs / shared KV layers are not handled (31B-style dense only)")
    qc = cfg.get("quantization_config")
    w4a16 = qc is not None and qc.get("quant_method") == "compressed-tensors"
    if qc is not None and not w4a16:
        sys.exit(f"to_gguf: quantization_config {qc.get('quant_method')!r} not handled")
    if w4a16:
        for g in qc["config_groups"].values():
            w = g["weights"]
            if (w["num_bits"], w["type"], w["symmetric"], w["strategy"], w["group_size"]) != (4, "int", True, "group", 32):
                sys.exit(f"to_gguf: W4A16 scheme {w} is not Q4_0-shaped")
    dense = {"f32": T.F32, "bf16": T.BF16}[a.type]
    head = {"f32": T.F32, "bf16": T.BF16, "q4_0": T.Q4_0}[a.head_type or ("q4_0" if w4a16 else a.type)]

    n_layer = tc["num_hidden_layers"]
    types = tc["layer_types"]
    if len(types) != n_layer:
        sys.exit("to_gguf: layer_types and num_hidden_layers disagree")
    swa = [t == "sliding_attention" for t in types]
    hd_swa, hd_full = tc["head_dim"], tc.get("global_head_dim") or tc["head_dim"]
    kv_swa = tc["num_key_value_heads"]
    kv_full = tc.get("num_global_key_value_heads") or kv_swa
    rp = tc["rope_parameters"]
    full_rp, swa_rp = rp["full_attention"], rp["sliding_attention"]
    if full_rp.get("rope_type") != "proportional" or swa_rp.get("rope_type", "default") != "default":
        sys.exit(f"to_gguf: RoPE types {full_rp.get('rope_type')}/{swa_rp.get('rope_type')} not handled")
    if tc.get("hidden_activation") != "gelu_pytorch_tanh":
        sys.exit(f"to_gguf: activation {tc.get('hidden_activation')} not handled")

    arch = gguf.MODEL_ARCH_NAMES[gguf.MODEL_ARCH.GEMMA4]
    w = gguf.GGUFWriter(a.out, arch)
    w.add_name(os.path.basename(os.path.normpath(a.model_dir)))
    w.add_block_count(n_layer)
    w.add_context_length(tc.get("max_position_embeddings", 131072))
    w.add_embedding_length(tc["hidden_size"])
    w.add_feed_forward_length(tc["intermediate_size"])
    w.add_head_count(tc["num_attention_heads"])
    w.add_head_count_kv([kv_swa if s else kv_full for s in swa])
    w.add_layer_norm_rms_eps(tc.get("rms_norm_eps", 1e-6))
    w.add_key_length(hd_full)
    w.add_value_length(hd_full)
    w.add_key_length_swa(hd_swa)
    w.add_value_length_swa(hd_swa)
    w.add_rope_freq_base(full_rp["rope_theta"])
    w.add_rope_freq_base_swa(swa_rp["rope_theta"])
    w.add_rope_dimension_count(hd_full)  # proportional: the unrotated pairs get rope_freqs 1e30
    w.add_rope_dimension_count_swa(int(hd_swa * swa_rp.get("partial_rotary_factor", 1.0)))
    if tc.get("final_logit_softcapping"):
        w.add_final_logit_softcapping(tc["final_logit_softcapping"])
    w.add_sliding_window(tc["sliding_window"])
    w.add_sliding_window_pattern(swa)
    w.add_shared_kv_layers(0)
    w.add_embedding_length_per_layer_input(0)
    w.add_vocab_size(tc["vocab_size"])
    if a.vocab == "stub":
        add_stub_vocab(w, cfg, tc, gguf)
    else:
        w.add_tokenizer_model("none")
    kinds = {dense, head}
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0 if w4a16 else
                    gguf.LlamaFileType.ALL_F32 if kinds == {T.F32} else gguf.LlamaFileType.MOSTLY_BF16)
    if w4a16 or T.Q4_0 in kinds:
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)

    st = open_safetensors(a.model_dir)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA4, n_layer)
    plan = Plan()
    for name in sorted(st):
        if not (name.startswith("model.language_model.") or (name.startswith("model.") and ".vision" not in name
                                                            and "embed_vision" not in name and "audio" not in name)):
            continue  # vision / audio towers
        base = name.replace("language_model.", "")
        if base.endswith(".weight_scale") or base.endswith(".weight_shape"):
            continue  # read with their .weight_packed
        dtype, shape, raw = st[name]
        if base.endswith(".weight_packed"):
            hf = base[: -len("_packed")]
            sname = name[: -len("packed")] + "scale"
            if sname not in st:
                sys.exit(f"to_gguf: {name} has no {sname}")
            rows, cols = shape[0], shape[1] * 8
            if cols % 32 or st[sname][1] != [rows, cols // 32] or dtype != "I32":
                sys.exit(f"to_gguf: {name}: shapes {shape} / {st[sname][1]} are not int4 groups of 32")
            gname = names.get_name(hf, try_suffixes=(".weight",))
            sd, _, sraw = st[sname]
            plan.add(gname, (rows, cols), T.Q4_0, rows * cols // 32 * 18,
                     lambda p=raw, s=sraw, sd=sd, r=rows, c=cols, n=name: q4_0_from_packed(p, s, sd, r, c, n))
            continue
        if base.endswith("layer_scalar"):
            base += ".weight"
        gname = names.get_name(base, try_suffixes=(".weight", ".bias"))
        if gname is None:
            sys.exit(f"to_gguf: cannot map tensor {name}")
        if len(shape) == 2:
            gt = head if "embed_tokens" in name else dense
        else:
            gt = T.F32  # norms and layer scalars stay f32 (as llama.cpp's converter keeps 1-D tensors)
        numel = int(np.prod(shape))
        nbytes = {T.F32: 4 * numel, T.BF16: 2 * numel, T.Q4_0: numel // 32 * 18}[gt]
        if gt == T.Q4_0 and shape[-1] % 32:
            sys.exit(f"to_gguf: {name}: {shape[-1]} columns are not whole Q4_0 blocks")
        plan.add(gname, tuple(shape), gt, nbytes, lambda d=dtype, r=raw, s=shape, g=gt: slabs(d, r, s, g, gguf))
    # proportional RoPE of the full-attention layers (Gemma4Model.generate_extra_tensors)
    n_rot = int(hd_full * full_rp["partial_rotary_factor"] / 2)
    freqs = np.array([1.0] * n_rot + [1e30] * (hd_full // 2 - n_rot), dtype=np.float32)
    plan.add(gguf.TENSOR_NAMES[gguf.MODEL_TENSOR.ROPE_FREQS] + ".weight", freqs.shape, T.F32, freqs.nbytes,
             lambda f=freqs: iter([f]))

    write_items(w, plan.items, T.F32, "to_gguf")
    print(f"to_gguf: wrote {a.out} ({len(plan.items)} tensors, {os.path.getsize(a.out) / 1e9:.2f} GB)")


if __name__ == "__main__":
    main()
