#!/usr/bin/env bash
# Several GPU ranks on one GPU through the ipc backend (NOTE [ipc fabric]), in one call.
#   here:   scripts/stage-deps.sh            (once: GoogleTest and headers into .deps/)
#   device: run(command="bash scripts/device/ipc.sh", carry=[".deps"])
# STEPS (default "build fabric splits faults hosts sanitizer package fsdp demo") picks steps:
#   build      the C++ tree with CUDA (tests, tide)
#   fabric     tide_ipc_fabric_tests: 2-3 processes map each other's windows, both handle kinds
#   splits     tide check-runtime --backend ipc, 2-8 processes on the GPU, splits 1x2 2x1 1x3 2x2
#              4x1 1x4 2x4 8x1; both modes, bf16 and fp32 masters (--cast), graph replay (the
#              default) and the stream path (TIDE_NO_GRAPH_REPLAY=1); bitwise
#   faults     --kill-rank (SIGKILL mid-call), --stall-rank, --misorder-rank at 2 and 4
#              processes: every other rank raises within the timeout, nothing left behind
#   hosts      emulated hosts (--nodes-as-hosts; NOTE [ipc rendezvous transport]): the
#              rendezvous transports' tests (tide_ipc_rendezvous_tests), splits HOST_SPLITS
#              (default 2x1 2x2 4x2 2x4) in-place and slot-reuse, bitwise, with every rail put
#              between nodes a message; a kill, a stall and a release (abort, NOTE [abort relay]) of
#              a rank on another emulated host;
#              HOST_FLAGS (default "--ring --staged-shards") replaces the splits' binding
#              flags: without --staged-shards the all-gathers' messages move only the arena, so
#              their slot graphs replay; HOST_FAULTS=0 skips the faults, HOST_FAULTS=release runs only the releases
#   sanitizer  compute-sanitizer memcheck on a 2-process check-runtime run
#   module     tide._C built with the tree, python/tide beside it on PYTHONPATH (no pip: python_module)
#   package    pip install . against the image's torch
#   fsdp       FSDP2 parity, 2 and 4 processes on the GPU (4: HSDP 2 x 2), TIDE on ipc vs stock
#              on gloo (tests/python/test_fsdp_ipc_gpu.py)
#   loop       the torchtitan-style loop (tests/python/test_fsdp_titan_loop.py: AC, compile per
#              block, no-sync accumulation, eval, DCP resume) and the training-loop defects
#              (test_fsdp_training_loop.py, on CPU there) with 4 processes on the GPU
#   demo       scripts/main.sh's demo with 4 processes on the GPU
#   memory     bench/memory/run.py on the GPU (MEMORY_WORLDS, MEMORY_DEPTHS, MEMORY_REPEATS)
#   nsscale    bench/memory/ns_scale.py on the GPU (NSSCALE_WORLDS, default "2 4"; NSSCALE_REPEATS,
#              default 1; NSSCALE_OPTIMIZER: default, foreach or fused AdamW): the NS-scale
#              model, stock vs both modes, torch.cuda's peak
# SPLITS (space-separated, e.g. "2x2 4x1") and VARIANTS (comma-separated) narrow the splits step.
# Writes under $OUT: summary.md, rows.jsonl (one JSON row per run, for ipc_results.py),
# logs.tgz. Then here: python3 scripts/device/ipc_results.py <files_at> writes
# bench/results/ipc/{summary.json,README.md}.
set -uo pipefail
NAME=ipc DEFAULT_STEPS="build fabric splits faults hosts sanitizer package fsdp demo" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build-ipc}
tide="$BUILD/src/cli/tide"
rows="$OUT/rows.jsonl"
: > "$rows"
finish() { pack_logs; exit "$1"; }
row() { echo "$1" >> "$rows"; }
export PYTHONUNBUFFERED=1
# GPU memory in use, in MiB: the total minus what is free (nvidia-smi's memory.used read 0 there);
# and the processes that hold a context on the GPU.
gpu_used() { nvidia-smi --query-gpu=memory.total,memory.free --format=csv,noheader,nounits | head -1 | awk -F', ' '{print $1 - $2}'; }
gpu_apps() { nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | grep -c . ; }
tide_procs() { pgrep -f "tide check-runtime|fsdp_parity_worker|tide.demo" | wc -l; }

nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1
note "## ipc.sh on $(hostname) $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1); kernel $(uname -r); ptrace_scope $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo none)"
row "{\"kind\": \"machine\", \"machine\": \"$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), $(nproc) cores, kernel $(uname -r)\", \"date\": \"$(date -u +%FT%TZ)\", \"command\": \"bash scripts/device/ipc.sh (STEPS='$STEPS')\", \"gpu_used_mib_start\": $(gpu_used)}"

rc_all=0
if has build; then
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_CUDA=ON -DTIDE_WERROR=OFF "${COMPILERS[@]}" \
       > "$LOG/build.log" 2>&1; then
    note "CONFIGURE FAILED $(stamp)"; tail -40 "$LOG/build.log" | tee -a "$summary"; finish 1
  fi
  if ! cmake --build "$BUILD" -j 16 --target tide tide_ipc_fabric_tests tide_ipc_rendezvous_tests ${EXTRA_TARGETS:-} >> "$LOG/build.log" 2>&1; then
    note "BUILD FAILED $(stamp)"; grep -E "error|FAILED" "$LOG/build.log" | head -40 | tee -a "$summary"
    finish 1
  fi
  note "build ok $(stamp)"
fi

if has fabric; then
  timeout 120 "$BUILD/tests/fabric_ipc/tide_ipc_fabric_tests" > "$LOG/fabric.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  # On the device a skipped GPU case is a failure, unless it says why its handles are refused.
  note "ipc fabric tests rc=$rc $(stamp): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) |ipc fabric:|skip' "$LOG/fabric.log" | tr '\n' ' ' | cut -c1-900)"
fi

# One check-runtime run: name, procs, M, L, then its extra arguments; a row either way.
check() {
  local name=$1 procs=$2 m=$3 l=$4; shift 4
  local start; start=$(date +%s.%N)
  timeout 300 "$tide" check-runtime --backend ipc --procs "$procs" -M "$m" -L "$l" --json "$@" \
    > "$LOG/$name.json" 2> "$LOG/$name.err"
  local rc=$?
  local took; took=$(python3 -c "import time; print(round(time.time() - $start, 2))")
  echo "$rc $took"
}

if has splits; then
  groups="37x5,16,1000x33;20x7,9x11;300x17;64x64,64"
  for split in ${SPLITS:-1x2 2x1 1x3 2x2 4x1 1x4 2x4 8x1}; do
    m=${split%x*}; l=${split#*x}; procs=$((m * l))
    IFS=, read -r -a variants <<< "${VARIANTS:-in-place,slot-reuse,in-place --cast,slot-reuse --cast,stream}"
    for variant in "${variants[@]}"; do
      args=(--mode "${variant%% *}"); [[ $variant == *--cast ]] && args+=(--cast)
      path=replay
      if [[ $variant == stream ]]; then args=(--mode in-place); path=stream; export TIDE_NO_GRAPH_REPLAY=1; fi
      name="split-$split-$(echo "$variant" | tr -d ' -')"
      read -r rc took < <(check "$name" "$procs" "$m" "$l" --groups "$groups" --calls "${CALLS:-48}" \
        --seed $((procs * 7 + m)) --ring --staged-shards "${args[@]}" --timeout-s 60)
      unset TIDE_NO_GRAPH_REPLAY
      [[ $rc -ne 0 ]] && rc_all=$rc
      line=$(python3 - "$LOG/$name.json" "$procs" "$m" "$l" "${variant%% *}" "$([[ $variant == *--cast ]] && echo fp32 || echo bf16)" "$path" "$took" "$rc" <<'PY'
import json, sys
f, procs, m, l, mode, dtype, path, took, rc = sys.argv[1:]
try:
    d = json.load(open(f))
except Exception as e:
    d = {"passed": False, "mismatches": None, "per_rank": [{"error": f"no JSON: {e}"}]}
errors = [r["error"] for r in d.get("per_rank", []) if "error" in r]
print(json.dumps({"kind": "split", "procs": int(procs), "M": int(m), "L": int(l),
                  "mode": mode if mode != "stream" else "in-place", "dtype": dtype, "path": path,
                  "passed": bool(d.get("passed")) and rc == "0", "mismatches": d.get("mismatches"),
                  "replays": sum(r.get("replays", 0) for r in d.get("per_rank", [])),
                  "calls": d.get("calls"), "seconds": float(took),
                  "arena_bytes": d.get("arena", {}).get("arena_bytes"), "errors": errors[:2]}))
PY
)
      row "$line"
      note "split $split $variant: rc=$rc ${took}s $(echo "$line" | python3 -c "import json,sys; r=json.load(sys.stdin); print('passed' if r['passed'] else 'FAILED', r['mismatches'], 'mismatches,', r['replays'], 'replays', r['errors'][:1])" | cut -c1-400)"
    done
  done
fi

# A fault run: name, procs, the grep that every surviving rank's error must match, arguments.
fault() {
  local name=$1 procs=$2 pattern=$3 fault_kind=$4; shift 4
  local before; before=$(gpu_used)
  local m=${FAULT_M:-1}  # emulated hosts: M nodes (with --nodes-as-hosts among the arguments)
  read -r rc took < <(check "$name" "$procs" "$m" $((procs / m)) --groups "37x5,16;20x7" --calls 12 "$@")
  sleep 1
  local left; left=$(tide_procs)
  local after; after=$(gpu_used)
  left=$((left + $(gpu_apps)))  # a process that still holds the GPU counts as left behind
  local line
  line=$(python3 - "$LOG/$name.json" "$procs" "$pattern" "$fault_kind" "$took" "$rc" "$left" "$before" "$after" "${CUDA_DEVICE_MAX_CONNECTIONS:-default}" <<'PY'
import json, re, sys
f, procs, pattern, kind, took, rc, left, before, after, connections = sys.argv[1:]
try:
    d = json.load(open(f))
except Exception as e:
    d = {"per_rank": []}
rows = d.get("per_rank", [])
victim = {"kill": "killed by signal 9"}.get(kind)
survivors = [r for r in rows if not (victim and r.get("error", "").startswith(victim))]
named = [r for r in survivors if re.search(pattern, r.get("error", ""))]
timeout_s = 5.0
print(json.dumps({"kind": "fault", "fault": kind, "procs": int(procs), "connections": connections,
                  "ended_process": sum("ended the process" in r.get("error", "") for r in survivors),
                  "all_ranks_raised_within_timeout": rc == "1" and len(named) == len(survivors) > 0
                      and max((r.get("seconds", 1e9) for r in survivors), default=1e9) < 60,
                  "seconds": max((r.get("seconds", 0) for r in survivors), default=None),
                  "left_behind": {"processes": int(left), "gpu_mib_before": int(before),
                                  "gpu_mib_after": int(after)},
                  "mismatches": d.get("mismatches"),
                  # NOTE [abort relay]: ranks whose error names an abort token a message carried
                  "relayed": sum("abort token" in r.get("error", "") for r in survivors),
                  "errors": [r.get("error", "")[:300] for r in survivors][:2]}))
PY
)
  row "$line"
  [[ $(echo "$line" | python3 -c "import json,sys; r=json.load(sys.stdin); print(int(r['all_ranks_raised_within_timeout'] and r['left_behind']['processes']==0 and not r['mismatches']))") == 1 ]] || rc_all=1
  note "fault $name: rc=$rc ${took}s, $left processes left, GPU ${before}->${after} MiB: $(echo "$line" | cut -c1-600)"
}

if has faults; then
  for procs in 2 4; do
    fault "kill-$procs" "$procs" "rank 1 died" kill --seed 4 --kill-rank 1 --kill-at-call 5 --timeout-s 5
    fault "stall-$procs" "$procs" "did not complete within|stalled|died" stall --seed 3 --stall-rank 0 --stall-at-call 4 --timeout-s 5
  done
  fault "misorder-2" 2 "did not complete within|order" misorder --seed 5 --misorder-rank 1 --timeout-s 5
  fault "misorder-4" 4 "did not complete within|order" misorder --seed 6 --misorder-rank 2 --timeout-s 5
  # At the first reduce-scatter (NOTE [preloaded kernels]: a kernel's first launch behind a
  # held wait once hung the host there).
  fault "stall-2-rs0" 2 "did not complete within|stalled|died" stall --seed 7 --stall-rank 0 --stall-at-call 3 --timeout-s 5
  fault "kill-2-rs0" 2 "rank 1 died" kill --seed 8 --kill-rank 1 --kill-at-call 3 --timeout-s 5
  # Hardware queues (paper App. E): the same faults with 32 connections instead of the default 8.
  export CUDA_DEVICE_MAX_CONNECTIONS=32
  fault "kill-4-c32" 4 "rank 1 died" kill --seed 4 --kill-rank 1 --kill-at-call 5 --timeout-s 5
  fault "stall-4-c32" 4 "did not complete within|stalled|died" stall --seed 3 --stall-rank 0 --stall-at-call 4 --timeout-s 5
  unset CUDA_DEVICE_MAX_CONNECTIONS
fi

if has hosts; then
  timeout 240 "$BUILD/tests/fabric_ipc/tide_ipc_rendezvous_tests" > "$LOG/rendezvous.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  row "{\"kind\": \"rendezvous\", \"rc\": $rc, \"passed\": $(grep -c '^\[       OK \]' "$LOG/rendezvous.log"), \"failed\": $(grep -c '^\[  FAILED  \] [A-Z]' "$LOG/rendezvous.log"), \"skipped\": $(grep -c '^\[  SKIPPED \] [A-Z]' "$LOG/rendezvous.log")}"
  note "rendezvous transport tests rc=$rc $(stamp): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) |seed' "$LOG/rendezvous.log" | tr '\n' ' ' | cut -c1-900)"
  groups="37x5,16,1000x33;20x7,9x11;300x17;64x64,64"
  for split in ${HOST_SPLITS:-2x1 2x2 4x2 2x4}; do
    m=${split%x*}; l=${split#*x}; procs=$((m * l))
    for mode in in-place slot-reuse; do
      name="hosts-$split-$mode"
      read -r rc took < <(check "$name" "$procs" "$m" "$l" --groups "$groups" --calls "${HOST_CALLS:-24}" \
        --seed $((procs * 11 + m)) ${HOST_FLAGS---ring --staged-shards} --mode "$mode" --nodes-as-hosts --timeout-s 60)
      [[ $rc -ne 0 ]] && rc_all=$rc
      line=$(python3 - "$LOG/$name.json" "$procs" "$m" "$l" "$mode" "$took" "$rc" <<'PY'
import json, sys
f, procs, m, l, mode, took, rc = sys.argv[1:]
try:
    d = json.load(open(f))
except Exception as e:
    d = {"passed": False, "mismatches": None, "per_rank": [{"error": f"no JSON: {e}"}]}
errors = [r["error"] for r in d.get("per_rank", []) if "error" in r]
print(json.dumps({"kind": "hosts-split", "procs": int(procs), "M": int(m), "L": int(l),
                  "mode": mode, "hosts": int(m), "passed": bool(d.get("passed")) and rc == "0",
                  "mismatches": d.get("mismatches"), "calls": d.get("calls"),
                  "nodes_as_hosts": d.get("nodes_as_hosts"), "seconds": float(took),
                  "rail_messages": [r.get("rail_messages") for r in d.get("per_rank", [])],
                  "replays": [r.get("replays") for r in d.get("per_rank", [])],
                  "errors": errors[:2]}))
PY
)
      row "$line"
      note "hosts split $split $mode: rc=$rc ${took}s $(echo "$line" | cut -c1-500)"
    done
  done
  # A rank on another emulated host killed or stalled: every other rank raises in time.
  if [[ ${HOST_FAULTS:-1} == 1 ]]; then
  FAULT_M=2 fault "hosts-kill-4" 4 "died|did not complete within|stalled" kill --seed 4 --kill-rank 3 --kill-at-call 5 --timeout-s 5 --nodes-as-hosts
  FAULT_M=2 fault "hosts-stall-4" 4 "did not complete within|stalled|died" stall --seed 3 --stall-rank 3 --stall-at-call 4 --timeout-s 5 --nodes-as-hosts
  FAULT_M=2 fault "hosts-kill-2" 2 "died|did not complete within|stalled" kill --seed 8 --kill-rank 1 --kill-at-call 3 --timeout-s 5 --nodes-as-hosts
  FAULT_M=2 fault "hosts-stall-2" 2 "did not complete within|stalled|died" stall --seed 7 --stall-rank 1 --stall-at-call 3 --timeout-s 5 --nodes-as-hosts
  fi
  # A rank on another emulated host aborts mid-call and keeps sending (NCCL's order): its peers
  # learn it from its messages' abort tokens (NOTE [abort relay]); no call after it is valid.
  # At the default 8 hardware queues the released rank's own release copies can sit behind its
  # held waits (paper App. E), so it sends nothing more; with 32 (the demo's setting) they land.
  if [[ ${HOST_FAULTS:-1} == 1 || ${HOST_FAULTS:-1} == release ]]; then
  for connections in default 32; do
    suffix=""
    if [[ $connections == 32 ]]; then export CUDA_DEVICE_MAX_CONNECTIONS=32; suffix="-c32"; fi
    FAULT_M=2 fault "hosts-release-4$suffix" 4 "did not complete within|stalled|abort token|release-rank" release --seed 5 --release-rank 3 --release-at-call 5 --timeout-s 5 --nodes-as-hosts
    FAULT_M=2 fault "hosts-release-2$suffix" 2 "did not complete within|stalled|abort token|release-rank" release --seed 9 --release-rank 1 --release-at-call 4 --timeout-s 5 --nodes-as-hosts
    unset CUDA_DEVICE_MAX_CONNECTIONS
  done
  fi
fi

if has sanitizer; then
  if command -v compute-sanitizer > /dev/null; then
    timeout 400 compute-sanitizer --tool memcheck --target-processes all --error-exitcode 9 \
      "$tide" check-runtime --backend ipc --procs 2 -M 1 -L 2 --groups "37x5,16;20x7" --calls 6 \
      --seed 21 --ring --staged-shards --timeout-s 120 --json > "$LOG/sanitizer.json" 2> "$LOG/sanitizer.err"
    rc=$?
    summary_line=$(cat "$LOG/sanitizer.err" "$LOG/sanitizer.json" | grep -E "ERROR SUMMARY" | sort | uniq -c | head -5 | tr '\n' ' ')
    row "{\"kind\": \"sanitizer\", \"rc\": $rc, \"summary\": $(python3 -c "import json,sys; print(json.dumps(sys.argv[1]))" "$summary_line")}"
    note "compute-sanitizer memcheck 2 procs rc=$rc $(stamp): $summary_line $(head -c 300 "$LOG/sanitizer.json")"
  else
    note "compute-sanitizer: not on this machine"
  fi
fi

if has module; then
  if python_module "$BUILD"; then
    note "module ok $(stamp): $(python3 -c "import tide, tide._C as C; print(tide.__file__, 'ipc allocator', C.ipc_allocator)" 2>&1 | tail -1)"
  else
    rc_all=1
    note "MODULE BUILD FAILED $(stamp)"; grep -E "error|FAILED" "$LOG/build.log" | tail -20 | tee -a "$summary"
  fi
fi

if has package; then
  {
    CMAKE_ARGS="-DTIDE_CUDA=ON -DTIDE_WERROR=OFF" CMAKE_BUILD_PARALLEL_LEVEL=16 \
      python3 -m pip install --no-build-isolation --no-deps -v . &&
      python3 -c "import tide, tide._C as C; print('tide', tide.__version__, 'ipc allocator', C.ipc_allocator)"
  } > "$LOG/package.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "package rc=$rc $(stamp): $(tail -2 "$LOG/package.log" | tr '\n' ' ')"
fi

if has fsdp; then
  TIDE_IPC_RESULTS="$LOG" timeout "${FSDP_TIMEOUT:-500}" python3 -m pytest tests/python/test_fsdp_ipc_gpu.py \
    -q -rs -p no:cacheprovider ${FSDP_SELECT:+-k "$FSDP_SELECT"} > "$LOG/fsdp.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  cp "$LOG"/fsdp-ipc-*.json "$OUT/" 2>/dev/null
  for f in "$LOG"/fsdp-ipc-*.json; do [[ -f $f ]] && row "$(cat "$f")"; done
  note "fsdp ipc parity rc=$rc $(stamp): $(tail -3 "$LOG/fsdp.log" | tr '\n' ' ')"
fi

if has loop; then
  TIDE_LOOP_DEVICE=cuda-shared timeout "${LOOP_TIMEOUT:-500}" python3 -m pytest tests/python/test_fsdp_titan_loop.py \
    -q -rs -p no:cacheprovider > "$LOG/loop.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "titan loop on the GPU rc=$rc $(stamp): $(tail -2 "$LOG/loop.log" | tr '\n' ' ')"
fi

if has demo; then
  timeout "${DEMO_TIMEOUT:-400}" python3 -m tide.demo --procs 4 --steps "${DEMO_STEPS:-6}" --out "$LOG/demo" > "$LOG/demo.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "demo 4 procs rc=$rc $(stamp): $(grep -E "max loss|peak memory|TIDE arena|groups on" "$LOG/demo.log" | tr '\n' ' ')"
  [[ -f "$LOG/demo/summary.json" ]] && cp "$LOG/demo/summary.json" "$OUT/demo-summary.json"
fi

if has memory; then
  # The memory issue's GPU figures: torch's peak and reserved memory, stock vs TIDE, with the
  # processes sharing the GPU (stock on gloo, TIDE on ipc). `tide memory` is the tree's CLI.
  PATH="$(realpath -m "$BUILD")/src/cli:$PATH" timeout "${MEMORY_TIMEOUT:-400}" python3 bench/memory/run.py \
    --worlds ${MEMORY_WORLDS:-2 4} --depths ${MEMORY_DEPTHS:-4 16 64} --repeats "${MEMORY_REPEATS:-2}" \
    --out "$OUT/memory" > "$LOG/memory.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "memory rc=$rc $(stamp): $(grep -A8 '^Goals' "$OUT/memory/README.md" 2>/dev/null | head -1) $(tail -2 "$LOG/memory.log" | tr '\n' ' ' | cut -c1-400)"
fi

if has nsscale; then
  timeout "${NSSCALE_TIMEOUT:-300}" python3 bench/memory/ns_scale.py --tide "$tide" \
    --worlds ${NSSCALE_WORLDS:-2 4} --repeats "${NSSCALE_REPEATS:-1}" \
    --optimizer "${NSSCALE_OPTIMIZER:-default}" --out "$OUT/ns-scale-${NSSCALE_OPTIMIZER:-default}" \
    > "$LOG/nsscale.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "ns-scale rc=$rc $(stamp): $(tail -3 "$LOG/nsscale.log" | tr '\n' ' ' | cut -c1-600)"
fi

row "{\"kind\": \"end\", \"gpu_used_mib_end\": $(gpu_used), \"tide_processes_left\": $(tide_procs)}"
note "done rc=$rc_all $(stamp)"
finish "$rc_all"
