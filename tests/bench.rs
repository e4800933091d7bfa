//! `gm bench`: a recorded session replayed against a fresh server reproduces its files.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{gm_command, Gm};
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
    let out = gm_command()
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

    let table = gm_command().arg("bench").arg(&log).arg("--workspace").arg(&initial).output().expect("runs");
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(text.contains("| edit_file | 2 |"), "{text}");
}

#[test]
fn a_log_without_actions_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("log.jsonl");
    std::fs::write(&log, "{\"seq\":1,\"kind\":\"start\"}\n").expect("write");
    let out = gm_command().arg("bench").arg(&log).output().expect("runs");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no action events"));
}

/// A short recorded session in `workspace`; returns its log.
fn record(workspace: &Path) -> std::path::PathBuf {
    let mut gm = Gm::start_in(workspace, &["--surface", "tools"], &[]);
    gm.initialize("2025-11-25");
    gm.call_ok("write_file", json!({ "path": "a.txt", "content": "a\n" }));
    gm.call_ok("read_file", json!({ "path": "a.txt" }));
    gm.close_stdin();
    gm.wait_exit(Duration::from_secs(5)).expect("exit");
    workspace.join(".gm/log.jsonl")
}

#[test]
fn a_log_copied_anywhere_replays_in_the_workspace_its_start_event_names() {
    let ws = tempfile::tempdir().expect("tempdir");
    let log = record(ws.path());
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let copy = elsewhere.path().join("recorded.jsonl");
    std::fs::copy(&log, &copy).expect("copy the log out");
    // By an absolute path outside any .gm/, and by a relative one.
    for (arg, cwd) in [(copy.clone(), std::env::temp_dir()), ("recorded.jsonl".into(), elsewhere.path().to_owned())] {
        let out = gm_command().arg("bench").arg(&arg).arg("--json").current_dir(&cwd).output().expect("runs");
        assert!(out.status.success(), "{}: {}", arg.display(), String::from_utf8_lossy(&out.stderr));
        let report: Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!((report["calls"].as_u64(), report["errors"].as_u64()), (Some(2), Some(0)), "{report}");
    }
}

#[test]
fn a_scratch_copy_inside_the_workspace_never_copies_itself() {
    let ws = tempfile::tempdir().expect("tempdir");
    let log = record(ws.path());
    // The temp directory lies inside the workspace being copied.
    let tmp = ws.path().join("tmp");
    std::fs::create_dir(&tmp).expect("mkdir");
    let kept = tmp.join("kept");
    let out = gm_command()
        .arg("bench")
        .arg(&log)
        .args(["--json", "--keep"])
        .arg(&kept)
        .env("TMPDIR", &tmp)
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(kept.join("a.txt").is_file());
    assert!(!kept.join("tmp/kept").exists(), "the copy left itself out");
}

#[test]
fn a_missing_log_is_its_own_error() {
    let out = gm_command().arg("bench").arg("/nonexistent/recorded.jsonl").output().expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot read the log /nonexistent/recorded.jsonl"), "{err}");
}

#[test]
fn long_contents_are_logged_as_blobs_and_a_replay_writes_them_back() {
    let ws = tempfile::tempdir().expect("tempdir");
    let big: String = (0..20_000).map(|i| format!("content line {i}\n")).collect();
    let mut gm = Gm::start_in(ws.path(), &["--surface", "tools"], &[]);
    gm.initialize("2025-11-25");
    gm.call_ok("write_file", json!({ "path": "big.txt", "content": big }));
    gm.call_ok("edit_file", json!({ "path": "big.txt", "old": "content line 7\n", "new": "seven\n" }));
    gm.close_stdin();
    gm.wait_exit(Duration::from_secs(5)).expect("exit");
    let log = ws.path().join(".gm/log.jsonl");
    let text = std::fs::read_to_string(&log).expect("log");
    let write = text.lines().find(|l| l.contains("\"tool\":\"write_file\"")).expect("the write's action");
    assert!(write.len() < 1000, "the log line stays small: {} bytes", write.len());
    let event: Value = serde_json::from_str(write).expect("json");
    let reference = &event["args"]["content"];
    assert_eq!(reference["bytes"], big.len());
    let digest = reference["$blob"].as_str().expect("a blob reference").trim_start_matches("sha256:").to_owned();
    let blob = ws.path().join(".gm/blobs").join(&digest[..2]).join(&digest);
    assert_eq!(std::fs::read_to_string(&blob).expect("the blob"), big);

    let original = tempfile::tempdir().expect("tempdir");
    let kept = original.path().join("replayed");
    let replay = |kept: &Path| {
        let out = gm_command()
            .arg("bench")
            .arg(&log)
            .args(["--json", "--workspace"])
            .arg(original.path())
            .arg("--keep")
            .arg(kept)
            .output()
            .expect("runs");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Value>(&out.stdout).expect("json")
    };
    let report = replay(&kept);
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(
        std::fs::read_to_string(kept.join("big.txt")).expect("replayed"),
        big.replacen("content line 7\n", "seven\n", 1)
    );
    // Without its blob the write cannot be replayed: it is reported, and the rest goes on.
    std::fs::remove_file(&blob).expect("remove the blob");
    let report = replay(&original.path().join("again"));
    let failures = report["failures"].as_array().expect("failures");
    assert!(
        failures.iter().any(|f| f["tool"] == "write_file" && f["error"].as_str().is_some_and(|e| e.contains("pruned"))),
        "{report}"
    );
}
