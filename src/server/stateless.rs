//! Requests of the stateless revision (2026-07-28): each carries its own envelope, so the
//! connection remembers nothing of the client between them, and a question to the user
//! cannot be a request to the client: the call's result is `input_required`, and the client
//! sends the same call again with the answer.
//!
//! Which revision a request speaks is decided by that request alone: its envelope makes it a
//! 2026-07-28 request; without one it belongs to the handshake era (`initialize` and the
//! versions it negotiates), whatever came before on the connection. `initialize` is the
//! handshake itself and always selects it, whatever its `_meta` holds (as the relay, which
//! answers an early `initialize` itself, takes it). A client that probed with
//! `server/discover` may fall back to `initialize`, and one that initialized may send
//! enveloped requests. Only the front's shared link (`Conn::stateless`), on which no
//! handshake can happen, takes nothing but 2026-07-28 requests (`initialize` there is a
//! method the revision removed).
//!
//! gm's questions come from a run_code body that is already running (a workspace server
//! nobody approved yet). The body is not run again: it waits, its call answers
//! `input_required` with a `requestState` naming it, and the retry — a new request — takes
//! over the running call: the answer reaches the body, and the call's result (or its next
//! question) goes to the retry's id.

use std::time::Duration;

use actix::prelude::*;
use futures::channel::oneshot;
use serde_json::{json, Map, Value};

use super::{call, Reply, Server};
use crate::protocol::jsonrpc::{self, RpcError};
use crate::protocol::mcp;
use crate::protocol::modern::{self, Envelope};
use crate::trust::ask::{self, Consent};
use crate::trust::Pending;

/// How long a question in an `input_required` result waits for its retry; then the body
/// goes on as if nobody could be asked.
const ASK_EXPIRY: Duration = Duration::from_secs(600);
/// The key of gm's question in `inputRequests` and `inputResponses`.
const CONSENT_KEY: &str = "consent";

/// A stateless tools/call in progress: which request waits for its result now.
pub(super) struct Route {
    /// The request the call's result (or next question) answers: the first, then each retry;
    /// `None` while a question waits for its retry.
    current: Option<Value>,
    /// The request that asked declared `elicitation`: its user may be asked.
    pub(super) elicitation: bool,
    /// The call's reply, when it ended while a question waited for its retry.
    parked: Option<String>,
    /// Questions the body asked while another waited for its retry.
    queued: Vec<(Pending, oneshot::Sender<Consent>)>,
}

impl Server {
    /// Whether a request is stateless, checked: `Ok(None)` for a request of the handshake era
    /// (`initialize`, or a request without an envelope, on a connection that can initialize),
    /// an error for a malformed envelope, a version gm does not serve, or a method the
    /// revision removed.
    pub(super) fn stateless(&mut self, method: &str, params: &Value) -> Result<Option<Envelope>, RpcError> {
        if !self.conn.stateless && (method == "initialize" || !modern::carries_envelope(params)) {
            return Ok(None);
        }
        let envelope = self.envelope(params.get("_meta").and_then(Value::as_object))?;
        if let Some(e) = modern::removed(method) {
            return Err(e);
        }
        Ok(Some(envelope))
    }

    /// A stateless request's envelope, checked. The first one a connection serves is logged
    /// as its `initialize` (the run's log says which revision its client spoke) and names the
    /// client for `gm status` if `initialize` did not; neither decides how a later request is
    /// served.
    pub(super) fn envelope(&mut self, meta: Option<&Map<String, Value>>) -> Result<Envelope, RpcError> {
        let envelope = modern::envelope(meta)?;
        if !std::mem::replace(&mut self.session.stateless_seen, true) {
            self.log(
                "initialize",
                json!({ "protocolVersion": modern::VERSION, "stateless": true, "client": envelope.client }),
            );
        }
        if self.session.client.is_none() {
            self.session.client.clone_from(&envelope.client);
        }
        Ok(envelope)
    }

    /// One checked stateless request.
    pub(super) fn stateless_request(
        &mut self,
        id: Value,
        method: &str,
        params: Value,
        envelope: Envelope,
        ctx: &mut Context<Self>,
    ) -> Reply {
        if method == "tools/call" {
            if let Some(state) = params.get("requestState") {
                return Reply::Now(self.retry(&id, state, &params, ctx));
            }
            let mut call = match mcp::ToolCall::from_params(id.clone(), &params) {
                Ok(call) => call,
                Err(e) => return Reply::Now(Some(jsonrpc::error(&id, &e))),
            };
            call.modern = true;
            return Reply::Later(self.start_stateless_call(call, envelope.elicitation));
        }
        let span = self.request_span(&id, method, super::request_target(method, &params), super::meta_of(&params));
        let reply = match self.on_request(method, params, Some(modern::VERSION)) {
            Ok(result) => {
                if let Some(span) = span {
                    span.end(crate::telemetry::Outcome::Ok);
                }
                jsonrpc::result(&id, modern::complete(method, result))
            }
            Err(e) => {
                if let Some(span) = span {
                    span.end(crate::telemetry::Outcome::RpcError(e.code));
                }
                jsonrpc::error(&id, &modern::error(e))
            }
        };
        Reply::Now(Some(reply))
    }

    /// Starts a stateless tools/call (`call.modern` set), routed so that a question its body
    /// asks becomes its result.
    pub(super) fn start_stateless_call(&mut self, call: mcp::ToolCall, elicitation: bool) -> super::Later {
        let id = call.id.clone();
        let later = self.start_call(call);
        if let Some(key) = &later.call {
            let route = Route { current: Some(id), elicitation, parked: None, queued: Vec::new() };
            self.session.routes.insert(key.clone(), route);
        }
        later
    }

    /// A retry with the answer to a question: the call it names goes on, answering the retry.
    fn retry(&mut self, id: &Value, state: &Value, params: &Value, ctx: &mut Context<Self>) -> Option<Value> {
        let expired = || {
            jsonrpc::error(
                id,
                &RpcError::invalid_params("Invalid or expired requestState")
                    .with_data(json!({ "requestState": state })),
            )
        };
        let Some(token) = state.as_str() else { return Some(expired()) };
        let Some(key) = self.session.states.remove(token) else { return Some(expired()) };
        let Some(route) = self.session.routes.get_mut(&key) else { return Some(expired()) };
        route.current = Some(id.clone());
        self.session.aliases.insert(call::id_key(id), key.clone());
        let consent = match params.pointer(&format!("/inputResponses/{CONSENT_KEY}")) {
            Some(answer) => ask::consent_of(Some(answer)),
            None => Consent::Declined,
        };
        self.settle_ask(token, consent);
        let route = self.session.routes.get_mut(&key)?;
        if let Some(line) = route.parked.take() {
            if let Some(line) = self.route_reply(&key, line) {
                self.send_line(line);
            }
        } else if !route.queued.is_empty() {
            let (pending, tx) = route.queued.remove(0);
            self.ask_in_result(&key, pending, tx, ctx);
        }
        None
    }

    /// Asks the user of the stateless call `key` about `pending`, in the call's result: the
    /// request waiting for the call is answered `input_required` now, and `tx` hears the
    /// answer the retry brings.
    pub(super) fn ask_in_result(
        &mut self,
        key: &str,
        pending: Pending,
        tx: oneshot::Sender<Consent>,
        ctx: &mut Context<Self>,
    ) {
        let Some(route) = self.session.routes.get_mut(key) else {
            let _ = tx.send(Consent::NotAsked);
            return;
        };
        let Some(id) = route.current.take() else {
            route.queued.push((pending, tx));
            return;
        };
        let token = format!("gm-consent-{}", uuid::Uuid::new_v4().simple());
        let question = ask::request_params(&pending, &self.app.ctx.workspace);
        self.session.asks.insert(token.clone(), (pending.name.clone(), vec![tx]));
        self.session.states.insert(token.clone(), key.to_owned());
        self.log("consent", json!({ "server": pending.name, "asked": token, "in": "input_required" }));
        self.send(jsonrpc::result(&id, modern::input_required(CONSENT_KEY, question, &token)));
        ctx.run_later(ASK_EXPIRY, move |act, _| {
            if act.session.states.remove(&token).is_some() {
                act.settle_ask(&token, Consent::NotAsked);
            }
        });
    }

    /// The reply line of a call that ended, as the request now waiting for it gets it; `None`
    /// while that request is yet to come (the line is kept until it does).
    pub(super) fn route_reply(&mut self, key: &str, line: String) -> Option<String> {
        let Some(route) = self.session.routes.get_mut(key) else { return Some(line) };
        let Some(id) = route.current.clone() else {
            route.parked = Some(line);
            return None;
        };
        self.drop_route(key);
        if call::id_key(&id) == key {
            return Some(line);
        }
        // A retry took the call over: its reply carries the retry's id.
        let mut reply: Value = serde_json::from_str(&line).ok()?;
        reply["id"] = id;
        Some(reply.to_string())
    }

    /// Forgets a stateless call: its route and the retries that named it.
    pub(super) fn drop_route(&mut self, key: &str) {
        self.session.routes.remove(key);
        self.session.aliases.retain(|_, k| k != key);
        // Its questions go with it: a retry naming one is refused, and no later call waits on it.
        let asked: Vec<String> =
            self.session.states.iter().filter(|(_, k)| *k == key).map(|(t, _)| t.clone()).collect();
        for token in asked {
            self.session.states.remove(&token);
            self.session.asks.remove(&token);
        }
    }
}
