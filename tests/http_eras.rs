//! `gm serve --http` serving both revisions per request: a 2026-07-28 request is one whatever
//! came before it (on a session made by `initialize` too), and its SEP-2243 headers — the
//! method in `Mcp-Method`, the name a tools/call, prompts/get or resources/read names in
//! `Mcp-Name` — must be there and agree with its body, else HTTP 400 and -32020.

mod common;

use std::path::Path;
use std::process::Child;

use common::stop_worker;
use reqwest::blocking::RequestBuilder;
use reqwest::StatusCode;
use serde_json::{json, Value};

const STATELESS: &str = "2026-07-28";

/// A running `gm serve --http` without a token (loopback).
struct Front {
    child: Child,
    workspace: std::path::PathBuf,
    http: common::HttpClient,
}

impl Front {
    fn start(workspace: &Path) -> Front {
        let (child, rx) = common::spawn_http_front(workspace, &["--http-token", "none"], &[]);
        let http = common::HttpClient::of(&rx, None);
        Front { child, workspace: workspace.to_owned(), http }
    }

    /// A POST of `body`, with `headers`.
    fn post(&self, body: &Value, headers: &[(&str, &str)]) -> RequestBuilder {
        self.http.request(body, headers)
    }

    fn send(&self, body: &Value, headers: &[(&str, &str)]) -> (StatusCode, Value) {
        let r = self.post(body, headers).send().expect("the front answers");
        let status = r.status();
        let text = r.text().unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    fn stop(mut self) {
        common::stop_http_front(&mut self.child);
        let life = self.workspace.join(".gm/worker.pid");
        if life.exists() && gm_actors::sys::is_locked(&life) {
            stop_worker(&self.workspace);
        }
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn workspace() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().canonicalize().expect("canonical");
    common::git(&ws, &["init", "-q"]);
    (dir, ws)
}

/// A 2026-07-28 request: `params` with the envelope in `_meta`.
fn enveloped(id: i64, method: &str, mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": STATELESS,
        "io.modelcontextprotocol/clientCapabilities": {},
    });
    json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params })
}

fn error_code(reply: &Value) -> Option<i64> {
    reply.pointer("/error/code").and_then(Value::as_i64)
}

#[test]
fn an_enveloped_request_on_an_initialized_session_is_served_as_2026_07_28() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws);
    // A probe first, which the client does not take up: it initializes.
    let (status, probe) = front.send(
        &enveloped(1, "server/discover", json!({})),
        &[("mcp-protocol-version", STATELESS), ("mcp-method", "server/discover")],
    );
    assert_eq!(
        (status, probe["result"]["supportedVersions"][0].as_str()),
        (StatusCode::OK, Some(STATELESS)),
        "{probe}"
    );
    let init = json!({ "jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": { "name": "eras", "version": "0" } } });
    let r = front.post(&init, &[]).send().expect("initialize");
    assert_eq!(r.status(), StatusCode::OK);
    let session = r.headers().get("mcp-session-id").expect("Mcp-Session-Id").to_str().expect("ascii").to_owned();
    let (status, _) = front
        .send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }), &[("mcp-session-id", &session)]);
    assert_eq!(status, StatusCode::ACCEPTED);

    // On the session, an enveloped request is a 2026-07-28 one: its shapes, its statuses.
    let revision = [("mcp-session-id", session.as_str()), ("mcp-protocol-version", STATELESS)];
    let (status, tools) =
        front.send(&enveloped(3, "tools/list", json!({})), &[revision[0], revision[1], ("mcp-method", "tools/list")]);
    assert_eq!(status, StatusCode::OK, "{tools}");
    assert_eq!(
        (tools["result"]["resultType"].as_str(), tools["result"]["ttlMs"].as_u64()),
        (Some("complete"), Some(0)),
        "{tools}"
    );
    let (status, ping) =
        front.send(&enveloped(4, "ping", json!({})), &[revision[0], revision[1], ("mcp-method", "ping")]);
    assert_eq!((status, error_code(&ping)), (StatusCode::NOT_FOUND, Some(-32601)), "{ping}");
    // Without the envelope, the same session is served as its handshake said.
    let plain = json!({ "jsonrpc": "2.0", "id": 5, "method": "tools/list", "params": {} });
    let (status, older) = front.send(&plain, &[("mcp-session-id", &session), ("mcp-protocol-version", "2025-11-25")]);
    assert_eq!(status, StatusCode::OK, "{older}");
    assert!(older["result"]["tools"].is_array() && older["result"].get("resultType").is_none(), "{older}");
    front.stop();
}

#[test]
fn a_2026_07_28_request_whose_headers_are_missing_or_disagree_is_refused_with_400_and_32020() {
    let (_dir, ws) = workspace();
    let front = Front::start(&ws);
    let version = ("mcp-protocol-version", STATELESS);
    let call = enveloped(1, "tools/call", json!({ "name": "next_context", "arguments": { "task": "t" } }));
    let read = enveloped(2, "resources/read", json!({ "uri": "skill://gm/SKILL.md" }));
    let refused = [
        (&call, vec![version, ("mcp-name", "next_context")], "no Mcp-Method"),
        (&call, vec![version, ("mcp-method", "tools/call")], "no Mcp-Name"),
        (&call, vec![version, ("mcp-method", "tools/list"), ("mcp-name", "next_context")], "another method"),
        (&call, vec![version, ("mcp-method", "TOOLS/CALL"), ("mcp-name", "next_context")], "values are case-sensitive"),
        (&call, vec![version, ("mcp-method", "tools/call"), ("mcp-name", "finish")], "another tool"),
        (&call, vec![version, ("mcp-method", "tools/call"), ("mcp-name", "=?base64?bm9wZQ?=")], "bad Base64"),
        (&read, vec![version, ("mcp-method", "resources/read")], "no Mcp-Name for a read"),
        (
            &read,
            vec![version, ("mcp-method", "resources/read"), ("mcp-name", "skill://gm/WORKFLOWS.md")],
            "another uri",
        ),
    ];
    for (body, headers, why) in refused {
        let (status, reply) = front.send(body, &headers);
        assert_eq!((status, error_code(&reply)), (StatusCode::BAD_REQUEST, Some(-32020)), "{why}: {reply}");
        assert_eq!(reply["id"], body["id"], "{why}: {reply}");
    }
    // Whitespace around a value is not part of it (RFC 9110), and a value may come in Base64.
    let accepted = [
        (&call, vec![version, ("mcp-method", "tools/call"), ("mcp-name", "  next_context  ")]),
        (&call, vec![version, ("mcp-method", "tools/call"), ("mcp-name", "=?base64?bmV4dF9jb250ZXh0?=")]),
        (&read, vec![version, ("mcp-method", "resources/read"), ("mcp-name", "skill://gm/SKILL.md")]),
    ];
    for (body, headers) in accepted {
        let (status, reply) = front.send(body, &headers);
        assert_eq!(status, StatusCode::OK, "{headers:?}: {reply}");
        assert_eq!(reply["result"]["resultType"], "complete", "{headers:?}: {reply}");
    }
    // A client that does not say MCP-Protocol-Version: 2026-07-28 is not held to that
    // revision's headers (a header it does send must still agree).
    let (status, reply) = front.send(&enveloped(3, "tools/list", json!({})), &[]);
    assert_eq!((status, reply["result"]["resultType"].as_str()), (StatusCode::OK, Some("complete")), "{reply}");
    let (status, reply) = front.send(&enveloped(4, "tools/list", json!({})), &[("mcp-method", "prompts/list")]);
    assert_eq!((status, error_code(&reply)), (StatusCode::BAD_REQUEST, Some(-32020)), "{reply}");
    front.stop();
}
