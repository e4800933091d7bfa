"""`gm serve --http` against stdio, side by side in one run, on one workspace's one worker.

    python3 bench/http_bench.py target/release/gm [--calls 2000] [--clients 8] [--per-client 1000]

1. `stat_file` round trips (tools surface), sequential: a stdio relay session and an HTTP session
   (keep-alive, one connection) of the same worker, taking turns in blocks of 250 calls so a
   drift of the machine shows in both. p50 and p99 of each, and their ratio.
2. Load: N clients (processes), each its own HTTP session on its own keep-alive connection,
   each making M `stat_file` calls one after another, all at once. Every call must be answered
   once, with its own id; the log must hold one `action` per call. Total time, calls/s, p50/p99.
3. Idle RSS: the HTTP front, the stdio relay and the worker, from /proc, after the runs.

The clients are Python (stdlib http.client and pipes), the same code path for both transports
apart from the transport itself; their cost is in every figure.
"""
import argparse
import http.client
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from gm_process import no_children_dir, stop_worker  # noqa: E402



def env():
    return dict(os.environ, GM_DEFAULTS_DIR=no_children_dir(), GM_WORKER_IDLE_MS="2000")


class Stdio:
    def __init__(self, gm, ws):
        self.p = subprocess.Popen([gm, "serve", "--surface", "tools", "--workspace", ws], env=env(),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.n = 0
        self.req("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                "clientInfo": {"name": "bench", "version": "0"}})
        self.note("notifications/initialized")

    def note(self, method):
        self.p.stdin.write((json.dumps({"jsonrpc": "2.0", "method": method}) + "\n").encode())
        self.p.stdin.flush()

    def req(self, method, params):
        self.n += 1
        self.p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}) + "\n").encode())
        self.p.stdin.flush()
        while True:
            m = json.loads(self.p.stdout.readline())
            if m.get("id") == self.n:
                return m

    def close(self):
        self.p.stdin.close()
        self.p.wait(30)


class Http:
    def __init__(self, url, token):
        hostport = url.removeprefix("http://").split("/")[0]
        host, port = hostport.rsplit(":", 1)
        self.c = http.client.HTTPConnection(host, int(port))
        self.host = hostport
        self.sock = None
        self.buf = b""
        self.h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                  "Accept": "application/json, text/event-stream"}
        self.n = 0
        status, _, headers = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}}})
        assert status == 200, status
        self.h["Mcp-Session-Id"] = headers["mcp-session-id"]
        status, _, _ = self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
        assert status == 202, status
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def post(self, msg):
        if "Mcp-Session-Id" in self.h and self.sock is not None:
            return self.post_fast(msg)
        self.c.request("POST", "/mcp", body=json.dumps(msg), headers=self.h)
        r = self.c.getresponse()
        body = r.read()
        return r.status, (json.loads(body) if body else None), {k.lower(): v for k, v in r.getheaders()}

    def post_fast(self, msg):
        """The same request on a socket of its own, written and read with the least Python:
        http.client's header parsing costs ~150 µs a call, which would hide the server's cost."""
        body = json.dumps(msg).encode()
        head = "".join(f"{k}: {v}\r\n" for k, v in self.h.items())
        self.sock.sendall(f"POST /mcp HTTP/1.1\r\nHost: {self.host}\r\n{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        buf = self.buf
        while b"\r\n\r\n" not in buf:
            buf += self.sock.recv(65536)
        head, _, rest = buf.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        while len(rest) < length:
            rest += self.sock.recv(65536)
        self.buf = rest[length:]
        body = rest[:length]
        return status, (json.loads(body) if body else None), {}

    def req(self, method, params):
        self.n += 1
        status, m, _ = self.post({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params})
        assert status == 200 and m["id"] == self.n, (status, m)
        return m

    def close(self):
        if self.sock is not None:
            self.sock.close()
        self.c.request("DELETE", "/mcp", headers=self.h)
        self.c.getresponse().read()
        self.c.close()


def stat(client):
    t = time.perf_counter()
    r = client.req("tools/call", {"name": "stat_file", "arguments": {"path": "a.txt"}})
    dt = (time.perf_counter() - t) * 1e6
    assert not r["result"]["isError"], r
    return dt


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def start_front(gm, ws):
    p = subprocess.Popen([gm, "serve", "--http", "127.0.0.1:0", "--surface", "tools", "--workspace", ws], env=env(),
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while True:
        line = p.stderr.readline()
        if not line:
            sys.exit("gm serve --http printed no URL")
        if line.startswith("gm: listening on "):
            url = line.removeprefix("gm: listening on ").strip()
            break
    token = open(os.path.join(ws, ".gm", "http.token")).read().strip()
    return p, url, token


def load_client(args):
    url, token, calls = args
    c = Http(url, token)
    times, seen = [], set()
    for _ in range(calls):
        times.append(stat(c))
        seen.add(c.n)
    session = c.h["Mcp-Session-Id"]
    c.close()
    return session, times, len(seen)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gm")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--per-client", type=int, default=1000)
    a = ap.parse_args()
    gm = os.path.abspath(a.gm)
    ws = tempfile.mkdtemp(prefix="gm-http-bench-")
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    open(os.path.join(ws, "a.txt"), "w").write("hello\n")
    front, url, token = start_front(gm, ws)
    time.sleep(0.5)
    fresh_front = rss_kib(front.pid)
    try:
        stdio = Stdio(gm, ws)
        web = Http(url, token)
        for _ in range(200):  # warm both
            stat(stdio), stat(web)
        times = {"stdio": [], "http": []}
        block = 250
        for _ in range(max(1, a.calls // block)):
            for name, c in (("stdio", stdio), ("http", web)):
                times[name] += [stat(c) for _ in range(block)]
        print(f"1. stat_file round trip, sequential, {len(times['http'])} calls each, taking turns in blocks of {block}")
        for name in ("stdio", "http"):
            print(f"   {name:5}  p50 {pct(times[name], .5):7.1f} µs   p99 {pct(times[name], .99):7.1f} µs")
        print(f"   http/stdio p50 ratio {pct(times['http'], .5) / pct(times['stdio'], .5):.2f}")

        total = a.clients * a.per_client
        t = time.perf_counter()
        with multiprocessing.Pool(a.clients) as pool:
            results = pool.map(load_client, [(url, token, a.per_client)] * a.clients)
        wall = time.perf_counter() - t
        all_times = [x for _, ts, _ in results for x in ts]
        answered = sum(n for _, _, n in results)
        sessions = {s for s, _, _ in results}
        # One action per call in the log (the ping makes the log catch up first).
        stdio.req("ping", {})
        actions = 0
        with open(os.path.join(ws, ".gm", "log.jsonl")) as f:
            for line in f:
                e = json.loads(line)
                if e.get("kind") == "action" and e.get("session") in sessions and e.get("tool") == "stat_file":
                    actions += 1
        print(f"2. {a.clients} HTTP clients x {a.per_client} stat_file calls at once: {total} calls in {wall:.2f} s "
              f"({total / wall:.0f} calls/s); answered {answered}, action events {actions}; "
              f"p50 {pct(all_times, .5):.0f} µs, p99 {pct(all_times, .99):.0f} µs")
        assert answered == total and actions == total, (answered, actions, total)

        time.sleep(2)
        worker = json.load(open(os.path.join(ws, ".gm", "worker.pid")))["pid"]
        print(f"3. idle RSS: HTTP front {fresh_front / 1024:.1f} MiB at its start, {rss_kib(front.pid) / 1024:.1f} MiB after the runs; stdio relay {rss_kib(stdio.p.pid) / 1024:.1f} MiB, "
              f"worker {rss_kib(worker) / 1024:.1f} MiB")
        web.close()
        stdio.close()
    finally:
        front.send_signal(signal.SIGTERM)
        front.wait(30)
        stop_worker(ws)


if __name__ == "__main__":
    main()
