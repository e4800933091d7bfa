//! The MCP server for one host session (a relay's connection, or stdio with `--no-relay`):
//! JSON-RPC messages in, replies out.
//!
//! A server is an actor on the worker's main arbiter that owns its session and is the only one
//! to change it, in its handlers and in the completions of the calls it spawns (actor futures,
//! so a completion runs with the actor again). Quick methods answer inline; a tools/call runs
//! as a future on the same arbiter (no cross-thread hop) and its reply goes out by id as soon as
//! it is done, so parallel calls overlap. Every session of the workspace has its own server;
//! they share the worker's [`App`] (one log, one scheduler, one index...).
//!
//! - `call`: the tools/call pipeline, from a call's arrival to its reply and action event.
//! - `requests`: the other methods (initialize, lists, resources, prompts, skills).
//! - `stateless`: requests of the stateless revision (2026-07-28) and its questions in results.
//! - [`surface`]: the code and tools surfaces, derived from the registry and the run loop.

mod call;
mod requests;
mod stateless;
pub mod surface;

use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use gm_actors::cancel::CancelToken;
use gm_actors::log_writer::{Event, Flush};
use gm_actors::transport::{Incoming, Send as SendLine};
use serde_json::{json, Value};

use crate::app::{App, Conn};
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::protocol::{mcp, modern};
use crate::run::RunSession;
use crate::telemetry;
use crate::trust::ask::{AskConsent, Consent};
use crate::verbs;

/// How long calls still running when the host's side closes may take to reply.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(700);
/// How long calls still running when the worker stops may take to reply before they are
/// cancelled: a call the session read just before the stop (a signal handled late, under
/// load) is answered rather than lost, and a long one is not kept waiting for.
const STOP_GRACE: Duration = Duration::from_millis(200);
/// How long a session that ends waits for its cancelled calls to finish (and log their events).
const DRAIN_LIMIT: Duration = Duration::from_secs(3);

/// The connection's state, owned by the server actor.
///
/// What is per request and what per connection: a request's era is decided by what that
/// request carries, never by an earlier one — an envelope in `params._meta` makes it a
/// 2026-07-28 request, which brings its own version, capabilities and client
/// ([`stateless`]); none makes it a request of the handshake era, and `initialize` always
/// selects the handshake. So a client may probe with `server/discover` and then `initialize`,
/// and an enveloped request after `initialize` is still served as 2026-07-28. Kept here, per connection, is only what the handshake era
/// needs — the version and capabilities `initialize` settled (`protocol`, `elicitation`) —
/// and what gm keeps per connection in either era: the run and its read gate, the calls
/// running, the questions asked.
struct Session {
    /// The version `initialize` negotiated; `None` before it. Handshake-era requests only:
    /// batches, caching hints, `notifications/tools/list_changed`.
    protocol: Option<&'static str>,
    /// The connection has served a 2026-07-28 request: for its one `initialize` log event and
    /// `gm status`, never to decide how a request is served.
    stateless_seen: bool,
    /// What the client said of itself (in `initialize`, or in the first envelope), for
    /// `gm status`.
    client: Option<Value>,
    run: RunSession,
    /// Calls in progress, by request id, and how to cancel them.
    running: HashMap<String, Running>,
    /// Batches whose replies are still being gathered, by number.
    batches: HashMap<u64, Batch>,
    next_batch: u64,
    /// The session is ending (and why): a second end is ignored.
    ending: Option<End>,
    /// Told when the running table empties while the session ends.
    drained: Vec<futures::channel::oneshot::Sender<()>>,
    opened: Instant,
    /// The signal that ended the session's relay, when one did.
    end_reason: Option<Value>,
    /// [`Server::finish_end`] ran.
    ended: bool,
    /// The client declared the `elicitation` capability: gm may ask its user.
    elicitation: bool,
    /// Questions sent to the client, by request id: the server asked about, and who waits.
    asks: HashMap<String, (String, Vec<futures::channel::oneshot::Sender<Consent>>)>,
    next_ask: u64,
    /// Servers this session's user declined: not asked again.
    declined: std::collections::HashSet<String>,
    /// Stateless calls in progress, by their first request's id key.
    routes: HashMap<String, stateless::Route>,
    /// Questions asked in `input_required` results: their requestState → the call's key.
    states: HashMap<String, String>,
    /// Retries' id keys → the call they took over (a cancel may name either).
    aliases: HashMap<String, String>,
    /// Resources the client subscribed to (`resources/subscribe`): it is sent
    /// `notifications/resources/updated` when one changes. Only gm.d.ts changes while gm runs.
    subscribed: std::collections::HashSet<String>,
    /// The digest of gm.d.ts as this connection last saw it (read, subscribed or told of).
    dts_digest: Option<String>,
}

#[derive(Clone)]
enum Running {
    Cancellable(CancelToken),
    Uncancellable { tool: String },
}

/// A JSON-RPC batch's replies, sent together, in the order of the requests, when the last one
/// is ready.
struct Batch {
    waiting: usize,
    /// One per message of the batch; `None` for a notification (or a reply not ready yet).
    replies: Vec<Option<String>>,
}

/// What a session tells whoever runs it (the worker), which the server does not know: the
/// worker sits above the servers it runs, and they reach it only through this message.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub enum SessionNews {
    /// Its host has gone; the session is ending (its calls get their grace), and its run may
    /// be taken over by a session that opens meanwhile.
    Leaving(std::sync::Arc<str>),
    /// The session ended.
    Ended(std::sync::Arc<str>),
    /// `--no-relay`: the stdio host closed stdin, which ends the worker.
    StdinClosed,
}

pub struct Server {
    app: Rc<App>,
    conn: Rc<Conn>,
    session: Session,
    worker: Recipient<SessionNews>,
    /// A stdio session (`--no-relay`): its end is the worker's end.
    stdio: bool,
}

/// A reply now, or later: a call whose future answers when it is done.
enum Reply {
    Now(Option<Value>),
    Later(Later),
}

/// A reply that comes when `future` is done; `call` is the running call it ends, if any.
struct Later {
    future: LocalBoxFuture<'static, Option<String>>,
    call: Option<String>,
}

impl Server {
    /// The server of one session. `stdio`: the session is `--no-relay`'s stdin and stdout.
    pub fn new(app: Rc<App>, conn: Conn, run: RunSession, worker: Recipient<SessionNews>, stdio: bool) -> Self {
        let session = Session {
            protocol: None,
            // The front's shared link serves nothing else: no `initialize` event is logged
            // for it.
            stateless_seen: conn.stateless,
            client: None,
            run,
            running: HashMap::new(),
            batches: HashMap::new(),
            next_batch: 0,
            ending: None,
            drained: Vec::new(),
            opened: Instant::now(),
            end_reason: None,
            ended: false,
            elicitation: false,
            asks: HashMap::new(),
            next_ask: 0,
            declined: std::collections::HashSet::new(),
            routes: HashMap::new(),
            states: HashMap::new(),
            aliases: HashMap::new(),
            subscribed: std::collections::HashSet::new(),
            dts_digest: None,
        };
        Self { app, conn: Rc::new(conn), session, worker, stdio }
    }

    fn send(&self, v: Value) {
        self.send_line(v.to_string());
    }

    fn send_line(&self, line: String) {
        self.conn.out.do_send(SendLine(line));
    }

    fn on_line(&mut self, line: String, ctx: &mut Context<Self>) {
        // Most lines are tools/calls: those are read without building JSON values.
        if let Some(mut call) = mcp::parse_tool_call(&line) {
            // The call's own envelope decides its era, as for any request (see `Session`).
            let enveloped = call.meta.as_ref().is_some_and(|m| m.contains_key(modern::PROTOCOL_VERSION_KEY));
            if !enveloped && !self.conn.stateless {
                return self.answer_later_call(call, ctx);
            }
            // A retry carries its answer outside what the quick read looks at; a call without
            // an envelope on the shared link is refused by `dispatch`.
            if enveloped && !line.contains("\"requestState\"") {
                return match self.envelope(call.meta.as_ref()) {
                    Ok(envelope) => {
                        call.modern = true;
                        let later = self.start_stateless_call(call, envelope.elicitation);
                        self.answer_later(later, None, ctx)
                    }
                    Err(e) => self.send(jsonrpc::error(&call.id, &e)),
                };
            }
        }
        let v: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let err = RpcError::new(jsonrpc::PARSE_ERROR, format!("parse error: {e}"));
                return self.send(jsonrpc::error(&Value::Null, &err));
            }
        };
        if let Value::Array(items) = v {
            return self.on_batch(items, ctx);
        }
        match self.dispatch(v, ctx) {
            Reply::Now(Some(r)) => self.send(r),
            Reply::Now(None) => {}
            Reply::Later(later) => self.answer_later(later, None, ctx),
        }
    }

    fn answer_later_call(&mut self, call: mcp::ToolCall, ctx: &mut Context<Self>) {
        let later = self.start_call(call);
        self.answer_later(later, None, ctx)
    }

    fn on_batch(&mut self, items: Vec<Value>, ctx: &mut Context<Self>) {
        let protocol = self.session.protocol;
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
        self.session.next_batch += 1;
        let number = self.session.next_batch;
        let mut batch = Batch { waiting: 0, replies: Vec::new() };
        let mut later = Vec::new();
        for (slot, item) in items.into_iter().enumerate() {
            match self.dispatch(item, ctx) {
                Reply::Now(r) => batch.replies.push(r.map(|r| r.to_string())),
                Reply::Later(l) => {
                    batch.replies.push(None);
                    later.push((slot, l));
                }
            }
        }
        batch.waiting = later.len();
        self.session.batches.insert(number, batch);
        for (slot, l) in later {
            self.answer_later(l, Some((number, slot)), ctx);
        }
        self.flush_batch(number);
    }

    /// Sends a batch's replies once none is missing.
    fn flush_batch(&mut self, number: u64) {
        if self.session.batches.get(&number).is_some_and(|b| b.waiting == 0) {
            if let Some(b) = self.session.batches.remove(&number) {
                let replies: Vec<String> = b.replies.into_iter().flatten().collect();
                if !replies.is_empty() {
                    self.conn.out.do_send(SendLine(format!("[{}]", replies.join(","))));
                }
            }
        }
    }

    /// Runs a later reply; when it is done, its call leaves the running table (in the actor)
    /// and its reply goes out, alone or with its batch.
    fn answer_later(&mut self, later: Later, batch: Option<(u64, usize)>, ctx: &mut Context<Self>) {
        let Later { future, call } = later;
        ctx.spawn(future.into_actor(self).map(move |reply, act, ctx| {
            let mut reply = reply;
            if let Some(key) = &call {
                act.session.running.remove(key);
                reply = match reply {
                    Some(line) => act.route_reply(key, line),
                    // A cancelled call answers nobody, whichever request took it over.
                    None => {
                        act.drop_route(key);
                        None
                    }
                };
            }
            match batch {
                Some((number, slot)) => {
                    if let Some(b) = act.session.batches.get_mut(&number) {
                        b.waiting -= 1;
                        b.replies[slot] = reply;
                    }
                    act.flush_batch(number);
                }
                None => {
                    if let Some(line) = reply {
                        act.conn.out.do_send(SendLine(line));
                    }
                }
            }
            if act.session.ending.is_some() && act.session.running.is_empty() {
                for tx in act.session.drained.drain(..) {
                    let _ = tx.send(());
                }
                if matches!(act.session.ending, Some(End::Closed | End::Now)) {
                    act.finish_end(ctx);
                }
            }
        }));
    }

    /// Handles one message. Quick methods answer now; tools/call answers later.
    fn dispatch(&mut self, v: Value, ctx: &mut Context<Self>) -> Reply {
        match jsonrpc::classify(v) {
            Message::Invalid { id, error } => Reply::Now(Some(jsonrpc::error(&id, &error))),
            Message::Response { id, result } => {
                self.on_response(&id, result.as_ref());
                Reply::Now(None)
            }
            Message::Notification { method, params } => {
                self.on_notification(&method, &params, ctx);
                Reply::Now(None)
            }
            Message::Request { id, method, params } => {
                match self.stateless(&method, &params) {
                    Ok(Some(envelope)) => return self.stateless_request(id, &method, params, envelope, ctx),
                    Ok(None) => {}
                    Err(e) => return Reply::Now(Some(jsonrpc::error(&id, &e))),
                }
                if method == "tools/call" {
                    return match mcp::ToolCall::from_params(id.clone(), &params) {
                        Ok(call) => Reply::Later(self.start_call(call)),
                        Err(e) => {
                            if let Some(span) = self.request_span(&id, &method, None, meta_of(&params)) {
                                span.end(telemetry::Outcome::RpcError(e.code));
                            }
                            Reply::Now(Some(jsonrpc::error(&id, &e)))
                        }
                    };
                }
                let span = self.request_span(&id, &method, request_target(&method, &params), meta_of(&params));
                if let Some(later) = self.later_request(&id, &method) {
                    return Reply::Later(traced(later, span));
                }
                let reply = match self.on_request(&method, params, self.session.protocol) {
                    Ok(result) => {
                        if let Some(mut span) = span {
                            // initialize's span learns the version it negotiated.
                            if let (None, Some(version)) = (span.protocol(), self.session.protocol) {
                                span.set_protocol(version);
                            }
                            span.end(telemetry::Outcome::Ok);
                        }
                        jsonrpc::result(&id, result)
                    }
                    Err(e) => {
                        if let Some(span) = span {
                            span.end(telemetry::Outcome::RpcError(e.code));
                        }
                        jsonrpc::error(&id, &e)
                    }
                };
                Reply::Now(Some(reply))
            }
        }
    }

    fn on_notification(&mut self, method: &str, params: &Value, ctx: &mut Context<Self>) {
        if method == crate::relay::END_NOW {
            // The relay was ended by a signal: this session's calls stop now.
            self.session.end_reason = Some(params.get("signal").cloned().unwrap_or(Value::Null));
            return self.end(End::Now, ctx);
        }
        if method != "notifications/cancelled" {
            return;
        }
        let Some(request) = params.get("requestId") else { return };
        let mut key = call::id_key(request);
        if let Some(taken_over) = self.session.aliases.get(&key) {
            key.clone_from(taken_over);
        }
        match self.session.running.get(&key) {
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

    /// Opens a request's SERVER span when export is on (`None` otherwise, at the cost of one
    /// load). `meta`: the request's `params._meta`, whose traceparent is the host's.
    fn request_span(
        &self,
        id: &Value,
        method: &str,
        target: Option<&str>,
        meta: Option<&serde_json::Map<String, Value>>,
    ) -> Option<telemetry::RequestSpan> {
        let t = telemetry::get()?;
        let modern = meta.is_some_and(|m| m.contains_key(modern::PROTOCOL_VERSION_KEY));
        Some(t.request(&telemetry::Request {
            method,
            target,
            session: &self.conn.session,
            protocol: if modern { Some(modern::VERSION) } else { self.session.protocol },
            id,
            transport: self.transport(),
            meta,
        }))
    }

    /// `network.transport`: the HTTP listener's sessions are TCP, every other session the
    /// host's pipes (through a relay or not).
    fn transport(&self) -> telemetry::Transport {
        if self.conn.stateless || self.conn.http {
            telemetry::Transport::Tcp
        } else {
            telemetry::Transport::Pipe
        }
    }

    /// Logs an event of this session's current run.
    fn log(&self, kind: &str, fields: Value) {
        if let Some(log) = &self.app.ctx.log {
            log.do_send(Event::new(kind, fields).in_scope(Some(self.session.run.scope())));
        }
    }
}

impl Actor for Server {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Bodies of this session ask their user through it.
        self.session.run.consent = Some(ctx.address().recipient());
        // gm.d.ts declares the worker's child tools (the worker has one set, shared by every
        // session: the first session's call settles it).
        self.app.ctx.skills.declare_tools_of(&self.app.ctx.children);
        // run_code's description names the child servers' tools and those still starting, and
        // gm.d.ts declares their tools: when that changes, the host is told to list the tools
        // again (on the code surface) and, if it subscribed, that gm.d.ts changed.
        let changes = self.app.ctx.children.offered_changes();
        let stream = futures::stream::unfold(changes, |mut rx| async move {
            rx.changed().await.ok()?;
            Some((ToolsChanged, rx))
        });
        ctx.add_stream(stream);
    }
}

/// The child tools offered (or the servers still starting) changed.
struct ToolsChanged;

impl StreamHandler<ToolsChanged> for Server {
    fn handle(&mut self, _: ToolsChanged, _: &mut Context<Self>) {
        // Before initialize the host has not listed anything; after the end nobody listens; a
        // stateless client is sent nothing it did not ask for (tools/list says ttlMs 0), and a
        // connection that also initialized hears of changes as its handshake says.
        if self.session.protocol.is_none() || self.session.ending.is_some() {
            return;
        }
        if self.conn.surface == surface::Surface::Code {
            self.send(json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed" }));
        }
        self.declarations_changed();
    }

    // The stream ends with the worker's Children: the session goes on.
    fn finished(&mut self, _: &mut Context<Self>) {}
}

impl Server {
    /// Tells a client subscribed to gm.d.ts that it changed, when it did (a server still
    /// starting, or one that failed, moves the watch without changing a declaration).
    fn declarations_changed(&mut self) {
        if !self.session.subscribed.contains(crate::dts::URI) {
            return;
        }
        let digest = crate::skills::digest(self.app.ctx.skills.declarations().as_bytes());
        if self.session.dts_digest.as_ref() == Some(&digest) {
            return;
        }
        self.session.dts_digest = Some(digest);
        self.send(json!({
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": { "uri": crate::dts::URI },
        }));
    }

    /// A client's answer to a question gm asked.
    fn on_response(&mut self, id: &Value, result: Option<&Value>) {
        let Some(key) = id.as_str() else { return };
        self.settle_ask(key, crate::trust::ask::consent_of(result));
    }

    /// The answer to the question `key`: its waiters hear it; a decline is remembered.
    fn settle_ask(&mut self, key: &str, consent: Consent) {
        let Some((server, waiting)) = self.session.asks.remove(key) else { return };
        if consent == Consent::NotAsked {
            self.log("consent", json!({ "server": server, "answer": "expired" }));
            for tx in waiting {
                let _ = tx.send(Consent::NotAsked);
            }
            return;
        }
        if consent == Consent::Declined {
            self.session.declined.insert(server.clone());
        }
        self.log(
            "consent",
            json!({ "server": server, "answer": if consent == Consent::Approved { "approved" } else { "declined" } }),
        );
        for tx in waiting {
            let _ = tx.send(consent.clone());
        }
    }
}

impl Handler<AskConsent> for Server {
    type Result = ResponseFuture<Consent>;
    fn handle(&mut self, msg: AskConsent, ctx: &mut Context<Self>) -> Self::Result {
        let server = msg.pending.name.clone();
        if let Some(route) = self.session.routes.get(&msg.call) {
            // A stateless call: its client is asked in the call's result, if that request
            // said it can be asked.
            if !route.elicitation || self.session.declined.contains(&server) || self.session.ending.is_some() {
                return Box::pin(futures::future::ready(Consent::NotAsked));
            }
            // Each stateless call is asked in its own result (joining another call's question
            // would leave this one unanswered if that call ended first).
            let (tx, rx) = futures::channel::oneshot::channel();
            self.ask_in_result(&msg.call, msg.pending, tx, ctx);
            return Box::pin(async move { rx.await.unwrap_or(Consent::NotAsked) });
        }
        if !self.session.elicitation || self.session.declined.contains(&server) || self.session.ending.is_some() {
            return Box::pin(futures::future::ready(Consent::NotAsked));
        }
        let (tx, rx) = futures::channel::oneshot::channel();
        // A second call to the same server while the question is open waits for its answer.
        if let Some((_, waiting)) = self.session.asks.values_mut().find(|(s, _)| *s == server) {
            waiting.push(tx);
        } else {
            self.session.next_ask += 1;
            let id = format!("gm-consent-{}", self.session.next_ask);
            let params = crate::trust::ask::request_params(&msg.pending, &self.app.ctx.workspace);
            self.session.asks.insert(id.clone(), (server.clone(), vec![tx]));
            self.log("consent", json!({ "server": server, "asked": id }));
            self.send(json!({ "jsonrpc": "2.0", "id": id, "method": "elicitation/create", "params": params }));
        }
        Box::pin(async move { rx.await.unwrap_or(Consent::NotAsked) })
    }
}

impl Handler<Incoming> for Server {
    type Result = ();
    fn handle(&mut self, msg: Incoming, ctx: &mut Context<Self>) {
        match msg {
            Incoming::Line(line) => {
                // A bug in one request's handling must not take the connection down.
                let this = std::panic::AssertUnwindSafe(&mut *self);
                let ctx = std::panic::AssertUnwindSafe(&mut *ctx);
                let handled = std::panic::catch_unwind(move || {
                    let (this, ctx) = (this, ctx);
                    this.0.on_line(line, ctx.0)
                });
                if let Err(panic) = handled {
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
                    format!("message of {bytes} bytes exceeds the limit of {} bytes (--max-line-bytes); it was dropped unread", self.conn.max_line_bytes),
                );
                self.send(jsonrpc::error(&Value::Null, &err));
            }
            Incoming::InvalidUtf8 => {
                let err = RpcError::new(jsonrpc::PARSE_ERROR, "parse error: the line is not valid UTF-8");
                self.send(jsonrpc::error(&Value::Null, &err));
            }
            Incoming::Closed if self.stdio => self.worker.do_send(SessionNews::StdinClosed),
            Incoming::Closed => self.end(End::Closed, ctx),
        }
    }
}

/// A request's `params._meta`, where a host puts its traceparent.
fn meta_of(params: &Value) -> Option<&serde_json::Map<String, Value>> {
    params.get("_meta")?.as_object()
}

/// What a request's span names after its method: a resource's URI, a prompt's name.
fn request_target<'a>(method: &str, params: &'a Value) -> Option<&'a str> {
    match method {
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => params.get("uri")?.as_str(),
        "prompts/get" => params.get("name")?.as_str(),
        _ => None,
    }
}

/// A later reply whose span ends when it is ready (unanswered: cancelled).
fn traced(later: Later, span: Option<telemetry::RequestSpan>) -> Later {
    let Some(span) = span else { return later };
    let Later { future, call } = later;
    let future = async move {
        let reply = future.await;
        span.end(if reply.is_some() { telemetry::Outcome::Ok } else { telemetry::Outcome::Cancelled });
        reply
    };
    Later { future: Box::pin(future), call }
}

/// Why a session ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The host's side closed (the relay's host left): calls still running get a short grace
    /// to reply, then are cancelled.
    Closed,
    /// A signal ended the relay: calls are cancelled now.
    Now,
    /// The worker is stopping: calls are cancelled after [`STOP_GRACE`].
    Worker,
}

/// The worker is stopping: cancel this session's calls (after [`STOP_GRACE`]); answers once
/// they have all ended (their events are logged) or [`DRAIN_LIMIT`] passed.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct EndNow;

/// What `gm status` shows of a session.
#[derive(Debug, Message)]
#[rtype(result = "Value")]
pub struct Describe;

impl Handler<EndNow> for Server {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, _: EndNow, ctx: &mut Context<Self>) -> Self::Result {
        self.end(End::Worker, ctx);
        let (tx, rx) = futures::channel::oneshot::channel();
        if self.session.running.is_empty() {
            let _ = tx.send(());
        } else {
            self.session.drained.push(tx);
        }
        Box::pin(async move {
            let _ = tokio::time::timeout(DRAIN_LIMIT, rx).await;
        })
    }
}

impl Handler<Describe> for Server {
    type Result = MessageResult<Describe>;
    fn handle(&mut self, _: Describe, _: &mut Context<Self>) -> Self::Result {
        let run = &self.session.run.run;
        MessageResult(json!({
            "session": &*self.conn.session,
            "client": self.session.client,
            "protocolVersion": self.session.protocol.or(self.session.stateless_seen.then_some(modern::VERSION)),
            "surface": self.conn.surface.as_str(),
            "transport": if self.stdio { "stdio" } else if self.conn.stateless { "stateless" } else { "relay" },
            "direct": self.conn.direct,
            "relay": self.conn.relay,
            "connectedMs": self.session.opened.elapsed().as_millis() as u64,
            "skillRead": self.session.run.skill_read,
            "run": { "id": run.run_id, "task": run.task, "step": run.step, "stepBudget": run.step_budget, "finished": run.finished },
            "callsInFlight": self.session.running.len(),
        }))
    }
}

impl Server {
    /// Starts ending the session. Calls still running get [`SHUTDOWN_GRACE`] to reply after the
    /// host's side closed (it may still read), [`STOP_GRACE`] when the worker stops; then they
    /// are cancelled (their bodies and shells stopped). A second end while the first is under way
    /// changes nothing.
    fn end(&mut self, end: End, ctx: &mut Context<Self>) {
        if self.session.ending.is_some() {
            return;
        }
        self.session.ending = Some(end);
        if end != End::Worker {
            // Its host is gone: the run is free for a session that comes to continue it.
            self.worker.do_send(SessionNews::Leaving(self.conn.session.clone()));
        }
        match end {
            End::Worker => {
                ctx.run_later(STOP_GRACE, |act, _| act.cancel_running());
            }
            End::Now => {
                self.cancel_running();
                if self.session.running.is_empty() {
                    self.finish_end(ctx);
                } else {
                    ctx.run_later(DRAIN_LIMIT, |act, ctx| act.finish_end(ctx));
                }
            }
            End::Closed if self.session.running.is_empty() => self.finish_end(ctx),
            End::Closed => {
                ctx.run_later(SHUTDOWN_GRACE, |act, ctx| {
                    act.cancel_running();
                    // Calls that cannot be cancelled may run on; the session's end waits for
                    // them only so long.
                    ctx.run_later(DRAIN_LIMIT, |act, ctx| act.finish_end(ctx));
                });
            }
        }
    }

    fn cancel_running(&mut self) {
        for running in self.session.running.values() {
            if let Running::Cancellable(token) = running {
                token.cancel();
            }
        }
    }

    /// The session is over: its run file is kept (or dropped when finished), its events are
    /// synced (so the log holds all of them once its relay has exited), the worker is told,
    /// and the actor stops, which drops its writer and closes the connection.
    fn finish_end(&mut self, ctx: &mut Context<Self>) {
        if std::mem::replace(&mut self.session.ended, true) {
            return;
        }
        self.app.runs.forget_if_finished(&self.conn.session);
        let unfinished = self.session.running.len();
        let mut fields = json!({ "reason": "closed", "unfinishedCalls": unfinished });
        if let Some(signal) = self.session.end_reason.take() {
            fields["reason"] = json!("signal");
            fields["signal"] = signal;
        }
        self.log("session-end", fields);
        if let Some(t) = telemetry::get() {
            let protocol = self.session.protocol.or(self.session.stateless_seen.then_some(modern::VERSION));
            t.session_ended(self.session.opened.elapsed(), protocol, self.transport());
        }
        let log = self.app.ctx.log.clone();
        let flushed = async move {
            if let Some(log) = log {
                let _ = tokio::time::timeout(Duration::from_millis(500), log.send(Flush)).await;
            }
        };
        ctx.wait(actix::fut::wrap_future(flushed).map(|(), act: &mut Self, ctx| {
            act.worker.do_send(SessionNews::Ended(act.conn.session.clone()));
            ctx.stop();
        }));
    }
}
