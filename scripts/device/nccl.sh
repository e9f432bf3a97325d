#!/usr/bin/env bash
# TIDE across the GPUs of one host over NCCL, in one device call:
#   here:   scripts/stage-deps.sh            (once: GoogleTest and headers into .deps/)
#   device: run(kind="nvidia-h200-x2", command="bash scripts/device/nccl.sh", carry=[".deps"])
# STEPS (default "build unit probe check faults bench torch") picks steps:
#   build   tide-nccl, the NCCL fabric tests and the CUDA executor tests (Release, ninja)
#   unit    the 1-rank NCCL fabric tests on GPU 0, and the CUDA executor's tests (the
#           multi-GPU virtual fabric test uses every GPU)
#   probe   tide-nccl probe: peer pointers, copy-engine push/pull bandwidth to a peer
#   check   tide-nccl check: every split of the GPUs, bitwise against the CPU reference
#   messages  the same with transfers between declared nodes as ncclSend/ncclRecv messages
#   torchrun  tide-nccl check --quick launched by torchrun instead of --spawn
#   faults  a stalled peer and a withheld credit: every rank must fail naming the wait
#   bench   tide-nccl bench: TIDE vs NCCL + FSDP2's copies (C++ stand-ins), every split
#   torch   bench/nccl/fsdp2_nccl_baseline.py under torchrun: PyTorch's own copies and NCCL
# GPUS (default: all) is the number of ranks. BENCH_ARGS / TORCH_ARGS add arguments.
# Writes under $OUT (or /tmp/tide-nccl-out): summary.md, probe.json, check.json, bench.json,
# fsdp2_nccl_baseline.{json,md}, and logs.tgz (every log; $OUT returns at most 8 files).
# NVLink multicast stays off: NCCL_NVLS_ENABLE=0 everywhere (architecture: hardware rules).
set -uo pipefail
NAME=nccl DEFAULT_STEPS="build unit probe check messages torchrun faults bench torch" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build-nccl}
GPUS=${GPUS:-$(nvidia-smi -L | wc -l)}
rc_all=0
step_rc() { [[ $1 -ne 0 ]] && rc_all=$1; }

note "## nccl.sh on $(hostname) $(date -u +%FT%TZ): $GPUS x $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
nvidia-smi topo -m > "$LOG/topo.txt" 2>&1
note "$(head -4 "$LOG/topo.txt")"

if has build; then
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=OFF \
       > "$LOG/build.log" 2>&1; then
    note "CONFIGURE FAILED $(stamp)"; tail -30 "$LOG/build.log" | tee -a "$summary"; pack_logs; exit 1
  fi
  grep -E "TIDE: (NCCL|CUDA)" "$LOG/build.log" | tee -a "$summary"
  if ! cmake --build "$BUILD" -j 32 --target tide-nccl tide_nccl_fabric_tests \
       tide_cuda_executor_tests >> "$LOG/build.log" 2>&1; then
    note "BUILD FAILED $(stamp)"; grep -E "error|FAILED" "$LOG/build.log" | head -30 | tee -a "$summary"
    pack_logs; exit 1
  fi
  note "build ok $(stamp)"
fi
RUN="$BUILD/src/nccl_cli/tide-nccl"

if has unit; then
  CUDA_VISIBLE_DEVICES=0 timeout 120 "$BUILD/tests/fabric/tide_nccl_fabric_tests" > "$LOG/unit-fabric.log" 2>&1
  rc=$?; step_rc $rc
  note "nccl fabric 1-rank tests rc=$rc $(stamp): $(grep -E '^\[  (PASSED|FAILED) ' "$LOG/unit-fabric.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure|error" "$LOG/unit-fabric.log" | head -10 | tee -a "$summary"
  # Every GPU visible: the one-GPU tests use device 0, the multi-GPU virtual fabric all.
  timeout 300 "$BUILD/tests/exec/tide_cuda_executor_tests" > "$LOG/unit-executor.log" 2>&1
  rc=$?; step_rc $rc
  note "cuda executor tests rc=$rc $(stamp): $(grep -E '^\[  (PASSED|FAILED) ' "$LOG/unit-executor.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED|Failure" "$LOG/unit-executor.log" | head -10 | tee -a "$summary"
  grep -E "^\[ +(OK|SKIPPED|FAILED) +\] CudaExecutor.SeveralGpus" "$LOG/unit-executor.log" | tee -a "$summary"
fi

if has probe; then
  timeout 120 "$RUN" --spawn "$GPUS" probe --json "$OUT/probe.json" > "$LOG/probe.log" 2>&1
  rc=$?; step_rc $rc
  note "probe rc=$rc $(stamp)"; cat "$LOG/probe.log" | head -30 | tee -a "$summary"
fi

if has check; then
  timeout 420 "$RUN" --spawn "$GPUS" check --json "$OUT/check.json" > "$LOG/check.log" 2>&1
  rc=$?; step_rc $rc
  note "check rc=$rc $(stamp): $(tail -1 "$LOG/check.log")"
  grep -E "FAILED|rank [0-9]+:" "$LOG/check.log" | head -20 | tee -a "$summary"
fi

if has messages; then
  # Transfers between declared nodes as ncclSend/ncclRecv messages (the path between hosts).
  timeout 300 "$RUN" --spawn "$GPUS" check --messages --json "$OUT/check-messages.json" \
    > "$LOG/check-messages.log" 2>&1
  rc=$?; step_rc $rc
  note "check --messages rc=$rc $(stamp): $(tail -1 "$LOG/check-messages.log")"
  grep -E "FAILED|rank [0-9]+:" "$LOG/check-messages.log" | head -20 | tee -a "$summary"
fi

if has torchrun; then
  # The same binary under torchrun (RANK / WORLD_SIZE / LOCAL_RANK, rendezvous directory).
  timeout 200 torchrun --standalone --nproc-per-node "$GPUS" --no-python "$RUN" check --quick \
    > "$LOG/torchrun.log" 2>&1
  rc=$?; step_rc $rc
  note "torchrun check --quick rc=$rc $(stamp): $(grep -E 'cases failed|launcher' "$LOG/torchrun.log" | tr '\n' ' ')"
fi

if has faults; then
  # Every rank must exit non-zero, naming the wait, within the timeouts (fail-stop).
  for fault in stall withhold; do
    TIDE_FABRIC_TIMEOUT_S=60 timeout 200 "$RUN" --spawn "$GPUS" check --fault "$fault" \
      --run-timeout 5 --stall 12 > "$LOG/fault-$fault.log" 2>&1
    rc=$?
    named=$(grep -o "rank [0-9]*: '[^']*' failed on rank" "$LOG/fault-$fault.log" | sort -u | wc -l)
    exited=$(grep -c "exited with status" "$LOG/fault-$fault.log")
    verdict=$([[ $rc -ne 0 && $exited -eq $GPUS && $named -eq $GPUS ]] && echo detected || echo NOT-DETECTED)
    [[ $verdict == detected ]] || rc_all=1
    note "fault $fault: $verdict (rc=$rc, ranks exited non-zero: $exited of $GPUS, ranks naming it: $named) $(stamp)"
    grep -E "Unsatisfied|holds|failed on rank" "$LOG/fault-$fault.log" | head -6 | cut -c1-400 | tee -a "$summary"
  done
fi

if has bench; then
  timeout 300 "$RUN" --spawn "$GPUS" bench --json "$OUT/bench.json" ${BENCH_ARGS:-} > "$LOG/bench.log" 2>&1
  rc=$?; step_rc $rc
  note "bench rc=$rc $(stamp)"; cat "$LOG/bench.log" | tee -a "$summary"
fi

if has torch; then
  timeout 200 torchrun --standalone --nproc-per-node "$GPUS" bench/nccl/fsdp2_nccl_baseline.py \
    --out "$OUT" ${TORCH_ARGS:-} > "$LOG/torch.log" 2>&1
  rc=$?; step_rc $rc
  note "torch baseline rc=$rc $(stamp)"; tail -40 "$LOG/torch.log" | tee -a "$summary"
fi
note "done rc=$rc_all $(stamp)"
pack_logs
exit $rc_all
