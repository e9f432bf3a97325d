#!/usr/bin/env python3
"""The scaling question: TIDE-RS against stock FSDP2 on one Llama-3.1-70B layer's
reduce-scatter at M x 8 GPUs, M = 2 to 128, in the fair model (the calibrated baseline of
NOTE [cost model]; timing only, no jitter).

TIDE-RS runs twice: with lockstep rounds (k = 4, d = 1: every round waits for its own
arrivals, so App. G's t_rnd = 1.3 ms adds up over the rounds) and with what `tide solve`
picks for that M (k, and d rounds in flight: round i's sends start once round i - d's arrivals
are in, so a round's wait hides behind the next rounds' transfers; no placement, wave or
generation changes, so App. D's guarantees hold). Stock FSDP2 is simulated up to M = 64;
at 128 its N - 1 ring steps are more ops than the simulator holds, and its time is the
least-squares line in N - 1 through M = 16, 32, 64 (a ring's time is linear in its step count
once latency-bound; the script prints the fit's residuals).

Writes bench/results/simulate/scaling.md and scaling.json. Run after scripts/build.sh:
    python3 bench/simulate/scaling.py [--reuse] [path/to/tide]
(--reuse takes the runs already in scaling.json and simulates only the missing ones.)
"""
import datetime
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
TIDE = ARGS[0] if ARGS else str(ROOT / "build/src/cli/tide")
NODES = (2, 4, 8, 16, 32, 64, 128)
SIMULATED_STOCK = (2, 4, 8, 16, 32, 64)
FIT = (16, 32, 64)
L = 8
# App. G's calibration, the cost model's defaults.
APP_G = ["--bw-nic", "47.5", "--bw-sum", "99", "--bw-land", "21", "--bw-cap", "90", "--t-round",
         "1.3"]


def run(args):
    out = subprocess.run([TIDE, *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def simulate(m, extra):
    return run(["simulate", "reduce-scatter", "--model", "llama3.1-70b", "--nodes", str(m),
                "--gpus-per-node", str(L), "--timing-only", "--jitter", "0", "--json", *extra])


def solve(m):
    plan = run(["plan", "--model", "llama3.1-70b", "--nodes", str(m), "--gpus-per-node", str(L),
                "--json"])
    shard = plan["layout"]["grad_shard_bytes"]
    return run(["solve", "--nodes", str(m), "--gpus-per-node", str(L), "--shard-bytes",
                str(shard), *APP_G, "--json"])


def main():
    # --reuse: take the TIDE runs and solver choices from the last scaling.json (they take
    # minutes at M = 128) and simulate only what is missing.
    reuse = {}
    if "--reuse" in sys.argv:
        old = json.loads((ROOT / "bench/results/simulate/scaling.json").read_text())
        reuse = {r["nodes"]: r for r in old["rows"]}
        reuse_stock = {r["nodes"]: r["stock_ms"] for r in old["rows"] if not r["stock_extrapolated"]}
    rows = []
    stock = {}
    for m in SIMULATED_STOCK:
        if m in reuse and m in reuse_stock:
            stock[m] = reuse_stock[m]
        else:
            stock[m] = simulate(m, ["--baseline"])["predicted_ms"]
        print(f"stock M={m}: {stock[m]:.2f} ms", flush=True)
    xs = [m * L - 1 for m in FIT]
    ys = [stock[m] for m in FIT]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    intercept = my - slope * mx
    residuals = {m: intercept + slope * (m * L - 1) - stock[m] for m in FIT}
    for m in NODES:
        s = solve(m)
        k, d = s["round_width"], s["rounds_in_flight"]
        if m in reuse and (reuse[m]["round_width"], reuse[m]["rounds_in_flight"]) == (k, d):
            lockstep, solved = reuse[m]["tide_lockstep_ms"], reuse[m]["tide_solved_ms"]
        else:
            lockstep = simulate(m, ["--round-width", "4", "--rounds-in-flight", "1"])["predicted_ms"]
            solved = simulate(m, ["--round-width", str(k), "--rounds-in-flight", str(d)])[
                "predicted_ms"]
        extrapolated = m not in stock
        base = stock[m] if not extrapolated else intercept + slope * (m * L - 1)
        rows.append({"nodes": m, "gpus": m * L, "rounds": s["rounds"], "round_width": k,
                     "rounds_in_flight": d, "tide_lockstep_ms": lockstep, "tide_solved_ms": solved,
                     "stock_ms": base, "stock_extrapolated": extrapolated,
                     "tide_ahead": solved < base})
        print(f"M={m}: k={k} d={d} lockstep {lockstep:.2f} solved {solved:.2f} stock {base:.2f}",
              flush=True)
    doc = {"what": "TIDE-RS vs stock FSDP2, one Llama-3.1-70B layer's reduce-scatter, M x 8, "
                   "fair cost model (bench/simulate/scaling.py)",
           "date": str(datetime.date.today()),
           "stock_fit": {"ms_per_ring_step": slope, "intercept_ms": intercept,
                         "through_nodes": list(FIT), "residual_ms": residuals},
           "rows": rows}
    out = ROOT / "bench/results/simulate"
    (out / "scaling.json").write_text(json.dumps(doc, indent=1) + "\n")
    ahead = all(r["tide_ahead"] for r in rows)
    lines = [
        "# The scaling question: TIDE-RS vs stock FSDP2 from 16 to 1024 GPUs (predicted)",
        "",
        f"Made by `python3 bench/simulate/scaling.py` on {doc['date']}. One Llama-3.1-70B "
        "layer's reduce-scatter at M x 8 GPUs, `tide simulate reduce-scatter --timing-only "
        "--jitter 0`, default cost model (App. G's network and TIDE rates; the stock baseline "
        "calibrated on H200 measurements, bench/results/simulate/validation.md). Predictions of "
        "a first-order model, not measurements. TIDE-RS In-Place, W_wave = L, 16 sum + 4 "
        "landing CTAs. *lockstep*: k = 4, d = 1 (each network round waits for its own "
        "arrivals, paying t_rnd = 1.3 ms per round in series). *solved*: k and the rounds in "
        "flight d from `tide solve` for that M (App. G's rule for k; d = 1 + ceil(t_rnd / "
        "t_round) when the rounds' waits exceed 10% of t_NIC): round i's sends start once "
        "round i - d's arrivals are in, so each round's wait overlaps the next rounds' "
        "transfers. Placement, waves and inbox generations are unchanged (reuse stays gated "
        "by CREDIT and SENT), so App. D's guarantees hold (`tide check-plans` is unaffected).",
        "",
        f"Stock FSDP2 is simulated up to M = {SIMULATED_STOCK[-1]}; beyond (marked *) it is "
        f"the least-squares line in its ring step count N - 1 through M = "
        f"{', '.join(map(str, FIT))}: {slope * 1000:.2f} us per step + {intercept:.2f} ms "
        "(residuals " + ", ".join(f"{residuals[m] * 1000:+.0f} us" for m in FIT) + ").",
        "",
        "| M x L | GPUs | rounds at k | k | d | TIDE lockstep ms | TIDE solved ms | stock ms | "
        "solved vs stock |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        star = "*" if r["stock_extrapolated"] else ""
        lines.append(f"| {r['nodes']} x {L} | {r['gpus']} | {r['rounds']} | {r['round_width']} | "
                     f"{r['rounds_in_flight']} | {r['tide_lockstep_ms']:.2f} | "
                     f"{r['tide_solved_ms']:.2f} | {r['stock_ms']:.2f}{star} | "
                     f"{r['stock_ms'] / r['tide_solved_ms']:.2f}x |")
    lines += ["", ("TIDE-RS with the solver's rounds in flight is ahead of stock FSDP2 at every M "
                   "from 2 to 128 in this model." if ahead else
                   "TIDE-RS is NOT ahead of stock FSDP2 at every M: see the rows below 1.00x."),
              ""]
    (out / "scaling.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
