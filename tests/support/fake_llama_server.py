#!/usr/bin/env python3
"""A scripted stand-in for llama-server, for fault injection in tests only.

It takes llama-server's argv (-m, -c, --host, --port; everything else is
ignored), guards every route but /health with LLAMA_API_KEY like the real one,
and speaks the same HTTP: /health (503 while "loading", then 200), /props
(default_generation_settings.n_ctx), and /v1/chat/completions streamed and not.
Tests against the real llama-server exist beside the ones that use this; this
double is for what the real one cannot do on demand. The warden builds the
child's environment from an allow-list, so the script comes from a JSON file
beside the model, `<model>.fake.json` (the test writes it next to a small
valid GGUF):

  load_ms            time /health answers 503 before 200 (default 50)
  exit_on_load       print the real llama.cpp failure line for one of
                     corrupt | not_gguf | port_taken | oom, then exit 1
  exit_on_ctx        {"N": failure}: the same, only when started with -c N
                     (failures also: cuda_oom, CUDA's allocation failure)
  offloaded          "N/M": print llama.cpp's `offloaded N/M layers to GPU`
  argv_log           path of a file where each start appends its argv and
                     its CUDA_VISIBLE_DEVICES (one JSON line)
  never_ready        /health answers 503 forever
  tokens             tokens per answer (default 8), capped by the request's
                     bound (n_predict, else max_completion_tokens, else
                     max_tokens, as llama-server reads them)
  token_ms           delay between tokens (default 5)
  hang_after         stop sending (but keep the socket) after N tokens
  die_after          exit abruptly (os._exit) after N tokens
  signal_on_load     die of this signal ("SIGILL", "SIGSEGV", "SIGBUS",
                     "SIGABRT") while loading, as a binary built for another
                     CPU dies on its first computation
  signal_after       {"signal": NAME, "tokens": N}: die of NAME mid-stream
  props_ctx          n_ctx reported by /props (default: -c, else 4096)
  props_fail         /props answers 500
  log                path of a file where each chat request body is appended

The fake prints "main: model loaded" and "listening on" like llama-server,
and "srv stop: cancel task" when a client goes away mid-stream.
"""

import json
import os
import resource
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def arg(name, default=None):
    argv = sys.argv[1:]
    for i, a in enumerate(argv):
        if a == name and i + 1 < len(argv):
            return argv[i + 1]
    return default


MODEL = arg("-m", "")
CTX = arg("-c")
HOST = arg("--host", "127.0.0.1")
PORT = int(arg("--port", "8080"))
KEY = os.environ.get("LLAMA_API_KEY", "")
SCRIPT = {}
try:
    with open(MODEL + ".fake.json") as f:
        SCRIPT = json.load(f)
except OSError:
    pass

START = time.monotonic()
LOAD_S = SCRIPT.get("load_ms", 50) / 1000.0

FAILURES = {
    "corrupt": "llama_model_load: error loading model: tensor 'token_embd.weight' data is not within the file bounds, model is corrupted or incomplete",
    "not_gguf": "gguf_init_from_reader: invalid magic characters: 'hell', expected 'GGUF'",
    "port_taken": f"srv          start: couldn't bind HTTP server socket, hostname: {HOST}, port: {PORT}",
    "oom": "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 98765432109",
    "cuda_oom": "ggml_backend_cuda_buffer_type_alloc_buffer: allocating 2048.00 MiB on device 0: cudaMalloc failed: out of memory",
}


def log(line):
    print(line, file=sys.stderr, flush=True)


def die_of(name):
    """Dies of the named signal with its default action (no core file)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Python leaves these four at their default action (only the main
    # thread could change a handler anyway).
    os.kill(os.getpid(), getattr(signal, name))
    time.sleep(10)


def ready():
    return not SCRIPT.get("never_ready") and time.monotonic() - START >= LOAD_S


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def authorized(self):
        if self.headers.get("Authorization", "") == f"Bearer {KEY}":
            return True
        self.send_json(401, {"error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}})
        return False

    def do_GET(self):
        if self.path == "/health":
            if ready():
                self.send_json(200, {"status": "ok"})
            else:
                self.send_json(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
            return
        if not self.authorized():
            return
        if self.path == "/props":
            if SCRIPT.get("props_fail"):
                self.send_json(500, {"error": {"code": 500, "message": "boom"}})
                return
            n_ctx = SCRIPT.get("props_ctx") or int(CTX or 4096)
            self.send_json(200, {"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1})
            return
        self.send_json(404, {"error": {"code": 404, "message": "Not Found"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        if not self.authorized():
            return
        if self.path == "/completion" and ready():
            # The readiness ping (llama-server's raw completion).
            self.send_json(200, {"content": "t", "tokens_predicted": 1, "stop": True})
            return
        if self.path != "/v1/chat/completions":
            self.send_json(404, {"error": {"code": 404, "message": "Not Found"}})
            return
        if not ready():
            self.send_json(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
            return
        req = json.loads(raw)
        if SCRIPT.get("log"):
            with open(SCRIPT["log"], "a") as f:
                f.write(json.dumps(req) + "\n")
        # The bound as llama-server reads it: the first of these present
        # (the warden sends n_predict).
        bound = next((req[k] for k in ("n_predict", "max_completion_tokens", "max_tokens") if req.get(k) is not None), 1 << 30)
        n = min(SCRIPT.get("tokens", 8), bound)
        delay = SCRIPT.get("token_ms", 5) / 1000.0
        if not req.get("stream"):
            time.sleep(delay * n)
            self.send_json(200, {
                "object": "chat.completion", "model": "fake",
                "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "tok " * n}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": n, "total_tokens": 3 + n},
            })
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(data):
            payload = f"data: {data}\n\n".encode()
            self.wfile.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            self.wfile.flush()

        try:
            for i in range(n):
                after = SCRIPT.get("signal_after")
                if after and i >= after["tokens"]:
                    die_of(after["signal"])
                if SCRIPT.get("die_after") is not None and i >= SCRIPT["die_after"]:
                    log("fake: dying mid-stream")
                    os._exit(3)
                if SCRIPT.get("hang_after") is not None and i >= SCRIPT["hang_after"]:
                    while True:
                        time.sleep(3600)
                time.sleep(delay)
                chunk(json.dumps({"object": "chat.completion.chunk", "model": "fake",
                                  "choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]}))
            chunk(json.dumps({"object": "chat.completion.chunk", "model": "fake",
                              "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
                              "timings": {"predicted_n": n}}))
            chunk("[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            log("srv  stop: cancel task, id_task = 0")


def main():
    if SCRIPT.get("argv_log"):
        with open(SCRIPT["argv_log"], "a") as f:
            f.write(json.dumps({"argv": sys.argv[1:], "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}) + "\n")
    if SCRIPT.get("offloaded"):
        log(f"load_tensors: offloaded {SCRIPT['offloaded']} layers to GPU")
    if SCRIPT.get("signal_on_load"):
        log("srv    load_model: loading model")
        die_of(SCRIPT["signal_on_load"])
    failure = SCRIPT.get("exit_on_load") or SCRIPT.get("exit_on_ctx", {}).get(str(CTX))
    if failure:
        log(FAILURES[failure])
        if failure == "port_taken":
            log("srv           main: exiting due to HTTP server error")
        sys.exit(1)
    try:
        server = ThreadingHTTPServer((HOST, PORT), Handler)
    except OSError:
        log(FAILURES["port_taken"])
        log("srv           main: exiting due to HTTP server error")
        sys.exit(1)
    server.daemon_threads = True

    def announce():
        if SCRIPT.get("never_ready"):
            return
        time.sleep(LOAD_S)
        log("srv    load_model: model loaded")
        log(f"main: server is listening on http://{HOST}:{PORT}")

    threading.Thread(target=announce, daemon=True).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
