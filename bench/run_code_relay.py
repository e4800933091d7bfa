# run_code `return 1` p50 through gm builds side by side: the build before a change, the new one
# with --no-relay and through the relay: python3 bench/run_code_relay.py OLD_GM NEW_GM [PASSES]
import os, statistics, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gm_process import initialize, popen_gm, rpc


def run(gm, extra, n=1500):
    p = popen_gm(gm, "code", tempfile.mkdtemp(), extra)
    initialize(p)
    rpc(p, 1, "resources/read", {"uri": "skill://gm/SKILL.md"})
    ts = []
    for i in range(n):
        t = time.perf_counter()
        r = rpc(p, 10 + i, "tools/call", {"name": "run_code", "arguments": {"code": "return 1"}})
        ts.append((time.perf_counter() - t) * 1e6)
    assert not r["result"]["isError"], r
    p.stdin.close()
    p.wait()
    ts.sort()
    return ts[len(ts) // 2]


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python3 bench/run_code_relay.py OLD_GM NEW_GM [PASSES]  (release builds; NEW_GM has --no-relay)")
    old, new = sys.argv[1], sys.argv[2]
    passes = int(sys.argv[3]) if len(sys.argv) == 4 else 10
    # Alternating, so a drift of the machine shows as a spread, not as a difference. Unpinned,
    # one pass's p50 swings by ±100 µs on this VM: the figure is the median over the passes.
    got = {"old": [], "new --no-relay": [], "new relay": []}
    for _ in range(passes):
        for label, gm, extra in [("old", old, []), ("new --no-relay", new, ["--no-relay"]), ("new relay", new, [])]:
            got[label].append(run(gm, extra))
    for label, p50s in got.items():
        print(f"{label}: run_code p50 µs, median of {passes} passes {statistics.median(p50s):.0f}; passes {[round(x) for x in p50s]}")
    pairwise = [r - d for r, d in zip(got["new relay"], got["new --no-relay"])]
    print(f"the relay adds: {statistics.median(got['new relay']) - statistics.median(got['new --no-relay']):.0f} µs "
          f"(medians); {statistics.median(pairwise):.0f} µs (median of the passes' differences)")
