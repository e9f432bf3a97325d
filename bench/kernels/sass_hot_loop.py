#!/usr/bin/env python3
"""Instruction mix of the Level 1 warp-direct fast loop, from `cuobjdump -sass` output.

Usage: sass_hot_loop.py SASS_FILE [KERNEL_REGEX ...]

For each kernel whose mangled name matches a regex (default: every level1_sum_direct_kernel
instantiation), finds the innermost loop (a backward branch and its target) that holds 16-byte
global loads (or cp.async LDGSTS copies) and stores and no warp shuffles (the fast path of
docs/kernels.md, "Level 1: the warp-direct kernel"), and prints its instruction count per fp32 output (each STG.E.128 stores
four outputs of one thread), its spill instructions and its opcode mix.
"""
import collections
import re
import sys


def kernels(text):
    for block in re.split(r"\n\s*Function : ", text)[1:]:
        name = block.split("\n", 1)[0].strip()
        ins = []
        for line in block.split("\n"):
            m = re.match(r"\s*/\*([0-9a-f]+)\*/\s+(.*?)\s*;", line)
            if m:
                ins.append((int(m.group(1), 16), m.group(2)))
        yield name, ins


def hot_loop(ins):
    index = {a: i for i, (a, _) in enumerate(ins)}
    best = None
    for i, (a, text) in enumerate(ins):
        m = re.search(r"BRA (0x[0-9a-f]+)", text)
        if not m:
            continue
        target = int(m.group(1), 16)
        if target >= a or target not in index:
            continue
        body = [t for _, t in ins[index[target]:i + 1]]
        if any("SHFL" in t for t in body):
            continue
        loads = any("LDG.E.EF.128" in t or "LDGSTS" in t for t in body)
        if not any("STG.E.128" in t for t in body) or not loads:
            continue
        if best is None or len(body) < len(best[2]):
            best = (target, a, body)
    return best


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    text = open(sys.argv[1]).read()
    patterns = sys.argv[2:] or [r"level1_sum_direct_kernel"]
    for name, ins in kernels(text):
        if not any(re.search(p, name) for p in patterns):
            continue
        loop = hot_loop(ins)
        if loop is None:
            print(f"{name}: no fast loop")
            continue
        start, end, body = loop
        ops = collections.Counter(re.sub(r"^@!?U?P\w+ ", "", t).split()[0].split(".")[0]
                                  for t in body)
        outputs = 4 * sum("STG.E.128" in t for t in body)
        spills = sum(("LDL" in t or "STL" in t) for t in body)
        print(f"{name}: loop {start:#x}-{end:#x}, {len(body)} instructions for {outputs} outputs "
              f"per thread = {len(body) / outputs:.2f} per output, {spills} spill instructions")
        print("    " + ", ".join(f"{k} {v}" for k, v in ops.most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
