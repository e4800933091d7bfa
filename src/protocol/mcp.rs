//! MCP constants and result shapes.

use serde_json::{json, Value};

/// Versions gm speaks, newest first. `initialize` echoes one of these and answers any other
/// with the first.
pub const PROTOCOL_VERSIONS: &[&str] = &["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "2024-10-07"];
pub const LATEST_VERSION: &str = "2025-11-25";
/// The only version that had JSON-RPC batches.
pub const BATCH_VERSION: &str = "2025-03-26";
/// The `_meta` key under which every tools/call result carries the run id.
pub const RUN_META_KEY: &str = "com.anentrypoint.gmnew/run";
pub const SKILLS_EXTENSION: &str = "io.modelcontextprotocol/skills";
/// `_meta` keys of a call copied into its action event.
pub const TRACE_KEYS: &[&str] = &["traceparent", "tracestate", "baggage"];

pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested.and_then(|r| PROTOCOL_VERSIONS.iter().find(|v| **v == r).copied()).unwrap_or(LATEST_VERSION)
}

pub fn capabilities() -> Value {
    json!({
        "tools": { "listChanged": false },
        "resources": { "subscribe": false, "listChanged": false },
        "prompts": { "listChanged": false },
        "extensions": { SKILLS_EXTENSION: {} },
    })
}

pub fn server_info() -> Value {
    json!({ "name": "gm", "title": "gm", "version": env!("CARGO_PKG_VERSION") })
}

/// A tools/call result: the value as compact JSON text, plus structured content when it is an
/// object.
pub fn tool_result(value: Value, is_error: bool, run: &str, extra_text: Option<String>) -> Value {
    let text = serde_json::to_string(&value).unwrap_or_default();
    let mut content = vec![json!({ "type": "text", "text": text })];
    if let Some(extra) = extra_text {
        content.push(json!({ "type": "text", "text": extra }));
    }
    let mut r = json!({ "content": content, "isError": is_error, "_meta": { RUN_META_KEY: run } });
    if value.is_object() {
        r["structuredContent"] = value;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_versions_are_echoed_and_others_get_the_latest() {
        for v in PROTOCOL_VERSIONS {
            assert_eq!(negotiate(Some(v)), *v);
        }
        assert_eq!(negotiate(Some("2026-07-28")), LATEST_VERSION);
        assert_eq!(negotiate(None), LATEST_VERSION);
    }
}
