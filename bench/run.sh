#!/usr/bin/env bash
# bench/run.sh: the benchmark harness of llm-warden, in one command.
#
#   ./bench/run.sh [--model M] [--rounds N] [other warden-bench options]
#
# Builds llm-warden and warden-bench in release mode (honours
# CARGO_TARGET_DIR), makes sure llama-server and the models are there
# (./build-llama.sh, seconds when cached), then runs warden-bench: llama-server
# direct against the warden, interleaved, on the same binary, model, prompt,
# seed and max_tokens. It prints a markdown table and, as its last line:
#
#   decode_ratio=<x> ttft_added_ms=<x> cold_ratio=<x> respawn_s=<x> rss_rest_mib=<x> rss_growth_mib=<x> status_p99_ms=<x>
#
# and writes bench/results/latest.{md,csv,svg} plus timestamped copies.
# `--help` lists every option (phases, turns, status requests, ...).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

./build-llama.sh >&2
echo "==> Building llm-warden and warden-bench (release)" >&2
cargo build --release --quiet -p llm-warden -p warden-bench >&2
target="${CARGO_TARGET_DIR:-$root/target}"
exec "$target/release/warden-bench" --warden-bin "$target/release/llm-warden" "$@"
