"""torchtitan's real trainer (the unedited torchtitan 0.3.0 wheel) on 4 CPU processes (gloo,
TIDE's host backend), stock vs TIDE turned on as a torchtitan user does, with one flag:
``--override.imports tide.torchtitan.enable``. llama3 ``debugmodel`` (as registered), 10 steps,
for each variant: torchtitan's defaults (spmd_backend spmd_types), TP 2 x FSDP 2, HSDP 2 x 2,
compile + full activation checkpointing + 2 micro-batches, and spmd_backend partial_dtensor.

Checks per variant: every step's loss within LOSS_RTOL of stock's (the largest difference is
printed, and whether bitwise); every FSDP group on TIDE with all-gathers and reduce-scatters
made by TIDE after training; no stock call but the traced first iteration's (TRACED). The
defaults variant also saves torchtitan checkpoints (DCP, steps 5 and 10) and a new TIDE run
resumes from step 5: with the flag, torchtitan loads the checkpoint after tide.fsdp.enable (the
optimizer is built before the load); the resumed losses must equal the uninterrupted run's
bitwise.

The trainer runs through tests/python/torchtitan_cpu/train.py: cpu_shim.apply() (torchtitan
has no CPU path: the patches are explained there), a recorder writing a JSON per rank, then
torchtitan.train.main() with the command line below. Data and tokenizer are built offline
from the seed (torchtitan_cpu/assets.py). Seed: TIDE_TEST_SEED (printed), the same for the
stock and the TIDE run of a variant (torchtitan's --debug.seed and the synthetic corpus).
TIDE_TORCHTITAN_OUT=DIR keeps the JSONs (DIR/<variant>/{stock,tide}/rank<r>.json) and writes
DIR/table.md (bench/torchtitan/table.py).

Wall time: 11 launches of 4 processes (5 variants x stock and TIDE, the resume), 9 to 10 CPU
minutes in all (each process imports torch, torchtitan and inductor: ~6 s); on 2 cores 5.5 min
when the machine is otherwise idle, 9 min with other jobs at load 5 to 8
(bench/results/torchtitan/cpu-2026-12-07/).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ranks import run_ranks
from seed import tide_test_seed

pytest.importorskip("torchtitan", minversion="0.3")
pytest.importorskip("tokenizers")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
TRAIN = HERE / "torchtitan_cpu" / "train.py"
WORLD = 4
STEPS = 10
LOCAL_BATCH = 2
SEQ_LEN = 128
# Relative loss difference allowed between stock and TIDE: TIDE all-gathers bitwise equal
# parameters; its reduce-scatters may sum in another order (NOTE [reassociation bound] in
# fsdp_parity_worker.py), and AdamW carries that on over the steps.
LOSS_RTOL = 1e-3
FLAG = ["--override.imports", "tide.torchtitan.enable"]

# torchtitan's command line per variant (torchtitan/config/configs.py names). A tyro
# subcommand (activation-checkpoint:full) ends the command line.
VARIANTS = {
    "defaults": [],
    "tp2-fsdp2": ["--parallelism.tensor_parallel_degree", "2"],
    "hsdp2x2": ["--parallelism.data_parallel_replicate_degree", "2",
                "--parallelism.data_parallel_shard_degree", "2"],
    # 2 micro-batches: the global batch is 2 x the local batch x the data-parallel degree (4).
    "compile-fullac-2mb": ["--compile.enable",
                           "--training.global_batch_size", str(2 * LOCAL_BATCH * WORLD),
                           "activation-checkpoint:full"],
    "partial-dtensor": ["--parallelism.spmd_backend", "partial_dtensor"],
}


# Arguments both runs of a variant add: the defaults variant saves checkpoints for the resume test.
CHECKPOINTS = ["--checkpoint.enable", "--checkpoint.interval", "5"]
RUN_EXTRA = {"defaults": CHECKPOINTS}
RESUME_FROM = 5


def _load(path: Path):
    """The module at ``path`` (a helper script beside the test, not on sys.path)."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location(f"torchtitan_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def command(assets: dict, seed: int, dump: Path, variant: str, tide: bool) -> list[str]:
    """The torchtitan command line of one run (after ``python train.py``), as a user writes it."""
    return (["--module", "llama3", "--config", "llama3_debugmodel",
             "--hf_assets_path", assets["tokenizer"],
             "--dataloader.dataset", "c4_test", "--dataloader.dataset_path", assets["data"],
             "--training.steps", str(STEPS), "--training.local_batch_size", str(LOCAL_BATCH),
             "--training.seq_len", str(SEQ_LEN), "--debug.seed", str(seed),
             "--dump_folder", str(dump),
             # torchtitan lowers the process groups' timeout to 100 s after the first step; a
             # busy 2-core machine running 4 ranks (and compiling) can stall one that long.
             "--comm.train_timeout_seconds", "600"]
            + RUN_EXTRA.get(variant, []) + (FLAG if tide else []) + VARIANTS[variant])


def _launch(assets: dict, seed: int, variant: str, tide: bool, out: Path,
            dump: Path | None = None) -> tuple[list[dict], float]:
    out.mkdir(parents=True, exist_ok=True)
    args = [str(TRAIN)] + command(assets, seed, dump or out / "dump", variant, tide)
    label = f"variant {variant} {'tide' if tide else 'stock'} ({' '.join(args[1:])})"
    env = dict(TIDE_TITAN_RECORD=str(out), HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1",
               HF_DATASETS_CACHE=assets["cache"], TOKENIZERS_PARALLELISM="false")
    start = time.perf_counter()
    logs = run_ranks(args, WORLD, seed, label=label, env=env, timeout_s=900)
    wall = time.perf_counter() - start
    (out / "log-rank0.txt").write_text(logs[0])
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(WORLD)], wall


@pytest.fixture(scope="module")
def seed() -> int:
    value = tide_test_seed()
    print(f"torchtitan: TIDE_TEST_SEED={value}")
    return value


@pytest.fixture(scope="module")
def out_root(tmp_path_factory) -> Path:
    kept = os.environ.get("TIDE_TORCHTITAN_OUT")
    return Path(kept) if kept else tmp_path_factory.mktemp("torchtitan")


@pytest.fixture(scope="module")
def assets(seed, out_root) -> dict:
    paths = _load(HERE / "torchtitan_cpu" / "assets.py").build(out_root / "assets", seed)
    paths["cache"] = str(out_root / "assets" / "hf-cache")
    return paths


@pytest.fixture(scope="module", params=list(VARIANTS))
def runs(request, seed, assets, out_root):
    variant = request.param
    stock, stock_wall = _launch(assets, seed, variant, False, out_root / variant / "stock")
    tide, tide_wall = _launch(assets, seed, variant, True, out_root / variant / "tide")
    print(f"torchtitan {variant}: stock {stock_wall:.1f} s, TIDE {tide_wall:.1f} s (4 processes)")
    if os.environ.get("TIDE_TORCHTITAN_OUT"):
        table = _load(ROOT / "bench" / "torchtitan" / "table.py")
        (out_root / "table.md").write_text(table.table(out_root))
    return {"variant": variant, "seed": seed, "stock": stock, "tide": tide}


def _where(runs) -> str:
    return f"variant {runs['variant']}, seed {runs['seed']}"


def test_losses_match_stock(runs):
    worst, bitwise = 0.0, True
    for rank, (stock, tide) in enumerate(zip(runs["stock"], runs["tide"])):
        assert sorted(stock["losses"], key=int) == [str(s) for s in range(1, STEPS + 1)], (_where(runs), stock["losses"])
        for step, want in stock["losses"].items():
            got = tide["losses"].get(step)
            assert got is not None, (_where(runs), rank, step, tide["losses"])
            worst = max(worst, abs(got - want) / abs(want))
            bitwise &= got == want
            assert abs(got - want) <= LOSS_RTOL * abs(want), (_where(runs), rank, step, got, want)
    print(f"torchtitan {runs['variant']}: largest relative loss difference {worst:.3g}"
          f"{' (bitwise equal)' if bitwise else ''}")


def test_stock_runs_stay_stock(runs):
    """The stock runs have the same FSDP groups, none of them on TIDE (no flag, no enable)."""
    for stock, tide in zip(runs["stock"], runs["tide"]):
        assert [r["group"] for r in stock["report"]] == [r["group"] for r in tide["report"]], _where(runs)
        assert all(r["backend"] == "stock" for r in stock["report"]), (_where(runs), stock["report"])


def test_every_group_on_tide(runs):
    from tide._fsdp_group import TRACED  # noqa: PLC0415

    for rank, out in enumerate(runs["tide"]):
        rows = out["report"]
        assert rows, (_where(runs), rank)
        reasons = {r["group"]: r["reason"] for r in rows if r["backend"] != "tide"}
        assert not reasons, (_where(runs), rank, f"{len(reasons)} of {len(rows)} groups on stock", reasons)
        for row in rows:
            assert row["all_gathers"] > 0 and row["reduce_scatters"] > 0, (_where(runs), rank, row["group"], row)
            assert set(row["stock_reasons"]) <= {TRACED}, (_where(runs), rank, row["group"], row["stock_reasons"])


def test_flag_parses_its_keyword_arguments():
    """The flag as a user types it, with tide.fsdp.enable's mode: torchtitan's own parser and
    override pass put the optimizer config under TIDE's subclass, with the options."""
    from torchtitan.config import ConfigManager  # noqa: PLC0415
    from torchtitan.config.override import apply_overrides  # noqa: PLC0415

    config = ConfigManager().parse_args(["--module", "llama3", "--config", "llama3_debugmodel",
                                         "--override.imports", 'tide.torchtitan.enable={"mode": "slot-reuse"}'])
    base = type(config.optimizer)
    apply_overrides(config.override, config)
    assert isinstance(config.optimizer, base) and type(config.optimizer) is not base, type(config.optimizer)
    assert config.optimizer.tide_options == {"mode": "slot-reuse"}, config.optimizer.tide_options
    with pytest.raises(TypeError, match="unknown arguments"):
        import tide.torchtitan  # noqa: PLC0415

        tide.torchtitan.enable(base(), ring=False)


def test_import_does_not_need_torchtitan():
    """torchtitan is optional: tide.torchtitan imports without it; its flag then says why not."""
    code = ("import sys; sys.modules['torchtitan'] = None\n"
            "import tide.torchtitan as t\n"
            "try:\n    t.enable(None)\nexcept ImportError as e:\n    print('refused:', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "refused: tide.torchtitan.enable" in out.stdout, out.stdout + out.stderr


def test_resume_continues_bitwise(seed, assets, out_root):
    """torchtitan's checkpoint load after the flag's enable: a new TIDE run of the defaults
    variant resumes from the step-RESUME_FROM checkpoint of the TIDE run above and must give
    its losses bitwise, with every group on TIDE again."""
    from tide._fsdp_group import TRACED  # noqa: PLC0415

    full_dir = out_root / "defaults" / "tide"
    checkpoints = full_dir / "dump" / "checkpoint"
    if not (checkpoints / f"step-{RESUME_FROM}").is_dir():
        pytest.skip("the defaults variant did not run (its TIDE run saves the checkpoint)")
    full = [json.loads((full_dir / f"rank{r}.json").read_text()) for r in range(WORLD)]
    resume_dump = out_root / "defaults" / "resume-dump"
    (resume_dump / "checkpoint").mkdir(parents=True, exist_ok=True)
    import shutil  # noqa: PLC0415

    shutil.copytree(checkpoints / f"step-{RESUME_FROM}", resume_dump / "checkpoint" / f"step-{RESUME_FROM}",
                    dirs_exist_ok=True)
    resumed, wall = _launch(assets, seed, "defaults", True, out_root / "defaults" / "resume", dump=resume_dump)
    print(f"torchtitan defaults resumed from step {RESUME_FROM}: {wall:.1f} s")
    where = f"variant defaults (resumed from step {RESUME_FROM}), seed {seed}"
    for rank, (want, got) in enumerate(zip(full, resumed)):
        steps = sorted(got["losses"], key=int)
        assert steps == [str(s) for s in range(RESUME_FROM + 1, STEPS + 1)], (where, rank, steps)
        for step in steps:
            assert got["losses"][step] == want["losses"][step], (where, rank, step, got["losses"][step], want["losses"][step])
        for row in got["report"]:
            assert row["backend"] == "tide", (where, rank, row["group"], row["reason"])
            assert row["all_gathers"] > 0 and row["reduce_scatters"] > 0, (where, rank, row["group"], row)
            assert set(row["stock_reasons"]) <= {TRACED}, (where, rank, row["group"], row["stock_reasons"])


# Pipeline parallelism: 2 stages (the debugmodel's interleaved schedule, 2 model parts a rank) x
# FSDP 2. torchtitan refuses CUDA graphs with PP even on CPU, hence the second flag.
PP = ["--parallelism.pipeline_parallel_degree", "2", "--training.disable_cuda_graphs"]
# The stock calls PP may still make after the traced iteration, each with its reason: a stage
# root its schedule kept unsharded when TIDE took over (until the next iteration boundary),
# and the last layer's first no-sync fp32 accumulation, which the trace does not see.
PP_STOCK_REASONS = ("unsharded by stock FSDP2 before TIDE served", "gradients accumulated in fp32 without sync")


def test_pipeline_stages_are_served_per_stage(seed, assets, out_root):
    """PP 2 x FSDP 2 through the flag: every model part of every rank enabled, every group on
    TIDE with TIDE all-gathers after the first iterations (the schedule's explicit unshards
    resume TIDE at the iteration boundary that finalize_backward ends), losses bitwise equal to
    stock's, and any other stock call under a reason of PP_STOCK_REASONS."""
    from tide._fsdp_group import TRACED  # noqa: PLC0415

    VARIANTS["pp2-fsdp2"] = PP
    try:
        stock, _ = _launch(assets, seed, "pp2-fsdp2", False, out_root / "pp2-fsdp2" / "stock")
        tide, wall = _launch(assets, seed, "pp2-fsdp2", True, out_root / "pp2-fsdp2" / "tide")
    finally:
        VARIANTS.pop("pp2-fsdp2")
    where = f"variant pp2-fsdp2, seed {seed}"
    print(f"torchtitan pp2-fsdp2: TIDE {wall:.1f} s")
    for rank, (want, got) in enumerate(zip(stock, tide)):
        assert got["losses"] == want["losses"], (where, rank, got["losses"], want["losses"])
        assert got["report"], (where, rank)
        for row in got["report"]:
            what = (where, rank, row["group"], row["reason"], row["stock_reasons"])
            assert row["backend"] == "tide" and row["all_gathers"] > 0, what
            others = [r for r in row["stock_reasons"] if r != TRACED]
            assert all(r.startswith(PP_STOCK_REASONS) for r in others), what
