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

/// The whole JSON-RPC reply line for a tools/call result: the value as compact JSON text,
/// plus structured content when it is an object, written straight to bytes: the value
/// is serialized once and used twice (escaped as the text block, raw as the structured
/// content), with no intermediate JSON values. This is on every call's path.
pub fn tool_result_line(id: &Value, value: &Value, is_error: bool, run: &str, extra_text: Option<&str>) -> String {
    let json = serde_json::to_string(value).unwrap_or_default();
    let mut out = String::with_capacity(json.len() * 2 + 160);
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(&id.to_string());
    out.push_str(r#","result":{"content":[{"type":"text","text":"#);
    push_json_str(&mut out, &json);
    out.push('}');
    if let Some(extra) = extra_text {
        out.push_str(r#",{"type":"text","text":"#);
        push_json_str(&mut out, extra);
        out.push('}');
    }
    out.push_str(r#"],"isError":"#);
    out.push_str(if is_error { "true" } else { "false" });
    out.push_str(r#","_meta":{""#);
    out.push_str(RUN_META_KEY);
    out.push_str(r#"":"#);
    push_json_str(&mut out, run);
    out.push('}');
    if value.is_object() {
        out.push_str(r#","structuredContent":"#);
        out.push_str(&json);
    }
    out.push_str("}}");
    out
}

fn push_json_str(out: &mut String, s: &str) {
    // A str serializes to JSON without error.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reply as JSON values: what [`tool_result_line`] must write.
    fn tool_result(value: Value, is_error: bool, run: &str, extra_text: Option<String>) -> Value {
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

    #[test]
    fn the_reply_line_is_the_reply_value_written_out() {
        for (value, is_error, extra) in [
            (json!({ "path": "a \"b\"\n", "n": 1, "nested": { "x": [1, 2] } }), false, None),
            (json!({ "error": { "code": "invalid_args", "message": "bad" } }), true, Some("console: ü\u{1}")),
            (json!([1, "two"]), false, None),
            (json!("text"), false, None),
        ] {
            for id in [json!(0), json!(-7), json!("req-1")] {
                let line = tool_result_line(&id, &value, is_error, "run-1", extra);
                let parsed: Value = serde_json::from_str(&line).expect("valid JSON");
                let expected = json!({
                    "jsonrpc": "2.0",
                    "id": id,
                    "result": tool_result(value.clone(), is_error, "run-1", extra.map(str::to_owned)),
                });
                assert_eq!(parsed, expected);
            }
        }
    }

    #[test]
    fn known_versions_are_echoed_and_others_get_the_latest() {
        for v in PROTOCOL_VERSIONS {
            assert_eq!(negotiate(Some(v)), *v);
        }
        assert_eq!(negotiate(Some("2026-07-28")), LATEST_VERSION);
        assert_eq!(negotiate(None), LATEST_VERSION);
    }
}
