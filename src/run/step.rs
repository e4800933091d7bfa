//! A step and the end of a run: next_context and finish.

use gm_actors::jobs::{JobState, ListJobs, StopBodies};
use gm_actors::log_writer::{Event, Flush, Scope, Tail, TailResult};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::App;
use crate::run_state::{Opened, RunState};
use crate::verbs::rows::{load_all, Kind, State as RowState};
use crate::verbs::VerbError;

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
pub struct FinishArgs {
    /// What the run did, in a sentence or two.
    pub summary: Option<String>,
    /// What is not done, not verified or not known, one item each.
    pub gaps: Option<Vec<String>>,
    /// Also stop background work still running (default false).
    pub stop_background: Option<bool>,
}

/// One step of the session's run. `resumed` says how the run was found, on the first step
/// of a run this session continues (its worker restarted, or a session that left had it).
pub async fn next_context(
    app: &App,
    state: RunState,
    resumed: Option<Opened>,
    session: String,
) -> Result<Value, VerbError> {
    let (rules, rules_error) = match app.ctx.skills.rules() {
        Ok(r) => (r, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let recent = match &app.ctx.log {
        Some(log) => log.send(Tail { n: RECENT_EVENTS, session: Some(session) }).await.unwrap_or_default(),
        None => TailResult::default(),
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
        "recentEvents": recent.events,
        "finished": state.finished,
    });
    if let Some(e) = rules_error {
        v["rulesError"] = json!(e);
    }
    // An agent working unattended learns that its record is not being kept (a full disk)
    // while it can still do something about it.
    if let Some(trouble) = recent.trouble {
        v["logError"] = trouble;
    }
    // The agent sees its box at the start of its run (and of a run it continues).
    if state.step <= 1 || resumed.is_some() {
        if let Some(sandbox) = crate::sandbox_config::describe(app.ctx.sandbox.as_deref()) {
            v["sandbox"] = sandbox;
        }
    }
    match resumed {
        Some(Opened::Resumed { step }) => {
            v["resumed"] = json!({
                "afterStep": step,
                "message": format!("gm restarted: this run continues from step {step}; check what the log says was done before building on it"),
            });
        }
        Some(Opened::TakenOver { from, step }) => {
            v["resumed"] = json!({
                "afterStep": step,
                "fromSession": from,
                "message": format!("this run was left unfinished by a session that ended; it continues from step {step}: check what the log says was done before building on it"),
            });
        }
        Some(Opened::New) | None => {}
    }
    Ok(v)
}

pub async fn finish(app: &App, args: FinishArgs, state: RunState, scope: Scope) -> Result<Value, VerbError> {
    let gaps = args.gaps.unwrap_or_default();
    let stopped = if args.stop_background.unwrap_or(false) {
        app.ctx.jobs.send(StopBodies).await.unwrap_or_default()
    } else {
        Vec::new()
    };
    let mut last_seq = None;
    let mut log_error = None;
    if let Some(log) = &app.ctx.log {
        let end = Event::new(
            "end",
            json!({ "summary": args.summary, "gaps": gaps, "steps": state.step, "task": state.task, "stoppedBackground": stopped }),
        );
        log.do_send(end.in_scope(Some(&scope)));
        // The end of a run is synced to disk before finish replies, or finish says why not.
        match log.send(Flush).await {
            Ok(Ok(seq)) => last_seq = Some(seq),
            Ok(Err(e)) => log_error = Some(e),
            Err(e) => log_error = Some(e.to_string()),
        }
    }
    let mut v = json!({ "runId": state.run_id, "steps": state.step, "gaps": gaps, "lastSeq": last_seq, "stoppedBackground": stopped });
    if let Some(e) = log_error {
        v["logError"] = json!(e);
    }
    Ok(v)
}
