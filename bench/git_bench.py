#!/usr/bin/env python3
"""git_status and git_log through gm (libgit2) side by side with the git CLI, on a repository
of 10,000 files with 200 commits, made in a scratch folder.

    bench/git_bench.py --gm target/release/gm [--scratch DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from search_bench import Server, timed, record, rows  # noqa: E402


def git(cwd, *args):
    subprocess.run(["git", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gm", required=True)
    ap.add_argument("--scratch", default=None)
    a = ap.parse_args()
    root = os.path.join(a.scratch or tempfile.mkdtemp(), "git10k")
    if not os.path.isdir(os.path.join(root, ".git")):
        os.makedirs(root, exist_ok=True)
        git(root, "init", "-q", "-b", "main")
        git(root, "config", "user.name", "bench")
        git(root, "config", "user.email", "bench@example.invalid")
        for d in range(100):
            os.makedirs(os.path.join(root, f"d{d:03}"), exist_ok=True)
            for f in range(100):
                with open(os.path.join(root, f"d{d:03}", f"f{f:03}.txt"), "w") as fh:
                    fh.write(f"file {d} {f}\n")
        git(root, "add", "-A")
        git(root, "commit", "-q", "-m", "10k files")
        for i in range(199):
            with open(os.path.join(root, f"d{i % 100:03}", "f000.txt"), "a") as fh:
                fh.write(f"change {i}\n")
            git(root, "commit", "-q", "-am", f"change {i}")
    # A few changes so status has something to report.
    with open(os.path.join(root, "d000", "f001.txt"), "a") as fh:
        fh.write("dirty\n")
    gm = Server(a.gm, root)
    gm.call("git_status", {})
    g, r = timed(lambda: gm.call("git_status", {}), 20)
    c, _ = timed(lambda: subprocess.run(["git", "status", "--porcelain"], cwd=root, stdout=subprocess.DEVNULL), 20)
    record("git_status, 10k files: gm / git CLI (ms)", f"{g:.1f} / {c:.1f} ({len(r['entries'])} entries)", {"gm": g, "git": c})
    record("git_status: gm / git", f"{g / c:.2f}x", g / c)
    g, r = timed(lambda: gm.call("git_log", {"limit": 100}), 20)
    c, _ = timed(lambda: subprocess.run(["git", "log", "-n", "100", "--format=%H %an %s"], cwd=root, stdout=subprocess.DEVNULL), 20)
    record("git_log -n 100: gm / git CLI (ms)", f"{g:.1f} / {c:.1f} ({len(r['commits'])} commits)", {"gm": g, "git": c})
    record("git_log: gm / git", f"{g / c:.2f}x", g / c)
    gm.close()
    subprocess.run(["git", "checkout", "--", "."], cwd=root)
    print("\n| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    sys.exit(main())
