//! The run loop's own tools: next_context (one step), run_code (a body in the JS engine) and
//! finish (the end of the run).

use std::sync::Arc;
use std::time::Duration;

use gm_actors::jobs::{FinishBody, JobState, ListJobs, StartBody, StopBodies};
use gm_actors::js_engine::{CancelToken, JsError, Outcome, Run};
use gm_actors::log_writer::{Event, Flush, Tail};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::run_state::RunState;
use crate::server::App;
use crate::verbs::rows::{load_all, Kind, State as RowState};
use crate::verbs::{parse_args, Json, VerbError};

pub const DEFAULT_BUDGET_MS: u64 = 180_000;
pub const MAX_BUDGET_MS: u64 = 300_000;
/// How long a body that went on in the background may run before it is interrupted.
pub const BACKGROUND_LIFETIME: Duration = Duration::from_secs(3600);
const RECENT_EVENTS: usize = 10;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NextContextArgs {
    /// Sets (or replaces) the run's task.
    pub task: Option<String>,
    /// Sets how many steps the run may take in all (default: gm serve --step-budget, else 200).
    pub step_budget: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunCodeArgs {
    /// The body of an async function. `return` gives the result; every verb is `await gm.<verb>(args)`.
    pub code: String,
    /// Budget in milliseconds (default 180000, at most 300000).
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FinishArgs {
    /// What the run did, in a sentence or two.
    pub summary: Option<String>,
    /// What is not done, not verified or not known, one item each.
    pub gaps: Option<Vec<String>>,
    /// Also stop background work still running (default false).
    pub stop_background: Option<bool>,
}

/// One step of the run. `resumed` is the step an earlier gm had reached, on the first step
/// this gm serves of a run it took over.
pub async fn next_context(app: &App, state: RunState, resumed: Option<u64>) -> Result<Value, VerbError> {
    let (rules, rules_error) = match app.ctx.skills.rules() {
        Ok(r) => (r, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let recent = match &app.ctx.log {
        Some(log) => log.send(Tail(RECENT_EVENTS)).await.unwrap_or_default(),
        None => Vec::new(),
    };
    let rows: Vec<_> = load_all(&app.ctx.workspace).into_iter().filter(|r| r.state == RowState::Open).collect();
    let jobs = app.ctx.jobs.send(ListJobs).await.unwrap_or_default();
    let background: Vec<Value> = jobs
        .iter()
        .filter(|j| j.state == JobState::Running)
        .map(|j| json!({ "name": j.name, "kind": j.kind, "command": j.command, "durationMs": j.duration_ms, "logBytes": j.log_bytes }))
        .collect();
    let mut v = json!({
        "runId": state.run_id,
        "step": state.step,
        "stepBudget": state.step_budget,
        "stepsLeft": state.steps_left(),
        "task": state.task,
        "rules": rules,
        "rulesFrom": "skill://gm/SKILL.md",
        "openRows": rows.iter().filter(|r| r.kind == Kind::Prd).collect::<Vec<_>>(),
        "openUnknowns": rows.iter().filter(|r| r.kind == Kind::Unknown).collect::<Vec<_>>(),
        "background": background,
        "recentEvents": recent,
        "finished": state.finished,
    });
    if let Some(e) = rules_error {
        v["rulesError"] = json!(e);
    }
    if let Some(step) = resumed {
        v["resumed"] = json!({
            "afterStep": step,
            "message": format!("gm restarted: this run continues from step {step}; check what the log says was done before building on it"),
        });
    }
    Ok(v)
}

pub async fn finish(app: &App, args: FinishArgs, state: RunState) -> Result<Value, VerbError> {
    let gaps = args.gaps.unwrap_or_default();
    let stopped = if args.stop_background.unwrap_or(false) {
        app.ctx.jobs.send(StopBodies).await.unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut last_seq = None;
    if let Some(log) = &app.ctx.log {
        log.do_send(Event::new(
            "end",
            json!({ "summary": args.summary, "gaps": gaps, "steps": state.step, "task": state.task, "stoppedBackground": stopped }),
        ));
        // The end of a run is synced to disk before finish replies.
        last_seq = log.send(Flush).await.ok().and_then(Result::ok);
    }
    Ok(
        json!({ "runId": state.run_id, "steps": state.step, "gaps": gaps, "lastSeq": last_seq, "stoppedBackground": stopped }),
    )
}

pub fn parse_run_code(args: &RawValue) -> Result<(String, Duration), VerbError> {
    let args: RunCodeArgs = parse_args(args)?;
    let ms = args.timeout_ms.unwrap_or(DEFAULT_BUDGET_MS);
    if ms == 0 || ms > MAX_BUDGET_MS {
        return Err(VerbError::InvalidArgs(format!("timeoutMs must be between 1 and {MAX_BUDGET_MS} (got {ms})")));
    }
    Ok((args.code, Duration::from_millis(ms)))
}

/// What a run-loop tool or a verb call gives back to the server.
pub struct ToolOutput {
    /// The result as JSON text.
    pub value: Json,
    /// A second text block (run_code's console), if any.
    pub extra: Option<String>,
    /// The call handed work to the background (a run_code body past its budget): what it
    /// started must not be stopped when the call returns.
    pub detached: bool,
}

impl ToolOutput {
    pub fn json(value: Json) -> Self {
        Self { value, extra: None, detached: false }
    }

    pub fn value(value: &Value) -> Self {
        Self::json(raw(value))
    }
}

/// A JSON value as text; serializing a value cannot fail.
fn raw(value: &Value) -> Json {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| gm_actors::js_engine::null_json())
}

/// Runs a body. One still running at its budget goes on in the background as a job
/// (`body-<n>`): the call returns at once with its name, and `job_status` reports its result.
pub async fn run_code(
    app: &App,
    code: String,
    budget: Duration,
    body: u64,
    cancel: CancelToken,
) -> Result<ToolOutput, Value> {
    // Shells the body starts are stopped with it.
    let ctx = app.ctx.with_cancel(cancel.clone());
    let host = Arc::new(crate::js::Host::new(ctx, body));
    let lines: Vec<String> = code.lines().map(str::to_owned).collect();
    let summary = code.clone();
    let run = Run { id: body, body: code, budget: BACKGROUND_LIFETIME, host, cancel: cancel.clone() };
    let engines = app.js.clone();
    let mut pending = Box::pin(async move { engines.run(run).await });
    let started_ms = now_ms();
    tokio::select! {
        outcome = &mut pending => {
            let (value, extra) = shape(outcome, &lines)?;
            return Ok(ToolOutput { value: raw(&value), extra, detached: false });
        }
        () = tokio::time::sleep(budget) => {}
    }
    let info = app
        .ctx
        .jobs
        .send(StartBody { code: summary, cancel, started_ms })
        .await
        .map_err(|e| json!({ "code": "internal", "message": format!("the jobs actor is unavailable: {e}") }))?
        .map_err(|e| json!({ "code": "internal", "message": e.to_string() }))?;
    let name = info.name.clone();
    let (jobs, log, secrets) = (app.ctx.jobs.clone(), app.ctx.log.clone(), app.ctx.secrets.clone());
    let finished = name.clone();
    actix::spawn(async move {
        let outcome = pending.await;
        if outcome.is_err() {
            // The engine is gone: gm is stopping. The body did not finish; the next gm settles
            // it as stopped by the restart.
            return;
        }
        let console = match &outcome {
            Ok(o) => o.console.iter().map(|l| format!("[{}] {}\n", l.level, l.text)).collect(),
            Err(_) => String::new(),
        };
        let secrets = secrets.get();
        let mut result = shape(outcome, &lines).map(|(v, _)| v["result"].clone());
        match &mut result {
            Ok(v) | Err(v) => secrets.redact_value(v),
        }
        let outcome = if result.is_ok() { "ok" } else { "error" };
        if let Some(log) = &log {
            log.do_send(Event::new(
                "job",
                json!({ "name": finished, "kind": "body", "what": "done", "outcome": outcome }),
            ));
        }
        jobs.do_send(FinishBody { name: finished, result, console: secrets.redactor.redact(&console) });
    });
    let value = json!({
        "background": name,
        "state": "running",
        "budgetMs": budget.as_millis() as u64,
        "message": format!(
            "the body ran past its budget of {} ms and goes on in the background as job '{name}'; job_status({{ name: '{name}', wait }}) reports its result, job_stop stops it",
            budget.as_millis()
        ),
    });
    Ok(ToolOutput { value: raw(&value), extra: None, detached: true })
}

/// A finished body as a tool result: its value and console, or a structured error.
fn shape(outcome: Result<Outcome, actix::MailboxError>, lines: &[String]) -> Result<(Value, Option<String>), Value> {
    let outcome = outcome
        .map_err(|e| json!({ "code": "engine_error", "message": format!("the JS engine is unavailable: {e}") }))?;
    let console_text = (!outcome.console.is_empty()).then(|| {
        let mut t = String::from("console:\n");
        for l in &outcome.console {
            t.push_str(&format!("[{}] {}\n", l.level, l.text));
        }
        t
    });
    let console = serde_json::to_value(&outcome.console).unwrap_or_default();
    let ms = outcome.elapsed.as_secs_f64() * 1000.0;
    match outcome.result {
        Ok(result) => Ok((json!({ "result": result, "console": console, "ms": ms }), console_text)),
        Err(e) => {
            let mut err = json!({ "code": js_error_code(&e), "message": e.to_string(), "console": console });
            if let JsError::Thrown { name, message, stack, line, details } = &e {
                err["name"] = json!(name);
                err["message"] = json!(message);
                err["stack"] = json!(stack);
                if let Some(line) = line {
                    err["line"] = json!(line);
                    if let Some(text) = (*line as usize).checked_sub(1).and_then(|i| lines.get(i)) {
                        err["lineText"] = json!(text);
                    }
                }
                if !details.is_null() {
                    err["details"] = details.clone();
                }
            }
            Err(err)
        }
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

fn js_error_code(e: &JsError) -> &'static str {
    match e {
        JsError::Thrown { .. } => "js_error",
        JsError::Budget { .. } => "budget_exceeded",
        JsError::Cancelled => "cancelled",
        JsError::OutOfMemory { .. } => "out_of_memory",
        JsError::Engine(_) => "engine_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_code_error_code_is_in_the_catalog() {
        let errors = [
            JsError::Thrown {
                name: String::new(),
                message: String::new(),
                stack: String::new(),
                line: None,
                details: Value::Null,
            },
            JsError::Budget { ms: 1 },
            JsError::Cancelled,
            JsError::OutOfMemory { limit: 1 },
            JsError::Engine(String::new()),
        ];
        for e in &errors {
            let code = js_error_code(e);
            assert!(crate::verbs::ERROR_CODES.iter().any(|(c, _)| *c == code), "{code}");
        }
        assert!(crate::verbs::ERROR_CODES.iter().any(|(c, _)| *c == "skill_not_read"));
    }
}
