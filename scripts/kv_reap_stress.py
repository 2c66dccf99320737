#!/usr/bin/env python3
"""Many rounds of the bench's kv sequence against a running warden, each
after-reap turn split into its parts, optionally on a hostile machine.

The question it answers (issue 25): is a slow first token after a reap a
re-read of the conversation, or something else? Each round builds a
conversation of about 1,000 tokens, ends a turn with `keep_alive: 0` (the
idle reap's unload, which saves the KV), waits for the unload, and times
the next turn. The child's own `timings.prompt_n` says whether it re-read;
the warden's log says how long the new child's load and the restore took.

With `--hostile`, a CPU hog (`yes`) and a disk writer (dd, 2 GB at a time,
which evicts the model from the page cache and stalls reads behind its
writeback) run for the whole stress: the world a laptop is often in.

usage: kv_reap_stress.py BASE LOGFILE [--rounds N] [--facts N] [--hostile]
  BASE     the warden, e.g. http://127.0.0.1:8080 (started with NO_COLOR=1
           and its stderr in LOGFILE, WARDEN_KV_SAVE on)
Needs httpx (the clients environment: ~/.cache/llm-warden/py-clients).
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

import httpx


def facts(n):
    return " ".join(f"Fact {i}: the number {i} is followed by {i + 1}." for i in range(n))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("log")
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--facts", type=int, default=52)
    ap.add_argument("--hostile", action="store_true")
    a = ap.parse_args()
    c = httpx.Client(timeout=600)

    def ask(key, messages, keep_alive=None):
        body = {"messages": messages, "max_tokens": 8, "temperature": 0, "seed": 42, "stream": True}
        if keep_alive is not None:
            body["keep_alive"] = keep_alive
        t0, ttft, timings = time.monotonic(), None, None
        with c.stream("POST", a.base + "/v1/chat/completions", json=body,
                      headers={"X-Warden-Conversation": key}) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                v = json.loads(line[6:])
                ch = v.get("choices") or []
                if ttft is None and ch and (ch[0].get("delta") or {}).get("content"):
                    ttft = (time.monotonic() - t0) * 1000
                timings = v.get("timings", timings)
        return ttft, timings

    def wait_unloaded():
        while True:
            s = c.get(a.base + "/warden/status").json()
            if s.get("model") is None and s.get("state") == "idle":
                return
            time.sleep(0.02)

    def log_size():
        with open(a.log, "rb") as f:
            return len(f.read())

    def log_from(off):
        with open(a.log, "rb") as f:
            return f.read()[off:].decode(errors="replace")

    hogs = []
    if a.hostile:
        # Each in its own process group, so the dd of the loop goes with it.
        hogs.append(subprocess.Popen(["yes"], stdout=subprocess.DEVNULL, start_new_session=True))
        hogs.append(subprocess.Popen(
            ["sh", "-c", "while true; do dd if=/dev/zero of=/tmp/kv_stress_dd bs=1M count=2000 2>/dev/null;"
                         " rm -f /tmp/kv_stress_dd; done"], start_new_session=True))
    rows, tag = [], str(int(time.time()))
    try:
        for r in range(a.rounds):
            key = f"stress-{tag}-{r}"
            m = [{"role": "user", "content": f"{facts(a.facts)}\nWhich number follows 7?"}]
            ask(key, m)
            m += [{"role": "assistant", "content": "8."}, {"role": "user", "content": "And 9?"}]
            _, warm = ask(key, m, keep_alive=0)
            wait_unloaded()
            m += [{"role": "assistant", "content": "10."}, {"role": "user", "content": "And 11?"}]
            off = log_size()
            ttft, t = ask(key, m)
            time.sleep(0.05)
            lg = log_from(off)
            load = [float(x) for x in re.findall(r"load_ms=(\d+)", lg)]
            restore = [float(x) for x in re.findall(r"kv: restored.* ms=([\d.]+)", lg)]
            warns = [l for l in lg.splitlines() if " WARN " in l]
            rereads = t["prompt_n"] > warm["prompt_n"] + 16
            rows.append((ttft, rereads))
            print(f"round {r}: after reap {ttft:.0f} ms, {t['prompt_n']} prompt tokens (warm {warm['prompt_n']})"
                  f"{' RE-READ' if rereads else ''}: load {sum(load):.0f} + restore {sum(restore):.0f}"
                  f" + prompt {t['prompt_ms']:.0f} ms{'; ' + ' | '.join(warns) if warns else ''}", flush=True)
    finally:
        for h in hogs:
            os.killpg(h.pid, signal.SIGKILL)
            h.wait()
        if os.path.exists("/tmp/kv_stress_dd"):
            os.remove("/tmp/kv_stress_dd")
    ttfts = sorted(x for x, _ in rows)
    print(f"{len(rows)} rounds, {sum(1 for _, x in rows if x)} re-read; after-reap TTFT "
          f"median {ttfts[len(ttfts) // 2]:.0f} ms, worst {ttfts[-1]:.0f} ms")
    return 1 if any(x for _, x in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
