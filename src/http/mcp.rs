//! The `/mcp` endpoint (Streamable HTTP, MCP 2025-11-25): POST carries client messages, GET
//! opens the session's stream of server messages, DELETE ends the session. Sessions are made
//! by `initialize` and named by `Mcp-Session-Id`; a 2026-07-28 request without a session goes
//! on the shared stateless link.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};

use super::session::Link;
use super::{sse, Front};
use crate::relay::peek::Peek;

pub const SESSION_HEADER: &str = "mcp-session-id";
pub const VERSION_HEADER: &str = "mcp-protocol-version";
pub const METHOD_HEADER: &str = "mcp-method";
const NAME_HEADER: &str = "mcp-name";
/// The stateless revision.
pub const STATELESS: &str = "2026-07-28";
/// Where a 2026-07-28 request says its version.
const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// The revisions whose `MCP-Protocol-Version` header the front accepts.
const KNOWN_VERSIONS: [&str; 5] = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", STATELESS];
/// A 2026-07-28 request whose headers disagree with its body (SEP-2243's HeaderMismatch).
const HEADER_MISMATCH: i64 = crate::protocol::modern::HEADER_MISMATCH;
/// A body must arrive within this (a client sending a byte a minute holds no task for long;
/// `GM_HTTP_BODY_TIMEOUT_MS` sets another, for tests).
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// A JSON-RPC error as an HTTP response.
fn rpc_error(status: StatusCode, id: Value, code: i64, message: impl Into<String>) -> Response {
    let body = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message.into() } });
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

fn json_response(body: Vec<u8>) -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn meta_version(message: &Value) -> Option<&str> {
    message.get("params")?.get("_meta")?.get(META_VERSION)?.as_str()
}

fn is_request(m: &Value) -> bool {
    m.get("method").is_some() && m.get("id").is_some_and(|id| !id.is_null())
}

/// The body field a request mirrors in `Mcp-Name` (SEP-2243), by method.
fn named_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => Some("uri"),
        _ => None,
    }
}

/// SEP-2243: a 2026-07-28 request mirrors its method in `Mcp-Method` and, for a method that
/// names something, that name in `Mcp-Name`, for intermediaries that route without reading
/// the body; a server that reads the body refuses a request whose headers disagree with it.
/// A header that is there must agree. Headers that are missing are refused only from a
/// client whose `MCP-Protocol-Version` says 2026-07-28 — the revision that requires them —
/// and only on a request (a notification answers nothing). `Err`: why, for a -32020.
fn check_headers(headers: &HeaderMap, message: &Value) -> Result<(), String> {
    let method = message.get("method").and_then(Value::as_str).unwrap_or("");
    let header = header_str(headers, VERSION_HEADER);
    if let (Some(h), Some(m)) = (header, meta_version(message)) {
        if h != m {
            return Err(format!("MCP-Protocol-Version {h:?} and _meta's protocolVersion {m:?} differ"));
        }
    }
    let required = header == Some(STATELESS) && is_request(message);
    match mirrored(headers, METHOD_HEADER)? {
        Some(h) if h != method => return Err(format!("Mcp-Method {h:?} and the body's {method:?} differ")),
        None if required => return Err("the Mcp-Method header is missing".to_owned()),
        _ => {}
    }
    let Some(field) = named_field(method) else { return Ok(()) };
    let named = message.pointer(&format!("/params/{field}")).and_then(Value::as_str);
    match (mirrored(headers, NAME_HEADER)?, named) {
        (Some(h), named) if Some(h.as_str()) != named => {
            Err(format!("Mcp-Name {h:?} and the body's {field} {named:?} differ"))
        }
        (None, Some(named)) if required => Err(format!("the Mcp-Name header is missing (the body names {named:?})")),
        _ => Ok(()),
    }
}

/// A mirrored header's value: without the whitespace around it (RFC 9110 §5.5), and decoded
/// when SEP-2243's `=?base64?…?=` wraps it (how a client sends a value a header cannot carry
/// as it is). `Err` for a value that is not text or whose Base64 is not valid.
fn mirrored(headers: &HeaderMap, name: &str) -> Result<Option<String>, String> {
    let Some(raw) = headers.get(name) else { return Ok(None) };
    let Ok(value) = raw.to_str() else { return Err(format!("the {name} header is not visible ASCII")) };
    let value = value.trim_matches([' ', '\t']);
    let Some(encoded) = value.strip_prefix("=?base64?").and_then(|v| v.strip_suffix("?=")) else {
        return Ok(Some(value.to_owned()));
    };
    let decoded = base64_decode(encoded).and_then(|bytes| String::from_utf8(bytes).ok());
    decoded.map(Some).ok_or_else(|| format!("the {name} header's Base64 value is not valid"))
}

/// Standard Base64 with its padding, strictly: `None` for anything else.
fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let bytes = text.as_bytes();
    if bytes.len() % 4 != 0 {
        return None;
    }
    let pad = bytes.iter().rev().take_while(|&&b| b == b'=').count();
    if pad > 2 {
        return None;
    }
    let sextet = |b: u8| -> Option<u32> {
        Some(match b {
            b'A'..=b'Z' => b - b'A',
            b'a'..=b'z' => b - b'a' + 26,
            b'0'..=b'9' => b - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    for (i, chunk) in bytes.chunks(4).enumerate() {
        let last = (i + 1) * 4 == bytes.len();
        let used = if last { 4 - pad } else { 4 };
        let mut n = 0u32;
        for (j, &b) in chunk.iter().enumerate() {
            n = (n << 6) | if j < used { sextet(b)? } else { 0 };
        }
        out.extend_from_slice(&n.to_be_bytes()[1..used]);
    }
    Some(out)
}

pub async fn post(State(front): State<Arc<Front>>, req: Request) -> Response {
    if let Err(denied) = front.guard.check(req.headers(), false) {
        return super::refuse(denied);
    }
    let headers = req.headers().clone();
    let body = match tokio::time::timeout(front.body_timeout, Bytes::from_request(req, &())).await {
        Err(_) => return (StatusCode::REQUEST_TIMEOUT, "the request body came too slowly").into_response(),
        Ok(Err(rejection)) => return rejection.into_response(),
        Ok(Ok(body)) => body,
    };
    if let Some(answered) = fast_session_post(&front, &headers, &body).await {
        return answered;
    }
    let parsed: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return rpc_error(StatusCode::BAD_REQUEST, Value::Null, -32700, format!("not JSON: {e}")),
    };
    let (messages, batch) = match parsed {
        Value::Array(a) if !a.is_empty() => (a, true),
        Value::Array(_) => return rpc_error(StatusCode::BAD_REQUEST, Value::Null, -32600, "an empty batch"),
        Value::Object(_) => (vec![parsed], false),
        _ => return rpc_error(StatusCode::BAD_REQUEST, Value::Null, -32600, "not a JSON-RPC message"),
    };
    let first_id = messages[0].get("id").cloned().unwrap_or(Value::Null);
    if let Some(v) = header_str(&headers, VERSION_HEADER) {
        if !KNOWN_VERSIONS.contains(&v) {
            // The stateless revision's error, which names what is served (a client of an
            // older revision reads the 400 alone).
            let e = crate::protocol::modern::unsupported(v);
            let body = json!({ "jsonrpc": "2.0", "id": first_id, "error": { "code": e.code, "message": format!("unsupported MCP-Protocol-Version {v:?}"), "data": e.data } });
            return (StatusCode::BAD_REQUEST, [(header::CONTENT_TYPE, "application/json")], body.to_string())
                .into_response();
        }
    }
    let initialize = messages.iter().any(|m| m.get("method").and_then(Value::as_str) == Some("initialize"));
    if let Some(id) = header_str(&headers, SESSION_HEADER) {
        let Some(link) = front.session(id) else {
            return rpc_error(StatusCode::NOT_FOUND, first_id, -32001, "no such session (it ended): initialize again");
        };
        if initialize {
            return rpc_error(StatusCode::BAD_REQUEST, first_id, -32600, "this session is initialized already");
        }
        // The worker decides each request's revision from the request alone, so a 2026-07-28
        // request is served as one on a session too: its headers are held to that revision,
        // and its errors become statuses as on the shared link.
        let revision = !batch && header_str(&headers, VERSION_HEADER) == Some(STATELESS);
        if revision {
            if let Err(why) = check_headers(&headers, &messages[0]) {
                return rpc_error(StatusCode::BAD_REQUEST, first_id, HEADER_MISMATCH, why);
            }
        }
        // One message whose text is already one line goes on as the client wrote it.
        let raw = (!batch && !body.contains(&b'\n')).then_some(body);
        let accepts_sse =
            header_str(&headers, header::ACCEPT.as_str()).is_some_and(|a| a.contains("text/event-stream"));
        if let (false, true, Some(token)) = (batch, accepts_sse, progress_token(&messages[0])) {
            return relay_streamed(&front, &link, messages, raw, token).await;
        }
        let mut response = relay(&front, &link, messages, batch, raw).await;
        if revision && response.status() == StatusCode::OK {
            let (mut parts, body) = response.into_parts();
            let Ok(reply) = axum::body::to_bytes(body, usize::MAX).await else {
                return (StatusCode::BAD_GATEWAY, "the reply could not be read").into_response();
            };
            parts.status = status_of(&reply);
            response = Response::from_parts(parts, Body::from(reply));
        }
        return response;
    }
    let stateless = header_str(&headers, VERSION_HEADER) == Some(STATELESS)
        || messages.iter().any(|m| meta_version(m).is_some())
        || messages.iter().any(|m| m.get("method").and_then(Value::as_str) == Some("server/discover"));
    // An initialize that says it is 2026-07-28 is one more stateless request (which that
    // revision answers "method not found"), not a session.
    if initialize && !stateless {
        if batch {
            return rpc_error(StatusCode::BAD_REQUEST, first_id, -32600, "initialize must be sent alone");
        }
        return open_session(&front, messages).await;
    }
    if stateless {
        if batch {
            return rpc_error(StatusCode::BAD_REQUEST, first_id, -32600, "2026-07-28 has no batches");
        }
        return stateless_post(&front, &headers, messages.into_iter().next().unwrap_or_default()).await;
    }
    rpc_error(StatusCode::BAD_REQUEST, first_id, -32600, "Mcp-Session-Id header required (initialize first)")
}

/// The common case — one message of a session, on one line, that asks for no progress — read
/// as the relay reads a line (its id and method, `relay::peek`) and passed on as written, not
/// parsed into a tree and written again. `None`: the general path decides.
async fn fast_session_post(front: &Front, headers: &HeaderMap, body: &Bytes) -> Option<Response> {
    let id = header_str(headers, SESSION_HEADER)?;
    // A 2026-07-28 request's headers are checked against its body on the general path.
    if header_str(headers, VERSION_HEADER).is_some_and(|v| !KNOWN_VERSIONS.contains(&v) || v == STATELESS)
        || body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{')
        || body.contains(&b'\n')
        || memchr::memmem::find(body, b"progressToken").is_some()
        || serde_json::from_slice::<serde::de::IgnoredAny>(body).is_err()
    {
        return None;
    }
    let peek = Peek::of(body);
    if peek.method.as_deref() == Some("initialize") {
        return None;
    }
    let link = front.session(id)?;
    let mut pending = peek.id.as_deref().filter(|_| peek.is_request()).map(|raw| link.expect(raw));
    let mut line = Vec::with_capacity(body.len() + 1);
    line.extend_from_slice(body);
    line.push(b'\n');
    if link.send(&line).await.is_err() {
        return None; // the general path answers for an ended session
    }
    Some(match pending.as_mut() {
        None => StatusCode::ACCEPTED.into_response(),
        Some(p) => json_response(p.wait().await.unwrap_or_default()),
    })
}

/// `initialize`: a new worker connection whose session id names the MCP session.
async fn open_session(front: &Arc<Front>, messages: Vec<Value>) -> Response {
    let id = messages[0].get("id").cloned().unwrap_or(Value::Null);
    let link = match front.open_session().await {
        Ok(link) => link,
        Err(super::OpenError::Full) => {
            return rpc_error(StatusCode::SERVICE_UNAVAILABLE, id, -32603, "too many sessions open; end one first")
        }
        Err(e) => return rpc_error(StatusCode::BAD_GATEWAY, id, -32603, e.to_string()),
    };
    let mut line = serde_json::to_vec(&messages[0]).unwrap_or_default();
    line.push(b'\n');
    let mut pending = link.expect(&id.to_string());
    if link.send(&line).await.is_err() {
        front.end_session(&link.id).await;
        return rpc_error(StatusCode::BAD_GATEWAY, id, -32603, "the workspace's worker closed the new session");
    }
    let reply = pending.wait().await.unwrap_or_default();
    // An initialize the worker refused (an unknown revision, bad params) opens no session.
    let refused = serde_json::from_slice::<Value>(&reply).map_or(true, |v| v.get("result").is_none());
    let mut response = json_response(reply);
    if refused {
        front.end_session(&link.id).await;
    } else if let Ok(v) = HeaderValue::from_str(&link.id) {
        response.headers_mut().insert(SESSION_HEADER, v);
    }
    response
}

/// Sends a session's messages to its worker connection and answers with the replies to its
/// requests (202 when it held none).
async fn relay(front: &Front, link: &Arc<Link>, messages: Vec<Value>, batch: bool, raw: Option<Bytes>) -> Response {
    let mut lines = Vec::new();
    let mut pending = Vec::new();
    match raw {
        Some(raw) => lines.extend_from_slice(&raw),
        None => {
            for m in &messages {
                if let Ok(text) = serde_json::to_vec(m) {
                    lines.extend_from_slice(&text);
                    lines.push(b'\n');
                }
            }
        }
    }
    if !lines.ends_with(b"\n") {
        lines.push(b'\n');
    }
    for m in &messages {
        if let Some(id) = m.get("id").filter(|_| is_request(m)) {
            pending.push(link.expect(&id.to_string()));
        }
    }
    if link.send(&lines).await.is_err() {
        front.end_session(&link.id).await;
        let id = messages[0].get("id").cloned().unwrap_or(Value::Null);
        return rpc_error(
            StatusCode::NOT_FOUND,
            id,
            -32001,
            "the session ended (the worker closed it): initialize again",
        );
    }
    if pending.is_empty() {
        return StatusCode::ACCEPTED.into_response();
    }
    let mut replies = Vec::with_capacity(pending.len());
    for p in &mut pending {
        if let Some(reply) = p.wait().await {
            replies.push(reply);
        }
    }
    if !batch {
        return json_response(replies.pop().unwrap_or_default());
    }
    let mut body = vec![b'['];
    for (i, r) in replies.iter().enumerate() {
        if i > 0 {
            body.push(b',');
        }
        body.extend_from_slice(r);
    }
    body.push(b']');
    json_response(body)
}

fn progress_token(m: &Value) -> Option<Value> {
    m.pointer("/params/_meta/progressToken").filter(|_| is_request(m)).cloned()
}

/// A request that asked for progress, from a client that takes SSE: the answer is a
/// `text/event-stream` of its progress notifications, then its reply, then the end.
async fn relay_streamed(
    front: &Front,
    link: &Arc<Link>,
    messages: Vec<Value>,
    raw: Option<Bytes>,
    token: Value,
) -> Response {
    let following = link.follow_progress(&token);
    let mut lines = match raw {
        Some(raw) => raw.to_vec(),
        None => serde_json::to_vec(&messages[0]).unwrap_or_default(),
    };
    if !lines.ends_with(b"\n") {
        lines.push(b'\n');
    }
    let id = messages[0].get("id").cloned().unwrap_or(Value::Null);
    let pending = link.expect(&id.to_string());
    if link.send(&lines).await.is_err() {
        front.end_session(&link.id).await;
        return rpc_error(
            StatusCode::NOT_FOUND,
            id,
            -32001,
            "the session ended (the worker closed it): initialize again",
        );
    }
    let stream = futures::stream::unfold(Some((following, pending)), |state| async move {
        let (mut following, mut pending) = state?;
        // Progress first: the reader routed each before the reply that followed it.
        let data: Arc<str> = tokio::select! {
            biased;
            Some(note) = following.rx.recv() => {
                return Some((Ok::<_, std::convert::Infallible>(Event::default().data(&*note)), Some((following, pending))));
            }
            reply = pending.wait() => String::from_utf8_lossy(&reply.unwrap_or_default()).into(),
        };
        Some((Ok(Event::default().data(&*data)), None))
    });
    Sse::new(stream).into_response()
}

/// A 2026-07-28 request without a session, on the shared link.
async fn stateless_post(front: &Arc<Front>, headers: &HeaderMap, message: Value) -> Response {
    let id = message.get("id").cloned().unwrap_or(Value::Null);
    let meta = meta_version(&message).map(str::to_owned);
    let header = header_str(headers, VERSION_HEADER);
    if let Err(why) = check_headers(headers, &message) {
        return rpc_error(StatusCode::BAD_REQUEST, id, HEADER_MISMATCH, why);
    }
    if !is_request(&message) {
        // Not passed on: on the shared link a client's `notifications/cancelled` would name
        // another client's call (ids are the front's there), and 2026-07-28 asks the client no
        // questions whose answers would come back (input-required results instead).
        return StatusCode::ACCEPTED.into_response();
    }
    let link = match front.stateless_link().await {
        Ok(link) => link,
        Err(e) => return rpc_error(StatusCode::BAD_GATEWAY, id, -32603, e.to_string()),
    };
    let (message, mut pending) = link.expect_rewritten(message);
    let mut line = serde_json::to_vec(&message).unwrap_or_default();
    line.push(b'\n');
    if link.send(&line).await.is_err() {
        return rpc_error(
            StatusCode::BAD_GATEWAY,
            id,
            -32603,
            "the workspace's worker closed the connection; try again",
        );
    }
    let Some(reply) = pending.wait().await else {
        return rpc_error(StatusCode::BAD_GATEWAY, id, -32603, "no answer from the workspace's worker");
    };
    let revision = header.or(meta.as_deref()) == Some(STATELESS);
    let status = if revision { status_of(&reply) } else { StatusCode::OK };
    let mut response = json_response(reply);
    *response.status_mut() = status;
    response
}

/// 2026-07-28: the HTTP status of a JSON-RPC answer.
fn status_of(reply: &[u8]) -> StatusCode {
    let code =
        serde_json::from_slice::<Value>(reply).ok().and_then(|v| v.pointer("/error/code").and_then(Value::as_i64));
    match code {
        Some(-32700 | -32600 | -32602 | -32020 | -32021 | -32022) => StatusCode::BAD_REQUEST,
        Some(-32601) => StatusCode::NOT_FOUND,
        _ => StatusCode::OK,
    }
}

/// GET: the session's stream of server messages, resumed after `Last-Event-ID`.
pub async fn get(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    if let Err(denied) = front.guard.check(&headers, false) {
        return super::refuse(denied);
    }
    let accepts = header_str(&headers, header::ACCEPT.as_str()).is_some_and(|a| a.contains("text/event-stream"));
    if !accepts {
        return (StatusCode::NOT_ACCEPTABLE, "GET /mcp is a text/event-stream").into_response();
    }
    let Some(id) = header_str(&headers, SESSION_HEADER) else {
        return (StatusCode::BAD_REQUEST, "Mcp-Session-Id header required").into_response();
    };
    let Some(link) = front.session(id) else {
        return (StatusCode::NOT_FOUND, "no such session (it ended): initialize again").into_response();
    };
    let Some(events) = link.events.clone() else {
        return (StatusCode::METHOD_NOT_ALLOWED, "no stream for this session").into_response();
    };
    let after = header_str(&headers, "last-event-id").and_then(|v| v.trim().parse::<u64>().ok());
    match events.open(after) {
        Some((open, replay, live)) => sse::respond(open, replay, live, None).into_response(),
        None => (StatusCode::TOO_MANY_REQUESTS, "too many streams open on this session").into_response(),
    }
}

/// DELETE: ends the session; its worker connection closes and the worker logs `session-end`.
pub async fn delete(State(front): State<Arc<Front>>, headers: HeaderMap) -> Response {
    if let Err(denied) = front.guard.check(&headers, false) {
        return super::refuse(denied);
    }
    let Some(id) = header_str(&headers, SESSION_HEADER) else {
        return (StatusCode::BAD_REQUEST, "Mcp-Session-Id header required").into_response();
    };
    if front.end_session(id).await {
        (StatusCode::OK, Body::empty()).into_response()
    } else {
        (StatusCode::NOT_FOUND, "no such session").into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).expect("a header value"));
        }
        h
    }

    #[test]
    fn base64_is_decoded_strictly() {
        assert_eq!(base64_decode("SGVsbG8=").as_deref(), Some(&b"Hello"[..]));
        assert_eq!(base64_decode("SGk=").as_deref(), Some(&b"Hi"[..]));
        assert_eq!(base64_decode("SGVsbG8h").as_deref(), Some(&b"Hello!"[..]));
        assert_eq!(base64_decode("").as_deref(), Some(&b""[..]));
        for bad in ["SGVsbG8", "SGVs!!!bG8=", "S===", "SG=k"] {
            assert_eq!(base64_decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_2026_07_28_request_must_mirror_its_method_and_name() {
        let call = json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": { "name": "run_code" } });
        let v = (VERSION_HEADER, STATELESS);
        assert!(check_headers(&headers(&[v, (METHOD_HEADER, "tools/call"), (NAME_HEADER, "run_code")]), &call).is_ok());
        assert!(
            check_headers(&headers(&[v, (METHOD_HEADER, "tools/call"), (NAME_HEADER, " run_code\t")]), &call).is_ok()
        );
        let encoded = (NAME_HEADER, "=?base64?cnVuX2NvZGU=?=");
        assert!(check_headers(&headers(&[v, (METHOD_HEADER, "tools/call"), encoded]), &call).is_ok());
        assert!(check_headers(&headers(&[v, (NAME_HEADER, "run_code")]), &call).is_err());
        assert!(check_headers(&headers(&[v, (METHOD_HEADER, "tools/call")]), &call).is_err());
        assert!(check_headers(&headers(&[v, (METHOD_HEADER, "tools/call"), (NAME_HEADER, "finish")]), &call).is_err());
        // Without the revision's version header, only what is there is held to the body.
        assert!(check_headers(&headers(&[]), &call).is_ok());
        assert!(check_headers(&headers(&[(NAME_HEADER, "finish")]), &call).is_err());
        // A notification answers nothing: missing headers are not refused.
        let note = json!({ "jsonrpc": "2.0", "method": "notifications/cancelled", "params": {} });
        assert!(check_headers(&headers(&[v]), &note).is_ok());
    }
}
