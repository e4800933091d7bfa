//! The process groups of the child MCP servers a worker started, kept in
//! `.gm/child-groups.json`, so a worker that was killed leaves none behind. A child server
//! dies with its worker (`sys::die_with_parent`), but what it started in its own group (a
//! browser, a language server) would not: the next worker ends every group listed that still
//! has members, before it starts its own servers.
//!
//! A group is ended only while it is the one recorded: its leader runs with the start time
//! recorded, or is gone while members remain (a process group's id is not given to a new
//! process while any member is alive).

use std::path::{Path, PathBuf};

use gm_actors::sys;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct Group {
    pgid: i32,
    /// The leader's start time (clock ticks since boot), to tell it from a reused pid.
    ticks: Option<u64>,
}

pub struct ChildGroups {
    path: PathBuf,
}

impl ChildGroups {
    /// The groups of the workspace whose state folder is `state_dir`.
    pub fn of(state_dir: &Path) -> Self {
        Self { path: state_dir.join("child-groups.json") }
    }

    fn read(&self) -> Vec<Group> {
        std::fs::read(&self.path).ok().and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    fn write(&self, groups: &[Group]) {
        if let Ok(text) = serde_json::to_vec(groups) {
            let _ = gm_actors::fs::replace(&self.path, &text);
        }
    }

    /// Notes a child server's group (its pid: it leads a group of its own).
    pub fn record(&self, pgid: i32) {
        let ticks = u32::try_from(pgid).ok().and_then(sys::process_start_ticks);
        let mut groups = self.read();
        // Groups with no member left are dropped on the way.
        groups.retain(|g| g.pgid != pgid && sys::group_exists(g.pgid));
        groups.push(Group { pgid, ticks });
        self.write(&groups);
    }

    /// Ends (SIGKILL) every recorded group that is still the one recorded and has members, and
    /// forgets them all; returns the groups ended.
    pub fn end_leftovers(&self) -> Vec<i32> {
        let mut ended = Vec::new();
        for g in self.read() {
            if !sys::group_exists(g.pgid) {
                continue;
            }
            let leader = u32::try_from(g.pgid).ok();
            let same = match leader.filter(|&pid| sys::process_exists(pid)) {
                Some(pid) => g.ticks.is_some() && sys::process_start_ticks(pid) == g.ticks,
                None => true,
            };
            if same {
                sys::kill_group(g.pgid);
                ended.push(g.pgid);
            }
        }
        let _ = std::fs::remove_file(&self.path);
        ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_group_with_members_is_ended_and_a_reused_pid_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let groups = ChildGroups::of(dir.path());
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("30");
        sys::own_process_group(&mut cmd);
        let mut child = cmd.spawn().expect("sleep");
        let pgid = child.id() as i32;
        groups.record(pgid);
        // A recorded group whose leader's start time differs is another process's.
        let mut other = std::process::Command::new("sleep");
        other.arg("30");
        sys::own_process_group(&mut other);
        let mut other = other.spawn().expect("sleep");
        let forged = Group { pgid: other.id() as i32, ticks: Some(1) };
        let mut all = groups.read();
        all.push(forged);
        groups.write(&all);
        assert_eq!(groups.end_leftovers(), [pgid]);
        assert!(child.wait().is_ok());
        assert!(other.try_wait().expect("wait").is_none(), "the reused pid's process lives");
        let _ = other.kill();
        let _ = other.wait();
        assert!(!dir.path().join("child-groups.json").exists());
    }
}
