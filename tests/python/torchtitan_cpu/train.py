"""torchtitan's trainer, recorded: ``python train.py <torchtitan's arguments>`` (or torchrun
train.py ...) is ``python -m torchtitan.train <torchtitan's arguments>`` after cpu_shim.apply()
(the CPU patches; TIDE_TITAN_DEVICE=cuda leaves them out, for GPUs) and recorder.install() (a
JSON per rank under $TIDE_TITAN_RECORD, where set). The arguments go to torchtitan unchanged,
TIDE's flag (``--override.imports tide.torchtitan.enable``) included.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cpu_shim  # noqa: E402
import recorder  # noqa: E402

if __name__ == "__main__":
    if os.environ.get("TIDE_TITAN_DEVICE", "cpu") == "cpu":
        cpu_shim.apply()
    recorder.install()
    from torchtitan.train import main  # noqa: PLC0415

    main()
