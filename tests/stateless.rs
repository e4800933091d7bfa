//! MCP 2026-07-28, the stateless revision, spoken to the real binary over stdio: no
//! `initialize`, an envelope on every request, results that say their type and freshness, the
//! removed methods and the revision's error codes; the `initialize` era unchanged beside it.

mod common;

use common::{text_of, Gm};
use serde_json::{json, Value};

const VERSION: &str = "2026-07-28";
const SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

fn envelope() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": { "name": "stateless-test", "version": "0" },
    })
}

/// `params` with the envelope in `_meta`.
fn with_envelope(mut params: Value) -> Value {
    params["_meta"] = envelope();
    params
}

fn error_of(reply: &Value) -> (i64, Value) {
    let e = &reply["error"];
    (e["code"].as_i64().unwrap_or_else(|| panic!("an error: {reply}")), e["data"].clone())
}

#[test]
fn a_stateless_client_is_served_without_initialize_and_every_result_says_its_type() {
    let mut gm = Gm::start(&[]);
    let d = gm.ok("server/discover", with_envelope(json!({})));
    assert_eq!(d["supportedVersions"][0], VERSION, "{d}");
    assert_eq!(d["resultType"], "complete");
    assert!(d["ttlMs"].as_u64().is_some() && d["cacheScope"].is_string(), "{d}");
    assert_eq!(d["_meta"][SERVER_INFO]["name"], "gm");
    assert!(d["capabilities"]["extensions"]["io.modelcontextprotocol/skills"].is_object());
    // No subscriptions/listen stream: nothing says the lists announce their changes.
    assert!(d["capabilities"]["tools"].is_object() && d["capabilities"]["tools"].get("listChanged").is_none(), "{d}");

    let tools = gm.ok("tools/list", with_envelope(json!({})));
    assert_eq!((tools["resultType"].as_str(), tools["ttlMs"].as_u64()), (Some("complete"), Some(0)), "{tools}");
    assert!(tools["tools"].as_array().is_some_and(|t| t.iter().any(|t| t["name"] == "run_code")));
    for method in ["resources/list", "prompts/list", "resources/templates/list"] {
        let r = gm.ok(method, with_envelope(json!({})));
        assert!(r["ttlMs"].is_u64() && r["cacheScope"].is_string() && r["resultType"] == "complete", "{method}: {r}");
    }

    // The read gate holds as on any connection: the skill read opens run_code.
    let closed = gm.ok("tools/call", with_envelope(json!({ "name": "run_code", "arguments": { "code": "return 1" } })));
    assert_eq!(closed["isError"], true, "{closed}");
    assert!(text_of(&closed).contains("skill_not_read"), "{closed}");
    let read = gm.ok("resources/read", with_envelope(json!({ "uri": "skill://gm/SKILL.md" })));
    assert!(read["ttlMs"].is_u64() && read["contents"][0]["text"].is_string(), "{read}");
    let r = gm.ok("tools/call", with_envelope(json!({ "name": "run_code", "arguments": { "code": "return 40 + 2" } })));
    assert_eq!(
        (r["structuredContent"]["result"].as_i64(), r["resultType"].as_str()),
        (Some(42), Some("complete")),
        "{r}"
    );
    assert_eq!(r["_meta"][SERVER_INFO]["name"], "gm", "{r}");

    let initialize: Vec<Value> = gm.wait_for_events("initialize", 1);
    assert_eq!(initialize.len(), 1, "{initialize:?}");
    assert_eq!(
        (initialize[0]["protocolVersion"].as_str(), initialize[0]["stateless"].as_bool()),
        (Some(VERSION), Some(true))
    );
}

#[test]
fn removed_methods_malformed_envelopes_and_unknown_versions_answer_as_the_revision_says() {
    let mut gm = Gm::start(&[]);
    gm.ok("tools/list", with_envelope(json!({})));
    // Not `initialize`: it is the handshake whatever its _meta holds (the test below).
    for method in ["ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"] {
        let reply = gm.request(method, with_envelope(json!({ "uri": "skill://gm/SKILL.md", "level": "info" })));
        assert_eq!(error_of(&reply), (-32601, json!(method)), "{method}: {reply}");
    }
    let reply = gm.request("tools/list", json!({ "_meta": { "io.modelcontextprotocol/protocolVersion": VERSION } }));
    assert_eq!(error_of(&reply).0, -32602, "{reply}");
    let mut future = envelope();
    future["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let reply = gm.request("tools/list", json!({ "_meta": future }));
    assert_eq!(error_of(&reply), (-32022, json!({ "supported": [VERSION], "requested": "2099-01-01" })), "{reply}");
    let reply = gm.request("resources/read", with_envelope(json!({ "uri": "skill://nope/SKILL.md" })));
    let (code, data) = error_of(&reply);
    assert_eq!((code, data["uri"].as_str()), (-32602, Some("skill://nope/SKILL.md")), "{reply}");
    // A tools/call on the quick path is checked the same way.
    let reply = gm.request("tools/call", json!({ "name": "run_code", "arguments": {}, "_meta": future }));
    assert_eq!(error_of(&reply).0, -32022, "{reply}");
}

#[test]
fn an_initialized_connection_keeps_the_older_shapes_and_its_notifications() {
    let mut gm = Gm::start(&[]);
    // An initialize is the handshake, even with an envelope in its _meta.
    let init = gm.ok(
        "initialize",
        json!({ "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "old", "version": "0" }, "_meta": envelope() }),
    );
    assert_eq!(init["protocolVersion"], "2025-11-25");
    gm.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }));
    let tools = gm.ok("tools/list", json!({}));
    assert!(tools.get("resultType").is_none() && tools.get("ttlMs").is_none(), "{tools}");
    assert_eq!(gm.ok("ping", json!({})), json!({}));
    let reply = gm.request("resources/read", json!({ "uri": "skill://nope/SKILL.md" }));
    assert_eq!(error_of(&reply).0, -32002, "{reply}");
    gm.read_skill();
    let r = gm.call_ok("run_code", json!({ "code": "return 1" }));
    assert!(r.get("resultType").is_none(), "{r}");
}

/// A line as a client writes it, with a newline.
fn line(v: &Value) -> Vec<u8> {
    let mut bytes = v.to_string().into_bytes();
    bytes.push(b'\n');
    bytes
}

/// A 2026-07-28 client's probe that the client does not take up: it falls back to the
/// handshake on the same connection, as the SDKs do, and nothing of the probe is held against
/// it — each request's revision is what that request carries.
#[test]
fn a_client_that_probes_then_falls_back_to_initialize_is_served_the_handshake() {
    let mut gm = Gm::start(&[]);
    gm.send_raw(&line(&json!({ "jsonrpc": "2.0", "id": "probe", "method": "server/discover",
        "params": { "_meta": envelope() } })));
    let probe = gm.recv_id(&json!("probe"));
    assert_eq!(probe["result"]["supportedVersions"][0], VERSION, "{probe}");
    // A ping without an envelope is the handshake era's, answered before initialize.
    gm.send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":\"p\",\"method\":\"ping\"}\n");
    assert_eq!(gm.recv_id(&json!("p")), json!({ "jsonrpc": "2.0", "id": "p", "result": {} }));
    gm.send_raw(&line(&json!({ "jsonrpc": "2.0", "id": "init", "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "fallback", "version": "0" } } })));
    let init = gm.recv_id(&json!("init"));
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25", "{init}");
    gm.send_raw(b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/initialized\"}\n");
    gm.read_skill();
    gm.send_raw(&line(&json!({ "jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": { "name": "run_code", "arguments": { "code": "return 40 + 2" } } })));
    let call = gm.recv_id(&json!(7));
    assert_eq!(call["result"]["structuredContent"]["result"], 42, "{call}");
    assert!(call["result"].get("resultType").is_none(), "the handshake's shapes: {call}");
}

/// The reverse order: after `initialize`, a request with an envelope is served as 2026-07-28
/// (its shapes, its removed methods), and requests without one still as the handshake said.
#[test]
fn an_enveloped_request_after_initialize_is_served_as_2026_07_28() {
    let mut gm = Gm::start(&[]);
    gm.ready();
    let tools = gm.ok("tools/list", with_envelope(json!({})));
    assert_eq!((tools["resultType"].as_str(), tools["ttlMs"].as_u64()), (Some("complete"), Some(0)), "{tools}");
    assert_eq!(tools["_meta"][SERVER_INFO]["name"], "gm", "{tools}");
    let reply = gm.request("ping", with_envelope(json!({})));
    assert_eq!(error_of(&reply), (-32601, json!("ping")), "{reply}");
    // Both quick paths: a tools/call read without building JSON, and one that was.
    let r = gm.ok("tools/call", with_envelope(json!({ "name": "run_code", "arguments": { "code": "return 6 * 7" } })));
    assert_eq!(
        (r["structuredContent"]["result"].as_i64(), r["resultType"].as_str()),
        (Some(42), Some("complete")),
        "{r}"
    );
    let older = gm.ok("tools/list", json!({}));
    assert!(older.get("resultType").is_none() && older.get("ttlMs").is_none(), "{older}");
    assert_eq!(gm.ok("ping", json!({})), json!({}));
    let r = gm.call("run_code", json!({ "code": "return 1" }));
    assert!(r.get("resultType").is_none(), "{r}");
}
