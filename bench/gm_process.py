"""Starting `gm serve` for the benchmark scripts: without child MCP servers, because the
shipped defaults name a browser server started through npx, which would share the machine's
cores with what is measured."""
import json
import os
import subprocess
import tempfile

_NO_CHILDREN = None


def no_children_dir():
    global _NO_CHILDREN
    if _NO_CHILDREN is None:
        _NO_CHILDREN = tempfile.mkdtemp(prefix="gm-bench-defaults-")
        with open(os.path.join(_NO_CHILDREN, "mcp.json"), "w") as f:
            json.dump({"mcpServers": {}}, f)
    return _NO_CHILDREN


def popen_gm(gm, surface, workspace):
    env = dict(os.environ, GM_DEFAULTS_DIR=no_children_dir())
    return subprocess.Popen([gm, "serve", "--surface", surface, "--workspace", workspace], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
