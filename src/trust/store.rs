//! `~/.gmnew/trust.json`: the workspace servers the user approved, per workspace (its canonical
//! path) and server name, each under the hash of the entry as it was approved. Mode 0600,
//! replaced whole under `~/.gmnew/.lock`, so two gm processes never lose each other's approval.
//! A file others could write is not believed: an approval there may not be the user's.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gm_actors::builds;
use serde::{Deserialize, Serialize};

use super::entry::Pending;

pub const TRUST_FILE: &str = "trust.json";

#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error("no home directory (HOME is not set): approvals are kept in ~/.gmnew/trust.json")]
    NoHome,
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} is not valid ({why}); fix or remove it, nothing was changed")]
    Corrupt { path: PathBuf, why: String },
    #[error("{path} can be written by other users (mode {mode:o}); its approvals are not believed until it is 0600")]
    Unsafe { path: PathBuf, mode: u32 },
    #[error("{0}: a workspace path that is not Unicode cannot be recorded")]
    NotUnicode(PathBuf),
}

/// One approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Approval {
    /// The hash of the entry as approved (`entry::hash`).
    pub sha256: String,
    /// When (RFC 3339, UTC).
    pub approved_at: String,
    /// What it ran, for `gm trust --list` (env names only).
    pub command_line: String,
    pub env_names: Vec<String>,
}

/// The file's content: workspace -> server name -> approval.
#[derive(Debug, Default, Serialize, Deserialize)]
struct TrustFile {
    #[serde(default)]
    workspaces: BTreeMap<String, BTreeMap<String, Approval>>,
}

/// The approvals file.
#[derive(Debug, Clone)]
pub struct TrustStore {
    root: PathBuf,
}

impl TrustStore {
    /// `~/.gmnew/trust.json`.
    pub fn from_home() -> Result<TrustStore, TrustError> {
        builds::root().map(|root| TrustStore { root }).map_err(|_| TrustError::NoHome)
    }

    /// The store in `root` (tests).
    pub fn at(root: &Path) -> TrustStore {
        TrustStore { root: root.to_owned() }
    }

    pub fn path(&self) -> PathBuf {
        self.root.join(TRUST_FILE)
    }

    /// The approval of `name` in `workspace`, when its hash is `sha256`; an approval of another
    /// hash (the entry changed since) is none.
    pub fn approved(&self, workspace: &Path, name: &str, sha256: &str) -> Result<bool, TrustError> {
        let key = key(workspace)?;
        let file = self.read()?;
        Ok(file.workspaces.get(&key).and_then(|w| w.get(name)).is_some_and(|a| a.sha256 == sha256))
    }

    /// Every approval kept for `workspace`, by server name.
    pub fn list(&self, workspace: &Path) -> Result<BTreeMap<String, Approval>, TrustError> {
        let key = key(workspace)?;
        Ok(self.read()?.workspaces.remove(&key).unwrap_or_default())
    }

    /// Approves `pending` (this exact entry) in `workspace`.
    pub fn approve(&self, workspace: &Path, pending: &Pending) -> Result<(), TrustError> {
        let key = key(workspace)?;
        let approved_at =
            time::OffsetDateTime::now_utc().format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
        let approval = Approval {
            sha256: pending.sha256.clone(),
            approved_at,
            command_line: pending.command_line.clone(),
            env_names: pending.env_names.clone(),
        };
        self.change(|file| {
            file.workspaces.entry(key).or_default().insert(pending.name.clone(), approval);
            true
        })
        .map(drop)
    }

    /// Removes the approval of `name` in `workspace`, or all of them (`None`); the names removed.
    pub fn revoke(&self, workspace: &Path, name: Option<&str>) -> Result<Vec<String>, TrustError> {
        let key = key(workspace)?;
        let mut removed = Vec::new();
        self.change(|file| {
            let Some(approvals) = file.workspaces.get_mut(&key) else { return false };
            approvals.retain(|n, _| {
                let goes = name.is_none_or(|only| only == n);
                if goes {
                    removed.push(n.clone());
                }
                !goes
            });
            if approvals.is_empty() {
                file.workspaces.remove(&key);
            }
            !removed.is_empty()
        })?;
        Ok(removed)
    }

    fn read(&self) -> Result<TrustFile, TrustError> {
        let path = self.path();
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(TrustFile::default()),
            Err(source) => return Err(TrustError::Io { path, source }),
        };
        let meta = std::fs::metadata(&path).map_err(|source| TrustError::Io { path: path.clone(), source })?;
        if let Some(mode) = gm_actors::sys::permission_bits(&meta).filter(|m| m & 0o022 != 0) {
            return Err(TrustError::Unsafe { path, mode });
        }
        serde_json::from_str(&text).map_err(|e| TrustError::Corrupt { path, why: e.to_string() })
    }

    /// Reads, edits and replaces the file under the lock; `edit` says whether it changed it.
    fn change(&self, edit: impl FnOnce(&mut TrustFile) -> bool) -> Result<(), TrustError> {
        let path = self.path();
        let io = |source| TrustError::Io { path: path.clone(), source };
        std::fs::create_dir_all(&self.root).map_err(io)?;
        let _lock = gm_actors::sys::lock_exclusive(&self.root.join(builds::LOCK_FILE)).map_err(io)?;
        let mut file = self.read()?;
        if !edit(&mut file) {
            return Ok(());
        }
        let text = serde_json::to_vec_pretty(&file).map_err(|e| io(e.into()))?;
        gm_actors::fs::replace_with(&path, &text, Some(0o600), true).map_err(io)
    }
}

/// A workspace's key: its canonical path.
fn key(workspace: &Path) -> Result<String, TrustError> {
    workspace.to_str().map(str::to_owned).ok_or_else(|| TrustError::NotUnicode(workspace.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp_config::{Layer, Named};

    fn pending(name: &str, command: &str) -> Pending {
        let named = Named {
            name: name.into(),
            entry: serde_json::from_str(&format!(r#"{{"command":"{command}"}}"#)).expect("entry"),
            from: "f".into(),
            layer: Layer::Workspace,
        };
        Pending::of(&named, Path::new("/ws"))
    }

    #[test]
    fn an_approval_holds_for_its_workspace_name_and_hash_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = TrustStore::at(dir.path());
        let (ws, other) = (Path::new("/ws"), Path::new("/other"));
        let a = pending("a", "run-a");
        assert!(!store.approved(ws, "a", &a.sha256).expect("read"));
        store.approve(ws, &a).expect("approve");
        assert!(store.approved(ws, "a", &a.sha256).expect("read"));
        assert!(!store.approved(other, "a", &a.sha256).expect("read"), "another workspace");
        assert!(!store.approved(ws, "a", &pending("a", "run-b").sha256).expect("read"), "a changed entry");
        assert!(!store.approved(ws, "b", &a.sha256).expect("read"), "another name");
        #[cfg(unix)]
        {
            let mode =
                std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(store.path()).expect("meta").permissions());
            assert_eq!(mode & 0o777, 0o600);
        }
    }

    #[test]
    fn revoking_removes_one_or_every_approval_of_the_workspace_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = TrustStore::at(dir.path());
        let (ws, other) = (Path::new("/ws"), Path::new("/other"));
        for p in [pending("a", "x"), pending("b", "y")] {
            store.approve(ws, &p).expect("approve");
            store.approve(other, &p).expect("approve");
        }
        assert_eq!(store.revoke(ws, Some("a")).expect("revoke"), ["a"]);
        assert_eq!(store.list(ws).expect("list").keys().collect::<Vec<_>>(), ["b"]);
        assert_eq!(store.revoke(ws, Some("nope")).expect("revoke"), Vec::<String>::new());
        assert_eq!(store.revoke(ws, None).expect("revoke"), ["b"]);
        assert!(store.list(ws).expect("list").is_empty());
        assert_eq!(store.list(other).expect("list").len(), 2, "another workspace's stay");
    }

    #[test]
    fn a_corrupt_file_is_an_error_and_is_not_overwritten() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = TrustStore::at(dir.path());
        std::fs::write(store.path(), "{not json").expect("write");
        assert!(matches!(store.approved(Path::new("/ws"), "a", "h"), Err(TrustError::Corrupt { .. })));
        assert!(matches!(store.approve(Path::new("/ws"), &pending("a", "x")), Err(TrustError::Corrupt { .. })));
        assert_eq!(std::fs::read_to_string(store.path()).expect("read"), "{not json");
    }

    #[cfg(unix)]
    #[test]
    fn a_file_others_can_write_is_not_believed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = TrustStore::at(dir.path());
        let a = pending("a", "x");
        store.approve(Path::new("/ws"), &a).expect("approve");
        std::fs::set_permissions(store.path(), std::os::unix::fs::PermissionsExt::from_mode(0o666)).expect("chmod");
        assert!(matches!(store.approved(Path::new("/ws"), "a", &a.sha256), Err(TrustError::Unsafe { .. })));
    }

    #[test]
    fn approvals_made_at_once_are_all_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let store = TrustStore::at(dir.path());
                std::thread::spawn(move || {
                    store.approve(Path::new("/ws"), &pending(&format!("s{i}"), "x")).expect("approve")
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert_eq!(TrustStore::at(dir.path()).list(Path::new("/ws")).expect("list").len(), 8);
    }
}
