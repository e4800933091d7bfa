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


def popen_gm(gm, surface, workspace):
    # A worker whose hosts are gone leaves after 2 s instead of 10 minutes.
    env = dict(os.environ, GM_DEFAULTS_DIR=no_children_dir(), GM_WORKER_IDLE_MS="2000")
    return subprocess.Popen([gm, "serve", "--surface", surface, "--workspace", workspace], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def stop_worker(workspace, timeout_s=30):
    """Stops the workspace's worker (SIGTERM) and waits until it has let go of the workspace.
    A gm of a build before workers (one process per host) has none: nothing to do."""
    life = os.path.join(workspace, ".gm", "worker.pid")
    try:
        with open(life) as f:
            pid = json.load(f)["pid"]
    except (OSError, ValueError, KeyError):
        return
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
