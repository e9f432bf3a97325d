#!/usr/bin/env bash
# Compiles TIDE's one-sided NCCL code (NOTE [one-sided messages]) under TIDE_HAS_NCCL_HOST_RMA
# = 1 against NCCL 2.30's headers from PyPI, so that CI builds it although the machines carry
# NCCL 2.28 (cmake/TideNcclRmaCheck.cmake does the compiling). CPU only, no GPU, no NCCL
# library: headers only. Pinned wheels, cached under the build directory:
#   nvidia-nccl-cu13==2.30.7     include/nccl.h
#   nvidia-cuda-runtime==13.0.96 include/cuda_runtime.h, only where no CUDA toolkit has it
#                                (CUDA_HOME, then /usr/local/cuda)
# Fails loudly where pip cannot fetch them.
#
#   scripts/check-nccl-rma.sh            (TIDE_BUILD_DIR: the build directory, default build)
set -euo pipefail
cd "$(dirname "$0")/.."

nccl_pin=2.30.7
cudart_pin=13.0.96
build="${TIDE_BUILD_DIR:-build}"
cache="$build/nccl-rma-headers"
mkdir -p "$cache"

python=python3
command -v "$python" >/dev/null || { echo "check-nccl-rma: python3 is needed (pip fetches the headers)" >&2; exit 1; }
"$python" -m pip --version >/dev/null 2>&1 || { echo "check-nccl-rma: '$python -m pip' is needed to fetch NCCL's headers" >&2; exit 1; }

# fetch PACKAGE VERSION DEST: the wheel's include/ tree into DEST/include (once).
fetch() {
  local package=$1 version=$2 dest=$3
  [[ -f "$dest/.complete" ]] && return 0
  rm -rf "$dest" && mkdir -p "$dest/wheel"
  if ! "$python" -m pip download --quiet --no-deps --only-binary=:all: \
      --dest "$dest/wheel" "$package==$version"; then
    echo "check-nccl-rma: FAILED: pip could not fetch $package==$version (no network or no" \
         "package index?); the one-sided NCCL code is not checked" >&2
    exit 1
  fi
  "$python" - "$dest" <<'PY'
import glob, os, sys, zipfile
dest = sys.argv[1]
wheels = glob.glob(os.path.join(dest, "wheel", "*.whl"))
if len(wheels) != 1:
    sys.exit(f"check-nccl-rma: expected one wheel in {dest}/wheel, found {wheels}")
count = 0
with zipfile.ZipFile(wheels[0]) as z:
    for name in z.namelist():
        if "/include/" not in name or name.endswith("/"):
            continue
        path = os.path.join(dest, "include", name.split("/include/", 1)[1])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            out.write(z.read(name))
        count += 1
if count == 0:
    sys.exit(f"check-nccl-rma: {wheels[0]} holds no headers")
PY
  rm -rf "$dest/wheel"
  touch "$dest/.complete"
}

fetch nvidia-nccl-cu13 "$nccl_pin" "$cache/nccl-$nccl_pin"
cuda_include=""
for prefix in "${CUDA_HOME:-}" /usr/local/cuda; do
  if [[ -n "$prefix" && -f "$prefix/include/cuda_runtime.h" ]]; then
    cuda_include="$prefix/include"
    break
  fi
done
if [[ -z "$cuda_include" ]]; then
  fetch nvidia-cuda-runtime "$cudart_pin" "$cache/cudart-$cudart_pin"
  cuda_include="$cache/cudart-$cudart_pin/include"
fi

echo "== check-nccl-rma: NCCL $nccl_pin headers, CUDA headers in $cuda_include"
cmake -DTIDE_SOURCE_DIR="$PWD" -DTIDE_NCCL_RMA_INCLUDE="$cache/nccl-$nccl_pin/include" \
  -DTIDE_CUDA_INCLUDE="$cuda_include" -DTIDE_CHECK_DIR="$cache/check" \
  -DTIDE_CXX="${CXX:-c++}" -P cmake/TideNcclRmaCheck.cmake
