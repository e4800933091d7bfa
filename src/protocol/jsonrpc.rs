//! JSON-RPC 2.0 messages: classifying what arrived and building replies.

use serde_json::{json, Map, Value};

pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP: a resource URI that names nothing.
pub const RESOURCE_NOT_FOUND: i64 = -32002;

#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), data: None }
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(INVALID_PARAMS, message)
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }
}

/// One message from the client, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    Notification {
        method: String,
        params: Value,
    },
    /// A reply to a request gm sent (an elicitation): its `result`, or `None` for an error.
    Response {
        id: Value,
        result: Option<Value>,
    },
    /// Not a valid JSON-RPC message; `id` is the request's id when it could be read.
    Invalid {
        id: Value,
        error: RpcError,
    },
}

/// Classifies one parsed JSON value (not an array: batches are split by the caller).
pub fn classify(v: Value) -> Message {
    let Value::Object(mut m) = v else {
        return invalid(Value::Null, "a JSON-RPC message must be an object");
    };
    let id = m.remove("id");
    if let Some(id) = &id {
        if !(id.is_string() || id.is_i64() || id.is_u64()) {
            return invalid(Value::Null, "id must be a string or an integer");
        }
    }
    let reply_id = id.clone().unwrap_or(Value::Null);
    if m.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(reply_id, "jsonrpc must be \"2.0\"");
    }
    let params = match m.remove("params") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(p @ Value::Object(_)) => p,
        Some(Value::Array(_)) => {
            return invalid_code(reply_id, INVALID_PARAMS, "params must be an object (MCP uses named params)")
        }
        Some(_) => return invalid(reply_id, "params must be an object"),
    };
    match (m.remove("method"), id) {
        (Some(Value::String(method)), Some(id)) => Message::Request { id, method, params },
        (Some(Value::String(method)), None) => Message::Notification { method, params },
        (Some(_), _) => invalid(reply_id, "method must be a string"),
        (None, Some(id)) if m.contains_key("result") || m.contains_key("error") => {
            Message::Response { id, result: m.remove("result") }
        }
        (None, _) => invalid(reply_id, "missing method"),
    }
}

fn invalid(id: Value, message: &str) -> Message {
    invalid_code(id, INVALID_REQUEST, message)
}

fn invalid_code(id: Value, code: i64, message: &str) -> Message {
    Message::Invalid { id, error: RpcError::new(code, message) }
}

pub fn result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

pub fn error(id: &Value, e: &RpcError) -> Value {
    let mut err = json!({ "code": e.code, "message": e.message });
    if let Some(data) = &e.data {
        err["data"] = data.clone();
    }
    json!({ "jsonrpc": "2.0", "id": id, "error": err })
}

pub fn notification(method: &str, params: Value) -> Value {
    json!({ "jsonrpc": "2.0", "method": method, "params": params })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> Message {
        classify(serde_json::from_str(text).expect("json"))
    }

    #[test]
    fn requests_take_zero_negative_and_string_ids() {
        for id in ["0", "-7", "\"abc\""] {
            let m = msg(&format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#));
            assert!(matches!(m, Message::Request { ref method, .. } if method == "ping"), "{id}: {m:?}");
        }
    }

    #[test]
    fn a_message_without_id_is_a_notification() {
        assert!(matches!(
            msg(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
            Message::Notification { .. }
        ));
    }

    #[test]
    fn malformed_messages_are_invalid_requests() {
        let cases = [
            (r#"[]"#, INVALID_REQUEST),
            (r#"{"id":1,"method":"ping"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1.5,"method":"ping"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1,"method":7}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1,"method":"x","params":"s"}"#, INVALID_REQUEST),
            (r#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#, INVALID_PARAMS),
        ];
        for (text, code) in cases {
            match msg(text) {
                Message::Invalid { error, .. } => assert_eq!(error.code, code, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn replies_from_the_client_are_recognised() {
        assert_eq!(
            msg(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#),
            Message::Response { id: json!(3), result: Some(json!({})) }
        );
    }
}
