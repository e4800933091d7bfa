//! The two MCP surfaces, both derived from the verb registry.
//!
//! - `code` (default): exactly `next_context`, `run_code`, `finish`; every verb is
//!   `gm.<verb>(args)` inside run_code.
//! - `tools`: `next_context`, `finish` and every verb as its own tool.

use serde_json::{json, Value};

use crate::run::{FinishArgs, NextContextArgs, RunCodeArgs};
use crate::verbs::{self, schema_of, Effect};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Surface {
    Code,
    Tools,
}

impl Surface {
    pub fn as_str(self) -> &'static str {
        match self {
            Surface::Code => "code",
            Surface::Tools => "tools",
        }
    }
}

pub const NEXT_CONTEXT: &str = "next_context";
pub const RUN_CODE: &str = "run_code";
pub const FINISH: &str = "finish";

/// The tool definitions of a surface, in order.
pub fn tools(surface: Surface) -> Vec<Value> {
    let mut out = vec![json!({
        "name": NEXT_CONTEXT,
        "description": "One step of the run: the governance rules (re-read from skill://gm/SKILL.md every call), the task, the step number, open rows, background work and the last log events. Pass { task } to set the run's task.",
        "inputSchema": schema_of::<NextContextArgs>(),
        "annotations": { "readOnlyHint": false, "idempotentHint": false },
    })];
    match surface {
        Surface::Code => out.push(json!({
            "name": RUN_CODE,
            "description": run_code_description(),
            "inputSchema": schema_of::<RunCodeArgs>(),
        })),
        Surface::Tools => out.extend(verbs::registry().iter().map(|v| {
            json!({
                "name": v.name,
                "description": v.description,
                "inputSchema": v.input_schema(),
                "annotations": { "readOnlyHint": v.effect == Effect::Read },
            })
        })),
    }
    out.push(json!({
        "name": FINISH,
        "description": "End the run: logs an end event with the summary and the gaps (what is not done, not verified or not known). stopBackground: true also stops background work still running.",
        "inputSchema": schema_of::<FinishArgs>(),
    }));
    out
}

/// Whether `name` is a tool of `surface`.
pub fn has(surface: Surface, name: &str) -> bool {
    match name {
        NEXT_CONTEXT | FINISH => true,
        RUN_CODE => surface == Surface::Code,
        other => surface == Surface::Tools && verbs::find(other).is_some(),
    }
}

fn run_code_description() -> String {
    let mut d = String::from(
        "Run an async JavaScript body (QuickJS) and return its result. `return` gives the result; \
         console.log/error are captured; a throw comes back as an error with its stack and the line in the body. \
         Budget 180000 ms by default (timeoutMs, at most 300000). require() and import() load files relative to the workspace. \
         Every verb is an async function on `gm`:\n",
    );
    for v in verbs::registry() {
        d.push_str(&format!("- gm.{}(args): {}\n", v.name, v.description));
    }
    d.push_str(
        "- gm.verbs(): every verb with its description and argument schema.\n\
         - gm.try(fn): runs fn and returns its value, or { ok: false, error } instead of throwing.\n\
         Example: const f = await gm.read_file({ path: 'README.md' }); return f.totalLines;",
    );
    d
}
