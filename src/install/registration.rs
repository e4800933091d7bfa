//! The edit of a Claude Code config's text: set or remove one entry of its `mcpServers`,
//! leaving every other member as it was written, in its place. Setting an entry that is there
//! changes only its `command` and `args`: what the user added to it (`env`, `type`, timeouts)
//! keeps its text and place.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use super::ordered::{Member, Object};
use super::replace::Edit;
use super::InstallError;

/// The key in the config that holds the MCP servers.
const SERVERS: &str = "mcpServers";

/// A server's entry: how the host starts it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerEntry {
    pub command: String,
    pub args: Vec<String>,
}

impl ServerEntry {
    /// `current` (the entry as written, when it is an object) with `command` and `args` set in
    /// place, or a new object of the two (`command` first, as hosts write it).
    fn onto(&self, current: Option<Object>) -> Object {
        let mut o = current.unwrap_or_default();
        o.set("command", Member::New(Value::from(self.command.as_str())));
        o.set("args", Member::New(Value::from(self.args.clone())));
        o
    }

    /// Whether `current` already says this command and these args.
    fn is_in(&self, current: &Value) -> bool {
        current.get("command").and_then(Value::as_str) == Some(self.command.as_str())
            && current.get("args") == Some(&Value::from(self.args.clone()))
    }
}

/// Sets `mcpServers.<name>` to `entry`, or removes it when `entry` is `None`, in the config
/// text `text` (`None`: the file does not exist). `Unchanged` when the file already says so.
pub fn edit(path: &Path, text: Option<&str>, name: &str, entry: Option<&ServerEntry>) -> Result<Edit, InstallError> {
    let mut top = match text {
        None => Object::default(),
        // An empty file holds nothing to keep; it is written as a new one.
        Some(t) if t.trim().is_empty() => Object::default(),
        Some(t) => Object::parse(t).map_err(|why| InstallError::NotAnObject { path: path.to_owned(), why })?,
    };
    let mut servers = match top.get(SERVERS) {
        None => Object::default(),
        Some(Member::Raw(raw)) => {
            Object::from_raw(raw).map_err(|why| InstallError::ServersNotAnObject { path: path.to_owned(), why })?
        }
        // Only a parse makes members, and it makes raw ones.
        Some(_) => Object::default(),
    };
    let json_err = |source| InstallError::Json { path: path.to_owned(), source };
    let current = servers.get(name).map(Member::value).transpose().map_err(json_err)?;
    match entry {
        Some(entry) if current.as_ref().is_some_and(|c| entry.is_in(c)) => return Ok(Edit::Unchanged),
        Some(entry) => {
            // An entry that is not an object holds nothing to keep: it is written anew.
            let kept = match servers.get(name) {
                Some(Member::Raw(raw)) => Object::from_raw(raw).ok(),
                _ => None,
            };
            servers.set(name, Member::Object(entry.onto(kept)));
        }
        None if current.is_none() => return Ok(Edit::Unchanged),
        None => {
            servers.remove(name);
        }
    }
    top.set(SERVERS, Member::Object(servers));
    let mut out = top.to_pretty().map_err(json_err)?;
    // The file's last newline, or its absence, stays as it was; a new file ends with one.
    if text.is_none_or(|t| t.ends_with('\n')) {
        out.push('\n');
    }
    Ok(Edit::Write(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(cmd: &str) -> ServerEntry {
        ServerEntry { command: cmd.into(), args: vec!["serve".into()] }
    }

    fn written(e: Edit) -> String {
        match e {
            Edit::Write(s) => s,
            Edit::Unchanged => panic!("expected a write"),
        }
    }

    #[test]
    fn a_missing_file_becomes_a_config_with_only_the_entry() {
        let out = written(edit(Path::new("c"), None, "gm", Some(&entry("/bin/gm"))).unwrap());
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v, serde_json::json!({"mcpServers": {"gm": {"command": "/bin/gm", "args": ["serve"]}}}));
        assert!(out.ends_with("}\n"));
    }

    #[test]
    fn an_entry_that_already_says_the_same_is_unchanged_whatever_its_formatting() {
        let text = r#"{"mcpServers":{"gm":{"args":["serve"],"command":"/bin/gm"}}}"#;
        assert!(matches!(edit(Path::new("c"), Some(text), "gm", Some(&entry("/bin/gm"))).unwrap(), Edit::Unchanged));
    }

    #[test]
    fn removing_an_absent_entry_is_unchanged() {
        assert!(matches!(edit(Path::new("c"), Some(r#"{"a":1}"#), "gm", None).unwrap(), Edit::Unchanged));
        assert!(matches!(edit(Path::new("c"), None, "gm", None).unwrap(), Edit::Unchanged));
    }

    #[test]
    fn servers_that_are_not_an_object_are_refused() {
        let r = edit(Path::new("c"), Some(r#"{"mcpServers": []}"#), "gm", Some(&entry("/bin/gm")));
        assert!(matches!(r, Err(InstallError::ServersNotAnObject { .. })));
    }

    #[test]
    fn an_existing_entry_keeps_its_other_members_in_their_text_and_place() {
        let text = r#"{"mcpServers": {"gm": {"type": "stdio", "command": "/old/gm", "env": {"GMNEW_AUTO_UPDATE":  "0"}, "args": ["serve", "--old"], "timeout": 90000}}}"#;
        let out = written(edit(Path::new("c"), Some(text), "gm", Some(&entry("/bin/gm"))).unwrap());
        let want = "{\n  \"mcpServers\": {\n    \"gm\": {\n      \"type\": \"stdio\",\n      \"command\": \"/bin/gm\",\n      \"env\": {\"GMNEW_AUTO_UPDATE\":  \"0\"},\n      \"args\": [\n        \"serve\"\n      ],\n      \"timeout\": 90000\n    }\n  }\n}";
        assert_eq!(out, want);
        let again = r#"{"mcpServers": {"gm": {"env": {"A": "1"}, "command": "/bin/gm", "args": ["serve"]}}}"#;
        assert!(
            matches!(edit(Path::new("c"), Some(again), "gm", Some(&entry("/bin/gm"))).unwrap(), Edit::Unchanged),
            "only command and args are compared"
        );
    }

    #[test]
    fn an_entry_that_is_not_an_object_is_replaced_whole() {
        let out = written(
            edit(Path::new("c"), Some(r#"{"mcpServers": {"gm": "old"}}"#), "gm", Some(&entry("/bin/gm"))).unwrap(),
        );
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["mcpServers"]["gm"], serde_json::json!({"command": "/bin/gm", "args": ["serve"]}));
    }

    #[test]
    fn a_file_without_a_last_newline_is_written_without_one() {
        let out = written(edit(Path::new("c"), Some(r#"{"a": 1}"#), "gm", Some(&entry("/bin/gm"))).unwrap());
        assert!(out.ends_with('}'), "{out:?}");
    }
}
