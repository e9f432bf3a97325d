#!/usr/bin/env bash
# torchao float8 training on one GPU, stock vs TIDE (bench/float8/run.py: Float8Linear with
# float8 all-gather and precomputed dynamic scales), with 2 and 4 processes on the GPU: TIDE on
# its ipc backend, stock FSDP2 on gloo with the same CUDA tensors.
#   here:   scripts/device/stage-float8.sh         (once: torchao's wheel into .deps/wheels/)
#   device: run(command="bash scripts/device/float8.sh", carry=[".deps"])
# FLOAT8_WORLDS (default "2 4"), FLOAT8_SHAPE (default h200: worker.py's SHAPES), FLOAT8_DEVICE
# (default cuda-shared; cpu for a smoke test here). The image's torch is used; torchao, where
# the image lacks it, is installed from the carried wheel into a scratch directory.
# Writes under $OUT: summary.md, float8/ (results.json, README.md, the workers' JSONs), logs.tgz.
set -uo pipefail
NAME=float8 DEFAULT_STEPS="module float8" source "$(dirname "$0")/common.sh"
BUILD=${BUILD_DIR:-build-float8}
export PYTHONUNBUFFERED=1
note "## float8.sh on $(hostname) $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1), $(nproc) cores"
nvidia-smi > "$LOG/nvidia-smi.txt" 2>&1
rc_all=0
site=$(mktemp -d)
if ! python3 -c "import torchao" 2>/dev/null; then
  wheel=$(ls .deps/wheels/torchao-*.whl 2>/dev/null | head -1)
  [[ -n $wheel ]] || { note "NO TORCHAO: run scripts/device/stage-float8.sh here first"; pack_logs; exit 1; }
  python3 -m pip install --no-deps --no-index --target "$site" "$wheel" > "$LOG/torchao.log" 2>&1 ||
    { note "TORCHAO INSTALL FAILED"; tail -5 "$LOG/torchao.log" | tee -a "$summary"; pack_logs; exit 1; }
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
note "torch $(python3 -c 'import torch; print(torch.__version__)'), torchao $(python3 -c 'import torchao; print(torchao.__version__)' 2>&1 | tail -1)"
if has module; then
  if python_module "$BUILD"; then
    note "module ok $(stamp)"
  else
    note "MODULE BUILD FAILED $(stamp)"; grep -E "error|FAILED" "$LOG/build.log" | tail -20 | tee -a "$summary"
    pack_logs; exit 1
  fi
fi
if has float8; then
  python3 bench/float8/run.py --device "${FLOAT8_DEVICE:-cuda-shared}" --shape "${FLOAT8_SHAPE:-h200}" \
    --worlds ${FLOAT8_WORLDS:-2 4} --bf16 2 --timeout 200 --out "$OUT/float8" > "$LOG/float8.log" 2>&1
  rc=$?; [[ $rc -ne 0 ]] && rc_all=$rc
  note "float8 rc=$rc $(stamp)"
  tail -20 "$LOG/float8.log" | tee -a "$summary"
fi
pack_logs
exit $rc_all
