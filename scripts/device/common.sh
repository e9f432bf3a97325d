# Shared preamble of the device scripts, sourced: the repository root as the working
# directory; $OUT (returned files) and $LOG (logs, packed into logs.tgz by pack_logs: $OUT
# returns at most 8 files); summary.md with note(); STEPS with has(); stamp() for elapsed
# seconds; and the hardware rule: NVLink multicast off in NCCL, PyTorch and NVSHMEM.
#   NAME=nccl DEFAULT_STEPS="build check" source "$(dirname "$0")/common.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-/tmp/tide-$NAME-out}
LOG="$OUT/logs"
mkdir -p "$OUT" "$LOG"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
unset TIDE_ENABLE_MULTIMEM
# tide._C must share torch's libstdc++ (cmake/CheckSharedCxxRuntime.cmake): the image's CXX
# (/opt/gcc) links it statically, so where CXX does, build with the system's GCC instead.
# COMPILERS carries the choice into a build directory configured before (cmake -S ... "${COMPILERS[@]}").
COMPILERS=()
if [[ -n ${CXX:-} && $CXX != /usr/bin/g++ && -x /usr/bin/g++ ]]; then
  probe=$(mktemp -d)
  printf '#include <string>\nstd::string f(long x) { return std::to_string(x); }\n' > "$probe/p.cpp"
  if "$CXX" -shared -fPIC -o "$probe/p.so" "$probe/p.cpp" 2>/dev/null &&
     ! objdump -p "$probe/p.so" | grep -q 'NEEDED.*libstdc++'; then
    export CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++
  fi
  rm -rf "$probe"
fi
[[ -n ${CXX:-} ]] && COMPILERS=(-DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_C_COMPILER="${CC:-gcc}")
[[ -n ${CUDAHOSTCXX:-} ]] && COMPILERS+=(-DCMAKE_CUDA_HOST_COMPILER="$CUDAHOSTCXX")
STEPS=${STEPS:-$DEFAULT_STEPS}
summary="$OUT/summary.md"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
t0=$(date +%s)
stamp() { echo "[$(( $(date +%s) - t0 ))s]"; }
pack_logs() { tar czf "$OUT/logs.tgz" -C "$OUT" logs 2>/dev/null && rm -rf "$LOG"; }
# python_module BUILD: tide._C built in BUILD (configured here with TIDE_PYTHON=ON where the
# caller has not) beside a copy of python/tide in BUILD/pyroot, which goes first on PYTHONPATH
# (pip install . would rebuild the whole tree: minutes of device time). Logs to $LOG/build.log.
python_module() {
  local build=$1 root
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=OFF -DTIDE_PYTHON=ON \
    "${COMPILERS[@]}" >> "$LOG/build.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" --target _C >> "$LOG/build.log" 2>&1 || return 1
  root="$(realpath -m "$build")/pyroot"
  rm -rf "$root" && mkdir -p "$root/tide"
  cp -r python/tide/. "$root/tide/"
  cp "$build"/src/python/_C*.so "$build"/src/python/_version.py "$root/tide/"
  export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
}
