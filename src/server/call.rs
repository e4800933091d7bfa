//! One tools/call, from its arrival to its reply and its `action` event.
//!
//! At arrival (in the server actor, in arrival order) the call is looked up on the surface,
//! entered in the running table with its cancel token, and — for a run-loop tool — its
//! `arrive` changes the run's state. The rest is a future on the server's arbiter: admission
//! (verbs are admitted inside `verbs::call`, run-loop tools here, in their pool), the call,
//! progress notifications, the action event and the reply line.

use std::rc::Rc;
use std::time::Instant;

use futures::FutureExt;
use gm_actors::cancel::CancelToken;
use gm_actors::log_writer::Scope;
use gm_actors::transport::Send as SendLine;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::{surface, Later, Running, Server};
use crate::app::{App, Conn};
use crate::js::millis;
use crate::protocol::jsonrpc::{self, RpcError};
use crate::protocol::mcp;
use crate::run::{self, ToolFuture, ToolOutput};
use crate::verbs::{self, Traits, VerbError};

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
}

/// What a call runs, decided at its arrival.
enum Work {
    Verb,
    /// A run-loop tool's rest, and the pool whose slot it takes.
    Loop(ToolFuture, gm_actors::scheduler::Pool),
}

impl Server {
    /// A call's arrival. Everything that depends on arrival order is settled here, before the
    /// call's future first runs: the read gate, the run's state, and the call's entry in the
    /// running table, so a cancel that arrives in the same read as its call finds it.
    pub(super) fn start_call(&mut self, call: mcp::ToolCall) -> Later {
        let Some(traits) = surface::traits(self.conn.surface, &call.name) else {
            let err = RpcError::invalid_params(format!("unknown tool: {}", call.name))
                .with_data(json!({ "surface": self.conn.surface.as_str() }));
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
                Work::Loop((tool.arrive)(&self.app, &mut self.session.run, &call.args, cancel.clone()), tool.pool)
            }
            None => Work::Verb,
        };
        // The run the call belongs to: the one current once it arrived (a next_context after a
        // finish starts a new one).
        let scope = self.session.run.scope().clone();
        let future = call_tool(self.app.clone(), self.conn.clone(), call, traits, work, cancel, scope);
        Later { future: Box::pin(future), call: Some(key) }
    }
}

/// The rest of one call: run it, log its action event, build its reply line.
async fn call_tool(
    app: Rc<App>,
    conn: Rc<Conn>,
    call: mcp::ToolCall,
    traits: Traits,
    work: Work,
    cancel: CancelToken,
    scope: Scope,
) -> Option<String> {
    let mcp::ToolCall { id, name, args, meta, modern } = call;
    let started = Instant::now();
    let ticker = traits.progress.then(|| progress_ticker(&app, &conn, meta.as_ref())).flatten();
    let run = run_work(&app, &name, &args, work, cancel.clone(), &scope);
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
    };
    if let Some(log) = &app.ctx.log {
        log.do_send(secrets.log_event("action", &fields).in_scope(Some(&scope)));
    }
    // A cancelled request gets no answer (MCP: the receiver should not respond).
    if was_cancelled {
        return None;
    }
    let line = match outcome {
        Ok(ToolOutput { value, extra, .. }) => {
            let value = secrets.redact_json(value);
            let extra = extra.map(|t| secrets.redactor.redact(&t));
            mcp::tool_result_line(&id, &value, false, &scope.run, extra.as_deref(), modern)
        }
        Err(mut error) => {
            secrets.redact_value(&mut error);
            // A JSON value always serializes; the fallback keeps the reply coming regardless.
            let value = serde_json::value::to_raw_value(&json!({ "error": error }))
                .unwrap_or_else(|_| gm_actors::js_engine::null_json());
            mcp::tool_result_line(&id, &value, true, &scope.run, None, modern)
        }
    };
    Some(line)
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
        Work::Loop(rest, pool) => {
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
