//! OpenTelemetry export (OTLP) of the worker's requests and tool calls, when the user turns it
//! on (issue 38). Off — the usual case — nothing is built and every hook is one load of a null
//! pointer. The worker follows the user's config file ([`follow`]): an export it turns on, off
//! or changes replaces the running one, which sends what it holds and stops.
//!
//! - `config`: whether export is on, from the `OTEL_*` variables and `~/.gmnew/config.json`.
//! - `export`: the tracer and meter providers (opentelemetry-otlp, off the arbiters).
//! - `spans`: the MCP semantic conventions' spans.
//! - `deferred`: request spans built off the request's thread.
//! - `metrics`: the instruments.
//! - `replay`: `gm otel-export`, a recorded log sent as the same spans.

pub mod config;
mod deferred;
mod export;
mod metrics;
pub mod replay;
pub mod spans;

use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

pub use config::{ConfigError, OtelConfig, Protocol};
pub use export::ExportError;
pub use spans::{Outcome, Request, RequestSpan, ToolSpan, Transport};

/// The longest a worker's exit waits for the last spans and metrics to go out.
pub const FLUSH_LIMIT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("OpenTelemetry: no thread for the spans: {0}")]
    Thread(std::io::Error),
}

/// The worker's export, once started.
pub struct Telemetry {
    tracer_provider: Option<SdkTracerProvider>,
    meter_provider: Option<SdkMeterProvider>,
    tracer: Option<SdkTracer>,
    instruments: Option<metrics::Instruments>,
    /// Where requests' spans and durations are built (`None` when neither is exported).
    deferred: Option<deferred::Deferred>,
    /// Arguments and results go on spans (`GM_OTEL_CONTENT=1`).
    content: bool,
    /// What export was set to, for the worker's log.
    described: serde_json::Value,
    /// Spans ended (handed to the batch processor).
    ended: AtomicU64,
    /// What the exporter sent and what failed.
    counts: Arc<export::SpanCounts>,
    /// gRPC exporters' runtime, stopped when this export is replaced.
    runtime: Mutex<Option<tokio::runtime::Runtime>>,
    /// What it was built from: a config file that resolves to the same changes nothing.
    config: OtelConfig,
}

/// The running export; null when off. Each is a leaked box, never freed: a request holds its
/// export as `&'static` while it runs, and an export is replaced only when the user edits the
/// config file, so the few hundred bytes a replaced one leaves are the price of a hot path that
/// is one load.
static TELEMETRY: AtomicPtr<Telemetry> = AtomicPtr::new(std::ptr::null_mut());
/// Starting and replacing the export, one at a time.
static SWITCH: Mutex<()> = Mutex::new(());
/// The worker the resource names, from the first [`start`].
static WORKER: OnceLock<(String, String)> = OnceLock::new();

/// What the resource says of the worker.
pub struct Worker<'a> {
    /// The workspace's directory name (never its path: a path names the user).
    pub workspace_name: &'a str,
    pub worker_id: &'a str,
}

/// The running export, `None` when it is off.
pub fn get() -> Option<&'static Telemetry> {
    let running = TELEMETRY.load(Ordering::Acquire);
    // SAFETY: a non-null pointer came from `Box::into_raw` in `install` and is never freed.
    unsafe { running.as_ref() }
}

/// Makes `next` the running export; returns the one it replaced.
fn install(next: Option<Telemetry>) -> Option<&'static Telemetry> {
    let raw = next.map_or(std::ptr::null_mut(), |t| Box::into_raw(Box::new(t)));
    let before = TELEMETRY.swap(raw, Ordering::AcqRel);
    // SAFETY: as in `get`: from `Box::into_raw`, never freed.
    unsafe { before.as_ref() }
}

/// Starts export when the environment or `~/.gmnew/config.json` turns it on; `Ok(None)` when
/// nothing does. Once per process (a second call returns the first's).
pub fn start(
    worker: &Worker<'_>,
    home_config: Option<&std::path::Path>,
) -> Result<Option<&'static Telemetry>, TelemetryError> {
    let _one = SWITCH.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let worker = WORKER.get_or_init(|| (worker.workspace_name.to_owned(), worker.worker_id.to_owned()));
    if let Some(t) = get() {
        return Ok(Some(t));
    }
    let env = |var: &str| std::env::var(var).ok();
    let Some(config) = config::resolve(&env, home_config)? else { return Ok(None) };
    let telemetry = build(config, worker)?;
    install(Some(telemetry));
    Ok(get())
}

/// Reads the user's config file again (it changed): an export it turns on, off or changes
/// replaces the running one, which sends what it holds and stops on a thread of its own.
/// Returns what to log (the `otel` event's fields), `None` when nothing changed. A file that
/// cannot be read leaves export as it was.
pub fn follow(home_config: Option<&std::path::Path>) -> Option<serde_json::Value> {
    let _one = SWITCH.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let worker = WORKER.get()?;
    let env = |var: &str| std::env::var(var).ok();
    let kept = |e: &dyn std::fmt::Display| {
        Some(serde_json::json!({ "error": e.to_string(), "then": "export goes on as it was" }))
    };
    let wanted = match config::resolve(&env, home_config) {
        Ok(wanted) => wanted,
        Err(e) => return kept(&e),
    };
    if get().map(|t| &t.config) == wanted.as_ref() {
        return None;
    }
    let next = match wanted.map(|config| build(config, worker)).transpose() {
        Ok(next) => next,
        Err(e) => return kept(&e),
    };
    let retired = install(next);
    if let Some(old) = retired {
        let _ = std::thread::Builder::new().name("gm-otel-retire".into()).spawn(move || {
            flush(old);
            if let Some(d) = &old.deferred {
                d.stop();
            }
            let runtime = old.runtime.lock().ok().and_then(|mut r| r.take());
            if let Some(runtime) = runtime {
                runtime.shutdown_background();
            }
        });
    }
    let exporting = get().map_or(serde_json::Value::Null, |t| t.describe().clone());
    Some(serde_json::json!({ "exporting": exporting, "changed": true }))
}

fn build(config: OtelConfig, worker: &(String, String)) -> Result<Telemetry, TelemetryError> {
    let env = |var: &str| std::env::var(var).ok();
    let worker = Worker { workspace_name: &worker.0, worker_id: &worker.1 };
    let resource = resource(&config, &worker, &env);
    let providers = export::build(&config, resource)?;
    let tracer = providers.tracer.as_ref().map(|p| p.tracer_with_scope(scope()));
    let instruments = providers.meter.as_ref().map(|p| {
        use opentelemetry::metrics::MeterProvider as _;
        metrics::Instruments::new(&p.meter_with_scope(scope()))
    });
    let deferred = if tracer.is_some() || instruments.is_some() {
        let operation = instruments.as_ref().map(|m| m.operation.clone());
        Some(deferred::Deferred::start(tracer.clone(), operation).map_err(TelemetryError::Thread)?)
    } else {
        None
    };
    let signal = |s: &Option<config::Signal>| match s {
        Some(s) => serde_json::json!({ "protocol": s.protocol.as_str(), "endpoint": s.endpoint }),
        None => serde_json::Value::Null,
    };
    Ok(Telemetry {
        described: serde_json::json!({ "traces": signal(&config.traces), "metrics": signal(&config.metrics), "content": config.content }),
        tracer_provider: providers.tracer,
        meter_provider: providers.meter,
        tracer,
        instruments,
        deferred,
        content: config.content,
        ended: AtomicU64::new(0),
        counts: providers.counts,
        runtime: Mutex::new(providers.runtime),
        config,
    })
}

/// gm's instrumentation scope: its name and version.
fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("gm").with_version(env!("CARGO_PKG_VERSION")).build()
}

fn resource(config: &OtelConfig, worker: &Worker<'_>, env: &dyn Fn(&str) -> Option<String>) -> Resource {
    // `Resource::builder` reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; gm names the
    // service only where they do not.
    let mut builder = Resource::builder();
    if !OtelConfig::env_names_service(env) {
        builder = builder.with_service_name(config.service_name.clone().unwrap_or_else(|| "gm".into()));
    }
    builder
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("service.instance.id", worker.worker_id.to_owned()),
            KeyValue::new("gm.workspace.name", worker.workspace_name.to_owned()),
        ])
        .build()
}

impl Telemetry {
    /// What export is set to, for the worker's `start` event.
    pub fn describe(&self) -> &serde_json::Value {
        &self.described
    }

    /// A child server started (`ready`) or failed to.
    pub fn child_start(&self, server: &str, ready: bool) {
        if let Some(m) = &self.instruments {
            let outcome = if ready { "ready" } else { "failed" };
            m.child_starts
                .add(1, &[KeyValue::new("gm.child.server", server.to_owned()), KeyValue::new("outcome", outcome)]);
        }
    }

    /// A search index build ended after `seconds`.
    pub fn index_built(&self, seconds: f64) {
        if let Some(m) = &self.instruments {
            m.index_build.record(seconds, &[]);
        }
    }

    /// The result budget cut `bytes` from a reply.
    pub fn bytes_cut(&self, bytes: u64) {
        if let Some(m) = &self.instruments {
            m.bytes_cut.add(bytes, &[]);
        }
    }

    /// Records a session's whole time, by its protocol version and transport.
    pub fn session_ended(&self, duration: Duration, protocol: Option<&str>, transport: Transport) {
        if let Some(m) = &self.instruments {
            let mut labels = vec![KeyValue::new("network.transport", transport.as_str())];
            if let Some(version) = protocol {
                labels.push(KeyValue::new("mcp.protocol.version", version.to_owned()));
            }
            m.session.record(duration.as_secs_f64(), &labels);
        }
    }
}

/// The span current on this thread when export is on and one is current (a request's, while
/// its future runs): what a body's `gm.*` calls hang under. `None` costs nothing when off.
pub fn current_parent() -> Option<Context> {
    get()?;
    let cx = Context::current();
    cx.has_active_span().then_some(cx)
}

/// A span's W3C traceparent, `None` for no valid span (traces off).
pub fn traceparent(cx: &Context) -> Option<String> {
    traceparent_of(cx.span().span_context())
}

/// A span's W3C `traceparent`, `None` for an invalid one.
fn traceparent_of(sc: &SpanContext) -> Option<String> {
    if !sc.is_valid() {
        return None;
    }
    // Written by hand: it is made for every call's log event, and `format!`'s hex through
    // `Display` cost more than the rest of the span's work in the request.
    let mut out = String::with_capacity(55);
    out.push_str("00-");
    push_hex(&mut out, &sc.trace_id().to_bytes());
    out.push('-');
    push_hex(&mut out, &sc.span_id().to_bytes());
    out.push('-');
    push_hex(&mut out, &[sc.trace_flags().to_u8()]);
    Some(out)
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 15)]));
    }
}

impl Telemetry {
    /// A span ended (it goes to the batch processor's queue).
    fn span_ended(&self) {
        self.ended.fetch_add(1, Ordering::Relaxed);
    }

    /// Spans ended, sent, failed (refused, timed out) and dropped (the queue was full, or
    /// still queued): what the worker says at its exit.
    pub fn span_counts(&self) -> (u64, u64, u64, u64) {
        let ended = self.ended.load(Ordering::Relaxed);
        let exported = self.counts.exported.load(Ordering::Relaxed);
        let failed = self.counts.failed.load(Ordering::Relaxed);
        (ended, exported, failed, ended.saturating_sub(exported + failed))
    }
}

/// How often the worker looks whether spans are being lost, and says so once per look.
const LOSS_LOOK: Duration = Duration::from_secs(60);

/// While export is on, every [`LOSS_LOOK`] (`GM_OTEL_LOSS_MS` in tests): when spans failed or
/// went unsent since the last look, `report` hears the counts once (the worker logs a
/// `telemetry` event), so that a collector that is down shows in the run's log while it is
/// down, not only at exit. Spans still in the batch queue count as unsent until sent, so a
/// look reports only a rise of failures, or of unsent spans that outlasts a whole period.
pub fn watch_losses(report: impl Fn(serde_json::Value) + Send + 'static) {
    let every = std::env::var("GM_OTEL_LOSS_MS")
        .ok()
        .and_then(|ms| ms.trim().parse().ok())
        .map_or(LOSS_LOOK, Duration::from_millis);
    // Looks at whichever export runs: the config file may turn it on, or replace it, later.
    let _ = std::thread::Builder::new().name("gm-otel-losses".into()).spawn(move || {
        let (mut watched, mut failed_before, mut unsent_before) = (std::ptr::null::<Telemetry>(), 0, 0);
        loop {
            std::thread::sleep(every);
            let Some(t) = get() else { continue };
            if !std::ptr::eq(t, watched) {
                (watched, failed_before, unsent_before) = (t, 0, 0);
            }
            let (ended, exported, failed, unsent) = t.span_counts();
            // Unsent counts only when it stayed up over a whole period: a queue that drains
            // between looks is no loss.
            let losing = failed > failed_before || (unsent > 0 && unsent >= unsent_before && unsent_before > 0);
            if losing {
                report(serde_json::json!({
                    "state": "losing", "spansEnded": ended, "spansSent": exported,
                    "spansFailed": failed, "spansUnsent": unsent,
                    "then": "calls go on unchanged; spans that cannot be sent are dropped",
                }));
            }
            (failed_before, unsent_before) = (failed, unsent);
        }
    });
}

/// Sends what is still queued and stops the exporters, waiting at most [`FLUSH_LIMIT`]: a
/// collector that is down or slow never holds a worker's exit longer. Then says, on stderr
/// (the worker's `.gm/worker.log`), how many spans did not reach the collector. Off, it does
/// nothing.
pub fn shutdown() {
    let Some(t) = get() else { return };
    flush(t);
    let (ended, exported, failed, dropped) = t.span_counts();
    if failed + dropped > 0 {
        gm_actors::stderr_line!(
            "gm: OpenTelemetry: {exported} of {ended} spans sent; {failed} failed (refused or unanswered by the collector), {dropped} dropped (queue full or unsent at exit)"
        );
    }
}

fn flush(t: &'static Telemetry) {
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    // On a thread of its own: the SDK's shutdown waits for its export threads, which wait for
    // the collector; this thread is left behind if that takes too long.
    let spawned = std::thread::Builder::new().name("gm-otel-shutdown".into()).spawn(move || {
        // The requests' spans still being built go out with the rest.
        if let Some(d) = &t.deferred {
            d.flush(FLUSH_LIMIT / 2);
        }
        if let Some(p) = &t.tracer_provider {
            let _ = p.shutdown_with_timeout(FLUSH_LIMIT);
        }
        if let Some(p) = &t.meter_provider {
            let _ = p.shutdown_with_timeout(FLUSH_LIMIT);
        }
        let _ = done_tx.send(());
    });
    if spawned.is_ok() {
        let _ = done_rx.recv_timeout(FLUSH_LIMIT);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

    #[test]
    fn a_traceparent_is_the_w3c_form_of_the_spans_ids() {
        let trace = TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").expect("trace id");
        let span = SpanId::from_hex("b7ad6b7169203331").expect("span id");
        for flags in [TraceFlags::SAMPLED, TraceFlags::default()] {
            let cx = Context::new().with_remote_span_context(SpanContext::new(
                trace,
                span,
                flags,
                true,
                TraceState::default(),
            ));
            let expected = format!("00-{trace}-{span}-{:02x}", flags.to_u8());
            assert_eq!(traceparent(&cx).as_deref(), Some(expected.as_str()));
        }
        assert_eq!(traceparent(&Context::new()), None);
    }
}
