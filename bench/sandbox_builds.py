"""Do real builds pass inside `gm serve --sandbox workspace-write`, and what must be added?

For each of three builds a user runs every day — `cargo build` of a small crate whose
dependency is already fetched, `npm install` of a small package from the npm cache, `pytest` of
a small project — this makes a project in a fresh workspace (outside /tmp, so the workspace's
parent is not the writable temporary folder), prepares what a user would have (the crate
fetched, the package in npm's cache, pytest installed) outside the box, then runs the build
through gm's run_shell, first with the default writable set, then with each folder the first
run's errors named, until it passes or nothing more helps. Prints one table.

    python3 bench/sandbox_builds.py --gm target/release/gm [--scratch DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from gm_process import initialize, popen_gm, rpc, stop_worker  # noqa: E402

HOME = os.path.expanduser("~")


def run_in_box(gm, ws, command, allow):
    extra = ["--sandbox", "workspace-write"]
    for a in allow:
        extra += ["--sandbox-allow-write", a]
    p = popen_gm(gm, "tools", ws, extra)
    try:
        initialize(p)
        r = rpc(p, 1, "tools/call", {"name": "run_shell", "arguments": {"command": command, "timeoutMs": 600000}})
        out = r["result"]["structuredContent"]
        return out.get("exitCode"), (out.get("stdout", "") + out.get("stderr", ""))[-1500:]
    finally:
        p.stdin.close()
        p.wait(timeout=60)
        stop_worker(ws)


def cargo_project(root):
    ws = os.path.join(root, "cargo-ws")
    os.makedirs(os.path.join(ws, "src"), exist_ok=True)
    with open(os.path.join(ws, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "boxed"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nitoa = "1"\n\n[workspace]\n')
    with open(os.path.join(ws, "src", "main.rs"), "w") as f:
        f.write('fn main() { println!("{}", itoa::Buffer::new().format(42)); }\n')
    subprocess.run(["cargo", "fetch"], cwd=ws, check=True, capture_output=True)
    return ws, "cargo build --offline 2>&1 && ./target/debug/boxed"


def npm_project(root):
    ws = os.path.join(root, "npm-ws")
    os.makedirs(ws, exist_ok=True)
    with open(os.path.join(ws, "package.json"), "w") as f:
        json.dump({"name": "boxed", "version": "1.0.0", "private": True}, f)
    # Into npm's cache, as a user who installed it once before has it.
    warm = tempfile.mkdtemp(prefix="npm-warm-")
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", warm, "is-number@7.0.0"], check=True,
                   capture_output=True)
    shutil.rmtree(warm, ignore_errors=True)
    return ws, "npm install --offline --no-audit --no-fund is-number@7.0.0 2>&1 && node -e \"require('is-number')\""


def pytest_project(root):
    ws = os.path.join(root, "py-ws")
    os.makedirs(os.path.join(ws, "tests"), exist_ok=True)
    with open(os.path.join(ws, "calc.py"), "w") as f:
        f.write("def add(a, b):\n    return a + b\n")
    with open(os.path.join(ws, "tests", "test_calc.py"), "w") as f:
        f.write("from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    venv = os.path.join(root, "venv")
    if not os.path.exists(os.path.join(venv, "bin", "pytest")):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--quiet", "pytest"], check=True)
    return ws, f"{venv}/bin/python -m pytest -q 2>&1"


# What a failing build's output names, and the folder a user would allow for it.
HINTS = [
    (os.path.join(HOME, ".cargo"), [".cargo", "package-cache"]),
    (os.path.join(HOME, ".npm"), [".npm", "_cacache", "_logs"]),
    (os.path.join(HOME, ".cache"), [".cache"]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gm", required=True)
    ap.add_argument("--scratch")
    a = ap.parse_args()
    gm = os.path.abspath(a.gm)
    # Not under /tmp: the workspace's parent must not be the (writable) temporary folder.
    root = a.scratch or tempfile.mkdtemp(prefix="gm-sandbox-builds-", dir="/var/tmp")
    rows = []
    for name, make in [("cargo build (dependency fetched)", cargo_project),
                       ("npm install (from the npm cache)", npm_project),
                       ("pytest", pytest_project)]:
        ws, command = make(root)
        allow, tried = [], []
        while True:
            code, tail = run_in_box(gm, ws, command, allow)
            tried.append((list(allow), code))
            if code == 0:
                break
            more = [d for d, words in HINTS if d not in allow and any(w in tail for w in words)]
            if not more:
                print(f"--- {name} still fails with {allow}:\n{tail}", file=sys.stderr)
                break
            allow.append(more[0])
        ok = tried[-1][1] == 0
        needed = ", ".join(f"--sandbox-allow-write {d.replace(HOME, '~')}" for d in allow) or "nothing"
        rows.append((name, "passes" if ok and not allow else ("passes with " + needed if ok else "fails"),
                     " → ".join(f"{'+'.join(x.replace(HOME, '~') for x in al) or 'default'}: exit {c}"
                                for al, c in tried)))
    print("| build under --sandbox workspace-write | result | runs |\n|---|---|---|")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
