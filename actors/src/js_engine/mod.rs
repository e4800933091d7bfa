//! The JsEngine actor: runs run_code bodies in QuickJS (through `rquickjs`).
//!
//! Each body gets a runtime and context of its own, warmed ahead of time off the path of the
//! next body (creating one costs ~0.25 ms) and dropped after that one body, so nothing a body
//! leaves behind reaches the next. Each has a memory cap and an interrupt handler that stops
//! the body at its budget or on cancel. The actor lives on an arbiter (thread) of its own, so
//! a busy body never stalls the protocol; [`JsEngines`] runs several. Messages are
//! engine-neutral: a V8 backend could answer the same [`Run`] and honour the same
//! [`CancelToken`].
//!
//! The engine knows nothing of verbs: it reaches them through a [`JsHost`], which names the
//! functions to put on the `gm` object and runs them.
//!
//! - `pool`: the warm contexts of one engine, and [`JsEngines`], several engine threads.
//! - `runtime`: a warm runtime and context, its host functions and the `gm` prelude.
//! - `loader`: `require()` and `import()` from the workspace.
//! - `errors`: JS exceptions and values turned into [`JsError`] and JSON.

mod errors;
mod loader;
mod pool;
mod runtime;
mod slot;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use futures::future::BoxFuture;
use rquickjs::{async_with, Function, Promise, Value};
use serde_json::value::RawValue;
use serde_json::Value as Json;

pub use crate::cancel::CancelToken;
pub use pool::{engines_busy, JsEngines};

use errors::{exception, to_json};
use runtime::Warm;

/// Memory one body may allocate before allocation fails inside it.
pub const MEMORY_LIMIT: usize = 256 << 20;

/// What a body can call. Implemented by the server, which maps names to verbs.
pub trait JsHost: Send + Sync + 'static {
    /// Names of the functions on `gm` (besides `verbs` and `try`).
    fn names(&self) -> Vec<String>;
    /// What `gm.verbs()` returns, as JSON text. Called only when a body asks.
    fn describe(&self) -> String;
    /// Runs `name` with `args` (JSON text, as the body's JSON.stringify wrote it); an `Err` is
    /// a structured error object (`code`, `message`, ...). JSON text both ways: the body
    /// parses the reply itself, so no JSON value is built in between.
    fn call(&self, name: String, args: Box<RawValue>) -> BoxFuture<'static, Result<Box<RawValue>, Box<RawValue>>>;
    /// The directory relative `require()`/`import()` specifiers start from.
    fn base_dir(&self) -> PathBuf;
}

/// Run one body. `body` is the inside of an async function: `return` gives the result.
#[derive(Message)]
#[rtype(result = "Outcome")]
pub struct Run {
    pub id: u64,
    pub body: String,
    pub budget: Duration,
    pub host: Arc<dyn JsHost>,
    pub cancel: CancelToken,
}

#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ConsoleLine {
    pub level: String,
    pub text: String,
}

#[derive(Debug)]
pub struct Outcome {
    pub result: Result<Json, JsError>,
    pub console: Vec<ConsoleLine>,
    pub elapsed: Duration,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JsError {
    /// The body threw (or a promise it awaited rejected).
    #[error("{name}: {message}")]
    Thrown { name: String, message: String, stack: String, line: Option<u32>, details: Json },
    #[error("the body ran past its budget of {ms} ms and was interrupted")]
    Budget { ms: u64 },
    #[error("the body was cancelled")]
    Cancelled,
    #[error("the body ran out of memory (limit {limit} bytes)")]
    OutOfMemory { limit: usize },
    #[error("the JavaScript engine failed: {0}")]
    Engine(String),
}

/// JSON `null` as raw text.
pub fn null_json() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable!("null is JSON"))
}

#[derive(Default)]
pub struct JsEngine {
    pool: Vec<Warm>,
    retired: Vec<Warm>,
    refilling: bool,
}

impl JsEngine {
    /// Starts the engine on an arbiter (thread) of its own.
    pub fn spawn() -> Addr<JsEngine> {
        JsEngine::start_in_arbiter(&Arbiter::new().handle(), |_| JsEngine::default())
    }
}

impl Actor for JsEngine {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Warm up after the server's start, not during it: spawn-to-initialize stays fast.
        ctx.run_later(pool::WARM_UP_DELAY, |act, ctx| act.refill(ctx));
    }
}

impl Handler<Run> for JsEngine {
    type Result = ResponseActFuture<Self, Outcome>;
    fn handle(&mut self, run: Run, _: &mut Context<Self>) -> Self::Result {
        let warm = self.pool.pop();
        let work = async move {
            let started = Instant::now();
            let warm = match warm {
                Some(w) => w,
                None => match Warm::new().await {
                    Ok(w) => w,
                    Err(e) => {
                        return (Outcome { result: Err(e), console: Vec::new(), elapsed: started.elapsed() }, None)
                    }
                },
            };
            let outcome = run_body(run, &warm, started).await;
            (outcome, Some(warm))
        };
        Box::pin(work.into_actor(self).map(|(outcome, used), act, ctx| {
            act.retired.extend(used);
            act.refill(ctx);
            outcome
        }))
    }
}

/// Runs a body to its end, its budget, or its cancel, whichever comes first.
async fn run_body(run: Run, warm: &Warm, started: Instant) -> Outcome {
    let budget_ms = run.budget.as_millis() as u64;
    let deadline = started + run.budget;
    if let Ok(mut h) = warm.slot.host.lock() {
        *h = Some(run.host.clone());
    }
    if let Ok(mut d) = warm.slot.deadline.lock() {
        *d = Some(deadline);
    }
    if let Ok(mut c) = warm.slot.cancel.lock() {
        *c = run.cancel.clone();
    }
    let result = tokio::select! {
        r = evaluate(&run, warm, deadline) => r,
        () = tokio::time::sleep_until(deadline.into()) => Err(JsError::Budget { ms: budget_ms }),
        () = run.cancel.cancelled() => Err(JsError::Cancelled),
    };
    let console = warm.slot.console.lock().map(|mut c| std::mem::take(&mut *c)).unwrap_or_default();
    Outcome { result, console, elapsed: started.elapsed() }
}

async fn evaluate(run: &Run, warm: &Warm, deadline: Instant) -> Result<Json, JsError> {
    let names = serde_json::to_string(&run.host.names()).unwrap_or_else(|_| "[]".into());
    let source = format!("(async () => {{{}\n}})()", run.body);
    let budget_ms = run.budget.as_millis() as u64;
    let outcome = async_with!(warm.ctx => |ctx| {
        let install: rquickjs::Result<Function> = ctx.globals().get("__gm_install");
        if let Err(e) = install.and_then(|f| f.call::<_, ()>((names,))) {
            return Err(exception(&ctx, e));
        }
        let promise: Promise = match ctx.eval(source) {
            Ok(p) => p,
            Err(e) => return Err(exception(&ctx, e)),
        };
        match promise.into_future::<Value>().await {
            Ok(v) => to_json(&ctx, v),
            Err(e) => Err(exception(&ctx, e)),
        }
    })
    .await;
    // An interrupt surfaces as a thrown "interrupted" error; say why it happened.
    match outcome {
        Err(JsError::Thrown { .. }) | Err(JsError::Engine(_)) if run.cancel.is_cancelled() => Err(JsError::Cancelled),
        Err(JsError::Thrown { ref message, .. }) if message.contains("interrupted") && Instant::now() >= deadline => {
            Err(JsError::Budget { ms: budget_ms })
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    struct EchoHost;

    impl JsHost for EchoHost {
        fn names(&self) -> Vec<String> {
            vec!["echo".into(), "fail".into()]
        }
        fn describe(&self) -> String {
            json!([{ "name": "echo" }, { "name": "fail" }]).to_string()
        }
        fn call(&self, name: String, args: Box<RawValue>) -> BoxFuture<'static, Result<Box<RawValue>, Box<RawValue>>> {
            Box::pin(async move {
                match name.as_str() {
                    "echo" => Ok(args),
                    _ => Err(serde_json::value::to_raw_value(&json!({ "code": "boom", "message": "it failed" }))
                        .expect("an object serializes")),
                }
            })
        }
        fn base_dir(&self) -> PathBuf {
            std::env::temp_dir()
        }
    }

    async fn run(body: &str, budget_ms: u64) -> Outcome {
        let engine = JsEngine::spawn();
        engine
            .send(Run {
                id: 1,
                body: body.into(),
                budget: Duration::from_millis(budget_ms),
                host: Arc::new(EchoHost),
                cancel: CancelToken::default(),
            })
            .await
            .expect("engine alive")
    }

    #[actix_rt::test]
    async fn a_body_returns_json_and_captures_console() {
        let out = run("console.log('hi', {a: 1}); const r = await gm.echo({x: 2}); return {r, n: 3};", 5000).await;
        assert_eq!(out.result, Ok(json!({ "r": { "x": 2 }, "n": 3 })));
        assert_eq!(out.console, vec![ConsoleLine { level: "log".into(), text: "hi {\"a\":1}".into() }]);
    }

    #[actix_rt::test]
    async fn a_throw_reports_message_and_body_line() {
        let out = run("const a = 1;\n\nthrow new TypeError('bad ' + a);", 5000).await;
        match out.result {
            Err(JsError::Thrown { name, message, line, .. }) => {
                assert_eq!((name.as_str(), message.as_str(), line), ("TypeError", "bad 1", Some(3)));
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[actix_rt::test]
    async fn a_failed_host_call_throws_with_its_code_and_gm_try_catches_it() {
        let out = run("\nawait gm.fail({});", 5000).await;
        match out.result {
            Err(JsError::Thrown { message, details, line, .. }) => {
                assert_eq!(message, "it failed");
                assert_eq!(details["code"], "boom");
                assert_eq!(line, Some(2));
            }
            other => panic!("unexpected {other:?}"),
        }
        let out = run("return await gm.try(() => gm.fail({}));", 5000).await;
        assert_eq!(out.result, Ok(json!({ "ok": false, "error": { "code": "boom", "message": "it failed" } })));
    }

    #[actix_rt::test]
    async fn timers_fire_in_order() {
        let out = run(
            "const seen = []; await new Promise(r => { setTimeout(() => seen.push(2), 20); setTimeout(() => { seen.push(1); }, 5); const t = setTimeout(() => seen.push('never'), 10); clearTimeout(t); setTimeout(r, 40); }); return seen;",
            5000,
        )
        .await;
        assert_eq!(out.result, Ok(json!([1, 2])));
    }

    #[actix_rt::test]
    async fn performance_now_counts_milliseconds_finer_than_date_now() {
        let out = run("const a = performance.now(); await new Promise(r => setTimeout(r, 20)); const b = performance.now(); return [b - a, Number.isInteger(a) && Number.isInteger(b)];", 5000).await;
        let got = out.result.expect("runs");
        let elapsed = got[0].as_f64().expect("a number");
        assert!((15.0..1000.0).contains(&elapsed), "{elapsed}");
        assert_eq!(got[1], false, "sub-millisecond precision");
    }

    #[actix_rt::test]
    async fn an_endless_loop_is_stopped_at_its_budget() {
        let out = run("while (true) {}", 200).await;
        assert_eq!(out.result, Err(JsError::Budget { ms: 200 }));
    }

    #[actix_rt::test]
    async fn a_never_settling_promise_is_stopped_at_its_budget() {
        let out = run("await new Promise(() => {});", 100).await;
        assert_eq!(out.result, Err(JsError::Budget { ms: 100 }));
    }

    #[actix_rt::test]
    async fn a_runaway_allocation_is_an_error_not_a_crash() {
        let out = run("const a = []; while (true) a.push(new Array(100000).fill(1));", 20000).await;
        assert_eq!(out.result, Err(JsError::OutOfMemory { limit: MEMORY_LIMIT }));
    }

    #[actix_rt::test]
    async fn interrupt_cancels_a_running_body() {
        let engine = JsEngine::spawn();
        let cancel = CancelToken::default();
        let pending = engine.send(Run {
            id: 7,
            body: "while (true) {}".into(),
            budget: Duration::from_secs(30),
            host: Arc::new(EchoHost),
            cancel: cancel.clone(),
        });
        actix_rt::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        });
        let out = pending.await.expect("engine alive");
        assert_eq!(out.result, Err(JsError::Cancelled));
    }
}
