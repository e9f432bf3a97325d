"""The FSDP2 parity run on GPUs with NCCL: one process per GPU, cases (a), (b), (c), (e), (f),
and (d) HSDP 2 x 2 where there are 4 GPUs or more. Skips where no GPU is present."""

from __future__ import annotations

import pytest
import torch

from test_fsdp_parity import check_case, run_parity

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
CASES = "abcdef" if GPUS >= 4 and GPUS % 2 == 0 else "abcef"


@pytest.mark.skipif(GPUS == 0, reason="no GPU: the NCCL parity run needs one")
@pytest.mark.parametrize("case", list("abcdef"))
def test_parity_gpu(case, tmp_path_factory):
    if case not in CASES:
        pytest.skip("HSDP 2 x 2 needs 4 GPUs")
    run = run_parity(GPUS, tmp_path_factory, device="cuda", cases=CASES)
    check_case(run, case)
    # One NCCL in the process: TIDE's communicator uses the libnccl.so.2 torch loaded.
    libraries = run["cases"][case]["nccl_libraries"]
    assert len(libraries) == 1, f"libnccl mapped from {len(libraries)} files: {libraries}"
