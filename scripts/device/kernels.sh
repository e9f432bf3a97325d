#!/usr/bin/env bash
# Builds, tests, sanitizes and benchmarks TIDE's GPU kernels on the device machine, in one call.
#   here:   scripts/stage-deps.sh            (once: GoogleTest and headers into .deps/)
#   device: run(command="bash scripts/device/kernels.sh", carry=[".deps"])
# STEPS (default "build tests bench sanitize sass") picks steps. Writes under $OUT (or
# /tmp/tide-kernels-out): summary.md (short), kernels_h200.json, sum_vs_ctas.png, logs.tgz.
set -uo pipefail
NAME=kernels DEFAULT_STEPS="build tests bench probe sanitize sass" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build}

nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu --format=csv >> "$LOG/nvidia-smi.txt" 2>&1
note "## kernels.sh on $(hostname) $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"

if has build; then
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$LOG/build.log" 2>&1; then
    note "CONFIGURE FAILED $(stamp)"; tail -40 "$LOG/build.log"
    pack_logs; exit 1
  fi
  if ! cmake --build "$BUILD" --target tide_kernels_tests tide_kernels_bench tide_copy_probe -j 16 >> "$LOG/build.log" 2>&1; then
    note "BUILD FAILED $(stamp)"; tail -40 "$LOG/build.log"
    pack_logs; exit 1
  fi
  grep -E "Compiling entry|registers|stack frame" "$LOG/build.log" > "$LOG/resource-usage.txt" || true
  cp "$LOG/resource-usage.txt" "$OUT/resource-usage.txt"
  note "build ok $(stamp)"
fi
TESTS="$BUILD/tests/kernels/tide_kernels_tests"
BENCH="$BUILD/bench/kernels/tide_kernels_bench"

if has tests; then
  timeout 240 "$TESTS" --gtest_brief=1 > "$LOG/tests.log" 2>&1
  rc=$?
  note "tests rc=$rc $(stamp): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOG/tests.log" | tr '\n' ' ')"
  grep -E "FAILED|Failure|error|differ" "$LOG/tests.log" | head -20 | tee -a "$summary"
fi

if has bench; then
  timeout 300 "$BENCH" --json "$OUT/kernels_h200.json" ${BENCH_ARGS:-} > "$LOG/bench.log" 2>&1
  rc=$?
  note "bench rc=$rc $(stamp)"
  grep -E "^  warp-direct" "$LOG/bench.log" | tee -a "$summary"
  sed -n '/^| metric/,$p' "$LOG/bench.log" | tee -a "$summary"
  cp "$LOG/bench.log" "$OUT/bench.log" 2>/dev/null
  python3 scripts/device/plot_kernels.py "$OUT/kernels_h200.json" "$OUT/sum_vs_ctas.png" >> "$LOG/bench.log" 2>&1 || true
fi

if has widebench; then
  # The Level 1 CTA table on a 4x wider block (670 MB logical per call), so that full-grid calls
  # last ~0.2 ms and launch overhead weighs less.
  timeout 200 "$BENCH" --sum-only --width 4194304 --json "$OUT/kernels_h200_wide.json" > "$LOG/bench-wide.log" 2>&1
  note "widebench rc=$? $(stamp)"
  tail -12 "$LOG/bench-wide.log" | tee -a "$summary"
  cp "$LOG/bench-wide.log" "$OUT/bench-wide.log"
fi

if has ncu; then
  # Counters for one 4-CTA launch of each Level 1 kernel (clocks left alone).
  timeout 240 ncu --clock-control none -k regex:level1_sum --launch-skip 26 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    "$BENCH" --sum-only --width 1048576 --json /tmp/ncu.json > "$LOG/ncu-pipeline.txt" 2>&1
  note "ncu pipeline rc=$? $(stamp)"
  timeout 240 ncu --clock-control none -k regex:level1_sum_direct --launch-skip 26 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
    "$BENCH" --sum-only --width 1048576 --json /tmp/ncu.json > "$LOG/ncu-warp-direct.txt" 2>&1
  note "ncu warp-direct rc=$? $(stamp)"
  cat "$LOG/ncu-pipeline.txt" "$LOG/ncu-warp-direct.txt" > "$OUT/ncu.txt"
fi

if has probe; then
  timeout 120 "$BUILD/bench/kernels/tide_copy_probe" > "$LOG/probe.log" 2>&1
  note "probe rc=$? $(stamp)"
  sed -n '/^timeline:/,$p' "$LOG/probe.log" | tee -a "$summary"
  cp "$LOG/probe.log" "$OUT/probe.log"
fi

if has sanitize; then
  for tool in memcheck racecheck synccheck; do
    extra=""
    [ "$tool" = memcheck ] && extra="--leak-check full"
    TIDE_KERNEL_TEST_QUICK=1 timeout ${SAN_TIMEOUT:-150} compute-sanitizer --tool $tool $extra --error-exitcode 17 \
      "$TESTS" --gtest_brief=1 ${SAN_FILTER:+--gtest_filter=$SAN_FILTER} > "$LOG/$tool.log" 2>&1
    rc=$?
    note "compute-sanitizer $tool rc=$rc $(stamp): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|LEAK SUMMARY' "$LOG/$tool.log" | tr '\n' ' ') $(grep -E '^\[  (PASSED|FAILED) ' "$LOG/$tool.log" | tr '\n' ' ')"
  done
fi

if has sass; then
  lib="$BUILD/src/kernels/libtide_kernels.a"
  cuobjdump -sass "$lib" > "$LOG/sass.txt" 2>&1 || true
  cuobjdump -res-usage "$lib" > "$LOG/res-usage.txt" 2>&1 || true
  # Instruction mix of the bf16 Level 1 kernel (no accumulate).
  awk '/Function : .*level1_sum_kernelItLb0E/{f=1} f&&/Function : /&&!/level1_sum_kernelItLb0E/{f=0} f' "$LOG/sass.txt" \
    | grep -oE '^\s+/\*[0-9a-f]+\*/\s+[A-Z][A-Z0-9.]*' | awk '{print $2}' | sed 's/\..*//' | sort | uniq -c | sort -rn > "$LOG/sass-mix-level1-bf16.txt"
  note "sass: $(head -12 "$LOG/sass-mix-level1-bf16.txt" | tr -s ' ' | tr '\n' ',')"
  # The warp-direct fast loop: instructions per output of each specialisation.
  python3 bench/kernels/sass_hot_loop.py "$LOG/sass.txt" > "$LOG/sass-hot-loop.txt" 2>&1 || true
  grep -E "direct_kernelItLb0ELi7" "$LOG/sass-hot-loop.txt" | sed -E 's/.*(direct_kernel[^ ]*)E: /\1: /' | tee -a "$summary"
fi

note "done $(stamp)"
pack_logs
