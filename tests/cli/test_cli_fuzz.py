"""Fuzzes the `tide` CLI's arguments: random subcommands, flags and values drawn from a seed.
Every run must end within a bound with status 0, 1 or 2, never print "internal error" and
never more than one line on stderr when it fails (progress lines aside).

Sizes are drawn from small values and from values far past every limit (which must be
refused at once), not from the legal-but-long middle (a 64 x 8 simulation, a model's layer
with data, a check-plans sweep to 1024 nodes), which may take minutes by design.

The seed is printed and taken from TIDE_TEST_SEED when set. TIDE_FUZZ_RUNS sets the number
of runs (default 200, under a minute).

Run through CTest, or directly: python3 tests/cli/test_cli_fuzz.py path/to/tide
"""
import os
import random
import subprocess
import sys
import time
import unittest

TIDE = None
SECONDS_PER_RUN = 60  # a hang past this fails (the sanitizer build is several times slower)

COMMANDS = ["plan", "check-plans", "memory", "solve", "simulate", "calibrate"]
COLLECTIVES = ["all-gather", "reduce-scatter", "step", "gather", ""]
INTEGERS = ["0", "1", "2", "3", "4", "5", "7", "8", "9", "-1", "-8", "65536", "2147483648",
            "99999999999999999999", "1e3", "0x10", "", "two", "nan"]
NODES = ["0", "1", "2", "3", "5", "9", "-1", "65536", "65537", "2147483648", "two", ""]
GPUS = ["0", "1", "2", "4", "8", "9", "-1", "x"]
LAYERS = ["0", "1", "2", "3", "-1", "1000000", "2147483648", "x"]
FLOATS = ["0", "1", "0.5", "-1", "nan", "inf", "-inf", "1e300", "1e-300", "3.4e38", "", "x"]
SHAPES = ["8x8", "37x5,9x11", "100x7,33x5,9", "0x5", "12xfoo", "8x8,,4", "", ",", "x", "1x1x1",
          "9223372036854775807x2", "4x4;5x5", "65536x65536"]
MODELS = ["llama3.1-70b", "llama3.1-70b:layer", "wan2.2-14b", "qwen3-30b-a3b:layer", "gpt-5",
          "llama3.1-70b:nope", ":", ""]
STRINGS = ["pull", "switch-reduce", "in-place", "slot-reuse", "bf16", "fp32", "fp16", "", "-",
           "--json", "rs-land-twice", "ag-no-stage-credit", "step-call-order", "nope"]
PATHS = ["/proc/nope/x", "/dev/full", "/nonexistent/dir/file.json", ""]

# (flag, kind): kind picks the value pool; None is a bare flag.
FLAGS = [
    ("--nodes", NODES), ("-M", NODES), ("--gpus-per-node", GPUS), ("-L", GPUS),
    ("--shapes", SHAPES), ("--model", MODELS), ("--wave-width", INTEGERS),
    ("--round-width", INTEGERS), ("--passes", INTEGERS), ("--staging-slots", INTEGERS),
    ("--chunk-bytes", INTEGERS), ("--mode", STRINGS), ("--ag-dtype", STRINGS),
    ("--grad-dtype", STRINGS), ("--cast", None), ("--sum-ctas", INTEGERS),
    ("--landing-ctas", INTEGERS), ("--landing", STRINGS), ("--accumulate", None),
    ("--alpha", FLOATS), ("--schedule-seed", INTEGERS), ("--data-seed", INTEGERS),
    ("--jitter", FLOATS), ("--inject", STRINGS), ("--baseline", None), ("--list-faults", None),
    ("--timing-only", None), ("--layers", LAYERS), ("--ag-stages", INTEGERS),
    ("--expect-detection", ["race", "corruption", "bogus", ""]),
    ("--groups", SHAPES), ("--json", None), ("--dump", PATHS), ("--trace", PATHS),
    ("--cost-model", PATHS), ("--max-nodes", ["0", "1", "2", "9", "16", "-3", "x"]),
    ("--round-widths", ["1-4", "3-1", "x"]),
    ("--wave-widths", ["1-8", "0-2", "9"]), ("--inbox-generations", INTEGERS),
    ("--shard-bytes", INTEGERS), ("--bw-nic", FLOATS), ("--bw-sum", FLOATS),
    ("--t-round", FLOATS), ("--quick", None), ("--help", None), ("--bogus", None),
]


def random_arguments(rng):
    args = [rng.choice(COMMANDS)]
    if args[0] == "check-plans":  # its default sweep (to 1024 nodes) is long by design
        args += ["--max-nodes", rng.choice(["2", "9", "16"])]
    if args[0] == "simulate":
        collective = rng.choice(COLLECTIVES)
        if collective:
            args.append(collective)
        # Mostly small problems, so that most runs get past parsing and into the simulator.
        args += ["-M", rng.choice(["1", "2", "3", "5"]), "-L", rng.choice(["1", "2", "4"])]
        if rng.random() < 0.8:
            args += ["--shapes", rng.choice(["8x8", "37x5,9x11", "100x7,33x5,9"])]
    for _ in range(rng.randint(0, 5)):
        flag, pool = rng.choice(FLAGS)
        args.append(flag)
        if pool is not None:
            args.append(rng.choice(pool))
    if args[0] == "simulate" and "--model" in args:
        args.append("--timing-only")  # a model's layer with data is legal but takes minutes
    return args


class Fuzz(unittest.TestCase):
    def test_random_arguments(self):
        given = os.environ.get("TIDE_TEST_SEED")
        seed = int(given, 0) if given else random.SystemRandom().getrandbits(32)
        runs = int(os.environ.get("TIDE_FUZZ_RUNS", "200"))
        print(f"fuzz seed {seed} (replay with TIDE_TEST_SEED={seed})", flush=True)
        rng = random.Random(seed)
        start = time.time()
        for i in range(runs):
            args = random_arguments(rng)
            what = f"seed {seed}, run {i}: tide {' '.join(repr(a) for a in args)}"
            try:
                result = subprocess.run([TIDE, *args], capture_output=True, text=True,
                                        timeout=SECONDS_PER_RUN)
            except subprocess.TimeoutExpired:
                self.fail(f"{what}: no exit within {SECONDS_PER_RUN} s")
            self.assertIn(result.returncode, (0, 1, 2), f"{what}: {result.stderr}")
            self.assertNotIn("internal error", result.stderr, what)
            if result.returncode != 0:
                errors = [line for line in result.stderr.splitlines()
                          if line.strip() and not line.startswith(("tide: simulated ",
                                                                     "tide: estimate for "))]
                self.assertEqual(len(errors), 1, f"{what}: {result.stderr}")
        print(f"{runs} runs in {time.time() - start:.1f} s", flush=True)


if __name__ == "__main__":
    TIDE = sys.argv.pop(1)
    unittest.main(verbosity=2)
