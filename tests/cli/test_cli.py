"""End-to-end tests of the `tide` CLI: JSON field names and values at the paper's points,
readable tables, and bad input (one-line error, exit status 2, never a crash).

Run through CTest, or directly: python3 tests/cli/test_cli.py path/to/tide
"""
import json
import subprocess
import sys
import unittest

TIDE = None


def run(*args):
    return subprocess.run([TIDE, *args], capture_output=True, text=True, timeout=600)


def run_json(*args):
    result = run(*args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


class PlanJson(unittest.TestCase):
    def test_llama_layer_layout(self):
        out = run_json("plan", "--model", "llama3.1-70b", "--nodes", "8", "--gpus-per-node", "8")
        params = out["layout"]["params"]
        self.assertEqual(len(params), 9)
        q = params[0]
        self.assertEqual(q["name"], "self_attn.q_proj.weight")
        self.assertEqual((q["rows"], q["cols"], q["rows_per_rank"]), (8192, 8192, 128))
        self.assertEqual(q["shard_bytes"], 128 * 8192 * 2)
        self.assertEqual(q["offset"], 0)
        self.assertEqual(params[1]["offset"], q["shard_bytes"])
        for p in params:
            for key in ("rows_per_rank", "shard_bytes", "offset"):
                self.assertIsInstance(p[key], int)
        self.assertEqual(out["topology"], {"nodes": 8, "gpus_per_node": 8, "world": 64})
        self.assertEqual(out["ag"]["round_count"], 3)
        self.assertEqual(out["ag"]["stage_bytes"], 7 * out["layout"]["shard_bytes"])
        rs = out["rs"]
        self.assertTrue(rs["validation"]["accepted"])
        self.assertEqual(rs["inbox_generations"], 1)
        self.assertEqual(rs["outbox_depth"], 7)
        self.assertEqual(rs["descriptors"]["paper_flat"], 7 * 9 * 8 * 8)

    def test_shapes_and_options(self):
        out = run_json("plan", "--shapes", "100x3,7,1x6x5120", "-M", "20", "-L", "8",
                       "--mode", "slot-reuse", "--round-width", "4", "--grad-dtype", "fp32")
        self.assertEqual([p["cols"] for p in out["layout"]["params"]], [3, 1, 30720])
        self.assertEqual(out["rs"]["mode"], "slot-reuse")
        self.assertEqual(out["rs"]["outbox_depth"], 8)
        self.assertEqual(out["rs"]["inbox_generations"], 2)
        self.assertEqual(len(out["rs"]["waves"]), 3)
        self.assertEqual(out["grad_dtype"], "fp32")

    def test_list_models(self):
        out = run_json("plan", "--list-models")
        specs = {m["spec"] for m in out["models"]}
        for spec in ("llama3.1-70b:layer", "qwen3-30b-a3b:layer", "wan2.2-14b:layer",
                     "llama3.1-70b:embedding", "wan2.2-14b:output"):
            self.assertIn(spec, specs)

    def test_table_output(self):
        result = run("plan", "--model", "wan2.2-14b", "-M", "2", "-L", "8")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn("TIDE-AG", result.stdout)
        self.assertIn("TIDE-RS", result.stdout)
        self.assertIn("accepted", result.stdout)


class OtherCommands(unittest.TestCase):
    def test_check_plans_small(self):
        out = run_json("check-plans", "--max-nodes", "64", "--gpus-per-node", "8",
                       "--round-widths", "1-4")
        self.assertEqual(out["plans"], 63 * 8 * 4 * 2)
        self.assertEqual(out["accepted"] + out["rejected"], out["plans"])
        self.assertEqual(out["violations"], 0)
        for key in ("accepted", "rejected", "violations"):
            self.assertIsInstance(out[key], int)

    def test_memory_paper_point(self):
        out = run_json("memory", "--nodes", "64", "--gpus-per-node", "8", "--round-width", "4",
                       "--inbox-generations", "2", "--shard-bytes", str(32 << 20))
        self.assertAlmostEqual(out["in_place_staging_ns"], 0.594, places=3)
        self.assertAlmostEqual(out["slot_reuse_staging_ns"], 0.164, places=3)
        self.assertEqual(round(out["in_place_total_ns"], 2), 3.72)
        self.assertEqual(round(out["slot_reuse_total_ns"], 2), 2.29)
        self.assertEqual(out["fsdp2_total_ns"], 4)
        self.assertEqual(out["ns_bytes"], 512 * (32 << 20))

    def test_memory_on_llamas_largest_group(self):
        # Sec. 7.4: at 64 nodes, at most 1.2 and 0.3 GiB per GPU of staging on Llama's largest
        # group (the vocabulary layer) against FSDP2's 3.9 GiB packing buffer.
        out = run_json("memory", "--nodes", "64", "--round-width", "4", "--inbox-generations", "2",
                       "--model", "llama3.1-70b:output")
        gib = float(1 << 30)
        self.assertEqual(round(out["in_place_staging_bytes"] / gib, 1), 1.2)
        self.assertEqual(round(out["slot_reuse_staging_bytes"] / gib, 1), 0.3)
        self.assertEqual(round(2 * out["ns_bytes"] / gib, 1), 3.9)
        self.assertEqual(out["group"], "llama3.1-70b:output")

    def test_solve_paper_calibration(self):
        out = run_json("solve", "--bw-nic", "47.5", "--bw-sum", "99", "--bw-land", "21",
                       "--bw-cap", "90", "--t-round", "1.3", "--nodes", "8",
                       "--gpus-per-node", "8", "--shard-bytes", str(32 << 20))
        self.assertEqual((out["sum_ctas"], out["landing_ctas"], out["round_width"]), (4, 4, 4))

    def test_default_rounds_in_flight_is_the_solvers(self):
        # Without --rounds-in-flight, plan and simulate take tide solve's d on App. G's rates
        # for the group's shard (docs/core.md, "The default d"); a given value wins.
        for m, want in ((1, 1), (2, 1), (8, 2), (64, 4)):
            plan = run_json("plan", "--model", "llama3.1-70b", "--nodes", str(m),
                            "--gpus-per-node", "8")
            self.assertEqual(plan["rs"]["rounds_in_flight"], want, m)
            solved = run_json("solve", "--bw-nic", "47.5", "--bw-sum", "99", "--bw-land", "21",
                              "--bw-cap", "90", "--t-round", "1.3", "--nodes", str(m),
                              "--gpus-per-node", "8", "--shard-bytes",
                              str(plan["layout"]["grad_shard_bytes"]))
            self.assertEqual(solved["rounds_in_flight"], want, m)
            given = run_json("plan", "--model", "llama3.1-70b", "--nodes", str(m),
                             "--gpus-per-node", "8", "--rounds-in-flight", "1")
            self.assertEqual(given["rs"]["rounds_in_flight"], 1, m)
        sim = ["simulate", "reduce-scatter", "--model", "llama3.1-70b", "--nodes", "8",
               "--gpus-per-node", "8", "--timing-only", "--jitter", "0"]
        default = run_json(*sim)["predicted_ms"]
        self.assertEqual(default, run_json(*sim, "--rounds-in-flight", "2")["predicted_ms"])
        self.assertLess(default, run_json(*sim, "--rounds-in-flight", "1")["predicted_ms"])
        result = run("plan", "--model", "llama3.1-70b", "--nodes", "8", "--rounds-in-flight", "0")
        self.assertEqual(result.returncode, 2, result.stderr)


def read_npy(path):
    """A minimal .npy reader (no numpy needed): returns (descr, shape, values)."""
    import ast
    import struct
    with open(path, "rb") as f:
        data = f.read()
    assert data[:6] == b"\x93NUMPY", path
    header_len = struct.unpack("<H", data[8:10])[0]
    header = ast.literal_eval(data[10:10 + header_len].decode())
    body = data[10 + header_len:]
    code = {"<u2": "H", "<f4": "f", "|u1": "B"}[header["descr"]]
    count = len(body) // struct.calcsize(code)
    values = struct.unpack("<%d%s" % (count, code), body)
    if code == "H":  # bf16 words -> float
        values = [struct.unpack("<f", struct.pack("<I", w << 16))[0] for w in values]
    return header["descr"], header["shape"], list(values)


class Simulate(unittest.TestCase):
    SHAPES = "100x7,33x5,9"

    def test_reduce_scatter_is_exact_and_clean(self):
        out = run_json("simulate", "reduce-scatter", "-M", "3", "-L", "4", "--shapes", self.SHAPES,
                       "--accumulate", "--schedule-seed", "7")
        self.assertTrue(out["passed"])
        self.assertTrue(out["bitwise_equal_to_reference_order"])
        self.assertEqual(out["error_count"], 0)
        self.assertLessEqual(out["max_abs_error"], out["tolerance"])
        self.assertEqual(len(out["output_sha256"]), 64)
        self.assertGreater(out["predicted_ms"], 0)
        self.assertGreater(out["sm_ms"], 0)

    def test_output_identical_across_schedule_seeds_and_tuning(self):
        digests = set()
        for extra in (["--schedule-seed", "1"], ["--schedule-seed", "2", "--sum-ctas", "3"],
                      ["--passes", "2", "--mode", "slot-reuse", "--round-width", "1"],
                      ["--chunk-bytes", "512", "--staging-slots", "1"]):
            out = run_json("simulate", "reduce-scatter", "-M", "5", "-L", "2", "--shapes",
                           self.SHAPES, *extra)
            self.assertTrue(out["passed"], extra)
            digests.add(out["output_sha256"])
        self.assertEqual(len(digests), 1)

    def test_all_gather_lands_every_shard(self):
        out = run_json("simulate", "all-gather", "-M", "5", "-L", "2", "--shapes", self.SHAPES)
        self.assertTrue(out["passed"])
        self.assertEqual(out["error_count"], 0)
        out = run_json("simulate", "all-gather", "-M", "3", "-L", "2", "--shapes", self.SHAPES,
                       "--cast")
        self.assertTrue(out["passed"])

    def test_every_fault_shows_as_expected(self):
        # Each fault on three schedule seeds and two topologies must show by its own mechanism
        # (the catalog's expected_detection), with the evidence; tide exits 1 otherwise.
        faults = run_json("simulate", "--list-faults")["faults"]
        self.assertGreaterEqual(len(faults), 15)
        classes = {"race", "deadlock", "corruption", "malformed", "uninitialised-read",
                   "call-order-mismatch"}
        for fault in faults:
            self.assertIn(fault["expected_detection"], classes, fault["name"])
            self.assertTrue(fault["mechanism"], fault["name"])
            if fault["collective"] == "step":
                continue  # several groups' calls: tests/cli/test_step.py
            if fault["collective"] == "sequence":
                continue  # one group's calls: tests/program/fault_injection_test.cpp
            if fault["collective"] == "communicator":
                continue  # several groups of one arena: test_step.py, lanes_test.cpp
            if fault["collective"] == "ep-all-gather":
                topologies = [["all-gather", "-M", "5", "-L", "1", "--lane", "ep"],
                              ["all-gather", "-M", "8", "-L", "1", "--lane", "ep"]]
            elif fault["collective"] == "ep-reduce-scatter":
                topologies = [["reduce-scatter", "-M", "5", "-L", "1", "--lane", "ep"],
                              ["reduce-scatter", "-M", "3", "-L", "1", "--lane", "ep"]]
            elif fault["collective"] == "all-gather":
                topologies = [["all-gather", "-M", "5", "-L", "2"],
                              ["all-gather", "-M", "4", "-L", "4"]]
            elif fault["name"] in ("rs-pull-before-ready", "rs-release-before-peer-reads"):
                # One node, Slot-Reuse: the owners pull from the peers' gradient areas.
                topologies = [["reduce-scatter", "-M", "1", "-L", "4", "--chunk-bytes", "48"],
                              ["reduce-scatter", "-M", "1", "-L", "2", "--chunk-bytes", "16"]]
            else:
                topologies = [["reduce-scatter", "-M", "9", "-L", "4", "--wave-width", "2"],
                              ["reduce-scatter", "-M", "7", "-L", "2", "--wave-width", "1"]]
            for args in topologies:
                if fault["collective"] == "reduce-scatter" and args[2] != "1":
                    args = args + ["--mode", "slot-reuse", "--round-width", "1", "--landing",
                                   "switch-reduce"]
                elif fault["collective"] == "reduce-scatter":
                    args = args + ["--mode", "slot-reuse"]
                for seed in ("1", "2", "3"):
                    out = run_json("simulate", *args, "--shapes", self.SHAPES, "--inject",
                                   fault["name"], "--schedule-seed", seed)
                    what = (fault["name"], args[1:5], seed)
                    self.assertTrue(out["fault_detected"], what)
                    self.assertEqual(out["detected_by"], fault["expected_detection"], what)
                    self.assertTrue(out["detected_as_expected"], what)
                    if out["detected_by"] != "corruption":
                        self.assertTrue(out["evidence"], what)

    def test_expert_parallel_lane_is_bitwise(self):
        # App. F lanes (one rank per node): the all-gather lands Eq. 2 bit for bit for M a power
        # of two or not; the reduce-scatter is bitwise the lane's order and within float64.
        for m in ("2", "3", "5", "8", "11"):
            out = run_json("simulate", "all-gather", "--lane", "ep", "-M", m, "-L", "1",
                           "--shapes", self.SHAPES, "--data-seed", m)
            self.assertEqual(out["lane"], "ep")
            self.assertTrue(out["passed"] and out["bitwise_equal_to_reference_order"], m)
            self.assertEqual(out["error_count"], 0, m)
        for m, extra in (("2", []), ("4", ["--accumulate"]), ("7", ["--rail-parts", "3"]),
                         ("8", ["--alpha", "0.3", "--accumulate"])):
            out = run_json("simulate", "reduce-scatter", "--lane", "ep", "-M", m, "-L", "1",
                           "--shapes", self.SHAPES, *extra)
            self.assertTrue(out["passed"] and out["bitwise_equal_to_reference_order"], (m, extra))
            self.assertLessEqual(out["max_abs_error"], out["tolerance"], (m, extra))
            other = run_json("simulate", "reduce-scatter", "--lane", "ep", "-M", m, "-L", "1",
                             "--shapes", self.SHAPES, "--data-seed", "7", *extra)
            self.assertNotEqual(out["output_sha256"], other["output_sha256"], (m, extra))

    def test_expert_parallel_lane_refusals(self):
        for args, words in (
                (["all-gather", "-M", "4", "-L", "2"], "one rank per node"),
                (["reduce-scatter", "-M", "9", "-L", "1"], "M <= 8"),
                (["step", "-M", "4", "-L", "1"], "not a step"),
                (["reduce-scatter", "-M", "4", "-L", "1", "--inject", "rs-land-twice"],
                 "not one of the expert-parallel lane")):
            result = run("simulate", *args, "--lane", "ep", "--shapes", self.SHAPES)
            self.assertEqual(result.returncode, 2, args)
            self.assertIn(words, result.stderr, args)
        result = run("simulate", "reduce-scatter", "-M", "4", "-L", "1", "--shapes", self.SHAPES,
                     "--inject", "ep-rs-inbox-reuse")
        self.assertEqual(result.returncode, 2)
        self.assertIn("--lane ep", result.stderr)

    def test_unexpected_detection_exits_1(self):
        # rs-land-twice shows as corruption; requiring a race instead must fail with status 1,
        # one line naming both, and the JSON still reporting how it showed.
        args = ("simulate", "reduce-scatter", "-M", "3", "-L", "2", "--shapes", self.SHAPES,
                "--inject", "rs-land-twice")
        self.assertEqual(run_json(*args)["detected_by"], "corruption")
        result = run(*args, "--expect-detection", "race", "--json")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(json.loads(result.stdout)["detected_as_expected"], False)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn("showed as corruption, expected race", lines[0])
        self.assertNotIn("internal error", lines[0])
        bad = run(*args, "--expect-detection", "bogus")
        self.assertEqual(bad.returncode, 2, bad.stderr)

    def test_inapplicable_fault_is_refused(self):
        result = run("simulate", "reduce-scatter", "-M", "3", "-L", "4", "--shapes", self.SHAPES,
                     "--inject", "rs-outbox-reuse")
        self.assertEqual(result.returncode, 2)
        self.assertIn("slot-reuse", result.stderr)

    def test_timing_only_llama_layer_at_64x8(self):
        import time
        start = time.time()
        out = run_json("simulate", "reduce-scatter", "--model", "llama3.1-70b", "-M", "64",
                       "-L", "8", "--timing-only")
        self.assertTrue(out["completed"])
        self.assertFalse(out["deadlock"])
        self.assertGreater(out["predicted_ms"], 0)
        self.assertLess(time.time() - start, 60)

    def test_data_at_64x8(self):
        # The scale point: every rank of 64 x 8 with real data, small shapes.
        for collective in ("all-gather", "reduce-scatter"):
            out = run_json("simulate", collective, "-M", "64", "-L", "8", "--shapes",
                           "1024x3,517,9x2")
            self.assertTrue(out["passed"], collective)
            self.assertEqual(out["error_count"], 0)

    def test_dump_checks_with_plain_python(self):
        import os
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            out = run_json("simulate", "reduce-scatter", "-M", "2", "-L", "2", "--shapes", "6x3,5",
                           "--dump", tmp)
            self.assertTrue(out["passed"])
            with open(os.path.join(tmp, "manifest.json")) as f:
                manifest = json.load(f)
            world, alpha = manifest["world"], manifest["alpha"]
            params = manifest["params"]
            grads = {(u, p): read_npy(os.path.join(tmp, f"grad_r{u}_p{p}.npy"))[2]
                     for u in range(world) for p in range(len(params))}
            for r in range(world):
                _, _, got = read_npy(os.path.join(tmp, f"out_r{r}.npy"))
                e = 0
                for p, param in enumerate(params):
                    rows, cols, rpr = param["rows"], param["cols"], param["rows_per_rank"]
                    for i in range(rpr * cols):
                        index = r * rpr * cols + i
                        want = 0.0
                        if index < rows * cols:
                            want = alpha * sum(grads[(u, p)][index] for u in range(world))
                        self.assertAlmostEqual(got[e], want, places=5)
                        e += 1


class BadInput(unittest.TestCase):
    def assert_rejected(self, *args, mentions=()):
        result = run(*args)
        self.assertEqual(result.returncode, 2, f"{args}: {result.stdout} {result.stderr}")
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertTrue(lines[0].startswith("tide: "), lines[0])
        for word in mentions:
            self.assertIn(word, lines[0])

    def test_topology(self):
        self.assert_rejected("plan", "--shapes", "8x8", "-M", "1", "-L", "9", mentions=("9", "1..8"))
        self.assert_rejected("plan", "--shapes", "8x8", "-M", "0", "-L", "8", mentions=("M = 0",))
        self.assert_rejected("plan", "--shapes", "8x8", "-M", "-4", "-L", "8")
        self.assert_rejected("plan", "--shapes", "8x8", "-M", "two")

    def test_shapes(self):
        self.assert_rejected("plan", "--shapes", "12xfoo", mentions=("foo",))
        self.assert_rejected("plan", "--shapes", "0x5", mentions=("at least 1",))
        self.assert_rejected("plan", "--shapes", "8x-5")
        self.assert_rejected("plan", "--shapes", "8x8,,4")
        self.assert_rejected("plan", "--shapes", "")
        self.assert_rejected("plan")
        self.assert_rejected("plan", "--shapes", "8x8", "--model", "llama3.1-70b")
        self.assert_rejected("plan", "--model", "gpt-5", mentions=("llama3.1-70b",))

    def test_contract(self):
        self.assert_rejected("plan", "--model", "qwen3-30b-a3b:layer-per-expert", "-M", "2",
                             mentions=("256", "stock"))
        self.assert_rejected("plan", "--shapes", ",".join(["4x4"] * 257), mentions=("257", "256"))

    def test_wave_width(self):
        self.assert_rejected("plan", "--shapes", "800x8", "-M", "9", "-L", "8", "--wave-width", "3",
                             mentions=("does not divide L = 8",))
        self.assert_rejected("plan", "--shapes", "800x8", "-M", "9", "-L", "8", "--wave-width", "9")
        self.assert_rejected("plan", "--shapes", "800x8", "--round-width", "0")
        self.assert_rejected("plan", "--shapes", "800x8", "--mode", "fast")
        self.assert_rejected("plan", "--shapes", "800x8", "--ag-dtype", "fp16")

    def test_rejected_plans_are_bad_input(self):
        # App. D's colliding plan: W_wave = 3 does not divide L = 8. No program is built from it,
        # with either landing, as a single call or in a step.
        for landing in ("pull", "switch-reduce"):
            self.assert_rejected("simulate", "reduce-scatter", "-M", "9", "-L", "8",
                                 "--wave-width", "3", "--shapes", "800x8", "--landing", landing,
                                 mentions=("plan rejected", "places contributors",
                                           "does not divide L = 8"))
        self.assert_rejected("simulate", "step", "-M", "9", "-L", "8", "--wave-width", "3",
                             "--shapes", "800x8", mentions=("plan rejected",))
        self.assert_rejected("simulate", "reduce-scatter", "-M", "9", "-L", "8", "--wave-width",
                             "3", "--shapes", "800x8", "--timing-only", mentions=("plan rejected",))

    def test_simulate_values(self):
        for alpha in ("nan", "inf", "-inf", "1e300"):
            self.assert_rejected("simulate", "reduce-scatter", "--shapes", "8x8", "-M", "2",
                                 "-L", "2", "--alpha", alpha, mentions=("--alpha",))
        self.assert_rejected("simulate", "reduce-scatter", "--shapes", "8x8", "--wave-width",
                             "0", mentions=("--wave-width",))
        self.assert_rejected("plan", "--shapes", "8x8", "--wave-width", "0",
                             mentions=("--wave-width",))
        self.assert_rejected("simulate", "reduce-scatter", "--shapes", "8x8", "-M", "2", "-L",
                             "2", "--dump", "/proc/nope", mentions=("--dump", "/proc/nope"))
        self.assert_rejected("simulate", "all-gather", "--shapes", "8x8", "--layers", "5",
                             mentions=("--layers", "tide simulate step"))
        self.assert_rejected("simulate", "reduce-scatter", "--shapes", "8x8", "--ag-stages", "1",
                             mentions=("--ag-stages",))

    def test_output_that_cannot_be_written_fails(self):
        with open("/dev/full", "w") as full:
            result = subprocess.run([TIDE, "plan", "--shapes", "8x8", "--json"], stdout=full,
                                    stderr=subprocess.PIPE, text=True, timeout=60)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        self.assertIn("stdout", result.stderr)

    def test_resources_refused_early_naming_the_estimate(self):
        import time
        cases = ((("simulate", "reduce-scatter", "--nodes", "8", "--model", "llama3.1-70b"),
                  ("GB", "--timing-only")),
                 (("simulate", "all-gather", "--nodes", "8", "--model", "llama3.1-70b"),
                  ("GB", "--timing-only")),
                 (("simulate", "step", "--model", "llama3.1-70b", "--layers", "100000",
                   "--timing-only"), ("M ops", "--layers")),
                 (("simulate", "step", "--shapes", "8x8", "--layers", "1000000"),
                  ("--layers", "100000")))
        for args, words in cases:
            start = time.time()
            self.assert_rejected(*args, mentions=words)
            self.assertLess(time.time() - start, 30, args)

    def test_plan_at_the_node_limit_is_fast(self):
        import time
        start = time.time()
        out = run_json("plan", "--model", "llama3.1-70b", "--nodes", "65536")
        self.assertEqual(out["topology"]["world"], 65536 * 8)
        self.assertLess(time.time() - start, 30)

    def test_other_commands(self):
        self.assert_rejected("memory", "--nodes", "8", "--inbox-generations", "3")
        self.assert_rejected("memory", "--nodes", "8", "--gpus-per-node", "12")
        self.assert_rejected("solve", "--bw-nic", "-1", "--bw-sum", "99", "--bw-land", "21",
                             "--bw-cap", "90", "--t-round", "1.3", "--nodes", "8",
                             "--shard-bytes", "100")
        self.assert_rejected("check-plans", "--gpus-per-node", "9", "--wave-widths", "1-8")
        self.assert_rejected("check-plans", "--wave-widths", "3-1")
        self.assert_rejected("frobnicate")


# ---- tide calibrate and the calibration file -----------------------------------------

import math  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402

CALIBRATION_NAMES = (
    "ce_copy_gbps", "ce_copy_2d_gbps", "nvlink_gbps", "nic_gbps", "sum_cta_gbps",
    "land_cta_gbps", "land_cap_gbps", "cast_cta_gbps", "memset_gbps", "round_wait_us",
    "kernel_launch_us", "copy_launch_us", "rail_latency_us", "memop_us", "event_us",
    "host_enqueue_us")
PAPER_RATES = {"ce_copy_gbps": 2000.0, "ce_copy_2d_gbps": 800.0, "nvlink_gbps": 450.0,
               "nic_gbps": 47.5, "sum_cta_gbps": 99.0, "land_cta_gbps": 21.0,
               "land_cap_gbps": 90.0, "cast_cta_gbps": 99.0, "memset_gbps": 2000.0,
               "round_wait_us": 1300.0, "kernel_launch_us": 4.0, "copy_launch_us": 2.0,
               "rail_latency_us": 5.0, "memop_us": 1.0, "event_us": 0.0,
               "host_enqueue_us": 2.0}


def calibration(**overrides):
    values = {}
    for name in CALIBRATION_NAMES:
        values[name] = {"value": overrides.get(name, PAPER_RATES[name]),
                        "unit": "GB/s" if name.endswith("_gbps") else "us",
                        "source": "measured" if name in overrides else "given",
                        "method": "test"}
    return {"tide_calibration": 1, "device": {"name": "test"}, "values": values,
            "details": {}}


class Calibration(unittest.TestCase):
    SOLVE = ("solve", "--nodes", "8", "--gpus-per-node", "8", "--shard-bytes", str(32 << 20))

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, content):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            f.write(content if isinstance(content, str) else json.dumps(content))
        return path

    def test_solve_reads_the_calibration_rates(self):
        paper = self.write("paper.json", calibration())
        out = run_json(*self.SOLVE, "--calibration", paper)
        self.assertEqual((out["sum_ctas"], out["landing_ctas"], out["round_width"]), (4, 4, 4))
        self.assertEqual(out["rates"]["bw_sum_gbps"], 99.0)
        self.assertEqual(out["rates"]["t_round_ms"], 1.3)
        # A slower Level 1 sum needs more CTAs: Eq. 13, ceil(1.5 (L b / 4 + 1) BW_NIC / BW_sum).
        slow = self.write("slow.json", calibration(sum_cta_gbps=33.0))
        out = run_json(*self.SOLVE, "--calibration", slow)
        self.assertEqual(out["rates"]["bw_sum_gbps"], 33.0)
        self.assertAlmostEqual(out["sum_ctas_exact"], 1.5 * (8 * 2 / 4 + 1) * 47.5 / 33.0)
        self.assertEqual(out["sum_ctas"], math.ceil(1.5 * 5 * 47.5 / 33.0))
        self.assertGreater(out["sum_ctas"], 4)
        # A flag overrides the file.
        out = run_json(*self.SOLVE, "--calibration", slow, "--bw-sum", "99")
        self.assertEqual(out["sum_ctas"], 4)
        # The landing and the rail come from the file too.
        out = run_json(*self.SOLVE, "--calibration",
                       self.write("land.json", calibration(land_cap_gbps=42.0)))
        self.assertEqual(out["landing_cap_ctas"], 2)

    def test_solve_needs_rates_or_a_calibration(self):
        result = run(*self.SOLVE, "--bw-nic", "47.5", "--bw-land", "21", "--bw-cap", "90",
                     "--t-round", "1.3")
        self.assertEqual(result.returncode, 2, result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertIn("--bw-sum", lines[0])
        self.assertIn("--calibration", lines[0])

    def test_bad_calibration_files_name_the_field(self):
        def rejected(content, *mentions):
            path = self.write("bad.json", content)
            for args in (("solve", *self.SOLVE[1:], "--calibration", path),
                         ("simulate", "reduce-scatter", "-M", "2", "-L", "2", "--shapes", "8x4",
                          "--timing-only", "--cost-model", path)):
                result = run(*args)
                self.assertEqual(result.returncode, 2, f"{args}: {result.stderr}")
                lines = result.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, result.stderr)
                self.assertTrue(lines[0].startswith("tide: "), lines[0])
                for word in mentions:
                    self.assertIn(word, lines[0])

        c = calibration()
        del c["values"]["sum_cta_gbps"]
        rejected(c, "missing field values.sum_cta_gbps")
        c = calibration(nic_gbps=-1.0)
        rejected(c, "values.nic_gbps.value", "> 0")
        c = calibration()
        c["values"]["memop_us"]["source"] = "guessed"
        rejected(c, "values.memop_us.source", "measured", "given")
        c = calibration()
        c["values"]["land_cta_gbps"]["value"] = "fast"
        rejected(c, "values.land_cta_gbps.value", "number")
        c = calibration()
        c["values"]["bogus_gbps"] = c["values"]["nic_gbps"]
        rejected(c, "values.bogus_gbps")
        c = calibration()
        c["tide_calibration"] = 7
        rejected(c, "tide_calibration")
        rejected('{"tide_calibration": 1, "values": {', "malformed JSON")
        result = run(*self.SOLVE, "--calibration", os.path.join(self.dir.name, "missing.json"))
        self.assertEqual(result.returncode, 2)
        self.assertIn("cannot read", result.stderr)

    def test_inputs_that_are_not_regular_files_are_refused_at_once(self):
        # A device that never ends (/dev/zero, /dev/full) or a directory: one line, exit 2,
        # without reading it.
        for path in ("/dev/zero", "/dev/full", self.dir.name):
            for args in (("solve", *self.SOLVE[1:], "--calibration", path),
                         ("simulate", "reduce-scatter", "-M", "1", "-L", "1", "--shapes", "8x8",
                          "--cost-model", path)):
                result = run(*args)
                self.assertEqual(result.returncode, 2, f"{args}: {result.stderr}")
                lines = result.stderr.strip().splitlines()
                self.assertEqual(len(lines), 1, result.stderr)
                self.assertIn("not a regular file", lines[0])

    def test_simulate_takes_the_calibration_as_its_cost_model(self):
        args = ("simulate", "reduce-scatter", "-M", "4", "-L", "2", "--shapes", "4096x64",
                "--timing-only", "--cost-model")
        fast = run_json(*args, self.write("fast.json", calibration()))
        # A NIC 100x slower: a small slowdown can reorder the simulated timeline (the
        # contention model is not monotone: at 10x, node-contiguous sub-slices predict 4% less).
        slow = run_json(*args, self.write("slow.json", calibration(nic_gbps=0.475)))
        self.assertTrue(fast["completed"] and slow["completed"])
        self.assertGreater(slow["predicted_ms"], fast["predicted_ms"])
        # The same rates as a plain override object give the same prediction.
        plain = run_json(*args, self.write("plain.json", dict(PAPER_RATES)))
        self.assertEqual(plain["predicted_ms"], fast["predicted_ms"])

    def test_simulate_names_its_machine(self):
        # A machine file ("machine": "virtual-fabric", NOTE [virtual-fabric machine]) selects
        # the one-GPU machine, and the JSON and the table say so; anything else is per GPU.
        machine = {"machine": "virtual-fabric", "gpu": "test GPU", "source": "made up",
                   "hbm_gbps": 3000.0, "copy_gbps_by_streams": [[1, 1500.0]],
                   "sum_cta_gelems": [{"l": 2, "accumulate": False, "gelems": 4.0},
                                      {"l": 2, "accumulate": True, "gelems": 3.5}],
                   "land_cta_gbps": 17.0, "cast_cta_gbps": 43.0, "sms": 132, "hw_queues": 8}
        args = ("simulate", "reduce-scatter", "-M", "1", "-L", "2", "--shapes", "4096x64",
                "--timing-only", "--jitter", "0")
        fabric = self.write("fabric.json", machine)
        one_gpu = run_json(*args, "--cost-model", fabric)
        self.assertEqual(one_gpu["machine"], "virtual-fabric")
        self.assertEqual(one_gpu["machine_gpu"], "test GPU")
        per_gpu = run_json(*args)
        self.assertEqual(per_gpu["machine"], "per-gpu")
        self.assertNotIn("machine_gpu", per_gpu)
        self.assertEqual(run_json(*args, "--cost-model", self.write("c.json", calibration()))
                         ["machine"], "per-gpu")
        self.assertNotEqual(one_gpu["predicted_ms"], per_gpu["predicted_ms"])
        table = run(*args, "--cost-model", fabric)
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("virtual-fabric (test GPU)", table.stdout)

    def test_calibrate_without_a_gpu_says_so(self):
        result = run("calibrate", "--quick", "--json")
        if result.returncode == 0:
            self.skipTest("a CUDA device is present: tide calibrate measured it")
        self.assertEqual(result.returncode, 2, result.stderr)
        lines = result.stderr.strip().splitlines()
        self.assertEqual(len(lines), 1, result.stderr)
        self.assertTrue(lines[0].startswith("tide: "), lines[0])
        self.assertIn("no CUDA device found", lines[0])
        self.assertIn("GPU", lines[0])
        self.assertEqual(result.stdout, "")

    def test_calibrate_rejects_bad_flags(self):
        for args in (("--sum-ctas", "0"), ("--nic-gbps", "-3")):
            result = run("calibrate", *args)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)


class OneByteAllGather(unittest.TestCase):
    """fp8 and u8 all-gather items (NOTE [1-byte all-gather items]): half of bf16's bytes, moved
    byte for byte; gradients stay bf16 or fp32."""
    SOLVE = ("solve", "--bw-nic", "47.5", "--bw-sum", "99", "--bw-land", "21", "--bw-cap", "90",
             "--t-round", "1.3", "--nodes", "8", "--gpus-per-node", "8",
             "--shard-bytes", str(32 << 20))

    def test_simulate_fp8_is_byte_exact_on_fresh_seeded_bytes(self):
        import os
        import random
        import tempfile
        seed = random.randrange(1, 1 << 31)  # fresh inputs every run; printed on failure
        for dtype, extra in (("fp8", ()), ("u8", ("--staged",))):
            with tempfile.TemporaryDirectory() as tmp:
                out = run_json("simulate", "all-gather", "-M", "3", "-L", "2", "--shapes",
                               "37x5,3,11x7", "--ag-dtype", dtype, "--data-seed", str(seed),
                               "--dump", tmp, *extra)
                msg = f"{dtype} data seed {seed}"
                self.assertEqual(out["data_seed"], seed, msg)
                self.assertEqual((out["ag_dtype"], out["grad_dtype"]), (dtype, "bf16"), msg)
                self.assertTrue(out["passed"], msg)
                self.assertTrue(out["bitwise_equal_to_reference_order"], msg)
                self.assertEqual(out["max_abs_error"], 0, msg)
                self.assertEqual(out["error_count"], 0, msg)
                with open(os.path.join(tmp, "manifest.json")) as f:
                    manifest = json.load(f)
                world, params = manifest["world"], manifest["params"]
                self.assertEqual(world, 6)
                shards = [read_npy(os.path.join(tmp, f"shard_r{u}.npy")) for u in range(world)]
                # R_p K_p = 7 x 5 + 1 + 2 x 7 = 50 one-byte items: half of bf16's 100 bytes
                for descr, shape, values in shards:
                    self.assertEqual((descr, shape), ("|u1", (50,)), msg)
                    self.assertNotIn(0, values, msg)  # byte codes 1..255, never zeros
                self.assertGreater(len({tuple(v) for _, _, v in shards}), 1, msg)
                for r in range(world):
                    offset = 0
                    for p, param in enumerate(params):
                        rows, cols, rpr = param["rows"], param["cols"], param["rows_per_rank"]
                        descr, shape, got = read_npy(os.path.join(tmp, f"landing_r{r}_p{p}.npy"))
                        self.assertEqual((descr, shape), ("|u1", (rows, cols)), msg)
                        want = []  # Eq. 2: the ranks' shards of p in rank order, padding cut
                        for u in range(world):
                            want += shards[u][2][offset:offset + rpr * cols]
                        self.assertEqual(got, want[:rows * cols], f"{msg} rank {r} param {p}")
                        offset += rpr * cols
        text = run("simulate", "all-gather", "-M", "2", "-L", "2", "--shapes", "9x3",
                   "--ag-dtype", "fp8", "--data-seed", str(seed))
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn(f"data seed                     {seed}", text.stdout)
        self.assertIn("all-gather fp8, gradients bf16", text.stdout)

    def test_simulate_step_and_reduce_scatter_beside_fp8(self):
        out = run_json("simulate", "step", "-M", "2", "-L", "2", "--groups", "37x5,3;11x7",
                       "--layers", "2", "--ag-dtype", "fp8", "--grad-dtype", "fp32")
        self.assertTrue(out["passed"])
        out = run_json("simulate", "reduce-scatter", "-M", "2", "-L", "2", "--shapes", "37x5",
                       "--ag-dtype", "fp8")
        self.assertTrue(out["passed"])
        self.assertEqual(out["grad_dtype"], "bf16")

    def test_one_byte_gradients_and_casts_are_refused(self):
        for dtype in ("fp8", "u8"):
            result = run("simulate", "reduce-scatter", "-M", "2", "-L", "2", "--shapes", "9x3",
                         "--grad-dtype", dtype)
            self.assertEqual(result.returncode, 2, result.stderr)
            self.assertIn(f"{dtype} is an all-gather-only dtype", result.stderr)
            self.assertIn("bf16 or fp32", result.stderr)
        for args in (("simulate", "all-gather", "--shapes", "9x3", "--cast", "--ag-dtype", "fp8"),
                     ("memory", "-M", "2", "--groups", "9x3", "--cast", "--ag-dtype", "fp8"),
                     ("memory", "-M", "2", "--grad-dtype", "fp8"),
                     ("solve", *self.SOLVE[1:], "--grad-dtype", "u8"),
                     ("simulate", "all-gather", "--shapes", "9x3", "--ag-dtype", "fp16")):
            result = run(*args)
            self.assertEqual(result.returncode, 2, f"{args}: {result.stderr}")
            self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        result = run("simulate", "all-gather", "--shapes", "9x3", "--ag-dtype", "fp16")
        self.assertIn("bf16, fp32, fp8 or u8", result.stderr)

    def test_memory_lays_out_mixed_bf16_and_fp8_groups(self):
        groups = "1000x64,999;1000x64,999;1000x64,999"
        out = run_json("memory", "-M", "2", "-L", "4", "--groups", groups,
                       "--ag-dtype", "bf16,fp8,fp8", "--slots", "-1,0,0")
        g = out["groups"]
        self.assertEqual([x["ag_dtype"] for x in g], ["bf16", "fp8", "fp8"])
        self.assertEqual([x["grad_dtype"] for x in g], ["bf16"] * 3)
        # N = 8: R_p K_p = 125 x 64 + 125 = 8125 elements per rank
        self.assertEqual([x["shard_bytes"] for x in g], [16250, 8125, 8125])
        self.assertEqual([x["landing_bytes"] for x in g], [130000, 65000, 65000])
        slots = {s["id"]: s for s in out["arena"]["slots"]}
        self.assertEqual(slots[-1]["bytes"], 130000)
        self.assertEqual(slots[0]["bytes"], 65000)  # the fp8 groups' shared slot: half
        self.assertEqual(slots[0]["groups"], [1, 2])
        bf16 = run_json("memory", "-M", "2", "-L", "4", "--groups", groups, "--slots", "-1,0,0")
        self.assertEqual({s["id"]: s["bytes"] for s in bf16["arena"]["slots"]},
                         {-1: 130000, 0: 130000})
        self.assertEqual(out["arena"]["reduce_scatter_bytes"],
                         bf16["arena"]["reduce_scatter_bytes"])  # the gradients are bf16 in both
        self.assertEqual(out["arena"]["arena_bytes"] + 65536, bf16["arena"]["arena_bytes"])
        one = run_json("memory", "-M", "2", "-L", "4", "--groups", groups, "--ag-dtype", "fp8")
        self.assertEqual([x["ag_dtype"] for x in one["groups"]], ["fp8"] * 3)
        text = run("memory", "-M", "2", "-L", "4", "--groups", groups, "--ag-dtype", "bf16,fp8,u8")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("all-gather dtype", text.stdout)
        for dtype in ("bf16", "fp8", "u8"):
            self.assertIn(dtype, text.stdout)
        bad = run("memory", "-M", "2", "--groups", "9x3;9x3", "--ag-dtype", "bf16,fp8,fp8")
        self.assertEqual(bad.returncode, 2)
        self.assertIn("3 entries for 2 groups", bad.stderr)

    def test_solve_all_gather_term_halves_for_fp8(self):
        bf16 = run_json(*self.SOLVE)
        fp8 = run_json(*self.SOLVE, "--ag-dtype", "fp8")
        self.assertEqual((bf16["ag_dtype"], fp8["ag_dtype"]), ("bf16", "fp8"))
        self.assertEqual(bf16["ag_shard_bytes"], 32 << 20)
        self.assertEqual(fp8["ag_shard_bytes"], 16 << 20)
        self.assertAlmostEqual(bf16["t_ag_nic_ms"], 7 * (32 << 20) / 47.5e6, places=9)
        self.assertAlmostEqual(2 * fp8["t_ag_nic_ms"], bf16["t_ag_nic_ms"], places=12)
        for key in ("sum_ctas", "landing_ctas", "round_width", "rounds_in_flight", "t_nic_ms",
                    "fp32_shard_bytes"):
            self.assertEqual(fp8[key], bf16[key], key)  # the reduce-scatter's terms keep b_grad
        plain = run(*self.SOLVE)
        self.assertNotIn("t_AG", plain.stdout)  # the default text is unchanged
        asked = run(*self.SOLVE, "--ag-dtype", "fp8")
        self.assertIn("all-gather wire time t_AG  2.472 ms", asked.stdout)

    def test_check_runtime_host_backend_gathers_fp8(self):
        for dtype, extra in (("fp8", ("--ring", "--staged-shards")), ("u8", ())):
            result = run("check-runtime", "-M", "2", "-L", "2", "--groups", "37x5,3;11x7,4x4",
                         "--ag-dtype", dtype, "--calls", "10", "--json", *extra)
            self.assertEqual(result.returncode, 0, result.stdout[-800:] + result.stderr)
            out = json.loads(result.stdout)
            self.assertTrue(out["passed"])
            self.assertEqual((out["ag_dtype"], out["mismatches"]), (dtype, 0))
            self.assertEqual([r["calls"] for r in out["per_rank"]], [10] * 4)

if __name__ == "__main__":
    TIDE = sys.argv.pop(1)
    unittest.main(verbosity=2)
