//! MCP constants and result shapes.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::jsonrpc::RpcError;
pub use super::shared::{discover_versions, server_info, to_value, Implementation, LATEST_VERSION, PROTOCOL_VERSIONS};

/// The only version that had JSON-RPC batches.
pub const BATCH_VERSION: &str = "2025-03-26";
/// The `_meta` key under which every tools/call result carries the run id.
pub const RUN_META_KEY: &str = "com.anentrypoint.gmnew/run";
pub const SKILLS_EXTENSION: &str = "io.modelcontextprotocol/skills";

pub fn negotiate(requested: Option<&str>) -> &'static str {
    requested.and_then(|r| PROTOCOL_VERSIONS.iter().find(|v| **v == r).copied()).unwrap_or(LATEST_VERSION)
}

pub fn capabilities() -> Value {
    json!({
        // run_code's description changes as child servers start (and their tools change).
        "tools": { "listChanged": true },
        // gm.d.ts changes as child servers come and go: a subscriber is told (the set of
        // resources itself never changes).
        "resources": { "subscribe": true, "listChanged": false },
        "prompts": { "listChanged": false },
        "extensions": { SKILLS_EXTENSION: {} },
    })
}

/// The answer to `initialize` asking for `requested`: the same from the worker and from a
/// relay that answers while its worker starts.
pub fn initialize_result(requested: Option<&str>) -> InitializeResult {
    InitializeResult {
        protocol_version: negotiate(requested),
        capabilities: capabilities(),
        server_info: server_info(),
        instructions: instructions(),
    }
}

pub fn instructions() -> String {
    "gm is your hands and memory for a long-horizon run. First read the gm skill: resources/read \
     skill://gm/SKILL.md (run_code stays closed until you do). Then call next_context at every step, do \
     the step with run_code (every verb is await gm.<verb>(args)), and end with finish({ gaps })."
        .into()
}

/// MCP result shapes, typed: the server builds these from gm's own types and nothing else
/// builds them.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResult {
    pub protocol_version: &'static str,
    pub capabilities: Value,
    pub server_info: Implementation,
    pub instructions: String,
}

/// `server/discover`: what a client probing before `initialize` learns.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverResult {
    pub supported_versions: Vec<&'static str>,
    pub capabilities: Value,
    pub server_info: Implementation,
    pub instructions: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    pub annotations: Value,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListToolsResult {
    pub tools: Vec<Tool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A skill file as a resource. A skill's SKILL.md is named and described as its frontmatter
/// says (SEP-2640); other files by their path.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Resource {
    pub uri: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub mime_type: &'static str,
    pub size: u64,
    #[serde(rename = "_meta")]
    pub meta: ResourceMeta,
}

/// A skill resource's `_meta`: its keys carry the skills extension's prefix, as SEP-2640 asks
/// of every `_meta` key on a skill resource.
#[derive(Debug, Clone, Serialize)]
pub struct ResourceMeta {
    /// `sha256:<hex>` of the file, as in the skill's manifest.
    #[serde(rename = "io.modelcontextprotocol.skills/digest")]
    pub digest: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResourcesResult {
    pub resources: Vec<Resource>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TextResourceContents {
    pub uri: String,
    pub mime_type: &'static str,
    pub text: String,
}

#[derive(Debug, Serialize)]
pub struct ReadResourceResult {
    pub contents: Vec<TextResourceContents>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListResourceTemplatesResult {
    pub resource_templates: Vec<Value>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Prompt {
    pub name: &'static str,
    pub title: &'static str,
    pub description: &'static str,
    pub arguments: Vec<PromptArgument>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PromptArgument {
    pub name: &'static str,
    pub description: &'static str,
    pub required: bool,
}

#[derive(Debug, Serialize)]
pub struct ListPromptsResult {
    pub prompts: Vec<Prompt>,
}

#[derive(Debug, Serialize)]
pub struct GetPromptResult {
    pub description: &'static str,
    pub messages: Vec<PromptMessage>,
}

#[derive(Debug, Serialize)]
pub struct PromptMessage {
    pub role: &'static str,
    pub content: TextContent,
}

#[derive(Debug, Serialize)]
pub struct TextContent {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub text: String,
}

impl TextContent {
    pub fn new(text: String) -> Self {
        Self { kind: "text", text }
    }
}

/// The first protocol version whose results carry caching hints (SEP-2549): `skills/list` and
/// `skills/get` results carry `ttlMs` and `cacheScope` on it and later versions.
pub const CACHE_HINTS_VERSION: &str = "2026-07-28";
/// How long a host may treat a skills result as current. gm re-reads its skill files on every
/// read, so a minute keeps hosts close to an edit without asking on every turn.
const SKILLS_TTL_MS: u64 = 60_000;

/// SEP-2549's caching hints, present from [`CACHE_HINTS_VERSION`].
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CacheHints {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_scope: Option<&'static str>,
}

impl CacheHints {
    /// The hints for a connection that speaks `protocol` (none before 2026-07-28).
    pub fn for_protocol(protocol: Option<&str>) -> Self {
        // Protocol versions are dates, so they order as strings.
        match protocol {
            Some(p) if p >= CACHE_HINTS_VERSION => Self { ttl_ms: Some(SKILLS_TTL_MS), cache_scope: Some("public") },
            _ => Self::default(),
        }
    }
}

/// `skills/list` (SEP-2640).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSkillsResult {
    pub result_type: &'static str,
    pub skills: Vec<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    #[serde(flatten)]
    pub cache: CacheHints,
}

/// `skills/get` (SEP-2640): the entry under `skill`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct GetSkillResult {
    pub result_type: &'static str,
    pub skill: Value,
    #[serde(flatten)]
    pub cache: CacheHints,
}

/// One tools/call request: what the server needs of it.
#[derive(Debug)]
pub struct ToolCall {
    pub id: Value,
    pub name: String,
    /// The arguments object as its JSON text (`{}` when absent or null).
    pub args: Box<RawValue>,
    pub meta: Option<Map<String, Value>>,
    /// A stateless (2026-07-28) request: its result says its `resultType`.
    pub modern: bool,
}

/// The shape of a well-formed tools/call line, read without building JSON values.
#[derive(Deserialize)]
struct CallLine<'a> {
    #[serde(borrow)]
    jsonrpc: Cow<'a, str>,
    id: Value,
    #[serde(borrow)]
    method: Cow<'a, str>,
    #[serde(borrow)]
    params: CallParams<'a>,
}

#[derive(Deserialize)]
struct CallParams<'a> {
    name: String,
    #[serde(default, borrow)]
    arguments: Option<&'a RawValue>,
    #[serde(default, rename = "_meta")]
    meta: Option<Map<String, Value>>,
}

/// Reads a line that is a well-formed tools/call request. Anything else (another method, a
/// notification, a malformed or unusual request) is `None` and goes the general way, which
/// also gives every error its exact JSON-RPC answer.
pub fn parse_tool_call(line: &str) -> Option<ToolCall> {
    let call: CallLine = serde_json::from_str(line).ok()?;
    let id_ok = call.id.is_string() || call.id.is_i64() || call.id.is_u64();
    if call.jsonrpc != "2.0" || call.method != "tools/call" || !id_ok {
        return None;
    }
    let args = args_json(call.params.arguments)?;
    Some(ToolCall { id: call.id, name: call.params.name, args, meta: call.params.meta, modern: false })
}

impl ToolCall {
    /// A tools/call whose params were read as a JSON value (batches, and lines the fast path
    /// left to the general one).
    pub fn from_params(id: Value, params: &Value) -> Result<ToolCall, RpcError> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::invalid_params("tools/call needs params.name, a string"))?;
        let args = match params.get("arguments") {
            None | Some(Value::Null) => empty_args(),
            Some(a @ Value::Object(_)) => serde_json::value::to_raw_value(a).ok(),
            Some(_) => None,
        }
        .ok_or_else(|| RpcError::invalid_params("arguments must be an object"))?;
        let meta = params.get("_meta").and_then(Value::as_object).cloned();
        Ok(ToolCall { id, name: name.to_owned(), args, meta, modern: false })
    }
}

/// The arguments' text if they are an object, `{}` if absent or null, `None` otherwise.
fn args_json(raw: Option<&RawValue>) -> Option<Box<RawValue>> {
    match raw.map(|r| r.get().trim()) {
        None | Some("null") => empty_args(),
        Some(text) if text.starts_with('{') => RawValue::from_string(text.to_owned()).ok(),
        Some(_) => None,
    }
}

fn empty_args() -> Option<Box<RawValue>> {
    RawValue::from_string("{}".to_owned()).ok()
}

/// The `_meta` key under which a reply that was cut to its budget carries `{ bytes, spill }`
/// (`crate::budget`); the model sees the same as `structuredContent.cut`.
pub const CUT_META_KEY: &str = "com.anentrypoint.gmnew/cut";

/// How a reply over its budget is written: `server/call.rs` decides, `crate::budget` cuts.
#[derive(Debug, Default, Clone, Copy)]
pub struct Fitted<'a> {
    /// The first text block's text instead of the value's JSON: a summary pointing at
    /// `structuredContent`, which holds the value.
    pub summary: Option<&'a str>,
    /// A last text block saying what was cut and where the whole is, for a value that has no
    /// `structuredContent` to carry `cut`.
    pub note: Option<&'a str>,
    /// `{ bytes, spill }` as JSON text, put in `_meta` under [`CUT_META_KEY`].
    pub cut: Option<&'a str>,
}

/// Bytes of content the reply for `value` carries: its JSON as the text block, again as the
/// structured content when it is an object, and the extra text block.
pub fn content_bytes(value: &RawValue, extra_text: Option<&str>) -> usize {
    let json = value.get().trim();
    let copies = if json.starts_with('{') { 2 } else { 1 };
    json.len() * copies + extra_text.map_or(0, str::len)
}

/// The whole JSON-RPC reply line for a tools/call result: the value's JSON text as the text
/// block, plus structured content when it is an object, written straight to bytes: the text
/// is used twice (escaped as the text block, raw as the structured content), with no
/// intermediate JSON values. This is on every call's path.
pub fn tool_result_line(
    id: &Value,
    value: &RawValue,
    is_error: bool,
    run: &str,
    extra_text: Option<&str>,
    modern: bool,
) -> String {
    tool_result_line_fitted(id, value, is_error, run, extra_text, modern, Fitted::default())
}

/// [`tool_result_line`] for a reply fitted to its budget.
pub fn tool_result_line_fitted(
    id: &Value,
    value: &RawValue,
    is_error: bool,
    run: &str,
    extra_text: Option<&str>,
    modern: bool,
    fit: Fitted<'_>,
) -> String {
    let json = value.get().trim();
    let mut out = String::with_capacity(json.len() * 2 + 160);
    out.push_str(r#"{"jsonrpc":"2.0","id":"#);
    out.push_str(&id.to_string());
    out.push_str(r#","result":{"content":[{"type":"text","text":"#);
    push_json_str(&mut out, fit.summary.unwrap_or(json));
    out.push('}');
    for text in [extra_text, fit.note].into_iter().flatten() {
        out.push_str(r#",{"type":"text","text":"#);
        push_json_str(&mut out, text);
        out.push('}');
    }
    out.push_str(r#"],"isError":"#);
    out.push_str(if is_error { "true" } else { "false" });
    out.push_str(r#","_meta":{""#);
    out.push_str(RUN_META_KEY);
    out.push_str(r#"":"#);
    push_json_str(&mut out, run);
    if let Some(cut) = fit.cut {
        out.push_str(r#",""#);
        out.push_str(CUT_META_KEY);
        out.push_str(r#"":"#);
        out.push_str(cut);
    }
    if modern {
        out.push_str(r#",""#);
        out.push_str(super::shared::SERVER_INFO_KEY);
        out.push_str(r#"":"#);
        out.push_str(&to_value(&server_info()).to_string());
    }
    out.push('}');
    if modern {
        out.push_str(r#","resultType":"complete""#);
    }
    if json.starts_with('{') {
        out.push_str(r#","structuredContent":"#);
        out.push_str(json);
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
                let raw = serde_json::value::to_raw_value(&value).expect("serializes");
                let line = tool_result_line(&id, &raw, is_error, "run-1", extra, false);
                let parsed: Value = serde_json::from_str(&line).expect("valid JSON");
                let result = tool_result(value.clone(), is_error, "run-1", extra.map(str::to_owned));
                let expected = json!({ "jsonrpc": "2.0", "id": id, "result": result });
                assert_eq!(parsed, expected);
                // The stateless revision's result is the same, completed as every result is
                // (modern.rs's tests check it is what `modern::complete` makes).
                let modern: Value =
                    serde_json::from_str(&tool_result_line(&id, &raw, is_error, "run-1", extra, true)).expect("JSON");
                assert_eq!(modern["result"]["resultType"], "complete");
                assert_eq!(modern["result"]["content"], result["content"]);
            }
        }
    }

    #[test]
    fn a_fitted_reply_has_its_summary_first_its_note_last_and_its_cut_in_meta() {
        let raw = serde_json::value::to_raw_value(&json!({ "result": "x…[cut 9 bytes]" })).expect("serializes");
        let fit = Fitted { summary: Some("see structuredContent"), note: Some("note"), cut: Some(r#"{"bytes":9}"#) };
        let line = tool_result_line_fitted(&json!(1), &raw, false, "run-1", Some("console"), false, fit);
        let r: Value = serde_json::from_str(&line).expect("valid JSON");
        let texts: Vec<&str> =
            r["result"]["content"].as_array().expect("content").iter().filter_map(|b| b["text"].as_str()).collect();
        assert_eq!(texts, ["see structuredContent", "console", "note"]);
        assert_eq!(r["result"]["structuredContent"]["result"], "x…[cut 9 bytes]");
        assert_eq!(r["result"]["_meta"][CUT_META_KEY], json!({ "bytes": 9 }));
        assert_eq!(r["result"]["_meta"][RUN_META_KEY], "run-1");
        assert_eq!(content_bytes(&raw, Some("console")), 2 * raw.get().len() + 7);
    }

    #[test]
    fn a_well_formed_tools_call_is_read_directly_and_anything_else_goes_the_general_way() {
        let call = parse_tool_call(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"stat_file","arguments":{"path":"a\"b"},"_meta":{"traceparent":"t"}}}"#,
        )
        .expect("fast path");
        assert_eq!((call.id, call.name.as_str()), (json!(7), "stat_file"));
        assert_eq!(serde_json::from_str::<Value>(call.args.get()).expect("json"), json!({ "path": "a\"b" }));
        assert_eq!(call.meta.expect("meta")["traceparent"], "t");
        for absent in [r#""arguments":null,"#, ""] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":"x","method":"tools/call","params":{{{absent}"name":"n"}}}}"#);
            assert_eq!(parse_tool_call(&line).expect("no arguments").args.get(), "{}");
        }
        for general in [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"n"}}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call","params":{"name":"n"}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"n"}}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"n"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n","arguments":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","name":"b"}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"n"}}]"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call""#,
        ] {
            assert!(parse_tool_call(general).is_none(), "{general}");
        }
    }

    #[test]
    fn general_params_make_the_same_call_or_the_params_error() {
        let call = ToolCall::from_params(json!(1), &json!({ "name": "x", "arguments": { "a": [1] } })).expect("call");
        assert_eq!(call.args.get(), r#"{"a":[1]}"#);
        for bad in [json!({ "arguments": {} }), json!({ "name": "x", "arguments": "no" })] {
            let err = ToolCall::from_params(json!(1), &bad).expect_err("invalid params");
            assert_eq!(err.code, crate::protocol::jsonrpc::INVALID_PARAMS);
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

#[cfg(test)]
mod skills_tests {
    use super::*;

    #[test]
    fn skills_results_carry_caching_hints_only_from_the_version_that_has_them() {
        let entry =
            json!({ "uri": "skill://a/SKILL.md", "frontmatter": { "name": "a", "description": "d" }, "resources": [] });
        let get = |p| {
            to_value(&GetSkillResult {
                result_type: "complete",
                skill: entry.clone(),
                cache: CacheHints::for_protocol(p),
            })
        };
        assert_eq!(get(Some("2025-11-25")), json!({ "resultType": "complete", "skill": entry }));
        let new = get(Some("2026-07-28"));
        assert_eq!((new["ttlMs"].as_u64(), new["cacheScope"].as_str()), (Some(60_000), Some("public")));
        let list = to_value(&ListSkillsResult {
            result_type: "complete",
            skills: vec![entry.clone()],
            next_cursor: Some("1".into()),
            cache: CacheHints::for_protocol(Some("2026-07-28")),
        });
        assert_eq!((list["nextCursor"].as_str(), list["resultType"].as_str()), (Some("1"), Some("complete")));
        assert!(list.get("ttlMs").is_some());
    }
}
