#!/usr/bin/env bash
# TIDE-AG with fp8 (1-byte) items against bf16 on the runtime's host backend (CPU processes,
# POSIX shared memory), same shapes: bench/host_ag/host_ag_bench.cpp. Writes bench.txt,
# bench.json and machine.txt beside this script. Usage: run.sh [BUILD_DIR] (default build).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../../.." && pwd)"
build="${1:-$root/build}"
cmake --build "$build" -j2 --target tide_host_ag_bench
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD)"
  echo "nproc: $(nproc)"
  grep -m1 "model name" /proc/cpuinfo || true
  grep MemTotal /proc/meminfo || true
  echo "load before: $(cat /proc/loadavg)"
} > "$here/machine.txt"
"$build/bench/host_ag/tide_host_ag_bench" --out "$here/bench.json" --repeats 30 --warmup 3 \
  --elems 1048576 --params 16 --seed 1 --dtypes bf16,fp8,u8 | tee "$here/bench.txt"
echo "load after: $(cat /proc/loadavg)" >> "$here/machine.txt"
