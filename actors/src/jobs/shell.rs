//! The foreground shell: started in its own process group, its output read while it runs.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::sync::atomic::{AtomicBool, Ordering};

use serde::Serialize;

use super::process::{shell, terminate_group_blocking as terminate_group};
use super::JobError;
use crate::capture::{Capture, Captured, Redactor};
use crate::sys;

/// After a foreground shell exits, how long its output pipes may stay open (held by a
/// process it left behind) before that process's group is killed.
const DRAIN: Duration = Duration::from_millis(200);

/// How to run one shell command.
#[derive(Debug, Clone)]
pub struct ShellSpec {
    pub command: String,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout: Duration,
    /// Bytes of each stream kept inline.
    pub inline_cap: usize,
    /// Where stdout and stderr spill: `<spill_stem>.stdout.txt` and `.stderr.txt`.
    pub spill_stem: PathBuf,
    pub redactor: Redactor,
    /// The box the shell runs in, if any (see [`crate::sandbox`]).
    pub confine: Option<std::sync::Arc<crate::sandbox::Confinement>>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ShellOutcome {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: Captured,
    pub stderr: Captured,
    pub duration_ms: u64,
    pub timed_out: bool,
    #[serde(skip)]
    pub cancelled: bool,
}

/// Starts the shell; with a read-only box, also returns its private temporary folder, which
/// the caller removes when the shell is done.
pub(super) fn spawn_shell(spec: &ShellSpec) -> Result<(std::process::Child, Option<PathBuf>), JobError> {
    if !spec.cwd.is_dir() {
        return Err(JobError::NoCwd(spec.cwd.clone()));
    }
    // A read-only box writes only a temporary folder of its own.
    let tmp = spec.confine.as_deref().map(private_tmp).transpose()?.flatten();
    let mut cmd = match &spec.confine {
        Some(confine) => confine
            .command(shell(), ["-c", spec.command.as_str()], tmp.as_deref())
            .map_err(|e| JobError::Spawn(std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string())))?,
        None => {
            let mut cmd = std::process::Command::new(shell());
            cmd.arg("-c").arg(&spec.command);
            cmd
        }
    };
    cmd.current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    match cmd.spawn() {
        Ok(child) => Ok((child, tmp)),
        Err(e) => {
            if let Some(tmp) = tmp {
                let _ = std::fs::remove_dir_all(tmp);
            }
            Err(JobError::Spawn(e))
        }
    }
}

/// For a read-only box: a new private temporary folder (`gm-box-<pid>-<n>` in the temporary
/// folder, mode 0700); `None` for other boxes.
pub(super) fn private_tmp(confine: &crate::sandbox::Confinement) -> Result<Option<PathBuf>, JobError> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    if confine.policy().mode != crate::sandbox::Mode::ReadOnly {
        return Ok(None);
    }
    let dir = std::env::temp_dir().join(format!("gm-box-{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    let mut builder = std::fs::DirBuilder::new();
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(&dir).map_err(|source| JobError::Files { path: dir.clone(), source })?;
    Ok(Some(dir))
}

/// Reads the shell's output until it ends, on a thread of its own: one `poll` over both pipes
/// and the process's exit wakes only this thread, and the worker is woken once, with the
/// outcome (a shell awaited on the worker's runtime woke it for every pipe event, the exit and
/// each timer, which was most of run_shell's cost over `bash -c` itself).
///
/// `cancelled` is set (and the group killed) by whoever awaits this; the loop then sees the
/// pipes close and the exit like any other end.
pub(super) fn wait_shell(mut child: std::process::Child, spec: &ShellSpec, cancelled: &AtomicBool) -> ShellOutcome {
    let started = Instant::now();
    let pgid = child.id() as i32;
    let mut out = Capture::new(spec.inline_cap, spec.spill_stem.with_extension("stdout.txt"));
    let mut err = Capture::new(spec.inline_cap, spec.spill_stem.with_extension("stderr.txt"));
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    // Where the kernel cannot say when the process exits, it is asked at every turn.
    let exit_fd = sys::process_exit_fd(child.id());
    // The watching threads are reused: each keeps one read buffer instead of zeroing a new
    // one per shell.
    thread_local!(static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) });
    let mut buf = BUF.with(|b| std::mem::take(&mut *b.borrow_mut()));
    buf.resize(64 * 1024, 0);
    let deadline = started + spec.timeout;
    let mut timed_out = false;
    let mut status = None;
    let mut drain_until: Option<Instant> = None;
    while stdout.is_some() || stderr.is_some() || status.is_none() {
        let now = Instant::now();
        if status.is_none() && !timed_out && now >= deadline && !cancelled.load(Ordering::Relaxed) {
            timed_out = true;
            terminate_group(pgid, || {
                if status.is_none() {
                    status = child.try_wait().ok().flatten();
                }
            });
            if status.is_some() {
                drain_until = Some(Instant::now() + DRAIN);
            }
        }
        if drain_until.is_some_and(|t| now >= t) {
            // The shell is gone but something it started still holds the pipes: end it.
            sys::kill_group(pgid);
            stdout = None;
            stderr = None;
            continue;
        }
        let mut wait = drain_until.or((!timed_out && status.is_none()).then_some(deadline)).map(|t| t - now);
        if exit_fd.is_none() && status.is_none() {
            wait = Some(wait.map_or(NO_EXIT_FD_TURN, |w| w.min(NO_EXIT_FD_TURN)));
        }
        let fds = [
            raw(stdout.as_ref()),
            raw(stderr.as_ref()),
            if status.is_none() { exit_fd.as_ref().map_or(-1, AsRawFd::as_raw_fd) } else { -1 },
        ];
        let ready = match sys::poll_readable(fds, wait) {
            Ok(ready) => ready,
            // Never seen (poll fails only for want of memory): try again a moment later.
            Err(_) => {
                std::thread::sleep(NO_EXIT_FD_TURN);
                [false, false, true]
            }
        };
        if ready[0] && !read_into(&mut stdout, &mut buf, &mut out) {
            stdout = None;
        }
        if ready[1] && !read_into(&mut stderr, &mut buf, &mut err) {
            stderr = None;
        }
        if status.is_none() && (ready[2] || exit_fd.is_none()) {
            match child.try_wait() {
                Ok(Some(s)) => status = Some(s),
                Ok(None) => {}
                // Not ours to wait for any more: nothing will say more about its end.
                Err(_) => status = Some(std::process::ExitStatus::default()),
            }
            if status.is_some() {
                drain_until = Some(Instant::now() + DRAIN);
            }
        }
    }
    BUF.with(|b| *b.borrow_mut() = buf);
    // Nothing of the group may outlive a foreground shell.
    sys::kill_group(pgid);
    let (exit_code, signal) = match &status {
        Some(s) => (s.code(), sys::exit_signal(s)),
        None => (None, None),
    };
    ShellOutcome {
        exit_code,
        signal,
        stdout: out.finish(&spec.redactor),
        stderr: err.finish(&spec.redactor),
        duration_ms: started.elapsed().as_millis() as u64,
        timed_out,
        cancelled: cancelled.load(Ordering::Relaxed),
    }
}

/// Without a descriptor for the process's exit, how often it is asked whether it ended.
const NO_EXIT_FD_TURN: Duration = Duration::from_millis(5);

fn raw(pipe: Option<&impl AsRawFd>) -> std::os::fd::RawFd {
    pipe.map_or(-1, AsRawFd::as_raw_fd)
}

/// Reads what a ready pipe has into `capture`; false at its end (or on an error, which ends
/// it too).
fn read_into(pipe: &mut Option<impl Read>, buf: &mut [u8], capture: &mut Capture) -> bool {
    let Some(p) = pipe else { return false };
    loop {
        match p.read(buf) {
            Ok(0) => return false,
            Ok(n) => {
                capture.push(&buf[..n]);
                return true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
}
