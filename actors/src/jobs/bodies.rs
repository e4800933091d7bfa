//! Background run_code bodies: a body still running at its budget is registered here as a
//! job (`body-<n>`), so `job_status`, `job_stop` and `finish({ stopBackground })` reach it like
//! any job. It lives in its gm's JS engine: a restart ends it.

use std::path::PathBuf;

use actix::prelude::*;

use super::meta::JobMeta;
use super::{JobError, JobInfo, JobKind, JobState, Jobs};
use crate::cancel::CancelToken;
use crate::clock::now_ms;

/// Register a run_code body that ran past its budget and goes on in the background.
#[derive(Message)]
#[rtype(result = "Result<JobInfo, JobError>")]
pub struct StartBody {
    /// The body's source, shown as the job's command.
    pub code: String,
    /// Stops the body (its QuickJS interrupt handler and the shells it started watch it).
    pub cancel: CancelToken,
    pub started_ms: u64,
}

/// A background body ended: its value or its error, and what it printed.
#[derive(Message)]
#[rtype(result = "()")]
pub struct FinishBody {
    pub name: String,
    pub result: Result<serde_json::Value, serde_json::Value>,
    pub console: String,
}

/// Stop every background body still running (finish with stopBackground).
#[derive(Message)]
#[rtype(result = "Vec<String>")]
pub struct StopBodies;

impl Handler<StartBody> for Jobs {
    type Result = Result<JobInfo, JobError>;
    fn handle(&mut self, msg: StartBody, _: &mut Context<Self>) -> Self::Result {
        crate::state_file::open_own_folder(&self.dir)
            .map_err(|e| JobError::Files { path: self.dir.clone(), source: e.into() })?;
        let name = self.fresh_name("body");
        let meta = JobMeta {
            name: name.clone(),
            kind: JobKind::Body,
            command: msg.code,
            cwd: PathBuf::new(),
            pid: std::process::id(),
            proc_start: None,
            started_ms: msg.started_ms,
            timeout_ms: None,
            ended_by: None,
            ended_ms: None,
            end_reported: false,
            result: None,
            error: None,
        };
        self.save(&meta)?;
        self.bodies.insert(name.clone(), msg.cancel);
        self.jobs.insert(name, meta.clone());
        Ok(self.info(&meta, 0))
    }
}

impl Handler<FinishBody> for Jobs {
    type Result = ();
    fn handle(&mut self, msg: FinishBody, _: &mut Context<Self>) {
        self.bodies.remove(&msg.name);
        let (log, exit, _) = self.paths(&msg.name);
        let _ = crate::state_file::write_whole(&log, msg.console.as_bytes());
        let Some(meta) = self.jobs.get_mut(&msg.name) else { return };
        let code = if msg.result.is_ok() { 0 } else { 1 };
        match msg.result {
            Ok(v) => meta.result = Some(v),
            Err(e) => meta.error = Some(e),
        }
        if meta.ended_by.is_none() {
            meta.ended_by = Some(JobState::Exited);
        }
        meta.ended_ms = Some(now_ms());
        meta.end_reported = true;
        let meta = meta.clone();
        let _ = self.save(&meta);
        let _ = crate::state_file::write_whole(&exit, format!("{code}\n").as_bytes());
    }
}

impl Handler<StopBodies> for Jobs {
    type Result = Vec<String>;
    fn handle(&mut self, _: StopBodies, _: &mut Context<Self>) -> Vec<String> {
        let mut names: Vec<String> = self.bodies.keys().cloned().collect();
        names.sort();
        for name in &names {
            if let Some(token) = self.bodies.remove(name) {
                token.cancel();
            }
            self.mark_ended(name, JobState::Killed);
        }
        names
    }
}
