#!/usr/bin/env bash
# test.sh: the whole test suite in one command. Sets up what the tests need
# through build-llama.sh (cached after the first run: llama-server, the two
# default models, the MLX environment), checks formatting and clippy (both
# must be clean), then runs every test: law tables,
# property tests, scripted actor tests with a fake child, and tests against
# the real llama-server and mlx_vlm.server with the real models, and the
# CORS and dashboard tests in a headless Chromium (installed from Debian
# when missing), and the RPC worker tests (workers in memory cgroups and a
# network namespace, as root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

./build-llama.sh
./build-llama.sh mlx --no-models
./build-llama.sh clients --no-models

# tests/real/cors.rs and tests/real/ui.rs drive a real browser (Chromium, and
# chromedriver for the dashboard); they fail without one.
have_chromium() {
  command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
    || command -v google-chrome >/dev/null 2>&1
}
if ! have_chromium || ! command -v chromedriver >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "==> Installing chromium and chromium-driver from Debian (for the browser tests)" >&2
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null; } \
      || echo "==> apt-get could not install chromium: the browser tests will fail" >&2
  else
    echo "==> No Chromium or chromedriver found: the browser tests will fail. Install them with" >&2
    echo "    sudo apt-get install chromium chromium-driver   (or your distribution's packages)" >&2
  fi
fi

# tests/real/rpc_netns.rs puts an RPC worker in a network namespace (ip netns,
# a veth pair): it needs iproute2 and root, like the cgroup tests.
if ! command -v ip >/dev/null 2>&1 && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "==> Installing iproute2 from Debian (for the network-namespace test)" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null; } \
    || echo "==> apt-get could not install iproute2: the network-namespace test will fail" >&2
fi

# The real tests (llama-server, the models, the MLX and client environments,
# cgroups, a network namespace, Chromium) are #[ignore]d with what they
# need, so a plain `cargo test` lists them as ignored instead of passing
# them by skipping; here they all run, and a missing prerequisite fails.
# The GPU tests (tests/gpu_proof.rs) are not built here at all: they need
# the `gpu-tests` feature, which only scripts/gpu-proof.sh turns on.
# Arguments go to cargo as before, those after a `--` to the test binaries:
# `./test.sh kv_save` runs the tests whose name holds `kv_save`,
# `./test.sh kv_save -- --test-threads=1` those one at a time.
cargo_args=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  cargo_args+=("$1")
  shift
done
[ $# -gt 0 ] && shift
# The code's own checks first: formatting and clippy over the workspace
# (the library, the binary, the tests and the bench), failing on any warning
# (the lints are in Cargo.toml's [workspace.lints]).
echo "==> Checking formatting (cargo fmt) and lints (cargo clippy)" >&2
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# The library as an embedder builds it (no `testing` feature, so the
# internals are crate-private): no dead code hidden by the test build, and
# every type its public face carries can be named (`unnameable_types`).
cargo clippy -p llm-warden --lib --quiet -- -D warnings
# Windows and macOS, type-checked here (no GPU, no Mac, no Windows to run on).
./scripts/cross-check.sh
# Three test binaries by kind (tests/formats, tests/fake, tests/real; see
# docs/contributing.md) beside the unit tests. The real one runs its tests
# one at a time: each drives llama-server flat out on these cores, and its
# bounds are sized for a machine no other test shares (before the binaries
# were merged, tests of different files never overlapped).
threads=(--test-threads=1)
for a in "$@"; do case "$a" in --test-threads*) threads=() ;; esac; done
echo "==> Running the test suite: the unit tests, formats and the fake child" >&2
cargo test --lib --bins --examples --test formats --test fake ${cargo_args[@]+"${cargo_args[@]}"} \
  -- --include-ignored "$@"
echo "==> Running the test suite: the real llama-server, the models and the OS" >&2
cargo test --test real ${cargo_args[@]+"${cargo_args[@]}"} -- --include-ignored ${threads[@]+"${threads[@]}"} "$@"
