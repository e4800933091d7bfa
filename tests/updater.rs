//! The Updater through the real binary: `gm serve` with a temporary HOME, checking a manifest
//! served on 127.0.0.1 (`GMNEW_UPDATE_URL`), read back from the run log's `update` events.
//! Test builds are development builds, so the tests that expect requests set
//! `GMNEW_AUTO_UPDATE=1`.

mod common;
#[path = "../actors/src/updater/testing.rs"]
mod testing;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Gm;
use gm_actors::builds::{TARGET, VERSION};
use serde_json::Value;
use testing::{build_archive, gm_script, manifest_json, sha256_hex, TestServer};

const MANIFEST: &str = "/releases/manifest.json";
const WAIT: Duration = Duration::from_secs(30);

/// A gm serve in a workspace of its own, with `home` as HOME.
struct Served {
    gm: Gm,
    _workspace: tempfile::TempDir,
}

fn serve(home: &Path, server: &TestServer, auto_update: &str) -> Served {
    let workspace = tempfile::tempdir().expect("workspace");
    let url = server.url(MANIFEST);
    let home = home.to_str().expect("utf-8 home");
    let env = [("HOME", home), ("GMNEW_UPDATE_URL", url.as_str()), ("GMNEW_AUTO_UPDATE", auto_update)];
    let gm = Gm::start_in(&workspace.path().canonicalize().expect("canonical"), &[], &env);
    Served { gm, _workspace: workspace }
}

impl Served {
    /// Waits until the `update` events satisfy `done`, and returns them.
    fn wait_updates(&mut self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let events = self.gm.events_of("update");
            if done(&events) {
                return events;
            }
            assert!(Instant::now() < deadline, "no {what} in time; update events: {events:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until an `update` event has one of these statuses.
    fn wait_status(&mut self, statuses: &[&str]) -> Vec<Value> {
        self.wait_updates(&format!("{statuses:?} event"), |events| {
            events.iter().any(|e| statuses.iter().any(|s| e["status"] == *s))
        })
    }

    fn stop(mut self) -> Vec<Value> {
        self.gm.close_stdin();
        self.gm.wait_exit(WAIT).expect("gm exits");
        common::read_log(&self.gm.log_path()).into_iter().filter(|e| e["kind"] == "update").collect()
    }
}

fn statuses(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["status"].as_str()).collect()
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    match std::fs::read_dir(dir) {
        Ok(list) => list.map(|e| e.expect("entry").path()).collect(),
        Err(_) => Vec::new(),
    }
}

/// Waits for a file to hold `text` (state another process writes).
fn wait_file_holds(path: &Path, text: &str) {
    let deadline = Instant::now() + WAIT;
    while !std::fs::read_to_string(path).is_ok_and(|t| t.contains(text)) {
        assert!(Instant::now() < deadline, "{} never held {text}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Serves a build of 99.0.0 for this target and a manifest listing it (with `sha256` in place
/// of the archive's when given). Returns the archive's size and its path on the server.
fn publish_99(server: &TestServer, sha256: Option<&str>) -> (usize, String) {
    let name = format!("gmnew-99.0.0-{TARGET}.tar.gz");
    let archive = build_archive("99.0.0", TARGET, &gm_script("99.0.0"));
    let sha = sha256.map(str::to_owned).unwrap_or_else(|| sha256_hex(&archive));
    let size = archive.len();
    server.serve(MANIFEST, manifest_json("99.0.0", TARGET, &name, &sha, size), Some("\"r99\""));
    let path = format!("/releases/{name}");
    server.serve(&path, archive, None);
    (size, path)
}

#[test]
fn an_unchanged_release_costs_a_restarted_gm_one_conditional_request_answered_304() {
    let server = TestServer::start();
    server.serve(MANIFEST, manifest_json(VERSION, TARGET, "a.tar.gz", &"0".repeat(64), 10), Some("\"r1\""));
    let home = tempfile::tempdir().expect("home");

    let mut first = serve(home.path(), &server, "1");
    let events = first.wait_status(&["checked", "failed"]);
    assert_eq!(events[0]["status"], "checked", "{events:?}");
    assert_eq!((events[0]["version"].as_str(), events[0]["newer"].as_bool()), (Some(VERSION), Some(false)));
    wait_file_holds(&home.path().join(".gmnew/update.json"), "\\\"r1\\\"");
    first.stop();
    assert_eq!(server.requests().len(), 1);
    assert_eq!(server.requests()[0].header("if-none-match"), None);

    let second = serve(home.path(), &server, "1");
    let requests = server.wait_for_requests(2, WAIT);
    assert_eq!(requests.len(), 2, "the second gm checked at start");
    assert_eq!(requests[1].path, MANIFEST);
    assert_eq!(requests[1].header("if-none-match"), Some("\"r1\""));
    let events = second.stop();
    assert_eq!(server.requests().len(), 2, "one request, no archive: {:?}", server.requests());
    assert_eq!(events, Vec::<Value>::new(), "a 304 changes nothing and logs nothing");
}

#[test]
fn a_newer_release_is_downloaded_checked_and_staged_as_current() {
    let server = TestServer::start();
    let (size, archive_path) = publish_99(&server, None);
    let home = tempfile::tempdir().expect("home");
    let mut gm = serve(home.path(), &server, "1");
    let events = gm.wait_status(&["staged", "refused", "failed"]);
    assert_eq!(statuses(&events), ["checked", "downloaded", "staged"], "{events:?}");
    assert_eq!((events[0]["version"].as_str(), events[0]["newer"].as_bool()), (Some("99.0.0"), Some(true)));
    assert_eq!(events[1]["bytes"].as_u64(), Some(size as u64));
    assert!(events[1]["ms"].is_u64());
    let root = home.path().join(".gmnew");
    assert_eq!(events[2]["version"], "99.0.0");
    assert_eq!(events[2]["dir"].as_str().map(PathBuf::from), Some(root.join("versions/99.0.0")));

    assert_eq!(std::fs::read_to_string(root.join("current/gm")).expect("current/gm"), gm_script("99.0.0"));
    assert_eq!(std::fs::read_to_string(root.join("current/skills/gm/SKILL.md")).expect("skill"), "# gm skill\n");
    assert_eq!(entries(&root.join("downloads")), Vec::<PathBuf>::new(), "no temporary file is left");
    let paths: Vec<String> = server.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, [MANIFEST.to_owned(), archive_path]);
    gm.stop();
}

#[test]
fn an_archive_with_a_bad_sha256_is_refused_and_nothing_is_staged() {
    let server = TestServer::start();
    publish_99(&server, Some(&"0".repeat(64)));
    let home = tempfile::tempdir().expect("home");
    let mut gm = serve(home.path(), &server, "1");
    let events = gm.wait_status(&["staged", "refused", "failed"]);
    let refused = events.last().expect("an event");
    assert_eq!(refused["status"], "refused", "{events:?}");
    assert_eq!(refused["reason"], "bad-sha256");
    assert_eq!(refused["version"], "99.0.0");
    let root = home.path().join(".gmnew");
    assert_eq!(entries(&root.join("versions")), Vec::<PathBuf>::new());
    assert!(!root.join("current").exists());
    assert_eq!(entries(&root.join("downloads")), Vec::<PathBuf>::new(), "no temporary file is left");
    gm.stop();
}

/// Waits for the `off` event, then a little longer, and checks that the server heard nothing.
fn assert_off_without_a_request(auto_update: &str, why: &str) {
    let server = TestServer::start();
    publish_99(&server, None);
    let home = tempfile::tempdir().expect("home");
    let mut gm = serve(home.path(), &server, auto_update);
    let events = gm.wait_status(&["off"]);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0]["why"].as_str().is_some_and(|w| w.contains(why)), "{events:?}");
    // An updater that were on would have connected by now: it checks at start.
    std::thread::sleep(Duration::from_millis(300));
    gm.gm.ok("ping", serde_json::json!({}));
    let events = gm.stop();
    assert_eq!(statuses(&events), ["off"]);
    assert_eq!(server.connections(), 0, "requests: {:?}", server.requests());
    assert!(!home.path().join(".gmnew").exists());
}

#[test]
fn auto_update_0_makes_no_request_at_all() {
    assert_off_without_a_request("0", "GMNEW_AUTO_UPDATE=0");
}

#[test]
fn a_development_build_without_auto_update_makes_no_request() {
    // Empty is unset (and keeps a GMNEW_AUTO_UPDATE of the test's own environment out).
    assert_off_without_a_request("", "development build");
}

#[test]
fn the_one_shot_cli_does_not_update() {
    let server = TestServer::start();
    publish_99(&server, None);
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    // A verb that lasts half a second: an updater started with it would connect at once.
    let out = common::gm_command()
        .args(["run_shell", r#"{"command": "sleep 0.5"}"#])
        .current_dir(workspace.path())
        .env("HOME", home.path())
        .env("GMNEW_UPDATE_URL", server.url(MANIFEST))
        .env("GMNEW_AUTO_UPDATE", "1")
        .output()
        .expect("gm runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(server.connections(), 0);
}

#[test]
fn a_stalled_update_server_neither_holds_up_calls_nor_gms_exit() {
    // A server that accepts the connection and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}{MANIFEST}", listener.local_addr().expect("addr"));
    let (accepted_tx, accepted) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
            let _ = accepted_tx.send(());
        }
    });
    let home = tempfile::tempdir().expect("home");
    let workspace = tempfile::tempdir().expect("workspace");
    let home_text = home.path().to_str().expect("utf-8");
    let env = [("HOME", home_text), ("GMNEW_UPDATE_URL", url.as_str()), ("GMNEW_AUTO_UPDATE", "1")];
    let mut gm = Gm::start_in(&workspace.path().canonicalize().expect("canonical"), &[], &env);
    accepted.recv_timeout(WAIT).expect("the check at start connected");

    let asked = Instant::now();
    gm.initialize("2025-11-25");
    gm.read_skill();
    assert!(asked.elapsed() < Duration::from_secs(5), "calls waited for the update check: {:?}", asked.elapsed());
    let closed = Instant::now();
    gm.close_stdin();
    assert!(gm.wait_exit(WAIT).expect("gm exits").success());
    assert!(closed.elapsed() < Duration::from_secs(2), "exit took {:?}", closed.elapsed());
}
