//! OpenTelemetry export (issue 38), against a real OTLP receiver (HTTP, or gRPC with grpcio):
//! `tests/otel/receiver.py` decodes what gm sends with the official protobuf classes (PyPI's
//! opentelemetry-proto, put in a venv under the build's temp dir on first use) and writes it as
//! JSON lines.

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{read_log, stop_worker, Gm, TIMEOUT};
use serde_json::{json, Value};

/// OTLP's span kinds, as the protobuf enum numbers them.
const INTERNAL: i64 = 1;
const SERVER: i64 = 2;

const HOST_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const HOST_SPAN: &str = "00f067aa0ba902b7";

/// What the receiver needs: the OTLP classes, and grpcio for its gRPC mode.
const PIP_INSTALL: &[&str] =
    &["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "opentelemetry-proto", "grpcio"];

/// A python with opentelemetry-proto and grpcio: `GM_OTEL_PYTHON` (CI installs it there), else a venv
/// made under the build's temp dir on first use (tests that ask at once wait for one install,
/// under a lock file).
fn python() -> PathBuf {
    if let Some(python) = std::env::var_os("GM_OTEL_PYTHON") {
        return python.into();
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("otel-venv");
    std::fs::create_dir_all(&dir).expect("venv dir");
    let lock = std::fs::File::create(dir.join(".lock")).expect("lock file");
    // SAFETY: flock on a descriptor we own; released when `lock` is dropped.
    assert_eq!(unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) }, 0, "flock");
    let python = dir.join("bin/python");
    if !dir.join(".installed").exists() {
        let run = |cmd: &mut Command, what: &str| {
            let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(out.status.success(), "{what} failed: {}", String::from_utf8_lossy(&out.stderr));
        };
        run(Command::new("python3").args(["-m", "venv", "--clear"]).arg(&dir), "python3 -m venv");
        run(Command::new(&python).args(PIP_INSTALL), "pip install opentelemetry-proto grpcio (PyPI must be reachable)");
        std::fs::write(dir.join(".installed"), "").expect("mark");
    }
    python
}

/// A running receiver and the file it writes.
struct Receiver {
    child: Child,
    port: u16,
    out: PathBuf,
    _dir: tempfile::TempDir,
}

impl Receiver {
    fn start(flags: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("received.jsonl");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/otel/receiver.py");
        let mut child = Command::new(python())
            .arg(script)
            .arg(&out)
            .args(flags)
            .stdout(Stdio::piped())
            .stdin(Stdio::null())
            .spawn()
            .expect("the receiver starts");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("its port");
        let port = line.trim().parse().unwrap_or_else(|e| panic!("receiver port {line:?}: {e}"));
        Receiver { child, port, out, _dir: dir }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn records(&self, signal: &str) -> Vec<Value> {
        std::fs::read_to_string(&self.out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("receiver line"))
            .filter(|r| r["signal"] == signal)
            .collect()
    }

    /// The records of `signal` once `done` holds for them, or a failure naming what came.
    fn wait_for(&self, signal: &str, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let records = self.records(signal);
            if done(&records) {
                return records;
            }
            if Instant::now() > deadline {
                let names: Vec<&Value> = records.iter().map(|r| &r["name"]).collect();
                panic!("no {what} arrived; {signal}s: {names:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// gm's environment for export to `endpoint`, quick to send, in a HOME of its own.
fn export_env(endpoint: &str, home: &Path) -> Vec<(String, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT".into(), endpoint.into()),
        ("OTEL_BSP_SCHEDULE_DELAY".into(), "100".into()),
        ("OTEL_METRIC_EXPORT_INTERVAL".into(), "300".into()),
        ("HOME".into(), home.to_string_lossy().into_owned()),
    ]
}

fn start_gm(args: &[&str], env: &[(String, String)]) -> Gm {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Gm::start_in_temp(args, &env)
}

/// A worker on the default surface exporting to `receiver`, in a HOME of its own (returned,
/// to keep), with `file` holding `text` in its workspace.
fn exporting_worker(receiver: &Receiver, file: &str, text: &str) -> (Gm, tempfile::TempDir) {
    let home = tempfile::tempdir().expect("home");
    let mut gm = start_gm(&[], &export_env(&receiver.endpoint(), home.path()));
    gm.ready();
    std::fs::write(gm.workspace.join(file), text).expect("write");
    (gm, home)
}

fn named<'a>(spans: &'a [Value], name: &str) -> Vec<&'a Value> {
    spans.iter().filter(|s| s["name"] == name).collect()
}

fn has(spans: &[Value], name: &str) -> bool {
    !named(spans, name).is_empty()
}

#[test]
fn run_code_requests_and_their_gm_calls_are_spans_in_the_hosts_trace() {
    let receiver = Receiver::start(&[]);
    let (mut gm, _home) = exporting_worker(&receiver, "a.txt", "hello\n");
    let reply = gm.ok(
        "tools/call",
        json!({
            "name": "run_code",
            "arguments": { "code": "const s = await gm.stat_file({ path: 'a.txt' }); let missing = null; try { await gm.read_file({ path: 'missing.txt' }); } catch (e) { missing = e.code; } return { size: s.size, missing };" },
            "_meta": { "traceparent": format!("00-{HOST_TRACE}-{HOST_SPAN}-01") },
        }),
    );
    assert_eq!(reply["isError"], false, "{reply}");
    let missing = reply["structuredContent"]["result"]["missing"].as_str().expect("the read failed").to_owned();

    let spans = receiver.wait_for("span", "run_code's spans", |s| {
        has(s, "tools/call run_code") && has(s, "execute_tool stat_file") && has(s, "execute_tool read_file")
    });
    let call = named(&spans, "tools/call run_code")[0];
    assert_eq!(call["kind"], SERVER);
    assert_eq!(call["traceId"], HOST_TRACE, "the host's traceparent makes the request its child");
    assert_eq!(call["parentSpanId"], HOST_SPAN);
    let attrs = &call["attributes"];
    assert_eq!(attrs["mcp.method.name"], "tools/call");
    assert_eq!(attrs["gen_ai.tool.name"], "run_code");
    assert_eq!(attrs["gen_ai.operation.name"], "execute_tool");
    assert_eq!(attrs["mcp.protocol.version"], "2025-11-25");
    assert_eq!(attrs["network.transport"], "pipe");
    assert!(attrs["mcp.session.id"].as_str().is_some_and(|s| !s.is_empty()), "{attrs}");
    assert!(attrs["jsonrpc.request.id"].is_string(), "{attrs}");
    assert!(attrs.get("error.type").is_none(), "{attrs}");
    assert!(attrs.get("gen_ai.tool.call.arguments").is_none(), "content is off by default: {attrs}");
    let sent = std::fs::read_to_string(&receiver.out).expect("received");
    assert!(!sent.contains("gen_ai.tool.call"), "no span carries content by default");

    for (verb, error) in [("stat_file", None), ("read_file", Some(missing.as_str()))] {
        let span = named(&spans, &format!("execute_tool {verb}"))[0];
        assert_eq!(span["kind"], INTERNAL);
        assert_eq!(span["traceId"], HOST_TRACE);
        assert_eq!(span["parentSpanId"], call["spanId"], "{verb} runs inside run_code's span");
        assert_eq!(span["attributes"]["gen_ai.tool.name"], verb);
        assert_eq!(span["attributes"]["error.type"].as_str(), error, "{verb}");
        let within = span["start"].as_u64() >= call["start"].as_u64() && span["end"].as_u64() <= call["end"].as_u64();
        assert!(within, "{verb}'s span lies within the request's");
    }

    // The handshake and the skill read are spans too, each its own trace (no traceparent).
    let initialize = named(&spans, "initialize");
    assert_eq!(initialize.len(), 1, "{spans:?}");
    assert_eq!(initialize[0]["attributes"]["mcp.protocol.version"], "2025-11-25", "the version it negotiated");
    let read = named(&spans, "resources/read skill://gm/SKILL.md");
    assert_eq!(read.len(), 1, "{spans:?}");
    assert_ne!(read[0]["traceId"], HOST_TRACE);

    // The resource names the service, gm's version and the worker; the workspace by its
    // directory's name only.
    let resource = &call["resource"];
    assert_eq!(resource["service.name"], "gm");
    assert_eq!(resource["service.version"], env!("CARGO_PKG_VERSION"));
    assert!(resource["service.instance.id"].as_str().is_some_and(|w| w.starts_with("worker-")), "{resource}");
    let name = gm.workspace.file_name().expect("name").to_string_lossy().into_owned();
    assert_eq!(resource["gm.workspace.name"], name.as_str());
    let path = gm.workspace.to_string_lossy().into_owned();
    let sent = std::fs::read_to_string(&receiver.out).expect("received");
    assert!(!sent.contains(&path), "the workspace's path is never exported");

    // The log's action event for the call carries the host's traceparent and gm's span in it.
    let action = gm.events_of("action").into_iter().find(|e| e["tool"] == "run_code").expect("action event");
    assert_eq!(action["traceparent"], format!("00-{HOST_TRACE}-{HOST_SPAN}-01"));
    let logged = action["span"].as_str().expect("span in the action event");
    assert_eq!(logged, format!("00-{HOST_TRACE}-{}-01", call["spanId"].as_str().expect("span id")));
    let started = read_log(&gm.log_path()).into_iter().find(|e| e["kind"] == "otel").expect("otel event");
    assert_eq!(started["exporting"]["traces"]["protocol"], "http/protobuf", "{started}");
    common::shut_down(gm);
}

#[test]
fn tools_surface_calls_carry_tool_errors_content_and_the_mcp_metrics() {
    let receiver = Receiver::start(&[]);
    let home = tempfile::tempdir().expect("home");
    let mut env = export_env(&receiver.endpoint(), home.path());
    env.push(("GM_OTEL_CONTENT".into(), "1".into()));
    env.push(("OTEL_SERVICE_NAME".into(), "gm-under-test".into()));
    let mut gm = start_gm(&["--surface", "tools"], &env);
    gm.initialize("2025-11-25");
    std::fs::write(gm.workspace.join("a.txt"), "hello\n").expect("write");
    gm.call_ok("stat_file", json!({ "path": "a.txt" }));
    gm.call_err("read_file", json!({ "path": "missing.txt" }));

    let spans = receiver
        .wait_for("span", "the tools' spans", |s| has(s, "tools/call stat_file") && has(s, "tools/call read_file"));
    let ok = named(&spans, "tools/call stat_file")[0];
    assert_eq!(ok["kind"], SERVER);
    assert_eq!(ok["resource"]["service.name"], "gm-under-test", "OTEL_SERVICE_NAME names the service");
    assert!(ok["attributes"].get("error.type").is_none());
    let args = ok["attributes"]["gen_ai.tool.call.arguments"].as_str().expect("arguments with GM_OTEL_CONTENT=1");
    assert_eq!(serde_json::from_str::<Value>(args).expect("JSON"), json!({ "path": "a.txt" }));
    assert!(ok["attributes"]["gen_ai.tool.call.result"].as_str().is_some_and(|r| r.contains("\"size\"")));
    let failed = named(&spans, "tools/call read_file")[0];
    assert_eq!(failed["attributes"]["error.type"], "tool_error", "an isError result");
    assert_eq!(failed["status"]["code"], 2, "STATUS_CODE_ERROR");

    // The session's end records its duration; both MCP durations are histograms.
    gm.close_stdin();
    gm.wait_exit(TIMEOUT).expect("the relay exits");
    let metrics = receiver.wait_for("metric", "the MCP metrics", |m| {
        has(m, "mcp.server.operation.duration") && has(m, "mcp.server.session.duration")
    });
    let operation = named(&metrics, "mcp.server.operation.duration");
    assert!(operation.iter().all(|m| m["kind"] == "histogram" && m["unit"] == "s"), "{operation:?}");
    let points: Vec<&Value> = operation.iter().flat_map(|m| m["points"].as_array().into_iter().flatten()).collect();
    let failed_point = points.iter().find(|p| p["attributes"]["gen_ai.tool.name"] == "read_file").expect("read_file");
    assert_eq!(failed_point["attributes"]["mcp.method.name"], "tools/call");
    assert_eq!(failed_point["attributes"]["error.type"], "tool_error");
    assert!(failed_point["count"].as_u64() >= Some(1));
    assert_eq!(failed_point["attributes"]["network.transport"], "pipe");
    let sessions = named(&metrics, "mcp.server.session.duration");
    assert!(sessions.iter().all(|m| m["kind"] == "histogram"), "{sessions:?}");
    let session = sessions.iter().flat_map(|m| m["points"].as_array().into_iter().flatten()).next().expect("a point");
    assert_eq!(session["attributes"]["mcp.protocol.version"], "2025-11-25");
    assert_eq!(session["attributes"]["network.transport"], "pipe");
    let in_flight = named(&metrics, "gm.requests.in_flight");
    assert!(in_flight.iter().all(|m| m["kind"] == "sum" && m["monotonic"] == false), "{in_flight:?}");
    // Spans lost on the way are a counter, by reason (here none failed).
    let lost = named(&metrics, "gm.telemetry.spans.lost");
    assert!(!lost.is_empty() && lost.iter().all(|m| m["kind"] == "sum" && m["monotonic"] == true), "{lost:?}");
    stop_worker(&gm.workspace);
}

#[test]
fn without_otel_settings_nothing_is_exported_or_dialled() {
    // Whatever listens on the default OTLP ports would see a connection if gm dialled out.
    let listeners: Vec<std::net::TcpListener> =
        ["127.0.0.1:4318", "127.0.0.1:4317"].iter().filter_map(|a| std::net::TcpListener::bind(a).ok()).collect();
    for l in &listeners {
        l.set_nonblocking(true).expect("nonblocking");
    }
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(home.path().join(".gmnew")).expect("gmnew");
    // A config file without an `otel` section, and a workspace file that names one: neither
    // turns export on.
    std::fs::write(home.path().join(".gmnew/config.json"), r#"{"sandbox": {"mode": "off"}}"#).expect("config");
    let dir = tempfile::tempdir().expect("workspace");
    let ws = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir_all(ws.join(".gm")).expect(".gm");
    std::fs::write(ws.join(".gm/config.json"), r#"{"otel": {"endpoint": "http://127.0.0.1:4318"}}"#)
        .expect("ws config");
    let home_s = home.path().to_string_lossy().into_owned();
    let mut gm = Gm::start_in(&ws, &["--surface", "tools"], &[("HOME", home_s.as_str())]);
    gm.initialize("2025-11-25");
    std::fs::write(ws.join("a.txt"), "x").expect("write");
    gm.call_ok("stat_file", json!({ "path": "a.txt" }));
    std::thread::sleep(Duration::from_millis(700));
    assert!(gm.events_of("otel").is_empty(), "no export was started");
    for l in &listeners {
        assert!(l.accept().is_err(), "gm connected to {:?}", l.local_addr());
    }
    common::shut_down(gm);
}

#[test]
fn a_refusing_or_stuck_collector_changes_no_call_and_holds_no_exit() {
    for flags in [&["--status", "503"][..], &["--hang"][..]] {
        let receiver = Receiver::start(flags);
        let home = tempfile::tempdir().expect("home");
        let mut env = export_env(&receiver.endpoint(), home.path());
        env.push(("GM_OTEL_LOSS_MS".into(), "300".into()));
        let mut gm = start_gm(&["--surface", "tools"], &env);
        gm.initialize("2025-11-25");
        std::fs::write(gm.workspace.join("a.txt"), "x").expect("write");
        for _ in 0..20 {
            let started = Instant::now();
            gm.call_ok("stat_file", json!({ "path": "a.txt" }));
            assert!(started.elapsed() < Duration::from_secs(2), "{flags:?}: a call waited on the collector");
        }
        receiver.wait_for("request", "an export attempt", |r| !r.is_empty());
        // While spans are being lost, the run's log says so (once per look, here 300 ms).
        let deadline = Instant::now() + Duration::from_secs(15);
        let losing = loop {
            gm.call_ok("stat_file", json!({ "path": "a.txt" }));
            let events = gm.events_of("telemetry");
            if let Some(e) = events.into_iter().find(|e| e["state"] == "losing") {
                break e;
            }
            assert!(Instant::now() < deadline, "{flags:?}: no telemetry event while spans were lost");
            std::thread::sleep(Duration::from_millis(100));
        };
        assert!(losing["spansEnded"].as_u64().is_some_and(|n| n > 0), "{flags:?}: {losing}");
        // The worker stops within its two seconds of flushing, however the collector answers.
        let pid = worker_pid(&gm.workspace);
        gm.close_stdin();
        gm.wait_exit(TIMEOUT).expect("the relay exits");
        let started = Instant::now();
        stop_worker(&gm.workspace);
        // Its own stop plus at most 2 s of flushing: well under the exporter's 10 s timeout,
        // which a stuck collector would otherwise run out.
        while process_alive(pid) {
            assert!(started.elapsed() < Duration::from_secs(8), "{flags:?}: the worker waited on the collector");
            std::thread::sleep(Duration::from_millis(20));
        }
        // What did not reach the collector is counted, in the worker's own log.
        let said = std::fs::read_to_string(gm.workspace.join(".gm/worker.log")).unwrap_or_default();
        let line =
            said.lines().find(|l| l.contains("gm: OpenTelemetry: ")).unwrap_or_else(|| panic!("{flags:?}: {said}"));
        let refused = !line.contains(" 0 failed");
        let dropped = !line.contains(" 0 dropped");
        assert!(refused || dropped, "{flags:?}: {line}");
        if flags == ["--status", "503"] {
            assert!(refused, "a 503 is a failed export: {line}");
        }
    }
}

fn worker_pid(ws: &Path) -> i32 {
    let holder: Value =
        serde_json::from_slice(&std::fs::read(ws.join(".gm/worker.pid")).expect("worker.pid")).expect("json");
    holder["pid"].as_i64().expect("pid") as i32
}

/// Alive: its /proc entry exists and is no zombie.
fn process_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

#[test]
fn a_child_servers_call_is_a_client_span_whose_traceparent_the_child_receives() {
    let receiver = Receiver::start(&[]);
    let dir = tempfile::tempdir().expect("workspace");
    let ws = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir_all(ws.join(".gm")).expect(".gm");
    let server = json!({ "mcpServers": { "t": { "command": env!("CARGO_BIN_EXE_mcp-test-server"), "args": [] } } });
    std::fs::write(ws.join(".gm/mcp.json"), server.to_string()).expect("mcp.json");
    // Approvals live in the HOME the tests of workspace servers share.
    common::approve_workspace_servers(&ws);
    let mut env = export_env(&receiver.endpoint(), &common::trust_home());
    env.push(("GM_OTEL_CONTENT".into(), "1".into()));
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut gm = Gm::start_in(&ws, &[], &env);
    gm.ready();
    let r = gm.js("return await gm.t_echo({ x: 1 });");
    let sent = r["structuredContent"]["meta"]["traceparent"].as_str().expect("the child got a traceparent").to_owned();

    let spans = receiver.wait_for("span", "the child call's spans", |s| {
        has(s, "tools/call run_code") && has(s, "execute_tool t_echo") && has(s, "tools/call echo")
    });
    let body_call = named(&spans, "execute_tool t_echo")[0];
    let client = named(&spans, "tools/call echo")[0];
    assert_eq!(client["kind"], 3, "SPAN_KIND_CLIENT");
    assert_eq!(client["parentSpanId"], body_call["spanId"], "under the body's call");
    assert_eq!(client["traceId"], body_call["traceId"]);
    assert_eq!(client["attributes"]["gm.child.server"], "t");
    assert_eq!(client["attributes"]["gen_ai.tool.name"], "echo");
    // With GM_OTEL_CONTENT=1 the body's call carries its arguments and result too.
    let args = body_call["attributes"]["gen_ai.tool.call.arguments"].as_str().expect("arguments");
    assert_eq!(serde_json::from_str::<Value>(args).expect("JSON"), json!({ "x": 1 }));
    assert!(body_call["attributes"]["gen_ai.tool.call.result"].as_str().is_some_and(|r| r.contains("\"echo\"")));
    let ids = (client["traceId"].as_str().expect("trace"), client["spanId"].as_str().expect("span"));
    assert_eq!(sent, format!("00-{}-{}-01", ids.0, ids.1), "the child's parent is gm's CLIENT span");

    let metrics = receiver.wait_for("metric", "the child start counter", |m| has(m, "gm.child_server.starts"));
    let starts = named(&metrics, "gm.child_server.starts");
    assert!(starts.iter().all(|m| m["kind"] == "sum" && m["monotonic"] == true), "{starts:?}");
    let point = starts
        .iter()
        .flat_map(|m| m["points"].as_array().into_iter().flatten())
        .find(|p| p["attributes"]["gm.child.server"] == "t")
        .expect("t's start");
    assert_eq!(point["attributes"]["outcome"], "ready");
    common::shut_down(gm);

    // The log of a run exported live, sent again with `gm otel-export`: the same spans, ids and
    // parents, which a collector merges (the body's call and the child's call too).
    let again = Receiver::start(&[]);
    let out = common::gm_command()
        .args(["otel-export", "--workspace"])
        .arg(&ws)
        .env("HOME", common::trust_home())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", again.endpoint())
        .output()
        .expect("gm otel-export runs");
    assert!(out.status.success(), "gm otel-export: {}", String::from_utf8_lossy(&out.stderr));
    let names = ["tools/call run_code", "execute_tool t_echo", "tools/call echo"];
    let resent = again.wait_for("span", "the log's spans", |s| names.iter().all(|n| has(s, n)));
    for name in names {
        let (live, sent) = (named(&spans, name)[0], named(&resent, name)[0]);
        for key in ["traceId", "spanId", "parentSpanId"] {
            assert_eq!(sent[key], live[key], "{name}: {key}");
        }
    }
}

#[test]
fn otel_export_sends_a_recorded_log_as_the_same_spans_every_time() {
    // Recorded with export off.
    let home = tempfile::tempdir().expect("home");
    let home_s = home.path().to_string_lossy().into_owned();
    let dir = tempfile::tempdir().expect("workspace");
    let ws = dir.path().canonicalize().expect("canonical");
    let mut gm = Gm::start_in(&ws, &[], &[("HOME", home_s.as_str())]);
    gm.ready();
    std::fs::write(ws.join("a.txt"), "hello\n").expect("write");
    let reply = gm.ok(
        "tools/call",
        json!({
            "name": "run_code",
            "arguments": { "code": "await gm.stat_file({ path: 'a.txt' }); try { await gm.read_file({ path: 'missing.txt' }); } catch (e) {} return 1;" },
            "_meta": { "traceparent": format!("00-{HOST_TRACE}-{HOST_SPAN}-01") },
        }),
    );
    assert_eq!(reply["isError"], false, "{reply}");
    let events = gm.log_events();
    let first_action = events.iter().find(|e| e["kind"] == "action").expect("an action")["seq"].as_u64().expect("seq");
    common::shut_down(gm);

    let receiver = Receiver::start(&[]);
    let send = |since: Option<u64>| {
        let mut cmd = common::gm_command();
        cmd.args(["otel-export", "--workspace"]).arg(&ws).env("HOME", home.path());
        cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
        if let Some(since) = since {
            cmd.args(["--since", &since.to_string()]);
        }
        let out = cmd.output().expect("gm otel-export runs");
        assert!(out.status.success(), "gm otel-export: {}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).expect("its report")
    };
    let report = send(None);
    assert_eq!(report["spans"], 3, "run_code and its two calls: {report}");
    let spans = receiver.wait_for("span", "the log's spans", |s| s.len() >= 3);
    let body = named(&spans, "tools/call run_code")[0];
    assert_eq!(body["kind"], SERVER);
    assert_eq!(body["traceId"], HOST_TRACE);
    assert_eq!(body["parentSpanId"], HOST_SPAN);
    for verb in ["stat_file", "read_file"] {
        let call = named(&spans, &format!("execute_tool {verb}"))[0];
        assert_eq!(call["parentSpanId"], body["spanId"], "{verb} under its body");
        assert_eq!(call["traceId"], HOST_TRACE);
    }
    assert!(named(&spans, "execute_tool read_file")[0]["attributes"]["error.type"].is_string());
    assert_eq!(body["resource"]["gm.workspace.name"], ws.file_name().expect("name").to_string_lossy().as_ref());

    // Sent again: the same ids, which a collector merges.
    let ids = |spans: &[Value]| {
        let mut ids: Vec<String> = spans.iter().map(|s| format!("{}/{}", s["traceId"], s["spanId"])).collect();
        ids.sort();
        ids
    };
    send(None);
    let twice = receiver.wait_for("span", "the second sending", |s| s.len() >= 6);
    assert_eq!(ids(&twice[3..]), ids(&twice[..3]));

    // --since: only the events from that seq on (the action comes after its calls).
    let report = send(Some(first_action));
    assert_eq!(report["spans"], 1, "{report}");

    // On a terminal it draws its progress; piped (above), stderr stays empty.
    let script = "import os, pty, sys\nout = b''\ndef read(fd):\n    global out\n    data = os.read(fd, 1024)\n    out += data\n    return data\npty.spawn(sys.argv[1:], read)\nsys.stderr.write(out.decode('utf-8', 'replace'))\n";
    let out = std::process::Command::new("python3")
        .args(["-c", script, common::gm_bin(), "otel-export", "--workspace"])
        .arg(&ws)
        .env("HOME", home.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .stdin(std::process::Stdio::null())
        .output()
        .expect("python3 runs gm on a terminal");
    let seen = String::from_utf8_lossy(&out.stderr);
    assert!(seen.contains("gm otel-export [") && seen.contains("3/3 spans"), "{seen}");
    let piped = common::gm_command()
        .args(["otel-export", "--workspace"])
        .arg(&ws)
        .env("HOME", home.path())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .output()
        .expect("gm otel-export runs");
    assert!(!String::from_utf8_lossy(&piped.stderr).contains("spans"), "no bar when piped");
}

#[test]
fn otel_export_without_a_collector_configured_says_so() {
    let dir = tempfile::tempdir().expect("dir");
    let out = common::gm_command()
        .args(["otel-export", "--workspace"])
        .arg(dir.path())
        .env("HOME", dir.path())
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("OTEL_EXPORTER_OTLP_ENDPOINT"));
}

#[test]
fn with_otel_exporter_otlp_protocol_grpc_spans_and_metrics_go_over_grpc() {
    let receiver = Receiver::start(&["--grpc"]);
    let home = tempfile::tempdir().expect("home");
    let mut env = export_env(&receiver.endpoint(), home.path());
    env.push(("OTEL_EXPORTER_OTLP_PROTOCOL".into(), "grpc".into()));
    let mut gm = start_gm(&["--surface", "tools"], &env);
    gm.initialize("2025-11-25");
    std::fs::write(gm.workspace.join("a.txt"), "x").expect("write");
    gm.call_ok("stat_file", json!({ "path": "a.txt" }));
    let spans = receiver.wait_for("span", "the call's span over gRPC", |s| has(s, "tools/call stat_file"));
    assert_eq!(named(&spans, "tools/call stat_file")[0]["kind"], SERVER);
    receiver.wait_for("metric", "the metrics over gRPC", |m| has(m, "mcp.server.operation.duration"));
    let requests = receiver.records("request");
    assert!(requests.iter().all(|r| r["contentType"] == "application/grpc"), "{requests:?}");
    common::shut_down(gm);
}

#[test]
fn a_session_over_http_is_network_transport_tcp() {
    let receiver = Receiver::start(&[]);
    let home = tempfile::tempdir().expect("home");
    let dir = tempfile::tempdir().expect("workspace");
    let ws = dir.path().canonicalize().expect("canonical");
    let env = export_env(&receiver.endpoint(), home.path());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (mut front, lines) = common::spawn_http_front(&ws, &["--http-token", "none", "--surface", "tools"], &env);
    let http = common::HttpClient::of(&lines, None);
    let session = http.initialize("otel-test");
    std::fs::write(ws.join("a.txt"), "x").expect("write");
    let call = http.post(
        Some(&session),
        json!({ "jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": { "name": "stat_file", "arguments": { "path": "a.txt" } } }),
    );
    assert!(call.status().is_success(), "{:?}", call.status());

    let spans = receiver.wait_for("span", "the HTTP session's call", |s| has(s, "tools/call stat_file"));
    let span = named(&spans, "tools/call stat_file")[0];
    assert_eq!(span["attributes"]["network.transport"], "tcp");
    assert_eq!(span["attributes"]["mcp.session.id"], session.as_str());
    common::stop_http_front(&mut front);
    stop_worker(&ws);
}

#[test]
fn the_users_config_file_alone_turns_export_on() {
    let receiver = Receiver::start(&[]);
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(home.path().join(".gmnew")).expect("gmnew");
    let config = json!({ "otel": { "endpoint": receiver.endpoint(), "serviceName": "gm-from-file" } });
    std::fs::write(home.path().join(".gmnew/config.json"), config.to_string()).expect("config");
    let home_s = home.path().to_string_lossy().into_owned();
    let env = [("HOME", home_s.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", "100")];
    let mut gm = Gm::start_in_temp(&["--surface", "tools"], &env);
    gm.initialize("2025-11-25");
    std::fs::write(gm.workspace.join("a.txt"), "x").expect("write");
    gm.call_ok("stat_file", json!({ "path": "a.txt" }));
    let spans = receiver.wait_for("span", "the call's span", |s| has(s, "tools/call stat_file"));
    assert_eq!(named(&spans, "tools/call stat_file")[0]["resource"]["service.name"], "gm-from-file");
    common::shut_down(gm);
}

#[test]
fn a_running_worker_follows_the_users_config_file_turning_export_on_changing_it_and_off() {
    let first = Receiver::start(&[]);
    let second = Receiver::start(&[]);
    let (mut gm, config_file, _home) = followed_worker("100", "50");
    // Off at start: nothing to say, nothing sent.
    gm.js("await gm.stat_file({ path: 'a.txt' }); return 1");
    assert!(gm.events_of("otel").is_empty());
    // The repository cannot turn export on while the worker runs either: a config in its own
    // folder, written by a body, and waited for past several polls, changes nothing.
    let stranger = json!({ "otel": { "endpoint": first.endpoint() } }).to_string();
    gm.js(&format!("await gm.write_file({{ path: '.gm/config.json', content: {} }}); return 1", json!(stranger)));
    std::fs::write(gm.workspace.join("config.json"), &stranger).expect("write");
    std::thread::sleep(Duration::from_millis(300));
    gm.js("await gm.stat_file({ path: 'a.txt' }); return 1");
    std::thread::sleep(Duration::from_millis(400));
    assert!(gm.events_of("otel").is_empty(), "a workspace file changed export");
    assert!(first.records("span").is_empty(), "a workspace file sent spans");

    // The user turns export on: the running worker exports its next calls.
    let on = |endpoint: String, service: &str| json!({ "otel": { "endpoint": endpoint, "serviceName": service } });
    std::fs::write(&config_file, on(first.endpoint(), "gm-first").to_string()).expect("config");
    wait_events(&mut gm, 1);
    gm.js("await gm.stat_file({ path: 'a.txt' }); return 1");
    let spans = first.wait_for("span", "a span after export was turned on", |s| has(s, "execute_tool stat_file"));
    assert_eq!(named(&spans, "tools/call run_code")[0]["resource"]["service.name"], "gm-first");
    let said = gm.events_of("otel")[0]["exporting"]["traces"]["endpoint"].to_string();
    assert!(said.contains(&first.port.to_string()), "{said}");

    // Pointed elsewhere: the next calls go to the new collector, none of them to the old.
    std::fs::write(&config_file, on(second.endpoint(), "gm-second").to_string()).expect("config");
    wait_events(&mut gm, 2);
    let before = first.records("span").len();
    gm.js("await gm.read_file({ path: 'a.txt' }); return 2");
    let spans = second.wait_for("span", "a span at the new collector", |s| has(s, "execute_tool read_file"));
    assert_eq!(named(&spans, "execute_tool read_file")[0]["resource"]["service.name"], "gm-second");
    assert!(!has(&first.records("span")[before..], "execute_tool read_file"), "the old collector got a new call");

    // A file that cannot be read leaves export as it was, and says so.
    std::fs::write(&config_file, "{ not json").expect("config");
    wait_events(&mut gm, 3);
    let events = gm.events_of("otel");
    assert!(events[2]["error"].is_string(), "{events:?}");

    // Turned off: nothing more is sent anywhere.
    std::fs::write(&config_file, r#"{"sandbox": {"mode": "off"}}"#).expect("config");
    wait_events(&mut gm, 4);
    assert_eq!(gm.events_of("otel")[3]["exporting"], Value::Null);
    std::thread::sleep(Duration::from_millis(500));
    let sent = second.records("span").len();
    gm.js("await gm.stat_file({ path: 'a.txt' }); return 3");
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(second.records("span").len(), sent, "export went on after it was turned off");
    common::shut_down(gm);
}

/// A worker on the default surface with no export, in a HOME of its own whose config file
/// (returned) it follows every `poll_ms`; its workspace has `a.txt`.
fn followed_worker(batch_delay_ms: &str, poll_ms: &str) -> (Gm, PathBuf, tempfile::TempDir) {
    let home = tempfile::tempdir().expect("home");
    std::fs::create_dir_all(home.path().join(".gmnew")).expect("gmnew");
    let config_file = home.path().join(".gmnew/config.json");
    let home_s = home.path().to_string_lossy().into_owned();
    let env = [("HOME", home_s.as_str()), ("OTEL_BSP_SCHEDULE_DELAY", batch_delay_ms), ("GM_CONFIG_POLL_MS", poll_ms)];
    let mut gm = Gm::start_in_temp(&[], &env);
    gm.ready();
    std::fs::write(gm.workspace.join("a.txt"), "x").expect("write");
    (gm, config_file, home)
}

/// Waits until the worker logged `n` `otel` events.
fn wait_events(gm: &mut Gm, n: usize) {
    let deadline = Instant::now() + TIMEOUT;
    while gm.events_of("otel").len() < n {
        assert!(Instant::now() < deadline, "{n} otel events: {:?}", gm.events_of("otel"));
        std::thread::sleep(Duration::from_millis(25));
    }
}

#[test]
fn calls_go_on_unharmed_while_the_config_file_turns_export_on_and_off_under_them() {
    let receiver = Receiver::start(&[]);
    let (mut gm, config_file, _home) = followed_worker("50", "10");
    let on = json!({ "otel": { "endpoint": receiver.endpoint() } }).to_string();
    // Thirty switches, one every 30 ms, while bodies make calls the whole time.
    let toggler = std::thread::spawn(move || {
        for n in 0..30 {
            let text =
                if n % 2 == 0 { on.clone() } else { format!("{{\"sandbox\": {{\"mode\": \"off\"}}, \"n\": {n}}}") };
            std::fs::write(&config_file, text).expect("config");
            std::thread::sleep(Duration::from_millis(30));
        }
    });
    let mut rounds = 0;
    while !toggler.is_finished() || rounds < 3 {
        let r = gm.js("let ok = 0;
             for (let i = 0; i < 200; i++) { const s = await gm.stat_file({ path: 'a.txt' }); if (s.exists) ok++; }
             return ok;");
        assert_eq!(r, 200, "round {rounds}");
        rounds += 1;
    }
    toggler.join().expect("toggler");
    let events = gm.events_of("otel");
    assert!(events.len() > 3, "the worker followed the switches: {events:?}");
    assert_eq!(gm.js("return (await gm.stat_file({ path: 'a.txt' })).exists"), true);
    common::shut_down(gm);
}

#[test]
fn metrics_count_busy_run_code_engines_and_time_the_search_index_build() {
    let receiver = Receiver::start(&[]);
    let (mut gm, _home) = exporting_worker(&receiver, "notes.txt", "the quick brown fox\n");
    // A body that keeps its engine busy across a few metric exports (every 300 ms here).
    gm.js("const t = Date.now(); while (Date.now() - t < 1200) {} return 1");
    let busy = receiver.wait_for("metric", "a busy engine", |m| {
        named(m, "gm.run_code.engines.busy")
            .iter()
            .flat_map(|m| m["points"].as_array().into_iter().flatten())
            .any(|p| p["value"].as_i64() >= Some(1))
    });
    let engines = named(&busy, "gm.run_code.engines.busy");
    assert!(engines.iter().all(|m| m["kind"] == "sum" && m["monotonic"] == false), "{engines:?}");
    // The first search builds the index in the background; its end records the build's time.
    gm.js("return (await gm.search({ query: 'quick fox' })).hits.length");
    let built = receiver.wait_for("metric", "the index build's time", |m| has(m, "gm.search.index.build.duration"));
    let build = named(&built, "gm.search.index.build.duration");
    assert!(build.iter().all(|m| m["kind"] == "histogram" && m["unit"] == "s"), "{build:?}");
    let count: u64 = build
        .iter()
        .flat_map(|m| m["points"].as_array().into_iter().flatten())
        .filter_map(|p| p["count"].as_u64())
        .max()
        .unwrap_or(0);
    assert!(count >= 1, "{build:?}");
    // Idle again: the last export says no engine is busy.
    std::thread::sleep(Duration::from_millis(700));
    let after = receiver.records("metric");
    let last = named(&after, "gm.run_code.engines.busy").last().map(|m| m["points"][0]["value"].clone());
    assert_eq!(last, Some(json!(0)), "idle engines");
    stop_worker(&gm.workspace);
}
