#!/usr/bin/env python3
"""Figures of the code's shape, re-measured before and after a restructuring (docs/architecture.md).

Prints, for the files git tracks (and untracked ones it does not ignore) under src/, include/
and python/:

1. lines per top-level folder (src/<x>, include/tide/<x>, python/tide/<x>): code, comment and
   blank lines;
2. the files over 400 lines;
3. the comment share of include/ (comment lines over non-blank lines), and the headers (in
   include/ and src/) whose opening comment block (before the first line of code) is longer
   than 40 lines;
4. the passages of six or more lines that repeat in src/ and python/: runs of at least six
   consecutive code lines (comments, blank lines, lone punctuation and imports left out,
   white space folded) that stand identically in two places. Each pair of places counts once,
   however long the run.

Comment lines: `//` lines and `/* ... */` blocks in C++/CUDA, `#` lines and docstrings in
Python. A line with code and a trailing comment counts as code.

Where this machine has the `duplicates` tool, its summary of src/ and python/ follows.

Pure Python, no dependencies. Usage: code_figures.py [--root DIR] [--markdown]
"""
import argparse
import collections
import os
import re
import shutil
import subprocess

CPP_EXT = (".cpp", ".hpp", ".cu", ".cuh", ".h", ".cc")
PY_EXT = (".py",)
TREES = ("src", "include", "python")
BIG = 400
LONG_HEAD = 40
RUN = 6


def tracked(root):
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"] +
                             list(TREES), cwd=root, capture_output=True, text=True,
                             check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        out = []
        for t in TREES:
            for d, _, files in os.walk(os.path.join(root, t)):
                out += [os.path.relpath(os.path.join(d, f), root) for f in files]
    return sorted(p for p in out if p.endswith(CPP_EXT + PY_EXT)
                  and os.path.isfile(os.path.join(root, p)))


def folder(path):
    parts = path.split("/")
    if parts[0] in ("include", "python") and len(parts) > 2 and parts[1] == "tide":
        parts = [parts[0] + "/tide"] + parts[2:]
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0] + " (top files)"


def classify(path, lines):
    """One of 'code', 'comment', 'blank' per line."""
    kinds = []
    if path.endswith(PY_EXT):
        quote = None
        expect_doc = True  # a string statement where a docstring may stand
        for line in lines:
            s = line.strip()
            if quote:
                kinds.append("comment")
                if quote in s:
                    quote = None
                continue
            if not s:
                kinds.append("blank")
                continue
            if s.startswith("#"):
                kinds.append("comment")
                continue
            m = re.match(r'^[rRbBuU]?("""|\'\'\')', s)
            if m and expect_doc:
                kinds.append("comment")
                rest = s[m.end():]
                if m.group(1) not in rest:
                    quote = m.group(1)
                continue
            kinds.append("code")
            expect_doc = s.endswith(":")
        return kinds
    block = False
    for line in lines:
        s = line.strip()
        if block:
            kinds.append("comment")
            if "*/" in s:
                block = False
                if s.split("*/", 1)[1].strip():
                    kinds[-1] = "code"
            continue
        if not s:
            kinds.append("blank")
        elif s.startswith("//"):
            kinds.append("comment")
        elif s.startswith("/*"):
            kinds.append("comment")
            if "*/" not in s[2:]:
                block = True
            elif s.split("*/", 1)[1].strip():
                kinds[-1] = "code"
        else:
            kinds.append("code")
    return kinds


def opening_comment(kinds, lines):
    """Comment lines before a header's first line of code (include guards and #pragma once
    do not end the opening)."""
    n = 0
    for kind, line in zip(kinds, lines):
        s = line.strip()
        if kind == "comment":
            n += 1
        elif kind == "code" and not s.startswith(("#pragma once", "#ifndef", "#define", "#include")):
            break
    return n


def normal(path, line):
    s = " ".join(line.split())
    if not s or re.fullmatch(r"[{}()\[\];,:]*", s):
        return None
    if path.endswith(PY_EXT) and re.match(r"(import|from)\s", s):
        return None
    if path.endswith(CPP_EXT) and s.startswith("#include"):
        return None
    return s


def repeats(files):
    """Pairs of places that share a run of RUN or more identical code lines."""
    seqs = {}
    for path, (lines, kinds) in files.items():
        seq = []
        for i, (line, kind) in enumerate(zip(lines, kinds), 1):
            if kind != "code":
                continue
            n = normal(path, line)
            if n is not None:
                seq.append((n, i))
        seqs[path] = seq
    where = collections.defaultdict(list)
    for path, seq in seqs.items():
        for k in range(len(seq) - RUN + 1):
            where[tuple(x[0] for x in seq[k:k + RUN])].append((path, k))
    pairs = {}
    for places in where.values():
        if len(places) < 2 or len(places) > 8:  # too common to be one passage
            continue
        for a in range(len(places)):
            for b in range(a + 1, len(places)):
                (pa, ka), (pb, kb) = places[a], places[b]
                if pa == pb and abs(ka - kb) < RUN:
                    continue
                key = (pa, pb, ka - kb)  # one diagonal: one run
                pairs.setdefault(key, []).append((ka, kb))
    runs = []
    for (pa, pb, _), starts in pairs.items():
        starts.sort()
        first = prev = starts[0]
        for s in starts[1:] + [None]:
            if s is not None and s[0] == prev[0] + 1:
                prev = s
                continue
            la = (seqs[pa][first[0]][1], seqs[pa][prev[0] + RUN - 1][1])
            lb = (seqs[pb][first[1]][1], seqs[pb][prev[1] + RUN - 1][1])
            runs.append((prev[0] - first[0] + RUN, pa, la, pb, lb))
            if s is not None:
                first = prev = s
    runs.sort(key=lambda r: (-r[0], r[1], r[2]))
    return runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--markdown", action="store_true", help="tables for docs/architecture.md")
    ap.add_argument("--most", type=int, default=10, help="repeated passages to list")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    files = {}
    for p in tracked(root):
        with open(os.path.join(root, p), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        files[p] = (lines, classify(p, lines))

    per = collections.OrderedDict()
    for p, (lines, kinds) in files.items():
        c = per.setdefault(folder(p), collections.Counter())
        c.update(kinds)
        c["files"] += 1
    md = a.markdown
    print("## Lines per folder\n" if md else "lines per folder (files, code, comment, blank, total)")
    if md:
        print("| folder | files | code | comment | blank | total |\n|---|---:|---:|---:|---:|---:|")
    total = collections.Counter()
    for tree in TREES:
        sub = collections.Counter()
        for name in sorted(k for k in per if k.startswith(tree)):
            c = per[name]
            sub.update(c)
            row = (name, c["files"], c["code"], c["comment"], c["blank"],
                   c["code"] + c["comment"] + c["blank"])
            print(("| `%s` | %d | %d | %d | %d | %d |" if md else "  %-28s %4d %7d %7d %6d %7d") % row)
        total.update(sub)
        row = (tree + "/ (all)", sub["files"], sub["code"], sub["comment"], sub["blank"],
               sub["code"] + sub["comment"] + sub["blank"])
        print(("| **%s** | %d | %d | %d | %d | %d |" if md else "  %-28s %4d %7d %7d %6d %7d") % row)
    row = ("all three", total["files"], total["code"], total["comment"], total["blank"],
           total["code"] + total["comment"] + total["blank"])
    print(("| **%s** | %d | %d | %d | %d | %d |" if md else "  %-28s %4d %7d %7d %6d %7d") % row)

    big = sorted(((len(l), p) for p, (l, _) in files.items() if len(l) > BIG), reverse=True)
    print(f"\n## Files over {BIG} lines: {len(big)}\n" if md else f"\nfiles over {BIG} lines: {len(big)}")
    for n, p in big:
        print(f"- `{p}`: {n}" if md else f"  {n:5d} {p}")

    inc = collections.Counter()
    heads = []
    for p, (lines, kinds) in files.items():
        if p.startswith("include/"):
            inc.update(kinds)
        if p.endswith((".hpp", ".cuh", ".h")):
            h = opening_comment(kinds, lines)
            if h > LONG_HEAD:
                heads.append((h, p))
    share = inc["comment"] / max(1, inc["comment"] + inc["code"])
    line = (f"comment share of include/: {share:.1%} ({inc['comment']} comment lines, "
            f"{inc['code']} code lines)")
    print(f"\n## Headers\n\n{line}; headers (include/ and src/) opening with more than "
          f"{LONG_HEAD} comment lines: {len(heads)}\n" if md else f"\n{line}\nheaders "
          f"(include/ and src/) opening with more than {LONG_HEAD} comment lines: {len(heads)}")
    for h, p in sorted(heads, reverse=True):
        print(f"- `{p}`: {h}" if md else f"  {h:5d} {p}")

    code = {p: v for p, v in files.items() if p.startswith(("src/", "python/"))}
    runs = repeats(code)
    lines_in = sum(r[0] for r in runs)
    head = (f"passages of {RUN}+ code lines repeated in src/ and python/: {len(runs)} pairs, "
            f"{lines_in} repeated lines")
    print(f"\n## Repeats\n\n{head}; the longest:\n" if md else f"\n{head}; the longest:")
    for n, pa, la, pb, lb in runs[:a.most]:
        t = f"{pa}:{la[0]}-{la[1]} ~ {pb}:{lb[0]}-{lb[1]} ({n} lines)"
        print(f"- `{t}`" if md else f"  {t}")
    tool = shutil.which("duplicates")  # this machine's tool, which also pairs same-shape runs
    if tool:
        print("\nthe `duplicates` tool (identical or same-shape runs):\n" if md else
              "the duplicates tool (identical or same-shape runs):")
        for tree in ("src", "python"):
            out = subprocess.run([tool, "--repo", os.path.join(root, tree), "--seconds", "60"],
                                 capture_output=True, text=True).stdout.split("\n")[0]
            print(f"- `{tree}/`: {out}" if md else f"  {tree}/: {out}")


if __name__ == "__main__":
    main()
