#!/usr/bin/env bash
# no-amx.sh FILE...: fails when a binary or object holds an Intel AMX tile
# instruction. llama.cpp b10883 built with -march=native on a CPU that
# advertises AMX compiles ggml's AMX kernels in, and they die of SIGILL
# (`trap invalid opcode` at tilezero) on such machines (FACTS.md); the cpu
# and cuda flavours compile AMX out, and build-llama.sh proves it with this
# check before installing a build (the test suite runs it too).
#
# Exit 0: none found. 1: found (the first lines are printed). 2: objdump is missing.
set -euo pipefail
command -v objdump >/dev/null 2>&1 || { echo "no-amx.sh: objdump (binutils) is needed" >&2; exit 2; }
amx='(tilezero|tileloadd|tileloaddt1|tilestored|tilerelease|ldtilecfg|sttilecfg|tdpbssd|tdpbsud|tdpbusd|tdpbuud|tdpbf16ps|tdpfp16ps|tcmmimfp16ps|tcmmrlfp16ps)'
status=0
for f in "$@"; do
  hits=$(objdump -d --no-show-raw-insn "$f" | grep -E "^[[:space:]]*[0-9a-f]+:[[:space:]]+$amx([[:space:]]|$)" || true)
  if [ -n "$hits" ]; then
    echo "no-amx.sh: $f holds $(printf '%s\n' "$hits" | wc -l) AMX tile instructions, e.g.:" >&2
    printf '%s\n' "$hits" | head -3 >&2
    status=1
  fi
done
exit $status
