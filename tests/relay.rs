//! The relay: `gm serve` keeps the host's connection when its worker dies. Workers are killed
//! with SIGKILL, the way the OOM killer ends them; the host sees one `worker_restarted` error
//! for the call it had in flight and goes on, with the read gate, the run and its jobs intact.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{read_log, Gm, TIMEOUT};
use serde_json::{json, Value};

/// The pid in the `start` event of the `n`th worker (0 = the first), once it is logged.
fn worker_pid(log: &Path, n: usize) -> u32 {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let starts: Vec<Value> = read_log(log).into_iter().filter(|e| e["kind"] == "start").collect();
        if let Some(start) = starts.get(n) {
            return start["pid"].as_u64().expect("pid") as u32;
        }
        assert!(Instant::now() < deadline, "worker {n} never logged its start: {starts:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A call made just after a kill: written in the instant the worker was dying it is answered
/// `worker_restarted` (and did not run); then it is made again.
fn ok_after_a_death(gm: &mut Gm, tool: &str, args: Value) -> Value {
    let r = gm.call(tool, args.clone());
    if r["structuredContent"]["error"]["code"] == "worker_restarted" {
        return gm.call_ok(tool, args);
    }
    assert_eq!(r["isError"], false, "{r}");
    r["structuredContent"].clone()
}

fn kill9(pid: u32) {
    // SAFETY: kill(2) on a worker pid this test read from the log.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0, "kill -9 {pid}");
}

fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + TIMEOUT;
    while !path.exists() {
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends a run_code body that marks `started`, then blocks in a shell; returns its id.
fn send_blocking_body(gm: &mut Gm, id: i64) -> Value {
    let code = "await gm.write_file({ path: 'started', content: 'x' }); await gm.run_shell({ command: 'sleep 60' }); return 'done';";
    gm.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": code } } }));
    json!(id)
}

#[test]
fn killing_the_worker_answers_the_call_in_flight_and_the_connection_goes_on() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let step = gm.call_ok("next_context", json!({ "task": "survive a crash" }));
    assert_eq!(step["step"], 1);
    gm.js("await gm.job_start({ name: 'sleeper', command: 'sleep 120' }); return 1;");
    let first = worker_pid(&gm.log_path(), 0);
    assert_ne!(first, gm.pid(), "the worker is a process of its own");

    let id = send_blocking_body(&mut gm, 900);
    wait_for_file(&gm.workspace.join("started"));
    kill9(first);

    let lost = gm.recv_id(&id);
    let result = &lost["result"];
    assert_eq!(result["isError"], true, "{lost}");
    let error = &result["structuredContent"]["error"];
    assert_eq!(error["code"], "worker_restarted", "{lost}");
    assert!(error["message"].as_str().unwrap().contains("SIGKILL"), "names the cause: {error}");

    // The replayed handshake's answers are the relay's: the next thing the host hears is the
    // answer to its own next call.
    gm.send(&json!({ "jsonrpc": "2.0", "id": 901, "method": "ping" }));
    let next = gm.recv(TIMEOUT).expect("an answer");
    assert_eq!(next["id"], 901, "nothing else reached the host first: {next}");

    // The gate stays open, the run and its step carry over, the job is adopted.
    assert_eq!(gm.js("return 6 * 7;"), 42);
    let step = gm.call_ok("next_context", json!({}));
    assert_eq!(step["task"], "survive a crash", "{step}");
    assert_eq!(step["step"], 2, "{step}");
    let job = gm.js("return await gm.job_status({ name: 'sleeper' });");
    assert_eq!(job["state"], "running", "{job}");

    let second = worker_pid(&gm.log_path(), 1);
    assert_ne!(first, second);
    let starts = gm.events_of("start");
    assert_eq!(starts.len(), 2, "{starts:?}");
    assert_eq!(starts[0]["relay"]["restarts"], 0);
    assert_eq!(starts[1]["relay"]["restarts"], 1);
    let seqs: Vec<u64> = gm.log_events().iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "no log line lost or repeated: {seqs:?}");

    gm.js("await gm.job_stop({ name: 'sleeper' }); return 1;");
    gm.close_stdin();
    assert_eq!(gm.wait_exit(TIMEOUT).and_then(|s| s.code()), Some(0));
}

/// Kills the worker and sends ten calls in the same instant; checks each is answered exactly
/// once, by the dying worker's relay (`worker_restarted`) or by the next worker, and that the
/// connection then works.
fn race_a_death(gm: &mut Gm, worker: usize, first_id: i64, signal: i32) {
    let pid = worker_pid(&gm.log_path(), worker);
    // SAFETY: kill(2) on a worker pid read from the log.
    assert_eq!(unsafe { libc::kill(pid as i32, signal) }, 0);
    let ids: Vec<i64> = (first_id..first_id + 10).collect();
    for id in &ids {
        gm.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": "return 'ok';" } } }));
    }
    for (id, content) in answers_once(gm, &ids) {
        let restarted = content["error"]["code"] == "worker_restarted";
        assert!(content["result"] == "ok" || restarted, "{id}: {content}");
    }
    assert_eq!(gm.js("return 'after';"), "after");
}

/// The answers to `ids`, each call's structured content: every call answered exactly once,
/// no answer to any other call (notifications are skipped).
fn answers_once(gm: &mut Gm, ids: &[i64]) -> std::collections::BTreeMap<i64, Value> {
    let mut answered = std::collections::BTreeMap::new();
    while answered.len() < ids.len() {
        let reply = gm.recv(TIMEOUT).unwrap_or_else(|| {
            let lost: Vec<_> = ids.iter().filter(|id| !answered.contains_key(*id)).collect();
            panic!("calls never answered: {lost:?}")
        });
        if reply.get("method").is_some() {
            continue;
        }
        let id = reply["id"].as_i64().expect("an id");
        assert!(ids.contains(&id), "an answer to no call of this round: {reply}");
        let content = reply["result"]["structuredContent"].clone();
        assert!(answered.insert(id, content).is_none(), "id {id} answered twice");
    }
    answered
}

#[test]
fn calls_racing_the_death_of_the_worker_each_get_one_answer() {
    // Many rounds, each on a fresh connection (a relay gives up after five deaths a minute).
    for round in 0..8 {
        let mut gm = Gm::start(&[]);
        gm.ready();
        for death in 0..3 {
            race_a_death(&mut gm, death, 1000 * (round * 3 + death as i64 + 1), libc::SIGKILL);
        }
    }
}

#[test]
fn an_abort_or_a_quit_of_the_worker_is_named_and_survived() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    for (n, (signal, name)) in [(libc::SIGABRT, "SIGABRT"), (libc::SIGQUIT, "SIGQUIT")].into_iter().enumerate() {
        let id = send_blocking_body(&mut gm, 500 + n as i64);
        wait_for_file(&gm.workspace.join("started"));
        // SAFETY: kill(2) on a worker pid read from the log.
        assert_eq!(unsafe { libc::kill(worker_pid(&gm.log_path(), n) as i32, signal) }, 0);
        let lost = gm.recv_id(&id);
        let error = &lost["result"]["structuredContent"]["error"];
        assert_eq!(error["code"], "worker_restarted", "{lost}");
        assert!(error["message"].as_str().unwrap().contains(name), "{error}");
        std::fs::remove_file(gm.workspace.join("started")).unwrap();
        assert_eq!(gm.js("return 3;"), 3);
    }
}

#[test]
fn a_call_in_flight_on_the_tools_surface_gets_a_tool_error_and_other_requests_a_jsonrpc_error() {
    let mut gm = Gm::start(&["--surface", "tools"]);
    gm.ready();
    gm.send(&json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": { "name": "run_shell", "arguments": { "command": "touch started; sleep 60" } } }));
    wait_for_file(&gm.workspace.join("started"));
    kill9(worker_pid(&gm.log_path(), 0));
    let lost = gm.recv_id(&json!(5));
    assert_eq!(lost["result"]["structuredContent"]["error"]["code"], "worker_restarted", "{lost}");
    assert_eq!(gm.call_ok("stat_file", json!({ "path": "started" }))["exists"], true);
}

#[test]
fn five_deaths_within_a_minute_give_a_final_error_naming_the_causes_and_the_log() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    for n in 0..5 {
        kill9(worker_pid(&gm.log_path(), n));
    }
    // A call written in the instant the fifth worker was dying is answered as lost; the
    // relay has given up by the next one.
    let mut r = gm.call("run_code", json!({ "code": "return 1;" }));
    if r["structuredContent"]["error"]["code"] == "worker_restarted" {
        r = gm.call("run_code", json!({ "code": "return 1;" }));
    }
    let exits = std::fs::read_to_string(gm.workspace.join(".gm/worker-exits.jsonl")).unwrap_or_default();
    assert_eq!(r["isError"], true, "{r}\nexits:\n{exits}");
    let error = &r["structuredContent"]["error"];
    assert_eq!(error["code"], "worker_failed", "{r}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("5 times"), "{message}");
    assert!(message.contains("SIGKILL"), "{message}");
    assert!(message.contains(&gm.log_path().display().to_string()), "{message}");
    // Any other request too, and the relay stays up to say so.
    let ping = gm.request("ping", json!({}));
    assert_eq!(ping["error"]["data"]["code"], "worker_failed", "{ping}");
    assert_eq!(read_log(&gm.log_path()).iter().filter(|e| e["kind"] == "start").count(), 5);
    gm.close_stdin();
    assert_eq!(gm.wait_exit(TIMEOUT).and_then(|s| s.code()), Some(1));
}

#[test]
fn no_relay_serves_in_this_process() {
    let mut gm = Gm::start(&["--no-relay"]);
    gm.ready();
    let start = gm.events_of("start").remove(0);
    assert_eq!(start["pid"], gm.pid(), "{start}");
    assert!(start["relay"].is_null(), "{start}");
}

#[test]
fn a_stop_signal_to_the_relay_ends_its_session_and_the_worker_leaves_when_idle() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let worker = worker_pid(&gm.log_path(), 0);
    gm.signal(libc::SIGTERM);
    let status = gm.wait_exit(TIMEOUT).expect("the relay exits");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    let ends: Vec<Value> = read_log(&gm.log_path()).into_iter().filter(|e| e["kind"] == "session-end").collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!((ends[0]["reason"].as_str(), ends[0]["signal"].as_str()), (Some("signal"), Some("SIGTERM")));
    assert!(gm_actors::sys::process_exists(worker), "the worker stays for other sessions");
    // With no session left it goes after its idle grace (3 s in tests), saying why.
    let deadline = Instant::now() + TIMEOUT;
    while gm_actors::sys::process_exists(worker) {
        assert!(Instant::now() < deadline, "the idle worker never left");
        std::thread::sleep(Duration::from_millis(50));
    }
    let last = read_log(&gm.log_path()).pop().expect("events");
    assert_eq!((last["kind"].as_str(), last["reason"].as_str()), (Some("stop"), Some("idle")), "{last}");
}

/// A process's resident memory now and at its peak, from /proc, in KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let field = |name: &str| -> u64 {
        let line = status.lines().find(|l| l.starts_with(name)).expect(name);
        line.split_whitespace().nth(1).and_then(|n| n.parse().ok()).expect("a number")
    };
    (field("VmRSS:"), field("VmHWM:"))
}

#[test]
fn a_60_mib_line_passes_through_the_relay_held_once() {
    let mut gm = Gm::start(&["--surface", "tools"]);
    gm.ready();
    let (before, _) = rss_kib(gm.pid());
    let content = format!("{}\n", "a".repeat((1 << 20) - 1)).repeat(60);
    let written = gm.call_ok("write_file", json!({ "path": "big.txt", "content": content }));
    assert_eq!(written["bytes"], 60 << 20, "{written}");
    drop(content);
    let read = gm.call("read_file", json!({ "path": "big.txt", "limit": 1 }));
    assert_eq!(read["isError"], false, "{read}");
    let (_, peak) = rss_kib(gm.pid());
    // One copy of the line is 60 MiB; a second would add 60 more.
    let grew = peak.saturating_sub(before);
    assert!(grew < 90 * 1024, "the relay grew by {grew} KiB for a 60 MiB line (from {before} KiB)");
}

/// The `build.json` of a development build of `version` for this target.
fn build_json(dir: &Path, version: &str) {
    let info = gm_actors::builds::BuildInfo {
        version: version.into(),
        target: gm_actors::builds::TARGET.into(),
        release: false,
    };
    std::fs::write(dir.join("build.json"), serde_json::to_string(&info).unwrap()).unwrap();
}

/// A build folder holding a copy of the gm under test, under its own version.
fn build_of_this_gm(dir: &Path, version: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::copy(common::gm_bin(), dir.join("gm")).unwrap();
    build_json(dir, version);
}

#[test]
fn a_restarted_worker_runs_the_build_current_points_at_now() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join(".gmnew");
    build_of_this_gm(&home.path().join("a"), "0.0.1-a");
    gm_actors::builds::stage(&home.path().join("a"), &root).unwrap();

    let workspace = tempfile::tempdir().unwrap();
    let registered = gm_actors::builds::current_exe_path(&root);
    let mut cmd = std::process::Command::new(&registered);
    cmd.arg("serve").current_dir(workspace.path()).env("GM_DEFAULTS_DIR", common::no_child_servers());
    let client = gm_actors::mcp_client::stdio::StdioClient::spawn(cmd, gm_actors::mcp_client::stdio::Stderr::Inherit)
        .expect("spawn the installed gm");
    let mut gm = Gm::from_client(client, workspace.path());
    gm.ready();
    let log = workspace.path().join(".gm/log.jsonl");
    let first = worker_pid(&log, 0);

    // A new build lands while the session runs; the running worker keeps its files.
    build_of_this_gm(&home.path().join("b"), "0.0.1-b");
    gm_actors::builds::stage(&home.path().join("b"), &root).unwrap();
    assert_eq!(gm.js("return 1;"), 1);
    kill9(first);
    worker_pid(&log, 1);
    assert_eq!(gm.js("return 2;"), 2);

    let exes: Vec<String> =
        gm.events_of("start").iter().map(|e| e["exe"].as_str().unwrap_or_default().to_string()).collect();
    assert!(exes[0].ends_with("versions/0.0.1-a/gm"), "{exes:?}");
    assert!(exes[1].ends_with("versions/0.0.1-b/gm"), "{exes:?}");
}

#[test]
fn the_calls_of_a_batch_in_flight_are_each_answered_when_the_worker_dies() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-03-26");
    gm.read_skill();
    let blocking = "await gm.write_file({ path: 'started', content: 'x' }); await gm.run_shell({ command: 'sleep 60' }); return 1;";
    let batch = json!([
        { "jsonrpc": "2.0", "id": 71, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": blocking } } },
        { "jsonrpc": "2.0", "id": 72, "method": "ping" },
        { "jsonrpc": "2.0", "method": "notifications/progress-free" },
    ]);
    gm.send(&batch);
    wait_for_file(&gm.workspace.join("started"));
    kill9(worker_pid(&gm.log_path(), 0));
    // The batch's replies are sent together when the last is ready, so neither came: the
    // relay answers both, one line each.
    let mut seen = std::collections::BTreeMap::new();
    while seen.len() < 2 {
        let reply = gm.recv(TIMEOUT).expect("each call of the batch is answered");
        let id = reply["id"].as_i64().expect("an id");
        assert!(seen.insert(id, reply.clone()).is_none(), "{id} answered twice");
    }
    assert_eq!(seen[&71]["result"]["structuredContent"]["error"]["code"], "worker_restarted", "{:?}", seen[&71]);
    assert_eq!(seen[&72]["error"]["data"]["code"], "worker_restarted", "{:?}", seen[&72]);
    assert_eq!(gm.js("return 'on';"), "on");
}

/// A build folder whose `gm --version` answers as `version` but that cannot serve: it prints
/// an error and exits when started as a worker (a build that passed the Updater's check and
/// still fails, say on a library it loads later).
fn broken_build(dir: &Path, version: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = --version ]; then echo \"gm {version}\"; exit 0; fi\necho 'gm: cannot load libfuture.so' >&2\nexit 1\n"
    );
    std::fs::write(dir.join("gm"), script).unwrap();
    std::fs::set_permissions(dir.join("gm"), std::fs::Permissions::from_mode(0o755)).unwrap();
    build_json(dir, version);
}

#[test]
fn an_update_that_cannot_start_a_worker_is_rolled_back_to_the_previous_build() {
    let home = tempfile::tempdir().unwrap();
    let root = home.path().join(".gmnew");
    build_of_this_gm(&home.path().join("a"), "0.0.1");
    gm_actors::builds::stage(&home.path().join("a"), &root).unwrap();

    let workspace = tempfile::tempdir().unwrap();
    let mut cmd = std::process::Command::new(gm_actors::builds::current_exe_path(&root));
    cmd.arg("serve")
        .current_dir(workspace.path())
        .env("HOME", home.path())
        .env("GM_DEFAULTS_DIR", common::no_child_servers())
        .env("GM_WORKER_IDLE_MS", common::TEST_IDLE_MS);
    let client = gm_actors::mcp_client::stdio::StdioClient::spawn(cmd, gm_actors::mcp_client::stdio::Stderr::Inherit)
        .expect("spawn the installed gm");
    let mut gm = Gm::from_client(client, workspace.path());
    gm.ready();
    gm.call_ok("next_context", json!({ "task": "outlive a bad update" }));
    let log = workspace.path().join(".gm/log.jsonl");

    // The Updater stages a build that passes its --version check but cannot serve.
    broken_build(&home.path().join("b"), "0.0.2");
    gm_actors::updater::state::record_staged(&root, "0.0.2").unwrap();
    gm_actors::builds::stage_update(&home.path().join("b"), &root).unwrap();
    assert_eq!(gm_actors::builds::current_version(&root).as_deref(), Some("0.0.2"));

    // The worker dies; the next start runs current: twice it fails, then the relay goes back.
    kill9(worker_pid(&log, 0));
    let step = ok_after_a_death(&mut gm, "next_context", json!({}));
    assert_eq!((step["task"].as_str(), step["step"].as_u64()), (Some("outlive a bad update"), Some(2)), "{step}");
    assert_eq!(gm_actors::builds::current_version(&root).as_deref(), Some("0.0.1"), "current is back");
    let bad = gm_actors::updater::state::bad(&root, "0.0.2").expect("the version is remembered as bad");
    assert!(bad.causes.iter().all(|c| c.contains("cannot load libfuture.so")), "{bad:?}");
    let rolled = gm.events_of("update").into_iter().find(|e| e["status"] == "rolled-back").expect("logged");
    assert_eq!((rolled["from"].as_str(), rolled["to"].as_str()), (Some("0.0.2"), Some("0.0.1")), "{rolled}");
    assert_eq!(rolled["causes"].as_array().map(Vec::len), Some(2), "{rolled}");
    let exes: Vec<String> =
        gm.events_of("start").iter().map(|e| e["exe"].as_str().unwrap_or_default().to_string()).collect();
    assert!(exes.iter().all(|e| e.ends_with("versions/0.0.1/gm")), "only the good build ever served: {exes:?}");
}

/// `gm serve` in `ws` with `args`, its stdin held open as a host's is: its exit status and
/// stderr, which must come within 2 s.
fn serve_that_cannot_start(ws: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = common::gm_command()
        .arg("serve")
        .args(args)
        .current_dir(ws)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let _held_open = child.stdin.take();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut err).expect("read");
            return (status.code(), err);
        }
        assert!(started.elapsed() < Duration::from_secs(2), "gm serve stayed up with a worker that cannot start");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_worker_that_cannot_start_stops_gm_serve_with_its_message() {
    let ws = tempfile::tempdir().unwrap();
    let (code, err) = serve_that_cannot_start(ws.path(), &["--mcp-config", "/no/such/servers.json"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("/no/such/servers.json"), "{err}");
    // A folder where the run log belongs: every gm checks `.gm/` before it writes there, so
    // the relay says so before any worker starts, once, with the fix.
    std::fs::create_dir_all(ws.path().join(".gm/log.jsonl")).unwrap();
    let (code, err) = serve_that_cannot_start(ws.path(), &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("remove") && err.contains("log.jsonl") && err.contains("a folder"), "{err}");
    assert_eq!(err.matches("log.jsonl").count(), 1, "said once: {err}");
}

#[test]
fn initialize_is_answered_while_the_worker_starts_and_the_session_is_initialized_as_asked() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(ws.join(".gm")).unwrap();
    // Holding the start lock keeps the relay from reaching (or starting) a worker.
    let held = gm_actors::state_file::lock(&ws.join(".gm/worker.lock"), true).unwrap().expect("lock");
    let mut gm = Gm::start_in(&ws, &[], &[]);
    gm.send(&json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": { "elicitation": {} }, "clientInfo": { "name": "early", "version": "1" } } }));
    let answer = gm.recv(TIMEOUT).expect("initialize answered with no worker reachable");
    assert_eq!(
        (answer["id"].as_i64(), answer["result"]["protocolVersion"].as_str()),
        (Some(1), Some("2025-06-18")),
        "{answer}"
    );
    assert_eq!(answer["result"]["serverInfo"]["name"], "gm");
    assert!(!ws.join(".gm/log.jsonl").exists(), "no worker has started yet");
    gm.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    gm.send(
        &json!({ "jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": { "uri": "skill://gm/SKILL.md" } }),
    );
    drop(held);
    // The worker's own answer to the initialize is not passed on: the next message is the
    // skill read's.
    let next = gm.recv(TIMEOUT).expect("the skill read's answer");
    assert_eq!(next["id"], 2, "{next}");
    assert_eq!(gm.js("return 6 * 7"), 42);
    let init: Vec<Value> = gm.events_of("initialize");
    assert_eq!(init.len(), 1, "{init:?}");
    assert_eq!(
        (init[0]["client"]["name"].as_str(), init[0]["protocolVersion"].as_str()),
        (Some("early"), Some("2025-06-18"))
    );
}

/// The inode of the pipe or socket behind a descriptor link in /proc (`pipe:[123]`).
fn link_inode(link: &Path) -> Option<u64> {
    let target = std::fs::read_link(link).ok()?;
    let text = target.to_str()?;
    let inner = text.strip_prefix("pipe:[").or_else(|| text.strip_prefix("socket:["))?;
    inner.strip_suffix(']')?.parse().ok()
}

#[test]
fn the_worker_reads_and_writes_the_hosts_own_stdin_and_answers_each_call_once_across_deaths() {
    let (mut gm, stdin) = Gm::start_with_own_pipe(&[]);
    gm.ready();
    let worker = worker_pid(&gm.log_path(), 0);
    // The host's stdin pipe is open in the worker itself: no process stands between them.
    // SAFETY: fstat(2) into a zeroed stat we own, on a descriptor we own.
    let host_pipe = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        assert_eq!(libc::fstat(std::os::fd::AsRawFd::as_raw_fd(&stdin), &mut st), 0);
        st.st_ino
    };
    let held: Vec<u64> = std::fs::read_dir(format!("/proc/{worker}/fd"))
        .expect("the worker's descriptors")
        .filter_map(|e| link_inode(&e.ok()?.path()))
        .collect();
    assert!(held.contains(&host_pipe), "the worker holds the host's stdin pipe {host_pipe}: {held:?}");
    let opened = gm.events_of("session");
    assert_eq!(opened[0]["direct"], true, "{opened:?}");
    // Nothing the worker starts inherits the host's pipes (a shell that kept the host's stdout
    // open would hide the worker's death from it, and could write into the host's stream).
    let listing = gm.js("return (await gm.run_shell({ command: 'ls -l /proc/$$/fd' })).stdout;");
    let listing = listing.as_str().expect("the shell's output");
    assert!(!listing.contains(&format!("pipe:[{host_pipe}]")), "a shell holds the host's stdin: {listing}");
    assert!(!listing.contains("gm-session-journal"), "a shell holds the journal: {listing}");
    // Big answers (the relay writes them) and small ones (the worker does) in one burst.
    for round in 0..3 {
        let ids: Vec<i64> = (0..40).map(|n| 100 * (round + 1) + n).collect();
        for id in &ids {
            let code = if id % 4 == 0 { "return 'x'.repeat(20000);" } else { "return 'small';" };
            gm.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": code } } }));
        }
        let mut answered = std::collections::HashSet::new();
        while answered.len() < ids.len() {
            let reply = gm.recv(TIMEOUT).expect("every call is answered");
            let id = reply["id"].as_i64().expect("an id");
            assert!(ids.contains(&id) && answered.insert(id), "one answer per call: {reply}");
            let expected = if id % 4 == 0 { 20000 } else { 5 };
            assert_eq!(reply["result"]["structuredContent"]["result"].as_str().map(str::len), Some(expected));
        }
        race_a_death(&mut gm, round as usize, 10_000 * (round + 1), libc::SIGKILL);
    }
    gm.close_stdin();
    assert_eq!(gm.wait_exit(TIMEOUT).and_then(|s| s.code()), Some(0));
}

#[test]
fn a_worker_that_does_not_take_the_hosts_stdio_is_relayed_and_its_death_survived() {
    // GM_WORKER_DIRECT=0: the worker acts as a build from before direct sessions.
    let mut gm = Gm::start_in_temp(&[], &[("GM_WORKER_DIRECT", "0")]);
    gm.ready();
    assert_eq!(gm.js("return 6 * 7;"), 42);
    let opened = gm.events_of("session");
    assert_eq!(opened[0]["direct"], Value::Null, "{opened:?}");
    for death in 0..2 {
        race_a_death(&mut gm, death, 1000 * (death as i64 + 1), libc::SIGKILL);
    }
    gm.close_stdin();
    assert_eq!(gm.wait_exit(TIMEOUT).and_then(|s| s.code()), Some(0));
}

#[test]
fn calls_racing_the_death_of_the_worker_each_get_one_answer_through_the_classic_relay() {
    for round in 0..3 {
        let mut gm = Gm::start_in_temp(&[], &[("GM_RELAY_DIRECT", "0")]);
        gm.ready();
        assert_eq!(gm.events_of("session")[0]["direct"], Value::Null);
        for death in 0..3 {
            race_a_death(&mut gm, death, 1000 * (round * 3 + death as i64 + 1), libc::SIGKILL);
        }
    }
}

#[test]
fn a_worker_stopped_by_a_signal_is_followed_by_a_new_one_and_the_host_stays_connected() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let first = worker_pid(&gm.log_path(), 0);
    // SAFETY: kill(2) on a worker pid read from the log.
    assert_eq!(unsafe { libc::kill(first as i32, libc::SIGTERM) }, 0);
    // Read from the file, not through a ping: a ping that reaches the worker as it stops is
    // answered `worker_restarted`.
    let deadline = Instant::now() + TIMEOUT;
    while !read_log(&gm.log_path()).iter().any(|e| e["kind"] == "stop") {
        assert!(Instant::now() < deadline, "the worker never logged its stop");
        std::thread::sleep(Duration::from_millis(20));
    }
    // Its session ended with it, but not the host's: the relay finds the next worker.
    assert_eq!(ok_after_a_death(&mut gm, "run_code", json!({ "code": "return 7;" }))["result"], 7);
    assert_ne!(worker_pid(&gm.log_path(), 1), first);
    // Calls written while a worker stops on its own are each answered once: none is taken
    // from stdin by the leaving worker after its session ended.
    for n in 1..4 {
        race_a_death(&mut gm, n, 1000 * n as i64, libc::SIGTERM);
    }
    assert_eq!(gm.events_of("start").len(), 5, "a worker for each stop");
    gm.close_stdin();
    assert_eq!(gm.wait_exit(TIMEOUT).and_then(|s| s.code()), Some(0));
}

/// A worker stopped by SIGTERM lingers while its child servers stop (one that ignores the end
/// of its stdin holds it a grace of 250 ms, then a SIGTERM). Calls the host writes once the
/// worker began to stop are the next worker's: the leaving one takes none of them from stdin,
/// and each runs (taken, it could only have been answered `worker_restarted`).
#[test]
fn calls_written_while_a_stopping_worker_lingers_are_run_by_the_next_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    std::fs::create_dir_all(ws.join(".gm")).expect(".gm");
    let server = json!({ "command": env!("CARGO_BIN_EXE_mcp-test-server"), "args": ["--ignore-eof"] });
    std::fs::write(ws.join(".gm/mcp.json"), json!({ "mcpServers": { "t": server } }).to_string()).expect("mcp.json");
    common::approve_workspace_servers(&ws);
    let home = common::trust_home();
    let mut gm = Gm::start_in(&ws, &[], &[("HOME", home.to_str().expect("utf-8"))]);
    gm.ready();
    for round in 0..3 {
        // The child server runs (a new worker starts it in the background): the worker will
        // wait for it when it stops.
        let deadline = Instant::now() + TIMEOUT;
        while !gm.js("try { return (await gm.t_pid({})).structuredContent.pid; } catch (e) { return null; }").is_i64() {
            assert!(Instant::now() < deadline, "the child server never came up");
            std::thread::sleep(Duration::from_millis(50));
        }
        let worker = worker_pid(&gm.log_path(), round);
        let holder: Value =
            serde_json::from_slice(&std::fs::read(ws.join(".gm/worker.pid")).expect("worker.pid")).expect("JSON");
        let socket = std::path::PathBuf::from(holder["socket"].as_str().expect("the worker's socket"));
        // SAFETY: kill(2) on a worker pid read from the log.
        assert_eq!(unsafe { libc::kill(worker as i32, libc::SIGTERM) }, 0);
        // The socket goes first thing when a worker stops.
        let deadline = Instant::now() + TIMEOUT;
        while socket.exists() {
            assert!(Instant::now() < deadline, "the worker never began to stop");
            std::thread::sleep(Duration::from_millis(1));
        }
        // A call every 5 ms over the worker's lingering and the next one's start.
        let ids: Vec<i64> = (0..60).map(|n| 10_000 * (round as i64 + 1) + n).collect();
        for id in &ids {
            gm.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": "return 'ok';" } } }));
            std::thread::sleep(Duration::from_millis(5));
        }
        for (id, content) in answers_once(&mut gm, &ids) {
            assert_eq!(content["result"], "ok", "round {round}, call {id}: {content}");
        }
        assert_ne!(worker_pid(&gm.log_path(), round + 1), worker);
    }
    gm.close_stdin();
    assert_eq!(gm.wait_exit(TIMEOUT).and_then(|s| s.code()), Some(0));
}

#[test]
fn a_host_on_sockets_as_node_gives_its_children_is_served_directly_across_a_death() {
    use std::io::{BufRead, Write};
    use std::os::unix::net::UnixStream;
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    // libuv (Node) hands a child socket pairs, not pipes, for its stdin and stdout.
    let (mut to_gm, gm_in) = UnixStream::pair().expect("pair");
    let (from_gm, gm_out) = UnixStream::pair().expect("pair");
    let mut child = common::gm_command()
        .arg("serve")
        .current_dir(&ws)
        .stdin(std::process::Stdio::from(std::os::fd::OwnedFd::from(gm_in)))
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(gm_out)))
        .spawn()
        .expect("spawn gm");
    from_gm.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let mut replies = std::io::BufReader::new(from_gm);
    let mut send = |v: Value| to_gm.write_all(format!("{v}\n").as_bytes()).expect("write");
    let mut recv = || {
        let mut line = String::new();
        replies.read_line(&mut line).expect("a reply");
        serde_json::from_str::<Value>(&line).expect("JSON")
    };
    send(
        json!({ "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": { "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "t", "version": "0" } } }),
    );
    assert_eq!(recv()["id"], 1);
    send(json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    send(json!({ "jsonrpc": "2.0", "id": 2, "method": "resources/read", "params": { "uri": "skill://gm/SKILL.md" } }));
    assert_eq!(recv()["id"], 2);
    let log = ws.join(".gm/log.jsonl");
    for death in 0..2 {
        let first = 100 * (death + 1);
        for id in first..first + 30 {
            let code = if id % 5 == 0 { "return 'x'.repeat(20000);" } else { "return 'ok';" };
            send(
                json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": code } } }),
            );
        }
        let mut answered = std::collections::HashSet::new();
        while answered.len() < 30 {
            let reply = recv();
            let id = reply["id"].as_i64().expect("an id");
            assert!((first..first + 30).contains(&id) && answered.insert(id), "one answer per call: {reply}");
            assert_eq!(reply["result"]["isError"], false, "{reply}");
        }
        kill9(worker_pid(&log, death as usize));
        send(
            json!({ "jsonrpc": "2.0", "id": 999 + death, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": "return 1;" } } }),
        );
        let reply = recv();
        assert_eq!(reply["id"], 999 + death);
        let outcome = &reply["result"]["structuredContent"];
        assert!(outcome["result"] == 1 || outcome["error"]["code"] == "worker_restarted", "{reply}");
    }
    let opened: Vec<Value> = read_log(&log).into_iter().filter(|e| e["kind"] == "session").collect();
    assert_eq!(opened[0]["direct"], true, "{opened:?}");
    // The host leaves: its end of gm's stdin closes.
    drop(to_gm);
    let status = child.wait().expect("gm exits");
    assert_eq!(status.code(), Some(0));
}

/// A call the worker is running when it is told to stop, and that ends within the stop's
/// grace, is answered with its result: a stop does not lose a call it could finish (a call
/// read just before a signal handled late was answered `worker_restarted`).
#[test]
fn a_call_that_ends_soon_after_the_worker_is_told_to_stop_is_answered() {
    for round in 0..5 {
        let mut gm = Gm::start(&[]);
        gm.ready();
        let pid = worker_pid(&gm.log_path(), 0);
        gm.send(&json!({ "jsonrpc": "2.0", "id": "soon", "method": "tools/call", "params": { "name": "run_code",
            "arguments": { "code": "const t = Date.now(); while (Date.now() - t < 60) {} return 'done';" } } }));
        // The body is running when the signal comes.
        std::thread::sleep(Duration::from_millis(20));
        // SAFETY: kill(2) on a worker pid read from the log.
        assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGTERM) }, 0);
        let reply = loop {
            let msg = gm.recv(TIMEOUT).expect("an answer");
            if msg["id"] == "soon" {
                break msg;
            }
        };
        assert_eq!(reply["result"]["structuredContent"]["result"], "done", "round {round}: {reply}");
        gm.close_stdin();
        let _ = gm.wait_exit(TIMEOUT);
    }
}
