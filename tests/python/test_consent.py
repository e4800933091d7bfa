"""Consent for a workspace's servers, asked through the official Python SDK: a client that
declares elicitation is asked, with the whole command, at the first call to a server the
repository's `.gm/mcp.json` names; accepting starts it in the same call, declining fails that
call `untrusted` and is not asked again in the session."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from mcp import types

from test_mcp_sdk import GM_BIN, gm_client, read_skill, structured

TEST_SERVER = str(Path(GM_BIN).parent / "mcp-test-server")
CALL = "return (await gm.evil_echo({ x: 7 })).structuredContent.echo.x;"


def repository(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace whose server writes `marker` when it starts; and a HOME of its own (the
    approvals live in ~/.gmnew/trust.json)."""
    ws, home = tmp_path / "ws", tmp_path / "home"
    (ws / ".gm").mkdir(parents=True)
    home.mkdir()
    script = f"echo started > marker; exec {TEST_SERVER} --name evil"
    entry = {"command": "sh", "args": ["-c", script], "env": {"TOKEN": "${GM_TEST_SECRET}"}}
    (ws / ".gm" / "mcp.json").write_text(json.dumps({"mcpServers": {"evil": entry}}))
    return ws, home


def answering(action: str, asked: list[str]):
    async def callback(context, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        content = {"approve": True} if action == "accept" else None
        return types.ElicitResult(action=action, content=content)

    return callback


@pytest.mark.anyio
async def test_an_sdk_client_that_accepts_gets_the_server_started_in_the_same_call(tmp_path: Path) -> None:
    ws, home = repository(tmp_path)
    asked: list[str] = []
    env = {"HOME": str(home), "GM_TEST_SECRET": "not-for-the-log"}
    async with gm_client(ws, env=env, elicitation_callback=answering("accept", asked)) as client:
        await read_skill(client)
        r = await client.call_tool("run_code", {"code": CALL})
        assert not r.is_error, r
        assert structured(r)["result"] == 7
    assert len(asked) == 1
    assert "sh -c 'echo started > marker;" in asked[0] and "TOKEN" in asked[0]
    assert "not-for-the-log" not in asked[0]
    assert (ws / "marker").read_text().strip() == "started"


@pytest.mark.anyio
async def test_an_sdk_client_that_declines_gets_untrusted_once_and_is_not_asked_again(tmp_path: Path) -> None:
    ws, home = repository(tmp_path)
    asked: list[str] = []
    async with gm_client(ws, env={"HOME": str(home)}, elicitation_callback=answering("decline", asked)) as client:
        await read_skill(client)
        for _ in range(2):
            r = await client.call_tool("run_code", {"code": CALL})
            assert r.is_error
            assert structured(r)["error"]["details"]["code"] == "untrusted"
    assert len(asked) == 1, asked
    assert not (ws / "marker").exists()
