//! Where a workspace's worker is found: its socket, and the files under `.gm/` that relays and
//! the worker agree on.

use std::path::{Path, PathBuf};

use gm_actors::state_file::{self, StateFileError};
use sha2::{Digest, Sha256};

/// The files of one workspace's worker, under its `.gm/`.
#[derive(Debug, Clone)]
pub struct Files {
    pub workspace: PathBuf,
    pub state_dir: PathBuf,
    /// Taken by a relay while it finds or starts the worker, and by a worker deciding to exit
    /// when idle, so a relay never connects to a worker that is leaving.
    pub start_lock: PathBuf,
    /// Held by the worker for its whole life; says who it is (pid, build, socket).
    pub life_lock: PathBuf,
    /// The worker's stderr once it is detached.
    pub worker_log: PathBuf,
    /// One line per worker that ended: cleanly (it wrote the line) or not (its relay did).
    pub exits: PathBuf,
}

impl Files {
    /// The files of `workspace` (a canonical path).
    pub fn of(workspace: &Path) -> Self {
        let state_dir = workspace.join(".gm");
        Self {
            workspace: workspace.to_owned(),
            start_lock: state_dir.join("worker.lock"),
            life_lock: state_dir.join("worker.pid"),
            worker_log: state_dir.join("worker.log"),
            exits: state_dir.join("worker-exits.jsonl"),
            state_dir,
        }
    }

    /// Makes `.gm` when missing and checks what a repository may have committed there before
    /// gm writes anything: `.gm` itself and each file and folder gm keeps in it must be a real
    /// file or folder of this user's, not a link (a committed `.gm/log.jsonl -> ~/.bashrc` would
    /// have gm append its log to the user's shell startup), and gm's folders hold no link.
    /// Every gm that starts in a workspace (relay, worker, HTTP front, the one-shot CLI) calls
    /// this first; the files themselves are then opened through [`gm_actors::state_file`].
    pub fn check(&self) -> Result<(), StateFileError> {
        state_file::folder(&self.workspace, &self.state_dir)?;
        for name in OWN_FILES {
            state_file::check_file(&self.state_dir.join(name))?;
        }
        for name in OWN_FOLDERS {
            state_file::check_folder(&self.state_dir.join(name))?;
        }
        Ok(())
    }
}

/// The files gm writes at the top of `.gm/` (ARCHITECTURE.md's table of workspace files says
/// who may have written each and how gm defends).
pub const OWN_FILES: &[&str] = &[
    "log.jsonl",
    "worker.pid",
    "worker.lock",
    "worker.log",
    "worker-exits.jsonl",
    "http.token",
    "http.json",
    "child-groups.json",
    "run.json",
    ".gitignore",
];

/// The folders gm makes in `.gm/` and writes into.
pub const OWN_FOLDERS: &[&str] = &["runs", "jobs", "out", "blobs", "index", "calls", "watch", "http-login"];

/// The folder of this user's worker sockets: `$XDG_RUNTIME_DIR/gm`, else `/tmp/gm-<uid>`,
/// made private (0700) and refused when someone else owns it.
pub fn socket_dir() -> std::io::Result<PathBuf> {
    let runtime = std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|d| d.is_absolute() && d.is_dir());
    let dir = match runtime {
        Some(d) => d.join("gm"),
        None => PathBuf::from(format!("/tmp/gm-{}", gm_actors::sys::current_uid())),
    };
    gm_actors::sys::private_dir(&dir)?;
    Ok(dir)
}

/// The socket of `workspace`'s worker: named by a hash of its canonical path, so every relay
/// of one workspace finds the same one and the path stays short (a socket path is at most 107
/// bytes).
pub fn socket_path(workspace: &Path) -> std::io::Result<PathBuf> {
    Ok(socket_dir()?.join(socket_name(workspace)))
}

fn socket_name(workspace: &Path) -> String {
    let digest = Sha256::digest(workspace.as_os_str().as_encoded_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{hex}.sock")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_workspace_has_its_own_short_socket_name() {
        let a = socket_name(Path::new("/home/u/project"));
        let b = socket_name(Path::new("/home/u/project2"));
        assert_ne!(a, b);
        assert_eq!(a, socket_name(Path::new("/home/u/project")));
        assert_eq!(a.len(), 37);
    }
}
