//! The workspace's git repository through libgit2 (`git2`), as a small library: a [`Repo`]
//! (the repository that holds the workspace), typed errors, and the pieces several verbs
//! share — status entries, remotes (fetch and push, authenticating as git does), and diffs with
//! their patch text. The git verbs, rows, review and ci use it; it knows nothing of verbs.
//!
//! Everything here is blocking (libgit2 does file and network I/O synchronously): callers run
//! it on a blocking thread.

mod diff;
mod discover;
mod remote;
mod status;

use std::path::{Component, Path, PathBuf};

use git2::{Oid, Repository, Signature};

pub use diff::{describe, DiffSummary, INLINE_PATCH};
pub use discover::git_dir;
pub use remote::RemoteRef;
pub use status::StatusEntry;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{0} is not inside a git repository")]
    NotARepository(PathBuf),
    #[error("{0}")]
    Git(String),
    #[error("unknown revision or reference '{0}'")]
    UnknownRev(String),
    #[error("{0}")]
    Refused(String),
    #[error("the push was rejected: {0}")]
    Rejected(String),
    #[error("{0}")]
    Conflict(String),
    /// The remote could not be reached or spoke badly: worth a retry.
    #[error("the remote is unavailable: {0}")]
    Network(String),
    #[error("the call was cancelled")]
    Cancelled,
}

impl From<git2::Error> for GitError {
    fn from(e: git2::Error) -> Self {
        use git2::{ErrorClass, ErrorCode};
        if e.code() == ErrorCode::User && e.class() == ErrorClass::Callback {
            // A progress callback said stop: the call was cancelled.
            return GitError::Cancelled;
        }
        match e.class() {
            ErrorClass::Net | ErrorClass::Http | ErrorClass::Ssh | ErrorClass::Ssl => {
                GitError::Network(e.message().to_owned())
            }
            _ => GitError::Git(e.message().to_owned()),
        }
    }
}

/// The repository that holds a workspace. It derefs to `git2::Repository` for everything this
/// library has no word of its own for.
pub struct Repo {
    inner: Repository,
    workspace: PathBuf,
}

impl std::ops::Deref for Repo {
    type Target = Repository;
    fn deref(&self) -> &Repository {
        &self.inner
    }
}

impl Repo {
    /// The repository holding `workspace` (found upwards from it).
    pub fn open(workspace: &Path) -> Result<Repo, GitError> {
        let inner = Repository::discover(workspace).map_err(|_| GitError::NotARepository(workspace.to_owned()))?;
        Ok(Repo { inner, workspace: workspace.to_owned() })
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The commit (or object) a revision names: a sha, a branch, `HEAD~2`...
    pub fn resolve(&self, rev: &str) -> Result<Oid, GitError> {
        let obj = self.inner.revparse_single(rev).map_err(|_| GitError::UnknownRev(rev.to_owned()))?;
        Ok(obj.peel_to_commit().map(|c| c.id()).unwrap_or_else(|_| obj.id()))
    }

    /// The configured author, or a refusal that says how to set one.
    pub fn signature(&self) -> Result<Signature<'static>, GitError> {
        self.inner.signature().map_err(|_| {
            GitError::Refused(
                "no author: set user.name and user.email in git's config (git config user.name ...)".into(),
            )
        })
    }

    /// The current branch's name, when HEAD is on one.
    pub fn current_branch(&self) -> Option<String> {
        let head = self.inner.head().ok()?;
        head.is_branch().then(|| head.shorthand().map(str::to_owned)).flatten()
    }

    /// A path given to a git verb (relative to the workspace, or absolute) as a path relative
    /// to the repository's root.
    pub fn relative(&self, path: &str) -> Result<String, GitError> {
        let root =
            self.inner.workdir().ok_or_else(|| GitError::Refused("a bare repository has no working tree".into()))?;
        let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
        let full = if Path::new(path).is_absolute() { PathBuf::from(path) } else { self.workspace.join(path) };
        let full = normalize(&full);
        let rel = full
            .strip_prefix(&root)
            .map_err(|_| GitError::Refused(format!("{path} is outside the repository at {}", root.display())))?;
        Ok(rel.to_string_lossy().replace('\\', "/"))
    }
}

/// Lexical normalization (`a/./b/../c` -> `a/c`), without touching the disk.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}
