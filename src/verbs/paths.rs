//! Path resolution and file identity for the file verbs.
//!
//! Paths may point inside or outside the workspace: a relative path is taken from the
//! workspace; `..` and symlinks are followed, not refused (the spec's choice).

use std::path::{Path, PathBuf};

use gm_actors::file_locks::{FileGuard, FileKey, Lock, Mode};

use super::{Ctx, VerbError};

pub fn resolve(ctx: &Ctx, path: &str) -> Result<PathBuf, VerbError> {
    if path.is_empty() {
        return Err(VerbError::InvalidArgs("path is empty".into()));
    }
    if path.contains('\0') {
        return Err(VerbError::InvalidArgs("path contains a NUL byte".into()));
    }
    let p = Path::new(path);
    Ok(if p.is_absolute() { p.to_owned() } else { ctx.workspace.join(p) })
}

/// The lock key of a path: the file's device and inode when it exists (so aliases share a
/// key), else its path with the parent directory canonicalized.
pub fn file_key(path: &Path) -> FileKey {
    if let Some((dev, ino)) = std::fs::metadata(path).ok().as_ref().and_then(gm_actors::sys::file_identity) {
        return FileKey::Inode { dev, ino };
    }
    let canonical = match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir).map(|d| d.join(name)).unwrap_or_else(|_| path.to_owned()),
        _ => path.to_owned(),
    };
    FileKey::Path(canonical)
}

/// Locks `paths` for the duration of the returned guard.
pub async fn lock(ctx: &Ctx, paths: &[&Path], mode: Mode) -> Result<FileGuard, VerbError> {
    let keys = paths.iter().map(|p| file_key(p)).collect();
    let rx = ctx
        .locks
        .send(Lock { keys, mode })
        .await
        .map_err(|e| VerbError::Internal(format!("file locks unavailable: {e}")))?;
    rx.await.map_err(|_| VerbError::Internal("file locks dropped the request".into()))
}
