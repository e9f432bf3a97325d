#!/usr/bin/env bash
# TIDE-RS over NCCL on the GPUs of one host: a sweep of its knobs (landing and sum CTA budgets,
# Level 1 staging chunk) on flat128m and a Llama-3.1-70B layer, after scripts/device/nccl.sh
# built tide-nccl in $BUILD_DIR (default build-nccl; same machine, still warm) or builds it.
#   device: run(kind="nvidia-h200-x2", command="bash scripts/device/nccl_rs_sweep.sh", carry=[".deps"])
# Writes $OUT/rs-sweep-<name>.json per configuration, $OUT/rs-sweep.log, and the withhold fault
# log (a credit one rank owes a peer: every rank must fail naming the wait).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/tide-nccl-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BUILD=${BUILD_DIR:-build-nccl}
GPUS=${GPUS:-$(nvidia-smi -L | wc -l)}
if [[ ! -x "$BUILD/src/nccl_cli/tide-nccl" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=OFF > "$OUT/build.log" 2>&1 &&
    cmake --build "$BUILD" -j 32 --target tide-nccl >> "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
fi
RUN="$BUILD/src/nccl_cli/tide-nccl"
log="$OUT/rs-sweep.log"
: > "$log"
TIDE_FABRIC_TIMEOUT_S=60 timeout 120 "$RUN" --spawn "$GPUS" check --fault withhold --run-timeout 5 \
  >> "$log" 2>&1
echo "withhold rc=$? (expect 1)" | tee -a "$log"
for cfg in "default:" "land16:--rs-landing-ctas 16" "land32-sum32:--rs-landing-ctas 32 --rs-sum-ctas 32" \
           "chunk:--rs-chunk 65536" "chunk-land16:--rs-chunk 65536 --rs-landing-ctas 16"; do
  name=${cfg%%:*}; args=${cfg#*:}
  echo "== $name: $args" | tee -a "$log"
  timeout 150 "$RUN" --spawn "$GPUS" bench --ops rs --cases flat128m llama3.1-70b --repeats 10 \
    $args --json "$OUT/rs-sweep-$name.json" 2>&1 | tee -a "$log"
done
