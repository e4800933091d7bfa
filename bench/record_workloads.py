#!/usr/bin/env python3
"""Records the three workloads in bench/workloads/ by driving a real `gm serve` over a scratch
copy of this repository (gm working on its own sources), then keeps each run log.

    bench/record_workloads.py --gm target/release/gm

Replay any of them with `gm bench bench/workloads/<name>.jsonl --workspace <a checkout of
this repository>` (gm bench copies it to a scratch folder first).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from gm_process import popen_gm

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class Gm:
    def __init__(self, gm, ws, surface):
        self.p = popen_gm(gm, surface, ws)
        self.n = 0
        self.req("initialize", {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "recorder", "version": "0"}})
        self.req("resources/read", {"uri": "skill://gm/SKILL.md"})

    def req(self, method, params):
        self.n += 1
        self.p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": self.n, "method": method, "params": params}) + "\n").encode())
        self.p.stdin.flush()
        while True:
            r = json.loads(self.p.stdout.readline())
            if r.get("id") == self.n:
                return r

    def call(self, tool, args):
        return self.req("tools/call", {"name": tool, "arguments": args})["result"]

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


def scratch_copy():
    d = tempfile.mkdtemp(prefix="gm-record-")
    ws = os.path.join(d, "ws")
    files = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    for f in files:
        os.makedirs(os.path.dirname(os.path.join(ws, f)) or ws, exist_ok=True)
        shutil.copy(os.path.join(REPO, f), os.path.join(ws, f))
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    subprocess.run(["git", "add", "-A"], cwd=ws, check=True)
    subprocess.run(["git", "-c", "user.name=rec", "-c", "user.email=rec@example.invalid", "commit", "-q", "-m", "snapshot"], cwd=ws, check=True)
    return ws


def explore(gm):
    for d in [".", "src", "src/verbs", "actors/src", "tests", "bench"]:
        gm.call("list_dir", {"path": d})
    for f in ["README.md", "src/server.rs", "src/verbs/mod.rs", "actors/src/log_writer.rs", "src/run.rs", "Cargo.toml"]:
        gm.call("read_file", {"path": f})
        gm.call("stat_file", {"path": f})
    for q in ["group commit fsync", "read gate skill", "scheduler admit permit", "tree-sitter call sites", "secret redact"]:
        gm.call("search", {"query": q, "limit": 10})
    for p, mode in [("fn call_tool", "literal"), (r"impl Handler<\w+>", "regex"), ("VerbError", "word"), ("TODO", "literal")]:
        gm.call("grep", {"pattern": p, "mode": mode, "limit": 50})
    gm.call("read_file", {"path": "src/verbs/files.rs", "offset": 100, "limit": 80})


def edit_loop(gm):
    gm.call("write_file", {"path": "scratch/counter.py", "content": "COUNT = 0\n\ndef bump(n):\n    return n + 1\n"})
    for i in range(12):
        gm.call("read_file", {"path": "scratch/counter.py"})
        gm.call("edit_file", {"path": "scratch/counter.py", "old": f"COUNT = {i}", "new": f"COUNT = {i + 1}"})
        gm.call("run_shell", {"command": "python3 -c 'import sys; sys.path.insert(0, \"scratch\"); import counter; assert counter.bump(counter.COUNT) == counter.COUNT + 1'"})
        gm.call("git_diff", {})
    gm.call("git_status", {})


def code_heavy(gm):
    body = """
const files = (await gm.list_dir({ path: 'src/verbs' })).entries.map(e => e.name);
let lines = 0;
for (const f of files) {
  const r = await gm.read_file({ path: 'src/verbs/' + f, limit: 50 });
  lines += r.totalLines;
  await gm.stat_file({ path: 'src/verbs/' + f });
}
const g = await gm.grep({ pattern: 'pub async fn', limit: 20 });
return { files: files.length, lines, matches: g.total };
"""
    for _ in range(8):
        gm.call("run_code", {"code": body})
    gm.call("run_code", {"code": "const out = []; for (let i = 0; i < 20; i++) { await gm.write_file({ path: `scratch/gen/${i}.txt`, content: String(i) }); out.push((await gm.read_file({ path: `scratch/gen/${i}.txt` })).content); } return out.join(',');"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gm", required=True)
    a = ap.parse_args()
    for name, surface, fn in [("explore", "tools", explore), ("edit-loop", "tools", edit_loop), ("run-code", "code", code_heavy)]:
        ws = scratch_copy()
        gm = Gm(a.gm, ws, surface)
        fn(gm)
        gm.close()
        shutil.copy(os.path.join(ws, ".gm", "log.jsonl"), os.path.join(HERE, "workloads", f"{name}.jsonl"))
        print(f"recorded {name}: {sum(1 for _ in open(os.path.join(HERE, 'workloads', name + '.jsonl')))} events")
        shutil.rmtree(os.path.dirname(ws), ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
