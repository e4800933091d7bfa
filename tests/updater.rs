//! The Updater through the real binary: `gm serve` with a temporary HOME, checking a manifest
//! served on 127.0.0.1 (`GMNEW_UPDATE_URL`), read back from the run log's `update` events.
//! Test builds are development builds, so the tests that expect requests set
//! `GMNEW_AUTO_UPDATE=1`, and they trust the test's own signing key through
//! `GMNEW_UPDATE_PUBKEY` (a development build reads it; a release build never does).

mod common;
#[path = "../actors/src/updater/testing.rs"]
mod testing;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Gm;
use gm_actors::builds::{TARGET, VERSION};
use serde_json::Value;
use testing::{build_archive, gm_script, keypair, manifest_json, sha256_hex, sign, signed_manifest_json, TestServer};

const MANIFEST: &str = "/releases/manifest.json";
const WAIT: Duration = Duration::from_secs(30);

/// A gm serve in a workspace of its own, with `home` as HOME.
struct Served {
    gm: Gm,
    _workspace: tempfile::TempDir,
}

/// The key pair this test process signs releases with: (public base64, secret key text).
fn test_key() -> &'static (String, String) {
    static KEY: std::sync::OnceLock<(String, String)> = std::sync::OnceLock::new();
    KEY.get_or_init(keypair)
}

fn serve(home: &Path, server: &TestServer, auto_update: &str) -> Served {
    let workspace = tempfile::tempdir().expect("workspace");
    let url = server.url(MANIFEST);
    let home = home.to_str().expect("utf-8 home");
    let env = [
        ("HOME", home),
        ("GMNEW_UPDATE_URL", url.as_str()),
        ("GMNEW_AUTO_UPDATE", auto_update),
        ("GMNEW_UPDATE_PUBKEY", test_key().0.as_str()),
    ];
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

/// How a published archive is signed.
enum Signed<'a> {
    ByTheTestKey,
    /// By this secret key (another key's).
    By(&'a str),
    Not,
}

/// Serves a build of `version` for this target whose `gm` is `gm`, and a manifest listing it
/// (with `sha256` in place of the archive's when given). Returns the archive's size and its
/// path on the server.
fn publish(server: &TestServer, version: &str, gm: &str, sha256: Option<&str>, signed: Signed) -> (usize, String) {
    let name = format!("gmnew-{version}-{TARGET}.tar.gz");
    let archive = build_archive(version, TARGET, gm);
    let sha = sha256.map(str::to_owned).unwrap_or_else(|| sha256_hex(&archive));
    let size = archive.len();
    let manifest = match signed {
        Signed::ByTheTestKey => {
            signed_manifest_json(version, TARGET, &name, &sha, size, &sign(&archive, &test_key().1))
        }
        Signed::By(secret) => signed_manifest_json(version, TARGET, &name, &sha, size, &sign(&archive, secret)),
        Signed::Not => manifest_json(version, TARGET, &name, &sha, size),
    };
    server.serve(MANIFEST, manifest, Some(&format!("\"r{version}\"")));
    let path = format!("/releases/{name}");
    server.serve(&path, archive, None);
    (size, path)
}

/// A signed build of 99.0.0 that starts.
fn publish_99(server: &TestServer, sha256: Option<&str>) -> (usize, String) {
    publish(server, "99.0.0", &gm_script("99.0.0"), sha256, Signed::ByTheTestKey)
}

/// Serves `publish`'s release to a gm with a fresh HOME, waits for the check's end and
/// returns its `update` events and the HOME.
fn check_once(publish: impl FnOnce(&TestServer)) -> (Vec<Value>, tempfile::TempDir) {
    let server = TestServer::start();
    publish(&server);
    let home = tempfile::tempdir().expect("home");
    let mut gm = serve(home.path(), &server, "1");
    let events = gm.wait_status(&["staged", "refused", "failed"]);
    gm.stop();
    (events, home)
}

/// Checks that the last event refused `version` for `reason`, and that nothing was staged or
/// left behind.
fn assert_refused(events: &[Value], home: &Path, reason: &str) -> String {
    let refused = events.last().expect("an event");
    assert_eq!((refused["status"].as_str(), refused["reason"].as_str()), (Some("refused"), Some(reason)), "{events:?}");
    let root = home.join(".gmnew");
    let versions: Vec<PathBuf> = entries(&root.join("versions"));
    assert_eq!(versions, Vec::<PathBuf>::new(), "nothing staged, no copy left");
    assert!(!root.join("current").exists());
    assert_eq!(entries(&root.join("downloads")), Vec::<PathBuf>::new(), "no temporary file is left");
    refused["detail"].as_str().unwrap_or_default().to_owned()
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

#[test]
fn an_unsigned_release_is_refused_and_nothing_is_staged() {
    let (events, home) = check_once(|server| drop(publish(server, "99.0.0", &gm_script("99.0.0"), None, Signed::Not)));
    let detail = assert_refused(&events, home.path(), "bad-signature");
    assert!(detail.contains("no signature"), "{detail}");
}

#[test]
fn a_release_signed_by_another_key_is_refused_and_nothing_is_staged() {
    let (_, attacker) = keypair();
    let (events, home) =
        check_once(|server| drop(publish(server, "99.0.0", &gm_script("99.0.0"), None, Signed::By(&attacker))));
    let detail = assert_refused(&events, home.path(), "bad-signature");
    assert!(detail.contains("not one gm trusts"), "{detail}");
}

#[test]
fn a_signed_release_whose_gm_does_not_start_is_refused_and_remembered_as_bad() {
    let broken = "#!/bin/sh\necho 'gm: error while loading shared libraries: libgm.so' >&2\nexit 127\n";
    let (events, home) = check_once(|server| drop(publish(server, "99.0.0", broken, None, Signed::ByTheTestKey)));
    let detail = assert_refused(&events, home.path(), "does-not-start");
    assert!(detail.contains("exit code 127") && detail.contains("libgm.so"), "with its stderr's end: {detail}");
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(home.path().join(".gmnew/update.json")).expect("update.json"))
            .expect("json");
    assert_eq!(state["bad"][0]["version"], "99.0.0", "{state}");
}

#[test]
fn a_replayed_older_release_never_moves_current_back() {
    let server = TestServer::start();
    publish_99(&server, None);
    let home = tempfile::tempdir().expect("home");
    let mut first = serve(home.path(), &server, "1");
    first.wait_status(&["staged", "refused", "failed"]);
    first.stop();
    let root = home.path().join(".gmnew");
    assert_eq!(std::fs::read_link(root.join("current")).expect("current"), Path::new("versions/99.0.0"));

    // The older release, properly signed, still newer than the running build.
    let (_, old_path) = publish(&server, "98.0.0", &gm_script("98.0.0"), None, Signed::ByTheTestKey);
    let mut second = serve(home.path(), &server, "1");
    let events = second.wait_status(&["staged", "refused", "failed"]);
    second.stop();
    let refused = events.last().expect("an event");
    assert_eq!((refused["status"].as_str(), refused["reason"].as_str()), (Some("refused"), Some("older-than-current")));
    assert_eq!(events[0]["current"], "99.0.0", "{events:?}");
    assert!(!server.requests().iter().any(|r| r.path == old_path), "the older archive was not even downloaded");
    assert_eq!(std::fs::read_link(root.join("current")).expect("current"), Path::new("versions/99.0.0"));
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
