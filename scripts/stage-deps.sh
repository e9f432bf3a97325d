#!/usr/bin/env bash
# Copies TIDE's header-only dependencies and GoogleTest's sources into .deps/ (ignored by
# git) so that a device call can carry them to the GPU machine, which has no package
# registry:  run(command=..., carry=[".deps"]).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
rm -rf .deps && mkdir -p .deps/include
cp -r /usr/include/nlohmann /usr/include/CLI /usr/include/fmt .deps/include/
cp -r /usr/src/googletest .deps/googletest
du -sh .deps
