//! `<root>/update.json`, the updater's memory, shared by every gm on the machine:
//!
//! - the ETag of the last manifest handled to the end, and the URL it belongs to, so a gm
//!   started later asks with `If-None-Match` from its first check;
//! - the versions known to be bad (they did not start, or the relay rolled them back): never
//!   staged again;
//! - the version the Updater staged last, so the relay can tell a build the Updater put in
//!   place (which it may roll back) from one the user installed.
//!
//! Every change is a read, a change and a whole replacement under `<root>/.lock`, so two gm
//! processes never lose each other's change. A missing or unreadable file reads as empty: it
//! costs one unconditional request and forgets the bad versions.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::builds;

pub const STATE_FILE: &str = "update.json";
/// Bad versions remembered; the oldest are forgotten first.
const MAX_BAD: usize = 32;

/// The file's content.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bad: Vec<BadVersion>,
    /// The version the Updater staged last.
    #[serde(default, rename = "stagedByUpdater", skip_serializing_if = "Option::is_none")]
    pub staged_by_updater: Option<String>,
}

/// A version that is never staged again, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BadVersion {
    pub version: String,
    pub causes: Vec<String>,
    /// When it was marked (RFC 3339, UTC).
    pub at: String,
}

/// The ETag saved for a manifest URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Saved {
    pub url: String,
    pub etag: String,
}

#[derive(Debug, thiserror::Error)]
#[error("cannot save {path}: {source}")]
pub struct SaveError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// The state as the file holds it (empty when it is missing or unreadable).
pub fn read(root: &Path) -> State {
    std::fs::read_to_string(root.join(STATE_FILE))
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

/// The ETag saved for `url`; an ETag saved for another URL says nothing about this one.
pub fn etag_for(root: &Path, url: &str) -> Option<String> {
    let state = read(root);
    (state.url.as_deref() == Some(url)).then_some(state.etag).flatten()
}

/// Saves the ETag of the manifest just handled, keeping the rest of the state.
pub fn save(root: &Path, saved: &Saved) -> Result<(), SaveError> {
    change(root, |state| {
        state.url = Some(saved.url.clone());
        state.etag = Some(saved.etag.clone());
    })
}

/// Remembers `version` as bad, with its causes: the Updater never stages it again. For the
/// relay, when it rolls a build back, and for the Updater, when a build does not start.
pub fn mark_bad(root: &Path, version: &str, causes: &[String]) -> Result<(), SaveError> {
    let at = time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
    change(root, |state| {
        state.bad.retain(|b| b.version != version);
        state.bad.push(BadVersion { version: version.to_owned(), causes: causes.to_vec(), at });
        let over = state.bad.len().saturating_sub(MAX_BAD);
        state.bad.drain(..over);
    })
}

/// Why `version` is bad, when it is.
pub fn bad(root: &Path, version: &str) -> Option<BadVersion> {
    read(root).bad.into_iter().find(|b| b.version == version)
}

/// Notes that the Updater is about to stage `version` (noted first: a note naming a version
/// that did not become current says nothing, see [`staged_by_updater`]).
pub fn record_staged(root: &Path, version: &str) -> Result<(), SaveError> {
    change(root, |state| state.staged_by_updater = Some(version.to_owned()))
}

/// The version `<root>/current` points at, when the Updater staged it (rather than the user,
/// with `gm install --local`, or nobody). For the relay: only such a build is rolled back.
pub fn staged_by_updater(root: &Path) -> Option<String> {
    let current = builds::current_version(root)?;
    (read(root).staged_by_updater.as_deref() == Some(current.as_str())).then_some(current)
}

/// Reads, changes and replaces the state under the root's lock.
fn change(root: &Path, edit: impl FnOnce(&mut State)) -> Result<(), SaveError> {
    let path = root.join(STATE_FILE);
    let err = |source| SaveError { path: path.clone(), source };
    std::fs::create_dir_all(root).map_err(err)?;
    let _lock = crate::state_file::lock_exclusive(&root.join(builds::LOCK_FILE)).map_err(|e| err(e.into()))?;
    let mut state = read(root);
    edit(&mut state);
    let text = serde_json::to_vec_pretty(&state).map_err(|e| err(e.into()))?;
    crate::fs::replace(&path, &text).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_saved_etag_is_read_back_only_for_its_url() {
        let root = tempfile::tempdir().unwrap();
        assert_eq!(etag_for(root.path(), "http://a/m.json"), None);
        save(root.path(), &Saved { url: "http://a/m.json".into(), etag: "\"e1\"".into() }).unwrap();
        assert_eq!(etag_for(root.path(), "http://a/m.json").as_deref(), Some("\"e1\""));
        assert_eq!(etag_for(root.path(), "http://b/m.json"), None);
    }

    #[test]
    fn an_unreadable_state_file_means_no_etag() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join(STATE_FILE), "{not json").unwrap();
        assert_eq!(etag_for(root.path(), "http://a/m.json"), None);
    }

    #[test]
    fn the_file_an_earlier_gm_wrote_is_read() {
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join(STATE_FILE), r#"{"url": "http://a/m.json", "etag": "\"e0\""}"#).unwrap();
        assert_eq!(etag_for(root.path(), "http://a/m.json").as_deref(), Some("\"e0\""));
    }

    #[test]
    fn a_bad_version_is_remembered_with_its_causes_beside_the_etag() {
        let root = tempfile::tempdir().unwrap();
        save(root.path(), &Saved { url: "http://a/m.json".into(), etag: "\"e1\"".into() }).unwrap();
        assert_eq!(bad(root.path(), "2.0.0"), None);
        let causes = vec!["exit code 127".to_owned(), "SIGSEGV".to_owned()];
        mark_bad(root.path(), "2.0.0", &causes).unwrap();
        let b = bad(root.path(), "2.0.0").unwrap();
        assert_eq!(b.causes, causes);
        assert!(b.at.ends_with('Z'), "{}", b.at);
        assert_eq!(bad(root.path(), "2.0.1"), None);
        assert_eq!(etag_for(root.path(), "http://a/m.json").as_deref(), Some("\"e1\""), "the ETag is kept");
        save(root.path(), &Saved { url: "http://a/m.json".into(), etag: "\"e2\"".into() }).unwrap();
        assert!(bad(root.path(), "2.0.0").is_some(), "and the bad version is kept by the next save");
        mark_bad(root.path(), "2.0.0", &["again".to_owned()]).unwrap();
        assert_eq!(read(root.path()).bad.len(), 1, "marked once");
    }

    #[test]
    fn only_the_newest_bad_versions_are_kept() {
        let root = tempfile::tempdir().unwrap();
        for i in 0..(MAX_BAD + 3) {
            mark_bad(root.path(), &format!("1.0.{i}"), &[]).unwrap();
        }
        let state = read(root.path());
        assert_eq!(state.bad.len(), MAX_BAD);
        assert_eq!(state.bad[0].version, "1.0.3");
    }

    #[test]
    fn marks_made_at_once_by_many_threads_are_all_kept() {
        let root = tempfile::tempdir().unwrap();
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let root = root.path().to_owned();
                std::thread::spawn(move || mark_bad(&root, &format!("3.0.{i}"), &[]).unwrap())
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(read(root.path()).bad.len(), 8, "no read-change-write lost another's");
    }

    #[cfg(unix)]
    #[test]
    fn a_build_is_the_updaters_only_while_current_points_at_the_version_it_staged() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        std::fs::create_dir_all(root.join("versions/2.0.0")).unwrap();
        std::os::unix::fs::symlink("versions/2.0.0", root.join("current")).unwrap();
        assert_eq!(staged_by_updater(root), None, "the user's build");
        record_staged(root, "2.0.0").unwrap();
        assert_eq!(staged_by_updater(root).as_deref(), Some("2.0.0"));
        std::fs::remove_file(root.join("current")).unwrap();
        std::os::unix::fs::symlink("versions/1.0.0", root.join("current")).unwrap();
        assert_eq!(staged_by_updater(root), None);
    }
}
