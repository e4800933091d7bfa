//! The foreground shell: started in its own process group, its output read while it runs.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncReadExt;

use super::process::{shell, terminate_group};
use super::JobError;
use crate::cancel::CancelToken;
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
pub(super) fn spawn_shell(spec: &ShellSpec) -> Result<(tokio::process::Child, Option<PathBuf>), JobError> {
    if !spec.cwd.is_dir() {
        return Err(JobError::NoCwd(spec.cwd.clone()));
    }
    // A read-only box writes only a temporary folder of its own.
    let tmp = spec.confine.as_deref().map(private_tmp).transpose()?.flatten();
    let mut cmd = match &spec.confine {
        Some(confine) => confine
            .command(shell(), ["-c", spec.command.as_str()], tmp.as_deref())
            .map(tokio::process::Command::from)
            .map_err(|e| JobError::Spawn(std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string())))?,
        None => {
            let mut cmd = tokio::process::Command::new(shell());
            cmd.arg("-c").arg(&spec.command);
            cmd
        }
    };
    cmd.current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
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

pub(super) async fn wait_shell(mut child: tokio::process::Child, spec: ShellSpec, cancel: CancelToken) -> ShellOutcome {
    let started = Instant::now();
    let pgid = child.id().map_or(0, |p| p as i32);
    let mut out = Capture::new(spec.inline_cap, spec.spill_stem.with_extension("stdout.txt"));
    let mut err = Capture::new(spec.inline_cap, spec.spill_stem.with_extension("stderr.txt"));
    let mut stdout = child.stdout.take();
    let mut stderr = child.stderr.take();
    let mut obuf = vec![0u8; 64 * 1024];
    let mut ebuf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + spec.timeout;
    let mut timed_out = false;
    let mut cancelled = false;
    let mut status = None;
    let mut drain_until: Option<tokio::time::Instant> = None;
    loop {
        if stdout.is_none() && stderr.is_none() && status.is_some() {
            break;
        }
        let drain = async {
            match drain_until {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            n = read_some(&mut stdout, &mut obuf) => match n {
                Some(n) => out.push(&obuf[..n]),
                None => stdout = None,
            },
            n = read_some(&mut stderr, &mut ebuf) => match n {
                Some(n) => err.push(&ebuf[..n]),
                None => stderr = None,
            },
            s = child.wait(), if status.is_none() => {
                status = Some(s);
                drain_until = Some(tokio::time::Instant::now() + DRAIN);
            }
            () = tokio::time::sleep_until(deadline), if !timed_out && !cancelled && status.is_none() => {
                timed_out = true;
                terminate_group(pgid, || true).await;
            }
            () = cancel.cancelled(), if !cancelled && !timed_out && status.is_none() => {
                cancelled = true;
                sys::kill_group(pgid);
            }
            () = drain => {
                // The shell is gone but something it started still holds the pipes: end it.
                sys::kill_group(pgid);
                stdout = None;
                stderr = None;
            }
        }
    }
    // Nothing of the group may outlive a foreground shell.
    sys::kill_group(pgid);
    let (exit_code, signal) = match status {
        Some(Ok(s)) => (s.code(), sys::exit_signal(&s)),
        _ => (None, None),
    };
    ShellOutcome {
        exit_code,
        signal,
        stdout: out.finish(&spec.redactor),
        stderr: err.finish(&spec.redactor),
        duration_ms: started.elapsed().as_millis() as u64,
        timed_out,
        cancelled,
    }
}

/// Reads some bytes from a pipe; `None` at its end (or when there is no pipe: then never).
async fn read_some<R: tokio::io::AsyncRead + Unpin>(pipe: &mut Option<R>, buf: &mut [u8]) -> Option<usize> {
    match pipe {
        Some(p) => match p.read(buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => Some(n),
        },
        None => std::future::pending().await,
    }
}
