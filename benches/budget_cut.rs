//! The reply budget's cut (`gm::budget::cut_json`) on 10 MB values, to the default budget of
//! 80,000 bytes: one huge string, an array of small objects, and an object with a huge field
//! beside small ones and nested arrays. Issue 37 asks for under 50 ms; `spill` adds writing the
//! whole value to a new file, as a cut reply does.
//!
//! Run: `cargo bench --bench budget_cut`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gm::budget::{cut_json, DEFAULT_MAX_RESULT_BYTES};
use serde_json::json;

const TEN_MB: usize = 10_000_000;

fn values() -> Vec<(&'static str, String)> {
    let string = json!("x".repeat(TEN_MB)).to_string();
    let mut items = Vec::new();
    let mut size = 0;
    while size < TEN_MB {
        let item = json!({ "i": items.len(), "name": format!("item {}", items.len()), "ok": true });
        size += item.to_string().len() + 1;
        items.push(item);
    }
    let array = json!(items).to_string();
    let mixed = json!({
        "result": {
            "huge": "é\"\n".repeat(TEN_MB / 8),
            "small": (0..10).map(|i| format!("field {i}")).collect::<Vec<_>>(),
            "rows": (0..50_000).map(|i| json!([i, format!("row {i}"), null])).collect::<Vec<_>>(),
        },
        "console": [],
        "ms": 1.5,
    })
    .to_string();
    vec![("string", string), ("array_of_objects", array), ("mixed", mixed)]
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("budget_cut");
    group.sample_size(20);
    let values = values();
    for (name, text) in &values {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(*name, |b| b.iter(|| cut_json(text, DEFAULT_MAX_RESULT_BYTES).len()));
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let (_, string) = &values[0];
    let mut n = 0u64;
    group.bench_function("string_cut_and_spill", |b| {
        b.iter(|| {
            n += 1;
            let path = dir.path().join(format!("result-{n}.json"));
            gm_actors::state_file::write_new(&path, string.as_bytes()).expect("spill");
            let cut = cut_json(string, DEFAULT_MAX_RESULT_BYTES).len();
            let _ = std::fs::remove_file(&path);
            cut
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
