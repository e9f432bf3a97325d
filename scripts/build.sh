#!/usr/bin/env bash
# Configures and builds TIDE into build/ (or $TIDE_BUILD_DIR), after installing the
# dependencies. Extra arguments go to CMake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
build_dir="${TIDE_BUILD_DIR:-build}"
launcher=()
if command -v ccache >/dev/null; then  # the package build (pip install .) reuses these objects
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="${TIDE_BUILD_TYPE:-RelWithDebInfo}" "${launcher[@]}" \
  "$@" >/dev/null
cmake --build "$build_dir" -j "$(nproc)"
