//! `<root>/update.json`: the ETag of the last manifest the updater handled to the end, and the
//! URL it belongs to, so a gm started later asks with `If-None-Match` from its first check.
//! It is shared by every gm on the machine and replaced whole; a missing or unreadable file
//! only costs one unconditional request.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const STATE_FILE: &str = "update.json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// The ETag saved for `url`; an ETag saved for another URL says nothing about this one.
pub fn etag_for(root: &Path, url: &str) -> Option<String> {
    let text = std::fs::read_to_string(root.join(STATE_FILE)).ok()?;
    let saved: Saved = serde_json::from_str(&text).ok()?;
    (saved.url == url).then_some(saved.etag)
}

pub fn save(root: &Path, saved: &Saved) -> Result<(), SaveError> {
    let path = root.join(STATE_FILE);
    let err = |source| SaveError { path: path.clone(), source };
    std::fs::create_dir_all(root).map_err(err)?;
    let text = serde_json::to_vec_pretty(saved).map_err(|e| err(e.into()))?;
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
}
