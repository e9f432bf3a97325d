#!/usr/bin/env bash
# The one-node layout (M = 1; NOTE [one-node TIDE-RS], NOTE [one-node TIDE-AG]) on one GPU, in
# one call of about 9 minutes on an H200 with 16 cores.
#   here:   scripts/stage-deps.sh            (once: GoogleTest and headers into .deps/)
#   device: run(command="bash scripts/device/onenode.sh", carry=[".deps"])
# STEPS (default "build ptxas executor sequence runtime bench fp32") picks steps:
#   build     Release, Ninja, -j16: tide (ipc backend), tide_cuda_executor_tests,
#             tide_cuda_sequence_tests, tide_onenode_bench
#   ptxas     the Level 1 kernels' registers and spills per instance (ptxas -v), the instances
#             the one-node sums launch marked (bf16 and fp32 inputs, kNs -1 for L = 2, 4 and 7
#             for L = 8, accumulate or not) -> ptxas.txt
#   executor  tide_cuda_executor_tests, CudaExecutor.OneNode*, Rs*, Ag* (and the checks): the
#             one-node programs bitwise against the reference executor on the virtual fabric
#   sequence  tide_cuda_sequence_tests, CudaSequence.OneNode* (streams and graphs)
#   runtime   tide check-runtime --backend ipc, 1 x 2, 1 x 4, 1 x 8, In-Place and Slot-Reuse,
#             staged shards and the fp32 -> bf16 cast, FSDP2's ring; calls vary alpha and
#             accumulate; bitwise. And TIDE_ONE_NODE=0 (the multi-node layout) at 1 x 4.
#   bench     tide_onenode_bench: the one-node TIDE-RS for Llama-3.1-8B and 70B layers at
#             1 x 2, 4, 8 on the virtual fabric against the copy ceiling -> onenode.json,
#             onenode.md (BENCH_ARGS adds arguments, e.g. "--models llama3.1-8b")
#   fp32      tide_kernels_bench --fp32-direct: the warp-direct sum of fp32 gradients at 16
#             warps a CTA (spilling) and 8 (no spill), L = 2, 4, 8, with and without
#             accumulate, 1-32 CTAs, bitwise checked -> fp32_direct.json, fp32_direct.md
# Writes under $OUT: summary.md, ptxas.txt, onenode.json, onenode.md, fp32_direct.*, logs.tgz.
# Then here:
# copy onenode.json / onenode.md into bench/results/onenode/ with the command that made them.
set -uo pipefail
NAME=onenode DEFAULT_STEPS="build ptxas executor sequence runtime bench fp32" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build-onenode}
tide="$BUILD/src/cli/tide"
finish() { pack_logs; exit "$1"; }

nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1
note "## onenode.sh on $(hostname) $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1); $(nproc) cores; STEPS='$STEPS'"
note "(virtual ranks share one GPU: the bench's ceiling is one GPU's copy rate, not NVLink)"

rc_all=0
if has build; then
  if ! cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_CUDA=ON -DTIDE_WERROR=OFF \
       "${COMPILERS[@]}" > "$LOG/build.log" 2>&1; then
    note "CONFIGURE FAILED $(stamp)"; tail -40 "$LOG/build.log" | tee -a "$summary"; finish 1
  fi
  if ! cmake --build "$BUILD" -j 16 --target tide tide_cuda_executor_tests tide_cuda_sequence_tests \
       tide_onenode_bench tide_kernels_bench >> "$LOG/build.log" 2>&1; then
    note "BUILD FAILED $(stamp)"; grep -E "error|FAILED" "$LOG/build.log" | head -40 | tee -a "$summary"
    finish 1
  fi
  note "build ok $(stamp)"
fi

if has ptxas; then
  # The kernel file compiled again with ptxas -v (its object to a scratch path), so that the
  # report does not depend on whether the build above recompiled it.
  cmd=$(ninja -C "$BUILD" -t commands src/kernels/CMakeFiles/tide_kernels.dir/level1_sum.cu.o 2>/dev/null | tail -1)
  if [[ -z $cmd ]]; then
    note "ptxas: no compile command for level1_sum.cu in $BUILD"
  else
    scratch=$(mktemp -d)
    cmd=${cmd/ccache /}
    cmd=$(echo "$cmd" | sed -E "s# -o [^ ]+# -o $scratch/level1_sum.o#; s# -MD -MT [^ ]+ -MF [^ ]+##")
    (cd "$BUILD" && eval "$cmd -Xptxas -v") > "$LOG/ptxas-raw.txt" 2>&1
    python3 - "$LOG/ptxas-raw.txt" > "$OUT/ptxas.txt" <<'PY'
import re, subprocess, sys
lines = open(sys.argv[1]).read().splitlines()
rows, entry = [], None
for line in lines:
    m = re.search(r"Compiling entry function '([^']+)'", line)
    if m:
        entry = m.group(1)
        continue
    if entry and "spill stores" in line:
        s = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        rows.append([entry, int(s.group(1)), int(s.group(2)), None])
    if entry and "Used" in line and "registers" in line:
        r = re.search(r"Used (\d+) registers", line)
        if rows and rows[-1][0] == entry:
            rows[-1][3] = int(r.group(1))
        entry = None
names = subprocess.run(["c++filt"], input="\n".join(r[0] for r in rows), capture_output=True,
                       text=True).stdout.splitlines() if rows else []
print("| kernel instance (In: unsigned short = bf16, float = fp32; <In, accumulate, kNs, scale, "
      "depth, threads>) | registers | spill stores | spill loads | one-node sums launch it (<= 32 "
      "CTAs: warp-direct, for the group's gradient dtype) |")
print("| --- | --- | --- | --- | --- |")
for (mangled, st, ld, regs), name in zip(rows, names):
    name = re.sub(r"tide::kernels::\(anonymous namespace\)::", "", name)
    name = re.sub(r"\(tide::kernels::detail::Level1SumParams\)", "", name)
    # The one-node sums (<= 32 CTAs: warp-direct) launch every direct instance but the pipeline.
    one_node = "yes" if "level1_sum_direct_kernel" in name else "no (pipeline, > 32 CTAs)"
    print(f"| {name} | {regs} | {st} | {ld} | {one_node} |")
PY
    rm -rf "$scratch"
    spilling=$(grep -c "direct_kernel" "$OUT/ptxas.txt" 2>/dev/null)
    note "ptxas $(stamp): $spilling direct instances; spilling: $(awk -F'|' '$4+0 > 0 {print $2 "(" $4 " B)"}' "$OUT/ptxas.txt" | tr -s ' ' | tr '\n' ';' | cut -c1-900)"
  fi
fi

if has executor; then
  timeout 300 "$BUILD/tests/exec/tide_cuda_executor_tests" \
    --gtest_filter='CudaExecutorCheck.*:CudaExecutor.OneNode*:CudaExecutor.Rs*:CudaExecutor.Ag*' \
    > "$LOG/executor.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  [[ $rc -eq 124 ]] && note "EXECUTOR TESTS TIMED OUT (300 s)"
  note "executor tests rc=$rc $(stamp): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOG/executor.log" | tr '\n' ' ')"
  grep -E "^\[       OK|^\[  FAILED|Failure|differs|timeout" "$LOG/executor.log" | head -40 | tee -a "$summary"
fi

if has sequence; then
  timeout 180 "$BUILD/tests/exec/tide_cuda_sequence_tests" --gtest_filter='CudaSequence.OneNode*' \
    > "$LOG/sequence.log" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "sequence tests rc=$rc $(stamp): $(grep -E '^\[  (PASSED|FAILED|SKIPPED) |seed' "$LOG/sequence.log" | tr '\n' ' ' | cut -c1-600)"
  grep -E "^\[  FAILED|Failure|differs" "$LOG/sequence.log" | head -20 | tee -a "$summary"
fi

if has runtime; then
  groups="33x7,5x3,9x1;40x12,7x1"
  run_check() {  # name, L, then extra arguments
    local name=$1 l=$2; shift 2
    timeout 180 "$tide" check-runtime --backend ipc --procs "$l" -M 1 -L "$l" --groups "$groups" \
      --calls 8 --seed $((l * 11)) --ring --staged-shards --timeout-s 60 --json "$@" \
      > "$LOG/$name.json" 2> "$LOG/$name.err"
    local rc=$?
    [[ $rc -ne 0 ]] && rc_all=$rc
    note "check-runtime ipc $name rc=$rc $(stamp): $(python3 -c "
import json, sys
try:
    d = json.load(open('$LOG/$name.json'))
    errs = [r['error'] for r in d.get('per_rank', []) if 'error' in r]
    print('passed' if d.get('passed') else 'FAILED', d.get('mismatches'), 'mismatches;',
          'arena', d.get('arena', {}).get('reduce_scatter_bytes'), 'RS bytes;', errs[:1])
except Exception as e:
    print('no JSON:', e, open('$LOG/$name.err').read()[-300:])
" | cut -c1-500)"
  }
  for l in 2 4 8; do
    for mode in in-place slot-reuse; do
      run_check "1x$l-$mode" "$l" --mode "$mode"
      run_check "1x$l-$mode-cast" "$l" --mode "$mode" --cast
    done
  done
  TIDE_ONE_NODE=0 run_check "1x4-in-place-multinode-layout" 4 --mode in-place
  TIDE_ONE_NODE=0 run_check "1x4-slot-reuse-multinode-layout" 4 --mode slot-reuse
fi

if has bench; then
  # shellcheck disable=SC2086
  timeout 240 "$BUILD/bench/onenode/tide_onenode_bench" --repeats 25 --out "$OUT/onenode.json" \
    --md "$OUT/onenode.md" ${BENCH_ARGS:-} > "$LOG/bench.txt" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "bench rc=$rc $(stamp) (onenode.md, onenode.json)"
  grep -E "FAILED|skipped" "$LOG/bench.txt" | head -20 | tee -a "$summary"
  [[ -f $OUT/onenode.md ]] && sed -n '/pull vs push/,$p' "$OUT/onenode.md" | tee -a "$summary"
fi

if has fp32; then
  timeout 240 "$BUILD/bench/kernels/tide_kernels_bench" --fp32-direct --json "$OUT/fp32_direct.json" \
    > "$LOG/fp32_direct.txt" 2>&1
  rc=$?
  [[ $rc -ne 0 ]] && rc_all=$rc
  note "fp32 direct rc=$rc $(stamp) (fp32_direct.json, fp32_direct.md)"
  grep -E "^\||^fp32|^GPU|^copy" "$LOG/fp32_direct.txt" > "$OUT/fp32_direct.md"
  tee -a "$summary" < "$OUT/fp32_direct.md"
fi

note "done rc=$rc_all $(stamp)"
finish "$rc_all"
