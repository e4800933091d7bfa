#!/usr/bin/env python3
"""The first `callers` after a start, builds side by side: each pass starts every build's gm in
turn on the same workspace (through the relay, as a host does), asks `callers SYMBOL` right
after `initialize`, then `--warm` more times (limit 200, their median is the pass's warm
figure), and stops the worker before the next start. The call's cache must already be on
disk (run `bench/code_bench.py --only speed` once, or any `callers`).

    python3 bench/restart_ab.py --workspace DIR [--symbol kfree] [--passes 7] [--warm 21] GM [GM ...]
"""
import argparse
import statistics
import time

from gm_process import initialize, popen_gm, rpc, stop_worker


def callers_ms(gm, p, id, symbol, limit):
    t = time.perf_counter()
    r = rpc(p, id, "tools/call", {"name": "callers", "arguments": {"symbol": symbol, "limit": limit}})
    ms = (time.perf_counter() - t) * 1000
    if "error" in r or r["result"].get("isError"):
        raise RuntimeError(f"{gm}: callers failed: {r}")
    return ms, r["result"]["structuredContent"]["total"]


def one_start(gm, workspace, symbol, warm):
    """(first call's ms, the warm calls' median ms or None, sites)."""
    p = popen_gm(gm, "tools", workspace)
    try:
        initialize(p)
        first, total = callers_ms(gm, p, 2, symbol, 5)
        warm_ms = [callers_ms(gm, p, 10 + i, symbol, 200)[0] for i in range(warm)]
        return first, statistics.median(warm_ms) if warm_ms else None, total
    finally:
        p.stdin.close()
        p.wait()
        stop_worker(workspace)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workspace", required=True)
    ap.add_argument("--symbol", default="kfree")
    ap.add_argument("--passes", type=int, default=7)
    ap.add_argument("--warm", type=int, default=0, help="warm calls after the first, per start")
    ap.add_argument("gm", nargs="+")
    args = ap.parse_args()
    times = {g: [] for g in args.gm}
    warm = {g: [] for g in args.gm}
    totals = {}
    for _ in range(args.passes):
        for g in args.gm:
            ms, warm_ms, totals[g] = one_start(g, args.workspace, args.symbol, args.warm)
            times[g].append(ms)
            if warm_ms is not None:
                warm[g].append(warm_ms)
    print(f"callers {args.symbol}, {args.passes} passes (ms)")
    for g in args.gm:
        t = times[g]
        print(f"{g}: first after a start median {statistics.median(t):.0f}, min {min(t):.0f}, max {max(t):.0f} "
              f"({' '.join(f'{x:.0f}' for x in t)}); {totals[g]} sites")
        if warm[g]:
            w = warm[g]
            print(f"{g}: warm p50 (limit 200), median of the passes {statistics.median(w):.1f}, "
                  f"min {min(w):.1f}, max {max(w):.1f}")


if __name__ == "__main__":
    main()
