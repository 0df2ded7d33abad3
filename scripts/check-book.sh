#!/usr/bin/env bash
# Builds the manual (docs/, an mdBook) into target/book and fails on a broken link: every relative
# link and #anchor in the generated HTML must land on a page and an id that exist, and every link
# from the book (or the README) to a file of the repository must name a file that exists.
set -euo pipefail
cd "$(dirname "$0")/.."

# target/ is the book's even where cargo builds elsewhere (CARGO_TARGET_DIR), as on a fresh clone.
out=target/book
mkdir -p target
mdbook build --dest-dir "$out" >/dev/null 2>target/book-build.log || {
    cat target/book-build.log >&2
    echo "check-book: mdbook build failed" >&2
    exit 1
}

python3 - "$out" <<'EOF'
import html.parser, os, re, sys
from urllib.parse import unquote, urlsplit

OUT = sys.argv[1]
SRC = "docs"
# Pages mdBook writes for itself: 404.html resolves links against the site's root, not its own
# place; print.html is every chapter again, each checked on its own page.
SKIP = {"404.html", "print.html"}


class Page(html.parser.HTMLParser):
    """The ids a page defines and the links it holds."""

    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("id", "name") and value:
                self.ids.add(value)
            if name in ("href", "src") and value:
                self.links.append(value)


def parse(path):
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    return page


def github_slugs(markdown_path):
    """The anchors GitHub gives a Markdown file's headings (the README links to them)."""
    slugs, seen, fenced = set(), {}, False
    with open(markdown_path, encoding="utf-8") as f:
        for line in f:
            if line.lstrip().startswith("```"):
                fenced = not fenced
            m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


pages = {}
for root, _, files in os.walk(OUT):
    for name in files:
        if name.endswith(".html"):
            path = os.path.normpath(os.path.join(root, name))
            pages[path] = parse(path)


def book_ids(html_path):
    page = pages.get(os.path.normpath(html_path))
    return page.ids if page else None


def check_repository_target(target, fragment, source_dir):
    """A link that leaves the book: it names a file of the repository. `None` when it resolves."""
    path = os.path.normpath(os.path.join(source_dir, target))
    candidates = [path]
    if path.endswith(".html"):  # mdBook rewrites every `.md` link to `.html`
        candidates.append(path[: -len(".html")] + ".md")
    found = next((c for c in candidates if os.path.exists(c)), None)
    if found is None:
        return f"no file {path} in the repository"
    if fragment and found.endswith(".md"):
        ids = book_ids(os.path.join(OUT, os.path.relpath(found, SRC))[: -len(".md")] + ".html") \
            if not os.path.relpath(found, SRC).startswith("..") else None
        if ids is None:
            ids = github_slugs(found)
        if fragment not in ids:
            return f"no heading #{fragment} in {found}"
    return None


failures = []
for page_path, page in sorted(pages.items()):
    rel_page = os.path.relpath(page_path, OUT)
    if rel_page in SKIP:
        continue
    page_dir = os.path.dirname(page_path)
    source_dir = os.path.join(SRC, os.path.dirname(rel_page))
    for link in page.links:
        parts = urlsplit(link)
        if parts.scheme or link.startswith("//"):
            continue
        target, fragment = unquote(parts.path), unquote(parts.fragment)
        if not target:
            if fragment and fragment not in page.ids:
                failures.append((rel_page, link, f"no id #{fragment} on this page"))
            continue
        resolved = os.path.normpath(os.path.join(page_dir, target))
        if resolved.endswith(os.sep) or os.path.isdir(resolved):
            resolved = os.path.join(resolved, "index.html")
        inside = not os.path.relpath(resolved, OUT).startswith("..")
        if inside and os.path.exists(resolved):
            if fragment and resolved.endswith(".html"):
                ids = book_ids(resolved)
                if ids is not None and fragment not in ids:
                    failures.append((rel_page, link, f"no id #{fragment} on {os.path.relpath(resolved, OUT)}"))
            continue
        problem = check_repository_target(target, fragment, source_dir)
        if problem:
            failures.append((rel_page, link, problem))

# The README is the book's door: its links into docs/ and the repository must hold too.
with open("README.md", encoding="utf-8") as f:
    readme = f.read()
for link in re.findall(r"\]\(([^)\s]+)\)", readme):
    parts = urlsplit(link)
    if parts.scheme or link.startswith("//"):
        continue
    target, fragment = unquote(parts.path), unquote(parts.fragment)
    if not target:
        if fragment not in github_slugs("README.md"):
            failures.append(("README.md", link, f"no heading #{fragment} in README.md"))
        continue
    problem = check_repository_target(target, fragment, ".")
    if problem:
        failures.append(("README.md", link, problem))

# A path the text names in backticks (`functions/runner/src/kind/`) is a promise to a reader
# looking for the code: it must name what the repository holds.
NAMED_PATH = re.compile(r"`((?:events|domain|functions|infra|cloud|bench|tests|scripts|examples)/[A-Za-z0-9_./-]+)`")
texts = ["README.md", "ARCHITECTURE.md"] + [
    os.path.join(top, name)
    for top, _, names in os.walk("docs")
    for name in names
    if name.endswith(".md")
]
for text in sorted(texts):
    with open(text, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            for named in NAMED_PATH.findall(line):
                path = named.split(":")[0].rstrip("/")
                if "//" not in path and not os.path.exists(path):
                    failures.append((f"{text}:{number}", named, "names a path the repository does not hold"))

for page, link, problem in failures:
    print(f"check-book: {page}: link {link}: {problem}", file=sys.stderr)
if failures:
    sys.exit(1)
print(f"check-book: {len(pages)} pages built into {OUT}, every link resolves, every path named is there")
EOF
