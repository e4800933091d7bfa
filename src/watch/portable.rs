//! The portable backend, through the `notify` crate: FSEvents on macOS, kqueue on the BSDs,
//! ReadDirectoryChangesW on Windows (and inotify on Linux, with `GM_WATCH=notify`). It watches
//! the workspace recursively and drops what git ignores when the events come, which costs more
//! events than the Linux backend but no per-directory bookkeeping.

use std::path::Path;
use std::sync::Arc;

use notify::event::{EventKind, Flag};
use notify::{RecursiveMode, Watcher as _};

use super::{is_tracked_marker, relative, Layout, Sink};

pub(super) fn run(layout: &Layout, sink: Arc<dyn Sink>, ready: impl FnOnce(&'static str, u64)) -> Result<(), String> {
    // FSEvents reports canonical paths (/private/var/... for /var/...).
    let workspace = layout.workspace.canonicalize().unwrap_or_else(|_| layout.workspace.clone());
    let cookie_dir = layout.cookie_dir.canonicalize().unwrap_or_else(|_| layout.cookie_dir.clone());
    let state_dir = layout.state_dir.canonicalize().unwrap_or_else(|_| layout.state_dir.clone());
    let git_dir = layout.git_dir.as_ref().map(|g| g.canonicalize().unwrap_or_else(|_| g.clone()));
    let repo = layout.git_dir.as_ref().and_then(|g| git2::Repository::open(g).ok());
    let (tx, rx) = std::sync::mpsc::channel();
    let mut watcher = notify::recommended_watcher(tx).map_err(|e| format!("the file watcher is not available: {e}"))?;
    watcher.watch(&workspace, RecursiveMode::Recursive).map_err(|e| format!("cannot watch the workspace: {e}"))?;
    if let Some(git) = git_dir.as_ref().filter(|g| !g.starts_with(&workspace)) {
        watcher.watch(git, RecursiveMode::NonRecursive).map_err(|e| format!("cannot watch {}: {e}", git.display()))?;
    }
    if !cookie_dir.starts_with(&workspace) {
        watcher
            .watch(&cookie_dir, RecursiveMode::NonRecursive)
            .map_err(|e| format!("cannot watch {}: {e}", cookie_dir.display()))?;
    }
    ready("notify", 0);
    let ignored = |path: &Path| -> bool {
        let Some(repo) = &repo else { return false };
        let Some(workdir) = repo.workdir() else { return false };
        let workdir = workdir.canonicalize().unwrap_or_else(|_| workdir.to_owned());
        path.strip_prefix(&workdir).is_ok_and(|rel| repo.status_should_ignore(rel).unwrap_or(false))
    };
    for event in rx {
        let event = event.map_err(|e| format!("the file watcher failed: {e}"))?;
        if event.flag() == Some(Flag::Rescan) {
            sink.overflowed();
            // Events were lost, among them maybe a new directory's: watch the tree again (a
            // directory watched already keeps its watch).
            let _ = watcher.watch(&workspace, RecursiveMode::Recursive);
            continue;
        }
        if matches!(event.kind, EventKind::Access(_)) {
            continue;
        }
        for path in &event.paths {
            if path.parent() == Some(cookie_dir.as_path()) {
                if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
                    sink.cookie(name);
                }
            } else if git_dir.as_ref().is_some_and(|g| path.parent() == Some(g.as_path())) {
                if path.file_name().and_then(|n| n.to_str()).is_some_and(is_tracked_marker) {
                    sink.tracked_changed();
                }
            } else if path.starts_with(&state_dir)
                || git_dir.as_ref().is_some_and(|g| path.starts_with(g))
                || ignored(path)
            {
                continue;
            } else if let Some(rel) = relative(&workspace, path) {
                sink.changed(rel);
                // A new directory: the crate may add its watch after things were made inside
                // it (mkdir -p, a checkout), so watch it again and report what it holds.
                if matches!(event.kind, EventKind::Create(_)) && path.is_dir() {
                    let _ = watcher.watch(path, RecursiveMode::Recursive);
                    report_tree(&workspace, path, sink.as_ref());
                }
            }
        }
    }
    Err("the file watcher stopped".into())
}

/// Reports every file under `dir` changed: they may have been written before it was watched.
fn report_tree(workspace: &Path, dir: &Path, sink: &dyn Sink) {
    for entry in ignore::WalkBuilder::new(dir).hidden(false).require_git(false).build().filter_map(Result::ok) {
        if let Some(rel) = relative(workspace, entry.path()) {
            sink.changed(rel);
        }
    }
}
