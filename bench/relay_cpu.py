# CPU time per sequential `stat_file` call of the relay and of the worker (perf stat task-clock,
# context switches), and the p50 round trip: python3 bench/relay_cpu.py GM [--no-relay]. Needs perf.
# Run it pinned (taskset -c 0) for several builds, alternating.
import subprocess, json, os, tempfile, time, sys, statistics
gm=sys.argv[1]; extra=sys.argv[2:]
d=tempfile.mkdtemp(); open(os.path.join(d,'mcp.json'),'w').write('{"mcpServers":{}}')
ws=tempfile.mkdtemp()
p=subprocess.Popen([gm,'serve','--workspace',ws,'--surface','tools',*extra],stdin=subprocess.PIPE,stdout=subprocess.PIPE,env=dict(os.environ,GM_DEFAULTS_DIR=d,GM_WORKER_IDLE_MS="1000"))
def req(i,m,pa):
    p.stdin.write((json.dumps({"jsonrpc":"2.0","id":i,"method":m,"params":pa})+"\n").encode()); p.stdin.flush()
    while True:
        r=json.loads(p.stdout.readline())
        if r.get("id")==i: return r
req(0,"initialize",{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}})
for i in range(300): req(10+i,"tools/call",{"name":"stat_file","arguments":{"path":"."}})
pids=[p.pid]
wpf=os.path.join(ws,".gm/worker.pid")
if os.path.exists(wpf) and "--no-relay" not in extra: pids.append(json.load(open(wpf))["pid"])
elif "--no-relay" not in extra:
    kids=open("/proc/%d/task/%d/children"%(p.pid,p.pid)).read().split()
    import glob
    for t in glob.glob("/proc/%d/task/*/children"%p.pid): kids+=open(t).read().split()
    pids.append(int(kids[0]))
N=int(os.environ.get("N","5000"))
outs=[]
perfs=[subprocess.Popen(["perf","stat","-x,","-e","task-clock,context-switches","-p",str(x)],stderr=subprocess.PIPE) for x in pids]
time.sleep(0.3)
ts=[]
for i in range(N):
    t=time.perf_counter(); req(1000+i,"tools/call",{"name":"stat_file","arguments":{"path":"."}}); ts.append((time.perf_counter()-t)*1e6)
for pf in perfs: pf.send_signal(2)
res=[]
for pf,x in zip(perfs,pids):
    err=pf.communicate()[1].decode()
    vals={}
    for line in err.splitlines():
        f=line.split(",")
        if len(f)>3: vals[f[2]]=float(f[0])
    res.append("pid %s: %.1f µs cpu/call, %.2f cs/call"%("relay" if x==p.pid and len(pids)>1 else "worker", vals.get("task-clock",0)*1000/N, vals.get("context-switches",0)/N))
p.stdin.close(); p.wait()
print(os.path.basename(gm), " ".join(extra), "p50 %.1f µs"%statistics.median(ts), "|", " | ".join(res))
