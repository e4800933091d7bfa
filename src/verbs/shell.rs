//! Shell and job verbs: run_shell, job_start, job_status, job_stop.
//!
//! A shell runs through `bash -c` (POSIX `sh` where there is no bash) with stdin closed, in its
//! own process group. The workspace's secrets are in its environment; their values never come
//! back. Output over the inline cap keeps its head and tail and is spilled whole to `.gm/out/`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use gm_actors::jobs::{JobError, JobInfo, JobStatus, RunShell, ShellSpec, StartJob, StopJob};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::paths::resolve;
use super::{Ctx, VerbError};

pub const DEFAULT_SHELL_TIMEOUT_MS: u64 = 120_000;
pub const MAX_TIMEOUT_MS: u64 = 24 * 3_600_000;
/// Bytes of each stream kept inline in a run_shell reply.
pub const INLINE_CAP: usize = 32 * 1024;
const DEFAULT_TAIL: usize = 4096;
const MAX_TAIL: usize = 1 << 20;
const MAX_WAIT_MS: u64 = 300_000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunShellArgs {
    /// The command, run by `bash -c`.
    pub command: String,
    /// Working directory, relative to the workspace (default: the workspace).
    pub cwd: Option<String>,
    /// Timeout in ms (default 120000); at the timeout the process group gets SIGTERM, then SIGKILL.
    pub timeout_ms: Option<u64>,
    /// Extra environment variables.
    pub env: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunShellReply {
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub duration_ms: u64,
    pub stdout: String,
    pub stderr: String,
    pub stdout_bytes: u64,
    pub stderr_bytes: u64,
    /// Bytes left out of `stdout`/`stderr`; the whole stream is in the named file.
    pub stdout_cut: u64,
    pub stderr_cut: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_file: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_file: Option<PathBuf>,
    /// The box the shell ran in, named on a failed confined shell, so that a permission or
    /// read-only error is read next to what the box allows. No `denied` list: the kernel
    /// reports Landlock denials only to the audit log, which an unprivileged gm cannot read,
    /// and guessing paths from the tools' messages would be a guess.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<serde_json::Value>,
}

fn timeout(ms: Option<u64>, default: u64) -> Result<Duration, VerbError> {
    let ms = ms.unwrap_or(default);
    if ms == 0 || ms > MAX_TIMEOUT_MS {
        return Err(VerbError::InvalidArgs(format!("timeoutMs must be between 1 and {MAX_TIMEOUT_MS} (got {ms})")));
    }
    Ok(Duration::from_millis(ms))
}

fn cwd(ctx: &Ctx, cwd: Option<&str>) -> Result<PathBuf, VerbError> {
    let dir = match cwd {
        None | Some("") => ctx.workspace.to_path_buf(),
        Some(c) => resolve(ctx, c)?,
    };
    if !dir.is_dir() {
        return Err(VerbError::InvalidArgs(format!("cwd {} is not a directory", dir.display())));
    }
    Ok(dir)
}

fn environment(ctx: &Ctx, extra: Option<BTreeMap<String, String>>) -> Result<Vec<(String, String)>, VerbError> {
    let mut env: Vec<(String, String)> = ctx.secrets.get().pairs.clone();
    for (k, v) in extra.unwrap_or_default() {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(VerbError::InvalidArgs(format!("invalid environment variable name or value: {k:?}")));
        }
        env.push((k, v));
    }
    Ok(env)
}

fn job_error(e: JobError) -> VerbError {
    match e {
        JobError::UnknownJob(name) => VerbError::UnknownJob(name),
        JobError::DuplicateJob(name) => VerbError::DuplicateJob(name),
        JobError::BadName(_) | JobError::NoCwd(_) => VerbError::InvalidArgs(e.to_string()),
        JobError::Spawn(_) => VerbError::Unavailable(e.to_string()),
        JobError::Lost(_) => VerbError::Internal(e.to_string()),
        JobError::Files { path, source } => VerbError::io("cannot write the job files", &path, source),
    }
}

fn unavailable(e: actix::MailboxError) -> VerbError {
    VerbError::Internal(format!("the jobs actor is unavailable: {e}"))
}

pub async fn run_shell(ctx: Ctx, args: RunShellArgs) -> Result<RunShellReply, VerbError> {
    if args.command.trim().is_empty() {
        return Err(VerbError::InvalidArgs("command is empty".into()));
    }
    let spec = ShellSpec {
        command: args.command,
        cwd: cwd(&ctx, args.cwd.as_deref())?,
        env: environment(&ctx, args.env)?,
        timeout: timeout(args.timeout_ms, DEFAULT_SHELL_TIMEOUT_MS)?,
        inline_cap: INLINE_CAP,
        spill_stem: super::out::unique_path(&ctx.state_dir.join("out"), "shell", ""),
        redactor: ctx.secrets.get().redactor.clone(),
        confine: ctx.sandbox.clone(),
    };
    let out =
        ctx.jobs.send(RunShell { spec, cancel: ctx.cancel.clone() }).await.map_err(unavailable)?.map_err(job_error)?;
    if out.cancelled {
        return Err(VerbError::Cancelled);
    }
    let (stdout, stderr) = (out.stdout, out.stderr);
    let failed = out.exit_code != Some(0) && !out.timed_out;
    let sandbox = if failed { crate::sandbox_config::brief(ctx.sandbox.as_deref()) } else { None };
    Ok(RunShellReply {
        sandbox,
        exit_code: out.exit_code,
        signal: out.signal,
        timed_out: out.timed_out,
        duration_ms: out.duration_ms,
        stdout_bytes: stdout.bytes,
        stderr_bytes: stderr.bytes,
        stdout_cut: stdout.cut,
        stderr_cut: stderr.cut,
        stdout_file: stdout.spilled.clone(),
        stderr_file: stderr.spilled.clone(),
        stdout: stdout.text,
        stderr: stderr.text,
    })
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobStartArgs {
    /// A name for the job (letters, digits, '.', '_', '-'); default `job-<n>`.
    pub name: Option<String>,
    /// The command, run by `bash -c`; stdout and stderr go to `.gm/jobs/<name>.log`.
    pub command: String,
    /// Working directory, relative to the workspace (default: the workspace).
    pub cwd: Option<String>,
    /// Kill the job's process group after this many ms (default: no timeout).
    pub timeout_ms: Option<u64>,
    /// Extra environment variables.
    pub env: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct JobStatusArgs {
    /// The job's name.
    pub name: String,
    /// Wait up to this many ms (at most 300000) for the job to end or print more, instead of polling.
    pub wait: Option<u64>,
    /// Bytes of the output's end to return (default 4096, at most 1 MiB).
    pub tail_bytes: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobStopArgs {
    /// The job's name.
    pub name: String,
}

fn redact_info(ctx: &Ctx, mut info: JobInfo) -> JobInfo {
    let secrets = ctx.secrets.get();
    if !secrets.redactor.is_empty() {
        info.tail = secrets.redactor.redact(&info.tail);
        info.command = secrets.redactor.redact(&info.command);
        for v in [&mut info.result, &mut info.error].into_iter().flatten() {
            secrets.redact_value(v);
        }
    }
    info
}

pub async fn job_start(ctx: Ctx, args: JobStartArgs) -> Result<JobInfo, VerbError> {
    if args.command.trim().is_empty() {
        return Err(VerbError::InvalidArgs("command is empty".into()));
    }
    let timeout = match args.timeout_ms {
        None => None,
        Some(ms) => Some(timeout(Some(ms), ms)?),
    };
    let msg = StartJob {
        name: args.name,
        command: args.command,
        cwd: cwd(&ctx, args.cwd.as_deref())?,
        env: environment(&ctx, args.env)?,
        timeout,
        confine: ctx.sandbox.clone(),
    };
    let info = ctx.jobs.send(msg).await.map_err(unavailable)?.map_err(job_error)?;
    Ok(redact_info(&ctx, info))
}

pub async fn job_status(ctx: Ctx, args: JobStatusArgs) -> Result<JobInfo, VerbError> {
    let tail = args.tail_bytes.unwrap_or(DEFAULT_TAIL);
    if tail > MAX_TAIL {
        return Err(VerbError::InvalidArgs(format!("tailBytes must be at most {MAX_TAIL}")));
    }
    let wait = match args.wait {
        Some(ms) if ms > MAX_WAIT_MS => {
            return Err(VerbError::InvalidArgs(format!("wait must be at most {MAX_WAIT_MS} ms")));
        }
        other => other.map(Duration::from_millis),
    };
    let msg = JobStatus { name: args.name, wait, tail_bytes: tail, cancel: ctx.cancel.clone() };
    let info = ctx.jobs.send(msg).await.map_err(unavailable)?.map_err(job_error)?;
    Ok(redact_info(&ctx, info))
}

pub async fn job_stop(ctx: Ctx, args: JobStopArgs) -> Result<JobInfo, VerbError> {
    let info = ctx.jobs.send(StopJob { name: args.name }).await.map_err(unavailable)?.map_err(job_error)?;
    Ok(redact_info(&ctx, info))
}
