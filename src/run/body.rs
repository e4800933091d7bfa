//! A run_code body: run in the JS engine, shaped into a tool result, or handed to the
//! background when it runs past its budget.

use std::sync::Arc;
use std::time::Duration;

use gm_actors::jobs::{FinishBody, StartBody};
use gm_actors::js_engine::{CancelToken, ConsoleLine, JsError, Outcome, Run};
use gm_actors::log_writer::{Event, Scope};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::{raw, ToolOutput};
use crate::app::App;
use crate::budget::{self, Limits};
use crate::children::Offered;
use crate::verbs;
use crate::verbs::{parse_args, VerbError};

pub const DEFAULT_BUDGET_MS: u64 = 180_000;
pub const MAX_BUDGET_MS: u64 = 300_000;
/// How long a body that went on in the background may run before it is interrupted.
pub const BACKGROUND_LIFETIME: Duration = Duration::from_secs(3600);

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RunCodeArgs {
    /// The body of an async function. `return` gives the result; every verb is `await gm.<verb>(args)`.
    pub code: String,
    /// Budget in milliseconds (default 180000, at most 300000).
    pub timeout_ms: Option<u64>,
    /// Bytes of content this call's reply may carry (default 80000, or the server's
    /// --max-result-bytes; at least 1000, at most its --max-result-bytes-ceiling, 1000000 by
    /// default). A bigger result is cut as valid JSON, the largest parts first, and kept whole
    /// in the file its `cut.spill` names.
    pub max_result_bytes: Option<u64>,
}

/// run_code's arguments, checked.
pub struct Parsed {
    pub code: String,
    /// How long the call waits for the body before it goes on in the background.
    pub budget: Duration,
    /// The reply's budget in bytes.
    pub max_result_bytes: usize,
}

pub fn parse_run_code(args: &RawValue, limits: &Limits) -> Result<Parsed, VerbError> {
    let args: RunCodeArgs = parse_args(args)?;
    let ms = args.timeout_ms.unwrap_or(DEFAULT_BUDGET_MS);
    if ms == 0 || ms > MAX_BUDGET_MS {
        return Err(VerbError::InvalidArgs(format!("timeoutMs must be between 1 and {MAX_BUDGET_MS} (got {ms})")));
    }
    let max_result_bytes = limits.for_call(args.max_result_bytes).map_err(|e| VerbError::InvalidArgs(e.to_string()))?;
    Ok(Parsed { code: args.code, budget: Duration::from_millis(ms), max_result_bytes })
}

/// Runs a body. One still running at its budget goes on in the background as a job
/// (`body-<n>`): the call returns at once with its name, and `job_status` reports its result.
pub async fn run_code(
    app: &App,
    parsed: Parsed,
    body: u64,
    cancel: CancelToken,
    scope: Scope,
    consent: Option<crate::trust::ask::Asker>,
) -> Result<ToolOutput, Value> {
    let Parsed { code, budget, max_result_bytes } = parsed;
    // Shells the body starts are stopped with it; its calls are logged as the session's.
    let ctx = app.ctx.for_call(cancel.clone(), Some(scope.clone()));
    let host = Arc::new(crate::js::Host::new(ctx, body, consent));
    let lines: Vec<String> = code.lines().map(str::to_owned).collect();
    let summary = code.clone();
    let run = Run { id: body, body: code, budget: BACKGROUND_LIFETIME, host, cancel: cancel.clone() };
    let engines = app.js.clone();
    let mut pending = Box::pin(async move { engines.run(run).await });
    let started_ms = gm_actors::clock::now_ms();
    tokio::select! {
        outcome = &mut pending => {
            let mut outcome = outcome;
            let mut shaped = shape(outcome.as_ref(), &lines);
            // A reply over its budget keeps a long console's head and tail (the rest of the cut
            // is the reply's, in `server/call.rs`, which cannot tell a console from an array).
            if let Ok(o) = &mut outcome {
                let cap = (max_result_bytes / 4).saturating_sub(CONSOLE_NOTE_ROOM);
                if budget::console_bytes(&o.console) > cap && reply_bytes(&shaped) > max_result_bytes {
                    cap_console(app, o, cap).await;
                    shaped = shape(outcome.as_ref(), &lines);
                }
            }
            let (value, extra) = shaped?;
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
        let mut result = shape(outcome.as_ref(), &lines).map(|(v, _)| v["result"].clone());
        match &mut result {
            Ok(v) | Err(v) => secrets.redact_value(v),
        }
        let outcome = if result.is_ok() { "ok" } else { "error" };
        if let Some(log) = &log {
            let done =
                Event::new("job", json!({ "name": finished, "kind": "body", "what": "done", "outcome": outcome }));
            log.do_send(done.in_scope(Some(&scope)));
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

/// Room under a console's cap for the line that says what was cut and `console:\n`.
const CONSOLE_NOTE_ROOM: usize = 256;

/// Bytes of content a shaped body's reply carries: the value's JSON twice (the text block and
/// `structuredContent`, as `protocol::mcp::content_bytes` counts an object) and the console's
/// text block; an error is the value `{ "error": ... }`.
fn reply_bytes(shaped: &Result<(Value, Option<String>), Value>) -> usize {
    let json_len = |v: &Value| serde_json::to_string(v).map_or(0, |t| t.len());
    match shaped {
        Ok((value, extra)) => 2 * json_len(value) + extra.as_ref().map_or(0, String::len),
        Err(error) => 2 * (json_len(error) + r#"{"error":}"#.len()),
    }
}

/// A body's console over `cap` bytes (about a quarter of the reply's budget: the console is in
/// the reply twice, as the `console` lines and as a text block, and the result needs the rest)
/// keeps its first and last lines, as a shell's output does, with a line between them saying
/// how much was cut and where the whole console is.
async fn cap_console(app: &App, outcome: &mut Outcome, cap: usize) {
    if budget::console_bytes(&outcome.console) <= cap {
        return;
    }
    let whole: String = outcome.console.iter().map(|l| format!("[{}] {}\n", l.level, l.text)).collect();
    // The reply is redacted later; the file is written now.
    let whole = app.ctx.secrets.get().redactor.redact(&whole);
    let (state_dir, workspace) = (app.ctx.state_dir.clone(), app.ctx.workspace.clone());
    let saved =
        tokio::task::spawn_blocking(move || super::spill(&state_dir, &workspace, "console", ".txt", whole.as_bytes()))
            .await
            .unwrap_or_else(|e| Err(e.to_string()));
    match budget::cut_console(std::mem::take(&mut outcome.console), cap) {
        Ok(lines) => outcome.console = lines,
        Err(cut) => {
            let whole_is = match saved {
                Ok(path) => format!("the whole console is in {path}"),
                Err(e) => format!("it could not be saved: {e}"),
            };
            let text = format!("…[cut {} bytes of console output; {whole_is}]", budget::grouped(cut.bytes));
            outcome.console = cut.head;
            outcome.console.push(ConsoleLine { level: "gm".into(), text });
            outcome.console.extend(cut.tail);
        }
    }
}

/// A finished body as a tool result: its value and console, or a structured error.
fn shape(outcome: Result<&Outcome, &actix::MailboxError>, lines: &[String]) -> Result<(Value, Option<String>), Value> {
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
    match &outcome.result {
        Ok(result) => Ok((json!({ "result": result, "console": console, "ms": ms }), console_text)),
        Err(e) => {
            let mut err = json!({ "code": js_error_code(e), "message": e.to_string(), "console": console });
            if let JsError::Thrown { name, message, stack, line, details } = e {
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

/// run_code's description: the body's rules and every verb and child tool it can call, and
/// the child servers still starting.
pub fn run_code_description(offered: &Offered) -> String {
    let children = &offered.tools;
    let mut d = String::from(
        "Run an async JavaScript body (QuickJS) and return its result. `return` gives the result; \
         console.log/error are captured; a throw comes back as an error with its stack and the line in the body. \
         Budget 180000 ms by default (timeoutMs, at most 300000); a body still running at its budget goes on in the background. \
         The reply carries at most 80000 bytes unless the server or maxResultBytes says otherwise: a bigger result is cut as valid JSON, the largest strings and arrays first, \
         and kept whole in the file its cut.spill names (.gm/out/, read it with gm.read_file): return summaries, not everything. \
         require() and import() load files relative to the workspace. \
         Every verb is an async function on `gm`, admitted like a tool call (a shell runs alone):\n",
    );
    for v in verbs::registry() {
        d.push_str(&format!("- gm.{}(args): {}\n", v.name, v.description));
    }
    if !children.is_empty() {
        d.push_str("Tools of the child MCP servers gm started (the child's result comes back as it sent it; isError: true throws):\n");
        for t in children {
            let first = t.description.lines().next().unwrap_or("").trim();
            d.push_str(&format!("- gm.{}(args): {} [{}]\n", t.name, first, t.server));
        }
    }
    if !offered.starting.is_empty() {
        d.push_str(&format!(
            "Child MCP servers still starting (their tools are listed once they have started; a call to gm.<server>_<tool> waits for its server): {}\n",
            offered.starting.join(", ")
        ));
    }
    d.push_str(
        "- gm.verbs(): every verb with its description and argument schema.\n\
         - gm.try(fn): runs fn and returns its value, or { ok: false, error } instead of throwing.\n\
         Example: const f = await gm.read_file({ path: 'README.md' }); return f.totalLines;",
    );
    d
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
