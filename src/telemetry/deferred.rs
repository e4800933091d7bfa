//! Request spans finished off the request's thread. A request only notes what its SERVER span
//! needs — ids chosen up front, so that its children, the host and the log can name it; its
//! times; its outcome — and the `gm-otel-spans` thread builds the span and records the
//! duration metric from that note, in batches. The SDK's span start, the attribute vectors, the
//! batch processor's queue and the histogram's attribute lookup cost a `stat_file` round trip
//! ~8 % when they ran in the request (`mcp-bench otel`), and a thread woken per request cost
//! more. A note is pushed under an uncontended lock into room kept from the last batch, and
//! only the first note of a batch wakes the thread; it copies no text (names are shared, the
//! id stays a number), since each copy was an allocation made on the request's thread and freed
//! on this one. A full queue drops the note: it counts as an unsent span.

use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use opentelemetry::metrics::Histogram;
use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceId, Tracer};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

use super::spans::Transport;

/// Notes waiting for the thread: a burst of this many requests ends before one is dropped.
const QUEUE: usize = 8192;
/// How long the thread gathers notes once the first arrives: a request never wakes it (a
/// wake-up per request cost more than the span it carried); at most this often, a batch.
const GATHER: Duration = Duration::from_millis(50);

/// What a request's SERVER span and duration metric are made of.
pub(super) struct Note {
    pub method: Arc<str>,
    /// The tool's name, the resource's URI, the prompt's name.
    pub target: Option<Arc<str>>,
    pub session: Arc<str>,
    pub id: RequestId,
    pub transport: Transport,
    pub protocol: Option<&'static str>,
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

/// A request's JSON-RPC id: nearly always a number, kept as one until the span is built.
pub(super) enum RequestId {
    Number(i64),
    Text(String),
}

impl RequestId {
    fn text(&self) -> String {
        match self {
            RequestId::Number(n) => n.to_string(),
            RequestId::Text(s) => s.clone(),
        }
    }
}

#[derive(Default)]
struct Waiting {
    notes: Vec<Note>,
    /// Callers of [`Deferred::flush`], told once everything before them is a span.
    flushes: Vec<mpsc::Sender<()>>,
    /// The export this thread served was replaced: it ends once nothing is waiting.
    stopped: bool,
}

#[derive(Default)]
struct Queue {
    waiting: Mutex<Waiting>,
    arrived: Condvar,
}

/// The sending side; the thread lives as long as the process.
pub(super) struct Deferred {
    queue: Arc<Queue>,
}

impl Deferred {
    pub fn start(tracer: Option<SdkTracer>, operation: Option<Histogram<f64>>) -> std::io::Result<Self> {
        let queue = Arc::new(Queue::default());
        let theirs = queue.clone();
        std::thread::Builder::new().name("gm-otel-spans".into()).spawn(move || run(&theirs, tracer, operation))?;
        Ok(Deferred { queue })
    }

    /// Hands `note` over; `false` when the queue is full and it was dropped.
    pub fn send(&self, note: Note) -> bool {
        let Ok(mut waiting) = self.queue.waiting.lock() else { return false };
        if waiting.notes.len() >= QUEUE {
            return false;
        }
        waiting.notes.push(note);
        let first = waiting.notes.len() == 1;
        drop(waiting);
        if first {
            self.queue.arrived.notify_one();
        }
        true
    }

    /// Ends the thread once what is waiting is built (the export it serves was replaced).
    pub fn stop(&self) {
        if let Ok(mut waiting) = self.queue.waiting.lock() {
            waiting.stopped = true;
        }
        self.queue.arrived.notify_one();
    }

    /// Waits, at most `within`, until every note sent so far is a span.
    pub fn flush(&self, within: Duration) {
        let (done, wait) = mpsc::channel();
        match self.queue.waiting.lock() {
            Ok(mut waiting) => waiting.flushes.push(done),
            Err(_) => return,
        }
        self.queue.arrived.notify_one();
        let _ = wait.recv_timeout(within);
    }
}

fn run(queue: &Queue, tracer: Option<SdkTracer>, operation: Option<Histogram<f64>>) {
    // The last batch's vector, emptied, goes back for the next: requests push into room
    // already there rather than growing a new vector from nothing each batch.
    let mut spare = Vec::new();
    loop {
        let Ok(mut waiting) = queue.waiting.lock() else { return };
        while waiting.notes.is_empty() && waiting.flushes.is_empty() {
            if waiting.stopped {
                return;
            }
            waiting = match queue.arrived.wait(waiting) {
                Ok(w) => w,
                Err(_) => return,
            };
        }
        if waiting.flushes.is_empty() {
            // Let the batch fill; a flush asked meanwhile is answered with it.
            drop(waiting);
            std::thread::sleep(GATHER);
            waiting = match queue.waiting.lock() {
                Ok(w) => w,
                Err(_) => return,
            };
        }
        let mut notes = std::mem::replace(&mut waiting.notes, std::mem::take(&mut spare));
        let flushes = std::mem::take(&mut waiting.flushes);
        drop(waiting);
        for note in &notes {
            if let Some(tracer) = &tracer {
                span(tracer, note);
            }
            if let Some(histogram) = &operation {
                histogram.record(note.seconds, &labels(note));
            }
        }
        notes.clear();
        spare = notes;
        for done in flushes {
            let _ = done.send(());
        }
    }
}

/// The SERVER span, with the conventions' name and attributes.
fn span(tracer: &SdkTracer, note: &Note) {
    let name = match &note.target {
        Some(target) => format!("{} {target}", note.method),
        None => note.method.to_string(),
    };
    let mut attributes = vec![
        KeyValue::new("mcp.method.name", note.method.clone()),
        KeyValue::new("mcp.session.id", note.session.clone()),
        KeyValue::new("jsonrpc.request.id", note.id.text()),
        KeyValue::new("network.transport", note.transport.as_str()),
    ];
    if let Some(version) = note.protocol {
        attributes.push(KeyValue::new("mcp.protocol.version", version));
    }
    match (&*note.method, &note.target) {
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
    if let ("tools/call", Some(tool)) = (&*note.method, &note.target) {
        labels.push(KeyValue::new("gen_ai.tool.name", tool.clone()));
    }
    if let Some((error, _)) = &note.error {
        labels.push(KeyValue::new("error.type", error.clone()));
    }
    labels
}
