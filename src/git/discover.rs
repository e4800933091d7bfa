//! Where a workspace's git directory is, found without libgit2. libgit2's first call
//! initializes OpenSSL, which parses the system's CA bundle (30-40 ms here): the watcher, the
//! call index and the search index each asked at their start, so a first `callers` after a
//! start waited for it, though none of them needs more than the directory's path until later.
//!
//! The search is libgit2's discovery (`git_repository_discover`), without its ownership check:
//! from the start directory upwards, first `<dir>/.git` (a directory that holds a repository,
//! or a file naming one, `gitdir: <path>`, as a worktree's or a submodule's does), then `<dir>`
//! itself (a bare repository); it stops at a `.git` file that names no repository and at a
//! filesystem boundary.

use std::path::{Path, PathBuf};

/// The git directory of the repository holding `start`, if any.
pub fn git_dir(start: &Path) -> Option<PathBuf> {
    let start = std::fs::canonicalize(start).ok()?;
    let mut device = None;
    for dir in start.ancestors() {
        for candidate in [dir.join(".git"), dir.to_owned()] {
            let Ok(meta) = std::fs::metadata(&candidate) else { continue };
            let here = gm_actors::sys::file_identity(&meta).map(|(dev, _)| dev);
            match device {
                None => device = Some(here),
                Some(d) if d != here => return None,
                Some(_) => {}
            }
            if meta.is_dir() {
                if holds_repository(&candidate) {
                    return Some(candidate);
                }
            } else if meta.is_file() && candidate.file_name().is_some_and(|n| n == ".git") {
                return linked(dir, &candidate).filter(|d| holds_repository(d));
            }
        }
    }
    None
}

/// `gitdir: <path>` in a `.git` file; a relative path is relative to the file's directory.
/// Only the file's start is read: a workspace may hold a `.git` file of any size.
fn linked(dir: &Path, file: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut start = Vec::new();
    std::fs::File::open(file).ok()?.take(4096).read_to_end(&mut start).ok()?;
    let text = String::from_utf8_lossy(&start);
    let target = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    if target.is_empty() {
        return None;
    }
    Some(dir.join(target))
}

/// libgit2's test: a `HEAD`, and `objects` and `refs` directories, in the directory or in the
/// one its `commondir` file names (a worktree's).
fn holds_repository(dir: &Path) -> bool {
    if !dir.join("HEAD").exists() {
        return false;
    }
    let common = match std::fs::read_to_string(dir.join("commondir")) {
        Ok(text) => dir.join(text.trim_end_matches(['\n', '\r'])),
        Err(_) => dir.to_owned(),
    };
    common.join("objects").is_dir() && common.join("refs").is_dir()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn libgit2(start: &Path) -> Option<PathBuf> {
        git2::Repository::discover(start).ok().map(|r| r.path().to_owned())
    }

    fn same(a: Option<PathBuf>, b: Option<PathBuf>) -> bool {
        let canon = |p: Option<PathBuf>| p.map(|p| std::fs::canonicalize(&p).unwrap_or(p));
        canon(a) == canon(b)
    }

    #[test]
    fn the_git_directory_is_the_one_libgit2_discovers() {
        let root = tempfile::tempdir().expect("tempdir");
        let repo_dir = root.path().join("repo");
        let repo = git2::Repository::init(&repo_dir).expect("init");
        std::fs::create_dir_all(repo_dir.join("src/deep")).expect("mkdir");
        std::fs::write(repo_dir.join("src/a.txt"), "a").expect("write");
        let mut index = repo.index().expect("index");
        index.add_path(Path::new("src/a.txt")).expect("add");
        let tree = repo.find_tree(index.write_tree().expect("tree")).expect("tree");
        let sig = git2::Signature::now("t", "t@example.com").expect("sig");
        repo.commit(Some("HEAD"), &sig, &sig, "one", &tree, &[]).expect("commit");
        // A worktree: its `.git` is a file naming a directory under the main one's.
        let wt_dir = root.path().join("wt");
        repo.worktree("wt", &wt_dir, None).expect("worktree");
        std::fs::create_dir_all(wt_dir.join("sub")).expect("mkdir");
        // A `.git` file naming nothing, and a bare repository.
        let broken = root.path().join("broken");
        std::fs::create_dir_all(broken.join("in")).expect("mkdir");
        std::fs::write(broken.join(".git"), "gitdir: ./nowhere\n").expect("write");
        let bare = root.path().join("bare.git");
        git2::Repository::init_bare(&bare).expect("bare");
        let plain = root.path().join("plain");
        std::fs::create_dir_all(&plain).expect("mkdir");

        let starts = [
            repo_dir.clone(),
            repo_dir.join("src"),
            repo_dir.join("src/deep"),
            repo_dir.join(".git"),
            wt_dir.clone(),
            wt_dir.join("sub"),
            broken.clone(),
            broken.join("in"),
            bare.clone(),
            bare.join("refs"),
            plain.clone(),
        ];
        for start in starts {
            let (ours, theirs) = (git_dir(&start), libgit2(&start));
            assert!(same(ours.clone(), theirs.clone()), "{}: {ours:?} against libgit2's {theirs:?}", start.display());
        }
        assert!(git_dir(&wt_dir).is_some_and(|d| d.join("commondir").exists()), "a worktree's own git directory");
        assert_eq!(git_dir(&plain), None);
        // A `.git` file far larger than any link, naming nothing: only its start is read.
        let big = root.path().join("big");
        std::fs::create_dir_all(&big).expect("mkdir");
        let mut text = "gitdir: ".to_owned();
        text.push_str(&"x".repeat(8 << 20));
        std::fs::write(big.join(".git"), text).expect("write");
        assert_eq!(git_dir(&big), None);
    }
}
