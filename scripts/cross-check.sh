#!/usr/bin/env bash
# scripts/cross-check.sh: type-checks (with clippy, warnings denied) the
# library and the binary for the two platforms this machine cannot run:
# Windows (x86_64-pc-windows-msvc: the CPU and CUDA engines) and macOS
# (aarch64-apple-darwin: MLX). Nothing is linked or run; the platform code
# compiles against its own std and crates (windows-sys, the macOS sysctls).
#
# rustup's toolchain has no std for those targets and this machine cannot
# download one, so the check uses Debian's rustc-web 1.96 with its std
# sources (rust-web-src) and clippy (rust-web-clippy), building std from
# source (-Zbuild-std; RUSTC_BOOTSTRAP lets a stable compiler take the
# flag). They are installed from Debian when missing (as root). The build
# directory is cached outside the clone: cold, the two std builds take about
# 5 minutes on 2 cores; warm, both checks about 30 seconds.
#
# WARDEN_SKIP_CROSS_CHECK=1 skips it (a machine without Debian's packages).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ "${WARDEN_SKIP_CROSS_CHECK:-0}" = "1" ]; then
  echo "==> Cross-platform check skipped (WARDEN_SKIP_CROSS_CHECK=1)" >&2
  exit 0
fi

need=()
[ -x /usr/bin/rustc ] || need+=(rustc-web)
[ -x /usr/bin/cargo ] || need+=(cargo-web)
[ -d /usr/lib/rustlib/src/rust/library ] || need+=(rust-web-src)
[ -x /usr/bin/cargo-clippy ] || need+=(rust-web-clippy)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> Installing ${need[*]} from Debian (for the Windows and macOS type-check)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "==> The Windows and macOS type-check needs Debian's ${need[*]}:" >&2
    echo "    sudo apt-get install ${need[*]}   (or WARDEN_SKIP_CROSS_CHECK=1 to skip it)" >&2
    exit 1
  fi
fi

cache="${XDG_CACHE_HOME:-$HOME/.cache}/llm-warden/cargo-cross"
for target in x86_64-pc-windows-msvc aarch64-apple-darwin; do
  echo "==> Type-checking for $target (clippy, warnings denied)" >&2
  # Debian's toolchain first: its cargo, rustc, clippy-driver and std sources.
  PATH=/usr/bin:/bin RUSTC=/usr/bin/rustc RUSTC_BOOTSTRAP=1 CARGO_TARGET_DIR="$cache" \
    /usr/bin/cargo-clippy clippy --quiet -Zbuild-std=std,panic_abort --target "$target" --lib --bins \
    -- -D warnings
done
