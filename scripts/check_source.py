#!/usr/bin/env python3
"""Source checks that no compiler makes (run by CTest as tide_source_checks, so by CI):

1. NOTE [name] comments: each name is defined exactly once (a comment or docstring line holding
   `NOTE [name]` alone, the heading of its block; in docs/*.md a heading `## NOTE [name]`, for
   notes whose narrative lives in the docs), every other mention (`NOTE [name]: ...` a
   citation) refers to a defined name, and
   a mention that names a file (`NOTE [x] in path`, `NOTE [x] (path`) names the defining one.
2. No tracker references ("issue 7", "Issue 3's") in code, scripts or build files: the code
   explains itself, history lives in git.
3. NOTE [environment knobs]: every TIDE_* environment variable the sources read (a quoted name
   in C++ or Python, a $TIDE_... in shell) is declared in include/tide/core/env.hpp, and
   docs/environment.md is the table generated from those declarations.

   With --tide BINARY, `tide --help-env` must print every declared name, default and meaning.

Usage: check_source.py [--root DIR] [--write-env-doc] [--tide BINARY]
"""
import argparse
import os
import re
import subprocess
import sys

CODE_EXT = (".cpp", ".hpp", ".cu", ".cuh", ".py", ".sh", ".cmake")
TEXT_EXT = CODE_EXT + (".md",)
SKIP_DIRS = ("bench/results/", ".deps/", "build")
ENV_HEADER = "include/tide/core/env.hpp"
ENV_DOC = "docs/environment.md"

NOTE = re.compile(r"NOTE \[([^\]]+)\]")
NOTE_DEF = re.compile(r"^\s*(?:(?://|#|\*)\s*)?NOTE \[([^\]]+)\]\s*$")
NOTE_DOC_DEF = re.compile(r"^#{2,6}\s+NOTE \[([^\]]+)\]\s*$")
NOTE_FILE = re.compile(r"NOTE \[([^\]]+)\]\s*(?:in |\()\s*([\w./-]+\.(?:hpp|cpp|cu|cuh|md|py|sh))")
TRACKER = re.compile(r"\b[Ii]ssues? #?\d+")
KNOB_LINE = re.compile(r'^\s*\{"(TIDE_[A-Z0-9_]+)", "((?:[^"\\]|\\.)*)", "((?:[^"\\]|\\.)*)"\},\s*$')
QUOTED_KNOB = re.compile(r'"(TIDE_[A-Z0-9_]+)"')
SHELL_KNOB = re.compile(r"(?<!-D)\$\{?(TIDE_[A-Z0-9_]+)|^\s*(?:export\s+)?(TIDE_[A-Z0-9_]+)=")


def is_code(path):
    name = os.path.basename(path)
    return path.endswith(CODE_EXT) or name == "CMakeLists.txt" or path == ".ci/run"


def source_files(root):
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        out = []
        for d, _, files in os.walk(root):
            rel = os.path.relpath(d, root)
            out += [os.path.normpath(os.path.join(rel, f)) for f in files]
    keep = []
    for p in out:
        if any(p.startswith(s) for s in SKIP_DIRS) or "/.git/" in p:
            continue
        if p.endswith(TEXT_EXT) or is_code(p):
            if os.path.isfile(os.path.join(root, p)):
                keep.append(p)
    return sorted(keep)


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        return f.read().splitlines()


def check_notes(root, files, errors):
    defs = {}
    mentions = []
    for p in files:
        if p == "scripts/check_source.py":
            continue
        for i, line in enumerate(read(root, p), 1):
            m = NOTE_DOC_DEF.match(line) if p.endswith(".md") else NOTE_DEF.match(line)
            if m and (not p.endswith(".md") or p.startswith("docs/")):
                defs.setdefault(m.group(1), []).append(f"{p}:{i}")
                rest = line[m.end():]
            else:
                rest = line
            for n in NOTE.finditer(rest if m else line):
                mentions.append((n.group(1), f"{p}:{i}"))
            for n in NOTE_FILE.finditer(line):
                mentions.append((n.group(1), f"{p}:{i}", n.group(2)))
    for name, where in sorted(defs.items()):
        if len(where) > 1:
            errors.append(f"NOTE [{name}] is defined {len(where)} times: {', '.join(where)}")
    for m in mentions:
        name, where = m[0], m[1]
        if name not in defs:
            errors.append(f"{where}: NOTE [{name}] is referred to but never defined")
        elif len(m) == 3:
            home = defs[name][0].split(":")[0]
            if not (home == m[2] or home.endswith("/" + m[2])):
                errors.append(f"{where}: NOTE [{name}] is said to be in {m[2]}, but it is "
                              f"defined in {home}")


def check_tracker_refs(root, files, errors):
    for p in files:
        if not is_code(p) or p == "scripts/check_source.py":
            continue
        for i, line in enumerate(read(root, p), 1):
            m = TRACKER.search(line)
            if m:
                errors.append(f"{p}:{i}: tracker reference '{m.group(0)}' (history belongs in git)")


def declared_knobs(root, errors):
    knobs = []
    for line in read(root, ENV_HEADER):
        m = KNOB_LINE.match(line)
        if m:
            knobs.append((m.group(1), m.group(2), m.group(3)))
    names = [k[0] for k in knobs]
    if not knobs:
        errors.append(f"{ENV_HEADER}: no knob lines found in kEnvKnobs")
    for n in sorted(set(x for x in names if names.count(x) > 1)):
        errors.append(f"{ENV_HEADER}: {n} is declared more than once")
    return knobs


def env_doc(knobs):
    out = ["# Environment variables", "",
           "Generated from `kEnvKnobs` in `include/tide/core/env.hpp` (NOTE [environment knobs]) by",
           "`scripts/check_source.py --write-env-doc`; `tide --help-env` prints the same table.",
           "CTest (`tide_source_checks`) fails when this page and the declarations differ.", "",
           "| variable | default | meaning |", "|---|---|---|"]
    for name, default, meaning in knobs:
        cell = lambda s: s.replace("\\\"", "\"").replace("|", "\\|")
        out.append(f"| `{name}` | {cell(default)} | {cell(meaning)} |")
    return "\n".join(out) + "\n"


def check_knobs(root, files, knobs, errors):
    declared = {k[0] for k in knobs}
    for p in files:
        if not is_code(p) or p == ENV_HEADER:
            continue
        shell = p.endswith(".sh") or p == ".ci/run"
        for i, line in enumerate(read(root, p), 1):
            found = []
            if shell:
                for m in SHELL_KNOB.finditer(line):
                    found.append(m.group(1) or m.group(2))
            elif p.endswith((".cpp", ".hpp", ".cu", ".cuh", ".py")):
                found = QUOTED_KNOB.findall(line)
            for name in found:
                if name not in declared:
                    errors.append(f"{p}:{i}: {name} is not declared in {ENV_HEADER} "
                                  "(NOTE [environment knobs])")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--write-env-doc", action="store_true")
    ap.add_argument("--tide", help="the tide binary, whose --help-env is checked")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    errors = []
    knobs = declared_knobs(root, errors)
    doc_path = os.path.join(root, ENV_DOC)
    if a.write_env_doc:
        with open(doc_path, "w", encoding="utf-8") as f:
            f.write(env_doc(knobs))
        print(f"wrote {ENV_DOC}")
    files = source_files(root)
    check_notes(root, files, errors)
    check_tracker_refs(root, files, errors)
    check_knobs(root, files, knobs, errors)
    try:
        with open(doc_path, encoding="utf-8") as f:
            if f.read() != env_doc(knobs):
                errors.append(f"{ENV_DOC} differs from {ENV_HEADER}: run "
                              "scripts/check_source.py --write-env-doc")
    except OSError:
        errors.append(f"{ENV_DOC} is missing: run scripts/check_source.py --write-env-doc")
    if a.tide:
        shown = subprocess.run([a.tide, "--help-env"], capture_output=True, text=True)
        if shown.returncode != 0:
            errors.append(f"tide --help-env exited {shown.returncode}: {shown.stderr.strip()}")
        for name, default, meaning in knobs:
            for part in (name, default.replace('\\"', '"'), meaning.replace('\\"', '"')):
                if part not in shown.stdout:
                    errors.append(f"tide --help-env does not show {name}'s '{part}'")
    for e in errors:
        print(e)
    print(f"check_source: {len(files)} files, {len(knobs)} environment knobs, "
          f"{len(errors)} problem(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
