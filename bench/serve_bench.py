#!/usr/bin/env python3
"""serve_bench.py — load benchmark of `g4tp serve` (not a test).

Starts the server on a model (or uses --url), then for each concurrency level runs that many
client threads, each sending --rounds streaming requests back to back (OpenAI chat or
completions with stream_options.include_usage), and reports:
  aggregate tok/s   all completion tokens / wall time of the level (decode throughput under load)
  stream tok/s      mean per request of (text chunks - 1) / (last chunk - first chunk)
  TTFT              client side: request sent -> first streamed chunk with text (p50 / p90);
                    server side: mean of g4tp_time_to_first_token_seconds over the level
Standard library only. Example:
  python3 bench/serve_bench.py --g4tp build/g4tp --model models/demo --concurrency 1,4,16
"""
import argparse, http.client, json, os, re, signal, statistics, subprocess, sys, threading, time


def start_server(args):
    cmd = [args.g4tp, "serve", "--port", "0", "--model", args.model] + args.serve_args.split()
    log = open(args.log, "w") if args.log else subprocess.DEVNULL
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=log, text=True)
    port = None
    t0 = time.time()
    while time.time() - t0 < 600:
        line = p.stderr.readline()
        if not line:
            break
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            port = int(m.group(1))
        if "ready:" in line:
            print("# " + line.strip(), file=sys.stderr)
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, port
    p.kill()
    sys.exit("server did not become ready")


def metrics(host, port):
    c = http.client.HTTPConnection(host, port, timeout=60)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def one_request(host, port, args, i):
    body = {"max_tokens": args.max_tokens, "stream": True, "stream_options": {"include_usage": True},
            "temperature": args.temperature, "seed": 1000 + i}
    if args.ignore_eos:
        body["ignore_eos"] = True
    if args.api == "chat":
        path = "/v1/chat/completions"
        body["messages"] = [{"role": "user", "content": args.prompt.replace("{i}", str(i))}]
    else:
        path = "/v1/completions"
        body["prompt"] = args.prompt.replace("{i}", str(i))
    c = http.client.HTTPConnection(host, port, timeout=3600)
    t0 = time.perf_counter()
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError("HTTP %d: %s" % (r.status, r.read()[:300]))
    first = last = None
    tokens = chunks = 0
    for raw in r:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        d = json.loads(line[6:])
        if d.get("usage"):
            tokens = d["usage"]["completion_tokens"]
        ch = d.get("choices") or []
        if ch and (ch[0].get("text") or (ch[0].get("delta") or {}).get("content") or (ch[0].get("delta") or {}).get("reasoning_content")):
            now = time.perf_counter()
            first = first or now
            last = now
            chunks += 1
    t1 = time.perf_counter()
    return {"t0": t0, "first": first, "last": last, "t1": t1, "tokens": tokens, "chunks": chunks}


def run_level(host, port, args, conc):
    results, errors = [], []
    lock = threading.Lock()

    def client(k):
        for j in range(args.rounds):
            try:
                res = one_request(host, port, args, k * args.rounds + j)
                with lock:
                    results.append(res)
            except Exception as e:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(str(e))

    m0 = metrics(host, port)
    threads = [threading.Thread(target=client, args=(k,)) for k in range(conc)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    m1 = metrics(host, port)
    if errors:
        print("# %d errors, first: %s" % (len(errors), errors[0]), file=sys.stderr)
    tokens = sum(r["tokens"] for r in results)
    ttft = sorted((r["first"] - r["t0"]) * 1e3 for r in results if r["first"])
    # chunks that carried text (tokens that decode to nothing, e.g. special ones past an ignored
    # end of sequence, send none)
    per = [(r["chunks"] - 1) / (r["last"] - r["first"]) for r in results if r["first"] and r["last"] > r["first"] and r["chunks"] > 1]
    k_sum, k_cnt = "g4tp_time_to_first_token_seconds_sum", "g4tp_time_to_first_token_seconds_count"
    n_srv = m1.get(k_cnt, 0) - m0.get(k_cnt, 0)
    srv_ttft = (m1.get(k_sum, 0) - m0.get(k_sum, 0)) / n_srv * 1e3 if n_srv else float("nan")
    pct = lambda xs, q: xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")
    return {"concurrency": conc, "requests": len(results), "errors": len(errors), "tokens": tokens, "wall_s": wall,
            "aggregate_tok_s": tokens / wall if wall else 0, "stream_tok_s": statistics.mean(per) if per else float("nan"),
            "ttft_p50_ms": pct(ttft, 0.5), "ttft_p90_ms": pct(ttft, 0.9), "server_ttft_mean_ms": srv_ttft}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--g4tp", default="build/g4tp")
    ap.add_argument("--model", default="models/demo")
    ap.add_argument("--serve-args", default="", help="extra flags for g4tp serve, e.g. '--threads 2 --max-seqs 16'")
    ap.add_argument("--url", help="use a running server (http://host:port) instead of starting one")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--rounds", type=int, default=2, help="requests per client, back to back")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action="store_true", help="every reply runs to --max-tokens (steady decode load)")
    ap.add_argument("--api", choices=["chat", "completions"], default="chat")
    ap.add_argument("--prompt", default="What is the capital of France?")
    ap.add_argument("--log", help="server stdout log")
    ap.add_argument("--json", action="store_true", help="print one JSON line per level")
    args = ap.parse_args()
    proc = None
    if args.url:
        m = re.match(r"https?://([^:/]+):(\d+)", args.url)
        host, port = m.group(1), int(m.group(2))
    else:
        proc, port = start_server(args)
        host = "127.0.0.1"
    try:
        one_request(host, port, args, 0)  # warm-up
        print("%-5s %8s %8s %14s %12s %12s %12s %16s" % ("conc", "requests", "tokens", "aggregate tok/s", "stream tok/s",
                                                          "TTFT p50 ms", "TTFT p90 ms", "server TTFT ms"))
        for conc in [int(x) for x in args.concurrency.split(",")]:
            r = run_level(host, port, args, conc)
            if args.json:
                print(json.dumps(r))
            else:
                print("%-5d %8d %8d %14.1f %12.1f %12.1f %12.1f %16.1f" % (conc, r["requests"], r["tokens"], r["aggregate_tok_s"],
                      r["stream_tok_s"], r["ttft_p50_ms"], r["ttft_p90_ms"], r["server_ttft_mean_ms"]))
            sys.stdout.flush()
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=120)


if __name__ == "__main__":
    main()
