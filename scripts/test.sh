#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every test. GPU tests
# skip with a message where no GPU is present.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh "$@"
ctest --test-dir "${TIDE_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)"
