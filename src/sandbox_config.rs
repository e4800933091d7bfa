//! Which box gm's shells, jobs and a repository's servers run in: the user's choice only —
//! `gm serve --sandbox MODE`, `--sandbox-allow-write DIR`, `--sandbox-network on|off` (in the
//! host's registration), else `~/.gmnew/config.json`'s `{"sandbox": {"mode", "allowWrite",
//! "network"}}`, else off. Nothing in the workspace is read for it: a repository must not widen
//! its own box. [`policy`] turns the choice into what the kernel is told for one workspace.

use std::path::{Path, PathBuf};

use gm_actors::sandbox::{Mode, Policy};
use serde::{Deserialize, Serialize};

/// What the command line said (each `None` when not given).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SandboxFlags {
    pub mode: Option<Mode>,
    pub allow_write: Vec<PathBuf>,
    pub network: Option<bool>,
}

/// The box chosen for a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSettings {
    pub mode: Mode,
    pub allow_write: Vec<PathBuf>,
    pub network: bool,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings { mode: Mode::Off, allow_write: Vec::new(), network: true }
    }
}

/// `~/.gmnew/config.json`'s `sandbox` section.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct FileSection {
    mode: Option<String>,
    #[serde(default)]
    allow_write: Vec<PathBuf>,
    network: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SandboxConfigError {
    #[error("{file}: {why}")]
    File { file: PathBuf, why: String },
}

fn on_off(s: &str) -> Option<bool> {
    match s {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// The flags over `~/.gmnew/config.json` (`home_config`: its path, `None` without a home).
pub fn resolve(flags: &SandboxFlags, home_config: Option<&Path>) -> Result<SandboxSettings, SandboxConfigError> {
    let mut settings = SandboxSettings::default();
    if let Some(file) = home_config {
        if let Some(section) = read_section(file)? {
            let bad = |why: String| SandboxConfigError::File { file: file.to_owned(), why };
            if let Some(m) = &section.mode {
                settings.mode = Mode::parse(m)
                    .ok_or_else(|| bad(format!("sandbox.mode {m:?} is none of off, workspace-write, read-only")))?;
            }
            if let Some(n) = &section.network {
                settings.network =
                    on_off(n).ok_or_else(|| bad(format!("sandbox.network {n:?} is neither on nor off")))?;
            }
            settings.allow_write = section.allow_write;
        }
    }
    if let Some(mode) = flags.mode {
        settings.mode = mode;
    }
    if let Some(network) = flags.network {
        settings.network = network;
    }
    settings.allow_write.extend(flags.allow_write.iter().cloned());
    Ok(settings)
}

fn read_section(file: &Path) -> Result<Option<FileSection>, SandboxConfigError> {
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SandboxConfigError::File { file: file.to_owned(), why: e.to_string() }),
    };
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| SandboxConfigError::File { file: file.to_owned(), why: e.to_string() })?;
    match value.get("sandbox") {
        None => Ok(None),
        Some(section) => serde_json::from_value(section.clone())
            .map(Some)
            .map_err(|e| SandboxConfigError::File { file: file.to_owned(), why: format!("sandbox: {e}") }),
    }
}

/// `~/.gmnew/config.json`.
pub fn home_config() -> Option<PathBuf> {
    gm_actors::builds::root().ok().map(|root| root.join("config.json"))
}

/// The temporary folder a shell is given: `$TMPDIR`, else `/tmp`, links resolved.
fn temp_dir() -> PathBuf {
    let tmp =
        std::env::var_os("TMPDIR").map(PathBuf::from).filter(|p| p.is_absolute()).unwrap_or_else(|| "/tmp".into());
    std::fs::canonicalize(&tmp).unwrap_or(tmp)
}

/// What `workspace`'s git would run later on the user's behalf, kept read-only: `.git`, or a
/// worktree's `.git` file and the git directory it names.
fn git_paths(workspace: &Path) -> Vec<PathBuf> {
    let dot_git = workspace.join(".git");
    let mut out = vec![dot_git.clone()];
    if std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) {
        let text = std::fs::read_to_string(&dot_git).unwrap_or_default();
        if let Some(target) = text.lines().next().and_then(|l| l.strip_prefix("gitdir:")).map(str::trim) {
            let target = workspace.join(target);
            out.push(std::fs::canonicalize(&target).unwrap_or(target));
        }
    }
    out
}

/// The box of `settings` for `workspace` (canonical); `socket_dir`: gm's worker sockets,
/// which stay read-only when they lie in a writable folder (the temporary one).
pub fn policy(settings: &SandboxSettings, workspace: &Path, socket_dir: Option<&Path>) -> Policy {
    let home = gm_actors::sys::home_dir();
    let absolute = |p: &Path| {
        let p = match (p.strip_prefix("~"), &home) {
            (Ok(rest), Some(home)) => home.join(rest),
            _ if p.is_absolute() => p.to_owned(),
            _ => workspace.join(p),
        };
        std::fs::canonicalize(&p).unwrap_or(p)
    };
    let allowed: Vec<PathBuf> = settings.allow_write.iter().map(|p| absolute(p)).collect();
    let (writable, mut read_only) = match settings.mode {
        Mode::Off | Mode::ReadOnly => (Vec::new(), Vec::new()),
        Mode::WorkspaceWrite => {
            let mut writable = vec![workspace.to_owned(), temp_dir()];
            writable.extend(allowed.iter().cloned());
            let mut read_only = vec![workspace.join(".gm")];
            read_only.extend(git_paths(workspace));
            read_only.extend(socket_dir.map(Path::to_owned));
            (writable, read_only)
        }
    };
    // A folder the user named writable is writable, even inside a protected one.
    read_only.retain(|r| !allowed.iter().any(|a| r.starts_with(a)));
    Policy { mode: settings.mode, writable, read_only, network: settings.network }
}

/// The box as the agent and `gm status` see it; `None` when off.
pub fn describe(confine: Option<&gm_actors::sandbox::Confinement>) -> Option<serde_json::Value> {
    let policy = confine?.policy();
    Some(serde_json::json!({
        "mode": policy.mode.as_str(),
        "writable": policy.writable,
        "readOnly": policy.read_only,
        "network": if policy.network { "on" } else { "off" },
        "note": "shells, jobs and the workspace's servers run in this box, enforced by the kernel; a write \
                 outside it fails with a permission or read-only error. Ask the user to widen it \
                 (--sandbox-allow-write DIR) rather than working around it.",
    }))
}

/// The box in a few words, for a failed confined shell's result: the mode, what it may write
/// and the network.
pub fn brief(confine: Option<&gm_actors::sandbox::Confinement>) -> Option<serde_json::Value> {
    let policy = confine?.policy();
    Some(serde_json::json!({
        "mode": policy.mode.as_str(),
        "writable": policy.writable,
        "network": if policy.network { "on" } else { "off" },
        "note": "a write outside `writable` fails in this box; ask the user to widen it rather than working around it",
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flags_win_over_the_home_config_and_nothing_else_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("config.json");
        std::fs::write(&file, r#"{"sandbox":{"mode":"read-only","allowWrite":["/opt/cache"],"network":"off"}}"#)
            .expect("write");
        let from_file = resolve(&SandboxFlags::default(), Some(&file)).expect("resolve");
        assert_eq!(
            from_file,
            SandboxSettings { mode: Mode::ReadOnly, allow_write: vec!["/opt/cache".into()], network: false }
        );
        let flags =
            SandboxFlags { mode: Some(Mode::WorkspaceWrite), allow_write: vec!["/x".into()], network: Some(true) };
        let both = resolve(&flags, Some(&file)).expect("resolve");
        assert_eq!((both.mode, both.network), (Mode::WorkspaceWrite, true));
        assert_eq!(both.allow_write, [PathBuf::from("/opt/cache"), PathBuf::from("/x")]);
        assert_eq!(resolve(&SandboxFlags::default(), None).expect("none"), SandboxSettings::default());
        std::fs::write(&file, r#"{"sandbox":{"mode":"danger"}}"#).expect("write");
        assert!(resolve(&SandboxFlags::default(), Some(&file)).is_err(), "a bad mode is an error, not off");
    }

    #[test]
    fn workspace_write_protects_gm_and_git_unless_the_user_allows_git() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ws = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(ws.join(".git")).expect("git");
        let settings = SandboxSettings { mode: Mode::WorkspaceWrite, ..Default::default() };
        let p = policy(&settings, &ws, Some(Path::new("/tmp/gm-0")));
        assert!(p.writable.contains(&ws));
        assert!(p.read_only.contains(&ws.join(".gm")) && p.read_only.contains(&ws.join(".git")));
        assert!(p.read_only.contains(&PathBuf::from("/tmp/gm-0")));
        let allowed = SandboxSettings { allow_write: vec![".git".into()], ..settings };
        let p = policy(&allowed, &ws, None);
        assert!(!p.read_only.contains(&ws.join(".git")), "{p:?}");
        assert!(p.may_write(&ws.join(".git/config")));
        let ro = policy(&SandboxSettings { mode: Mode::ReadOnly, ..Default::default() }, &ws, None);
        assert!(ro.writable.is_empty() && !ro.may_write(&ws.join("a")));
    }

    #[test]
    fn a_worktrees_git_file_and_the_git_directory_it_names_are_protected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().canonicalize().expect("canonical");
        std::fs::create_dir_all(root.join("main/.git/worktrees/wt")).expect("mkdir");
        std::fs::create_dir_all(root.join("wt")).expect("mkdir");
        std::fs::write(root.join("wt/.git"), "gitdir: ../main/.git/worktrees/wt\n").expect("write");
        let paths = git_paths(&root.join("wt"));
        assert_eq!(paths, [root.join("wt/.git"), root.join("main/.git/worktrees/wt")]);
    }
}
