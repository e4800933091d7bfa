//! The child MCP servers gm starts: three config files in the `mcpServers` shape of
//! `.mcp.json`, read in order, a later entry with the same name replacing the earlier one
//! whole:
//!
//! 1. `defaults/mcp.json` shipped with gm (`$GM_DEFAULTS_DIR`, else `defaults/` beside the
//!    binary or one or two directories up, else the checkout gm was built from; a copy built
//!    into the binary stands in);
//! 2. `.gm/mcp.json` in the workspace, when it exists;
//! 3. the file `gm serve --mcp-config <file>` names (required when given).
//!
//! A layer that cannot be read or parsed is a problem to log, never a crash; the other layers
//! still apply. Only the third layer's absence stops gm (the user named it).
//!
//! The first and third layers are the user's (gm's own file, a file named in the host's
//! config); the second comes with the workspace, which may be a repository anyone wrote, so
//! its servers start only once the user approved them (`crate::trust`).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// The copy of `defaults/mcp.json` built into the binary.
const EMBEDDED_DEFAULTS: &str = include_str!("../defaults/mcp.json");

/// Startup budget of a server, unless its entry sets `startupTimeoutMs`.
pub const DEFAULT_STARTUP_MS: u64 = 30_000;
/// ... of a server started with npx or npm, which may install the package first (a first npx
/// install of a git package took minutes on the measured host).
pub const NPX_STARTUP_MS: u64 = 600_000;
/// A call's budget, unless the entry sets `timeoutMs`.
pub const DEFAULT_CALL_MS: u64 = 60_000;
/// gm sets this in each child's environment to its own depth + 1; a gm at [`MAX_DEPTH`] starts
/// no children, so a config that names gm itself stops after two levels.
pub const DEPTH_VAR: &str = "GMNEW_MCP_DEPTH";
pub const MAX_DEPTH: u32 = 2;

/// One entry as written.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    /// A remote server: not supported.
    pub url: Option<String>,
    /// `stdio`, or a remote transport (`http`, `sse`).
    #[serde(rename = "type")]
    pub transport: Option<String>,
    #[serde(default)]
    pub disabled: bool,
    /// Lines this server wants in the workspace's .gitignore.
    #[serde(default)]
    pub ignore: Vec<String>,
    /// Tools of this server that are not registered.
    #[serde(default)]
    pub deny: Vec<String>,
    pub startup_timeout_ms: Option<u64>,
    pub timeout_ms: Option<u64>,
    /// `true`: run this server in the box `--sandbox` chose. Read for the user's own layers
    /// (`defaults/mcp.json`, `--mcp-config`); a workspace server is confined whatever it says.
    pub sandbox: Option<bool>,
}

/// Where an entry came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Named {
    pub name: String,
    pub entry: Entry,
    /// The file, for the log.
    pub from: String,
    pub layer: Layer,
}

/// The three layers, in the order they are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// `defaults/mcp.json`, shipped with gm: trusted.
    Defaults,
    /// `.gm/mcp.json` in the workspace: started only once the user approved the entry.
    Workspace,
    /// The `--mcp-config` file the user named: trusted.
    Named,
}

/// A layer that could not be used, for an `mcp-config` event.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub file: String,
    pub why: String,
}

#[derive(Debug, Default)]
pub struct Config {
    /// The merged entries, by name, disabled ones included.
    pub servers: Vec<Named>,
    pub problems: Vec<Problem>,
    /// The files read, in order.
    pub layers: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--mcp-config {path}: {why}")]
    Named { path: PathBuf, why: String },
}

/// The `mcpServers` of one file's text, or why not (naming the line of bad JSON).
pub fn parse(text: &str) -> Result<Vec<(String, Entry)>, String> {
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON (line {}, column {}): {e}", e.line(), e.column()))?;
    let Some(servers) = v.get("mcpServers") else {
        return if v.is_object() { Ok(Vec::new()) } else { Err("not a JSON object".into()) };
    };
    let servers = servers.as_object().ok_or("mcpServers is not an object")?;
    servers
        .iter()
        .map(|(name, entry)| {
            serde_json::from_value::<Entry>(entry.clone())
                .map(|e| (name.clone(), e))
                .map_err(|e| format!("server {name}: {e}"))
        })
        .collect()
}

/// Where `defaults/mcp.json` is, the way the skills are found; `None`: the built-in copy.
pub fn defaults_file() -> Option<PathBuf> {
    let mut candidates = Vec::new();
    if let Some(dir) = std::env::var_os("GM_DEFAULTS_DIR") {
        candidates.push(PathBuf::from(dir));
    }
    candidates.extend(gm_actors::builds::running_part_candidates("defaults", Path::new(env!("CARGO_MANIFEST_DIR"))));
    candidates.into_iter().map(|d| d.join("mcp.json")).find(|f| f.is_file())
}

/// Reads the three layers and merges them.
pub fn load(workspace: &Path, named: Option<&Path>) -> Result<Config, ConfigError> {
    let mut config = Config::default();
    let defaults = match defaults_file() {
        Some(path) => Source::File(path),
        None => {
            config.problems.push(Problem {
                file: "defaults/mcp.json".into(),
                why: "not found ($GM_DEFAULTS_DIR, beside gm, or in the checkout it was built from); the copy built into gm stands in".into(),
            });
            Source::Embedded
        }
    };
    let mut layers = vec![(defaults, Layer::Defaults)];
    let local = workspace.join(".gm/mcp.json");
    if local.exists() {
        layers.push((Source::File(local), Layer::Workspace));
    }
    if let Some(path) = named {
        if !path.is_file() {
            return Err(ConfigError::Named { path: path.to_owned(), why: "no such file".into() });
        }
        layers.push((Source::File(path.to_owned()), Layer::Named));
    }
    for (source, layer) in layers {
        let (label, text) = match &source {
            Source::Embedded => ("defaults/mcp.json (built into gm)".to_owned(), Ok(EMBEDDED_DEFAULTS.to_owned())),
            Source::File(p) => (p.display().to_string(), std::fs::read_to_string(p).map_err(|e| e.to_string())),
        };
        config.layers.push(label.clone());
        let entries = match text.and_then(|t| parse(&t)) {
            Ok(entries) => entries,
            Err(why) => {
                config.problems.push(Problem { file: label, why });
                continue;
            }
        };
        for (name, entry) in entries {
            // A later entry replaces an earlier one whole; `disabled` in a later layer removes
            // the server the earlier one named (it stays listed, disabled).
            config.servers.retain(|s| s.name != name);
            config.servers.push(Named { name, entry, from: label.clone(), layer });
        }
    }
    Ok(config)
}

/// The files [`load`] reads, whether or not they exist now (one made later counts): the
/// shipped defaults, the workspace's `.gm/mcp.json`, the user's `--mcp-config`.
pub fn layer_files(workspace: &Path, named: Option<&Path>) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = defaults_file().into_iter().collect();
    files.push(workspace.join(".gm/mcp.json"));
    files.extend(named.map(Path::to_owned));
    files
}

enum Source {
    Embedded,
    File(PathBuf),
}

/// A server ready to start.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub name: String,
    pub command: String,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    pub ignore: Vec<String>,
    pub deny: Vec<String>,
    pub startup_timeout: Duration,
    pub call_timeout: Duration,
}

/// Why an entry is not started (each an `mcp-server` event).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NotStarted {
    #[error("disabled")]
    Disabled,
    #[error("only stdio servers are supported; {0} names a remote server")]
    Remote(String),
    #[error("no command")]
    NoCommand,
    #[error("the environment variable {0} is not set")]
    MissingVar(String),
    #[error("ignore line {line:?}: {why}")]
    BadIgnore { line: String, why: &'static str },
    #[error("its name {0:?} is not a name: use letters, digits, '_' and '-'")]
    BadName(String),
}

/// Why an entry would not be started whatever the environment and the user's consent: it is
/// disabled, remote, badly named or has no command. Reads the entry as written, expands nothing.
pub fn check_shape(named: &Named) -> Result<(), NotStarted> {
    let e = &named.entry;
    if e.disabled {
        return Err(NotStarted::Disabled);
    }
    if !named.name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') || named.name.is_empty() {
        return Err(NotStarted::BadName(named.name.clone()));
    }
    if let Some(url) = &e.url {
        return Err(NotStarted::Remote(url.clone()));
    }
    if let Some(t) = e.transport.as_deref().filter(|t| *t != "stdio") {
        return Err(NotStarted::Remote(format!("a {t} transport")));
    }
    if e.command.as_deref().is_none_or(|c| c.trim().is_empty()) {
        return Err(NotStarted::NoCommand);
    }
    Ok(())
}

/// Turns an entry into a server to start: `${NAME}` taken from `env` (gm's environment) in
/// command, args, env and cwd; a relative cwd taken from the workspace; the budgets. A
/// workspace entry is resolved only once it was approved: its `${NAME}`s are the user's
/// environment (API keys), not the repository's to read.
pub fn resolve(
    named: &Named,
    workspace: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    depth: u32,
) -> Result<Resolved, NotStarted> {
    check_shape(named)?;
    let e = &named.entry;
    let expand = |s: &str| expand_vars(s, env);
    let command = expand(e.command.as_deref().unwrap_or_default())?;
    let args = e.args.iter().map(|a| expand(a)).collect::<Result<Vec<_>, _>>()?;
    let mut vars = Vec::new();
    for (k, v) in &e.env {
        vars.push((k.clone(), expand(v)?));
    }
    // Each server starts with PLAYWRITER_PROJECT_DIR set to the workspace unless its entry sets
    // it, so each workspace gets its own browser profile; and one level deeper than this gm.
    if !e.env.contains_key("PLAYWRITER_PROJECT_DIR") {
        vars.push(("PLAYWRITER_PROJECT_DIR".into(), workspace.display().to_string()));
    }
    vars.push((DEPTH_VAR.into(), (depth + 1).to_string()));
    let cwd = match &e.cwd {
        None => workspace.to_owned(),
        Some(c) => {
            let c = PathBuf::from(expand(c)?);
            if c.is_absolute() {
                c
            } else {
                workspace.join(c)
            }
        }
    };
    for line in &e.ignore {
        check_ignore(line)?;
    }
    let npx = matches!(Path::new(&command).file_name().and_then(|n| n.to_str()), Some("npx" | "npm"));
    let startup_ms = e.startup_timeout_ms.unwrap_or(if npx { NPX_STARTUP_MS } else { DEFAULT_STARTUP_MS });
    Ok(Resolved {
        name: named.name.clone(),
        command,
        args,
        env: vars,
        cwd,
        ignore: e.ignore.clone(),
        deny: e.deny.clone(),
        startup_timeout: Duration::from_millis(startup_ms.max(1)),
        call_timeout: Duration::from_millis(e.timeout_ms.unwrap_or(DEFAULT_CALL_MS).max(1)),
    })
}

/// `${NAME}` replaced by the variable's value; a missing variable is an error naming it.
pub fn expand_vars(s: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<String, NotStarted> {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find("${") {
        let Some(end) = rest[at + 2..].find('}') else { break };
        let name = &rest[at + 2..at + 2 + end];
        out.push_str(&rest[..at]);
        out.push_str(&env(name).ok_or_else(|| NotStarted::MissingVar(name.to_owned()))?);
        rest = &rest[at + 2 + end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// A gitignore line a server may ask for: relative, without `..`, not anchored with `/`.
fn check_ignore(line: &str) -> Result<(), NotStarted> {
    let bad = |why| Err(NotStarted::BadIgnore { line: line.to_owned(), why });
    if line.trim().is_empty() || line.contains('\n') {
        return bad("it is empty or spans lines");
    }
    if line.starts_with('/') || Path::new(line).is_absolute() {
        return bad("it is absolute (a leading slash); write the pattern without it");
    }
    if Path::new(line).components().any(|c| c == Component::ParentDir) {
        return bad("it has a .. segment");
    }
    Ok(())
}

/// This gm's depth: `GMNEW_MCP_DEPTH` as its parent gm set it, 0 at the top.
pub fn depth() -> u32 {
    std::env::var(DEPTH_VAR).ok().and_then(|d| d.trim().parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str, json: &str) -> Named {
        Named {
            name: name.into(),
            entry: serde_json::from_str(json).expect("entry"),
            from: "t".into(),
            layer: Layer::Workspace,
        }
    }

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "t0k".into())
    }

    #[test]
    fn layers_replace_entries_whole_and_disabled_removes_a_server() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path();
        std::fs::create_dir_all(ws.join(".gm")).expect("mkdir");
        std::fs::write(
            ws.join(".gm/mcp.json"),
            r#"{"mcpServers":{"a":{"command":"local-a"},"b":{"command":"b","args":["x"]}}}"#,
        )
        .expect("write");
        let cli = ws.join("cli.json");
        std::fs::write(&cli, r#"{"mcpServers":{"b":{"command":"b2"},"a":{"disabled":true}}}"#).expect("write");
        let c = load(ws, Some(&cli)).expect("load");
        let b = c.servers.iter().find(|s| s.name == "b").expect("b");
        assert_eq!((b.entry.command.as_deref(), b.entry.args.len()), (Some("b2"), 0), "replaced whole, args too");
        assert_eq!(b.layer, Layer::Named, "a workspace entry replaced by the named file's is the user's");
        let a = c.servers.iter().find(|s| s.name == "a").expect("a");
        assert_eq!(resolve(a, ws, &env, 0), Err(NotStarted::Disabled));
        assert!(c.problems.is_empty(), "{:?}", c.problems);
        assert!(matches!(load(ws, Some(&ws.join("missing.json"))), Err(ConfigError::Named { .. })));
    }

    #[test]
    fn bad_json_names_the_file_and_line_and_the_other_layers_still_apply() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path();
        std::fs::create_dir_all(ws.join(".gm")).expect("mkdir");
        std::fs::write(ws.join(".gm/mcp.json"), "{\n  \"mcpServers\": {\n    \"a\": { \"command\": \"x\", }\n  }\n}\n")
            .expect("write");
        let cli = ws.join("cli.json");
        std::fs::write(&cli, r#"{"mcpServers":{"c":{"command":"c"}}}"#).expect("write");
        let c = load(ws, Some(&cli)).expect("load");
        assert_eq!(c.problems.len(), 1);
        assert!(c.problems[0].file.ends_with(".gm/mcp.json"), "{:?}", c.problems);
        assert!(c.problems[0].why.contains("line 3"), "{:?}", c.problems);
        assert!(c.servers.iter().any(|s| s.name == "c"));
    }

    #[test]
    fn variables_urls_cwd_ignore_and_budgets_resolve_as_documented() {
        let ws = Path::new("/ws");
        let r = resolve(
            &named("s", r#"{"command":"run-${TOKEN}","args":["--t=${TOKEN}"],"env":{"K":"${TOKEN}x"},"cwd":"sub"}"#),
            ws,
            &env,
            0,
        )
        .expect("resolves");
        assert_eq!((r.command.as_str(), r.args[0].as_str()), ("run-t0k", "--t=t0k"));
        assert!(r.env.contains(&("K".into(), "t0kx".into())));
        assert!(r.env.contains(&("PLAYWRITER_PROJECT_DIR".into(), "/ws".into())));
        assert!(r.env.contains(&(DEPTH_VAR.into(), "1".into())));
        assert_eq!(r.cwd, PathBuf::from("/ws/sub"));
        assert_eq!((r.startup_timeout.as_millis(), r.call_timeout.as_millis()), (30_000, 60_000));
        let npx = resolve(&named("p", r#"{"command":"npx","args":["-y","x"]}"#), ws, &env, 1).expect("npx");
        assert_eq!(npx.startup_timeout.as_millis(), 600_000);
        assert!(npx.env.contains(&(DEPTH_VAR.into(), "2".into())));
        assert_eq!(
            resolve(&named("m", r#"{"command":"x","env":{"A":"${NOPE}"}}"#), ws, &env, 0),
            Err(NotStarted::MissingVar("NOPE".into()))
        );
        assert!(matches!(
            resolve(&named("u", r#"{"url":"https://example.invalid/mcp"}"#), ws, &env, 0),
            Err(NotStarted::Remote(_))
        ));
        assert!(matches!(
            resolve(&named("h", r#"{"type":"http","command":"x"}"#), ws, &env, 0),
            Err(NotStarted::Remote(_))
        ));
        for bad in ["/abs/", "../up", "a/../../b", ""] {
            let entry = format!(r#"{{"command":"x","ignore":[{}]}}"#, serde_json::to_string(bad).expect("json"));
            assert!(matches!(resolve(&named("i", &entry), ws, &env, 0), Err(NotStarted::BadIgnore { .. })), "{bad}");
        }
        assert!(resolve(&named("ok", r#"{"command":"x","ignore":[".playwriter/","out/*.log"]}"#), ws, &env, 0).is_ok());
        let own = resolve(&named("o", r#"{"command":"x","env":{"PLAYWRITER_PROJECT_DIR":"/elsewhere"}}"#), ws, &env, 0)
            .expect("o");
        assert_eq!(own.env.iter().filter(|(k, _)| k == "PLAYWRITER_PROJECT_DIR").count(), 1);
    }

    #[test]
    fn the_shipped_defaults_parse() {
        assert!(parse(EMBEDDED_DEFAULTS).is_ok());
    }
}
