#!/usr/bin/env python3
"""Facts about the source tree anyone can check: import circles between modules,
the longest product files, and the project's duplicate-code report.

An import circle is two or more modules of one crate that reach each other
through `use` paths or qualified names (`crate::a::b`, `super::x`, `self::y`),
at file granularity. A module naming its own ancestor or descendant is not
counted: a parent re-exporting its children is layering, not a circle.
Usage: scripts/facts.py [--max-lines N]   (exit 1 on a circle or a file over N lines)
"""
import os, re, sys, subprocess

ROOT = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True).stdout.strip() or os.getcwd()
CRATES = {  # crate name as used in paths -> its src dir
}

def crates():
    out = {}
    for d in [".", "cachenode", "mount", "cli", "testorigin", "testkit", "csi"]:
        src = os.path.join(ROOT, d, "src")
        if os.path.isdir(src):
            out[d] = src
    return out

def modules(src):
    """module path (tuple) -> file, for every .rs under src."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel[-1] in ("lib", "main") and len(rel) == 1:
                path = ()
            elif rel[-1] == "mod":
                path = tuple(rel[:-1])
            else:
                path = tuple(rel)
            if rel == ["main"] and () in mods:
                continue  # a binary beside the library: its own root
            mods[path] = full
    return mods

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')
USE = re.compile(r"\buse\s+([^;]+);")
QUAL = re.compile(r"\b((?:crate|super|self)(?:::[A-Za-z_][A-Za-z0-9_]*)+)")

def expand(tree):
    """`a::{b, c::d}` -> [a::b, a::c::d]."""
    tree = tree.strip()
    i = tree.find("{")
    if i < 0:
        return [tree.split(" as ")[0].strip()]
    head = tree[:i]
    body = tree[i + 1:tree.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur); cur = ""
        else:
            cur += ch
    parts.append(cur)
    out = []
    for p in parts:
        if p.strip():
            for e in expand(p):
                out.append(head + e)
    return out

def resolve(path, here, mods):
    """The module (file) a path names, from module `here`."""
    segs = [s for s in path.split("::") if s]
    if not segs:
        return None
    if segs[0] == "crate":
        base, segs = (), segs[1:]
    elif segs[0] in ("super", "self"):
        base = here
        while segs and segs[0] in ("super", "self"):
            if segs[0] == "super":
                base = base[:-1]
            segs = segs[1:]
    else:
        return None
    best = base if base in mods else None
    cur = base
    for s in segs:
        cur = cur + (s,)
        if cur in mods:
            best = cur
        else:
            break
    return best

def related(a, b):
    return a[:len(b)] == b or b[:len(a)] == a

def circles(src):
    mods = modules(src)
    edges = {m: set() for m in mods}
    for m, f in mods.items():
        text = STRING.sub('""', COMMENT.sub("", open(f, encoding="utf-8").read()))
        text = re.split(r"#\[cfg\(test\)\]\s*mod tests\s*\{", text)[0]
        paths = []
        for u in USE.findall(text):
            paths += expand(u)
        paths += QUAL.findall(text)
        for p in paths:
            t = resolve(p, m, mods)
            if t is not None and t != m and not related(t, m):
                edges[m].add(t)
    # Strongly connected components (Tarjan).
    index, low, stack, on, out, n = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = n[0]; n[0] += 1
        stack.append(v); on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w); low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(os.path.relpath(mods[c], ROOT) for c in comp))
    sys.setrecursionlimit(10000)
    for v in mods:
        if v not in index:
            visit(v)
    return out

def product_files():
    """Non-test Rust sources with their line counts, test modules excluded."""
    rows = []
    for crate, src in crates().items():
        for dirpath, _, files in os.walk(src):
            for f in files:
                full = os.path.join(dirpath, f)
                if not f.endswith(".rs") or f in ("tests.rs",) or f.endswith("_tests.rs"):
                    continue
                text = open(full, encoding="utf-8").read()
                if "@generated" in text[:200]:
                    continue  # generated code (the CSI protocol's)
                text = re.split(r"\n#\[cfg\(test\)\]\s*\nmod tests\s*\{", text)[0]
                rows.append((text.count("\n"), os.path.relpath(full, ROOT)))
    return sorted(rows, reverse=True)

def main():
    limit = 500
    if "--max-lines" in sys.argv:
        limit = int(sys.argv[sys.argv.index("--max-lines") + 1])
    bad = False
    found = []
    for crate, src in crates().items():
        found += circles(src)
    print("== import circles: %d" % len(found))
    for c in found:
        print("  " + " <-> ".join(c))
    bad |= bool(found)
    rows = product_files()
    print("== longest product files (limit %d lines, test modules left out)" % limit)
    for lines, f in rows[:5]:
        print("  %5d  %s" % (lines, f))
    over = [r for r in rows if r[0] > limit]
    bad |= bool(over)
    if "--duplicates" in sys.argv:
        try:
            r = subprocess.run(["duplicates", "--seconds", "30", "."], cwd=ROOT, capture_output=True, text=True)
            lines = [l for l in r.stdout.splitlines() if l.strip()]
            print("== duplicates: %d rows" % len(lines))
        except FileNotFoundError:
            print("== duplicates: the tool is not on this machine")
    sys.exit(1 if bad else 0)

main()
