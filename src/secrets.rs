//! Secrets: values in `.gm/secrets.env` are given to shells and jobs as environment
//! variables, and every value is replaced by `[secret:NAME]` in anything gm returns or logs.
//! Names are visible; values never are.
//!
//! The file is `NAME=value` lines (`#` comments, blank lines, optional `export ` and quotes).
//! It is re-read when it changes, so a new secret needs no restart.
//!
//! The file is the user's, never the repository's: it is used only when it is a regular file
//! of this user's (not a link), writable by nobody else, and not tracked or staged by git (a
//! committed `secrets.env` is a stranger's). Even then, a variable that changes how programs
//! start (`BASH_ENV`, `LD_PRELOAD`, `PATH`, ... — [`STARTUP_VARIABLES`]) is not given to
//! shells: one line would run code in every `run_shell`. Its value is still masked. Each
//! refusal is a `secrets` event saying why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use actix::Addr;
use gm_actors::capture::Redactor;
use gm_actors::log_writer::{Event, LogWriter};
use gm_actors::state_file::{self, How};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

const RECHECK: Duration = Duration::from_millis(500);

/// Variables a secrets file may not set, because they change how programs start or what they
/// load: a shell's startup file and options, the dynamic loader, the search path for programs,
/// and the interpreters' and git's hooks for running code. A name ending in `*` is a prefix.
/// Compared without regard to case (npm reads `npm_config_*` too).
pub const STARTUP_VARIABLES: &[&str] = &[
    "BASH_ENV",
    "ENV",
    "BASH_FUNC_*",
    "PROMPT_COMMAND",
    "PS4",
    "SHELLOPTS",
    "BASHOPTS",
    "IFS",
    "CDPATH",
    "GLOBIGNORE",
    "ZDOTDIR",
    "HOME",
    "LD_*",
    "DYLD_*",
    "GCONV_PATH",
    "PATH",
    "NODE_OPTIONS",
    "NODE_PATH",
    "NPM_CONFIG_*",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONUSERBASE",
    "PERL5OPT",
    "PERL5LIB",
    "PERLLIB",
    "RUBYOPT",
    "RUBYLIB",
    "GIT_*",
    "JAVA_TOOL_OPTIONS",
    "_JAVA_OPTIONS",
    "JDK_JAVA_OPTIONS",
    "RUSTC_WRAPPER",
    "RUSTC_WORKSPACE_WRAPPER",
    "CARGO_BUILD_RUSTC_WRAPPER",
    "PAGER",
    "EDITOR",
    "VISUAL",
    "LESSOPEN",
    "LESSCLOSE",
    "SSH_ASKPASS",
    "SUDO_ASKPASS",
];

/// Whether `name` is one of [`STARTUP_VARIABLES`].
pub fn changes_how_programs_start(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    STARTUP_VARIABLES.iter().any(|v| match v.strip_suffix('*') {
        Some(prefix) => upper.starts_with(prefix),
        None => upper == *v,
    })
}

#[derive(Debug, Default)]
pub struct Secrets {
    /// What shells and jobs are given.
    pub pairs: Vec<(String, String)>,
    /// Masks every value of the file, the refused variables' too.
    pub redactor: Redactor,
    /// Variables of the file that were not given to shells ([`STARTUP_VARIABLES`]).
    pub refused: Vec<String>,
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
        let (refused, pairs): (Vec<_>, Vec<_>) = pairs.into_iter().partition(|(k, _)| changes_how_programs_start(k));
        Self { pairs, redactor, refused: refused.into_iter().map(|(k, _)| k).collect() }
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

/// The workspace's secrets, re-read when the file changes (looked at twice a second at most),
/// or when git's index does (the file may have become tracked).
pub struct SecretsFile {
    path: PathBuf,
    workspace: PathBuf,
    log: Option<Addr<LogWriter>>,
    cache: Mutex<Cached>,
}

struct Cached {
    checked: Option<Instant>,
    stamp: Option<Stamp>,
    secrets: Arc<Secrets>,
}

/// The file's modification time, size, permission bits, identity, and whether it is a link.
type FileStamp = (SystemTime, u64, Option<u32>, Option<(u64, u64)>, bool);

/// What a change of the file, or of its standing, changes.
#[derive(Debug, PartialEq)]
struct Stamp {
    file: Option<FileStamp>,
    index: Option<SystemTime>,
}

/// Why a secrets file was not used.
#[derive(Debug, PartialEq)]
enum Verdict {
    Missing,
    Used(String),
    Refused(String),
}

impl SecretsFile {
    /// `path` is `<workspace>/.gm/secrets.env`; refusals and refused variables go to `log`.
    pub fn new(path: PathBuf, workspace: PathBuf, log: Option<Addr<LogWriter>>) -> Self {
        Self { path, workspace, log, cache: Mutex::new(Cached { checked: None, stamp: None, secrets: Arc::default() }) }
    }

    fn stamp(&self) -> Stamp {
        let file = std::fs::symlink_metadata(&self.path).ok().map(|m| {
            let modified = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let (bits, identity) = (gm_actors::sys::permission_bits(&m), gm_actors::sys::file_identity(&m));
            (modified, m.len(), bits, identity, m.file_type().is_symlink())
        });
        let index = crate::git::git_dir(&self.workspace)
            .and_then(|d| std::fs::metadata(d.join("index")).ok())
            .and_then(|m| m.modified().ok());
        Stamp { file, index }
    }

    /// Reads the file if it may be used: what shells get, and what to say about it.
    fn load(&self) -> (Secrets, Verdict) {
        let file = match state_file::open_own(&self.path, How::READ) {
            Ok(f) => f,
            Err(e) if e.is_not_found() => return (Secrets::default(), Verdict::Missing),
            Err(e) => return (Secrets::default(), Verdict::Refused(e.to_string())),
        };
        let mode = file.metadata().ok().and_then(|m| gm_actors::sys::permission_bits(&m)).unwrap_or(0);
        if mode & 0o022 != 0 {
            return (
                Secrets::default(),
                Verdict::Refused(format!(
                    "it may be written by other users (mode {mode:04o}): `chmod 600 {}` if it is yours",
                    self.path.display()
                )),
            );
        }
        match tracked(&self.workspace, &self.path) {
            Ok(false) => {}
            Ok(true) => {
                return (
                    Secrets::default(),
                    Verdict::Refused(
                        "git tracks it (or has it staged): a repository's file is not the user's; \
                         `git rm --cached .gm/secrets.env` and write your own"
                            .into(),
                    ),
                )
            }
            Err(e) => {
                return (Secrets::default(), Verdict::Refused(format!("cannot ask git whether it is tracked: {e}")))
            }
        }
        let mut text = String::new();
        if let Err(e) = std::io::Read::read_to_string(&mut &file, &mut text) {
            return (Secrets::default(), Verdict::Refused(format!("cannot read it: {e}")));
        }
        let secrets = Secrets::parse(&text);
        let said = if secrets.refused.is_empty() {
            String::new()
        } else {
            format!("not given to shells, as they change how programs start: {}", secrets.refused.join(", "))
        };
        (secrets, Verdict::Used(said))
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
        let stamp = self.stamp();
        if c.stamp.as_ref() != Some(&stamp) {
            c.stamp = Some(stamp);
            let (secrets, verdict) = self.load();
            self.tell(&verdict, &secrets);
            c.secrets = Arc::new(secrets);
        }
        c.secrets.clone()
    }

    /// A `secrets` event for a refused file or refused variables (nothing for a plain load).
    fn tell(&self, verdict: &Verdict, secrets: &Secrets) {
        let Some(log) = &self.log else { return };
        let fields = match verdict {
            Verdict::Refused(why) => {
                serde_json::json!({ "state": "refused", "file": ".gm/secrets.env", "why": why })
            }
            Verdict::Used(why) if !secrets.refused.is_empty() => serde_json::json!({
                "state": "loaded", "file": ".gm/secrets.env", "refusedVariables": secrets.refused, "why": why,
            }),
            _ => return,
        };
        log.do_send(Event::new("secrets", fields));
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

/// Whether git's index holds `path` (tracked, or staged to be): false outside a repository.
fn tracked(workspace: &Path, path: &Path) -> Result<bool, git2::Error> {
    let repo = match git2::Repository::discover(workspace) {
        Ok(r) => r,
        Err(e) if e.code() == git2::ErrorCode::NotFound => return Ok(false),
        Err(e) => return Err(e),
    };
    let Some(root) = repo.workdir() else { return Ok(false) };
    let root = std::fs::canonicalize(root).unwrap_or_else(|_| root.to_owned());
    let Ok(rel) = path.strip_prefix(&root) else { return Ok(false) };
    Ok(repo.index()?.get_path(rel, 0).is_some())
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
