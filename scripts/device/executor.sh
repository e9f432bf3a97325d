#!/usr/bin/env bash
# Builds and runs the CUDA executor's tests (virtual fabric + CUDA executor, bitwise against
# the CPU reference executor) on the device machine, in one call.
#   here:   scripts/stage-deps.sh            (once: GoogleTest and headers into .deps/)
#   device: run(command="bash scripts/device/executor.sh", carry=[".deps"])
# STEPS (default "build tests sanitize bench") picks steps. Writes under $OUT (or
# /tmp/tide-executor-out): summary.md (short), tests.log, sanitize.log, bench.txt (table),
# bench.json (tide_executor_bench), logs.tgz.
set -uo pipefail
NAME=executor DEFAULT_STEPS="build tests sanitize bench" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build-executor}
finish() { pack_logs; exit "$1"; }

nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1
note "## executor.sh on $(hostname) $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1)"
note "(virtual ranks share one GPU: timings between them are not NVLink timings)"

if has build; then
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=OFF \
       > "$LOG/build.log" 2>&1; then
    note "CONFIGURE FAILED $(stamp)"; tail -40 "$LOG/build.log" | tee -a "$summary"; finish 1
  fi
  if ! cmake --build "$BUILD" --target tide_cuda_executor_tests tide_executor_bench -j 16 >> "$LOG/build.log" 2>&1; then
    note "BUILD FAILED $(stamp)"; grep -E "error|FAILED" "$LOG/build.log" | head -40 | tee -a "$summary"
    finish 1
  fi
  note "build ok $(stamp)"
fi
TESTS="$BUILD/tests/exec/tide_cuda_executor_tests"

rc_all=0
if has tests; then
  timeout 420 "$TESTS" > "$LOG/tests.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  [[ $rc -eq 124 ]] && note "TESTS TIMED OUT (420 s): a hang the executor's own timeout did not catch"
  note "tests rc=$rc $(stamp): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOG/tests.log" | tr '\n' ' ')"
  grep -E "^\[       OK|^\[  FAILED|Failure|differs|error|timeout" "$LOG/tests.log" | head -40 | tee -a "$summary"
  cp "$LOG/tests.log" "$OUT/tests.log"
fi

if has sanitize; then
  # Memory errors in the mapping (pointers, pitches, peer arenas) on the small cases.
  if command -v compute-sanitizer > /dev/null; then
    timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 "$TESTS" \
      --gtest_filter='VirtualFabric.*:CudaExecutor.Handmade*:CudaExecutor.RsFp32*' \
      > "$LOG/sanitize.log" 2>&1
    rc=$?
    [[ $rc -ne 0 ]] && rc_all=$rc
    note "memcheck rc=$rc $(stamp): $(grep -E 'ERROR SUMMARY' "$LOG/sanitize.log" | tail -1)"
    cp "$LOG/sanitize.log" "$OUT/sanitize.log"
  else
    note "memcheck skipped: compute-sanitizer not found"
  fi
fi

if has bench; then
  # Enqueue latency, descriptors vs the core, RS SM time vs a persistent 13-16 CTA kernel,
  # arena bytes vs the memory model (bench/executor/executor_bench.cpp). Virtual ranks on one
  # GPU: not NVLink timings.
  timeout 240 "$BUILD/bench/executor/tide_executor_bench" --out "$OUT/bench.json" --repeats 50 \
    > "$OUT/bench.txt" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "bench rc=$rc $(stamp) (table: bench.txt; json: bench.json)"
  grep -E "FAILED|NO " "$OUT/bench.txt" | head -20 | tee -a "$summary"
fi

note "done rc=$rc_all $(stamp)"
finish "$rc_all"
