//! The bridge between run_code bodies and the verb registry: the [`JsHost`] the JsEngine
//! calls for every `gm.<verb>(args)`. Each call is logged as a `code-call` event.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use futures::future::BoxFuture;
use gm_actors::js_engine::{null_json, JsHost};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::verbs::{self, Ctx, Json};

/// The fields of a `code-call` event, written to the log without building a JSON value.
#[derive(serde::Serialize)]
struct CodeCallFields<'a> {
    verb: &'a str,
    args: &'a RawValue,
    outcome: &'static str,
    ms: f64,
    #[serde(rename = "inFlight")]
    in_flight: usize,
    body: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a Value>,
}

pub struct Host {
    ctx: Ctx,
    /// The run_code body this host serves, for the log.
    body: u64,
}

impl Host {
    pub fn new(ctx: Ctx, body: u64) -> Self {
        Self { ctx, body }
    }
}

impl JsHost for Host {
    fn names(&self) -> Vec<String> {
        verbs::registry().iter().map(|v| v.name.to_owned()).collect()
    }

    fn describe(&self) -> String {
        static DESCRIBED: OnceLock<String> = OnceLock::new();
        DESCRIBED
            .get_or_init(|| {
                let all: Vec<Value> = verbs::registry()
                    .iter()
                    .map(|v| json!({ "name": v.name, "family": v.family, "description": v.description, "inputSchema": v.input_schema() }))
                    .collect();
                Value::Array(all).to_string()
            })
            .clone()
    }

    fn call(&self, name: String, args: Json) -> BoxFuture<'static, Result<Json, Json>> {
        let ctx = self.ctx.clone();
        let body = self.body;
        // The call runs as a task of its own: a body that is interrupted or cancelled stops
        // waiting for it, but the call still ends (a cancellable one at once) and is logged.
        let task = tokio::spawn(async move {
            let started = Instant::now();
            let called = verbs::call(ctx.clone(), &name, &args).await;
            let result = called.result.map_err(|e| e.to_json());
            let secrets = ctx.secrets.get();
            if let Some(log) = &ctx.log {
                let logged_args = ctx.blobs.args_for_log(&args, &secrets);
                let fields = CodeCallFields {
                    verb: &name,
                    args: &logged_args,
                    outcome: if result.is_ok() { "ok" } else { "error" },
                    ms: millis(started),
                    in_flight: called.in_flight,
                    body,
                    error: result.as_ref().err().and_then(|e| e.get("code")),
                };
                log.do_send(secrets.log_event("code-call", &fields));
            }
            match result {
                Ok(value) => Ok(secrets.redact_json(value)),
                Err(mut error) => {
                    secrets.redact_value(&mut error);
                    Err(serde_json::value::to_raw_value(&error).unwrap_or_else(|_| null_json()))
                }
            }
        });
        Box::pin(async move {
            task.await.unwrap_or_else(|e| {
                let error = json!({ "code": "internal", "message": format!("the call failed: {e}") });
                Err(serde_json::value::to_raw_value(&error).unwrap_or_else(|_| null_json()))
            })
        })
    }

    fn base_dir(&self) -> PathBuf {
        self.ctx.workspace.to_path_buf()
    }
}

/// Milliseconds since `t`, to the microsecond.
pub fn millis(t: Instant) -> f64 {
    (t.elapsed().as_micros() as f64) / 1000.0
}
