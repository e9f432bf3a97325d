#!/usr/bin/env bash
# The multi-GPU runs on N >= 2 GPUs of one host, one call (NOTE: multicast stays off, common.sh):
#   build    the CLI and the Python package (scripts/device/runtime.sh, STEPS "build package")
#   splits   tide check-runtime --backend nccl for every M x L split of the GPUs, In-Place and
#            Slot-Reuse, bitwise against the CPU reference -> $OUT/splits.json
#   train    FSDP2 training, stock then TIDE (python -m tide.demo): Llama-3.1-70B decoder
#            layers ($LAYERS, default 4), $TRAIN_STEPS steps (default 60), batch 1 per rank
#            -> $OUT/train/summary.json, loss.png
#   faults   a killed rank and a stalled rank (tide check-runtime --kill-rank / --stall-rank):
#            every other rank must fail within the timeout, no process left -> $OUT/faults.json
#   hosts    emulated hosts (--nodes-as-hosts, NOTE [runtime] 9): every split with M > 1,
#            In-Place and Slot-Reuse, bitwise, every rail put and signal between hosts an
#            ncclSend / ncclRecv on the NCCL fabric's message lanes (NOTE [nccl fabric] 2b)
#            through the sequence runner, rail messages counted per rank; then a kill and a
#            stall of the last rank (another emulated host than rank 0's), and its release
#            (it aborts mid-call and keeps sending: NOTE [abort relay]) -> $OUT/hosts.json.
#            Real hosts take the same path (nccl_layout.hpp: M hosts x C GPUs, two message
#            lanes, abort words of other hosts relayed); on one host only emulated hosts can be
#            formed: check-runtime forks its ranks on one machine, so a run over 2 real hosts
#            needs a launcher on each (torchrun with tide.fsdp), not this script.
#   rma      one-sided rail messages (NOTE [one-sided messages]: ncclPutSignal / ncclWaitSignal,
#            TIDE_NCCL_HOST_RMA=1) against two-sided: on 2+ GPUs and a build against NCCL >= 2.29
#            (else skipped with the reason), every split with M > 1 as emulated hosts, In-Place
#            and Slot-Reuse, run twice with the same seed, two-sided then one-sided; each must
#            match the CPU reference bitwise (so the two match each other bitwise), and the
#            one-sided run must report one-sided all-gathers and reduce-scatters for every group
#            (check-runtime's message_paths), the expert-parallel lane's reduce-scatter (M x 1)
#            excepted: it puts from the gradients, which are not in a window;
#            then `tide-nccl check --messages` without and with the knob -> $OUT/rma.json (the
#            knob must break nothing there; each row lists the paths its one-shot programs took,
#            one-sided only where every message's source and destination are arena regions, so
#            the second run may stay two-sided). Dry run: the host
#            backend runs both passes (the knob changes nothing there), to check the step.
#   onenode  the one-node layout at 1 x N (N = the GPUs; NOTE [one-node TIDE-RS], NOTE [one-node
#            TIDE-AG]): tide check-runtime --backend nccl -M 1 -L N, In-Place and Slot-Reuse,
#            staged shards on FSDP2's ring, odd groups, bitwise,
#            and the same with TIDE_ONE_NODE=0 (the multi-node layout); then tide-nccl bench
#            --one-node (RS as the runtime runs it, AG with staged shards) against NCCL plus
#            FSDP2's pack and copy-out, In-Place and Slot-Reuse, and without --one-node (every
#            split, the multi-node layout) -> $OUT/onenode.json (the runs' rows). The train step
#            runs the one-node layout too (the runtime's default at M = 1).
#   titan    torchtitan's real trainer (the torchtitan 0.3.0 wheel, unedited), stock then TIDE
#            through its one flag (--override.imports tide.torchtitan.enable, tide/torchtitan.py),
#            torchrun over the GPUs, NCCL: llama3 $TITAN_CONFIG (default llama3_debugmodel, as
#            registered: seq 2048, local batch 8; llama3_8b for the 8B shapes), $TITAN_STEPS steps
#            (default 20), one seed for both runs, offline assets (synthetic corpus and tokenizer:
#            tests/python/torchtitan_cpu/assets.py), FSDP over all GPUs and FSDP N/2 x TP 2 ->
#            $OUT/titan/runs.json ({variant: {stock, tide: per-rank losses, step times, report()
#            rows}}: tests/python/torchtitan_cpu/recorder.py; the rank files are in logs.tgz),
#            $OUT/titan/table.md (groups on TIDE, max loss difference, median step times:
#            bench/torchtitan/table.py) and command.txt. Alone: STEPS="build titan". Dry run
#            (BACKEND=host): the same on $GPUS CPU processes through the CPU shim
#            (tests/python/torchtitan_cpu/cpu_shim.py), debugmodel at seq 128, batch 2, 10 steps.
#   summary  $OUT/summary.json (bench/multigpu/summary.py's schema) and $OUT/README.md
#            (bench/multigpu/summary.py)
# Not yet here: the collective benchmark harness (item 2), the all-push landing and
# its Table 3 measurement (item 3), a kill during training (item 4; faults covers the runtime).
# Dry run without GPUs: BACKEND=host GPUS=4 MODEL=demo STEPS="splits rma train titan faults summary".
#   device: run(command="bash scripts/device/multigpu.sh", carry=[".deps"], kind="nvidia-h200-x8")
set -uo pipefail
NAME=multigpu DEFAULT_STEPS="build splits onenode hosts rma train titan faults summary" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build-runtime}
BACKEND=${BACKEND:-nccl}
finish() { pack_logs; exit "$1"; }
export PYTHONUNBUFFERED=1

if [[ "$BACKEND" == nccl ]]; then
  gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
  kind="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x $gpus"
  tide="$BUILD/src/cli/tide"
  model=${MODEL:-llama3.1-70b}
else
  gpus=${GPUS:-4}
  kind="CPU processes x $gpus (dry run, host backend)"
  tide=${TIDE:-build/src/cli/tide}
  model=${MODEL:-demo}
fi
note "## multigpu.sh $(date -u +%FT%TZ): $kind, backend $BACKEND, steps: $STEPS"
rc_all=0

if has build; then
  OUT="$OUT/build" STEPS="build package" bash scripts/device/runtime.sh > "$LOG/build.txt" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
  note "build and package rc=$rc $(stamp)"
  [[ $rc -ne 0 ]] && finish "$rc"
fi

if has splits; then
  : > "$LOG/splits.jsonl"
  for ((l = 1; l <= gpus && l <= 8; ++l)); do
    (( gpus % l == 0 )) || continue
    m=$(( gpus / l ))
    for mode in in-place slot-reuse; do
      timeout 300 "$tide" check-runtime --backend "$BACKEND" -M "$m" -L "$l" \
        --groups "37x5,16,1000x33;20x7,9x11;4096x1024,4096" --calls 18 --seed $((m * 10 + l)) \
        --mode "$mode" --timeout-s 60 --json > "$LOG/split.json" 2> "$LOG/split.err"
      rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
      python3 - "$m" "$l" "$mode" "$rc" "$LOG/split.json" "$LOG/split.err" >> "$LOG/splits.jsonl" <<'PY'
import json, sys
m, l, mode, rc, out, err = sys.argv[1:]
try:
    d = json.load(open(out))
except Exception:
    d = {"passed": False, "error": open(err).read()[-400:]}
print(json.dumps({"M": int(m), "L": int(l), "mode": mode, "exit": int(rc),
                  "passed": bool(d.get("passed")), "mismatches": d.get("mismatches"),
                  "calls": d.get("calls"), "error": d.get("error", "")}))
PY
      note "split ${m}x${l} $mode rc=$rc $(stamp)"
    done
  done
  python3 -c "import json; print(json.dumps([json.loads(l) for l in open('$LOG/splits.jsonl')], indent=1))" > "$OUT/splits.json"
fi

if has onenode; then
  : > "$LOG/onenode.jsonl"
  if (( gpus >= 2 && gpus <= 8 )); then
    for layout in one-node multi-node; do
      for mode in in-place slot-reuse; do
        name="check-1x$gpus-$mode-$layout"
        one_node=1; [[ $layout == multi-node ]] && one_node=0
        TIDE_ONE_NODE=$one_node timeout 300 "$tide" check-runtime --backend "$BACKEND" -M 1 -L "$gpus" \
          --groups "33x7,5x3,9x1;40x12,7x1;1000x33,16" --calls 12 \
          --seed $((gpus * 3)) --mode "$mode" --ring --staged-shards --timeout-s 60 --json \
          > "$LOG/$name.json" 2> "$LOG/$name.err"
        rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
        python3 - "$name" "$rc" "$LOG/$name.json" >> "$LOG/onenode.jsonl" <<'PY'
import json, sys
name, rc, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    d = json.load(open(out))
except Exception as e:
    d = {"per_rank": [{"error": f"no JSON: {e}"}]}
errors = [r["error"] for r in d.get("per_rank", []) if "error" in r]
print(json.dumps({"run": name, "exit": rc, "passed": bool(d.get("passed")) and rc == 0,
                  "mismatches": d.get("mismatches"), "arena": d.get("arena"),
                  "errors": errors[:2]}))
PY
        note "onenode $name rc=$rc: $(tail -1 "$LOG/onenode.jsonl" | cut -c1-300)"
      done
    done
    if [[ "$BACKEND" == nccl ]]; then
      nccl_run="$BUILD/src/nccl_cli/tide-nccl"
      for variant in "one-node" "one-node --rs-slot-reuse" "multi-node"; do
        args=(--cases llama3.1-70b flat128m)
        [[ $variant == one-node* ]] && args+=(--one-node)
        [[ $variant == *--rs-slot-reuse ]] && args+=(--rs-slot-reuse)
        name="bench-$(echo "$variant" | tr -d ' -')"
        timeout 400 "$nccl_run" --spawn "$gpus" bench "${args[@]}" --json "$LOG/$name.json" \
          > "$LOG/$name.log" 2>&1
        rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
        python3 - "$variant" "$rc" "$LOG/$name.json" >> "$LOG/onenode.jsonl" <<'PY'
import json, sys
variant, rc, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    rows = json.load(open(out))["rows"]
except Exception as e:
    rows = [{"error": f"no JSON: {e}"}]
print(json.dumps({"bench": variant, "exit": rc, "rows": rows}))
PY
        note "onenode tide-nccl bench $variant rc=$rc $(stamp):"
        grep -E "^(llama|flat)" "$LOG/$name.log" | tee -a "$summary"
      done
    fi
  else
    note "onenode skipped: $gpus GPUs (1 x N needs 2..8)"
  fi
  python3 -c "import json; print(json.dumps([json.loads(l) for l in open('$LOG/onenode.jsonl')], indent=1))" > "$OUT/onenode.json"
fi

if has hosts; then
  : > "$LOG/hosts.jsonl"
  last=$((gpus - 1))
  for ((l = 1; l < gpus; ++l)); do
    (( gpus % l == 0 )) || continue
    m=$(( gpus / l ))
    runs=(in-place slot-reuse kill)
    # The host backend has no stall or release injection. release: the last rank aborts with
    # its call in flight and keeps sending (ncclSend runs until ncclCommAbort); its peers learn
    # it from its messages' abort tokens (NOTE [abort relay]), the path real hosts take.
    [[ "$BACKEND" != host ]] && runs+=(stall release)
    for run in "${runs[@]}"; do
      case $run in
        kill) extra=(--mode in-place --kill-rank "$last" --kill-at-call 5 --timeout-s 5) ;;
        stall) extra=(--mode in-place --stall-rank "$last" --stall-at-call 5 --timeout-s 5) ;;
        release) extra=(--mode in-place --release-rank "$last" --release-at-call 5 --timeout-s 5) ;;
        *) extra=(--mode "$run" --timeout-s 60) ;;
      esac
      start=$(date +%s)
      timeout 300 "$tide" check-runtime --backend "$BACKEND" -M "$m" -L "$l" --nodes-as-hosts \
        --groups "37x5,16,1000x33;20x7,9x11;300x17" --calls 18 --seed $((m * 10 + l)) --ring \
        --staged-shards --json "${extra[@]}" > "$LOG/host.json" 2> "$LOG/host.err"
      rc=$?; took=$(( $(date +%s) - start ))
      left=$(pgrep -f "tide check-runtime" | wc -l)
      python3 - "$m" "$l" "$run" "$rc" "$took" "$left" "$LOG/host.json" "$LOG/host.err" >> "$LOG/hosts.jsonl" <<'PY'
import json, sys
m, l, run, rc, took, left, out, err = sys.argv[1:]
try:
    d = json.load(open(out))
except Exception:
    d = {"passed": False, "per_rank": [], "error": open(err).read()[-400:]}
ranks = d.get("per_rank", [])
row = {"M": int(m), "L": int(l), "run": run, "exit": int(rc), "seconds": int(took),
       "processes_left": int(left), "rail_messages": [r.get("rail_messages") for r in ranks],
       "errors": [r.get("error", "")[:300] for r in ranks if r.get("error")][:2]}
if run in ("kill", "stall", "release"):
    failed = [r for r in ranks if r.get("error")]
    need = int(m) * int(l) - (1 if run == "kill" else 0)  # a released rank raises too
    row["all_ranks_raised_within_timeout"] = (int(rc) == 1 and len(failed) >= need
                                              and int(took) < 60 and int(left) == 0
                                              and not d.get("mismatches"))
    row["relayed"] = sum("abort token" in r.get("error", "") for r in ranks)
else:
    row["passed"] = bool(d.get("passed")) and int(rc) == 0 and all(
        (r.get("rail_messages") or 0) > 0 for r in ranks)
    row["mismatches"] = d.get("mismatches")
print(json.dumps(row))
PY
      ok=$(tail -1 "$LOG/hosts.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); print(int(r.get('passed', r.get('all_ranks_raised_within_timeout', False))))")
      [[ $ok == 1 ]] || rc_all=1
      note "hosts ${m}x${l} $run rc=$rc ${took}s: $(tail -1 "$LOG/hosts.jsonl" | cut -c1-300)"
    done
  done
  python3 -c "import json; print(json.dumps([json.loads(l) for l in open('$LOG/hosts.jsonl')], indent=1))" > "$OUT/hosts.json"
fi

if has rma; then
  : > "$LOG/rma.jsonl"
  skip=""
  if [[ "$BACKEND" == nccl ]]; then
    # The NCCL the build compiled against decides TIDE_HAS_NCCL_HOST_RMA (version_gates.hpp).
    nccl_h="$(sed -n 's/^TIDE_NCCL_INCLUDE:PATH=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)/nccl.h"
    nccl_version=$(awk '/^#define NCCL_MAJOR/{a=$3} /^#define NCCL_MINOR/{b=$3}
      /^#define NCCL_PATCH/{c=$3} END{if (a != "") print a "." b "." c}' "$nccl_h" 2>/dev/null)
    if (( gpus < 2 )); then
      skip="needs 2+ GPUs (this machine has $gpus)"
    elif [[ -z "$nccl_version" ]]; then
      skip="no nccl.h found through $BUILD/CMakeCache.txt (build first)"
    elif ! awk -v v="$nccl_version" 'BEGIN{split(v, p, "."); exit !(p[1] > 2 || (p[1] == 2 && p[2] >= 29))}'; then
      skip="NCCL $nccl_version < 2.29 (the build's $nccl_h): no ncclPutSignal / ncclWaitSignal"
    fi
  fi
  if [[ -n "$skip" ]]; then
    note "rma skipped: $skip"
    python3 -c "import json, sys; print(json.dumps({'skipped': sys.argv[1]}))" "$skip" > "$OUT/rma.json"
  else
    for ((l = 1; l < gpus; ++l)); do
      (( gpus % l == 0 )) || continue
      m=$(( gpus / l ))
      for mode in in-place slot-reuse; do
        for path in two-sided one-sided; do
          rma_env=(env -u TIDE_NCCL_HOST_RMA)
          [[ $path == one-sided ]] && rma_env=(env TIDE_NCCL_HOST_RMA=1)
          timeout 300 "${rma_env[@]}" "$tide" check-runtime --backend "$BACKEND" -M "$m" -L "$l" \
            --nodes-as-hosts --groups "37x5,16,1000x33;20x7,9x11;300x17" --calls 18 \
            --seed $((m * 10 + l)) --ring --staged-shards --mode "$mode" --timeout-s 60 --json \
            > "$LOG/rma-$path.json" 2> "$LOG/rma-$path.err"
          echo $? > "$LOG/rma-$path.rc"
        done
        python3 - "$m" "$l" "$mode" "$BACKEND" "$LOG" >> "$LOG/rma.jsonl" <<'PY'
import json, sys
m, l, mode, backend, log = sys.argv[1:]
row = {"M": int(m), "L": int(l), "mode": mode}
for path in ("two-sided", "one-sided"):
    rc = int(open(f"{log}/rma-{path}.rc").read())
    try:
        d = json.load(open(f"{log}/rma-{path}.json"))
    except Exception:
        d = {"passed": False, "per_rank": [], "error": open(f"{log}/rma-{path}.err").read()[-400:]}
    ranks = d.get("per_rank", [])
    paths = sorted({p for r in ranks for p in r.get("message_paths", []) if p})
    row[path] = {"exit": rc, "passed": bool(d.get("passed")) and rc == 0,
                 "mismatches": d.get("mismatches"), "message_paths": paths,
                 "rail_messages": [r.get("rail_messages") for r in ranks],
                 "error": d.get("error", "")[:300]}
one, two = row["one-sided"], row["two-sided"]
# Bitwise: both runs match the CPU reference of the same seed exactly (0 mismatches).
row["bitwise_equal"] = one["passed"] and two["passed"] and not one["mismatches"] and not two["mismatches"]
# Every group's all-gather one-sided (staged shards are copied into the arena's stage first),
# and its reduce-scatter too, except on the expert-parallel lane (M x 1: it puts straight from
# the gradients, caller memory, so it stays two-sided and names the window rule).
def taken(p):
    ag, _, rest = p.partition("/")
    rs = rest.split(" ", 1)[0]
    return ag == "one-sided" and (rs == "one-sided" or "not in the sender's registered window" in p)
row["one_sided_taken"] = bool(one["message_paths"]) and all(taken(p) for p in one["message_paths"])
row["passed"] = row["bitwise_equal"] and (row["one_sided_taken"] or backend == "host")
print(json.dumps(row))
PY
        ok=$(tail -1 "$LOG/rma.jsonl" | python3 -c "import json,sys; print(int(json.load(sys.stdin)['passed']))")
        [[ $ok == 1 ]] || rc_all=1
        note "rma ${m}x${l} $mode: $(tail -1 "$LOG/rma.jsonl" | cut -c1-400)"
      done
    done
    if [[ "$BACKEND" == nccl ]]; then
      nccl_run="$BUILD/src/nccl_cli/tide-nccl"
      for path in two-sided one-sided; do
        rma_env=(env -u TIDE_NCCL_HOST_RMA)
        [[ $path == one-sided ]] && rma_env=(env TIDE_NCCL_HOST_RMA=1)
        timeout 300 "${rma_env[@]}" "$nccl_run" --spawn "$gpus" check --messages \
          --json "$LOG/rma-check-$path.json" > "$LOG/rma-check-$path.log" 2>&1
        rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
        # The paths its one-shot programs took (CudaExecutor::message_path(), per case).
        python3 - "$path" "$rc" "$LOG/rma-check-$path.json" >> "$LOG/rma.jsonl" <<'PY'
import json, sys
path, rc, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
try:
    paths = sorted({c.get("message_path", "") for c in json.load(open(out))["cases"]} - {""})
except Exception:
    paths = []
print(json.dumps({"check_messages": path, "exit": rc, "message_paths": paths}))
PY
        note "rma tide-nccl check --messages $path rc=$rc: $(tail -1 "$LOG/rma-check-$path.log")"
      done
    fi
    python3 -c "import json; print(json.dumps([json.loads(l) for l in open('$LOG/rma.jsonl')], indent=1))" > "$OUT/rma.json"
  fi
fi

if has train; then
  layers=${LAYERS:-4}
  args=(--steps "${TRAIN_STEPS:-60}" --procs "$gpus" --model "$model" --out "$OUT/train")
  [[ "$model" != demo ]] && args+=(--layers "$layers" --batch 1)
  timeout 1200 python3 -m tide.demo "${args[@]}" > "$LOG/train.txt" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
  note "train rc=$rc $(stamp): $(grep -E 'max loss|step time|peak memory|groups on TIDE' "$LOG/train.txt" | tr '\n' ';')"
fi

if has faults; then
  : > "$LOG/faults.jsonl"
  for fault in kill stall; do
    case $fault in
      kill) extra=(--kill-rank 1 --kill-at-call 5) ;;
      stall) extra=(--stall-rank 1 --stall-at-call 5) ;;
    esac
    start=$(date +%s)
    timeout 120 "$tide" check-runtime --backend "$BACKEND" -M 1 -L "$gpus" --groups "37x5,16;20x7" \
      --calls 12 --seed 5 --timeout-s 5 --json "${extra[@]}" > "$LOG/fault.json" 2> "$LOG/fault.err"
    rc=$?
    took=$(( $(date +%s) - start ))
    left=$(pgrep -f "tide check-runtime" | wc -l)
    python3 - "$fault" "$rc" "$took" "$left" "$gpus" "$LOG/fault.json" >> "$LOG/faults.jsonl" <<'PY'
import json, sys
fault, rc, took, left, gpus, out = sys.argv[1:]
try:
    d = json.load(open(out))
except Exception:
    d = {}
ranks = d.get("per_rank", [])
failed = [r for r in ranks if r.get("error")]
# Every rank but the faulty one reports the failure (a stalled rank may report it too).
raised = len(failed) >= int(gpus) - 1 and int(rc) == 1 and int(took) < 60 and int(left) == 0
print(json.dumps({"fault": f"{fault} rank 1 at call 5", "exit": int(rc), "seconds": int(took),
                  "processes_left": int(left), "ranks_reporting": len(failed),
                  "all_ranks_raised_within_timeout": raised,
                  "first_error": failed[0]["error"][:300] if failed else ""}))
PY
    note "fault $fault rc=$rc ${took}s: $(tail -1 "$LOG/faults.jsonl" | cut -c1-300)"
  done
  python3 -c "import json; print(json.dumps([json.loads(l) for l in open('$LOG/faults.jsonl')], indent=1))" > "$OUT/faults.json"
fi

if has titan; then
  # Per-rank JSONs under $LOG/titan (packed into logs.tgz: $OUT returns at most 8 files);
  # $OUT/titan holds the merged runs.json, table.md and command.txt.
  titan="$OUT/titan" runs="$LOG/titan" assets=$(mktemp -d)
  mkdir -p "$titan" "$runs"
  if ! python3 -c 'import torchtitan, tokenizers' 2>/dev/null; then
    note "titan skipped: torchtitan or tokenizers not installed (scripts/install-python-deps.sh)"
  elif (( gpus < 2 || gpus % 2 )); then
    note "titan skipped: $gpus GPUs (FSDP N/2 x TP 2 needs an even N >= 2)"
  else
    seed=${TIDE_TEST_SEED:-$RANDOM}
    python3 tests/python/torchtitan_cpu/assets.py "$assets" "$seed" > "$LOG/titan-assets.json"
    config=${TITAN_CONFIG:-llama3_debugmodel}
    common=(--module llama3 --config "$config" --debug.seed "$seed"
            --hf_assets_path "$assets/tokenizer"
            --dataloader.dataset c4_test --dataloader.dataset_path "$assets/data"
            --training.steps "${TITAN_STEPS:-20}" --metrics.log_freq 1)
    if [[ "$BACKEND" == nccl ]]; then
      device=cuda
    else  # dry run: CPU processes through the CPU shim, gloo, TIDE's host backend
      device=cpu
      common+=(--training.steps 10 --training.seq_len 128 --training.local_batch_size 2
               --comm.train_timeout_seconds 600)
    fi
    note "titan: $config, $gpus ranks ($device), seed $seed"
    for variant in "fsdp$gpus" "fsdp$((gpus / 2))-tp2"; do
      extra=()
      [[ $variant == *-tp2 ]] && extra=(--parallelism.tensor_parallel_degree 2)
      for run in stock tide; do
        flag=()
        [[ $run == tide ]] && flag=(--override.imports tide.torchtitan.enable)
        dir="$runs/$variant/$run"
        mkdir -p "$dir"
        TIDE_TITAN_DEVICE=$device TIDE_TITAN_RECORD="$dir" HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 \
          HF_DATASETS_CACHE="$assets/hf-cache" timeout 900 \
          python3 -m torch.distributed.run --standalone --nproc_per_node "$gpus" \
          tests/python/torchtitan_cpu/train.py "${common[@]}" --dump_folder "$assets/dump" \
          "${flag[@]}" "${extra[@]}" > "$LOG/titan-$variant-$run.txt" 2>&1
        rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
        note "titan $variant $run rc=$rc $(stamp): $(grep -o 'tide.torchtitan: after.*' "$LOG/titan-$variant-$run.txt" | head -1 | cut -c1-300)"
      done
    done
    echo "python3 -m torch.distributed.run --standalone --nproc_per_node $gpus tests/python/torchtitan_cpu/train.py ${common[*]} [--override.imports tide.torchtitan.enable] [--parallelism.tensor_parallel_degree 2] (TIDE_TITAN_DEVICE=$device; assets: tests/python/torchtitan_cpu/assets.py DIR $seed)" > "$titan/command.txt"
    python3 - "$runs" > "$titan/runs.json" <<'PY'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
print(json.dumps({v.name: {r.name: [json.loads(f.read_text()) for f in sorted(r.glob("rank*.json"))]
                           for r in sorted(v.iterdir()) if r.is_dir()}
                  for v in sorted(root.iterdir()) if v.is_dir()}))
PY
    python3 bench/torchtitan/table.py "$runs" --out "$titan/table.md" | tee -a "$summary"
    rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
  fi
  rm -rf "$assets"
fi

if has summary; then
  python3 bench/multigpu/summary.py "$OUT" --gpus "$gpus" --kind "$kind" >> "$summary" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
  note "summary rc=$rc $(stamp)"
fi

note "done rc=$rc_all $(stamp)"
finish "$rc_all"
