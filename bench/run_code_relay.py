# run_code `return 1` p50 through gm builds side by side: the build before a change, the new one
# with --no-relay and through the relay: python3 bench/run_code_relay.py OLD_GM NEW_GM
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
    if len(sys.argv) != 3:
        sys.exit("usage: python3 bench/run_code_relay.py OLD_GM NEW_GM  (release builds; NEW_GM has --no-relay)")
    old, new = sys.argv[1], sys.argv[2]
    # Alternating, so a drift of the machine shows as a spread, not as a difference.
    for label, gm, extra in [("old", old, []), ("new --no-relay", new, ["--no-relay"]), ("new relay", new, []),
                             ("old", old, []), ("new --no-relay", new, ["--no-relay"]), ("new relay", new, [])]:
        print(label, "run_code p50 µs", round(run(gm, extra)))
