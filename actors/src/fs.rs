//! Replacing a file whole: written to a temporary file beside it and renamed over it, so a
//! reader (or a crash) sees the old content or the new, never a mix. The temporary name is
//! unique per process and write, and it is removed when the write fails. Given a mode, the
//! temporary has it from its creation: a file of the user's (`~/.gmnew/trust.json`, a 0600
//! file edited) is never readable by others, even for the instant before a chmod.

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
    Staged::write(path, bytes, mode, sync)?.commit()
}

/// New content written beside its target and not in place yet: [`Staged::commit`] renames it
/// over the target; dropped uncommitted, it is removed. Between the two a writer can look at the
/// target again (`gm install` merges another program's change made meanwhile).
pub struct Staged {
    tmp: PathBuf,
    target: PathBuf,
    synced: bool,
    done: bool,
}

impl Staged {
    /// Writes `bytes` to a temporary file beside `path`, with `mode`, synced when `sync` is set.
    pub fn write(path: &Path, bytes: &[u8], mode: Option<u32>, sync: bool) -> std::io::Result<Staged> {
        // In gm's own folders (`.gm/`, `~/.gmnew`) the folder is reached through no link a
        // stranger put there; the temporary is then new (O_EXCL) and the rename replaces
        // whatever stands at the target, a link included, never writing through it.
        let own = crate::state_file::is_state_path(path);
        if let Some(folder) = path.parent().filter(|_| own) {
            crate::state_file::open_own_folder(folder)?;
        }
        // gm's own files are private from the start unless the caller keeps another mode.
        let mode = mode.or(own.then_some(0o600));
        let staged = Staged { tmp: temp_beside(path), target: path.to_owned(), synced: sync, done: false };
        let mut f = create_temp(&staged.tmp, mode)?;
        f.write_all(bytes)?;
        if let Some(mode) = mode {
            // Created with `mode` less the umask: the bits the umask took are given back.
            crate::sys::set_permission_bits(&f, mode)?;
        }
        if sync {
            f.sync_data()?;
        }
        Ok(staged)
    }

    /// Renames the new content over the target; a synced write also syncs the folder, so the
    /// rename itself is on disk (best effort where a folder cannot be opened).
    pub fn commit(mut self) -> std::io::Result<()> {
        std::fs::rename(&self.tmp, &self.target)?;
        self.done = true;
        if self.synced {
            if let Some(dir) = self.target.parent().and_then(|d| std::fs::File::open(d).ok()) {
                let _ = dir.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}

/// Creates the temporary (`O_CREAT|O_EXCL`, never through a link) with `mode` from the start,
/// or the umask's default mode without one.
fn create_temp(tmp: &Path, mode: Option<u32>) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_EXCL already refuses a link at the name; O_NOFOLLOW says it for any reader.
        options.custom_flags(libc::O_NOFOLLOW);
        if let Some(mode) = mode {
            options.mode(mode);
        }
    }
    #[cfg(not(unix))]
    let _ = mode;
    options.open(tmp)
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

    /// This process's umask, as Linux reports it (setting it to read it would race other tests).
    #[cfg(target_os = "linux")]
    fn umask() -> u32 {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let line = status.lines().find_map(|l| l.strip_prefix("Umask:")).expect("Umask");
        u32::from_str_radix(line.trim(), 8).expect("octal")
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_temporary_given_a_mode_has_it_from_its_creation() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let mode_of = |p: &Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        // Nothing has been written nor chmod-ed yet: this is the mode open(2) gave it.
        let private = dir.path().join("private");
        drop(create_temp(&private, Some(0o600)).expect("create"));
        assert_eq!(mode_of(&private), 0o600 & !umask());
        let plain = dir.path().join("plain");
        drop(create_temp(&plain, None).expect("create"));
        assert_eq!(mode_of(&plain), 0o666 & !umask(), "no mode: the umask's default, as before");
        // A link at the temporary's name is never followed.
        let target = dir.path().join("target");
        std::fs::write(&target, b"kept").expect("write");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).expect("link");
        assert!(create_temp(&link, Some(0o600)).is_err());
        assert_eq!(std::fs::read(&target).expect("read"), b"kept");
    }

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

    #[cfg(unix)]
    #[test]
    fn a_file_of_gms_own_folders_is_private_and_its_folder_is_reached_through_no_link() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let state = dir.path().join("ws/.gm");
        std::fs::create_dir_all(&state).expect("mkdir");
        replace(&state.join("runs/s-1.json"), b"{}").expect("write");
        let mode = std::fs::metadata(state.join("runs/s-1.json")).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("mkdir");
        std::os::unix::fs::symlink(&elsewhere, state.join("out")).expect("link");
        assert!(replace(&state.join("out/x"), b"x").is_err(), "a linked folder is refused");
        assert_eq!(std::fs::read_dir(&elsewhere).expect("list").count(), 0);
    }
}
