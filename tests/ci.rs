//! ci_status against a stand-in `gh` on PATH that prints recorded API pages (the real GitHub is
//! not reachable from the test machine).

mod common;

use std::os::unix::fs::PermissionsExt;

use common::{git, Gm};
use serde_json::{json, Value};

fn runs(n: usize, first_id: usize, last_conclusion: &str) -> Value {
    let runs: Vec<Value> = (0..n)
        .map(|i| {
            let conclusion = if i + 1 == n { last_conclusion } else { "success" };
            json!({ "id": first_id + i, "name": format!("ci {i}"), "status": "completed", "conclusion": conclusion,
                    "event": "push", "html_url": format!("https://github.com/acme/widget/actions/runs/{}", first_id + i),
                    "created_at": "2026-12-01T00:00:00Z", "updated_at": "2026-12-01T00:05:00Z" })
        })
        .collect();
    json!({ "total_count": 150, "workflow_runs": runs })
}

/// A workspace whose origin is on github.com, and a bin dir holding a stand-in `gh`.
fn setup(gh_script: &str) -> (tempfile::TempDir, Gm, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = dir.path().join("work");
    std::fs::create_dir(&work).expect("mkdir");
    git(&work, &["init", "-q", "-b", "main"]);
    git(
        &work,
        &["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "c"],
    );
    git(&work, &["remote", "add", "origin", "git@github.com:acme/widget.git"]);
    let sha = git(&work, &["rev-parse", "HEAD"]);
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).expect("bin");
    std::fs::write(dir.path().join("page1.json"), runs(100, 1, "success").to_string()).expect("page1");
    std::fs::write(dir.path().join("page2.json"), runs(50, 101, "failure").to_string()).expect("page2");
    let script = gh_script.replace("DIR", &dir.path().to_string_lossy());
    let gh = bin.join("gh");
    std::fs::write(&gh, script).expect("gh");
    std::fs::set_permissions(&gh, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let mut gm = Gm::start_in(&work, &["--surface", "tools"], &[("PATH", &path)]);
    gm.initialize("2025-11-25");
    (dir, gm, sha)
}

const PAGES: &str = r#"#!/bin/sh
echo "$@" >> DIR/calls.txt
case "$*" in
  *"&page=1") cat DIR/page1.json ;;
  *"&page=2") cat DIR/page2.json ;;
  *) echo '{"total_count":150,"workflow_runs":[]}' ;;
esac
"#;

#[test]
fn ci_status_follows_every_page_of_runs_for_head_on_origins_host() {
    let (dir, mut gm, sha) = setup(PAGES);
    let r = gm.call_ok("ci_status", json!({}));
    assert_eq!(r["host"], "github.com");
    assert_eq!(r["repo"], "acme/widget");
    assert_eq!(r["sha"], sha);
    assert_eq!(r["pages"], 2);
    assert_eq!(r["runs"].as_array().expect("runs").len(), 150);
    assert_eq!(r["state"], "failure", "one run of the second page failed");
    let calls = std::fs::read_to_string(dir.path().join("calls.txt")).expect("calls");
    assert!(
        calls.lines().all(|l| l.contains("--hostname github.com") && l.contains(&format!("head_sha={sha}"))),
        "{calls}"
    );
}

#[test]
fn a_gh_that_is_not_logged_in_or_missing_is_a_clear_error() {
    let (_dir, mut gm, _) =
        setup("#!/bin/sh\necho 'To get started with GitHub CLI, please run:  gh auth login' >&2\nexit 4\n");
    let e = gm.call_err("ci_status", json!({}));
    assert!(e["message"].as_str().expect("message").contains("not logged in"), "{e}");

    let dir = tempfile::tempdir().expect("tempdir");
    git(dir.path(), &["init", "-q"]);
    git(
        dir.path(),
        &["-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "--allow-empty", "-m", "c"],
    );
    git(dir.path(), &["remote", "add", "origin", "https://github.com/acme/widget"]);
    let empty = tempfile::tempdir().expect("empty PATH dir");
    let mut gm = Gm::start_in(dir.path(), &["--surface", "tools"], &[("PATH", &empty.path().to_string_lossy())]);
    gm.initialize("2025-11-25");
    let e = gm.call_err("ci_status", json!({}));
    assert!(e["message"].as_str().expect("message").contains("not installed"), "{e}");
}
