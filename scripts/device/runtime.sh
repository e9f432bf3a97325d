#!/usr/bin/env bash
# The runtime and the Python package on the device machine, in one call.
#   here:   scripts/stage-deps.sh            (once: GoogleTest and headers into .deps/)
#   device: run(command="bash scripts/device/runtime.sh", carry=[".deps"])
# STEPS (default "build gputests nccl ring package graphs fsdp demo") picks steps:
#   build     the C++ tree with CUDA and NCCL (tests, tide, the module)
#   gputests  every GPU test binary (kernels, executor, sequence runner, golden vectors);
#             GPUTESTS=<regex> keeps the binaries whose names match
#   nccl      tide check-runtime --backend nccl on every GPU of the machine, bitwise
#   ring      the same with the communicator arena's ring slots and shards per call (--ring
#             --staged-shards), both modes, with and without a cast (NOTE [communicator arena])
#   package   pip install . against the image's torch; import tide; the tide CLI
#   graphs    TIDE calls in a torch CUDA graph, nccl backend (tests/python/test_runtime_graph_gpu.py;
#             after package)
#   fsdp      the FSDP2 parity suite on GPUs (tests/python/test_fsdp_gpu.py)
#   demo      scripts/main.sh's demo on the GPUs (losses, peak memory, the arena; after package)
# Writes under $OUT: summary.md, nccl.json, nccl-stall.json, ring.json, fsdp.log,
# demo-summary.json, logs.tgz (gputests.log, package.log, graphs.log and the rest).
set -uo pipefail
NAME=runtime DEFAULT_STEPS="build gputests nccl ring package graphs fsdp demo" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build-runtime}
finish() { pack_logs; exit "$1"; }
export PYTHONUNBUFFERED=1

nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1
gpus=$(nvidia-smi -L | wc -l)
note "## runtime.sh on $(hostname) $(date -u +%FT%TZ): $gpus x $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
note "torch $(python3 -c 'import torch; print(torch.__version__, torch.cuda.nccl.version())' 2>&1)"

rc_all=0
if has build; then
  # g++ 13 there warns falsely at -O3 (stringop-overflow, array-bounds): no -Werror there.
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_CUDA=ON -DTIDE_WERROR=OFF "${COMPILERS[@]}" \
       > "$LOG/build.log" 2>&1; then
    note "CONFIGURE FAILED $(stamp)"; tail -40 "$LOG/build.log" | tee -a "$summary"; finish 1
  fi
  if ! cmake --build "$BUILD" -j 16 >> "$LOG/build.log" 2>&1; then
    note "BUILD FAILED $(stamp)"; grep -E "error|FAILED" "$LOG/build.log" | head -40 | tee -a "$summary"
    finish 1
  fi
  note "build ok $(stamp)"
fi

if has gputests; then
  : > "$LOG/gputests.log"
  for t in $(find "$BUILD/tests" -type f -executable -name 'tide_*tests' | sort); do
    case "$t" in *kernel*|*cuda*|*sequence*|*golden*|*fabric*) ;; *) continue ;; esac
    [[ -n "${GPUTESTS:-}" && ! "$(basename "$t")" =~ ${GPUTESTS} ]] && continue
    timeout 300 "$t" > "$LOG/one-test.log" 2>&1
    rc=$?
    cat "$LOG/one-test.log" >> "$LOG/gputests.log"
    [[ $rc -ne 0 ]] && rc_all=$rc
    note "$(basename "$t") rc=$rc $(stamp): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOG/one-test.log" | tr '\n' ' ')"
  done
  grep -E "^\[  FAILED|Failure" "$LOG/gputests.log" | head -30 | tee -a "$summary"
fi

if has nccl; then
  tide="$BUILD/src/cli/tide"
  for mode in in-place slot-reuse; do
    timeout 300 "$tide" check-runtime --backend nccl -M 1 -L "$gpus" \
      --groups "37x5,16,1000x33;20x7,9x11;4096x1024,4096" --calls 18 --seed 11 --mode "$mode" \
      --timeout-s 60 --json > "$LOG/nccl-$mode.json" 2> "$LOG/nccl-$mode.err"
    rc=$?
    [[ $rc -ne 0 ]] && rc_all=$rc
    note "check-runtime nccl 1x$gpus $mode rc=$rc $(stamp): $(python3 -c "import json,sys; d=json.load(open('$LOG/nccl-$mode.json')); print('passed' if d['passed'] else 'FAILED', d['mismatches'], 'mismatches;', [r.get('error','') for r in d['per_rank'] if 'error' in r])" 2>&1) $(head -c 300 "$LOG/nccl-$mode.err")"
  done
  cp "$LOG/nccl-in-place.json" "$OUT/nccl.json" 2>/dev/null
  # The watchdog (NOTE [runtime] 5): rank 0's calls stall from call 4 on; every rank must
  # exit 1 within the timeout (3 s) plus set-up, the stalled call named, nothing left behind.
  start=$(date +%s)
  timeout 120 "$tide" check-runtime --backend nccl -M 1 -L "$gpus" --groups "37x5,16;20x7" \
    --calls 12 --seed 3 --stall-rank 0 --stall-at-call 4 --timeout-s 3 --json \
    > "$LOG/nccl-stall.json" 2> "$LOG/nccl-stall.err"
  rc=$?
  took=$(( $(date +%s) - start ))
  left=$(pgrep -f "tide check-runtime" | wc -l)
  if [[ $rc -eq 1 && $took -lt 60 && $left -eq 0 ]] && grep -q "did not complete within" "$LOG/nccl-stall.json"; then
    note "check-runtime nccl stall: detected, exit 1 in ${took}s, no process left: $(grep -o '"error": "[^"]*' "$LOG/nccl-stall.json" | head -1 | cut -c1-400)"
  else
    rc_all=1
    note "check-runtime nccl stall FAILED (rc=$rc, ${took}s, $left processes left): $(head -c 600 "$LOG/nccl-stall.json") $(head -c 300 "$LOG/nccl-stall.err")"
  fi
  cp "$LOG/nccl-stall.json" "$OUT/nccl-stall.json" 2>/dev/null
  if [[ $gpus -ge 2 ]]; then
    # A peer killed (SIGKILL) at call 5: every other rank must exit 1 within the timeout,
    # its line naming the dead rank; no process left.
    start=$(date +%s)
    timeout 120 "$tide" check-runtime --backend nccl -M 1 -L "$gpus" --groups "37x5,16;20x7" \
      --calls 12 --seed 4 --kill-rank 1 --kill-at-call 5 --timeout-s 5 --json \
      > "$LOG/nccl-kill.json" 2> "$LOG/nccl-kill.err"
    rc=$?
    took=$(( $(date +%s) - start ))
    left=$(pgrep -f "tide check-runtime" | wc -l)
    named=$(grep -c "rank 1 died" "$LOG/nccl-kill.json")
    if [[ $rc -eq 1 && $took -lt 60 && $left -eq 0 && $named -ge $((gpus - 1)) ]]; then
      note "check-runtime nccl kill: every rank named rank 1's death, exit 1 in ${took}s, no process left"
    else
      rc_all=1
      note "check-runtime nccl kill FAILED (rc=$rc, ${took}s, $left left, $named named): $(head -c 800 "$LOG/nccl-kill.json")"
    fi
    cp "$LOG/nccl-kill.json" "$OUT/nccl-kill.json" 2>/dev/null
  fi
fi

if has ring; then
  tide="$BUILD/src/cli/tide"
  for variant in "in-place" "slot-reuse" "in-place --cast" "slot-reuse --cast"; do
    name=$(echo "$variant" | tr -d ' -')
    # shellcheck disable=SC2086
    timeout 300 "$tide" check-runtime --backend nccl -M 1 -L "$gpus" \
      --groups "37x5,16,1000x33;20x7,9x11;4096x1024,4096;300x17;64x64,64" --calls 30 --seed 12 \
      --ring --staged-shards --mode $variant --timeout-s 60 --json \
      > "$LOG/ring-$name.json" 2> "$LOG/ring-$name.err"
    rc=$?
    [[ $rc -ne 0 ]] && rc_all=$rc
    note "check-runtime nccl ring 1x$gpus $variant rc=$rc $(stamp): $(python3 -c "import json; d=json.load(open('$LOG/ring-$name.json')); print('passed' if d['passed'] else 'FAILED', d['mismatches'], 'mismatches; arena', d.get('arena', {}).get('arena_bytes'), [r.get('error','') for r in d['per_rank'] if 'error' in r])" 2>&1) $(head -c 300 "$LOG/ring-$name.err")"
  done
  cp "$LOG/ring-inplace.json" "$OUT/ring.json" 2>/dev/null
fi

if has package; then
  python=python3
  {
    CMAKE_ARGS="-DTIDE_CUDA=ON -DTIDE_WERROR=OFF" CMAKE_BUILD_PARALLEL_LEVEL=16 \
      $python -m pip install --no-build-isolation --no-deps -v . &&
      $python -c "import tide, torch; print('tide', tide.__version__, 'torch', torch.__version__); import tide._C as C; print('backends: host', C.Communicator is not None)" &&
      tide --version
  } > "$LOG/package.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "package rc=$rc $(stamp): $(tail -3 "$LOG/package.log" | tr '\n' ' ')"
fi

if has graphs; then
  timeout 200 python3 -m pytest tests/python/test_runtime_graph_gpu.py tests/python/test_runtime_streams_gpu.py -q -rs -s \
    -p no:cacheprovider > "$LOG/graphs.log" 2>&1
  rc=$?
  # On the device a skipped test is a failure: there is a GPU, so it should have run.
  if [[ $rc -eq 0 ]] && grep -q "skipped" "$LOG/graphs.log"; then rc=1; fi
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "cuda graph calls rc=$rc $(stamp): $(tail -2 "$LOG/graphs.log" | tr '\n' ' ')"
fi

if has fsdp; then
  timeout 400 python3 -m pytest tests/python/test_fsdp_gpu.py -q -rs -p no:cacheprovider \
    > "$OUT/fsdp.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "fsdp gpu parity rc=$rc $(stamp): $(tail -2 "$OUT/fsdp.log" | tr '\n' ' ')"
fi

if has demo; then
  timeout 300 python3 -m tide.demo --steps 8 --out "$LOG/demo" > "$LOG/demo.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "demo rc=$rc $(stamp): $(grep -E "max loss|peak memory|TIDE arena|groups on" "$LOG/demo.log" | tr '\n' ' ')"
  cp "$LOG/demo/summary.json" "$OUT/demo-summary.json" 2>/dev/null
  note "demo arena: $(python3 -c "import json; m=json.load(open('$LOG/demo/summary.json'))['tide_memory']; print([(c['arena_bytes'], c['in_torch_allocator'], c['allocator_note']) for c in m['communicators']])" 2>&1)"
fi

note "done rc=$rc_all $(stamp)"
finish "$rc_all"
