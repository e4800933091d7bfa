"""Starting `gm serve` for the benchmark scripts: without child MCP servers, because the
shipped defaults name a browser server started through npx, which would share the machine's
cores with what is measured; and stopping it for real: a workspace's worker outlives the host's
`gm serve`, so a benchmark that restarts gm must stop the worker too, or its next gm would find
the old worker warm."""
import fcntl
import json
import os
import signal
import subprocess
import tempfile
import time

_NO_CHILDREN = None


def no_children_dir():
    global _NO_CHILDREN
    if _NO_CHILDREN is None:
        _NO_CHILDREN = tempfile.mkdtemp(prefix="gm-bench-defaults-")
        with open(os.path.join(_NO_CHILDREN, "mcp.json"), "w") as f:
            json.dump({"mcpServers": {}}, f)
    return _NO_CHILDREN


def popen_gm(gm, surface, workspace, extra=()):
    # A worker whose hosts are gone leaves after 2 s instead of 10 minutes.
    env = dict(os.environ, GM_DEFAULTS_DIR=no_children_dir(), GM_WORKER_IDLE_MS="2000")
    return subprocess.Popen([gm, "serve", "--surface", surface, "--workspace", workspace, *extra], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def rpc(p, id, method, params):
    """One request to a `gm serve` started by `popen_gm`; its answer (notifications skipped)."""
    p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}) + "\n").encode())
    p.stdin.flush()
    while True:
        m = json.loads(p.stdout.readline())
        if m.get("id") == id:
            return m


def initialize(p):
    return rpc(p, 0, "initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                    "clientInfo": {"name": "bench", "version": "0"}})


def stop_worker(workspace, timeout_s=30, appear_s=0):
    """Stops the workspace's worker (SIGTERM) and waits until it has let go of the workspace.
    A gm of a build before workers (one process per host) has none: nothing to do. `appear_s`:
    how long to wait for a worker still starting to write its pid (a relay answers `initialize`
    before its worker is up)."""
    life = os.path.join(workspace, ".gm", "worker.pid")
    appear_by = time.monotonic() + appear_s
    while True:
        try:
            with open(life) as f:
                pid = json.load(f)["pid"]
            break
        except (OSError, ValueError, KeyError):
            if time.monotonic() > appear_by:
                return
            time.sleep(0.005)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout_s
    with open(life) as f:
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the worker {pid} of {workspace} did not stop")
                time.sleep(0.01)
