//! File verbs: read_file, write_file, edit_file, stat_file, list_dir.
//!
//! Every verb locks the files it touches (reads share, writes are exclusive, in arrival
//! order). A write is atomic — a temp file in the same directory renamed over the target — so a
//! refused or failed write leaves the file as it was.

use std::path::{Path, PathBuf};

use gm_actors::file_locks::Mode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::paths::{lock, resolve};
use super::{Ctx, VerbError};

/// Lines in one page of read_file unless `limit` says otherwise.
pub const DEFAULT_PAGE_LINES: usize = 2000;
/// Bytes in one page of read_file at most; a page stops early rather than exceed it.
pub const MAX_PAGE_BYTES: usize = 64 * 1024;
const DEFAULT_LIST_LIMIT: usize = 200;
const MAX_LIST_LIMIT: usize = 10_000;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// File to read: relative to the workspace, absolute, or a skill:// URI.
    pub path: String,
    /// First line to return, 1-based (default 1).
    pub offset: Option<usize>,
    /// Lines to return (default 2000). A page also stops before 256 KiB.
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadFileReply {
    pub path: String,
    pub content: String,
    /// First and last line in `content` (1-based; endLine < startLine when empty).
    pub start_line: usize,
    pub end_line: usize,
    /// The file's line count, when it is known without reading the whole file: always for a
    /// file up to 16 MiB, for a bigger one once a page has reached its end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_lines: Option<usize>,
    /// Set instead of `totalLines` when the line count is not known: the file goes on past
    /// this page (`next` is where).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub more: bool,
    pub bytes: u64,
    /// The `offset` of the next page, absent when this page reaches the end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<usize>,
}

pub async fn read_file(ctx: Ctx, args: ReadFileArgs) -> Result<ReadFileReply, VerbError> {
    let offset = args.offset.unwrap_or(1);
    let limit = args.limit.unwrap_or(DEFAULT_PAGE_LINES);
    if offset == 0 {
        return Err(VerbError::InvalidArgs("offset is 1-based; the first line is 1".into()));
    }
    if limit == 0 {
        return Err(VerbError::InvalidArgs("limit must be at least 1".into()));
    }
    if args.path.starts_with("skill://") {
        let text = ctx
            .skills
            .read(&args.path)
            .map_err(|e| VerbError::NotFound(PathBuf::from(format!("{}: {e}", args.path))))?;
        return Ok(page(args.path, &text, offset, limit));
    }
    let path = resolve(&ctx, &args.path)?;
    refuse_secrets(&ctx, &path)?;
    let _guard = lock(&ctx, &[&path], Mode::Read).await?;
    let size = std::fs::metadata(&path).map_err(|e| VerbError::io("cannot read", &path, e))?.len();
    if size > IN_MEMORY_MAX {
        // A large file is paged from disk on a blocking thread: only the page is read into
        // memory, and only the page must be text.
        let shown = path.clone();
        return tokio::task::spawn_blocking(move || large_page(&shown, offset, limit))
            .await
            .map_err(|e| VerbError::Internal(format!("read_file failed: {e}")))?;
    }
    let text = read_text(&path)?;
    Ok(page(path.to_string_lossy().into_owned(), &text, offset, limit))
}

/// A whole file as text, or the verb error that says why not.
pub fn read_text(path: &Path) -> Result<String, VerbError> {
    crate::text::read_text(path).map_err(|e| match e {
        crate::text::ReadTextError::Io(e) => VerbError::io("cannot read", path, e),
        crate::text::ReadTextError::NotText { size } => VerbError::NotText { path: path.to_owned(), size },
    })
}

/// Files up to this size are read whole; larger ones a page at a time (see [`super::lines`]).
const IN_MEMORY_MAX: u64 = 1 << 20;

fn large_page(path: &Path, offset: usize, limit: usize) -> Result<ReadFileReply, VerbError> {
    let p = super::lines::page(path, offset, limit, MAX_PAGE_BYTES).map_err(|e| match e {
        super::lines::PageError::Io(e) => VerbError::io("cannot read", path, e),
        super::lines::PageError::LineTooLong { line } => VerbError::Refused(format!(
            "line {line} of {} is longer than {} MiB; read a part of it with run_shell (e.g. sed -n '{line}p' | cut -c1-10000)",
            path.display(),
            super::lines::MAX_LINE_BYTES >> 20
        )),
    })?;
    let content =
        String::from_utf8(p.bytes).map_err(|_| VerbError::NotText { path: path.to_owned(), size: p.file_bytes })?;
    // Without a count the page stopped before the end of the file: there is a next page.
    let next = match p.total_lines {
        Some(total) => (p.end_line < total).then_some(p.end_line + 1),
        None => Some(p.end_line + 1),
    };
    Ok(ReadFileReply {
        path: path.to_string_lossy().into_owned(),
        content,
        start_line: p.start_line,
        end_line: p.end_line,
        total_lines: p.total_lines,
        more: p.total_lines.is_none(),
        bytes: p.file_bytes,
        next,
    })
}

/// Tells the search index a file inside the workspace changed, so the next search sees it.
fn touched(ctx: &Ctx, path: &Path) {
    if let Ok(rel) = path.strip_prefix(&ctx.workspace) {
        ctx.search.do_send(crate::search::index_actor::Touched(vec![rel.to_string_lossy().replace('\\', "/")]));
    }
}

/// The secrets file holds values that never enter the context: its names are told, its
/// values are not read or written through gm.
fn refuse_secrets(ctx: &Ctx, path: &Path) -> Result<(), VerbError> {
    if !ctx.secrets.is_secrets_file(path) {
        return Ok(());
    }
    let names = ctx.secrets.get().names().join(", ");
    Err(VerbError::Refused(format!(
        "{} holds secret values, which gm neither reads nor writes; edit it by hand. Names set: [{names}]; shells see them as environment variables",
        path.display()
    )))
}

/// Under a sandbox mode, gm's own writes obey the box its shells are in: otherwise the box
/// would be one `gm.write_file({ path: '~/.bashrc' })` away from useless. The file that would
/// be written is judged, links resolved.
pub(super) fn refuse_outside_box(ctx: &Ctx, path: &Path) -> Result<(), VerbError> {
    let Some(confine) = &ctx.sandbox else { return Ok(()) };
    let policy = confine.policy();
    let real = real_target(path);
    if policy.may_write(&real) {
        return Ok(());
    }
    let list = |paths: &[PathBuf]| paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    Err(VerbError::Refused(format!(
        "--sandbox {}: {} is outside what may be written (writable: [{}]; read-only inside them: [{}]). Only the user can widen the box (gm serve --sandbox-allow-write DIR, or --sandbox off): ask them",
        policy.mode.as_str(),
        real.display(),
        list(&policy.writable),
        list(&policy.read_only)
    )))
}

/// `path` with every link resolved, as far as it exists (a new file: its folder's real path).
fn real_target(path: &Path) -> PathBuf {
    if let Ok(real) = std::fs::canonicalize(path) {
        return real;
    }
    let mut missing = Vec::new();
    let mut at = path;
    while let Some(parent) = at.parent() {
        if let Some(name) = at.file_name() {
            missing.push(name.to_owned());
        }
        if let Ok(real) = std::fs::canonicalize(parent) {
            return missing.iter().rev().fold(real, |acc, n| acc.join(n));
        }
        at = parent;
    }
    path.to_owned()
}

fn page(path: String, text: &str, offset: usize, limit: usize) -> ReadFileReply {
    let total_lines = text.split_inclusive('\n').count();
    let mut content = String::new();
    let mut end_line = offset - 1;
    for line in text.split_inclusive('\n').skip(offset - 1).take(limit) {
        if !content.is_empty() && content.len() + line.len() > MAX_PAGE_BYTES {
            break;
        }
        content.push_str(line);
        end_line += 1;
    }
    let next = (end_line < total_lines).then_some(end_line + 1);
    ReadFileReply {
        path,
        content,
        start_line: offset,
        end_line,
        total_lines: Some(total_lines),
        more: false,
        bytes: text.len() as u64,
        next,
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WriteFileArgs {
    /// File to write: relative to the workspace, or absolute.
    pub path: String,
    /// The whole new content.
    pub content: String,
    /// Create missing parent directories (default true).
    pub create_dirs: Option<bool>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WriteFileReply {
    pub path: String,
    pub bytes: usize,
    pub created: bool,
    /// The file written, when a link led `path` outside the workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_path: Option<String>,
}

pub async fn write_file(ctx: Ctx, args: WriteFileArgs) -> Result<WriteFileReply, VerbError> {
    let path = resolve(&ctx, &args.path)?;
    refuse_secrets(&ctx, &path)?;
    refuse_outside_box(&ctx, &path)?;
    let _guard = lock(&ctx, &[&path], Mode::Write).await?;
    let created = !path.exists();
    if args.create_dirs.unwrap_or(true) {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| VerbError::io("cannot create the directory", dir, e))?;
        }
    }
    let real = write_atomic(&path, args.content.as_bytes())?;
    touched(&ctx, &path);
    let real_path = ctx.wrote_through_link(&path, &real);
    Ok(WriteFileReply { path: path.to_string_lossy().into_owned(), bytes: args.content.len(), created, real_path })
}

/// Replaces `path`'s content all at once. Through a symlink the target is written (the link
/// stays a link). A file with several hard links is written in place, so every link keeps
/// seeing one file; anything else goes through a temp file and a rename. Returns the file
/// written: `path` with every link resolved.
pub fn write_atomic(path: &Path, content: &[u8]) -> Result<PathBuf, VerbError> {
    let target = match std::fs::canonicalize(path) {
        Ok(t) => t,
        // A new file: where its folder really is (the folder may be a link).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) => {
                std::fs::canonicalize(dir).map(|d| d.join(name)).unwrap_or_else(|_| path.to_owned())
            }
            _ => path.to_owned(),
        },
        Err(e) => return Err(VerbError::io("cannot resolve", path, e)),
    };
    let existing = std::fs::metadata(&target).ok();
    if let Some(m) = &existing {
        if m.is_dir() {
            return Err(VerbError::IsADirectory(path.to_owned()));
        }
        if gm_actors::sys::hard_links(m) > 1 {
            std::fs::write(&target, content).map_err(|e| VerbError::io("cannot write", path, e))?;
            return Ok(target);
        }
    }
    if target.parent().is_none() {
        return Err(VerbError::InvalidArgs(format!("{} has no parent directory", path.display())));
    }
    // A user's file: the new one keeps the old one's mode, and is synced before the rename.
    let mode = existing.as_ref().and_then(gm_actors::sys::permission_bits);
    gm_actors::fs::replace_with(&target, content, mode, true).map_err(|e| VerbError::io("cannot write", path, e))?;
    Ok(target)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileArgs {
    /// File to edit: relative to the workspace, or absolute.
    pub path: String,
    /// The exact text to find (whitespace and newlines included).
    pub old: String,
    /// The text to put in its place.
    pub new: String,
    /// Replace every occurrence instead of requiring exactly one (default false).
    pub all: Option<bool>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EditFileReply {
    pub path: String,
    pub replacements: usize,
    pub diff: String,
    /// Bytes of the diff left out of `diff`; the whole is in `diffFile`.
    #[serde(skip_serializing_if = "is_zero")]
    pub diff_cut: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff_file: Option<String>,
    /// The file written, when a link led `path` outside the workspace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub real_path: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Bytes of an edit's diff kept inline; past this the whole diff is saved to `.gm/out/`.
const INLINE_DIFF: usize = 32 * 1024;

pub async fn edit_file(ctx: Ctx, args: EditFileArgs) -> Result<EditFileReply, VerbError> {
    if args.old.is_empty() {
        return Err(VerbError::InvalidArgs("old is empty; use write_file to write a whole file".into()));
    }
    let path = resolve(&ctx, &args.path)?;
    refuse_secrets(&ctx, &path)?;
    refuse_outside_box(&ctx, &path)?;
    let _guard = lock(&ctx, &[&path], Mode::Write).await?;
    let out_dir = ctx.state_dir.join("out");
    let large = std::fs::metadata(&path).is_ok_and(|m| m.len() > IN_MEMORY_MAX);
    let reply = if large {
        // Reading, replacing and writing a large file is blocking work: off the arbiter.
        let (p, out) = (path.clone(), out_dir.clone());
        tokio::task::spawn_blocking(move || edit_in_place(&p, &args, &out))
            .await
            .map_err(|e| VerbError::Internal(format!("edit_file failed: {e}")))??
    } else {
        edit_in_place(&path, &args, &out_dir)?
    };
    touched(&ctx, &path);
    let real_path = reply.real_path.as_deref().and_then(|real| ctx.wrote_through_link(&path, Path::new(real)));
    Ok(EditFileReply { real_path, ..reply })
}

fn edit_in_place(path: &Path, args: &EditFileArgs, out_dir: &Path) -> Result<EditFileReply, VerbError> {
    let before = read_text(path)?;
    let starts: Vec<usize> = before.match_indices(&args.old).map(|(i, _)| i).collect();
    match starts.len() {
        0 => return Err(VerbError::NoMatch { path: path.to_owned(), hint: near_miss_hint(&before, &args.old) }),
        1 => {}
        n if !args.all.unwrap_or(false) => {
            let lines = starts.iter().map(|&i| before[..i].matches('\n').count() + 1).collect();
            return Err(VerbError::AmbiguousMatch { path: path.to_owned(), count: n, lines });
        }
        _ => {}
    }
    let after = before.replace(&args.old, &args.new);
    let real = write_atomic(path, after.as_bytes())?;
    let shown = path.to_string_lossy().into_owned();
    let whole = super::edit_diff::replacement_diff(&before, &after, &starts, args.old.len(), args.new.len(), &shown);
    let (diff, diff_cut, diff_file) = if whole.len() > INLINE_DIFF {
        let keep = crate::text::head(&whole, INLINE_DIFF).len();
        let file = super::out::unique_path(out_dir, "edit", ".diff");
        let saved = gm_actors::state_file::write_new(&file, whole.as_bytes()).is_ok();
        (whole[..keep].to_owned(), whole.len() - keep, saved.then(|| file.to_string_lossy().into_owned()))
    } else {
        (whole, 0, None)
    };
    Ok(EditFileReply {
        path: shown,
        replacements: starts.len(),
        diff,
        diff_cut,
        diff_file,
        real_path: Some(real.to_string_lossy().into_owned()),
    })
}

/// When the text is not found verbatim, says whether it would match ignoring whitespace,
/// which is the usual cause.
fn near_miss_hint(haystack: &str, needle: &str) -> String {
    let squash = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    if squash(haystack).contains(&squash(needle)) {
        "; it matches when whitespace is ignored, so check indentation and line endings".into()
    } else {
        String::new()
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatFileArgs {
    /// Path to inspect: relative to the workspace, or absolute.
    pub path: String,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatFileReply {
    pub path: String,
    pub exists: bool,
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub modified: Option<String>,
    /// True when the path itself is a symlink (type and size describe its target).
    pub symlink: bool,
}

pub async fn stat_file(ctx: Ctx, args: StatFileArgs) -> Result<StatFileReply, VerbError> {
    let path = resolve(&ctx, &args.path)?;
    let shown = path.to_string_lossy().into_owned();
    let missing = |shown, symlink| StatFileReply {
        path: shown,
        exists: false,
        kind: None,
        size: None,
        mode: None,
        modified: None,
        symlink,
    };
    let not_found = |e: &std::io::Error| e.kind() == std::io::ErrorKind::NotFound;
    // One lstat answers for everything but a symlink; only a symlink needs a second stat.
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if not_found(&e) => return Ok(missing(shown, false)),
        Err(e) => return Err(VerbError::io("cannot stat", &path, e)),
    };
    let symlink = meta.file_type().is_symlink();
    let meta = if symlink {
        match std::fs::metadata(&path) {
            Ok(m) => m,
            // A dangling symlink: the link exists, its target does not.
            Err(e) if not_found(&e) => return Ok(missing(shown, true)),
            Err(e) => return Err(VerbError::io("cannot stat", &path, e)),
        }
    } else {
        meta
    };
    Ok(StatFileReply {
        path: shown,
        exists: true,
        kind: Some(kind_of(&meta.file_type())),
        size: Some(meta.len()),
        mode: gm_actors::sys::permission_bits(&meta).map(|bits| format!("{bits:o}")),
        modified: meta.modified().ok().map(rfc3339),
        symlink,
    })
}

fn kind_of(t: &std::fs::FileType) -> &'static str {
    if t.is_file() {
        "file"
    } else if t.is_dir() {
        "dir"
    } else if t.is_symlink() {
        "symlink"
    } else {
        "other"
    }
}

fn rfc3339(t: std::time::SystemTime) -> String {
    gm_actors::clock::rfc3339(t)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirArgs {
    /// Directory to list (default: the workspace).
    pub path: Option<String>,
    /// Only entries whose name starts with this.
    pub prefix: Option<String>,
    /// Entries to skip, for paging (default 0).
    pub offset: Option<usize>,
    /// Entries in this page (default 200, at most 10000).
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct DirEntry {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

#[derive(Debug, Serialize)]
pub struct ListDirReply {
    pub path: String,
    pub entries: Vec<DirEntry>,
    /// Entries matching `prefix` in all pages.
    pub total: usize,
    /// The `offset` of the next page, absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<usize>,
}

pub async fn list_dir(ctx: Ctx, args: ListDirArgs) -> Result<ListDirReply, VerbError> {
    let limit = args.limit.unwrap_or(DEFAULT_LIST_LIMIT);
    if limit == 0 || limit > MAX_LIST_LIMIT {
        return Err(VerbError::InvalidArgs(format!("limit must be between 1 and {MAX_LIST_LIMIT}")));
    }
    let offset = args.offset.unwrap_or(0);
    let path = match args.path.as_deref() {
        None | Some("") | Some(".") => ctx.workspace.to_path_buf(),
        Some(p) => resolve(&ctx, p)?,
    };
    let read = std::fs::read_dir(&path).map_err(|e| VerbError::io("cannot list", &path, e))?;
    let prefix = args.prefix.unwrap_or_default();
    let mut names: Vec<(String, std::fs::DirEntry)> = read
        .filter_map(Result::ok)
        .map(|e| (e.file_name().to_string_lossy().into_owned(), e))
        .filter(|(n, _)| n.starts_with(&prefix))
        .collect();
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let total = names.len();
    let entries = names
        .into_iter()
        .skip(offset)
        .take(limit)
        .map(|(name, e)| {
            // Follow symlinks for type and size, as a user listing a directory expects.
            let meta = std::fs::metadata(e.path()).or_else(|_| e.metadata()).ok();
            let kind = meta.as_ref().map_or("other", |m| kind_of(&m.file_type()));
            let size = meta.as_ref().filter(|m| m.is_file()).map(|m| m.len());
            DirEntry { name, kind, size }
        })
        .collect::<Vec<_>>();
    let next = (offset + entries.len() < total).then_some(offset + entries.len());
    Ok(ListDirReply { path: path.to_string_lossy().into_owned(), entries, total, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_stops_at_its_limit_and_names_the_next_line() {
        let r = page("f".into(), "a\nb\nc\n", 2, 1);
        assert_eq!(
            (r.content.as_str(), r.start_line, r.end_line, r.total_lines, r.next),
            ("b\n", 2, 2, Some(3), Some(3))
        );
        let r = page("f".into(), "a\nb\nc", 3, 10);
        assert_eq!((r.content.as_str(), r.next), ("c", None));
    }

    #[test]
    fn a_page_past_the_end_is_empty() {
        let r = page("f".into(), "a\n", 5, 10);
        assert_eq!((r.content.as_str(), r.next, r.total_lines), ("", None, Some(1)));
    }

    #[test]
    fn whitespace_near_misses_get_a_hint() {
        assert!(near_miss_hint("fn  a() {\n}", "fn a() { }").contains("whitespace"));
        assert!(near_miss_hint("abc", "xyz").is_empty());
    }
}
