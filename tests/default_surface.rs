//! The promises of the README and the skill, held on the default surface (next_context,
//! run_code, finish) that every host uses: admission, cancellation, progress.

mod common;

use std::time::{Duration, Instant};

use common::Gm;
use serde_json::{json, Value};

fn code() -> Gm {
    let mut gm = Gm::start(&[]);
    gm.ready();
    gm
}

/// A shell command that prints when it started and ended, in nanoseconds.
const TIMED_SHELL: &str = "echo $(date +%s%N); sleep 0.4; echo $(date +%s%N)";

/// The (start, end) a TIMED_SHELL printed.
fn interval(stdout: &Value) -> (u128, u128) {
    let text = stdout.as_str().expect("stdout text");
    let mut n = text.lines().map(|l| l.trim().parse::<u128>().expect("a time"));
    (n.next().expect("start"), n.next().expect("end"))
}

fn assert_apart(a: (u128, u128), b: (u128, u128)) {
    assert!(a.1 <= b.0 || b.1 <= a.0, "the two shells overlapped: {a:?} and {b:?}");
}

fn body_call(id: &Value, code: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": { "name": "run_code", "arguments": { "code": code } } })
}

#[test]
fn shells_called_from_two_bodies_at_once_run_one_after_the_other() {
    let mut gm = code();
    let body = format!("return (await gm.run_shell({{ command: '{TIMED_SHELL}' }})).stdout;");
    gm.send(&body_call(&json!("a"), &body));
    gm.send(&body_call(&json!("b"), &body));
    let a = gm.recv_id(&json!("a"))["result"]["structuredContent"]["result"].clone();
    let b = gm.recv_id(&json!("b"))["result"]["structuredContent"]["result"].clone();
    assert_apart(interval(&a), interval(&b));
}

#[test]
fn shells_in_one_promise_all_run_one_after_the_other() {
    let mut gm = code();
    let r = gm.js(&format!(
        "const [a, b] = await Promise.all([gm.run_shell({{ command: '{TIMED_SHELL}' }}), gm.run_shell({{ command: '{TIMED_SHELL}' }})]);
         return [a.stdout, b.stdout];"
    ));
    assert_apart(interval(&r[0]), interval(&r[1]));
    let shells: Vec<Value> = gm.events_of("code-call").into_iter().filter(|e| e["verb"] == "run_shell").collect();
    assert_eq!(shells.len(), 2);
    assert!(shells.iter().all(|e| e["inFlight"] == 1), "each shell ran alone: {shells:?}");
}

#[test]
fn max_inflight_bounds_the_verbs_a_body_runs_at_once() {
    let mut gm = Gm::start(&["--max-inflight", "2"]);
    gm.ready();
    // Each job_status waits 300 ms on a job that prints nothing, holding its slot meanwhile.
    let started = Instant::now();
    gm.js("await gm.job_start({ name: 'quiet', command: 'sleep 30' });
         await Promise.all([1, 2, 3, 4].map(() => gm.job_status({ name: 'quiet', wait: 300 })));
         await gm.job_stop({ name: 'quiet' });");
    assert!(started.elapsed() >= Duration::from_millis(600), "four waits in two slots take two rounds");
    let waits: Vec<u64> = gm
        .events_of("code-call")
        .iter()
        .filter(|e| e["verb"] == "job_status")
        .map(|e| e["inFlight"].as_u64().expect("inFlight"))
        .collect();
    assert_eq!(waits.len(), 4);
    assert_eq!(waits.iter().max(), Some(&2), "{waits:?}");
}

#[test]
fn as_many_bodies_as_slots_that_each_call_verbs_all_finish() {
    let mut gm = Gm::start(&["--max-inflight", "2"]);
    gm.ready();
    let body = "await gm.write_file({ path: 'f' + Math.random() + '.txt', content: 'x' });
                const s = await gm.run_shell({ command: 'echo hi' });
                const l = await gm.list_dir({});
                return s.stdout.trim() + l.total;";
    let ids: Vec<Value> = (0..5).map(|i| json!(format!("body-{i}"))).collect();
    for id in &ids {
        gm.send(&body_call(id, body));
    }
    for id in &ids {
        let r = gm.recv_id(id);
        assert_eq!(r["result"]["isError"], false, "{r}");
    }
}

#[test]
fn a_cancel_that_arrives_with_its_call_in_one_write_stops_the_call() {
    let mut gm = code();
    for i in 0..20 {
        let id = format!("spin-{i}");
        let mut bytes = serde_json::to_vec(&body_call(&json!(id), "while (true) {}")).expect("json");
        bytes.push(b'\n');
        let cancel = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": id } });
        bytes.extend(serde_json::to_vec(&cancel).expect("json"));
        bytes.push(b'\n');
        gm.send_raw(&bytes);
    }
    // Every body was stopped: the engines are free for the next one at once.
    assert_eq!(gm.js("return 7"), 7);
    assert!(gm.recv(Duration::from_millis(300)).is_none(), "a cancelled call is not answered");
    assert!(gm.events_of("cancel-ignored").is_empty(), "no cancel went unmatched");
    let cancelled = gm.events_of("action").iter().filter(|e| e["cancelled"] == true).count();
    assert_eq!(cancelled, 20);
}

#[test]
fn a_cancelled_body_stops_its_waiting_job_status_at_once() {
    let mut gm = Gm::start(&["--max-inflight", "1"]);
    gm.ready();
    gm.js("await gm.job_start({ name: 'quiet', command: 'sleep 30' });");
    gm.send(&body_call(&json!("wait"), "return await gm.job_status({ name: 'quiet', wait: 20000 });"));
    std::thread::sleep(Duration::from_millis(200));
    let cancelled = Instant::now();
    gm.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": "wait" } }));
    // The wait held a verb slot; with --max-inflight 1 the next verb could not start unless
    // the cancel freed it.
    assert_eq!(gm.js("return (await gm.stat_file({ path: '.' })).exists"), true);
    assert!(cancelled.elapsed() < Duration::from_secs(5));
    let call = gm.events_of("code-call").into_iter().find(|e| e["verb"] == "job_status").expect("logged");
    assert_eq!(call["error"], "cancelled");
    gm.js("await gm.job_stop({ name: 'quiet' });");
}

#[test]
fn a_cancel_of_a_waiting_job_status_on_the_tools_surface_sends_no_answer() {
    let mut gm = Gm::start(&["--surface", "tools", "--max-inflight", "1"]);
    gm.initialize("2025-11-25");
    gm.call_ok("job_start", json!({ "name": "quiet", "command": "sleep 30" }));
    gm.send(&json!({ "jsonrpc": "2.0", "id": "w", "method": "tools/call",
        "params": { "name": "job_status", "arguments": { "name": "quiet", "wait": 20000 } } }));
    std::thread::sleep(Duration::from_millis(200));
    gm.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": "w" } }));
    let started = Instant::now();
    assert_eq!(gm.call_ok("stat_file", json!({ "path": "." }))["exists"], true);
    assert!(started.elapsed() < Duration::from_secs(5), "the cancelled wait freed its slot");
    assert!(gm.recv(Duration::from_millis(200)).is_none());
    gm.call_ok("job_stop", json!({ "name": "quiet" }));
}

#[test]
fn a_body_with_a_progress_token_reports_progress() {
    let mut gm = Gm::start_in_temp(&[], &[("GM_PROGRESS_INTERVAL_MS", "100")]);
    gm.ready();
    gm.send(&json!({ "jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": { "name": "run_code", "arguments": { "code": "await new Promise(r => setTimeout(r, 450)); return 1" }, "_meta": { "progressToken": "body" } } }));
    let mut progress = 0;
    loop {
        let msg = gm.recv(common::TIMEOUT).expect("a message");
        if msg["method"] == "notifications/progress" {
            assert_eq!(msg["params"]["progressToken"], "body");
            progress += 1;
        } else {
            assert_eq!(msg["id"], 9);
            break;
        }
    }
    assert!(progress >= 3, "{progress} progress notifications in 450 ms at one per 100 ms");
}
