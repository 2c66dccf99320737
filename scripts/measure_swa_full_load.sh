#!/usr/bin/env bash
# The load cost of --swa-full (law::kv_keep): llama-server alone on Gemma 3
# 270M at -c 32768, started until /health answers 200, with and without the
# flag, alternated; prints the time to ready and the child's VmRSS.
# usage: scripts/measure_swa_full_load.sh [PAIRS]   (after ./build-llama.sh)
set -euo pipefail
cache="${WARDEN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-warden}"
server="$(ls -d "$cache"/llama-cpp/*-cpu-*/bin/llama-server | head -1)"
model="$cache/models/gemma-3-270m-q4_k_m.gguf"
port=18999
for _ in $(seq "${1:-3}"); do
  for flag in "" "--swa-full"; do
    t0=$(date +%s%N)
    # shellcheck disable=SC2086
    "$server" -m "$model" -c 32768 $flag -np 1 --cache-ram 0 --host 127.0.0.1 --port $port >/dev/null 2>&1 &
    pid=$!
    until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do sleep 0.01; done
    t1=$(date +%s%N)
    rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
    echo "flag='${flag:-none}' ready_ms=$(((t1 - t0) / 1000000)) rss_kib=$rss"
    kill "$pid"
    wait "$pid" 2>/dev/null || true
  done
done
