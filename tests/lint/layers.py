#!/usr/bin/env python3
"""layers.py: the daemon's folders must depend downwards only.

Reads every #include "x.h" in daemon/**, lib/ and egress/, resolves it to the file it names,
and checks, per folder, that:
  - each folder includes only the folders the table below lets it (its layer and below);
  - no two files in different folders include each other, directly or around a circle;
  - egress/ and lib/ include nothing from daemon/.
Prints each violation with the include that makes it and exits 1; `--graph` prints the
folder graph found. Run by ctest as lint/layers.
"""
import os
import re
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# Which folders each folder may include (besides itself), top to bottom. lib/ is below
# everything; types/ (struct err, the policy's types) is the daemon's shared vocabulary.
BELOW_CORE = {"daemon/accounts", "daemon/store", "daemon/vm", "daemon/images", "daemon/net",
              "daemon/bundle", "daemon/types", "daemon/sys", "egress", "lib"}
ALLOWED = {
    "daemon/cmd": "*",
    "daemon/api": {"daemon/http", "daemon/core", "web"} | BELOW_CORE,
    "daemon/http": {"lib"},
    "daemon/core": BELOW_CORE,
    "daemon/accounts": {"daemon/store", "daemon/types", "lib"},
    "daemon/store": {"daemon/types", "lib"},
    "daemon/vm": {"daemon/bundle", "daemon/types", "daemon/sys", "lib"},
    "daemon/images": {"daemon/bundle", "daemon/types", "daemon/sys", "lib"},
    "daemon/net": {"daemon/types", "egress", "lib"},
    "daemon/bundle": {"daemon/types", "daemon/sys", "lib"},
    "daemon/types": {"lib"},
    "daemon/sys": {"lib"},
    "egress": {"lib"},
    "lib": set(),
}

# Single headers a lower folder may include from a higher one, each with its reason. These
# edges are not counted as circles: the header includes nothing of the folder that includes
# it (checked below).
EXCEPTIONS = {
    ("daemon/vm", "daemon/core/sandbox.h"):
        "the backend is handed the sandbox object it runs (and reads its id and directory); "
        "it calls nothing of the core (lint/check-vm-calls)",
}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources():
    for top in ("daemon", "lib", "egress"):
        for dirpath, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if n.endswith((".c", ".h")):
                    yield os.path.relpath(os.path.join(dirpath, n), ROOT)


def main():
    files = sorted(sources())
    folder_of = {f: os.path.dirname(f) for f in files}
    by_name = {}
    for f in files:
        by_name.setdefault(os.path.basename(f), []).append(f)
    # headers outside these trees (web/web-assets.h) are resolved by name too
    for extra in ("web/web-assets.h",):
        if os.path.exists(os.path.join(ROOT, extra)):
            by_name.setdefault(os.path.basename(extra), []).append(extra)
            folder_of[extra] = os.path.dirname(extra)

    bad = []
    excepted = set()
    edges = {}  # (folder, folder) -> an example "file includes header"
    for f in files:
        text = open(os.path.join(ROOT, f), encoding="utf-8", errors="replace").read()
        for name in INCLUDE.findall(text):
            local = os.path.join(os.path.dirname(f), name)
            if os.path.exists(os.path.join(ROOT, local)):
                targets = [os.path.normpath(local)]
            else:
                targets = by_name.get(os.path.basename(name), [])
            if len(targets) != 1:
                bad.append(f"{f}: #include \"{name}\" names {len(targets)} files")
                continue
            a, b = folder_of[f], folder_of.get(targets[0], os.path.dirname(targets[0]))
            if a == b:
                continue
            if (a, targets[0]) in EXCEPTIONS:
                excepted.add((a, targets[0]))
                continue
            edges.setdefault((a, b), f"{f} includes {targets[0]}")

    for a, header in sorted(EXCEPTIONS):
        text = open(os.path.join(ROOT, header), encoding="utf-8").read()
        for name in INCLUDE.findall(text):
            for t in by_name.get(os.path.basename(name), []):
                if folder_of.get(t) == a:
                    bad.append(f"{header}, an exception for {a}, includes {t} of {a}")
    for (a, b), why in sorted(edges.items()):
        allowed = ALLOWED.get(a)
        if allowed is None:
            bad.append(f"{a}: a folder the layer table does not know ({why})")
        elif allowed != "*" and b not in allowed:
            bad.append(f"{a} may not include {b}: {why}")

    # circles between folders
    graph = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                cyc = stack[stack.index(m):] + [m]
                bad.append("circle: " + " -> ".join(cyc) + " (" +
                           "; ".join(edges[(cyc[i], cyc[i + 1])] for i in range(len(cyc) - 1)) + ")")
            elif m not in state:
                visit(m)
        stack.pop()
        state[n] = 2

    for n in sorted(graph):
        if n not in state:
            visit(n)

    if "--graph" in sys.argv:
        for a in sorted(graph):
            print(f"{a} -> {', '.join(sorted(graph[a]))}")
    for line in bad:
        print("layers: " + line)
    if bad:
        return 1
    print(f"layers: {len(files)} files, {len(edges)} folder edges, all downwards")
    return 0


if __name__ == "__main__":
    sys.exit(main())
