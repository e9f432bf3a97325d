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
least-squares fit of a + b (N - 1) / N + c (N - 1) through M = 8 to 64 (each ring step: a
latency plus S_fp32 / L bytes, which shrink as 1 / N; the script prints the residuals).

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
FIT = (8, 16, 32, 64)
L = 8
# App. G's calibration, the cost model's defaults.
APP_G = ["--bw-nic", "47.5", "--bw-sum", "99", "--bw-land", "21", "--bw-cap", "90", "--t-round",
         "1.3"]


def run(args):
    out = subprocess.run([TIDE, *args], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def least_squares(rows, ys):
    """Coefficients p minimising sum (rows[i] . p - ys[i])^2 (normal equations)."""
    k = len(rows[0])
    a = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    b = [sum(r[i] * y for r, y in zip(rows, ys)) for i in range(k)]
    for i in range(k):  # Gauss-Jordan with partial pivoting
        p = max(range(i, k), key=lambda r: abs(a[r][i]))
        a[i], a[p], b[i], b[p] = a[p], a[i], b[p], b[i]
        for r in range(k):
            if r != i:
                f = a[r][i] / a[i][i]
                a[r] = [x - f * y for x, y in zip(a[r], a[i])]
                b[r] -= f * b[i]
    return [b[i] / a[i][i] for i in range(k)]


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
    # The ring's N - 1 steps each cost a latency plus S_fp32 / L bytes on the slowest hop,
    # and S_fp32 shrinks as 1 / N: stock(N) = a + b (N - 1) / N + c (N - 1), least squares.
    def terms(m):
        n = m * L
        return [1.0, (n - 1) / n, n - 1.0]

    def fitted(m):
        return sum(p * t for p, t in zip(params, terms(m)))

    params = least_squares([terms(m) for m in FIT], [stock[m] for m in FIT])
    residuals = {m: fitted(m) - stock[m] for m in FIT}
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
        base = stock[m] if not extrapolated else fitted(m)
        rows.append({"nodes": m, "gpus": m * L, "rounds": s["rounds"], "round_width": k,
                     "rounds_in_flight": d, "tide_lockstep_ms": lockstep, "tide_solved_ms": solved,
                     "stock_ms": base, "stock_extrapolated": extrapolated,
                     "tide_ahead": solved < base})
        print(f"M={m}: k={k} d={d} lockstep {lockstep:.2f} solved {solved:.2f} stock {base:.2f}",
              flush=True)
    doc = {"what": "TIDE-RS vs stock FSDP2, one Llama-3.1-70B layer's reduce-scatter, M x 8, "
                   "fair cost model (bench/simulate/scaling.py)",
           "date": str(datetime.date.today()),
           "stock_fit": {"form": "a + b (N - 1) / N + c (N - 1)", "a_ms": params[0],
                         "b_ms": params[1], "c_ms_per_step": params[2],
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
        f"Stock FSDP2 is simulated up to M = {SIMULATED_STOCK[-1]}; at 128 (marked *) its "
        "1023 ring steps are more ops than the simulator holds, and its time is the least-squares "
        "fit of a + b (N - 1) / N + c (N - 1) through M = " + ", ".join(map(str, FIT)) +
        f": each ring step costs a latency, c = {params[2] * 1000:.2f} us, plus S_fp32 / L bytes "
        "on its slowest hop, which shrink as 1 / N, so the steps' bytes add up to b (N - 1) / "
        f"N; a holds the pack and the kernel start. Over this range (N - 1) / N is 0.98 to "
        f"1.00, so a and b are not told apart, only their sum, {params[0] + params[1]:.2f} ms, "
        "and the prediction at 128 rests on c. Residuals " +
        ", ".join(f"{residuals[m] * 1000:+.0f} us" for m in FIT) + ".",
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
              "",
              "What the answer rests on: (1) t_rnd is a latency from a round's last arrival to "
              "its wait seeing it, so the waits of rounds in flight overlap (NOTE [cost model]); "
              "if it were a serial per-round cost of a shared resource, rounds in flight would "
              "not hide it and only fewer rounds would help (at least ceil(M / L) with "
              "wave-aligned rounds: 16 x 1.3 ms at 128 x 8, more than stock's whole call). (2) At "
              "128 x 8 both systems are bound by the rail: TIDE-RS at t_NIC = (M - 1) S_fp32 / "
              "BW_NIC = 17.9 ms plus its tail, the stock ring at its 1023 steps; the 2.2 ms margin "
              "is stock's pack (2.5 ms) and per-step latency against TIDE's round waits and "
              "landing tail, all first-order terms. (3) The stock figure at 128 is extrapolated "
              "(above).",
              ""]
    (out / "scaling.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
