//! The run loop's own tools: next_context (one step), run_code (a body in the JS engine) and
//! finish (the end of the run).

use std::sync::Arc;
use std::time::Duration;

use gm_actors::jobs::{JobState, ListJobs};
use gm_actors::js_engine::{CancelToken, JsError, Outcome, Run};
use gm_actors::log_writer::{Event, Flush, Tail};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::server::App;
use crate::verbs::{parse_args, VerbError};

pub const DEFAULT_BUDGET_MS: u64 = 180_000;
pub const MAX_BUDGET_MS: u64 = 300_000;
const RECENT_EVENTS: usize = 10;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NextContextArgs {
    /// Sets (or replaces) the run's task.
    pub task: Option<String>,
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

/// The step's state the server keeps per connection.
#[derive(Debug, Default, Clone)]
pub struct RunState {
    pub task: Option<String>,
    pub step: u64,
    pub finished: bool,
}

pub async fn next_context(app: &App, state: RunState) -> Result<Value, VerbError> {
    let (rules, rules_error) = match app.ctx.skills.rules() {
        Ok(r) => (r, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let recent = match &app.ctx.log {
        Some(log) => log.send(Tail(RECENT_EVENTS)).await.unwrap_or_default(),
        None => Vec::new(),
    };
    let jobs = app.ctx.jobs.send(ListJobs).await.unwrap_or_default();
    let background: Vec<Value> = jobs
        .iter()
        .filter(|j| j.state == JobState::Running)
        .map(|j| json!({ "name": j.name, "command": j.command, "durationMs": j.duration_ms, "logBytes": j.log_bytes }))
        .collect();
    let mut v = json!({
        "runId": app.run_id,
        "step": state.step,
        "task": state.task,
        "rules": rules,
        "rulesFrom": "skill://gm/SKILL.md",
        "openRows": [],
        "openUnknowns": [],
        "background": background,
        "recentEvents": recent,
        "finished": state.finished,
    });
    if let Some(e) = rules_error {
        v["rulesError"] = json!(e);
    }
    Ok(v)
}

pub async fn finish(app: &App, args: Value, state: RunState) -> Result<Value, VerbError> {
    let args: FinishArgs = parse_args(args)?;
    let gaps = args.gaps.unwrap_or_default();
    let mut last_seq = None;
    if let Some(log) = &app.ctx.log {
        log.do_send(Event::new(
            "end",
            json!({ "summary": args.summary, "gaps": gaps, "steps": state.step, "task": state.task, "stoppedBackground": 0 }),
        ));
        // The end of a run is synced to disk before finish replies.
        last_seq = log.send(Flush).await.ok().and_then(Result::ok);
    }
    Ok(json!({ "runId": app.run_id, "steps": state.step, "gaps": gaps, "lastSeq": last_seq, "stoppedBackground": 0 }))
}

pub fn parse_run_code(args: Value) -> Result<(String, Duration), VerbError> {
    let args: RunCodeArgs = parse_args(args)?;
    let ms = args.timeout_ms.unwrap_or(DEFAULT_BUDGET_MS);
    if ms == 0 || ms > MAX_BUDGET_MS {
        return Err(VerbError::InvalidArgs(format!("timeoutMs must be between 1 and {MAX_BUDGET_MS} (got {ms})")));
    }
    Ok((args.code, Duration::from_millis(ms)))
}

pub async fn run_code(
    app: &App,
    code: String,
    budget: Duration,
    body: u64,
    cancel: CancelToken,
) -> Result<(Value, Option<String>), Value> {
    let mut ctx = app.ctx.clone();
    // Shells the body starts are stopped with it.
    ctx.cancel = cancel.clone();
    let host = Arc::new(crate::js::Host::new(ctx, body));
    let lines: Vec<String> = code.lines().map(str::to_owned).collect();
    let run = Run { id: body, body: code, budget, host, cancel };
    let outcome: Outcome = app
        .js
        .send(run)
        .await
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

fn js_error_code(e: &JsError) -> &'static str {
    match e {
        JsError::Thrown { .. } => "js_error",
        JsError::Budget { .. } => "budget_exceeded",
        JsError::Cancelled => "cancelled",
        JsError::OutOfMemory { .. } => "out_of_memory",
        JsError::Engine(_) => "engine_error",
    }
}
