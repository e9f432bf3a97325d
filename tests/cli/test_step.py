"""End-to-end tests of `tide simulate step`: a training step's TIDE-AG and TIDE-RS calls in
FSDP2 order on the CPU reference executor, as the runtime builds them: one communicator arena per
rank, each group's call sequences, the lanes' handoffs (program/training_step.hpp).

Run through CTest, or directly: python3 tests/cli/test_step.py path/to/tide
"""
import json
import subprocess
import sys
import time
import unittest

TIDE = None
# Seconds the 64x8 step may take: 120, or what tests/CMakeLists.txt passes (more under the
# sanitizers, which run the simulator several times slower).
STEP_SECONDS = 120.0

# Three distinct groups (odd shapes, padding rows), so the shared arena is sized for the
# largest and every call uses only its own geometry inside it.
GROUPS = "37x5,16x3;20x7;9x11,5x3,3x1"
# The same, with its last two groups alike: step-call-order swaps the first two reduce-scatters
# (the last two groups); it shows as a call-order mismatch with alike and unequal shapes.
GROUPS_LAST_TWO_ALIKE = "37x5,16x3;9x11,5x3,3x1;9x11,5x3,3x1"


def run(*args):
    return subprocess.run([TIDE, "simulate", "step", *args], capture_output=True, text=True,
                          timeout=600)


def run_json(*args):
    result = run(*args, "--json")
    assert result.returncode == 0, result.stderr + result.stdout[-2000:]
    return json.loads(result.stdout)


class StepData(unittest.TestCase):
    def test_every_small_topology_passes(self):
        # Every (M, L) with M in 1..9 and L in {1, 2, 4, 8}: every all-gather lands every shard
        # (Eq. 2) and every reduce-scatter equals the arithmetic order bit for bit.
        for m in range(1, 10):
            for l in (1, 2, 4, 8):
                out = run_json("-M", str(m), "-L", str(l), "--groups", GROUPS,
                               "--data-seed", str(10 * m + l))
                self.assertTrue(out["passed"], (m, l, out["errors"][:3]))
                self.assertTrue(out["bitwise_equal_to_reference_order"], (m, l))
                self.assertEqual(out["error_count"], 0, (m, l))
                self.assertLessEqual(out["max_abs_error"], out["tolerance"], (m, l))

    def test_modes_cast_accumulate_and_switch_reduce(self):
        cases = [
            ["-M", "5", "-L", "4", "--mode", "slot-reuse", "--round-width", "1",
             "--wave-width", "2"],
            ["-M", "9", "-L", "2", "--passes", "2", "--staging-slots", "3", "--chunk-bytes",
             "96"],
            ["-M", "3", "-L", "4", "--cast", "--accumulate", "--alpha", "0.375"],
            ["-M", "9", "-L", "4", "--wave-width", "2", "--landing", "switch-reduce"],
        ]
        for args in cases:
            out = run_json(*args, "--groups", GROUPS)
            self.assertTrue(out["passed"], (args, out["errors"][:3]))
            self.assertEqual(out["error_count"], 0, args)

    def test_outputs_do_not_depend_on_schedule_mode_or_chunks(self):
        # Invariant 2 across a whole step: the same inputs give the same bits whatever the
        # interleaving, memory mode, staging chunk size or CTA budget.
        digests = set()
        for extra in ([], ["--schedule-seed", "5", "--jitter", "0.9"],
                      ["--mode", "slot-reuse", "--round-width", "1"],
                      ["--chunk-bytes", "64", "--staging-slots", "3"],
                      ["--sum-ctas", "3", "--landing-ctas", "1"]):
            out = run_json("-M", "5", "-L", "2", "--groups", GROUPS, "--data-seed", "3", *extra)
            self.assertTrue(out["passed"], extra)
            digests.add(out["output_sha256"])
        self.assertEqual(len(digests), 1)

    def test_stock_fsdp2_step_on_the_same_data(self):
        # The baseline step: same groups, same order, same checks (float64 tolerance).
        for m, l in ((1, 4), (3, 2), (2, 8)):
            out = run_json("-M", str(m), "-L", str(l), "--groups", GROUPS, "--baseline",
                           "--accumulate")
            self.assertEqual(out["system"], "fsdp2")
            self.assertTrue(out["passed"], (m, l, out["errors"][:3]))
            self.assertEqual(out["error_count"], 0)

    def test_256_random_odd_parameters(self):
        # P = 256, the most TIDE takes (more falls back to stock collectives), random odd
        # shapes, in a two-group step and in single calls.
        import random
        rng = random.Random(1234)
        shapes = ",".join(f"{rng.randint(1, 41)}x{rng.randint(1, 9)}" for _ in range(256))
        out = run_json("-M", "3", "-L", "2", "--groups", f"{shapes};{shapes}")
        self.assertTrue(out["passed"], out["errors"][:3])
        for collective in ("all-gather", "reduce-scatter"):
            result = subprocess.run([TIDE, "simulate", collective, "-M", "3", "-L", "2",
                                     "--shapes", shapes, "--json"], capture_output=True,
                                    text=True, check=True)
            self.assertTrue(json.loads(result.stdout)["passed"], collective)

    def test_summed_call_buffers_are_not_called_a_peak(self):
        # Every call of a step program has its own output (and, stock, its own arena region),
        # so the executor's buffer total adds up the calls: the step JSON names it so, and
        # held_bytes is the peak. One call's output keeps its peak_buffer_bytes.
        for extra in ([], ["--baseline"]):
            out = run_json("-M", "2", "-L", "2", "--groups", GROUPS, *extra)
            self.assertNotIn("peak_buffer_bytes", out, extra)
            self.assertGreater(out["summed_call_buffer_bytes"], out["held_bytes"], extra)
        single = subprocess.run([TIDE, "simulate", "reduce-scatter", "-M", "2", "-L", "2",
                                 "--shapes", "37x5", "--json"], capture_output=True, text=True,
                                check=True)
        self.assertGreater(json.loads(single.stdout)["peak_buffer_bytes"], 0)

    def test_calls_follow_fsdp2_order(self):
        out = run_json("-M", "2", "-L", "2", "--shapes", "37x5", "--layers", "3")
        calls = [(c["kind"], c["forward"], c["group"]) for c in out["calls"]]
        forward = [("all-gather", True, f"--shapes {g}") for g in range(3)]
        backward = []
        for g in (2, 1, 0):
            backward += [("all-gather", False, f"--shapes {g}"),
                         ("reduce-scatter", False, f"--shapes {g}")]
        self.assertEqual(calls, forward + backward)
        # Each all-gather lands in its group's ring slot, g mod 2 in forward order (App. F, NOTE
        # [communicator arena]): consecutive all-gathers of different groups alternate slots.
        gathers = [(c["group"], c["landing_slot"]) for c in out["calls"]
                   if c["kind"] == "all-gather"]
        self.assertEqual([slot for _, slot in gathers], [0, 1, 0, 0, 1, 0])
        for (g, a), (h, b) in zip(gathers, gathers[1:]):
            if g != h:
                self.assertNotEqual(a, b, (g, h))


class StepFaults(unittest.TestCase):
    def test_every_step_fault_is_caught(self):
        listed = subprocess.run([TIDE, "simulate", "--list-faults", "--json"],
                                capture_output=True, text=True, check=True)
        catalog = json.loads(listed.stdout)["faults"]
        faults = {f["name"]: f["expected_detection"] for f in catalog if f["collective"] == "step"}
        self.assertEqual(sorted(faults), ["step-call-order"])
        # A group's own credits across its calls (stage credits, bank e mod 2) are subsumed by
        # the lane handoff in a step; their faults show on a group's call sequence alone, on
        # these topologies and seeds (tests/program/fault_injection_test.cpp,
        # SequenceFaultsShowAsExpected), and a step refuses them.
        sequence = sorted(f["name"] for f in catalog if f["collective"] == "sequence")
        self.assertEqual(sequence, ["ag-no-stage-credit", "rs-bank-reuse"])
        for fault in sequence:
            result = run("-M", "3", "-L", "2", "--groups", GROUPS, "--inject", fault)
            self.assertEqual(result.returncode, 2, fault)
            self.assertIn("lane handoff", result.stderr, fault)
        # Each on three schedule seeds and three topologies, by its own mechanism.
        for fault, expected in faults.items():
            for m, l in ((2, 2), (3, 2), (5, 1)):
                for seed in ("1", "2", "3"):
                    out = run_json("-M", str(m), "-L", str(l), "--groups", GROUPS, "--inject",
                                   fault, "--schedule-seed", seed)
                    self.assertTrue(out["fault_detected"], (fault, m, l, seed))
                    self.assertEqual(out["detected_by"], expected, (fault, m, l, seed))

    def test_communicator_faults_are_caught(self):
        # The runtime's step runs every group on one arena: without the lane handoff (across
        # nodes) or a slot's release edge, the executor finds the race (NOTE [lane handoff]).
        listed = subprocess.run([TIDE, "simulate", "--list-faults", "--json"],
                                capture_output=True, text=True, check=True)
        faults = {f["name"]: f["expected_detection"] for f in json.loads(listed.stdout)["faults"]
                  if f["collective"] == "communicator"}
        self.assertEqual(sorted(faults), ["ag-no-slot-release", "lane-no-handoff"])
        for fault, expected in faults.items():
            for m, l in ((2, 2), (3, 2), (5, 1)):
                for seed in ("1", "2", "3"):
                    out = run_json("-M", str(m), "-L", str(l), "--groups", GROUPS, "--inject",
                                   fault, "--schedule-seed", seed)
                    self.assertTrue(out["fault_detected"], (fault, m, l, seed))
                    self.assertEqual(out["detected_by"], expected, (fault, m, l, seed))
        result = run("-M", "1", "-L", "4", "--groups", GROUPS, "--inject", "lane-no-handoff")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--nodes 2", result.stderr)

    def test_call_order_is_a_mismatch_whatever_the_shapes(self):
        # The swapped reduce-scatters (groups 2 and 1) of unequal and of alike shapes are
        # reported as a call-order mismatch that names both calls, before the run.
        for groups in (GROUPS, GROUPS_LAST_TWO_ALIKE):
            for m, l in ((2, 2), (4, 1), (1, 3)):
                out = run_json("-M", str(m), "-L", str(l), "--groups", groups, "--inject",
                               "step-call-order")
                self.assertEqual(out["detected_by"], "call-order-mismatch", (groups, m, l))
                self.assertTrue(out["detected_as_expected"], (groups, m, l))
                self.assertIn("call-order mismatch", out["evidence"])
                self.assertIn("reduce-scatter of group 2", out["evidence"])
                self.assertIn("reduce-scatter of group 1", out["evidence"])
                self.assertTrue(any("call-order mismatch" in e for e in out["errors"]),
                                (groups, m, l))
            clean = run_json("-M", "2", "-L", "2", "--groups", groups)
            self.assertEqual(clean["error_count"], 0)

    def test_single_call_faults_inside_a_step_are_caught(self):
        for fault in ("rs-staging-reuse", "rs-release-before-read", "ag-no-completion-fence",
                      "ag-scatter-before-arrival"):
            out = run_json("-M", "3", "-L", "2", "--groups", GROUPS, "--inject", fault)
            self.assertTrue(out["fault_detected"], fault)
            self.assertEqual(out["detected_by"], out["expected_detection"], fault)
        # Every rank signals the lane handoff after its slot's release, so in a step the
        # handoff orders the scatters after the landings' previous users: refused here, shown
        # on one call (tests/cli/test_cli.py).
        result = run("-M", "3", "-L", "2", "--groups", GROUPS, "--inject",
                     "ag-no-landing-readiness")
        self.assertEqual(result.returncode, 2)
        self.assertIn("tide simulate all-gather", result.stderr)

    def test_inapplicable_step_fault_is_refused(self):
        for fault in ("rs-bank-reuse", "ag-no-stage-credit"):  # a group's own calls
            result = run("-M", "2", "-L", "2", "--shapes", "37x5", "--layers", "3", "--inject",
                         fault)
            self.assertEqual(result.returncode, 2, fault)
            self.assertIn("call_sequence.hpp", result.stderr, fault)
        result = run("-M", "3", "-L", "1", "--shapes", "37x5", "--inject",
                     "ag-no-completion-fence")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--gpus-per-node 2", result.stderr)
        result = run("-M", "2", "-L", "2", "--shapes", "37x5", "--layers", "1", "--inject",
                     "step-call-order")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--layers 2", result.stderr)

    def test_step_fault_refused_by_single_call(self):
        result = subprocess.run([TIDE, "simulate", "reduce-scatter", "--shapes", "37x5",
                                 "--inject", "step-call-order"], capture_output=True, text=True)
        self.assertEqual(result.returncode, 2)
        self.assertIn("tide simulate step", result.stderr)


class StepInput(unittest.TestCase):
    def test_bad_input_is_one_line(self):
        for args, words in ((["--shapes", "8x8", "--layers", "0"], "--layers"),
                            (["--shapes", "8x8", "--groups", "8x8;4x4"], "--groups"),
                            (["--groups", "8x8;4xq"], "--groups group 1 entry"),
                            (["--groups", "37x5;;9x11"], "--groups group 1 is empty"),
                            (["--shapes", "8x8", "--baseline", "--cast"], "--cast"),
                            (["--shapes", "8x8", "--baseline", "--inject", "rs-bank-reuse"],
                             "--baseline"),
                            (["--model", "llama3.1-70b:layer", "-M", "64", "-L", "8",
                              "--timing-only", "--baseline"], "single calls")):
            result = run(*args)
            self.assertEqual(result.returncode, 2, args)
            self.assertIn(words, result.stderr, args)
            self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)


class StepTiming(unittest.TestCase):
    def test_llama_layers_at_64x8_in_seconds(self):
        start = time.time()
        out = run_json("--model", "llama3.1-70b:layer", "--layers", "2", "-M", "64", "-L", "8",
                       "--timing-only")
        self.assertTrue(out["completed"])
        self.assertEqual(out["error_count"], 0)
        self.assertEqual(len(out["calls"]), 6)
        self.assertGreater(out["step_ms"], 0)
        self.assertLess(time.time() - start, STEP_SECONDS)


if __name__ == "__main__":
    TIDE = sys.argv.pop(1)
    if len(sys.argv) > 1 and sys.argv[1].replace('.', '', 1).isdigit():
        STEP_SECONDS = float(sys.argv.pop(1))
    unittest.main()
