//! Whether a build starts on this machine: its binary run with `--version`, within
//! [`START_TIMEOUT`], must print the version it claims. A build linked against a newer C
//! library, missing a shared library, or for another CPU fails here, before any host runs it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::sys;

/// How long `gm --version` may take.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// The end of its stderr kept for the refusal.
const STDERR_TAIL: usize = 2000;

/// Why a build does not start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} --version {why}{}", path.display(), if stderr.is_empty() { String::new() } else { format!("; the end of its stderr: {stderr}") })]
pub struct DoesNotStart {
    pub path: PathBuf,
    pub why: String,
    /// The end of what it wrote on stderr.
    pub stderr: String,
}

/// What `<exe> --version` printed on stdout, when it exited 0 within `timeout`.
pub fn version_output(exe: &Path, timeout: Duration) -> Result<String, DoesNotStart> {
    let fail = |why: String, stderr: &[u8]| DoesNotStart { path: exe.to_owned(), why, stderr: tail(stderr) };
    let mut cmd = Command::new(exe);
    cmd.arg("--version").stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    // Its own group: a binary that hangs is killed with whatever it started.
    sys::own_process_group(&mut cmd);
    let mut child = spawn(&mut cmd).map_err(|e| fail(format!("could not be started: {e}"), b""))?;
    let out = child.stdout.take().map(reader);
    let err = child.stderr.take().map(reader);
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() >= deadline => break None,
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(fail(format!("could not be waited for: {e}"), b"")),
        }
    };
    if status.is_none() {
        sys::kill_group(child.id() as i32);
        let _ = child.kill();
        let _ = child.wait();
    }
    let stdout = out.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
    let stderr = err.map(|h| h.join().unwrap_or_default()).unwrap_or_default();
    match status {
        None => Err(fail(format!("did not exit within {} s", timeout.as_secs_f64()), &stderr)),
        Some(s) if !s.success() => Err(fail(format!("ended with {}", sys::exit_cause(&s)), &stderr)),
        Some(_) => Ok(String::from_utf8_lossy(&stdout).into_owned()),
    }
}

/// Checks that `<exe> --version` names `version` (as a word of its output).
pub fn check(exe: &Path, version: &str, timeout: Duration) -> Result<(), DoesNotStart> {
    let printed = version_output(exe, timeout)?;
    if printed.split_whitespace().any(|w| w == version) {
        Ok(())
    } else {
        Err(DoesNotStart {
            path: exe.to_owned(),
            why: format!("printed {:?}, not version {version}", printed.trim()),
            stderr: String::new(),
        })
    }
}

/// Spawns, trying again for a moment while the file is busy (a fork in another thread can
/// hold a just-copied binary open for writing until it execs).
fn spawn(cmd: &mut Command) -> std::io::Result<std::process::Child> {
    let mut tries = 0;
    loop {
        match cmd.spawn() {
            Err(e) if sys::is_text_busy(&e) && tries < 100 => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// Reads a pipe to its end on a thread of its own, so neither pipe can fill and stall the other.
fn reader(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        buf
    })
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    let start = text.len().saturating_sub(STDERR_TAIL);
    let start = (start..=text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
    text[start..].to_owned()
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn script(dir: &Path, body: &str) -> PathBuf {
        let path = dir.join("gm");
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn a_binary_that_prints_its_version_starts() {
        let t = tempfile::tempdir().unwrap();
        let exe = script(t.path(), "echo gm 2.0.0");
        assert_eq!(check(&exe, "2.0.0", START_TIMEOUT), Ok(()));
        let e = check(&exe, "2.0.1", START_TIMEOUT).unwrap_err();
        assert!(e.why.contains("not version 2.0.1"), "{e}");
        assert!(check(&exe, "2.0", START_TIMEOUT).is_err(), "a prefix of the version is not the version");
    }

    #[test]
    fn a_binary_that_fails_is_refused_with_the_end_of_its_stderr() {
        let t = tempfile::tempdir().unwrap();
        let exe = script(t.path(), "echo 'version GLIBC_2.99 not found' >&2; exit 1");
        let e = check(&exe, "2.0.0", START_TIMEOUT).unwrap_err();
        assert!(e.why.contains("exit code 1"), "{e}");
        assert_eq!(e.stderr, "version GLIBC_2.99 not found");
    }

    #[test]
    fn a_binary_that_hangs_is_stopped_at_the_timeout_with_what_it_started() {
        let t = tempfile::tempdir().unwrap();
        let pid_file = t.path().join("child.pid");
        let exe = script(t.path(), &format!("sleep 600 & echo $! > {}; wait", pid_file.display()));
        let started = Instant::now();
        let e = check(&exe, "2.0.0", Duration::from_millis(300)).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        assert!(e.why.contains("did not exit within 0.3 s"), "{e}");
        let pid: u32 = std::fs::read_to_string(&pid_file).unwrap().trim().parse().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while sys::process_exists(pid) {
            assert!(Instant::now() < deadline, "the sleep it started still runs");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[test]
    fn a_file_that_is_not_a_program_does_not_start() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("gm");
        std::fs::write(&path, "not a program").unwrap();
        assert!(check(&path, "1.0.0", START_TIMEOUT).unwrap_err().why.contains("could not be started"));
    }
}
