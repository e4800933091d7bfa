//! The inotify backend: one watch per directory of the workspace that git does not ignore,
//! plus git's directory (non-recursive: `index`, `HEAD`) and the cookie directory.
//!
//! Only events that mean a change are asked for (no `IN_OPEN`/`IN_ACCESS`): reads by grep and
//! search would otherwise flood the queue, which holds 16384 events by default. When it
//! overflows anyway, the tree is walked again: a directory made while events were lost is
//! watched then (adding a watch a directory already has is harmless: it keeps its descriptor).
//!
//! A directory refused a watch (EACCES: no read permission, a FUSE mount of another user) is
//! reported and skipped, with everything under it; only the watch limit (ENOSPC) or a failure
//! of inotify itself stops the watcher. [`run`] returns `Ok` when readers stopped asking (the
//! instance is closed with every watch; see `super` on idle workers).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask, Watches};

use super::{is_tracked_marker, relative, Layout, Sink, Unwatched};

/// What a watch descriptor stands for.
enum Target {
    Dir(PathBuf),
    Git,
    Cookies,
}

struct Tree<'a> {
    layout: &'a Layout,
    watches: Watches,
    targets: HashMap<i32, Target>,
    repo: Option<git2::Repository>,
    sink: Arc<dyn Sink>,
    /// Directories refused a watch: nothing under them is tried again, until one is made anew.
    refused: Vec<PathBuf>,
    /// The queue overflowed in the batch being handled: walk the tree once the batch is done.
    overflowed: bool,
}

fn dir_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
}

pub(super) fn run(layout: &Layout, sink: Arc<dyn Sink>, ready: impl FnOnce(&'static str, u64)) -> Result<(), String> {
    let mut inotify = Inotify::init().map_err(|e| format!("inotify is not available: {e}"))?;
    let mut tree = Tree {
        layout,
        watches: inotify.watches(),
        targets: HashMap::new(),
        // Opened after the first walk: see below.
        repo: None,
        sink,
        refused: Vec::new(),
        overflowed: false,
    };
    let cookies = tree
        .watches
        .add(&layout.cookie_dir, WatchMask::CREATE)
        .map_err(|e| format!("cannot watch {}: {e}", layout.cookie_dir.display()))?;
    tree.targets.insert(cookies.get_watch_descriptor_id(), Target::Cookies);
    if let Some(git) = &layout.git_dir {
        let wd = tree
            .watches
            .add(git, WatchMask::CLOSE_WRITE | WatchMask::MOVED_TO | WatchMask::CREATE | WatchMask::DELETE)
            .map_err(|e| watch_error(git, &e))?;
        tree.targets.insert(wd.get_watch_descriptor_id(), Target::Git);
    }
    tree.watch_whole_tree()?;
    ready("inotify", tree.dirs());
    // Asked whether a path is ignored, for events only: opened once readers no longer wait
    // (libgit2's first call costs tens of milliseconds, see `crate::git::git_dir`); the
    // events meanwhile wait in the kernel's queue.
    tree.repo = git2::Repository::discover(&layout.workspace).ok();
    let mut buffer = vec![0u8; 64 * 1024];
    // Woken at least this often to see whether readers stopped asking.
    let look =
        (super::idle_after() / 4).clamp(std::time::Duration::from_millis(20), std::time::Duration::from_secs(10));
    loop {
        if !readable_within(&inotify, look)? {
            if tree.sink.release_if_idle() {
                // Dropping `inotify` closes it, and every watch with it.
                return Ok(());
            }
            continue;
        }
        let events = inotify.read_events(&mut buffer).map_err(|e| format!("reading inotify events: {e}"))?;
        for event in events {
            tree.on_event(event.wd.get_watch_descriptor_id(), event.mask, event.name)?;
        }
        if tree.overflowed {
            // Directories made while events were lost have no watch yet.
            tree.overflowed = false;
            tree.watch_whole_tree()?;
        }
    }
}

/// Whether inotify has events within `wait`.
fn readable_within(inotify: &Inotify, wait: std::time::Duration) -> Result<bool, String> {
    use std::os::fd::AsFd;
    gm_actors::sys::readable_within(inotify.as_fd(), wait).map_err(|e| format!("waiting for inotify events: {e}"))
}

/// A directory and what adding its watch gave.
type Placed = (PathBuf, std::io::Result<WatchDescriptor>);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The limit on watches is the error users meet; it gets the setting to raise.
fn watch_error(path: &Path, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::StorageFull {
        let limit = std::fs::read_to_string("/proc/sys/fs/inotify/max_user_watches").unwrap_or_default();
        format!(
            "inotify's watch limit is reached (fs.inotify.max_user_watches = {}) at {}: raise it with sysctl, or searches rescan instead",
            limit.trim(),
            path.display()
        )
    } else {
        format!("cannot watch {}: {e}", path.display())
    }
}

impl Tree<'_> {
    fn dirs(&self) -> u64 {
        self.targets.values().filter(|t| matches!(t, Target::Dir(_))).count() as u64
    }

    /// Watches every directory of the workspace that git does not ignore, walking it on every
    /// core: a first search or `callers` after a start waits for these watches (a kernel's
    /// 5,000 directories took 215 ms on one core, most of it the walk itself).
    ///
    /// Each directory is watched as the walk finds it, before it is read, as in
    /// [`Tree::watch_tree`]: a directory made in it after it was read is then an event.
    fn watch_whole_tree(&mut self) -> Result<(), String> {
        let root = self.layout.workspace.clone();
        let placed = self.watches.add(&root, dir_mask());
        self.place(&root, placed)?;
        let state_dir = self.layout.state_dir.clone();
        let watches = self.watches.clone();
        let skipped = Arc::new(Mutex::new(self.refused.clone()));
        let found: Arc<Mutex<Vec<Placed>>> = Arc::default();
        let full = Arc::new(AtomicBool::new(false));
        let walker = {
            let (skipped, found, full) = (skipped.clone(), found.clone(), full.clone());
            ignore::WalkBuilder::new(&root)
                .hidden(false)
                .require_git(false)
                .filter_entry(move |e| {
                    let path = e.path();
                    // Only directories are wanted: files are left out before the walk
                    // allocates anything for them.
                    if !e.file_type().is_some_and(|t| t.is_dir())
                        || e.file_name() == OsStr::new(".git")
                        || path == state_dir
                        || full.load(Ordering::Relaxed)
                    {
                        return false;
                    }
                    let mut skipped = lock(&skipped);
                    if skipped.iter().any(|r| path.starts_with(r) && path != r) {
                        return false;
                    }
                    let placed = watches.clone().add(path, dir_mask());
                    match &placed {
                        Ok(_) => skipped.retain(|r| r != path),
                        Err(e) if e.kind() == std::io::ErrorKind::StorageFull => full.store(true, Ordering::Relaxed),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(_) => skipped.push(path.to_owned()),
                    }
                    drop(skipped);
                    let descend = placed.is_ok();
                    lock(&found).push((path.to_owned(), placed));
                    descend
                })
                .build_parallel()
        };
        walker.run(|| Box::new(|_| ignore::WalkState::Continue));
        let found = std::mem::take(&mut *lock(&found));
        for (path, placed) in found {
            self.place(&path, placed)?;
        }
        Ok(())
    }

    /// Watches `dir` and every directory under it that git does not ignore, reporting every
    /// file found changed: a directory made while gm watched, whose files may have been
    /// written before its watch was placed.
    fn watch_tree(&mut self, dir: &Path) -> Result<(), String> {
        let state_dir = self.layout.state_dir.clone();
        let walker = ignore::WalkBuilder::new(dir)
            .hidden(false)
            .require_git(false)
            .filter_entry(move |e| e.file_name() != OsStr::new(".git") && e.path() != state_dir)
            .build();
        for entry in walker.filter_map(Result::ok) {
            let is_dir = entry.file_type().is_some_and(|t| t.is_dir());
            let path = entry.path();
            if self.refused.iter().any(|r| path.starts_with(r) && path != r) {
                continue;
            }
            if is_dir {
                let placed = self.watches.add(path, dir_mask());
                self.place(path, placed)?;
            }
            if let Some(rel) = relative(&self.layout.workspace, path) {
                self.sink.changed(rel);
            }
        }
        Ok(())
    }

    /// Keeps what adding a watch on `path` gave.
    fn place(&mut self, path: &Path, placed: std::io::Result<WatchDescriptor>) -> Result<(), String> {
        match placed {
            Ok(wd) => {
                self.targets.insert(wd.get_watch_descriptor_id(), Target::Dir(path.to_owned()));
                if let Some(at) = self.refused.iter().position(|r| r == path) {
                    // Made again since, and watchable this time.
                    self.refused.remove(at);
                    if let Some(rel) = relative(&self.layout.workspace, path) {
                        self.sink.rewatched(&rel);
                    }
                }
            }
            // Gone again before it could be watched: its parent's events cover it.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // The watch limit holds for every directory, and without the workspace's own
            // watch nothing is: watching stops.
            Err(e) if e.kind() == std::io::ErrorKind::StorageFull || path == self.layout.workspace => {
                return Err(watch_error(path, &e))
            }
            // This directory alone: it is skipped, and readers check it themselves.
            Err(e) => self.refuse(path, &e),
        }
        Ok(())
    }

    fn refuse(&mut self, dir: &Path, e: &std::io::Error) {
        if self.refused.iter().any(|r| r == dir) {
            return;
        }
        self.refused.push(dir.to_owned());
        if let Some(rel) = relative(&self.layout.workspace, dir) {
            self.sink.unwatched(Unwatched { dir: rel, why: watch_error(dir, e) });
        }
    }

    fn ignored(&self, path: &Path) -> bool {
        if path.starts_with(&self.layout.state_dir) || path.file_name() == Some(OsStr::new(".git")) {
            return true;
        }
        let Some(repo) = &self.repo else { return false };
        let Some(workdir) = repo.workdir() else { return false };
        match path.strip_prefix(workdir) {
            Ok(rel) => repo.status_should_ignore(rel).unwrap_or(false),
            Err(_) => false,
        }
    }

    fn on_event(&mut self, wd: i32, mask: EventMask, name: Option<&OsStr>) -> Result<(), String> {
        if mask.contains(EventMask::Q_OVERFLOW) {
            self.sink.overflowed();
            self.overflowed = true;
            return Ok(());
        }
        if mask.contains(EventMask::IGNORED) {
            self.targets.remove(&wd);
            return Ok(());
        }
        let Some(target) = self.targets.get(&wd) else { return Ok(()) };
        match target {
            Target::Cookies => {
                if let Some(name) = name.and_then(OsStr::to_str) {
                    self.sink.cookie(name);
                }
            }
            Target::Git => {
                if name.and_then(OsStr::to_str).is_some_and(is_tracked_marker) {
                    self.sink.tracked_changed();
                }
            }
            Target::Dir(dir) => {
                let path = match name {
                    Some(name) => dir.join(name),
                    // An event on the directory itself (deleted or moved away).
                    None => dir.clone(),
                };
                if self.ignored(&path) {
                    return Ok(());
                }
                if let Some(rel) = relative(&self.layout.workspace, &path) {
                    self.sink.changed(rel);
                }
                let new_dir = mask.contains(EventMask::ISDIR)
                    && (mask.contains(EventMask::CREATE) || mask.contains(EventMask::MOVED_TO));
                if new_dir {
                    self.watch_tree(&path)?;
                }
            }
        }
        Ok(())
    }
}
