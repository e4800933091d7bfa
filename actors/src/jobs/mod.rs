//! The Jobs actor: every process gm starts — foreground shells and background jobs.
//!
//! Each process runs in its own process group, so a kill ends the whole group: no orphans.
//! A foreground shell's output is read while it runs (a process printing megabytes never
//! blocks on a full pipe) into [`Capture`](crate::capture::Capture)s. A background job writes
//! its output to `<dir>/<name>.log` and its shell writes the exit code to `<dir>/<name>.exit`,
//! so a job outlives gm: a restarted gm adopts the jobs still running (with their remaining
//! timeout) and settles the ones that ended while no gm ran.
//!
//! - this module: the actor, its messages, adoption of earlier jobs, starting jobs, deadlines.
//! - `shell`: the foreground shell: spawning it and reading its output until it ends.
//! - `meta`: the files kept beside a job (log, exit code, metadata) and reading them back.
//! - `process`: process groups and processes, on top of [`crate::sys`].

mod bodies;
mod meta;
mod process;
mod shell;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use actix::prelude::*;
use serde::{Deserialize, Serialize};

use crate::cancel::CancelToken;
use crate::clock::now_ms;
use crate::sys;
use meta::{file_mtime_ms, read_tail, valid_name, JobMeta};
use process::{process_matches, shell, terminate_group};
use shell::{spawn_shell, wait_shell};

pub use bodies::{FinishBody, StartBody, StopBodies};
pub use process::KILL_GRACE;
pub use shell::{ShellOutcome, ShellSpec};

/// How often a job's files are looked at while someone waits on it.
const POLL: Duration = Duration::from_millis(25);

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("cannot start the shell: {0}")]
    Spawn(std::io::Error),
    #[error("the working directory {0} does not exist or is not a directory")]
    NoCwd(PathBuf),
    #[error("no job named '{0}'")]
    UnknownJob(String),
    #[error("a job named '{0}' is still running; stop it or choose another name")]
    DuplicateJob(String),
    #[error("invalid job name '{0}': use 1-64 letters, digits, '.', '_' or '-'")]
    BadName(String),
    #[error("the thread watching the shell failed: {0}")]
    Lost(String),
    #[error("job files in {path}: {source}")]
    Files { path: PathBuf, source: std::io::Error },
}

/// Run a foreground shell to its end, its timeout or its cancel.
#[derive(Message)]
#[rtype(result = "Result<ShellOutcome, JobError>")]
pub struct RunShell {
    pub spec: ShellSpec,
    pub cancel: CancelToken,
}

/// Start a background job; returns at once.
#[derive(Message)]
#[rtype(result = "Result<JobInfo, JobError>")]
pub struct StartJob {
    pub name: Option<String>,
    pub command: String,
    pub cwd: PathBuf,
    pub env: Vec<(String, String)>,
    pub timeout: Option<Duration>,
    /// The box the job's command runs in (its wrapper, which records the exit code in gm's
    /// folder, stays outside: the command goes through `gm __sandbox`).
    pub confine: Option<std::sync::Arc<crate::sandbox::Confinement>>,
}

/// A job's state; with `wait`, first waits for it to end or print more, up to `wait`.
#[derive(Message)]
#[rtype(result = "Result<JobInfo, JobError>")]
pub struct JobStatus {
    pub name: String,
    pub wait: Option<Duration>,
    pub tail_bytes: usize,
    /// Ends the wait early (the caller was cancelled).
    pub cancel: CancelToken,
}

/// Kill a job's process group.
#[derive(Message)]
#[rtype(result = "Result<JobInfo, JobError>")]
pub struct StopJob {
    pub name: String,
}

/// Every job gm knows of, running first.
#[derive(Message)]
#[rtype(result = "Vec<JobInfo>")]
pub struct ListJobs;

/// Kill every foreground shell (gm is exiting). Background jobs are left running.
#[derive(Message)]
#[rtype(result = "usize")]
pub struct KillForeground;

/// Jobs adopted, settled or stopped when this actor started, for the log.
#[derive(Message)]
#[rtype(result = "Vec<JobEvent>")]
pub struct TakeStartupEvents;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobEvent {
    pub name: String,
    /// `adopted` (still running, watched again), `settled` (ended while no gm ran) or `stopped`
    /// (a background body its gm was running when it stopped).
    pub what: &'static str,
    pub info: JobInfo,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JobState {
    Running,
    Exited,
    Killed,
    TimedOut,
    /// The process is gone and left no exit code (killed while no gm ran, or the machine
    /// restarted).
    Lost,
}

/// What a job runs: a shell command, or a run_code body that ran past its budget and went on
/// in the background.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JobKind {
    #[default]
    Shell,
    Body,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct JobInfo {
    pub name: String,
    pub kind: JobKind,
    pub state: JobState,
    pub command: String,
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub started_ms: u64,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    pub log_path: PathBuf,
    pub log_bytes: u64,
    /// The end of the job's output (stdout and stderr together).
    pub tail: String,
    /// Bytes of the log before `tail`.
    pub tail_cut: u64,
    /// A background body's return value, once it has returned.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// A background body's error, once it has failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<serde_json::Value>,
}

pub struct Jobs {
    dir: PathBuf,
    foreground: HashSet<i32>,
    /// Background bodies running in this process, and how to stop them.
    bodies: HashMap<String, CancelToken>,
    jobs: HashMap<String, JobMeta>,
    next_name: u64,
    startup: Vec<JobEvent>,
}

impl Jobs {
    /// `dir` holds the job files (`.gm/jobs`).
    pub fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            foreground: HashSet::new(),
            bodies: HashMap::new(),
            jobs: HashMap::new(),
            next_name: 1,
            startup: Vec::new(),
        }
    }

    fn paths(&self, name: &str) -> (PathBuf, PathBuf, PathBuf) {
        meta::paths(&self.dir, name)
    }

    fn save(&self, meta: &JobMeta) -> Result<(), JobError> {
        meta.save(&self.dir)
    }

    fn info(&self, meta: &JobMeta, tail_bytes: usize) -> JobInfo {
        let (log, exit, _) = self.paths(&meta.name);
        let exit_text = std::fs::read_to_string(&exit).ok();
        let exit_code = exit_text.as_deref().and_then(|t| t.trim().parse::<i32>().ok());
        let alive = exit_text.is_none()
            && match meta.kind {
                JobKind::Shell => process_matches(meta.pid, meta.proc_start),
                JobKind::Body => self.bodies.contains_key(&meta.name),
            };
        let state = match (meta.ended_by, exit_text.is_some(), alive) {
            (Some(by), _, false) => by,
            (_, true, _) => JobState::Exited,
            (_, false, true) => JobState::Running,
            (_, false, false) => JobState::Lost,
        };
        let now = now_ms();
        let ended = if state == JobState::Running {
            now
        } else {
            meta.ended_ms.or_else(|| file_mtime_ms(&exit)).unwrap_or(now)
        };
        let (tail, log_bytes) = read_tail(&log, tail_bytes);
        JobInfo {
            name: meta.name.clone(),
            state,
            command: meta.command.clone(),
            pid: meta.pid,
            exit_code,
            started_ms: meta.started_ms,
            duration_ms: ended.saturating_sub(meta.started_ms),
            timeout_ms: meta.timeout_ms,
            log_path: log,
            log_bytes,
            tail_cut: log_bytes.saturating_sub(tail.len() as u64),
            tail,
            kind: meta.kind,
            result: meta.result.clone(),
            error: meta.error.clone(),
        }
    }

    fn fresh_name(&mut self, prefix: &str) -> String {
        loop {
            let candidate = format!("{prefix}-{}", self.next_name);
            self.next_name += 1;
            if !self.jobs.contains_key(&candidate) {
                return candidate;
            }
        }
    }

    /// Reads the job files left by earlier gm processes: adopts the live ones, settles the rest.
    fn scan(&mut self, ctx: &mut Context<Self>) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let Ok(meta) = std::fs::read(&path)
                .map_err(|_| ())
                .and_then(|b| serde_json::from_slice::<JobMeta>(&b).map_err(|_| ()))
            else {
                continue;
            };
            let mut meta = meta;
            let info = self.info(&meta, 2048);
            if meta.kind == JobKind::Body && meta.ended_by.is_none() && !self.paths(&meta.name).1.exists() {
                // A background body lives in its gm's JS engine: it ended when that gm did.
                meta.ended_by = Some(JobState::Lost);
                meta.ended_ms = Some(now_ms());
                meta.error = Some(serde_json::json!({
                    "code": "stopped_by_restart",
                    "message": "gm stopped while this background run was running; background runs do not survive a restart",
                }));
                meta.end_reported = true;
                let _ = self.save(&meta);
                let info = self.info(&meta, 2048);
                self.startup.push(JobEvent { name: meta.name.clone(), what: "stopped", info });
            } else if info.state == JobState::Running {
                self.watch_deadline(&meta, ctx);
                self.startup.push(JobEvent { name: meta.name.clone(), what: "adopted", info });
            } else if !meta.end_reported {
                // Ended while no gm watched it: say so once, and remember that it was said.
                if info.state == JobState::Lost {
                    meta.ended_by = Some(JobState::Lost);
                    meta.ended_ms = Some(now_ms());
                }
                meta.end_reported = true;
                let _ = self.save(&meta);
                let info = self.info(&meta, 2048);
                self.startup.push(JobEvent { name: meta.name.clone(), what: "settled", info });
            }
            self.jobs.insert(meta.name.clone(), meta);
        }
    }

    /// Kills a job at its deadline (the remaining part of its timeout, for an adopted job).
    fn watch_deadline(&self, meta: &JobMeta, ctx: &mut Context<Self>) {
        let Some(timeout) = meta.timeout_ms else { return };
        let left = (meta.started_ms + timeout).saturating_sub(now_ms());
        let name = meta.name.clone();
        ctx.run_later(Duration::from_millis(left), move |act, _| {
            let Some(meta) = act.jobs.get(&name).cloned() else { return };
            if act.info(&meta, 0).state == JobState::Running {
                sys::kill_group(meta.pid as i32);
                act.mark_ended(&name, JobState::TimedOut);
            }
        });
    }

    fn mark_ended(&mut self, name: &str, by: JobState) {
        if let Some(meta) = self.jobs.get_mut(name) {
            meta.ended_by = Some(by);
            meta.ended_ms = Some(now_ms());
            let meta = meta.clone();
            let _ = self.save(&meta);
        }
    }

    fn start_job(&mut self, msg: StartJob, ctx: &mut Context<Self>) -> Result<JobInfo, JobError> {
        let name = match msg.name {
            Some(n) => n,
            None => self.fresh_name("job"),
        };
        if !valid_name(&name) {
            return Err(JobError::BadName(name));
        }
        if let Some(old) = self.jobs.get(&name) {
            if self.info(old, 0).state == JobState::Running {
                return Err(JobError::DuplicateJob(name));
            }
        }
        if !msg.cwd.is_dir() {
            return Err(JobError::NoCwd(msg.cwd));
        }
        crate::state_file::open_own_folder(&self.dir)
            .map_err(|e| JobError::Files { path: self.dir.clone(), source: e.into() })?;
        let (log, exit, _) = self.paths(&name);
        let _ = std::fs::remove_file(&exit);
        // The log is opened here, never through a link in its place (a shell's `>` would follow
        // one a repository committed), and given to the wrapper as its stdout.
        let log_file = crate::state_file::open_own(&log, crate::state_file::How::REPLACE)
            .map_err(|e| JobError::Files { path: log.clone(), source: e.into() })?;
        // The wrapper shell leads the group, runs the command in the same shell a foreground
        // shell uses (bash, else sh), sends its output to the log and writes its exit code when
        // it ends, whether or not a gm is there to see it. The exit code's temporary file is
        // removed first and written under `set -C` (noclobber), so it is made new, never
        // written through whatever stands in its place; `mv` replaces a link, not its target.
        let wrapper = r#"exit_file="$1"; shift; "$@" 2>&1 < /dev/null; code=$?; rm -f "$exit_file.tmp"; set -C; printf '%s\n' "$code" > "$exit_file.tmp" && mv -f "$exit_file.tmp" "$exit_file""#;
        let run: Vec<std::ffi::OsString> = match &msg.confine {
            Some(confine) => confine.helper_argv(shell(), ["-c".into(), msg.command.clone().into()]),
            None => vec![shell().into(), "-c".into(), msg.command.clone().into()],
        };
        let mut cmd = std::process::Command::new(shell());
        cmd.arg("-c")
            .arg(wrapper)
            .arg("gm-job")
            .arg(&exit)
            .args(&run)
            .current_dir(&msg.cwd)
            .envs(msg.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log_file))
            .stderr(Stdio::null());
        sys::own_process_group(&mut cmd);
        let child = cmd.spawn().map_err(JobError::Spawn)?;
        let pid = child.id();
        // Reap the wrapper when it ends so it does not linger as a zombie; the exit file is
        // the record of how it ended.
        std::thread::Builder::new()
            .name(format!("gm-job-{name}"))
            .spawn(move || {
                let mut child = child;
                let _ = child.wait();
            })
            .map_err(JobError::Spawn)?;
        let meta = JobMeta {
            name: name.clone(),
            command: msg.command,
            cwd: msg.cwd,
            pid,
            proc_start: sys::process_start_ticks(pid),
            started_ms: now_ms(),
            timeout_ms: msg.timeout.map(|t| t.as_millis() as u64),
            ended_by: None,
            ended_ms: None,
            end_reported: false,
            kind: JobKind::Shell,
            result: None,
            error: None,
        };
        self.save(&meta)?;
        self.watch_deadline(&meta, ctx);
        let info = self.info(&meta, 0);
        self.jobs.insert(name, meta);
        Ok(info)
    }
}

impl Actor for Jobs {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.scan(ctx);
    }

    fn stopping(&mut self, _: &mut Context<Self>) -> Running {
        for pgid in self.foreground.drain() {
            sys::kill_group(pgid);
        }
        Running::Stop
    }
}

impl Handler<RunShell> for Jobs {
    type Result = ResponseActFuture<Self, Result<ShellOutcome, JobError>>;
    fn handle(&mut self, msg: RunShell, _: &mut Context<Self>) -> Self::Result {
        let spawned = spawn_shell(&msg.spec);
        let pgid = spawned.as_ref().ok().map(|(c, _)| c.id() as i32);
        if let Some(pgid) = pgid {
            self.foreground.insert(pgid);
        }
        let work = async move {
            let (child, tmp) = spawned?;
            let pgid = child.id() as i32;
            let cancelled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let flag = cancelled.clone();
            let spec = msg.spec;
            let mut watch = tokio::task::spawn_blocking(move || {
                let outcome = wait_shell(child, &spec, &flag);
                if let Some(tmp) = tmp {
                    let _ = std::fs::remove_dir_all(tmp);
                }
                outcome
            });
            let outcome = tokio::select! {
                outcome = &mut watch => outcome,
                () = msg.cancel.cancelled() => {
                    cancelled.store(true, std::sync::atomic::Ordering::Relaxed);
                    sys::kill_group(pgid);
                    watch.await
                }
            };
            outcome.map_err(|e| {
                sys::kill_group(pgid);
                JobError::Lost(e.to_string())
            })
        };
        Box::pin(work.into_actor(self).map(move |res, act, _| {
            if let Some(pgid) = pgid {
                act.foreground.remove(&pgid);
            }
            res
        }))
    }
}

impl Handler<StartJob> for Jobs {
    type Result = Result<JobInfo, JobError>;
    fn handle(&mut self, msg: StartJob, ctx: &mut Context<Self>) -> Self::Result {
        self.start_job(msg, ctx)
    }
}

impl Handler<JobStatus> for Jobs {
    type Result = ResponseActFuture<Self, Result<JobInfo, JobError>>;
    fn handle(&mut self, msg: JobStatus, _: &mut Context<Self>) -> Self::Result {
        let Some(meta) = self.jobs.get(&msg.name).cloned() else {
            return Box::pin(fut::ready(Err(JobError::UnknownJob(msg.name))));
        };
        let first = self.info(&meta, 0);
        let Some(wait) = msg.wait.filter(|_| first.state == JobState::Running) else {
            return Box::pin(fut::ready(Ok(self.info(&meta, msg.tail_bytes))));
        };
        // Wait for the job to end or print more, looking at its files; an adopted job is not
        // our child, so files are the one way to see it that works for every job.
        let (log, exit, _) = self.paths(&msg.name);
        let start_bytes = first.log_bytes;
        let cancel = msg.cancel.clone();
        let work = async move {
            let deadline = Instant::now() + wait;
            while Instant::now() < deadline && !cancel.is_cancelled() {
                tokio::select! {
                    () = tokio::time::sleep(POLL) => {}
                    () = cancel.cancelled() => break,
                }
                let grew = std::fs::metadata(&log).map(|m| m.len() > start_bytes).unwrap_or(false);
                if grew || exit.exists() || !process_matches(meta.pid, meta.proc_start) {
                    break;
                }
            }
            meta
        };
        Box::pin(work.into_actor(self).map(move |meta, act, _| {
            // The job's state as it is now: an exit that raced the output is seen in this reply.
            let meta = act.jobs.get(&meta.name).cloned().unwrap_or(meta);
            Ok(act.info(&meta, msg.tail_bytes))
        }))
    }
}

impl Handler<StopJob> for Jobs {
    type Result = ResponseActFuture<Self, Result<JobInfo, JobError>>;
    fn handle(&mut self, msg: StopJob, _: &mut Context<Self>) -> Self::Result {
        let Some(meta) = self.jobs.get(&msg.name).cloned() else {
            return Box::pin(fut::ready(Err(JobError::UnknownJob(msg.name))));
        };
        if self.info(&meta, 0).state != JobState::Running {
            return Box::pin(fut::ready(Ok(self.info(&meta, 2048))));
        }
        if meta.kind == JobKind::Body {
            if let Some(token) = self.bodies.remove(&msg.name) {
                token.cancel();
            }
            self.mark_ended(&msg.name, JobState::Killed);
            let meta = self.jobs.get(&msg.name).cloned().unwrap_or(meta);
            return Box::pin(fut::ready(Ok(self.info(&meta, 2048))));
        }
        let pid = meta.pid;
        let proc_start = meta.proc_start;
        let work = async move {
            terminate_group(pid as i32, || process_matches(pid, proc_start)).await;
        };
        Box::pin(work.into_actor(self).map(move |(), act, _| {
            act.mark_ended(&msg.name, JobState::Killed);
            let meta = act.jobs.get(&msg.name).cloned().unwrap_or(meta);
            Ok(act.info(&meta, 2048))
        }))
    }
}

impl Handler<ListJobs> for Jobs {
    type Result = Vec<JobInfo>;
    fn handle(&mut self, _: ListJobs, _: &mut Context<Self>) -> Vec<JobInfo> {
        let mut all: Vec<JobInfo> = self.jobs.values().map(|m| self.info(m, 0)).collect();
        all.sort_by(|a, b| {
            (a.state != JobState::Running, a.started_ms).cmp(&(b.state != JobState::Running, b.started_ms))
        });
        all
    }
}

impl Handler<KillForeground> for Jobs {
    type Result = usize;
    fn handle(&mut self, _: KillForeground, _: &mut Context<Self>) -> usize {
        let n = self.foreground.len();
        for pgid in self.foreground.drain() {
            sys::kill_group(pgid);
        }
        n
    }
}

impl Handler<TakeStartupEvents> for Jobs {
    type Result = Vec<JobEvent>;
    fn handle(&mut self, _: TakeStartupEvents, _: &mut Context<Self>) -> Vec<JobEvent> {
        std::mem::take(&mut self.startup)
    }
}
