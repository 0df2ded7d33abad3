#!/usr/bin/env python3
"""Keeps the rooms small: no production Rust file over 700 lines and no production function over
120 lines. Test code (tests/ directories and `#[cfg(test)]` modules) is not counted.

Usage: scripts/check-rooms.py [--report]   (--report lists the largest even when all pass)
"""
import os
import re
import sys

MAX_FILE = 700
MAX_FN = 120
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = {"target", ".git", "tests", "node_modules"}
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")
CFG_TEST = re.compile(r"^\s*#\[cfg\(test\)\]")


def strip(line, state):
    """The line with string and comment contents blanked, so braces inside them do not count."""
    out = []
    i = 0
    while i < len(line):
        c = line[i]
        if state["block"]:
            if line.startswith("*/", i):
                state["block"] -= 1
                i += 2
                continue
            if line.startswith("/*", i):
                state["block"] += 1
                i += 2
                continue
            i += 1
            continue
        if state["raw"] is not None:
            end = '"' + "#" * state["raw"]
            if line.startswith(end, i):
                state["raw"] = None
                i += len(end)
            else:
                i += 1
            continue
        if state["str"]:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                state["str"] = False
            i += 1
            continue
        if line.startswith("//", i):
            break
        if line.startswith("/*", i):
            state["block"] += 1
            i += 2
            continue
        m = re.match(r'b?r(#*)"', line[i:])
        if m and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] == "_")):
            state["raw"] = len(m.group(1))
            i += len(m.group(0))
            continue
        if c == '"':
            state["str"] = True
            i += 1
            continue
        if c == "'":
            # a char literal ('{', '\'', '\u{7f}') but not a lifetime ('a)
            m = re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'", line[i:])
            if m:
                i += len(m.group(0))
                continue
        out.append(c)
        i += 1
    return "".join(out)


def measure(path):
    """(production lines, [(fn name, first line, length)]) of one file."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    state = {"block": 0, "raw": None, "str": False}
    code = [strip(l, state) for l in lines]
    production = 0
    functions = []
    depth = 0
    skip_until = None  # depth at which a #[cfg(test)] item ends
    pending_test = False
    open_fns = []  # (name, start line, depth before its body)
    for n, (raw, line) in enumerate(zip(lines, code), start=1):
        in_test = skip_until is not None
        if not in_test and CFG_TEST.match(raw):
            pending_test = True
        if not in_test and not pending_test:
            production += 1
            m = FN.match(raw)
            if m:
                open_fns.append([m.group(7), n, depth, False])
        for c in line:
            if c == "{":
                if pending_test and skip_until is None:
                    skip_until = depth
                    pending_test = False
                for f in open_fns:
                    if not f[3] and f[2] == depth:
                        f[3] = True
                depth += 1
            elif c == "}":
                depth -= 1
                if skip_until is not None and depth == skip_until:
                    skip_until = None
                while open_fns and open_fns[-1][3] and open_fns[-1][2] == depth:
                    name, start, _, _ = open_fns.pop()
                    functions.append((name, start, n - start + 1))
            elif c == ";":
                # a declaration without a body (trait method), or a `#[cfg(test)] use ...;`
                if open_fns and not open_fns[-1][3] and open_fns[-1][2] == depth:
                    open_fns.pop()
                if pending_test and skip_until is None:
                    pending_test = False
    return production, functions


def production_files():
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(".rs") and name != "tests.rs" and not top.endswith("/contract"):
                yield os.path.join(top, name)


def main():
    report = "--report" in sys.argv
    big_files, big_fns = [], []
    for path in production_files():
        rel = os.path.relpath(path, ROOT)
        lines, fns = measure(path)
        if lines > MAX_FILE:
            big_files.append((lines, rel))
        for name, start, length in fns:
            if length > MAX_FN:
                big_fns.append((length, f"{rel}:{start} {name}"))
    for lines, rel in sorted(big_files, reverse=True):
        print(f"check-rooms: {rel} has {lines} production lines (at most {MAX_FILE}): split it by what its parts do", file=sys.stderr)
    for length, where in sorted(big_fns, reverse=True):
        print(f"check-rooms: {where} is {length} lines (at most {MAX_FN}): give its parts names", file=sys.stderr)
    if big_files or big_fns:
        print(f"check-rooms: {len(big_files)} files and {len(big_fns)} functions too large", file=sys.stderr)
        return 1
    print(f"check-rooms: no production file over {MAX_FILE} lines, no function over {MAX_FN}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
