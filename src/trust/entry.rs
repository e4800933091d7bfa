//! A workspace server's entry as the user is asked about it: what it runs, where, with which
//! environment, as written in `.gm/mcp.json` (`${NAME}` not expanded), and the hash an
//! approval is kept under. Any change to what it runs changes the hash, so an approval never
//! covers a command the user did not see.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::mcp_config::Named;

/// What the hash covers, in a fixed order: the name, and the command, args, cwd and env as
/// written. Budgets, `deny`, `ignore` and `disabled` do not change what runs.
#[derive(Serialize)]
struct Hashed<'a> {
    name: &'a str,
    command: Option<&'a str>,
    args: &'a [String],
    cwd: Option<&'a str>,
    env: &'a BTreeMap<String, String>,
}

/// Versions the hash's input, so a later gm that covers more fields asks again.
const HASH_DOMAIN: &[u8] = b"gm trust v1\n";

/// The SHA-256 (hex) of what the entry runs, as written.
pub fn hash(named: &Named) -> String {
    let e = &named.entry;
    let hashed =
        Hashed { name: &named.name, command: e.command.as_deref(), args: &e.args, cwd: e.cwd.as_deref(), env: &e.env };
    let mut h = Sha256::new();
    h.update(HASH_DOMAIN);
    // Serializing plain strings and a sorted map cannot fail.
    h.update(serde_json::to_vec(&hashed).unwrap_or_default());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// An entry waiting for approval, as shown to the user and in the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pending {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    /// `command` and `args` as one shell-quoted line.
    pub command_line: String,
    /// As written, or the workspace (the default).
    pub cwd: String,
    /// The names of the variables it sets (never their values: they may be `${API_KEY}`s).
    pub env_names: Vec<String>,
    /// The file it comes from.
    pub from: String,
    /// The hash an approval of this entry is kept under.
    pub sha256: String,
    /// The values as written, for the terminal only (`gm trust`); never logged.
    #[serde(skip)]
    pub env_as_written: Vec<(String, String)>,
}

impl Pending {
    pub fn of(named: &Named, workspace: &Path) -> Pending {
        let e = &named.entry;
        let command = e.command.clone().unwrap_or_default();
        let command_line = std::iter::once(command.as_str())
            .chain(e.args.iter().map(String::as_str))
            .map(quote)
            .collect::<Vec<_>>()
            .join(" ");
        Pending {
            name: named.name.clone(),
            command,
            args: e.args.clone(),
            command_line,
            cwd: e.cwd.clone().unwrap_or_else(|| workspace.display().to_string()),
            env_names: e.env.keys().cloned().collect(),
            from: named.from.clone(),
            sha256: hash(named),
            env_as_written: e.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        }
    }
}

/// A word as a POSIX shell would read it back: bare when it is plain, else in single quotes.
pub fn quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp_config::Layer;

    fn named(json: &str) -> Named {
        Named {
            name: "x".into(),
            entry: serde_json::from_str(json).expect("entry"),
            from: "f".into(),
            layer: Layer::Workspace,
        }
    }

    #[test]
    fn every_part_of_what_runs_changes_the_hash_and_nothing_else_does() {
        let base = r#"{"command":"sh","args":["-c","true"],"cwd":"sub","env":{"A":"1"}}"#;
        let h = hash(&named(base));
        for changed in [
            r#"{"command":"bash","args":["-c","true"],"cwd":"sub","env":{"A":"1"}}"#,
            r#"{"command":"sh","args":["-c","true; curl x"],"cwd":"sub","env":{"A":"1"}}"#,
            r#"{"command":"sh","args":["-c","true"],"cwd":"other","env":{"A":"1"}}"#,
            r#"{"command":"sh","args":["-c","true"],"env":{"A":"1"}}"#,
            r#"{"command":"sh","args":["-c","true"],"cwd":"sub","env":{"A":"2"}}"#,
            r#"{"command":"sh","args":["-c","true"],"cwd":"sub","env":{"A":"1","LD_PRELOAD":"./x.so"}}"#,
            r#"{"command":"sh","args":["-c", "true", ""],"cwd":"sub","env":{"A":"1"}}"#,
        ] {
            assert_ne!(hash(&named(changed)), h, "{changed}");
        }
        let same = r#"{ "env": {"A": "1"}, "cwd": "sub", "timeoutMs": 5, "deny": ["y"], "args": ["-c", "true"], "command": "sh" }"#;
        assert_eq!(hash(&named(same)), h, "order, spacing and budgets do not matter");
        let mut renamed = named(base);
        renamed.name = "y".into();
        assert_ne!(hash(&renamed), h, "the name is part of it");
    }

    #[test]
    fn args_are_hashed_as_a_list_not_as_joined_text() {
        let a = hash(&named(r#"{"command":"sh","args":["-c x"]}"#));
        let b = hash(&named(r#"{"command":"sh","args":["-c","x"]}"#));
        assert_ne!(a, b);
    }

    #[test]
    fn the_shown_entry_has_its_command_line_cwd_and_env_names_but_no_values() {
        let p = Pending::of(
            &named(r#"{"command":"sh","args":["-c","echo hi > marker; it's"],"env":{"TOKEN":"${API_KEY}"}}"#),
            Path::new("/ws"),
        );
        assert_eq!(p.command_line, r#"sh -c 'echo hi > marker; it'\''s'"#);
        assert_eq!(p.cwd, "/ws");
        assert_eq!(p.env_names, ["TOKEN"]);
        let shown = serde_json::to_string(&p).expect("json");
        assert!(!shown.contains("API_KEY"), "values are never serialized: {shown}");
        assert_eq!(p.env_as_written, [("TOKEN".to_owned(), "${API_KEY}".to_owned())]);
    }

    #[test]
    fn plain_words_are_shown_bare_and_others_quoted() {
        assert_eq!(quote("npx"), "npx");
        assert_eq!(quote("@scope/pkg@1.2"), "@scope/pkg@1.2");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("$(rm -rf ~)"), "'$(rm -rf ~)'");
    }
}
