"""Slowdown of the one-wave victims against communication CTAs (the paper's Fig. 4) from the
interference benchmark's JSON.

Usage: python3 plot_interference.py interference_h200.json interference_h200.png
Lines: resident spin kernels (cluster size 1 and 4) with Eq. 4's prediction dashed; markers:
the NCCL-style persistent reduction and TIDE's short-lived Level 1 sum CTAs.
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FLOOR = 0.1  # percent: the log axis cannot show zero


def pct(v):
    return max(FLOOR, 100.0 * v) if v is not None else None


def main(src, dst):
    data = json.load(open(src))
    rows = data["rows"]
    victims = [v for v in ("probe", "gemm", "elementwise") if any(r["victim"] == v for r in rows)]
    fig, axes = plt.subplots(1, len(victims), figsize=(5.2 * len(victims), 4.2), squeeze=False)
    for ax, victim in zip(axes[0], victims):
        mine = [r for r in rows if r["victim"] == victim]
        for cluster, color in ((1, "tab:gray"), (4, "black")):
            spin = sorted((r for r in mine if r["load"] == "spin" and r["cluster"] == cluster),
                          key=lambda r: r["ctas"])
            if not spin:
                continue
            ax.plot([r["ctas"] for r in spin], [pct(r["slowdown"]) for r in spin], "o-",
                    color=color, label=f"spin, cluster {cluster}")
            model = [(r["ctas"], pct(r.get("eq4_model_high"))) for r in spin
                     if r.get("eq4_model_high") is not None]
            if model:
                ax.plot(*zip(*model), "--", color=color, alpha=0.6,
                        label=f"Eq. 4, cluster {cluster}" + (" (upper)" if cluster == 1 else ""))
        for r in mine:
            if r["load"] == "persistent":
                marker = "s" if r["cluster"] == 4 else "D"
                ax.plot(r["ctas"], pct(r["slowdown"]), marker, color="tab:red", ms=8,
                        label=f"persistent reduce, cluster {r['cluster']}")
            elif r["load"] == "tide-level1":
                ax.plot(r["ctas"], pct(r["slowdown"]), "*", color="tab:blue", ms=12,
                        label="TIDE Level 1 sum")
        handles, labels = ax.get_legend_handles_labels()
        seen = {}
        for h, lab in zip(handles, labels):
            seen.setdefault(lab, h)
        ax.legend(seen.values(), seen.keys(), fontsize=7)
        ax.set_yscale("log")
        ax.set_xlabel("communication CTAs")
        ax.set_ylabel("victim slowdown, % (median)")
        iso = data["isolated"][victim]["median_ms"]
        ax.set_title(f"{victim} (alone {iso:.3f} ms)")
        ax.grid(True, which="both", alpha=0.3)
    probe = data["probe"]
    fig.suptitle(f"{data['gpu']}, {data['sms']} SMs: {probe['slots_measured']} slots for "
                 f"{probe['cluster_size']}-CTA clusters, {probe['spare_sms']} SMs outside")
    fig.tight_layout()
    fig.savefig(dst, dpi=130)
    print(f"wrote {dst}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
