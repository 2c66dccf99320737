#!/usr/bin/env bash
# test.sh: the whole test suite in one command. Sets up what the tests need
# through build-llama.sh (cached after the first run: llama-server, the two
# default models, the MLX environment), then runs every test: law tables,
# property tests, scripted actor tests with a fake child, and tests against
# the real llama-server and mlx_vlm.server with the real models.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

./build-llama.sh
./build-llama.sh mlx --no-models
./build-llama.sh clients --no-models
export WARDEN_REQUIRE_REAL=1
echo "==> Running the test suite" >&2
cargo test --all-targets "$@"
