# run_code `return 1` p50 through gm builds side by side: the build before a change, the new one
# with --no-relay and through the relay: python3 bench/run_code_relay.py OLD_GM NEW_GM [PASSES]
import subprocess, time, json, sys, os, tempfile
def run(gm, extra, n=1500):
    ws = tempfile.mkdtemp(); d = tempfile.mkdtemp(); open(os.path.join(d,'mcp.json'),'w').write('{"mcpServers":{}}')
    p = subprocess.Popen([gm,'serve','--workspace',ws,*extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=dict(os.environ, GM_DEFAULTS_DIR=d, GM_WORKER_IDLE_MS="1000"))
    def req(i, method, params):
        p.stdin.write((json.dumps({"jsonrpc":"2.0","id":i,"method":method,"params":params})+"\n").encode()); p.stdin.flush()
        while True:
            m = json.loads(p.stdout.readline())
            if m.get("id") == i: return m
    req(0,"initialize",{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}})
    req(1,"resources/read",{"uri":"skill://gm/SKILL.md"})
    ts=[]
    for i in range(n):
        t=time.perf_counter(); r=req(10+i,"tools/call",{"name":"run_code","arguments":{"code":"return 1"}}); ts.append((time.perf_counter()-t)*1e6)
    assert not r["result"]["isError"], r
    p.stdin.close(); p.wait()
    ts.sort(); return ts[len(ts)//2]
if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: python3 bench/run_code_relay.py OLD_GM NEW_GM [PASSES]  (release builds; NEW_GM has --no-relay)")
    old, new = sys.argv[1], sys.argv[2]
    passes = int(sys.argv[3]) if len(sys.argv) == 4 else 10
    import statistics
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
