#!/usr/bin/env bash
# The README's main command: builds and installs the Python package (`pip install .`, only
# what this machine can run: no CUDA kernels without a GPU), then trains a small Llama-style
# decoder with FSDP2 twice, stock and with TIDE (python -m tide.demo): 4 CPU processes on
# TIDE's host backend without a GPU, every GPU with NCCL where there are. It prints the losses
# side by side with their largest difference, step times, the layout-copy bytes TIDE avoided
# per step, peak memory and the groups on TIDE, and writes tide-demo/summary.json and
# tide-demo/loss.png. Build output goes to build/logs/. Arguments go to the demo, e.g.
#   scripts/main.sh --steps 20 --out /tmp/demo
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(scripts/install-package.sh | tail -1)
"$python" -m tide.demo "$@"
