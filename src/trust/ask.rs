//! Asking the user through the host: when a body calls a tool of a workspace server nobody
//! approved yet, and the session's client declared the `elicitation` capability, the session
//! sends `elicitation/create` showing what the server would run; an accept approves the entry
//! (as `gm trust` would) and the call goes on, a decline fails the call `untrusted` and is not
//! asked again in that session.

use actix::Message;
use serde_json::{json, Value};

use super::Pending;

/// Ask the user whether `pending` may start, for the call `call` (its request id as a key).
#[derive(Debug, Message)]
#[rtype(result = "Consent")]
pub struct AskConsent {
    pub pending: Pending,
    pub call: String,
}

/// How a body asks its session's user: the session, and the call that runs the body (a
/// stateless client is asked in that call's result).
#[derive(Clone)]
pub struct Asker {
    pub to: actix::Recipient<AskConsent>,
    pub call: String,
}

/// What came of a question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Consent {
    Approved,
    /// The user declined (or dismissed the question).
    Declined,
    /// Nobody was asked: the client cannot be asked, or this session declined before.
    NotAsked,
}

/// The `elicitation/create` params for `pending`: the whole command line, the folder and the
/// names of the variables it sets (never their values).
pub fn request_params(pending: &Pending, workspace: &std::path::Path) -> Value {
    let env = if pending.env_names.is_empty() { "none".to_owned() } else { pending.env_names.join(", ") };
    let message = format!(
        "The workspace {} asks gm to start the MCP server \"{}\" from {}. It would run:\n\n  {}\n\nin {} with the environment variables: {}.\n\nAllow it to run? gm remembers this exact entry; a change to it asks again.",
        workspace.display(),
        pending.name,
        pending.from,
        pending.command_line,
        pending.cwd,
        env,
    );
    json!({
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {
                    "type": "boolean",
                    "title": format!("Run {}", pending.name),
                    "description": "Start this server now and whenever this entry is unchanged",
                    "default": true,
                },
            },
        },
    })
}

/// What an `elicitation/create` result means: only an accept that did not say `approve: false`
/// approves.
pub fn consent_of(result: Option<&Value>) -> Consent {
    let Some(result) = result else { return Consent::Declined };
    let accepted = result.get("action").and_then(Value::as_str) == Some("accept");
    let unticked = result.pointer("/content/approve").and_then(Value::as_bool) == Some(false);
    if accepted && !unticked {
        Consent::Approved
    } else {
        Consent::Declined
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_accept_that_keeps_approve_approves() {
        assert_eq!(consent_of(Some(&json!({ "action": "accept", "content": { "approve": true } }))), Consent::Approved);
        assert_eq!(consent_of(Some(&json!({ "action": "accept" }))), Consent::Approved);
        assert_eq!(
            consent_of(Some(&json!({ "action": "accept", "content": { "approve": false } }))),
            Consent::Declined
        );
        assert_eq!(consent_of(Some(&json!({ "action": "decline" }))), Consent::Declined);
        assert_eq!(consent_of(Some(&json!({ "action": "cancel" }))), Consent::Declined);
        assert_eq!(consent_of(None), Consent::Declined);
    }
}
