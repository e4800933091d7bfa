//! Method dispatch: one JSON-RPC message in, at most one reply out.
//!
//! The server is an actor on the main arbiter. Quick methods answer inline; a tools/call runs
//! as a future on the same arbiter (no cross-thread hop), admitted by the Scheduler, and its
//! reply goes out by id as soon as it is done, so parallel calls overlap.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::{join_all, LocalBoxFuture};
use futures::FutureExt;
use gm_actors::jobs::KillForeground;
use gm_actors::js_engine::{CancelToken, JsEngines};
use gm_actors::log_writer::{Event, Flush, SetRun};
use gm_actors::transport::{Incoming, Send as SendLine, StdoutWriter};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use crate::js::millis;
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::protocol::mcp;
use crate::run::{self, ToolOutput};
use crate::run_state::{RunState, RunStateFile};
use crate::skills;
use crate::surface::{self, Surface};
use crate::verbs::{self, Ctx, Traits, VerbError};

/// How long calls still running when stdin closes may take to reply.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(700);

/// What every call can use; fixed for the life of the server.
pub struct App {
    pub ctx: Ctx,
    pub surface: Surface,
    /// Where the run's state is kept between gm processes.
    pub run_file: RunStateFile,
    /// The step budget of a new run, unless its first step sets one.
    pub step_budget: u64,
    pub js: JsEngines,
    pub out: Addr<StdoutWriter>,
    pub max_line_bytes: usize,
    pub page_size: usize,
    /// How often a long call with a progressToken reports progress.
    pub progress_every: Duration,
}

/// Per-connection state. Owned by the server actor; its futures (same thread) borrow it
/// briefly and never across an await.
struct Session {
    protocol: Option<&'static str>,
    skill_read: bool,
    run: RunState,
    /// The step an earlier gm had reached, until the first step this gm serves says so.
    resumed: Option<u64>,
    next_body: u64,
    /// Calls in progress, by request id, and how to cancel them.
    running: HashMap<String, Running>,
    /// gm is stopping: a second stop is ignored.
    stopping: bool,
}

#[derive(Clone)]
enum Running {
    Cancellable(CancelToken),
    Uncancellable { tool: String },
}

pub struct Server {
    app: Rc<App>,
    session: Rc<RefCell<Session>>,
}

impl Server {
    /// A server for `run`; `resumed` when an earlier gm left it unfinished.
    pub fn new(app: App, run: RunState, resumed: bool) -> Self {
        let session = Session {
            protocol: None,
            skill_read: false,
            resumed: resumed.then_some(run.step),
            run,
            next_body: 0,
            running: HashMap::new(),
            stopping: false,
        };
        Self { app: Rc::new(app), session: Rc::new(RefCell::new(session)) }
    }

    fn send(&self, v: Value) {
        self.app.out.do_send(SendLine(v.to_string()));
    }

    fn on_line(&self, line: String) {
        // Most lines are tools/calls: those are read without building JSON values.
        if let Some(call) = mcp::parse_tool_call(&line) {
            return self.spawn_reply(self.start_call(call));
        }
        let v: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let err = RpcError::new(jsonrpc::PARSE_ERROR, format!("parse error: {e}"));
                return self.send(jsonrpc::error(&Value::Null, &err));
            }
        };
        if let Value::Array(items) = v {
            let protocol = self.session.borrow().protocol;
            if protocol != Some(mcp::BATCH_VERSION) || items.is_empty() {
                let why = if items.is_empty() {
                    "an empty batch is not a request".to_owned()
                } else {
                    format!(
                        "JSON-RPC batches are only part of protocol {}; this connection speaks {}",
                        mcp::BATCH_VERSION,
                        protocol.unwrap_or("no version yet (initialize first)")
                    )
                };
                return self.send(jsonrpc::error(&Value::Null, &RpcError::new(jsonrpc::INVALID_REQUEST, why)));
            }
            let replies: Vec<_> = items.into_iter().map(|m| self.dispatch(m).into_future()).collect();
            let out = self.app.out.clone();
            actix::spawn(async move {
                let replies: Vec<String> = join_all(replies).await.into_iter().flatten().collect();
                if !replies.is_empty() {
                    out.do_send(SendLine(format!("[{}]", replies.join(","))));
                }
            });
            return;
        }
        match self.dispatch(v) {
            Reply::Now(Some(r)) => self.send(r),
            Reply::Now(None) => {}
            Reply::Later(fut) => self.spawn_reply(fut),
        }
    }

    /// Sends a call's reply line when it is ready.
    fn spawn_reply(&self, reply: LocalBoxFuture<'static, Option<String>>) {
        let out = self.app.out.clone();
        actix::spawn(async move {
            if let Some(line) = reply.await {
                out.do_send(SendLine(line));
            }
        });
    }

    /// Starts one tools/call. Everything that depends on arrival order is settled here, before
    /// the call's task first runs: the read gate (a run_code sent before the skill read is
    /// refused even if it would start after it) and the call's entry in the running table, so
    /// a cancel that arrives in the same read as its call finds it.
    fn start_call(&self, call: mcp::ToolCall) -> LocalBoxFuture<'static, Option<String>> {
        let Some(traits) = surface::traits(self.app.surface, &call.name) else {
            let err = RpcError::invalid_params(format!("unknown tool: {}", call.name))
                .with_data(json!({ "surface": self.app.surface.as_str() }));
            let reply = jsonrpc::error(&call.id, &err).to_string();
            return Box::pin(futures::future::ready(Some(reply)));
        };
        let cancel = CancelToken::default();
        let gate_open = {
            let mut s = self.session.borrow_mut();
            let running = if traits.cancellable {
                Running::Cancellable(cancel.clone())
            } else {
                Running::Uncancellable { tool: call.name.clone() }
            };
            s.running.insert(id_key(&call.id), running);
            s.skill_read
        };
        Box::pin(call_tool(self.app.clone(), self.session.clone(), call, traits, cancel, gate_open))
    }

    /// Handles one message. Quick methods answer now; tools/call answers later.
    fn dispatch(&self, v: Value) -> Reply {
        match jsonrpc::classify(v) {
            Message::Invalid { id, error } => Reply::Now(Some(jsonrpc::error(&id, &error))),
            Message::Response => Reply::Now(None),
            Message::Notification { method, params } => {
                self.on_notification(&method, &params);
                Reply::Now(None)
            }
            Message::Request { id, method, params } => {
                if method == "tools/call" {
                    return match mcp::ToolCall::from_params(id.clone(), &params) {
                        Ok(call) => Reply::Later(self.start_call(call)),
                        Err(e) => Reply::Now(Some(jsonrpc::error(&id, &e))),
                    };
                }
                if method == "tools/list" && self.app.surface == Surface::Code {
                    // run_code's description names the child servers' tools: wait until every
                    // server has started or failed (each within its startup budget).
                    let (app, session) = (self.app.clone(), self.session.clone());
                    return Reply::Later(Box::pin(async move {
                        app.ctx.children.ready().await;
                        let server = Server { app, session };
                        let reply = match server.on_request(&method, params) {
                            Ok(result) => jsonrpc::result(&id, result),
                            Err(e) => jsonrpc::error(&id, &e),
                        };
                        Some(reply.to_string())
                    }));
                }
                let reply = match self.on_request(&method, params) {
                    Ok(result) => jsonrpc::result(&id, result),
                    Err(e) => jsonrpc::error(&id, &e),
                };
                Reply::Now(Some(reply))
            }
        }
    }

    fn on_notification(&self, method: &str, params: &Value) {
        if method != "notifications/cancelled" {
            return;
        }
        let Some(request) = params.get("requestId") else { return };
        let running = self.session.borrow().running.get(&id_key(request)).cloned();
        match running {
            Some(Running::Cancellable(token)) => token.cancel(),
            Some(Running::Uncancellable { tool }) => self.log(
                "cancel-ignored",
                json!({ "requestId": request, "tool": tool, "reason": params.get("reason"), "why": "this call cannot be cancelled; it runs on" }),
            ),
            None => self.log(
                "cancel-ignored",
                json!({ "requestId": request, "reason": params.get("reason"), "why": "no call with this id is running" }),
            ),
        }
    }

    /// The child servers' tools, which only the code surface serves.
    fn code_surface_children(&self) -> Vec<crate::children::ChildTool> {
        match self.app.surface {
            Surface::Code => self.app.ctx.children.tools(),
            Surface::Tools => Vec::new(),
        }
    }

    fn log(&self, kind: &str, fields: Value) {
        if let Some(log) = &self.app.ctx.log {
            log.do_send(Event::new(kind, fields));
        }
    }

    fn on_request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "initialize" => {
                let requested = params.get("protocolVersion").and_then(Value::as_str);
                let version = mcp::negotiate(requested);
                self.session.borrow_mut().protocol = Some(version);
                self.log(
                    "initialize",
                    json!({ "requested": requested, "protocolVersion": version, "client": params.get("clientInfo") }),
                );
                Ok(json!({
                    "protocolVersion": version,
                    "capabilities": mcp::capabilities(),
                    "serverInfo": mcp::server_info(),
                    "instructions": instructions(),
                }))
            }
            "server/discover" => Ok(json!({
                "supportedVersions": mcp::PROTOCOL_VERSIONS,
                "capabilities": mcp::capabilities(),
                "serverInfo": mcp::server_info(),
                "instructions": instructions(),
            })),
            "ping" | "logging/setLevel" => Ok(json!({})),
            "tools/list" => {
                let tools = surface::tools(self.app.surface, &self.code_surface_children());
                let (page, next) = paginate(tools, &params, self.app.page_size)?;
                Ok(with_cursor(json!({ "tools": page }), next))
            }
            "resources/list" => {
                let resources: Vec<Value> = self
                    .app
                    .ctx
                    .skills
                    .files()
                    .into_iter()
                    .map(|f| {
                        json!({
                            "uri": f.uri,
                            "name": format!("{}/{}", f.skill, f.file),
                            "mimeType": "text/markdown",
                            "size": f.size,
                            "_meta": { "digest": f.digest },
                        })
                    })
                    .collect();
                let (page, next) = paginate(resources, &params, self.app.page_size)?;
                Ok(with_cursor(json!({ "resources": page }), next))
            }
            "resources/templates/list" => Ok(json!({ "resourceTemplates": [] })),
            "resources/read" => self.read_resource(&params),
            "prompts/list" => Ok(json!({ "prompts": prompts() })),
            "prompts/get" => self.get_prompt(&params),
            "skills/list" => {
                let skills = &self.app.ctx.skills;
                let entries: Vec<Value> = skills.names().iter().filter_map(|n| skills.entry(n).ok()).collect();
                let (page, next) = paginate(entries, &params, self.app.page_size)?;
                let protocol = self.session.borrow().protocol;
                Ok(mcp::skills_list_result(page, next, protocol))
            }
            "skills/get" => {
                let uri = str_param(&params, "uri")?;
                // SEP-2640: a URI that names no skill this server serves is invalid params.
                let unknown = |why: String| RpcError::invalid_params(why).with_data(json!({ "uri": uri }));
                let skill = uri
                    .strip_prefix("skill://")
                    .and_then(|r| r.strip_suffix("/SKILL.md"))
                    .ok_or_else(|| unknown(format!("not a SKILL.md URI: {uri}")))?;
                let entry = self.app.ctx.skills.entry(skill).map_err(|e| unknown(e.to_string()))?;
                let protocol = self.session.borrow().protocol;
                Ok(mcp::skills_get_result(entry, protocol))
            }
            other => Err(RpcError::new(jsonrpc::METHOD_NOT_FOUND, format!("method not found: {other}"))),
        }
    }

    fn read_resource(&self, params: &Value) -> Result<Value, RpcError> {
        let uri = str_param(params, "uri")?;
        let text =
            self.app.ctx.skills.read(uri).map_err(|e| {
                RpcError::new(jsonrpc::RESOURCE_NOT_FOUND, e.to_string()).with_data(json!({ "uri": uri }))
            })?;
        if uri == "skill://gm/SKILL.md" {
            self.session.borrow_mut().skill_read = true;
            // run_code is open now: have its engines warm by the time it is called.
            self.app.js.start();
        }
        self.log("skill-read", json!({ "uri": uri, "bytes": text.len() }));
        Ok(json!({ "contents": [{ "uri": uri, "mimeType": "text/markdown", "text": text }] }))
    }

    fn get_prompt(&self, params: &Value) -> Result<Value, RpcError> {
        let name = str_param(params, "name")?;
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let (uri, description) = match name {
            "gm" => ("skill://gm/SKILL.md", "Run a task with gm: the loop and the seven rules."),
            "gm-continue" => ("skill://gm-continue/SKILL.md", "Continue a gm run that was handed off."),
            other => return Err(RpcError::invalid_params(format!("unknown prompt: {other}"))),
        };
        let text = self.app.ctx.skills.read(uri).map_err(|e| RpcError::new(jsonrpc::INTERNAL_ERROR, e.to_string()))?;
        let mut body = skills::body(&text).to_owned();
        if name == "gm" {
            if let Some(task) = args.get("task").and_then(Value::as_str).filter(|t| !t.trim().is_empty()) {
                let state = {
                    let mut s = self.session.borrow_mut();
                    s.run.task = Some(task.to_owned());
                    s.run.clone()
                };
                save_run(&self.app, &state);
                body.push_str(&format!("\n\n## Task\n\n{task}\n"));
            }
        }
        Ok(json!({
            "description": description,
            "messages": [{ "role": "user", "content": { "type": "text", "text": body } }],
        }))
    }
}

/// A reply now (a JSON value), or later (a tools/call: its reply line, written as bytes).
enum Reply {
    Now(Option<Value>),
    Later(LocalBoxFuture<'static, Option<String>>),
}

impl Reply {
    fn into_future(self) -> LocalBoxFuture<'static, Option<String>> {
        match self {
            Reply::Now(v) => Box::pin(futures::future::ready(v.map(|v| v.to_string()))),
            Reply::Later(f) => f,
        }
    }
}

impl Actor for Server {
    type Context = Context<Self>;
}

impl Handler<Incoming> for Server {
    type Result = ();
    fn handle(&mut self, msg: Incoming, _: &mut Context<Self>) {
        match msg {
            Incoming::Line(line) => {
                // A bug in one request's handling must not take the connection down.
                let this = std::panic::AssertUnwindSafe(&*self);
                if let Err(panic) = std::panic::catch_unwind(move || this.on_line(line)) {
                    let err = RpcError::new(
                        jsonrpc::INTERNAL_ERROR,
                        format!("internal error: {}", verbs::panic_message(&panic)),
                    );
                    self.send(jsonrpc::error(&Value::Null, &err));
                }
            }
            Incoming::TooLong { bytes } => {
                let err = RpcError::new(
                    jsonrpc::INVALID_REQUEST,
                    format!("message of {bytes} bytes exceeds the limit of {} bytes (--max-line-bytes); it was dropped unread", self.app.max_line_bytes),
                );
                self.send(jsonrpc::error(&Value::Null, &err));
            }
            Incoming::InvalidUtf8 => {
                let err = RpcError::new(jsonrpc::PARSE_ERROR, "parse error: the line is not valid UTF-8");
                self.send(jsonrpc::error(&Value::Null, &err));
            }
            Incoming::Closed => self.shutdown(Stop::StdinClosed),
        }
    }
}

/// Why gm stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub enum Stop {
    /// The client closed stdin: calls still running get a short grace to reply.
    StdinClosed,
    /// A signal (SIGINT, SIGTERM, SIGHUP, by number): what gm started ends now.
    Signal(i32),
}

impl Stop {
    /// The process's exit code: 0 for a closed stdin, 128 + the signal's number for a signal,
    /// as a shell reports a process a signal ended.
    pub fn exit_code(self) -> i32 {
        match self {
            Stop::StdinClosed => 0,
            Stop::Signal(n) => 128 + n,
        }
    }
}

impl Handler<Stop> for Server {
    type Result = ();
    fn handle(&mut self, stop: Stop, _: &mut Context<Self>) {
        self.shutdown(stop);
    }
}

impl Server {
    /// Ends the server: running calls (their bodies and foreground shells) are stopped, the
    /// `stop` event is synced to the log, and the actor system stops with the exit code.
    /// Background jobs outlive gm. A second stop while the first is under way changes nothing.
    fn shutdown(&self, stop: Stop) {
        if std::mem::replace(&mut self.session.borrow_mut().stopping, true) {
            return;
        }
        let log = self.app.ctx.log.clone();
        let session = self.session.clone();
        let jobs = self.app.ctx.jobs.clone();
        let children = self.app.ctx.children.clone();
        actix::spawn(async move {
            let grace = match stop {
                // The client may still read stdout: give calls a moment to reply.
                Stop::StdinClosed => SHUTDOWN_GRACE,
                Stop::Signal(_) => Duration::ZERO,
            };
            let deadline = Instant::now() + grace;
            while !session.borrow().running.is_empty() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let unfinished = {
                let s = session.borrow();
                for running in s.running.values() {
                    if let Running::Cancellable(token) = running {
                        token.cancel();
                    }
                }
                s.running.len()
            };
            // Foreground shells end with gm, whichever call started them, and so do the child
            // servers; background jobs outlive it.
            let _ = jobs.send(KillForeground).await;
            children.stop().await;
            if let Some(log) = log {
                let mut fields = json!({ "reason": stop.reason(), "unfinishedCalls": unfinished });
                if let Stop::Signal(n) = stop {
                    fields["signal"] = json!(gm_actors::sys::signal_name(n));
                }
                log.do_send(Event::new("stop", fields));
                let _ = tokio::time::timeout(Duration::from_millis(500), log.send(Flush)).await;
            }
            System::current().stop_with_code(stop.exit_code());
        });
    }
}

impl Stop {
    fn reason(self) -> &'static str {
        match self {
            Stop::StdinClosed => "stdin closed",
            Stop::Signal(_) => "signal",
        }
    }
}

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
}

/// One tools/call: the call (verbs are admitted inside `verbs::call`, run-loop tools here),
/// its action event, its reply.
async fn call_tool(
    app: Rc<App>,
    session: Rc<RefCell<Session>>,
    call: mcp::ToolCall,
    traits: Traits,
    cancel: CancelToken,
    gate_open: bool,
) -> Option<String> {
    let mcp::ToolCall { id, name, args, meta } = call;
    let key = id_key(&id);
    let started = Instant::now();
    let ticker = traits.progress.then(|| progress_ticker(&app, meta.as_ref())).flatten();
    let run = run_tool(&app, &session, &name, &args, cancel.clone(), gate_open);
    let (outcome, in_flight) = std::panic::AssertUnwindSafe(run).catch_unwind().await.unwrap_or_else(|panic| {
        (Err(VerbError::Internal(format!("{name} panicked: {}", verbs::panic_message(&panic))).to_json()), 0)
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
    session.borrow_mut().running.remove(&key);

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
    };
    if let Some(log) = &app.ctx.log {
        log.do_send(secrets.log_event("action", &fields));
    }
    // A cancelled request gets no answer (MCP: the receiver should not respond).
    if was_cancelled {
        return None;
    }
    let run_id = session.borrow().run.run_id.clone();
    let line = match outcome {
        Ok(ToolOutput { value, extra, .. }) => {
            let value = secrets.redact_json(value);
            let extra = extra.map(|t| secrets.redactor.redact(&t));
            mcp::tool_result_line(&id, &value, false, &run_id, extra.as_deref())
        }
        Err(mut error) => {
            secrets.redact_value(&mut error);
            // A JSON value always serializes; the fallback keeps the reply coming regardless.
            let value = serde_json::value::to_raw_value(&json!({ "error": error }))
                .unwrap_or_else(|_| gm_actors::js_engine::null_json());
            mcp::tool_result_line(&id, &value, true, &run_id, None)
        }
    };
    Some(line)
}

async fn run_tool(
    app: &App,
    session: &RefCell<Session>,
    name: &str,
    args: &RawValue,
    cancel: CancelToken,
    gate_open: bool,
) -> (Result<ToolOutput, Value>, usize) {
    let Some(tool) = surface::loop_tool(name) else {
        let ctx = app.ctx.with_cancel(cancel);
        let called = verbs::call(ctx, name, args).await;
        return (called.result.map(ToolOutput::json).map_err(|e| e.to_json()), called.in_flight);
    };
    let permit = tokio::select! {
        permit = app.ctx.scheduler.admit(tool.pool, false) => permit,
        () = cancel.cancelled() => return (Err(VerbError::Cancelled.to_json()), 0),
    };
    let in_flight = permit.as_ref().map_or(0, |p| p.in_flight);
    let outcome = run_loop_tool(app, session, name, args, cancel, gate_open).await;
    drop(permit);
    (outcome, in_flight)
}

/// A call of one of the run loop's own tools.
async fn run_loop_tool(
    app: &App,
    session: &RefCell<Session>,
    name: &str,
    args: &RawValue,
    cancel: CancelToken,
    gate_open: bool,
) -> Result<ToolOutput, Value> {
    match name {
        surface::NEXT_CONTEXT => {
            let parsed: run::NextContextArgs = verbs::parse_args(args).map_err(|e| e.to_json())?;
            if parsed.step_budget == Some(0) {
                return Err(VerbError::InvalidArgs("stepBudget must be at least 1".into()).to_json());
            }
            let (state, resumed, new_run) = {
                let mut s = session.borrow_mut();
                // The step after a finish starts the next run.
                let new_run = s.run.finished;
                if new_run {
                    s.run = RunState::new(crate::serve::new_run_id(), app.step_budget);
                    s.resumed = None;
                }
                s.run.step += 1;
                if let Some(task) = parsed.task {
                    s.run.task = Some(task);
                }
                if let Some(budget) = parsed.step_budget {
                    s.run.step_budget = budget;
                }
                (s.run.clone(), s.resumed.take(), new_run)
            };
            if new_run {
                if let Some(log) = &app.ctx.log {
                    log.do_send(SetRun(state.run_id.clone()));
                }
            }
            save_run(app, &state);
            run::next_context(app, state, resumed).await.map(|v| ToolOutput::value(&v)).map_err(|e| e.to_json())
        }
        surface::FINISH => {
            let parsed: run::FinishArgs = verbs::parse_args(args).map_err(|e| e.to_json())?;
            let state = {
                let mut s = session.borrow_mut();
                s.run.finished = true;
                s.run.clone()
            };
            save_run(app, &state);
            run::finish(app, parsed, state).await.map(|v| ToolOutput::value(&v)).map_err(|e| e.to_json())
        }
        surface::RUN_CODE => {
            if !gate_open {
                return Err(json!({
                    "code": "skill_not_read",
                    "message": "run_code is closed until this connection has read the gm skill: call resources/read with { \"uri\": \"skill://gm/SKILL.md\" } (ReadMcpResourceTool, server gm), then call run_code again.",
                    "read": { "method": "resources/read", "params": { "uri": "skill://gm/SKILL.md" } },
                }));
            }
            let (code, budget) = run::parse_run_code(args).map_err(|e| e.to_json())?;
            // The body's `gm` names the child servers' tools: wait until they have all started or
            // failed.
            tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(VerbError::Cancelled.to_json()),
                () = app.ctx.children.ready() => {}
            }
            let body = {
                let mut s = session.borrow_mut();
                s.next_body += 1;
                s.next_body
            };
            run::run_code(app, code, budget, body, cancel).await
        }
        other => Err(VerbError::UnknownVerb(other.to_owned()).to_json()),
    }
}

/// While a call that reports progress and whose `_meta` has a progressToken runs, sends
/// `notifications/progress` every [`App::progress_every`] with the elapsed seconds.
fn progress_ticker(app: &App, meta: Option<&Map<String, Value>>) -> Option<tokio::task::JoinHandle<()>> {
    let token = meta?.get("progressToken")?.clone();
    let out = app.out.clone();
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

/// Keeps the run's state for the next gm; a failure is logged, never a failed call.
fn save_run(app: &App, state: &RunState) {
    if let Err(e) = app.run_file.save(state) {
        if let Some(log) = &app.ctx.log {
            log.do_send(Event::new("run-state", json!({ "state": "failed", "error": e.to_string() })));
        }
    }
}

/// A request id as a map key: `1` and `"1"` are different ids.
fn id_key(id: &Value) -> String {
    id.to_string()
}

fn str_param<'a>(params: &'a Value, key: &str) -> Result<&'a str, RpcError> {
    params
        .get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::invalid_params(format!("params.{key} must be a string")))
}

/// Cursor paging over a list: the cursor is the decimal offset of the next page.
fn paginate(items: Vec<Value>, params: &Value, page_size: usize) -> Result<(Vec<Value>, Option<String>), RpcError> {
    let start = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(c)) => c
            .parse::<usize>()
            .ok()
            .filter(|&n| n <= items.len())
            .ok_or_else(|| RpcError::invalid_params(format!("invalid cursor: {c}")))?,
        Some(_) => return Err(RpcError::invalid_params("cursor must be a string")),
    };
    let end = (start + page_size).min(items.len());
    let next = (end < items.len()).then(|| end.to_string());
    Ok((items[start..end].to_vec(), next))
}

fn with_cursor(mut v: Value, next: Option<String>) -> Value {
    if let Some(n) = next {
        v["nextCursor"] = json!(n);
    }
    v
}

fn prompts() -> Value {
    json!([
        {
            "name": "gm",
            "title": "gm: run a task",
            "description": "The gm skill: the loop and the seven rules of a run, with the run's task.",
            "arguments": [{ "name": "task", "description": "The task of the run.", "required": false }],
        },
        {
            "name": "gm-continue",
            "title": "gm: continue a run",
            "description": "Continue a gm run that was handed off.",
            "arguments": [],
        },
    ])
}

fn instructions() -> String {
    "gm is your hands and memory for a long-horizon run. First read the gm skill: resources/read \
     skill://gm/SKILL.md (run_code stays closed until you do). Then call next_context at every step, do \
     the step with run_code (every verb is await gm.<verb>(args)), and end with finish({ gaps })."
        .into()
}
