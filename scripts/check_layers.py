#!/usr/bin/env python3
"""check_layers.py: the folder layering of src/, declared once (LAYERS below), and checked.

  scripts/check_layers.py [--root DIR] [--objects BUILD]

Checks, and prints one line per breach (exit status 1 when there is any):
  1. layering: a file under src/<folder>/ (or include/) includes only headers of its own folder or
     of folders on a strictly lower level (a header of a higher level, or of another folder on the
     same level, is a breach); an include of a folder LAYERS does not name is a breach too;
  2. include loops: the file-level include graph (x.c and x.h are one node, "x") has no cycle
     through files of more than one folder (in one folder, an internal header that includes the
     public one of its .c is no loop worth naming);
  3. call loops (with --objects BUILD, the built objects BUILD/src/*/*.o): no two files call each
     other in a loop (A uses a symbol B defines, ..., back to A), in one folder or across folders,
     but for those KNOWN names (each with its reason; one that is no loop any more is said, so the
     list is pruned).
Reads text and `nm` output; writes nothing.
"""
import argparse
import os
import re
import subprocess
import sys

# Level 0 is the bottom. A folder may include its own headers and those of lower levels only;
# folders on one level are peers and know nothing of each other.
LAYERS = [
    ["base"],                                  # errors, mmap, threads: no model knowledge
    ["include", "kernels", "tp", "text", "image"],  # the API's declarations; matmul kernels;
                                               # comm backends; tokenizer/templates; image input
    ["model", "grammar"],                      # config, tensors, artifacts; grammar compiler
    ["gemma4"],                                # weights binding, forward pass
    ["engine"],                                # engine, scheduler, KV tables, sampling, speculation
    ["server"],                                # HTTP adapter
    ["cli"],                                   # the g4tp command
]
# Call loops tolerated for now, each a sorted tuple of the files in it.
KNOWN = {}
LEVEL = {f: i for i, fs in enumerate(LAYERS) for f in fs}
INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root):
    """Yields (node, folder, path) for every .c/.h under src/*/ and include/."""
    for top in ("src", "include"):
        base = os.path.join(root, top)
        for dirpath, _, files in os.walk(base):
            for f in sorted(files):
                if not f.endswith((".c", ".h")):
                    continue
                p = os.path.join(dirpath, f)
                rel = os.path.relpath(p, root)
                parts = rel.split(os.sep)
                folder = "include" if top == "include" else (parts[1] if len(parts) > 2 else "")
                yield os.path.splitext(rel)[0], folder, p


def resolve(inc, path, root):
    """The repository-relative node of an include, or None when it is not one of ours."""
    for cand in (os.path.join(os.path.dirname(path), inc), os.path.join(root, "src", inc),
                 os.path.join(root, "include", inc)):
        if os.path.isfile(cand):
            rel = os.path.relpath(os.path.normpath(cand), root)
            if rel.startswith(("src" + os.sep, "include" + os.sep)):
                return os.path.splitext(rel)[0]
    return None


def folder_of(node):
    parts = node.split(os.sep)
    return "include" if parts[0] == "include" else parts[1]


def cycles(graph):
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter[0]; counter[0] += 1
        stack.append(start); on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter[0]; counter[0] += 1
                    stack.append(w); on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def one_loop(graph, comp):
    """One concrete loop through a component, for the message: a -> b -> ... -> a."""
    members = set(comp)
    start = comp[0]
    path, seen = [start], {start}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in members)
        back = [w for w in nxt if w in seen]
        fresh = [w for w in nxt if w not in seen]
        if fresh and not (start in back and len(path) > 1):
            path.append(fresh[0]); seen.add(fresh[0])
            continue
        w = start if start in back else back[0]
        return path[path.index(w):] + [w]


def object_graph(build):
    """node -> nodes whose symbols it uses, from nm over BUILD/src/*/*.o."""
    objs = {}
    srcdir = os.path.join(build, "src")
    for dirpath, _, files in os.walk(srcdir):
        for f in sorted(files):
            if f.endswith(".o"):
                rel = os.path.relpath(os.path.join(dirpath, f), build)
                objs[os.path.splitext(rel)[0]] = os.path.join(dirpath, f)
    if not objs:
        sys.exit("check_layers: no objects under %s" % srcdir)
    defs, uses = {}, {}
    for node, path in objs.items():
        out = subprocess.run(["nm", path], check=True, capture_output=True, text=True).stdout
        uses[node] = set()
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] == "U":
                uses[node].add(parts[1])
            elif len(parts) == 3 and parts[1] in "TDBRVWGS" and parts[1].isupper():
                defs.setdefault(parts[2], node)
    return {n: {defs[s] for s in u if s in defs and defs[s] != n} for n, u in uses.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--objects", help="a build folder: also check the call graph of its objects")
    a = ap.parse_args()
    root = os.path.abspath(a.root)
    breaches = []
    graph = {}
    for node, folder, path in sources(root):
        graph.setdefault(node, set())
        if folder not in LEVEL:
            breaches.append("layer: %s is in folder %r, which LAYERS does not name" % (path, folder))
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        for inc in INCLUDE_RE.findall(text):
            target = resolve(inc, path, root)
            if target is None:
                continue
            tf = folder_of(target)
            if target != node:
                graph[node].add(target)
            if tf == folder:
                continue
            if tf not in LEVEL:
                breaches.append("layer: %s includes %s, of a folder LAYERS does not name" % (
                    os.path.relpath(path, root), inc))
            elif LEVEL[tf] >= LEVEL[folder]:
                breaches.append("layer: %s (%s, level %d) includes %s (%s, level %d)" % (
                    os.path.relpath(path, root), folder, LEVEL[folder], inc, tf, LEVEL[tf]))
    for comp in cycles(graph):
        if len({folder_of(n) for n in comp}) > 1:
                breaches.append("include loop: %s (files %s)" % (" -> ".join(one_loop(graph, comp)), ", ".join(comp)))
    if a.objects:
        og = object_graph(a.objects)
        seen = set()
        for comp in cycles(og):
            key = tuple(sorted(comp))
            seen.add(key)
            what = "%s (files %s)" % (" -> ".join(one_loop(og, comp)), ", ".join(comp))
            if key in KNOWN:
                print("known call loop (%s): %s" % (KNOWN[key], what))
            else:
                breaches.append("call loop: " + what)
        for key in sorted(set(KNOWN) - seen):
            print("note: %s is no call loop any more; take it out of KNOWN" % " + ".join(key))
    for b in breaches:
        print(b)
    n = len(graph)
    print("check_layers: %d files, %d breach%s" % (n, len(breaches), "" if len(breaches) == 1 else "es"))
    return 1 if breaches else 0


if __name__ == "__main__":
    sys.exit(main())
