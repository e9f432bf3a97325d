#!/usr/bin/env bash
# Reproduces the planning layer's paper numbers and writes them, with the commands that
# produced them, to bench/results/core/paper_points.md. Run after scripts/build.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
tide="${TIDE_BUILD_DIR:-build}/src/cli/tide"
out=bench/results/core/paper_points.md
run() {
  echo '```'
  echo "\$ tide $*"
  "$tide" "$@"
  echo '```'
  echo
}
{
  echo "# Planning layer against the paper"
  echo
  echo "Machine: $(nproc) CPU cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
  echo "$(date -u +%Y-%m-%d). Produced by \`bench/core/paper_points.sh\`."
  echo
  echo "## App. D: exhaustive plan sweep (paper: 458,304 accepted, 65,472 rejected, 0 violations)"
  echo
  run check-plans --max-nodes 1024 --gpus-per-node 8
  echo "## Sec. 5.4: memory model at M = 64, n_par = 2, k = 4 (paper: 0.594 NS, 0.164 NS; 3.72 NS, 2.29 NS; FSDP2 4 NS)"
  echo "## Sec. 7.4: on Llama's largest group (paper: at most 1.2 and 0.3 GiB against FSDP2's 3.9 GiB)"
  echo
  run memory --nodes 64 --gpus-per-node 8 --round-width 4 --inbox-generations 2 --model llama3.1-70b:output
  echo "## App. G / Sec. 6.3: sizing solver on the paper's 8-node calibration (paper: k = 4, four sum CTAs; training uses 4 landing CTAs)"
  echo
  run solve --bw-nic 47.5 --bw-sum 99 --bw-land 21 --bw-cap 90 --t-round 1.3 --nodes 8 \
    --gpus-per-node 8 --shard-bytes 33554432
  echo "## Sec. 4.1: Level 1 descriptors at (L, M, P) = (8, 64, 30) (paper: 107,520 flat)"
  echo
  shapes=$(printf '4096x4096,%.0s' $(seq 30)); shapes=${shapes%,}
  "$tide" plan --shapes "$shapes" --nodes 64 --gpus-per-node 8 --json |
    python3 -c 'import json,sys; d=json.load(sys.stdin)["rs"]["descriptors"]; print("```\n$ tide plan --shapes 4096x4096 (x30) --nodes 64 --gpus-per-node 8 --json | .rs.descriptors\n" + json.dumps(d, indent=2) + "\n```")'
} > "$out"
echo "wrote $out"
