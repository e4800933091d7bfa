//! One way to open gm's own files where a stranger may have put something first: the
//! workspace's `.gm/` (a repository can commit anything there, links included) and
//! `~/.gmnew`. Every component below the *anchor* (the folder the user chose: the workspace,
//! the home directory) is opened without following a link (`openat` from the parent's
//! descriptor with `O_NOFOLLOW`), every folder on the way and the file itself must belong to
//! this user, and the file must be a regular file. A new file is created with its final mode
//! from the start, so it is never readable by others, even for an instant.
//!
//! A refusal names the path and how to fix it; nothing is created, truncated or written
//! outside the folder, ever. gm's file *verbs* do not come here: a path the agent gives may
//! lead anywhere (the spec's rule); this is for the files gm itself names.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Component, Path, PathBuf};

/// Why a file of gm's was not opened.
#[derive(Debug, thiserror::Error)]
pub enum StateFileError {
    #[error("remove {path}: it is a symbolic link{}; gm makes its own files there", target.as_ref().map(|t| format!(" to {}", t.display())).unwrap_or_default())]
    Link { path: PathBuf, target: Option<PathBuf> },
    #[error("remove {path}: it is {what}, where gm keeps a file of its own")]
    NotAFile { path: PathBuf, what: &'static str },
    #[error("remove {path}: it is {what}, where gm keeps a folder of its own")]
    NotAFolder { path: PathBuf, what: &'static str },
    #[error(
        "{path} belongs to uid {owner}, not to this user (uid {me}): gm uses only files of its own user; remove it"
    )]
    Foreign { path: PathBuf, owner: u32, me: u32 },
    #[error("{path} is not below {anchor}")]
    Outside { path: PathBuf, anchor: PathBuf },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

impl StateFileError {
    /// Whether the file simply is not there (the caller asked for no creation).
    pub fn is_not_found(&self) -> bool {
        matches!(self, StateFileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// Whether this is a refusal (something a stranger put there), not an I/O failure.
    pub fn is_refusal(&self) -> bool {
        !matches!(self, StateFileError::Io { .. } | StateFileError::Outside { .. })
    }
}

impl From<StateFileError> for std::io::Error {
    fn from(e: StateFileError) -> Self {
        match e {
            StateFileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => source,
            e => {
                let kind =
                    if e.is_refusal() { std::io::ErrorKind::PermissionDenied } else { std::io::ErrorKind::Other };
                std::io::Error::new(kind, e.to_string())
            }
        }
    }
}

/// How to open a file: the `OpenOptions` gm uses for its own files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct How {
    pub read: bool,
    pub write: bool,
    pub append: bool,
    pub create: bool,
    pub create_new: bool,
    pub truncate: bool,
    /// Folders on the way that are missing are made (mode 0777 less the umask, as
    /// `create_dir_all` does).
    pub make_folders: bool,
    /// The mode a new file gets at creation.
    pub mode: u32,
}

impl How {
    /// Read an existing file.
    pub const READ: How = How {
        read: true,
        write: false,
        append: false,
        create: false,
        create_new: false,
        truncate: false,
        make_folders: false,
        mode: 0o600,
    };
    /// Append (created when missing), reading too (a log repaired at open).
    pub const APPEND: How = How { append: true, create: true, make_folders: true, ..How::READ };
    /// Read and write, created when missing, never truncated (a lock file).
    pub const LOCK: How = How { write: true, create: true, make_folders: true, ..How::READ };
    /// Write from empty, created when missing.
    pub const REPLACE: How =
        How { read: false, write: true, create: true, truncate: true, make_folders: true, ..How::READ };
    /// Create a new file; one already there is an error.
    pub const NEW: How = How { read: false, write: true, create_new: true, make_folders: true, ..How::READ };

    /// The same, with `mode` for a new file.
    pub const fn mode(self, mode: u32) -> How {
        How { mode, ..self }
    }
}

/// Opens `path`, which lies below `anchor`: the anchor is opened as the user gave it (links
/// followed: it is the user's choice), every component after it without following a link.
pub fn open(anchor: &Path, path: &Path, how: How) -> Result<File, StateFileError> {
    let rel = path
        .strip_prefix(anchor)
        .map_err(|_| StateFileError::Outside { path: path.to_owned(), anchor: anchor.to_owned() })?;
    let names =
        names_of(rel).ok_or_else(|| StateFileError::Outside { path: path.to_owned(), anchor: anchor.to_owned() })?;
    let Some((file_name, folders)) = names.split_last() else {
        return Err(StateFileError::Outside { path: path.to_owned(), anchor: anchor.to_owned() });
    };
    imp::open(anchor, folders, file_name, how)
}

/// Opens one of gm's own files at `path`, walking without following a link from the folder
/// that holds gm's state folder (the nearest `.gm` or `.gmnew` above the file), or from the
/// file's own folder when the path names neither.
pub fn open_own(path: &Path, how: How) -> Result<File, StateFileError> {
    let anchor = state_anchor(path).unwrap_or_else(|| path.parent().unwrap_or(Path::new("")).to_owned());
    open(&anchor, path, how)
}

/// [`open_own`] with [`How::LOCK`], then an exclusive `flock`: `wait` blocks until it is free,
/// else `Ok(None)` when another holds it.
#[cfg(unix)]
pub fn lock(path: &Path, wait: bool) -> Result<Option<File>, StateFileError> {
    let file = open_own(path, How::LOCK)?;
    crate::sys::lock_file(file, wait).map_err(|source| StateFileError::Io { path: path.to_owned(), source })
}

/// [`open_own`] with [`How::LOCK`], then an exclusive lock held until the guard is dropped.
pub fn lock_exclusive(path: &Path) -> Result<crate::sys::FileLock, StateFileError> {
    let file = open_own(path, How::LOCK)?;
    crate::sys::lock_exclusive(file).map_err(|source| StateFileError::Io { path: path.to_owned(), source })
}

/// Whether `path` lies in a state folder (`.gm`, `.gmnew`): gm's own files, opened here.
pub fn is_state_path(path: &Path) -> bool {
    state_anchor(path).is_some()
}

/// Writes `bytes` to a new file at `path` (one already there, or a link, is an error).
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<(), StateFileError> {
    use std::io::Write;
    let mut file = open_own(path, How::NEW)?;
    file.write_all(bytes).map_err(|source| StateFileError::Io { path: path.to_owned(), source })
}

/// Writes `bytes` as the whole content of `path`, created when missing (never through a link).
pub fn write_whole(path: &Path, bytes: &[u8]) -> Result<(), StateFileError> {
    use std::io::Write;
    let mut file = open_own(path, How::REPLACE)?;
    file.write_all(bytes).map_err(|source| StateFileError::Io { path: path.to_owned(), source })
}

/// The folder that holds the state folder (`.gm`, `.gmnew`) nearest above `path`.
fn state_anchor(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .skip(1)
        .find(|folder| matches!(folder.file_name().and_then(OsStr::to_str), Some(".gm" | ".gmnew")))
        .map(|folder| folder.parent().unwrap_or(Path::new("")).to_owned())
}

/// [`folder`] from the folder that holds the state folder above `path`; a folder in no state
/// folder (a test's) is made as `create_dir_all` does.
pub fn open_own_folder(path: &Path) -> Result<(), StateFileError> {
    match state_anchor(&path.join("x")) {
        Some(anchor) => folder(&anchor, path),
        None => std::fs::create_dir_all(path).map_err(|source| StateFileError::Io { path: path.to_owned(), source }),
    }
}

/// Opens (making it when missing) the folder `path` below `anchor` and checks it the same way:
/// a real folder of this user's, reached through no link.
pub fn folder(anchor: &Path, path: &Path) -> Result<(), StateFileError> {
    let rel = path
        .strip_prefix(anchor)
        .map_err(|_| StateFileError::Outside { path: path.to_owned(), anchor: anchor.to_owned() })?;
    let names =
        names_of(rel).ok_or_else(|| StateFileError::Outside { path: path.to_owned(), anchor: anchor.to_owned() })?;
    imp::folder(anchor, &names)
}

/// What is at `path` (not following a link), checked as a file of gm's: nothing there is fine;
/// a link, something else than a regular file, or another user's file is refused.
pub fn check_file(path: &Path) -> Result<(), StateFileError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => judge(path, &meta, Kind::File),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(StateFileError::Io { path: path.to_owned(), source }),
    }
}

/// What is at `path` (not following a link), checked as a folder of gm's, and each entry in
/// it that is a link refused: nothing there is fine.
pub fn check_folder(path: &Path) -> Result<(), StateFileError> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) => judge(path, &meta, Kind::Folder)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(StateFileError::Io { path: path.to_owned(), source }),
    }
    let entries = std::fs::read_dir(path).map_err(|source| StateFileError::Io { path: path.to_owned(), source })?;
    for entry in entries.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_symlink()) {
            let p = entry.path();
            return Err(StateFileError::Link { target: std::fs::read_link(&p).ok(), path: p });
        }
    }
    Ok(())
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    File,
    Folder,
}

/// The plain names of a relative path; `None` when it climbs (`..`) or is absolute.
fn names_of(rel: &Path) -> Option<Vec<&OsStr>> {
    rel.components()
        .filter(|c| *c != Component::CurDir)
        .map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

fn judge(path: &Path, meta: &std::fs::Metadata, kind: Kind) -> Result<(), StateFileError> {
    let t = meta.file_type();
    if t.is_symlink() {
        return Err(StateFileError::Link { path: path.to_owned(), target: std::fs::read_link(path).ok() });
    }
    let what = || {
        if t.is_dir() {
            "a folder"
        } else if t.is_file() {
            "a file"
        } else {
            "a special file (a pipe, socket or device)"
        }
    };
    match kind {
        Kind::File if !t.is_file() => return Err(StateFileError::NotAFile { path: path.to_owned(), what: what() }),
        Kind::Folder if !t.is_dir() => return Err(StateFileError::NotAFolder { path: path.to_owned(), what: what() }),
        _ => {}
    }
    imp::check_owner(path, meta)
}

#[cfg(unix)]
mod imp {
    use super::*;
    use crate::sys;
    use std::os::fd::{AsFd, OwnedFd};

    pub(super) fn check_owner(path: &Path, meta: &std::fs::Metadata) -> Result<(), StateFileError> {
        let (owner, me) = (sys::owner_of(meta), sys::current_uid());
        // root may keep its own files anywhere; a file of root's in a user's folder is not the
        // user's either, so only an exact match passes.
        if owner != me {
            return Err(StateFileError::Foreign { path: path.to_owned(), owner, me });
        }
        Ok(())
    }

    /// The anchor, opened as given (an empty one is the current folder).
    fn open_anchor(anchor: &Path) -> Result<OwnedFd, StateFileError> {
        let given = if anchor.as_os_str().is_empty() { Path::new(".") } else { anchor };
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC)
            .open(given)
            .map_err(|source| StateFileError::Io { path: anchor.to_owned(), source })?;
        Ok(OwnedFd::from(f))
    }

    use std::os::unix::fs::OpenOptionsExt;

    /// Walks `names` from `anchor`, each a folder of this user's reached through no link,
    /// making the missing ones when `make` is set.
    fn walk(anchor: &Path, names: &[&OsStr], make: bool) -> Result<(OwnedFd, PathBuf), StateFileError> {
        let mut dir = open_anchor(anchor)?;
        let mut at = anchor.to_owned();
        for name in names {
            at.push(name);
            let opened = match sys::open_at(dir.as_fd(), name, sys::OPEN_DIRECTORY, 0) {
                Err(e) if make && e.kind() == std::io::ErrorKind::NotFound => {
                    match sys::mkdir_at(dir.as_fd(), name, 0o777) {
                        Ok(()) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                        Err(source) => return Err(StateFileError::Io { path: at, source }),
                    }
                    sys::open_at(dir.as_fd(), name, sys::OPEN_DIRECTORY, 0)
                }
                other => other,
            };
            let next = opened.map_err(|e| refusal(&at, e, Kind::Folder))?;
            let meta = File::from(next.try_clone().map_err(|source| StateFileError::Io { path: at.clone(), source })?)
                .metadata()
                .map_err(|source| StateFileError::Io { path: at.clone(), source })?;
            check_owner(&at, &meta)?;
            dir = next;
        }
        Ok((dir, at))
    }

    /// What an `open_at` failure means for a person: a link or a wrong kind of file (`ELOOP`,
    /// `ENOTDIR`, `EISDIR`, `ENXIO` for a pipe with no reader...) is named as such, from
    /// `lstat`; anything else is the I/O error.
    fn refusal(path: &Path, e: std::io::Error, kind: Kind) -> StateFileError {
        if e.kind() != std::io::ErrorKind::NotFound {
            if let Ok(meta) = std::fs::symlink_metadata(path) {
                if let Err(refused) = judge(path, &meta, kind) {
                    return refused;
                }
            }
        }
        StateFileError::Io { path: path.to_owned(), source: e }
    }

    pub(super) fn open(anchor: &Path, folders: &[&OsStr], name: &OsStr, how: How) -> Result<File, StateFileError> {
        let (dir, mut path) = walk(anchor, folders, how.make_folders && (how.create || how.create_new))?;
        path.push(name);
        let flags = sys::open_flags(how.read, how.write, how.append, how.create, how.create_new, how.truncate);
        // A special file (a FIFO a repository committed) must not block the open.
        let fd = sys::open_at(dir.as_fd(), name, flags | libc::O_NONBLOCK, how.mode)
            .map_err(|e| refusal(&path, e, Kind::File))?;
        let file = File::from(fd);
        let meta = file.metadata().map_err(|source| StateFileError::Io { path: path.clone(), source })?;
        judge_open(&path, &meta)?;
        // Back to blocking reads and writes, as any other open file of gm's.
        sys::set_blocking(file.as_fd()).map_err(|source| StateFileError::Io { path: path.clone(), source })?;
        Ok(file)
    }

    /// An opened file (so not a link) must be a regular file of ours.
    fn judge_open(path: &Path, meta: &std::fs::Metadata) -> Result<(), StateFileError> {
        if !meta.file_type().is_file() {
            let what = if meta.is_dir() { "a folder" } else { "a special file (a pipe, socket or device)" };
            return Err(StateFileError::NotAFile { path: path.to_owned(), what });
        }
        check_owner(path, meta)
    }

    pub(super) fn folder(anchor: &Path, names: &[&OsStr]) -> Result<(), StateFileError> {
        walk(anchor, names, true).map(|_| ())
    }
}

#[cfg(not(unix))]
mod imp {
    //! Elsewhere: each component checked with `symlink_metadata` before the open (a race with
    //! a process of the user's own remains; a committed link does not get through).
    use super::*;

    pub(super) fn check_owner(_path: &Path, _meta: &std::fs::Metadata) -> Result<(), StateFileError> {
        Ok(())
    }

    pub(super) fn folder(anchor: &Path, names: &[&OsStr]) -> Result<(), StateFileError> {
        let mut at = anchor.to_owned();
        for name in names {
            at.push(name);
            match std::fs::symlink_metadata(&at) {
                Ok(meta) => judge(&at, &meta, Kind::Folder)?,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir(&at).map_err(|source| StateFileError::Io { path: at.clone(), source })?
                }
                Err(source) => return Err(StateFileError::Io { path: at, source }),
            }
        }
        Ok(())
    }

    pub(super) fn open(anchor: &Path, folders: &[&OsStr], name: &OsStr, how: How) -> Result<File, StateFileError> {
        folder(anchor, folders)?;
        let mut path = anchor.to_owned();
        path.extend(folders);
        path.push(name);
        check_file(&path)?;
        std::fs::OpenOptions::new()
            .read(how.read)
            .write(how.write)
            .append(how.append)
            .create(how.create)
            .create_new(how.create_new)
            .truncate(how.truncate)
            .open(&path)
            .map_err(|source| StateFileError::Io { path, source })
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::unix::fs::PermissionsExt;

    fn setup() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".gm")).expect("mkdir");
        let outside = dir.path().join("outside.txt");
        std::fs::write(&outside, "the user's own file\n").expect("write");
        (dir, ws, outside)
    }

    #[test]
    fn a_link_where_gm_keeps_a_file_is_refused_and_its_target_untouched() {
        let (_dir, ws, outside) = setup();
        let log = ws.join(".gm/log.jsonl");
        std::os::unix::fs::symlink(&outside, &log).expect("link");
        for how in [How::APPEND, How::LOCK, How::REPLACE, How::READ, How::NEW] {
            let e = open(&ws, &log, how).expect_err("refused");
            assert!(matches!(e, StateFileError::Link { .. }) || (how == How::NEW), "{how:?}: {e}");
            assert!(e.to_string().contains("log.jsonl"), "{e}");
        }
        let e = open(&ws, &log, How::APPEND).expect_err("refused");
        assert!(e.to_string().contains(&outside.display().to_string()), "names the target: {e}");
        assert_eq!(std::fs::read_to_string(&outside).expect("read"), "the user's own file\n");
    }

    #[test]
    fn a_linked_state_folder_or_a_linked_folder_inside_it_is_refused() {
        let (dir, ws, _outside) = setup();
        let elsewhere = dir.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).expect("mkdir");
        std::os::unix::fs::symlink(&elsewhere, ws.join(".gm/jobs")).expect("link");
        let e = open(&ws, &ws.join(".gm/jobs/build.log"), How::APPEND).expect_err("refused");
        assert!(matches!(e, StateFileError::Link { .. }), "{e}");
        std::fs::remove_dir_all(ws.join(".gm")).expect("rm");
        std::os::unix::fs::symlink(&elsewhere, ws.join(".gm")).expect("link");
        let e = open(&ws, &ws.join(".gm/log.jsonl"), How::APPEND).expect_err("refused");
        assert!(matches!(e, StateFileError::Link { .. }), "{e}");
        assert_eq!(std::fs::read_dir(&elsewhere).expect("list").count(), 0, "nothing made through the link");
        assert!(check_folder(&ws.join(".gm")).is_err());
    }

    #[test]
    fn a_new_file_has_its_final_mode_and_missing_folders_are_made() {
        let (_dir, ws, _outside) = setup();
        let path = ws.join(".gm/runs/deep/x.json");
        let mut f = open(&ws, &path, How::REPLACE).expect("open");
        f.write_all(b"{}").expect("write");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mut text = String::new();
        open(&ws, &path, How::READ).expect("read").read_to_string(&mut text).expect("read");
        assert_eq!(text, "{}");
        assert!(open(&ws, &path, How::NEW).is_err(), "create_new refuses an existing file");
    }

    #[test]
    fn a_special_file_where_gm_keeps_a_file_is_refused_without_blocking() {
        let (_dir, ws, _outside) = setup();
        let fifo = ws.join(".gm/worker.log");
        let c = std::ffi::CString::new(fifo.to_str().expect("utf-8")).expect("cstring");
        // SAFETY: mkfifo with a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = open(&ws, &fifo, How::APPEND).expect_err("refused");
        assert!(matches!(e, StateFileError::NotAFile { .. }), "{e}");
        assert!(check_file(&fifo).is_err());
    }

    #[test]
    fn another_users_file_is_refused() {
        // SAFETY: getuid cannot fail.
        if unsafe { libc::getuid() } != 0 {
            crate::stderr_line!("skipped: giving a file to another user needs root");
            return;
        }
        let (_dir, ws, _outside) = setup();
        let path = ws.join(".gm/http.token");
        std::fs::write(&path, "t").expect("write");
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).expect("chown");
        let e = open(&ws, &path, How::READ).expect_err("refused");
        assert!(matches!(e, StateFileError::Foreign { owner: 65534, .. }), "{e}");
        assert!(check_file(&path).is_err());
    }

    #[test]
    fn a_file_lock_is_exclusive_until_its_holder_drops_it_and_a_linked_lock_is_refused() {
        let (_dir, ws, outside) = setup();
        let path = ws.join(".gm/worker.lock");
        let held = lock(&path, false).expect("lock").expect("free");
        assert!(crate::sys::is_locked(&path));
        assert!(lock(&path, false).expect("try").is_none(), "a second holder is refused");
        drop(held);
        assert!(lock(&path, false).expect("lock").is_some());
        std::fs::remove_file(&path).expect("rm");
        std::os::unix::fs::symlink(&outside, &path).expect("link");
        assert!(matches!(lock(&path, true), Err(StateFileError::Link { .. })));
        assert!(matches!(lock_exclusive(&path), Err(StateFileError::Link { .. })));
    }

    #[test]
    fn open_own_walks_from_the_folder_that_holds_the_state_folder() {
        assert_eq!(state_anchor(Path::new("/w/.gm/jobs/a.log")).as_deref(), Some(Path::new("/w")));
        assert_eq!(state_anchor(Path::new("/home/u/.gmnew/trust.json")).as_deref(), Some(Path::new("/home/u")));
        assert_eq!(state_anchor(Path::new("/tmp/x/log.jsonl")), None);
        let (_dir, ws, outside) = setup();
        std::os::unix::fs::symlink(&outside, ws.join(".gm/worker.pid")).expect("link");
        assert!(matches!(open_own(&ws.join(".gm/worker.pid"), How::LOCK), Err(StateFileError::Link { .. })));
    }

    #[test]
    fn a_path_that_climbs_out_of_its_anchor_is_refused() {
        let (_dir, ws, _outside) = setup();
        let e = open(&ws, &ws.join(".gm/../../outside.txt"), How::READ).expect_err("refused");
        assert!(matches!(e, StateFileError::Outside { .. }), "{e}");
    }
}
