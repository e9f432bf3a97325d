#!/usr/bin/env bash
# The communicator arena of four Llama-3.1-8B layers at 1 x 8, two all-gathered in bf16 and two
# in fp8 (NOTE [1-byte all-gather items]), each in a slot of its own: the memory model, as the
# runtime lays the arena out. Run from the repository root after scripts/build.sh.
set -euo pipefail
G="14336x4096,4096x14336,4096x14336,4096x4096,1024x4096,1024x4096,4096x4096"
build/src/cli/tide memory -M 1 -L 8 --groups "$G;$G;$G;$G" --ag-dtype bf16,bf16,fp8,fp8 --slots 0,1,2,3
