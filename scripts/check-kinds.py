#!/usr/bin/env python3
"""Keeps the step kinds in their homes: a kind's name ("script", "noop", "terraform", "ansible",
"http", "wait-ssh", "servers") is matched only in the kind modules, domain/src/kind/ and
functions/runner/src/kind/. Everywhere else, code asks `overture_domain::kind::Kind`.

It reads production Rust (not tests/ directories nor `#[cfg(test)]` modules) and fails, naming
file:line, on a kind's name as a string literal used as a kind match:
- on a line that speaks of a kind (`kind == "http"`, `const DESTROYABLE_KIND: &str = "terraform"`,
  `matches!(step.kind.as_str(), "servers")`);
- as a match arm (`"ansible" =>`, `"noop" | ...`) of a `match` on a kind (or on a step's `run`).
"http" in a URL, "servers" as a JSON key or a `Command::new("terraform")` are none of these.

Usage: scripts/check-kinds.py
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SKIP_DIRS = {"target", ".git", "tests", "node_modules"}
# The homes of the kinds: their names are theirs to say.
HOMES = ("domain/src/kind/", "functions/runner/src/kind/")
NAMES = ("script", "noop", "terraform", "ansible", "http", "wait-ssh", "servers")
LITERAL = re.compile(r'"(%s)"' % "|".join(re.escape(n) for n in NAMES))
SPEAKS_OF_KIND = re.compile(r"kind", re.IGNORECASE)
ARM = re.compile(r'^\s*(\(?\s*)?"(%s)"\s*(=>|\||,)' % "|".join(re.escape(n) for n in NAMES))
OR_ARM = re.compile(r'\|\s*"(%s)"' % "|".join(re.escape(n) for n in NAMES))
MATCH = re.compile(r"\bmatch\b(.*)\{\s*$")
ON_KIND = re.compile(r"kind|\brun\b", re.IGNORECASE)
CFG_TEST = re.compile(r"^\s*#\[cfg\(test\)\]")
COMMENT = re.compile(r"^\s*//")


def production_lines(lines):
    """(number, line) of every line outside `#[cfg(test)]` items."""
    skipping, depth, opened = False, 0, False
    for number, line in enumerate(lines, 1):
        if not skipping and CFG_TEST.match(line):
            skipping, depth, opened = True, 0, False
            continue
        if skipping:
            depth += line.count("{") - line.count("}")
            opened = opened or "{" in line
            if (opened and depth <= 0) or (not opened and line.rstrip().endswith(";")):
                skipping = False
            continue
        yield number, line


def enclosing_match(lines, number):
    """The head of the `match` whose block holds line `number` (1-based), or ''."""
    depth = 0
    for back in range(number - 2, max(number - 200, 0) - 1, -1):
        line = lines[back].split("//")[0]
        depth += line.count("}") - line.count("{")
        if depth < 0:
            found = MATCH.search(line)
            return found.group(1) if found else ""
    return ""


def problems_in(path, relative):
    with open(path, encoding="utf-8", errors="replace") as file:
        lines = file.read().split("\n")
    for number, line in production_lines(lines):
        if COMMENT.match(line) or not LITERAL.search(line):
            continue
        code = line.split("//")[0]
        name = LITERAL.search(code)
        if not name:
            continue
        if SPEAKS_OF_KIND.search(code.replace(name.group(0), "")):
            yield number, name.group(1), "compares a kind by name"
        elif (ARM.match(code) or OR_ARM.search(code)) and ON_KIND.search(
            enclosing_match(lines, number)
        ):
            yield number, name.group(1), "matches a kind by name"


def main():
    failures = []
    for directory, subdirs, files in os.walk(ROOT):
        subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS]
        for name in sorted(files):
            if not name.endswith(".rs"):
                continue
            path = os.path.join(directory, name)
            relative = os.path.relpath(path, ROOT)
            if relative.startswith(HOMES):
                continue
            for number, kind, what in problems_in(path, relative):
                failures.append(
                    f"check-kinds: {relative}:{number} {what} (\"{kind}\"): "
                    "ask overture_domain::kind::Kind instead"
                )
    for failure in failures:
        print(failure, file=sys.stderr)
    if failures:
        print(
            f"check-kinds: {len(failures)} kind name(s) outside the kinds' homes ({', '.join(HOMES)})",
            file=sys.stderr,
        )
        return 1
    print("check-kinds: kind names appear only in the kinds' homes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
