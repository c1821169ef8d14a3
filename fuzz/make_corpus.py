#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<harness>/ from tests/data, models/demo and a tiny
synthetic checkpoint made with g4tp (docs/fuzzing.md). Deterministic: the same tree gives the
same files. Usage: fuzz/make_corpus.py [G4TP]   (G4TP defaults to build/g4tp; needed only for
the checkpoint and artifact seeds, which are kept when it is missing).
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "fuzz", "corpus")
G4TP = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "g4tp")


def rd(rel, mode="r"):
    with open(os.path.join(ROOT, rel), mode) as f:
        return f.read()


def jload(rel):
    return json.loads(rd(rel))


def reset(name):
    d = os.path.join(OUT, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    return d


def put(d, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def pack_folder(files):
    """The "=== NAME\\n" sections fuzz_write_folder (fuzz_util.h) unpacks."""
    out = b""
    for i, (name, body) in enumerate(files):
        out += (b"" if i == 0 else b"\n") + b"=== " + name.encode() + b"\n" + body
    return out


# ---- JSON configs ------------------------------------------------------------------------------
d = reset("config")
configs = {"spec-31b": "tests/data/spec/gemma-4-31B-it.config.json", "small-31b-like": "tests/data/artifact/small-31b-like.config.json",
           "demo": "models/demo/config.json"}
for g in ("tiny_default", "tiny_tp8", "tiny_wide"):
    configs["golden-" + g] = "tests/data/golden/%s/config.json" % g
for name, rel in configs.items():
    put(d, name + ".json", rd(rel, "rb"))
text_only = jload("tests/data/golden/tiny_default/config.json")["text_config"]
text_only["architectures"] = ["Gemma4ForCausalLM"]
text_only["eos_token_id"] = [1, 106]
put(d, "text-only.json", json.dumps(text_only, indent=1))

d = reset("gen_config")
for name, rel in {"spec-31b": "tests/data/spec/gemma-4-31B-it.generation_config.json", "demo": "models/demo/generation_config.json",
                  "golden": "tests/data/golden/tiny_default/generation_config.json"}.items():
    put(d, name + ".json", rd(rel, "rb"))
put(d, "sampling.json", '{"do_sample": true, "temperature": 0.7, "top_k": 64, "top_p": 0.95, "min_p": 0.05, "max_new_tokens": 32, '
    '"max_length": 128, "eos_token_id": 7, "bos_token_id": null, "pad_token_id": 0}')

# ---- tokenizer ---------------------------------------------------------------------------------
d = reset("tokenizer_load")
put(d, "demo.json", rd("tests/data/tokenizer/demo_tokenizer.json", "rb"))
put(d, "synth.json", rd("tests/data/tokenizer/synth_tokenizer.json", "rb"))

d = reset("tokenizer")
prompts = jload("tests/data/tokenizer/demo_golden_prompts.json")["cases"]
for i, c in enumerate(prompts[:12]):
    put(d, "text-%02d" % i, b"\x00" + c["prompt_text"].encode())
    ids = c["prompt_ids"] + c["generated_ids"]
    put(d, "ids-%02d" % i, bytes([4 | (i & 2)]) + struct.pack("<%di" % len(ids), *ids))
put(d, "text-mixed", b"\x00" + "caf\u00e9 \u2581x  \t\n\u4e16\u754c \U0001F600 <start_of_turn> \x00 end".encode())
put(d, "ids-bytes", b"\x04" + struct.pack("<6i", 0x3 + 0xC3, 0x3 + 0xA9, 106, 0x3 + 0xFF, -1, 1 << 30))

# ---- Jinja -------------------------------------------------------------------------------------
d = reset("jinja")
for i, c in enumerate(jload("tests/data/template/jinja_cases.json")["cases"]):
    put(d, "case-%03d" % i, c["template"].encode() + b"\x00" + json.dumps(c.get("vars", {})).encode())
parity = jload("tests/data/template/parity_current.json")["cases"]
tmpl = rd("tests/data/template/chat_template.jinja", "rb")
for i in (0, 1, len(parity) // 2, len(parity) - 1):
    c = parity[i]
    v = dict(c.get("special") or {})
    v.update(c["request"])
    put(d, "chat-%02d" % i, tmpl + b"\x00" + json.dumps(v).encode())
put(d, "release-template", rd("tests/data/template/chat_template.release-2026-04-02.jinja", "rb") + b"\x00" + json.dumps(parity[0]["request"]).encode())

# ---- OpenAI requests ---------------------------------------------------------------------------
d = reset("openai")
GEN, COMP, CHAT = b"\x00", b"\x01", b"\x02"
for i, c in enumerate(parity):
    if i % 3 == 0:
        put(d, "chat-parity-%02d" % i, CHAT + json.dumps(c["request"]).encode())
put(d, "chat-full", CHAT + json.dumps({
    "model": "g4tp-demo", "messages": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"a\":1}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "r"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}],
    "tool_choice": "auto", "temperature": 0.5, "top_p": 0.9, "top_k": -1, "min_p": 0.1, "seed": -3, "max_tokens": 9,
    "max_completion_tokens": 7, "stop": ["a", "\n\n"], "stream": True, "stream_options": {"include_usage": True},
    "chat_template_kwargs": {"enable_thinking": True}, "response_format": {"type": "text"}, "n": 1, "logprobs": False,
    "presence_penalty": 0, "frequency_penalty": 0, "ignore_eos": False}).encode())
put(d, "completions-text", COMP + b'{"model":"m","prompt":"Once upon a time","max_tokens":5,"stop":"\\n","echo":false,"add_special_tokens":false}')
put(d, "completions-ids", COMP + b'{"prompt":[[2,105,17]],"max_tokens":3,"temperature":0}')
put(d, "generate", GEN + b'{"prompt":"What is the capital of France?","max_new_tokens":8,"enable_thinking":false}')
put(d, "generate-raw", GEN + b'{"prompt":"<bos>raw","raw":true,"add_special_tokens":false,"stop":["x"]}')

# ---- output parser, stop strings, SSE ----------------------------------------------------------
outputs = [c["text"] for c in jload("tests/data/parser/template_calls.json")]
outputs += [c["generated_text_with_special"] for c in prompts[:4]]
outputs += ["<|channel>thought\nLet me think.<channel|>The answer is 4.<turn|>",
            "  <|channel>thought\na<channel|><|channel>thought\nb<channel|> x <|tool_call>call:f{a:<|\"|>s<|\"|>,b:[1,2.5e3,-0,true,null],c:{d:{}}}<tool_call|>tail<eos>ignored",
            "<|tool_call>call:broken{a:<tool_call|> unterminated <|tool_call>call:g{",
            "plain text with a stray <channel|> marker and <|\"|> quote\r\n\t "]
d = reset("output_parser")
for i, t in enumerate(outputs):
    put(d, "out-%02d" % i, bytes([i & 1, i]) + t.encode())
put(d, "call-body", b"\x02\x00" + 'call:search{exact:false,filters:{lang:[<|"|>en<|"|>]},limit:10,query:<|"|>q "x"\n<|"|>}'.encode())

d = reset("sse")
for i, t in enumerate(outputs):
    put(d, "out-%02d" % i, bytes([[0x03, 0x07, 0x0b, 0x01, 0x00, 0x14, 0x43, 0x30][i % 8], i]) + t.encode())

d = reset("stop_strings")
for i, (stops, text) in enumerate([(["\n\n"], "Hello.\n\nMore"), (["ab", "b"], "xxab"), (["abc", "bcd", "c"], "zabcd"),
                                    (["\u00e9t\u00e9", "\U0001F600"], "un \u00e9t\u00e9 \U0001F600 chaud"), (["x" * 40], "y" * 30 + "x" * 39),
                                    ([], "no stops"), (["<turn|>", "<eos>"], outputs[0])]):
    put(d, "stops-%02d" % i, bytes([i]) + "\x1f".join(stops).encode() + b"\x00" + text.encode())


# ---- Anthropic and Responses bodies, JSON schemas, regex patterns -------------------------------
WTOOL = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 16}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
                                          "units": {"enum": ["c", "f"]}}, "required": ["city", "days"], "additionalProperties": False}
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0},
                                           "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
          "required": ["name", "age"], "additionalProperties": False}
d = reset("anthropic")
amsgs = [{"role": "user", "content": "What is the weather?"},
         {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"}, {"type": "text", "text": "Checking."},
                                           {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Oslo", "days": 1}}]},
         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                                      {"type": "text", "text": "Thanks"}]}]
atools = [{"name": "get_weather", "description": "Weather", "input_schema": WTOOL}, {"name": "now", "input_schema": {"type": "object"}}]
for i, tc in enumerate([{"type": "auto"}, {"type": "any"}, {"type": "tool", "name": "get_weather"},
                        {"type": "any", "disable_parallel_tool_use": True}, {"type": "none"}]):
    put(d, "tool-choice-%d" % i, b"\x00" + json.dumps({"model": "g4tp-demo", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
                                                       "messages": amsgs, "tools": atools, "tool_choice": tc, "temperature": 0.5,
                                                       "stop_sequences": ["END"], "stream": i % 2 == 1}).encode())
put(d, "thinking", b"\x00" + json.dumps({"model": "m", "max_tokens": 4096, "thinking": {"type": "enabled", "budget_tokens": 1024},
                                         "messages": [{"role": "user", "content": "hi"}], "top_k": 5, "metadata": {"user_id": "u"}}).encode())
put(d, "output-config", b"\x00" + json.dumps({"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}],
                                              "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": PERSON}},
                                              "tools": [dict(atools[0], strict=True)]}).encode())
put(d, "count-tokens", b"\x01" + json.dumps({"model": "m", "messages": amsgs, "tools": atools}).encode())

d = reset("responses")
rtools = [{"type": "function", "name": "get_weather", "description": "Weather", "parameters": WTOOL, "strict": True},
          {"type": "function", "name": "now"}]
rinput = [{"role": "user", "content": [{"type": "input_text", "text": "What is the weather?"}]},
          {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}]},
          {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\",\"days\":1}"},
          {"type": "function_call_output", "call_id": "c1", "output": "sunny"}]
for i, extra in enumerate([{"tool_choice": "required"}, {"tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": False},
                           {"tool_choice": "none"}, {"text": {"format": {"type": "json_schema", "name": "person", "schema": PERSON, "strict": True}}},
                           {"text": {"format": {"type": "json_object"}, "verbosity": "low"}}, {"tool_choice": "auto", "reasoning": {"effort": "low"}}]):
    put(d, "body-%d" % i, json.dumps(dict({"model": "g4tp-demo", "input": rinput if i % 2 == 0 else "Describe something.",
                                          "instructions": "Be brief.", "tools": rtools, "max_output_tokens": 64, "store": False}, **extra)).encode())

d = reset("json_schema")
tree = {"$defs": {"node": {"type": "object", "properties": {"label": {"type": "string", "maxLength": 12},
                                                            "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
                           "required": ["label", "children"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
event = {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"}, "score": {"type": "number", "minimum": -1, "maximum": 1},
                                          "kind": {"anyOf": [{"type": "null"}, {"enum": ["a", "b"]}]},
                                          "pair": {"type": "array", "prefixItems": [{"type": "boolean"}, {"const": 7}], "items": False}},
         "required": ["when", "score"], "allOf": [{"type": "object"}]}
for i, (flags, sch, cand) in enumerate([(0, PERSON, {"name": "Ann", "age": 3, "tags": ["x"]}), (1, WTOOL, None), (0, tree, {"label": "a", "children": []}),
                                        (0, event, {"when": "2024-01-02T03:04:05Z", "score": 0.5}), (2, {}, {"a": 1}), (5, PERSON, None),
                                        (0, {"type": "string", "pattern": "^[a-z]{2,4}-[0-9]+$"}, "ab-12"), (0, {"type": ["integer", "null"], "maximum": 99}, 42)]):
    put(d, "schema-%d" % i, bytes([flags]) + json.dumps(sch).encode() + (b"\n--\n" + json.dumps(cand, separators=(",", ":")).encode() if cand is not None else b""))
# the bodies that hung the server or took its memory (issue 24): nested arrays 60 deep, counts
# inside counts, an unanchored pattern whose subset construction grows, a $ref used twice per level
nested = {"type": "integer"}
for _ in range(60):
    nested = {"type": "array", "maxItems": 2, "items": nested}
fan = {"$ref": "#/$defs/d0", "$defs": {"d25": {"type": "string", "maxLength": 20}}}
for i in range(25):
    fan["$defs"]["d%d" % i] = {"type": "object", "properties": {"a": {"$ref": "#/$defs/d%d" % (i + 1)}, "b": {"$ref": "#/$defs/d%d" % (i + 1)}},
                               "additionalProperties": False}
for name, sch in [("nested-arrays", nested), ("count-product", {"type": "string", "pattern": "(a{1000}){1000}"}),
                  ("subset-growth", {"type": "string", "pattern": "(a{300}){300}"}), ("ref-fanout", fan)]:
    put(d, "regress-dos-" + name, b"\x00" + json.dumps(sch).encode())

d = reset("regex")
for i, (flags, pat, cand) in enumerate([(0, "^[a-z]{2,4}-[0-9]+$", "ab-12"), (1, "^(?:\\d{3}|[A-F]+)\\.?$", "123."), (0, "colou?r", "my color"),
                                        (1, "^\\u00e9[^\\s\"]*$", "\u00e9t\u00e9"), (0, "(a|b)*c{1,3}", "ababcc"), (0, "^(?<y>[0-9]{4})-\\1$", "2024-2024"),
                                        (0, "[\\w.+-]+@[\\w-]+\\.[a-z]{2,}", "a.b@c.org"), (1, "^.{0,5}$", "\n")]):
    put(d, "pattern-%d" % i, bytes([flags]) + pat.encode() + b"\n--\n" + cand.encode())
for name, pat in [("count-product", "^(a{1000}){1000}$"), ("subset-growth", "(a{200}){50}")]:
    put(d, "regress-dos-" + name, b"\x00" + pat.encode() + b"\n--\naaaa")

# ---- safetensors, checkpoint folder, artifact folder (from a tiny synthetic checkpoint) --------
def st_bytes(tensors, meta=None):
    """A safetensors image from {name: (dtype, shape, bytes)}."""
    header, data = {}, b""
    if meta is not None:
        header["__metadata__"] = meta
    for name, (dt, shape, b) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


d = reset("safetensors")
put(d, "empty", st_bytes({}))
put(d, "small", st_bytes({"a": ("F32", [2, 2], bytes(16)), "b": ("BF16", [3], bytes(6)), "e": ("I8", [0, 4], b""),
                          "s": ("U8", [], b"\x07")}, {"format": "pt"}))
put(d, "dtypes", st_bytes({dt.lower(): (dt, [1], bytes(n)) for dt, n in
                           [("F64", 8), ("I64", 8), ("I32", 4), ("I16", 2), ("F16", 2), ("BOOL", 1), ("F8_E4M3", 1), ("F8_E5M2", 1),
                            ("U16", 2), ("U32", 4), ("U64", 8)]}))

# image: small files of every decoder path from the image tests' cases (tests/data/vision/make_cases.py)
d = reset("image")
for f in ["rgb8.png", "pal4_interlaced.png", "grey16.png", "greya8.png", "rgba16_interlaced.png", "exif6.png",
          "xmp6_attr.png", "exif3_rawprofile.png", "exif8_after_idat.png", "anim.png", "q90_420.jpg", "progressive.jpg",
          "cmyk.jpg", "grey.jpg", "exif6.jpg", "xmp6.jpg", "lossy.webp", "lossless_alpha.webp", "anim.webp", "exif6.webp",
          "refused.gif"]:
    put(d, f, rd("tests/data/vision/cases/" + f, "rb"))

tiny = jload("tests/data/golden/tiny_default/config.json")
tiny = {k: v for k, v in tiny.items() if not k.startswith("_")}
tiny["eos_token_id"] = [1]
tiny["text_config"].update(vocab_size=16, vocab_size_per_layer_input=16, hidden_size=8, intermediate_size=16, num_attention_heads=2,
                           num_key_value_heads=1, num_global_key_value_heads=1, head_dim=4, global_head_dim=8, num_hidden_layers=2,
                           layer_types=["sliding_attention", "full_attention"], sliding_window=4, max_position_embeddings=64)
if not os.access(G4TP, os.X_OK):
    print("make_corpus: %s not found: checkpoint and artifact seeds left as they are" % G4TP)
    sys.exit(0)
tmp = tempfile.mkdtemp(prefix="g4corpus.")
try:
    cfg_path = os.path.join(tmp, "tiny.config.json")
    with open(cfg_path, "w") as f:
        json.dump(tiny, f, indent=1)
    ck = os.path.join(tmp, "ck")
    subprocess.run([G4TP, "synth", "--like", cfg_path, "--out", ck], check=True, stdout=subprocess.DEVNULL)
    shard = open(os.path.join(ck, "model-00001-of-00001.safetensors"), "rb").read()
    index = open(os.path.join(ck, "model.safetensors.index.json"), "rb").read()
    config = open(os.path.join(ck, "config.json"), "rb").read()
    put(os.path.join(OUT, "safetensors"), "tiny-checkpoint", shard)

    d = reset("checkpoint")
    put(d, "indexed", pack_folder([("config.json", config), ("model.safetensors.index.json", index),
                                   ("model-00001-of-00001.safetensors", shard)]))
    put(d, "single", pack_folder([("config.json", config), ("model.safetensors", shard)]))
    # the same tensors in two shards, with their index
    hlen = struct.unpack("<Q", shard[:8])[0]
    header = json.loads(shard[8:8 + hlen])
    data = shard[8 + hlen:]
    names = sorted(k for k in header if k != "__metadata__")
    parts = [names[:len(names) // 2], names[len(names) // 2:]]
    files, wm = [], {}
    for p, part in enumerate(parts):
        fn = "model-%05d-of-00002.safetensors" % (p + 1)
        ts = {}
        for n in part:
            b, e = header[n]["data_offsets"]
            ts[n] = (header[n]["dtype"], header[n]["shape"], data[b:e])
            wm[n] = fn
        files.append((fn, st_bytes(ts)))
    idx2 = json.dumps({"metadata": {"total_size": len(data)}, "weight_map": wm}, indent=1).encode()
    put(d, "two-shards", pack_folder([("config.json", config), ("model.safetensors.index.json", idx2)] + files))

    d = reset("artifact")
    for tp, dtype in ((1, None), (2, None), (2, "f16")):
        art = os.path.join(tmp, "art%d%s" % (tp, dtype or ""))
        cmd = [G4TP, "shard", "--model", ck, "--tp", str(tp), "--out", art, "--quiet"] + (["--dtype", dtype] if dtype else [])
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        man = json.load(open(os.path.join(art, "manifest.json")))
        files = [("manifest.json", open(os.path.join(art, "manifest.json"), "rb").read())]
        for r in man["ranks"]:
            files.append((r["file"], open(os.path.join(art, r["file"]), "rb").read()[:r["header_bytes"]]))
        for f in man.get("files", []):
            files.append((f["file"], open(os.path.join(art, f["file"]), "rb").read()))
        put(d, "tp%d%s" % (tp, "-" + dtype if dtype else ""), b"\x00" + pack_folder(files))
        if tp == 2 and not dtype:
            put(d, "tp2-rank1-verify", b"\x09" + pack_folder(files))
finally:
    shutil.rmtree(tmp)
