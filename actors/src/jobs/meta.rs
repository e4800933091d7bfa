//! The files kept beside a job under the jobs folder: its log, its exit code and its
//! metadata, which let another gm adopt it.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::{Deserialize, Serialize};

use super::{JobError, JobKind, JobState};

/// What is kept on disk beside a job's log, so another gm can adopt it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct JobMeta {
    pub(super) name: String,
    #[serde(default)]
    pub(super) kind: JobKind,
    pub(super) command: String,
    pub(super) cwd: PathBuf,
    pub(super) pid: u32,
    /// The process's start time in clock ticks since boot (from /proc), so a reused pid is
    /// not mistaken for the job.
    pub(super) proc_start: Option<u64>,
    pub(super) started_ms: u64,
    pub(super) timeout_ms: Option<u64>,
    /// Set when gm itself stopped the job or its timeout did.
    #[serde(default)]
    pub(super) ended_by: Option<JobState>,
    #[serde(default)]
    pub(super) ended_ms: Option<u64>,
    /// Whether a gm has logged how this job ended.
    #[serde(default)]
    pub(super) end_reported: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) error: Option<serde_json::Value>,
}

impl JobMeta {
    pub(super) fn save(&self, dir: &Path) -> Result<(), JobError> {
        let (_, _, json) = paths(dir, &self.name);
        let text = serde_json::to_vec_pretty(self).unwrap_or_default();
        crate::fs::replace(&json, &text).map_err(|source| JobError::Files { path: json, source })
    }
}

/// A job's log, exit and metadata files in `dir`.
pub(super) fn paths(dir: &Path, name: &str) -> (PathBuf, PathBuf, PathBuf) {
    (dir.join(format!("{name}.log")), dir.join(format!("{name}.exit")), dir.join(format!("{name}.json")))
}

pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && !name.starts_with('.')
}

pub(super) fn file_mtime_ms(path: &Path) -> Option<u64> {
    let t = std::fs::metadata(path).ok()?.modified().ok()?;
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_millis() as u64)
}

/// The last `n` bytes of a file (lossy UTF-8) and the file's size.
pub(super) fn read_tail(path: &Path, n: usize) -> (String, u64) {
    let Ok(mut f) = std::fs::File::open(path) else { return (String::new(), 0) };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if n == 0 {
        return (String::new(), len);
    }
    let start = len.saturating_sub(n as u64);
    let mut buf = Vec::with_capacity((len - start) as usize);
    if f.seek(SeekFrom::Start(start)).is_ok() {
        let _ = f.take(n as u64).read_to_end(&mut buf);
    }
    (String::from_utf8_lossy(&buf).into_owned(), len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_names_are_checked() {
        for ok in ["build", "test-1", "a.b_c"] {
            assert!(valid_name(ok), "{ok}");
        }
        for bad in ["", ".hidden", "a/b", "x y", &"n".repeat(65)] {
            assert!(!valid_name(bad), "{bad}");
        }
    }
}
