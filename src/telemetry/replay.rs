//! `gm otel-export`: a recorded run log sent as the spans a live worker would have sent.
//!
//! Each `action` event (one tools/call) becomes a SERVER span and each `code-call` event (one
//! `gm.*` call of a body) an INTERNAL span under the run_code call of its session whose time
//! holds it, with a CLIENT span under that when the call went to a child server's tool. A span ends at its event's `ts` and lasts its `ms`. Ids are the live span's when
//! the event logged one (`span`; a CLIENT span's id follows from its parent's), else derived
//! from the log's `seq` (and run), so sending the
//! same log twice sends the same ids, which collectors merge instead of duplicating. A host's
//! `traceparent` stays the parent.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState, Tracer,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::config::{self, ConfigError};
use super::export::{self, ExportError};

/// Spans handed to the batch processor between flushes: under its queue's 2048, so none is
/// dropped however long the log.
const FLUSH_EVERY: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("nothing to send to: set OTEL_EXPORTER_OTLP_ENDPOINT (or an `otel` section in ~/.gmnew/config.json)")]
    NotConfigured,
    #[error("OTEL_TRACES_EXPORTER=none: there is nothing else to export from a log")]
    TracesOff,
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the collector did not take every span: {0}")]
    Flush(String),
}

#[derive(Debug, serde::Serialize)]
pub struct ReplayReport {
    pub log: PathBuf,
    /// Spans sent.
    pub spans: usize,
    /// Lines that were not JSON events (a torn line), skipped.
    #[serde(rename = "skippedLines")]
    pub skipped_lines: usize,
    /// The last seq read: the next `--since` is one more.
    #[serde(rename = "lastSeq")]
    pub last_seq: Option<u64>,
}

/// One span to send, as the log tells it.
#[derive(Debug, Clone, PartialEq)]
struct Recorded {
    seq: u64,
    name: String,
    kind: SpanKind,
    trace_id: TraceId,
    span_id: SpanId,
    /// The parent: a host's span (remote) or the run_code call's.
    parent: Option<SpanId>,
    start: SystemTime,
    end: SystemTime,
    attributes: Vec<KeyValue>,
    error: Option<String>,
}

/// Sends `log`'s events from seq `since` on to the configured collector.
pub fn export_log(log: &Path, since: Option<u64>, home_config: Option<&Path>) -> Result<ReplayReport, ReplayError> {
    let env = |var: &str| std::env::var(var).ok();
    let Some(mut config) = config::resolve(&env, home_config)? else { return Err(ReplayError::NotConfigured) };
    if config.traces.is_none() {
        return Err(ReplayError::TracesOff);
    }
    config.metrics = None;
    let text = std::fs::read_to_string(log).map_err(|source| ReplayError::Read { path: log.to_owned(), source })?;
    let mut events = Vec::new();
    let mut skipped_lines = 0;
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v["seq"].as_u64().is_some_and(|s| since.is_none_or(|since| s >= since)) => events.push(v),
            Ok(_) => {}
            Err(_) => skipped_lines += 1,
        }
    }
    let last_seq = events.iter().filter_map(|e| e["seq"].as_u64()).max();
    let spans = spans_of(&events);
    // The log's workspace is the folder holding `.gm/`; its name only, as live.
    let workspace = log.parent().and_then(Path::parent).and_then(Path::file_name);
    let workspace = workspace.map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let resource =
        super::resource(&config, &super::Worker { workspace_name: &workspace, worker_id: "otel-export" }, &env);
    let providers = export::build(&config, resource)?;
    let Some(provider) = providers.tracer else { return Err(ReplayError::TracesOff) };
    let tracer = provider.tracer_with_scope(super::scope());
    let progress = Progress::on_terminal();
    for (i, s) in spans.iter().enumerate() {
        let parent = match s.parent {
            Some(parent) => Context::new().with_remote_span_context(SpanContext::new(
                s.trace_id,
                parent,
                TraceFlags::SAMPLED,
                true,
                TraceState::default(),
            )),
            None => Context::new(),
        };
        let mut attributes = s.attributes.clone();
        attributes.push(KeyValue::new("gm.log.seq", s.seq as i64));
        let span = tracer
            .span_builder(s.name.clone())
            .with_kind(s.kind.clone())
            .with_trace_id(s.trace_id)
            .with_span_id(s.span_id)
            .with_start_time(s.start)
            .with_attributes(attributes)
            .start_with_context(&tracer, &parent);
        let cx = Context::new().with_span(span);
        if let Some(error) = &s.error {
            cx.span().set_status(Status::error(error.clone()));
        }
        cx.span().end_with_timestamp(s.end);
        if (i + 1) % FLUSH_EVERY == 0 {
            provider.force_flush().map_err(|e| ReplayError::Flush(e.to_string()))?;
            progress.show(i + 1, spans.len());
        }
    }
    provider.force_flush().map_err(|e| ReplayError::Flush(e.to_string()))?;
    progress.show(spans.len(), spans.len());
    progress.done();
    let _ = provider.shutdown_with_timeout(super::FLUSH_LIMIT);
    Ok(ReplayReport { log: log.to_owned(), spans: spans.len(), skipped_lines, last_seq })
}

/// A one-line progress bar on stderr, drawn only when stderr is a terminal (a script or a
/// CI log gets the final report alone).
struct Progress {
    on: bool,
}

impl Progress {
    fn on_terminal() -> Self {
        use std::io::IsTerminal;
        Progress { on: std::io::stderr().is_terminal() }
    }

    fn show(&self, sent: usize, total: usize) {
        if !self.on || total == 0 {
            return;
        }
        const WIDTH: usize = 30;
        let filled = sent * WIDTH / total;
        eprint!("\rgm otel-export [{}{}] {sent}/{total} spans", "#".repeat(filled), " ".repeat(WIDTH - filled));
    }

    fn done(&self) {
        if self.on {
            gm_actors::stderr_line!();
        }
    }
}

/// The spans of the `action` and `code-call` events.
fn spans_of(events: &[Value]) -> Vec<Recorded> {
    let mut actions: Vec<Recorded> = events.iter().filter(|e| e["kind"] == "action").filter_map(action_span).collect();
    let mut calls = Vec::new();
    for e in events.iter().filter(|e| e["kind"] == "code-call") {
        let Some((seq, start, end)) = timing(e) else { continue };
        let verb = e["verb"].as_str().unwrap_or("?");
        // The run_code call of the same session whose time holds this call; the shortest
        // such, when bodies overlapped.
        let session = e["session"].as_str();
        let body = actions
            .iter()
            .filter(|a| a.name == "tools/call run_code" && session_of(a) == session)
            .filter(|a| a.start <= start && end <= a.end + Duration::from_millis(1))
            .min_by_key(|a| a.end.duration_since(a.start).unwrap_or_default());
        let (trace_id, parent) = match body {
            Some(b) => (b.trace_id, Some(b.span_id)),
            None => (derived_trace(e, seq), None),
        };
        // The live span's ids when the worker exported it (`span`): sending the log then
        // sends the spans the collector already has, which it merges.
        let live = e["span"].as_str().and_then(parse_traceparent);
        let trace_id = live.map_or(trace_id, |(trace, _)| trace);
        let mut attributes = vec![
            KeyValue::new("gen_ai.operation.name", "execute_tool"),
            KeyValue::new("gen_ai.tool.name", verb.to_owned()),
        ];
        let error = error_of(e);
        if let Some(code) = &error {
            attributes.push(KeyValue::new("error.type", code.clone()));
        }
        let span_id = live.map_or_else(|| derived_span(e, seq), |(_, span)| span);
        // A child server's tool: gm's call to it is a CLIENT span under the body's call.
        if let (Some(server), Some(tool)) = (e["server"].as_str(), e["tool"].as_str()) {
            calls.push(Recorded {
                seq,
                name: format!("tools/call {tool}"),
                kind: SpanKind::Client,
                trace_id,
                span_id: match live {
                    Some((_, span)) => super::spans::client_span_of(span),
                    None => derived_id("gm-client", e, seq),
                },
                parent: Some(span_id),
                start,
                end,
                attributes: vec![
                    KeyValue::new("mcp.method.name", "tools/call"),
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", tool.to_owned()),
                    KeyValue::new("gm.child.server", server.to_owned()),
                ],
                error: error.clone(),
            });
        }
        calls.push(Recorded {
            seq,
            name: format!("execute_tool {verb}"),
            kind: SpanKind::Internal,
            trace_id,
            span_id,
            parent,
            start,
            end,
            attributes,
            error,
        });
    }
    actions.append(&mut calls);
    // By seq, a call's INTERNAL span before its CLIENT span (a stable sort keeps the rest).
    actions.sort_by_key(|s| (s.seq, s.kind == SpanKind::Client));
    actions
}

fn session_of(s: &Recorded) -> Option<&str> {
    s.attributes.iter().find(|kv| kv.key.as_str() == "mcp.session.id").and_then(|kv| match &kv.value {
        opentelemetry::Value::String(s) => Some(s.as_str()),
        _ => None,
    })
}

fn action_span(e: &Value) -> Option<Recorded> {
    let (seq, start, end) = timing(e)?;
    let tool = e["tool"].as_str().unwrap_or("?");
    let host = e["traceparent"].as_str().and_then(parse_traceparent);
    let live = e["span"].as_str().and_then(parse_traceparent);
    let (trace_id, span_id) = match (live, host) {
        (Some((trace, span)), _) => (trace, span),
        (None, Some((trace, _))) => (trace, derived_span(e, seq)),
        (None, None) => (derived_trace(e, seq), derived_span(e, seq)),
    };
    let mut attributes = vec![
        KeyValue::new("mcp.method.name", "tools/call"),
        KeyValue::new("gen_ai.tool.name", tool.to_owned()),
        KeyValue::new("gen_ai.operation.name", "execute_tool"),
    ];
    if let Some(session) = e["session"].as_str() {
        attributes.push(KeyValue::new("mcp.session.id", session.to_owned()));
    }
    match &e["id"] {
        Value::Null => {}
        Value::String(id) => attributes.push(KeyValue::new("jsonrpc.request.id", id.clone())),
        id => attributes.push(KeyValue::new("jsonrpc.request.id", id.to_string())),
    }
    let error = (e["outcome"] == "error").then(|| "tool_error".to_owned());
    if let Some(error) = &error {
        attributes.push(KeyValue::new("error.type", error.clone()));
    }
    Some(Recorded {
        seq,
        name: format!("tools/call {tool}"),
        kind: SpanKind::Server,
        trace_id,
        span_id,
        parent: host.map(|(_, span)| span),
        start,
        end,
        attributes,
        error: error.map(|_| error_of(e).unwrap_or_else(|| "tool_error".into())),
    })
}

fn error_of(e: &Value) -> Option<String> {
    if e["outcome"] != "error" {
        return None;
    }
    Some(e["error"].as_str().unwrap_or("error").to_owned())
}

/// An event's seq, and its span's start and end (the event is written as the call ends).
fn timing(e: &Value) -> Option<(u64, SystemTime, SystemTime)> {
    let seq = e["seq"].as_u64()?;
    let ts = time::OffsetDateTime::parse(e["ts"].as_str()?, &time::format_description::well_known::Rfc3339).ok()?;
    let end = SystemTime::UNIX_EPOCH + Duration::from_nanos(u64::try_from(ts.unix_timestamp_nanos()).ok()?);
    let ms = e["ms"].as_f64().filter(|ms| ms.is_finite() && *ms >= 0.0).unwrap_or(0.0);
    let start = end.checked_sub(Duration::from_secs_f64(ms / 1000.0)).unwrap_or(end);
    Some((seq, start, end))
}

/// A W3C traceparent's trace and span ids.
fn parse_traceparent(tp: &str) -> Option<(TraceId, SpanId)> {
    let mut parts = tp.trim().split('-');
    let (_version, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
    let trace = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    Some((trace, span))
}

fn digest(what: &str, e: &Value, seq: u64) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(what.as_bytes());
    h.update(e["run"].as_str().unwrap_or_default().as_bytes());
    h.update(seq.to_be_bytes());
    h.finalize().into()
}

/// A trace id of the log's own, from the event's run and seq.
fn derived_trace(e: &Value, seq: u64) -> TraceId {
    let d = digest("gm-trace", e, seq);
    let mut id = [0u8; 16];
    id.copy_from_slice(&d[..16]);
    id[0] |= 1; // never the invalid all-zero id
    TraceId::from_bytes(id)
}

/// A span id from the event's run and seq.
fn derived_span(e: &Value, seq: u64) -> SpanId {
    derived_id("gm-span", e, seq)
}

/// A span id of kind `what` (one event can make two spans) from the event's run and seq.
fn derived_id(what: &str, e: &Value, seq: u64) -> SpanId {
    let d = digest(what, e, seq);
    let mut id = [0u8; 8];
    id.copy_from_slice(&d[..8]);
    id[0] |= 1;
    SpanId::from_bytes(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn events() -> Vec<Value> {
        vec![
            json!({ "seq": 5, "ts": "2026-12-05T03:00:01.000Z", "run": "r1", "kind": "code-call", "session": "s1", "verb": "stat_file", "ms": 2.0, "outcome": "ok" }),
            json!({ "seq": 6, "ts": "2026-12-05T03:00:01.500Z", "run": "r1", "kind": "code-call", "session": "s1", "verb": "read_file", "ms": 1.0, "outcome": "error", "error": "not_found" }),
            json!({ "seq": 7, "ts": "2026-12-05T03:00:02.000Z", "run": "r1", "kind": "action", "session": "s1", "tool": "run_code", "id": 3, "ms": 1500.0, "outcome": "ok",
                    "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" }),
            json!({ "seq": 8, "ts": "2026-12-05T03:00:03.000Z", "run": "r1", "kind": "action", "session": "s1", "tool": "stat_file", "id": "x", "ms": 1.0, "outcome": "error", "error": "not_found" }),
        ]
    }

    #[test]
    fn a_body_and_its_calls_keep_the_hosts_trace_and_nest() {
        let spans = spans_of(&events());
        assert_eq!(spans.len(), 4);
        let body = spans.iter().find(|s| s.seq == 7).expect("run_code");
        assert_eq!(body.name, "tools/call run_code");
        assert_eq!(body.trace_id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(body.parent.map(|p| p.to_string()).as_deref(), Some("00f067aa0ba902b7"));
        assert_eq!(body.end.duration_since(body.start).expect("ordered"), Duration::from_millis(1500));
        for seq in [5, 6] {
            let call = spans.iter().find(|s| s.seq == seq).expect("code-call");
            assert_eq!((call.trace_id, call.parent), (body.trace_id, Some(body.span_id)), "seq {seq}");
            assert_eq!(call.kind, SpanKind::Internal);
        }
        let failed = spans.iter().find(|s| s.seq == 6).expect("read_file");
        assert_eq!(failed.error.as_deref(), Some("not_found"));
        let tool = spans.iter().find(|s| s.seq == 8).expect("stat_file");
        assert_eq!(tool.parent, None);
        assert_ne!(tool.trace_id, body.trace_id);
        assert!(tool.attributes.iter().any(|kv| kv.key.as_str() == "error.type"));
    }

    #[test]
    fn a_child_tools_call_is_a_client_span_under_the_bodys_call() {
        let mut e = events();
        e[0]["verb"] = json!("t_echo");
        e[0]["server"] = json!("t");
        e[0]["tool"] = json!("echo");
        let spans = spans_of(&e);
        let call = spans.iter().find(|s| s.name == "execute_tool t_echo").expect("the body's call");
        let client = spans.iter().find(|s| s.name == "tools/call echo").expect("the CLIENT span");
        assert_eq!(client.kind, SpanKind::Client);
        assert_eq!((client.trace_id, client.parent), (call.trace_id, Some(call.span_id)));
        assert_ne!(client.span_id, call.span_id);
    }

    #[test]
    fn ids_are_the_same_every_time_and_differ_by_seq() {
        let (a, b) = (spans_of(&events()), spans_of(&events()));
        assert_eq!(a, b);
        let mut ids: Vec<SpanId> = a.iter().map(|s| s.span_id).collect();
        ids.dedup();
        assert_eq!(ids.len(), 4);
    }

    #[test]
    fn a_live_span_in_the_event_is_kept() {
        let mut e = events();
        e[3]["span"] = json!("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
        let spans = spans_of(&e);
        let tool = spans.iter().find(|s| s.seq == 8).expect("stat_file");
        assert_eq!(tool.trace_id.to_string(), "0af7651916cd43dd8448eb211c80319c");
        assert_eq!(tool.span_id.to_string(), "b7ad6b7169203331");
    }
}
