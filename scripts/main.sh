#!/usr/bin/env bash
# The README's main command: installs dependencies, builds, and runs TIDE's main job on
# this machine (the CPU reference executor; no GPU needed): one Llama-3.1-70B decoder layer
# on 8 nodes x 8 GPUs — its plans, then TIDE-AG and TIDE-RS against stock FSDP2 with the
# predicted times (timing only, production shapes), then TIDE-RS with real data on a small
# group and a training step of three groups checked bit for bit, and the memory model and
# solver at the paper's points.
# Pass `tide plan` arguments to plan something else, e.g.
#   scripts/main.sh --model qwen3-30b-a3b --nodes 4 --gpus-per-node 8 --mode slot-reuse
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
tide="${TIDE_BUILD_DIR:-build}/src/cli/tide"
if [ $# -gt 0 ]; then
  exec "$tide" plan "$@"
fi
"$tide" plan --model llama3.1-70b --nodes 8 --gpus-per-node 8
for collective in all-gather reduce-scatter; do
  echo
  "$tide" simulate "$collective" --model llama3.1-70b --nodes 8 --gpus-per-node 8 --timing-only
  echo
  "$tide" simulate "$collective" --model llama3.1-70b --nodes 8 --gpus-per-node 8 --timing-only \
    --baseline
done
echo
"$tide" simulate reduce-scatter --shapes 1000x33,77,5x3 --nodes 4 --gpus-per-node 8 --accumulate
echo
# A training step's calls in FSDP2 order on one arena per GPU, every output checked.
"$tide" simulate step --groups "1000x33,77,5x3;640x9;33x21,7" --nodes 4 --gpus-per-node 4
echo
"$tide" memory --nodes 64 --gpus-per-node 8 --round-width 4 --inbox-generations 2 \
  --model llama3.1-70b:output
echo
"$tide" solve --bw-nic 47.5 --bw-sum 99 --bw-land 21 --bw-cap 90 --t-round 1.3 \
  --nodes 8 --gpus-per-node 8 --shard-bytes 26739200
