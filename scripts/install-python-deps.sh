#!/usr/bin/env bash
# Installs what the Python package, its tests and the demo need, from PyPI: torch (>= 2.11),
# nanobind and scikit-build-core (to build), matplotlib (the demo's plot), pytest, numpy,
# expecttest (torch's own FSDP2 test classes import it), and for tests/python/test_torchtitan.py
# torchtitan 0.3.0 (Python >= 3.11; its wheel pulls in spmd_types 0.2.3, torchdata, datasets,
# tyro, torch_checkpointing, safetensors, tensorboard, wandb, einops and pillow, none of which
# asks for another torch than >= 2.11) and tokenizers (the test's offline tokenizer), and for
# tests/python/test_fsdp_torchao_float8.py torchao 0.18.0 (float8 training; no dependencies).
# Into the python3 on the PATH, or into .venv (made here, seeing the system's packages) where
# that python3 refuses installs (PEP 668). Idempotent: what is present is left alone.
# Prints the python to use on its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

python=python3
if ! "$python" -m pip --version >/dev/null 2>&1 ||
   "$python" -c 'import sys, sysconfig, os; sys.exit(0 if os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")) and sys.prefix == sys.base_prefix else 1)'; then
  if [ ! -x .venv/bin/python ]; then
    "$python" -m venv --system-site-packages .venv >&2 ||
      { echo "install-python-deps: need python3-venv (apt-get install python3-venv)" >&2; exit 1; }
  fi
  python="$PWD/.venv/bin/python"
fi

missing=()
"$python" - <<'PY' || missing+=(torch)
import sys
try:
    import torch
except ImportError:
    sys.exit(1)
major, minor = (int(x) for x in torch.__version__.split(".")[:2])
sys.exit(0 if (major, minor) >= (2, 11) else 1)
PY
for module in nanobind scikit_build_core matplotlib pytest numpy expecttest tokenizers; do
  "$python" -c "import $module" >/dev/null 2>&1 || missing+=("$module")
done
# torchtitan 0.3.0 needs Python >= 3.11; on older ones test_torchtitan.py skips.
if "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
  "$python" - <<'PY' >/dev/null 2>&1 || missing+=(torchtitan)
import sys
from importlib.metadata import version
import torchtitan
sys.exit(0 if version("torchtitan") == "0.3.0" else 1)
PY
fi
"$python" - <<'PY' >/dev/null 2>&1 || missing+=(torchao)
import sys
from importlib.metadata import version
sys.exit(0 if version("torchao") == "0.18.0" else 1)
PY
if [ ${#missing[@]} -gt 0 ]; then
  packages=()
  for m in "${missing[@]}"; do
    case "$m" in
      torch) packages+=("torch>=2.11") ;;
      scikit_build_core) packages+=("scikit-build-core>=0.10") ;;
      torchtitan) packages+=("torchtitan==0.3.0") ;;
      torchao) packages+=("torchao==0.18.0") ;;
      *) packages+=("$m") ;;
    esac
  done
  echo "install-python-deps: installing ${packages[*]} (torch is a large download)" >&2
  "$python" -m pip install --quiet --disable-pip-version-check "${packages[@]}" >&2
fi
echo "$python"
