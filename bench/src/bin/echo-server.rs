//! The floor: the least an MCP stdio server can do per request on this machine. It reads a
//! line, parses it with serde_json, and writes a fixed-shape reply with the request's id, all
//! on one thread. gm's round trip is compared against this in the same run.

use std::io::{BufRead, Write};

use serde_json::{json, Value};

fn main() {
    let stdin = std::io::stdin();
    let mut out = std::io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let Ok(msg) = serde_json::from_str::<Value>(&line) else { continue };
        let Some(id) = msg.get("id") else { continue };
        let result = match msg.get("method").and_then(Value::as_str) {
            Some("initialize") => {
                json!({ "protocolVersion": "2025-06-18", "capabilities": { "tools": {} }, "serverInfo": { "name": "echo", "version": "0" } })
            }
            _ => json!({ "content": [{ "type": "text", "text": "ok" }], "isError": false }),
        };
        let reply = json!({ "jsonrpc": "2.0", "id": id, "result": result });
        let mut bytes = serde_json::to_vec(&reply).unwrap_or_default();
        bytes.push(b'\n');
        if out.write_all(&bytes).and_then(|()| out.flush()).is_err() {
            break;
        }
    }
}
