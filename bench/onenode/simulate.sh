#!/usr/bin/env bash
# One-node TIDE-RS and TIDE-AG against stock FSDP2 on the reference executor's cost model:
# `tide simulate --timing-only --jitter 0`, library defaults, against --baseline,
# for the Llama-3.1-8B and 70B decoder layers at 1 x 2, 1 x 4 and 1 x 8; and the arena of two
# such layers (`tide memory -M 1 --groups "G;G"`) in units of NS (one unsharded bf16 layer).
# Usage: bench/onenode/simulate.sh [path/to/tide] > bench/results/onenode/simulate.md
set -euo pipefail
tide="${1:-build/src/cli/tide}"
latency() { "$tide" simulate "$@" --timing-only --jitter 0 --json | python3 -c \
  'import json,sys; print("%.3f" % json.load(sys.stdin)["predicted_ms"])'; }
ratio() { python3 -c "print('%.2fx' % ($1 / $2))"; }

echo "## Speed: predicted ms per call (cost model), TIDE vs stock FSDP2"
echo
echo "| layer | N | RS stock | RS TIDE In-Place | RS TIDE Slot-Reuse | RS speed-up (In-Place / Slot-Reuse) | AG stock | AG TIDE (staged shards) | AG speed-up |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for model in llama3.1-8b llama3.1-70b; do
  for l in 2 4 8; do
    rs_stock=$(latency reduce-scatter -L "$l" --model "$model" --baseline)
    rs_ip=$(latency reduce-scatter -L "$l" --model "$model" --mode in-place)
    rs_sr=$(latency reduce-scatter -L "$l" --model "$model" --mode slot-reuse)
    ag_stock=$(latency all-gather -L "$l" --model "$model" --baseline)
    ag=$(latency all-gather -L "$l" --model "$model" --staged)
    echo "| $model | 1x$l | $rs_stock | $rs_ip | $rs_sr | $(ratio "$rs_stock" "$rs_ip") / $(ratio "$rs_stock" "$rs_sr") | $ag_stock | $ag | $(ratio "$ag_stock" "$ag") |"
  done
done

echo
echo "## Memory: two layers' communicator arena, in NS (tide memory -M 1 --groups \"G;G\")"
echo
echo "| layer | N | arena In-Place | In-Place + 1 NS live gradients | arena Slot-Reuse | stock FSDP2 |"
echo "| --- | --- | --- | --- | --- | --- |"
for model in llama3.1-8b llama3.1-70b; do
  for l in 2 4 8; do
    line=$(python3 - "$tide" "$model" "$l" <<'PY'
import json, subprocess, sys
tide, model, l = sys.argv[1], sys.argv[2], sys.argv[3]
shapes = {
  "llama3.1-8b": (4096, 14336, 32, 8),
  "llama3.1-70b": (8192, 28672, 64, 8),
}[model]
h, f, heads, kv = shapes
hd = h // heads
g = ",".join(f"{r}x{c}" for r, c in [(heads*hd, h), (kv*hd, h), (kv*hd, h), (h, heads*hd),
                                     (f, h), (f, h), (h, f), (h, 1), (h, 1)])
def arena(mode):
    j = json.loads(subprocess.check_output([tide, "memory", "-M", "1", "-L", l, "--groups",
                                            f"{g};{g}", "--mode", mode, "--json"]))
    return j
ip, sr = arena("in-place"), arena("slot-reuse")
ns = ip["arena"]["slots"][0]["bytes"]  # one unsharded bf16 layer
def total(j): return j["arena"]["arena_bytes"]
print(f"{total(ip)/ns:.3f} | {total(ip)/ns + 1:.3f} | {total(sr)/ns:.3f} | 4")
PY
)
    echo "| $model | 1x$l | $line |"
  done
done
