//! `gm trust [--workspace DIR] [--yes | --list | --revoke [NAME]]`: shows each workspace server
//! that waits for approval in full (its command line, cwd and environment as written) and asks
//! y/N on a terminal. Without a terminal it approves nothing unless `--yes` says to approve them
//! all: an answer never comes from a pipe a program filled.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use super::entry::Pending;
use super::store::{TrustError, TrustStore};
use crate::mcp_config;
use crate::text::escape_invisible;

/// A path to show: a workspace's name comes from whoever made the folder.
fn shown_path(p: &Path) -> String {
    escape_invisible(&p.display().to_string()).into_owned()
}

/// What `gm trust` was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Ask about each pending server (on a terminal), or approve them all (`--yes`).
    Approve { yes: bool },
    /// `--list`: the approvals kept for the workspace.
    List,
    /// `--revoke [NAME]`: remove one approval, or all of the workspace's.
    Revoke(Option<String>),
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("workspace {path}: {source}")]
    Workspace { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Config(#[from] mcp_config::ConfigError),
    #[error(transparent)]
    Trust(#[from] TrustError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{name} has no approval in {workspace}; gm trust --list shows them")]
    NotApproved { name: String, workspace: PathBuf },
    #[error("nothing was approved: this is not a terminal; rerun with --yes to approve every server above")]
    NotATerminal,
}

/// Runs `gm trust` in `workspace`, answers read from `input` when `terminal` says it is one.
pub fn run(
    workspace: &Path,
    action: &Action,
    store: &TrustStore,
    input: &mut dyn BufRead,
    terminal: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let workspace = std::fs::canonicalize(workspace)
        .map_err(|source| CliError::Workspace { path: workspace.to_owned(), source })?;
    match action {
        Action::List => list(&workspace, store, out),
        Action::Revoke(name) => {
            let removed = store.revoke(&workspace, name.as_deref())?;
            if let (Some(name), true) = (name, removed.is_empty()) {
                return Err(CliError::NotApproved { name: name.clone(), workspace });
            }
            if removed.is_empty() {
                writeln!(out, "No approvals to revoke in {}.", shown_path(&workspace))?;
            } else {
                writeln!(out, "Revoked in {}: {}.", shown_path(&workspace), escape_invisible(&removed.join(", ")))?;
            }
            Ok(())
        }
        Action::Approve { yes } => approve(&workspace, *yes, store, input, terminal, out),
    }
}

/// The workspace's servers that wait for approval, and the config's problems.
fn pending(workspace: &Path, store: &TrustStore) -> Result<(Vec<Pending>, Vec<String>), CliError> {
    let config = mcp_config::load(workspace, None)?;
    let problems = config.problems.iter().map(|p| format!("{}: {}", p.file, p.why)).collect();
    let mut waiting = Vec::new();
    for named in config.servers.iter().filter(|n| super::needs_consent(n)) {
        let p = Pending::of(named, workspace);
        if !store.approved(workspace, &p.name, &p.sha256)? {
            waiting.push(p);
        }
    }
    Ok((waiting, problems))
}

fn approve(
    workspace: &Path,
    yes: bool,
    store: &TrustStore,
    input: &mut dyn BufRead,
    terminal: bool,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let (waiting, problems) = pending(workspace, store)?;
    for p in &problems {
        writeln!(out, "warning: {}", escape_invisible(p))?;
    }
    if waiting.is_empty() {
        writeln!(out, "No server of {} waits for approval.", shown_path(workspace))?;
        return Ok(());
    }
    writeln!(
        out,
        "{} in {} wait{} for your approval. Once approved, gm starts {} with your rights whenever it serves this workspace:",
        if waiting.len() == 1 { "1 server".to_owned() } else { format!("{} servers", waiting.len()) },
        shown_path(&workspace.join(".gm/mcp.json")),
        if waiting.len() == 1 { "s" } else { "" },
        if waiting.len() == 1 { "it" } else { "them" },
    )?;
    for p in &waiting {
        show(p, out)?;
    }
    if !yes && !terminal {
        return Err(CliError::NotATerminal);
    }
    let mut approved = Vec::new();
    for p in &waiting {
        let ok = yes || {
            write!(out, "Approve {}? [y/N] ", escape_invisible(&p.name))?;
            out.flush()?;
            let mut answer = String::new();
            input.read_line(&mut answer)?;
            matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes")
        };
        if ok {
            store.approve(workspace, p)?;
            approved.push(p.name.as_str());
        }
    }
    if approved.is_empty() {
        writeln!(out, "Nothing was approved.")?;
    } else {
        writeln!(
            out,
            "Approved: {}. A gm serving this workspace starts them at their next call.",
            escape_invisible(&approved.join(", "))
        )?;
    }
    Ok(())
}

/// An entry in full: the command line, the file it runs when that is not plain from the
/// command (`PATH` and the cwd change it), the cwd and the environment as written. Every
/// string is escaped: the entry is a stranger's, and a control character in it would rewrite
/// what the terminal shows.
fn show(p: &Pending, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(out, "\n  {}", escape_invisible(&p.name))?;
    writeln!(out, "    command: {}", escape_invisible(&p.command_line))?;
    if let Some(program) = p.program_shown() {
        writeln!(out, "    program: {program}")?;
    }
    writeln!(out, "    cwd:     {}", escape_invisible(&p.cwd))?;
    let env = p.env_shown();
    if env.is_empty() {
        writeln!(out, "    env:     (none besides gm's environment)")?;
    } else {
        for (i, line) in env.iter().enumerate() {
            writeln!(out, "    {}{line}", if i == 0 { "env:     " } else { "         " })?;
        }
        if p.env_expands() {
            writeln!(out, "             (as written: a ${{NAME}} is filled from your environment when it starts)")?;
        }
    }
    writeln!(out)
}

fn list(workspace: &Path, store: &TrustStore, out: &mut dyn Write) -> Result<(), CliError> {
    let approvals = store.list(workspace)?;
    if approvals.is_empty() {
        writeln!(out, "No approvals in {}.", shown_path(workspace))?;
        return Ok(());
    }
    // Which approvals still match the entry in .gm/mcp.json.
    let current: Vec<Pending> = mcp_config::load(workspace, None)
        .map(|c| c.servers.iter().filter(|n| super::needs_consent(n)).map(|n| Pending::of(n, workspace)).collect())
        .unwrap_or_default();
    writeln!(out, "Approved in {}:", shown_path(workspace))?;
    for (name, a) in &approvals {
        let state = match current.iter().find(|p| &p.name == name) {
            Some(p) if p.sha256 == a.sha256 => "",
            Some(_) => " [changed since: needs approval again]",
            None => " [no longer in .gm/mcp.json]",
        };
        let env = if a.env_names.is_empty() { String::new() } else { format!(", env: {}", a.env_names.join(", ")) };
        let line = format!("  {name}: {} (approved {}{env}){state}", a.command_line, a.approved_at);
        writeln!(out, "{}", escape_invisible(&line))?;
    }
    Ok(())
}
