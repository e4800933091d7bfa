//! Listing every regular file under a directory, for the small trees gm owns (skills, the
//! wiki). Symlinked directories are followed, each directory at most once (by device and
//! inode), so a symlink loop ends. Unreadable directories are skipped. Sorted, so callers get a
//! stable order.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

#[derive(PartialEq, Eq, Hash)]
enum Seen {
    Id((u64, u64)),
    Path(PathBuf),
}

pub fn files_under(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(meta) = std::fs::metadata(&d) else { continue };
        // A directory seen before (through a link) is a loop: by identity, or by its real path
        // where the OS gives no identity.
        let key = match gm_actors::sys::file_identity(&meta) {
            Some(id) => Seen::Id(id),
            None => Seen::Path(std::fs::canonicalize(&d).unwrap_or_else(|_| d.clone())),
        };
        if !seen.insert(key) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for e in entries.filter_map(Result::ok) {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(unix)]
    #[test]
    fn a_symlink_loop_ends_and_linked_files_are_listed_once_per_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).expect("mkdir");
        std::fs::write(root.join("a/b/page.md"), "x").expect("write");
        std::os::unix::fs::symlink(root.join("a"), root.join("a/b/up")).expect("a loop");
        std::os::unix::fs::symlink(root, root.join("self")).expect("another loop");
        let files = files_under(root);
        assert_eq!(files, vec![root.join("a/b/page.md")]);
    }
}
