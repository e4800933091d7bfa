//! gm's life as a process: signals end what it started, and a restart keeps the run.

mod common;

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use common::Gm;
use serde_json::json;

/// Whether a process is alive.
fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks for existence.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// Whether a process group still has a member that is not a zombie (a killed process stays a
/// zombie until its new parent reaps it, which kill(-pgid, 0) cannot tell from alive).
fn group_alive(pgid: i32) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    procs.filter_map(Result::ok).any(|p| {
        let Ok(stat) = std::fs::read_to_string(p.path().join("stat")) else { return false };
        let Some(close) = stat.rfind(')') else { return false };
        let mut fields = stat[close + 2..].split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|g| g.parse::<i32>().ok());
        pgrp == Some(pgid) && state != Some("Z")
    })
}

fn wait_for_file(path: &std::path::Path) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if text.ends_with('\n') {
                return text.trim().to_owned();
            }
        }
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn each_stop_signal_ends_the_foreground_shell_logs_the_stop_and_gives_stdin_its_flags_back() {
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT"), (libc::SIGHUP, "SIGHUP")] {
        let (mut gm, stdin) = Gm::start_with_own_pipe(&[]);
        // SAFETY: fcntl(F_GETFL) on a descriptor we own.
        let before = unsafe { libc::fcntl(stdin.as_raw_fd(), libc::F_GETFL) };
        gm.ready();
        gm.js("await gm.job_start({ name: 'outlives', command: 'echo $$ > job.pid; sleep 1000' });");
        let job = wait_for_file(&gm.workspace.join("job.pid")).parse::<i32>().expect("pid");
        gm.send(&json!({ "jsonrpc": "2.0", "id": "shell", "method": "tools/call",
            "params": { "name": "run_code", "arguments": { "code": "await gm.run_shell({ command: 'echo $$ > fg.pid; sleep 1000' })" } } }));
        let shell = wait_for_file(&gm.workspace.join("fg.pid")).parse::<i32>().expect("pid");
        assert!(group_alive(shell));
        let sent = Instant::now();
        gm.signal(signal);
        let status = gm.wait_exit(Duration::from_secs(3)).unwrap_or_else(|| panic!("gm outlived {name}"));
        assert!(sent.elapsed() < Duration::from_secs(1), "{name}: gm took {:?} to exit", sent.elapsed());
        assert_eq!(status.code(), Some(128 + signal), "{name}");
        // The group was sent SIGKILL before gm exited; give the kernel a moment to end it.
        let killed = Instant::now();
        while group_alive(shell) && killed.elapsed() < Duration::from_millis(500) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!group_alive(shell), "{name}: the foreground shell's group outlived gm");
        assert!(process_alive(job), "{name}: a background job outlives gm, as documented");
        // SAFETY: as above.
        let after = unsafe { libc::fcntl(stdin.as_raw_fd(), libc::F_GETFL) };
        assert_eq!(after & libc::O_NONBLOCK, before & libc::O_NONBLOCK, "{name}: stdin's flags were not restored");
        // The session ended (its worker stays for other sessions), naming the signal.
        let stop = common::read_log(&gm.log_path())
            .into_iter()
            .find(|e| e["kind"] == "session-end")
            .expect("a session-end event");
        assert_eq!((stop["reason"].as_str(), stop["signal"].as_str()), (Some("signal"), Some(name)));
        // SAFETY: kill(2) on the job's process.
        unsafe { libc::kill(job, libc::SIGKILL) };
    }
}

#[test]
fn stdin_closing_gives_stdin_its_flags_back() {
    let (mut gm, stdin) = Gm::start_with_own_pipe(&[]);
    gm.initialize("2025-11-25");
    gm.close_stdin();
    let status = gm.wait_exit(Duration::from_secs(3)).expect("gm exits");
    assert!(status.success());
    // SAFETY: fcntl(F_GETFL) on a descriptor we own.
    let flags = unsafe { libc::fcntl(stdin.as_raw_fd(), libc::F_GETFL) };
    assert_eq!(flags & libc::O_NONBLOCK, 0);
}

#[test]
fn a_gm_started_after_a_crash_continues_the_task_and_the_step_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = Gm::start_in(dir.path(), &[], &[]);
    first.initialize("2025-11-25");
    let one = first.call_ok("next_context", json!({ "task": "ship the parser", "stepBudget": 10 }));
    assert!(one.get("resumed").is_none());
    first.call_ok("next_context", json!({}));
    first.signal(libc::SIGKILL);
    first.wait_exit(Duration::from_secs(5)).expect("gm died");

    let mut second = Gm::start_in(dir.path(), &[], &[]);
    second.initialize("2025-11-25");
    let three = second.call_ok("next_context", json!({}));
    assert_eq!(three["step"], 3);
    assert_eq!(three["task"], "ship the parser");
    assert_eq!(three["stepsLeft"], 7);
    assert_eq!(three["runId"], one["runId"], "the same run goes on");
    assert_eq!(three["resumed"]["afterStep"], 2);
    let four = second.call_ok("next_context", json!({}));
    assert_eq!(four["step"], 4);
    assert!(four.get("resumed").is_none(), "only the first step after the restart says so");
    // The worker outlived the host: the new session took the run over from the one that left.
    assert_eq!(second.events_of("start").len(), 1);
    let opened = second.events_of("session").into_iter().filter(|e| e["state"] == "opened").collect::<Vec<_>>();
    assert_eq!(opened.len(), 2, "{opened:?}");
    let how = &opened[1]["runOpened"];
    assert_eq!((how["how"].as_str(), how["step"].as_u64()), (Some("taken-over"), Some(2)), "{how}");
    assert_eq!(how.get("fromSession"), Some(&opened[0]["session"]));
    assert_eq!(opened[1]["run"], one["runId"], "the session's events carry the run it took over");
    let action = second.events_of("action").into_iter().last().expect("an action");
    assert_eq!(action["run"], one["runId"], "the new session's events carry the run's id");
}

#[test]
fn a_worker_started_after_a_crash_continues_the_task_and_the_step_count() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut first = Gm::start_in(dir.path(), &[], &[]);
    first.initialize("2025-11-25");
    let one = first.call_ok("next_context", json!({ "task": "ship the parser" }));
    common::kill_worker(dir.path());
    first.signal(libc::SIGKILL);
    first.wait_exit(Duration::from_secs(5)).expect("gm died");
    let mut second = Gm::start_in(dir.path(), &[], &[]);
    second.initialize("2025-11-25");
    let two = second.call_ok("next_context", json!({}));
    assert_eq!((two["step"].as_u64(), &two["runId"], &two["task"]), (Some(2), &one["runId"], &one["task"]));
    assert_eq!(second.events_of("start").len(), 2, "a new worker");
}

#[test]
fn finish_ends_the_run_and_the_next_step_starts_a_new_one_even_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut gm = Gm::start_in(dir.path(), &[], &[]);
    gm.initialize("2025-11-25");
    let first = gm.call_ok("next_context", json!({ "task": "t1" }));
    gm.call_ok("finish", json!({ "gaps": [] }));
    let next = gm.call_ok("next_context", json!({}));
    assert_eq!(next["step"], 1);
    assert_eq!(next["task"], json!(null));
    assert_ne!(next["runId"], first["runId"]);
    let r = gm.call("next_context", json!({}));
    assert_eq!(r["_meta"]["com.anentrypoint.gmnew/run"], next["runId"], "results carry the current run");
    gm.call_ok("finish", json!({}));
    drop(gm);
    let mut again = Gm::start_in(dir.path(), &[], &[]);
    again.initialize("2025-11-25");
    let fresh = again.call_ok("next_context", json!({}));
    assert_eq!(fresh["step"], 1, "a finished run is not resumed");
    assert!(fresh.get("resumed").is_none());
}

#[test]
fn a_bad_finish_changes_nothing() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    let one = gm.call_ok("next_context", json!({ "task": "t" }));
    assert_eq!(gm.call_err("finish", json!({ "gaps": "not a list" }))["code"], "invalid_args");
    let two = gm.call_ok("next_context", json!({}));
    assert_eq!((two["step"].as_u64(), &two["runId"]), (Some(2), &one["runId"]), "the run is still open");
}

#[test]
fn steps_left_counts_down_from_the_budget_the_host_or_the_task_sets() {
    let mut gm = Gm::start(&["--step-budget", "3"]);
    gm.initialize("2025-11-25");
    let lefts: Vec<u64> =
        (0..4).map(|_| gm.call_ok("next_context", json!({}))["stepsLeft"].as_u64().expect("stepsLeft")).collect();
    assert_eq!(lefts, [2, 1, 0, 0]);
    let r = gm.call_ok("next_context", json!({ "stepBudget": 50 }));
    assert_eq!((r["step"].as_u64(), r["stepsLeft"].as_u64()), (Some(5), Some(45)));
    assert_eq!(gm.call_err("next_context", json!({ "stepBudget": 0 }))["code"], "invalid_args");
}

/// The backticked names in the sentence of `file` that starts with `lead`.
fn named_fields(file: &str, lead: &str) -> Vec<String> {
    let text = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).expect("skill");
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let at = flat.find(lead).unwrap_or_else(|| panic!("{file} has no sentence starting '{lead}'"));
    let sentence = &flat[at..at + flat[at..].find(". ").unwrap_or(flat.len() - at)];
    sentence.split('`').skip(1).step_by(2).map(str::to_owned).collect()
}

#[test]
fn the_fields_the_skills_name_are_the_fields_next_context_returns() {
    let mut gm = Gm::start(&[]);
    gm.initialize("2025-11-25");
    let step = gm.call_ok("next_context", json!({ "task": "t" }));
    for (file, lead) in [("skills/gm/SKILL.md", "It returns"), ("skills/gm-continue/SKILL.md", "It returns")] {
        let fields = named_fields(file, lead);
        assert!(fields.len() >= 7, "{file}: {fields:?}");
        for field in fields {
            assert!(step.get(&field).is_some(), "{file} names `{field}`, which next_context does not return: {step}");
        }
    }
    let workflows =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("skills/gm/WORKFLOWS.md"))
            .expect("workflows");
    assert!(workflows.contains("`stepsLeft`") && step.get("stepsLeft").is_some());
}
