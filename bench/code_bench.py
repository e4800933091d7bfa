#!/usr/bin/env python3
"""callers, impact and symbols on real corpora, side by side with ripgrep (and, for Python,
jedi's references), through gm's MCP server.

    bench/code_bench.py --gm target/release/gm --corpus kernel=DIR --corpus cpython=DIR \
        --corpus crates=DIR [--jedi VENV_PYTHON]

Each DIR is a git repository (bench/code.sh makes them). Per corpus, one run measures: the
cold parse of the whole tree (no saved cache: wall time, gm's CPU time, MB of source per
second of one core's time), `callers` warm p50, `impact` depth 2 warm p50, `symbols` of one
large file and a workspace query, gm's memory, the first `callers` after a restart (the
cache on disk); then recall: for a few widely used functions, gm's call sites against
`rg '\\bname\\s*\\('`, with every line one finds and the other does not sorted by why.
Prints a markdown table per corpus and one JSON line per measurement.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

from search_bench import Server

# Per corpus: the globs rg searches, the functions whose callers are measured and compared,
# the file outlined, the workspace query.
CORPORA = {
    "kernel": {
        "globs": ["*.c", "*.h"],
        "functions": ["kfree", "mutex_lock", "kmalloc", "copy_from_user", "printk"],
        # Recall is compared under fs/ (70 MB): kfree alone has 37,000 call sites in the tree,
        # more than one callers reply lists.
        "recall_path": "fs",
        "impact": "kfree",
        "outline": "kernel/sched/core.c",
        "query": "sched_fork",
    },
    "cpython": {
        "globs": ["*.py"],
        "functions": ["assert_python_ok", "gc_collect", "namedtuple", "get_config_var"],
        "impact": "get_config_var",
        "outline": "Lib/typing.py",
        "query": "namedtuple",
    },
    "crates": {
        "globs": ["*.rs"],
        "functions": ["parse_peek", "add_text_field", "thread_rng", "in_scope"],
        "impact": "add_text_field",
        "outline": None,  # the largest .rs file under 1 MB, found at run time
        "query": "parse_peek",
    },
}

EXTENSIONS = {
    "kernel": (".c", ".h"),
    "cpython": (".py",),
    "crates": (".rs",),
}

rows = []


def record(corpus, name, shown, value):
    rows.append((corpus, name, shown))
    print(json.dumps({"corpus": corpus, "measure": name, "value": value}), flush=True)


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def worker(pid):
    """`gm serve` is a relay in front of a worker process, which does the work: its pid."""
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                children = f.read().split()
            if children:
                return int(children[0])
        except OSError:
            pass
        time.sleep(0.02)
    return pid


def rss_mb(pid, key="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return 0.0


def source_bytes(root, exts):
    files = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout.split(b"\0")
    total = n = 0
    for f in files:
        name = f.decode(errors="replace")
        if name.endswith(exts):
            try:
                total += os.path.getsize(os.path.join(root, name))
                n += 1
            except OSError:
                pass
    return total, n


def timed(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def largest(root, exts, under=1_000_000):
    best = (0, None)
    files = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split("\n")
    for f in files:
        if f.endswith(exts):
            size = os.path.getsize(os.path.join(root, f))
            if best[0] < size < under:
                best = (size, f)
    return best[1]


def speed(gm, corpus, root, cfg):
    exts = EXTENSIONS[corpus]
    cache = os.path.join(root, ".gm", "calls", "cache.bin")
    shutil.rmtree(os.path.dirname(cache), ignore_errors=True)
    total, nfiles = source_bytes(root, exts)
    s = Server(gm, root)
    pid = worker(s.p.pid)
    idle = rss_mb(pid)
    cpu0 = cpu_seconds(pid)
    first = cfg["functions"][0]
    t = time.perf_counter()
    r = s.call("callers", {"symbol": first, "limit": 5})
    wall = time.perf_counter() - t
    cpu = cpu_seconds(pid) - cpu0
    mb = total / 1e6
    record(corpus, "cold parse of the tree: wall s, gm CPU s, MB, files",
           f"{wall:.1f} s wall, {cpu:.1f} s CPU, {mb:.0f} MB in {r['filesParsed']} files",
           {"wall_s": wall, "cpu_s": cpu, "mb": mb, "files": r["filesParsed"], "listed_files": nfiles})
    record(corpus, "cold parse MB/s per core (MB / CPU s); wall MB/s on 2 cores",
           f"**{mb / cpu:.1f}** per core; {mb / wall:.1f} wall", {"per_core": mb / cpu, "wall": mb / wall})
    for name in cfg["functions"]:
        ms, r = timed(lambda: s.call("callers", {"symbol": name, "limit": 200}), 11)
        record(corpus, f"callers {name} warm p50 ms (call sites)", f"{ms:.1f} ({r['total']})", {"ms": ms, "total": r["total"]})
    ms, r = timed(lambda: s.call("impact", {"symbol": cfg["impact"], "depth": 2}), 5)
    record(corpus, f"impact {cfg['impact']} depth 2 warm p50 ms (nodes, edges)", f"{ms:.1f} ({len(r['nodes'])}, {len(r['edges'])})", ms)
    outline = cfg["outline"] or largest(root, exts)
    size = os.path.getsize(os.path.join(root, outline))
    ms, r = timed(lambda: s.call("symbols", {"file": outline, "limit": 10000}), 21)
    record(corpus, f"symbols of one file p50 ms ({outline}, KB, definitions)", f"**{ms:.2f}** ({outline}, {size // 1024} KB, {r['total']})", ms)
    ms, r = timed(lambda: s.call("symbols", {"query": cfg["query"], "limit": 50}), 11)
    record(corpus, f"symbols query '{cfg['query']}' warm p50 ms (matches)", f"{ms:.1f} ({r['total']})", ms)
    rss, hwm = rss_mb(pid), rss_mb(pid, "VmHWM")
    record(corpus, "gm worker's memory: RSS idle -> with the index, peak (MB)", f"{idle:.0f} -> {rss:.0f}, peak {hwm:.0f}", {"idle": idle, "rss": rss, "peak": hwm})
    deadline = time.time() + 60
    while not os.path.exists(cache) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    s.close()
    restarts = []
    for _ in range(3):
        s = Server(gm, root)
        t = time.perf_counter()
        r = s.call("callers", {"symbol": first, "limit": 5})
        restarts.append((time.perf_counter() - t) * 1000)
        parsed = r["filesParsed"]
        s.close()
    record(corpus, "first callers after a restart, cache on disk (median ms; cache MB; files parsed)",
           f"**{statistics.median(restarts):.0f}** ({', '.join(f'{x:.0f}' for x in restarts)}; {os.path.getsize(cache) / 1e6:.0f} MB; {parsed})",
           {"ms": statistics.median(restarts), "all": restarts, "cache_mb": os.path.getsize(cache) / 1e6})


COMMENT = re.compile(r"^\s*(//|/\*|\*|#(?!\s*define)|\"\"\"|''')")


def why_missing(line_text, name, definition_lines):
    """Why a line rg matched is not a gm call site."""
    t = line_text.strip()
    if definition_lines:
        return "a definition or declaration of the name"
    if COMMENT.match(t):
        return "a comment"
    if re.match(r"^\s*#\s*define\b", t) or t.endswith("\\"):
        return "inside a macro's body (not parsed: gm does not expand macros)"
    if re.search(r"(def|fn|func)\s+" + re.escape(name) + r"\b", t):
        return "a definition or declaration of the name"
    if re.search(r"[\"'][^\"']*\b" + re.escape(name) + r"\s*\([^\"']*[\"']", t):
        return "inside a string"
    return "other (see the sample)"


def recall(gm, corpus, root, cfg, jedi):
    s = Server(gm, root)
    for name in cfg["functions"]:
        args = {"symbol": name, "limit": 10000}
        if cfg.get("recall_path"):
            args["path"] = cfg["recall_path"]
        r = s.call("callers", args)
        gm_sites = {(c["path"], c["line"]) for c in r["callers"]}
        defs = {(d["path"], d["line"]) for d in r["definitions"]}
        # `\bname\s*\(`, not `rg -w 'name\s*\('`: ripgrep 13's -w wants a non-word character
        # after the match, so it would only find the calls whose `(` is followed by one
        # (`kfree(ptr)` would not match). The path is given: without one, rg searches its
        # standard input when that is no tty.
        scope = cfg.get("recall_path") or "."
        cmd = ["rg", "-n", "--no-heading", r"\b" + name + r"\s*\("] + sum((["-g", g] for g in cfg["globs"]), []) + [scope]
        out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout
        rg_sites, text = set(), {}
        for line in out.splitlines():
            path, num, body = line.split(":", 2)
            path = path.removeprefix("./")
            rg_sites.add((path, int(num)))
            text[(path, int(num))] = body
        only_rg = rg_sites - gm_sites
        only_gm = gm_sites - rg_sites
        reasons = {}
        samples = {}
        for site in sorted(only_rg):
            why = why_missing(text[site], name, site in defs or any(d[0] == site[0] and abs(d[1] - site[1]) <= 3 for d in defs))
            reasons[why] = reasons.get(why, 0) + 1
            samples.setdefault(why, f"{site[0]}:{site[1]}: {text[site].strip()[:90]}")
        gm_only_kinds = {}
        for c in r["callers"]:
            if (c["path"], c["line"]) in only_gm:
                k = "through an alias" if c["callee"] != name else "name and `(` on different lines, or a macro call without parentheses"
                gm_only_kinds[k] = gm_only_kinds.get(k, 0) + 1
        resolutions = {}
        for c in r["callers"]:
            resolutions[c["resolution"]] = resolutions.get(c["resolution"], 0) + 1
        both = len(gm_sites & rg_sites)
        record(corpus, f"recall `{name}`: gm sites (exact/ambiguous/unresolved), rg lines, in both, excluded by resolution",
               f"gm {len(gm_sites)} ({resolutions.get('exact', 0)}/{resolutions.get('ambiguous', 0)}/{resolutions.get('unresolved', 0)}), rg {len(rg_sites)}, both {both}, excluded {r['excluded']}",
               {"gm": len(gm_sites), "rg": len(rg_sites), "both": both, "excluded": r["excluded"], "resolutions": resolutions})
        record(corpus, f"recall `{name}`: rg lines gm does not list, by why (a sample each)",
               "; ".join(f"{n} {why} (e.g. `{samples[why]}`)" for why, n in sorted(reasons.items(), key=lambda x: -x[1])) or "none",
               {"reasons": reasons, "samples": samples})
        record(corpus, f"recall `{name}`: gm sites rg does not match", "; ".join(f"{n} {k}" for k, n in gm_only_kinds.items()) or "none", gm_only_kinds)
        if jedi and corpus == "cpython":
            jedi_recall(jedi, corpus, root, name, r, gm_sites)
    s.close()


def jedi_recall(jedi, corpus, root, name, r, gm_sites):
    """jedi's references of the one definition, against gm's call sites of it."""
    d = r["definitions"]
    if len(d) != 1:
        return
    # The corpus is a copy of the standard library of the Python jedi runs in: jedi reads that
    # one (imports in the copy resolve to it anyway), and its paths map back onto the copy's.
    script = f"""
import jedi, json, sys, sysconfig
import jedi.inference.references as references
# By default jedi parses at most 30 files (and opens 2000) for a project-wide search: lifted,
# so that it reads the whole library as gm does.
references._PARSED_FILE_LIMIT = references._OPENED_FILE_LIMIT = 10**6
stdlib = sysconfig.get_paths()["stdlib"]
project = jedi.Project(stdlib)
path = stdlib + "/" + {d[0]['path'].removeprefix('Lib/')!r}
src = open(path).read()
line = {d[0]['line']}
col = src.splitlines()[line - 1].index({name!r})
refs = jedi.Script(src, path=path, project=project).get_references(line, col, scope='project')
print(json.dumps([["Lib/" + str(x.module_path)[len(stdlib) + 1:], x.line] for x in refs if x.module_path and str(x.module_path).startswith(stdlib)]))
"""
    t = time.perf_counter()
    out = subprocess.run([jedi, "-c", script], capture_output=True, text=True, timeout=3600)
    secs = time.perf_counter() - t
    if out.returncode != 0:
        record(corpus, f"jedi `{name}`", f"failed: {out.stderr.strip()[-200:]}", None)
        return
    # Only files the corpus has (the installed library also has site-packages).
    refs = {(p, line) for p, line in json.loads(out.stdout) if os.path.exists(os.path.join(root, p))}
    refs.discard((d[0]["path"], d[0]["line"]))
    both = len(refs & gm_sites)
    why = {}
    samples = {}
    for p, line in sorted(refs - gm_sites):
        with open(os.path.join(root, p), errors="replace") as f:
            text = f.read().splitlines()[line - 1] if line > 0 else ""
        if re.search(r"\bimport\b", text):
            k = "an import of the name"
        elif not re.search(r"\b" + re.escape(name) + r"\s*\(", text):
            k = "a reference that is no call (the function passed, assigned or named)"
        else:
            k = "a call gm does not list"
        why[k] = why.get(k, 0) + 1
        samples.setdefault(k, f"{p}:{line}: {text.strip()[:90]}")
    record(corpus, f"jedi `{name}`: its references (s), gm call sites, in both, gm only; jedi only by why",
           f"{len(refs)} ({secs:.0f} s), gm {len(gm_sites)}, both {both}, gm only {len(gm_sites - refs)}; "
           + "; ".join(f"{n} {k} (e.g. `{samples[k]}`)" for k, n in sorted(why.items(), key=lambda x: -x[1])),
           {"jedi": len(refs), "gm": len(gm_sites), "both": both, "jedi_only": why, "samples": samples,
            "gm_only": sorted(gm_sites - refs)[:20], "s": secs})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gm", required=True)
    ap.add_argument("--corpus", action="append", default=[], help="NAME=DIR, NAME one of " + ", ".join(CORPORA))
    ap.add_argument("--jedi", help="a python with jedi installed, for the Python recall")
    ap.add_argument("--only", choices=["speed", "recall"])
    a = ap.parse_args()
    for spec in a.corpus:
        corpus, root = spec.split("=", 1)
        cfg = CORPORA[corpus]
        if a.only != "recall":
            speed(a.gm, corpus, root, cfg)
        if a.only != "speed":
            recall(a.gm, corpus, root, cfg, a.jedi)
    for corpus in dict.fromkeys(c for c, _, _ in rows):
        print(f"\n{corpus}\n\n| measure | value |\n|---|---|")
        for c, name, value in rows:
            if c == corpus:
                print(f"| {name} | {value} |")


if __name__ == "__main__":
    sys.exit(main())
