#!/usr/bin/env bash
# The CUDA sequence runner (NOTE [CUDA call sequences]) on the device machine, in one call:
# its GPU tests, compute-sanitizer on them, and the enqueue benchmark, whose numbers land in
# $OUT/enqueue_h200.json (scripts/device/runtime_results.py; committed as
# bench/results/runtime/enqueue_h200.json with the raw files beside it).
# The device runs the session's main checkout: a branch's tree travels as an ignored folder
# (e.g. build-<branch>/, with its prebuilt build-cuda binaries) named in carry, and the
# command starts with cd into it.
#   here:   scripts/stage-deps.sh            (once: GoogleTest and headers into .deps/)
#   device: run(command="bash scripts/device/runtime_enqueue.sh", carry=[".deps"])
# STEPS (default "build tests sanitize bench"; "probe" adds tide_enqueue_primitives_probe,
# whose JSON lands in $OUT/primitives_*.json; "geometry" runs the enqueue benchmark for both
# TIDE-RS sub-slice geometries ($GEOMETRIES, default all three) into $OUT/geometry_*.json:
# one rank at 8 x 8 for the host cost, all ranks at 1 x 8 and 2 x 4 for the GPU time of
# replays). Prebuilt binaries under $PREBUILT (a build
# directory carried along) are used when they start there; otherwise the targets are built.
set -uo pipefail
NAME=runtime_enqueue DEFAULT_STEPS="build tests sanitize bench" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build-runtime}
ROWS_DIV=${ROWS_DIV:-2}
finish() { pack_logs; exit "$1"; }

nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1
machine="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
note "## runtime.sh on $(hostname) $(date -u +%FT%TZ): $machine"

TESTS="$BUILD/tests/exec/tide_cuda_sequence_tests"
BENCH="$BUILD/bench/runtime/tide_runtime_enqueue_bench"
if [[ -n "${PREBUILT:-}" && -x "$PREBUILT/tests/exec/tide_cuda_sequence_tests" ]] &&
   "$PREBUILT/tests/exec/tide_cuda_sequence_tests" --gtest_list_tests > /dev/null 2>&1; then
  TESTS="$PREBUILT/tests/exec/tide_cuda_sequence_tests"
  BENCH="$PREBUILT/bench/runtime/tide_runtime_enqueue_bench"
  note "using prebuilt binaries from $PREBUILT"
elif has build; then
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=OFF \
       > "$LOG/build.log" 2>&1; then
    note "CONFIGURE FAILED $(stamp)"; tail -40 "$LOG/build.log" | tee -a "$summary"; finish 1
  fi
  targets="tide_cuda_sequence_tests tide_runtime_enqueue_bench"
  has probe && targets+=" tide_enqueue_primitives_probe"
  if ! cmake --build "$BUILD" --target $targets -j 16 \
       >> "$LOG/build.log" 2>&1; then
    note "BUILD FAILED $(stamp)"; grep -E "error|FAILED" "$LOG/build.log" | head -40 | tee -a "$summary"
    finish 1
  fi
  note "build ok $(stamp)"
fi

rc_all=0
passed=0
if has tests; then
  # Host checks and the stream-path tests (AgStream with graphs too) first, then each graph
  # test alone: a hang stops only its own group.
  : > "$LOG/tests.log"
  for filter in 'CudaSequence.Templates*:SequenceFusion.*:GenerationWaits.*:Topologies/RsStream.*:Topologies/AgStream.*' \
                'Topologies/RsGraphs.*' 'CudaSequence.ReplayGraphs*' 'CudaSequence.CallsCaptured*' \
                'CudaSequence.CallsOnTwo*' 'CudaSequence.SlotGraphsAndA*' 'CudaSequence.TooMany*' 'CudaSequence.Watch*'; do
    timeout 120 "$TESTS" --gtest_filter="$filter" >> "$LOG/tests.log" 2>&1
    rc=$?
    [[ $rc -ne 0 ]] && rc_all=$rc
    [[ $rc -eq 124 ]] && note "TESTS TIMED OUT (120 s) in $filter"
    note "tests $filter rc=$rc $(stamp)"
  done
  passed=$(grep -cE '^\[       OK \]' "$LOG/tests.log")
  note "passed $passed: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOG/tests.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|Actual|Expected|error" "$LOG/tests.log" | head -40 | tee -a "$summary"
  cp "$LOG/tests.log" "$OUT/tests.log"
fi

if has bench; then
  # The Llama-3.1-70B layer group (rows halved so 64 virtual ranks fit one GPU; the ops per
  # call are those of the full shapes) and a 30-parameter group as tide_executor_bench builds it.
  args="--nodes 8 --gpus 8 --repeats 30 --ranks one"
  timeout 150 "$BENCH" --out "$OUT/enqueue_raw_llama70b.json" --model llama3.1-70b \
    --rows-div "$ROWS_DIV" $args > "$LOG/bench_llama.txt" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
  note "bench llama rc=$rc $(stamp)"; tail -6 "$LOG/bench_llama.txt" | tee -a "$summary"
  timeout 150 "$BENCH" --out "$OUT/enqueue_raw_p30.json" --synthetic 30 --elems 65536 $args \
    > "$LOG/bench_p30.txt" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
  note "bench P=30 rc=$rc $(stamp)"; tail -6 "$LOG/bench_p30.txt" | tee -a "$summary"
fi

if has sanitize; then
  # RsGraphs /0, /1, /2: 1 x 4 across ranks (stream path for fresh gradients), per rank and
  # node-contiguous (re-pointed graphs). The gated replay tests of the 1-D geometries are left
  # out: under memcheck the per-rank one did not finish within 150 s (1 s without; not
  # diagnosed, bench/results/runtime/README.md).
  if command -v compute-sanitizer > /dev/null; then
    timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$TESTS" \
      --gtest_filter='Topologies/RsStream.*/0:Topologies/RsStream.*/3:Topologies/RsGraphs.*/0:Topologies/RsGraphs.*/1:Topologies/RsGraphs.*/2:Topologies/AgStream.*/3:CudaSequence.ReplayGraphsMatch*' \
      > "$LOG/sanitize.log" 2>&1
    rc=$?
    [[ $rc -ne 0 ]] && rc_all=$rc
    note "memcheck rc=$rc $(stamp): $(grep -E 'ERROR SUMMARY' "$LOG/sanitize.log" | tail -1)"
    tail -5 "$LOG/sanitize.log" >> "$summary"
    cp "$LOG/sanitize.log" "$OUT/sanitize.log"
  else
    note "memcheck skipped: compute-sanitizer not found"
  fi
fi

if has probe; then
  PROBE="$BUILD/bench/runtime/tide_enqueue_primitives_probe"
  for shape in "8 10" "64 75"; do
    tag=${shape/ /x}
    timeout 120 "$PROBE" $shape > "$OUT/primitives_$tag.json" 2> "$LOG/probe_$tag.txt"
    rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
    note "probe $tag rc=$rc $(stamp)"; grep -E 'exec_update|setparams_2d|stream_2d' "$OUT/primitives_$tag.json" | tee -a "$summary"
  done
fi

if has geometry; then
  for g in ${GEOMETRIES:-across-ranks per-rank node-contiguous}; do
    for topo in "1 8" "2 4"; do
      set -- $topo
      timeout 150 "$BENCH" --out "$OUT/geometry_${g}_all_${1}x${2}_llama.json" --model llama3.1-70b \
        --nodes "$1" --gpus "$2" --repeats 20 --ranks all --sub-slices "$g" \
        > "$LOG/geometry_${g}_${1}x${2}.txt" 2>&1
      rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
      note "geometry $g all ${1}x${2} rc=$rc $(stamp)"
    done
    timeout 150 "$BENCH" --out "$OUT/geometry_${g}_one_8x8_llama.json" --model llama3.1-70b \
      --rows-div "$ROWS_DIV" --nodes 8 --gpus 8 --repeats 30 --ranks one --sub-slices "$g" \
      > "$LOG/geometry_${g}_one_llama.txt" 2>&1
    rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
    note "geometry $g one 8x8 llama rc=$rc $(stamp)"
    timeout 150 "$BENCH" --out "$OUT/geometry_${g}_one_8x8_p30.json" --synthetic 30 --elems 65536 \
      --nodes 8 --gpus 8 --repeats 30 --ranks one --sub-slices "$g" \
      > "$LOG/geometry_${g}_one_p30.txt" 2>&1
    rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
    note "geometry $g one 8x8 P=30 rc=$rc $(stamp)"
  done
  python3 - "$OUT" <<'PY' | tee -a "$summary"
import glob, json, os, sys
for f in sorted(glob.glob(os.path.join(sys.argv[1], "geometry_*.json"))):
    j = json.load(open(f))
    for key in ("rs_fresh", "rs_replay", "rs_stream"):
        r = j.get(key, {})
        print(f"{os.path.basename(f)} {key}: host {r.get('median', float('nan')):.3f} ms/rank "
              f"[{r.get('p10', float('nan')):.3f}, {r.get('p90', float('nan')):.3f}], "
              f"gpu {r.get('gpu_ms', {}).get('median', float('nan')):.3f} ms, "
              f"repointed {r.get('repointed_launches')}, failure '{r.get('repoint_failure')}'")
PY
fi

if has bench && [[ -f "$OUT/enqueue_raw_llama70b.json" ]]; then
  extra=()
  [[ -f "$OUT/enqueue_raw_p30.json" ]] && extra+=(--synthetic30 "$OUT/enqueue_raw_p30.json")
  [[ -f "$OUT/sanitize.log" ]] && extra+=(--sanitize "$OUT/sanitize.log")
  python3 scripts/device/runtime_results.py "$OUT/enqueue_h200.json" --tests "$LOG/tests.log" \
    --machine "$machine" --llama "$OUT/enqueue_raw_llama70b.json" "${extra[@]}" \
    --command "scripts/device/runtime_enqueue.sh (STEPS='$STEPS') -> tide_runtime_enqueue_bench $args, --model llama3.1-70b --rows-div $ROWS_DIV and --synthetic 30 --elems 65536" \
    >> "$summary" 2>&1
fi

note "done rc=$rc_all $(stamp)"
finish "$rc_all"
