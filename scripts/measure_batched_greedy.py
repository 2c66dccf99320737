#!/usr/bin/env python3
"""Measures whether llama-server b10883 itself answers a greedy request the
same alone and batched with three others (issue #35): four slots over one
unified pool (llama-server's own -np auto), four questions asked one by one,
then all four at once, several rounds; prints how many batched answers equal
the lone one. The warden's test (tests/real/slots.rs) reads the same rate
through the warden: a difference here is llama.cpp's batched arithmetic
(the matrix kernels sum in another order when a batch holds several
sequences), not the warden's.

Usage: scripts/measure_batched_greedy.py [ROUNDS]   (run it alone)
"""

import concurrent.futures as cf
import json
import os
import subprocess
import sys
import time
import urllib.request

CACHE = os.path.expanduser("~/.cache/llm-warden")
SERVER = os.path.join(CACHE, "llama-cpp/b10883-cpu-39e69934/bin/llama-server")
MODEL = os.path.join(CACHE, "models/SmolLM2-135M-Instruct.Q4_1.gguf")
PORT = 28417
QUESTIONS = [
    "Name three colours of the rainbow.",
    "What is the capital of France?",
    "Count from one to ten in words.",
    "Write one sentence about the sea.",
]


def ask(q):
    body = {"messages": [{"role": "user", "content": q}], "max_tokens": 40, "temperature": 0, "seed": 7}
    req = urllib.request.Request(
        f"http://127.0.0.1:{PORT}/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())["choices"][0]["message"]["content"]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    p = subprocess.Popen(
        [SERVER, "-m", MODEL, "-c", "8192", "-np", "4", "--kv-unified", "--cache-ram", "0", "--port", str(PORT)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.2)
        alone = [ask(q) for q in QUESTIONS]
        same = total = 0
        for _ in range(rounds):
            with cf.ThreadPoolExecutor(4) as ex:
                together = list(ex.map(ask, QUESTIONS))
            same += sum(a == t for a, t in zip(alone, together))
            total += len(QUESTIONS)
        print(f"llama-server -np 4 --kv-unified: batched greedy answers equal to alone: {same} of {total}")
    finally:
        p.terminate()
        p.wait()


if __name__ == "__main__":
    main()
