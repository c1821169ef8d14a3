#!/usr/bin/env python3
"""Regenerates template_calls.json: tool calls rendered by the real Gemma-4 chat template
(jinja2, trim_blocks/lstrip_blocks like HF) next to the arguments that produced them, so
test_output_parser can check that parsing the rendered call gives the arguments back.
Usage: make_template_calls.py /path/to/chat_template.jinja > template_calls.json"""
import json, sys
import jinja2

tmpl_src = open(sys.argv[1]).read()
env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
def raise_exception(msg):
    raise RuntimeError(msg)
env.globals["raise_exception"] = raise_exception
tmpl = env.from_string(tmpl_src)

cases = [
    ("get_weather", {"city": "Paris", "days": 2}),
    ("noargs", {}),
    ("search", {"query": "C11 \"atomics\" \\ backslash\nnew line\ttab", "limit": 10, "exact": False,
                "filters": {"lang": ["en", "fr"], "min_score": 0.25, "since": None, "nested": {"deep": [1, [2, [3]]]}}}),
    ("unicode", {"text": "Grüße, 世界 😀", "emoji_key_ok": True}),
    ("numbers", {"i": -7, "f": 1e-05, "big": 1e+20, "zero": 0.0, "neg": -0.5, "list": [1, 2.5, -3]}),
    ("code", {"src": "if (a < b && c > d) { return x[0]; } // <tool_call|> inside a string"}),
    ("empty_values", {"s": "", "l": [], "o": {}}),
    ("ns.tool-name_v2", {"a": 1}),
]
out = []
for name, args in cases:
    msgs = [{"role": "user", "content": "hi"},
            {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                                  "function": {"name": name, "arguments": args}}]}]
    text = tmpl.render(messages=msgs, bos_token="<bos>", add_generation_prompt=False)
    start = text.index("<|tool_call>")
    # the call ends at the <tool_call|> that the template's own <|tool_response> follows
    # (a string argument may contain "<tool_call|>" itself)
    end = text.index("<tool_call|><|tool_response>", start) + len("<tool_call|>")
    # the generated turn as the model would write it: the call, then the stop marker
    out.append({"name": name, "arguments": args, "text": text[start:end] + "<|tool_response>"})
json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
print()
