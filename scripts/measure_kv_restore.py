#!/usr/bin/env python3
"""Measures what a slot restore gives back on the pinned llama-server, with
and without extra flags (law::kv_keep's figures): a conversation of FACTS
facts, its slot saved after the first turn, the next turn uninterrupted;
then a fresh child, the slot restored, the same next turn. Prints one JSON
object: the KV buffer lines (-lv 5), the child's VmRSS and anonymous memory
after three turns, checkpoints created, the save's size and time, prompt_n /
cache_n / prompt_ms of the next turn both ways, decode tok/s at depth.

usage: measure_kv_restore.py SERVER MODEL CTX FACTS [llama-server flags...]
e.g.   measure_kv_restore.py artifacts/llama-cpp/cpu/bin/llama-server \\
           ~/.cache/llm-warden/models/gemma-3-270m-q4_k_m.gguf 32768 130 --swa-full
(needs python3 with requests; writes its logs to $TMPDIR)
"""
import json, os, re, signal, subprocess, sys, tempfile, time, requests

server, model, ctx, nfacts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
extra = sys.argv[5:]
port = 27290
save_dir = tempfile.mkdtemp(prefix="kv-restore-")
base = f"http://127.0.0.1:{port}"

def spawn(tag):
    log = open(os.path.join(tempfile.gettempdir(), f"kv-restore-{tag}.log"), "w")
    argv = [server, "-m", model, "-c", str(ctx), "-np", "1", "--cache-ram", "0",
            "--no-cache-idle-slots", "--no-webui", "--slot-save-path", save_dir,
            "--host", "127.0.0.1", "--port", str(port), "-lv", "5", "-t", "2"] + extra
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            if requests.get(base + "/health", timeout=1).status_code == 200:
                return p, log.name
        except Exception:
            pass
        time.sleep(0.1)
    raise SystemExit("not ready")

def kill(p):
    p.send_signal(signal.SIGTERM); p.wait(timeout=30)

def mem(pid):
    rss = anon = None
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS:"): rss = int(l.split()[1]) * 1024
    for l in open(f"/proc/{pid}/smaps_rollup"):
        if l.startswith("Anonymous:"): anon = int(l.split()[1]) * 1024
    return rss, anon

def chat(msgs, n=16):
    r = requests.post(base + "/v1/chat/completions", json={"messages": msgs, "max_tokens": n,
        "temperature": 0, "seed": 1}, timeout=600).json()
    t = r["timings"]
    return r["choices"][0]["message"]["content"], t

facts = " ".join(f"Fact {i}: the number {i} is followed by {i+1}." for i in range(nfacts))
opening = [{"role": "system", "content": "You are terse."},
           {"role": "user", "content": facts + "\nWhich number follows 41?"}]
out = {"flags": extra, "ctx": ctx}
p, logf = spawn("a")
t0 = time.time()
a1, t1 = chat(opening)
out["turn1"] = {k: t1[k] for k in ("prompt_n", "cache_n", "prompt_ms", "predicted_per_second")}
nxt = opening + [{"role": "assistant", "content": a1}, {"role": "user", "content": "And which follows 99?"}]
# save the slot as it is after turn 1 (what the warden saves at a reap)
r = requests.post(base + "/slots/0?action=save", json={"filename": "s.bin"}).json()
out["save"] = {"n_saved": r.get("n_saved"), "ms": r["timings"]["save_ms"],
               "bytes": os.path.getsize(os.path.join(save_dir, "s.bin"))}
a2, t2 = chat(nxt)
out["turn2_uninterrupted"] = {k: t2[k] for k in ("prompt_n", "cache_n", "prompt_ms")}
# decode speed at this depth
_, t3 = chat(nxt + [{"role": "assistant", "content": a2}, {"role": "user", "content": "Count from 1 to 40."}], 64)
out["decode_tps_deep"] = t3["predicted_per_second"]
out["rss_anon_after"] = mem(p.pid)
kill(p)
out["kv_lines"] = [l.strip() for l in open(logf) if "KV buffer size" in l or "llama_kv_cache" in l and "MiB" in l][-6:]
out["ckpt_lines"] = sum(1 for l in open(logf) if "created context checkpoint" in l)
# interrupted: new child, restore, same turn 2
p, logf = spawn("b")
r = requests.post(base + "/slots/0?action=restore", json={"filename": "s.bin"}).json()
out["restore"] = {"n_restored": r.get("n_restored"), "ms": r.get("timings", {}).get("restore_ms"), "raw": None if "n_restored" in r else r}
b2, tb = chat(nxt)
out["turn2_after_restore"] = {k: tb[k] for k in ("prompt_n", "cache_n", "prompt_ms")}
out["same_answer"] = (b2 == a2)
kill(p)
print(json.dumps(out))
