//! `gm install` and `gm uninstall`: register gm with Claude Code by writing its entry into
//! `mcpServers` of `~/.claude.json` (or the file `--config` names), and, with `--local`, stage
//! a build under `~/.gmnew` first so that the entry points at `~/.gmnew/current/gm`, which
//! later builds replace.
//!
//! The user's file is never damaged: every other member keeps its text and place
//! ([`ordered`]), a file that is not a JSON object is refused untouched, and the write merges
//! with a host writing the file at the same moment ([`replace`]).

mod ordered;
mod registration;
mod replace;

use std::path::{Path, PathBuf};

use gm_actors::builds::{self, BuildError};
use serde::Serialize;

pub use ordered::NotAnObject;
pub use registration::ServerEntry;

/// The entry's name in `mcpServers`.
pub const SERVER_NAME: &str = "gm";
/// The config file Claude Code reads, in the home folder.
pub const CLAUDE_CONFIG: &str = ".claude.json";

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path} {why}; refused, the file is left as it was")]
    NotAnObject { path: PathBuf, why: NotAnObject },
    #[error("{path}: mcpServers {why}; refused, the file is left as it was")]
    ServersNotAnObject { path: PathBuf, why: NotAnObject },
    #[error("{path}: not UTF-8 text ({why}); refused, the file is left as it was")]
    NotUtf8 { path: PathBuf, why: String },
    #[error("{path}: {source}")]
    Json { path: PathBuf, source: serde_json::Error },
    #[error("{path} changed each of the {attempts} times gm was about to replace it; nothing was written, try again")]
    KeptChanging { path: PathBuf, attempts: usize },
    #[error("--mcp-config {0}: no such file")]
    NoMcpConfig(PathBuf),
    #[error("{0}: a path that is not Unicode cannot be written into a JSON config")]
    NotUnicode(PathBuf),
    #[error("cannot tell where this gm binary is: {0}")]
    CurrentExe(std::io::Error),
    #[error("no home directory ({} is not set); name the file with --config", if cfg!(windows) { "USERPROFILE" } else { "HOME" })]
    NoHome,
    #[error("staging the build: {0}")]
    Build(#[from] BuildError),
}

/// What `gm install` was asked to do.
#[derive(Debug, Clone, Default)]
pub struct InstallOptions {
    /// The config to write; `~/.claude.json` when `None`.
    pub config: Option<PathBuf>,
    /// A child-server config for the registered `gm serve`, passed as `--mcp-config`.
    pub mcp_config: Option<PathBuf>,
    /// A build to stage under `~/.gmnew` and register instead of the running binary.
    pub local: Option<PathBuf>,
}

/// What `gm install` did, printed as JSON.
#[derive(Debug, Serialize)]
pub struct InstallReport {
    pub file: PathBuf,
    pub command: String,
    pub args: Vec<String>,
    /// Whether the file was written.
    pub changed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub staged: Option<StagedReport>,
}

#[derive(Debug, Serialize)]
pub struct StagedReport {
    pub version: String,
    pub dir: PathBuf,
    /// False when this build was already staged and current.
    pub changed: bool,
}

/// What `gm uninstall` did, printed as JSON.
#[derive(Debug, Serialize)]
pub struct UninstallReport {
    pub file: PathBuf,
    pub changed: bool,
}

/// `gm install`.
pub fn install(opts: &InstallOptions) -> Result<InstallReport, InstallError> {
    install_with(opts, &mut |_| {})
}

/// `gm uninstall`: removes `mcpServers.gm` from the config and nothing else.
pub fn uninstall(config: Option<&Path>) -> Result<UninstallReport, InstallError> {
    let file = config_file(config)?;
    let changed = replace::rewrite(&file, |text| registration::edit(&file, text, SERVER_NAME, None), &mut |_| {})?;
    Ok(UninstallReport { file, changed })
}

/// [`install`], with `after_write` run between writing the temporary file and reading the
/// target again (see [`replace::rewrite`]).
fn install_with(opts: &InstallOptions, after_write: &mut dyn FnMut(&Path)) -> Result<InstallReport, InstallError> {
    let file = config_file(opts.config.as_deref())?;
    let mut args = vec!["serve".to_owned()];
    if let Some(mcp) = &opts.mcp_config {
        // gm serve refuses to start without the file it names: better said now than at start.
        if !mcp.is_file() {
            return Err(InstallError::NoMcpConfig(mcp.clone()));
        }
        args.push("--mcp-config".into());
        args.push(unicode(&absolute(mcp)?)?);
    }
    let root = match opts.local {
        Some(_) => Some(builds::root()?),
        None => None,
    };
    let command = match &root {
        Some(root) => builds::current_exe_path(root),
        None => registered_exe()?,
    };
    let entry = ServerEntry { command: unicode(&command)?, args };
    // A file that cannot be edited is refused before anything is staged.
    registration::edit(&file, replace::read_text(&file)?.as_deref(), SERVER_NAME, Some(&entry))?;

    let staged = match (&opts.local, &root) {
        (Some(dir), Some(root)) => {
            let staged = builds::stage(dir, root)?;
            Some(StagedReport { version: staged.version, dir: staged.dir, changed: staged.changed })
        }
        _ => None,
    };
    let changed =
        replace::rewrite(&file, |text| registration::edit(&file, text, SERVER_NAME, Some(&entry)), after_write)?;
    Ok(InstallReport { file, command: entry.command, args: entry.args, changed, staged })
}

/// The binary to register: the running one, or `~/.gmnew/current/gm` when the running one is a
/// build under `~/.gmnew/versions/` (a host started through `current` runs the resolved path,
/// and that folder is pruned a few updates later, while `current` follows them).
fn registered_exe() -> Result<PathBuf, InstallError> {
    let exe = std::env::current_exe().map_err(InstallError::CurrentExe)?;
    match builds::root() {
        Ok(root) if builds::is_staged_binary(&exe, &root) => Ok(builds::current_exe_path(&root)),
        _ => Ok(exe),
    }
}

/// The config to write, absolute. A symbolic link (a config kept with dotfiles) is followed, so
/// the rename replaces the file it points at and the link stays.
fn config_file(named: Option<&Path>) -> Result<PathBuf, InstallError> {
    let path = match named {
        Some(p) => absolute(p)?,
        None => gm_actors::sys::home_dir().ok_or(InstallError::NoHome)?.join(CLAUDE_CONFIG),
    };
    match std::fs::symlink_metadata(&path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            std::fs::canonicalize(&path).map_err(|source| InstallError::Io { path, source })
        }
        _ => Ok(path),
    }
}

fn absolute(path: &Path) -> Result<PathBuf, InstallError> {
    std::path::absolute(path).map_err(|source| InstallError::Io { path: path.to_owned(), source })
}

fn unicode(path: &Path) -> Result<String, InstallError> {
    path.to_str().map(str::to_owned).ok_or_else(|| InstallError::NotUnicode(path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn options(config: &Path) -> InstallOptions {
        InstallOptions { config: Some(config.to_owned()), ..Default::default() }
    }

    #[test]
    fn a_file_changed_between_read_and_rename_is_merged_again() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("claude.json");
        std::fs::write(&config, r#"{"mcpServers": {"a": {"command": "a"}}}"#).unwrap();
        let mut calls = 0;
        let report = install_with(&options(&config), &mut |path| {
            calls += 1;
            if calls == 1 {
                // The host rewrites the file while gm is writing its own copy.
                std::fs::write(path, r#"{"mcpServers": {"a": {"command": "a"}, "b": {"command": "b"}}, "late": 1}"#)
                    .unwrap();
            }
        })
        .unwrap();
        assert!(report.changed);
        assert_eq!(calls, 2, "the edit is made a second time from the new content");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
        assert_eq!(v["late"], 1);
        assert_eq!(v["mcpServers"]["b"], json!({"command": "b"}));
        assert_eq!(v["mcpServers"]["gm"]["args"], json!(["serve"]));
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file is left: {left:?}");
    }

    #[test]
    fn a_file_that_never_stops_changing_is_given_up_and_left_as_the_other_writer_made_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("claude.json");
        std::fs::write(&config, "{}").unwrap();
        let mut n = 0;
        let r = install_with(&options(&config), &mut |path| {
            n += 1;
            std::fs::write(path, format!(r#"{{"n": {n}}}"#)).unwrap();
        });
        assert!(matches!(r, Err(InstallError::KeptChanging { .. })), "{r:?}");
        assert_eq!(std::fs::read_to_string(&config).unwrap(), format!(r#"{{"n": {n}}}"#));
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file is left");
    }

    #[cfg(unix)]
    #[test]
    fn a_config_reached_through_a_link_is_written_where_the_link_points() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.json");
        std::fs::write(&real, "{}").unwrap();
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        install(&options(&link)).unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert!(std::fs::read_to_string(&real).unwrap().contains("\"gm\""));
    }
}
