//! The run log when the disk refuses it: a worker whose log file cannot grow (played by a file
//! size limit set on the running worker, which fails writes as a full disk does, part way
//! through) keeps serving, tells the agent in `next_context` and `finish`, leaves no torn line,
//! and writes every event that waited once the disk takes them again.

mod common;

use std::path::Path;

use common::{gm_command, read_log, Gm};
use serde_json::{json, Value};

/// Sets the worker's file size limit (RLIMIT_FSIZE) to `bytes`, or lifts it.
fn limit_file_size(pid: u32, bytes: Option<u64>) {
    let limit = libc::rlimit { rlim_cur: bytes.unwrap_or(libc::RLIM_INFINITY), rlim_max: libc::RLIM_INFINITY };
    // SAFETY: prlimit(2) on a process of this user, with a valid rlimit and no old value asked.
    let rc = unsafe { libc::prlimit(pid as libc::pid_t, libc::RLIMIT_FSIZE, &limit, std::ptr::null_mut()) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

fn log_len(path: &Path) -> u64 {
    std::fs::metadata(path).expect("the log").len()
}

#[test]
fn a_log_that_cannot_grow_is_reported_and_every_event_is_written_once_it_can() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    gm.call_ok("next_context", json!({ "task": "fill the disk" }));
    let worker = gm.events_of("start")[0]["pid"].as_u64().expect("pid") as u32;
    let log = gm.log_path();
    let before = log_len(&log);
    // Room for part of the next line only: the first write fails part way.
    limit_file_size(worker, Some(before + 20));

    for n in 0..5 {
        let body = format!("await gm.write_file({{ path: 'f{n}.txt', content: 'x' }}); return {n};");
        assert_eq!(gm.js(&body), n, "calls go on while the log cannot be written");
    }
    let step = gm.call_ok("next_context", json!({}));
    let trouble = &step["logError"];
    assert!(trouble["error"].as_str().is_some_and(|e| e.contains("large")), "{step}");
    assert!(trouble["failedWrites"].as_u64() >= Some(1), "{trouble}");
    assert!(trouble["heldEvents"].as_u64() >= Some(10), "each call's action and code-call wait: {trouble}");
    assert_eq!(trouble["lostEvents"], 0);
    assert_eq!(log_len(&log), before, "the part written of a failed write is cut back");
    read_log(&log);
    // A body reads what the file holds, and hears why the rest is not there yet.
    let read = gm.js("return await gm.query_log({ kind: 'start' });");
    assert_eq!(read["events"].as_array().map(Vec::len), Some(1), "{read}");
    assert!(read["logError"]["heldEvents"].as_u64() >= Some(10), "{read}");

    // finish cannot sync its end: it says so, and the end is written with the rest later.
    let finished = gm.call_ok("finish", json!({ "summary": "done while full" }));
    assert!(finished["logError"].as_str().is_some(), "{finished}");
    assert_eq!(finished["lastSeq"], Value::Null);

    limit_file_size(worker, None);
    let step = gm.call_ok("next_context", json!({ "task": "after" }));
    assert!(step.get("logError").is_none(), "{step}");
    let events = gm.log_events();
    let seqs: Vec<u64> = events.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no event lost, each line whole and in order");
    let writes = events.iter().filter(|e| e["kind"] == "code-call" && e["verb"] == "write_file").count();
    assert_eq!(writes, 5, "the calls made while the log could not grow");
    assert!(events.iter().any(|e| e["kind"] == "end" && e["summary"] == "done while full"));
    let recovered = events.iter().find(|e| e["kind"] == "log").expect("a log event");
    assert_eq!(recovered["recovered"]["lostEvents"], 0, "{recovered}");
    assert!(recovered["recovered"]["failedWrites"].as_u64() >= Some(2), "{recovered}");
    assert!(events.iter().all(|e| e["kind"] != "stop"), "the worker never stopped");
    common::shut_down(gm);
}

/// `eprintln!` panics when stderr refuses the write; gm's messages go to a file (the worker's
/// `.gm/worker.log`) that a full disk refuses. A command whose stderr is `/dev/full` ends with
/// its own exit code, as it does with a stderr that works.
#[test]
fn a_message_stderr_refuses_is_dropped_without_a_panic() {
    let dir = tempfile::tempdir().expect("tempdir");
    let run = |stderr: std::process::Stdio| {
        gm_command().args(["status", "--open"]).current_dir(dir.path()).stderr(stderr).status().expect("gm runs")
    };
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    let refused = run(full.into());
    let heard = run(std::process::Stdio::null());
    assert_ne!(heard.code(), Some(0), "the command fails with a message");
    assert_eq!(refused.code(), heard.code(), "not a panic's 101");
}

/// The worker catches SIGXFSZ (so a file size limit fails its writes instead of killing it),
/// with a handler rather than SIG_IGN: the shells it starts keep the default, as an ignored
/// signal would stay ignored across exec.
#[test]
fn the_shells_a_worker_starts_keep_the_default_for_a_file_size_limit() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let out = gm.js("return (await gm.run_shell({ command: 'grep -E \"^Sig(Ign|Cgt)\" /proc/self/status' })).stdout;");
    let masks: Vec<u64> = out
        .as_str()
        .expect("stdout")
        .lines()
        .map(|l| u64::from_str_radix(l.split_whitespace().nth(1).expect("mask"), 16).expect("hex"))
        .collect();
    let xfsz = 1u64 << (libc::SIGXFSZ - 1);
    assert_eq!(masks.len(), 2, "{out}");
    assert!(masks.iter().all(|m| m & xfsz == 0), "SIGXFSZ ignored or caught in a shell: {out}");
    let worker = gm.events_of("start")[0]["pid"].as_u64().expect("pid");
    let status = std::fs::read_to_string(format!("/proc/{worker}/status")).expect("the worker's status");
    let caught = status.lines().find_map(|l| l.strip_prefix("SigCgt:")).expect("SigCgt");
    let caught = u64::from_str_radix(caught.trim(), 16).expect("hex");
    assert_ne!(caught & xfsz, 0, "the worker catches SIGXFSZ");
    common::shut_down(gm);
}
