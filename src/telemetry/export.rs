//! The providers that send spans and metrics over OTLP, built once when export is on.
//!
//! Export never runs on an arbiter: the SDK's batch span processor and periodic metric reader
//! each have a thread of their own with a bounded queue (a full queue drops, it never waits),
//! and OTLP/HTTP goes through reqwest's blocking client, which runs its own runtime. gRPC
//! (tonic) needs a tokio reactor, which those threads lack: its exporters run inside a small
//! runtime of their own ([`OnRuntime`]).

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

use super::config::{OtelConfig, Protocol, Signal};

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("the {signal} exporter could not be built: {source}")]
    Build {
        signal: &'static str,
        #[source]
        source: opentelemetry_otlp::ExporterBuildError,
    },
    #[error("the gRPC exporter's runtime could not start: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("header {0:?} from the config file is not a valid gRPC metadata entry")]
    Header(String),
}

/// Spans the exporter handed to the collector, and those it refused or that failed to go
/// (down, timed out). Spans ended but in neither were dropped: the queue was full, or they
/// were still queued when the worker's flush gave up.
#[derive(Debug, Default)]
pub struct SpanCounts {
    pub exported: AtomicU64,
    pub failed: AtomicU64,
}

/// What [`build`] made.
pub struct Providers {
    pub tracer: Option<SdkTracerProvider>,
    pub counts: Arc<SpanCounts>,
    pub meter: Option<SdkMeterProvider>,
    /// The gRPC exporters' runtime, kept while they live.
    pub runtime: Option<tokio::runtime::Runtime>,
}

/// Builds a provider for each signal the config exports.
pub fn build(config: &OtelConfig, resource: Resource) -> Result<Providers, ExportError> {
    let grpc = [&config.traces, &config.metrics].into_iter().flatten().any(|s| s.protocol == Protocol::Grpc);
    let runtime = if grpc {
        Some(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("gm-otel-grpc")
                .enable_all()
                .build()
                .map_err(ExportError::Runtime)?,
        )
    } else {
        None
    };
    let handle = runtime.as_ref().map(|r| r.handle().clone());
    let counts = Arc::new(SpanCounts::default());
    let tracer = match &config.traces {
        Some(signal) => Some(tracer_provider(signal, config, resource.clone(), handle.as_ref(), &counts)?),
        None => None,
    };
    let meter = match &config.metrics {
        Some(signal) => Some(meter_provider(signal, config, resource, handle.as_ref())?),
        None => None,
    };
    Ok(Providers { tracer, counts, meter, runtime })
}

fn tracer_provider(
    signal: &Signal,
    config: &OtelConfig,
    resource: Resource,
    grpc: Option<&tokio::runtime::Handle>,
    counts: &Arc<SpanCounts>,
) -> Result<SdkTracerProvider, ExportError> {
    let built = |source| ExportError::Build { signal: "trace", source };
    let builder = SdkTracerProvider::builder().with_resource(resource);
    let builder = match (signal.protocol, grpc) {
        (Protocol::Grpc, Some(handle)) => {
            // tonic's channel spawns its worker where it is built: in the runtime.
            let _entered = handle.enter();
            let mut b = opentelemetry_otlp::SpanExporter::builder().with_tonic().with_metadata(metadata(config)?);
            if let Some(endpoint) = &signal.endpoint {
                b = b.with_endpoint(endpoint);
            }
            let exporter = OnRuntime { inner: b.build().map_err(built)?, handle: handle.clone() };
            let exporter = Counted::new(exporter, counts.clone());
            builder.with_span_processor(BatchSpanProcessor::builder(exporter).build())
        }
        _ => {
            let mut b = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_headers(headers(config));
            if let Some(endpoint) = &signal.endpoint {
                b = b.with_endpoint(endpoint);
            }
            let exporter = Counted::new(b.build().map_err(built)?, counts.clone());
            builder.with_span_processor(BatchSpanProcessor::builder(exporter).build())
        }
    };
    Ok(builder.build())
}

fn meter_provider(
    signal: &Signal,
    config: &OtelConfig,
    resource: Resource,
    grpc: Option<&tokio::runtime::Handle>,
) -> Result<SdkMeterProvider, ExportError> {
    let built = |source| ExportError::Build { signal: "metrics", source };
    let builder = SdkMeterProvider::builder().with_resource(resource);
    let builder = match (signal.protocol, grpc) {
        (Protocol::Grpc, Some(handle)) => {
            let _entered = handle.enter();
            let mut b = opentelemetry_otlp::MetricExporter::builder().with_tonic().with_metadata(metadata(config)?);
            if let Some(endpoint) = &signal.endpoint {
                b = b.with_endpoint(endpoint);
            }
            let exporter = OnRuntime { inner: b.build().map_err(built)?, handle: handle.clone() };
            builder.with_reader(PeriodicReader::builder(exporter).build())
        }
        _ => {
            let mut b = opentelemetry_otlp::MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .with_headers(headers(config));
            if let Some(endpoint) = &signal.endpoint {
                b = b.with_endpoint(endpoint);
            }
            builder.with_reader(PeriodicReader::builder(b.build().map_err(built)?).build())
        }
    };
    Ok(builder.build())
}

/// The config file's headers (the exporter adds `OTEL_EXPORTER_OTLP_HEADERS` over them).
fn headers(config: &OtelConfig) -> HashMap<String, String> {
    config.headers.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}

fn metadata(config: &OtelConfig) -> Result<opentelemetry_otlp::tonic_types::metadata::MetadataMap, ExportError> {
    let mut map = http::HeaderMap::new();
    for (k, v) in &config.headers {
        let bad = || ExportError::Header(k.clone());
        let name = http::HeaderName::from_bytes(k.to_ascii_lowercase().as_bytes()).map_err(|_| bad())?;
        map.insert(name, http::HeaderValue::from_str(v).map_err(|_| bad())?);
    }
    Ok(opentelemetry_otlp::tonic_types::metadata::MetadataMap::from_headers(map))
}

/// An exporter that counts what it sent and what failed ([`SpanCounts`]), and rests after a
/// failure: while the collector refuses or does not answer, each batch would still be
/// encoded and sent on the worker's cores for nothing (a refused collector cost a pinned
/// `stat_file` p99 ~30 %). After a failure, batches are dropped (counted as failed) for
/// [`REST_FIRST`], doubling with each failure up to [`REST_MOST`]; a success ends it.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    counts: Arc<SpanCounts>,
    /// Milliseconds since `epoch` until which batches are dropped, and the last rest.
    rest: std::sync::Mutex<(u64, Duration)>,
    epoch: std::time::Instant,
}

const REST_FIRST: Duration = Duration::from_secs(1);
const REST_MOST: Duration = Duration::from_secs(30);

impl<E> Counted<E> {
    fn new(inner: E, counts: Arc<SpanCounts>) -> Self {
        Counted { inner, counts, rest: std::sync::Mutex::new((0, Duration::ZERO)), epoch: std::time::Instant::now() }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn resting(&self) -> bool {
        self.rest.lock().is_ok_and(|r| self.now_ms() < r.0)
    }

    /// After an export: a failure starts (or lengthens) a rest, a success ends it.
    fn after(&self, ok: bool) {
        let Ok(mut rest) = self.rest.lock() else { return };
        if ok {
            *rest = (0, Duration::ZERO);
        } else {
            let next = (rest.1 * 2).clamp(REST_FIRST, REST_MOST);
            *rest = (self.now_ms() + next.as_millis() as u64, next);
        }
    }
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        if self.resting() {
            self.counts.failed.fetch_add(n, Ordering::Relaxed);
            return Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                "the collector failed the last export: dropped while gm waits to try again".into(),
            ));
        }
        let result = self.inner.export(batch).await;
        self.after(result.is_ok());
        let count = if result.is_ok() { &self.counts.exported } else { &self.counts.failed };
        count.fetch_add(n, Ordering::Relaxed);
        result
    }
    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }
    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter whose work runs inside a tokio runtime: tonic's connections and timers need its
/// reactor, and the SDK's export threads have none.
#[derive(Debug)]
struct OnRuntime<E> {
    inner: E,
    handle: tokio::runtime::Handle,
}

/// A future polled inside a runtime's context (the I/O it starts registers with that runtime,
/// whose worker thread drives it).
struct Entered<'a> {
    handle: tokio::runtime::Handle,
    future: BoxFuture<'a, OTelSdkResult>,
}

impl Future for Entered<'_> {
    type Output = OTelSdkResult;
    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<OTelSdkResult> {
        let _entered = self.handle.enter();
        self.future.as_mut().poll(cx)
    }
}

impl<E: SpanExporter> SpanExporter for OnRuntime<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        Entered { handle: self.handle.clone(), future: Box::pin(self.inner.export(batch)) }.await
    }
    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        let _entered = self.handle.enter();
        self.inner.shutdown_with_timeout(timeout)
    }
    fn force_flush(&mut self) -> OTelSdkResult {
        let _entered = self.handle.enter();
        self.inner.force_flush()
    }
    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for OnRuntime<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        Entered { handle: self.handle.clone(), future: Box::pin(self.inner.export(metrics)) }.await
    }
    fn force_flush(&self) -> OTelSdkResult {
        let _entered = self.handle.enter();
        self.inner.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _entered = self.handle.enter();
        self.inner.shutdown_with_timeout(timeout)
    }
    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A collector's exporter that fails while `failing` is set, and counts its calls.
    #[derive(Debug, Default)]
    struct Collector {
        calls: AtomicUsize,
        failing: std::sync::atomic::AtomicBool,
    }

    impl SpanExporter for &'static Collector {
        async fn export(&self, _: Vec<SpanData>) -> OTelSdkResult {
            self.calls.fetch_add(1, Ordering::Relaxed);
            if self.failing.load(Ordering::Relaxed) {
                Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure("refused".into()))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn after_a_failed_export_batches_are_dropped_without_sending_until_the_rest_ends() {
        let collector: &'static Collector = Box::leak(Box::default());
        collector.failing.store(true, Ordering::Relaxed);
        let counted = Counted::new(collector, Arc::default());
        let export = |c: &Counted<&'static Collector>| futures::executor::block_on(c.export(Vec::new())).is_ok();
        assert!(!export(&counted));
        assert!(!export(&counted), "resting: dropped");
        assert_eq!(collector.calls.load(Ordering::Relaxed), 1, "the second batch was not sent");
        // The rest over (moved into the past), the collector back: sent, and no rest after.
        counted.rest.lock().expect("rest").0 = 0;
        collector.failing.store(false, Ordering::Relaxed);
        assert!(export(&counted));
        assert!(export(&counted));
        assert_eq!(collector.calls.load(Ordering::Relaxed), 3);
        // Each failure in a row rests twice as long, up to the most.
        collector.failing.store(true, Ordering::Relaxed);
        for expected in [1, 2, 4, 8, 16, 30, 30] {
            counted.rest.lock().expect("rest").0 = 0;
            assert!(!export(&counted));
            assert_eq!(counted.rest.lock().expect("rest").1, Duration::from_secs(expected));
        }
    }
}
