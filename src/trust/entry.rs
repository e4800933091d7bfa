//! A workspace server's entry as the user is asked about it: what it runs, where, with which
//! environment, as written in `.gm/mcp.json` (`${NAME}` not expanded), and the hash an
//! approval is kept under. Any change to what it runs changes the hash, so an approval never
//! covers a command the user did not see.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Component, Path, PathBuf};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::mcp_config::Named;
use crate::text::escape_invisible;

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
    /// The names of the variables it sets (the log gets no values: written as `${API_KEY}`,
    /// they say which of the user's variables the server reads).
    pub env_names: Vec<String>,
    /// The file it comes from.
    pub from: String,
    /// The hash an approval of this entry is kept under.
    pub sha256: String,
    /// The values as written (`${NAME}` not expanded), shown to the person asked (`gm trust`,
    /// the host's question): a `PATH` or `NODE_OPTIONS` changes what the command runs. Never
    /// logged.
    #[serde(skip)]
    pub env_as_written: Vec<(String, String)>,
    /// The folder it starts in, as a path (a relative cwd taken in the workspace), to find which
    /// file its command runs; `None` when its cwd holds a `${NAME}`, known only at its start.
    #[serde(skip)]
    pub dir: Option<PathBuf>,
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
            dir: match e.cwd.as_deref() {
                None => Some(workspace.to_owned()),
                Some(cwd) if first_var(cwd).is_some() => None,
                // As the start takes it: an absolute cwd as is, a relative one in the workspace.
                Some(cwd) => Some(within(workspace, cwd)),
            },
        }
    }

    /// Which file its command runs, looked up now as its start would look it up.
    pub fn program(&self) -> Program {
        let entry_path = self.env_as_written.iter().find(|(k, _)| k == "PATH").map(|(_, v)| v.as_str());
        let own = std::env::var_os("PATH").map(|p| p.to_string_lossy().into_owned());
        find_program(&self.command, entry_path, own.as_deref(), self.dir.as_deref())
    }

    /// The `program:` line to show (escaped), unless the command is an absolute path already.
    pub fn program_shown(&self) -> Option<String> {
        let program = self.program();
        (program != Program::AsWritten).then(|| escape_invisible(&program.to_string()).into_owned())
    }

    /// Each variable it sets as `NAME=value`, the value as written and shell-quoted, escaped
    /// for a person to read.
    pub fn env_shown(&self) -> Vec<String> {
        self.env_as_written.iter().map(|(k, v)| escape_invisible(&format!("{k}={}", quote(v))).into_owned()).collect()
    }

    /// Whether a value it sets holds a `${NAME}`, filled from the user's environment at start.
    pub fn env_expands(&self) -> bool {
        self.env_as_written.iter().any(|(_, v)| first_var(v).is_some())
    }
}

/// Which file an entry's command runs, as its start finds it. std's `Command` (the child is
/// spawned in `gm_actors::mcp_client::stdio`) changes into the child's cwd, then calls
/// `execvp` in the child's environment (no posix_spawn when that sets `PATH`, nor with the
/// parent-death hook): a command with a slash is taken in that cwd; one without is searched
/// in the child's PATH (the entry's own when it sets one, else gm's), in order, an empty or
/// relative PATH entry taken in the cwd too. So `"env": {"PATH": ".gm/bin:/usr/bin"}` makes
/// `npx` the repository's `.gm/bin/npx`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    /// An absolute path as written: what runs is plain to see.
    AsWritten,
    /// The file found; `relative` is the PATH entry taken in the cwd that found it, if one did.
    Found { path: PathBuf, via: Via, relative: Option<String> },
    /// No executable file of that name there now.
    NotFound { via: Via },
    /// It depends on a `${NAME}` expanded only at start (in the command, the cwd, or a PATH
    /// entry met before a file was found): not guessed, and never expanded to be shown.
    Unknown { depends_on: String },
}

/// Where [`Program`] looked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// The `PATH` the entry sets.
    EntryPath,
    /// gm's own `PATH`: the entry sets none.
    OwnPath,
    /// The command is a relative path with a slash: taken in the cwd.
    Cwd,
}

impl fmt::Display for Program {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Program::AsWritten => write!(f, "as written"),
            Program::Found { path, via, relative } => {
                write!(f, "{}", path.display())?;
                match (via, relative) {
                    (Via::EntryPath, None) => write!(f, " (PATH from this entry)"),
                    (Via::EntryPath, Some(e)) => {
                        write!(f, " (PATH from this entry, its part {} taken in the cwd)", quote(e))
                    }
                    (Via::OwnPath, None) => write!(f, " (your PATH)"),
                    (Via::OwnPath, Some(e)) => write!(f, " (your PATH's part {}, taken in the cwd)", quote(e)),
                    (Via::Cwd, _) => write!(f, " (taken in the cwd)"),
                }
            }
            Program::NotFound { via: Via::EntryPath } => write!(f, "none found now in the PATH this entry sets"),
            Program::NotFound { via: Via::OwnPath } => write!(f, "none found now in your PATH"),
            Program::NotFound { via: Via::Cwd } => write!(f, "none found now in the cwd"),
            Program::Unknown { depends_on } => write!(f, "depends on {depends_on}, expanded only when it starts"),
        }
    }
}

/// glibc's `execvp` path when the environment has no `PATH`.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

/// [`Program`] for `command`, `entry_path` the PATH the entry sets (as written), `own_path`
/// gm's own, `dir` the child's cwd (`None`: it depends on a `${NAME}`).
pub fn find_program(command: &str, entry_path: Option<&str>, own_path: Option<&str>, dir: Option<&Path>) -> Program {
    if let Some(var) = first_var(command) {
        return Program::Unknown { depends_on: format!("{var} in the command") };
    }
    let cwd_unknown = || Program::Unknown { depends_on: "the cwd's ${NAME}".to_owned() };
    if command.contains('/') {
        if Path::new(command).is_absolute() {
            return Program::AsWritten;
        }
        let Some(dir) = dir else { return cwd_unknown() };
        let path = within(dir, command);
        return if runnable(&path) {
            Program::Found { path, via: Via::Cwd, relative: None }
        } else {
            Program::NotFound { via: Via::Cwd }
        };
    }
    let (search, via) = match entry_path {
        Some(p) => (p, Via::EntryPath),
        None => (own_path.unwrap_or(DEFAULT_PATH), Via::OwnPath),
    };
    for part in search.split(':') {
        // Only the entry's value is expanded at start; gm's own PATH is taken as it is.
        if let (Via::EntryPath, Some(var)) = (via, first_var(part)) {
            return Program::Unknown { depends_on: format!("{var} in the PATH this entry sets") };
        }
        let relative = !Path::new(part).is_absolute();
        let folder = match (relative, dir) {
            (false, _) => PathBuf::from(part),
            (true, Some(dir)) => within(dir, part),
            (true, None) => return cwd_unknown(),
        };
        let path = folder.join(command);
        if runnable(&path) {
            return Program::Found { path, via, relative: relative.then(|| part.to_owned()) };
        }
    }
    Program::NotFound { via }
}

/// Whether `execve` would run the file: a regular file (links followed) with an execute bit.
fn runnable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && (cfg!(not(unix)) || gm_actors::sys::is_executable(&m)))
}

/// `rel` taken in `dir` (an absolute `rel` as is), without its `.` parts: `/ws/.gm/bin`, not
/// `/ws/./.gm/bin`.
fn within(dir: &Path, rel: &str) -> PathBuf {
    dir.join(rel).components().filter(|c| *c != Component::CurDir).collect()
}

/// The first `${NAME}` in `s` that the start expands (`mcp_config::expand_vars`: a `${`
/// without its `}` stays as written).
fn first_var(s: &str) -> Option<&str> {
    let at = s.find("${")?;
    let end = s[at + 2..].find('}')?;
    Some(&s[at..at + 2 + end + 1])
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

    /// A workspace with `rel` an executable script (or a plain file when `exec` is unset).
    fn with_file(ws: &Path, rel: &str, exec: bool) {
        let path = ws.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, "#!/bin/sh\n").expect("write");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = if exec { 0o755 } else { 0o644 };
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_path_the_entry_sets_finds_the_repositorys_program_in_its_cwd() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path();
        with_file(ws, ".gm/bin/npx", true);
        with_file(ws, "sub/bin/tool", true);
        with_file(ws, "sub/plain/tool", false);
        let found = find_program("npx", Some(".gm/bin:/usr/bin"), Some("/usr/bin"), Some(ws));
        assert_eq!(
            found,
            Program::Found { path: ws.join(".gm/bin/npx"), via: Via::EntryPath, relative: Some(".gm/bin".into()) }
        );
        assert!(found.to_string().starts_with(&format!("{} (PATH from this entry", ws.join(".gm/bin/npx").display())));
        // Relative parts are taken in the entry's cwd, after a file that cannot run is skipped.
        let sub = ws.join("sub");
        let found = find_program("tool", Some("plain:./bin"), None, Some(&sub));
        assert_eq!(
            found,
            Program::Found { path: sub.join("bin/tool"), via: Via::EntryPath, relative: Some("./bin".into()) }
        );
        // An empty part is the cwd itself; without a PATH of its own, gm's is searched.
        let found = find_program(
            "tool",
            None,
            Some(&format!("/nonexistent::{}", sub.join("bin").display())),
            Some(&ws.join("sub/bin")),
        );
        assert_eq!(
            found,
            Program::Found { path: sub.join("bin/tool"), via: Via::OwnPath, relative: Some(String::new()) }
        );
        let found = find_program("tool", None, Some(&sub.join("bin").display().to_string()), Some(ws));
        assert_eq!(found, Program::Found { path: sub.join("bin/tool"), via: Via::OwnPath, relative: None });
        assert_eq!(
            find_program("tool", Some("/nonexistent"), None, Some(ws)),
            Program::NotFound { via: Via::EntryPath }
        );
    }

    #[cfg(unix)]
    #[test]
    fn a_slash_command_is_taken_in_the_cwd_and_an_absolute_one_is_as_written() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path();
        with_file(ws, "bin/server", true);
        assert_eq!(
            find_program("./bin/server", Some("/nonexistent"), None, Some(ws)),
            Program::Found { path: ws.join("bin/server"), via: Via::Cwd, relative: None }
        );
        assert_eq!(find_program("bin/none", None, None, Some(ws)), Program::NotFound { via: Via::Cwd });
        assert_eq!(find_program("/usr/bin/env", Some(".gm/bin"), None, Some(ws)), Program::AsWritten);
    }

    #[cfg(unix)]
    #[test]
    fn what_depends_on_a_variable_is_not_guessed_nor_expanded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path();
        with_file(ws, ".gm/bin/npx", true);
        let unknown = find_program("npx", Some("/nonexistent:${HOME}/bin:.gm/bin"), None, Some(ws));
        assert_eq!(unknown, Program::Unknown { depends_on: "${HOME} in the PATH this entry sets".into() });
        assert!(unknown.to_string().contains("${HOME}"), "named, never expanded: {unknown}");
        // Found before the variable's part: known.
        let found = find_program("npx", Some(".gm/bin:${PATH}"), None, Some(ws));
        assert!(matches!(found, Program::Found { via: Via::EntryPath, .. }), "{found:?}");
        assert!(matches!(find_program("${TOOL}", None, None, Some(ws)), Program::Unknown { .. }));
        assert!(matches!(find_program("./x", None, None, None), Program::Unknown { .. }), "the cwd holds a ${{NAME}}");
        let p = Pending::of(&named(r#"{"command":"npx","cwd":"${DIR}/x","env":{"PATH":".gm/bin"}}"#), ws);
        assert_eq!(p.dir, None);
        assert!(matches!(p.program(), Program::Unknown { .. }), "{:?}", p.program());
    }

    #[cfg(unix)]
    #[test]
    fn the_shown_entry_has_its_env_values_and_resolved_program_escaped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path();
        with_file(ws, ".gm/bin/npx", true);
        let p = Pending::of(
            &named(r#"{"command":"npx","env":{"PATH":".gm/bin:/usr/bin","NODE_OPTIONS":"--require=./x.js\u001b[2K"}}"#),
            ws,
        );
        assert_eq!(p.env_shown(), ["NODE_OPTIONS='--require=./x.js\\u001b[2K'", "PATH=.gm/bin:/usr/bin"]);
        let program = p.program_shown().expect("a program line");
        assert!(program.starts_with(&ws.join(".gm/bin/npx").display().to_string()), "{program}");
        assert!(!p.env_expands());
        assert_eq!(Pending::of(&named(r#"{"command":"/bin/true"}"#), ws).program_shown(), None);
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
