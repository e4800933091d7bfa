//! The bridge between run_code bodies and what they call: the [`JsHost`] the JsEngine calls
//! for every `gm.<name>(args)` — a native verb from the registry, or a child MCP server's tool.
//! Each call is logged as a `code-call` event.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use futures::future::BoxFuture;
use gm_actors::js_engine::{null_json, JsHost};
use gm_actors::scheduler::Pool;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::children::ChildTool;
use crate::trust::ask::{AskConsent, Asker, Consent};
use crate::verbs::{self, Ctx, Json, VerbError};

/// The fields of a `code-call` event, written to the log without building a JSON value.
#[derive(serde::Serialize)]
struct CodeCallFields<'a> {
    verb: &'a str,
    /// For a child server's tool: the server and the tool's own name.
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool: Option<&'a str>,
    args: &'a RawValue,
    outcome: &'static str,
    ms: f64,
    #[serde(rename = "inFlight")]
    in_flight: usize,
    body: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
    /// Files outside the workspace written through a link (see `Ctx::wrote_through_link`).
    #[serde(rename = "wroteOutside", skip_serializing_if = "<[String]>::is_empty")]
    wrote_outside: &'a [String],
    /// The call's live `execute_tool` span (a traceparent) while export is on, so that
    /// `gm otel-export` of this log sends it with the same ids.
    #[serde(skip_serializing_if = "Option::is_none")]
    span: Option<&'a str>,
}

pub struct Host {
    ctx: Ctx,
    /// The run_code body this host serves, for the log.
    body: u64,
    /// The session's way to ask its user whether a workspace server may start.
    consent: Option<Asker>,
    /// The run_code call's span while export is on: each `gm.*` call's span hangs under it.
    span: Option<opentelemetry::Context>,
}

impl Host {
    /// Made while the run_code call runs, so its span is the current one.
    pub fn new(ctx: Ctx, body: u64, consent: Option<Asker>) -> Self {
        Self { ctx, body, consent, span: crate::telemetry::current_parent() }
    }
}

/// A child tool for `gm.<name>`: a started server's (waiting for one that is starting), one
/// the user approved with `gm trust`, or — when the session can ask its user and they accept —
/// one approved now. Waiting stops when the body's call is cancelled.
async fn child_tool(ctx: &Ctx, name: &str, consent: Option<&Asker>) -> Result<Option<ChildTool>, VerbError> {
    if let Some(tool) = ctx.children.find_or_start(name, &ctx.cancel).await? {
        return Ok(Some(tool));
    }
    let Some(pending) = ctx.children.waiting_for(name) else { return Ok(None) };
    let Some(consent) = consent else { return Ok(None) };
    let ask = consent.to.send(AskConsent { pending: pending.clone(), call: consent.call.clone() });
    // The user may take a while to answer; a cancelled body stops waiting.
    let asked = tokio::select! {
        asked = ask => asked.ok(),
        () = ctx.cancel.cancelled() => return Err(VerbError::Cancelled),
    };
    if asked != Some(Consent::Approved) {
        return Ok(None);
    }
    if let Err(e) = ctx.children.approve(&pending.name) {
        ctx.log(gm_actors::log_writer::Event::new(
            "consent",
            json!({ "server": pending.name, "answer": "approved", "failed": e.to_string() }),
        ));
        return Ok(None);
    }
    ctx.children.find_or_start(name, &ctx.cancel).await
}

/// What `gm.verbs()` says of the native verbs (computed once).
fn native_descriptions() -> &'static [Value] {
    static DESCRIBED: OnceLock<Vec<Value>> = OnceLock::new();
    DESCRIBED.get_or_init(|| {
        verbs::registry()
            .iter()
            .map(|v| json!({ "name": v.name, "family": v.family, "description": v.description, "inputSchema": v.input_schema() }))
            .collect()
    })
}

/// What `gm.verbs()` says of a child server's tool.
pub fn child_description(t: &ChildTool) -> Value {
    json!({
        "name": t.name,
        "family": format!("mcp:{}", t.server),
        "server": t.server,
        "tool": t.tool,
        "description": t.description,
        "inputSchema": t.input_schema,
    })
}

impl JsHost for Host {
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = verbs::registry().iter().map(|v| v.name.to_owned()).collect();
        names.extend(self.ctx.children.tools().into_iter().map(|t| t.name));
        names
    }

    fn describe(&self) -> String {
        let mut all: Vec<Value> = native_descriptions().to_vec();
        all.extend(self.ctx.children.tools().iter().map(child_description));
        Value::Array(all).to_string()
    }

    fn call(&self, name: String, args: Json) -> BoxFuture<'static, Result<Json, Json>> {
        let ctx = self.ctx.clone();
        let body = self.body;
        let consent = self.consent.clone();
        let span = match (&self.span, crate::telemetry::get()) {
            (Some(parent), Some(t)) => Some(t.tool_call(parent, &name)),
            _ => None,
        };
        // The call runs as a task of its own: a body that is interrupted or cancelled stops
        // waiting for it, but the call still ends (a cancellable one at once) and is logged.
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let child =
                if verbs::find(&name).is_some() { Ok(None) } else { child_tool(&ctx, &name, consent.as_ref()).await };
            let (result, in_flight, child, wrote_outside) = match child {
                Ok(None) => {
                    let called = verbs::call(ctx.clone(), &name, &args).await;
                    (called.result, called.in_flight, None, called.wrote_outside)
                }
                Ok(Some(tool)) => {
                    let (result, in_flight) = call_child(&ctx, &tool, &args, span.as_ref().map(|s| s.context())).await;
                    (result, in_flight, Some(tool), Vec::new())
                }
                // Cancelled while its server started, or the server could not start.
                Err(e) => (Err(e), 0, None, Vec::new()),
            };
            let result = result.map_err(|e| match e {
                // A name no verb or tool has may belong to a child server that did not start,
                // or to one that waits for the user's approval.
                VerbError::UnknownVerb(_) => ctx.children.why_missing(&name).unwrap_or(e).to_json(),
                other => other.to_json(),
            });
            let secrets = ctx.secrets.get();
            if ctx.log.is_some() {
                let live_span = span.as_ref().and_then(|s| crate::telemetry::traceparent(s.context()));
                let logged_args = ctx.blobs.args_for_log(&args, &secrets);
                let fields = CodeCallFields {
                    verb: &name,
                    server: child.as_ref().map(|t| t.server.as_str()),
                    tool: child.as_ref().map(|t| t.tool.as_str()),
                    args: &logged_args,
                    outcome: if result.is_ok() { "ok" } else { "error" },
                    ms: millis(started),
                    in_flight,
                    body,
                    error: result.as_ref().err().and_then(|e| e.get("code")),
                    wrote_outside: &wrote_outside,
                    span: live_span.as_deref(),
                };
                ctx.log(secrets.log_event("code-call", &fields));
            }
            let code = result.as_ref().err().and_then(|e| e.get("code")).and_then(Value::as_str).map(str::to_owned);
            let failed = result.is_err();
            let out = match result {
                Ok(value) => Ok(secrets.redact_json(value)),
                Err(mut error) => {
                    secrets.redact_value(&mut error);
                    Err(serde_json::value::to_raw_value(&error).unwrap_or_else(|_| null_json()))
                }
            };
            if let Some(span) = span {
                if span.wants_content() {
                    let shown = match &out {
                        Ok(v) | Err(v) => v.get(),
                    };
                    span.content(ctx.blobs.args_for_log(&args, &secrets).get(), shown);
                }
                span.end(code.as_deref().or(failed.then_some("error")));
            }
            out
        });
        Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                let error = json!({ "code": "internal", "message": format!("the call failed: {e}") });
                Err(serde_json::value::to_raw_value(&error).unwrap_or_else(|_| null_json()))
            })
        })
    }

    fn base_dir(&self) -> PathBuf {
        self.ctx.workspace.to_path_buf()
    }
}

/// A child tool's call, admitted like a verb's: its result as the child sent it.
async fn call_child(
    ctx: &Ctx,
    tool: &ChildTool,
    args: &RawValue,
    span: Option<&opentelemetry::Context>,
) -> (Result<Json, VerbError>, usize) {
    let permit = tokio::select! {
        biased;
        () = ctx.cancel.cancelled() => return (Err(VerbError::Cancelled), 0),
        permit = ctx.scheduler.admit(Pool::Verb, false) => permit,
    };
    let in_flight = permit.as_ref().map_or(0, |p| p.in_flight);
    let args: Value = match serde_json::from_str(args.get()) {
        Ok(Value::Null) => json!({}),
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return (Err(VerbError::InvalidArgs("a tool's arguments are an object".into())), in_flight),
        Err(e) => return (Err(VerbError::InvalidArgs(e.to_string())), in_flight),
    };
    let result = ctx.children.call(tool, args, &ctx.cancel, span).await.and_then(|v| verbs::to_json(&v));
    drop(permit);
    (result, in_flight)
}

/// Milliseconds since `t`, to the microsecond.
pub fn millis(t: Instant) -> f64 {
    (t.elapsed().as_micros() as f64) / 1000.0
}
