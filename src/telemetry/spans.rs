//! Spans after the MCP semantic conventions: a SERVER span per request gm answers, an INTERNAL
//! `execute_tool <verb>` span per `gm.*` call of a run_code body. Protocol values come in as
//! plain strings and JSON; nothing here knows gm's server.

use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceState, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator};

use super::deferred::{Note, RequestId};
use serde_json::{Map, Value};

use super::Telemetry;

/// The longest argument or result text a span carries (`GM_OTEL_CONTENT=1`): collectors
/// refuse or cut larger attributes anyway.
const CONTENT_LIMIT: usize = 16 * 1024;

/// How the request reached gm (`network.transport`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// stdio: the host's pipes (through a relay or not).
    Pipe,
    /// Streamable HTTP.
    Tcp,
}

impl Transport {
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Pipe => "pipe",
            Transport::Tcp => "tcp",
        }
    }
}

/// One request, as the conventions describe it.
pub struct Request<'a> {
    pub method: &'a str,
    /// The tool's name, the resource's URI, the prompt's name: after the method in the span's name.
    pub target: Option<&'a str>,
    pub session: &'a Arc<str>,
    pub protocol: Option<&'static str>,
    pub id: &'a Value,
    pub transport: Transport,
    /// The request's `params._meta`, whose `traceparent` (W3C) makes the span its child.
    pub meta: Option<&'a Map<String, Value>>,
}
/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    Ok,
    /// A tool result with `isError: true`; the tool's error code, when it has one.
    ToolError(Option<&'a str>),
    /// A JSON-RPC error reply, by its code.
    RpcError(i64),
    /// Cancelled, or dropped unanswered (its session ended).
    Cancelled,
}

impl Outcome<'_> {
    /// `error.type`, `None` for success.
    fn error_type(self) -> Option<String> {
        match self {
            Outcome::Ok => None,
            Outcome::ToolError(_) => Some("tool_error".into()),
            Outcome::RpcError(code) => Some(code.to_string()),
            Outcome::Cancelled => Some("cancelled".into()),
        }
    }
}

/// `params._meta` read as a W3C trace context carrier.
struct Meta<'a>(&'a Map<String, Value>);

impl Extractor for Meta<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }
    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The context a host's `traceparent` gives, or an empty one (a new trace).
pub fn host_context(meta: Option<&Map<String, Value>>) -> Context {
    match meta {
        Some(meta) => TraceContextPropagator::new().extract_with_context(&Context::new(), &Meta(meta)),
        None => Context::new(),
    }
}

/// A request's span, open until [`RequestSpan::end`] (or its drop, as cancelled).
///
/// Opening one is cheap on purpose (`mcp-bench otel`): its ids and times, the names it shares
/// and one atomic add. The SDK's span is built when it ends, off this thread
/// ([`super::deferred`]), and its [`Context`] only when something asks for it.
pub struct RequestSpan {
    telemetry: &'static Telemetry,
    /// Its ids as a parent's (flags and state follow the host's); `None` when only metrics
    /// are exported.
    own: Option<SpanContext>,
    /// The span as a parent, made on first use: only a run_code body's calls need one.
    cx: OnceLock<Context>,
    started: Instant,
    /// What the span is made of; taken when it ends.
    note: Option<Note>,
}

impl Telemetry {
    /// Opens the SERVER span of a request (a child of the host's trace when `_meta` has one).
    pub fn request(&'static self, r: &Request<'_>) -> RequestSpan {
        let parent = r.meta.and_then(|meta| {
            let host = host_context(Some(meta));
            let host = host.span().span_context().clone();
            host.is_valid().then_some(host)
        });
        let ids = RandomIdGenerator::default();
        let trace_id = parent.as_ref().map_or_else(|| ids.new_trace_id(), SpanContext::trace_id);
        let span_id = ids.new_span_id();
        let own = self.tracer.as_ref().map(|_| {
            let (flags, state) = parent
                .as_ref()
                .map_or((TraceFlags::SAMPLED, TraceState::default()), |h| (h.trace_flags(), h.trace_state().clone()));
            SpanContext::new(trace_id, span_id, flags, false, state)
        });
        if let Some(m) = &self.instruments {
            m.in_flight.fetch_add(1, Ordering::Relaxed);
        }
        let note = Note {
            method: shared(r.method),
            target: r.target.map(shared),
            session: r.session.clone(),
            id: match r.id {
                Value::Number(n) => n.as_i64().map_or_else(|| RequestId::Text(n.to_string()), RequestId::Number),
                Value::String(s) => RequestId::Text(s.clone()),
                other => RequestId::Text(other.to_string()),
            },
            transport: r.transport,
            protocol: r.protocol,
            trace_id,
            span_id,
            parent,
            start: SystemTime::now(),
            end: SystemTime::UNIX_EPOCH,
            seconds: 0.0,
            error: None,
            content: None,
        };
        RequestSpan { telemetry: self, own, cx: OnceLock::new(), started: Instant::now(), note: Some(note) }
    }

    /// Opens the INTERNAL span of one `gm.*` call of a body, under `parent` (its run_code's span).
    pub fn tool_call(&'static self, parent: &Context, name: &str) -> ToolSpan {
        let cx = match &self.tracer {
            Some(tracer) => {
                let span = tracer
                    .span_builder(format!("execute_tool {name}"))
                    .with_kind(SpanKind::Internal)
                    .with_attributes([
                        KeyValue::new("gen_ai.operation.name", "execute_tool"),
                        KeyValue::new("gen_ai.tool.name", name.to_owned()),
                    ])
                    .start_with_context(tracer, parent);
                parent.with_span(span)
            }
            None => Context::new(),
        };
        ToolSpan { telemetry: self, cx }
    }
}

impl Telemetry {
    /// Opens the CLIENT span of a call gm makes to a child server's tool, under `parent` (the
    /// body's `execute_tool` span); its traceparent goes into the request's `params._meta`.
    pub fn child_call(&'static self, parent: &Context, server: &str, tool: &str) -> ToolSpan {
        let cx = match &self.tracer {
            Some(tracer) => {
                // Named after its parent, so that `gm otel-export` of the log, which has the
                // parent's id (the `code-call` event's `span`), sends this span with its id.
                let id = client_span_of(parent.span().span_context().span_id());
                let span = tracer
                    .span_builder(format!("tools/call {tool}"))
                    .with_span_id(id)
                    .with_kind(SpanKind::Client)
                    .with_attributes([
                        KeyValue::new("mcp.method.name", "tools/call"),
                        KeyValue::new("gen_ai.operation.name", "execute_tool"),
                        KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                        KeyValue::new("gm.child.server", server.to_owned()),
                        KeyValue::new("network.transport", "pipe"),
                    ])
                    .start_with_context(tracer, parent);
                parent.with_span(span)
            }
            None => Context::new(),
        };
        ToolSpan { telemetry: self, cx }
    }
}

/// The names a request's span repeats (its method, its tool, a resource's URI), shared with
/// the last requests' rather than copied: a copy per request is an allocation here freed on
/// the span thread. A few recent names are kept per thread; a name not among them is copied.
fn shared(name: &str) -> Arc<str> {
    const KEPT: usize = 32;
    // A host's long resource URI is copied, not kept: the table holds names, not payloads.
    const LONGEST: usize = 256;
    if name.len() > LONGEST {
        return Arc::from(name);
    }
    thread_local! {
        static RECENT: RefCell<Vec<Arc<str>>> = const { RefCell::new(Vec::new()) };
    }
    RECENT.with(|recent| {
        let mut recent = recent.borrow_mut();
        if let Some(hit) = recent.iter().find(|kept| ***kept == *name) {
            return hit.clone();
        }
        let copy: Arc<str> = Arc::from(name);
        if recent.len() == KEPT {
            recent.remove(0);
        }
        recent.push(copy.clone());
        copy
    })
}

/// The id of the CLIENT span of a child server's call made under the span `internal` (one call
/// a span): the same for the live span and for the one `gm otel-export` rebuilds.
pub fn client_span_of(internal: SpanId) -> SpanId {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(b"gm-client");
    h.update(internal.to_bytes());
    let d: [u8; 32] = h.finalize().into();
    let mut id = [0u8; 8];
    id.copy_from_slice(&d[..8]);
    id[0] |= 1; // never the invalid all-zero id
    SpanId::from_bytes(id)
}

impl RequestSpan {
    /// The span as a parent, for what runs inside the request.
    pub fn context(&self) -> &Context {
        self.cx.get_or_init(|| match &self.own {
            Some(own) => Context::new().with_remote_span_context(own.clone()),
            None => Context::new(),
        })
    }

    /// Its W3C `traceparent` (for the log), without making its context.
    pub fn traceparent(&self) -> Option<String> {
        self.own.as_ref().and_then(super::traceparent_of)
    }

    pub fn protocol(&self) -> Option<&'static str> {
        self.note.as_ref().and_then(|n| n.protocol)
    }

    /// Sets `mcp.protocol.version` once it is known (initialize negotiates it).
    pub fn set_protocol(&mut self, version: &'static str) {
        if let Some(note) = self.note.as_mut() {
            note.protocol = Some(version);
        }
    }

    /// With `GM_OTEL_CONTENT=1`, the call's arguments and result (already masked as for the
    /// log) go on the span; otherwise nothing.
    pub fn content(&mut self, arguments: &str, result: &str) {
        if !self.telemetry.content {
            return;
        }
        if let Some(note) = self.note.as_mut() {
            note.content = Some((cut(arguments), cut(result)));
        }
    }

    pub fn end(mut self, outcome: Outcome<'_>) {
        self.finish(outcome);
    }

    fn finish(&mut self, outcome: Outcome<'_>) {
        let Some(mut note) = self.note.take() else { return };
        let t = self.telemetry;
        if let Some(m) = &t.instruments {
            m.in_flight.fetch_sub(1, Ordering::Relaxed);
        }
        let took = self.started.elapsed();
        note.end = note.start + took;
        note.seconds = took.as_secs_f64();
        note.error = outcome.error_type().map(|error| {
            let description = match outcome {
                Outcome::ToolError(Some(code)) => code.to_owned(),
                _ => error.clone(),
            };
            (error, description)
        });
        if t.tracer.is_some() {
            t.span_ended();
        }
        if let Some(deferred) = &t.deferred {
            // Dropped when the queue is full: counted among the unsent spans.
            let _ = deferred.send(note);
        }
    }
}

impl Drop for RequestSpan {
    fn drop(&mut self) {
        self.finish(Outcome::Cancelled);
    }
}

/// One `gm.*` call's span.
pub struct ToolSpan {
    telemetry: &'static Telemetry,
    cx: Context,
}

impl ToolSpan {
    /// The span as a parent (a child server's call goes under it).
    pub fn context(&self) -> &Context {
        &self.cx
    }

    /// Whether arguments and results go on spans (`GM_OTEL_CONTENT=1`): the caller masks
    /// them only then.
    pub fn wants_content(&self) -> bool {
        self.telemetry.content
    }

    /// The call's arguments and result, masked as for the log (`GM_OTEL_CONTENT=1` only).
    pub fn content(&self, arguments: &str, result: &str) {
        if !self.telemetry.content {
            return;
        }
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("gen_ai.tool.call.arguments", cut(arguments)));
        span.set_attribute(KeyValue::new("gen_ai.tool.call.result", cut(result)));
    }

    /// Ends it; `error`: the call's error code.
    pub fn end(self, error: Option<&str>) {
        let span = self.cx.span();
        if let Some(code) = error {
            span.set_attribute(KeyValue::new("error.type", code.to_owned()));
            span.set_status(Status::error(code.to_owned()));
        }
        span.end();
        if self.telemetry.tracer.is_some() {
            self.telemetry.span_ended();
        }
    }
}

/// Text cut to [`CONTENT_LIMIT`] bytes, on a character boundary.
fn cut(text: &str) -> String {
    if text.len() <= CONTENT_LIMIT {
        return text.to_owned();
    }
    let mut end = CONTENT_LIMIT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…[cut {} bytes]", &text[..end], text.len() - end)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::TraceContextExt;

    #[test]
    fn a_hosts_traceparent_in_meta_is_the_parent() {
        let meta: Map<String, Value> = serde_json::from_str(
            r#"{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "progressToken": 3}"#,
        )
        .expect("json");
        let cx = host_context(Some(&meta));
        let parent = cx.span().span_context().clone();
        assert!(parent.is_remote());
        assert_eq!(parent.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert!(!host_context(None).span().span_context().is_valid());
    }

    #[test]
    fn a_name_repeated_by_requests_is_shared_and_one_past_the_kept_ones_still_reads_right() {
        let first = shared("tools/call");
        assert!(Arc::ptr_eq(&first, &shared("tools/call")), "the same name is one allocation");
        let many: Vec<Arc<str>> = (0..100).map(|i| shared(&format!("tool-{i}"))).collect();
        for (i, name) in many.iter().enumerate() {
            assert_eq!(&**name, format!("tool-{i}"));
        }
        assert_eq!(&*shared("tools/call"), "tools/call", "an evicted name is copied again");
        let long = "u".repeat(10_000);
        assert!(!Arc::ptr_eq(&shared(&long), &shared(&long)), "a long name is not kept");
    }

    #[test]
    fn content_is_cut_on_a_character_boundary() {
        let long = "é".repeat(CONTENT_LIMIT);
        let cut = cut(&long);
        assert!(cut.len() < long.len() && cut.contains("…[cut "), "{}", cut.len());
        assert_eq!(super::cut("short"), "short");
    }
}
