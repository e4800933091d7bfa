//! Process utilities for jobs, on top of [`crate::sys`].

use std::time::{Duration, Instant};

use crate::sys;

/// Time a group gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_millis(500);

/// `bash` where there is one, else POSIX `sh`, as the absolute path found on `PATH` when gm
/// started: spawning by name makes every shell try each `PATH` entry in turn, each miss a
/// failed `execve` (cheap, but nothing a shell needs).
pub(super) fn shell() -> &'static str {
    static SHELL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SHELL.get_or_init(|| {
        let dirs: Vec<std::path::PathBuf> =
            std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
        ["bash", "sh"]
            .iter()
            .find_map(|name| {
                dirs.iter()
                    .map(|d| d.join(name))
                    .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && sys::is_executable(&m)))
            })
            .and_then(|p| p.to_str().map(str::to_owned))
            .unwrap_or_else(|| "sh".to_owned())
    })
}

/// SIGTERM to the group, then SIGKILL after [`KILL_GRACE`] if `alive()` still says so.
pub(super) async fn terminate_group(pgid: i32, alive: impl Fn() -> bool) {
    if pgid <= 0 {
        return;
    }
    sys::term_group(pgid);
    let deadline = Instant::now() + KILL_GRACE;
    while Instant::now() < deadline && alive() && sys::group_exists(pgid) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    sys::kill_group(pgid);
}

/// [`terminate_group`] for a thread of its own. `reap` is called at each turn, so that a
/// leader that already exited (a zombie still counts as a member of its group) is not waited
/// for.
pub(super) fn terminate_group_blocking(pgid: i32, mut reap: impl FnMut()) {
    if pgid <= 0 {
        return;
    }
    sys::term_group(pgid);
    let deadline = Instant::now() + KILL_GRACE;
    loop {
        reap();
        if Instant::now() >= deadline || !sys::group_exists(pgid) {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    sys::kill_group(pgid);
}

/// Whether `pid` is alive and is the process that was started (same start time).
pub(super) fn process_matches(pid: u32, start: Option<u64>) -> bool {
    if !sys::process_exists(pid) {
        return false;
    }
    match (start, sys::process_start_ticks(pid)) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_matches_its_own_start_time() {
        let me = std::process::id();
        let start = sys::process_start_ticks(me);
        assert!(start.is_some());
        assert!(process_matches(me, start));
        assert!(!process_matches(me, start.map(|s| s + 1)));
    }
}
