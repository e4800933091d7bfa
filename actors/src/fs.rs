//! Replacing a file whole: written to a temporary file beside it and renamed over it, so a
//! reader (or a crash) sees the old content or the new, never a mix. The temporary name is
//! unique per process and write, and it is removed when the write fails.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Replaces `path` with `bytes` (not synced: gm's own state files, which a crash of the machine
/// may leave at their previous version).
pub fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace_with(path, bytes, None, false)
}

/// Replaces `path` with `bytes`, giving the new file `mode` and syncing it before the rename
/// when `sync` is set (a user's file: the rename must not land before the data).
pub fn replace_with(path: &Path, bytes: &[u8], mode: Option<u32>, sync: bool) -> std::io::Result<()> {
    let tmp = temp_beside(path);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        f.write_all(bytes)?;
        if let Some(mode) = mode {
            crate::sys::set_permission_bits(&f, mode)?;
        }
        if sync {
            f.sync_data()?;
        }
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// `.<name>.gm-tmp-<pid>-<n>` in `path`'s directory.
fn temp_beside(path: &Path) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = format!(".{name}.gm-tmp-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed));
    path.with_file_name(tmp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_replaced_file_holds_the_new_bytes_and_no_temporary_is_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        replace(&path, b"one").expect("write");
        replace_with(&path, b"two", Some(0o600), true).expect("write");
        assert_eq!(std::fs::read(&path).expect("read"), b"two");
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).expect("meta").permissions());
        assert_eq!(mode & 0o777, 0o600);
        assert!(replace(&dir.path().join("missing/x"), b"x").is_err(), "a missing folder is an error");
        let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list").filter_map(Result::ok).collect();
        assert_eq!(left.len(), 1, "{left:?}");
    }
}
