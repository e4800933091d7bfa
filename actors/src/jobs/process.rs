//! Process utilities for jobs, on top of [`crate::sys`].

use std::time::{Duration, Instant};

use crate::sys;

/// Time a group gets between SIGTERM and SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_millis(500);

/// `bash` where there is one, else POSIX `sh`.
pub(super) fn shell() -> &'static str {
    static SHELL: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    SHELL.get_or_init(|| {
        let found = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).any(|d| d.join("bash").is_file()))
            .unwrap_or(false);
        if found {
            "bash"
        } else {
            "sh"
        }
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
