//! Which files search and grep cover: the workspace's git-tracked files (read from git's index,
//! so untracked and ignored files are left out), or — outside a git repository — every file
//! the `.gitignore` rules do not exclude. `.git/` and gm's own `.gm/` are never covered.

use std::path::{Path, PathBuf};

use gm_actors::sys::FileStat;

#[derive(Debug, thiserror::Error)]
pub enum TrackedError {
    #[error("cannot read the git index of {path}: {message}")]
    Git { path: PathBuf, message: String },
}

/// A file to search: its path relative to the workspace (with `/`) and on disk.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tracked {
    pub rel: String,
    pub path: PathBuf,
}

/// The files under `workspace`, sorted by relative path.
pub fn tracked_files(workspace: &Path) -> Result<Vec<Tracked>, TrackedError> {
    let mut files = match git2::Repository::discover(workspace) {
        Ok(repo) => from_git(&repo, workspace)?,
        Err(_) => from_walk(workspace),
    };
    files.retain(|f| !f.rel.starts_with(".gm/") && !f.rel.starts_with(".git/"));
    files.sort();
    Ok(files)
}

/// The files under `workspace` with the sizes git's index recorded for them, sorted; `None`
/// outside a git repository. No file is stat'ed: a size is as of the last time git looked at
/// the file (a file changed since may differ), good enough to order and sample a scan that
/// reads each file as it is now, and free, where stat'ing the Linux kernel's 78k files takes a
/// few hundred milliseconds.
pub fn tracked_with_git_sizes(workspace: &Path) -> Result<Option<Vec<(Tracked, u64)>>, TrackedError> {
    let Ok(repo) = git2::Repository::discover(workspace) else { return Ok(None) };
    let mut files = entries(&repo, workspace)?;
    files.retain(|(f, _)| !f.rel.starts_with(".gm/") && !f.rel.starts_with(".git/"));
    files.sort();
    Ok(Some(files))
}

fn from_git(repo: &git2::Repository, workspace: &Path) -> Result<Vec<Tracked>, TrackedError> {
    Ok(entries(repo, workspace)?.into_iter().map(|(t, _)| t).collect())
}

/// git's index entries under `workspace` (submodules left out), with their recorded sizes.
fn entries(repo: &git2::Repository, workspace: &Path) -> Result<Vec<(Tracked, u64)>, TrackedError> {
    let err = |e: git2::Error| TrackedError::Git { path: workspace.to_owned(), message: e.message().to_owned() };
    let root = repo.workdir().ok_or_else(|| err(git2::Error::from_str("a bare repository has no files")))?;
    let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    let prefix = workspace.strip_prefix(&root).unwrap_or(Path::new("")).to_string_lossy().replace('\\', "/");
    let prefix = if prefix.is_empty() { String::new() } else { format!("{prefix}/") };
    let index = repo.index().map_err(err)?;
    let mut out = Vec::with_capacity(index.len());
    for entry in index.iter() {
        let Ok(full) = std::str::from_utf8(&entry.path) else { continue };
        // Gitlinks (submodules) have mode 0o160000: they are directories, not files.
        if entry.mode & 0o170000 == 0o160000 {
            continue;
        }
        let Some(rel) = full.strip_prefix(prefix.as_str()) else { continue };
        out.push((Tracked { rel: rel.to_owned(), path: root.join(full) }, u64::from(entry.file_size)));
    }
    out.dedup_by(|a, b| a.0.rel == b.0.rel);
    Ok(out)
}

fn from_walk(workspace: &Path) -> Vec<Tracked> {
    ignore::WalkBuilder::new(workspace)
        .hidden(false)
        .require_git(false)
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_file()))
        .filter_map(|e| {
            let rel = e.path().strip_prefix(workspace).ok()?.to_string_lossy().replace('\\', "/");
            Some(Tracked { rel, path: e.into_path() })
        })
        .collect()
}

/// Every file's stat (`None` for one that is gone), by path relative to `workspace`, on
/// every core: the first call after a restart checks a whole tree (60,000 source files of a
/// kernel for `callers`, 78,000 files for `search`).
/// Files are asked by directory (see [`gm_actors::sys::stat_names`]).
pub fn stat_all<S: AsRef<str> + Sync>(workspace: &Path, rels: &[S]) -> Vec<Option<FileStat>> {
    // Grouped by the relative path's directory: hashing a `Path` walks its components.
    let mut by_dir: rustc_hash::FxHashMap<&str, Vec<usize>> = Default::default();
    for (i, rel) in rels.iter().enumerate() {
        let rel = rel.as_ref();
        by_dir.entry(rel.rsplit_once('/').map_or("", |(dir, _)| dir)).or_default().push(i);
    }
    let dirs: Vec<(&str, Vec<usize>)> = by_dir.into_iter().collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let found: Vec<Vec<(usize, FileStat)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut out = Vec::new();
                    while let Some((dir, mine)) = dirs.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) {
                        let names: Vec<&std::ffi::OsStr> = mine
                            .iter()
                            .map(|&i| {
                                let rel = rels[i].as_ref();
                                std::ffi::OsStr::new(rel.rsplit_once('/').map_or(rel, |(_, n)| n))
                            })
                            .collect();
                        let stats = gm_actors::sys::stat_names(&workspace.join(dir), &names);
                        out.extend(mine.iter().zip(stats).filter_map(|(&i, s)| Some((i, s?))));
                    }
                    out
                })
            })
            .collect();
        // A thread that panicked leaves its files out: they count as gone, and are parsed
        // again on the next call that finds them.
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut out = vec![None; rels.len()];
    for (i, stat) in found.into_iter().flatten() {
        out[i] = Some(stat);
    }
    out
}
