//! The two MCP surfaces, both derived from the verb registry and the run loop's own tools.
//!
//! - `code` (default): exactly `next_context`, `run_code`, `finish`; every verb is
//!   `gm.<verb>(args)` inside run_code.
//! - `tools`: `next_context`, `finish` and every verb as its own tool.

use gm_actors::scheduler::Pool;
use serde_json::{json, Value};

use crate::children::ChildTool;
use crate::run::{FinishArgs, NextContextArgs, RunCodeArgs};
use crate::verbs::{self, schema_of, Effect, Traits, QUICK};

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

/// One of the run loop's own tools: declared once, like a verb, so the server matches on no
/// tool name to know how a call behaves.
pub struct LoopTool {
    pub name: &'static str,
    /// Its description, given the child servers' tools (run_code's names them).
    pub description: fn(&[ChildTool]) -> String,
    pub schema: fn() -> Value,
    pub traits: Traits,
    /// The slots a call of it takes (verbs take theirs inside `verbs::call`).
    pub pool: Pool,
    /// Listed on `--surface tools` too (run_code is the code surface's alone).
    pub on_tools_surface: bool,
    pub annotations: fn() -> Value,
}

/// The run loop's tools, in the order surfaces list them (run_code and the verbs go between
/// the first and the last).
pub fn loop_tools() -> &'static [LoopTool] {
    static TOOLS: [LoopTool; 3] = [
        LoopTool {
            name: NEXT_CONTEXT,
            description: |_| {
                "One step of the run: the governance rules (re-read from skill://gm/SKILL.md every call), the task, the step number and the steps left, open rows, background work and the last log events. Pass { task } to set the run's task and { stepBudget } to set how many steps it may take.".into()
            },
            schema: schema_of::<NextContextArgs>,
            traits: QUICK,
            pool: Pool::Verb,
            on_tools_surface: true,
            annotations: || json!({ "readOnlyHint": false, "idempotentHint": false }),
        },
        LoopTool {
            name: RUN_CODE,
            description: run_code_description,
            schema: schema_of::<RunCodeArgs>,
            traits: Traits { cancellable: true, progress: true },
            pool: Pool::Body,
            on_tools_surface: false,
            annotations: || json!({ "readOnlyHint": false, "openWorldHint": true }),
        },
        LoopTool {
            name: FINISH,
            description: |_| {
                "End the run: logs an end event with the summary and the gaps (what is not done, not verified or not known). stopBackground: true also stops background work still running. The next next_context starts a new run.".into()
            },
            schema: schema_of::<FinishArgs>,
            traits: QUICK,
            pool: Pool::Verb,
            on_tools_surface: true,
            annotations: || json!({ "readOnlyHint": false, "idempotentHint": false }),
        },
    ];
    &TOOLS
}

pub fn loop_tool(name: &str) -> Option<&'static LoopTool> {
    loop_tools().iter().find(|t| t.name == name)
}

/// The tool definitions of a surface, in order. `children` are the child servers' tools, which
/// the code surface's run_code names.
pub fn tools(surface: Surface, children: &[ChildTool]) -> Vec<Value> {
    let def = |t: &LoopTool| {
        json!({
            "name": t.name,
            "description": (t.description)(children),
            "inputSchema": (t.schema)(),
            "annotations": (t.annotations)(),
        })
    };
    let [first, rest @ ..] = loop_tools() else { return Vec::new() };
    let mut out = vec![def(first)];
    match surface {
        Surface::Code => out.extend(rest.iter().filter(|t| !t.on_tools_surface).map(def)),
        Surface::Tools => out.extend(verbs::registry().iter().map(|v| {
            json!({
                "name": v.name,
                "description": v.description,
                "inputSchema": v.input_schema(),
                "annotations": { "readOnlyHint": v.effect == Effect::Read },
            })
        })),
    }
    out.extend(rest.iter().filter(|t| t.on_tools_surface).map(def));
    out
}

/// How a tool of `surface` behaves, or `None` when `surface` has no tool by that name.
pub fn traits(surface: Surface, name: &str) -> Option<Traits> {
    if let Some(tool) = loop_tool(name) {
        return (surface == Surface::Code || tool.on_tools_surface).then_some(tool.traits);
    }
    match surface {
        Surface::Tools => verbs::find(name).map(|v| v.traits),
        Surface::Code => None,
    }
}

fn run_code_description(children: &[ChildTool]) -> String {
    let mut d = String::from(
        "Run an async JavaScript body (QuickJS) and return its result. `return` gives the result; \
         console.log/error are captured; a throw comes back as an error with its stack and the line in the body. \
         Budget 180000 ms by default (timeoutMs, at most 300000); a body still running at its budget goes on in the background. \
         require() and import() load files relative to the workspace. \
         Every verb is an async function on `gm`, admitted like a tool call (a shell runs alone):\n",
    );
    for v in verbs::registry() {
        d.push_str(&format!("- gm.{}(args): {}\n", v.name, v.description));
    }
    if !children.is_empty() {
        d.push_str("Tools of the child MCP servers gm started (the child's result comes back as it sent it; isError: true throws):\n");
        for t in children {
            let first = t.description.lines().next().unwrap_or("").trim();
            d.push_str(&format!("- gm.{}(args): {} [{}]\n", t.name, first, t.server));
        }
    }
    d.push_str(
        "- gm.verbs(): every verb with its description and argument schema.\n\
         - gm.try(fn): runs fn and returns its value, or { ok: false, error } instead of throwing.\n\
         Example: const f = await gm.read_file({ path: 'README.md' }); return f.totalLines;",
    );
    d
}
