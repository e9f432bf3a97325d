#!/usr/bin/env bash
# FSDP2's layout copies that TIDE removes, measured with the device's PyTorch (see
# bench/fsdp2/README.md): split_with_sizes_copy copy-out and _chunk_cat bf16->fp32 packing for a
# Llama-3.1-70B layer and a Qwen3-30B-A3B layer at N = 8, 16, 64, on one GPU, no communication.
#   device: run(command="bash scripts/device/fsdp2_copies.sh")      (no build, no carry)
# Writes under $OUT (or /tmp/tide-fsdp2-out):
#   summary.md          what ran, then the script's readable table
#   fsdp2_copies.json   every measurement (medians, p10/p90, bytes, GB/s, step totals, environment)
#   fsdp2_copies.md     the markdown tables
#   fsdp2_copies.log    the script's full output
# ARGS adds arguments (e.g. ARGS="--repeats 50"). Takes well under 2 minutes (about 30 s).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tide-fsdp2-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1  # no NVLink multicast
summary="$OUT/summary.md"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
t0=$(date +%s)

note "## fsdp2_copies.sh on $(hostname) $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>/dev/null | head -1)"
note "$(python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>&1 | tail -1)"

timeout 110 python3 bench/fsdp2/fsdp2_copies.py \
  --json "$OUT/fsdp2_copies.json" --md "$OUT/fsdp2_copies.md" ${ARGS:-} > "$OUT/fsdp2_copies.log" 2>&1
rc=$?
note "fsdp2_copies.py rc=$rc after $(( $(date +%s) - t0 ))s"
if [ $rc -ne 0 ]; then
  tail -20 "$OUT/fsdp2_copies.log" | tee -a "$summary"
  exit $rc
fi
echo '```' >> "$summary"
sed -n '/^reference:/,$p' "$OUT/fsdp2_copies.log" | tee -a "$summary"
echo '```' >> "$summary"
