#!/usr/bin/env python3
"""The search index's first build on a big tree, alone and while a client searches, and the
first answer with no index against ripgrep: for one or more gm binaries side by side.

    bench/search_build.py --gm target/release/gm [--gm OTHER]... --tree DIR [--rounds 2]

DIR is a git repository (bench/search.sh makes the kernel's). For each round and each binary,
in turn (so that the VM's slow phases fall on all of them alike):

- alone: the index is removed, a fresh gm answers one search (which starts the build in the
  background), and nothing else asks it anything until the build is done;
- polled: the same, with the same search sent every 250 ms (`--every`) until the build is
  done, as a client waiting for the index would;
- varied: a query never asked before every 250 ms (`--every`);
- first: only the first answer (gm is stopped right after it, the build unfinished), for more
  samples of the first answer against rg.

The end of the build is seen on disk (the run log's `search-index` event `built`), never by
asking gm: a search to find out would itself be measured. The first search's
time is the first answer with no index, compared with `rg -F -c` of its word over the same tree.
Prints one JSON line per measurement and a markdown table.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

from gm_process import popen_gm, stop_worker

WORDS = ["jiffies", "mutex lock", "spin lock irqsave", "kmalloc", "copy from user", "rcu read lock",
         "dev err", "list for each entry", "schedule timeout", "atomic inc", "memcpy", "printk"]


class Server:
    def __init__(self, gm, workspace):
        self.workspace = workspace
        self.p = popen_gm(gm, "tools", workspace)
        self.next = 0
        self.lock = threading.Lock()
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "search-build", "version": "0"}})

    def request(self, method, params):
        with self.lock:
            self.next += 1
            msg = {"jsonrpc": "2.0", "id": self.next, "method": method, "params": params}
            self.p.stdin.write((json.dumps(msg) + "\n").encode())
            self.p.stdin.flush()
            while True:
                reply = json.loads(self.p.stdout.readline())
                if reply.get("id") == self.next:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]

    def search(self, query):
        r = self.request("tools/call", {"name": "search", "arguments": {"query": query, "limit": 10}})
        if r.get("isError"):
            raise RuntimeError(r["content"][0]["text"][:500])
        return r["structuredContent"]

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=30)
        stop_worker(self.workspace)


def log_size(tree):
    try:
        return os.path.getsize(os.path.join(tree, ".gm", "log.jsonl"))
    except OSError:
        return 0


def built(tree, since=0):
    """Whether the build that began after byte `since` of the run log has logged its end (a
    `search-index` event `built`): read from disk, never by asking gm. (`manifest.json` is no
    sign: a build that answers a search commits, and saves it, midway.)"""
    try:
        with open(os.path.join(tree, ".gm", "log.jsonl"), "rb") as f:
            f.seek(since)
            return any(b'"kind":"search-index"' in line and b'"state":"built"' in line for line in f)
    except OSError:
        return False


def one_build(gm, tree, mode, every=0.25):
    """Seconds from the first search to the built index, the first search's ms, and the
    searches sent meanwhile with their median ms."""
    shutil.rmtree(os.path.join(tree, ".gm", "index"), ignore_errors=True)
    since = log_size(tree)
    server = Server(gm, tree)
    t0 = time.perf_counter()
    first = server.search("jiffies")
    first_ms = (time.perf_counter() - t0) * 1000
    assert first.get("provisional") or built(tree, since), first
    if mode == "first":
        server.close()
        return None, first_ms, []
    times, n = [], 0
    while not built(tree, since):
        if mode == "alone":
            time.sleep(0.05)
            continue
        time.sleep(every)
        # Varied: a query no earlier one was (a word no file holds makes each distinct).
        query = "jiffies" if mode == "polled" else f"{WORDS[n % len(WORDS)]} gmnone{n}"
        n += 1
        t = time.perf_counter()
        server.search(query)
        times.append((time.perf_counter() - t) * 1000)
    build_s = time.perf_counter() - t0
    server.close()
    return build_s, first_ms, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gm", action="append", required=True, help="a gm binary (repeat to compare)")
    ap.add_argument("--tree", required=True)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", default="alone,polled,varied", help="any of alone, polled, varied, first")
    ap.add_argument("--every", type=float, default=0.25, help="seconds between searches during a build")
    a = ap.parse_args()
    modes = a.modes.split(",")
    # Untimed: read the tree once, so that whoever reads it first does not pay for the disk.
    # Without ripgrep, the first answer is given alone (no ratio).
    has_rg = shutil.which("rg") is not None
    warm = ["rg", "-c", "--no-messages", "-F", "warmup-no-such-text"] if has_rg else ["git", "grep", "-c", "-F", "warmup-no-such-text"]
    subprocess.run(warm, cwd=a.tree, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results = {(gm, m): [] for gm in a.gm for m in modes}
    rg = []
    for _ in range(a.rounds):
        for mode in modes:
            for gm in a.gm:
                build_s, first_ms, times = one_build(gm, a.tree, mode, a.every)
                if has_rg:
                    t = time.perf_counter()
                    subprocess.run(["rg", "-c", "--no-messages", "-F", "jiffies"], cwd=a.tree,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    rg.append((time.perf_counter() - t) * 1000)
                results[(gm, mode)].append((build_s, first_ms, times))
                print(json.dumps({"gm": gm, "mode": mode, "build_s": build_s, "first_ms": first_ms, "rg_ms": rg[-1] if rg else None,
                                  "searches": len(times), "search_ms_median": statistics.median(times) if times else None}),
                      flush=True)
    rg_ms = statistics.median(rg) if rg else None
    print("\n| gm | mode | build (s, median; all) | first answer (ms, median) / rg | searches during the build: n, median ms |")
    print("|---|---|---|---|---|")
    for (gm, mode), runs in results.items():
        builds = [r[0] for r in runs if r[0] is not None]
        firsts = [r[1] for r in runs]
        searches = [t for r in runs for t in r[2]]
        first = statistics.median(firsts)
        during = f"{len(searches)}, {statistics.median(searches):.1f} ms" if searches else "-"
        build = f"{statistics.median(builds):.1f} ({', '.join(f'{b:.1f}' for b in builds)})" if builds else "-"
        versus = f" / {rg_ms:.0f} = {first / rg_ms:.2f}x" if rg_ms else " (no rg)"
        print(f"| {gm} | {mode} | {build} | {first:.0f}{versus} | {during} |")


if __name__ == "__main__":
    sys.exit(main())
