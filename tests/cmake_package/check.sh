#!/usr/bin/env bash
# `cmake --install` of a build into a fresh prefix, then a consumer project that uses
# find_package(tide) and links tide::tide_core, built and run. Usage: check.sh BUILD_DIR
set -euo pipefail
build=$(cd "$1" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
test -x "$work/prefix/bin/tide"
test -f "$work/prefix/include/tide/core/topology.hpp"
cmake -S "$here" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/consumer" >/dev/null
"$work/consumer/consumer"
"$work/prefix/bin/tide" plan --model llama3.1-70b --nodes 2 --gpus-per-node 4 >/dev/null
echo "cmake package: installed, found and linked"
