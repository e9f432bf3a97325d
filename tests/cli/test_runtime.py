#!/usr/bin/env python3
"""The runtime's host backend across processes, through `tide check-runtime`.

Every case runs one process per rank with fresh inputs at fresh addresses on every call and
no barrier between calls; the tool checks every output on every rank bit for bit against the
definition (TIDE's arithmetic order). Faults: a rank killed mid-run and a rank issuing its
calls in another order must make every other rank fail within the timeout, naming the cause,
with no process or shared-memory segment left behind.

Usage: test_runtime.py PATH_TO_TIDE   (seed: TIDE_TEST_SEED, printed on failure)
"""
import glob
import json
import os
import random
import subprocess
import sys
import time

TIDE = sys.argv[1] if len(sys.argv) > 1 else "build/src/cli/tide"
SEED = int(os.environ.get("TIDE_TEST_SEED", random.randrange(1 << 31)))
FAILURES = []


def run(args, timeout=300, env=None):
    start = time.monotonic()
    p = subprocess.run([TIDE, "check-runtime", *args], capture_output=True, text=True,
                       timeout=timeout, env=None if env is None else {**os.environ, **env})
    return p, time.monotonic() - start


def run_json(name, args, env=None):
    """check-runtime's JSON summary, or None after recording a failure for a run without one."""
    p, _ = run(args, env=env)
    try:
        return p, json.loads(p.stdout)
    except json.JSONDecodeError:
        check(name, False, f"exit {p.returncode}, no JSON: {p.stdout[-400:]} {p.stderr[-400:]}")
        return p, None


def run_passing(name, args, env=None):
    """check-runtime's JSON summary, after checking that every output was bit for bit right;
    None (a failure recorded) for a run without one."""
    p, summary = run_json(name, args, env)
    if summary is not None:
        check(name, p.returncode == 0 and summary["passed"] and summary["mismatches"] == 0,
              f"exit {p.returncode}: {json.dumps(summary)[:600]}")
    return summary


def check(name, cond, detail=""):
    if not cond:
        FAILURES.append(f"{name}: {detail}")
        print(f"FAIL {name}: {detail}", flush=True)
    else:
        print(f"ok   {name}", flush=True)


def shm_segments():
    return sorted(glob.glob("/dev/shm/tide-*"))


def odd_groups(rng):
    groups = []
    for _ in range(3):
        shapes = [f"{rng.randint(1, 41)}x{rng.randint(1, 13)}" for _ in range(rng.randint(1, 4))]
        if rng.random() < 0.5:
            shapes.append(str(rng.randint(1, 29)))  # a 1-D bias or norm weight
        groups.append(",".join(shapes))
    return ";".join(groups)


def main():
    rng = random.Random(SEED)
    print(f"seed {SEED} (rerun with TIDE_TEST_SEED={SEED})", flush=True)
    before = shm_segments()

    # Bitwise equality over many calls, 2 to 8 processes, both modes, with and without a cast.
    # The last four cases use the other TIDE-RS sub-slice geometries.
    cases = [(1, 2, "in-place", False, "across-ranks"), (2, 1, "slot-reuse", False, "across-ranks"),
             (2, 2, "in-place", True, "across-ranks"), (3, 1, "slot-reuse", False, "across-ranks"),
             (1, 4, "in-place", False, "across-ranks"), (2, 4, "slot-reuse", False, "across-ranks"),
             (4, 2, "in-place", False, "across-ranks"), (2, 2, "slot-reuse", False, "per-rank"),
             (1, 4, "in-place", True, "per-rank"), (2, 2, "in-place", True, "node-contiguous"),
             (2, 4, "slot-reuse", False, "node-contiguous")]
    for m, l, mode, cast, sub_slices in cases:
        groups = odd_groups(rng)
        seed = rng.randrange(1 << 30)
        args = ["-M", str(m), "-L", str(l), "--groups", groups, "--calls", "14", "--seed",
                str(seed), "--mode", mode, "--sub-slices", sub_slices, "--timeout-s", "60", "--json"]
        if cast:
            args.append("--cast")
        name = f"{m}x{l} {mode} {sub_slices}{' cast' if cast else ''} groups {groups} seed {seed}"
        p, summary = run_json(name, args)
        if summary is None:
            continue
        check(name, p.returncode == 0 and summary["passed"] and summary["mismatches"] == 0
              and summary["ranks"] == m * l and summary["calls"] == 14,
              f"exit {p.returncode}: {json.dumps(summary)[:600]}")

    # NOTE [communicator arena]: groups sharing two ring slots (released after each all-gather's
    # check), one stage and TIDE-RS's areas, shards passed with every call; and `tide memory
    # --groups` lays out, byte for byte, the arena the runtime reports.
    for m, l, mode, cast in [(1, 3, "in-place", False), (2, 2, "slot-reuse", True),
                             (3, 2, "in-place", False), (1, 4, "slot-reuse", False),
                             (2, 1, "in-place", True)]:
        groups = ";".join([odd_groups(rng), odd_groups(rng)])  # six groups
        seed = rng.randrange(1 << 30)
        args = ["-M", str(m), "-L", str(l), "--groups", groups, "--calls", "26", "--seed",
                str(seed), "--mode", mode, "--ring", "--staged-shards", "--timeout-s", "60", "--json"]
        if cast:
            args.append("--cast")
        name = f"ring {m}x{l} {mode}{' cast' if cast else ''} groups {groups} seed {seed}"
        summary = run_passing(name, args)
        if summary is None:
            continue
        arenas = [r.get("arena") for r in summary["per_rank"]]
        check(f"{name}: every rank lays out one arena", all(a == arenas[0] for a in arenas), arenas)
        check(f"{name}: two ring slots", len(summary["arena"]["slots"]) == 2, summary["arena"])
        memory = subprocess.run([TIDE, "memory", "-M", str(m), "-L", str(l), "--groups", groups,
                                 "--slots", "ring", "--mode", mode, "--json"]
                                + (["--cast"] if cast else []), capture_output=True, text=True)
        laid_out = json.loads(memory.stdout)["arena"] if memory.returncode == 0 else memory.stderr
        check(f"{name}: tide memory agrees with the runtime", laid_out == summary["arena"],
              f"memory {laid_out} runtime {summary['arena']}")

    # NOTE [runtime] 9: each node a host of its own (--nodes-as-hosts). Rail traffic between
    # hosts travels as two-sided messages (NOTE [host rail transport]); bitwise as before, and
    # messages flow exactly where there are several hosts. Shapes above the transport's
    # 64 KiB chunk are included.
    for m, l, mode, cast, extra in [(2, 1, "in-place", False, []), (2, 2, "slot-reuse", True, []),
                                    (3, 2, "in-place", False, ["--ring", "--staged-shards"]),
                                    (4, 1, "slot-reuse", False, ["--sub-slices", "per-rank"]),
                                    (2, 4, "in-place", True, ["--sub-slices", "node-contiguous"]),
                                    (1, 3, "in-place", False, [])]:
        groups = odd_groups(rng) + ";" + f"{rng.randint(500, 700)}x{rng.randint(200, 300)},7"
        seed = rng.randrange(1 << 30)
        args = ["-M", str(m), "-L", str(l), "--groups", groups, "--calls", "10", "--seed",
                str(seed), "--mode", mode, "--nodes-as-hosts", "--timeout-s", "60", "--json",
                *extra] + (["--cast"] if cast else [])
        name = f"hosts {m}x{l} {mode} {' '.join(extra)}{' cast' if cast else ''} groups {groups} seed {seed}"
        p, summary = run_json(name, args)
        if summary is None:
            continue
        check(name, p.returncode == 0 and summary["passed"] and summary["mismatches"] == 0
              and summary["nodes_as_hosts"], f"exit {p.returncode}: {json.dumps(summary)[:600]}")
        sent = [r.get("rail_messages", -1) for r in summary["per_rank"]]
        check(f"{name}: rail messages between hosts only",
              all(n > 0 for n in sent) if m > 1 else all(n == 0 for n in sent), sent)
    # NOTE [runtime] 11: ranks one per host (M x 1, --nodes-as-hosts) run the expert-parallel
    # lane (App. F): every all-gather bit for bit at Eq. 2 over a poisoned landing, every
    # reduce-scatter bit for bit in the lane's order (ep_rs_expected), no receive stage in the
    # arena. Beyond the 8-source sum (M = 9) the reduce-scatter falls back to TIDE-RS and says
    # why; the all-gather stays on the lane.
    for m, mode, extra in [(2, "in-place", ["--staged-shards"]), (3, "slot-reuse", ["--cast"]),
                           (5, "in-place", ["--ring", "--staged-shards"]), (8, "in-place", []),
                           (9, "in-place", ["--staged-shards"])]:
        groups = odd_groups(rng)
        seed = rng.randrange(1 << 30)
        args = ["-M", str(m), "-L", "1", "--groups", groups, "--calls", "14", "--seed", str(seed),
                "--mode", mode, "--nodes-as-hosts", "--timeout-s", "60", "--json", *extra]
        name = f"ep lane M={m} {mode} {' '.join(extra)} groups {groups} seed {seed}"
        summary = run_passing(name, args)
        if summary is None:
            continue
        lanes = summary.get("lanes", [])
        want_rs = "ep" if m <= 8 else "tide-rs"
        check(f"{name}: on the lane", len(lanes) == 3 and all(
            lane.startswith(f"ep/{want_rs}") for lane in lanes), lanes)
        if m > 8:
            check(f"{name}: the fallback says why", all("M <= 8" in lane for lane in lanes), lanes)
        check(f"{name}: no receive stage", summary["arena"]["stage_bytes"] == 0, summary["arena"])
        if "--ring" in extra:  # `tide memory --lane ep` lays out the runtime's arena
            memory = subprocess.run([TIDE, "memory", "-M", str(m), "-L", "1", "--groups", groups,
                                     "--slots", "ring", "--mode", mode, "--lane", "ep", "--json"],
                                    capture_output=True, text=True)
            laid_out = json.loads(memory.stdout)["arena"] if memory.returncode == 0 else memory.stderr
            check(f"{name}: tide memory --lane ep agrees with the runtime",
                  laid_out == summary["arena"], f"memory {laid_out} runtime {summary['arena']}")

    p, _ = run(["-M", "2", "-L", "2", "--groups", "33x7,5", "--calls", "4", "--json"])
    summary = json.loads(p.stdout)
    check("one host: no rail messages", p.returncode == 0 and
          all(r.get("rail_messages") == 0 for r in summary["per_rank"]), json.dumps(summary)[:600])

    # Across hosts, a killed rank and another call order fail every rank as on one host.
    timeout_s = 5
    p, elapsed = run(["-M", "2", "-L", "2", "--groups", "33x7,5;17x3", "--calls", "20",
                      "--kill-rank", "3", "--kill-at-call", "6", "--nodes-as-hosts",
                      "--timeout-s", str(timeout_s), "--json"], timeout=120)
    summary = json.loads(p.stdout)
    others = [r for r in summary["per_rank"] if r["rank"] != 3]
    check("hosts kill: every other rank names the dead rank", p.returncode == 1 and
          all("rank 3 died" in r.get("error", "") for r in others), json.dumps(others))
    check("hosts kill: within the timeout", all(r["seconds"] < timeout_s + 5 for r in others),
          json.dumps(others))
    # A rank alone on its host (NOTE [peer liveness]): its peers on the other host do not read
    # its pid; its silent heartbeat names it, within half the timeout and a period.
    p, elapsed = run(["-M", "2", "-L", "1", "--groups", "33x7,5;17x3", "--calls", "20",
                      "--kill-rank", "1", "--kill-at-call", "6", "--nodes-as-hosts",
                      "--timeout-s", str(timeout_s), "--json"], timeout=120)
    summary = json.loads(p.stdout)
    others = [r for r in summary["per_rank"] if r["rank"] != 1]
    check("hosts kill, alone on its host: the other host names it by its heartbeat",
          p.returncode == 1 and all("rank 1 died or stalled" in r.get("error", "") for r in others),
          json.dumps(others))
    check("hosts kill, alone on its host: before the call's own timeout",
          all(r["seconds"] < timeout_s for r in others), json.dumps(others))
    p, elapsed = run(["-M", "2", "-L", "1", "--groups", "9x5;7x3,11", "--calls", "8",
                      "--misorder-rank", "1", "--nodes-as-hosts", "--timeout-s", "10", "--json"],
                     timeout=120)
    summary = json.loads(p.stdout)
    check("hosts misorder: every rank reports a call-order mismatch", p.returncode == 1 and
          all("call-order mismatch" in r.get("error", "") for r in summary["per_rank"]),
          json.dumps(summary["per_rank"]))
    check("hosts misorder: found well before the timeout", elapsed < 10, f"{elapsed:.1f} s")

    # NOTE [one-node TIDE-RS]: at M = 1 the one-node layout by default, TIDE_ONE_NODE=0 the
    # multi-node one (its Level 1 staging and spares: a larger reduce-scatter area); both
    # bitwise (calls vary alpha and accumulate). Another value is refused, naming the variable.
    for l, mode in [(2, "slot-reuse"), (2, "in-place")]:
        # Groups of MiBs at 1 x 2, where TIDE wins (rs_defaults.hpp contract 10; at 1 x 4 and
        # 1 x 8 groups of this size keep stock), and the layouts differ by pages.
        groups = "2048x512,1001x33;1536x512"
        seed = rng.randrange(1 << 30)
        args = ["-M", "1", "-L", str(l), "--groups", groups, "--calls", "8", "--seed", str(seed),
                "--mode", mode, "--ring", "--staged-shards", "--timeout-s", "60", "--json"]
        name = f"one-node knob 1x{l} {mode} groups {groups} seed {seed}"
        one = run_passing(name + " default", args)
        multi = run_passing(name + " TIDE_ONE_NODE=0", args, env={"TIDE_ONE_NODE": "0"})
        if one is not None and multi is not None:
            check(f"{name}: the multi-node layout holds a larger reduce-scatter area",
                  multi["arena"]["reduce_scatter_bytes"] > one["arena"]["reduce_scatter_bytes"],
                  f"one-node {one['arena']} multi-node {multi['arena']}")
    p, _ = run(["-M", "1", "-L", "2", "--groups", "9x5", "--json"], timeout=120,
               env={"TIDE_ONE_NODE": "yes"})
    check("TIDE_ONE_NODE=yes is refused naming the variable",
          p.returncode != 0 and "TIDE_ONE_NODE" in p.stdout + p.stderr,
          p.stdout[-300:] + p.stderr[-300:])

    # A rank killed mid-run: every other rank fails within the timeout, naming it.
    timeout_s = 5
    p, elapsed = run(["-M", "1", "-L", "4", "--groups", "33x7,5;17x3", "--calls", "20",
                      "--kill-rank", "2", "--kill-at-call", "5", "--timeout-s",
                      str(timeout_s), "--json"], timeout=120)
    summary = json.loads(p.stdout)
    others = [r for r in summary["per_rank"] if r["rank"] != 2]
    check("kill: exit status 1", p.returncode == 1, f"exit {p.returncode}")
    check("kill: every other rank names the dead rank",
          all("rank 2 died" in r.get("error", "") for r in others), json.dumps(others))
    check("kill: every other rank failed within the timeout",
          all(r["seconds"] < timeout_s + 5 for r in others), json.dumps(others))
    check("kill: the killed rank is reported", "signal 9" in summary["per_rank"][2].get("error", ""),
          json.dumps(summary["per_rank"][2]))

    # Another call order on one rank: a call-order mismatch, not a hang or corruption.
    p, elapsed = run(["-M", "1", "-L", "2", "--groups", "9x5;7x3,11", "--calls", "8",
                      "--misorder-rank", "1", "--timeout-s", "10", "--json"], timeout=120)
    summary = json.loads(p.stdout)
    check("misorder: exit status 1", p.returncode == 1, f"exit {p.returncode}")
    check("misorder: every rank reports a call-order mismatch",
          all("call-order mismatch" in r.get("error", "") for r in summary["per_rank"]),
          json.dumps(summary["per_rank"]))
    check("misorder: found well before the timeout", elapsed < 10, f"{elapsed:.1f} s")

    # Nothing left behind: no segment, no process.
    time.sleep(0.2)
    check("no shared-memory segment left", shm_segments() == before,
          f"{set(shm_segments()) - set(before)}")
    ps = subprocess.run(["pgrep", "-f", "tide check-runtime"], capture_output=True, text=True)
    check("no process left", ps.stdout.strip() == "", ps.stdout)

    # Bad input: one line, exit 2.
    for bad in (["-M", "1", "-L", "2", "--groups", "9x5", "--procs", "3"],
                ["-M", "1", "-L", "2", "--groups", "9x5;;3"],
                ["-M", "1", "-L", "2", "--groups", "9x0"],
                ["-M", "1", "-L", "2", "--groups", "9x5", "--mode", "fast"],
                ["-M", "1", "-L", "2", "--groups", "9x5", "--sub-slices", "diagonal"],
                ["-M", "1", "-L", "2", "--groups", "9x5", "--kill-rank", "1"],
                ["-M", "1", "-L", "2", "--groups", "9x5", "--backend", "tcp"],
                ["-M", "1", "-L", "2", "--groups", "9x5", "--misorder-rank", "0"],
                ["-M", "1", "-L", "2", "--groups", "9x5", "--stall-rank", "0", "--stall-at-call", "1"],
                ["-M", "1", "-L", "2", "--groups", "9x5", "--stall-rank", "0"],
                ["-M", "1", "-L", "2", "--groups", "9x5", "--release-rank", "0", "--release-at-call", "1"],
                ["-M", "1", "-L", "2", "--groups", "9x5", "--backend", "ipc", "--release-rank", "1"],
                ["-M", "1", "-L", "2", "--groups", "9x5", "--backend", "ipc", "--release-rank", "2",
                 "--release-at-call", "1"],
                ["-M", "1", "-L", "2", "--groups", "100000x100000"]):
        p, _ = run(bad)
        lines = p.stderr.strip().splitlines()
        check(f"bad input {' '.join(bad[4:])}", p.returncode == 2 and len(lines) == 1
              and "internal error" not in p.stderr, f"exit {p.returncode}: {p.stderr!r}")

    # The GPU backends without a GPU: one line that says so, nothing forked.
    if not os.path.exists("/dev/nvidiactl"):
        for backend in ("ipc", "nccl"):
            p, _ = run(["--backend", backend, "-M", "1", "-L", "2", "--groups", "9x5"])
            lines = p.stderr.strip().splitlines()
            check(f"{backend} without a GPU: one line", p.returncode != 0 and len(lines) == 1
                  and ("needs GPUs" in p.stderr or "built without" in p.stderr)
                  and "internal error" not in p.stderr, f"exit {p.returncode}: {p.stderr!r}")

    if FAILURES:
        print(f"{len(FAILURES)} failures (seed {SEED})")
        sys.exit(1)
    print("all runtime checks passed")


if __name__ == "__main__":
    main()
