#!/usr/bin/env bash
# Device call 1 of session 2026-12-07 (issue 49's stale GPU rows), on one H200:
#   run(command="bash bench/results/onenode/h100-2026-12-07/device-call1.sh", carry=[".deps"],
#       kind="nvidia-h200")
# 1. scripts/device/onenode.sh STEPS='build bench fp32' (build dir build-onenode)
# 2. scripts/device/ipc.sh STEPS='module' on the same build dir (tide._C beside python/tide)
# 3. the lending fence's step time (bench/results/memory/ns-scale-h100-ipc-lending-2026-12-07/
#    step_time.py), TIDE_LEND_ARENA=1 vs 0, N = 2 4 8, In-Place, 2 interleaved repeats
# Every part runs under a deadline so that the packing at the end always happens.
set -u
cd "$(dirname "$0")/../../../.."
RET=$OUT; S=/tmp/stage1; rm -rf "$S"; mkdir -p "$S"
start=$(date +%s); END=$((start + ${BUDGET_S:-570}))
left() { local l=$((END - $(date +%s) - ${1:-20})); (( l < 1 )) && l=1; echo $l; }
{ nvidia-smi; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit,pci.bus_id --format=csv; uname -r; nproc; date -u +%FT%TZ; } > "$S/nvidia-smi.txt" 2>&1
echo "== onenode $(date -u +%T)"
OUT=$S/onenode STEPS=${ONENODE_STEPS:-build bench fp32} timeout "$(left 200)" bash scripts/device/onenode.sh
echo "onenode rc=$? at $(( $(date +%s) - start ))s"
echo "== ipc module $(date -u +%T)"
OUT=$S/ipc BUILD_DIR=build-onenode STEPS=module timeout "$(left 60)" bash scripts/device/ipc.sh
echo "ipc module rc=$? at $(( $(date +%s) - start ))s"
export PYTHONPATH="$(realpath -m build-onenode/pyroot)" PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
echo "== step time $(date -u +%T)"
timeout "$(left 25)" python3 bench/results/memory/ns-scale-h100-ipc-lending-2026-12-07/step_time.py \
  --worlds ${ST_WORLDS:-2 4 8} --modes in-place --repeats ${ST_REPEATS:-2} --steps ${ST_STEPS:-20} \
  --stock-worlds ${ST_STOCK:-} --out "$S/step" 2>&1 | tee "$S/step_time.log"
echo "step time rc=${PIPESTATUS[0]} at $(( $(date +%s) - start ))s"
cp "$S/nvidia-smi.txt" "$RET/"
for f in onenode/onenode.md onenode/onenode.json onenode/fp32_direct.md step/step_time.json; do
  [[ -f $S/$f ]] && cp "$S/$f" "$RET/"
done
tar czf "$RET/all1.tgz" -C "$S" . && echo "packed at $(( $(date +%s) - start ))s"
cat "$S/onenode/summary.md" "$S/ipc/summary.md" 2>/dev/null | cut -c1-300
