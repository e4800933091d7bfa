//! Asking the user through the host: when a body calls a tool of a workspace server nobody
//! approved yet, and the session's client declared the `elicitation` capability, the session
//! sends `elicitation/create` showing what the server would run; an accept approves the entry
//! (as `gm trust` would) and the call goes on, a decline fails the call `untrusted` and is not
//! asked again in that session.

use actix::Message;
use serde_json::{json, Value};

use super::Pending;
use crate::text::escape_invisible;

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

/// The `elicitation/create` params for `pending`: the whole command line, the file it runs
/// when its `PATH` or cwd decides that, the folder, and the variables it sets with their values
/// as written (`${NAME}` not expanded: what the repository wrote, never the user's secrets).
/// Every string is escaped as `gm trust` shows it: a host's dialog must not be reordered or
/// cut by a control or bidi character of the entry.
pub fn request_params(pending: &Pending, workspace: &std::path::Path) -> Value {
    let shown = |s: &str| escape_invisible(s).into_owned();
    let mut message = format!(
        "The workspace {} asks gm to start the MCP server \"{}\" from {}. It would run:\n\n  {}\n\n",
        shown(&workspace.display().to_string()),
        shown(&pending.name),
        shown(&pending.from),
        shown(&pending.command_line),
    );
    if let Some(program) = pending.program_shown() {
        message.push_str(&format!("The program that starts: {program}\n"));
    }
    message.push_str(&format!("In the folder: {}\n", shown(&pending.cwd)));
    let env = pending.env_shown();
    if env.is_empty() {
        message.push_str("With no environment variables besides gm's own.\n");
    } else {
        let note =
            if pending.env_expands() { " (a ${NAME} is filled from your environment when it starts)" } else { "" };
        message.push_str(&format!("With these environment variables, as written{note}:\n"));
        for line in &env {
            message.push_str(&format!("  {line}\n"));
        }
    }
    message.push_str("\nAllow it to run? gm remembers this exact entry; a change to it asks again.");
    json!({
        "message": message,
        "requestedSchema": {
            "type": "object",
            "properties": {
                "approve": {
                    "type": "boolean",
                    "title": format!("Run {}", shown(&pending.name)),
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
    fn the_question_shows_env_values_as_written_and_escapes_what_the_entry_holds() {
        let named = crate::mcp_config::Named {
            name: "evil\u{1b}[2K".into(),
            entry: serde_json::from_value(json!({
                "command": "npx",
                "args": ["-y", "pkg\u{202e}txt.exe"],
                "env": { "NODE_OPTIONS": "--require=./x.js", "TOKEN": "${API_KEY}" },
            }))
            .expect("entry"),
            from: "/ws/.gm/mcp.json".into(),
            layer: crate::mcp_config::Layer::Workspace,
        };
        let params = request_params(&Pending::of(&named, std::path::Path::new("/ws")), std::path::Path::new("/ws"));
        let message = params["message"].as_str().expect("message");
        assert!(message.contains("  NODE_OPTIONS=--require=./x.js\n"), "{message}");
        assert!(message.contains("  TOKEN='${API_KEY}'\n"), "as written, unexpanded: {message}");
        assert!(message.contains("pkg\\u202etxt.exe") && message.contains("evil\\u001b[2K"), "{message}");
        let title = params.pointer("/requestedSchema/properties/approve/title").and_then(Value::as_str);
        assert_eq!(title, Some("Run evil\\u001b[2K"));
        let raw = |c: char| c == '\u{1b}' || c == '\u{202e}';
        assert!(!message.contains(raw) && !title.unwrap_or_default().contains(raw), "{message}");
    }

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
