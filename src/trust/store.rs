//! `~/.gmnew/trust.json`: the workspace servers the user approved, per workspace (its canonical
//! path) and server name, each under the hash of the entry as it was approved. Mode 0600 from
//! its creation (its temporary is created 0600, never readable by others for an instant),
//! replaced whole under `~/.gmnew/.lock`, so two gm processes never lose each other's approval.
//! An approval must be the user's own: a file others could write, a link, a file or a
//! `~/.gmnew` of another user is not believed (no approvals, and an error saying why), and
//! nothing is written there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use gm_actors::builds;
use gm_actors::state_file::{self, StateFileError};
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
    #[error("{path} belongs to uid {owner}, not to you (uid {me}): approvals there are not believed and none is written; make it yours (chown) or remove it")]
    NotYours { path: PathBuf, owner: u32, me: u32 },
    /// trust.json is a link, not a regular file, or another user's (`state_file` says which).
    #[error("{0}; its approvals are not believed and none is written")]
    Refused(StateFileError),
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

    /// The file's approvals; none when it does not exist. Opened without following a link,
    /// and judged on what was opened (no swap between a check and the read).
    fn read(&self) -> Result<TrustFile, TrustError> {
        let path = self.path();
        if !self.check_root()? {
            return Ok(TrustFile::default());
        }
        let mut file = match state_file::open_own(&path, state_file::How::READ) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return Ok(TrustFile::default()),
            Err(StateFileError::Io { path, source }) => return Err(TrustError::Io { path, source }),
            Err(refused) => return Err(TrustError::Refused(refused)),
        };
        let io = |source| TrustError::Io { path: path.clone(), source };
        let meta = file.metadata().map_err(io)?;
        if let Some(mode) = gm_actors::sys::permission_bits(&meta).filter(|m| m & 0o022 != 0) {
            return Err(TrustError::Unsafe { path, mode });
        }
        let mut text = String::new();
        std::io::Read::read_to_string(&mut file, &mut text).map_err(io)?;
        serde_json::from_str(&text).map_err(|e| TrustError::Corrupt { path, why: e.to_string() })
    }

    /// Whether the folder exists, refusing one of another user's: whoever owns it can put their
    /// own approvals there, or take the user's away. (Below the home directory, `state_file`
    /// checks `~/.gmnew` too; a store `at` a folder of its own is checked here.)
    fn check_root(&self) -> Result<bool, TrustError> {
        let meta = match std::fs::metadata(&self.root) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(source) => return Err(TrustError::Io { path: self.root.clone(), source }),
        };
        #[cfg(unix)]
        {
            let (owner, me) = (gm_actors::sys::owner_of(&meta), gm_actors::sys::current_uid());
            if owner != me {
                return Err(TrustError::NotYours { path: self.root.clone(), owner, me });
            }
        }
        #[cfg(not(unix))]
        let _ = meta;
        Ok(true)
    }

    /// Reads, edits and replaces the file under the lock; `edit` says whether it changed it.
    fn change(&self, edit: impl FnOnce(&mut TrustFile) -> bool) -> Result<(), TrustError> {
        let path = self.path();
        let io = |source| TrustError::Io { path: path.clone(), source };
        let mut folder = std::fs::DirBuilder::new();
        folder.recursive(true);
        // A new ~/.gmnew is the user's alone.
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut folder, 0o700);
        folder.create(&self.root).map_err(io)?;
        self.check_root()?;
        let _lock =
            gm_actors::state_file::lock_exclusive(&self.root.join(builds::LOCK_FILE)).map_err(|e| io(e.into()))?;
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

    #[cfg(unix)]
    #[test]
    fn a_linked_trust_file_is_not_believed_and_what_it_points_to_is_not_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        let a = pending("a", "x");
        // A file that does approve the entry, reached through a link.
        let other = TrustStore::at(elsewhere.path());
        other.approve(Path::new("/ws"), &a).expect("approve");
        let target = other.path();
        let before = std::fs::read(&target).expect("read");
        let store = TrustStore::at(dir.path());
        std::os::unix::fs::symlink(&target, store.path()).expect("link");
        let refused = store.approved(Path::new("/ws"), "a", &a.sha256);
        assert!(matches!(&refused, Err(TrustError::Refused(StateFileError::Link { .. }))), "{refused:?}");
        let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("symbolic link") && message.contains("not believed"), "{message}");
        assert!(store.approve(Path::new("/ws"), &pending("b", "y")).is_err());
        assert_eq!(std::fs::read(&target).expect("read"), before, "the link's target is untouched");
        assert!(std::fs::symlink_metadata(store.path()).expect("meta").file_type().is_symlink());
    }

    /// Whether this test runs as root (it can give a file to another user); says so when not.
    #[cfg(unix)]
    fn as_root(test: &str) -> bool {
        let root = gm_actors::sys::current_uid() == 0;
        if !root {
            gm_actors::stderr_line!("{test}: skipped, not root: only root can give a file to another user");
        }
        root
    }

    #[cfg(unix)]
    #[test]
    fn a_trust_file_or_folder_of_another_user_is_refused() {
        if !as_root("a_trust_file_or_folder_of_another_user_is_refused") {
            return;
        }
        let nobody = 65534;
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("gmnew");
        let store = TrustStore::at(&root);
        let a = pending("a", "x");
        store.approve(Path::new("/ws"), &a).expect("approve");
        std::os::unix::fs::chown(store.path(), Some(nobody), None).expect("chown file");
        let refused = store.approved(Path::new("/ws"), "a", &a.sha256);
        assert!(matches!(&refused, Err(TrustError::Refused(StateFileError::Foreign { .. }))), "{refused:?}");
        std::fs::remove_file(store.path()).expect("rm");
        std::os::unix::fs::chown(&root, Some(nobody), None).expect("chown folder");
        let refused = store.approve(Path::new("/ws"), &a);
        assert!(matches!(&refused, Err(TrustError::NotYours { owner: 65534, .. })), "{refused:?}");
        assert!(refused.err().map(|e| e.to_string()).unwrap_or_default().contains("belongs to uid 65534"));
        assert!(!store.path().exists(), "nothing written in another user's folder");
        assert!(matches!(store.list(Path::new("/ws")), Err(TrustError::NotYours { .. })), "nor believed");
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
