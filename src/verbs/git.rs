//! Git verbs through libgit2 (`git2`, by way of the `git` library module), never by running
//! `git`: status, state, add, rm, commit, push, log, diff, show, fetch, pull, checkout, branch.
//! They work on the repository that holds the workspace.
//!
//! Each verb runs on a blocking thread: libgit2 does file and network I/O synchronously.

use std::path::Path;

use git2::{BranchType, DiffOptions, IndexAddOption, Repository};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{Ctx, VerbError};
use crate::git::{self, DiffSummary, GitError, RemoteRef, Repo, StatusEntry};

const DEFAULT_LOG: usize = 20;
const MAX_LOG: usize = 10_000;

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

/// The diff verbs' reply: a diff's stats and patch text.
pub type DiffReply = DiffSummary;

/// Runs `f` on the workspace's repository on a blocking thread.
pub(super) async fn with_repo<T: Send + 'static>(
    ctx: &Ctx,
    f: impl FnOnce(&Repo) -> Result<T, GitError> + Send + 'static,
) -> Result<T, VerbError> {
    let workspace = ctx.workspace.clone();
    tokio::task::spawn_blocking(move || {
        let repo = Repo::open(&workspace)?;
        f(&repo)
    })
    .await
    .map_err(|e| VerbError::Internal(format!("git failed: {e}")))?
    .map_err(VerbError::from)
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
    with_repo(&ctx, |repo| {
        let entries = repo.statuses()?;
        Ok(StatusReply { branch: repo.current_branch(), clean: entries.is_empty(), entries })
    })
    .await
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
    with_repo(&ctx, |repo| {
        let head = repo.head().ok();
        let head_oid = head.as_ref().and_then(|h| h.target());
        let branch = repo.current_branch();
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
        let entries = repo.statuses()?;
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
    with_repo(&ctx, move |repo| {
        let specs: Vec<String> = args.paths.iter().map(|p| repo.relative(p)).collect::<Result<_, _>>()?;
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
        let entries = repo.statuses()?;
        Ok(StatusReply { branch: repo.current_branch(), clean: entries.is_empty(), entries })
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
    with_repo(&ctx, move |repo| {
        let rels: Vec<String> = args.paths.iter().map(|p| repo.relative(p)).collect::<Result<_, _>>()?;
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
        let entries = repo.statuses()?;
        Ok(StatusReply { branch: repo.current_branch(), clean: entries.is_empty(), entries })
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

pub async fn git_commit(ctx: Ctx, args: CommitArgs) -> Result<CommitReply, VerbError> {
    if args.message.trim().is_empty() {
        return Err(VerbError::InvalidArgs("message is empty".into()));
    }
    with_repo(&ctx, move |repo| {
        let sig = repo.signature()?;
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
            branch: repo.current_branch(),
            summary: args.message.lines().next().unwrap_or("").to_owned(),
            parents: parents.iter().map(|p| p.id().to_string()).collect(),
        })
    })
    .await
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
    with_repo(&ctx, move |repo| {
        let remote_name = args.remote.unwrap_or_else(|| "origin".into());
        let mut remote =
            repo.find_remote(&remote_name).map_err(|_| GitError::UnknownRev(format!("remote {remote_name}")))?;
        let spec = match args.refspec {
            Some(s) if s.contains(':') => s,
            Some(b) => format!("refs/heads/{b}:refs/heads/{b}"),
            None => {
                let b = repo
                    .current_branch()
                    .ok_or_else(|| GitError::Refused("HEAD is detached: give a refspec".into()))?;
                format!("refs/heads/{b}:refs/heads/{b}")
            }
        };
        let (src, dst) = spec.split_once(':').unwrap_or((&spec, &spec));
        let src_oid = repo.resolve(src.trim_start_matches('+'))?;
        let spec = format!("{}{src_oid}:{dst}", if args.force.unwrap_or(false) { "+" } else { "" });
        repo.push(&mut remote, &spec, &cancel)?;
        Ok(PushReply { remote: remote_name, refspec: spec, pushed: src_oid.to_string() })
    })
    .await
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
    pub refs: Vec<RemoteRef>,
}

pub async fn git_fetch(ctx: Ctx, args: FetchArgs) -> Result<FetchReply, VerbError> {
    let cancel = ctx.cancel.clone();
    with_repo(&ctx, move |repo| {
        let remote = args.remote.unwrap_or_else(|| "origin".into());
        let refs = repo.fetch(&remote, &cancel)?;
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
    with_repo(&ctx, move |repo| {
        let remote = args.remote.unwrap_or_else(|| "origin".into());
        let branch = match args.branch.or_else(|| repo.current_branch()) {
            Some(b) => b,
            None => return Err(GitError::Refused("HEAD is detached: give a branch".into())),
        };
        if !repo.statuses()?.iter().all(|e| e.index.is_none() && e.worktree.is_none_or(|w| w == "untracked")) {
            return Err(GitError::Refused("the working tree has uncommitted changes: commit them first, then pull".into()));
        }
        repo.fetch(&remote, &cancel)?;
        let theirs_ref = format!("refs/remotes/{remote}/{branch}");
        let theirs = repo.find_reference(&theirs_ref).map_err(|_| GitError::UnknownRev(theirs_ref.clone()))?;
        let theirs_commit = repo.reference_to_annotated_commit(&theirs)?;
        let (analysis, _) = repo.merge_analysis(&[&theirs_commit])?;
        let head_name = repo.head()?.name().map(str::to_owned).unwrap_or_else(|| "HEAD".into());
        if analysis.is_up_to_date() {
            return Ok(PullReply { result: "up-to-date", head: repo.resolve("HEAD")?.to_string() });
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
        let sig = repo.signature()?;
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
    with_repo(&ctx, move |repo| {
        let mut walk = repo.revwalk()?;
        walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::TIME)?;
        let range = args.range.unwrap_or_else(|| "HEAD".into());
        if range.contains("..") {
            walk.push_range(&range).map_err(|_| GitError::UnknownRev(range.clone()))?;
        } else {
            walk.push(repo.resolve(&range)?)?;
        }
        let path = args.path.map(|p| repo.relative(&p)).transpose()?;
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

pub async fn git_diff(ctx: Ctx, args: DiffArgs) -> Result<DiffReply, VerbError> {
    let out_dir = ctx.state_dir.join("out");
    with_repo(&ctx, move |repo| {
        let mut opts = DiffOptions::new();
        if let Some(p) = &args.path {
            opts.pathspec(repo.relative(p)?);
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
        git::describe(&diff, &out_dir)
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
    with_repo(&ctx, move |repo| {
        let rev = args.rev.unwrap_or_else(|| "HEAD".into());
        let oid = repo.resolve(&rev)?;
        let commit = repo.find_commit(oid).map_err(|_| GitError::UnknownRev(rev.clone()))?;
        let tree = commit.tree()?;
        let parent = commit.parent(0).ok().map(|p| p.tree()).transpose()?;
        let diff = repo.diff_tree_to_tree(parent.as_ref(), Some(&tree), None)?;
        let d = git::describe(&diff, &out_dir)?;
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
    with_repo(&ctx, move |repo| {
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
            let oid = repo.resolve(&args.rev)?;
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
    with_repo(&ctx, move |repo| {
        let name = || args.name.clone().ok_or_else(|| GitError::Refused("name is required".into()));
        match args.action.as_deref().unwrap_or("list") {
            "list" => {
                let current = repo.current_branch();
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
                let at = repo.resolve(args.from.as_deref().unwrap_or("HEAD"))?;
                let commit = repo.find_commit(at)?;
                repo.branch(&n, &commit, false).map_err(|e| GitError::Refused(e.message().to_owned()))?;
                Ok(json!({ "created": n, "sha": at.to_string() }))
            }
            "delete" => {
                let n = name()?;
                if repo.current_branch().as_deref() == Some(n.as_str()) {
                    return Err(GitError::Refused(format!("{n} is the current branch")));
                }
                let mut b = repo.find_branch(&n, BranchType::Local).map_err(|_| GitError::UnknownRev(n.clone()))?;
                let tip = b.get().target().ok_or_else(|| GitError::UnknownRev(n.clone()))?;
                let head = repo.resolve("HEAD")?;
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
