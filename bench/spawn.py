# Spawn to `initialize` answered, p50, three ways: a cold start (a new workspace: the relay starts
# its worker), a relay joining a running worker, and `--no-relay`. Each host closes stdin and its
# relay exits before the next spawn, and a cold start's worker is stopped before the next one
# (a worker left starting in the background took the core from the next spawn: 13 ms against 5
# pinned). Run it for several builds, alternating:
#   python3 bench/spawn.py GM_BIN
import fcntl, json, os, signal, statistics, subprocess, sys, tempfile, time

gm = sys.argv[1] if len(sys.argv) == 2 else sys.exit("usage: python3 bench/spawn.py GM_BIN")
defaults = tempfile.mkdtemp()
open(os.path.join(defaults, "mcp.json"), "w").write('{"mcpServers":{}}')
env = dict(os.environ, GM_DEFAULTS_DIR=defaults, GM_WORKER_IDLE_MS="3000")
INIT = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}\n'


def once(ws, extra=()):
    t = time.perf_counter()
    p = subprocess.Popen([gm, "serve", "--workspace", ws, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    p.stdin.write(INIT)
    p.stdin.flush()
    p.stdout.readline()
    return p, (time.perf_counter() - t) * 1000


def leave(p):
    p.stdin.close()
    p.wait()


def stop_worker(ws):
    """Ends the workspace's worker and waits until it has let go of the workspace."""
    life = os.path.join(ws, ".gm", "worker.pid")
    deadline = time.time() + 10
    pid = None
    while pid is None and time.time() < deadline:
        try:
            pid = json.load(open(life))["pid"]
        except (OSError, ValueError, KeyError):
            time.sleep(0.005)
    if pid is None:
        return
    os.kill(pid, signal.SIGTERM)
    while time.time() < deadline:
        with open(life) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except OSError:
                time.sleep(0.005)


cold = []
for _ in range(15):
    ws = tempfile.mkdtemp()
    p, ms = once(ws)
    cold.append(ms)
    leave(p)
    stop_worker(ws)
ws = tempfile.mkdtemp()
keep, _ = once(ws)
joining = []
for _ in range(20):
    p, ms = once(ws)
    joining.append(ms)
    leave(p)
direct = []
for _ in range(15):
    p, ms = once(tempfile.mkdtemp(), ["--no-relay"])
    direct.append(ms)
    leave(p)
leave(keep)
print("cold (worker starts) p50 ms %.1f | joining a running worker p50 ms %.1f | --no-relay p50 ms %.1f"
      % (statistics.median(cold), statistics.median(joining), statistics.median(direct)))
