//! The MCP server for one stdio connection: JSON-RPC messages in, replies out.
//!
//! The server is an actor on the main arbiter that owns the connection's session and is the
//! only one to change it, in its handlers and in the completions of the calls it spawns (actor
//! futures, so a completion runs with the actor again). Quick methods answer inline; a
//! tools/call runs as a future on the same arbiter (no cross-thread hop) and its reply goes out
//! by id as soon as it is done, so parallel calls overlap.
//!
//! - `call`: the tools/call pipeline, from a call's arrival to its reply and action event.
//! - `requests`: the other methods (initialize, lists, resources, prompts, skills).
//! - [`surface`]: the code and tools surfaces, derived from the registry and the run loop.

mod call;
mod requests;
pub mod surface;

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Duration;

use actix::prelude::*;
use futures::future::LocalBoxFuture;
use gm_actors::cancel::CancelToken;
use gm_actors::jobs::KillForeground;
use gm_actors::log_writer::{Event, Flush};
use gm_actors::transport::{Incoming, Send as SendLine};
use serde_json::{json, Value};

use crate::app::App;
use crate::protocol::jsonrpc::{self, Message, RpcError};
use crate::protocol::mcp;
use crate::run::RunSession;
use crate::run_state::RunState;
use crate::verbs;

/// How long calls still running when stdin closes may take to reply.
const SHUTDOWN_GRACE: Duration = Duration::from_millis(700);

/// The connection's state, owned by the server actor.
struct Session {
    protocol: Option<&'static str>,
    run: RunSession,
    /// Calls in progress, by request id, and how to cancel them.
    running: HashMap<String, Running>,
    /// Batches whose replies are still being gathered, by number.
    batches: HashMap<u64, Batch>,
    next_batch: u64,
    /// gm is stopping (and why): a second stop is ignored.
    stopping: Option<Stop>,
    /// The end is under way: [`Server::finish_stop`] ran.
    ending: bool,
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

pub struct Server {
    app: Rc<App>,
    session: Session,
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
    /// A server for `run`; `resumed` when an earlier gm left it unfinished.
    pub fn new(app: App, run: RunState, resumed: bool) -> Self {
        let session = Session {
            protocol: None,
            run: RunSession::new(run, resumed),
            running: HashMap::new(),
            batches: HashMap::new(),
            next_batch: 0,
            stopping: None,
            ending: false,
        };
        Self { app: Rc::new(app), session }
    }

    fn send(&self, v: Value) {
        self.app.out.do_send(SendLine(v.to_string()));
    }

    fn on_line(&mut self, line: String, ctx: &mut Context<Self>) {
        // Most lines are tools/calls: those are read without building JSON values.
        if let Some(call) = mcp::parse_tool_call(&line) {
            let later = self.start_call(call);
            return self.answer_later(later, None, ctx);
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
        match self.dispatch(v) {
            Reply::Now(Some(r)) => self.send(r),
            Reply::Now(None) => {}
            Reply::Later(later) => self.answer_later(later, None, ctx),
        }
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
            match self.dispatch(item) {
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
                    self.app.out.do_send(SendLine(format!("[{}]", replies.join(","))));
                }
            }
        }
    }

    /// Runs a later reply; when it is done, its call leaves the running table (in the actor)
    /// and its reply goes out, alone or with its batch.
    fn answer_later(&mut self, later: Later, batch: Option<(u64, usize)>, ctx: &mut Context<Self>) {
        let Later { future, call } = later;
        ctx.spawn(future.into_actor(self).map(move |reply, act, ctx| {
            if let Some(key) = call {
                act.session.running.remove(&key);
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
                        act.app.out.do_send(SendLine(line));
                    }
                }
            }
            if act.session.stopping.is_some() && act.session.running.is_empty() {
                act.finish_stop(ctx);
            }
        }));
    }

    /// Handles one message. Quick methods answer now; tools/call answers later.
    fn dispatch(&mut self, v: Value) -> Reply {
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
                if let Some(later) = self.later_request(&id, &method, &params) {
                    return Reply::Later(later);
                }
                let reply = match self.on_request(&method, params) {
                    Ok(result) => jsonrpc::result(&id, result),
                    Err(e) => jsonrpc::error(&id, &e),
                };
                Reply::Now(Some(reply))
            }
        }
    }

    fn on_notification(&mut self, method: &str, params: &Value) {
        if method != "notifications/cancelled" {
            return;
        }
        let Some(request) = params.get("requestId") else { return };
        match self.session.running.get(&call::id_key(request)) {
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

    fn log(&self, kind: &str, fields: Value) {
        if let Some(log) = &self.app.ctx.log {
            log.do_send(Event::new(kind, fields));
        }
    }
}

impl Actor for Server {
    type Context = Context<Self>;
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
                    format!("message of {bytes} bytes exceeds the limit of {} bytes (--max-line-bytes); it was dropped unread", self.app.max_line_bytes),
                );
                self.send(jsonrpc::error(&Value::Null, &err));
            }
            Incoming::InvalidUtf8 => {
                let err = RpcError::new(jsonrpc::PARSE_ERROR, "parse error: the line is not valid UTF-8");
                self.send(jsonrpc::error(&Value::Null, &err));
            }
            Incoming::Closed => self.stop(Stop::StdinClosed, ctx),
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

    fn reason(self) -> &'static str {
        match self {
            Stop::StdinClosed => "stdin closed",
            Stop::Signal(_) => "signal",
        }
    }
}

impl Handler<Stop> for Server {
    type Result = ();
    fn handle(&mut self, stop: Stop, ctx: &mut Context<Self>) {
        self.stop(stop, ctx);
    }
}

impl Server {
    /// Starts ending the server. Calls still running get [`SHUTDOWN_GRACE`] to reply after a
    /// closed stdin (the client may still read stdout), none after a signal; then
    /// [`Server::finish_stop`] runs. A second stop while the first is under way changes nothing.
    fn stop(&mut self, stop: Stop, ctx: &mut Context<Self>) {
        if self.session.stopping.is_some() {
            return;
        }
        self.session.stopping = Some(stop);
        if self.session.running.is_empty() || stop != Stop::StdinClosed {
            return self.finish_stop(ctx);
        }
        ctx.run_later(SHUTDOWN_GRACE, |act, ctx| act.finish_stop(ctx));
    }

    /// Ends the server: the calls still running are cancelled (their bodies and foreground
    /// shells stopped), the child servers stopped, the `stop` event synced to the log, and the
    /// actor system stopped with the exit code. Background jobs outlive gm. Runs once.
    fn finish_stop(&mut self, ctx: &mut Context<Self>) {
        let Some(stop) = self.session.stopping else { return };
        if std::mem::replace(&mut self.session.ending, true) {
            return;
        }
        for running in self.session.running.values() {
            if let Running::Cancellable(token) = running {
                token.cancel();
            }
        }
        let unfinished = self.session.running.len();
        let (log, jobs, children) =
            (self.app.ctx.log.clone(), self.app.ctx.jobs.clone(), self.app.ctx.children.clone());
        ctx.spawn(
            async move {
                // Foreground shells end with gm, whichever call started them, and so do the
                // child servers; background jobs outlive it.
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
            }
            .into_actor(self),
        );
    }
}
