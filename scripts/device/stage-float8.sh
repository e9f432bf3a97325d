#!/usr/bin/env bash
# Puts torchao's wheel for the device image (Python 3.12, torch 2.11: torchao 0.18.0) into
# .deps/wheels/ (ignored by git), which scripts/device/float8.sh installs there: the device
# has no package registry.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps/wheels
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 -d .deps/wheels "torchao==0.18.0"
ls -l .deps/wheels
