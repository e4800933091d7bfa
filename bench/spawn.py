# Spawn to `initialize` answered, p50, three ways: a cold start (a new workspace: the relay starts
# its worker), a relay joining a running worker, and `--no-relay`. Each host closes stdin and its
# relay exits before the next spawn, and a cold start's worker is stopped before the next one
# (a worker left starting in the background took the core from the next spawn: 13 ms against 5
# pinned). Run it for several builds, alternating:
#   python3 bench/spawn.py GM_BIN
import os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gm_process import no_children_dir, stop_worker

gm = sys.argv[1] if len(sys.argv) == 2 else sys.exit("usage: python3 bench/spawn.py GM_BIN")
env = dict(os.environ, GM_DEFAULTS_DIR=no_children_dir(), GM_WORKER_IDLE_MS="3000")
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


cold = []
for _ in range(15):
    ws = tempfile.mkdtemp()
    p, ms = once(ws)
    cold.append(ms)
    leave(p)
    stop_worker(ws, appear_s=10)
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
