//! `.gm/out/`: where a verb saves the whole of an output too long for its reply (a shell's
//! streams, a diff, a fetched body). Every file gets a name of its own, so a reply never points
//! at another call's output.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A new path in `out_dir` for a `kind` of output (`shell`, `diff`, `fetch`): the UTC time, this
/// process and a counter, so names sort by time and never repeat, within a process or across
/// processes sharing the folder.
pub fn unique_path(out_dir: &Path, kind: &str, extension: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let now = time::OffsetDateTime::now_utc();
    let stamp =
        now.format(time::macros::format_description!("[year][month][day]T[hour][minute][second]")).unwrap_or_default();
    let n = N.fetch_add(1, Ordering::Relaxed);
    out_dir.join(format!("{kind}-{stamp}-{}-{n}{extension}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_never_repeat_within_a_process() {
        let dir = Path::new("/x");
        let names: std::collections::HashSet<PathBuf> = (0..1000).map(|_| unique_path(dir, "diff", ".patch")).collect();
        assert_eq!(names.len(), 1000);
        assert!(unique_path(dir, "diff", ".patch").to_string_lossy().ends_with(".patch"));
    }
}
