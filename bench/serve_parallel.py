#!/usr/bin/env python3
"""Batched serving throughput: STREAMS different greedy requests through `les serve --parallel STREAMS`
all at once, against the same requests one at a time through `les serve --parallel 1`.

Prints, per mode, the wall time, the generated tokens and the total generated tok/s, then the
ratio; checks that every batched reply (text, finish_reason, token counts) equals its one-at-a-time
reply, and prints the batched server's /metrics figures (steps, tokens per step, prompt tokens
joined to decoding steps). Each mode is run REPS times on a fresh server (first a warm-up request
that is not timed), the median is reported.

  bench/serve_parallel.py LES MODEL [--mem 4G] [--streams 4] [--tokens 64] [--reps 3] [--threads 2]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

PROMPTS = [
    "In the beginning God created the heaven and the earth. And the earth was without form, and void;",
    "NAME\n  ls - list directory contents\nSYNOPSIS\n  ls [OPTION]... [FILE]...\nDESCRIPTION\n  List",
    "The quick brown fox jumps over the lazy dog. A computer program is a list of instructions that",
    "hacker: n. [originally, someone who makes furniture with an axe] 1. A person who enjoys exploring",
    "Abandon, v. t. To give up wholly; to surrender, relinquish, or yield. Abase, v. t. To lower or",
    "And God said, Let there be light: and there was light. And God saw the light, that it was good:",
    "grep searches for PATTERNS in each FILE. PATTERNS is one or more patterns separated by newline",
    "The king said to the people of the land, Hear now the word that I speak unto you this day, for",
]


def start_server(args, parallel):
    log = open(f"/tmp/serve_parallel.{os.getpid()}.{parallel}.log", "w")
    cmd = [args.les, "serve", "-m", args.model, "--port", "0", "-t", str(args.threads), "-c", str(args.ctx),
           "--parallel", str(parallel)]
    if args.mem:
        cmd += ["--mem", args.mem]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    url = None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        log.write(line)
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            url = m.group(1)
            break
    if not url:
        sys.exit("les serve did not start:\n" + "".join(lines))
    # Keep draining stderr so the server never blocks on it.
    threading.Thread(target=lambda: [log.write(l) for l in proc.stderr], daemon=True).start()
    return proc, url, "".join(lines)


def complete(url, prompt, tokens):
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(url + "/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        out = json.loads(r.read())
    c = out["choices"][0]
    return {"text": c["text"], "finish": c["finish_reason"], "usage": out["usage"]["completion_tokens"]}


def run_mode(args, parallel, concurrent):
    proc, url, banner = start_server(args, parallel)
    try:
        complete(url, "Warm up", 4)
        prompts = PROMPTS[: args.streams]
        replies = [None] * len(prompts)
        t0 = time.perf_counter()
        if concurrent:
            def one(i):
                replies[i] = complete(url, prompts[i], args.tokens)
            threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            for i, p in enumerate(prompts):
                replies[i] = complete(url, p, args.tokens)
        wall = time.perf_counter() - t0
        metrics = urllib.request.urlopen(url + "/metrics").read().decode()
    finally:
        proc.terminate()
        proc.wait()
    if any(r is None for r in replies):
        sys.exit("a request failed")
    return wall, replies, metrics, banner


def metric(text, name):
    m = re.search(rf"^{name} (\S+)$", text, re.M)
    return float(m.group(1)) if m else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("les")
    ap.add_argument("model")
    ap.add_argument("--mem", default="")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=1024)
    args = ap.parse_args()
    if not 1 <= args.streams <= len(PROMPTS):
        sys.exit(f"--streams must be in [1, {len(PROMPTS)}]")
    rows = {}
    ref = None
    for mode, parallel, concurrent in (("one at a time (--parallel 1)", 1, False),
                                       (f"{args.streams} together (--parallel {args.streams})", args.streams, True)):
        walls = []
        for _ in range(args.reps):
            wall, replies, metrics, banner = run_mode(args, parallel, concurrent)
            walls.append(wall)
            if ref is None:
                ref = replies
            elif replies != ref:
                for i, (a, b) in enumerate(zip(replies, ref)):
                    if a != b:
                        print(f"MISMATCH request {i}:\n  got  {a}\n  want {b}", file=sys.stderr)
                sys.exit("a reply differs from the one-at-a-time reply")
        tokens = sum(r["usage"] for r in ref)
        wall = statistics.median(walls)
        rows[parallel] = tokens / wall
        print(f"{mode}: {tokens} tokens, wall {wall:.2f} s (runs {', '.join(f'{w:.2f}' for w in walls)}), "
              f"{tokens / wall:.2f} tok/s")
        if parallel > 1:
            steps = metric(metrics, "les_batch_steps_total")
            print(f"  last run's /metrics: {steps:.0f} steps, "
                  f"{metric(metrics, 'les_batch_step_tokens_sum') / steps:.2f} tokens per step, "
                  f"{metric(metrics, 'les_batch_prompt_tokens_joined_total'):.0f} prompt tokens joined decoding steps")
    print(f"every reply equals its one-at-a-time reply; speedup {rows[args.streams] / rows[1]:.2f}x")


if __name__ == "__main__":
    main()
