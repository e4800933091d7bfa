"""End-to-end tests of the gm MCP server (stdio) driven by the official Python SDK, mcp 2.3.0.

Run:  pip install -r tests/python/requirements.txt pytest
      python -m pytest -q tests/python
The gm binary is taken from $GM_BIN, else <repo>/target/debug/gm.
"""

from __future__ import annotations

import json
import math
import os
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import anyio
import pytest
from mcp import Client, ClientSession, StdioServerParameters
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

REPO_ROOT = Path(__file__).resolve().parents[2]
GM_BIN = os.environ.get("GM_BIN") or str(REPO_ROOT / "target/debug/gm")
RUN_META_KEY = "com.anentrypoint.gmnew/run"
SKILL_URI = "skill://gm/SKILL.md"
# Defaults naming no child MCP server: the shipped one fetches a browser server with npx.
NO_CHILD_SERVERS = str(REPO_ROOT / "tests/fixtures/no-child-servers")
CONNECT_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 30.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session", autouse=True)
def _gm_binary_exists() -> None:
    if not Path(GM_BIN).is_file():
        pytest.fail(f"gm binary not found at {GM_BIN} (set GM_BIN or build with cargo build)")


@asynccontextmanager
async def gm_client(
    workspace: Path, *extra_args: str, mode: str = "auto", env: dict[str, str] | None = None, **client: Any
) -> AsyncIterator[Client]:
    """One stdio connection to a fresh `gm serve` on `workspace`; the connect is bounded by 30 s.
    `env` adds to gm's environment; `client` goes to the SDK's Client (callbacks)."""
    params = StdioServerParameters(
        command=GM_BIN,
        args=["serve", *extra_args, "--workspace", str(workspace)],
        cwd=str(workspace),
        # A short idle grace: the workers of finished tests do not pile up.
        env={**os.environ, "GM_DEFAULTS_DIR": NO_CHILD_SERVERS, "GM_WORKER_IDLE_MS": "3000", **(env or {})},
    )
    # The deadline scope encloses the whole `async with`, so anyio's cancel scopes nest properly
    # (the client's transport task group lives inside it); it is lifted once the connect is done.
    with anyio.fail_after(CONNECT_TIMEOUT_S) as deadline:
        async with Client(params, mode=mode, read_timeout_seconds=CALL_TIMEOUT_S, **client) as client:
            deadline.deadline = math.inf
            yield client


async def list_all_tools(client: Client) -> list[Any]:
    """Every tool, following nextCursor pagination."""
    tools: list[Any] = []
    cursor: str | None = None
    for _ in range(100):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise AssertionError("tools/list pagination did not end after 100 pages")


async def read_skill(client: Client) -> str:
    res = await client.read_resource(SKILL_URI)
    assert res.contents, "skill resource has no contents"
    text = getattr(res.contents[0], "text", None)
    assert isinstance(text, str) and text.strip(), f"skill resource has no text: {res.contents[0]!r}"
    return text


def structured(result: Any) -> dict[str, Any]:
    sc = result.structured_content
    assert isinstance(sc, dict), f"no structuredContent in {result!r}"
    return sc


def ok(result: Any) -> dict[str, Any]:
    """Structured content of a successful tool result (fails with the error if isError)."""
    assert not result.is_error, f"tool returned an error: {result.structured_content or result.content!r}"
    return structured(result)


def read_log(workspace: Path) -> list[dict[str, Any]]:
    path = workspace / ".gm" / "log.jsonl"
    assert path.is_file(), f"no run log at {path}"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def _three_tools_skill_and_run_code(client: Client, workspace: Path) -> None:
    tools = await list_all_tools(client)
    assert sorted(t.name for t in tools) == ["finish", "next_context", "run_code"]

    skill = await read_skill(client)
    assert "gm" in skill

    code = (
        "await gm.write_file({path: 'a.txt', content: 'hi from python'});\n"
        "return (await gm.read_file({path: 'a.txt'})).content;"
    )
    result = await client.call_tool("run_code", {"code": code})
    sc = ok(result)
    assert sc["result"] == "hi from python"
    assert isinstance(sc.get("console"), list)
    assert "ms" in sc
    assert (workspace / "a.txt").read_text() == "hi from python"


# a. default ("auto") client: server/discover probe; gm offers 2026-07-28, so the client adopts the
# stateless revision (no initialize) and everything works on it.
@pytest.mark.anyio
async def test_auto_client_three_tools_skill_and_run_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probes: list[str] = []
    real_send_discover = ClientSession.send_discover

    async def spy_send_discover(self: ClientSession, version: str, *args: Any, **kwargs: Any) -> Any:
        probes.append(version)
        return await real_send_discover(self, version, *args, **kwargs)

    monkeypatch.setattr(ClientSession, "send_discover", spy_send_discover)

    async with gm_client(tmp_path) as client:
        assert probes, "auto mode did not probe server/discover"
        assert client.session.initialize_result is None
        assert client.session.discover_result is not None
        assert client.protocol_version == "2026-07-28"
        assert client.server_info is not None and client.server_info.name == "gm"
        await _three_tools_skill_and_run_code(client, tmp_path)

    events = read_log(tmp_path)
    kinds = {e.get("kind") for e in events}
    assert {"skill-read", "code-call"} <= kinds, kinds
    assert any(e.get("kind") == "initialize" and e.get("stateless") for e in events), events


# a2. a client that keeps the initialize handshake gets the older revision, unchanged.
@pytest.mark.anyio
async def test_legacy_client_three_tools_skill_and_run_code(tmp_path: Path) -> None:
    async with gm_client(tmp_path, mode="legacy") as client:
        assert client.session.initialize_result is not None
        assert client.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
        await _three_tools_skill_and_run_code(client, tmp_path)


# b. the read gate: run_code is refused with skill_not_read until SKILL.md is read on this connection.
@pytest.mark.anyio
async def test_run_code_gated_on_skill_read(tmp_path: Path) -> None:
    async with gm_client(tmp_path) as client:
        refused = await client.call_tool("run_code", {"code": "return 1 + 1;"})
        assert refused.is_error, f"run_code before the skill read was not refused: {refused!r}"
        assert structured(refused)["error"]["code"] == "skill_not_read"

        await read_skill(client)

        allowed = await client.call_tool("run_code", {"code": "return 1 + 1;"})
        assert ok(allowed)["result"] == 2


# c. the tools surface: every verb is its own tool.
@pytest.mark.anyio
async def test_tools_surface_verbs_and_query_log(tmp_path: Path) -> None:
    async with gm_client(tmp_path, "--surface", "tools") as client:
        names = {t.name for t in await list_all_tools(client)}
        assert {"read_file", "query_log", "write_file", "next_context", "finish"} <= names, names
        assert "run_code" not in names

        await read_skill(client)

        ok(await client.call_tool("write_file", {"path": "b.txt", "content": "bee"}))
        assert (tmp_path / "b.txt").read_text() == "bee"
        assert ok(await client.call_tool("read_file", {"path": "b.txt"}))["content"] == "bee"

        logged = ok(await client.call_tool("query_log", {"kind": "action"}))
        dump = json.dumps(logged)
        assert "write_file" in dump and "read_file" in dump, dump[:2000]

    actions = [e for e in read_log(tmp_path) if e.get("kind") == "action"]
    assert any("write_file" in json.dumps(e) for e in actions), actions
    assert any("read_file" in json.dumps(e) for e in actions), actions


# d. prompts.
@pytest.mark.anyio
async def test_prompts(tmp_path: Path) -> None:
    async with gm_client(tmp_path) as client:
        prompts = await client.list_prompts()
        names = {p.name for p in prompts.prompts}
        assert {"gm", "gm-continue"} <= names, names

        got = await client.get_prompt("gm", {"task": "do X"})
        texts = [getattr(m.content, "text", "") for m in got.messages]
        assert any("do X" in t for t in texts), texts


# e. every tools/call result carries the run id in _meta (the SDK exposes it as CallToolResult.meta).
@pytest.mark.anyio
async def test_call_result_meta_has_run_id(tmp_path: Path) -> None:
    async with gm_client(tmp_path) as client:
        refused = await client.call_tool("run_code", {"code": "return 0;"})
        await read_skill(client)
        result = await client.call_tool("run_code", {"code": "return 'x';"})
        ok(result)
        for r in (refused, result):
            assert r.meta is not None, f"no _meta on {r!r}"
            run_id = r.meta.get(RUN_META_KEY)
            assert isinstance(run_id, str) and run_id, r.meta
        assert refused.meta[RUN_META_KEY] == result.meta[RUN_META_KEY]

    runs = {e.get("run") for e in read_log(tmp_path)}
    assert result.meta[RUN_META_KEY] in runs, runs
