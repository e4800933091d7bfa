"""The relay seen from the official Python SDK: the worker is killed with SIGKILL mid-call; the
client gets one worker_restarted error for that call and keeps working on the same connection,
with the read gate still open and the run's step carried over."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import anyio
import pytest

from test_mcp_sdk import gm_client, ok, read_log, read_skill, structured


def worker_pids(workspace: Path) -> list[int]:
    log = workspace / ".gm" / "log.jsonl"
    if not log.is_file():
        return []
    return [e["pid"] for e in read_log(workspace) if e.get("kind") == "start"]


async def wait_until(predicate, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_sdk_client_survives_a_killed_worker(tmp_path: Path) -> None:
    async with gm_client(tmp_path) as client:
        await read_skill(client)
        step = ok(await client.call_tool("next_context", {"task": "outlive the worker"}))
        assert step["step"] == 1
        await wait_until(lambda: len(worker_pids(tmp_path)) == 1, "the worker's start event")
        first = worker_pids(tmp_path)[0]

        code = "await gm.write_file({path: 'started', content: 'x'}); await gm.run_shell({command: 'sleep 60'}); return 1;"
        results: list = []

        async def blocked_call() -> None:
            results.append(await client.call_tool("run_code", {"code": code}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(blocked_call)
            await wait_until(lambda: (tmp_path / "started").exists(), "the body to start")
            os.kill(first, signal.SIGKILL)

        assert len(results) == 1
        lost = results[0]
        assert lost.is_error
        assert structured(lost)["error"]["code"] == "worker_restarted"
        assert "SIGKILL" in structured(lost)["error"]["message"]

        # Same connection: the gate is still open and the run carries on.
        again = ok(await client.call_tool("run_code", {"code": "return 'still here';"}))
        assert again["result"] == "still here"
        step = ok(await client.call_tool("next_context", {}))
        assert step["task"] == "outlive the worker"
        assert step["step"] == 2
        pids = worker_pids(tmp_path)
        assert len(pids) == 2 and pids[1] != first
