//! Git verbs through libgit2 (`git2`), never by running `git`: status, state, add, rm, commit,
//! push, log, diff, show, fetch, pull, checkout, branch. They work on the repository that holds
//! the workspace. Remotes authenticate as git would: the ssh agent, then git's credential
//! helpers.
//!
//! Each verb runs on a blocking thread: libgit2 does file and network I/O synchronously.

use std::path::{Path, PathBuf};

use git2::{
    BranchType, Cred, CredentialType, Diff, DiffFormat, DiffOptions, FetchOptions, IndexAddOption, Oid, PushOptions,
    RemoteCallbacks, Repository, Signature, Status, StatusOptions,
};
use gm_actors::cancel::CancelToken;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Ctx, VerbError};

/// Inline bytes of a diff's patch text; past this the reply keeps the head and spills the rest.
const INLINE_PATCH: usize = 256 * 1024;
const DEFAULT_LOG: usize = 20;
const MAX_LOG: usize = 10_000;

#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("{0} is not inside a git repository")]
    NotARepository(PathBuf),
    #[error("{0}")]
    Git(String),
    #[error("unknown revision or reference '{0}'")]
    UnknownRev(String),
    #[error("{0}")]
    Refused(String),
    #[error("the push was rejected: {0}")]
    Rejected(String),
    #[error("{0}")]
    Conflict(String),
    /// The remote could not be reached or spoke badly: worth a retry.
    #[error("the remote is unavailable: {0}")]
    Network(String),
    #[error("the call was cancelled")]
    Cancelled,
}

impl From<git2::Error> for GitError {
    fn from(e: git2::Error) -> Self {
        use git2::{ErrorClass, ErrorCode};
        if e.code() == ErrorCode::User && e.class() == ErrorClass::Callback {
            // A progress callback said stop: the call was cancelled.
            return GitError::Cancelled;
        }
        match e.class() {
            ErrorClass::Net | ErrorClass::Http | ErrorClass::Ssh | ErrorClass::Ssl => {
                GitError::Network(e.message().to_owned())
            }
            _ => GitError::Git(e.message().to_owned()),
        }
    }
}

impl From<GitError> for VerbError {
    fn from(e: GitError) -> Self {
        match e {
            GitError::UnknownRev(_) | GitError::NotARepository(_) => VerbError::InvalidArgs(e.to_string()),
            GitError::Refused(m) | GitError::Conflict(m) => VerbError::Refused(m),
            GitError::Rejected(_) => VerbError::Refused(e.to_string()),
            GitError::Git(m) => VerbError::Internal(format!("git: {m}")),
            GitError::Network(_) => VerbError::Unavailable(e.to_string()),
            GitError::Cancelled => VerbError::Cancelled,
        }
    }
}

pub(super) fn open(workspace: &Path) -> Result<Repository, GitError> {
    Repository::discover(workspace).map_err(|_| GitError::NotARepository(workspace.to_owned()))
}

/// Runs `f` on the workspace's repository on a blocking thread.
pub(super) async fn with_repo<T: Send + 'static>(
    ctx: &Ctx,
    f: impl FnOnce(&Repository, &Path) -> Result<T, GitError> + Send + 'static,
) -> Result<T, VerbError> {
    let workspace = ctx.workspace.clone();
    tokio::task::spawn_blocking(move || {
        let repo = open(&workspace)?;
        f(&repo, &workspace)
    })
    .await
    .map_err(|e| VerbError::Internal(format!("git failed: {e}")))?
    .map_err(VerbError::from)
}

/// A path given to a git verb, relative to the repository's root.
fn repo_path(repo: &Repository, workspace: &Path, path: &str) -> Result<String, GitError> {
    let root = repo.workdir().ok_or_else(|| GitError::Refused("a bare repository has no working tree".into()))?;
    let root = root.canonicalize().unwrap_or_else(|_| root.to_owned());
    let full = if Path::new(path).is_absolute() { PathBuf::from(path) } else { workspace.join(path) };
    let full = normalize(&full);
    let rel = full
        .strip_prefix(&root)
        .map_err(|_| GitError::Refused(format!("{path} is outside the repository at {}", root.display())))?;
    Ok(rel.to_string_lossy().replace('\\', "/"))
}

fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

fn status_word(s: Status, index: bool) -> Option<&'static str> {
    let (new, modified, deleted, renamed, typechange) = if index {
        (
            Status::INDEX_NEW,
            Status::INDEX_MODIFIED,
            Status::INDEX_DELETED,
            Status::INDEX_RENAMED,
            Status::INDEX_TYPECHANGE,
        )
    } else {
        (Status::WT_NEW, Status::WT_MODIFIED, Status::WT_DELETED, Status::WT_RENAMED, Status::WT_TYPECHANGE)
    };
    if s.contains(new) {
        Some(if index { "added" } else { "untracked" })
    } else if s.contains(modified) {
        Some("modified")
    } else if s.contains(deleted) {
        Some("deleted")
    } else if s.contains(renamed) {
        Some("renamed")
    } else if s.contains(typechange) {
        Some("typechange")
    } else {
        None
    }
}

#[derive(Debug, Serialize)]
pub struct StatusEntry {
    pub path: String,
    /// Staged change: added, modified, deleted, renamed, typechange.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<&'static str>,
    /// Unstaged change: untracked, modified, deleted, renamed, typechange.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worktree: Option<&'static str>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub conflicted: bool,
}

fn statuses(repo: &Repository) -> Result<Vec<StatusEntry>, GitError> {
    let mut opts = StatusOptions::new();
    opts.include_untracked(true).recurse_untracked_dirs(true).renames_head_to_index(true).include_ignored(false);
    let list = repo.statuses(Some(&mut opts))?;
    Ok(list
        .iter()
        .filter_map(|e| {
            let path = e.path()?.to_owned();
            if path.starts_with(".gm/") {
                return None;
            }
            let s = e.status();
            Some(StatusEntry {
                path,
                index: status_word(s, true),
                worktree: status_word(s, false),
                conflicted: s.contains(Status::CONFLICTED),
            })
        })
        .collect())
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Debug, Serialize)]
pub struct StatusReply {
    pub branch: Option<String>,
    pub clean: bool,
    pub entries: Vec<StatusEntry>,
}

pub async fn git_status(ctx: Ctx, _: NoArgs) -> Result<StatusReply, VerbError> {
    with_repo(&ctx, |repo, _| {
        let entries = statuses(repo)?;
        Ok(StatusReply { branch: branch_name(repo), clean: entries.is_empty(), entries })
    })
    .await
}

pub(super) fn branch_name(repo: &Repository) -> Option<String> {
    let head = repo.head().ok()?;
    head.is_branch().then(|| head.shorthand().map(str::to_owned)).flatten()
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StateReply {
    pub branch: Option<String>,
    pub head: Option<String>,
    pub detached: bool,
    pub upstream: Option<String>,
    pub ahead: Option<usize>,
    pub behind: Option<usize>,
    /// clean, merge, revert, cherry-pick, bisect, rebase, apply-mailbox...
    pub operation: String,
    pub dirty: bool,
    pub conflicts: usize,
}

pub async fn git_state(ctx: Ctx, _: NoArgs) -> Result<StateReply, VerbError> {
    with_repo(&ctx, |repo, _| {
        let head = repo.head().ok();
        let head_oid = head.as_ref().and_then(|h| h.target());
        let branch = branch_name(repo);
        let (mut upstream, mut ahead, mut behind) = (None, None, None);
        if let Some(name) = &branch {
            if let Ok(b) = repo.find_branch(name, BranchType::Local) {
                if let Ok(up) = b.upstream() {
                    upstream = up.name().ok().flatten().map(str::to_owned);
                    if let (Some(local), Some(remote)) = (head_oid, up.get().target()) {
                        if let Ok((a, b)) = repo.graph_ahead_behind(local, remote) {
                            ahead = Some(a);
                            behind = Some(b);
                        }
                    }
                }
            }
        }
        let entries = statuses(repo)?;
        Ok(StateReply {
            detached: repo.head_detached().unwrap_or(false),
            branch,
            head: head_oid.map(|o| o.to_string()),
            upstream,
            ahead,
            behind,
            operation: format!("{:?}", repo.state()).to_lowercase(),
            dirty: !entries.is_empty(),
            conflicts: entries.iter().filter(|e| e.conflicted).count(),
        })
    })
    .await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddArgs {
    /// Paths or pathspecs to stage (relative to the workspace); ["."] stages everything.
    pub paths: Vec<String>,
}

pub async fn git_add(ctx: Ctx, args: AddArgs) -> Result<StatusReply, VerbError> {
    if args.paths.is_empty() {
        return Err(VerbError::InvalidArgs("paths is empty; pass [\".\"] to stage everything".into()));
    }
    with_repo(&ctx, move |repo, workspace| {
        let specs: Vec<String> = args.paths.iter().map(|p| repo_path(repo, workspace, p)).collect::<Result<_, _>>()?;
        let specs: Vec<String> = specs.into_iter().map(|s| if s.is_empty() { ".".into() } else { s }).collect();
        let mut index = repo.index()?;
        let mut matched = 0usize;
        let mut count = |_: &Path, _: &[u8]| {
            matched += 1;
            0
        };
        index.add_all(specs.iter(), IndexAddOption::DEFAULT, Some(&mut count))?;
        // Deleted files are staged as deletions too, as `git add` does.
        index.update_all(specs.iter(), None)?;
        index.write()?;
        let entries = statuses(repo)?;
        Ok(StatusReply { branch: branch_name(repo), clean: entries.is_empty(), entries })
    })
    .await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RmArgs {
    /// Tracked paths to remove (relative to the workspace).
    pub paths: Vec<String>,
    /// Only stop tracking them; leave the files in the working tree (default false).
    pub cached: Option<bool>,
}

pub async fn git_rm(ctx: Ctx, args: RmArgs) -> Result<StatusReply, VerbError> {
    if args.paths.is_empty() {
        return Err(VerbError::InvalidArgs("paths is empty".into()));
    }
    with_repo(&ctx, move |repo, workspace| {
        let rels: Vec<String> = args.paths.iter().map(|p| repo_path(repo, workspace, p)).collect::<Result<_, _>>()?;
        let mut index = repo.index()?;
        // Check every path first: nothing is removed unless all of them can be.
        for rel in &rels {
            if index.get_path(Path::new(rel), 0).is_none() {
                return Err(GitError::Refused(format!("{rel} is not tracked")));
            }
        }
        for rel in &rels {
            index.remove_path(Path::new(rel))?;
        }
        index.write()?;
        if !args.cached.unwrap_or(false) {
            if let Some(root) = repo.workdir() {
                for rel in &rels {
                    let _ = std::fs::remove_file(root.join(rel));
                }
            }
        }
        let entries = statuses(repo)?;
        Ok(StatusReply { branch: branch_name(repo), clean: entries.is_empty(), entries })
    })
    .await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CommitArgs {
    /// The commit message.
    pub message: String,
    /// Commit even when nothing is staged (default false).
    pub allow_empty: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct CommitReply {
    pub sha: String,
    pub branch: Option<String>,
    pub summary: String,
    pub parents: Vec<String>,
}

pub(super) fn signature(repo: &Repository) -> Result<Signature<'static>, GitError> {
    repo.signature().map_err(|_| {
        GitError::Refused("no author: set user.name and user.email in git's config (git config user.name ...)".into())
    })
}

pub async fn git_commit(ctx: Ctx, args: CommitArgs) -> Result<CommitReply, VerbError> {
    if args.message.trim().is_empty() {
        return Err(VerbError::InvalidArgs("message is empty".into()));
    }
    with_repo(&ctx, move |repo, _| {
        let sig = signature(repo)?;
        let mut index = repo.index()?;
        if index.has_conflicts() {
            return Err(GitError::Conflict(
                "the index has unresolved conflicts; resolve and git_add them first".into(),
            ));
        }
        let tree_id = index.write_tree()?;
        let tree = repo.find_tree(tree_id)?;
        let parent = repo.head().ok().and_then(|h| h.peel_to_commit().ok());
        let unchanged = match &parent {
            Some(p) => p.tree_id() == tree_id,
            None => tree.is_empty(),
        };
        if unchanged && !args.allow_empty.unwrap_or(false) {
            return Err(GitError::Refused(
                "nothing to commit: the staged tree equals HEAD's (git_add first, or allowEmpty: true)".into(),
            ));
        }
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        let oid = repo.commit(Some("HEAD"), &sig, &sig, &args.message, &tree, &parents)?;
        Ok(CommitReply {
            sha: oid.to_string(),
            branch: branch_name(repo),
            summary: args.message.lines().next().unwrap_or("").to_owned(),
            parents: parents.iter().map(|p| p.id().to_string()).collect(),
        })
    })
    .await
}

/// Callbacks that authenticate as git does (ssh agent, then credential helpers) and stop the
/// transfer when `cancel` trips.
pub(super) fn callbacks<'a>(
    repo: &'a Repository,
    tried: &'a std::cell::Cell<u32>,
    cancel: &'a CancelToken,
) -> RemoteCallbacks<'a> {
    let mut cb = RemoteCallbacks::new();
    cb.transfer_progress(|_| !cancel.is_cancelled());
    cb.sideband_progress(|_| !cancel.is_cancelled());
    cb.push_negotiation(|_| {
        if cancel.is_cancelled() {
            Err(git2::Error::new(git2::ErrorCode::User, git2::ErrorClass::Callback, "cancelled"))
        } else {
            Ok(())
        }
    });
    cb.credentials(move |url, user, allowed| {
        tried.set(tried.get() + 1);
        if tried.get() > 4 {
            return Err(git2::Error::from_str("authentication failed (ssh agent and credential helpers were tried)"));
        }
        if allowed.contains(CredentialType::SSH_KEY) {
            if let Some(user) = user {
                return Cred::ssh_key_from_agent(user);
            }
        }
        if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
            if let Ok(config) = repo.config() {
                return Cred::credential_helper(&config, url, user);
            }
        }
        Cred::default()
    });
    cb
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PushArgs {
    /// The remote (default origin).
    pub remote: Option<String>,
    /// What to push: a branch name, or a refspec like "HEAD:refs/heads/main" or a full sha to a ref (default: the current branch to the same name).
    pub refspec: Option<String>,
    /// Allow a non-fast-forward update (default false).
    pub force: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct PushReply {
    pub remote: String,
    pub refspec: String,
    pub pushed: String,
}

pub async fn git_push(ctx: Ctx, args: PushArgs) -> Result<PushReply, VerbError> {
    let cancel = ctx.cancel.clone();
    with_repo(&ctx, move |repo, _| {
        let remote_name = args.remote.unwrap_or_else(|| "origin".into());
        let mut remote =
            repo.find_remote(&remote_name).map_err(|_| GitError::UnknownRev(format!("remote {remote_name}")))?;
        let spec = match args.refspec {
            Some(s) if s.contains(':') => s,
            Some(b) => format!("refs/heads/{b}:refs/heads/{b}"),
            None => {
                let b =
                    branch_name(repo).ok_or_else(|| GitError::Refused("HEAD is detached: give a refspec".into()))?;
                format!("refs/heads/{b}:refs/heads/{b}")
            }
        };
        let (src, dst) = spec.split_once(':').unwrap_or((&spec, &spec));
        let src_oid = resolve(repo, src.trim_start_matches('+'))?;
        let spec = format!("{}{src_oid}:{dst}", if args.force.unwrap_or(false) { "+" } else { "" });
        push_spec(repo, &mut remote, &spec, &cancel)?;
        Ok(PushReply { remote: remote_name, refspec: spec, pushed: src_oid.to_string() })
    })
    .await
}

/// Pushes one refspec. A rejection — an error from libgit2, or a ref the remote refused in its
/// status report — is a [`GitError::Rejected`], so no caller mistakes it for success.
pub(super) fn push_spec(
    repo: &Repository,
    remote: &mut git2::Remote,
    spec: &str,
    cancel: &CancelToken,
) -> Result<(), GitError> {
    let tried = std::cell::Cell::new(0);
    let rejected = std::cell::RefCell::new(None);
    let mut cb = callbacks(repo, &tried, cancel);
    cb.push_update_reference(|refname, status| {
        if let Some(msg) = status {
            *rejected.borrow_mut() = Some(format!("{refname}: {msg}"));
        }
        Ok(())
    });
    let mut opts = PushOptions::new();
    opts.remote_callbacks(cb);
    remote.push(&[spec], Some(&mut opts)).map_err(|e| {
        let m = e.message().to_owned();
        if cancel.is_cancelled() {
            return GitError::Cancelled;
        }
        if m.contains("fast-forward") || m.contains("non-fast") || m.contains("not present locally") {
            GitError::Rejected(format!("{m}; the remote has commits this branch lacks: git_pull first"))
        } else {
            GitError::Git(m)
        }
    })?;
    drop(opts);
    match rejected.into_inner() {
        Some(why) => {
            Err(GitError::Rejected(format!("{why}; the remote has commits this branch lacks: git_pull first")))
        }
        None => Ok(()),
    }
}

pub(super) fn resolve(repo: &Repository, rev: &str) -> Result<Oid, GitError> {
    let obj = repo.revparse_single(rev).map_err(|_| GitError::UnknownRev(rev.to_owned()))?;
    Ok(obj.peel_to_commit().map(|c| c.id()).unwrap_or_else(|_| obj.id()))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchArgs {
    /// The remote (default origin).
    pub remote: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct FetchReply {
    pub remote: String,
    /// Remote-tracking refs and where they point now.
    pub refs: Vec<Value>,
}

pub(super) fn do_fetch(repo: &Repository, remote_name: &str, cancel: &CancelToken) -> Result<Vec<Value>, GitError> {
    let mut remote =
        repo.find_remote(remote_name).map_err(|_| GitError::UnknownRev(format!("remote {remote_name}")))?;
    let tried = std::cell::Cell::new(0);
    let mut opts = FetchOptions::new();
    opts.remote_callbacks(callbacks(repo, &tried, cancel));
    remote.fetch::<&str>(&[], Some(&mut opts), None).map_err(|e| {
        if cancel.is_cancelled() {
            GitError::Cancelled
        } else {
            GitError::from(e)
        }
    })?;
    let prefix = format!("refs/remotes/{remote_name}/");
    let mut refs = Vec::new();
    for r in repo.references()?.flatten() {
        if let (Some(name), Some(oid)) = (r.name(), r.target()) {
            if name.starts_with(&prefix) {
                refs.push(json!({ "ref": name, "sha": oid.to_string() }));
            }
        }
    }
    Ok(refs)
}

pub async fn git_fetch(ctx: Ctx, args: FetchArgs) -> Result<FetchReply, VerbError> {
    let cancel = ctx.cancel.clone();
    with_repo(&ctx, move |repo, _| {
        let remote = args.remote.unwrap_or_else(|| "origin".into());
        let refs = do_fetch(repo, &remote, &cancel)?;
        Ok(FetchReply { remote, refs })
    })
    .await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PullArgs {
    /// The remote (default origin).
    pub remote: Option<String>,
    /// The remote branch (default: the current branch's name).
    pub branch: Option<String>,
    /// Fast-forward only (default true); false allows a merge commit when the histories diverged.
    pub ff_only: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct PullReply {
    /// up-to-date, fast-forward or merge.
    pub result: &'static str,
    pub head: String,
}

pub async fn git_pull(ctx: Ctx, args: PullArgs) -> Result<PullReply, VerbError> {
    let cancel = ctx.cancel.clone();
    with_repo(&ctx, move |repo, _| {
        let remote = args.remote.unwrap_or_else(|| "origin".into());
        let branch = match args.branch.or_else(|| branch_name(repo)) {
            Some(b) => b,
            None => return Err(GitError::Refused("HEAD is detached: give a branch".into())),
        };
        if !statuses(repo)?.iter().all(|e| e.index.is_none() && e.worktree.is_none_or(|w| w == "untracked")) {
            return Err(GitError::Refused("the working tree has uncommitted changes: commit them first, then pull".into()));
        }
        do_fetch(repo, &remote, &cancel)?;
        let theirs_ref = format!("refs/remotes/{remote}/{branch}");
        let theirs = repo.find_reference(&theirs_ref).map_err(|_| GitError::UnknownRev(theirs_ref.clone()))?;
        let theirs_commit = repo.reference_to_annotated_commit(&theirs)?;
        let (analysis, _) = repo.merge_analysis(&[&theirs_commit])?;
        let head_name = repo.head()?.name().map(str::to_owned).unwrap_or_else(|| "HEAD".into());
        if analysis.is_up_to_date() {
            return Ok(PullReply { result: "up-to-date", head: resolve(repo, "HEAD")?.to_string() });
        }
        let target = theirs_commit.id();
        if analysis.is_fast_forward() {
            let commit = repo.find_commit(target)?;
            repo.checkout_tree(commit.as_object(), Some(git2::build::CheckoutBuilder::new().safe()))?;
            repo.find_reference(&head_name)?.set_target(target, "gm: pull fast-forward")?;
            return Ok(PullReply { result: "fast-forward", head: target.to_string() });
        }
        if args.ff_only.unwrap_or(true) {
            return Err(GitError::Refused(format!(
                "{branch} and {theirs_ref} have diverged: a fast-forward is not possible (pull with ffOnly: false to merge)"
            )));
        }
        // Merge in memory first: a conflict changes nothing.
        let ours = repo.head()?.peel_to_commit()?;
        let theirs = repo.find_commit(target)?;
        let mut merged = repo.merge_commits(&ours, &theirs, None)?;
        if merged.has_conflicts() {
            let paths: Vec<String> = merged
                .conflicts()?
                .flatten()
                .filter_map(|c| c.our.or(c.their).and_then(|e| String::from_utf8(e.path).ok()))
                .collect();
            return Err(GitError::Conflict(format!("merging {theirs_ref} conflicts in {paths:?}; nothing was changed")));
        }
        let tree = repo.find_tree(merged.write_tree_to(repo)?)?;
        let sig = signature(repo)?;
        let msg = format!("Merge {theirs_ref} into {branch}");
        let oid = repo.commit(None, &sig, &sig, &msg, &tree, &[&ours, &theirs])?;
        let commit = repo.find_commit(oid)?;
        repo.checkout_tree(commit.as_object(), Some(git2::build::CheckoutBuilder::new().safe()))?;
        repo.find_reference(&head_name)?.set_target(oid, "gm: pull merge")?;
        Ok(PullReply { result: "merge", head: oid.to_string() })
    })
    .await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogArgs {
    /// A revision or range: "HEAD" (default), "main", "a1b2c3..HEAD".
    pub range: Option<String>,
    /// Only commits that touch this path.
    pub path: Option<String>,
    /// Commits to return (default 20, at most 10000).
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct LogEntry {
    pub sha: String,
    pub author: String,
    pub email: String,
    pub time: i64,
    pub summary: String,
    pub parents: usize,
}

#[derive(Debug, Serialize)]
pub struct LogReply {
    pub commits: Vec<LogEntry>,
}

pub async fn git_log(ctx: Ctx, args: LogArgs) -> Result<LogReply, VerbError> {
    let limit = args.limit.unwrap_or(DEFAULT_LOG);
    if limit == 0 || limit > MAX_LOG {
        return Err(VerbError::InvalidArgs(format!("limit must be between 1 and {MAX_LOG}")));
    }
    with_repo(&ctx, move |repo, workspace| {
        let mut walk = repo.revwalk()?;
        walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::TIME)?;
        let range = args.range.unwrap_or_else(|| "HEAD".into());
        if range.contains("..") {
            walk.push_range(&range).map_err(|_| GitError::UnknownRev(range.clone()))?;
        } else {
            walk.push(resolve(repo, &range)?)?;
        }
        let path = args.path.map(|p| repo_path(repo, workspace, &p)).transpose()?;
        let mut out = Vec::new();
        for oid in walk {
            let commit = repo.find_commit(oid?)?;
            if let Some(p) = &path {
                if !touches(repo, &commit, p)? {
                    continue;
                }
            }
            out.push(LogEntry {
                sha: commit.id().to_string(),
                author: commit.author().name().unwrap_or("").to_owned(),
                email: commit.author().email().unwrap_or("").to_owned(),
                time: commit.time().seconds(),
                summary: commit.summary().unwrap_or("").to_owned(),
                parents: commit.parent_count(),
            });
            if out.len() == limit {
                break;
            }
        }
        Ok(LogReply { commits: out })
    })
    .await
}

fn touches(repo: &Repository, commit: &git2::Commit, path: &str) -> Result<bool, GitError> {
    let tree = commit.tree()?;
    let parent = commit.parent(0).ok().map(|p| p.tree()).transpose()?;
    let mut opts = DiffOptions::new();
    opts.pathspec(path);
    let diff = repo.diff_tree_to_tree(parent.as_ref(), Some(&tree), Some(&mut opts))?;
    Ok(diff.deltas().len() > 0)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffArgs {
    /// Compare the index with HEAD (what a commit would record) instead of the working tree with the index.
    pub staged: Option<bool>,
    /// Compare this revision ...
    pub from: Option<String>,
    /// ... with this one (default: the working tree).
    pub to: Option<String>,
    /// Only this path.
    pub path: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct DiffReply {
    pub files: Vec<Value>,
    pub insertions: usize,
    pub deletions: usize,
    pub patch: String,
    /// Bytes of the patch left out of `patch`; the whole is in `patchFile`.
    #[serde(rename = "patchCut")]
    pub patch_cut: usize,
    #[serde(rename = "patchFile", skip_serializing_if = "Option::is_none")]
    pub patch_file: Option<String>,
}

pub(super) fn describe(diff: &Diff, out_dir: &Path) -> Result<DiffReply, GitError> {
    let stats = diff.stats()?;
    let mut files = Vec::new();
    for (i, d) in diff.deltas().enumerate() {
        let path = d.new_file().path().or_else(|| d.old_file().path()).map(|p| p.to_string_lossy().into_owned());
        let (mut add, mut del) = (0, 0);
        if let Ok(Some(p)) = git2::Patch::from_diff(diff, i) {
            if let Ok((_, a, r)) = p.line_stats() {
                add = a;
                del = r;
            }
        }
        files.push(json!({ "path": path, "status": format!("{:?}", d.status()).to_lowercase(), "insertions": add, "deletions": del }));
    }
    let mut patch = Vec::new();
    diff.print(DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            patch.push(line.origin() as u8);
        }
        patch.extend_from_slice(line.content());
        true
    })?;
    let whole = String::from_utf8_lossy(&patch).into_owned();
    let (text, cut, file) = if whole.len() > INLINE_PATCH {
        let path = super::out::unique_path(out_dir, "diff", ".patch");
        let _ = std::fs::create_dir_all(out_dir);
        let saved = std::fs::write(&path, &whole).is_ok();
        let mut keep = INLINE_PATCH;
        while !whole.is_char_boundary(keep) {
            keep -= 1;
        }
        (whole[..keep].to_owned(), whole.len() - keep, saved.then(|| path.to_string_lossy().into_owned()))
    } else {
        (whole, 0, None)
    };
    Ok(DiffReply {
        files,
        insertions: stats.insertions(),
        deletions: stats.deletions(),
        patch: text,
        patch_cut: cut,
        patch_file: file,
    })
}

pub async fn git_diff(ctx: Ctx, args: DiffArgs) -> Result<DiffReply, VerbError> {
    let out_dir = ctx.state_dir.join("out");
    with_repo(&ctx, move |repo, workspace| {
        let mut opts = DiffOptions::new();
        if let Some(p) = &args.path {
            opts.pathspec(repo_path(repo, workspace, p)?);
        }
        let tree_of = |rev: &str| -> Result<git2::Tree, GitError> {
            let obj = repo.revparse_single(rev).map_err(|_| GitError::UnknownRev(rev.to_owned()))?;
            Ok(obj.peel_to_tree()?)
        };
        let diff = match (&args.from, &args.to, args.staged.unwrap_or(false)) {
            (Some(from), Some(to), _) => {
                repo.diff_tree_to_tree(Some(&tree_of(from)?), Some(&tree_of(to)?), Some(&mut opts))?
            }
            (Some(from), None, _) => repo.diff_tree_to_workdir_with_index(Some(&tree_of(from)?), Some(&mut opts))?,
            (None, Some(_), _) => return Err(GitError::Refused("`to` needs a `from`".into())),
            (None, None, true) => {
                let head = repo.head().ok().and_then(|h| h.peel_to_tree().ok());
                repo.diff_tree_to_index(head.as_ref(), None, Some(&mut opts))?
            }
            (None, None, false) => repo.diff_index_to_workdir(None, Some(&mut opts))?,
        };
        describe(&diff, &out_dir)
    })
    .await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShowArgs {
    /// The commit to show (default HEAD).
    pub rev: Option<String>,
}

pub async fn git_show(ctx: Ctx, args: ShowArgs) -> Result<Value, VerbError> {
    let out_dir = ctx.state_dir.join("out");
    with_repo(&ctx, move |repo, _| {
        let rev = args.rev.unwrap_or_else(|| "HEAD".into());
        let oid = resolve(repo, &rev)?;
        let commit = repo.find_commit(oid).map_err(|_| GitError::UnknownRev(rev.clone()))?;
        let tree = commit.tree()?;
        let parent = commit.parent(0).ok().map(|p| p.tree()).transpose()?;
        let diff = repo.diff_tree_to_tree(parent.as_ref(), Some(&tree), None)?;
        let d = describe(&diff, &out_dir)?;
        Ok(json!({
            "sha": oid.to_string(),
            "author": commit.author().name(),
            "email": commit.author().email(),
            "time": commit.time().seconds(),
            "message": commit.message(),
            "parents": commit.parent_ids().map(|p| p.to_string()).collect::<Vec<_>>(),
            "diff": d,
        }))
    })
    .await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckoutArgs {
    /// A branch to switch to, or a revision to detach HEAD at.
    pub rev: String,
    /// Create the branch `rev` at HEAD first (default false).
    pub create: Option<bool>,
}

pub async fn git_checkout(ctx: Ctx, args: CheckoutArgs) -> Result<StateReply, VerbError> {
    let state_ctx = ctx.clone();
    with_repo(&ctx, move |repo, _| {
        if args.create.unwrap_or(false) {
            let head = repo.head()?.peel_to_commit()?;
            repo.branch(&args.rev, &head, false).map_err(|e| GitError::Refused(e.message().to_owned()))?;
        }
        let mut opts = git2::build::CheckoutBuilder::new();
        opts.safe();
        if let Ok(branch) = repo.find_branch(&args.rev, BranchType::Local) {
            let name = branch.get().name().map(str::to_owned).unwrap_or_default();
            let commit = branch.get().peel_to_commit()?;
            repo.checkout_tree(commit.as_object(), Some(&mut opts)).map_err(|e| checkout_refused(&e))?;
            repo.set_head(&name)?;
        } else {
            let oid = resolve(repo, &args.rev)?;
            let commit = repo.find_commit(oid)?;
            repo.checkout_tree(commit.as_object(), Some(&mut opts)).map_err(|e| checkout_refused(&e))?;
            repo.set_head_detached(oid)?;
        }
        Ok(())
    })
    .await?;
    git_state(state_ctx, NoArgs {}).await
}

fn checkout_refused(e: &git2::Error) -> GitError {
    if e.code() == git2::ErrorCode::Conflict {
        GitError::Conflict(format!("local changes would be overwritten: {}; commit or discard them first", e.message()))
    } else {
        GitError::Git(e.message().to_owned())
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BranchArgs {
    /// list (default), create or delete.
    pub action: Option<String>,
    /// The branch, for create and delete.
    pub name: Option<String>,
    /// Where a new branch starts (default HEAD).
    pub from: Option<String>,
    /// Delete even when not merged into HEAD (default false).
    pub force: Option<bool>,
}

pub async fn git_branch(ctx: Ctx, args: BranchArgs) -> Result<Value, VerbError> {
    with_repo(&ctx, move |repo, _| {
        let name = || args.name.clone().ok_or_else(|| GitError::Refused("name is required".into()));
        match args.action.as_deref().unwrap_or("list") {
            "list" => {
                let current = branch_name(repo);
                let mut out = Vec::new();
                for b in repo.branches(Some(BranchType::Local))? {
                    let (b, _) = b?;
                    let n = b.name()?.unwrap_or("").to_owned();
                    let upstream = b.upstream().ok().and_then(|u| u.name().ok().flatten().map(str::to_owned));
                    out.push(json!({ "name": n, "current": Some(&n) == current.as_ref(), "sha": b.get().target().map(|o| o.to_string()), "upstream": upstream }));
                }
                Ok(json!({ "branches": out }))
            }
            "create" => {
                let n = name()?;
                let at = resolve(repo, args.from.as_deref().unwrap_or("HEAD"))?;
                let commit = repo.find_commit(at)?;
                repo.branch(&n, &commit, false).map_err(|e| GitError::Refused(e.message().to_owned()))?;
                Ok(json!({ "created": n, "sha": at.to_string() }))
            }
            "delete" => {
                let n = name()?;
                if branch_name(repo).as_deref() == Some(n.as_str()) {
                    return Err(GitError::Refused(format!("{n} is the current branch")));
                }
                let mut b = repo.find_branch(&n, BranchType::Local).map_err(|_| GitError::UnknownRev(n.clone()))?;
                let tip = b.get().target().ok_or_else(|| GitError::UnknownRev(n.clone()))?;
                let head = resolve(repo, "HEAD")?;
                let merged = repo.graph_descendant_of(head, tip).unwrap_or(false) || head == tip;
                if !merged && !args.force.unwrap_or(false) {
                    return Err(GitError::Refused(format!("{n} is not merged into HEAD (force: true deletes it anyway)")));
                }
                b.delete()?;
                Ok(json!({ "deleted": n, "sha": tip.to_string() }))
            }
            other => Err(GitError::Refused(format!("unknown action '{other}': use list, create or delete"))),
        }
    })
    .await
}
