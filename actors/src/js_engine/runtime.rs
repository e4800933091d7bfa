//! A warm runtime and context: the memory and stack caps, the interrupt handler, the module
//! loader, the host functions on the global object and the `gm` prelude.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use rquickjs::function::Async;
use rquickjs::{async_with, AsyncContext, AsyncRuntime, Ctx, Function, Module};
use serde_json::json;
use serde_json::value::RawValue;

use super::errors::exception;
use super::loader::{read_module, WorkspaceLoader, WorkspaceResolver};
use super::slot::RunSlot;
use super::{null_json, CancelToken, ConsoleLine, JsError, MEMORY_LIMIT};

const STACK_LIMIT: usize = 1 << 20;

/// The `gm` object, `console`, `require`, timers and `performance`, built from the host
/// functions `install_globals` puts on the global object (and then deletes).
const PRELUDE: &str = include_str!("prelude.js");

/// A runtime and context with the prelude evaluated, used by one body and then dropped, so
/// nothing a body leaves behind reaches the next one.
pub(super) struct Warm {
    // Field order matters: the context must drop before its runtime.
    pub(super) ctx: AsyncContext,
    _rt: AsyncRuntime,
    pub(super) slot: Arc<RunSlot>,
}

impl Warm {
    pub(super) async fn new() -> Result<Warm, JsError> {
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
