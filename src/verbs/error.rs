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
    #[error("internal error: {0}")]
    Internal(String),
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
            Self::Internal(_) => "internal",
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
            _ => {}
        }
        Value::Object(m)
    }
}
