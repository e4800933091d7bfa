//! run_shell and the job verbs through a real MCP connection: real processes, real groups.

mod common;

use std::time::{Duration, Instant};

use common::Gm;
use serde_json::{json, Value};

fn tools() -> Gm {
    let mut gm = Gm::start(&["--surface", "tools"]);
    gm.initialize("2025-11-25");
    gm
}

/// Whether a process group still has members.
fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(-pgid, 0) == 0 }
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process group of a live process, from /proc.
fn pgid_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process is alive");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    after.split_whitespace().nth(2).expect("pgrp").parse().expect("a number")
}

fn read_pid(gm: &Gm, file: &str) -> i32 {
    let path = gm.workspace.join(file);
    wait_until("the pid file", Duration::from_secs(10), || {
        std::fs::read_to_string(&path).map(|t| !t.trim().is_empty()).unwrap_or(false)
    });
    std::fs::read_to_string(&path).expect("pid").trim().parse().expect("a pid")
}

#[test]
fn run_shell_reports_exit_code_streams_cwd_and_env() {
    let mut gm = tools();
    std::fs::create_dir(gm.workspace.join("sub")).expect("mkdir");
    let r = gm.call_ok(
        "run_shell",
        json!({ "command": "echo out; echo err >&2; pwd; echo $GREETING; exit 3", "cwd": "sub", "env": { "GREETING": "hello" } }),
    );
    assert_eq!(r["exitCode"], 3);
    assert_eq!(r["timedOut"], false);
    let stdout = r["stdout"].as_str().expect("stdout");
    assert!(stdout.starts_with("out\n"), "{stdout}");
    assert!(stdout.contains("/sub\n") && stdout.ends_with("hello\n"), "{stdout}");
    assert_eq!(r["stderr"], "err\n");
    assert_eq!(r["stdoutCut"], 0);
    assert!(r.get("stdoutFile").is_none());
}

#[test]
fn five_megabytes_of_output_are_spilled_with_exact_byte_counts() {
    let mut gm = tools();
    let size = 5 * 1024 * 1024;
    let r =
        gm.call_ok("run_shell", json!({ "command": format!("head -c {size} /dev/zero | tr '\\0' 'a'; echo -n END") }));
    let total = size + 3;
    assert_eq!(r["stdoutBytes"], total);
    let text = r["stdout"].as_str().expect("stdout");
    let cut = r["stdoutCut"].as_u64().expect("cut");
    assert!(cut > 0 && cut < total as u64);
    assert!(text.contains(&format!("{cut} bytes cut")), "the reply says how much was cut");
    assert!(text.ends_with("aaaEND"), "the tail is kept");
    let file = r["stdoutFile"].as_str().expect("the whole output's file");
    assert!(text.contains(file), "the reply names where the whole is");
    assert_eq!(std::fs::metadata(file).expect("spill").len(), total as u64);
    // The spilled file is readable through gm, in pages.
    let page = gm.call_ok("read_file", json!({ "path": file, "limit": 1 }));
    assert_eq!(page["bytes"], total);
}

#[test]
fn a_cancelled_shell_leaves_no_process_behind_and_gets_no_answer() {
    let mut gm = tools();
    gm.send(&json!({ "jsonrpc": "2.0", "id": "long", "method": "tools/call",
        "params": { "name": "run_shell", "arguments": { "command": "echo $$ > pid; sleep 1000 & sleep 1000" } } }));
    let pgid = read_pid(&gm, "pid");
    assert!(group_alive(pgid));
    gm.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": "long" } }));
    wait_until("the group to die", Duration::from_secs(5), || !group_alive(pgid));
    assert_eq!(gm.call_ok("stat_file", json!({ "path": "pid" }))["exists"], true);
    assert!(gm.recv(Duration::from_millis(300)).is_none(), "a cancelled call is not answered");
    let action = gm.events_of("action").into_iter().find(|e| e["id"] == "long").expect("logged");
    assert_eq!(action["cancelled"], true);
}

#[test]
fn a_timeout_kills_a_group_that_ignores_sigterm() {
    let mut gm = tools();
    let started = Instant::now();
    let r = gm.call_ok(
        "run_shell",
        json!({ "command": "trap '' TERM; echo $$ > pid; sleep 1000; echo never", "timeoutMs": 300 }),
    );
    assert_eq!(r["timedOut"], true);
    assert!(started.elapsed() < Duration::from_secs(5));
    let pgid = read_pid(&gm, "pid");
    wait_until("SIGKILL to follow the ignored SIGTERM", Duration::from_secs(3), || !group_alive(pgid));
    assert!(!r["stdout"].as_str().unwrap_or("").contains("never"));
}

#[test]
fn bad_shell_and_job_input_is_refused_and_starts_nothing() {
    let mut gm = tools();
    assert_eq!(gm.call_err("run_shell", json!({ "command": "" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("run_shell", json!({ "command": "true", "timeoutMs": -1 }))["code"], "invalid_args");
    assert_eq!(gm.call_err("run_shell", json!({ "command": "true", "timeoutMs": 0 }))["code"], "invalid_args");
    assert_eq!(gm.call_err("run_shell", json!({ "command": "true", "timeoutMs": 1u64 << 60 }))["code"], "invalid_args");
    assert_eq!(gm.call_err("run_shell", json!({ "command": "true", "cwd": "missing" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("job_status", json!({ "name": "nope" }))["code"], "unknown_job");
    assert_eq!(gm.call_err("job_stop", json!({ "name": "nope" }))["code"], "unknown_job");
    assert_eq!(gm.call_err("job_start", json!({ "name": "a/b", "command": "true" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("job_start", json!({ "command": "true", "cwd": "missing" }))["code"], "invalid_args");
    gm.call_ok("job_start", json!({ "name": "dup", "command": "sleep 5" }));
    assert_eq!(gm.call_err("job_start", json!({ "name": "dup", "command": "true" }))["code"], "duplicate_job");
    gm.call_ok("job_stop", json!({ "name": "dup" }));
    assert!(!gm.workspace.join(".gm/jobs/a/b.log").exists());
}

#[test]
fn job_status_with_wait_sees_output_and_the_exit() {
    let mut gm = tools();
    let started =
        gm.call_ok("job_start", json!({ "name": "build", "command": "echo first; sleep 0.3; echo done; exit 4" }));
    assert_eq!(started["state"], "running");
    let mut info = Value::Null;
    for _ in 0..20 {
        info = gm.call_ok("job_status", json!({ "name": "build", "wait": 5000 }));
        if info["state"] != "running" {
            break;
        }
    }
    assert_eq!(info["state"], "exited", "{info}");
    assert_eq!(info["exitCode"], 4);
    assert_eq!(info["tail"], "first\ndone\n");
    assert_eq!(std::fs::read_to_string(gm.workspace.join(".gm/jobs/build.exit")).expect("exit file").trim(), "4");
    // Once it has ended, a wait returns at once.
    let t = Instant::now();
    gm.call_ok("job_status", json!({ "name": "build", "wait": 5000 }));
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[test]
fn job_stop_kills_the_whole_group_and_a_job_timeout_does_too() {
    let mut gm = tools();
    gm.call_ok("job_start", json!({ "name": "srv", "command": "echo $$ > srv.pid; sleep 1000 & sleep 1000" }));
    let pgid = pgid_of(read_pid(&gm, "srv.pid"));
    assert!(group_alive(pgid));
    let stopped = gm.call_ok("job_stop", json!({ "name": "srv" }));
    assert_eq!(stopped["state"], "killed");
    wait_until("the job's group to die", Duration::from_secs(5), || !group_alive(pgid));

    gm.call_ok("job_start", json!({ "name": "slow", "command": "echo $$ > slow.pid; sleep 1000", "timeoutMs": 300 }));
    let pgid = pgid_of(read_pid(&gm, "slow.pid"));
    wait_until("the timeout to kill the job", Duration::from_secs(5), || !group_alive(pgid));
    let info = gm.call_ok("job_status", json!({ "name": "slow" }));
    assert_eq!(info["state"], "timedOut", "{info}");
}

#[test]
fn a_restarted_gm_adopts_a_running_job_and_settles_one_that_ended() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = Gm::start_in(dir.path(), &["--surface", "tools"], &[]);
    first.initialize("2025-11-25");
    first.call_ok("job_start", json!({ "name": "long", "command": "sleep 1.5; echo finished", "timeoutMs": 60000 }));
    first.call_ok("job_start", json!({ "name": "short", "command": "sleep 0.2; exit 3" }));
    // The worker dies with its host's relay.
    common::kill_worker(dir.path());
    // SAFETY: kill(2) on the child's pid.
    unsafe { libc::kill(first.pid() as i32, libc::SIGKILL) };
    first.wait_exit(Duration::from_secs(5)).expect("gm died");
    std::thread::sleep(Duration::from_millis(500));

    let mut second = Gm::start_in(dir.path(), &["--surface", "tools"], &[]);
    second.initialize("2025-11-25");
    let events = second.events_of("job");
    let what = |name: &str| events.iter().find(|e| e["name"] == name).map(|e| e["what"].clone());
    assert_eq!(what("long"), Some(json!("adopted")), "{events:?}");
    assert_eq!(what("short"), Some(json!("settled")), "{events:?}");
    let short = second.call_ok("job_status", json!({ "name": "short" }));
    assert_eq!((short["state"].as_str(), short["exitCode"].as_i64()), (Some("exited"), Some(3)));
    let mut long = second.call_ok("job_status", json!({ "name": "long" }));
    assert_eq!(long["state"], "running");
    for _ in 0..20 {
        long = second.call_ok("job_status", json!({ "name": "long", "wait": 5000 }));
        if long["state"] != "running" {
            break;
        }
    }
    assert_eq!(long["state"], "exited");
    assert_eq!(long["tail"], "finished\n");
    // A third start reports nothing new about them.
    common::shut_down(second);
    let mut third = Gm::start_in(dir.path(), &["--surface", "tools"], &[]);
    third.initialize("2025-11-25");
    let seen: usize = third.events_of("job").len();
    assert_eq!(seen, 3, "two events from the second start, one (long's end) from this one");
}

#[test]
fn an_adopted_job_keeps_its_remaining_timeout() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = Gm::start_in(dir.path(), &["--surface", "tools"], &[]);
    first.initialize("2025-11-25");
    first.call_ok("job_start", json!({ "name": "bounded", "command": "sleep 1000", "timeoutMs": 1500 }));
    // The worker dies with its host's relay.
    common::kill_worker(dir.path());
    // SAFETY: kill(2) on the child's pid.
    unsafe { libc::kill(first.pid() as i32, libc::SIGKILL) };
    first.wait_exit(Duration::from_secs(5)).expect("gm died");
    let mut second = Gm::start_in(dir.path(), &["--surface", "tools"], &[]);
    second.initialize("2025-11-25");
    assert_eq!(second.call_ok("job_status", json!({ "name": "bounded" }))["state"], "running");
    let started = Instant::now();
    let mut info = Value::Null;
    for _ in 0..20 {
        info = second.call_ok("job_status", json!({ "name": "bounded", "wait": 1000 }));
        if info["state"] != "running" {
            break;
        }
    }
    assert_eq!(info["state"], "timedOut", "{info}");
    assert!(started.elapsed() < Duration::from_secs(4), "killed at the old deadline, not a new one");
}

#[test]
fn a_shell_runs_alone() {
    let mut gm = tools();
    gm.send(&json!({ "jsonrpc": "2.0", "id": 10, "method": "tools/call",
        "params": { "name": "run_shell", "arguments": { "command": "sleep 0.3; echo shell" } } }));
    gm.send(&json!({ "jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": { "name": "stat_file", "arguments": { "path": "." } } }));
    let first = gm.recv(common::TIMEOUT).expect("a reply");
    assert_eq!(first["id"], 10, "the call sent after the shell waited for it: {first}");
    gm.recv_id(&json!(11));
    let actions = gm.events_of("action");
    let stat = actions.iter().find(|e| e["tool"] == "stat_file").expect("stat action");
    assert_eq!(stat["inFlight"], 1, "nothing ran beside the shell");
}

#[test]
fn secret_values_reach_shells_but_never_replies_or_the_log() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join(".git")).expect("a git dir");
    std::fs::create_dir(dir.path().join(".gm")).expect(".gm");
    std::fs::write(dir.path().join(".gm/secrets.env"), "API_TOKEN=s3cr3t-t0ken-value\n").expect("secrets");
    let mut gm = Gm::start_in(dir.path(), &[], &[]);
    gm.ready();
    let r = gm.js("const a = await gm.run_shell({ command: 'echo token=$API_TOKEN; echo -n $API_TOKEN | wc -c' });
         await gm.job_start({ name: 'leak', command: 'echo $API_TOKEN' });
         const j = await gm.job_status({ name: 'leak', wait: 3000 });
         console.log('seen', a.stdout);
         return { out: a.stdout, tail: j.tail };");
    let out = r["out"].as_str().expect("out");
    assert!(out.starts_with("token=[secret:API_TOKEN]\n"), "{out}");
    assert!(out.ends_with("\n18\n"), "the shell saw the real 18-byte value: {out}");
    assert!(!r.to_string().contains("s3cr3t"));
    let err = gm.call_err("run_code", json!({ "code": "return await gm.read_file({ path: '.gm/secrets.env' })" }));
    assert_eq!(err["details"]["code"], "refused");
    assert!(err["message"].as_str().expect("message").contains("API_TOKEN"), "names are visible");
    let err =
        gm.call_err("run_code", json!({ "code": "await gm.write_file({ path: '.gm/secrets.env', content: 'X=1' })" }));
    assert_eq!(err["details"]["code"], "refused");
    assert_eq!(
        std::fs::read_to_string(dir.path().join(".gm/secrets.env")).expect("kept"),
        "API_TOKEN=s3cr3t-t0ken-value\n"
    );
    gm.call_ok("run_code", json!({ "code": "return 's3cr3t-t0ken-value'" }));
    let log: String = gm.log_events().iter().map(|e| e.to_string()).collect();
    assert!(!log.contains("s3cr3t"), "the log never holds a secret value");
    assert!(log.contains("[secret:API_TOKEN]"));
    // gm's folder ignores itself, the secrets file with it.
    assert_eq!(std::fs::read_to_string(dir.path().join(".gm/.gitignore")).expect(".gm/.gitignore"), "*\n");
    assert!(!dir.path().join(".gitignore").exists());
}

#[test]
fn cancelling_run_code_stops_the_shell_it_started() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    gm.send(&json!({ "jsonrpc": "2.0", "id": "body", "method": "tools/call",
        "params": { "name": "run_code", "arguments": { "code": "await gm.run_shell({ command: 'echo $$ > inner.pid; sleep 1000' })" } } }));
    let pgid = read_pid(&gm, "inner.pid");
    gm.send(&json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": "body" } }));
    wait_until("the body's shell to die", Duration::from_secs(5), || !group_alive(pgid));
    assert_eq!(gm.js("return 1"), 1);
}

#[test]
fn next_context_lists_running_jobs() {
    let mut gm = tools();
    gm.call_ok("job_start", json!({ "name": "watcher", "command": "sleep 30" }));
    let ctx = gm.call_ok("next_context", json!({}));
    let names: Vec<&str> =
        ctx["background"].as_array().expect("background").iter().filter_map(|j| j["name"].as_str()).collect();
    assert_eq!(names, ["watcher"]);
    gm.call_ok("job_stop", json!({ "name": "watcher" }));
}

#[test]
fn a_long_shell_with_a_progress_token_reports_progress_at_each_interval() {
    let mut gm = Gm::start_in_temp(&["--surface", "tools"], &[("GM_PROGRESS_INTERVAL_MS", "500")]);
    gm.initialize("2025-11-25");
    gm.send(&json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/call",
        "params": { "name": "run_shell", "arguments": { "command": "sleep 2.2" }, "_meta": { "progressToken": "p1" } } }));
    let mut progress = Vec::new();
    let reply = loop {
        let msg = gm.recv(Duration::from_secs(20)).expect("a message");
        if msg["method"] == "notifications/progress" {
            assert_eq!(msg["params"]["progressToken"], "p1");
            progress.push(msg["params"]["progress"].as_f64().expect("seconds"));
        } else {
            break msg;
        }
    };
    assert_eq!(reply["id"], 5);
    assert_eq!(progress, [0.5, 1.0, 1.5, 2.0]);
}

#[test]
fn a_long_output_always_keeps_its_head_however_the_reads_fall() {
    // The first read of a fast writer can be larger than the inline cap; run it many times.
    let mut gm = Gm::start(&[]);
    gm.ready();
    let r = gm.js(
        "const out = [];
         for (let i = 0; i < 12; i++) {
           const s = await gm.run_shell({ command: 'seq 1 730000' });
           out.push({ head: s.stdout.slice(0, 6), shown: s.stdoutBytes - s.stdoutCut, bytes: s.stdoutBytes, tail: s.stdout.slice(-7) });
         }
         return out;",
    );
    for run in r.as_array().expect("runs") {
        assert_eq!(run["head"], "1\n2\n3\n", "{run}");
        assert_eq!(run["tail"], "730000\n", "{run}");
        assert_eq!(run["shown"], 32 * 1024, "{run}");
    }
}

#[test]
fn a_background_job_runs_where_there_is_no_bash() {
    // A PATH with sh and mv but no bash: jobs run in sh, as foreground shells do.
    let bin = tempfile::tempdir().expect("tempdir");
    for tool in ["sh", "mv"] {
        let found = ["/bin", "/usr/bin"].iter().map(|d| std::path::Path::new(d).join(tool)).find(|p| p.exists());
        std::os::unix::fs::symlink(found.expect("the tool"), bin.path().join(tool)).expect("link");
    }
    let path = bin.path().to_str().expect("utf8");
    let mut gm = Gm::start_in_temp(&["--surface", "tools"], &[("PATH", path)]);
    gm.initialize("2025-11-25");
    gm.call_ok("job_start", json!({ "name": "plain", "command": "echo from sh" }));
    let mut info = Value::Null;
    for _ in 0..20 {
        info = gm.call_ok("job_status", json!({ "name": "plain", "wait": 1000 }));
        if info["state"] != "running" {
            break;
        }
    }
    assert_eq!(info["state"], "exited", "{info}");
    assert_eq!((info["exitCode"].as_i64(), info["tail"].as_str()), (Some(0), Some("from sh\n")));
}

#[test]
fn a_shell_that_leaves_a_process_holding_its_output_is_answered_and_the_process_ended() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let started = Instant::now();
    let r = gm.js("return await gm.run_shell({ command: 'sleep 1000 & echo $! > held.pid; echo done' })");
    assert!(started.elapsed() < Duration::from_secs(30), "answered once the shell exited, not when sleep would");
    assert_eq!(r["exitCode"], 0, "{r}");
    assert_eq!(r["stdout"], "done\n");
    let held = read_pid(&gm, "held.pid");
    wait_until("the process holding the pipes to be ended", Duration::from_secs(5), || {
        // SAFETY: signal 0 only checks for existence.
        unsafe { libc::kill(held, 0) != 0 }
    });
}

#[test]
fn shells_run_back_to_back_each_report_their_own_output_and_exit_code() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    // The pipes' ends and the exit arrive in any order: a run of shells meets the orders.
    let r = gm.js("const bad = [];
         for (let i = 0; i < 300; i++) {
           const r = await gm.run_shell({ command: `echo out${i}; echo err${i} >&2; exit ${i % 4}` });
           if (r.stdout !== `out${i}\\n` || r.stderr !== `err${i}\\n` || r.exitCode !== i % 4) bad.push([i, r]);
         }
         return bad;");
    assert_eq!(r, json!([]));
}

#[test]
fn shells_cancelled_at_any_moment_leave_no_process_and_the_server_serves_on() {
    let mut gm = tools();
    for i in 0..30 {
        let id = format!("c{i}");
        let pid_file = format!("pid{i}");
        let call = json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": "run_shell", "arguments": { "command": format!("echo $$ > {pid_file}; sleep 1000") } } });
        let cancel = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": { "requestId": id } });
        if i % 3 == 0 {
            // The call and its cancel in one write: the cancel may arrive before the spawn.
            let mut both = serde_json::to_vec(&call).expect("json");
            both.push(b'\n');
            both.extend(serde_json::to_vec(&cancel).expect("json"));
            both.push(b'\n');
            gm.send_raw(&both);
        } else {
            gm.send(&call);
            if i % 3 == 1 {
                // After the shell started.
                let pgid = read_pid(&gm, &pid_file);
                assert!(group_alive(pgid));
            }
            gm.send(&cancel);
        }
        let path = gm.workspace.join(&pid_file);
        // Whatever started is ended.
        if let Ok(text) = std::fs::read_to_string(&path) {
            if let Ok(pgid) = text.trim().parse::<i32>() {
                wait_until("the cancelled group to die", Duration::from_secs(5), || !group_alive(pgid));
            }
        }
    }
    // No answer came for any of them, and the server answers the next call.
    let r = gm.call_ok("run_shell", json!({ "command": "echo alive" }));
    assert_eq!(r["stdout"], "alive\n");
    while let Some(msg) = gm.recv(Duration::from_millis(100)) {
        assert!(msg.get("id").is_none_or(|id| !id.as_str().is_some_and(|s| s.starts_with('c'))), "{msg}");
    }
    // Every shell that wrote its pid is gone.
    for i in 0..30 {
        if let Ok(text) = std::fs::read_to_string(gm.workspace.join(format!("pid{i}"))) {
            let pgid: i32 = text.trim().parse().expect("a pid");
            wait_until("every group to be gone", Duration::from_secs(5), || !group_alive(pgid));
        }
    }
}
