"""gm's skills/list and skills/get results checked against the Skills extension's shapes
(SEP-2640, tests/fixtures/sep-2640-skills.schema.json), over a raw stdio connection."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import jsonschema

REPO_ROOT = Path(__file__).resolve().parents[2]
GM_BIN = os.environ.get("GM_BIN") or str(REPO_ROOT / "target/debug/gm")
SCHEMA = json.loads((REPO_ROOT / "tests/fixtures/sep-2640-skills.schema.json").read_text())


def check(value: dict, shape: str) -> None:
    schema = {"$ref": f"#/$defs/{shape}", "$defs": SCHEMA["$defs"]}
    jsonschema.validate(value, schema, cls=jsonschema.Draft202012Validator)


def exchange(tmp_path: Path, requests: list[dict]) -> dict:
    """Sends the requests (after initialize) and returns the replies by id."""
    lines = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *requests,
    ]
    text = "".join(json.dumps(l) + "\n" for l in lines)
    env = {**os.environ, "GM_DEFAULTS_DIR": str(REPO_ROOT / "tests/fixtures/no-child-servers")}
    out = subprocess.run([GM_BIN, "serve", "--workspace", str(tmp_path)], input=text, capture_output=True,
                         text=True, timeout=30, check=True, env=env)
    replies = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    return {r["id"]: r for r in replies if "id" in r}


def test_skills_list_and_get_match_the_extension_schema(tmp_path: Path) -> None:
    replies = exchange(tmp_path, [
        {"jsonrpc": "2.0", "id": 1, "method": "skills/list", "params": {}},
        {"jsonrpc": "2.0", "id": 2, "method": "skills/get", "params": {"uri": "skill://gm/SKILL.md"}},
        {"jsonrpc": "2.0", "id": 3, "method": "skills/get", "params": {"uri": "skill://nope/SKILL.md"}},
    ])
    listed = replies[1]["result"]
    check(listed, "ListSkillsResult")
    assert {s["uri"] for s in listed["skills"]} >= {"skill://gm/SKILL.md", "skill://gm-continue/SKILL.md"}
    got = replies[2]["result"]
    check(got, "GetSkillResult")
    assert got["skill"] == next(s for s in listed["skills"] if s["uri"] == "skill://gm/SKILL.md")
    assert replies[3]["error"]["code"] == -32602
