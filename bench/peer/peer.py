#!/usr/bin/python3
"""Side-by-side benchmark of g4tp and llama.cpp on the same synthetic Gemma-4 checkpoints
(not a test: nothing here runs in CI). See bench/peer/README.md.

  /usr/bin/python3 bench/peer/peer.py [--quick] [--resume] [--models M,..] [--dtypes D,..]
                                       [--pairs N] [--steps fetch,build,models,check,accuracy,bench,table]

Steps (each caches its result under --cache, default ~/.cache/g4tp-peer, outside the tree):
  fetch     npm pack node-llama-cpp (pinned), take llama/gitRelease.bundle (a git bundle of
            llama.cpp's source) and git clone it
  build     cmake the CPU backend only (no CUDA/Metal/Vulkan, no curl/openssl) and build
            llama-bench, llama-quantize, llama-mtmd-cli (vision.py), libllama; compile
            bench/peer/peer_logits.c against it
  models    g4tp synth the checkpoints, convert them to GGUF with bench/peer/to_gguf.py
            (llama.cpp's gguf-py), quantize with llama-quantize --pure
  check     same function: greedy ids and logits of both engines on the f32 files (and the ids
            on the quantized ones)
  accuracy  f32 logits of both engines against the float64 numpy oracle (--oracle DIR) on
            the golden tiny checkpoints
  bench     llama-bench and g4tp bench alternately, N pairs per (model, dtype) cell
  table     the markdown table of the measured cells
"""
import argparse
import datetime
import json
import re
import os
import shutil
import subprocess
import sys
import tarfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC = os.path.join(REPO, "tests/data/spec/gemma-4-31B-it.config.json")
NPM_PACKAGE = "node-llama-cpp@3.22.1"  # ships llama.cpp release v0.5.0-era source (commit de3ff81)
PROMPT = [2, 105, 17, 33, 44, 55, 66, 77, 88, 99, 111, 122, 133, 144, 155, 166]  # the goldens' p16

# name: how to make the Hugging Face checkpoint, which dtypes are cells, and the model the check
# step runs on: a 2-layer sibling of the same widths (one sliding, one full layer: every tensor
# kind and both attention types). Deeper random models are chaotic: on w2048-12l g4tp's own
# --dtype q8_0 logits differ from its f32 ones by NMSE 1.4, and llama.cpp's f16 GELU table alone
# moves its f32 logits by 0.16, so only shallow ones can show two engines agree.
MODELS = {
    "quick": dict(desc="2048 wide, 2 layers, real vocab (--quick)", like="w2048", layers=2, f32_check=True, check="quick"),
    "w2048-12l": dict(desc="12 layers, hidden 2048, real vocab", like="w2048", layers=12, f32_check=False, check="quick"),
    "w31b-8l": dict(desc="31B widths, 8 layers", like="31b", layers=8, f32_check=False, check="w31b-2l"),
    "w31b-60l-w4a16": dict(desc="full 31B (60 layers), W4A16 -> q4_0", like="w4a16", layers=60, f32_check=False,
                           dtypes=["q4_0"], check="w31b-2l-w4a16"),
    # check-only siblings (f32 of the 31B widths would be 9.7 GB: bf16 shows the mapping as well)
    "w31b-2l": dict(desc="31B widths, 2 layers (check only)", like="31b", layers=2, f32_check=False, check="w31b-2l"),
    "w31b-2l-w4a16": dict(desc="31B widths, 2 layers, W4A16 (check only)", like="w4a16", layers=2, f32_check=False,
                          dtypes=["q4_0"], check="w31b-2l-w4a16"),
}
DTYPES = ["bf16", "q8_0", "q4_0"]


def log(*a):
    print(time.strftime("[%H:%M:%S]"), *a, flush=True)


def run(cmd, **kw):
    log("$", " ".join(cmd))
    return subprocess.run(cmd, check=True, **kw)


class Peer:
    def __init__(self, a):
        self.a = a
        self.cache = os.path.expanduser(a.cache)
        self.src = os.path.join(self.cache, "llama.cpp")
        self.bin = os.path.join(self.src, "build", "bin")
        self.models = os.path.join(self.cache, "models")
        self.results = os.path.join(self.cache, "results")
        for d in (self.cache, self.models, self.results):
            os.makedirs(d, exist_ok=True)
        self.g4tp = os.path.abspath(a.g4tp)

    # ---- fetch / build -------------------------------------------------------------------
    def fetch(self):
        if os.path.isdir(os.path.join(self.src, ".git")):
            log("llama.cpp source cached:", self.src)
            return
        out = subprocess.run(["npm", "pack", NPM_PACKAGE, "--pack-destination", self.cache], check=True,
                             capture_output=True, text=True, cwd=self.cache).stdout.split()
        tgz = os.path.join(self.cache, out[-1])
        with tarfile.open(tgz) as t:
            for m in ("package/llama/gitRelease.bundle", "package/llama/binariesGithubRelease.json"):
                t.extract(m, self.cache)
        bundle = os.path.join(self.cache, "package/llama/gitRelease.bundle")
        tmp = self.src + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        run(["git", "clone", "-q", bundle, tmp])
        os.rename(tmp, self.src)
        with open(os.path.join(self.cache, "package/llama/binariesGithubRelease.json")) as f:
            rel = json.load(f).get("release")
        head = subprocess.run(["git", "-C", self.src, "log", "-1", "--format=%H %ci"], capture_output=True, text=True).stdout.strip()
        with open(os.path.join(self.cache, "llama.cpp.release"), "w") as f:
            f.write(f"{NPM_PACKAGE} release {rel} commit {head}\n")
        log("llama.cpp:", NPM_PACKAGE, rel, head)

    def build(self):
        flags = ["-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
                 "-DGGML_CUDA=OFF", "-DGGML_METAL=OFF", "-DGGML_VULKAN=OFF", "-DLLAMA_BUILD_TESTS=OFF",
                 "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_BUILD_UI=OFF",
                 "-DBUILD_SHARED_LIBS=ON"]
        if not self.a.amx:
            # -march=native turns on AMX where the CPU lists it; on the development VM ggml's AMX
            # q8_0/q4_0 kernels die with SIGILL (tilezero on an unconfigured tile), so it is off
            # unless --amx (explicit -mno-* win over -march=native in gcc)
            noamx = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
            flags += [f"-DCMAKE_C_FLAGS={noamx}", f"-DCMAKE_CXX_FLAGS={noamx}"]
        stamp = os.path.join(self.cache, "build.flags")
        tools = [os.path.join(self.bin, t) for t in ("llama-bench", "llama-quantize", "llama-mtmd-cli")]
        same = os.path.exists(stamp) and open(stamp).read() == "\n".join(flags)
        if not same or not all(os.path.exists(t) for t in tools):
            if not shutil.which("cmake"):
                run(["apt-get", "install", "-y", "cmake"])
            run(["cmake", "-S", self.src, "-B", os.path.join(self.src, "build")] + flags, stdout=subprocess.DEVNULL)
            run(["cmake", "--build", os.path.join(self.src, "build"), "-j", str(os.cpu_count() or 2),
                 "--target", "llama-bench", "llama-quantize", "llama-mtmd-cli"], stdout=subprocess.DEVNULL)
            with open(stamp, "w") as f:
                f.write("\n".join(flags))
        src = os.path.join(REPO, "bench/peer/peer_logits.c")
        self.peer_logits = os.path.join(self.cache, "peer_logits")
        if not os.path.exists(self.peer_logits) or os.path.getmtime(self.peer_logits) < os.path.getmtime(src):
            run(["cc", "-O2", "-std=c11", "-Wall", src, "-I", os.path.join(self.src, "include"),
                 "-I", os.path.join(self.src, "ggml/include"), "-L", self.bin, "-lllama", "-lggml", "-lggml-base",
                 f"-Wl,-rpath,{self.bin}", "-o", self.peer_logits])
        if not os.access(self.g4tp, os.X_OK):
            sys.exit(f"peer: no g4tp binary at {self.g4tp} (make -j2, or --g4tp PATH)")

    # ---- models ------------------------------------------------------------------------
    def hf_dir(self, m):
        if m == "w31b-60l-w4a16":
            return self.a.big_model
        return os.path.join(self.models, m, "hf")

    def gguf(self, m, dt):
        return os.path.join(self.models, m, f"{dt}.gguf")

    def cells(self, only=None):
        out = []
        for m in self.a.models:
            for dt in MODELS[m].get("dtypes", DTYPES):
                if dt in self.a.dtypes and only in (None, m):
                    out.append((m, dt))
        return out

    def make_hf(self, m):
        d = self.hf_dir(m)
        if os.path.exists(os.path.join(d, "model.safetensors.index.json")):
            return d
        spec = MODELS[m]
        if spec["like"] == "w4a16":
            log(f"{m}: {d} missing; writing it (~20 GB, several minutes)")
        like = SPEC
        if spec["like"] == "w2048":  # the 31B config narrowed: 8 heads of 256 (sliding, 4 KV) / 512 (full, 1 KV)
            with open(SPEC) as f:
                cfg = json.load(f)
            cfg["text_config"].update(hidden_size=2048, intermediate_size=8192, num_attention_heads=8,
                                      num_key_value_heads=4, num_global_key_value_heads=1)
            like = os.path.join(self.models, m + ".config.json")
            os.makedirs(os.path.dirname(like), exist_ok=True)
            with open(like, "w") as f:
                json.dump(cfg, f, indent=2)
        tmp = d + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        if spec["like"] != "w2048":
            self.need_disk(self.gguf_bytes(m, "bf16" if spec["like"] == "31b" else "q4_0"), d)
        cmd = [self.g4tp, "synth", "--like", like, "--layers", str(spec["layers"]), "--out", tmp]
        if spec["like"] == "w4a16":
            cmd += ["--format", "w4a16"]
        run(cmd, stdout=subprocess.DEVNULL)
        os.rename(tmp, d)
        return d

    def to_gguf(self, m, dt):
        """f32/bf16 from the checkpoint; q8_0/q4_0 with llama-quantize --pure from the bf16 file;
        the W4A16 model straight to q4_0 (exact)."""
        out = self.gguf(m, dt)
        if os.path.exists(out):
            return out
        hf = self.make_hf(m)
        self.need_disk(self.gguf_bytes(m, dt), out)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        tmp = out + ".tmp"
        conv = [sys.executable, os.path.join(REPO, "bench/peer/to_gguf.py"), "--gguf-py", os.path.join(self.src, "gguf-py")]
        if MODELS[m]["like"] == "w4a16":
            if dt != "q4_0":
                sys.exit(f"peer: {m} exists only as q4_0")
            run(conv + ["--head-type", "q4_0", hf, tmp])
        elif dt in ("f32", "bf16"):
            run(conv + ["--type", dt, hf, tmp])
        else:
            src = self.to_gguf(m, "bf16")
            run([os.path.join(self.bin, "llama-quantize"), "--pure", src, tmp, dt.upper()], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL)
        os.rename(tmp, out)
        return out

    def make_models(self, m):
        need = sum(self.gguf_bytes(m, dt) for _, dt in self.cells(m) if not os.path.exists(self.gguf(m, dt)))
        if MODELS[m]["like"] != "w4a16":
            if not os.path.exists(self.hf_dir(m)):
                need += self.gguf_bytes(m, "bf16")
            if not os.path.exists(self.gguf(m, "bf16")) and any(dt != "bf16" for _, dt in self.cells(m)):
                need += self.gguf_bytes(m, "bf16")
        free = shutil.disk_usage(self.cache).free
        if need > free:
            sys.exit(f"peer: {m} needs ~{need / 1e9:.0f} GB under {self.cache}, {free / 1e9:.0f} GB are free "
                     f"(--free removes each model once measured)")
        for _, dt in self.cells(m):
            self.to_gguf(m, dt)

    def free(self, m):
        """--free: the model's files go once its cells are measured (the disk holds one 31B-width model at a time)."""
        d = os.path.join(self.models, m)
        if os.path.isdir(d):
            log(f"free: removing {d}")
            shutil.rmtree(d)

    def need_disk(self, nbytes, what, margin=3e9):
        free = shutil.disk_usage(self.cache).free
        if nbytes + margin > free:
            sys.exit(f"peer: {what} needs ~{nbytes / 1e9:.1f} GB (+{margin / 1e9:.0f} GB spare), {free / 1e9:.1f} GB free; "
                     f"--free removes each model once measured")

    def gguf_bytes(self, m, dt):
        """Size estimate of a model's file in dtype dt, from its config (matrices only)."""
        like = SPEC if MODELS[m]["like"] != "w2048" else os.path.join(self.models, m + ".config.json")
        if not os.path.exists(like):
            return 0
        tc = json.load(open(like))["text_config"]
        H, I, NH, V = tc["hidden_size"], tc["intermediate_size"], tc["num_attention_heads"], tc["vocab_size"]
        types = tc["layer_types"][:MODELS[m]["layers"] - 1] + ["full_attention"]
        n = V * H
        for t in types:
            full = t == "full_attention"
            hd = tc["global_head_dim"] if full else tc["head_dim"]
            kv = tc["num_global_key_value_heads"] if full else tc["num_key_value_heads"]
            n += H * (2 * NH * hd + kv * hd * (1 if full and tc.get("attention_k_eq_v") else 2)) + 3 * H * I
        return int(n * {"f32": 4, "bf16": 2, "q8_0": 34 / 32, "q4_0": 18 / 32}[dt])

    # ---- same function ------------------------------------------------------------------
    def g4tp_logits(self, hf, dtype, ids, gen, tmp, head=None):
        cmd = [self.g4tp, "generate", "--model", hf, "--prompt-ids", ",".join(map(str, ids)), "--max-new-tokens", str(gen),
               "--threads", str(self.a.threads), "--dump-all-logits", tmp, "--json"]
        if dtype:
            cmd += ["--dtype", dtype]
        if head:
            cmd += ["--head-dtype", head]
        j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        return j["generated_ids"], np.fromfile(tmp, dtype="<f4").astype(np.float64)

    def llama_logits(self, gguf, ids, gen, tmp, kv="f32"):
        out = subprocess.run([self.peer_logits, gguf, ",".join(map(str, ids)), str(gen), str(self.a.threads), kv, tmp],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out)["generated_ids"], np.fromfile(tmp, dtype="<f4").astype(np.float64)

    def compare(self, m, dt, gen):
        hf = self.make_hf(m)
        dtype = {"f32": "f32", "bf16": None, "q8_0": "q8_0", "q4_0": "q4_0"}[dt]
        head = "q4_0" if MODELS[m]["like"] == "w4a16" else None
        tmp = os.path.join(self.cache, "logits.bin")
        gi, gl = self.g4tp_logits(hf, dtype, PROMPT, gen, tmp, head)
        li, ll = self.llama_logits(self.to_gguf(m, dt), PROMPT, gen, tmp)
        V = len(gl) // gen
        gl, ll = gl.reshape(gen, V), ll.reshape(gen, V)
        same = 0
        while same < gen and gi[same] == li[same]:
            same += 1
        k = max(1, same)  # logits are compared while both engines saw the same tokens
        d = gl[:k] - ll[:k]
        r = dict(model=m, dtype=dt, prompt=PROMPT, gen=gen, g4tp_ids=gi, llama_ids=li, same_ids=same,
                 nmse=float((d ** 2).sum() / (gl[:k] ** 2).sum()), max_abs_diff=float(np.abs(d).max()),
                 max_abs_logit=float(np.abs(gl[:k]).max()))
        log(f"check {m} {dt}: greedy ids equal for {same}/{gen} tokens; logits NMSE {r['nmse']:.2e}, "
            f"max |diff| {r['max_abs_diff']:.3g} (max |logit| {r['max_abs_logit']:.3g})")
        return r

    def check(self, m):
        path = os.path.join(self.results, "check.json")
        res = json.load(open(path)) if os.path.exists(path) else {}
        sib = MODELS[m]["check"]
        todo = [(sib, "f32")] if MODELS[sib]["f32_check"] else []
        todo += [(sib, dt) for dt in MODELS[sib].get("dtypes", DTYPES) if dt in self.a.dtypes]
        for m, dt in todo:
            key = f"{m}/{dt}"
            if self.a.resume and key in res:
                continue
            res[key] = self.compare(m, dt, self.a.check_gen)
            with open(path, "w") as f:
                json.dump(res, f, indent=1)
            if dt == "f32" and not self.a.keep:
                os.remove(self.gguf(m, "f32"))  # 4 bytes a weight: made again if asked again
        if self.a.free and sib not in self.a.models:
            self.free(sib)
        # a wrong mapping (RoPE, norms, heads) gives NMSE ~1; rounding differences ~1e-5 and can at
        # most flip a near-tie later in the greedy sequence
        bad = [k for k, r in res.items() if k.split("/")[0] == sib and r["nmse"] > (1e-3 if k.endswith("/f32") else 1e-2)]
        if bad:
            sys.exit(f"peer: the engines do not compute the same function on {bad} (see {path})")

    def accuracy(self):
        """f32 logits of g4tp and llama.cpp against the float64 numpy oracle on the goldens."""
        oracle = os.path.join(self.a.oracle, "run_oracle.py") if self.a.oracle else ""
        if not os.path.exists(oracle):
            log(f"accuracy: no oracle ({oracle or 'give --oracle DIR or $G4TP_ORACLE'}); skipped")
            return
        prompts = {"p16": PROMPT, "p40": [2] + [(i * 37 + 11) % 500 for i in range(39)]}
        rows = []
        for g in ("tiny_default", "tiny_wide"):
            hf = os.path.join(REPO, "tests/data/golden", g)
            gg = os.path.join(self.models, g + ".f32.gguf")
            if not os.path.exists(gg):
                run([sys.executable, os.path.join(REPO, "bench/peer/to_gguf.py"), "--gguf-py",
                     os.path.join(self.src, "gguf-py"), "--type", "f32", hf, gg], stdout=subprocess.DEVNULL)
            for p, ids in prompts.items():
                npy = os.path.join(self.cache, "oracle.npy")
                subprocess.run([sys.executable, oracle, "--model", hf, "--prompt-ids", ",".join(map(str, ids)),
                                "--max-new-tokens", "1", "--dtype", "float64", "--dump-prompt-logits", npy,
                                "--out", os.devnull], check=True, stdout=subprocess.DEVNULL)
                ref = np.load(npy).astype(np.float64).reshape(-1)
                tmp = os.path.join(self.cache, "logits.bin")
                row = {"model": g, "prompt": p}
                _, row["g4tp"] = self.g4tp_logits(hf, "f32", ids, 1, tmp)
                _, row["llama_kv_f32"] = self.llama_logits(gg, ids, 1, tmp, "f32")
                _, row["llama_kv_f16"] = self.llama_logits(gg, ids, 1, tmp, "f16")
                for k in ("g4tp", "llama_kv_f32", "llama_kv_f16"):
                    d = row[k] - ref
                    row[k] = dict(nmse=float((d ** 2).sum() / (ref ** 2).sum()), max_abs=float(np.abs(d).max()))
                rows.append(row)
                log(f"accuracy {g} {p}: vs float64 NMSE g4tp {row['g4tp']['nmse']:.2e}, llama.cpp (f32 KV) "
                    f"{row['llama_kv_f32']['nmse']:.2e}, llama.cpp (f16 KV, its default) {row['llama_kv_f16']['nmse']:.2e}")
        with open(os.path.join(self.results, "accuracy.json"), "w") as f:
            json.dump(rows, f, indent=1)

    # ---- speed --------------------------------------------------------------------------
    def cell_path(self, m, dt):
        a = self.a
        extra = re.sub(r"[^A-Za-z0-9]+", "_", a.g4tp_args).strip("_")  # e.g. --math fast: a cell of its own
        return os.path.join(self.results, f"{m}__{dt}__p{a.prompt}_n{a.gen}_d{a.tg_depth}_t{a.threads}"
                            + (f"__{extra}" if extra else "") + ".json")

    def llama_bench(self, gguf):
        """prefill: -p P -n 0; decode: -p 0 -n G -d DEPTH (g4tp decodes after its P-token prompt)."""
        lb = os.path.join(self.bin, "llama-bench")
        common = ["-m", gguf, "-t", str(self.a.threads), "-r", "1", "-o", "json"]
        pp = json.loads(subprocess.run([lb] + common + ["-p", str(self.a.prompt), "-n", "0", "--no-warmup"], check=True,
                                       capture_output=True, text=True).stdout)[0]
        tg = json.loads(subprocess.run([lb] + common + ["-p", "0", "-n", str(self.a.gen), "-d", str(self.a.tg_depth)],
                                       check=True, capture_output=True, text=True).stdout)[0]
        return dict(pp_tok_s=pp["avg_ts"], tg_tok_s=tg["avg_ts"], build=pp.get("build_commit"), kv=pp.get("type_k"),
                    flash_attn=pp.get("flash_attn"))

    def g4tp_bench(self, m, dt):
        cmd = [self.g4tp, "bench", "--model", self.hf_dir(m), "--prompt-len", str(self.a.prompt), "--gen", str(self.a.gen),
               "--threads", str(self.a.threads), "--json"] + self.a.g4tp_args.split()
        if dt != "bf16" and MODELS[m]["like"] != "w4a16":
            cmd += ["--dtype", dt]
        if MODELS[m]["like"] == "w4a16":
            cmd += ["--head-dtype", "q4_0"]  # the GGUF's head is q4_0 too (as llama.cpp's --pure Q4_0)
        j = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1])
        return dict(pp_tok_s=j["prefill_tok_s"], tg_tok_s=j["decode_tok_s"], tg_median_tok_s=j["decode_median_tok_s"],
                    triad_gb_s=j["bandwidth_gb_s"], read_gb_s=j.get("read_bandwidth_gb_s"), weight_bytes=j["weight_bytes_per_token"],
                    cmd=" ".join(cmd))

    def tree(self):
        """The g4tp source the binary was (presumably) built from: HEAD, and whether src/ had edits."""
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "src"], capture_output=True, text=True).stdout.strip()
        return head + ("+edits" if dirty else "")

    def bench(self, m):
        for m, dt in self.cells(m):
            path = self.cell_path(m, dt)
            cell = json.load(open(path)) if self.a.resume and os.path.exists(path) else {"pairs": []}
            gguf = self.to_gguf(m, dt)
            self.make_hf(m)
            while len(cell["pairs"]) < self.a.pairs:
                i = len(cell["pairs"]) + 1
                log(f"bench {m} {dt}: pair {i}/{self.a.pairs}: llama-bench")
                lr = self.llama_bench(gguf)
                log(f"bench {m} {dt}: pair {i}/{self.a.pairs}: g4tp bench (its bandwidth probes follow the run)")
                gr = self.g4tp_bench(m, dt)
                cell["pairs"].append(dict(time=datetime.datetime.utcnow().isoformat(timespec="seconds") + "Z",
                                          llama=lr, g4tp=gr, load=os.getloadavg()[0], g4tp_tree=self.tree()))
                log(f"  llama.cpp pp {lr['pp_tok_s']:.1f} tg {lr['tg_tok_s']:.2f} | g4tp pp {gr['pp_tok_s']:.1f} "
                    f"tg {gr['tg_tok_s']:.2f} | triad {gr['triad_gb_s']:.1f} GB/s")
                with open(path, "w") as f:
                    json.dump(cell, f, indent=1)

    def table(self):
        a = self.a
        print(f"\nprefill {a.prompt} tokens, decode {a.gen} tokens (llama.cpp at depth {a.tg_depth}), {a.threads} threads; "
              f"ratio = g4tp / llama.cpp, mean of the pairs (min-max)\n")
        print("| model | dtype | GB read per token | pairs | llama.cpp prefill tok/s | g4tp prefill tok/s | prefill ratio | "
              "llama.cpp decode tok/s | g4tp decode tok/s | decode ratio | triad GB/s between pairs | load average |")
        print("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | --- | --- | ---: |")
        for m, dt in self.cells():
            path = self.cell_path(m, dt)
            if not os.path.exists(path):
                continue
            P = json.load(open(path))["pairs"]
            if not P:
                continue
            def col(e, k):
                return np.array([p[e][k] for p in P])
            def fmt_ratio(r):
                return f"{r.mean():.2f} ({r.min():.2f}-{r.max():.2f})" if len(r) > 1 else f"{r.mean():.2f}"
            lp, gp, lt, gt = col("llama", "pp_tok_s"), col("g4tp", "pp_tok_s"), col("llama", "tg_tok_s"), col("g4tp", "tg_tok_s")
            bw = col("g4tp", "triad_gb_s")
            gb = P[-1]["g4tp"]["weight_bytes"] / 1e9
            label = dt + (f" (g4tp {a.g4tp_args})" if a.g4tp_args else "")
            print(f"| {MODELS[m]['desc']} | {label} | {gb:.2f} | {len(P)} | {lp.mean():.1f} | {gp.mean():.1f} | {fmt_ratio(gp / lp)} | "
                  f"{lt.mean():.2f} | {gt.mean():.2f} | {fmt_ratio(gt / lt)} | {bw.min():.0f}-{bw.max():.0f} | "
                  f"{np.mean([p['load'] for p in P]):.1f} |")
        acc = os.path.join(self.results, "accuracy.json")
        if os.path.exists(acc):
            print("\nf32 logits against the float64 oracle (NMSE of the prompt's last logits):\n")
            print("| checkpoint | prompt | g4tp --dtype f32 | llama.cpp f32, f32 KV | llama.cpp f32, f16 KV (default) |")
            print("| --- | --- | ---: | ---: | ---: |")
            for r in json.load(open(acc)):
                print(f"| {r['model']} | {r['prompt']} | {r['g4tp']['nmse']:.2e} | {r['llama_kv_f32']['nmse']:.2e} | "
                      f"{r['llama_kv_f16']['nmse']:.2e} |")
        chk = os.path.join(self.results, "check.json")
        if os.path.exists(chk):
            print("\nSame function (greedy ids equal / generated; logits NMSE between the engines):\n")
            for k, r in json.load(open(chk)).items():
                if r["model"] in {MODELS[m]["check"] for m in a.models}:
                    print(f"- {k}: {r['same_ids']}/{r['gen']} ids, NMSE {r['nmse']:.2e}, max |diff| {r['max_abs_diff']:.3g} "
                          f"of max |logit| {r['max_abs_logit']:.3g}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", default=os.environ.get("G4TP_PEER_CACHE", "~/.cache/g4tp-peer"))
    ap.add_argument("--g4tp", default=os.path.join(REPO, "build/g4tp"))
    ap.add_argument("--big-model", default="/work/big/w31", help="W4A16 60-layer 31B checkpoint (written if missing)")
    ap.add_argument("--oracle", default=os.environ.get("G4TP_ORACLE", ""),
                    help="folder of the numpy reference model (run_oracle.py); the accuracy step is skipped without it")
    ap.add_argument("--models", default="w2048-12l,w31b-8l,w31b-60l-w4a16")
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--steps", default="fetch,build,models,check,accuracy,bench,table")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--tg-depth", type=int, default=None, help="llama.cpp decode depth (default: --prompt, as g4tp)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--check-gen", type=int, default=8, help="greedy tokens compared by the check step")
    ap.add_argument("--g4tp-args", default="", help="extra g4tp bench options, e.g. '--load copy'")
    ap.add_argument("--resume", action="store_true", help="keep measured pairs and checks; run only what is missing")
    ap.add_argument("--amx", action="store_true", help="let llama.cpp use AMX (off: it crashed on the development VM)")
    ap.add_argument("--free", action="store_true", help="delete each model's files (not the --big-model checkpoint) once measured")
    ap.add_argument("--keep", action="store_true", help="keep the f32 GGUF files after the check")
    ap.add_argument("--quick", action="store_true", help="the 2-layer model, 1 pair, prompt 128, decode 32")
    a = ap.parse_args()
    if a.quick:
        a.models, a.pairs, a.prompt, a.gen = "quick", 1, 128, 32
    if a.tg_depth is None:
        a.tg_depth = a.prompt
    a.models = a.models.split(",")
    a.dtypes = a.dtypes.split(",")
    for m in a.models:
        if m not in MODELS:
            sys.exit(f"peer: unknown model {m} ({', '.join(MODELS)})")
    for d in a.dtypes:
        if d not in DTYPES:
            sys.exit(f"peer: unknown dtype {d} ({', '.join(DTYPES)})")
    p = Peer(a)
    steps = a.steps.split(",")
    for s in steps:
        if s not in ("fetch", "build", "models", "check", "accuracy", "bench", "table"):
            sys.exit(f"peer: unknown step {s}")
    if "fetch" in steps:
        p.fetch()
    p.build()  # always: the later steps need its binaries (cached after the first time)
    if "accuracy" in steps:
        p.accuracy()
    for m in a.models:  # model by model, so that --free keeps one large model on disk at a time
        if "models" in steps and not a.resume:  # with --resume the files are made only where a step needs them
            p.make_models(m)
        if "check" in steps:
            p.check(m)
        if "bench" in steps:
            p.bench(m)
        if a.free and m != "quick":
            p.free(m)
    if "table" in steps:
        p.table()

if __name__ == "__main__":
    main()
