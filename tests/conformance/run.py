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

CONFORMANCE_DIR holds node_modules/@modelcontextprotocol/conformance; NODE22 is a Node 22
binary (the suite needs >= 22; `.ci/run` installs both from the npm registry).
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


def start_front(gm: str, workspace: Path, defaults: Path) -> tuple[subprocess.Popen, str]:
    env = dict(os.environ, GM_DEFAULTS_DIR=str(defaults), GM_WORKER_IDLE_MS="3000")
    front = subprocess.Popen(
        [gm, "serve", "--http", "127.0.0.1:0", "--http-token", "none"],
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
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
