# CPU time per sequential `stat_file` call of the relay and of the worker (perf stat: task-clock,
# context switches), and the p50 round trip:
#   taskset -c 0 python3 bench/relay_cpu.py GM [--no-relay]     (needs perf)
# Run it for several builds, alternating. A build from before workers (the relay's child is the
# worker) is measured too: its worker is the relay's child process.
import glob, json, os, statistics, subprocess, sys, tempfile, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gm_process import initialize, popen_gm, rpc

gm, extra = sys.argv[1], sys.argv[2:]
N = int(os.environ.get("N", "5000"))
STAT = {"name": "stat_file", "arguments": {"path": "."}}

ws = tempfile.mkdtemp()
p = popen_gm(gm, "tools", ws, extra)
initialize(p)
for i in range(300):
    rpc(p, 10 + i, "tools/call", STAT)

procs = [("worker" if "--no-relay" in extra else "relay", p.pid)]
if "--no-relay" not in extra:
    life = os.path.join(ws, ".gm", "worker.pid")
    if os.path.exists(life):
        procs.append(("worker", json.load(open(life))["pid"]))
    else:
        kids = []
        for t in glob.glob(f"/proc/{p.pid}/task/*/children"):
            kids += open(t).read().split()
        procs.append(("worker", int(kids[0])))

perfs = [subprocess.Popen(["perf", "stat", "-x,", "-e", "task-clock,context-switches", "-p", str(pid)],
                          stderr=subprocess.PIPE) for _, pid in procs]
time.sleep(0.3)
ts = []
for i in range(N):
    t = time.perf_counter()
    rpc(p, 1000 + i, "tools/call", STAT)
    ts.append((time.perf_counter() - t) * 1e6)
out = []
for (name, _), perf in zip(procs, perfs):
    perf.send_signal(2)
    counts = {}
    for line in perf.communicate()[1].decode().splitlines():
        f = line.split(",")
        if len(f) > 3:
            try:
                counts[f[2]] = float(f[0])
            except ValueError:
                pass
    out.append(f"{name}: {counts.get('task-clock', 0) * 1000 / N:.1f} µs CPU/call, "
               f"{counts.get('context-switches', 0) / N:.2f} switches/call")
p.stdin.close()
p.wait()
print(os.path.basename(gm), " ".join(extra), f"p50 {statistics.median(ts):.1f} µs |", " | ".join(out))
