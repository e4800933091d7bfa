#!/usr/bin/env python3
"""The worker's memory around `callers` on a big tree: after the cold parse, then after a
restart (the call-site cache on disk) before and after the first `callers NAME`.

    bench/callers_memory.py --gm target/release/gm --tree DIR [--name kfree]

DIR is a git repository (bench/code.sh makes the kernel's); its `.gm/calls` cache is removed
first so that the first part parses the whole tree. RSS and its peak (VmHWM) come from
/proc for the worker process (the one `.gm/worker.pid` names, not the `gm serve` relay).
Prints one JSON line per measurement and a markdown table.
"""
import argparse
import json
import os
import shutil
import time

from gm_process import stop_worker
from search_bench import Server


def worker_pid(tree, not_pid=None):
    """The running worker's pid (a new one's, when `not_pid` names the last)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(tree, ".gm", "worker.pid")) as f:
                pid = json.load(f)["pid"]
            if pid != not_pid and os.path.exists(f"/proc/{pid}/status"):
                return pid
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.05)
    raise RuntimeError("no worker.pid")


def memory_mb(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024
    return out["VmRSS"], out["VmHWM"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gm", required=True)
    ap.add_argument("--tree", required=True)
    ap.add_argument("--name", default="kfree")
    a = ap.parse_args()
    gm = os.path.abspath(a.gm)
    rows = []

    def record(what, value):
        rows.append((what, value))
        print(json.dumps({"what": what, **value}), flush=True)

    shutil.rmtree(os.path.join(a.tree, ".gm", "calls"), ignore_errors=True)
    server = Server(gm, a.tree)
    pid = worker_pid(a.tree)
    rss, _ = memory_mb(pid)
    t = time.perf_counter()
    r = server.call("callers", {"symbol": a.name, "limit": 5})
    parse_s = time.perf_counter() - t
    after, peak = memory_mb(pid)
    record("cold parse, then callers", {"rss_before_mb": rss, "rss_after_mb": after, "peak_mb": peak,
                                        "seconds": parse_s, "sites": r.get("total", len(r.get("callers", [])))})
    server.close()
    stop_worker(a.tree)

    server = Server(gm, a.tree)
    pid = worker_pid(a.tree, not_pid=pid)
    # The worker checks the saved cache against the tree as it starts: let it settle.
    time.sleep(3)
    rss, _ = memory_mb(pid)
    t = time.perf_counter()
    server.call("callers", {"symbol": a.name, "limit": 5})
    first_ms = (time.perf_counter() - t) * 1000
    after, peak = memory_mb(pid)
    record("restart, first callers", {"rss_before_mb": rss, "rss_after_mb": after, "peak_mb": peak, "ms": first_ms})
    server.close()
    stop_worker(a.tree)

    print("\n| measure | RSS before (MB) | RSS after (MB) | peak (MB) | time |\n|---|---|---|---|---|")
    for what, v in rows:
        took = f"{v['seconds']:.0f} s" if "seconds" in v else f"{v['ms']:.0f} ms"
        print(f"| {what} {a.name} | {v['rss_before_mb']:.0f} | {v['rss_after_mb']:.0f} | {v['peak_mb']:.0f} | {took} |")


if __name__ == "__main__":
    main()
