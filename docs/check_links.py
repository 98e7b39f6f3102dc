#!/usr/bin/env python3
"""Links into the book from outside it, checked against the built book.

mkdocs --strict checks the links between the book's pages. This checks the
rest: every `docs/src/PAGE.md` or `docs/src/PAGE.md#ANCHOR` named in a file of
the repository (the README, --help texts, comments, scripts, packaging) must be
a page of the book, and the anchor an id on its built page; and every relative
link of README.md must name a file that exists.

Usage: python3 docs/check_links.py [SITE_DIR]   (default: target/book, built by
`mkdocs build --strict -f docs/mkdocs.yml`). Exits 1 naming each broken link.
"""

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SITE = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "target" / "book"

# A page of the book named anywhere: docs/src/mount.md#metadata-goes-through-the-cluster
BOOK_REF = re.compile(r"docs/src/([a-z0-9-]+)\.md(?:#([A-Za-z0-9_-]+))?")
# A Markdown link with a relative target: [text](path#anchor)
MD_LINK = re.compile(r"\]\(([^)\s#]*)(?:#([^)\s]*))?\)")
ID = re.compile(r'\bid="([^"]+)"')


def ids_of(page: str, cache: dict) -> set | None:
    if page not in cache:
        html = SITE / f"{page}.html"
        cache[page] = set(ID.findall(html.read_text())) if html.exists() else None
    return cache[page]


def main() -> int:
    if not (SITE / "index.html").exists():
        print(f"check_links: no book at {SITE}: build it first (mkdocs build --strict -f docs/mkdocs.yml)")
        return 1
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode().split("\0")
    cache: dict = {}
    broken = []
    checked = 0
    for name in files:
        path = ROOT / name
        if not name or not path.is_file() or path.stat().st_size > 1 << 20:
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for page, anchor in BOOK_REF.findall(line):
                checked += 1
                ids = ids_of(page, cache)
                if ids is None:
                    broken.append(f"{name}:{n}: docs/src/{page}.md is not a page of the book")
                elif anchor and anchor not in ids:
                    broken.append(f"{name}:{n}: docs/src/{page}.md has no anchor #{anchor}")
            if name != "README.md":
                continue
            for target, _ in MD_LINK.findall(line):
                if not target or "://" in target or target.startswith("mailto:"):
                    continue
                checked += 1
                if not (ROOT / target).exists():
                    broken.append(f"{name}:{n}: {target} does not exist")
    for b in broken:
        print(b)
    print(f"check_links: {checked} links into the book and out of README.md, {len(broken)} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
