#!/usr/bin/env python3
"""query_log on a run log of a million events, and read_file pages of a 1 GB file, through gm's
MCP server, with time and gm's peak RSS, beside the shell tools that do the same reads.

    bench/log_and_pages.py --gm target/release/gm [--events 1000000] [--gigabytes 1] [--dir DIR]

Every gm figure is a tools/call round trip through `gm serve --surface tools`, the way an agent
meets it (median of --repeat calls unless said otherwise). Peak RSS is the server's VmHWM after
the measurements of each part, read from /proc. Prints a markdown table and one JSON line per
measurement.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import time

from gm_process import popen_gm, stop_worker


class Server:
    def __init__(self, gm, workspace):
        self.workspace = workspace
        self.p = popen_gm(gm, "tools", workspace)
        self.next = 0
        self.request("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "log-bench", "version": "0"}})

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

    def peak_rss_mb(self):
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def close(self):
        """Ends gm as a restart does: the host leaves, and the workspace's worker stops."""
        self.p.stdin.close()
        self.p.wait(timeout=30)
        stop_worker(self.workspace)


def timed(fn, repeat):
    times = []
    out = None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def shell_ms(cmd, repeat):
    return timed(lambda: subprocess.run(cmd, shell=True, check=True, stdout=subprocess.DEVNULL), repeat)[0]


def write_log(path, events):
    """A run log in gm's own line layout: actions, code-calls and a few other kinds."""
    rnd = random.Random(7)
    kinds = ["action"] * 6 + ["code-call"] * 3 + ["job"]
    tools = ["read_file", "edit_file", "run_shell", "grep", "search", "git_status"]
    with open(path, "w") as f:
        for seq in range(1, events + 1):
            kind = "end" if seq % 100_000 == 0 else kinds[rnd.randrange(len(kinds))]
            tool = tools[rnd.randrange(len(tools))]
            args = json.dumps({"path": f"src/module_{rnd.randrange(500)}/file_{rnd.randrange(40)}.rs", "offset": rnd.randrange(1, 4000)})
            ts = f"2026-12-03T10:{(seq // 60_000) % 60:02d}:{(seq // 1000) % 60:02d}.{seq % 1000:03d}Z"
            f.write(f'{{"seq":{seq},"ts":"{ts}","run":"20261203T100000Z-bench000","kind":"{kind}",'
                    f'"tool":"{tool}","id":{seq},"args":{args},"outcome":"ok","ms":{rnd.random() * 5:.3f},"inFlight":1}}\n')


def write_big_file(path, gigabytes):
    line = "x" * 90
    target = int(gigabytes * (1 << 30))
    n = 0
    with open(path, "w") as f:
        written = 0
        chunk = []
        while written < target:
            n += 1
            s = f"{n:09d} {line}\n"
            chunk.append(s)
            written += len(s)
            if len(chunk) == 10_000:
                f.write("".join(chunk))
                chunk = []
        f.write("".join(chunk))
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gm", required=True)
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--gigabytes", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--dir", help="where to make the scratch files (default: a temp dir)")
    a = ap.parse_args()
    gm = os.path.abspath(a.gm)
    base = a.dir or tempfile.mkdtemp(prefix="gm-log-bench-")
    rows = []

    def row(what, gm_ms, peer=None, peer_ms=None, note=""):
        rows.append((what, gm_ms, peer, peer_ms, note))
        print(json.dumps({"what": what, "gm_ms": gm_ms, "peer": peer, "peer_ms": peer_ms, "note": note}), flush=True)

    # Part 1: query_log on a log of a million events.
    ws = os.path.join(base, "log-ws")
    os.makedirs(os.path.join(ws, ".gm"), exist_ok=True)
    log = os.path.join(ws, ".gm", "log.jsonl")
    write_log(log, a.events)
    size_mb = os.path.getsize(log) / (1 << 20)
    # Read once so every figure is a warm page cache, for gm and the peers alike.
    subprocess.run(["cat", log], stdout=subprocess.DEVNULL, check=True)
    s = Server(gm, ws)
    near = a.events - 50
    ms, out = timed(lambda: s.call("query_log", {"sinceSeq": near, "limit": 100}), a.repeat)
    assert len(out["events"]) >= 50, out["more"]
    row(f"query_log sinceSeq {near} (log of {a.events} events, {size_mb:.0f} MB)", ms,
        "tail -n 60", shell_ms(f"tail -n 60 {log}", a.repeat))
    ms, out = timed(lambda: s.call("query_log", {"sinceSeq": near - 100_000, "kind": "end", "limit": 100}), a.repeat)
    assert out["events"] and all(e["kind"] == "end" for e in out["events"]), out
    row("query_log kind end, sinceSeq 100k events from the end", ms)
    ms, out = timed(lambda: s.call("query_log", {"kind": "end", "limit": 5}), max(3, a.repeat // 3))
    row("query_log kind end over the whole log (counts every match)", ms,
        'grep -c \'"kind":"end"\'', shell_ms(f"grep -c '\"kind\":\"end\"' {log}", max(3, a.repeat // 3)))
    ms, out = timed(lambda: s.call("query_log", {"sinceSeq": a.events // 2, "limit": 1000}), a.repeat)
    row("query_log 1000 events from the middle", ms)
    row("gm peak RSS after the query_log part (MB)", s.peak_rss_mb(), note="VmHWM")
    s.close()

    # Part 2: read_file pages of a 1 GB file.
    ws2 = os.path.join(base, "file-ws")
    os.makedirs(ws2, exist_ok=True)
    big = os.path.join(ws2, "big.log")
    lines = write_big_file(big, a.gigabytes)
    gb = os.path.getsize(big) / (1 << 30)
    subprocess.run(["cat", big], stdout=subprocess.DEVNULL, check=True)
    s = Server(gm, ws2)
    t = time.perf_counter()
    first = s.call("read_file", {"path": "big.log", "limit": 1})
    cold = (time.perf_counter() - t) * 1000
    assert first["totalLines"] == lines, (first["totalLines"], lines)
    row(f"read_file first page, cold ({gb:.2f} GB, {lines} lines: one scan counts the lines)", cold,
        "wc -l", shell_ms(f"wc -l {big}", 3))
    last = lines - 1999
    ms, out = timed(lambda: s.call("read_file", {"path": "big.log", "offset": last}), a.repeat)
    assert out["endLine"] == lines and "next" not in out, out["endLine"]
    row("read_file last page (2000 lines), warm line index", ms,
        "tail -n 2000", shell_ms(f"tail -n 2000 {big}", a.repeat))
    mid = lines // 2
    ms, out = timed(lambda: s.call("read_file", {"path": "big.log", "offset": mid, "limit": 2000}), a.repeat)
    row("read_file a middle page (2000 lines), warm line index", ms,
        "sed -n (scans to it)", shell_ms(f"sed -n '{mid},{mid + 1999}p;{mid + 2000}q' {big}", 3))
    row("gm peak RSS after the read_file part (MB)", s.peak_rss_mb(), note="VmHWM")
    s.close()

    print()
    print("| measure | gm ms | peer | peer ms |")
    print("|---|---|---|---|")
    for what, gm_ms, peer, peer_ms, note in rows:
        value = f"{gm_ms:.1f}"
        print(f"| {what} | {value} | {peer or note} | {'' if peer_ms is None else f'{peer_ms:.1f}'} |")
    if not a.dir:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
