//! A small MCP client that measures servers side by side, in one run, on one machine.
//!
//! `mcp-bench suite --gm BIN --node-fs JS --echo BIN --file PATH [--seq N] [--par N]` prints a
//! markdown table and a JSON line per measurement.
//!
//! `mcp-bench child --gm BIN --dir DIR [--n N] [--tool T] [--args JSON] -- CMD...` measures what
//! gm adds to a child server's tool call: the tool called directly on the server started by CMD,
//! then as `gm.<server>_<tool>` inside run_code (each call timed in the body with
//! performance.now()), in one run. Each server is started as a child process
//! and spoken to over pipes, newline-delimited JSON-RPC, exactly as an MCP host would.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use gm_actors::mcp_client::stdio::{percentile, Stderr, StdioClient};
use serde_json::{json, Value};

/// A server under measurement, spoken to through gm's one stdio client (reading on this thread,
/// so a round trip costs no thread hop on the client's side).
struct Server {
    client: StdioClient,
}

impl Server {
    fn spawn(cmd: &[String]) -> Server {
        Self::spawn_env(cmd, &[])
    }

    fn spawn_env(cmd: &[String], env: &[(&str, &std::path::Path)]) -> Server {
        let mut command = Command::new(&cmd[0]);
        command.args(&cmd[1..]);
        for (k, v) in env {
            command.env(k, v);
        }
        let client =
            StdioClient::spawn(command, Stderr::Discard).unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        Server { client }
    }

    fn send(&mut self, method: &str, params: Value) {
        self.client.send_request(method, params).expect("write");
    }

    /// The next reply (notifications are skipped).
    fn read_reply(&mut self) -> Value {
        loop {
            let v = self.client.recv(None).expect("read").expect("a message");
            if v.get("id").is_some() && v.get("method").is_none() {
                return v;
            }
        }
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let r = self.client.request(method, params, None).expect("a reply");
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r
    }

    fn initialize(&mut self) {
        self.client.initialize("2025-06-18", "mcp-bench").expect("initialize");
    }

    fn pid(&self) -> u32 {
        self.client.pid()
    }
}

struct CallStats {
    p50_us: f64,
    p99_us: f64,
    calls_per_s: f64,
}

/// Sequential round trips, then `par` calls with `inflight` outstanding at once.
/// Sequential round trips, then `par` calls with `inflight` outstanding at once, both after
/// `par` pipelined calls of warm-up: a server with a JIT (Node) runs its first thousands of
/// calls at half its speed (server-filesystem: 5.3k calls/s over its first 1,250 calls,
/// 12.2k over 20,000), and every server gets the same warm-up.
fn measure_calls(server: &mut Server, tool: &str, args: &Value, seq: usize, par: usize, inflight: usize) -> CallStats {
    let params = json!({ "name": tool, "arguments": args });
    let r = server.request("tools/call", params.clone());
    assert_ne!(r["result"]["isError"], true, "{tool} failed: {r}");
    pipelined(server, &params, par.max(seq / 10), inflight);
    let mut rtts = Vec::with_capacity(seq);
    for _ in 0..seq {
        let t = Instant::now();
        server.send("tools/call", params.clone());
        server.read_reply();
        rtts.push(t.elapsed().as_secs_f64() * 1e6);
    }
    rtts.sort_by(|a, b| a.total_cmp(b));

    let started = Instant::now();
    pipelined(server, &params, par, inflight);
    let calls_per_s = par as f64 / started.elapsed().as_secs_f64();
    CallStats { p50_us: percentile(&rtts, 0.5), p99_us: percentile(&rtts, 0.99), calls_per_s }
}

/// `n` calls with `inflight` outstanding: a new one is sent as each reply arrives.
fn pipelined(server: &mut Server, params: &Value, n: usize, inflight: usize) {
    let (mut sent, mut received) = (0, 0);
    while received < n {
        while sent < n && sent - received < inflight {
            server.send("tools/call", params.clone());
            sent += 1;
        }
        server.read_reply();
        received += 1;
    }
}

/// A workspace of its own beside `file`'s folder, holding a copy of it: (workspace, the copy).
fn workspace_copy(file: &str, name: &str) -> (String, String) {
    let file = std::path::Path::new(file);
    let ws = file.parent().expect("file has a directory").join(name);
    std::fs::create_dir_all(&ws).expect("workspace");
    let copy = ws.join(file.file_name().expect("file name"));
    std::fs::copy(file, &copy).expect("copy");
    (ws.to_string_lossy().into_owned(), copy.to_string_lossy().into_owned())
}

/// What more sessions of one workspace cost and give.
struct Sessions {
    /// One session's calls/s, on its own (the first session's relay).
    one: f64,
    /// Three sessions' calls/s together, each with `inflight` calls outstanding.
    three: f64,
    /// Spawn to initialize reply of a relay joining the running worker, p50 in µs.
    connect_us: f64,
}

fn measure_sessions(
    cmd: &[String],
    env: &[(&str, &std::path::Path)],
    file: &str,
    par: usize,
    inflight: usize,
    first: &mut Server,
) -> Sessions {
    let params = json!({ "name": "stat_file", "arguments": { "path": file } });
    let connect_us = measure_spawn(cmd, env, 30);
    let mut others: Vec<Server> = (0..2)
        .map(|_| {
            let mut s = Server::spawn_env(cmd, env);
            s.initialize();
            pipelined(&mut s, &params, par / 4, inflight);
            s
        })
        .collect();
    let started = Instant::now();
    pipelined(first, &params, par, inflight);
    let one = par as f64 / started.elapsed().as_secs_f64();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(3));
    let started = Instant::now();
    std::thread::scope(|scope| {
        for s in others.iter_mut() {
            let (params, barrier) = (params.clone(), barrier.clone());
            scope.spawn(move || {
                barrier.wait();
                pipelined(s, &params, par, inflight);
            });
        }
        barrier.wait();
        pipelined(first, &params, par, inflight);
    });
    let three = (3 * par) as f64 / started.elapsed().as_secs_f64();
    Sessions { one, three, connect_us }
}

/// Spawn to initialize reply of a gm in a new workspace each time (so a worker starts each
/// time), `repeat` times; the median in µs.
fn measure_cold_spawn(gm: &str, file: &str, env: &[(&str, &std::path::Path)], repeat: usize) -> f64 {
    let mut times = Vec::new();
    for n in 0..repeat {
        let (ws, _) = workspace_copy(file, &format!("cold-{n}"));
        let cmd = [gm.to_owned(), "serve".into(), "--workspace".into(), ws.clone()];
        let t = Instant::now();
        let mut s = Server::spawn_env(&cmd, env);
        s.initialize();
        times.push(t.elapsed().as_secs_f64() * 1e6);
        // The host answers before its worker is up: the host leaves and the worker is stopped
        // before the next start, so no earlier worker's start runs beside the next one.
        s.client.close_stdin();
        let _ = s.client.wait_exit(Duration::from_secs(10));
        stop_worker(std::path::Path::new(&ws));
    }
    times.sort_by(|a, b| a.total_cmp(b));
    percentile(&times, 0.5)
}

/// SIGTERM to the workspace's worker (named in `.gm/worker.pid`), then waits until it has let
/// go of the workspace.
fn stop_worker(ws: &std::path::Path) {
    let life = ws.join(".gm/worker.pid");
    let deadline = Instant::now() + Duration::from_secs(10);
    // It writes the file once it holds the workspace.
    let pid = loop {
        let holder: Option<Value> = std::fs::read(&life).ok().and_then(|b| serde_json::from_slice(&b).ok());
        if let Some(pid) = holder.and_then(|h| h["pid"].as_i64()) {
            break pid;
        }
        if Instant::now() > deadline {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    gm_actors::sys::signal_process(pid as u32, 15);
    while gm_actors::sys::is_locked(&life) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Spawn to initialize reply, `repeat` times; the median in µs.
fn measure_spawn(cmd: &[String], env: &[(&str, &std::path::Path)], repeat: usize) -> f64 {
    let mut times = Vec::new();
    for _ in 0..repeat {
        let t = Instant::now();
        let mut s = Server::spawn_env(cmd, env);
        s.initialize();
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    percentile(&times, 0.5)
}

/// Wall time of running a command to completion, `repeat` times; the median in µs.
fn measure_exec(cmd: &[&str], repeat: usize) -> f64 {
    let mut times = Vec::new();
    for _ in 0..repeat {
        let t = Instant::now();
        let status = Command::new(cmd[0]).args(&cmd[1..]).stdout(Stdio::null()).status().expect("run");
        assert!(status.success());
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    percentile(&times, 0.5)
}

/// The resident memory of a process and its children (the relay and its worker).
fn rss_tree_kb(pid: u32) -> u64 {
    let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    rss_kb(pid) + children.split_whitespace().filter_map(|c| c.parse().ok()).map(rss_tree_kb).sum::<u64>()
}

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// `mcp-bench sessions --gm BIN --file PATH [--par N] [--rounds R] [--no-relay]`: one
/// session's calls/s, then three sessions' together, R times over one worker: the suite's
/// sessions row alone, for a measure repeated often enough to see its spread.
fn sessions(args: &[String]) {
    let gm = arg(args, "--gm").expect("--gm");
    let file = arg(args, "--file").expect("--file");
    let par: usize = arg(args, "--par").and_then(|n| n.parse().ok()).unwrap_or(20000);
    let rounds: usize = arg(args, "--rounds").and_then(|n| n.parse().ok()).unwrap_or(5);
    let dir = std::path::Path::new(&file).parent().expect("file has a directory").to_path_buf();
    let defaults = dir.join("no-defaults");
    std::fs::create_dir_all(&defaults).expect("defaults");
    std::fs::write(defaults.join("mcp.json"), r#"{"mcpServers":{}}"#).expect("defaults");
    let idle = std::path::Path::new("2000");
    let env = [("GM_DEFAULTS_DIR", defaults.as_path()), ("GM_WORKER_IDLE_MS", idle)];
    let (ws, copy) = workspace_copy(&file, "sessions");
    let mut cmd = vec![gm, "serve".into(), "--surface".into(), "tools".into(), "--workspace".into(), ws];
    let params = json!({ "name": "stat_file", "arguments": { "path": copy } });
    if args.iter().any(|a| a == "--no-relay") {
        // One session of a worker with no relay: what the worker costs a call on its own.
        cmd.push("--no-relay".into());
        let mut s = Server::spawn_env(&cmd, &env);
        s.initialize();
        pipelined(&mut s, &params, par, 64);
        for round in 0..rounds {
            let (w0, c0) = (cpu_ticks(s.pid()), cpu_ticks(std::process::id()));
            let started = Instant::now();
            pipelined(&mut s, &params, par, 64);
            let one = par as f64 / started.elapsed().as_secs_f64();
            let (w1, c1) = (cpu_ticks(s.pid()), cpu_ticks(std::process::id()));
            let per = |t: u64| t as f64 * 1e4 / par as f64;
            println!(
                "round {round}: --no-relay {one:.0} (worker {:.1} µs/call, client {:.1})",
                per(w1 - w0),
                per(c1 - c0)
            );
        }
        return;
    }
    let mut first = Server::spawn_env(&cmd, &env);
    first.initialize();
    pipelined(&mut first, &params, par, 64);
    let worker = std::fs::read(std::path::Path::new(&dir).join("sessions/.gm/worker.pid"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|v| v["pid"].as_u64())
        .expect("the worker's pid");
    let mut others: Vec<Server> = (0..2)
        .map(|_| {
            let mut s = Server::spawn_env(&cmd, &env);
            s.initialize();
            pipelined(&mut s, &params, par / 4, 64);
            s
        })
        .collect();
    let ticks = |w: u64| (cpu_ticks(w as u32), cpu_ticks(std::process::id()));
    let mut ratios = Vec::new();
    for round in 0..rounds {
        let (w0, c0) = ticks(worker);
        let started = Instant::now();
        pipelined(&mut first, &params, par, 64);
        let one = par as f64 / started.elapsed().as_secs_f64();
        let (w1, c1) = ticks(worker);
        let started = Instant::now();
        std::thread::scope(|scope| {
            for s in others.iter_mut() {
                let params = params.clone();
                scope.spawn(move || pipelined(s, &params, par, 64));
            }
            pipelined(&mut first, &params, par, 64);
        });
        let three = (3 * par) as f64 / started.elapsed().as_secs_f64();
        let (w2, c2) = ticks(worker);
        // Ticks are 10 ms: CPU µs per call.
        let per = |t: u64, n: usize| t as f64 * 1e4 / n as f64;
        println!(
            "round {round}: one {one:.0} (worker {:.1} µs/call, client {:.1}), three {three:.0} (worker {:.1}, client {:.1}), three/one {:.2}",
            per(w1 - w0, par),
            per(c1 - c0, par),
            per(w2 - w1, 3 * par),
            per(c2 - c1, 3 * par),
            three / one
        );
        ratios.push(three / one);
    }
    ratios.sort_by(|a, b| a.total_cmp(b));
    println!("three/one: median {:.2}, min {:.2}, max {:.2}", percentile(&ratios, 0.5), ratios[0], ratios[rounds - 1]);
}

/// User and system CPU of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    fields.get(11).and_then(|u| u.parse::<u64>().ok()).unwrap_or(0)
        + fields.get(12).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0)
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("probe") {
        // mcp-bench probe METHOD N [PARAMS] -- CMD...: p50 of one request repeated, to split
        // transport cost from call cost.
        let method = args.get(1).expect("method").clone();
        let n: usize = args.get(2).and_then(|n| n.parse().ok()).expect("count");
        let params: Value =
            args.get(3).filter(|a| *a != "--").and_then(|p| serde_json::from_str(p).ok()).unwrap_or(json!({}));
        let cmd: Vec<String> = args.iter().skip_while(|a| *a != "--").skip(1).cloned().collect();
        let mut s = Server::spawn(&cmd);
        s.initialize();
        let mut t = Vec::new();
        for _ in 0..n {
            let start = Instant::now();
            s.request(&method, params.clone());
            t.push(start.elapsed().as_secs_f64() * 1e6);
        }
        t.sort_by(|a, b| a.total_cmp(b));
        println!("{method}: p50 {:.1} µs, p99 {:.1} µs", percentile(&t, 0.5), percentile(&t, 0.99));
        return;
    }
    if args.first().map(String::as_str) == Some("child") {
        child(&args);
        return;
    }
    if args.first().map(String::as_str) == Some("sessions") {
        sessions(&args);
        return;
    }
    if args.first().map(String::as_str) == Some("sandbox") {
        sandbox(&args);
        return;
    }
    if args.first().map(String::as_str) == Some("otel") {
        otel(&args);
        return;
    }
    if args.first().map(String::as_str) != Some("suite") {
        eprintln!(
            "usage: mcp-bench suite --gm BIN --node-fs JS --echo BIN --file PATH [--seq N] [--par N] [--label L]"
        );
        std::process::exit(2);
    }
    let gm = arg(&args, "--gm").expect("--gm");
    let echo = arg(&args, "--echo").expect("--echo");
    let node_fs = arg(&args, "--node-fs");
    let file = arg(&args, "--file").expect("--file");
    let seq: usize = arg(&args, "--seq").and_then(|n| n.parse().ok()).unwrap_or(2000);
    let par: usize = arg(&args, "--par").and_then(|n| n.parse().ok()).unwrap_or(5000);
    let label = arg(&args, "--label").unwrap_or_else(|| "unpinned".into());
    let dir = std::path::Path::new(&file).parent().expect("file has a directory").to_string_lossy().into_owned();
    let inflight = 64;

    let mut rows: Vec<(String, String)> = Vec::new();
    let mut record = |name: &str, value: String, json: Value| {
        println!("{}", json!({ "label": label, "measure": name, "value": json }));
        rows.push((name.to_owned(), value));
    };

    // (1) stat_file round trips and throughput, against the echo floor and the Node server.
    // gm's servers start no child MCP servers here (the shipped default fetches one with npx),
    // and each configuration has a workspace of its own: one workspace has one worker, which
    // a `--no-relay` gm would otherwise find already there. Workers leave 2 s after their last
    // session.
    let defaults = std::path::Path::new(&dir).join("no-defaults");
    std::fs::create_dir_all(&defaults).expect("defaults");
    std::fs::write(defaults.join("mcp.json"), r#"{"mcpServers":{}}"#).expect("defaults");
    let idle = std::path::Path::new("2000");
    let gm_env = [("GM_DEFAULTS_DIR", defaults.as_path()), ("GM_WORKER_IDLE_MS", idle)];
    let gm_tools_in = |ws: &str| {
        vec![gm.clone(), "serve".into(), "--surface".into(), "tools".into(), "--workspace".into(), ws.to_owned()]
    };
    let (relayed_ws, relayed_file) = workspace_copy(&file, "relayed");
    let mut s = Server::spawn_env(&gm_tools_in(&relayed_ws), &gm_env);
    s.initialize();
    let g = measure_calls(&mut s, "stat_file", &json!({ "path": relayed_file }), seq, par, inflight);
    // (6) more sessions of the same workspace: each host's own relay, one worker.
    let sessions = measure_sessions(&gm_tools_in(&relayed_ws), &gm_env, &relayed_file, par, inflight, &mut s);
    drop(s);
    // The relay as it was before a worker took the host's stdio (GM_RELAY_DIRECT=0): every
    // line through the relay process, for the side by side.
    let (classic_ws, classic_file) = workspace_copy(&file, "classic");
    let classic_env = [gm_env[0], gm_env[1], ("GM_RELAY_DIRECT", std::path::Path::new("0"))];
    let mut s = Server::spawn_env(&gm_tools_in(&classic_ws), &classic_env);
    s.initialize();
    let c = measure_calls(&mut s, "stat_file", &json!({ "path": classic_file }), seq, par, inflight);
    drop(s);
    // The same server without the relay in front (`--no-relay`): what the relay costs.
    let (direct_ws, direct_file) = workspace_copy(&file, "direct");
    let mut gm_direct = gm_tools_in(&direct_ws);
    gm_direct.push("--no-relay".into());
    let mut s = Server::spawn_env(&gm_direct, &gm_env);
    s.initialize();
    let d = measure_calls(&mut s, "stat_file", &json!({ "path": direct_file }), seq, par, inflight);
    drop(s);
    let mut s = Server::spawn(std::slice::from_ref(&echo));
    s.initialize();
    let e = measure_calls(&mut s, "anything", &json!({}), seq, par, inflight);
    drop(s);
    record("gm stat_file p50 / p99 (µs)", format!("{:.1} / {:.1}", g.p50_us, g.p99_us), json!([g.p50_us, g.p99_us]));
    record("echo floor p50 / p99 (µs)", format!("{:.1} / {:.1}", e.p50_us, e.p99_us), json!([e.p50_us, e.p99_us]));
    record("gm p50 / floor p50", format!("{:.2}x", g.p50_us / e.p50_us), json!(g.p50_us / e.p50_us));
    record("gm stat_file calls/s (64 in flight)", format!("{:.0}", g.calls_per_s), json!(g.calls_per_s));
    record(
        "gm --no-relay stat_file p50 / p99 (µs)",
        format!("{:.1} / {:.1}", d.p50_us, d.p99_us),
        json!([d.p50_us, d.p99_us]),
    );
    record("gm --no-relay stat_file calls/s", format!("{:.0}", d.calls_per_s), json!(d.calls_per_s));
    record("relay adds to p50 (µs)", format!("{:.1}", g.p50_us - d.p50_us), json!(g.p50_us - d.p50_us));
    record(
        "relay calls/s / --no-relay",
        format!("{:.2}", g.calls_per_s / d.calls_per_s),
        json!(g.calls_per_s / d.calls_per_s),
    );
    record(
        "classic relay (GM_RELAY_DIRECT=0) adds to p50 (µs)",
        format!("{:.1}", c.p50_us - d.p50_us),
        json!(c.p50_us - d.p50_us),
    );
    record(
        "classic relay calls/s / --no-relay",
        format!("{:.2}", c.calls_per_s / d.calls_per_s),
        json!(c.calls_per_s / d.calls_per_s),
    );
    record("echo floor calls/s (64 in flight)", format!("{:.0}", e.calls_per_s), json!(e.calls_per_s));
    record(
        "one session calls/s, then three sessions at once (64 in flight each)",
        format!("{:.0}, {:.0}", sessions.one, sessions.three),
        json!([sessions.one, sessions.three]),
    );
    record(
        "three sessions / one session calls/s",
        format!("{:.2}", sessions.three / sessions.one),
        json!(sessions.three / sessions.one),
    );
    record(
        "second session: spawn to initialize reply, worker running, p50 (µs)",
        format!("{:.0}", sessions.connect_us),
        json!(sessions.connect_us),
    );
    if let Some(node_fs) = &node_fs {
        let node = vec!["node".into(), node_fs.clone(), dir.clone()];
        let mut s = Server::spawn(&node);
        s.initialize();
        let n = measure_calls(&mut s, "get_file_info", &json!({ "path": file }), seq / 4, par, inflight);
        drop(s);
        record(
            "node server-filesystem get_file_info p50 / p99 (µs)",
            format!("{:.1} / {:.1}", n.p50_us, n.p99_us),
            json!([n.p50_us, n.p99_us]),
        );
        record("node server-filesystem calls/s (64 in flight)", format!("{:.0}", n.calls_per_s), json!(n.calls_per_s));
        record(
            "gm calls/s / node calls/s",
            format!("{:.1}x", g.calls_per_s / n.calls_per_s),
            json!(g.calls_per_s / n.calls_per_s),
        );
    }

    // (2) run_code `return 1` against spawning `node -e 0` per body.
    let (code_ws, _) = workspace_copy(&file, "code");
    let gm_code = vec![gm.clone(), "serve".into(), "--workspace".into(), code_ws];
    let mut s = Server::spawn_env(&gm_code, &gm_env);
    s.initialize();
    s.request("resources/read", json!({ "uri": "skill://gm/SKILL.md" }));
    let r = measure_calls(&mut s, "run_code", &json!({ "code": "return 1" }), seq / 2, par / 2, inflight);
    drop(s);
    let node_e = measure_exec(&["node", "-e", "0"], 20);
    record(
        "gm run_code `return 1` p50 / p99 (µs)",
        format!("{:.1} / {:.1}", r.p50_us, r.p99_us),
        json!([r.p50_us, r.p99_us]),
    );
    record("gm run_code calls/s (64 in flight)", format!("{:.0}", r.calls_per_s), json!(r.calls_per_s));
    record("node -e 0 p50 (µs)", format!("{node_e:.0}"), json!(node_e));
    record("node -e 0 / run_code p50", format!("{:.0}x", node_e / r.p50_us), json!(node_e / r.p50_us));

    // (5) run_shell `true` against spawning `bash -c true` directly, interleaved call by call
    // (one run_shell, one bash, …) so that the VM's drift during a run touches both alike; the
    // overhead is the median of the paired differences. bash by its path, as gm spawns it (by
    // name, every PATH entry before it is a failed execve).
    let (shell_ws, _) = workspace_copy(&file, "shell");
    let mut s = Server::spawn_env(&gm_tools_in(&shell_ws), &gm_env);
    s.initialize();
    let bash_path = which("bash");
    let paired = shell_vs_bash(&mut s, &bash_path, (seq / 5).max(100));
    let sh =
        measure_calls(&mut s, "run_shell", &json!({ "command": "true" }), (seq / 10).max(50), (par / 20).max(50), 8);
    drop(s);
    record(
        "gm run_shell `true` p50 / p99 (µs)",
        format!("{:.0} / {:.0}", sh.p50_us, sh.p99_us),
        json!([sh.p50_us, sh.p99_us]),
    );
    record(
        &format!("interleaved: run_shell p50 / {bash_path} -c true p50 (µs)"),
        format!("{:.0} / {:.0}", paired.shell_p50, paired.bash_p50),
        json!([paired.shell_p50, paired.bash_p50]),
    );
    record(
        "run_shell overhead over bash -c, median of paired differences (µs)",
        format!("{:.0}", paired.overhead_p50),
        json!(paired.overhead_p50),
    );
    record(
        "its floors, same turns: capturing output (bash piped, own group) / a stat_file call (µs)",
        format!("{:.0} / {:.0}", paired.capture_p50, paired.call_p50),
        json!([paired.capture_p50, paired.call_p50]),
    );

    // (3) spawn to initialize reply, each in a new workspace (a worker starts each time), and
    // (4) idle RSS.
    let spawn = measure_cold_spawn(&gm, &file, &gm_env, 30);
    record("gm spawn to initialize reply, worker started, p50 (µs)", format!("{spawn:.0}"), json!(spawn));
    let (idle_ws, _) = workspace_copy(&file, "idle");
    let mut s = Server::spawn_env(&[gm.clone(), "serve".into(), "--workspace".into(), idle_ws], &gm_env);
    s.initialize();
    std::thread::sleep(Duration::from_millis(500));
    let rss = rss_tree_kb(s.pid());
    let relay_rss = rss_kb(s.pid());
    drop(s);
    record("gm idle RSS, relay + worker (KiB)", format!("{rss}"), json!(rss));
    record("relay's own RSS (KiB)", format!("{relay_rss}"), json!(relay_rss));

    println!("\n| measure ({label}) | value |\n|---|---|");
    for (k, v) in rows {
        println!("| {k} | {v} |");
    }
}

/// `mcp-bench child`: a child server's tool, direct and through gm, p50 and p99 of each.
fn child(args: &[String]) {
    let gm = arg(args, "--gm").expect("--gm");
    let dir = std::path::PathBuf::from(arg(args, "--dir").expect("--dir"));
    let n: usize = arg(args, "--n").and_then(|n| n.parse().ok()).unwrap_or(2000);
    let tool = arg(args, "--tool").unwrap_or_else(|| "echo".into());
    let tool_args: Value =
        arg(args, "--args").and_then(|a| serde_json::from_str(&a).ok()).unwrap_or(json!({ "message": "x" }));
    let cmd: Vec<String> = args.iter().skip_while(|a| *a != "--").skip(1).cloned().collect();
    assert!(!cmd.is_empty(), "the child server's command follows --");

    // Direct: this client to the server.
    let mut s = Server::spawn(&cmd);
    s.initialize();
    let direct = measure_calls(&mut s, &tool, &tool_args, n, 0, 1);
    drop(s);

    // Through gm: the same server as gm's child `bench`, called from one body. Named with
    // --mcp-config (the user's own config), which needs no approval, unlike a workspace's.
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).expect("workspace");
    let defaults = dir.join("no-defaults");
    std::fs::create_dir_all(&defaults).expect("defaults");
    std::fs::write(defaults.join("mcp.json"), r#"{"mcpServers":{}}"#).expect("defaults");
    let entry = json!({ "command": cmd[0], "args": &cmd[1..] });
    let config = dir.join("bench-servers.json");
    std::fs::write(&config, json!({ "mcpServers": { "bench": entry } }).to_string()).expect("config");
    let mut g = Server::spawn_env(
        &[
            gm.clone(),
            "serve".into(),
            "--workspace".into(),
            ws.to_string_lossy().into_owned(),
            "--mcp-config".into(),
            config.to_string_lossy().into_owned(),
        ],
        &[("GM_DEFAULTS_DIR", &defaults)],
    );
    g.initialize();
    g.request("resources/read", json!({ "uri": "skill://gm/SKILL.md" }));
    let name: String =
        format!("bench_{tool}").chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
    let body = format!(
        "const args = {tool_args}; for (let i = 0; i < 50; i++) await gm.{name}(args);
         const t = []; for (let i = 0; i < {n}; i++) {{ const a = performance.now(); await gm.{name}(args); t.push((performance.now() - a) * 1000); }}
         return t;"
    );
    let r = g.request("tools/call", json!({ "name": "run_code", "arguments": { "code": body, "timeoutMs": 300000 } }));
    assert_ne!(r["result"]["isError"], true, "run_code failed: {r}");
    let mut through: Vec<f64> = r["result"]["structuredContent"]["result"]
        .as_array()
        .expect("times")
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    through.sort_by(|a, b| a.total_cmp(b));
    let (p50, p99) = (percentile(&through, 0.5), percentile(&through, 0.99));
    println!("{}", json!({ "measure": "direct tools/call p50 / p99 (µs)", "value": [direct.p50_us, direct.p99_us] }));
    println!("{}", json!({ "measure": "gm.<server>_<tool> in run_code p50 / p99 (µs)", "value": [p50, p99] }));
    println!("\n| measure | p50 µs | p99 µs |\n|---|---|---|");
    println!("| `{tool}` called directly on the server (this client) | {:.1} | {:.1} |", direct.p50_us, direct.p99_us);
    println!("| `gm.{name}` inside run_code | {p50:.1} | {p99:.1} |");
    println!("| gm adds | {:.1} | {:.1} |", p50 - direct.p50_us, p99 - direct.p99_us);
}

/// `mcp-bench sandbox --gm BIN --dir DIR [--n N] [--rounds R] [--no-relay] [--plain]`: run_shell `true` unconfined,
/// under `--sandbox workspace-write`, and with the network off too, side by side in alternating
/// rounds (each configuration its own workspace and worker), with `bash -c true` as the floor.
fn sandbox(args: &[String]) {
    let gm = arg(args, "--gm").expect("--gm");
    let dir = std::path::PathBuf::from(arg(args, "--dir").expect("--dir"));
    let n: usize = arg(args, "--n").and_then(|n| n.parse().ok()).unwrap_or(300);
    let rounds: usize = arg(args, "--rounds").and_then(|n| n.parse().ok()).unwrap_or(3);
    let defaults = dir.join("no-defaults");
    std::fs::create_dir_all(&defaults).expect("defaults");
    std::fs::write(defaults.join("mcp.json"), r#"{"mcpServers":{}}"#).expect("defaults");
    let idle = std::path::Path::new("2000");
    let env = [("GM_DEFAULTS_DIR", defaults.as_path()), ("GM_WORKER_IDLE_MS", idle)];
    let boxes: [(&str, &[&str]); 3] = [
        ("unconfined", &["--sandbox", "off"]),
        ("workspace-write", &["--sandbox", "workspace-write"]),
        ("workspace-write, network off", &["--sandbox", "workspace-write", "--sandbox-network", "off"]),
    ];
    // `--plain`: the unconfined worker alone, started with no sandbox flag, so that a build
    // from before the sandbox can be measured the same way.
    let configs: &[(&str, &[&str])] = if args.iter().any(|a| a == "--plain") { &[("unconfined", &[])] } else { &boxes };
    let mut servers: Vec<Server> = configs
        .iter()
        .enumerate()
        .map(|(i, (_, flags))| {
            let ws = dir.join(format!("ws-{i}"));
            std::fs::create_dir_all(&ws).expect("workspace");
            let mut cmd = vec![gm.clone(), "serve".into(), "--surface".into(), "tools".into(), "--workspace".into()];
            cmd.push(ws.to_string_lossy().into_owned());
            cmd.extend(flags.iter().map(|f| f.to_string()));
            // The worker in the host's own process, with no relay between (`--no-relay`).
            if args.iter().any(|a| a == "--no-relay") {
                cmd.push("--no-relay".into());
            }
            let mut s = Server::spawn_env(&cmd, &env);
            s.initialize();
            s
        })
        .collect();
    let params = json!({ "name": "run_shell", "arguments": { "command": "true" } });
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for _ in 0..rounds {
        for (i, s) in servers.iter_mut().enumerate() {
            let r = s.request("tools/call", params.clone());
            assert_ne!(r["result"]["isError"], true, "{}: {r}", configs[i].0);
            for _ in 0..n {
                let t = Instant::now();
                s.request("tools/call", params.clone());
                times[i].push(t.elapsed().as_secs_f64() * 1e6);
            }
        }
    }
    let bash_path = which("bash");
    let paired = shell_vs_bash(&mut servers[0], &bash_path, n);
    drop(servers);
    let bash = measure_exec(&[bash_path.as_str(), "-c", "true"], n.min(200));
    println!("| run_shell `true` | p50 (µs) | p99 (µs) | p50 over unconfined (µs) |\n|---|---|---|---|");
    let mut base = 0.0;
    for (i, (name, _)) in configs.iter().enumerate() {
        let t = &mut times[i];
        t.sort_by(|a, b| a.total_cmp(b));
        let (p50, p99) = (percentile(t, 0.5), percentile(t, 0.99));
        if i == 0 {
            base = p50;
        }
        println!("| {name} | {p50:.0} | {p99:.0} | {:+.0} |", p50 - base);
        println!("{}", json!({ "measure": format!("run_shell true, {name}"), "p50": p50, "p99": p99 }));
    }
    println!("| {bash_path} -c true (spawned directly) | {bash:.0} | | |");
    println!(
        "\nunconfined, interleaved with {bash_path} -c true call by call: run_shell p50 {:.0} µs, bash p50 {:.0} µs, \
         overhead (median of paired differences) {:.0} µs",
        paired.shell_p50, paired.bash_p50, paired.overhead_p50
    );
    println!(
        "of which any capturing runner pays {:.0} µs (bash piped, own group, a cwd: median of paired differences) \
         and any call through gm {:.0} µs (stat_file round trip p50, same worker, same turns)",
        paired.capture_p50, paired.call_p50
    );
    println!("{}", json!({ "measure": "run_shell overhead over bash -c, paired", "p50": paired.overhead_p50 }));
    println!("{}", json!({ "measure": "capture's cost to any runner, paired", "p50": paired.capture_p50 }));
    println!("{}", json!({ "measure": "stat_file round trip, same worker", "p50": paired.call_p50 }));
}

/// `mcp-bench otel --gm BIN --dir DIR [--n N] [--rounds R] [--gap-ms MS]`: `stat_file` round
/// trips with OpenTelemetry export off, on with a collector that accepts every batch, one that
/// refuses every connection (a closed port), and one that accepts and never answers — side by
/// side, in blocks with a quiet gap after each (120 ms unless said), R rounds alternating,
/// with a second worker with export off as the control,
/// each configuration its own workspace and worker. p50 and p99 per configuration, and their
/// ratio to export off (the issue's bound: within 5 %).
fn otel(args: &[String]) {
    let gm = arg(args, "--gm").expect("--gm");
    let dir = std::path::PathBuf::from(arg(args, "--dir").expect("--dir"));
    let n: usize = arg(args, "--n").and_then(|n| n.parse().ok()).unwrap_or(5000);
    let rounds: usize = arg(args, "--rounds").and_then(|n| n.parse().ok()).unwrap_or(3);
    std::fs::create_dir_all(&dir).expect("dir");
    let defaults = dir.join("no-defaults");
    std::fs::create_dir_all(&defaults).expect("defaults");
    std::fs::write(defaults.join("mcp.json"), r#"{"mcpServers":{}}"#).expect("defaults");
    // A port nobody listens on: bound, its number kept, then closed.
    let refused = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr");
    // A collector that takes connections and never answers: accepted sockets are held.
    let stuck = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let stuck_addr = stuck.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in stuck.incoming().flatten() {
            held.push(conn);
        }
    });
    // A collector that answers every export with 200 and an empty (valid) response.
    let accepting = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let accepting_addr = accepting.local_addr().expect("addr");
    std::thread::spawn(move || {
        for conn in accepting.incoming().flatten() {
            std::thread::spawn(move || answer_ok(conn));
        }
    });
    let refused_url = format!("http://{refused}");
    let stuck_url = format!("http://{stuck_addr}");
    let accepting_url = format!("http://{accepting_addr}");
    let idle = std::path::PathBuf::from("2000");
    // A second worker with export off is the control: how far two identical workers differ
    // here is how far a ratio to export off can be read.
    let configs: [(&str, Option<&str>); 5] = [
        ("export off", None),
        ("export on, collector accepting", Some(&accepting_url)),
        ("export on, collector refusing", Some(&refused_url)),
        ("export on, collector never answering", Some(&stuck_url)),
        ("export off, a second worker (control)", None),
    ];
    const BLOCK: usize = 500;
    let gap =
        arg(args, "--gap-ms").and_then(|ms| ms.parse().ok()).map_or(Duration::from_millis(120), Duration::from_millis);
    let count = configs.len();
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); count];
    let mut cpu: Vec<(f64, f64)> = vec![(0.0, 0.0); count];
    // Each round starts fresh workers, in workspaces of their own: two identical workers' p99
    // differed by 5-8 % within a run, and whatever part of that belongs to the process (where
    // its memory landed) stays for its life; fresh processes each round spread it over rounds.
    for round in 0..rounds {
        let mut servers: Vec<(Server, String)> = configs
            .iter()
            .enumerate()
            .map(|(i, (_, endpoint))| {
                let ws = dir.join(format!("r{round}-ws-{i}"));
                std::fs::create_dir_all(&ws).expect("workspace");
                let file = ws.join("target.txt");
                std::fs::write(&file, "x".repeat(4096)).expect("file");
                let cmd = vec![
                    gm.clone(),
                    "serve".into(),
                    "--surface".into(),
                    "tools".into(),
                    "--workspace".into(),
                    ws.to_string_lossy().into_owned(),
                ];
                let endpoint_path = endpoint.map(std::path::PathBuf::from);
                let mut env: Vec<(&str, &std::path::Path)> =
                    vec![("GM_DEFAULTS_DIR", defaults.as_path()), ("GM_WORKER_IDLE_MS", idle.as_path())];
                if let Some(e) = &endpoint_path {
                    env.push(("OTEL_EXPORTER_OTLP_ENDPOINT", e.as_path()));
                }
                let mut s = Server::spawn_env(&cmd, &env);
                s.initialize();
                (s, file.to_string_lossy().into_owned())
            })
            .collect();
        let params: Vec<Value> =
            servers.iter().map(|(_, file)| json!({ "name": "stat_file", "arguments": { "path": file } })).collect();
        for ((s, _), p) in servers.iter_mut().zip(&params) {
            for _ in 0..200 {
                s.request("tools/call", p.clone());
            }
        }
        // Each setting's worker (the process `gm serve` hands the session to): its CPU by
        // thread, before and after the timed calls.
        let workers: Vec<Option<i32>> = (0..count).map(|i| worker_pid(&dir.join(format!("r{round}-ws-{i}")))).collect();
        let before: Vec<(f64, f64)> = workers.iter().map(|p| p.map_or((0.0, 0.0), thread_cpu)).collect();
        // In blocks of `BLOCK` calls, the settings in turns, each block starting at another
        // one: the machine's slow phases fall on every setting alike, and a block is not
        // disturbed by another worker's log still syncing (call-by-call turns measured mostly
        // that). After each block, a quiet `gap` for every setting alike: what a worker does
        // after its calls (its log's sync, its span thread's gathered batch, 50 ms on) then
        // falls in its own gap, not in the next worker's block. Without it, each setting
        // always followed the same one (the collector refusing followed the accepting one) and
        // its p99 measured its predecessor's export.
        for block in 0..n.div_ceil(BLOCK) {
            for k in 0..count {
                let i = (block + k) % count;
                for _ in 0..BLOCK {
                    let t = Instant::now();
                    servers[i].0.send("tools/call", params[i].clone());
                    servers[i].0.read_reply();
                    times[i].push(t.elapsed().as_secs_f64() * 1e6);
                }
                std::thread::sleep(gap);
            }
        }
        for (i, pid) in workers.iter().enumerate() {
            let after = pid.map_or((0.0, 0.0), thread_cpu);
            cpu[i].0 += after.0 - before[i].0;
            cpu[i].1 += after.1 - before[i].1;
        }
        drop(servers);
    }
    let calls = times[0].len() as f64;
    if args.iter().any(|a| a == "--detail") {
        // Where a setting's tail sits: the blocks' first calls (after a gap, caches cold) or
        // spread through them.
        println!("| by position in the block (µs) | call 1 | calls 2-5 | calls 6-20 p99 | calls 21- p99 |\n|---|---|---|---|---|");
        for (i, (name, _)) in configs.iter().enumerate() {
            let (mut first, mut early, mut mid, mut rest) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for block in times[i].chunks(BLOCK) {
                first.push(block[0]);
                early.extend_from_slice(&block[1..5]);
                mid.extend_from_slice(&block[5..20]);
                rest.extend_from_slice(&block[20..]);
            }
            for v in [&mut first, &mut early, &mut mid, &mut rest] {
                v.sort_by(|a, b| a.total_cmp(b));
            }
            println!(
                "| {name} | {:.1} | {:.1} | {:.1} | {:.1} |",
                percentile(&first, 0.5),
                percentile(&early, 0.5),
                percentile(&mid, 0.99),
                percentile(&rest, 0.99)
            );
        }
    }
    println!("| worker CPU per call (µs) | request thread | export threads |\n|---|---|---|");
    for (i, (name, _)) in configs.iter().enumerate() {
        let (main, export) = cpu[i];
        println!("| {name} | {:.1} | {:.1} |", main * 1e6 / calls, export * 1e6 / calls);
    }
    // Each round's own p50 and p99 as a ratio to that round's export-off worker: a round whose
    // workers drew a bad layout, or that the machine slowed, is one round of several.
    let per_round = n.div_ceil(BLOCK) * BLOCK;
    let round_ratios = |i: usize, q: f64| -> Vec<f64> {
        let mut ratios: Vec<f64> = (0..rounds)
            .map(|r| {
                let of = |k: usize| {
                    let mut t = times[k][r * per_round..(r + 1) * per_round].to_vec();
                    t.sort_by(|a, b| a.total_cmp(b));
                    percentile(&t, q)
                };
                of(i) / of(0)
            })
            .collect();
        ratios.sort_by(|a, b| a.total_cmp(b));
        ratios
    };
    let by_round: Vec<(Vec<f64>, Vec<f64>)> =
        (0..count).map(|i| (round_ratios(i, 0.5), round_ratios(i, 0.99))).collect();
    println!(
        "| stat_file round trip | p50 (µs) | p99 (µs) | p50 / off | p99 / off | by round: p50 / off | p99 / off |\n|---|---|---|---|---|---|---|"
    );
    let (mut off50, mut off99) = (0.0, 0.0);
    for (i, (name, _)) in configs.iter().enumerate() {
        let (r50, r99) = &by_round[i];
        let t = &mut times[i];
        t.sort_by(|a, b| a.total_cmp(b));
        let (p50, p99) = (percentile(t, 0.5), percentile(t, 0.99));
        if i == 0 {
            (off50, off99) = (p50, p99);
        }
        let spread = |r: &[f64]| {
            format!("{:.3} ({:.3}-{:.3})", percentile(r, 0.5), r.first().unwrap_or(&0.0), r.last().unwrap_or(&0.0))
        };
        println!(
            "| {name} | {p50:.1} | {p99:.1} | {:.3} | {:.3} | {} | {} |",
            p50 / off50,
            p99 / off99,
            spread(r50),
            spread(r99)
        );
        println!("{}", json!({ "measure": format!("stat_file, {name}"), "p50": p50, "p99": p99 }));
    }
}

/// The pid of a workspace's worker (`.gm/worker.pid`).
fn worker_pid(ws: &std::path::Path) -> Option<i32> {
    let text = std::fs::read_to_string(ws.join(".gm/worker.pid")).ok()?;
    serde_json::from_str::<Value>(&text).ok()?["pid"].as_i64().map(|p| p as i32)
}

/// A process's CPU seconds (user + system): its main thread's (where the worker answers
/// requests), and its export threads' (`gm-otel-spans`, the SDK's `OpenTelemetry.*`, the
/// HTTP client's `reqwest-*`).
fn thread_cpu(pid: i32) -> (f64, f64) {
    let ticks = 100.0; // USER_HZ on Linux
    let (mut main, mut export) = (0.0, 0.0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return (0.0, 0.0) };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let comm = &stat[open + 1..close];
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        let cpu = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
        let seconds = (cpu(11) + cpu(12)) / ticks;
        if task.file_name().to_string_lossy() == pid.to_string() {
            main += seconds;
        } else if comm.starts_with("gm-otel") || comm.starts_with("OpenTelemetry") || comm.starts_with("reqwest") {
            export += seconds;
        }
    }
    (main, export)
}

/// Answers every HTTP request on `conn` with 200 and an empty body (an OTLP collector that
/// takes everything).
fn answer_ok(mut conn: std::net::TcpStream) {
    use std::io::{BufRead, BufReader, Read, Write};
    let Ok(clone) = conn.try_clone() else { return };
    let mut reader = BufReader::new(clone);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap_or(0);
            }
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let ok = b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if conn.write_all(ok).is_err() {
            return;
        }
    }
}

/// run_shell `true` and `bash -c true` (spawned here, by `bash`'s path) taken in turns, with
/// the two floors under the difference taken in the same turns: `bash -c true` spawned the way
/// any runner that captures output must (both streams piped and read to their end, its own
/// process group, a working directory), and a `stat_file` round trip to the same worker (what
/// any call through gm costs).
struct Paired {
    shell_p50: f64,
    bash_p50: f64,
    /// The median of (run_shell − bash) over the turns.
    overhead_p50: f64,
    /// The median of (captured bash − bash): what capturing costs any runner.
    capture_p50: f64,
    /// `stat_file`'s round trip p50 on the same worker.
    call_p50: f64,
}

fn shell_vs_bash(server: &mut Server, bash: &str, n: usize) -> Paired {
    use std::os::unix::process::CommandExt;
    let params = json!({ "name": "run_shell", "arguments": { "command": "true" } });
    let stat = json!({ "name": "stat_file", "arguments": { "path": "." } });
    for _ in 0..20 {
        server.request("tools/call", params.clone());
    }
    let cwd = std::env::temp_dir();
    let (mut shell, mut direct, mut diff, mut capture, mut call) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..n {
        let t = Instant::now();
        let r = server.request("tools/call", params.clone());
        let a = t.elapsed().as_secs_f64() * 1e6;
        assert_ne!(r["result"]["isError"], true, "run_shell failed: {r}");
        let t = Instant::now();
        let status = Command::new(bash).args(["-c", "true"]).stdout(Stdio::null()).status().expect("bash");
        let b = t.elapsed().as_secs_f64() * 1e6;
        assert!(status.success());
        let t = Instant::now();
        let out = Command::new(bash)
            .args(["-c", "true"])
            .current_dir(&cwd)
            .stdin(Stdio::null())
            .process_group(0)
            .output()
            .expect("bash");
        let c = t.elapsed().as_secs_f64() * 1e6;
        assert!(out.status.success());
        let t = Instant::now();
        let r = server.request("tools/call", stat.clone());
        call.push(t.elapsed().as_secs_f64() * 1e6);
        assert_ne!(r["result"]["isError"], true, "stat_file failed: {r}");
        shell.push(a);
        direct.push(b);
        diff.push(a - b);
        capture.push(c - b);
    }
    for v in [&mut shell, &mut direct, &mut diff, &mut capture, &mut call] {
        v.sort_by(|a, b| a.total_cmp(b));
    }
    Paired {
        shell_p50: percentile(&shell, 0.5),
        bash_p50: percentile(&direct, 0.5),
        overhead_p50: percentile(&diff, 0.5),
        capture_p50: percentile(&capture, 0.5),
        call_p50: percentile(&call, 0.5),
    }
}

/// The first `name` on PATH, as gm resolves its shell.
fn which(name: &str) -> String {
    std::env::var_os("PATH")
        .and_then(|p| std::env::split_paths(&p).map(|d| d.join(name)).find(|p| p.is_file()))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|| name.to_owned())
}
