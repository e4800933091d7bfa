//! The bridge between run_code bodies and the verb registry: the [`JsHost`] the JsEngine
//! calls for every `gm.<verb>(args)`. Each call is logged as a `code-call` event.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use futures::future::BoxFuture;
use gm_actors::js_engine::JsHost;
use gm_actors::log_writer::Event;
use serde_json::{json, Value};

use crate::verbs::{self, Ctx};

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

    fn call(&self, name: String, args: Value) -> BoxFuture<'static, Result<Value, Value>> {
        let ctx = self.ctx.clone();
        let body = self.body;
        Box::pin(async move {
            let started = Instant::now();
            let logged_args = args.clone();
            let mut result = verbs::call(ctx.clone(), &name, &args).await.map_err(|e| e.to_json());
            let secrets = ctx.secrets.get();
            match &mut result {
                Ok(v) | Err(v) => secrets.redact_value(v),
            }
            if let Some(log) = &ctx.log {
                let mut fields = json!({
                    "verb": name,
                    "args": logged_args,
                    "outcome": if result.is_ok() { "ok" } else { "error" },
                    "ms": millis(started),
                    "body": body,
                });
                if let Err(e) = &result {
                    fields["error"] = e["code"].clone();
                }
                ctx.secrets.get().redact_value(&mut fields);
                log.do_send(Event::new("code-call", fields));
            }
            result
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
