"""Plots the Level 1 sum's GB/s (total and per CTA) against CTA count from kernels_h200.json."""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

src, dst = sys.argv[1], sys.argv[2]
j = json.load(open(src))
ctas = sorted(int(k) for k in j["sum_gbps_total"])
total = [j["sum_gbps_total"][str(c)] for c in ctas]
per = [j["sum_gbps_per_cta"][str(c)] for c in ctas]
fig, ax = plt.subplots(1, 2, figsize=(11, 4))
ax[0].plot(ctas, total, "o-", label="TMA pipeline (L=8 bf16 -> fp32)")
ax[0].axhline(j["copy_ceiling_gbps"], color="k", ls="--", label="copy ceiling")
ax[0].axhline(0.85 * j["copy_ceiling_gbps"], color="gray", ls=":", label="85% of ceiling")
ax[0].set_xscale("log", base=2)
ax[0].set_xlabel("CTAs")
ax[0].set_ylabel("logical GB/s")
ax[1].plot(ctas, per, "o-", label="TMA pipeline")
if "sum_warp_direct_gbps_per_cta" in j:
    wd = [j["sum_warp_direct_gbps_per_cta"][str(c)] for c in ctas]
    ax[1].plot(ctas, wd, "s-", label="warp-direct")
    ax[0].plot(ctas, [w * c for w, c in zip(wd, ctas)], "s-", label="warp-direct")
ax[1].axhline(100, color="gray", ls=":", label="target 100 GB/s/CTA at 4 CTAs")
ax[1].set_xscale("log", base=2)
ax[1].set_xlabel("CTAs")
ax[1].set_ylabel("logical GB/s per CTA")
ax[1].legend()
ax[0].legend()
fig.suptitle(f"TIDE Level 1 sum on {j['gpu']}")
fig.tight_layout()
fig.savefig(dst, dpi=110)
print("wrote", dst)
