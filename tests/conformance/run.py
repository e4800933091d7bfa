"""The MCP conformance suite (@modelcontextprotocol/conformance) run directly against
`gm serve --http`, for 2025-11-25 (its active server scenarios) and 2026-07-28 (the scenarios
that revision requires).

Many scenarios call the suite's own fixture tools, prompts and resources (`test_simple_text`,
`test://static-text`, `test_missing_capability`...), which gm does not serve; their checks fail
with "unknown tool", "Not testable: server does not list the diagnostic tool" and the like. This
script reads every check and fails on any other failure, so the scenarios that do not need
fixtures (server-stateless's envelope, version and method checks, caching,
dns-rebinding-protection, sep-2164-resource-not-found, the session lifecycle...) must pass.

    python3 tests/conformance/run.py GM_BIN CONFORMANCE_DIR NODE22

CONFORMANCE_DIR holds node_modules/@modelcontextprotocol/conformance and
node_modules/@modelcontextprotocol/inspector; NODE22 is a Node 22 binary (both need >= 22;
`.ci/run` installs them from the npm registry). The MCP Inspector's CLI then connects over
`--transport http` with the bearer token (and is refused without it).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# A check that fails only because gm lacks the suite's fixtures. Each pattern is matched
# against the check's error message.
FIXTURE = [
    r"unknown tool: test_",
    r"unknown prompt: test_",
    r"not a skill URI .*: test://",
    r"Not testable",
    r"Prerequisite failed",
    r"Tool '[a-z0-9_]+' not found",
    r"Expected InputRequiredResult",
    # gm serves neither completions nor resource subscriptions (it does not declare them);
    # the scenarios call the fixture prompt and resource.
    r"method not found: completion/complete",
    r"method not found: resources/(un)?subscribe",
]
# Scenarios the suite runs but does not score for a revision (extensions, pending SEPs).
UNSCORED = re.compile(r"^tasks-|^json-schema-2020-12$|^http-header-validation$|^http-custom-header-server-validation$")


def start_front(gm: str, workspace: Path, defaults: Path, token: bool = False) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, GM_DEFAULTS_DIR=str(defaults), GM_WORKER_IDLE_MS="3000")
    # The suite cannot send a token; the Inspector can.
    flags = [] if token else ["--http-token", "none"]
    front = subprocess.Popen(
        [gm, "serve", "--http", "127.0.0.1:0", *flags],
        cwd=workspace,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = front.stderr.readline() if front.stderr else ""
        if line.startswith("gm: listening on "):
            return front, line.removeprefix("gm: listening on ").strip()
        if not line and front.poll() is not None:
            break
    front.kill()
    sys.exit("gm serve --http did not say where it listens")


def run_suite(node: str, suite: Path, url: str, out: Path, args: list[str]) -> None:
    cli = suite / "node_modules/@modelcontextprotocol/conformance/dist/index.js"
    cmd = [node, str(cli), "server", "--url", url, "-o", str(out), *args]
    # The suite's own exit code counts fixture failures too; the checks are judged below.
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900, check=False)


def judge(out: Path) -> tuple[int, list[str]]:
    passed, unexpected = 0, []
    for checks in sorted(out.glob("*/checks.json")):
        scenario = re.sub(r"^server-|-\d{4}-\d{2}-\d{2}T.*$", "", checks.parent.name)
        for c in json.loads(checks.read_text()):
            status = c.get("status")
            if status in ("SUCCESS", "SKIPPED", "INFO", "WARNING"):
                passed += status == "SUCCESS"
                continue
            message = c.get("errorMessage") or ""
            if UNSCORED.search(scenario) or any(re.search(p, message) for p in FIXTURE):
                continue
            unexpected.append(f"{scenario}: {c.get('id')}: {message[:300]}")
    return passed, unexpected


def inspector(node: str, suite: Path, gm: str, root: Path, defaults: Path) -> list[str]:
    """The MCP Inspector's CLI over HTTP: lists the tools and reads the skill with the token,
    is refused without it."""
    cli = suite / "node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js"
    workspace = root / "ws-inspector"
    workspace.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
    front, url = start_front(gm, workspace, defaults, token=True)
    home = root / "inspector-home"
    home.mkdir()
    env = dict(os.environ, HOME=str(home))
    token = (workspace / ".gm/http.token").read_text().strip()
    problems = []

    def run(*args: str, auth: bool = True) -> subprocess.CompletedProcess:
        header = ["--header", f"Authorization: Bearer {token}"] if auth else []
        cmd = [node, str(cli), "--cli", url, "--transport", "http", *header, *args]
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)

    try:
        listed = run("--method", "tools/list")
        if listed.returncode != 0 or '"run_code"' not in listed.stdout:
            problems.append(f"inspector tools/list: exit {listed.returncode}: {listed.stdout[-300:]} {listed.stderr[-300:]}")
        read = run("--method", "resources/read", "--uri", "skill://gm/SKILL.md")
        if read.returncode != 0 or "seven rules" not in read.stdout:
            problems.append(f"inspector resources/read: exit {read.returncode}: {read.stderr[-300:]}")
        refused = run("--method", "tools/list", auth=False)
        if '"run_code"' in refused.stdout:
            problems.append("inspector without the token listed the tools")
    finally:
        front.send_signal(signal.SIGTERM)
        front.wait(timeout=30)
    print(f"MCP Inspector over HTTP: {3 - len(problems)} of 3 checks passed")
    return problems


def main() -> int:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    gm, suite, node = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        defaults = root / "defaults"
        defaults.mkdir()
        (defaults / "mcp.json").write_text('{"mcpServers":{}}')
        for name, args in [("2025-11-25", []), ("2026-07-28", ["--requirements", "2026-07-28"])]:
            workspace = root / f"ws-{name}"
            workspace.mkdir()
            subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
            front, url = start_front(gm, workspace, defaults)
            try:
                out = root / f"out-{name}"
                run_suite(node, suite, url, out, args)
                passed, unexpected = judge(out)
            finally:
                front.send_signal(signal.SIGTERM)
                front.wait(timeout=30)
            print(f"conformance {name}: {passed} checks passed, {len(unexpected)} unexpected failures")
            failures += [f"[{name}] {u}" for u in unexpected]
        failures += inspector(node, suite, gm, root, defaults)
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
