//! Search verbs: grep and search over the workspace's tracked files, and the wiki.

use std::path::{Component, Path};

use gm_actors::log_writer::Event;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::files::write_atomic;
use super::{Ctx, VerbError};
use crate::search::calls::{
    Callers, CallersReply, DefKind, Impact, ImpactReply, Map, MapReply, Symbols, SymbolsError, SymbolsOf, SymbolsReply,
};
use crate::search::grep::{self, GrepQuery, GrepResult, Mode};
use crate::search::index_actor::{Search, SearchReply};
use crate::search::tokenizer::words;
use crate::search::tracked::tracked_files;
use crate::search::wiki::{self, WikiHit};

const DEFAULT_GREP_LIMIT: usize = 200;
const MAX_LIMIT: usize = 10_000;
const MAX_CONTEXT: usize = 20;
const DEFAULT_SEARCH_LIMIT: usize = 20;
const MAX_SEARCH_LIMIT: usize = 500;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GrepArgs {
    /// What to look for.
    pub pattern: String,
    /// literal (default), regex (Rust regex syntax) or word (literal, whole words only).
    pub mode: Option<Mode>,
    /// Only files under this directory or with this path prefix (relative to the workspace).
    pub path: Option<String>,
    /// Only files whose relative path matches this glob, e.g. "**/*.rs".
    pub glob: Option<String>,
    /// Match without regard to case (default false).
    pub ignore_case: Option<bool>,
    /// Matching lines to return at most (default 200); `leftOut` says how many more there were.
    pub limit: Option<usize>,
    /// Lines of context before and after each match (default 0, at most 20).
    pub context: Option<usize>,
}

/// A search path: relative, inside the workspace (search covers the tracked files only).
fn prefix(path: Option<&str>) -> Result<Option<String>, VerbError> {
    let Some(p) = path.filter(|p| !p.is_empty() && *p != ".") else { return Ok(None) };
    let ok = !Path::new(p).is_absolute()
        && Path::new(p).components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !ok {
        return Err(VerbError::InvalidArgs(format!(
            "path '{p}' is outside the workspace; grep and search cover the workspace's tracked files, so give a relative path inside it"
        )));
    }
    Ok(Some(p.trim_start_matches("./").to_owned()))
}

fn limit(value: Option<usize>, default: usize, max: usize) -> Result<usize, VerbError> {
    let n = value.unwrap_or(default);
    if n == 0 || n > max {
        return Err(VerbError::InvalidArgs(format!("limit must be between 1 and {max}")));
    }
    Ok(n)
}

pub async fn grep(ctx: Ctx, args: GrepArgs) -> Result<GrepResult, VerbError> {
    if args.pattern.is_empty() {
        return Err(VerbError::InvalidArgs("pattern is empty".into()));
    }
    let context = args.context.unwrap_or(0);
    if context > MAX_CONTEXT {
        return Err(VerbError::InvalidArgs(format!("context must be at most {MAX_CONTEXT}")));
    }
    let glob = match &args.glob {
        None => None,
        Some(g) => Some(
            globset::Glob::new(g).map_err(|e| VerbError::InvalidArgs(format!("invalid glob: {e}")))?.compile_matcher(),
        ),
    };
    let query = GrepQuery {
        pattern: args.pattern,
        mode: args.mode.unwrap_or_default(),
        ignore_case: args.ignore_case.unwrap_or(false),
        limit: limit(args.limit, DEFAULT_GREP_LIMIT, MAX_LIMIT)?,
        context,
        path_prefix: prefix(args.path.as_deref())?,
        glob,
        cancel: ctx.cancel.clone(),
    };
    let workspace = ctx.workspace.clone();
    // Searching files is blocking work: keep it off the arbiter that serves the protocol.
    tokio::task::spawn_blocking(move || {
        let files = tracked_files(&workspace).map_err(|e| VerbError::Internal(e.to_string()))?;
        grep::grep(&files, &query).map_err(|e| VerbError::InvalidArgs(e.to_string()))
    })
    .await
    .map_err(|e| VerbError::Internal(format!("grep failed: {e}")))?
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Words to look for; ranked by BM25. Identifiers and paths match whole and by their parts.
    pub query: String,
    /// Results to return (default 20, at most 500).
    pub limit: Option<usize>,
    /// Only files under this directory or with this path prefix (relative to the workspace).
    pub path: Option<String>,
}

/// Refuses a query that cannot match anything: empty, or without a word the index keeps.
fn check_query(query: &str) -> Result<(), VerbError> {
    if query.trim().is_empty() {
        return Err(VerbError::InvalidArgs("query is empty".into()));
    }
    if words(query).is_empty() {
        return Err(VerbError::InvalidArgs(format!(
            "query '{query}' has no word to search for: punctuation and single letters or digits are not indexed; use grep for those"
        )));
    }
    Ok(())
}

pub async fn search(ctx: Ctx, args: SearchArgs) -> Result<SearchReply, VerbError> {
    check_query(&args.query)?;
    let msg = Search {
        query: args.query,
        limit: limit(args.limit, DEFAULT_SEARCH_LIMIT, MAX_SEARCH_LIMIT)?,
        path_prefix: prefix(args.path.as_deref())?,
    };
    ctx.search
        .send(msg)
        .await
        .map_err(|e| VerbError::Internal(format!("the search index is unavailable: {e}")))?
        .map_err(VerbError::Internal)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WikiWriteArgs {
    /// Page name, e.g. "design/cache" (stored as .gm/wiki/design/cache.md).
    pub page: String,
    /// The page's whole markdown text.
    pub text: String,
}

#[derive(Debug, Serialize)]
pub struct WikiWriteReply {
    pub page: String,
    pub path: String,
    pub bytes: usize,
    pub created: bool,
}

fn wiki_dir(ctx: &Ctx) -> std::path::PathBuf {
    ctx.state_dir.join("wiki")
}

pub async fn wiki_write(ctx: Ctx, args: WikiWriteArgs) -> Result<WikiWriteReply, VerbError> {
    let path = wiki::page_path(&wiki_dir(&ctx), &args.page).map_err(|e| VerbError::InvalidArgs(e.to_string()))?;
    let _guard = super::paths::lock(&ctx, &[&path], gm_actors::file_locks::Mode::Write).await?;
    let created = !path.exists();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| VerbError::io("cannot create the wiki directory", dir, e))?;
    }
    write_atomic(&path, args.text.as_bytes())?;
    let page = args.page.trim_end_matches(".md").to_owned();
    ctx.log(Event::new("wiki", json!({ "page": page, "bytes": args.text.len(), "created": created })));
    Ok(WikiWriteReply { page, path: path.to_string_lossy().into_owned(), bytes: args.text.len(), created })
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WikiSearchArgs {
    /// Words to look for in the wiki's pages (and their names); ranked by BM25.
    pub query: String,
    /// Pages to return (default 10, at most 500).
    pub limit: Option<usize>,
}

#[derive(Debug, Serialize)]
pub struct WikiSearchReply {
    pub hits: Vec<WikiHit>,
    /// Pages in the wiki.
    pub pages: usize,
}

pub async fn wiki_search(ctx: Ctx, args: WikiSearchArgs) -> Result<WikiSearchReply, VerbError> {
    check_query(&args.query)?;
    let limit = limit(args.limit, 10, MAX_SEARCH_LIMIT)?;
    let dir = wiki_dir(&ctx);
    let (hits, pages) = tokio::task::spawn_blocking(move || wiki::search(&dir, &args.query, limit))
        .await
        .map_err(|e| VerbError::Internal(format!("wiki search failed: {e}")))?
        .map_err(|e| VerbError::Internal(e.to_string()))?;
    Ok(WikiSearchReply { hits, pages })
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallersArgs {
    /// A function or method name: `name`, or narrowed by its type or module: `Type.name`,
    /// `module.name`, `Type::name`, `ns::name`.
    pub symbol: String,
    /// Only call sites in files under this path (relative to the workspace).
    pub path: Option<String>,
    /// Call sites to return (default 200, at most 10000).
    pub limit: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ImpactArgs {
    /// The function or method whose change is being weighed.
    pub symbol: String,
    /// How many steps of callers to follow (default 3, at most 10).
    pub depth: Option<usize>,
}

fn symbol(s: &str) -> Result<(), VerbError> {
    let s = s.trim().trim_end_matches("()");
    let ok = !s.is_empty()
        && s.len() <= 200
        && s.chars().any(|c| c.is_alphanumeric() || c == '_')
        && s.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '$' | '.' | ':' | '#' | '\\' | '@' | '~'));
    if ok {
        Ok(())
    } else {
        Err(VerbError::InvalidArgs(format!("'{s}' is not a function or method name")))
    }
}

fn calls_unavailable(e: actix::MailboxError) -> VerbError {
    VerbError::Internal(format!("the call-site index is unavailable: {e}"))
}

pub async fn callers(ctx: Ctx, args: CallersArgs) -> Result<CallersReply, VerbError> {
    symbol(&args.symbol)?;
    let msg = Callers {
        symbol: args.symbol,
        path: prefix(args.path.as_deref())?,
        limit: limit(args.limit, DEFAULT_GREP_LIMIT, MAX_LIMIT)?,
    };
    ctx.calls.send(msg).await.map_err(calls_unavailable)?.map_err(VerbError::Internal)
}

pub async fn impact(ctx: Ctx, args: ImpactArgs) -> Result<ImpactReply, VerbError> {
    symbol(&args.symbol)?;
    let depth = args.depth.unwrap_or(3);
    if depth == 0 || depth > 10 {
        return Err(VerbError::InvalidArgs("depth must be between 1 and 10".into()));
    }
    ctx.calls.send(Impact { symbol: args.symbol, depth }).await.map_err(calls_unavailable)?.map_err(VerbError::Internal)
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SymbolsArgs {
    /// A file (relative to the workspace) to outline: its definitions, nested (a class's
    /// methods under it). Give `path` or `query`.
    pub path: Option<String>,
    /// Another name for `path` (the outline's file).
    pub file: Option<String>,
    /// A name to look for across the workspace: exact, prefix, or by identifier parts as
    /// `search` splits them (`user name` finds `getUserName`); `Type.name` narrows to a type's.
    pub query: Option<String>,
    /// Only definitions of this kind: function, method, class, struct, enum, interface (also
    /// matches traits), trait, type, constant, module, macro, impl. With `query` only.
    pub kind: Option<String>,
    /// Only definitions in files under this folder or file (relative to the workspace). With
    /// `query` only.
    pub under: Option<String>,
    /// Definitions to skip (a page's `next`); default 0.
    pub offset: Option<usize>,
    /// Definitions to return (default 200, at most 10000).
    pub limit: Option<usize>,
}

pub async fn symbols(ctx: Ctx, args: SymbolsArgs) -> Result<SymbolsReply, VerbError> {
    let file = match (args.path, args.file) {
        (Some(path), Some(file)) if path != file => {
            return Err(VerbError::InvalidArgs("path and file both name the file to outline: give one".into()))
        }
        (path, file) => path.or(file),
    };
    let target = match (file, args.query) {
        (Some(file), None) => {
            if args.kind.is_some() || args.under.is_some() {
                return Err(VerbError::InvalidArgs(
                    "kind and under narrow a query; an outline is of one whole file".into(),
                ));
            }
            let rel = prefix(Some(&file))?
                .ok_or_else(|| VerbError::InvalidArgs("file must name a file inside the workspace".into()))?;
            SymbolsOf::File(rel)
        }
        (None, Some(query)) => {
            if query.trim().is_empty() {
                return Err(VerbError::InvalidArgs("query is empty".into()));
            }
            let kind = match args.kind.as_deref() {
                None => None,
                Some(k) => Some(DefKind::parse(k).ok_or_else(|| {
                    VerbError::InvalidArgs(format!(
                        "kind '{k}' is none of function, method, class, struct, enum, interface, trait, type, constant, module, macro, impl"
                    ))
                })?),
            };
            SymbolsOf::Query { query: query.trim().to_owned(), kind, path: prefix(args.under.as_deref())? }
        }
        (Some(_), Some(_)) => {
            return Err(VerbError::InvalidArgs(
                "give either path (a file's outline) or query (a search by name), not both; \
                 under narrows a query to a folder"
                    .into(),
            ))
        }
        (None, None) => {
            return Err(VerbError::InvalidArgs("give path (a file's outline) or query (a search by name)".into()))
        }
    };
    let msg =
        Symbols { target, offset: args.offset.unwrap_or(0), limit: limit(args.limit, DEFAULT_GREP_LIMIT, MAX_LIMIT)? };
    let workspace = ctx.workspace.clone();
    ctx.calls.send(msg).await.map_err(calls_unavailable)?.map_err(|e| match e {
        SymbolsError::NotFound(p) => VerbError::NotFound(workspace.join(p)),
        SymbolsError::IsADirectory(p) => VerbError::IsADirectory(workspace.join(p)),
        SymbolsError::NotText { path, size } => VerbError::NotText { path: workspace.join(path), size },
        e @ SymbolsError::Unsupported { .. } => VerbError::InvalidArgs(e.to_string()),
        SymbolsError::Internal(m) => VerbError::Internal(m),
    })
}

const DEFAULT_MAP_TOKENS: usize = 2_000;
const MIN_MAP_TOKENS: usize = 50;
const MAX_MAP_TOKENS: usize = 100_000;
const MAX_FOCUS: usize = 200;

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MapArgs {
    /// The map's budget in tokens, estimated as bytes / 4 (default 2000, from 50 to 100000).
    pub tokens: Option<usize>,
    /// What is being worked on: files or folders (relative to the workspace), whose
    /// definitions come first and whose neighbours rank higher; and words (a query's): the
    /// definitions whose name holds one of them come next.
    pub focus: Option<Vec<String>>,
    /// Only definitions in files under this path (relative to the workspace); the ranking is
    /// still the whole tree's.
    pub path: Option<String>,
}

pub async fn map(ctx: Ctx, args: MapArgs) -> Result<MapReply, VerbError> {
    let tokens = args.tokens.unwrap_or(DEFAULT_MAP_TOKENS);
    if !(MIN_MAP_TOKENS..=MAX_MAP_TOKENS).contains(&tokens) {
        return Err(VerbError::InvalidArgs(format!(
            "tokens must be between {MIN_MAP_TOKENS} and {MAX_MAP_TOKENS} (the map's size, estimated as bytes / 4); got {tokens}"
        )));
    }
    let focus = args.focus.unwrap_or_default();
    if focus.len() > MAX_FOCUS {
        return Err(VerbError::InvalidArgs(format!(
            "focus takes at most {MAX_FOCUS} files and words; got {}",
            focus.len()
        )));
    }
    for item in &focus {
        if item.trim().is_empty() {
            return Err(VerbError::InvalidArgs("focus has an empty item; give files, folders or words".into()));
        }
        // A path outside the workspace would otherwise be taken for words and match nothing.
        if Path::new(item.trim()).is_absolute() || item.split('/').any(|part| part == "..") {
            return Err(VerbError::InvalidArgs(format!(
                "focus item '{item}' is outside the workspace; give a path relative to it, or words"
            )));
        }
    }
    let msg = Map { tokens, focus, path: prefix(args.path.as_deref())? };
    ctx.calls.send(msg).await.map_err(calls_unavailable)?.map_err(VerbError::Internal)
}
