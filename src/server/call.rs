//! One tools/call, from its arrival to its reply and its `action` event.
//!
//! At arrival (in the server actor, in arrival order) the call is looked up on the surface,
//! entered in the running table with its cancel token, and — for a run-loop tool — its
//! `arrive` changes the run's state. The rest is a future on the server's arbiter: admission
//! (verbs are admitted inside `verbs::call`, run-loop tools here, in their pool), the call,
//! progress notifications, the action event and the reply line.

use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use futures::future::Either;
use futures::FutureExt;
use gm_actors::cancel::CancelToken;
use gm_actors::log_writer::Scope;
use gm_actors::transport::Send as SendLine;
use opentelemetry::context::FutureExt as _;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::{surface, Later, Running, Server};
use crate::app::{App, Conn};
use crate::budget;
use crate::js::millis;
use crate::protocol::jsonrpc::{self, RpcError};
use crate::protocol::mcp::{self, Fitted};
use crate::run::{self, ToolFuture, ToolOutput};
use crate::telemetry;
use crate::verbs::{self, Json, Traits, VerbError};

/// The fields of a call's `action` event, written to the log without building a JSON value.
#[derive(serde::Serialize)]
struct ActionFields<'a> {
    tool: &'a str,
    id: &'a Value,
    args: &'a RawValue,
    outcome: &'static str,
    ms: f64,
    #[serde(rename = "inFlight")]
    in_flight: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracestate: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    baggage: Option<&'a Value>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cancelled: bool,
    /// Files outside the workspace written through a link (see `Ctx::wrote_through_link`).
    #[serde(rename = "wroteOutside", skip_serializing_if = "<[String]>::is_empty")]
    wrote_outside: &'a [String],
    /// gm's own span for the call, as a W3C traceparent, while export is on: its trace is the
    /// host's when the host sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    span: Option<&'a str>,
}

/// What a call runs, decided at its arrival.
enum Work {
    Verb,
    /// A run-loop tool's rest, the pool whose slot it takes, and the reply budget it asked for.
    Loop(ToolFuture, gm_actors::scheduler::Pool, Option<usize>),
}

impl Server {
    /// A call's arrival. Everything that depends on arrival order is settled here, before the
    /// call's future first runs: the read gate, the run's state, and the call's entry in the
    /// running table, so a cancel that arrives in the same read as its call finds it.
    pub(super) fn start_call(&mut self, call: mcp::ToolCall) -> Later {
        let span = self.request_span(&call.id, "tools/call", Some(&call.name), call.meta.as_ref());
        let Some(traits) = surface::traits(self.conn.surface, &call.name) else {
            let err = RpcError::invalid_params(format!("unknown tool: {}", call.name))
                .with_data(json!({ "surface": self.conn.surface.as_str() }));
            if let Some(span) = span {
                span.end(telemetry::Outcome::RpcError(err.code));
            }
            let reply = jsonrpc::error(&call.id, &err).to_string();
            return Later { future: Box::pin(futures::future::ready(Some(reply))), call: None };
        };
        let cancel = CancelToken::default();
        let key = id_key(&call.id);
        let running = if traits.cancellable {
            Running::Cancellable(cancel.clone())
        } else {
            Running::Uncancellable { tool: call.name.clone() }
        };
        self.session.running.insert(key.clone(), running);
        self.session.run.arriving.clone_from(&key);
        let work = match run::loop_tool(&call.name) {
            Some(tool) => {
                let arrived = (tool.arrive)(&self.app, &mut self.session.run, &call.args, cancel.clone());
                Work::Loop(arrived.rest, tool.pool, arrived.max_result_bytes)
            }
            None => Work::Verb,
        };
        // The run the call belongs to: the one current once it arrived (a next_context after a
        // finish starts a new one).
        let scope = self.session.run.scope().clone();
        let future = call_tool(self.app.clone(), self.conn.clone(), call, traits, work, cancel, scope, span);
        Later { future: Box::pin(future), call: Some(key) }
    }
}

/// The rest of one call: run it, log its action event, build its reply line.
#[allow(clippy::too_many_arguments)] // each is the call's own, moved in once from its arrival
async fn call_tool(
    app: Rc<App>,
    conn: Rc<Conn>,
    call: mcp::ToolCall,
    traits: Traits,
    work: Work,
    cancel: CancelToken,
    scope: Scope,
    mut span: Option<telemetry::RequestSpan>,
) -> Option<String> {
    let mcp::ToolCall { id, name, args, meta, modern } = call;
    let budget = match &work {
        Work::Loop(_, _, Some(asked)) => *asked,
        _ => app.budget.max_result_bytes,
    };
    let started = Instant::now();
    let ticker = traits.progress.then(|| progress_ticker(&app, &conn, meta.as_ref())).flatten();
    // Only a run-loop tool (a run_code body) makes spans of its own: a verb's call does not
    // pay for making its span current at every poll.
    let parent = span.as_ref().filter(|_| matches!(work, Work::Loop(..))).map(|s| s.context().clone());
    let run = run_work(&app, &name, &args, work, cancel.clone(), &scope);
    // What the call runs sees its span as current: a body's `gm.*` calls hang under it.
    let run = match parent {
        Some(parent) => Either::Left(run.with_context(parent)),
        None => Either::Right(run),
    };
    let (outcome, in_flight, wrote_outside) =
        std::panic::AssertUnwindSafe(run).catch_unwind().await.unwrap_or_else(|panic| {
            (
                Err(VerbError::Internal(format!("{name} panicked: {}", verbs::panic_message(&panic))).to_json()),
                0,
                Vec::new(),
            )
        });
    if let Some(t) = ticker {
        t.abort();
    }
    let was_cancelled = cancel.is_cancelled();
    // What the call started and left running ends with it, unless the call handed it to the
    // background on purpose.
    if !outcome.as_ref().is_ok_and(|o| o.detached) {
        cancel.cancel();
    }

    let secrets = app.ctx.secrets.get();
    // Long strings in the arguments (a file's content) go to the blob store, not the line.
    let logged_args = app.ctx.blobs.args_for_log(&args, &secrets);
    let trace = |key: &str| meta.as_ref().and_then(|m| m.get(key));
    let span_id = span.as_ref().and_then(telemetry::RequestSpan::traceparent);
    let fields = ActionFields {
        tool: &name,
        id: &id,
        args: &logged_args,
        outcome: if outcome.is_ok() { "ok" } else { "error" },
        ms: millis(started),
        in_flight,
        error: outcome.as_ref().err().and_then(|e| e.get("code")),
        traceparent: trace("traceparent"),
        tracestate: trace("tracestate"),
        baggage: trace("baggage"),
        cancelled: was_cancelled,
        wrote_outside: &wrote_outside,
        span: span_id.as_deref(),
    };
    // Only a span needs it after the event is written.
    let error_code = span.as_ref().and(fields.error).and_then(Value::as_str).map(str::to_owned);
    if let Some(log) = &app.ctx.log {
        log.do_send(secrets.log_event("action", &fields).in_scope(Some(&scope)));
    }
    // A cancelled request gets no answer (MCP: the receiver should not respond).
    if was_cancelled {
        return None;
    }
    let reply = match outcome {
        Ok(ToolOutput { value, extra, .. }) => {
            let value = secrets.redact_json(value);
            let extra = extra.map(|t| secrets.redactor.redact(&t));
            Reply { id, value, is_error: false, run: scope.run.clone(), extra, modern }
        }
        Err(mut error) => {
            secrets.redact_value(&mut error);
            // A JSON value always serializes; the fallback keeps the reply coming regardless.
            let value = serde_json::value::to_raw_value(&json!({ "error": error }))
                .unwrap_or_else(|_| gm_actors::js_engine::null_json());
            Reply { id, value, is_error: true, run: scope.run.clone(), extra: None, modern }
        }
    };
    if let Some(span) = &mut span {
        span.content(logged_args.get(), reply.value.get());
    }
    let outcome =
        if reply.is_error { telemetry::Outcome::ToolError(error_code.as_deref()) } else { telemetry::Outcome::Ok };
    let line = reply_line(&app, reply, budget).await;
    if let Some(span) = span {
        span.end(outcome);
    }
    Some(line)
}

/// A call's reply before it is written: the value (redacted) and the second text block.
struct Reply {
    id: Value,
    value: Json,
    is_error: bool,
    run: Arc<str>,
    extra: Option<String>,
    modern: bool,
}

/// The reply line, kept to `budget` bytes of content (`crate::budget`): this is the one place
/// every tool's reply passes, on every surface and transport. A reply that fits is written as
/// it always was; a bigger one is fitted on a blocking thread, since cutting a 10 MB value and
/// writing its spill file are milliseconds the arbiter's other calls must not wait.
async fn reply_line(app: &App, reply: Reply, budget: usize) -> String {
    if mcp::content_bytes(&reply.value, reply.extra.as_deref()) <= budget {
        let Reply { id, value, is_error, run, extra, modern } = &reply;
        return mcp::tool_result_line(id, value, *is_error, run, extra.as_deref(), *modern);
    }
    let (id, run, modern) = (reply.id.clone(), reply.run.clone(), reply.modern);
    let (state_dir, workspace) = (app.ctx.state_dir.clone(), app.ctx.workspace.clone());
    match tokio::task::spawn_blocking(move || fit(reply, budget, &state_dir, &workspace)).await {
        Ok(line) => line,
        Err(e) => {
            // Never the whole value instead: a reply over its budget is what this prevents.
            let error = json!({ "error": { "code": "internal", "message": format!("the reply could not be cut to its budget: {e}") } });
            mcp::tool_result_line(&id, &run::raw(&error), true, &run, None, modern)
        }
    }
}

/// A reply over its budget, fitted. A successful object that fits once keeps it whole in
/// `structuredContent`, the text block becoming a summary that points there (hosts that know
/// structured content show the model that alone). Otherwise the whole value goes to a new file
/// in `.gm/out/` and the reply carries it cut to what the budget leaves, with
/// `cut: { bytes, spill }`: in `structuredContent` under a summary for a successful object; as
/// both blocks for an error object (some hosts show only an error's text); as the text block,
/// with the summary after it, for a value that is no object.
fn fit(reply: Reply, budget: usize, state_dir: &Path, workspace: &Path) -> String {
    let Reply { id, value, is_error, run, mut extra, modern } = reply;
    let json = value.get().trim();
    let object = json.starts_with('{');
    // The console's text block (run_code's) takes a quarter at most: its lines are in the value.
    if let Some(e) = &mut extra {
        if e.len() > budget / 4 {
            *e = budget::cut_text(e, budget / 4).into_owned();
        }
    }
    let extra_len = extra.as_ref().map_or(0, String::len);
    let (whole, limit) = (budget::grouped(json.len()), budget::grouped(budget));
    if object && !is_error {
        let summary = format!(
            "The result ({whole} bytes of JSON) is in structuredContent only: this reply's budget of {limit} bytes does not hold it twice."
        );
        if json.len() + extra_len + summary.len() <= budget {
            let fitted = Fitted { summary: Some(&summary), ..Fitted::default() };
            return mcp::tool_result_line_fitted(&id, &value, false, &run, extra.as_deref(), modern, fitted);
        }
    }
    let spill = run::spill(state_dir, workspace, "result", ".json", json.as_bytes());
    let whole_is = match &spill {
        Ok(path) => format!("the whole value is in {path} (cut.spill), which read_file reads"),
        Err(e) => format!("the whole value could not be saved: {e}"),
    };
    let summary = |holder: &str| {
        format!(
            "The result ({whole} bytes of JSON) is over this reply's budget of {limit} bytes: {holder} holds it cut as valid JSON, the largest strings and arrays first, each cut marked …[cut N bytes] or …[cut N items]; {whole_is}."
        )
    };
    let cut_info = |bytes: usize| {
        let mut info = json!({ "bytes": bytes, "spill": spill.as_ref().ok() });
        if let Err(e) = &spill {
            info["spillError"] = json!(e);
        }
        info.to_string()
    };
    // An error object is written twice (the text block and structuredContent); every other
    // value goes with the summary, counted at its longest.
    let (copies, text) = if object && is_error { (2, 0) } else { (1, summary("the first text block").len()) };
    let room = budget.saturating_sub(extra_len + text) / copies;
    // Room for the `cut` member, counted with the most bytes it can say.
    let reserve = if object { r#","cut":"#.len() + cut_info(json.len()).len() } else { 0 };
    let cut = budget::cut_json(json, room.saturating_sub(reserve));
    let info = cut_info(json.len().saturating_sub(cut.len()));
    if let Some(t) = crate::telemetry::get() {
        t.bytes_cut(json.len().saturating_sub(cut.len()) as u64);
    }
    // What was cut is an object unless it could not be read as one (it is then its text).
    let object = cut.starts_with('{');
    let cut = if object { budget::with_member(&cut, "cut", &info).unwrap_or(cut) } else { cut };
    // The cut always parses; were it not to, its text goes as a string rather than nothing.
    let value = RawValue::from_string(cut).unwrap_or_else(|e| run::raw(&json!(e.to_string())));
    let summary = summary(if object { "structuredContent" } else { "the first text block" });
    let fitted = match (object, is_error) {
        (true, false) => Fitted { summary: Some(&summary), note: None, cut: Some(&info) },
        (true, true) => Fitted { summary: None, note: None, cut: Some(&info) },
        (false, _) => Fitted { summary: None, note: Some(&summary), cut: Some(&info) },
    };
    mcp::tool_result_line_fitted(&id, &value, is_error, &run, extra.as_deref(), modern, fitted)
}

/// Runs a verb (admitted in `verbs::call`) or a run-loop tool's rest (admitted here).
async fn run_work(
    app: &App,
    name: &str,
    args: &RawValue,
    work: Work,
    cancel: CancelToken,
    scope: &Scope,
) -> (Result<ToolOutput, Value>, usize, Vec<String>) {
    match work {
        Work::Verb => {
            let called = verbs::call(app.ctx.for_call(cancel, Some(scope.clone())), name, args).await;
            (called.result.map(ToolOutput::json).map_err(|e| e.to_json()), called.in_flight, called.wrote_outside)
        }
        Work::Loop(rest, pool, _) => {
            let permit = tokio::select! {
                biased;
                () = cancel.cancelled() => return (Err(VerbError::Cancelled.to_json()), 0, Vec::new()),
                permit = app.ctx.scheduler.admit(pool, false) => permit,
            };
            let in_flight = permit.as_ref().map_or(0, |p| p.in_flight);
            let outcome = rest.await;
            drop(permit);
            (outcome, in_flight, Vec::new())
        }
    }
}

/// While a call that reports progress and whose `_meta` has a progressToken runs, sends
/// `notifications/progress` every [`App::progress_every`] with the time it has run.
fn progress_ticker(app: &App, conn: &Conn, meta: Option<&Map<String, Value>>) -> Option<tokio::task::JoinHandle<()>> {
    let token = meta?.get("progressToken")?.clone();
    let out = conn.out.clone();
    let started = Instant::now();
    let every = app.progress_every;
    Some(actix::spawn(async move {
        // The progress is the time the call has run, in seconds, counted in whole intervals so
        // that it increases with every notification, as MCP asks.
        for tick in 1u32.. {
            tokio::time::sleep_until((started + every * tick).into()).await;
            let elapsed = (every * tick).as_secs_f64();
            let note = jsonrpc::notification(
                "notifications/progress",
                json!({ "progressToken": token, "progress": elapsed, "message": format!("running for {elapsed} s") }),
            );
            out.do_send(SendLine(note.to_string()));
        }
    }))
}

/// A request id as a map key: `1` and `"1"` are different ids.
pub(super) fn id_key(id: &Value) -> String {
    id.to_string()
}
