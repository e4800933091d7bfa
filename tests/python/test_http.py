"""`gm serve --http` driven by the official Python SDK's Streamable HTTP client (mcp 2.3.0), in
2025-11-25 mode (the initialize handshake, a session ended with DELETE when the client closes)
and in auto mode (2026-07-28, stateless): connect with the bearer token, read the skill, call a
tool.

Run:  pip install -r tests/python/requirements.txt pytest
      python -m pytest -q tests/python/test_http.py
The gm binary is taken from $GM_BIN, else <repo>/target/debug/gm.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import anyio
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

REPO_ROOT = Path(__file__).resolve().parents[2]
GM_BIN = str(Path(os.environ.get("GM_BIN") or REPO_ROOT / "target/debug/gm").resolve())
NO_CHILD_SERVERS = str(REPO_ROOT / "tests/fixtures/no-child-servers")
SKILL_URI = "skill://gm/SKILL.md"
TIMEOUT_S = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def front(tmp_path: Path) -> Iterator[tuple[Path, str, str]]:
    """A `gm serve --http` on a fresh git workspace: (workspace, url, token)."""
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "a.txt").write_text("hello\n")
    env = {**os.environ, "GM_DEFAULTS_DIR": NO_CHILD_SERVERS, "GM_WORKER_IDLE_MS": "3000"}
    proc = subprocess.Popen(
        [GM_BIN, "serve", "--http", "127.0.0.1:0", "--workspace", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = None
        deadline = time.monotonic() + TIMEOUT_S
        assert proc.stderr is not None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            if line.startswith("gm: listening on "):
                url = line.removeprefix("gm: listening on ").strip()
        assert url, "gm serve --http printed no URL"
        token = (tmp_path / ".gm/http.token").read_text().strip()
        yield tmp_path, url, token
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
        # The worker leaves after its idle grace; stop it now so tests do not pile up workers.
        life = tmp_path / ".gm/worker.pid"
        try:
            pid = json.loads(life.read_text())["pid"]
            os.kill(pid, signal.SIGTERM)
        except (OSError, ValueError, KeyError):
            pass


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_sdk_client_over_http(front: tuple[Path, str, str], mode: str) -> None:
    """legacy: initialize at once, a session, ended by DELETE; auto: server/discover first, which
    offers 2026-07-28, so the client speaks the stateless revision (no session, every request on
    the front's shared link)."""
    workspace, url, token = front
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    with anyio.fail_after(TIMEOUT_S) as deadline:
        async with http, Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            deadline.deadline = math.inf
            assert client.protocol_version == ("2025-11-25" if mode == "legacy" else "2026-07-28")
            skill = await client.read_resource(SKILL_URI)
            assert "gm" in skill.contents[0].text
            result = await client.call_tool("run_code", {"code": "return await gm.stat_file({ path: 'a.txt' })"})
            assert not result.is_error, result
            assert result.structured_content["result"]["size"] == 6
    log = workspace / ".gm/log.jsonl"

    def events() -> list[dict]:
        return [json.loads(l) for l in log.read_text().splitlines() if l.strip()]

    if mode == "auto":
        assert any(e["kind"] == "session" and e.get("transport") == "stateless" for e in events()), events()
        return
    # The client's close sent DELETE: the worker ended the session.
    deadline_s = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline_s:
        if any(e["kind"] == "session-end" for e in events()):
            break
        time.sleep(0.05)
    else:
        pytest.fail("no session-end after the client closed")


@pytest.mark.anyio
async def test_sdk_client_without_token_is_refused(front: tuple[Path, str, str]) -> None:
    _, url, _ = front
    http = create_mcp_http_client()
    with pytest.raises(Exception):
        with anyio.fail_after(TIMEOUT_S):
            async with http, Client(streamable_http_client(url, http_client=http), mode="legacy"):
                pass
