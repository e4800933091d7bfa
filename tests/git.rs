//! Git verbs on real repositories: a bare repository on disk as origin, a second clone that
//! pushes conflicting work.

mod common;

use std::path::Path;

use common::{git, Gm};
use serde_json::json;

fn configure(dir: &Path) {
    git(dir, &["config", "user.name", "Tester"]);
    git(dir, &["config", "user.email", "tester@example.invalid"]);
}

/// origin.git (bare), work (gm's workspace) and other (a second clone), all on `main`.
fn setup() -> (tempfile::TempDir, Gm) {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    git(d, &["init", "-q", "--bare", "-b", "main", "origin.git"]);
    git(d, &["clone", "-q", "origin.git", "work"]);
    let work = d.join("work");
    configure(&work);
    git(&work, &["checkout", "-q", "-b", "main"]);
    std::fs::write(work.join("shared.txt"), "line one\nline two\n").expect("write");
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "first"]);
    git(&work, &["push", "-q", "-u", "origin", "main"]);
    git(d, &["clone", "-q", "origin.git", "other"]);
    configure(&d.join("other"));
    let mut gm = Gm::start_in(&work, &["--surface", "tools"], &[]);
    gm.initialize("2025-11-25");
    (dir, gm)
}

#[test]
fn status_add_commit_push_reach_origin() {
    let (dir, mut gm) = setup();
    gm.call_ok("write_file", json!({ "path": "new.txt", "content": "hello\n" }));
    let st = gm.call_ok("git_status", json!({}));
    assert_eq!(st["entries"], json!([{ "path": "new.txt", "worktree": "untracked" }]));
    assert_eq!(st["clean"], false);
    let staged = gm.call_ok("git_add", json!({ "paths": ["new.txt"] }));
    assert_eq!(staged["entries"], json!([{ "path": "new.txt", "index": "added" }]));
    let c = gm.call_ok("git_commit", json!({ "message": "add new.txt\n\nbody" }));
    assert_eq!(c["summary"], "add new.txt");
    assert_eq!(c["branch"], "main");
    let sha = c["sha"].as_str().expect("sha").to_owned();
    let state = gm.call_ok("git_state", json!({}));
    assert_eq!((state["ahead"].as_u64(), state["dirty"].as_bool()), (Some(1), Some(false)));
    let p = gm.call_ok("git_push", json!({}));
    assert_eq!(p["pushed"], sha);
    assert_eq!(git(&dir.path().join("origin.git"), &["rev-parse", "main"]), sha);
    assert_eq!(git(&dir.path().join("work"), &["log", "-1", "--format=%an <%ae>"]), "Tester <tester@example.invalid>");
    assert_eq!(gm.call_ok("git_state", json!({}))["ahead"], 0);
}

#[test]
fn an_empty_commit_is_refused_unless_asked_for() {
    let (_dir, mut gm) = setup();
    let e = gm.call_err("git_commit", json!({ "message": "nothing" }));
    assert_eq!(e["code"], "refused");
    assert!(e["message"].as_str().expect("message").contains("nothing to commit"));
    gm.call_ok("git_commit", json!({ "message": "marker", "allowEmpty": true }));
    assert_eq!(gm.call_ok("git_log", json!({ "limit": 1 }))["commits"][0]["summary"], "marker");
}

#[test]
fn a_rejected_push_and_a_conflicting_pull_change_nothing() {
    let (dir, mut gm) = setup();
    let other = dir.path().join("other");
    std::fs::write(other.join("shared.txt"), "line one\nTHEIRS\n").expect("write");
    git(&other, &["commit", "-q", "-am", "theirs"]);
    git(&other, &["push", "-q", "origin", "main"]);

    gm.call_ok("edit_file", json!({ "path": "shared.txt", "old": "line two", "new": "OURS" }));
    gm.call_ok("git_add", json!({ "paths": ["."] }));
    let ours = gm.call_ok("git_commit", json!({ "message": "ours" }))["sha"].as_str().expect("sha").to_owned();
    let e = gm.call_err("git_push", json!({}));
    assert_eq!(e["code"], "refused");
    assert!(e["message"].as_str().expect("message").contains("rejected"), "{e}");

    let e = gm.call_err("git_pull", json!({}));
    assert!(e["message"].as_str().expect("message").contains("diverged"), "{e}");
    let e = gm.call_err("git_pull", json!({ "ffOnly": false }));
    assert!(e["message"].as_str().expect("message").contains("conflicts"), "{e}");
    assert_eq!(git(&dir.path().join("work"), &["rev-parse", "HEAD"]), ours, "HEAD did not move");
    let text = std::fs::read_to_string(dir.path().join("work/shared.txt")).expect("read");
    assert_eq!(text, "line one\nOURS\n", "the file was left as it was");
    assert_eq!(gm.call_ok("git_state", json!({}))["operation"], "clean");
}

#[test]
fn pull_fast_forwards_and_merges_diverged_work_that_does_not_conflict() {
    let (dir, mut gm) = setup();
    let other = dir.path().join("other");
    std::fs::write(other.join("theirs.txt"), "t\n").expect("write");
    git(&other, &["add", "."]);
    git(&other, &["commit", "-q", "-m", "theirs 1"]);
    git(&other, &["push", "-q", "origin", "main"]);
    assert_eq!(gm.call_ok("git_pull", json!({}))["result"], "fast-forward");
    assert!(dir.path().join("work/theirs.txt").is_file());
    assert_eq!(gm.call_ok("git_pull", json!({}))["result"], "up-to-date");

    std::fs::write(other.join("theirs2.txt"), "t2\n").expect("write");
    git(&other, &["add", "."]);
    git(&other, &["commit", "-q", "-m", "theirs 2"]);
    git(&other, &["push", "-q", "origin", "main"]);
    gm.call_ok("write_file", json!({ "path": "ours.txt", "content": "o\n" }));
    gm.call_ok("git_add", json!({ "paths": ["ours.txt"] }));
    gm.call_ok("git_commit", json!({ "message": "ours" }));
    let m = gm.call_ok("git_pull", json!({ "ffOnly": false }));
    assert_eq!(m["result"], "merge");
    assert!(dir.path().join("work/theirs2.txt").is_file() && dir.path().join("work/ours.txt").is_file());
    let log = gm.call_ok("git_log", json!({ "limit": 1 }));
    assert_eq!(log["commits"][0]["parents"], 2);
    gm.call_ok("git_push", json!({}));
}

#[test]
fn log_diff_and_show_describe_history() {
    let (_dir, mut gm) = setup();
    gm.call_ok("edit_file", json!({ "path": "shared.txt", "old": "line two", "new": "line 2" }));
    let d = gm.call_ok("git_diff", json!({}));
    assert_eq!((d["insertions"].as_u64(), d["deletions"].as_u64()), (Some(1), Some(1)));
    assert!(d["patch"].as_str().expect("patch").contains("-line two\n+line 2"));
    assert_eq!(gm.call_ok("git_diff", json!({ "staged": true }))["files"], json!([]));
    gm.call_ok("git_add", json!({ "paths": ["shared.txt"] }));
    assert_eq!(gm.call_ok("git_diff", json!({ "staged": true }))["files"][0]["path"], "shared.txt");
    gm.call_ok("git_commit", json!({ "message": "second" }));
    gm.call_ok("write_file", json!({ "path": "other.txt", "content": "x\n" }));
    gm.call_ok("git_add", json!({ "paths": ["other.txt"] }));
    gm.call_ok("git_commit", json!({ "message": "third" }));
    let all = gm.call_ok("git_log", json!({}));
    let summaries: Vec<&str> =
        all["commits"].as_array().expect("log").iter().filter_map(|c| c["summary"].as_str()).collect();
    assert_eq!(summaries, ["third", "second", "first"]);
    let touching = gm.call_ok("git_log", json!({ "path": "shared.txt" }));
    assert_eq!(touching["commits"].as_array().expect("log").len(), 2);
    let range = gm.call_ok("git_log", json!({ "range": "HEAD~2..HEAD" }));
    assert_eq!(range["commits"].as_array().expect("log").len(), 2);
    let between = gm.call_ok("git_diff", json!({ "from": "HEAD~2", "to": "HEAD" }));
    assert_eq!(between["files"].as_array().expect("files").len(), 2);
    let show = gm.call_ok("git_show", json!({ "rev": "HEAD~1" }));
    assert_eq!(show["message"], "second");
    assert_eq!(show["diff"]["insertions"], 1);
    assert_eq!(gm.call_err("git_show", json!({ "rev": "no-such-ref" }))["code"], "invalid_args");
    assert_eq!(gm.call_err("git_log", json!({ "range": "nope..HEAD" }))["code"], "invalid_args");
}

#[test]
fn branches_and_checkout_refuse_to_lose_work() {
    let (dir, mut gm) = setup();
    let s = gm.call_ok("git_checkout", json!({ "rev": "feature", "create": true }));
    assert_eq!(s["branch"], "feature");
    gm.call_ok("edit_file", json!({ "path": "shared.txt", "old": "line two", "new": "feature work" }));
    gm.call_ok("git_add", json!({ "paths": ["."] }));
    gm.call_ok("git_commit", json!({ "message": "feature" }));
    gm.call_ok("edit_file", json!({ "path": "shared.txt", "old": "feature work", "new": "uncommitted" }));
    let e = gm.call_err("git_checkout", json!({ "rev": "main" }));
    assert_eq!(e["code"], "refused");
    assert_eq!(std::fs::read_to_string(dir.path().join("work/shared.txt")).expect("read"), "line one\nuncommitted\n");
    gm.call_ok("git_add", json!({ "paths": ["."] }));
    gm.call_ok("git_commit", json!({ "message": "more" }));
    assert_eq!(gm.call_ok("git_checkout", json!({ "rev": "main" }))["branch"], "main");
    let list = gm.call_ok("git_branch", json!({}));
    let names: Vec<&str> =
        list["branches"].as_array().expect("list").iter().filter_map(|b| b["name"].as_str()).collect();
    assert_eq!(names, ["feature", "main"]);
    assert!(gm.call_err("git_branch", json!({ "action": "delete", "name": "feature" }))["message"]
        .as_str()
        .expect("message")
        .contains("not merged"));
    gm.call_ok("git_branch", json!({ "action": "delete", "name": "feature", "force": true }));
    assert_eq!(gm.call_err("git_branch", json!({ "action": "delete", "name": "main" }))["code"], "refused");
    assert_eq!(gm.call_err("git_checkout", json!({ "rev": "nowhere" }))["code"], "invalid_args");
    gm.call_ok("git_branch", json!({ "action": "create", "name": "at-first", "from": "HEAD" }));
}

#[test]
fn rm_stops_tracking_and_refuses_untracked_paths() {
    let (dir, mut gm) = setup();
    assert_eq!(gm.call_err("git_rm", json!({ "paths": ["shared.txt", "nope.txt"] }))["code"], "refused");
    assert!(dir.path().join("work/shared.txt").is_file(), "nothing was removed");
    gm.call_ok("git_rm", json!({ "paths": ["shared.txt"] }));
    assert!(!dir.path().join("work/shared.txt").exists());
    let st = gm.call_ok("git_status", json!({}));
    assert_eq!(st["entries"], json!([{ "path": "shared.txt", "index": "deleted" }]));
}

#[test]
fn git_verbs_outside_a_repository_say_so() {
    let mut gm = Gm::start(&["--surface", "tools"]);
    gm.initialize("2025-11-25");
    let e = gm.call_err("git_status", json!({}));
    assert_eq!(e["code"], "invalid_args");
    assert!(e["message"].as_str().expect("message").contains("not inside a git repository"));
}

#[test]
fn staging_everything_leaves_gms_own_state_out() {
    let (dir, mut gm) = setup();
    gm.call_ok("write_file", json!({ "path": "a.txt", "content": "a\n" }));
    gm.call_ok("git_add", json!({ "paths": ["."] }));
    gm.call_ok("git_commit", json!({ "message": "a" }));
    let tracked = git(&dir.path().join("work"), &["ls-files"]);
    assert!(!tracked.contains(".gm/"), "the run log and gm's state are never committed: {tracked}");
    assert!(!dir.path().join("work/.gitignore").exists(), "gm's folder ignores itself");
}

#[test]
fn serving_a_fresh_repository_leaves_git_status_clean() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    git(&work, &["init", "-q", "-b", "main"]);
    configure(&work);
    std::fs::write(work.join("a.txt"), "a\n").expect("write");
    git(&work, &["add", "."]);
    git(&work, &["commit", "-q", "-m", "first"]);
    let mut gm = Gm::start_in(&work, &[], &[]);
    gm.ready();
    // A call that writes spilled output and a job's files under .gm/, and the log.
    gm.js("await gm.run_shell({ command: 'seq 1 200000' }); await gm.job_start({ name: 'j', command: 'true' }); return 1;");
    gm.close_stdin();
    assert!(gm.wait_exit(common::TIMEOUT).expect("gm exits").success());
    assert!(work.join(".gm/log.jsonl").is_file());
    assert_eq!(git(&work, &["status", "--porcelain", "--ignored=no", "--untracked-files=all"]), "");
    assert!(!work.join(".gitignore").exists(), "the workspace's .gitignore is never made for gm");
    assert_eq!(std::fs::read_to_string(work.join(".gm/.gitignore")).expect(".gm/.gitignore"), "*\n");
    assert_eq!(git(&work, &["check-ignore", ".gm/secrets.env"]), ".gm/secrets.env");
}

#[test]
fn pull_refuses_a_dirty_tree_and_changes_nothing() {
    let (dir, mut gm) = setup();
    let other = dir.path().join("other");
    std::fs::write(other.join("theirs.txt"), "t\n").expect("write");
    git(&other, &["add", "."]);
    git(&other, &["commit", "-q", "-m", "theirs"]);
    git(&other, &["push", "-q", "origin", "main"]);
    let before = git(&dir.path().join("work"), &["rev-parse", "HEAD"]);
    gm.call_ok("edit_file", json!({ "path": "shared.txt", "old": "line two", "new": "local edit" }));
    let e = gm.call_err("git_pull", json!({}));
    assert_eq!(e["code"], "refused");
    assert!(e["message"].as_str().expect("message").contains("uncommitted changes"), "{e}");
    assert_eq!(git(&dir.path().join("work"), &["rev-parse", "HEAD"]), before);
    assert!(!dir.path().join("work/theirs.txt").exists());
}

#[test]
fn fetch_updates_remote_tracking_refs_and_state_shows_behind() {
    let (dir, mut gm) = setup();
    let other = dir.path().join("other");
    std::fs::write(other.join("t.txt"), "t\n").expect("write");
    git(&other, &["add", "."]);
    git(&other, &["commit", "-q", "-m", "theirs"]);
    git(&other, &["push", "-q", "origin", "main"]);
    let theirs = git(&other, &["rev-parse", "HEAD"]);
    let f = gm.call_ok("git_fetch", json!({}));
    assert!(
        f["refs"].as_array().expect("refs").contains(&json!({ "ref": "refs/remotes/origin/main", "sha": theirs })),
        "{f}"
    );
    let s = gm.call_ok("git_state", json!({}));
    assert_eq!((s["ahead"].as_u64(), s["behind"].as_u64()), (Some(0), Some(1)));
    assert!(!dir.path().join("work/t.txt").exists(), "fetch does not touch the working tree");
    assert_eq!(gm.call_err("git_fetch", json!({ "remote": "nowhere" }))["code"], "invalid_args");
}

#[test]
fn two_large_diffs_of_one_server_are_saved_to_files_of_their_own() {
    let (dir, mut gm) = setup();
    let work = dir.path().join("work");
    // Two files with the same number of inserted lines, each diff past the inline cap.
    let lines = |tag: &str| (0..20_000).map(|i| format!("{tag} line {i}\n")).collect::<String>();
    std::fs::write(work.join("a.txt"), lines("alpha")).expect("write");
    std::fs::write(work.join("b.txt"), lines("bravo")).expect("write");
    git(&work, &["add", "a.txt", "b.txt"]);
    let a = gm.call_ok("git_diff", json!({ "staged": true, "path": "a.txt" }));
    let b = gm.call_ok("git_diff", json!({ "staged": true, "path": "b.txt" }));
    assert_eq!(a["insertions"], b["insertions"]);
    let (fa, fb) = (a["patchFile"].as_str().expect("a spilled"), b["patchFile"].as_str().expect("b spilled"));
    assert_ne!(fa, fb);
    assert!(std::fs::read_to_string(fa).expect("a's patch").contains("alpha line 19999"));
    assert!(std::fs::read_to_string(fb).expect("b's patch").contains("bravo line 19999"));
}
