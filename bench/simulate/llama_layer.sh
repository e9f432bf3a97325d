#!/usr/bin/env bash
# Predicted TIDE vs stock FSDP2 for one Llama-3.1-70B decoder layer at 8 x 8 and 64 x 8 GPUs,
# from the CPU reference executor's cost model (timing only; paper App. G calibration).
# These are model predictions, not measurements. Writes bench/results/simulate/llama_layer.md
# and a timeline picture of the 8 x 8 reduce-scatter. Run after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
tide="${TIDE_BUILD_DIR:-build}/src/cli/tide"
out=bench/results/simulate/llama_layer.md
mkdir -p bench/results/simulate
{
  echo "# One Llama-3.1-70B decoder layer: TIDE vs stock FSDP2 (predicted)"
  echo
  echo "CPU reference executor, timing only, default cost model (paper App. G: NIC 47.5 GB/s,"
  echo "sum 99 GB/s/CTA, landing 21 GB/s/CTA capped at 90, t_rnd 1.3 ms; H200 copy-engine rates;"
  echo "see NOTE [cost model]). Predictions of a first-order model, not measurements."
  echo "TIDE-RS: In-Place, W_wave = L, k = 4, lockstep rounds, 16 sum + 4 landing CTAs. Stock"
  echo "FSDP2: NCCL rings over L channels (16 CTAs) at the rates NCCL measured on 2 x H200, the"
  echo "copy-out and _chunk_cat as SM kernels at the rates PyTorch's own ops measured on an H200"
  echo "(bench/results/simulate/validation.md). Peak buffer: one call's own buffers while it runs."
  echo "At 64 x 8 lockstep TIDE-RS pays 16 network rounds x t_rnd; rounds in flight close that gap"
  echo "(bench/results/simulate/scaling.md)."
  echo "Produced by \`bench/simulate/llama_layer.sh\` on $(date -u +%Y-%m-%d)."
  echo
  echo "| GPUs | collective | system | predicted ms | SM time per GPU (CTA-ms) | peak buffer per GPU (GiB) |"
  echo "|---|---|---|---:|---:|---:|"
  for nodes in 8 64; do
    for collective in all-gather reduce-scatter; do
      for system in tide fsdp2; do
        flag=""; [ "$system" = fsdp2 ] && flag="--baseline"
        "$tide" simulate "$collective" --model llama3.1-70b --nodes "$nodes" --gpus-per-node 8 \
          --timing-only $flag --json |
          python3 -c "
import json, sys
j = json.load(sys.stdin)
print('| %d x 8 | %s | %s | %.2f | %.1f | %.2f |' % ($nodes, j['collective'], j['system'],
      j['predicted_ms'], j['sm_ms_per_gpu'], j['peak_buffer_bytes'] / 2**30))"
      done
    done
  done
  echo
  echo "Commands: \`tide simulate {all-gather,reduce-scatter} --model llama3.1-70b --nodes {8,64}"
  echo "--gpus-per-node 8 --timing-only [--baseline] --json\`."
} > "$out"
"$tide" simulate reduce-scatter --model llama3.1-70b --nodes 2 --gpus-per-node 4 --timing-only \
  --timeline bench/results/simulate/llama_rs_2x4_timeline.svg > /dev/null
echo "wrote $out"
cat "$out"
