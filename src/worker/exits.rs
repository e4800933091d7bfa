//! How the workspace's workers ended, one line each in `.gm/worker-exits.jsonl`: a worker that
//! stops on purpose (idle, a signal, its stdio host gone) writes a clean line before it exits;
//! the relay that started it writes how it ended once it is reaped; a relay that saw its
//! connection drop and finds no line writes one with what it knows. A worker with no clean
//! line died: the relays' five-deaths rule counts those, whichever relay saw them.

use std::io::Write;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The file is cut back to its last lines when it grows past this.
const MAX_BYTES: u64 = 64 << 10;
const KEEP_LINES: usize = 200;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Exit {
    pub pid: u32,
    /// Milliseconds since the Unix epoch.
    pub ts_ms: u64,
    /// The worker stopped on purpose.
    pub clean: bool,
    /// `idle`, `SIGKILL`, `exit code 101`...
    pub cause: String,
}

impl Exit {
    pub fn now(pid: u32, clean: bool, cause: impl Into<String>) -> Self {
        Self { pid, ts_ms: gm_actors::clock::now_ms(), clean, cause: cause.into() }
    }
}

/// Appends one line (a single short write: lines from several processes never interleave).
pub fn record(path: &Path, exit: &Exit) {
    let Ok(mut line) = serde_json::to_vec(exit) else { return };
    line.push(b'\n');
    if std::fs::metadata(path).is_ok_and(|m| m.len() > MAX_BYTES) {
        trim(path);
    }
    if let Ok(mut f) = gm_actors::state_file::open_own(path, gm_actors::state_file::How::APPEND) {
        let _ = f.write_all(&line);
    }
}

fn trim(path: &Path) {
    let Ok(text) = std::fs::read_to_string(path) else { return };
    let lines: Vec<&str> = text.lines().collect();
    let kept = lines[lines.len().saturating_sub(KEEP_LINES)..].join("\n") + "\n";
    let _ = gm_actors::fs::replace(path, kept.as_bytes());
}

pub fn read(path: &Path) -> Vec<Exit> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

/// What is known of how worker `pid` ended: a clean line wins over any other.
pub fn of(path: &Path, pid: u32) -> Option<Exit> {
    let exits: Vec<Exit> = read(path).into_iter().filter(|e| e.pid == pid).collect();
    exits.iter().find(|e| e.clean).or_else(|| exits.first()).cloned()
}

/// The workers that died (no clean line) within `window` of now, oldest first, one per pid.
pub fn deaths(path: &Path, window: Duration) -> Vec<Exit> {
    let now = gm_actors::clock::now_ms();
    let since = now.saturating_sub(window.as_millis() as u64);
    let all = read(path);
    let mut out: Vec<Exit> = Vec::new();
    for e in &all {
        if e.clean || e.ts_ms < since || out.iter().any(|o| o.pid == e.pid) {
            continue;
        }
        if all.iter().any(|c| c.pid == e.pid && c.clean) {
            continue;
        }
        out.push(e.clone());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deaths_count_each_unclean_worker_once_and_a_clean_line_wins() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("exits.jsonl");
        record(&path, &Exit::now(1, false, "SIGKILL"));
        record(&path, &Exit::now(1, false, "its connection closed"));
        record(&path, &Exit::now(2, false, "exit code 0"));
        record(&path, &Exit::now(2, true, "idle"));
        record(&path, &Exit { pid: 3, ts_ms: 1, clean: false, cause: "long ago".into() });
        let deaths = deaths(&path, Duration::from_secs(60));
        assert_eq!(deaths.iter().map(|e| (e.pid, e.cause.as_str())).collect::<Vec<_>>(), [(1, "SIGKILL")]);
        assert_eq!(of(&path, 2).map(|e| e.clean), Some(true));
    }

    #[test]
    fn the_file_is_cut_back_to_its_last_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("exits.jsonl");
        for pid in 0..2_000 {
            record(&path, &Exit::now(pid, true, "idle"));
        }
        assert!(std::fs::metadata(&path).expect("meta").len() <= MAX_BYTES + 200);
        assert_eq!(read(&path).last().map(|e| e.pid), Some(1_999));
    }
}
