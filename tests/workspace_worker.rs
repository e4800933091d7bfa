//! One worker per workspace, shared by every session: several `gm serve` relays in one folder
//! reach one worker, one log, one scheduler and one index, each with its own run; a second
//! workspace has its own worker; `gm status` shows them.

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{gm_command, read_log, Gm, TIMEOUT};
use serde_json::{json, Value};

fn starts(log: &Path) -> Vec<Value> {
    read_log(log).into_iter().filter(|e| e["kind"] == "start").collect()
}

/// The pid of the one worker that served `log`'s workspace so far (its start event is written
/// within a few milliseconds of its start).
fn the_worker(log: &Path) -> u32 {
    wait_until("the worker's start event", || !starts(log).is_empty());
    let starts = starts(log);
    assert_eq!(starts.len(), 1, "one worker: {starts:?}");
    starts[0]["pid"].as_u64().expect("pid") as u32
}

/// Two hosts' sessions in one new workspace, read gates open; the second with `b_args`.
fn two_sessions(b_args: &[&str]) -> (tempfile::TempDir, std::path::PathBuf, Gm, Gm) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let mut a = Gm::start_in(&ws, &[], &[]);
    a.ready();
    let mut b = Gm::start_in(&ws, b_args, &[]);
    b.ready();
    (dir, ws, a, b)
}

fn gm_status(workspace: &Path) -> Value {
    let out = gm_command().args(["status", "--json"]).current_dir(workspace).output().expect("gm status runs");
    // 3: no worker serves the workspace.
    assert!(matches!(out.status.code(), Some(0 | 3)), "gm status: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("gm status --json prints JSON")
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + TIMEOUT;
    while !done() {
        assert!(Instant::now() < deadline, "{what} never happened");
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Sends `n` calls at once (ids `first..first+n`) and collects every answer, checking each
/// is for one of them, comes once, and carries this session's own marker.
fn burst(gm: &mut Gm, first: i64, n: i64, marker: &str, tools_surface: bool) {
    for id in first..first + n {
        let params = if tools_surface {
            json!({ "name": "stat_file", "arguments": { "path": marker } })
        } else {
            json!({ "name": "run_code", "arguments": { "code": format!("await gm.stat_file({{ path: '{marker}' }}); return '{marker}-{id}';") } })
        };
        gm.send(&json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params }));
    }
    let mut seen = HashSet::new();
    while seen.len() < n as usize {
        let reply = gm.recv(TIMEOUT).expect("every call is answered");
        let id = reply["id"].as_i64().unwrap_or_else(|| panic!("an answer to no call of this session: {reply}"));
        assert!((first..first + n).contains(&id), "{marker}: answered a call it never made: {reply}");
        assert!(seen.insert(id), "{marker}: {id} answered twice");
        let content = &reply["result"]["structuredContent"];
        assert_eq!(reply["result"]["isError"], false, "{reply}");
        if tools_surface {
            assert_eq!(content["path"].as_str().map(|p| p.ends_with(marker)), Some(true), "{reply}");
        } else {
            assert_eq!(content["result"], format!("{marker}-{id}"), "{reply}");
        }
    }
}

#[test]
fn three_sessions_share_one_worker_and_one_log_and_each_is_answered_only_its_own_calls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    // Three hosts started at the same moment: one worker starts, under the lock.
    let handles: Vec<_> = (0..3)
        .map(|n| {
            let ws = ws.clone();
            std::thread::spawn(move || {
                let args: &[&str] = if n == 2 { &["--surface", "tools"] } else { &[] };
                let mut gm = Gm::start_in(&ws, args, &[]);
                gm.ready();
                gm
            })
        })
        .collect();
    let mut sessions: Vec<Gm> = handles.into_iter().map(|h| h.join().expect("a session opened")).collect();
    for (n, gm) in sessions.iter_mut().enumerate() {
        std::fs::write(ws.join(format!("m{n}")), "x").expect("marker");
        gm.call_ok("next_context", json!({ "task": format!("task {n}") }));
    }
    let worker = the_worker(&ws.join(".gm/log.jsonl"));

    let rounds: Vec<_> = sessions
        .into_iter()
        .enumerate()
        .map(|(n, mut gm)| {
            std::thread::spawn(move || {
                for round in 0..5 {
                    burst(&mut gm, 10_000 * (n as i64 + 1) + round * 100, 60, &format!("m{n}"), n == 2);
                }
                gm
            })
        })
        .collect();
    let mut sessions: Vec<Gm> = rounds.into_iter().map(|h| h.join().expect("no call went astray")).collect();

    let events = sessions[0].log_events();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().expect("seq")).collect();
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "seq strictly increasing across sessions");
    assert_eq!(seqs.iter().collect::<HashSet<_>>().len(), seqs.len(), "every seq unique");
    // One action per call made, each in its own session.
    let mut actions: BTreeMap<String, usize> = BTreeMap::new();
    for e in events.iter().filter(|e| e["kind"] == "action" && e["tool"] != "next_context") {
        *actions.entry(e["session"].as_str().expect("an action carries its session").to_owned()).or_default() += 1;
    }
    assert_eq!(actions.len(), 3, "{actions:?}");
    assert!(actions.values().all(|&n| n == 300), "{actions:?}");
    let code_calls = events.iter().filter(|e| e["kind"] == "code-call").count();
    assert_eq!(code_calls, 600, "one code-call per gm.stat_file of the two code sessions");
    assert_eq!(the_worker(&ws.join(".gm/log.jsonl")), worker, "still the one worker");

    // Each session has its own run.
    for (n, gm) in sessions.iter_mut().enumerate() {
        let step = gm.call_ok("next_context", json!({}));
        assert_eq!((step["task"].as_str(), step["step"].as_u64()), (Some(format!("task {n}").as_str()), Some(2)));
        let recent = step["recentEvents"].as_array().expect("recent events");
        let mine = recent.iter().all(|e| e["session"] == recent[0]["session"]);
        assert!(mine, "recent events are the session's own: {recent:?}");
    }
    let runs: HashSet<String> = std::fs::read_dir(ws.join(".gm/runs"))
        .expect("runs")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into())
        .collect();
    assert_eq!(runs.len(), 3, "{runs:?}");
}

#[test]
fn shells_of_two_sessions_never_overlap() {
    let (_dir, ws, mut a, mut b) = two_sessions(&["--surface", "tools"]);
    let shell = |name: &str| {
        format!("echo start $(date +%s%N) >> {name}.times; sleep 0.4; echo end $(date +%s%N) >> {name}.times")
    };
    for round in 0..3 {
        let code = format!("return (await gm.run_shell({{ command: '{}' }})).exitCode;", shell("a"));
        a.send(&json!({ "jsonrpc": "2.0", "id": round, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": code } } }));
        b.send(&json!({ "jsonrpc": "2.0", "id": round, "method": "tools/call", "params": { "name": "run_shell", "arguments": { "command": shell("b") } } }));
        assert_eq!(a.recv_id(&json!(round))["result"]["isError"], false);
        assert_eq!(b.recv_id(&json!(round))["result"]["isError"], false);
    }
    let spans = |name: &str| -> Vec<(u128, u128)> {
        let text = std::fs::read_to_string(ws.join(format!("{name}.times"))).expect("times");
        let stamps: Vec<u128> =
            text.lines().map(|l| l.split(' ').nth(1).expect("stamp").parse().expect("ns")).collect();
        stamps.chunks(2).map(|c| (c[0], c[1])).collect()
    };
    let mut all: Vec<(u128, u128)> = spans("a").into_iter().chain(spans("b")).collect();
    assert_eq!(all.len(), 6);
    all.sort();
    assert!(all.windows(2).all(|w| w[0].1 <= w[1].0), "two sessions' shells overlapped: {all:?}");
}

#[test]
fn an_edit_by_one_session_is_found_by_the_others_search_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    common::git(&ws, &["init", "-q"]);
    std::fs::write(ws.join("a.txt"), "nothing here\n").expect("write");
    common::git(&ws, &["add", "a.txt"]);
    let mut a = Gm::start_in(&ws, &[], &[]);
    a.ready();
    let mut b = Gm::start_in(&ws, &[], &[]);
    b.ready();
    assert_eq!(b.js("return (await gm.search({ query: 'zanzibarquux' })).hits.length;"), 0);
    a.js("await gm.write_file({ path: 'a.txt', content: 'the zanzibarquux line\\n' }); return 1;");
    let hits = b.js("return (await gm.search({ query: 'zanzibarquux' })).hits.map(h => h.path);");
    assert_eq!(hits, json!(["a.txt"]), "session b sees session a's edit");
}

#[test]
fn a_killed_worker_answers_each_session_its_own_calls_and_both_runs_go_on() {
    let (_dir, ws, mut a, mut b) = two_sessions(&[]);
    a.call_ok("next_context", json!({ "task": "a's task" }));
    b.call_ok("next_context", json!({ "task": "b's task" }));
    let log = ws.join(".gm/log.jsonl");
    let first = the_worker(&log);
    // The marker is written by a's shell itself: written before the shell, it let b's shell
    // (sent on seeing it) take the turn first under load, and b's call ended before the kill.
    let blocking = "await gm.run_shell({ command: 'touch a-started && sleep 60' }); return 1;";
    a.send(&json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": blocking } } }));
    wait_until("a's shell started", || ws.join("a-started").exists());
    // b's call waits behind a's shell (a shell runs alone): in flight too.
    b.send(&json!({ "jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": "await gm.run_shell({ command: 'true' }); return 'b';" } } }));
    std::thread::sleep(Duration::from_millis(200));
    // SAFETY: kill(2) on the worker's pid, read from the log.
    assert_eq!(unsafe { libc::kill(first as i32, libc::SIGKILL) }, 0);

    let lost_a = a.recv(TIMEOUT).expect("a is answered");
    assert_eq!(lost_a["id"], 7, "a hears of its own call only: {lost_a}");
    assert_eq!(lost_a["result"]["structuredContent"]["error"]["code"], "worker_restarted", "{lost_a}");
    let lost_b = b.recv(TIMEOUT).expect("b is answered");
    assert_eq!(lost_b["id"], 8, "b hears of its own call only: {lost_b}");
    assert_eq!(lost_b["result"]["structuredContent"]["error"]["code"], "worker_restarted", "{lost_b}");

    // Both go on, each with its run, on one new worker.
    let step_a = a.call_ok("next_context", json!({}));
    let step_b = b.call_ok("next_context", json!({}));
    assert_eq!((step_a["task"].as_str(), step_a["step"].as_u64()), (Some("a's task"), Some(2)));
    assert_eq!((step_b["task"].as_str(), step_b["step"].as_u64()), (Some("b's task"), Some(2)));
    assert_eq!(step_a["resumed"]["afterStep"], 1, "{step_a}");
    assert_eq!(a.js("return 'a on';"), "a on");
    assert_eq!(b.js("return 'b on';"), "b on");
    let starts = b.events_of("start");
    assert_eq!(starts.len(), 2, "one new worker for both sessions: {starts:?}");
}

#[test]
fn the_worker_leaves_after_the_idle_grace_once_every_host_has_gone() {
    let (_dir, ws, mut a, mut b) = two_sessions(&[]);
    let worker = the_worker(&ws.join(".gm/log.jsonl"));
    a.close_stdin();
    assert_eq!(a.wait_exit(TIMEOUT).and_then(|s| s.code()), Some(0));
    // One host left: the other keeps the worker past the grace.
    std::thread::sleep(Duration::from_millis(3_500));
    assert!(gm_actors::sys::process_exists(worker), "a session still uses the worker");
    assert_eq!(b.js("return 2;"), 2);
    b.close_stdin();
    assert_eq!(b.wait_exit(TIMEOUT).and_then(|s| s.code()), Some(0));
    let left = Instant::now();
    wait_until("the idle worker left", || !gm_actors::sys::process_exists(worker));
    assert!(left.elapsed() >= Duration::from_millis(2_500), "it waited its grace: {:?}", left.elapsed());
    let events = read_log(&ws.join(".gm/log.jsonl"));
    let last = events.last().expect("events");
    assert_eq!((last["kind"].as_str(), last["reason"].as_str()), (Some("stop"), Some("idle")), "{last}");
    assert_eq!(events.iter().filter(|e| e["kind"] == "session-end").count(), 2);
    assert_eq!(gm_status(&ws)["running"], false, "no worker serves it now");
}

#[test]
fn each_workspace_has_its_own_worker_and_gm_status_lists_its_sessions() {
    let one = tempfile::tempdir().expect("tempdir");
    let two = tempfile::tempdir().expect("tempdir");
    let (one, two) = (one.path().canonicalize().expect("c"), two.path().canonicalize().expect("c"));
    let mut a = Gm::start_in(&one, &[], &[]);
    a.ready();
    a.call_ok("next_context", json!({ "task": "first task" }));
    let mut b = Gm::start_in(&one, &["--surface", "tools"], &[]);
    b.initialize("2025-06-18");
    let mut c = Gm::start_in(&two, &[], &[]);
    c.ready();
    let (w1, w2) = (the_worker(&one.join(".gm/log.jsonl")), the_worker(&two.join(".gm/log.jsonl")));
    assert_ne!(w1, w2);

    let status = gm_status(&one);
    assert_eq!(status["running"], true, "{status}");
    let s = &status["status"];
    assert_eq!(s["worker"]["pid"], w1, "{s}");
    assert_eq!(s["worker"]["version"], env!("CARGO_PKG_VERSION"));
    assert!(s["worker"]["rssBytes"].as_u64().is_some_and(|b| b > 1 << 20), "{s}");
    let sessions = s["sessions"].as_array().expect("sessions");
    assert_eq!(sessions.len(), 2, "{s}");
    let versions: HashSet<&str> = sessions.iter().filter_map(|x| x["protocolVersion"].as_str()).collect();
    assert_eq!(versions, HashSet::from(["2025-11-25", "2025-06-18"]));
    assert!(sessions.iter().any(|x| x["run"]["task"] == "first task" && x["surface"] == "code"), "{s}");
    assert!(sessions.iter().all(|x| x["client"]["name"] == "gm-tests"), "{s}");
    // Each host's stdio was handed to the worker.
    assert!(sessions.iter().all(|x| x["direct"] == true), "{s}");
    assert_eq!(gm_status(&two)["status"]["sessions"].as_array().map(Vec::len), Some(1));

    let text = gm_command().arg("status").current_dir(&one).output().expect("gm status");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("pid {w1}")) && text.contains("sessions (2)"), "{text}");
}

#[test]
fn a_no_relay_gm_for_a_served_workspace_says_so_and_exits() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let mut a = Gm::start_in(&ws, &[], &[]);
    a.ready();
    let worker = the_worker(&ws.join(".gm/log.jsonl"));
    let out = gm_command()
        .args(["serve", "--no-relay"])
        .current_dir(&ws)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already served") && err.contains(&worker.to_string()), "{err}");
    assert_eq!(a.js("return 'still served';"), "still served");
}

#[test]
fn a_relay_joins_a_no_relay_gm_as_the_workspaces_worker() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let mut direct = Gm::start_in(&ws, &["--no-relay"], &[]);
    direct.ready();
    direct.call_ok("next_context", json!({ "task": "direct" }));
    let mut relayed = Gm::start_in(&ws, &[], &[]);
    relayed.ready();
    assert_eq!(relayed.js("return 5;"), 5);
    assert_eq!(the_worker(&ws.join(".gm/log.jsonl")), direct.pid(), "the --no-relay gm serves both");
    let step = relayed.call_ok("next_context", json!({}));
    assert_eq!(step["step"], 1, "the relayed session has a run of its own: {step}");
}

#[test]
fn a_peer_of_another_user_is_refused() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("skipped: playing another user needs root to setuid");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let runtime = tempfile::tempdir().expect("runtime dir");
    let xdg = runtime.path().to_str().expect("utf-8").to_owned();
    let mut a = Gm::start_in(&ws, &[], &[("XDG_RUNTIME_DIR", &xdg)]);
    a.ready();
    let socket_dir = runtime.path().join("gm");
    let socket = std::fs::read_dir(&socket_dir).expect("socket dir").next().expect("a socket").expect("entry").path();
    // Open the way so the stranger reaches the socket at all: only the worker's own check
    // stands between them.
    use std::os::unix::fs::PermissionsExt;
    for p in [runtime.path(), socket_dir.as_path(), socket.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    }
    let hello = r#"{"gm":"status"}"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(format!(
            "import os,socket\nos.setuid(65534)\ns=socket.socket(socket.AF_UNIX)\ns.connect({socket:?})\ntry:\n  s.sendall(b'{hello}\\n')\n  print(repr(s.recv(4096)))\nexcept ConnectionError:\n  print(repr(b''))"
        ))
        .output()
        .expect("python3");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "b''", "the stranger heard nothing");
    let refused = a.events_of("session").into_iter().find(|e| e["state"] == "refused").expect("logged");
    assert_eq!(refused["peer"]["uid"], 65534, "{refused}");
}

#[test]
fn a_host_that_comes_back_at_once_continues_its_run_every_time() {
    // The old relay's end and the new relay's hello can reach the worker in either order.
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let mut gm = Gm::start_in(&ws, &[], &[]);
    gm.initialize("2025-11-25");
    let first = gm.call_ok("next_context", json!({ "task": "keep going" }));
    for round in 2..12u64 {
        gm.signal(libc::SIGKILL);
        gm.wait_exit(TIMEOUT).expect("the relay died");
        gm = Gm::start_in(&ws, &[], &[]);
        gm.initialize("2025-11-25");
        let step = gm.call_ok("next_context", json!({}));
        assert_eq!((step["step"].as_u64(), &step["runId"]), (Some(round), &first["runId"]), "round {round}: {step}");
    }
}

#[test]
fn a_host_killed_while_its_worker_starts_leaves_a_worker_the_next_host_joins() {
    // With initialize answered before a worker is reached, a host may be gone before its
    // worker listens (or locks the workspace); the next host must join that worker, not fail
    // starting a second one. Run many times: the windows are a few milliseconds wide.
    for round in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().canonicalize().unwrap();
        let mut first = Gm::start_in(&ws, &[], &[]);
        first.initialize("2025-11-25");
        // SAFETY: kill(2) on the relay this test spawned.
        unsafe { libc::kill(first.pid() as i32, libc::SIGKILL) };
        std::thread::sleep(Duration::from_millis(round % 4));
        let mut second = Gm::start_in(&ws, &[], &[]);
        second.ready();
        assert_eq!(second.js("return 1 + 1"), 2, "round {round}");
        // Through the worker (a ping answers once its log is in the file): a reply can reach
        // the host before the log's write thread has written the worker's start.
        let workers: HashSet<u64> = second.events_of("start").iter().filter_map(|s| s["pid"].as_u64()).collect();
        assert_eq!(workers.len(), 1, "round {round}: one worker started: {workers:?}");
        // The host leaves first: a worker stopped under a connected host is restarted by its
        // relay, and would hold the workspace again.
        common::shut_down(second);
    }
}

/// A host's session in a fresh workspace, its worker listening on a socket in a runtime
/// folder of its own: (the host, the workspace, the worker's socket, the folders to keep).
fn host_and_worker_socket() -> (Gm, std::path::PathBuf, std::path::PathBuf, [tempfile::TempDir; 2]) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    let runtime = tempfile::tempdir().expect("runtime dir");
    let xdg = runtime.path().to_str().expect("utf-8").to_owned();
    let mut a = Gm::start_in(&ws, &[], &[("XDG_RUNTIME_DIR", &xdg)]);
    a.initialize("2025-11-25");
    // The relay answered initialize itself: a call makes sure the worker listens.
    a.call_ok("next_context", json!({}));
    let socket = std::fs::read_dir(runtime.path().join("gm")).expect("socket dir").next().expect("a socket");
    let socket = socket.expect("entry").path();
    (a, ws, socket, [dir, runtime])
}

/// A relay's hello may bring a pipe each way (SCM_RIGHTS): the worker welcomes it saying so
/// and the session speaks on the pipes, not the socket. A hello that names pipes and brings
/// none, or one of them only, is refused with the reason, and the worker serves on. Played
/// by a client written apart from gm's relay (Python's `socket.send_fds`).
#[test]
fn a_hello_that_brings_pipes_moves_the_session_onto_them_and_one_without_them_is_refused() {
    let (mut a, _ws, socket, _dirs) = host_and_worker_socket();
    let script = r#"
import json, os, socket, sys
path = sys.argv[1]
def hello(session):
    return (json.dumps({"gm": "hello", "protocol": 1, "session": session,
        "relay": {"pid": os.getpid(), "version": "0", "exe": None}, "surface": "tools",
        "pageSize": 200, "stepBudget": 100, "maxLineBytes": 1 << 20,
        "worker": {"maxInflight": 64, "mcpConfig": None}, "pipes": True}) + "\n").encode()
def welcome(s):
    f = s.makefile("rb")
    return json.loads(f.readline())
out = {}
# Pipes brought: the session's lines go on them.
to_w_r, to_w_w = os.pipe()
from_w_r, from_w_w = os.pipe()
s = socket.socket(socket.AF_UNIX); s.connect(path)
socket.send_fds(s, [hello("s-pipes-ok")], [to_w_r, from_w_w])
os.close(to_w_r); os.close(from_w_w)
out["welcome"] = welcome(s)
os.write(to_w_w, b'{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"p","version":"0"}}}\n')
reply = b""
while not reply.endswith(b"\n"):
    reply += os.read(from_w_r, 65536)
out["initialize"] = json.loads(reply)
os.close(to_w_w)
# Named and not brought.
for name, fds in [("none", []), ("one", [os.pipe()[0]])]:
    s = socket.socket(socket.AF_UNIX); s.connect(path)
    socket.send_fds(s, [hello("s-pipes-" + name)], fds) if fds else s.sendall(hello("s-pipes-" + name))
    out[name] = welcome(s)
print(json.dumps(out))
"#;
    let run = std::process::Command::new("python3").arg("-c").arg(script).arg(&socket).output().expect("python3");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let out: Value = serde_json::from_slice(&run.stdout).expect("json");
    assert_eq!(out["welcome"]["gm"], "welcome", "{out}");
    assert_eq!(out["welcome"]["pipes"], true, "{out}");
    assert_eq!(out["initialize"]["id"], 7, "the answer came on the pipe: {out}");
    assert!(out["initialize"]["result"]["serverInfo"].is_object(), "{out}");
    for name in ["none", "one"] {
        assert_eq!(out[name]["gm"], "refused", "{out}");
        let why = out[name]["why"].as_str().expect("why");
        assert!(why.contains("pipes") && why.contains("descriptor"), "{why}");
    }
    // The host's own session was not disturbed.
    a.call_ok("next_context", json!({}));
}

/// A direct hello hands the worker a host's stdin, stdout and the session's journal. One from
/// a client that is not a relay — too few descriptors, a file where the host's stdin should
/// be, a journal that is not one — is refused with the reason, before anything is written,
/// and the worker serves on. Played by Python's `socket.send_fds`.
#[test]
fn a_direct_hello_with_the_wrong_descriptors_is_refused_with_the_reason_and_changes_nothing() {
    let (mut a, ws, socket, _dirs) = host_and_worker_socket();
    let victim = ws.join("notes.txt");
    std::fs::write(&victim, "a file of the workspace\n").expect("victim");
    let script = r#"
import json, os, socket, sys
path, victim = sys.argv[1], sys.argv[2]
def hello(session):
    return (json.dumps({"gm": "hello", "protocol": 1, "session": session,
        "relay": {"pid": os.getpid(), "version": "0", "exe": None}, "surface": "tools",
        "pageSize": 200, "stepBudget": 100, "maxLineBytes": 1 << 20,
        "worker": {"maxInflight": 64, "mcpConfig": None}, "direct": True}) + "\n").encode()
def answer(name, fds):
    s = socket.socket(socket.AF_UNIX); s.connect(path)
    socket.send_fds(s, [hello("s-direct-" + name)], fds)
    return json.loads(s.makefile("rb").readline())
out = {}
r1, w1 = os.pipe(); r2, w2 = os.pipe(); r3, w3 = os.pipe()
garbage = os.memfd_create("not-a-journal"); os.write(garbage, b"x" * 100)
file_fd = os.open(victim, os.O_RDWR)
out["three"] = answer("three", [r1, w2, garbage])
out["file-stdin"] = answer("file-stdin", [file_fd, w2, garbage, r3, w3])
out["file-journal"] = answer("file-journal", [r1, w2, file_fd, r3, w3])
out["garbage-journal"] = answer("garbage-journal", [r1, w2, garbage, r3, w3])
print(json.dumps(out))
"#;
    let run = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&socket)
        .arg(&victim)
        .output()
        .expect("python3");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let out: Value = serde_json::from_slice(&run.stdout).expect("json");
    for (name, reason) in [
        ("three", "5 descriptors"),
        ("file-stdin", "stdin"),
        ("file-journal", "journal"),
        ("garbage-journal", "journal"),
    ] {
        assert_eq!(out[name]["gm"], "refused", "{name}: {out}");
        let why = out[name]["why"].as_str().expect("why");
        assert!(why.contains(reason), "{name}: {why}");
    }
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "a file of the workspace\n", "nothing written");
    let sessions: Vec<Value> =
        read_log(&ws.join(".gm/log.jsonl")).into_iter().filter(|e| e["kind"] == "session").collect();
    assert_eq!(sessions.len(), 1, "no session opened for a refused hello: {sessions:?}");
    // The host's own session was not disturbed.
    a.call_ok("next_context", json!({}));
}

/// A host that stops reading its answers holds a bounded part of the worker: once its session
/// holds 8 MiB of unread answers, its further calls wait untaken on its own stdin while the
/// other session is served; when it reads again, every call it wrote runs and is answered once.
#[test]
fn a_host_that_stops_reading_has_its_calls_wait_while_the_other_session_goes_on() {
    let (_dir, _ws, mut a, mut b) = two_sessions(&[]);
    let opened = b.events_of("session");
    let a_session = opened.iter().find(|e| e["state"] == "opened").expect("a's session")["session"].clone();
    // Calls of a's that ran (an `action` event each, written when the call ends).
    let ran = |b: &mut Gm| b.events_of("action").iter().filter(|e| e["session"] == a_session).count();
    let call = |id: usize| {
        let code = format!("return 'x'.repeat(100000) + ':{id}';");
        // Above the default reply budget on purpose: the answers must stay this big.
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "run_code", "arguments": { "code": code, "maxResultBytes": 300000 } } })
    };
    // Ten calls at a time, each answered with 200 KB (the text and the structured content),
    // until the worker leaves some of them untaken: every call it takes runs.
    let mut written = 0;
    let taken = loop {
        assert!(written < 400, "the worker took every call of a host that reads nothing");
        for id in written..written + 10 {
            a.send(&call(id));
        }
        written += 10;
        let (mut last, mut still) = (usize::MAX, 0);
        while still < 8 {
            std::thread::sleep(Duration::from_millis(100));
            let now = ran(&mut b);
            still = if now == last { still + 1 } else { 0 };
            last = now;
            if now == written {
                break;
            }
        }
        if last < written {
            break last;
        }
    };
    // Some 40 answers (8 MiB) wait for the host, and the calls taken before the backlog filled.
    assert!(taken >= 40, "only {taken} calls taken");
    // The other session is served meanwhile.
    burst(&mut b, 1000, 40, "b", false);
    assert!(ran(&mut b) < written, "a's calls stay untaken while it reads nothing");
    // The host reads again: each of its calls runs and is answered once.
    let mut answered = HashSet::new();
    while answered.len() < written {
        let reply = a.recv(TIMEOUT).expect("every call is answered");
        let id = reply["id"].as_i64().expect("an id") as usize;
        let result = reply["result"]["structuredContent"]["result"].as_str().unwrap_or_else(|| panic!("{reply}"));
        assert_eq!(result.len(), 100_000 + 1 + id.to_string().len());
        assert!(result.ends_with(&format!(":{id}")), "{id}");
        assert!(answered.insert(id), "{id} answered twice");
    }
    assert_eq!(ran(&mut b), written);
}

#[test]
fn a_session_whose_options_the_shared_worker_cannot_apply_is_told_which_and_why() {
    let config = tempfile::NamedTempFile::new().expect("config");
    std::fs::write(config.path(), r#"{"mcpServers":{}}"#).expect("write");
    let named = config.path().to_str().expect("utf-8");
    let (_dir, ws, a, mut b) =
        two_sessions(&["--max-inflight", "3", "--mcp-config", named, "--max-result-bytes", "90000"]);
    let sessions = b.events_of("session");
    let opened = sessions.last().expect("b's session event");
    let options: Vec<&str> =
        opened["notInForce"].as_array().expect("notInForce").iter().filter_map(|n| n["option"].as_str()).collect();
    assert_eq!(options, ["--max-inflight", "--max-result-bytes", "--mcp-config"], "{opened}");
    assert_eq!(opened["notInForce"][0]["asked"], 3);
    assert!(opened["notInForce"][2]["why"].as_str().is_some_and(|w| w.contains("shared by every session")));
    let status = gm_status(&ws);
    let listed = status["status"]["sessions"].as_array().expect("sessions");
    assert_eq!(listed.iter().filter(|s| s["notInForce"].is_array()).count(), 1, "only b's: {status}");
    let text = gm_command().arg("status").current_dir(&ws).output().expect("gm status");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("not in force: --max-inflight 3 (the worker has"), "{text}");
    common::shut_down(b);
    common::shut_down(a);
}

/// A worker's `start` is in the file before it answers anything: a reply is never ahead of the
/// line that names the worker that gave it (the log's commits are written on a thread of their
/// own, a few milliseconds later). Many fresh workers: the first reply comes within a commit
/// interval of the start.
#[test]
fn a_workers_start_is_in_the_log_file_before_its_first_reply() {
    for round in 0..10 {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().canonicalize().expect("canonical");
        let mut gm = Gm::start_in(&ws, &[], &[]);
        gm.initialize("2025-11-25");
        gm.ok("tools/list", json!({}));
        let found = starts(&ws.join(".gm/log.jsonl"));
        assert_eq!(found.len(), 1, "round {round}: {found:?}");
        common::shut_down(gm);
    }
}
