#!/usr/bin/python3
"""Image encode time of llama.cpp (libmtmd, `llama-mtmd-cli`) and g4tp (`build/bench/bench_vision`)
on the same Gemma-4 vision tower (not a test: nothing here runs in CI). See bench/peer/README.md,
"Image encode (mtmd)".

  /usr/bin/python3 bench/peer/vision.py [--quick] [--pairs N] [--threads T] [--model DIR]
                                         [--sizes HxW,..] [--image PNG] [--steps check,models,bench,table]

  check   (not in the default steps) the tiny vision checkpoint of the tests (tests/data/vision/
          tiny_vision, f32) through llama-mtmd-cli with the goldens' prompt ids, on each golden
          image and on its Pillow-resized.png (HF's resampler, so only the towers differ): image
          tokens and the 8 greedy ids against the golden's (and its variants: a wrong mask shows)

  models  the tower -> mmproj GGUF (bench/peer/to_mmproj.py) and the text part -> GGUF with a stub
          vocabulary (to_gguf.py --vocab stub; llama-mtmd-cli needs a model to tokenize with),
          under <cache>/models/<model folder name>/; made once
  bench   per size, --pairs pairs of: llama-mtmd-cli -n 1 on the picture resized to that size
          ("mtmd batch encoding done in N ms": the tower, pooling and projection of the image;
          its load runs one untimed warm-up encode), then bench_vision MODEL T ph pw 2 (the same
          work on a ph x pw patch grid; its first rep pages the weights in, the second is taken)
  table   per size: soft tokens, both engines' encode ms (mean, min-max), the ratio
          llama.cpp ms / g4tp ms (mean of the pairs' ratios; > 1: g4tp is faster)

A size must be multiples of 48 and at most 280 soft tokens (2520 patches): such a picture keeps its
size in both engines (HF's size rule; llama.cpp with --image-max-tokens 280, the processor's
max_soft_tokens), so both encode the same grid. The token counts llama.cpp prints are checked
against (H/48)(W/48). Results: <cache>/results/vision__<model>__<H>x<W>__t<T>[__<llama args>].json.
"""
import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(REPO, "bench/peer")


def log(*a):
    print(time.strftime("[%H:%M:%S]"), *a, flush=True)


def run(cmd, **kw):
    log("$", " ".join(cmd))
    return subprocess.run(cmd, **kw)


def parse_sizes(s):
    out = []
    for part in s.split(","):
        h, w = (int(x) for x in part.lower().split("x"))
        if h % 48 or w % 48 or h <= 0 or w <= 0:
            sys.exit(f"vision: size {part}: both sides must be positive multiples of 48")
        if (h // 48) * (w // 48) > 280:
            sys.exit(f"vision: size {part}: {(h // 48) * (w // 48)} soft tokens, more than 280 (the processor would resize)")
        out.append((h, w))
    return out


GOLDENS = ("native_672x960", "square_1000x1000", "nonsquare_333x517")
PASSTHROUGH = "{% for m in messages %}{{ m['content'] }}{% endfor %}"  # the prompt as given, no chat turns


def text_to_ids(data, toks, kinds):
    """llama-mtmd-cli's printed bytes -> ids of the stub vocabulary ("[i]" is id i, a byte its byte token)."""
    byte_id = {int(t[3:5], 16): i for i, (t, k) in enumerate(zip(toks, kinds)) if k == "byte"}
    out = []
    for m in re.finditer(rb"\[(\d+)\]|.", data, re.S):
        out.append(int(m.group(1)) if m.group(1) is not None else byte_id[m.group(0)[0]])
    return out


class Bench:
    def __init__(self, a):
        self.a = a
        self.cache = os.path.expanduser(a.cache)
        self.bin = os.path.join(self.cache, "llama.cpp", "build", "bin")
        self.name = os.path.basename(os.path.normpath(a.model))
        self.mdir = os.path.join(self.cache, "models", self.name)
        self.results = os.path.join(self.cache, "results")
        os.makedirs(self.results, exist_ok=True)
        self.mmproj = os.path.join(self.mdir, "mmproj-bf16.gguf")
        self.text = os.path.join(self.mdir, "text-bf16.gguf")
        self.cli = os.path.join(self.bin, "llama-mtmd-cli")
        self.bv = os.path.abspath(a.bench_vision)

    def check(self):
        sys.path.insert(0, HERE)
        from to_gguf import stub_tokens
        tiny = os.path.join(REPO, "tests/data/vision/tiny_vision")
        d = os.path.join(self.cache, "models", "tiny_vision")
        os.makedirs(d, exist_ok=True)
        text, mmproj, gelu = (os.path.join(d, f) for f in ("text-f32.gguf", "mmproj-f32.gguf", "mmproj-f32-gelu.gguf"))
        py = os.path.join(HERE, "to_gguf.py"), os.path.join(HERE, "to_mmproj.py")
        for out, cmd in ((text, [py[0], "--type", "f32", "--vocab", "stub"]), (mmproj, [py[1], "--type", "f32"]),
                         (gelu, [py[1], "--type", "f32", "--use-gelu"])):
            run(["/usr/bin/python3"] + cmd + [tiny, out], check=True, stdout=subprocess.DEVNULL)
        cfg = json.load(open(os.path.join(tiny, "config.json")))
        toks, kinds = stub_tokens(cfg, cfg["text_config"])
        rows = []
        for name in GOLDENS:
            g = json.load(open(os.path.join(REPO, "tests/data/vision", name, "golden.json")))
            ids = g["prompt_ids_unexpanded"]
            if ids[0] != 2:
                sys.exit(f"vision: {name}: the golden prompt does not start with bos")
            prompt = "".join("<__media__>" if i == cfg["image_token_id"] else toks[i] for i in ids[1:])
            want = g["text"]["generated_ids"]
            variants = {k: v.get("generated_ids") for k, v in g.get("variants_for_diagnosis", {}).items()}
            for label, img in (("image", os.path.join(REPO, "tests/data/vision", g["image"]["file"])),
                               ("resized.png", os.path.join(REPO, "tests/data/vision", name, "resized.png"))):
                for mm, tag in ((mmproj, "as converted (gelu_quick)"), (gelu, "clip.use_gelu (tanh)")):
                    cmd = [self.cli, "-m", text, "--mmproj", mm, "--image", img, "-p", prompt, "--temp", "0", "-n", "8",
                           "-t", str(self.a.threads), "--image-max-tokens", "280", "-v", "--jinja", "--chat-template", PASSTHROUGH]
                    r = subprocess.run(cmd, capture_output=True)
                    err = r.stderr.decode(errors="replace")
                    nx = re.findall(r"image_tokens->nx = (\d+)", err)
                    if r.returncode or not nx:
                        sys.stderr.write(err[-3000:])
                        sys.exit(f"vision: llama-mtmd-cli failed on {name} (rc {r.returncode})")
                    got = text_to_ids(r.stdout.strip(b"\n"), toks, kinds)
                    same = sum(x == y for x, y in zip(got, want))
                    like = [k for k, v in variants.items() if v == got and v != want]
                    rows.append((name, label, tag, int(nx[0]), g["preprocess"]["num_soft_tokens"], same, got, like))
        print("\nllama.cpp on the tiny vision checkpoint (f32) against the goldens (HF-verified oracle)\n")
        print("| image | input | tower FFN | image tokens llama.cpp / golden | greedy ids equal (of 8) | llama.cpp ids | = variant |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for name, label, tag, n, gn, same, got, like in rows:
            print(f"| {name} | {label} | {tag} | {n} / {gn} | {same} | {','.join(map(str, got))} | {','.join(like) or '-'} |")
        with open(os.path.join(self.results, "vision_check.json"), "w") as f:
            json.dump([dict(zip(("image", "input", "ffn", "tokens", "golden_tokens", "same_ids", "ids", "variants"), r))
                       for r in rows], f, indent=1)

    def models(self):
        os.makedirs(self.mdir, exist_ok=True)
        for out, cmd in ((self.mmproj, ["to_mmproj.py", self.a.model]), (self.text, ["to_gguf.py", "--vocab", "stub", self.a.model])):
            if os.path.exists(out):
                log("cached:", out)
                continue
            run(["/usr/bin/python3", os.path.join(HERE, cmd[0])] + cmd[1:] + [out + ".tmp"], check=True)
            os.rename(out + ".tmp", out)

    def picture(self, tmp, h, w):
        from PIL import Image
        path = os.path.join(tmp, f"{h}x{w}.png")
        Image.open(self.a.image).convert("RGB").resize((w, h), Image.BICUBIC).save(path)
        return path

    def llama(self, img):
        cmd = [self.cli, "-m", self.text, "--mmproj", self.mmproj, "--image", img, "-p", "Describe this image.",
               "--temp", "0", "-n", "1", "-t", str(self.a.threads), "--image-max-tokens", "280", "-v",
               "--jinja", "--chat-template", PASSTHROUGH] + self.a.llama_args.split()
        log("$", " ".join(cmd[:1] + ["..."] + cmd[5:7]))
        r = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
        out = r.stdout + r.stderr
        enc = re.findall(r"mtmd batch encoding done in (\d+) ms", out) or re.findall(r"slice encoded in (\d+) ms", out)
        nx = re.findall(r"image_tokens->nx = (\d+)", out)
        ny = re.findall(r"image_tokens->ny = (\d+)", out)
        dec = re.findall(r"image decoded \(batch \d+/\d+\) in (\d+) ms", out)
        if r.returncode or not enc or not nx:
            sys.stderr.write(out[-3000:])
            sys.exit(f"vision: llama-mtmd-cli failed (rc {r.returncode}) or printed no encode time")
        return dict(encode_ms=float(enc[0]), tokens=int(nx[0]) * int(ny[0] if ny else 1),
                    decode_image_ms=float(dec[0]) if dec else None)

    def g4tp(self, ph, pw):
        cmd = [self.bv, self.a.model, str(self.a.threads), str(ph), str(pw), "2"]
        r = run(cmd, capture_output=True, text=True)
        reps = [float(x) for x in re.findall(r"^rep \d+: ([0-9.]+) s", r.stdout, re.M)]
        if r.returncode or len(reps) != 2:
            sys.stderr.write(r.stdout[-2000:] + r.stderr[-2000:])
            sys.exit(f"vision: bench_vision failed (rc {r.returncode})")
        info = r.stdout.strip().splitlines()[-2:]
        return dict(encode_ms=reps[1] * 1000.0, first_ms=reps[0] * 1000.0, info=info)

    def result_path(self, h, w):
        extra = re.sub(r"[^A-Za-z0-9]+", "-", self.a.llama_args).strip("-")  # '-fa off' -> __fa-off
        return os.path.join(self.results, f"vision__{self.name}__{h}x{w}__t{self.a.threads}" + (f"__{extra}" if extra else "") + ".json")

    def bench(self):
        for p in (self.cli, self.bv):
            if not os.access(p, os.X_OK):
                sys.exit(f"vision: no {p} (peer.py --steps fetch,build for llama.cpp; make -j2 bench-bins for g4tp)")
        os.makedirs(self.results, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix="g4tp-vbench-")
        try:
            for h, w in self.a.sizes:
                img = self.picture(tmp, h, w)
                ph, pw, want = h // 16, w // 16, (h // 48) * (w // 48)
                pairs = []
                for i in range(self.a.pairs):
                    load = os.getloadavg()[0]
                    ll = self.llama(img)
                    if ll["tokens"] != want:
                        sys.exit(f"vision: llama.cpp made {ll['tokens']} image tokens of {h}x{w}, g4tp makes {want}")
                    g = self.g4tp(ph, pw)
                    pair = dict(llama=ll, g4tp=g, load_before=load, ratio=ll["encode_ms"] / g["encode_ms"])
                    log(f"{h}x{w} pair {i + 1}/{self.a.pairs}: {want} tokens; llama.cpp {ll['encode_ms']:.0f} ms, "
                        f"g4tp {g['encode_ms']:.0f} ms (first rep {g['first_ms']:.0f}); ratio {pair['ratio']:.2f}; load {load:.1f}")
                    pairs.append(pair)
                res = dict(model=self.a.model, size=[h, w], tokens=want, patches=ph * pw, threads=self.a.threads,
                           image=self.a.image, pairs=pairs, when=datetime.datetime.now().isoformat(timespec="seconds"),
                           llama_cpp=open(os.path.join(self.cache, "llama.cpp.release")).read().strip()
                           if os.path.exists(os.path.join(self.cache, "llama.cpp.release")) else None,
                           commands=dict(llama=f"llama-mtmd-cli -m text-bf16.gguf --mmproj mmproj-bf16.gguf --image IMG -n 1 --temp 0 "
                                         f"-t {self.a.threads} --image-max-tokens 280 -v {self.a.llama_args}".strip(),
                                         g4tp=f"bench_vision MODEL {self.a.threads} {ph} {pw} 2"))
                with open(self.result_path(h, w), "w") as f:
                    json.dump(res, f, indent=1)
                log("wrote", self.result_path(h, w))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    def table(self):
        print(f"\nImage encode, {self.name}, {self.a.threads} threads (ms per image; ratio = llama.cpp / g4tp, > 1: g4tp faster)\n")
        print("| image (H x W) | soft tokens | llama.cpp ms | g4tp ms | ratio | pairs | load |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for h, w in self.a.sizes:
            p = self.result_path(h, w)
            if not os.path.exists(p):
                print(f"| {h} x {w} | (not measured) | | | | | |")
                continue
            r = json.load(open(p))
            ps = r["pairs"]

            def col(v):
                return f"{sum(v) / len(v):.0f} ({min(v):.0f}-{max(v):.0f})" if len(v) > 1 else f"{v[0]:.0f}"
            ll, g, q = [x["llama"]["encode_ms"] for x in ps], [x["g4tp"]["encode_ms"] for x in ps], [x["ratio"] for x in ps]
            loads = [x["load_before"] for x in ps]
            rq = f"{sum(q) / len(q):.2f} ({min(q):.2f}-{max(q):.2f})" if len(q) > 1 else f"{q[0]:.2f}"
            print(f"| {h} x {w} | {r['tokens']} | {col(ll)} | {col(g)} | {rq} | {len(ps)} | {min(loads):.1f}-{max(loads):.1f} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default=os.environ.get("G4TP_PEER_CACHE", "~/.cache/g4tp-peer"))
    ap.add_argument("--model", default="/work/big/w31b-2l-vision", help="HF checkpoint with the tower (read only)")
    ap.add_argument("--bench-vision", default=os.path.join(REPO, "build/bench/bench_vision"))
    ap.add_argument("--image", default=os.path.join(REPO, "tests/data/vision/demo/red.png"),
                    help="the picture, resized to each size (the tower's cost does not depend on the pixels)")
    ap.add_argument("--sizes", default="768x768,672x960", help="H x W, multiples of 48, <= 280 soft tokens")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-args", default="", help="more llama-mtmd-cli options, e.g. '-fa off' (its tower's flash attention)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 pair: does it all work?")
    ap.add_argument("--steps", default="models,bench,table", help="check,models,bench,table (default: models,bench,table)")
    a = ap.parse_args()
    a.sizes = parse_sizes(a.sizes)
    if a.quick:
        a.pairs = 1
    b = Bench(a)
    steps = a.steps.split(",")
    for s in steps:
        if s not in ("check", "models", "bench", "table"):
            sys.exit(f"vision: unknown step {s}")
    if "check" in steps:
        b.check()
    if "models" in steps:
        b.models()
    if "bench" in steps:
        b.bench()
    if "table" in steps:
        b.table()


if __name__ == "__main__":
    main()
