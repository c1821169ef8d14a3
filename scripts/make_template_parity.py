#!/usr/bin/python3
"""Writes the chat-template parity data the C tests compare against (tests/data/template/).

Renders a fixed set of chat requests with both Gemma-4 templates (the current official one and the
launch-day one) through Python Jinja2, configured exactly as Hugging Face's
transformers.utils.chat_template_utils._compile_jinja_template does it:
  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                extensions=[AssistantTracker, jinja2.ext.loopcontrols])
  filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=, separators=, sort_keys=)
  globals["raise_exception"] raises TemplateError(message); globals["strftime_now"]
and called as apply_chat_template calls it:
  render(messages=..., tools=tools or None, documents=None, add_generation_prompt=...,
         **{**special_tokens_map, **other_kwargs})

Output: tests/data/template/parity_<template>.json, a list of
  {"name", "request", "special", "expected"} or {..., "error": {"type", "message"}}.

It also renders the small engine cases of tests/data/template/jinja_cases.in.json
([template, variables] pairs: filters, loops, macros, namespaces, Python printing, errors,
whitespace control) into tests/data/template/jinja_cases.json for tests/unit/test_jinja.c.

Run: /usr/bin/python3 scripts/make_template_parity.py   (Debian's python3-jinja2)
"""
import json
import os
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "template")


class AssistantTracker(Extension):
    """HF's {% generation %} tag; renders its body (tracking is irrelevant for text)."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def compile_hf(src):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.now().strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(src)


SPECIAL = {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
           "mask_token": "<mask>"}


def hf_render(tpl, request, special):
    req = dict(request)
    messages = req.pop("messages")
    tools = req.pop("tools", None)
    agp = req.pop("add_generation_prompt", False)
    if special is None:
        special = {"bos_token": "<bos>", "eos_token": "<eos>"}
    template_kwargs = {**special, **req}
    return tpl.render(messages=messages, tools=tools, documents=None, add_generation_prompt=agp,
                      **template_kwargs)


# ---------------------------------------------------------------- conversations

WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get weather",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City"},
        "days": {"type": "integer"}},
        "required": ["city"]}}}

NESTED_TOOL = {"type": "function", "function": {
    "name": "book_trip", "description": "Book a trip with nested options",
    "parameters": {"type": "object", "properties": {
        "traveler": {"type": "object", "description": "Who travels",
                     "properties": {"name": {"type": "string", "description": "Full name"},
                                    "age": {"type": "integer"},
                                    "address": {"type": "object",
                                                "properties": {"street": {"type": "string"},
                                                               "zip": {"type": "string", "nullable": True}},
                                                "required": ["street"]}},
                     "required": ["name"]},
        "legs": {"type": "array", "description": "Flight legs",
                 "items": {"type": "object",
                           "properties": {"from": {"type": "string"}, "to": {"type": "string"},
                                          "Class": {"type": "string", "enum": ["economy", "business"]}},
                           "required": ["from", "to"]}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "mode": {"type": "string", "enum": ["fast", "cheap", "scenic"], "description": "Routing mode"},
        "flexible": {"type": "boolean", "nullable": True},
        "budget": {"type": "number", "description": "Max spend"},
        "Zeta": {"type": "string"}, "alpha": {"type": "string"}, "Beta": {"type": "string"}},
        "required": ["traveler", "legs"]}}}

MISC_TOOLS = [
    {"type": "function", "function": {"name": "now", "description": "Current time"}},
    {"type": "function", "function": {"name": "noprops", "description": "No properties",
                                      "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "union", "description": "Union types",
                                      "parameters": {"type": "object", "properties": {
                                          "v": {"type": "array", "items": {"type": ["string", "null"]}},
                                          "free": {"type": "object", "description": "free-form",
                                                   "x-extra": {"type": "string"}}}}}},
    {"type": "function", "function": {"name": "with_response", "description": "Has a response schema",
                                      "parameters": {"type": "object", "properties": {"q": {"type": "string"}},
                                                     "required": ["q"]},
                                      "response": {"type": "object", "description": "The answer"}}},
]


def U(t):
    return {"role": "user", "content": t}


def A(t, **kw):
    d = {"role": "assistant", "content": t}
    d.update(kw)
    return d


def call(name, args, cid=None):
    d = {"type": "function", "function": {"name": name, "arguments": args}}
    if cid is not None:
        d["id"] = cid
    return d


def cases():
    c = []

    def add(name, request, special=SPECIAL):
        c.append((name, request, special))

    add("user_hi_gen", {"messages": [U("Hi")], "add_generation_prompt": True})
    add("user_hi_gen_thinking", {"messages": [U("Hi")], "add_generation_prompt": True, "enable_thinking": True})
    add("user_hi_thinking_false", {"messages": [U("Hi")], "add_generation_prompt": True, "enable_thinking": False})
    add("user_hi_nogen", {"messages": [U("Hi")]})
    add("system_brief_multi", {"messages": [{"role": "system", "content": "  Be brief. "}, U("Hi"), A("Hello!"), U("Bye")],
                               "add_generation_prompt": True})
    add("developer_first", {"messages": [{"role": "developer", "content": "You are a pirate.\n"}, U("Ahoy")],
                            "add_generation_prompt": True})
    add("system_parts", {"messages": [{"role": "system", "content": [{"type": "text", "text": " Part one. "},
                                                                       {"type": "text", "text": "Part two."}]},
                                      U("Go")], "add_generation_prompt": True})
    add("system_not_first", {"messages": [U("Hi"), {"role": "system", "content": "late system"}, U("Again")],
                             "add_generation_prompt": True})
    add("multi_turn_nogen", {"messages": [U("one"), A("two"), U("three"), A("four")]})
    add("spec_tools_call_result", {"messages": [U("Weather in Paris?"),
                                                A(None, tool_calls=[call("get_weather", {"city": "Paris", "days": 2}, "c1")]),
                                                {"role": "tool", "tool_call_id": "c1", "content": "{\"temp\": 21}"}],
                                   "tools": [WEATHER_TOOL], "add_generation_prompt": True})
    add("spec_tools_call_result_thinking", {"messages": [U("Weather in Paris?"),
                                                         A(None, tool_calls=[call("get_weather", {"city": "Paris"}, "c1")]),
                                                         {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
                                            "tools": [WEATHER_TOOL], "add_generation_prompt": True, "enable_thinking": True})
    add("tools_only_decl", {"messages": [U("hello")], "tools": [WEATHER_TOOL, NESTED_TOOL], "add_generation_prompt": True})
    add("tools_misc_decl", {"messages": [U("hello")], "tools": MISC_TOOLS, "add_generation_prompt": True})
    add("tools_system_thinking", {"messages": [{"role": "system", "content": "Use tools."}, U("hi")],
                                  "tools": [NESTED_TOOL], "enable_thinking": True, "add_generation_prompt": True})
    add("tools_empty_list", {"messages": [U("hi")], "tools": [], "add_generation_prompt": True})
    add("call_arg_types", {"messages": [U("book it"),
                                        A("", tool_calls=[call("book_trip", {
                                            "traveler": {"name": "Ann \"Q\" Lee", "age": 41, "address": {"street": "1 Main", "zip": None}},
                                            "legs": [{"from": "SFO", "to": "東京", "Class": "business"}],
                                            "tags": ["a", "b"], "flexible": True, "budget": 1234.5,
                                            "ratio": 1e-05, "big": 10000000000000000.0, "neg": -3, "one": 1.0,
                                            "no": False, "Zeta": "z", "alpha": "a"}, "t1")]),
                                        {"role": "tool", "tool_call_id": "t1", "content": "booked"},
                                        A("Done: booked.")],
                           "tools": [NESTED_TOOL], "add_generation_prompt": True})
    add("call_args_string_raises", {"messages": [U("x"), A(None, tool_calls=[call("get_weather", "{\"city\": \"Paris\"}")])],
                                    "tools": [WEATHER_TOOL]})
    add("call_args_list_raises", {"messages": [U("x"), A(None, tool_calls=[call("get_weather", ["Paris"])])]})
    add("call_args_null", {"messages": [U("x"), A(None, tool_calls=[call("now", None, "n1")]),
                                        {"role": "tool", "tool_call_id": "n1", "content": "12:00"}],
                           "tools": MISC_TOOLS[:1], "add_generation_prompt": True})
    add("call_no_response_yet", {"messages": [U("Weather?"), A(None, tool_calls=[call("get_weather", {"city": "Oslo"}, "w")])],
                                 "tools": [WEATHER_TOOL], "add_generation_prompt": True})
    add("multi_calls_multi_results", {"messages": [
        U("Compare Paris and Rome"),
        A("Checking both.", tool_calls=[call("get_weather", {"city": "Paris"}, "p"), call("get_weather", {"city": "Rome"}, "r")]),
        {"role": "tool", "tool_call_id": "r", "content": "hot"},
        {"role": "tool", "tool_call_id": "p", "content": "mild"},
        A("Rome is hotter."), U("thanks")], "tools": [WEATHER_TOOL], "add_generation_prompt": True})
    add("tool_result_by_name", {"messages": [U("q"), A(None, tool_calls=[call("get_weather", {"city": "Nice"})]),
                                             {"role": "tool", "name": "get_weather", "content": "rain"}],
                                "add_generation_prompt": True})
    add("tool_result_unknown_name", {"messages": [U("q"), A(None, tool_calls=[call("get_weather", {"city": "Nice"}, "a")]),
                                                  {"role": "tool", "tool_call_id": "zzz", "content": "rain"}],
                                     "add_generation_prompt": True})
    add("tool_result_parts", {"messages": [U("q"), A(None, tool_calls=[call("get_weather", {"city": "Nice"}, "a")]),
                                           {"role": "tool", "tool_call_id": "a",
                                            "content": [{"type": "text", "text": "see "}, {"type": "image"},
                                                        {"type": "text", "text": "chart"}, {"type": "input_audio"},
                                                        {"type": "video"}]}],
                              "add_generation_prompt": True})
    add("tool_result_mapping", {"messages": [U("q"), A(None, tool_calls=[call("get_weather", {"city": "Nice"}, "a")]),
                                             {"role": "tool", "tool_call_id": "a",
                                              "content": {"temp": 21.5, "sky": "clear", "Wind": [1, 2], "ok": True}}],
                                "add_generation_prompt": True})
    add("tool_responses_field", {"messages": [U("q"),
                                              A(None, tool_calls=[call("get_weather", {"city": "Nice"})],
                                                tool_responses=[{"name": "get_weather", "response": {"temp": 20, "unit": "C"}},
                                                                {"name": "", "response": "plain text"}])],
                                 "add_generation_prompt": True})
    add("tool_responses_then_answer", {"messages": [U("q"),
                                                    A(None, tool_calls=[call("get_weather", {"city": "Nice"})],
                                                      tool_responses=[{"name": "get_weather", "response": 7}]),
                                                    A("It is 7 degrees.")],
                                       "add_generation_prompt": True, "enable_thinking": True})
    add("reasoning_after_last_user", {"messages": [U("2+2?"), A("4", reasoning_content="Add two and two.")],
                                      "add_generation_prompt": True})
    add("reasoning_before_last_user", {"messages": [U("2+2?"), A("4", reasoning_content="Add."), U("3+3?")],
                                       "add_generation_prompt": True})
    add("reasoning_field", {"messages": [U("hi"), A("hello", reasoning="  greet back  ")]})
    add("preserve_thinking_tool_calls", {"messages": [U("w?"), A(None, reasoning="need tool",
                                                                  tool_calls=[call("get_weather", {"city": "Oslo"}, "o")]),
                                                      {"role": "tool", "tool_call_id": "o", "content": "snow"},
                                                      U("and tomorrow?")],
                                         "preserve_thinking": True, "add_generation_prompt": True})
    add("agent_loop_thinking", {"messages": [{"role": "system", "content": "Agent."}, U("Weather in Oslo and then Bergen"),
                                             A("", reasoning_content="Call for Oslo first.",
                                               tool_calls=[call("get_weather", {"city": "Oslo"}, "1")]),
                                             {"role": "tool", "tool_call_id": "1", "content": "snow"},
                                             A("", reasoning_content="Now Bergen.",
                                               tool_calls=[call("get_weather", {"city": "Bergen"}, "2")]),
                                             {"role": "tool", "tool_call_id": "2", "content": "rain"}],
                                "tools": [WEATHER_TOOL], "enable_thinking": True, "add_generation_prompt": True})
    add("strip_thinking_in_content", {"messages": [U("hi"), A("<|channel>thought\nsecret<channel|>  Visible answer. "),
                                                   U("more")], "add_generation_prompt": True})
    add("whitespace_around", {"messages": [U("\n\n   padded question \t\n"), A("  padded answer\n\n")]})
    add("unicode_cjk_emoji", {"messages": [U("你好，世界 🌍🚀 — naïve café"), A("こんにちは 👋"), U("Ελληνικά ΣΑΣ")],
                              "add_generation_prompt": True})
    add("unicode_whitespace_trim", {"messages": [U("\u3000\u00a0 wide spaces \u2003\u205f"), A("\u2028ok\u2029")]})
    add("content_parts_user", {"messages": [{"role": "user", "content": [{"type": "text", "text": " Look: "}, {"type": "image"},
                                                                         {"type": "image_url", "image_url": {"url": "x"}},
                                                                         {"type": "audio"}, {"type": "video"},
                                                                         {"type": "text", "text": "What is it?"}]}],
                               "add_generation_prompt": True})
    add("content_parts_assistant", {"messages": [U("hi"), {"role": "assistant", "content": [
        {"type": "text", "text": "<|channel>thought\nx<channel|>Part A"}, {"type": "text", "text": " Part B "}]}]})
    add("empty_content", {"messages": [U(""), A("")], "add_generation_prompt": True})
    add("null_and_missing_content", {"messages": [{"role": "user", "content": None}, {"role": "assistant"}, U("x")],
                                     "add_generation_prompt": True})
    add("consecutive_assistants", {"messages": [U("hi"), A("part one"), A("part two")], "add_generation_prompt": True})
    add("extra_kwargs", {"messages": [U("hi")], "add_generation_prompt": True, "custom_flag": True, "model": "gemma"})
    add("special_null", {"messages": [U("hi")], "add_generation_prompt": True}, None)
    add("special_custom_bos", {"messages": [U("hi")]}, {"bos_token": "[BOS]", "eos_token": "[EOS]"})
    add("empty_messages", {"messages": [], "add_generation_prompt": True})
    add("empty_messages_thinking", {"messages": [], "enable_thinking": True})
    add("numeric_user_content", {"messages": [U(42), A(3.5)]})
    add("assistant_only", {"messages": [A("I start.")], "add_generation_prompt": True})
    add("long_conversation", {"messages": [m for i in range(12) for m in (U("question %d" % i), A("answer %d" % i))],
                              "add_generation_prompt": True})
    add("tool_name_not_string", {"messages": [U("q"), A(None, tool_responses=[{"name": 5, "response": "x"}])]})
    add("quote_and_backslash", {"messages": [U("He said \"hi\" \\ 'ok' <|\"|>"),
                                             A(None, tool_calls=[call("get_weather", {"city": "a\"b\\c\n"}, "q")]),
                                             {"role": "tool", "tool_call_id": "q", "content": "\"quoted\""}]})
    return c


def main():
    templates = [("current", "chat_template.jinja"), ("launch", "chat_template.release-2026-04-02.jinja")]
    total = 0
    for tag, fname in templates:
        src = open(os.path.join(DATA, fname), encoding="utf-8").read()
        tpl = compile_hf(src)
        out = []
        for name, request, special in cases():
            item = {"name": name, "request": request, "special": special}
            try:
                item["expected"] = hf_render(tpl, request, special)
            except Exception as e:  # the C renderer must fail too
                item["error"] = {"type": type(e).__name__, "message": str(e)}
            out.append(item)
        path = os.path.join(DATA, "parity_%s.json" % tag)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"template": fname, "jinja2": jinja2.__version__, "cases": out}, f, ensure_ascii=False, indent=1)
            f.write("\n")
        nerr = sum(1 for x in out if "error" in x)
        print("%s: %d cases (%d errors) -> %s" % (tag, len(out), nerr, os.path.relpath(path, ROOT)))
        total += len(out)
    # engine cases
    env_tpl = compile_hf("")
    inputs = json.load(open(os.path.join(DATA, "jinja_cases.in.json"), encoding="utf-8"))
    out = []
    for src, variables in inputs:
        item = {"template": src, "vars": variables}
        try:
            item["expected"] = env_tpl.environment.from_string(src).render(**variables)
        except Exception as e:
            item["error"] = {"type": type(e).__name__, "message": str(e)}
        out.append(item)
    path = os.path.join(DATA, "jinja_cases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"jinja2": jinja2.__version__, "cases": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print("engine: %d cases (%d errors) -> %s" % (len(out), sum(1 for x in out if "error" in x),
                                                  os.path.relpath(path, ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
