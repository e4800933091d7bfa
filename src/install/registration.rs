//! The edit of a Claude Code config's text: set or remove one entry of its `mcpServers`,
//! leaving every other member as it was written, in its place.

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
    fn to_object(&self) -> Object {
        // Built member by member so that `command` comes before `args`, as hosts write it.
        let mut o = Object::default();
        o.set("command", Member::New(Value::from(self.command.as_str())));
        o.set("args", Member::New(Value::from(self.args.clone())));
        o
    }

    fn to_value(&self) -> Value {
        serde_json::json!({ "command": self.command, "args": self.args })
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
        Some(entry) if current.as_ref() == Some(&entry.to_value()) => return Ok(Edit::Unchanged),
        Some(entry) => servers.set(name, Member::Object(entry.to_object())),
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
    fn a_file_without_a_last_newline_is_written_without_one() {
        let out = written(edit(Path::new("c"), Some(r#"{"a": 1}"#), "gm", Some(&entry("/bin/gm"))).unwrap());
        assert!(out.ends_with('}'), "{out:?}");
    }
}
