#!/usr/bin/env bash
# run.sh: the main job in one command. Builds (or reuses) llama-server and the
# default models, builds the warden, starts `llm-warden serve` with SmolLM2,
# asks it one question, then keeps serving until Ctrl-C.
#
#   ./run.sh            serve on http://127.0.0.1:27182 (first free of 27182-27199)
#   ./run.sh --once     answer the question, then stop the server and exit
#   ./run.sh --model ID|PATH, --port N, ...   passed to `llm-warden serve`
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

once=0
serve_args=()
for a in "$@"; do
  if [ "$a" = "--once" ]; then once=1; else serve_args+=("$a"); fi
done

./build-llama.sh
echo "==> Building llm-warden (release)" >&2
cargo build --release --quiet
bin="${CARGO_TARGET_DIR:-target}/release/llm-warden"

"$bin" serve --preload "${serve_args[@]}" &
server=$!
stop() { kill -TERM "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }
trap stop EXIT
trap 'exit 130' INT TERM

for _ in $(seq 1 300); do
  kill -0 "$server" 2>/dev/null || { echo "run.sh: the server exited" >&2; exit 1; }
  "$bin" status >/dev/null 2>&1 && break
  sleep 0.2
done

# Greedy (temperature 0), so the answer is the same on every machine: with
# these words SmolLM2-135M says "The capital of France is Paris." (the bare
# question sends it off into French at temperature 0, and sampling at the
# server's default temperature makes it wander).
question="What is the capital of France? Answer in one sentence."
echo "==> Asking: $question" >&2
"$bin" chat --temperature 0 --max-tokens 32 "$question"

if [ "$once" = 1 ]; then exit 0; fi
echo "==> Serving (OpenAI base URL: the address above, plus /v1). Ctrl-C to stop." >&2
wait "$server"
