//! LogWriter throughput: events appended into the buffer, and appended with the group-commit
//! policy gm uses (one write + fdatasync per batch).
//!
//! Run: `cargo bench --bench log_writer`.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use gm_actors::log_writer::{Event, LogWriter};
use serde_json::json;

fn event() -> Event {
    Event::new(
        "action",
        json!({ "tool": "stat_file", "id": 17, "args": { "path": "src/main.rs" }, "outcome": "ok", "ms": 0.042, "inFlight": 1 }),
    )
}

/// The action event as the server builds it: its fields serialized from a struct.
#[derive(serde::Serialize)]
struct Action<'a> {
    tool: &'a str,
    id: u64,
    args: &'a serde_json::value::RawValue,
    outcome: &'a str,
    ms: f64,
    #[serde(rename = "inFlight")]
    in_flight: usize,
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut group = c.benchmark_group("log_writer");
    group.throughput(Throughput::Elements(1));
    let (mut w, _) = LogWriter::open(&dir.path().join("buffered.jsonl"), "bench").expect("open");
    group.bench_function("append_buffered", |b| {
        b.iter(|| w.append(event()));
        // Keep the buffer from growing without bound between samples.
        let _ = w.commit();
    });
    drop(w);

    let args = serde_json::value::RawValue::from_string(r#"{"path":"src/main.rs"}"#.into()).expect("JSON");
    let (mut w, _) = LogWriter::open(&dir.path().join("serialized.jsonl"), "bench").expect("open");
    group.bench_function("append_serialized", |b| {
        b.iter(|| {
            let fields = Action { tool: "stat_file", id: 17, args: &args, outcome: "ok", ms: 0.042, in_flight: 1 };
            w.append(Event::serialized("action", &fields))
        });
        let _ = w.commit();
    });
    drop(w);

    // Group commit: 1000 events, then one write + fdatasync, as a busy server would batch them.
    const BATCH: u64 = 1000;
    group.throughput(Throughput::Elements(BATCH));
    let (mut w, _) = LogWriter::open(&dir.path().join("group.jsonl"), "bench").expect("open");
    group.bench_function("append_group_commit_1000", |b| {
        b.iter_batched(
            || (),
            |()| {
                for _ in 0..BATCH {
                    w.append(event());
                }
                w.commit().expect("commit");
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
