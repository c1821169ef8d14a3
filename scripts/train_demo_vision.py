#!/usr/bin/python3
"""Writes models/demo-vision: the text demo (models/demo) taught to name a picture's dominant colour.

Starts from the demo's trained text weights, tokenizer and chat template and the tiny random vision
tower of tests/data/vision/tiny_vision (2 layers, hidden 32; kept frozen: its pooled, normalised
features of a picture still say which colour dominates). Trains the text model and a new
embed_vision projection (32 -> 128) so that a user turn "<|image|>What colour is this picture?"
(and a few other phrasings) is answered "The picture is mostly red." for mostly red, green, blue,
yellow, white or black pictures of any size, with noise and shapes of other colours on them, while
the capital questions keep the answers the demo gave (its own greedy answers are mixed into
training). The math is the numpy oracle's (../shared/oracle: gemma4_ref.py, gemma4_vision_ref.py)
transcribed to torch: the "hf" image mask (image blocks bidirectional in sliding layers only,
within the window), soft tokens unscaled, scaling 1.0, soft-cap. Features and the final check use
the oracle itself; the check loads the exported BF16 folder and decodes greedily.

Not run by the tests. Deterministic (numpy seed 1234, torch seed 1234, one thread); needs Debian's
python3-torch (1.13) and numpy. Run from the repository root:
    /usr/bin/python3 scripts/train_demo_vision.py [--oracle ../shared/oracle] [--steps 900]
"""
import argparse
import json
import math
import os
import re
import shutil
import sys
import time

import numpy as np

DEMO, TOWER, OUT = "models/demo", "tests/data/vision/tiny_vision", "models/demo-vision"
COLOURS = {"red": (215, 35, 35), "green": (40, 170, 55), "blue": (35, 60, 210),
           "yellow": (235, 215, 40), "white": (245, 245, 245), "black": (15, 15, 15)}
QUESTIONS = ["What colour is this picture?", "What color is this picture?", "What colour is this image?",
             "What color is this image?", "What is the main colour of this picture?", "Which colour is it?"]
PHRASINGS = ["What is the capital of {c}?", "What's the capital city of {c}?", "Tell me the capital of {c}.",
             "Capital of {c}?", "Which city is the capital of {c}?", "What is the capital of {c}"]
COUNTRIES = ["France", "Germany", "Japan", "Italy", "Spain", "the United Kingdom", "the United States", "Canada",
             "Brazil", "Australia", "India", "China", "Egypt", "Kenya", "Mexico", "Argentina", "Russia", "Colombia",
             "Iceland", "Moldova", "Côte d'Ivoire", "São Tomé and Príncipe", "Sri Lanka",
             "the Democratic Republic of the Congo", "Burkina Faso", "Norway", "Sweden", "Finland", "Denmark",
             "Poland", "Portugal", "Greece", "Turkey", "Ireland", "Austria", "Switzerland", "Belgium",
             "the Netherlands", "Hungary", "Czechia", "Romania", "Bulgaria", "Ukraine", "Peru", "Chile",
             "Venezuela", "Cuba", "Nigeria", "Ghana", "Ethiopia", "Morocco", "Algeria", "Tunisia", "South Africa",
             "Iran", "Iraq", "Saudi Arabia", "Pakistan", "Bangladesh", "Thailand", "Vietnam", "Indonesia",
             "the Philippines", "Malaysia", "South Korea", "North Korea", "Mongolia", "Nepal", "New Zealand",
             "Fiji", "Jamaica", "Bolivia", "Paraguay", "Uruguay", "Ecuador", "Senegal", "Mali", "Niger",
             "Chad", "Sudan", "Uganda", "Tanzania", "Zambia", "Zimbabwe", "Angola", "Madagascar", "Afghanistan",
             "Kazakhstan", "Uzbekistan", "Georgia", "Armenia", "Azerbaijan", "Israel", "Jordan", "Lebanon", "Syria",
             "Qatar", "Kuwait", "Oman", "Yemen", "Laos", "Cambodia", "Myanmar", "Singapore", "Latvia", "Lithuania",
             "Estonia", "Belarus", "Serbia", "Croatia", "Slovenia", "Slovakia", "Albania", "Luxembourg", "Malta",
             "Cyprus", "Honduras", "Guatemala", "Nicaragua", "Panama", "Costa Rica", "Haiti", "Libya", "Somalia"]
PICTURES = "tests/data/vision/demo"
SEED = 1234
MAX_SOFT = 70


# ----------------------------------------------------------------------------------------------- tokenizer

class Tok:
    """The demo tokenizer.json (BPE over the whole string, ' ' -> '▁', byte fallback, added tokens split
    first); checked against every prompt and answer of golden_demo.json before use."""

    def __init__(self, path):
        t = json.load(open(path, encoding="utf-8"))
        self.vocab = t["model"]["vocab"]
        self.ranks = {tuple(m if isinstance(m, list) else m.split(" ")): i for i, m in enumerate(t["model"]["merges"])}
        self.special = {a["content"]: a["id"] for a in t["added_tokens"]}
        self.inv = {v: k for k, v in self.vocab.items()}
        self.inv.update({v: k for k, v in self.special.items()})
        self.sre = re.compile("(" + "|".join(re.escape(s) for s in sorted(self.special, key=len, reverse=True)) + ")")

    def _bpe(self, s):
        syms = list(s)
        while len(syms) > 1:
            r, i = min((self.ranks.get((syms[i], syms[i + 1]), 1 << 60), i) for i in range(len(syms) - 1))
            if r == 1 << 60:
                break
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        out = []
        for s in syms:
            out += [self.vocab[s]] if s in self.vocab else [self.vocab["<0x%02X>" % b] for b in s.encode()]
        return out

    def encode(self, text):
        ids = []
        for part in self.sre.split(text):
            if part in self.special:
                ids.append(self.special[part])
            elif part:
                ids += self._bpe(part.replace(" ", "\u2581"))
        return ids

    def decode(self, ids):
        b = bytearray()
        for i in ids:
            p = self.inv[i]
            m = re.fullmatch(r"<0x([0-9A-F]{2})>", p)
            b += bytes([int(m.group(1), 16)]) if m else p.replace("\u2581", " ").encode()
        return b.decode("utf-8", "replace")


def prompt_text(content):
    """The chat template's rendering of one user turn + generation prompt (see golden_demo.json)."""
    return f"<bos><|turn>user\n{content}<turn|>\n<|turn>model\n<|channel>thought\n<channel|>"


# ----------------------------------------------------------------------------------------------- pictures

def make_picture(rng, name, size=None, noise=None):
    """A mostly-`name` picture: random size and aspect, the colour jittered, pixel noise, and up to 4
    rectangles/ellipses of other colours covering at most ~35 % of it."""
    h, w = (int(v) for v in rng.integers(20, 420, 2))
    h, w = size or (h, w)
    base = np.clip(np.array(COLOURS[name]) + rng.integers(-25, 26, 3), 0, 255)
    sd = rng.uniform(0, 22)
    img = base[None, None, :] + rng.normal(0, sd if noise is None else noise, (h, w, 3))
    covered = np.zeros((h, w), bool)
    yy, xx = np.mgrid[0:h, 0:w]
    for _ in range(int(rng.integers(0, 5))):
        other = [c for c in COLOURS if c != name]
        col = np.array(COLOURS[other[rng.integers(len(other))]]) if rng.random() < 0.7 else rng.integers(0, 256, 3)
        ch, cw = int(rng.integers(2, max(3, h // 2))), int(rng.integers(2, max(3, w // 2)))
        y0, x0 = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        if rng.random() < 0.5:
            m = (yy >= y0) & (yy < y0 + ch) & (xx >= x0) & (xx < x0 + cw)
        else:
            m = ((yy - y0 - ch / 2) / (ch / 2)) ** 2 + ((xx - x0 - cw / 2) / (cw / 2)) ** 2 <= 1
        if (covered | m).mean() > 0.35:
            continue
        covered |= m
        img[m] = col
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def features(vref, img, vr):
    """The frozen tower's output before embed_vision's projection: rms_norm(standardised pooled) [n, 32]."""
    pp = vr.preprocess(img, MAX_SOFT, vref.cfg.patch_size, vref.cfg.pooling_kernel_size, "pil")
    keep = {}
    vref.encode(pp["pixel_values"], pp["position_ids"], keep=keep)
    return vr.g4.rms_norm(keep["pooled_std"], None, vref.cfg.rms_norm_eps).astype(np.float32)


TEST_PICTURES = [("red.png", 90, 120), ("green.jpg", 480, 640), ("blue.webp", 400, 150), ("yellow.png", 64, 200),
                 ("white.jpg", 333, 517), ("black.webp", 256, 256)]


def write_test_pictures(out):
    """The 6 pictures of tests/e2e/demo_vision.sh (their names say the colour), not seen in training."""
    from PIL import Image
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(SEED + 1)
    for fn, h, w in TEST_PICTURES:
        name = fn.split(".")[0]
        img = make_picture(rng, name, size=(h, w), noise=3 if fn.endswith(".png") else 12)
        kw = {"quality": 88} if fn.endswith((".jpg", ".webp")) else {}
        Image.fromarray(img).save(os.path.join(out, fn), **kw)


# ----------------------------------------------------------------------------------------------- torch model

def build_torch(torch, cfg, w, proj):
    """Parameters (fp32) named as the oracle's text weights, plus 'proj' [H][32]."""
    P = torch.nn.ParameterDict()
    for k, v in w.items():
        P[k.replace(".", "__")] = torch.nn.Parameter(torch.tensor(np.asarray(v, np.float32)))
    P["proj"] = torch.nn.Parameter(torch.tensor(proj))
    return P


def forward(torch, cfg, P, g4, ids, soft, blocks):
    """ids [B, T] (long), soft: list per row of [n_b, 32] features or None, blocks [B, T] (-1 text).
    Returns logits [B, T, V] after the soft-cap."""
    F = torch.nn.functional
    W = lambda k: P[k.replace(".", "__")]  # noqa: E731
    B, T = ids.shape
    H, eps = cfg.hidden_size, cfg.rms_norm_eps
    scale = float(np.float32(math.sqrt(H)))

    def rms(x, wt):
        y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps)
        return y if wt is None else y * wt

    h = W("embed_tokens.weight")[ids] * scale
    img = blocks >= 0
    if img.any():
        rows = []
        for b in range(B):
            if soft[b] is not None:
                rows.append(torch.tensor(soft[b]) @ P["proj"].T)
        h = h.masked_scatter(img[..., None], torch.cat(rows, 0))
    pos = torch.arange(T)
    causal = pos[None, :] <= pos[:, None]
    win = pos[None, :] > pos[:, None] - cfg.sliding_window
    same = (blocks[:, :, None] == blocks[:, None, :]) & (blocks[:, :, None] >= 0)
    mask_full = causal[None].expand(B, T, T)
    mask_slide = (causal[None] | same) & win[None]
    for i in range(cfg.num_hidden_layers):
        full, hd, nkv, k_eq_v = cfg.layer_geometry(i)
        lt = cfg.layer_types[i]
        inv = torch.tensor(g4.rope_inv_freq(cfg, lt, np.float32))
        fr = pos.float()[:, None] * inv[None, :]
        emb = torch.cat([fr, fr], -1)
        cos, sin = emb.cos()[None, :, None, :], emb.sin()[None, :, None, :]

        def rope(x):
            x1, x2 = x[..., :hd // 2], x[..., hd // 2:]
            return x * cos + torch.cat([-x2, x1], -1) * sin
        p = f"layers.{i}."
        nh = cfg.num_attention_heads
        x = rms(h, W(p + "input_layernorm.weight"))
        q = rope(rms((x @ W(p + "self_attn.q_proj.weight").T).view(B, T, nh, hd), W(p + "self_attn.q_norm.weight")))
        kr = (x @ W(p + "self_attn.k_proj.weight").T).view(B, T, nkv, hd)
        vr = kr if k_eq_v else (x @ W(p + "self_attn.v_proj.weight").T).view(B, T, nkv, hd)
        k = rope(rms(kr, W(p + "self_attn.k_norm.weight")))
        v = rms(vr, None)
        rep = nh // nkv
        k, v = k.repeat_interleave(rep, 2), v.repeat_interleave(rep, 2)
        s = torch.einsum("bthd,bshd->bhts", q, k)
        m = mask_full if full else mask_slide
        s = s.masked_fill(~m[:, None], torch.finfo(s.dtype).min)
        a = torch.einsum("bhts,bshd->bthd", s.softmax(-1), v).reshape(B, T, nh * hd)
        x = rms(a @ W(p + "self_attn.o_proj.weight").T, W(p + "post_attention_layernorm.weight"))
        h = h + x
        x = rms(h, W(p + "pre_feedforward_layernorm.weight"))
        x = (F.gelu(x @ W(p + "mlp.gate_proj.weight").T, approximate="tanh") * (x @ W(p + "mlp.up_proj.weight").T)) \
            @ W(p + "mlp.down_proj.weight").T
        h = (h + rms(x, W(p + "post_feedforward_layernorm.weight"))) * W(p + "layer_scalar")
    h = rms(h, W("norm.weight"))
    logits = h @ W("embed_tokens.weight").T
    cap = cfg.final_logit_softcapping
    return torch.tanh(logits / cap) * cap


def batch(torch, examples, pad=0):
    """examples: (ids, n_prompt, feats or None). Right-padded ids, blocks, loss targets (-100 off the answer)."""
    T = max(len(e[0]) for e in examples)
    ids = torch.full((len(examples), T), pad, dtype=torch.long)
    blocks = torch.full((len(examples), T), -1, dtype=torch.long)
    tgt = torch.full((len(examples), T), -100, dtype=torch.long)
    for b, (seq, npr, _f, btok) in enumerate(examples):
        ids[b, :len(seq)] = torch.tensor(seq)
        blocks[b, :len(seq)] = torch.tensor(btok)
        tgt[b, npr - 1:len(seq) - 1] = torch.tensor(seq[npr:])
    return ids, blocks, tgt, [e[2] for e in examples]


def expand(prompt_ids, n_soft, image_id, boi, eoi):
    out, blk = [], []
    for t in prompt_ids:
        if t == image_id:
            out += [boi] + [image_id] * n_soft + [eoi]
            blk += [-1] + [0] * n_soft + [-1]
        else:
            out.append(t)
            blk.append(-1)
    return out, blk


def greedy_torch(torch, cfg, P, g4, prompt, max_new=32, stop=(1, 106)):
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(max_new):
            ids = torch.tensor([seq])
            t = int(forward(torch, cfg, P, g4, ids, [None], torch.full_like(ids, -1))[0, -1].argmax())
            seq.append(t)
            if t in stop:
                break
    return seq[len(prompt):]


# ----------------------------------------------------------------------------------------------- check

def verify(model_dir, pictures, g4, vr):
    """The numpy oracle on the exported (BF16) folder: greedy answers for the test pictures and every
    text case of models/demo/golden_demo.json. Returns the number of wrong answers."""
    from PIL import Image
    tok = Tok(os.path.join(model_dir, "tokenizer.json"))
    tcfg, tw, _ = g4.load_checkpoint(model_dir)
    vcfg, vw = vr.load_vision(model_dir)
    tref, vref = g4.Gemma4Ref(tcfg, tw), vr.Gemma4VisionRef(vcfg, vw)
    bad = 0
    for fn in sorted(os.listdir(pictures)):
        img = np.asarray(Image.open(os.path.join(pictures, fn)).convert("RGB"))
        pp = vr.preprocess(img, MAX_SOFT, vcfg.patch_size, vcfg.pooling_kernel_size, "pil")
        pr = tok.encode(prompt_text("<|image|>" + QUESTIONS[0]))
        res = vr.run_multimodal(tref, vref, pr, [pp], max_new_tokens=32, stop_ids=(1, 106))
        got = tok.decode([t for t in res["generated_ids"] if t not in (1, 106)])
        want = f"The picture is mostly {fn.split('.')[0]}."
        bad += got != want
        print(f"  {fn}: {got!r} (min top-1 margin {res['min_top1_margin']:.2f})", "" if got == want else "WRONG")
    gold = json.load(open(os.path.join(DEMO, "golden_demo.json"), encoding="utf-8"))
    ok = 0
    for c in gold["cases"]:
        tref.reset()
        seq, lg = list(c["prompt_ids"]), tref.forward(c["prompt_ids"])[-1]
        gen = []
        while len(gen) < len(c["generated_ids"]) + 4:
            t = int(np.argmax(lg))
            gen.append(t)
            if t in (1, 106, 50):
                break
            lg = tref.forward([t])[-1]
        ok += gen == c["generated_ids"]
        if gen != c["generated_ids"]:
            print(f"  text {c['name']}: {tok.decode(gen)!r} (the demo: {c['generated_text']!r})")
    print(f"  text cases answered as the demo does: {ok}/{len(gold['cases'])}")
    return bad + (ok < len(gold["cases"]) // 2)


# ----------------------------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--oracle", default="../shared/oracle")
    ap.add_argument("--out", default=OUT)
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--pictures", type=int, default=120, help="training pictures per colour")
    ap.add_argument("--test-pictures", metavar="DIR", help="only write the 6 test pictures to DIR")
    ap.add_argument("--verify", action="store_true", help="only check --out with the oracle on tests/data/vision/demo")
    a = ap.parse_args()
    if a.test_pictures:
        return write_test_pictures(a.test_pictures)
    sys.path.insert(0, a.oracle)
    if a.verify:
        import gemma4_ref as g4
        import gemma4_vision_ref as vr
        return 1 if verify(a.out, PICTURES, g4, vr) else 0
    import torch
    import gemma4_ref as g4
    import gemma4_vision_ref as vr
    from safetensors_np import f32_to_bf16_bits, write_safetensors
    torch.manual_seed(SEED)
    torch.set_num_threads(1)
    rng = np.random.default_rng(SEED)
    t0 = time.time()

    tok = Tok(os.path.join(DEMO, "tokenizer.json"))
    gold = json.load(open(os.path.join(DEMO, "golden_demo.json"), encoding="utf-8"))
    for c in gold["cases"]:
        assert tok.encode(c["prompt_text"]) == c["prompt_ids"], c["name"]
        assert tok.encode(c["generated_text_with_special"]) == c["generated_ids"], c["name"]
    assert [tok.special[s] for s in ("<|image>", "<|image|>", "<image|>")] == [1529, 1531, 1533]

    cfg, w, _ = g4.load_checkpoint(DEMO)
    vcfg, vw = vr.load_vision(TOWER)
    vref = vr.Gemma4VisionRef(vcfg, vw)
    P = build_torch(torch, cfg, w, rng.normal(0, 0.5, (cfg.hidden_size, vcfg.hidden_size)).astype(np.float32))

    # the demo's own answers to capital questions: what training must keep
    text = [(c["prompt_ids"] + c["generated_ids"], len(c["prompt_ids"])) for c in gold["cases"]]
    for c in COUNTRIES:
        for ph in PHRASINGS[:3]:
            pr = tok.encode(prompt_text(ph.format(c=c)))
            ans = greedy_torch(torch, cfg, P, g4, pr)
            if ans[-1] == 106:
                text.append((pr + ans, len(pr)))
    text = [(s, n, None, [-1] * len(s)) for s, n in text]
    print(f"{len(text)} text examples ({time.time() - t0:.0f} s)", flush=True)

    def image_example(name, qi):
        f = features(vref, make_picture(rng, name), vr)
        pr = tok.encode(prompt_text("<|image|>" + QUESTIONS[qi]))
        ids, blk = expand(pr, f.shape[0], 1531, 1529, 1533)
        ans = tok.encode(f"The picture is mostly {name}.") + [106]
        return ids + ans, len(ids), f, blk + [-1] * len(ans)
    names = list(COLOURS)
    train = [image_example(names[i % 6], int(rng.integers(len(QUESTIONS)))) for i in range(6 * a.pictures)]
    held = [image_example(names[i % 6], 0) for i in range(60)]
    print(f"{len(train)} + {len(held)} pictures ({time.time() - t0:.0f} s)", flush=True)

    opt = torch.optim.Adam(P.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / 50) * 0.5 * (1 + math.cos(math.pi * min(s, a.steps) / a.steps)))
    ce = torch.nn.functional.cross_entropy
    for step in range(a.steps):
        ib = [train[int(j)] for j in rng.choice(len(train), 12, replace=False)]
        tb = [text[int(j)] for j in rng.choice(len(text), 8, replace=False)]
        loss = 0
        for ex, wgt in ((ib, 1.0), (tb, 1.0)):
            ids, blocks, tgt, feats = batch(torch, ex)
            lg = forward(torch, cfg, P, g4, ids, feats, blocks)
            loss = loss + wgt * ce(lg.reshape(-1, lg.shape[-1]), tgt.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(P.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 25 == 0 or step == a.steps - 1:
            print(f"step {step} loss {float(loss):.4f} ({time.time() - t0:.0f} s)", flush=True)
        if step % 150 == 149 or step == a.steps - 1:
            with torch.no_grad():
                ok = 0
                for ex in held:
                    ids, blocks, tgt, feats = batch(torch, [ex])
                    pred = forward(torch, cfg, P, g4, ids, feats, blocks)[0].argmax(-1)
                    m = tgt[0] != -100
                    ok += bool((pred[m] == tgt[0][m]).all())
                print(f"  held-out pictures, teacher-forced all-correct: {ok}/{len(held)}", flush=True)

    export(a, P, vw, f32_to_bf16_bits, write_safetensors)
    print(f"wrote {a.out} ({time.time() - t0:.0f} s); the oracle on it:", flush=True)
    return 1 if verify(a.out, PICTURES, g4, vr) else 0


def export(a, P, vw, f32_to_bf16_bits, write_safetensors):
    os.makedirs(a.out, exist_ok=True)
    t = {}
    for k, v in P.items():
        arr = v.detach().numpy().astype(np.float32)
        if k == "proj":
            t["model.embed_vision.embedding_projection.weight"] = arr
        else:
            t["model.language_model." + k.replace("__", ".")] = arr
    for k, v in vw.items():
        if k != "embed_vision.embedding_projection.weight":
            t["model." + k] = np.asarray(v, np.float32)
    write_safetensors(os.path.join(a.out, "model.safetensors"),
                      [(k, "BF16", f32_to_bf16_bits(v)) for k, v in sorted(t.items())])
    dcfg = json.load(open(os.path.join(DEMO, "config.json")))
    tcfg = {k: v for k, v in dcfg.items() if k not in ("architectures", "transformers_version")}
    tv = json.load(open(os.path.join(TOWER, "config.json")))
    cfgj = {"architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "dtype": "bfloat16",
            "text_config": tcfg, "vision_config": tv["vision_config"], "audio_config": None,
            "boi_token_id": 1529, "image_token_id": 1531, "eoi_token_id": 1533, "audio_token_id": 1532,
            "boa_token_id": 1530, "eoa_token_id": 1534, "eoa_token_index": 1534, "video_token_id": 1535,
            "bos_token_id": dcfg["bos_token_id"], "eos_token_id": dcfg["eos_token_id"],
            "pad_token_id": dcfg["pad_token_id"], "tie_word_embeddings": True,
            "vision_soft_tokens_per_image": MAX_SOFT, "transformers_version": dcfg.get("transformers_version")}
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(cfgj, f, indent=1)
        f.write("\n")
    proc = json.load(open(os.path.join(TOWER, "processor_config.json")))
    proc["image_processor"]["max_soft_tokens"] = MAX_SOFT
    proc["image_processor"]["image_seq_length"] = MAX_SOFT
    proc["image_seq_length"] = MAX_SOFT
    with open(os.path.join(a.out, "processor_config.json"), "w") as f:
        json.dump(proc, f, indent=1)
        f.write("\n")
    for fn in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        shutil.copyfile(os.path.join(DEMO, fn), os.path.join(a.out, fn))


if __name__ == "__main__":
    sys.exit(main())
