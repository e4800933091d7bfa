//! `gm bench`: a recorded session replayed against a fresh server reproduces its files.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{gm_bin, Gm};
use serde_json::{json, Value};

fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read dir").flatten() {
            let p = e.path();
            let rel = p.strip_prefix(dir).expect("inside").to_string_lossy().into_owned();
            if rel == ".gm" {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((rel, std::fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn a_replay_reproduces_the_recorded_files_and_reports_every_tool() {
    let root = tempfile::tempdir().expect("tempdir");
    let initial = root.path().join("initial");
    std::fs::create_dir_all(initial.join("src")).expect("mkdir");
    std::fs::write(initial.join("src/lib.rs"), "pub fn a() {}\n").expect("write");
    std::fs::write(initial.join("notes.txt"), "one\n").expect("write");
    // Record: a session in a copy of the initial workspace.
    let recorded = root.path().join("recorded");
    std::fs::create_dir_all(recorded.join("src")).expect("mkdir");
    for f in ["src/lib.rs", "notes.txt"] {
        std::fs::copy(initial.join(f), recorded.join(f)).expect("copy");
    }
    let mut gm = Gm::start_in(&recorded, &["--surface", "tools"], &[]);
    gm.initialize("2025-11-25");
    gm.call_ok("read_file", json!({ "path": "src/lib.rs" }));
    gm.call_ok(
        "edit_file",
        json!({ "path": "src/lib.rs", "old": "pub fn a() {}", "new": "pub fn a() {}\npub fn b() {}" }),
    );
    gm.call_ok("write_file", json!({ "path": "src/new.rs", "content": "// new\n" }));
    gm.call_ok("edit_file", json!({ "path": "notes.txt", "old": "one", "new": "two" }));
    gm.call_ok("list_dir", json!({ "path": "src" }));
    gm.call_ok("stat_file", json!({ "path": "notes.txt" }));
    gm.call_err("read_file", json!({ "path": "missing.txt" }));
    gm.close_stdin();
    gm.wait_exit(Duration::from_secs(5)).expect("exit");
    // An event no server can replay.
    let log = recorded.join(".gm/log.jsonl");
    let mut text = std::fs::read_to_string(&log).expect("log");
    text.push_str(
        "{\"seq\":999999,\"ts\":\"x\",\"run\":\"r\",\"kind\":\"action\",\"tool\":\"no_such_tool\",\"args\":{}}\n",
    );
    std::fs::write(&log, text).expect("append");

    let kept = root.path().join("replayed");
    let out = Command::new(gm_bin())
        .arg("bench")
        .arg(&log)
        .arg("--workspace")
        .arg(&initial)
        .args(["--concurrency", "4", "--json", "--keep"])
        .arg(&kept)
        .output()
        .expect("gm bench runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("--json output parses");
    for field in [
        "log",
        "surface",
        "calls",
        "repeat",
        "concurrency",
        "wallMs",
        "callsPerS",
        "errors",
        "tools",
        "failures",
        "workspace",
    ] {
        assert!(report.get(field).is_some(), "report has {field}");
    }
    assert_eq!(report["surface"], "tools");
    assert_eq!(report["calls"], 8);
    assert_eq!(report["tools"]["edit_file"]["calls"], 2);
    assert!(report["tools"]["read_file"]["p50Ms"].as_f64().expect("p50") > 0.0);
    let failed: Vec<(u64, String)> = report["failures"]
        .as_array()
        .expect("failures")
        .iter()
        .map(|f| (f["seq"].as_u64().unwrap_or(0), f["tool"].as_str().unwrap_or("").to_owned()))
        .collect();
    assert!(failed.contains(&(999_999, "no_such_tool".to_owned())), "{failed:?}");
    assert!(failed.iter().any(|(_, t)| t == "read_file"), "the missing file is reported, the rest went on");
    assert_eq!(files(&kept), files(&recorded), "the replayed files end identical to the recorded ones");

    let table = Command::new(gm_bin()).arg("bench").arg(&log).arg("--workspace").arg(&initial).output().expect("runs");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("| edit_file | 2 |"), "{text}");
}

#[test]
fn a_log_without_actions_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log.jsonl");
    std::fs::write(&log, "{\"seq\":1,\"kind\":\"start\"}\n").expect("write");
    let out = Command::new(gm_bin()).arg("bench").arg(&log).output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no action events"));
}
