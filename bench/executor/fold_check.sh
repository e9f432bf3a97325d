#!/usr/bin/env bash
# The one-CUDA-executor check in one device call (run from the repository root:
# run(command="bash bench/executor/fold_check.sh")): builds the executor, runner,
# kernel, fabric and launch tests, tide-nccl and tide, then runs them in priority order, each
# only while the call's deadline (DEADLINE_S, default 210 s) leaves room:
#   executor   tide_cuda_executor_tests (CudaExecutor, now the runner's one-shot face)
#   sequence   tide_cuda_sequence_tests (the runner, MultiNode messages included)
#   fabric     tide_nccl_fabric_tests, tide_launch_tests, tide_ipc_fabric_tests
#   nccl       tide-nccl --spawn 1 check --quick (the NCCL window fabric under CudaExecutor)
#   eplane     tide_cuda_ep_lane_tests (the expert-parallel lane on the runner)
#   rendezvous tide_ipc_rendezvous_tests (forked ranks over the ipc rendezvous transport)
#   kernels    tide_kernels_tests
#   splits     scripts/device/ipc.sh splits (SPLITS, VARIANTS) on the same build
# Writes $OUT/summary.txt and one log per step.
set -uo pipefail
# The multicast rule and the compiler choice (COMPILERS: one that links libstdc++ as torch
# does, so that ipc.sh's module step can build tide._C in the same BUILD_DIR).
NAME=fold DEFAULT_STEPS="" source "$(dirname "$0")/../../scripts/device/common.sh"
BUILD=${BUILD_DIR:-build-fold}
DEADLINE_S=${DEADLINE_S:-210}
t0=$(date +%s)
st() { echo "[$(( $(date +%s) - t0 ))s]"; }
left() { echo $(( DEADLINE_S - ($(date +%s) - t0) )); }
S=$OUT/summary.txt
echo "fold.sh $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) cores" > "$S"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=OFF -DTIDE_PYTHON=OFF "${COMPILERS[@]}" \
  > "$OUT/build.log" 2>&1 || { echo "configure failed" >> "$S"; tail -30 "$OUT/build.log" >> "$S"; exit 1; }
cmake --build "$BUILD" -j 16 --target tide_cuda_executor_tests tide_cuda_sequence_tests \
  tide_nccl_fabric_tests tide_launch_tests tide_ipc_fabric_tests tide-nccl tide tide_kernels_tests \
  tide_cuda_ep_lane_tests tide_ipc_rendezvous_tests \
  >> "$OUT/build.log" 2>&1 || { echo "build failed $(st)" >> "$S"; grep -E "error" "$OUT/build.log" | head -30 >> "$S"; exit 1; }
echo "build ok $(st)" >> "$S"
gtest() {  # name binary [timeout]
  local n=$1 bin=$2 to=${3:-200}
  if (( $(left) < 20 )); then echo "$n: not run (deadline)" >> "$S"; return; fi
  (( to > $(left) )) && to=$(left)
  timeout "$to" "$bin" > "$OUT/$n.log" 2>&1; local rc=$?
  echo "$n rc=$rc $(st): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/$n.log" | tr '\n' ' ')" >> "$S"
  grep -E "^\[  FAILED|Failure|differs" "$OUT/$n.log" | head -20 >> "$S"
}
for step in ${STEPS:-executor sequence fabric nccl kernels splits}; do
  case $step in
    executor) gtest tide_cuda_executor_tests "$BUILD/tests/exec/tide_cuda_executor_tests" ;;
    sequence) gtest tide_cuda_sequence_tests "$BUILD/tests/exec/tide_cuda_sequence_tests" ;;
    fabric)
      gtest tide_nccl_fabric_tests "$BUILD/tests/fabric/tide_nccl_fabric_tests" 60
      gtest tide_launch_tests "$BUILD/tests/fabric/tide_launch_tests" 60
      gtest tide_ipc_fabric_tests "$BUILD/tests/fabric_ipc/tide_ipc_fabric_tests" 60 ;;
    nccl)
      if (( $(left) > 30 )); then
        timeout 60 "$BUILD/src/nccl_cli/tide-nccl" --spawn 1 check --quick --json "$OUT/nccl-check.json" \
          > "$OUT/nccl-check.log" 2>&1
        echo "tide-nccl --spawn 1 check --quick rc=$? $(st): $(tail -1 "$OUT/nccl-check.log")" >> "$S"
      fi ;;
    eplane) gtest tide_cuda_ep_lane_tests "$BUILD/tests/exec/tide_cuda_ep_lane_tests" ;;
    rendezvous) gtest tide_ipc_rendezvous_tests "$BUILD/tests/fabric_ipc/tide_ipc_rendezvous_tests" 120 ;;
    kernels) gtest tide_kernels_tests "$BUILD/tests/kernels/tide_kernels_tests" ;;
    splits)
      if (( $(left) > 40 )); then
        OUT="$OUT/ipc" BUILD_DIR="$BUILD" STEPS="splits" SPLITS="${SPLITS:-2x2}" \
          VARIANTS="${VARIANTS:-slot-reuse,in-place --cast,stream}" CALLS=24 \
          timeout $(left) bash scripts/device/ipc.sh > "$OUT/ipc-splits.log" 2>&1
        echo "ipc splits rc=$? $(st):" >> "$S"; grep -E "^split" "$OUT/ipc/summary.md" >> "$S" 2>/dev/null
      else
        echo "ipc splits: not run (deadline)" >> "$S"
      fi ;;
  esac
done
echo "done $(st)" >> "$S"
cat "$S"
