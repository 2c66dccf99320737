#!/usr/bin/env bash
# setup-mlx.sh CACHE_DIR: the Python side of the MLX engine.
#
#   1. a venv at CACHE_DIR/mlx-venv-0.7.10 with mlx 0.32.4 (mlx[cpu] on Linux,
#      plain mlx on macOS), mlx-vlm 0.7.10 and the converter's packages
#      (gguf, tokenizers, numpy), every version pinned below;
#   2. the SmolLM2 GGUF at CACHE_DIR/models/SmolLM2-135M-Instruct.Q4_1.gguf
#      converted into CACHE_DIR/models/mlx/SmolLM2-135M-Instruct (a Hugging
#      Face style directory that mlx_vlm.server serves).
#
# Idempotent: each step writes a stamp file last and checks it first, so a
# second run with everything in place takes well under a second. An
# interrupted install resumes (pip skips what is already there).
# The last line on stdout is WARDEN_MLX_PYTHON=<the venv's python>; progress
# goes to stderr.
#
# Called by build-llama.sh mlx as: scripts/setup-mlx.sh "$cache"
set -euo pipefail

MLX_VERSION="0.32.4"
MLX_VLM_VERSION="0.7.10"
# The converter's own packages (scripts/gguf_to_mlx.py).
GGUF_VERSION="0.19.0"
TOKENIZERS_VERSION="0.23.3"
NUMPY_VERSION="2.4.6"
SAFETENSORS_VERSION="0.8.0"
# Everything else pip resolved for the set above on Linux x86-64 / CPython
# 3.11 (2026-11-29). Used as constraints: it pins a package only if it is
# installed, so platform-specific entries (mlx-cpu) are harmless elsewhere.
CONSTRAINTS="
annotated-doc==0.0.7 annotated-types==0.8.0 anyio==4.16.0 certifi==2026.10.19.post1
cffi==2.1.1 charset-normalizer==3.5.3 click==8.5.1 cryptography==50.0.2 datasets==5.2.0
dill==0.4.1 fastapi==0.165.0 filelock==4.3.1 fsspec==2026.9.0 h11==0.16.0 hf-xet==1.8.0
httpcore2==2.16.2 httpx2==2.16.2 huggingface_hub==2.4.0 idna==3.20 jinja2==3.1.6
llguidance==1.9.1 markdown-it-py==4.3.0 markupsafe==3.0.4 mdurl==0.1.2 miniaudio==1.71
mlx-audio==0.6.2 mlx-cpu==0.32.4 multiprocess==0.70.19 opencv-python==5.0.0.93
opentelemetry-api==1.45.2 packaging==26.4 pandas==3.1.1 pillow==13.0.0 pyarrow==26.0.1
pycparser==3.12 pydantic==2.14.4 pydantic_core==2.50.5 pygments==2.21.0
python-dateutil==4.0.0 python-multipart==0.0.34 pyyaml==6.0.4 regex==2026.11.19
requests==2.34.2 rich==15.0.0 scipy==1.17.1 sentencepiece==0.2.3 shellingham==1.5.4
sounddevice==0.5.6 starlette==1.10.0 tqdm==4.70.1 transformers==5.24.0 truststore==0.10.5
typer==0.29.2 typing-inspection==0.4.5 typing_extensions==4.16.0 tzdata==2026.6
urllib3==2.8.0 uvicorn==0.54.0 websockets==17.4 xxhash==4.1.0
"
SMOLLM_GGUF="SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM_MLX="SmolLM2-135M-Instruct"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'setup-mlx.sh: error: %s\n' "$*" >&2; exit 1; }

[ $# -eq 1 ] && [ -n "$1" ] || die "usage: setup-mlx.sh CACHE_DIR"
cache="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$cache/mlx-venv-$MLX_VLM_VERSION"
vpy="$venv/bin/python"

case "$(uname -s)" in
  Linux) mlx_spec="mlx[cpu]==$MLX_VERSION" ;;
  Darwin) mlx_spec="mlx==$MLX_VERSION" ;;
  *) die "MLX runs on Linux and macOS only (this is $(uname -s))" ;;
esac
pkgs=("$mlx_spec" "mlx-vlm==$MLX_VLM_VERSION" "gguf==$GGUF_VERSION"
      "tokenizers==$TOKENIZERS_VERSION" "numpy==$NUMPY_VERSION"
      "safetensors==$SAFETENSORS_VERSION")
# The stamp records what was installed: a changed pin list reinstalls.
venv_stamp="$venv/.warden-complete"
venv_key="$(printf '%s\n' "${pkgs[@]}" $CONSTRAINTS | sort)"

find_python() {
  local p
  for p in python3.13 python3.12 python3.11 python3.10 python3; do
    command -v "$p" >/dev/null 2>&1 || continue
    "$p" -c 'import sys, venv; sys.exit(0 if (3, 10) <= sys.version_info[:2] < (3, 14) else 1)' \
      >/dev/null 2>&1 && { command -v "$p"; return; }
  done
  die "mlx-vlm $MLX_VLM_VERSION needs Python 3.10 to 3.13 with the venv module (apt: python3-venv)"
}

install_venv() {
  if [ -f "$venv_stamp" ] && [ "$(cat "$venv_stamp")" = "$venv_key" ] && [ -x "$vpy" ]; then
    say "MLX venv: cached at $venv"
    return
  fi
  local t0=$SECONDS
  rm -f "$venv_stamp"
  if [ ! -x "$vpy" ]; then
    local py; py="$(find_python)"
    say "Creating the MLX venv at $venv (with $("$py" --version 2>&1))"
    mkdir -p "$cache"
    "$py" -m venv "$venv" || die "could not create the venv at $venv"
  fi
  local cons="$venv/warden-constraints.txt"
  printf '%s\n' $CONSTRAINTS >"$cons"
  say "Installing ${pkgs[*]} and their dependencies (~65 wheels, ~1 GB, a minute or two)"
  "$vpy" -m pip install --disable-pip-version-check --progress-bar off \
    -c "$cons" "${pkgs[@]}" >&2 \
    || die "pip could not install the MLX packages (is PyPI reachable?); rerun to resume"
  say "Checking the install"
  "$vpy" -c 'import mlx.core as mx, mlx_vlm.server, gguf, tokenizers, numpy, safetensors; print("mlx", mx.__version__, "default device", mx.default_device())' >&2 \
    || die "the MLX venv does not import (see above); delete $venv and rerun"
  printf '%s\n' "$venv_key" >"$venv_stamp"
  say "MLX venv ready in $((SECONDS - t0)) s ($(du -sh "$venv" 2>/dev/null | cut -f1))"
}

convert_smollm() {
  local gguf="$cache/models/$SMOLLM_GGUF"
  local out="$cache/models/mlx/$SMOLLM_MLX"
  local stamp="$out/.warden-converted"
  if [ ! -s "$gguf" ]; then
    say "No $gguf yet: skipping the MLX conversion (fetch the models, then rerun)"
    return
  fi
  # Keyed by the converter's source and the GGUF's size, so a changed
  # converter or model converts again.
  local key
  key="$("$vpy" -c 'import hashlib, os, sys; print(hashlib.sha256(open(sys.argv[1], "rb").read()).hexdigest()[:16], os.path.getsize(sys.argv[2]))' \
    "$here/gguf_to_mlx.py" "$gguf")"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then
    say "MLX model: cached at $out"
    return
  fi
  local t0=$SECONDS
  say "Converting $SMOLLM_GGUF to an MLX (Hugging Face style) directory"
  local tmp="$out.tmp.$$"
  rm -rf "$tmp"
  mkdir -p "$(dirname "$out")"
  "$vpy" "$here/gguf_to_mlx.py" "$gguf" "$tmp" >&2 || { rm -rf "$tmp"; die "the GGUF -> MLX conversion failed"; }
  printf '%s\n' "$key" >"$tmp/.warden-converted"
  rm -rf "$out"
  mv "$tmp" "$out"
  say "MLX model ready at $out in $((SECONDS - t0)) s"
}

install_venv
convert_smollm
if [ "$(uname -s)" = Linux ] && ! compgen -G "$venv/lib/python3*/site-packages/opencv_python.libs/libopenblas*.so*" >/dev/null; then
  say "note: no OpenBLAS from opencv-python in the venv; the MLX CPU path will be ~10x slower"
fi
echo "WARDEN_MLX_PYTHON=$vpy"
