"""End-to-end tests of `tide-nccl` on a machine without GPUs: its arguments, and that one
process per rank starts (`--spawn`), finds no GPU and stops every rank with one clear line.
On a machine with GPUs the GPU-less cases skip (scripts/device/nccl.sh runs the real thing).

Run through CTest, or directly: python3 tests/cli/test_nccl_cli.py path/to/tide-nccl
"""
import os
import shutil
import subprocess
import sys
import unittest

BINARY = None


def run(*args, env=None):
    full = dict(os.environ)
    full.update(env or {})
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=120, env=full)


def have_gpu():
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    return subprocess.run([smi, "-L"], capture_output=True).returncode == 0


class Arguments(unittest.TestCase):
    def test_help_lists_the_subcommands(self):
        out = run("--help")
        self.assertEqual(out.returncode, 0, out.stderr)
        for sub in ("probe", "check", "bench", "--spawn"):
            self.assertIn(sub, out.stdout)

    def test_unknown_fault_is_refused_naming_the_choices(self):
        out = run("check", "--fault", "explode")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("stall", out.stderr + out.stdout)
        self.assertIn("withhold", out.stderr + out.stdout)

    def test_a_subcommand_is_required(self):
        out = run()
        self.assertNotEqual(out.returncode, 0)

    def test_unknown_bench_case_is_refused(self):
        if have_gpu():
            self.skipTest("a GPU is present: the bench would start")
        out = run("bench", "--cases", "gpt5")
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("gpt5", out.stderr)
        self.assertIn("flat32m", out.stderr)


@unittest.skipIf(have_gpu(), "a GPU is present: scripts/device/nccl.sh runs tide-nccl there")
class NoGpu(unittest.TestCase):
    def test_one_rank_says_it_needs_a_gpu(self):
        out = run("check", "--quick")
        self.assertEqual(out.returncode, 1, out.stderr)
        self.assertIn("needs one GPU per rank", out.stderr)
        self.assertEqual(len(out.stderr.strip().splitlines()), 1, out.stderr)

    def test_spawned_ranks_all_stop_and_are_named(self):
        out = run("--spawn", "3", "probe")
        self.assertEqual(out.returncode, 1, out.stderr)
        for rank in range(3):
            self.assertIn(f"rank {rank} exited with status 1", out.stderr)
        self.assertEqual(out.stderr.count("needs one GPU per rank"), 3, out.stderr)

    def test_torchrun_variables_are_read(self):
        env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
        out = run("check", "--quick", env=env)
        self.assertEqual(out.returncode, 1)
        self.assertIn("needs one GPU per rank", out.stderr)
        bad = {"RANK": "5", "WORLD_SIZE": "2"}
        out = run("check", env=bad)
        self.assertEqual(out.returncode, 2, out.stderr)
        self.assertIn("does not fit a world of 2", out.stderr)


if __name__ == "__main__":
    BINARY = sys.argv.pop(1)
    unittest.main()
