#!/usr/bin/env bash
# The README's test command: installs dependencies, builds, and runs every test: the C++
# tests (ctest), then the Python package's (pip install ., then pytest: the FSDP2 parity
# suite on CPU with gloo). GPU tests skip with a message where no GPU is present; the last
# line says how many did.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh "$@"
build_dir="${TIDE_BUILD_DIR:-build}"
mkdir -p build/logs
ctest --test-dir "$build_dir" --output-on-failure -j "$(nproc)" | tee build/logs/ctest.log

python=$(scripts/install-package.sh | tail -1)
status=0
"$python" -m pytest tests/python -q -rs -p no:cacheprovider | tee build/logs/pytest.log ||
  status=$?

# ctest marks a GTEST_SKIP as "(Skipped)"; pytest -rs lists its skips with their reasons.
cpp_skips=$(grep -c '(Skipped)' build/logs/ctest.log || true)
python_skips=$(grep '^SKIPPED' build/logs/pytest.log | grep -i 'gpu' |
  sed -n 's/^SKIPPED \[\([0-9]*\)\].*/\1/p' | awk '{s += $1} END {print s + 0}')
echo "$((cpp_skips + python_skips)) tests skipped for want of a GPU"
exit "$status"
