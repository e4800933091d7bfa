//! Request spans finished off the request's thread. A request only notes what its SERVER span
//! needs — ids chosen up front, so that its children, the host and the log can name it; its
//! times; its outcome — and the `gm-otel-spans` thread builds the span and records the
//! duration metric from that note. The SDK's span start, the attribute vectors, the batch
//! processor's queue and the histogram's attribute lookup cost a `stat_file` round trip ~8 %
//! when they ran in the request (`mcp-bench otel`); a note is a few strings and one send on a
//! bounded queue. A full queue drops the note: it counts as an unsent span.

use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::time::{Duration, SystemTime};

use opentelemetry::metrics::Histogram;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceId, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

use super::spans::Transport;

/// Notes waiting for the thread: a burst of this many requests ends before one is dropped.
const QUEUE: usize = 8192;

/// What a request's SERVER span and duration metric are made of.
pub(super) struct Note {
    pub method: String,
    /// The tool's name, the resource's URI, the prompt's name.
    pub target: Option<String>,
    pub session: String,
    pub id: String,
    pub transport: Transport,
    pub protocol: Option<String>,
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// The host's span (from `params._meta.traceparent`), the parent.
    pub parent: Option<SpanContext>,
    pub start: SystemTime,
    pub end: SystemTime,
    pub seconds: f64,
    /// `error.type`, and the status's description when it differs.
    pub error: Option<(String, String)>,
    /// Arguments and result (`GM_OTEL_CONTENT=1`), already masked and cut.
    pub content: Option<(String, String)>,
}

enum Job {
    Request(Box<Note>),
    /// Everything sent before it is built: say so.
    Flush(mpsc::Sender<()>),
}

/// The sending side; the thread lives as long as the process.
pub(super) struct Deferred {
    tx: SyncSender<Job>,
}

impl Deferred {
    pub fn start(tracer: Option<SdkTracer>, operation: Option<Histogram<f64>>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        std::thread::Builder::new().name("gm-otel-spans".into()).spawn(move || run(&rx, tracer, operation))?;
        Ok(Deferred { tx })
    }

    /// Hands `note` over; `false` when the queue is full and it was dropped.
    pub fn send(&self, note: Box<Note>) -> bool {
        match self.tx.try_send(Job::Request(note)) {
            Ok(()) => true,
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
        }
    }

    /// Waits, at most `within`, until every note sent so far is a span.
    pub fn flush(&self, within: Duration) {
        let (done, wait) = mpsc::channel();
        if send_within(&self.tx, Job::Flush(done), within) {
            let _ = wait.recv_timeout(within);
        }
    }
}

/// `SyncSender` has no send with a timeout: a full queue is tried again until `within`.
fn send_within(tx: &SyncSender<Job>, mut job: Job, within: Duration) -> bool {
    let until = std::time::Instant::now() + within;
    loop {
        match tx.try_send(job) {
            Ok(()) => return true,
            Err(TrySendError::Disconnected(_)) => return false,
            Err(TrySendError::Full(back)) => {
                if std::time::Instant::now() >= until {
                    return false;
                }
                job = back;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

fn run(rx: &Receiver<Job>, tracer: Option<SdkTracer>, operation: Option<Histogram<f64>>) {
    for job in rx {
        match job {
            Job::Request(note) => {
                if let Some(tracer) = &tracer {
                    span(tracer, &note);
                }
                if let Some(histogram) = &operation {
                    histogram.record(note.seconds, &labels(&note));
                }
            }
            Job::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// The SERVER span, with the conventions' name and attributes.
fn span(tracer: &SdkTracer, note: &Note) {
    let name = match &note.target {
        Some(target) => format!("{} {target}", note.method),
        None => note.method.clone(),
    };
    let mut attributes = vec![
        KeyValue::new("mcp.method.name", note.method.clone()),
        KeyValue::new("mcp.session.id", note.session.clone()),
        KeyValue::new("jsonrpc.request.id", note.id.clone()),
        KeyValue::new("network.transport", note.transport.as_str()),
    ];
    if let Some(version) = &note.protocol {
        attributes.push(KeyValue::new("mcp.protocol.version", version.clone()));
    }
    match (note.method.as_str(), &note.target) {
        ("tools/call", Some(tool)) => {
            attributes.push(KeyValue::new("gen_ai.tool.name", tool.clone()));
            attributes.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        ("resources/read", Some(uri)) => attributes.push(KeyValue::new("mcp.resource.uri", uri.clone())),
        ("prompts/get", Some(prompt)) => attributes.push(KeyValue::new("gen_ai.prompt.name", prompt.clone())),
        _ => {}
    }
    if let Some((arguments, result)) = &note.content {
        attributes.push(KeyValue::new("gen_ai.tool.call.arguments", arguments.clone()));
        attributes.push(KeyValue::new("gen_ai.tool.call.result", result.clone()));
    }
    let mut builder = tracer
        .span_builder(name)
        .with_kind(SpanKind::Server)
        .with_trace_id(note.trace_id)
        .with_span_id(note.span_id)
        .with_start_time(note.start);
    if let Some((error, description)) = &note.error {
        attributes.push(KeyValue::new("error.type", error.clone()));
        builder = builder.with_status(Status::error(description.clone()));
    }
    let parent = match &note.parent {
        Some(host) => Context::new().with_remote_span_context(host.clone()),
        None => Context::new(),
    };
    let mut span = builder.with_attributes(attributes).start_with_context(tracer, &parent);
    opentelemetry::trace::Span::end_with_timestamp(&mut span, note.end);
}

/// The duration metric's attributes: method, transport, tool, outcome.
fn labels(note: &Note) -> Vec<KeyValue> {
    let mut labels = vec![
        KeyValue::new("mcp.method.name", note.method.clone()),
        KeyValue::new("network.transport", note.transport.as_str()),
    ];
    if let ("tools/call", Some(tool)) = (note.method.as_str(), &note.target) {
        labels.push(KeyValue::new("gen_ai.tool.name", tool.clone()));
    }
    if let Some((error, _)) = &note.error {
        labels.push(KeyValue::new("error.type", error.clone()));
    }
    labels
}
