//! Requirement rows and open questions: plain files, the in-place resolve with real witnesses,
//! and the push-close flow against a bare origin on disk.

mod common;

use std::path::Path;

use common::{git, Gm};
use serde_json::json;

fn repo_with_origin() -> (tempfile::TempDir, Gm) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q", "--bare", "-b", "main", "origin.git"]);
    git(d, &["clone", "-q", "origin.git", "work"]);
    let work = d.join("work");
    git(&work, &["config", "user.name", "Tester"]);
    git(&work, &["config", "user.email", "tester@example.invalid"]);
    git(&work, &["checkout", "-q", "-b", "main"]);
    std::fs::write(work.join("README"), "x\n").expect("write");
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "first"]);
    git(&work, &["push", "-q", "-u", "origin", "main"]);
    let mut gm = Gm::start_in(&work, &["--surface", "tools"], &[]);
    gm.initialize("2025-11-25");
    (dir, gm)
}

fn work(dir: &Path) -> std::path::PathBuf {
    dir.join("work")
}

#[test]
fn rows_are_plain_files_that_move_through_their_states() {
    let (dir, mut gm) = repo_with_origin();
    let a = gm.call_ok("prd_add", json!({ "title": "parse the config", "text": "all three layers" }));
    assert_eq!((a["id"].as_str(), a["state"].as_str()), (Some("prd-0001"), Some("open")));
    let file = work(dir.path()).join("work/rows/prd-0001.json");
    let on_disk: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).expect("row file")).expect("json");
    assert_eq!(on_disk["title"], "parse the config");
    gm.call_ok("prd_add", json!({ "title": "second" }));
    assert_eq!(gm.call_ok("prd_list", json!({}))["rows"].as_array().expect("rows").len(), 2);
    assert_eq!(gm.call_ok("prd_park", json!({ "id": "prd-0002", "reason": "later" }))["state"], "parked");
    assert_eq!(gm.call_ok("prd_list", json!({ "state": "open" }))["rows"].as_array().expect("rows").len(), 1);
    assert_eq!(gm.call_ok("prd_reopen", json!({ "id": "prd-0002" }))["state"], "open");
    assert_eq!(gm.call_err("prd_reopen", json!({ "id": "prd-0002" }))["code"], "refused");
    gm.call_ok("prd_delete", json!({ "id": "prd-0002" }));
    assert!(!work(dir.path()).join("work/rows/prd-0002.json").exists());
    assert_eq!(gm.call_err("prd_park", json!({ "id": "prd-0099" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("prd_park", json!({ "id": "../x" }))["code"], "invalid_args");
    let q = gm.call_ok("unknown_add", json!({ "question": "which protocol versions do hosts send?" }));
    assert_eq!(q["id"], "unknown-0001");
    let ctx = gm.call_ok("next_context", json!({}));
    assert_eq!(ctx["openRows"][0]["id"], "prd-0001");
    assert_eq!(ctx["openUnknowns"][0]["id"], "unknown-0001");
    let r = gm.call_ok("unknown_resolve", json!({ "id": "unknown-0001", "answer": "2025-06-18 mostly" }));
    assert_eq!(r["state"], "resolved");
    assert_eq!(gm.call_ok("unknown_list", json!({ "state": "open" }))["rows"], json!([]));
}

#[test]
fn resolve_in_place_needs_a_real_log_seq_and_a_real_commit() {
    let (dir, mut gm) = repo_with_origin();
    gm.call_ok("prd_add", json!({ "title": "x" }));
    let head = git(&work(dir.path()), &["rev-parse", "HEAD"]);
    let seq = gm.events_of("action").last().expect("an action")["seq"].as_u64().expect("seq");
    let e = gm.call_err("prd_resolve", json!({ "id": "prd-0001", "event": 999_999, "commit": head }));
    assert!(e["message"].as_str().expect("message").contains("not in the run log"));
    let e = gm.call_err("prd_resolve", json!({ "id": "prd-0001", "event": seq, "commit": "deadbeef" }));
    assert!(e["message"].as_str().expect("message").contains("does not exist"));
    let r = gm.call_ok("prd_resolve", json!({ "id": "prd-0001", "event": seq, "commit": "HEAD" }));
    assert_eq!(r["row"]["state"], "resolved");
    assert_eq!(r["row"]["witness"], json!({ "seq": seq, "commit": head }));
    assert_eq!(
        gm.call_err("prd_reopen", json!({ "id": "prd-0001" }))["code"],
        "refused",
        "a resolved row is never reopened"
    );
}

#[test]
fn push_close_commits_the_close_on_origin_main_by_full_sha() {
    let (dir, mut gm) = repo_with_origin();
    let w = work(dir.path());
    gm.call_ok("prd_add", json!({ "title": "ship it" }));
    gm.call_ok("write_file", json!({ "path": "feature.txt", "content": "done\n" }));
    gm.call_ok("git_add", json!({ "paths": ["."] }));
    let sha = gm.call_ok("git_commit", json!({ "message": "feature" }))["sha"].as_str().expect("sha").to_owned();

    // Not on origin yet: refused, and nothing changes.
    let e = gm.call_err("prd_resolve", json!({ "id": "prd-0001", "witness": sha, "push": true }));
    assert!(e["message"].as_str().expect("message").contains("not on origin/main"), "{e}");
    assert!(w.join("work/rows/prd-0001.json").is_file());
    assert!(!w.join("work/closes/prd-0001.txt").exists());

    gm.call_ok("git_push", json!({}));
    let r = gm.call_ok("prd_resolve", json!({ "id": "prd-0001", "witness": sha, "push": true }));
    let close = r["closeCommit"].as_str().expect("close commit").to_owned();
    let origin = dir.path().join("origin.git");
    assert_eq!(git(&origin, &["rev-parse", "main"]), close);
    assert_eq!(git(&origin, &["rev-parse", "main~1"]), sha);
    let files = git(&origin, &["show", "--name-status", "--format=", "main"]);
    assert!(files.contains("A\twork/closes/prd-0001.txt") && files.contains("D\twork/rows/prd-0001.json"), "{files}");
    let text = git(&origin, &["show", "main:work/closes/prd-0001.txt"]);
    assert!(text.contains(&sha));
    assert!(!w.join("work/rows/prd-0001.json").exists());
    assert!(w.join("work/closes/prd-0001.txt").is_file());
    assert_eq!(git(&w, &["rev-parse", "HEAD"]), close, "the local main followed");
    assert_eq!(git(&w, &["status", "--porcelain", "--", "work"]), "", "the working tree matches the close");
    // A new row does not reuse a closed id.
    assert_eq!(gm.call_ok("prd_add", json!({ "title": "next" }))["id"], "prd-0002");
}

#[test]
fn a_push_close_whose_push_is_rejected_changes_nothing() {
    let (dir, mut gm) = repo_with_origin();
    let w = work(dir.path());
    gm.call_ok("prd_add", json!({ "title": "x" }));
    let head = git(&w, &["rev-parse", "HEAD"]);
    // origin cannot update main: another writer holds its lock (a local remote runs no hooks).
    std::fs::write(dir.path().join("origin.git/refs/heads/main.lock"), "").expect("lock");
    let e = gm.call_err("prd_resolve", json!({ "id": "prd-0001", "witness": head, "push": true }));
    assert!(e["message"].as_str().expect("message").contains("not pushed"), "{e}");
    assert!(w.join("work/rows/prd-0001.json").is_file(), "the row is still there");
    assert!(!w.join("work/closes/prd-0001.txt").exists());
    assert_eq!(git(&dir.path().join("origin.git"), &["rev-parse", "main"]), head);
    assert_eq!(git(&w, &["rev-parse", "HEAD"]), head);
}

#[test]
fn a_row_never_pushed_can_still_be_closed_on_origin() {
    let (dir, mut gm) = repo_with_origin();
    let w = work(dir.path());
    gm.call_ok("prd_add", json!({ "title": "local only" }));
    let head = git(&w, &["rev-parse", "HEAD"]);
    let r = gm.call_ok("prd_resolve", json!({ "id": "prd-0001", "witness": head, "push": true }));
    let origin = dir.path().join("origin.git");
    assert_eq!(git(&origin, &["rev-parse", "main"]), r["closeCommit"].as_str().expect("sha"));
    assert_eq!(git(&origin, &["show", "--name-status", "--format=", "main"]), "A\twork/closes/prd-0001.txt");
    assert!(!w.join("work/rows/prd-0001.json").exists());
}
