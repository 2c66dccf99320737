#!/usr/bin/env python3
"""smoke_llama_server.py BIN MODEL LOG [RPC_BIN]: proves a llama-server build runs here.

Starts BIN on MODEL (127.0.0.1, a free port, a 512-token window), waits for
/health, asks /completion for one token, and stops it. With RPC_BIN (the
build's ggml-rpc-server) it first starts that on another free port and gives
llama-server `--rpc` to it with every layer offloaded, so the token is
computed across both binaries: the worker side is proved with the server. build-llama.sh runs
it after every build and on every cache hit not yet checked on this CPU, so
a binary that cannot run on this machine (SIGILL: instructions this CPU or
kernel refuses) fails the build at once instead of at a user's first chat.

Exit status 0 when the token came back; otherwise 1, after one line that
names what happened (the signal by name) and the last lines of the server's
output, which also go to LOG.
"""

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

READY_WITHIN_S = 120
ANSWER_WITHIN_S = 60


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tail(path, n=15):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def death(rc):
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        return f"died of {name}"
    return f"exited with status {rc}"


def start_rpc(rpc_bin, log_path):
    """Starts ggml-rpc-server on a free loopback port; returns (proc, port, problem)."""
    port = free_port()
    log = open(log_path + ".rpc", "w")
    proc = subprocess.Popen(
        [rpc_bin, "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return proc, port, f"ggml-rpc-server {death(proc.returncode)} at start\n{tail(log_path + '.rpc')}"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, port, None
        except OSError:
            time.sleep(0.2)
    return proc, port, "ggml-rpc-server did not listen within 30 s"


def stop(proc):
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    binary, model, log_path = sys.argv[1:4]
    rpc_bin = sys.argv[4] if len(sys.argv) > 4 else None
    rpc, extra = None, []
    if rpc_bin:
        rpc, rpc_port, problem = start_rpc(rpc_bin, log_path)
        if problem:
            stop(rpc)
            print(problem, file=sys.stderr)
            return 1
        extra = ["--rpc", f"127.0.0.1:{rpc_port}", "-ngl", "99"]
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-c", "512", "-np", "1", "--no-webui"]
            + extra,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    problem = None
    try:
        deadline = time.monotonic() + READY_WITHIN_S
        while problem is None:
            if proc.poll() is not None:
                problem = f"llama-server {death(proc.returncode)} while loading the model"
                break
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                problem = f"llama-server was not ready within {READY_WITHIN_S} s"
            time.sleep(0.2)
        if problem is None:
            req = urllib.request.Request(
                base + "/completion",
                data=json.dumps({"prompt": "The capital of France is", "n_predict": 1}).encode(),
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(req, timeout=ANSWER_WITHIN_S) as r:
                    answer = json.load(r)
                if "content" not in answer:
                    problem = f"llama-server answered without a token: {answer}"
            except (urllib.error.URLError, OSError) as e:
                time.sleep(0.5)
                if proc.poll() is not None:
                    problem = f"llama-server {death(proc.returncode)} on its first token"
                else:
                    problem = f"llama-server failed its first token ({e})"
        if problem is None and rpc is not None and rpc.poll() is not None:
            problem = f"ggml-rpc-server {death(rpc.returncode)} while serving the token"
    finally:
        stop(proc)
        stop(rpc)
    if problem is None:
        return 0
    print(problem, file=sys.stderr)
    print(tail(log_path), file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
