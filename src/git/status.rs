//! What changed in the working tree and the index.

use git2::{Status, StatusOptions};
use serde::Serialize;

use super::{GitError, Repo};

#[derive(Debug, Serialize)]
pub struct StatusEntry {
    pub path: String,
    /// Staged change: added, modified, deleted, renamed, typechange.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<&'static str>,
    /// Unstaged change: untracked, modified, deleted, renamed, typechange.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<&'static str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub conflicted: bool,
}

impl Repo {
    /// The changed files, staged and unstaged, like `git status --porcelain`; gm's own `.gm/`
    /// is left out.
    pub fn statuses(&self) -> Result<Vec<StatusEntry>, GitError> {
        let mut opts = StatusOptions::new();
        opts.include_untracked(true).recurse_untracked_dirs(true).renames_head_to_index(true).include_ignored(false);
        let list = self.inner.statuses(Some(&mut opts))?;
        Ok(list
            .iter()
            .filter_map(|e| {
                let path = e.path()?.to_owned();
                if path.starts_with(".gm/") {
                    return None;
                }
                let s = e.status();
                Some(StatusEntry {
                    path,
                    index: status_word(s, true),
                    worktree: status_word(s, false),
                    conflicted: s.contains(Status::CONFLICTED),
                })
            })
            .collect())
    }
}

fn status_word(s: Status, index: bool) -> Option<&'static str> {
    let (new, modified, deleted, renamed, typechange) = if index {
        (
            Status::INDEX_NEW,
            Status::INDEX_MODIFIED,
            Status::INDEX_DELETED,
            Status::INDEX_RENAMED,
            Status::INDEX_TYPECHANGE,
        )
    } else {
        (Status::WT_NEW, Status::WT_MODIFIED, Status::WT_DELETED, Status::WT_RENAMED, Status::WT_TYPECHANGE)
    };
    if s.contains(new) {
        Some(if index { "added" } else { "untracked" })
    } else if s.contains(modified) {
        Some("modified")
    } else if s.contains(deleted) {
        Some("deleted")
    } else if s.contains(renamed) {
        Some("renamed")
    } else if s.contains(typechange) {
        Some("typechange")
    } else {
        None
    }
}
