#!/usr/bin/env python3
"""kv_chat_bench.py — a multi-turn conversation against `g4tp serve`, with and without the prefix
cache (docs/kvcache.md; not a test). Each turn adds a user message of about --user-tokens tokens
(random words) to the conversation so far and asks for --max-tokens tokens (streaming, greedy,
ignore_eos); the answer goes into the history as the assistant message. Reports per turn: prompt
tokens, tokens from the cache (usage.prompt_tokens_details.cached_tokens) and the client's time
to the first streamed token. Standard library only; reuses serve_bench.py's server start.
  python3 bench/kv_chat_bench.py --g4tp build/g4tp --model /tmp/syn31 --serve-args "--threads 2" --turns 10
"""
import argparse, http.client, json, os, random, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_bench import start_server  # noqa: E402

WORDS = ("time year people way day man thing woman life child world school state family student group country problem hand "
         "part place case week company system program question work government number night point home water room mother "
         "area money story fact month lot right study book eye job word business issue side kind head house service friend").split()


def turn(port, msgs, max_tokens):
    body = {"messages": msgs, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
    first, text, usage = None, [], None
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: {"):
            continue
        d = json.loads(line[6:])
        usage = d.get("usage") or usage
        ch = d.get("choices") or []
        if ch and (ch[0].get("delta") or {}).get("content"):
            first = first or time.perf_counter()
            text.append(ch[0]["delta"]["content"])
    return "".join(text), usage, ((first or time.perf_counter()) - t0) * 1e3


def run(args, cache):
    a = argparse.Namespace(**vars(args))
    a.serve_args = args.serve_args + ("" if cache else " --no-prefix-cache")
    proc, port = start_server(a)
    try:
        rng = random.Random(7)
        msgs, rows = [], []
        turn(port, [{"role": "user", "content": "warm up"}], 2)
        for k in range(args.turns):
            msgs.append({"role": "user", "content": " ".join(rng.choice(WORDS) for _ in range(args.user_tokens))})
            text, u, ttft = turn(port, msgs, args.max_tokens)
            msgs.append({"role": "assistant", "content": text})
            rows.append((k + 1, u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"], ttft))
        return rows
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--g4tp", default="build/g4tp")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--serve-args", default="")
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--user-tokens", type=int, default=200, help="words per user message (about one token each)")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--log", default=None)
    args = ap.parse_args()
    on, off = run(args, True), run(args, False)
    print("| turn | prompt tokens | from the cache | TTFT with the cache | TTFT without |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for (k, p, c, t), (_, p2, _, t2) in zip(on, off):
        print(f"| {k} | {p} | {c} | {t:.0f} ms | {t2:.0f} ms |")
    print(f"| all | {sum(r[1] for r in on)} | {sum(r[2] for r in on)} | {sum(r[3] for r in on) / 1e3:.1f} s | {sum(r[3] for r in off) / 1e3:.1f} s |")


if __name__ == "__main__":
    main()
