#!/usr/bin/env bash
# The README's main command: installs dependencies, builds, and runs TIDE's main job on
# this machine. Today that is the planning layer on a real model: the layout, TIDE-AG and
# TIDE-RS plans of one Llama-3.1-70B decoder layer on 8 nodes x 8 GPUs, the plan validator's
# verdict, the memory model at the paper's 64-node point, and the sizing solver on the
# paper's calibration. Pass other `tide plan` arguments to plan something else, e.g.
#   scripts/main.sh --model qwen3-30b-a3b --nodes 4 --gpus-per-node 8 --mode slot-reuse
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
tide="${TIDE_BUILD_DIR:-build}/src/cli/tide"
if [ $# -gt 0 ]; then
  exec "$tide" plan "$@"
fi
"$tide" plan --model llama3.1-70b --nodes 8 --gpus-per-node 8
echo
"$tide" memory --nodes 64 --gpus-per-node 8 --round-width 4 --inbox-generations 2 \
  --model llama3.1-70b:output
echo
"$tide" solve --bw-nic 47.5 --bw-sum 99 --bw-land 21 --bw-cap 90 --t-round 1.3 \
  --nodes 8 --gpus-per-node 8 --shard-bytes 26739200
