//! The one error type every verb returns. Each variant has a stable `code` that callers can
//! match on; the message says what went wrong and, where it can, what to do next.

use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum VerbError {
    #[error("invalid arguments: {0}")]
    InvalidArgs(String),
    #[error("no such file or directory: {}", .0.display())]
    NotFound(PathBuf),
    #[error("{} is a directory, not a file", .0.display())]
    IsADirectory(PathBuf),
    #[error("{} is not a directory", .0.display())]
    NotADirectory(PathBuf),
    #[error("{} is not UTF-8 text ({size} bytes); read it with run_shell (e.g. xxd) instead", path.display())]
    NotText { path: PathBuf, size: u64 },
    #[error("the text to replace was not found in {}{hint}", path.display())]
    NoMatch { path: PathBuf, hint: String },
    #[error("the text to replace occurs {count} times in {} (lines {lines:?}); add context to make it unique or pass all: true", path.display())]
    AmbiguousMatch { path: PathBuf, count: usize, lines: Vec<usize> },
    #[error("{what}: {}: {source}", path.display())]
    Io { what: &'static str, path: PathBuf, source: std::io::Error },
    #[error("refused: {0}")]
    Refused(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("no job named '{0}'")]
    UnknownJob(String),
    #[error("a job named '{0}' is still running; stop it or choose another name")]
    DuplicateJob(String),
    #[error("the call was cancelled")]
    Cancelled,
    #[error("unknown verb '{0}'; gm.verbs() lists them")]
    UnknownVerb(String),
    /// A child server's tool answered with `isError: true`; `result` is what it sent.
    #[error("{tool} failed: {}", tool_error_text(.result))]
    ToolError { tool: String, result: Value },
    #[error("internal error: {0}")]
    Internal(String),
    /// A workspace server the user has not approved; `server` says what it would run.
    #[error("{message}")]
    Untrusted { message: String, server: Value },
}

/// Every `code` a failed tool result can carry, with what it means and what to do about it. The
/// README's table of codes is printed from this list (`gm docs errors`), and tests hold every
/// code gm returns to it.
pub const ERROR_CODES: &[(&str, &str)] = &[
    ("invalid_args", "The arguments are wrong: a missing or mistyped field, or a value out of range. The message names the field. Fix the call; nothing was changed."),
    ("not_found", "No file or directory at `path`."),
    ("is_a_directory", "`path` is a directory where a file was expected."),
    ("not_a_directory", "`path` is a file where a directory was expected."),
    ("not_text", "The file is not UTF-8 text (`size` says how big it is); read it with run_shell (`xxd`, `file`)."),
    ("no_match", "edit_file's `old` text is not in the file; the message says when it would match ignoring whitespace. Nothing was changed."),
    ("ambiguous_match", "edit_file's `old` text occurs more than once (`count`, `lines`); add context or pass `all: true`. Nothing was changed."),
    ("io_error", "The operating system refused a read or write of `path` (permissions, a full disk)."),
    ("refused", "gm or the repository will not do this as asked: a non-fast-forward push, an empty commit, a dirty tree to pull into, the secrets file. The message says what to do instead; the same call will be refused again."),
    ("timeout", "The call ran out of time (an HTTP request past its `timeoutMs`, the GitHub CLI). A retry may succeed."),
    ("unavailable", "Something outside gm could not be reached or started: a network failure, a remote, a program that is missing or failed (`gh`, a shell that cannot start), a child MCP server that did not start or ended mid-call (the message has its stderr's end). A retry may succeed once it is back."),
    ("unknown_job", "No job by that name."),
    ("duplicate_job", "A job by that name is still running; stop it or choose another name."),
    ("cancelled", "The call was cancelled (`notifications/cancelled`, or the end of the run_code body that made it)."),
    ("unknown_verb", "No verb by that name; `gm.verbs()` lists them."),
    ("untrusted", "The tool belongs to a server of the workspace's `.gm/mcp.json` that the user has not approved, so it was not started. `server` has its command line, cwd and environment names. Only the user can approve it: ask them to run `gm trust --workspace DIR` in a terminal (it shows the whole entry and asks), then call again; any change to the entry needs approval again."),
    ("tool_error", "A child MCP server's tool answered with `isError: true`; its whole result is under `result`, its text in the message."),
    ("internal", "A bug in gm (a verb that panicked, an actor that is gone). The server keeps running; the message says what failed."),
    ("skill_not_read", "run_code is closed until this connection has read `skill://gm/SKILL.md` with resources/read; the error names the call to make."),
    ("js_error", "The run_code body threw: `name`, `message`, `stack`, the `line` in the body and its `lineText`; a failed verb's own error is under `details`."),
    ("budget_exceeded", "A background run_code body ran past its hour and was interrupted."),
    ("out_of_memory", "The run_code body allocated more than 256 MiB."),
    ("engine_error", "The JavaScript engine failed to start or run the body."),
    ("worker_restarted", "gm's worker process died (a crash, SIGKILL, the OOM killer) while the call ran; the relay started a new one and the connection goes on. The message names the cause; the call's effects may be partial."),
    ("worker_failed", "gm's worker died five times within a minute and is not started again; the message names the causes and the run log. Restart the MCP server."),
    ("stopped_by_restart", "A background run_code body was running when gm stopped; background bodies do not survive a restart."),
];

/// The text blocks of a tool result, joined: what a failed child tool said.
fn tool_error_text(result: &Value) -> String {
    let text: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .map(|c| c.iter().filter_map(|b| b.get("text").and_then(Value::as_str)).collect())
        .unwrap_or_default();
    if text.is_empty() {
        "it answered isError: true".into()
    } else {
        text.join("\n")
    }
}

impl VerbError {
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidArgs(_) => "invalid_args",
            Self::NotFound(_) => "not_found",
            Self::IsADirectory(_) => "is_a_directory",
            Self::NotADirectory(_) => "not_a_directory",
            Self::NotText { .. } => "not_text",
            Self::NoMatch { .. } => "no_match",
            Self::AmbiguousMatch { .. } => "ambiguous_match",
            Self::Io { .. } => "io_error",
            Self::Refused(_) => "refused",
            Self::Timeout(_) => "timeout",
            Self::Unavailable(_) => "unavailable",
            Self::UnknownJob(_) => "unknown_job",
            Self::DuplicateJob(_) => "duplicate_job",
            Self::Cancelled => "cancelled",
            Self::UnknownVerb(_) => "unknown_verb",
            Self::ToolError { .. } => "tool_error",
            Self::Internal(_) => "internal",
            Self::Untrusted { .. } => "untrusted",
        }
    }

    /// Maps an I/O error on `path` to the most specific variant.
    pub fn io(what: &'static str, path: &Path, source: std::io::Error) -> Self {
        match source.kind() {
            std::io::ErrorKind::NotFound => Self::NotFound(path.to_owned()),
            std::io::ErrorKind::IsADirectory => Self::IsADirectory(path.to_owned()),
            std::io::ErrorKind::NotADirectory => Self::NotADirectory(path.to_owned()),
            _ => Self::Io { what, path: path.to_owned(), source },
        }
    }

    /// The structured body: `{ "code", "message", ...details }`.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("code".into(), json!(self.code()));
        m.insert("message".into(), json!(self.to_string()));
        match self {
            Self::NotFound(p) | Self::IsADirectory(p) | Self::NotADirectory(p) => {
                m.insert("path".into(), json!(p));
            }
            Self::NotText { path, size } => {
                m.insert("path".into(), json!(path));
                m.insert("size".into(), json!(size));
            }
            Self::NoMatch { path, .. } => {
                m.insert("path".into(), json!(path));
            }
            Self::AmbiguousMatch { path, count, lines } => {
                m.insert("path".into(), json!(path));
                m.insert("count".into(), json!(count));
                m.insert("lines".into(), json!(lines));
            }
            Self::Io { path, .. } => {
                m.insert("path".into(), json!(path));
            }
            Self::ToolError { tool, result } => {
                m.insert("tool".into(), json!(tool));
                m.insert("result".into(), result.clone());
            }
            Self::Untrusted { server, .. } => {
                m.insert("server".into(), server.clone());
            }
            _ => {}
        }
        Value::Object(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verb_error_code_is_in_the_catalog() {
        let p = PathBuf::from("x");
        let io = || std::io::Error::other("x");
        let all = [
            VerbError::InvalidArgs(String::new()),
            VerbError::NotFound(p.clone()),
            VerbError::IsADirectory(p.clone()),
            VerbError::NotADirectory(p.clone()),
            VerbError::NotText { path: p.clone(), size: 0 },
            VerbError::NoMatch { path: p.clone(), hint: String::new() },
            VerbError::AmbiguousMatch { path: p.clone(), count: 2, lines: vec![] },
            VerbError::Io { what: "x", path: p.clone(), source: io() },
            VerbError::Refused(String::new()),
            VerbError::Timeout(String::new()),
            VerbError::Unavailable(String::new()),
            VerbError::UnknownJob(String::new()),
            VerbError::DuplicateJob(String::new()),
            VerbError::Cancelled,
            VerbError::UnknownVerb(String::new()),
            VerbError::ToolError { tool: String::new(), result: Value::Null },
            VerbError::Internal(String::new()),
            VerbError::Untrusted { message: String::new(), server: Value::Null },
        ];
        for e in &all {
            // A new variant must be added here: this match has no catch-all.
            match e {
                VerbError::InvalidArgs(_)
                | VerbError::NotFound(_)
                | VerbError::IsADirectory(_)
                | VerbError::NotADirectory(_)
                | VerbError::NotText { .. }
                | VerbError::NoMatch { .. }
                | VerbError::AmbiguousMatch { .. }
                | VerbError::Io { .. }
                | VerbError::Refused(_)
                | VerbError::Timeout(_)
                | VerbError::Unavailable(_)
                | VerbError::UnknownJob(_)
                | VerbError::DuplicateJob(_)
                | VerbError::Cancelled
                | VerbError::UnknownVerb(_)
                | VerbError::ToolError { .. }
                | VerbError::Internal(_)
                | VerbError::Untrusted { .. } => {}
            }
            assert!(ERROR_CODES.iter().any(|(c, _)| *c == e.code()), "{} is not in ERROR_CODES", e.code());
        }
        let mut codes: Vec<&str> = ERROR_CODES.iter().map(|(c, _)| *c).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), ERROR_CODES.len(), "a code is listed twice");
    }
}
