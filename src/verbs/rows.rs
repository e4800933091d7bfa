//! Requirement rows (`prd_*`) and open questions (`unknown_*`): plain JSON files, one per row,
//! under `work/rows/`, readable and diffable in git.
//!
//! A row is closed in one of two ways. In place, `prd_resolve({ id, event, commit })` keeps the
//! row as resolved with its witnesses: a seq that exists in the run log and a commit that
//! exists in the repository. With `push: true`, `prd_resolve({ id, witness })` closes a row
//! whose work is already on origin: it checks the witness commit is reachable from
//! `origin/main`, commits `work/closes/<id>.txt` and the row's removal on top of `origin/main`,
//! and pushes that commit by its full sha. Nothing is half-done: until the push succeeds, no
//! ref moves and no file changes.

use std::path::{Path, PathBuf};

use git2::Oid;
use gm_actors::file_locks::Mode;
use gm_actors::log_writer::Query;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::files::write_atomic;
use gm_actors::cancel::CancelToken;

use super::paths::lock;
use super::{Ctx, VerbError};
use crate::git::{GitError, Repo};

const ROWS: &str = "work/rows";
const CLOSES: &str = "work/closes";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Prd,
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Open,
    Parked,
    Resolved,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Witness {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    pub commit: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    pub id: String,
    pub kind: Kind,
    pub title: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    pub state: State,
    pub created: String,
    pub updated: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub witness: Option<Witness>,
}

fn now() -> String {
    gm_actors::clock::now_rfc3339()
}

fn rows_dir(ctx: &Ctx) -> PathBuf {
    ctx.workspace.join(ROWS)
}

fn row_path(ctx: &Ctx, id: &str) -> Result<PathBuf, VerbError> {
    let ok = id.len() <= 40 && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') && !id.is_empty();
    if !ok {
        return Err(VerbError::InvalidArgs(format!("'{id}' is not a row id (like prd-0001)")));
    }
    Ok(rows_dir(ctx).join(format!("{id}.json")))
}

/// Every readable row, sorted by id.
pub fn load_all(workspace: &Path) -> Vec<Row> {
    let Ok(entries) = std::fs::read_dir(workspace.join(ROWS)) else { return Vec::new() };
    let mut rows: Vec<Row> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().and_then(|x| x.to_str()) == Some("json"))
        .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
        .collect();
    rows.sort_by(|a, b| a.id.cmp(&b.id));
    rows
}

fn load(ctx: &Ctx, id: &str) -> Result<Row, VerbError> {
    let path = row_path(ctx, id)?;
    let bytes = std::fs::read(&path).map_err(|_| VerbError::InvalidArgs(format!("no row {id} in {ROWS}/")))?;
    serde_json::from_slice(&bytes).map_err(|e| VerbError::Refused(format!("{} is not a row file: {e}", path.display())))
}

fn save(ctx: &Ctx, row: &Row) -> Result<(), VerbError> {
    let path = row_path(ctx, &row.id)?;
    let dir = rows_dir(ctx);
    std::fs::create_dir_all(&dir).map_err(|e| VerbError::io("cannot create the rows directory", &dir, e))?;
    let mut text = serde_json::to_string_pretty(row).map_err(|e| VerbError::Internal(e.to_string()))?;
    text.push('\n');
    super::files::refuse_outside_box(ctx, &path)?;
    write_atomic(&path, text.as_bytes()).map(|_| ())
}

/// The next free id of a kind: one past the highest among rows and closes.
fn next_id(ctx: &Ctx, kind: Kind) -> String {
    let prefix = match kind {
        Kind::Prd => "prd-",
        Kind::Unknown => "unknown-",
    };
    let mut max = 0u32;
    for dir in [ROWS, CLOSES] {
        let Ok(entries) = std::fs::read_dir(ctx.workspace.join(dir)) else { continue };
        for e in entries.filter_map(Result::ok) {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(n) =
                name.strip_prefix(prefix).and_then(|r| r.split('.').next()).and_then(|n| n.parse::<u32>().ok())
            {
                max = max.max(n);
            }
        }
    }
    format!("{prefix}{:04}", max + 1)
}

async fn add(ctx: Ctx, kind: Kind, title: String, text: Option<String>) -> Result<Row, VerbError> {
    if title.trim().is_empty() {
        return Err(VerbError::InvalidArgs("the row needs a title".into()));
    }
    let dir = rows_dir(&ctx);
    let _guard = lock(&ctx, &[&dir], Mode::Write).await?;
    let t = now();
    let row = Row {
        id: next_id(&ctx, kind),
        kind,
        title,
        text,
        state: State::Open,
        created: t.clone(),
        updated: t,
        reason: None,
        answer: None,
        witness: None,
    };
    save(&ctx, &row)?;
    Ok(row)
}

async fn change(
    ctx: Ctx,
    id: &str,
    kind: Kind,
    f: impl FnOnce(&mut Row) -> Result<(), VerbError>,
) -> Result<Row, VerbError> {
    let dir = rows_dir(&ctx);
    let _guard = lock(&ctx, &[&dir], Mode::Write).await?;
    let mut row = load(&ctx, id)?;
    if row.kind != kind {
        return Err(VerbError::InvalidArgs(format!(
            "{id} is not a {} row",
            if kind == Kind::Prd { "prd" } else { "unknown" }
        )));
    }
    f(&mut row)?;
    row.updated = now();
    save(&ctx, &row)?;
    Ok(row)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PrdAddArgs {
    /// What is required, in one line.
    pub title: String,
    /// Detail: acceptance, context.
    pub text: Option<String>,
}

pub async fn prd_add(ctx: Ctx, args: PrdAddArgs) -> Result<Row, VerbError> {
    add(ctx, Kind::Prd, args.title, args.text).await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Only rows in this state (open, parked, resolved).
    pub state: Option<State>,
}

#[derive(Debug, Serialize)]
pub struct ListReply {
    pub rows: Vec<Row>,
}

fn list(ctx: &Ctx, kind: Kind, state: Option<State>) -> ListReply {
    let rows =
        load_all(&ctx.workspace).into_iter().filter(|r| r.kind == kind && state.is_none_or(|s| r.state == s)).collect();
    ListReply { rows }
}

pub async fn prd_list(ctx: Ctx, args: ListArgs) -> Result<ListReply, VerbError> {
    Ok(list(&ctx, Kind::Prd, args.state))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ParkArgs {
    pub id: String,
    /// Why it is parked.
    pub reason: Option<String>,
}

pub async fn prd_park(ctx: Ctx, args: ParkArgs) -> Result<Row, VerbError> {
    change(ctx, &args.id.clone(), Kind::Prd, |row| {
        if row.state != State::Open {
            return Err(VerbError::Refused(
                format!("{} is {:?}, only an open row is parked", row.id, row.state).to_lowercase(),
            ));
        }
        row.state = State::Parked;
        row.reason = args.reason;
        Ok(())
    })
    .await
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdArgs {
    pub id: String,
}

pub async fn prd_reopen(ctx: Ctx, args: IdArgs) -> Result<Row, VerbError> {
    change(ctx, &args.id.clone(), Kind::Prd, |row| match row.state {
        State::Parked => {
            row.state = State::Open;
            row.reason = None;
            Ok(())
        }
        State::Resolved => {
            Err(VerbError::Refused(format!("{} is resolved; a resolved row is never reopened (add a new one)", row.id)))
        }
        State::Open => Err(VerbError::Refused(format!("{} is already open", row.id))),
    })
    .await
}

#[derive(Debug, Serialize)]
pub struct DeleteReply {
    pub deleted: String,
}

pub async fn prd_delete(ctx: Ctx, args: IdArgs) -> Result<DeleteReply, VerbError> {
    let dir = rows_dir(&ctx);
    let _guard = lock(&ctx, &[&dir], Mode::Write).await?;
    let row = load(&ctx, &args.id)?;
    if row.kind != Kind::Prd {
        return Err(VerbError::InvalidArgs(format!("{} is not a prd row", row.id)));
    }
    let path = row_path(&ctx, &row.id)?;
    std::fs::remove_file(&path).map_err(|e| VerbError::io("cannot delete", &path, e))?;
    Ok(DeleteReply { deleted: row.id })
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResolveArgs {
    pub id: String,
    /// In place: a seq of the run log that witnesses the work.
    pub event: Option<u64>,
    /// In place: a commit that holds the work.
    pub commit: Option<String>,
    /// Push-close: the commit (already on origin/main) that holds the work.
    pub witness: Option<String>,
    /// Close by a commit pushed to origin/main (needs witness) instead of in place.
    pub push: Option<bool>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolveReply {
    pub row: Row,
    /// push-close: the close commit, pushed to origin/main.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub close_commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub close_file: Option<String>,
}

pub async fn prd_resolve(ctx: Ctx, args: ResolveArgs) -> Result<ResolveReply, VerbError> {
    if args.push.unwrap_or(false) {
        return push_close(ctx, args).await;
    }
    let (Some(seq), Some(commit)) = (args.event, args.commit.clone()) else {
        return Err(VerbError::InvalidArgs(
            "resolve in place with { id, event, commit }, or push-close with { id, witness, push: true }".into(),
        ));
    };
    let q = Query { kind: None, since_seq: Some(seq.saturating_sub(1)), limit: 1, newest: false, session: None };
    let found = super::log::read_log(&ctx, q).await?;
    if found.events.first().and_then(|e| e["seq"].as_u64()) != Some(seq) {
        return Err(VerbError::Refused(format!(
            "seq {seq} is not in the run log; name an event that witnesses the work"
        )));
    }
    let workspace = ctx.workspace.clone();
    let full =
        tokio::task::spawn_blocking(move || -> Result<Oid, GitError> { Repo::open(&workspace)?.resolve(&commit) })
            .await
            .map_err(|e| VerbError::Internal(e.to_string()))?
            .map_err(|e| VerbError::Refused(format!("the witness commit does not exist: {e}")))?;
    let row = change(ctx, &args.id, Kind::Prd, move |row| {
        if row.state == State::Resolved {
            return Err(VerbError::Refused(format!("{} is already resolved", row.id)));
        }
        row.state = State::Resolved;
        row.witness = Some(Witness { seq: Some(seq), commit: full.to_string() });
        Ok(())
    })
    .await?;
    Ok(ResolveReply { row, close_commit: None, close_file: None })
}

async fn push_close(ctx: Ctx, args: ResolveArgs) -> Result<ResolveReply, VerbError> {
    let Some(witness) = args.witness.clone() else {
        return Err(VerbError::InvalidArgs("push: true needs a witness commit".into()));
    };
    let dir = rows_dir(&ctx);
    let _guard = lock(&ctx, &[&dir], Mode::Write).await?;
    let row = load(&ctx, &args.id)?;
    if row.kind != Kind::Prd || row.state == State::Resolved {
        return Err(VerbError::Refused(format!("{} is not an open prd row", row.id)));
    }
    let workspace = ctx.workspace.clone();
    let id = row.id.clone();
    let closed = tokio::task::spawn_blocking(move || close_on_origin(&workspace, &id, &witness))
        .await
        .map_err(|e| VerbError::Internal(e.to_string()))??;
    // The close is on origin: now the working tree shows it too.
    let close_path = ctx.workspace.join(CLOSES).join(format!("{}.txt", row.id));
    if let Some(parent) = close_path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    write_atomic(&close_path, closed.text.as_bytes())?;
    let _ = std::fs::remove_file(row_path(&ctx, &row.id)?);
    let mut row = row;
    row.state = State::Resolved;
    row.witness = Some(Witness { seq: None, commit: closed.witness });
    Ok(ResolveReply {
        row,
        close_commit: Some(closed.commit),
        close_file: Some(close_path.to_string_lossy().into_owned()),
    })
}

struct Closed {
    commit: String,
    witness: String,
    text: String,
}

fn close_on_origin(workspace: &Path, id: &str, witness: &str) -> Result<Closed, VerbError> {
    let refused = |m: String| VerbError::Refused(m);
    let repo = Repo::open(workspace)?;
    repo.fetch("origin", &CancelToken::default())?;
    let main = repo
        .find_reference("refs/remotes/origin/main")
        .ok()
        .and_then(|r| r.target())
        .ok_or_else(|| refused("origin has no main branch".into()))?;
    let witness =
        repo.resolve(witness).map_err(|_| refused(format!("the witness '{witness}' is not a commit here")))?;
    if witness != main && !repo.graph_descendant_of(main, witness).map_err(GitError::from)? {
        return Err(refused(format!(
            "the witness {witness} is not on origin/main: push the work first, then close the row"
        )));
    }
    // The close commit: origin/main's tree plus the close file, minus the row file.
    let base = repo.find_commit(main).map_err(GitError::from)?;
    let mut builder = git2::build::TreeUpdateBuilder::new();
    let text = format!("{id} closed\nwitness {witness}\nclosed {}\n", now());
    let blob = repo.blob(text.as_bytes()).map_err(GitError::from)?;
    builder.upsert(format!("{CLOSES}/{id}.txt"), blob, git2::FileMode::Blob);
    let base_tree = base.tree().map_err(GitError::from)?;
    let row_in_tree = format!("{ROWS}/{id}.json");
    // A row added but never pushed is not in origin's tree: then the close file alone records it.
    if base_tree.get_path(Path::new(&row_in_tree)).is_ok() {
        builder.remove(&row_in_tree);
    }
    let tree_id = builder.create_updated(&repo, &base_tree).map_err(GitError::from)?;
    let tree = repo.find_tree(tree_id).map_err(GitError::from)?;
    let sig = repo.signature()?;
    let commit = repo
        .commit(None, &sig, &sig, &format!("close {id}\n\nwitness {witness}"), &tree, &[&base])
        .map_err(GitError::from)?;
    let mut remote = repo.find_remote("origin").map_err(GitError::from)?;
    let spec = format!("{commit}:refs/heads/main");
    repo.push(&mut remote, &spec, &CancelToken::default())
        .map_err(|e| refused(format!("the close was not pushed ({e}); nothing changed")))?;
    // Keep the remote-tracking ref and, when it was in step, the local main in step.
    let _ = repo.reference("refs/remotes/origin/main", commit, true, "gm: close pushed");
    if let Ok(head) = repo.head() {
        if head.target() == Some(main) && head.is_branch() {
            if let Some(name) = head.name().map(str::to_owned) {
                let _ = repo.reference(&name, commit, true, "gm: close pushed");
                // Only the two paths the close touched change in the index: other staged work stays.
                if let Ok(mut index) = repo.index() {
                    let _ = index.remove_path(Path::new(&format!("{ROWS}/{id}.json")));
                    if let Ok(Some(entry)) = tree.get_path(Path::new(&format!("{CLOSES}/{id}.txt"))).map(Some) {
                        let _ = index.add(&git2::IndexEntry {
                            ctime: git2::IndexTime::new(0, 0),
                            mtime: git2::IndexTime::new(0, 0),
                            dev: 0,
                            ino: 0,
                            mode: 0o100644,
                            uid: 0,
                            gid: 0,
                            file_size: text.len() as u32,
                            id: entry.id(),
                            flags: 0,
                            flags_extended: 0,
                            path: format!("{CLOSES}/{id}.txt").into_bytes(),
                        });
                    }
                    let _ = index.write();
                }
            }
        }
    }
    Ok(Closed { commit: commit.to_string(), witness: witness.to_string(), text })
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnknownAddArgs {
    /// The open question.
    pub question: String,
    /// Context.
    pub text: Option<String>,
}

pub async fn unknown_add(ctx: Ctx, args: UnknownAddArgs) -> Result<Row, VerbError> {
    add(ctx, Kind::Unknown, args.question, args.text).await
}

pub async fn unknown_list(ctx: Ctx, args: ListArgs) -> Result<ListReply, VerbError> {
    Ok(list(&ctx, Kind::Unknown, args.state))
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnknownResolveArgs {
    pub id: String,
    /// What was found out.
    pub answer: String,
}

pub async fn unknown_resolve(ctx: Ctx, args: UnknownResolveArgs) -> Result<Row, VerbError> {
    if args.answer.trim().is_empty() {
        return Err(VerbError::InvalidArgs("an answer is needed".into()));
    }
    change(ctx, &args.id.clone(), Kind::Unknown, |row| {
        if row.state == State::Resolved {
            return Err(VerbError::Refused(format!("{} is already resolved", row.id)));
        }
        row.state = State::Resolved;
        row.answer = Some(args.answer);
        Ok(())
    })
    .await
}
