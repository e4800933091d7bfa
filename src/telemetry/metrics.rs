//! The instruments: the MCP semantic conventions' two (`mcp.server.operation.duration`,
//! `mcp.server.session.duration`) and gm's own.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use opentelemetry::metrics::{Counter, Histogram, Meter, ObservableCounter, ObservableUpDownCounter};
use opentelemetry::KeyValue;

/// Bucket boundaries (seconds) the MCP conventions recommend for both durations.
const DURATION_BOUNDARIES: [f64; 14] = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

pub struct Instruments {
    /// One request's time, by `mcp.method.name`, `gen_ai.tool.name` and `error.type`.
    pub operation: Histogram<f64>,
    /// One session's time, from its opening to its end.
    pub session: Histogram<f64>,
    /// Requests being answered now: counted by the requests with one atomic add each, read at
    /// each metrics export (the SDK's up-down counter took its attribute lookup per request).
    pub in_flight: Arc<AtomicI64>,
    pub _in_flight: ObservableUpDownCounter<i64>,
    /// Child server starts, by `gm.child.server` and `outcome` (`ready`, `failed`).
    pub child_starts: Counter<u64>,
    /// Bytes the result budget cut from replies (kept whole in `.gm/out/`).
    pub bytes_cut: Counter<u64>,
    /// A search index build's time, from its start to its commit.
    pub index_build: Histogram<f64>,
    /// run_code engines running a body now; read at each metrics export.
    pub _engines_busy: ObservableUpDownCounter<i64>,
    /// Spans that did not reach the collector, by `reason` (`failed`: refused or unanswered;
    /// `unsent`: dropped from a full queue, or still queued). Read from the exporter's counts
    /// at each metrics export; kept so its callback lives as long as the meter.
    pub _spans_lost: ObservableCounter<u64>,
}

impl Instruments {
    pub fn new(meter: &Meter) -> Self {
        let in_flight = Arc::new(AtomicI64::new(0));
        let read = in_flight.clone();
        Self {
            operation: meter
                .f64_histogram("mcp.server.operation.duration")
                .with_unit("s")
                .with_description("The duration of an MCP request the server answered")
                .with_boundaries(DURATION_BOUNDARIES.to_vec())
                .build(),
            session: meter
                .f64_histogram("mcp.server.session.duration")
                .with_unit("s")
                .with_description("The duration of an MCP session")
                .with_boundaries(DURATION_BOUNDARIES.to_vec())
                .build(),
            in_flight,
            _in_flight: meter
                .i64_observable_up_down_counter("gm.requests.in_flight")
                .with_unit("{request}")
                .with_description("MCP requests gm is answering")
                .with_callback(move |observer| observer.observe(read.load(Ordering::Relaxed), &[]))
                .build(),
            child_starts: meter
                .u64_counter("gm.child_server.starts")
                .with_unit("{start}")
                .with_description("Child MCP server starts, by server and outcome (ready, failed)")
                .build(),
            bytes_cut: meter
                .u64_counter("gm.result.bytes_cut")
                .with_unit("By")
                .with_description("Bytes of replies cut to the result budget (kept whole on disk)")
                .build(),
            index_build: meter
                .f64_histogram("gm.search.index.build.duration")
                .with_unit("s")
                .with_description("The time a search index build took, from its start to its commit")
                .build(),
            _engines_busy: meter
                .i64_observable_up_down_counter("gm.run_code.engines.busy")
                .with_unit("{engine}")
                .with_description("run_code engines running a body")
                .with_callback(|observer| {
                    observer.observe(i64::try_from(gm_actors::js_engine::engines_busy()).unwrap_or(i64::MAX), &[]);
                })
                .build(),
            _spans_lost: meter
                .u64_observable_counter("gm.telemetry.spans.lost")
                .with_unit("{span}")
                .with_description("Spans that did not reach the collector, by reason (failed, unsent)")
                .with_callback(|observer| {
                    if let Some(t) = super::get() {
                        let (_, _, failed, unsent) = t.span_counts();
                        observer.observe(failed, &[KeyValue::new("reason", "failed")]);
                        observer.observe(unsent, &[KeyValue::new("reason", "unsent")]);
                    }
                })
                .build(),
        }
    }
}
