//! MCP 2026-07-28, the stateless revision: no `initialize`, every request carries its protocol
//! version and its client's capabilities in `params._meta`, every result says its
//! `resultType`, list and read results say how long they stay fresh, and questions to the
//! user come back as `input_required` results instead of server-to-client requests.
//!
//! What is decided per request lives here as pure functions; the server applies them.

use serde_json::{json, Map, Value};

use super::jsonrpc::{RpcError, INVALID_PARAMS, METHOD_NOT_FOUND, RESOURCE_NOT_FOUND};
use super::shared;
pub use super::shared::{MODERN_VERSION as VERSION, MODERN_VERSIONS as VERSIONS, SERVER_INFO_KEY};

pub const PROTOCOL_VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
pub const CLIENT_CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";
pub const LOG_LEVEL_KEY: &str = "io.modelcontextprotocol/logLevel";

/// A header or envelope that disagrees with the body (HTTP).
pub const HEADER_MISMATCH: i64 = -32020;
/// A request needs a client capability it did not declare.
pub const MISSING_CAPABILITY: i64 = -32021;
/// A protocol version gm does not serve statelessly.
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// Methods of the `initialize` era that 2026-07-28 removed: a stateless request for one is
/// answered "method not found".
const REMOVED: &[&str] = &["initialize", "ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"];

/// Results a client may cache, which carry `ttlMs` and `cacheScope`.
const CACHEABLE: &[&str] = &[
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
    "skills/list",
    "skills/get",
];

const LOG_LEVELS: &[&str] = &["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"];

/// What one stateless request says of its client.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Envelope {
    /// The client declared `elicitation` (form mode): gm may ask its user.
    pub elicitation: bool,
    pub client: Option<Value>,
}

/// Whether a request's params carry a stateless envelope (its protocol version key).
pub fn carries_envelope(params: &Value) -> bool {
    params.pointer("/_meta").and_then(Value::as_object).is_some_and(|m| m.contains_key(PROTOCOL_VERSION_KEY))
}

/// Reads and checks a request's envelope, in the revision's order: a missing or malformed
/// envelope is invalid params, a version gm does not serve statelessly is -32022 naming the
/// versions it does.
pub fn envelope(meta: Option<&Map<String, Value>>) -> Result<Envelope, RpcError> {
    let Some(meta) = meta else {
        return Err(RpcError::invalid_params(format!(
            "params._meta must be an object carrying the required '{PROTOCOL_VERSION_KEY}' and '{CLIENT_CAPABILITIES_KEY}' envelope keys"
        )));
    };
    let missing: Vec<&str> =
        [PROTOCOL_VERSION_KEY, CLIENT_CAPABILITIES_KEY].into_iter().filter(|k| !meta.contains_key(*k)).collect();
    if !missing.is_empty() {
        return Err(RpcError::invalid_params(format!(
            "params._meta is missing the required envelope key(s): {}",
            missing.join(", ")
        )));
    }
    let Some(version) = meta.get(PROTOCOL_VERSION_KEY).and_then(Value::as_str) else {
        return Err(RpcError::invalid_params(format!("{PROTOCOL_VERSION_KEY} must be a string")));
    };
    if !VERSIONS.contains(&version) {
        return Err(unsupported(version));
    }
    let capabilities = meta.get(CLIENT_CAPABILITIES_KEY);
    if !capabilities.is_some_and(Value::is_object) {
        return Err(RpcError::invalid_params(format!("{CLIENT_CAPABILITIES_KEY} must be an object")));
    }
    if let Some(level) = meta.get(LOG_LEVEL_KEY) {
        if !level.as_str().is_some_and(|l| LOG_LEVELS.contains(&l)) {
            return Err(RpcError::invalid_params(format!("{LOG_LEVEL_KEY} must be one of {}", LOG_LEVELS.join(", ")))
                .with_data(json!({ "logLevel": level })));
        }
    }
    Ok(Envelope {
        elicitation: capabilities.and_then(|c| c.get("elicitation")).is_some_and(Value::is_object),
        client: meta.get("io.modelcontextprotocol/clientInfo").cloned(),
    })
}

/// -32022: `requested` is not served statelessly; `supported` is what is.
pub fn unsupported(requested: &str) -> RpcError {
    RpcError::new(UNSUPPORTED_VERSION, "Unsupported protocol version")
        .with_data(json!({ "supported": VERSIONS, "requested": requested }))
}

/// The answer to a method 2026-07-28 removed, or `None` when the method exists.
pub fn removed(method: &str) -> Option<RpcError> {
    REMOVED.contains(&method).then(|| RpcError::new(METHOD_NOT_FOUND, "Method not found").with_data(json!(method)))
}

/// An error as the revision words it: a resource that names nothing is invalid params.
pub fn error(mut e: RpcError) -> RpcError {
    if e.code == RESOURCE_NOT_FOUND {
        e.code = INVALID_PARAMS;
    }
    e
}

/// A complete result of `method` as the revision shapes it: `resultType`, the server's
/// identity in `_meta`, and for cacheable results how long they stay fresh. What is already
/// there is kept.
pub fn complete(method: &str, mut result: Value) -> Value {
    let Some(obj) = result.as_object_mut() else { return result };
    obj.entry("resultType").or_insert_with(|| json!("complete"));
    if CACHEABLE.contains(&method) {
        let (ttl, scope) = freshness(method);
        obj.entry("ttlMs").or_insert_with(|| json!(ttl));
        obj.entry("cacheScope").or_insert_with(|| json!(scope));
    }
    if method == "server/discover" {
        if let Some(caps) = obj.get_mut("capabilities") {
            without_subscriptions(caps);
        }
    }
    let meta = obj.entry("_meta").or_insert_with(|| json!({}));
    if let Some(meta) = meta.as_object_mut() {
        meta.insert(SERVER_INFO_KEY.to_owned(), shared::to_value(&shared::server_info()));
    }
    result
}

/// A stateless client hears of changes only on a `subscriptions/listen` stream, which gm does
/// not serve: it is offered no `listChanged` or `subscribe` (it re-lists when `ttlMs` says).
fn without_subscriptions(capabilities: &mut Value) {
    for kind in ["tools", "resources", "prompts"] {
        if let Some(c) = capabilities.get_mut(kind).and_then(Value::as_object_mut) {
            c.remove("listChanged");
            c.remove("subscribe");
        }
    }
}

/// How long a cacheable result stays fresh, and for whom. The tool list changes as child
/// servers start and is never cached; the skill files are re-read at every read, and
/// discovery changes only with a new build.
fn freshness(method: &str) -> (u64, &'static str) {
    match method {
        "server/discover" => (3_600_000, "public"),
        "tools/list" => (0, "private"),
        _ => (60_000, "public"),
    }
}

/// The `input_required` result that asks the client's user `question` (an
/// `elicitation/create` request's params) under `key`; the client retries the same request
/// with `inputResponses` and `requestState`.
pub fn input_required(key: &str, question: Value, state: &str) -> Value {
    let mut result = json!({
        "resultType": "input_required",
        "inputRequests": { key: { "method": "elicitation/create", "params": question } },
        "requestState": state,
    });
    if let Some(obj) = result.as_object_mut() {
        obj.insert("_meta".to_owned(), json!({ SERVER_INFO_KEY: shared::to_value(&shared::server_info()) }));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_result_line_of_the_stateless_revision_is_the_result_completed() {
        let value = json!({ "path": "a", "n": 1 });
        let raw = serde_json::value::to_raw_value(&value).expect("serializes");
        let line = super::super::mcp::tool_result_line(&json!(1), &raw, false, "run-1", None, true);
        let parsed: Value = serde_json::from_str(&line).expect("JSON");
        let plain = super::super::mcp::tool_result_line(&json!(1), &raw, false, "run-1", None, false);
        let plain: Value = serde_json::from_str(&plain).expect("JSON");
        assert_eq!(parsed["result"], complete("tools/call", plain["result"].clone()));
    }

    fn meta(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn an_envelope_is_checked_in_the_revisions_order() {
        let e = envelope(None).unwrap_err();
        assert_eq!(e.code, INVALID_PARAMS);
        let e = envelope(Some(&meta(json!({ PROTOCOL_VERSION_KEY: VERSION })))).unwrap_err();
        assert!(e.message.contains(CLIENT_CAPABILITIES_KEY), "{e:?}");
        let e = envelope(Some(&meta(json!({ PROTOCOL_VERSION_KEY: 7, CLIENT_CAPABILITIES_KEY: {} })))).unwrap_err();
        assert_eq!(e.code, INVALID_PARAMS);
        let e = envelope(Some(&meta(json!({ PROTOCOL_VERSION_KEY: "2025-11-25", CLIENT_CAPABILITIES_KEY: {} }))))
            .unwrap_err();
        assert_eq!(e.code, UNSUPPORTED_VERSION);
        assert_eq!(e.data, Some(json!({ "supported": ["2026-07-28"], "requested": "2025-11-25" })));
        let bad_level =
            meta(json!({ PROTOCOL_VERSION_KEY: VERSION, CLIENT_CAPABILITIES_KEY: {}, LOG_LEVEL_KEY: "loud" }));
        assert_eq!(envelope(Some(&bad_level)).unwrap_err().code, INVALID_PARAMS);
        let ok = envelope(Some(&meta(
            json!({ PROTOCOL_VERSION_KEY: VERSION, CLIENT_CAPABILITIES_KEY: { "elicitation": { "form": {} } } }),
        )))
        .unwrap();
        assert!(ok.elicitation);
    }

    #[test]
    fn a_complete_result_says_its_type_and_freshness_and_keeps_its_own() {
        let r = complete("tools/list", json!({ "tools": [], "_meta": { "x": 1 } }));
        assert_eq!(
            (r["resultType"].as_str(), r["ttlMs"].as_u64(), r["cacheScope"].as_str()),
            (Some("complete"), Some(0), Some("private"))
        );
        assert_eq!(r["_meta"]["x"], 1);
        assert_eq!(r["_meta"][SERVER_INFO_KEY]["name"], "gm");
        let r = complete("tools/call", json!({ "content": [] }));
        assert!(r.get("ttlMs").is_none());
        let r = complete("skills/get", json!({ "resultType": "complete", "ttlMs": 5, "cacheScope": "public" }));
        assert_eq!(r["ttlMs"], 5);
    }

    #[test]
    fn removed_methods_are_not_found_and_missing_resources_are_invalid_params() {
        for m in REMOVED {
            let e = removed(m).unwrap();
            assert_eq!((e.code, e.data), (METHOD_NOT_FOUND, Some(json!(m))));
        }
        assert!(removed("tools/list").is_none());
        assert_eq!(error(RpcError::new(RESOURCE_NOT_FOUND, "no")).code, INVALID_PARAMS);
    }
}
