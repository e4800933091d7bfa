//! The JsEngine actor: runs run_code bodies in QuickJS (through `rquickjs`).
//!
//! Each body gets a fresh runtime and context (~0.2 ms), a memory cap, and an interrupt
//! handler that stops it at its budget or on cancel. The actor lives on an arbiter (thread) of
//! its own, so a busy body never stalls the protocol. Messages are engine-neutral: a V8
//! backend could answer the same [`Run`] and honour the same [`CancelToken`].
//!
//! The engine knows nothing of verbs: it reaches them through a [`JsHost`], which names the
//! functions to put on the `gm` object and runs them.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use actix::prelude::*;
use actix::AsyncContext as _;
use futures::future::BoxFuture;
use rquickjs::function::Async;
use rquickjs::loader::{Loader, Resolver};
use rquickjs::{async_with, AsyncContext, AsyncRuntime, Ctx, Function, Module, Promise, Value};
use serde_json::value::RawValue;
use serde_json::{json, Value as Json};

pub use crate::cancel::CancelToken;

/// Memory one body may allocate before allocation fails inside it.
pub const MEMORY_LIMIT: usize = 256 << 20;
const STACK_LIMIT: usize = 1 << 20;
/// The name QuickJS gives evaluated scripts in stack traces.
const SCRIPT_NAME: &str = "eval_script";

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

/// Warm contexts kept ready per engine: creating a runtime, a context and the `gm` prelude
/// costs ~0.25 ms, so it is done ahead of time, off the path of the next body. Bodies rotate
/// over the engines, so each has time to warm its next context.
const POOL: usize = 1;
const WARM_UP_DELAY: Duration = Duration::from_millis(20);

/// A runtime and context with the prelude evaluated, used by one body and then dropped, so
/// nothing a body leaves behind reaches the next one.
struct Warm {
    // Field order matters: the context must drop before its runtime.
    ctx: AsyncContext,
    _rt: AsyncRuntime,
    slot: Arc<RunSlot>,
}

/// What the host functions of a warm context need from the body they serve, filled in when
/// the body starts.
struct RunSlot {
    host: Mutex<Option<Arc<dyn JsHost>>>,
    console: Mutex<Vec<ConsoleLine>>,
    deadline: Mutex<Option<Instant>>,
    cancel: Mutex<CancelToken>,
}

impl RunSlot {
    fn host(&self) -> Option<Arc<dyn JsHost>> {
        self.host.lock().ok().and_then(|h| h.clone())
    }

    fn interrupted(&self) -> bool {
        let cancelled = self.cancel.lock().map(|c| c.is_cancelled()).unwrap_or(false);
        let late = self.deadline.lock().ok().and_then(|d| *d).is_some_and(|d| Instant::now() >= d);
        cancelled || late
    }
}

impl Warm {
    async fn new() -> Result<Warm, JsError> {
        let engine = |e: rquickjs::Error| JsError::Engine(e.to_string());
        let slot = Arc::new(RunSlot {
            host: Mutex::new(None),
            console: Mutex::new(Vec::new()),
            deadline: Mutex::new(None),
            cancel: Mutex::new(CancelToken::default()),
        });
        let rt = AsyncRuntime::new().map_err(engine)?;
        rt.set_memory_limit(MEMORY_LIMIT).await;
        rt.set_max_stack_size(STACK_LIMIT).await;
        let watched = slot.clone();
        rt.set_interrupt_handler(Some(Box::new(move || watched.interrupted()))).await;
        rt.set_loader(WorkspaceResolver { slot: slot.clone() }, WorkspaceLoader).await;
        let ctx = AsyncContext::full(&rt).await.map_err(engine)?;
        let installing = slot.clone();
        let installed = async_with!(ctx => |ctx| {
            install_globals(&ctx, installing).map_err(|e| exception(&ctx, e))
        })
        .await;
        installed?;
        Ok(Warm { ctx, _rt: rt, slot })
    }
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

    /// Drops used contexts and warms new ones, in the background of the engine's thread.
    fn refill(&mut self, ctx: &mut Context<Self>) {
        if self.refilling {
            return;
        }
        self.refilling = true;
        let retired = std::mem::take(&mut self.retired);
        let need = POOL.saturating_sub(self.pool.len());
        let work = async move {
            drop(retired);
            let mut warmed = Vec::new();
            for _ in 0..need {
                match Warm::new().await {
                    Ok(w) => warmed.push(w),
                    Err(e) => eprintln!("gm: cannot prepare a JS context: {e}"),
                }
            }
            warmed
        };
        ctx.spawn(work.into_actor(self).map(|warmed, act, ctx| {
            act.pool.extend(warmed);
            act.refilling = false;
            if !act.retired.is_empty() {
                act.refill(ctx);
            }
        }));
    }
}

/// Several engines, each on a thread of its own: a body busy in a tight loop (in the
/// background, say) holds one thread while the others keep serving.
#[derive(Clone)]
pub struct JsEngines {
    /// Started on first use (or by [`JsEngines::start`]), so they cost nothing at gm's start.
    engines: Arc<OnceLock<Vec<Engine>>>,
    count: usize,
    next: Arc<std::sync::atomic::AtomicUsize>,
}

/// An engine and the number of bodies running on it.
type Engine = (Addr<JsEngine>, Arc<std::sync::atomic::AtomicUsize>);

/// Counts a body against its engine until it ends, however its caller goes away.
struct Busy(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl JsEngines {
    pub fn new(n: usize) -> Self {
        Self { engines: Arc::default(), count: n.max(1), next: Arc::default() }
    }

    /// Starts the engine threads now rather than at the first body. Call it inside an actix
    /// system.
    pub fn start(&self) {
        self.engines();
    }

    fn engines(&self) -> &[Engine] {
        self.engines.get_or_init(|| (0..self.count).map(|_| (JsEngine::spawn(), Arc::default())).collect())
    }

    /// Runs a body on the engine with the fewest bodies running, taking turns among equals.
    pub async fn run(&self, run: Run) -> Result<Outcome, MailboxError> {
        use std::sync::atomic::Ordering;
        let engines = self.engines();
        let n = engines.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        let (addr, busy) = (0..n)
            .map(|i| &engines[(start + i) % n])
            .min_by_key(|(_, busy)| busy.load(Ordering::SeqCst))
            .map(|(a, b)| (a.clone(), b.clone()))
            .ok_or(MailboxError::Closed)?;
        busy.fetch_add(1, Ordering::SeqCst);
        let _busy = Busy(busy);
        addr.send(run).await
    }
}

impl Actor for JsEngine {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Warm up after the server's start, not during it: spawn-to-initialize stays fast.
        ctx.run_later(WARM_UP_DELAY, |act, ctx| act.refill(ctx));
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

const PRELUDE: &str = r#"
(() => {
  const call = globalThis.__gm_call;
  const say = globalThis.__gm_console;
  const describe = globalThis.__gm_describe;
  const gm = {};
  const verb = (name) => async function __gm_verb(args) {
    const site = new Error();
    const reply = JSON.parse(await call(name, JSON.stringify(args === undefined ? {} : args)));
    if (reply.ok) return reply.value;
    const err = new Error(reply.error.message);
    Object.assign(err, reply.error);
    err.name = 'GmError';
    err.stack = String(site.stack).split('\n').slice(1).join('\n');
    throw err;
  };
  // Names that are never calls: what JavaScript itself looks up on objects.
  const notCalls = new Set(['then', 'catch', 'finally', 'toJSON', 'toString', 'valueOf', 'constructor', 'inspect']);
  globalThis.__gm_install = function __gm_install(namesJson) {
  delete globalThis.__gm_install;
  for (const name of JSON.parse(namesJson)) gm[name] = verb(name);
  const known = Object.freeze(gm);
  // Any other name is still a call, so that a name no verb has gets a structured error
  // (unknown_verb, or why the child server it belongs to did not start) instead of a TypeError.
  globalThis.gm = new Proxy(known, {
    get(target, key, receiver) {
      if (typeof key !== 'string' || key in target || notCalls.has(key) || !/^[A-Za-z_$][A-Za-z0-9_$]*$/.test(key)) {
        return Reflect.get(target, key, receiver);
      }
      return verb(key);
    },
  });
  };
  gm.verbs = function __gm_verbs() { return JSON.parse(describe()); };
  gm.try = async function __gm_try(fn) {
    try {
      return await (typeof fn === 'function' ? fn() : fn);
    } catch (e) {
      const error = { code: (e && e.code) || (e && e.name) || 'Error', message: String(e && e.message !== undefined ? e.message : e) };
      return { ok: false, error };
    }
  };
  const show = (a) => {
    if (typeof a === 'string') return a;
    if (a instanceof Error) return String(a.stack ? a.name + ': ' + a.message + '\n' + a.stack : a);
    try { const s = JSON.stringify(a); return s === undefined ? String(a) : s; } catch (_) { return String(a); }
  };
  const line = (level) => function __gm_log(...args) { say(level, args.map(show).join(' ')); };
  globalThis.console = { log: line('log'), info: line('info'), debug: line('debug'), warn: line('warn'), error: line('error') };
  const modules = {};
  const load = globalThis.__gm_module;
  const makeRequire = (from) => function require(spec) {
    const r = JSON.parse(load(String(spec), from));
    if (!r.ok) { const e = new Error(r.error.message); Object.assign(e, r.error); throw e; }
    if (modules[r.path]) return modules[r.path].exports;
    const module = { exports: {} };
    modules[r.path] = module;
    if (r.path.endsWith('.json')) { module.exports = JSON.parse(r.source); return module.exports; }
    const fn = new Function('module', 'exports', 'require', '__filename', '__dirname', r.source);
    fn(module, module.exports, makeRequire(r.dir), r.path, r.dir);
    return module.exports;
  };
  globalThis.require = makeRequire('');
  const sleep = globalThis.__gm_sleep;
  const timers = new Map();
  let nextTimer = 1;
  const arm = (id, fn, ms, args, repeat) => {
    sleep(Math.max(0, Number(ms) || 0)).then(() => {
      if (!timers.has(id)) return;
      if (!repeat) timers.delete(id);
      fn(...args);
      if (repeat) arm(id, fn, ms, args, repeat);
    });
  };
  globalThis.setTimeout = function setTimeout(fn, ms, ...args) { const id = nextTimer++; timers.set(id, true); arm(id, fn, ms, args, false); return id; };
  globalThis.setInterval = function setInterval(fn, ms, ...args) { const id = nextTimer++; timers.set(id, true); arm(id, fn, Math.max(1, Number(ms) || 0), args, true); return id; };
  globalThis.clearTimeout = globalThis.clearInterval = function clearTimeout(id) { timers.delete(id); };
  const clock = globalThis.__gm_now;
  globalThis.performance = Object.freeze({ now: () => clock() });
  for (const k of ['__gm_call', '__gm_console', '__gm_describe', '__gm_module', '__gm_sleep', '__gm_now']) delete globalThis[k];
})();
"#;

fn install_globals<'js>(ctx: &Ctx<'js>, slot: Arc<RunSlot>) -> rquickjs::Result<()> {
    let g = ctx.globals();
    let caller = slot.clone();
    g.set(
        "__gm_call",
        Function::new(
            ctx.clone(),
            Async(move |name: String, args: String| {
                let host = caller.host();
                async move {
                    // JSON.stringify(undefined) is no JSON text: such arguments read as null.
                    let args = RawValue::from_string(args).unwrap_or_else(|_| null_json());
                    match host {
                        Some(host) => match host.call(name, args).await {
                            Ok(value) => format!(r#"{{"ok":true,"value":{}}}"#, value.get()),
                            Err(error) => format!(r#"{{"ok":false,"error":{}}}"#, error.get()),
                        },
                        None => {
                            json!({ "ok": false, "error": { "code": "internal", "message": "no host for this body" } })
                                .to_string()
                        }
                    }
                }
            }),
        )?,
    )?;
    let console = slot.clone();
    g.set(
        "__gm_console",
        Function::new(ctx.clone(), move |level: String, text: String| {
            if let Ok(mut c) = console.console.lock() {
                c.push(ConsoleLine { level, text });
            }
        })?,
    )?;
    let describer = slot.clone();
    g.set(
        "__gm_describe",
        Function::new(ctx.clone(), move || describer.host().map(|h| h.describe()).unwrap_or_else(|| "[]".into()))?,
    )?;
    let loader = slot;
    g.set(
        "__gm_module",
        Function::new(ctx.clone(), move |spec: String, from: String| {
            let base = loader.host().map(|h| h.base_dir()).unwrap_or_default();
            read_module(&base, &spec, &from).to_string()
        })?,
    )?;
    // performance.now(): milliseconds with microseconds, from a fixed start (QuickJS has only
    // Date.now(), to the millisecond).
    g.set(
        "__gm_now",
        Function::new(ctx.clone(), || {
            static START: OnceLock<Instant> = OnceLock::new();
            START.get_or_init(Instant::now).elapsed().as_secs_f64() * 1000.0
        })?,
    )?;
    g.set(
        "__gm_sleep",
        Function::new(
            ctx.clone(),
            Async(|ms: f64| async move {
                tokio::time::sleep(Duration::from_micros((ms.max(0.0) * 1000.0) as u64)).await;
            }),
        )?,
    )?;
    let bytecode = prelude_bytecode().map_err(|e| rquickjs::Error::new_loading_message("gm:prelude", e.clone()))?;
    // SAFETY: the bytes were written by this same QuickJS build, from PRELUDE, just above.
    let module = unsafe { Module::load(ctx.clone(), bytecode) }?;
    let (_, promise) = module.eval()?;
    promise.finish::<()>()?;
    Ok(())
}

/// The prelude compiled once per process: loading bytecode costs ~35 µs a context, parsing the
/// source ~220 µs.
fn prelude_bytecode() -> Result<&'static [u8], &'static String> {
    static BYTECODE: OnceLock<Result<Vec<u8>, String>> = OnceLock::new();
    BYTECODE
        .get_or_init(|| {
            let rt = rquickjs::Runtime::new().map_err(|e| e.to_string())?;
            let ctx = rquickjs::Context::full(&rt).map_err(|e| e.to_string())?;
            ctx.with(|ctx| {
                Module::declare(ctx, "gm:prelude", PRELUDE)
                    .and_then(|m| m.write(rquickjs::WriteOptions::default()))
                    .map_err(|e| e.to_string())
            })
        })
        .as_ref()
        .map(Vec::as_slice)
}

/// Finds and reads a CommonJS module for `require()`.
fn read_module(base: &Path, spec: &str, from: &str) -> Json {
    let from = if from.is_empty() { base.to_path_buf() } else { PathBuf::from(from) };
    let wanted = normalize(&from.join(spec));
    let candidates =
        [wanted.clone(), wanted.with_extension("js"), wanted.with_extension("cjs"), wanted.join("index.js")];
    let Some(path) = candidates.iter().find(|p| p.is_file()) else {
        return json!({ "ok": false, "error": {
            "code": "module_not_found",
            "message": format!("cannot find module '{spec}' (looked for {})", wanted.display()),
        }});
    };
    match std::fs::read_to_string(path) {
        Ok(source) => json!({
            "ok": true,
            "path": path.to_string_lossy(),
            "dir": path.parent().map(|p| p.to_string_lossy().into_owned()).unwrap_or_default(),
            "source": source,
        }),
        Err(e) => json!({ "ok": false, "error": {
            "code": "module_unreadable",
            "message": format!("cannot read module {}: {e}", path.display()),
        }}),
    }
}

/// Resolves `import()` specifiers: relative ones from the importing module's directory, or
/// from the workspace for the body itself; absolute paths as they are.
struct WorkspaceResolver {
    slot: Arc<RunSlot>,
}

impl Resolver for WorkspaceResolver {
    fn resolve<'js>(&mut self, _: &Ctx<'js>, base: &str, name: &str) -> rquickjs::Result<String> {
        let workspace = self.slot.host().map(|h| h.base_dir()).unwrap_or_default();
        let from = Path::new(base);
        let dir = if from.is_absolute() { from.parent().unwrap_or(&workspace).to_path_buf() } else { workspace };
        let path = normalize(&dir.join(name));
        if !path.is_file() {
            return Err(rquickjs::Error::new_resolving_message(base, name, format!("no file at {}", path.display())));
        }
        Ok(path.to_string_lossy().into_owned())
    }
}

struct WorkspaceLoader;

impl Loader for WorkspaceLoader {
    fn load<'js>(&mut self, ctx: &Ctx<'js>, name: &str) -> rquickjs::Result<Module<'js, rquickjs::module::Declared>> {
        let source = std::fs::read(name).map_err(|e| rquickjs::Error::new_loading_message(name, e.to_string()))?;
        Module::declare(ctx.clone(), name, source)
    }
}

/// Lexical normalization (`a/./b/../c` -> `a/c`), without touching the disk.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// JSON `null` as raw text.
pub fn null_json() -> Box<RawValue> {
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable!("null is JSON"))
}

fn to_json<'js>(ctx: &Ctx<'js>, v: Value<'js>) -> Result<Json, JsError> {
    match ctx.json_stringify(v) {
        Ok(Some(s)) => {
            let s = s.to_string().map_err(|e| JsError::Engine(e.to_string()))?;
            serde_json::from_str(&s).map_err(|e| JsError::Engine(e.to_string()))
        }
        Ok(None) => Ok(Json::Null),
        Err(e) => Err(exception(ctx, e)),
    }
}

/// Turns a pending JS exception (or an engine error) into a [`JsError`].
fn exception<'js>(ctx: &Ctx<'js>, e: rquickjs::Error) -> JsError {
    if !matches!(e, rquickjs::Error::Exception) {
        return JsError::Engine(e.to_string());
    }
    let thrown = ctx.catch();
    let get = |key: &str| -> Option<String> {
        let obj = thrown.as_object()?;
        let v: Value = obj.get(key).ok()?;
        if v.is_undefined() || v.is_null() {
            return None;
        }
        v.as_string()
            .and_then(|s| s.to_string().ok())
            .or_else(|| ctx.json_stringify(v).ok().flatten().and_then(|s| s.to_string().ok()))
    };
    let (name, message, stack) = if thrown.is_object() {
        (
            get("name").unwrap_or_else(|| "Error".into()),
            get("message").unwrap_or_default(),
            get("stack").unwrap_or_default(),
        )
    } else {
        let text = thrown
            .as_string()
            .and_then(|s| s.to_string().ok())
            .or_else(|| ctx.json_stringify(thrown.clone()).ok().flatten().and_then(|s| s.to_string().ok()))
            .unwrap_or_else(|| "a non-error value was thrown".into());
        ("Error".into(), text, String::new())
    };
    if message.contains("out of memory") {
        return JsError::OutOfMemory { limit: MEMORY_LIMIT };
    }
    // Verb errors carry their structured fields (code, details); keep them.
    let details = thrown
        .as_object()
        .and_then(|_| ctx.json_stringify(thrown.clone()).ok().flatten())
        .and_then(|s| s.to_string().ok())
        .and_then(|s| serde_json::from_str::<Json>(&s).ok())
        .filter(|d| d.as_object().is_some_and(|m| !m.is_empty()))
        .unwrap_or(Json::Null);
    let line = body_line(&stack);
    JsError::Thrown { name, message, stack, line, details }
}

/// The line in the body where the error happened: the first stack frame in the evaluated
/// script that is not one of gm's own prelude functions.
pub fn body_line(stack: &str) -> Option<u32> {
    stack.lines().filter(|l| !l.contains("__gm_")).find_map(|l| {
        let at = l.find(SCRIPT_NAME)? + SCRIPT_NAME.len();
        let rest = l[at..].strip_prefix(':')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().ok()
    })
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn body_line_skips_prelude_frames() {
        let stack = "    at __gm_verb (eval_script:9:5)\n    at <anonymous> (eval_script:4:12)\n";
        assert_eq!(body_line(stack), Some(4));
    }
}
