#!/usr/bin/env python3
"""grep, search and callers through gm's MCP server, side by side with ripgrep and git grep.

    bench/search_bench.py --gm target/release/gm --kernel DIR --ts DIR

DIR are git repositories (bench/search.sh makes them). Every gm figure is a tools/call round
trip through a warm `gm serve --surface tools`, the way an agent meets it. Prints a markdown
table and one JSON line per measurement.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time


class Server:
    def __init__(self, gm, workspace):
        self.p = subprocess.Popen([gm, "serve", "--surface", "tools", "--workspace", workspace],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.next = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "search-bench", "version": "0"}})

    def request(self, method, params):
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

    def call(self, tool, args):
        r = self.request("tools/call", {"name": tool, "arguments": args})
        if r.get("isError"):
            raise RuntimeError(f"{tool} failed: {r['content'][0]['text'][:500]}")
        return r["structuredContent"]

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


def timed(fn, repeat):
    times = []
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def run(cmd, cwd):
    return subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


rows = []


def record(name, value, raw):
    print(json.dumps({"measure": name, "value": raw}), flush=True)
    rows.append((name, value))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gm", required=True)
    ap.add_argument("--kernel", required=True)
    ap.add_argument("--ts", required=True)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--builds", type=int, default=3, help="cold index builds; the median is reported")
    a = ap.parse_args()
    k = a.kernel

    # grep against rg and git grep, same patterns, same tree.
    gm = Server(a.gm, k)
    patterns = [("literal", "spin_lock_irqsave", [], ["-F"]),
                ("regex", r"static\s+int\s+\w+_probe\(", [], []),
                ("word", "jiffies", ["-w"], ["-w"])]
    # Untimed warm-up: this VM drops its page cache at times, and whoever read the tree first
    # would pay for reading it from disk.
    run(["rg", "-c", "--no-messages", "-F", "warmup-no-such-text"], k)
    gm.call("grep", {"pattern": "warmup-no-such-text", "mode": "literal", "limit": 1})
    for mode, pat, rg_flags, _ in patterns:
        gm_ms, r = timed(lambda: gm.call("grep", {"pattern": pat, "mode": mode, "limit": 1}), a.repeat)
        rg_cmd = ["rg", "-c", "--no-messages"] + (["-F"] if mode == "literal" else []) + rg_flags + [pat]
        rg_ms, _ = timed(lambda: run(rg_cmd, k), a.repeat)
        gg_cmd = ["git", "grep", "-c"] + (["-F"] if mode == "literal" else ["-P" if mode == "regex" else "-F"]) + rg_flags + [pat]
        gg_ms, _ = timed(lambda: run(gg_cmd, k), a.repeat)
        record(f"grep {mode} `{pat}`: gm / rg / git grep (ms)", f"{gm_ms:.0f} / {rg_ms:.0f} / {gg_ms:.0f} ({r['total']} matches)",
               {"gm": gm_ms, "rg": rg_ms, "git_grep": gg_ms, "matches": r["total"]})
        record(f"grep {mode}: gm / rg", f"{gm_ms / rg_ms:.2f}x", gm_ms / rg_ms)

    # search: cold build (three times from scratch, each in a fresh server: this VM's speed
    # drifts, so one build is a noisy measurement), warm queries, one file changed.
    gm.close()
    builds = []
    for _ in range(a.builds):
        shutil.rmtree(os.path.join(k, ".gm", "index"), ignore_errors=True)
        gm = Server(a.gm, k)
        t = time.perf_counter()
        r = gm.call("search", {"query": "spin lock irqsave", "limit": 10})
        builds.append(time.perf_counter() - t)
        if len(builds) < a.builds:
            gm.close()
    cold = statistics.median(builds)
    st = r.get("refreshed") or {}
    mb = st.get("bytesIndexed", 0) / 1e6
    size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(k, ".gm", "index")) for f in fs)
    record("search cold index build (median s, MB, MB/s; all builds s)",
           f"{cold:.1f} s for {mb:.0f} MB: {mb / cold:.0f} MB/s (all: {', '.join(f'{b:.1f}' for b in builds)})",
           {"s": cold, "mb": mb, "mb_s": mb / cold, "all_s": builds})
    record("search index size (MB)", f"{size / 1e6:.0f}", size / 1e6)
    warm, _ = timed(lambda: gm.call("search", {"query": "mutex lock interruptible", "limit": 10}), 50)
    record("search warm query p50 (ms, through MCP)", f"{warm:.2f}", warm)
    # One file changed through gm, then a search for the new word: five edits, the median.
    target = "kernel/sched/core.c"
    first = gm.call("read_file", {"path": target, "limit": 1})["content"]
    prev, times = first, []
    for i in range(5):
        new = first.rstrip("\n") + f" /* gmbenchmarker{i} */\n"
        gm.call("edit_file", {"path": target, "old": prev, "new": new})
        prev = new
        t = time.perf_counter()
        r = gm.call("search", {"query": f"gmbenchmarker{i}", "limit": 1})
        times.append((time.perf_counter() - t) * 1000)
        assert r["hits"] and r["hits"][0]["path"] == target, r
        time.sleep(0.3)
    inc = statistics.median(times)
    record("search after one file changed (ms, includes reindexing it; median of 5)",
           f"{inc:.1f} (all: {', '.join(f'{x:.0f}' for x in times)})", inc)
    run(["git", "checkout", "--", target], k)
    gm.close()

    # callers / impact on the typescript package's sources.
    ts = Server(a.gm, a.ts)
    cold, r = timed(lambda: ts.call("callers", {"symbol": "createSourceFile", "limit": 5}), 1)
    record("callers cold (ms, files parsed)", f"{cold:.0f} ({r['filesParsed']} files)", {"ms": cold, "files": r["filesParsed"]})
    warm, r = timed(lambda: ts.call("callers", {"symbol": "createSourceFile", "limit": 5}), 10)
    record("callers warm p50 (ms)", f"{warm:.1f} ({r['total']} call sites)", warm)
    warm, r = timed(lambda: ts.call("impact", {"symbol": "createSourceFile", "depth": 2}), 5)
    record("impact depth 2 warm p50 (ms)", f"{warm:.1f} ({len(r['nodes'])} functions)", warm)
    ts.close()

    print("\n| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    sys.exit(main())
