#!/usr/bin/env bash
# The expert-parallel lane (App. F, NOTE [runtime] 11) on the CUDA runner, on one GPU, in one
# call (the tree staged with .deps, as for scripts/device/ipc.sh):
#   device: run(command="bash scripts/device/eplane.sh", carry=[".deps"])
# STEPS (default "build runner kernels splits fsdp") picks steps:
#   build    the tree with CUDA and tide._C (TIDE_PYTHON=ON in the one configure: no rebuild)
#   runner   tide_cuda_ep_lane_tests: the lane's sequences on the runner, virtual fabric, M =
#            2..8, stream path, slot graphs, messages through the rendezvous transport; bitwise
#   kernels  tide_kernels_tests EpLaneSum*: the 8-source sum (Level 1) bitwise, and float64
#   splits   tide check-runtime --backend ipc --nodes-as-hosts at LANE_SPLITS (default "2x1 3x1
#            4x1"), in-place and slot-reuse: the groups on the lane (ep/ep), bitwise
#   fsdp     FSDP2 parity case (p) over ipc, 4 processes as 2 emulated hosts, both modes
#            (tests/python/test_fsdp_ipc_gpu.py -k expert_parallel)
# Writes under $OUT: summary.md, rows.jsonl, logs.tgz (every log).
set -uo pipefail
NAME=eplane DEFAULT_STEPS="build runner kernels splits fsdp" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build-eplane}
tide="$BUILD/src/cli/tide"
rows="$OUT/rows.jsonl"
: > "$rows"
row() { echo "$1" >> "$rows"; }
export PYTHONUNBUFFERED=1
gtest_counts() {
  echo "passed $(grep -c '^\[       OK \]' "$1"), failed $(grep -c '^\[  FAILED  \] [A-Z]' "$1"), skipped $(grep -c '^\[  SKIPPED \] [A-Z]' "$1")"
}

note "## eplane.sh on $(hostname) $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) cores"
rc_all=0
if has build; then
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_CUDA=ON -DTIDE_WERROR=OFF \
       -DTIDE_PYTHON=ON "${COMPILERS[@]}" > "$LOG/build.log" 2>&1 ||
     ! cmake --build "$BUILD" -j 16 --target tide tide_cuda_ep_lane_tests tide_kernels_tests _C \
       >> "$LOG/build.log" 2>&1; then
    note "BUILD FAILED $(stamp)"; grep -E "error|FAILED" "$LOG/build.log" | head -30 | tee -a "$summary"
    pack_logs; exit 1
  fi
  note "build ok $(stamp)"
fi
python_module "$BUILD" || { note "MODULE BUILD FAILED $(stamp)"; pack_logs; exit 1; }

if has runner; then
  timeout 150 "$BUILD/tests/exec/tide_cuda_ep_lane_tests" > "$LOG/runner.log" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
  note "runner lane tests rc=$rc $(stamp): $(gtest_counts "$LOG/runner.log"); $(grep -m1 'random seed' "$LOG/runner.log")"
  grep -E '^\[  FAILED  \]|Failure|error' "$LOG/runner.log" | head -20 | tee -a "$summary"
  cp "$LOG/runner.log" "$OUT/runner.log"
fi

if has kernels; then
  timeout 60 "$BUILD/tests/kernels/tide_kernels_tests" --gtest_filter='EpLaneSum*' > "$LOG/kernels.log" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
  note "8-source sum tests rc=$rc $(stamp): $(gtest_counts "$LOG/kernels.log"); $(grep -m1 'random seed' "$LOG/kernels.log")"
  grep -E '^\[  FAILED  \]|Failure' "$LOG/kernels.log" | head -10 | tee -a "$summary"
fi

if has splits; then
  groups="37x5,16,1000x33;20x7,9x11;300x17;64x64,64"
  for split in ${LANE_SPLITS:-2x1 3x1 4x1}; do
    m=${split%x*}
    for mode in in-place slot-reuse; do
      name="lane-$split-$mode"
      start=$(date +%s.%N)
      timeout 120 "$tide" check-runtime --backend ipc --procs "$m" -M "$m" -L 1 --json \
        --groups "$groups" --calls "${LANE_CALLS:-24}" --seed $((m * 13 + 1)) --ring --staged-shards \
        --mode "$mode" --nodes-as-hosts --timeout-s 60 > "$LOG/$name.json" 2> "$LOG/$name.err"
      rc=$?
      line=$(python3 - "$LOG/$name.json" "$m" "$mode" "$rc" "$start" <<'PY'
import json, sys, time
f, m, mode, rc, start = sys.argv[1:]
try:
    d = json.load(open(f))
except Exception as e:
    d = {"passed": False, "per_rank": [{"error": f"no JSON: {e}"}]}
ranks = d.get("per_rank", [])
lanes = d.get("lanes") or []
on_lane = bool(lanes) and all(lane.startswith("ep/ep") for lane in lanes)
print(json.dumps({"kind": "lane-split", "M": int(m), "L": 1, "mode": mode,
                  "passed": bool(d.get("passed")) and rc == "0" and on_lane,
                  "on_lane": on_lane, "mismatches": d.get("mismatches"),
                  "calls": d.get("calls"), "lanes": lanes,
                  "rail_messages": [r.get("rail_messages") for r in ranks],
                  "seconds": round(time.time() - float(start), 2),
                  "errors": [r["error"][:400] for r in ranks if "error" in r][:2]}))
PY
)
      row "$line"
      [[ $line == *'"passed": true'* ]] || rc_all=1
      note "lane split $split $mode: rc=$rc $(echo "$line" | cut -c1-600)"
    done
  done
fi

if has fsdp; then
  TIDE_IPC_RESULTS="$LOG" timeout "${FSDP_TIMEOUT:-240}" python3 -m pytest tests/python/test_fsdp_ipc_gpu.py \
    -q -rs -p no:cacheprovider -k "${FSDP_SELECT:-expert_parallel}" > "$LOG/fsdp.log" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
  for f in "$LOG"/fsdp-ipc-*.json; do [[ -f $f ]] && row "$(cat "$f")"; done
  note "fsdp ipc parity (p) rc=$rc $(stamp): $(tail -3 "$LOG/fsdp.log" | tr '\n' ' ' | cut -c1-1500)"
  cp "$LOG/fsdp.log" "$OUT/fsdp.log"
fi
note "done rc=$rc_all $(stamp)"
pack_logs
exit "$rc_all"
