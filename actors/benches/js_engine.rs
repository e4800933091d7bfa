//! The JsEngine's cost per run_code body, without the protocol: a fresh runtime and context,
//! the `gm` prelude, the body, the result as JSON, and the hop to the engine's thread and back.
//!
//! Run: `cargo bench -p gm-actors --bench js_engine`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use futures::future::BoxFuture;
use gm_actors::js_engine::{CancelToken, JsEngine, JsHost, Run};
use serde_json::value::RawValue;

struct NoHost;

impl JsHost for NoHost {
    fn names(&self) -> Vec<String> {
        ["read_file", "write_file", "edit_file", "stat_file", "list_dir", "query_log"].map(String::from).to_vec()
    }
    fn describe(&self) -> String {
        "[]".into()
    }
    fn call(&self, _: String, args: Box<RawValue>) -> BoxFuture<'static, Result<Box<RawValue>, Box<RawValue>>> {
        Box::pin(async move { Ok(args) })
    }
    fn base_dir(&self) -> PathBuf {
        std::env::temp_dir()
    }
}

fn bench(c: &mut Criterion) {
    let system = actix::System::new();
    let engine = system.block_on(async { JsEngine::spawn() });
    let host: Arc<dyn JsHost> = Arc::new(NoHost);
    let mut group = c.benchmark_group("js_engine");
    for (name, body) in [("return_1", "return 1"), ("one_host_call", "return await gm.stat_file({ path: 'x' })")] {
        group.bench_function(name, |b| {
            b.iter(|| {
                let run = Run {
                    id: 1,
                    body: body.into(),
                    budget: Duration::from_secs(10),
                    host: host.clone(),
                    cancel: CancelToken::default(),
                };
                let out = system.block_on(engine.send(run)).expect("engine alive");
                assert!(out.result.is_ok());
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
