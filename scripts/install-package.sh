#!/usr/bin/env bash
# Builds and installs the Python package (`pip install .`: the C++ core through CMake, the
# module tide._C, the `tide` CLI) into the python that scripts/install-python-deps.sh picks.
# CUDA parts are built only where a GPU is visible (TIDE_CUDA=ON forces them, OFF drops them).
# Output goes to build/logs/; one progress line is shown. Prints the python on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/progress.sh
run_quietly build/logs/install-deps.log "tide: system packages" scripts/install-deps.sh >&2
run_quietly build/logs/python-deps.log "tide: Python packages (torch, nanobind, ...)" \
  scripts/install-python-deps.sh >&2
python=$(tail -1 build/logs/python-deps.log)
# A development link (site-packages/tide -> a source tree) would make pip's uninstall step move
# and delete the linked sources; drop the link, pip then installs a real copy.
linked=$("$python" -c 'import os, sysconfig; p = os.path.join(sysconfig.get_paths()["purelib"], "tide"); print(p if os.path.islink(p) else "")')
if [[ -n "$linked" ]]; then
  echo "tide: removing the development link $linked -> $(readlink "$linked")" >&2
  rm "$linked"
fi
cmake_args=${CMAKE_ARGS:-}
if command -v ccache >/dev/null; then
  cmake_args="$cmake_args -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache"
fi
CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
  run_quietly build/logs/pip-install.log "tide: building the package (pip install .)" \
  "$python" -m pip install --no-build-isolation --disable-pip-version-check -v . >&2
echo "$python"
