#!/usr/bin/env bash
# Device call 2 of session 2026-12-07: bench/memory/ns_scale.py at N = 2 4 8 through
# scripts/device/ipc.sh (STEPS='build module nsscale', build dir build-onenode as call 1),
# first with the arena lent (default), then with TIDE_LEND_ARENA=0.
#   run(command="bash bench/results/memory/ns-scale-h100-ipc-lending-2026-12-07/device-call2.sh",
#       carry=[".deps"], kind="nvidia-h200")
set -u
cd "$(dirname "$0")/../../../.."
RET=$OUT; S=/tmp/stage2; rm -rf "$S"; mkdir -p "$S"
start=$(date +%s); END=$((start + ${BUDGET_S:-560}))
left() { local l=$((END - $(date +%s) - ${1:-15})); (( l < 1 )) && l=1; echo $l; }
{ nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv; uname -r; date -u +%FT%TZ; } > "$S/nvidia-smi.txt" 2>&1
echo "== ns-scale lend default $(date -u +%T)"
OUT=$S/lend1 BUILD_DIR=build-onenode STEPS='build module nsscale' NSSCALE_WORLDS='2 4 8' \
  NSSCALE_TIMEOUT=$(left 200) bash scripts/device/ipc.sh
echo "lend1 rc=$? at $(( $(date +%s) - start ))s"
echo "== ns-scale TIDE_LEND_ARENA=0 $(date -u +%T)"
TIDE_LEND_ARENA=0 OUT=$S/lend0 BUILD_DIR=build-onenode STEPS='module nsscale' NSSCALE_WORLDS='2 4 8' \
  NSSCALE_TIMEOUT=$(left 15) bash scripts/device/ipc.sh
echo "lend0 rc=$? at $(( $(date +%s) - start ))s"
cp "$S/nvidia-smi.txt" "$RET/"
for d in lend1 lend0; do
  [[ -f $S/$d/ns-scale-default/README.md ]] && cp "$S/$d/ns-scale-default/README.md" "$RET/ns-scale-$d.md"
  [[ -f $S/$d/ns-scale-default/results.json ]] && cp "$S/$d/ns-scale-default/results.json" "$RET/ns-scale-$d.json"
done
tar czf "$RET/all2.tgz" -C "$S" . && echo "packed at $(( $(date +%s) - start ))s"
cat "$S/lend1/summary.md" "$S/lend0/summary.md" 2>/dev/null | cut -c1-400
