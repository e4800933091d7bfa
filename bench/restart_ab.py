#!/usr/bin/env python3
"""The first `callers` after a start, builds side by side: each pass starts every build's gm in
turn on the same workspace (through the relay, as a host does), asks `callers SYMBOL` right
after `initialize`, and stops the worker before the next start. The call's cache must already
be on disk (run `bench/code_bench.py --only speed` once, or any `callers`).

    python3 bench/restart_ab.py --workspace DIR [--symbol kfree] [--passes 7] GM [GM ...]
"""
import argparse
import statistics
import time

from gm_process import initialize, popen_gm, rpc, stop_worker


def first_call_ms(gm, workspace, symbol):
    p = popen_gm(gm, "tools", workspace)
    try:
        initialize(p)
        t = time.perf_counter()
        r = rpc(p, 2, "tools/call", {"name": "callers", "arguments": {"symbol": symbol, "limit": 5}})
        ms = (time.perf_counter() - t) * 1000
        if "error" in r or r["result"].get("isError"):
            raise RuntimeError(f"{gm}: callers failed: {r}")
        return ms, r["result"]["structuredContent"]["total"]
    finally:
        p.stdin.close()
        p.wait()
        stop_worker(workspace)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--symbol", default="kfree")
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("gm", nargs="+")
    args = ap.parse_args()
    times = {g: [] for g in args.gm}
    totals = {}
    for _ in range(args.passes):
        for g in args.gm:
            ms, totals[g] = first_call_ms(g, args.workspace, args.symbol)
            times[g].append(ms)
    print(f"first callers {args.symbol} after a start, {args.passes} passes (ms)")
    for g in args.gm:
        t = times[g]
        print(f"{g}: median {statistics.median(t):.0f}, min {min(t):.0f}, max {max(t):.0f} "
              f"({' '.join(f'{x:.0f}' for x in t)}); {totals[g]} sites")


if __name__ == "__main__":
    main()
