#!/usr/bin/env python3
"""Measures llama-server b10883's parallel slots for issue #35: with one KV
pool all slots share (--kv-unified) or the window split per slot
(--no-kv-unified), at the same -c, against today's one slot.

For each configuration: the KV size llama-server reports, the child's
anonymous memory after load (RssAnon, the brake's measure), whether one
conversation longer than a split slot (3,000 tokens) is answered, and what
four conversations of ~2,600 tokens each (10,400 > the 8,192-token pool)
get when they arrive at once.

Usage: scripts/measure_slots.py [MODEL.gguf]   (default: SmolLM2 from the cache)
Run it alone: it drives llama-server flat out on every core.
"""

import concurrent.futures as cf
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

CACHE = os.path.expanduser("~/.cache/llm-warden")
SERVER = os.path.join(CACHE, "llama-cpp/b10883-cpu-39e69934/bin/llama-server")
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(CACHE, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
CTX = 8192
PORT = 28411

CONFIGS = [
    ("one slot (today)", ["-np", "1"]),
    ("4 slots, unified pool", ["-np", "4", "--kv-unified"]),
    ("4 slots, split (n_ctx/4 each)", ["-np", "4", "--no-kv-unified"]),
]


def post(path, body, timeout=600):
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def wait_ready(proc):
    for _ in range(600):
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        time.sleep(0.1)
    raise SystemExit("llama-server never became ready")


def rss_anon_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return None


def prompt_of(tokens):
    """A user message of about `tokens` tokens (sized with /tokenize)."""
    words = "The quick brown fox jumps over the lazy dog near the river bank. "
    text = words * max(1, tokens // 14)
    _, r = post("/tokenize", {"content": text})
    n = len(r.get("tokens", []))
    return text, n


def chat(text, max_tokens):
    t0 = time.time()
    status, r = post(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "temperature": 0},
    )
    dt = time.time() - t0
    if status == 200:
        u = r.get("usage", {})
        return f"200 ({u.get('prompt_tokens')} prompt, {u.get('completion_tokens')} answered, {dt:.1f} s, finish={r['choices'][0].get('finish_reason')})"
    return f"{status} {r.get('error', {}).get('message', r)!s:.160}"


def main():
    for name, flags in CONFIGS:
        argv = [SERVER, "-m", MODEL, "-c", str(CTX), "--no-webui", "--cache-ram", "0", "--no-cache-idle-slots",
                "--host", "127.0.0.1", "--port", str(PORT)] + flags
        log = open(f"/tmp/measure_slots_{flags[1]}_{flags[-1].strip('-')}.log", "w")
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(proc)
            time.sleep(0.5)
            out = open(log.name).read()
            slots = re.findall(r"initializing, (n_slots = \d+, n_ctx_slot = \d+, kv_unified = '\w+')", out)
            print(f"\n== {name}: {' '.join(flags)}")
            print(f"   {slots[:1]}  RssAnon after load: {rss_anon_mib(proc.pid):.0f} MiB")
            text, n = prompt_of(3000)
            print(f"   one conversation of {n} tokens: {chat(text, 16)}")
            text, n = prompt_of(2600)
            with cf.ThreadPoolExecutor(4) as ex:
                res = list(ex.map(lambda _: chat(text + "?", 64), range(4)))
            print(f"   four conversations of {n} tokens at once (sum {4 * n} > {CTX}):")
            for r in res:
                print(f"     {r}")
            print(f"   RssAnon after: {rss_anon_mib(proc.pid):.0f} MiB")
        finally:
            proc.terminate()
            proc.wait(10)


if __name__ == "__main__":
    main()
