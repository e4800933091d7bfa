"""The MCP conformance suite (@modelcontextprotocol/conformance) run directly against
`gm serve --http`, for 2025-11-25 (its active server scenarios), 2026-07-28 (the scenarios
that revision requires) and the skills extension (SEP-2640's scenarios, at both revisions).

Many scenarios call the suite's own fixture tools, prompts and resources (`test_simple_text`,
`test://static-text`, `test_missing_capability`...), which gm does not serve; their checks fail
with "unknown tool", "Not testable: server does not list the diagnostic tool" and the like. This
script reads every check and fails on any other failure or warning, so the scenarios that do
not need fixtures (server-stateless's envelope, version and method checks, caching,
dns-rebinding-protection, sep-2164-resource-not-found, the session lifecycle, SEP-2243's
header validation, the skills manifest...) must pass without a warning.

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
# Checks whose message does not name the fixture they miss, by scenario: the check's id.
FIXTURE_CHECKS = {
    # Retries the fixture tool test_input_required_result_elicitation with a wrong answer; gm's
    # "unknown tool" error reads as an error where a re-request was recommended (a warning).
    ("input-required-result-missing-input-response", "sep-2322-missing-response-rerequests"),
}
# Scenarios the suite runs but does not score for a revision (extensions, pending SEPs).
UNSCORED = re.compile(r"^tasks-|^json-schema-2020-12$|^http-custom-header-server-validation$")
# The skills extension's scenarios, which neither run above includes: run one by one, at each
# revision (`--force`: an extension is on no revision's timeline, so the suite skips it at a
# named one otherwise).
SKILLS = ["sep-2640-skills-enumeration", "sep-2640-skills-manifest", "sep-2640-skills-directory"]


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
    """The checks that passed, and every failure or warning that no missing fixture explains."""
    passed, unexpected = 0, []
    for checks in sorted(out.glob("*/checks.json")):
        scenario = re.sub(r"^server-|-\d{4}-\d{2}-\d{2}T.*$", "", checks.parent.name)
        for c in json.loads(checks.read_text()):
            status = c.get("status")
            if status in ("SUCCESS", "SKIPPED", "INFO"):
                passed += status == "SUCCESS"
                continue
            message = c.get("errorMessage") or ""
            if (
                UNSCORED.search(scenario)
                or any(re.search(p, message) for p in FIXTURE)
                or (scenario, c.get("id")) in FIXTURE_CHECKS
            ):
                continue
            unexpected.append(f"{scenario}: {status}: {c.get('id')}: {message[:300]}")
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
        runs = [("2025-11-25", [[]]), ("2026-07-28", [["--requirements", "2026-07-28"]])]
        runs += [
            (f"skills {v}", [["--scenario", s, "--spec-version", v, "--force"] for s in SKILLS])
            for v in ("2025-11-25", "2026-07-28")
        ]
        for name, invocations in runs:
            workspace = root / f"ws-{name.replace(' ', '-')}"
            workspace.mkdir()
            subprocess.run(["git", "init", "-q"], cwd=workspace, check=True)
            front, url = start_front(gm, workspace, defaults)
            out = root / f"out-{name.replace(' ', '-')}"
            try:
                for args in invocations:
                    run_suite(node, suite, url, out, args)
                passed, unexpected = judge(out)
            finally:
                front.send_signal(signal.SIGTERM)
                front.wait(timeout=30)
            if not any(out.glob("*/checks.json")):
                unexpected.append("the suite wrote no checks")
            print(f"conformance {name}: {passed} checks passed, {len(unexpected)} unexpected failures or warnings")
            failures += [f"[{name}] {u}" for u in unexpected]
        failures += inspector(node, suite, gm, root, defaults)
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
