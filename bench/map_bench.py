#!/usr/bin/env python3
"""`map` through gm's MCP server: the first map of a tree (a cold parse), a warm map's p50
with and without focus, and a map right after a file is edited outside gm (the watcher's
change: one file parsed again, the graph rebuilt, no parse of the tree).

    bench/map_bench.py --gm target/release/gm --corpus gm=. [--corpus kernel=DIR] [--repeat 30]

Each DIR is a git repository; it is cloned into a scratch folder first (the edits go there,
and gm's state folder with them). The kernel is optional: bench/code.sh makes one from
Debian's linux-source (root, apt-get). Every figure is a tools/call round trip through a warm
`gm serve --surface tools`. Prints a markdown table and one JSON line per measurement.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from search_bench import Server, timed

# Per corpus: a focus file and a word (what an agent editing it would pass).
FOCUS = {
    "gm": ["src/search/calls/mod.rs", "callers"],
    "kernel": ["kernel/sched/core.c", "sched"],
}


def edit(path, n):
    """Appends a line to a file, a different one each time (its size changes: never taken
    for the same content)."""
    with open(path, "a") as f:
        f.write(f"\n// map bench edit {n}\n")


def bench(gm_bin, name, source, repeat, scratch):
    work = os.path.join(scratch, name)
    if not os.path.isdir(os.path.join(work, ".git")):
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", source, work], check=True)
    focus = FOCUS.get(name, [])
    gm = Server(gm_bin, work)
    rows = []
    try:
        t = time.perf_counter()
        first = gm.call("map", {})
        cold = (time.perf_counter() - t) * 1000
        rows.append(("first map (cold parse)", cold, first["fresh"]))
        p50, r = timed(lambda: gm.call("map", {}), repeat)
        rows.append(("warm map, 2000 tokens", p50, r["fresh"]))
        if focus:
            p50, r = timed(lambda: gm.call("map", {"focus": focus}), repeat)
            rows.append((f"warm map, focus {focus}", p50, r["fresh"]))
        p50, r = timed(lambda: gm.call("map", {"tokens": 8000}), repeat)
        rows.append(("warm map, 8000 tokens", p50, r["fresh"]))
        target = os.path.join(work, focus[0]) if focus else None
        if target and os.path.exists(target):
            n = iter(range(10**6))
            edits = []
            for _ in range(max(5, repeat // 3)):
                edit(target, next(n))
                # The watcher's event lands within milliseconds; the call waits for nothing.
                time.sleep(0.2)
                t = time.perf_counter()
                r = gm.call("map", {})
                edits.append((time.perf_counter() - t) * 1000)
            edits.sort()
            rows.append(("map after an outside edit", edits[len(edits) // 2], r["fresh"]))
    finally:
        gm.close()
    for what, ms, fresh in rows:
        print(json.dumps({"corpus": name, "what": what, "ms": round(ms, 2), "fresh": fresh}))
    return rows, first


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gm", required=True)
    ap.add_argument("--corpus", action="append", default=[], help="name=DIR (a git repository)")
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--scratch", help="reuse this folder for the clones")
    args = ap.parse_args()
    scratch = args.scratch or tempfile.mkdtemp(prefix="map-bench-")
    gm_bin = os.path.abspath(args.gm)
    print(f"machine: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    table = ["| corpus | measurement | ms (p50) | files parsed |", "|---|---|---|---|"]
    for spec in args.corpus:
        name, _, source = spec.partition("=")
        rows, first = bench(gm_bin, name, os.path.abspath(source), args.repeat, scratch)
        for what, ms, fresh in rows:
            table.append(f"| {name} | {what} | {ms:.1f} | {fresh} |")
        print(f"--- {name}: the map's first lines ---\n" + "\n".join(first["map"].splitlines()[:12]), file=sys.stderr)
    print("\n".join(table))
    if not args.scratch:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
