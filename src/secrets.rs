//! Secrets: values in `.gm/secrets.env` are given to shells and jobs as environment
//! variables, and every value is replaced by `[secret:NAME]` in anything gm returns or logs.
//! Names are visible; values never are.
//!
//! The file is `NAME=value` lines (`#` comments, blank lines, optional `export ` and quotes).
//! It is re-read when it changes, so a new secret needs no restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use gm_actors::capture::Redactor;
use gm_actors::log_writer::Event;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

const RECHECK: Duration = Duration::from_millis(500);

#[derive(Debug, Default)]
pub struct Secrets {
    pub pairs: Vec<(String, String)>,
    pub redactor: Redactor,
}

impl Secrets {
    pub fn parse(text: &str) -> Self {
        let pairs: Vec<(String, String)> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .filter_map(|l| {
                let l = l.strip_prefix("export ").unwrap_or(l);
                let (k, v) = l.split_once('=')?;
                let k = k.trim();
                if k.is_empty() || !k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return None;
                }
                let v = v.trim();
                let v = v
                    .strip_prefix('"')
                    .and_then(|x| x.strip_suffix('"'))
                    .or_else(|| v.strip_prefix('\'').and_then(|x| x.strip_suffix('\'')))
                    .unwrap_or(v);
                Some((k.to_owned(), v.to_owned()))
            })
            .collect();
        let redactor = Redactor::new(&pairs);
        Self { pairs, redactor }
    }

    pub fn names(&self) -> Vec<&str> {
        self.pairs.iter().map(|(k, _)| k.as_str()).collect()
    }

    /// Replaces secret values in every string of a JSON text. With no secrets (the common
    /// case) the text passes through untouched; with some, it is read as a value so that only
    /// strings change (a plain text replace could cut into a number or a JSON escape).
    pub fn redact_json(&self, json: Box<RawValue>) -> Box<RawValue> {
        if self.redactor.is_empty() {
            return json;
        }
        let Ok(mut v) = serde_json::from_str::<Value>(json.get()) else { return json };
        self.redact_value(&mut v);
        serde_json::value::to_raw_value(&v).unwrap_or(json)
    }

    /// A log event from fields serialized from a struct, with secret values replaced. With no
    /// secrets the struct goes to the log as text without becoming a JSON value.
    pub fn log_event<T: Serialize>(&self, kind: &str, fields: &T) -> Event {
        if self.redactor.is_empty() {
            return Event::serialized(kind, fields);
        }
        let mut fields = serde_json::to_value(fields).unwrap_or_default();
        self.redact_value(&mut fields);
        Event::new(kind, fields)
    }

    /// Replaces secret values in every string of `v`.
    pub fn redact_value(&self, v: &mut Value) {
        if self.redactor.is_empty() {
            return;
        }
        match v {
            Value::String(s) => {
                let r = self.redactor.redact(s);
                if r != *s {
                    *s = r;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.redact_value(i)),
            Value::Object(map) => map.values_mut().for_each(|i| self.redact_value(i)),
            _ => {}
        }
    }
}

/// The workspace's secrets, re-read when the file changes (looked at twice a second at most).
pub struct SecretsFile {
    path: PathBuf,
    cache: Mutex<Cached>,
}

struct Cached {
    checked: Option<Instant>,
    modified: Option<SystemTime>,
    secrets: Arc<Secrets>,
}

impl SecretsFile {
    pub fn new(path: PathBuf) -> Self {
        Self { path, cache: Mutex::new(Cached { checked: None, modified: None, secrets: Arc::default() }) }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn get(&self) -> Arc<Secrets> {
        let Ok(mut c) = self.cache.lock() else { return Arc::default() };
        if c.checked.is_some_and(|t| t.elapsed() < RECHECK) {
            return c.secrets.clone();
        }
        c.checked = Some(Instant::now());
        let modified = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        if modified != c.modified {
            c.modified = modified;
            let text = std::fs::read_to_string(&self.path).unwrap_or_default();
            c.secrets = Arc::new(Secrets::parse(&text));
        }
        c.secrets.clone()
    }

    /// Whether `path` names the secrets file. Only a path named `secrets.env` is resolved (so
    /// the check costs no syscall on other paths); an alias under another name is still
    /// covered where it matters, because every value read is replaced in what gm returns.
    pub fn is_secrets_file(&self, path: &Path) -> bool {
        if path.file_name() != self.path.file_name() {
            return false;
        }
        let canonical = |p: &Path| {
            std::fs::canonicalize(p).ok().or_else(|| {
                let parent = std::fs::canonicalize(p.parent()?).ok()?;
                Some(parent.join(p.file_name()?))
            })
        };
        match (canonical(path), canonical(&self.path)) {
            (Some(a), Some(b)) => a == b,
            _ => path == self.path,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_names_values_quotes_and_comments() {
        let s = Secrets::parse("# c\nA=1\nexport B=\"two words\"\nC='x'\nbad line\n=novalue\nD-E=no\n");
        assert_eq!(s.names(), ["A", "B", "C"]);
        assert_eq!(s.pairs[1].1, "two words");
    }

    #[test]
    fn redacts_every_string_in_a_value() {
        let s = Secrets::parse("TOKEN=abc123\n");
        let mut v = json!({ "a": "x abc123 y", "b": ["abc123"], "c": 1 });
        s.redact_value(&mut v);
        assert_eq!(v, json!({ "a": "x [secret:TOKEN] y", "b": ["[secret:TOKEN]"], "c": 1 }));
    }
}
