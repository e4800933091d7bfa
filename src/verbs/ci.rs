//! ci_status: the CI runs of the current HEAD, through the GitHub CLI (`gh api`), on the host
//! origin points at, following every page of runs.

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Ctx, VerbError};
use crate::git::Repo;

const PER_PAGE: usize = 100;
const GH_TIMEOUT: Duration = Duration::from_secs(60);
const MAX_PAGES: usize = 50;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CiStatusArgs {
    /// The commit whose runs to list (default HEAD).
    pub rev: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct CiStatusReply {
    pub host: String,
    pub repo: String,
    pub sha: String,
    /// success, failure, pending (some run not finished) or none (no runs).
    pub state: &'static str,
    pub runs: Vec<Value>,
    pub pages: usize,
}

/// `(host, owner/repo)` from a remote URL: https://host/o/r(.git), git@host:o/r(.git),
/// ssh://git@host/o/r(.git).
pub fn parse_remote(url: &str) -> Option<(String, String)> {
    let url = url.trim().trim_end_matches('/').trim_end_matches(".git");
    let (host, path) = if let Some(rest) = url.split_once("://").map(|(_, r)| r) {
        let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
        rest.split_once('/')?
    } else {
        let (userhost, path) = url.split_once(':')?;
        (userhost.rsplit_once('@').map_or(userhost, |(_, h)| h), path)
    };
    let host = host.split(':').next()?.to_owned();
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    (parts.len() >= 2 && !host.is_empty())
        .then(|| (host, format!("{}/{}", parts[parts.len() - 2], parts[parts.len() - 1])))
}

pub async fn ci_status(ctx: Ctx, args: CiStatusArgs) -> Result<CiStatusReply, VerbError> {
    let workspace = ctx.workspace.clone();
    let rev = args.rev.unwrap_or_else(|| "HEAD".into());
    let (host, repo, sha) = tokio::task::spawn_blocking(move || -> Result<_, VerbError> {
        let repo = Repo::open(&workspace)?;
        let remote =
            repo.find_remote("origin").map_err(|_| VerbError::Refused("the repository has no origin remote".into()))?;
        let url = remote.url().unwrap_or("").to_owned();
        let (host, name) = parse_remote(&url)
            .ok_or_else(|| VerbError::Refused(format!("origin ({url}) is not a URL of a hosted repository")))?;
        let sha = repo.resolve(&rev)?;
        Ok((host, name, sha.to_string()))
    })
    .await
    .map_err(|e| VerbError::Internal(e.to_string()))??;

    let mut runs = Vec::new();
    let mut pages = 0;
    loop {
        pages += 1;
        let endpoint = format!("repos/{repo}/actions/runs?head_sha={sha}&per_page={PER_PAGE}&page={pages}");
        let page = gh(&["api", "--hostname", &host, &endpoint]).await?;
        let batch = page["workflow_runs"].as_array().cloned().unwrap_or_default();
        let total = page["total_count"].as_u64().unwrap_or(0) as usize;
        let n = batch.len();
        runs.extend(batch.into_iter().map(|r| {
            json!({
                "id": r["id"], "name": r["name"], "status": r["status"], "conclusion": r["conclusion"],
                "event": r["event"], "url": r["html_url"], "createdAt": r["created_at"], "updatedAt": r["updated_at"],
            })
        }));
        if n < PER_PAGE || runs.len() >= total || pages >= MAX_PAGES {
            break;
        }
    }
    let state = if runs.is_empty() {
        "none"
    } else if runs.iter().any(|r| r["status"] != "completed") {
        "pending"
    } else if runs.iter().all(|r| matches!(r["conclusion"].as_str(), Some("success" | "skipped" | "neutral"))) {
        "success"
    } else {
        "failure"
    };
    Ok(CiStatusReply { host, repo, sha, state, runs, pages })
}

/// Runs `gh` and parses its JSON output; a missing or logged-out gh is a clear error.
async fn gh(args: &[&str]) -> Result<Value, VerbError> {
    let run =
        tokio::process::Command::new("gh").args(args).stdin(std::process::Stdio::null()).kill_on_drop(true).output();
    let out = match tokio::time::timeout(GH_TIMEOUT, run).await {
        Err(_) => return Err(VerbError::Timeout(format!("gh did not answer within {} s", GH_TIMEOUT.as_secs()))),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(VerbError::Unavailable(
                "the GitHub CLI (gh) is not installed or not on PATH: install it and run `gh auth login`".into(),
            ))
        }
        Ok(Err(e)) => return Err(VerbError::Unavailable(format!("cannot run gh: {e}"))),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        if stderr.contains("auth login") || stderr.contains("not logged") || stderr.contains("authentication") {
            return Err(VerbError::Refused(format!(
                "gh is not logged in to this host: run `gh auth login` ({})",
                stderr.trim()
            )));
        }
        return Err(VerbError::Unavailable(format!("gh api failed: {}", stderr.trim())));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| VerbError::Unavailable(format!("gh printed something that is not JSON: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_of_every_shape_parse() {
        let want = Some(("github.com".to_owned(), "owner/repo".to_owned()));
        assert_eq!(parse_remote("https://github.com/owner/repo.git"), want);
        assert_eq!(parse_remote("https://user:token@github.com/owner/repo"), want);
        assert_eq!(parse_remote("git@github.com:owner/repo.git"), want);
        assert_eq!(parse_remote("ssh://git@github.com:22/owner/repo.git"), want);
        assert_eq!(parse_remote("/srv/git/repo.git"), None);
    }
}
