#!/usr/bin/env bash
# `tide calibrate` and the interference benchmark on the device machine, in one call
# (docs/cli.md "tide calibrate", docs/interference.md).
#   here:   scripts/stage-deps.sh            (once: GoogleTest and headers into .deps/)
#   device: run(command="bash scripts/device/calibrate.sh", carry=[".deps"])
# Writes under $OUT (or /tmp/tide-calibrate-out):
#   calibration_h200.json   the calibration file (tide solve --calibration, tide simulate --cost-model)
#   calibration_h200.txt    tide calibrate's table
#   solve_h200.txt          tide solve --calibration on the paper's 8 x 8, 32 MiB point
#   interference_h200.json  every victim x load measurement with Eq. 4 beside it
#   interference_h200.md    the same as a markdown table
#   interference_h200.png   slowdown vs CTA count (Fig. 4)
#   summary.md              what ran, and the short summary printed last
#   logs.tgz                build and run logs
# STEPS (default "build calibrate interference plot") picks steps; QUICK=1 runs the quick sizes.
# The interference step alone: STEPS="build interference plot" (builds only its benchmark;
# about 1-2 min of build plus at most ~150 s of benchmark, INTERFERENCE_BUDGET_S=140).
set -uo pipefail
NAME=calibrate DEFAULT_STEPS="build calibrate interference plot" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build-calibrate}
finish() { pack_logs; }

nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1
note "## calibrate.sh on $(hostname) $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv,noheader 2>&1 | head -1)"

if has build; then
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_CUDA=ON \
       -DTIDE_BUILD_TESTS=OFF -DTIDE_WERROR=OFF > "$LOG/build.log" 2>&1; then
    note "CONFIGURE FAILED $(stamp)"; tail -40 "$LOG/build.log"; finish; exit 1
  fi
  # Only what the chosen steps run: `tide` for calibrate, the benchmark for interference.
  targets=""
  has calibrate && targets="tide"
  has interference && targets="$targets tide_interference_bench"
  if ! cmake --build "$BUILD" --target $targets -j 16 >> "$LOG/build.log" 2>&1; then
    note "BUILD FAILED $(stamp)"; grep -E "error|Error" "$LOG/build.log" | head -30; finish; exit 1
  fi
  note "build ok $(stamp)"
fi
TIDE="$BUILD/src/cli/tide"
BENCH="$BUILD/bench/interference/tide_interference_bench"

if has calibrate; then
  timeout 180 "$TIDE" calibrate $QUICK_FLAG --json "$OUT/calibration_h200.json" \
    > "$OUT/calibration_h200.txt" 2> "$LOG/calibrate.log"
  note "calibrate rc=$? $(stamp)"
  tail -3 "$LOG/calibrate.log" | tee -a "$summary"
  "$TIDE" solve --calibration "$OUT/calibration_h200.json" --nodes 8 --gpus-per-node 8 \
    --shard-bytes 33554432 > "$OUT/solve_h200.txt" 2>&1
  note "solve --calibration rc=$?"
  "$TIDE" simulate reduce-scatter --nodes 8 --gpus-per-node 8 --model llama3.1-70b --timing-only \
    --cost-model "$OUT/calibration_h200.json" --json > "$LOG/simulate.json" 2>&1
  note "simulate --cost-model rc=$? predicted_ms=$(python3 -c "import json;print(json.load(open('$LOG/simulate.json'))['predicted_ms'])" 2>/dev/null)"
fi

if has interference; then
  # The benchmark stops adding rows at --budget-s, ends itself (rc 3, its watchdog) at
  # --hard-limit-s or when one stage overruns, and rewrites its JSON and markdown after every
  # row, so even a failure leaves results; line-buffered log. INTERFERENCE_ROWS (e.g.
  # "level1,spin") and INTERFERENCE_MAX_ROWS limit the rows. The outer timeout is a last resort.
  ROW_FLAGS=""
  [ -n "${INTERFERENCE_ROWS:-}" ] && ROW_FLAGS="$ROW_FLAGS --rows $INTERFERENCE_ROWS"
  [ -n "${INTERFERENCE_MAX_ROWS:-}" ] && ROW_FLAGS="$ROW_FLAGS --max-rows $INTERFERENCE_MAX_ROWS"
  "$BENCH" --self-check > "$LOG/interference.log" 2>&1
  timeout -k 5 150 "$BENCH" $QUICK_FLAG $ROW_FLAGS --budget-s "${INTERFERENCE_BUDGET_S:-90}" \
    --hard-limit-s "${INTERFERENCE_HARD_LIMIT_S:-115}" \
    --json "$OUT/interference_h200.json" --md "$OUT/interference_h200.md" \
    >> "$LOG/interference.log" 2>&1
  note "interference rc=$? $(stamp)"
  cp "$LOG/interference.log" "$OUT/interference.log"
  grep -E "^(self-check|GPU|GEMM for|WARNING|warm-up|isolated|row [0-9]|WATCHDOG|second wave|Complete|tide_interference_bench:)" \
    "$LOG/interference.log" | tee -a "$summary"
fi

if has plot && [ -f "$OUT/interference_h200.json" ]; then
  python3 bench/interference/plot_interference.py "$OUT/interference_h200.json" \
    "$OUT/interference_h200.png" >> "$LOG/plot.log" 2>&1
  note "plot rc=$? $(stamp)"
fi

note ""
note "### summary $(stamp)"
if [ -f "$OUT/calibration_h200.txt" ]; then cat "$OUT/calibration_h200.txt" | tee -a "$summary"; fi
if [ -f "$OUT/solve_h200.txt" ]; then head -6 "$OUT/solve_h200.txt" | tee -a "$summary"; fi
if [ -f "$OUT/interference_h200.md" ]; then
  head -3 "$OUT/interference_h200.md" | tee -a "$summary"
  grep -E "^\| (victim|---|probe|gemm)" "$OUT/interference_h200.md" | tee -a "$summary"
  sed -n '/^## First spin-load/,$p' "$OUT/interference_h200.md" | tee -a "$summary"
fi
finish
