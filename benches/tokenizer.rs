//! The search tokenizer's throughput over real source text: this repository's own Rust files,
//! one line at a time, the way the index feeds it.
//!
//! Run: `cargo bench --bench tokenizer`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use gm::search::tokenizer::CodeTokenizer;
use tantivy::tokenizer::{TokenStream, Tokenizer};

fn lines() -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = Vec::new();
    for dir in ["src", "actors/src", "tests"] {
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|x| x == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    out.extend(text.lines().map(str::to_owned));
                }
            }
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let lines = lines();
    let bytes: usize = lines.iter().map(|l| l.len() + 1).sum();
    let mut group = c.benchmark_group("tokenizer");
    group.throughput(Throughput::Bytes(bytes as u64));
    let mut tokenizer = CodeTokenizer::default();
    group.bench_function("code_lines", |b| {
        b.iter(|| {
            let mut tokens = 0usize;
            for line in &lines {
                let mut stream = tokenizer.token_stream(line);
                while stream.advance() {
                    tokens += 1;
                }
            }
            tokens
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
