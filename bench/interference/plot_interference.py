"""Slowdown of the victims against communication CTAs (the paper's Fig. 4) from the
interference benchmark's JSON.

Usage: python3 plot_interference.py interference_h200.json interference_h200.png
One line per load kind (spin cluster 1 and 4, NCCL-style persistent reduction cluster 1 and 4,
TIDE's Level 1 sum); Eq. 4's prediction for spin loads dashed (cluster 1: worst placement, the
band down to best placement shaded). The GEMM victim is the first panel (Fig. 4); the probe and
the elementwise victim follow.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FLOOR = 0.1  # percent: the log axis cannot show zero or less

LINES = (  # (load, cluster, style, colour, label)
    ("spin", 1, "o-", "tab:gray", "spin (resident), cluster 1"),
    ("spin", 4, "o-", "black", "spin (resident), cluster 4"),
    ("persistent", 1, "D-", "tab:red", "NCCL-style persistent reduce, cluster 1"),
    ("persistent", 4, "s-", "darkred", "NCCL-style persistent reduce, cluster 4"),
    ("tide-level1", 1, "*-", "tab:blue", "TIDE Level 1 sum (short-lived)"),
)


def pct(v):
    return max(FLOOR, 100.0 * v) if v is not None else None


def main(src, dst):
    data = json.load(open(src))
    rows = data["rows"]
    victims = [v for v in ("gemm", "probe", "elementwise") if any(r["victim"] == v for r in rows)]
    if not victims:
        print("no rows yet; nothing to plot")
        return
    fig, axes = plt.subplots(1, len(victims), figsize=(5.6 * len(victims), 4.6), squeeze=False)
    for ax, victim in zip(axes[0], victims):
        mine = [r for r in rows if r["victim"] == victim]
        for load, cluster, style, color, label in LINES:
            pts = sorted((r for r in mine if r["load"] == load and r["cluster"] == cluster),
                         key=lambda r: r["ctas"])
            if not pts:
                continue
            ax.plot([r["ctas"] for r in pts], [pct(r["slowdown"]) for r in pts], style,
                    color=color, ms=9 if style.startswith("*") else 5, label=label)
            if load != "spin":
                continue
            hi = [(r["ctas"], pct(r.get("eq4_high"))) for r in pts
                  if r.get("eq4_high") is not None]
            lo = [(r["ctas"], pct(r.get("eq4_low"))) for r in pts
                  if r.get("eq4_low") is not None]
            if hi:
                ax.plot(*zip(*hi), "--", color=color, alpha=0.7,
                        label=f"Eq. 4, cluster {cluster}" + (" (worst placement)"
                                                             if cluster == 1 else ""))
            if cluster == 1 and lo and len(lo) == len(hi):
                ax.fill_between([c for c, _ in hi], [v for _, v in lo], [v for _, v in hi],
                                color=color, alpha=0.12, label="Eq. 4 best..worst placement")
        ax.legend(fontsize=7)
        ax.set_yscale("log")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("communication CTAs")
        ax.set_ylabel(f"victim slowdown, % (median; <= {FLOOR}% drawn at {FLOOR})")
        iso = data["isolated"][victim]["median_ms"]
        title = f"{victim} (alone {iso:.3f} ms)"
        if victim == "gemm" and data.get("gemm_grid", {}).get("clusters") is not None:
            g = data["gemm_grid"]
            title += (f"\nEq. 4: n_gemm={g['clusters']} clusters of {g['cluster_ctas']} "
                      f"(est.), n_slot={g['slots_measured']}")
        elif victim == "probe":
            p = data["probe"]
            title += f"\n{p['clusters']} clusters of {p['cluster_size']}, n_slot={p['slots_measured']}"
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    probe = data["probe"]
    fig.suptitle(f"{data['gpu']}, {data['sms']} SMs: {probe['slots_measured']} slots for "
                 f"{probe['cluster_size']}-CTA clusters, {probe['spare_sms']} SMs outside; "
                 f"{data.get('status', '')}", fontsize=9)
    fig.tight_layout()
    fig.savefig(dst, dpi=130)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
