//! The two MCP surfaces, both derived from the verb registry and the run loop's own tools.
//!
//! - `code` (default): exactly `next_context`, `run_code`, `finish`; every verb is
//!   `gm.<verb>(args)` inside run_code.
//! - `tools`: `next_context`, `finish` and every verb as its own tool.

use serde_json::json;

use crate::children::Offered;
use crate::protocol::mcp;
use crate::run::{loop_tool, loop_tools, LoopTool};
use crate::verbs::{self, Effect, Traits};

pub use crate::app::Surface;

/// The tool definitions of a surface, in order. `children` are the child servers' tools and
/// those still starting, which the code surface's run_code names.
pub fn tools(surface: Surface, children: &Offered) -> Vec<mcp::Tool> {
    let def = |t: &LoopTool| mcp::Tool {
        name: t.name.to_owned(),
        description: (t.description)(children),
        input_schema: (t.schema)(),
        annotations: (t.annotations)(),
    };
    let [first, rest @ ..] = loop_tools() else { return Vec::new() };
    let mut out = vec![def(first)];
    match surface {
        Surface::Code => out.extend(rest.iter().filter(|t| !t.on_tools_surface).map(def)),
        Surface::Tools => out.extend(verbs::registry().iter().map(|v| mcp::Tool {
            name: v.name.to_owned(),
            description: v.description.to_owned(),
            input_schema: v.input_schema(),
            annotations: json!({ "readOnlyHint": v.effect == Effect::Read }),
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
