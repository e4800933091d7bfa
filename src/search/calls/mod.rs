//! Code intelligence over the workspace's source files (tree-sitter): who calls a function or
//! method, what a change to it reaches, and what a file or the workspace defines.
//!
//! Each tracked file of a language in `lang/` is parsed once and its facts — definitions with
//! their nesting, call sites with their enclosing function and receiver, imports — are kept by
//! size, mtime and content hash, so only changed files are parsed again, on every core. The
//! facts are saved in `<state dir>/calls/` too, so a new gm does not parse the whole tree
//! again: a parse of a large tree takes seconds, reading the cache back a fraction of that.
//!
//! - `lang/` — one module per language: its grammar, its queries, its few rules.
//! - `extract.rs` — a file's facts from its language's queries.
//! - `facts.rs` — what is kept per file.
//! - `store.rs` — every file's facts in memory, with where each name is defined and called.
//! - `resolve.rs` — which definitions a call may reach.
//! - `answer.rs` — the replies of `callers`, `impact` and `symbols`.
//! - `map.rs` — `map`: the definitions the rest of the tree references most (PageRank over
//!   the files' reference graph); `map_text.rs` renders them within a budget.
//! - `cache.rs` — the cache on disk, read piece by piece as queries need it.
//! - `names.rs` — the cache's table of where each name is called and defined.

mod answer;
mod cache;
mod entry;
mod extract;
mod facts;
pub mod lang;
mod map;
mod map_text;
mod names;
mod resolve;
mod spec;
mod store;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::UNIX_EPOCH;

use actix::prelude::*;
use gm_actors::sys::FileStat;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tree_sitter::Parser;

pub use answer::{
    CallSite, CallersReply, Definition, FoundReply, FoundSymbol, ImpactEdge, ImpactNode, ImpactReply, OutlineReply,
    OutlineSymbol,
};
pub use cache::wait_for_saves;
pub use facts::DefKind;

use super::tracked::{stat_all, tracked_files, Tracked};
use crate::watch::{Changes, Subscription};
use cache::{remove_stale_temporaries, Cached, Hash, Saved, Saver, Snapshot, Stamp, TreeStamp, CHECK_WHOLE_BELOW};
use facts::FileFacts;
use store::Store;

/// The call-site index as an actor on its own thread (`SyncArbiter::start(1, ...)`).
pub struct CallIndex {
    workspace: PathBuf,
    /// `<state dir>/calls/cache.bin`.
    file: PathBuf,
    store: Store,
    /// The saved cache is read on the first call rather than at start: most sessions never ask
    /// for callers, and those that do pay for the read once.
    loaded: bool,
    /// The cache changed since it was last saved.
    dirty: bool,
    saver: Option<Saver>,
    /// What the watcher saw change: with it, a call looks only at those files.
    changes: Subscription,
    /// Source files as the last full refresh counted them, if the watcher was watching when it
    /// began; `None` before the first such refresh: until then the watcher's changes are not
    /// all that changed.
    scanned: Option<usize>,
    /// Tracked files of languages gm does not parse, by language, as the last refresh counted.
    skipped: BTreeMap<String, usize>,
    /// Whether the workspace is in a git repository (a new file is not tracked until added).
    in_git: bool,
    /// git's index file, when the workspace is in a repository.
    git_index: Option<PathBuf>,
    /// What git's index said when the entries were last checked against it (saved with them).
    tree: Option<TreeStamp>,
    /// A saved cache smaller than this is checked whole when read ([`CHECK_WHOLE_BELOW`]).
    check_whole_below: u64,
    /// What `map` worked out from every file, kept until files change.
    map: map::MapCache,
}

/// Whether a file may be source gm reads: an extension of one of its languages, or no
/// extension and the executable bit (a script, whose shebang says its language).
fn candidate(rel: &str, stat: &FileStat) -> bool {
    lang::by_extension(rel).is_some() || (lang::extensionless(rel) && stat.executable)
}

/// The language of a file's bytes: by its extension, or by its shebang. `Err` names another
/// language (`shell`) or none (`""`: not a script).
fn language_of(rel: &str, bytes: &[u8]) -> Result<&'static lang::Lang, &'static str> {
    if let Some(l) = lang::by_extension(rel) {
        return Ok(l);
    }
    let first = bytes.split(|&b| b == b'\n').next().unwrap_or(&[]);
    let first = std::str::from_utf8(&first[..first.len().min(256)]).unwrap_or("");
    match lang::shebang_interpreter(first) {
        Some(program) => lang::by_interpreter(program),
        None => Err(""),
    }
}

/// Parses a file's bytes: its facts, or an entry with no facts for a file gm does not read
/// (its `lang` says which language it is, if any, for the skipped counts).
fn parse(rel: &str, bytes: Vec<u8>, parser: &mut Parser) -> FileFacts {
    match language_of(rel, &bytes) {
        Ok(l) => l
            .compiled()
            .and_then(|compiled| extract::analyze(l, compiled, &bytes, parser))
            .unwrap_or_else(|| FileFacts { lang: l.name.into(), ..Default::default() }),
        Err(other) => FileFacts { lang: other.to_owned(), ..Default::default() },
    }
}

impl CallIndex {
    /// The index of `workspace`, keeping its cache under `state_dir` (the workspace's `.gm`).
    pub fn new(workspace: PathBuf, state_dir: PathBuf, changes: Subscription) -> Self {
        let file = state_dir.join("calls").join("cache.bin");
        let git_dir = crate::git::git_dir(&workspace);
        let in_git = git_dir.is_some();
        let git_index = git_dir.map(|d| d.join("index"));
        Self {
            workspace,
            file,
            store: Store::default(),
            loaded: false,
            dirty: false,
            saver: None,
            changes,
            scanned: None,
            skipped: BTreeMap::new(),
            in_git,
            git_index,
            tree: None,
            check_whole_below: CHECK_WHOLE_BELOW,
            map: map::MapCache::default(),
        }
    }

    /// Brings the cache up to date with every change made before this call: only the files
    /// the watcher saw change, or everything when it cannot say (no watcher, lost events,
    /// git's index moved). Returns (files parsed now, source files).
    fn fresh(&mut self) -> Result<(usize, usize), String> {
        self.load();
        // Right after a start the watcher may still be placing its first watches (a kernel's
        // walk takes 150 ms on every core): rather than wait, every file is checked now, as it
        // would be then. That check is not trusted later: a change made after it and before
        // the watches were placed is seen by neither, so the first call after the watcher is
        // ready checks every file again.
        let Some(changes) = self.changes.changes_if_ready() else {
            let counts = self.refresh()?;
            self.scanned = None;
            return Ok(counts);
        };
        if let (Changes::Watched(dirty), Some(_)) = (&changes, self.scanned) {
            if !dirty.all && !dirty.tracked && !self.new_file_under(&dirty.unwatched) {
                // A directory the watcher could not watch stands for the files under it,
                // which `update` checks by size and mtime.
                let paths: BTreeSet<String> = dirty.paths.union(&dirty.unwatched).cloned().collect();
                if let Some(parsed) = self.update(&paths) {
                    return Ok((parsed, self.source_files()));
                }
            }
        }
        self.refresh()
    }

    /// Whether a directory the watcher could not watch holds a source file the cache does
    /// not know, outside git (where a new file is covered at once): the file list is read again.
    fn new_file_under(&self, dirs: &BTreeSet<String>) -> bool {
        !self.in_git
            && dirs.iter().any(|dir| {
                crate::watch::files_under(&self.workspace, dir).any(|rel| {
                    !self.store.contains(&rel)
                        && std::fs::metadata(self.workspace.join(&rel))
                            .is_ok_and(|m| candidate(&rel, &FileStat::of(&m)))
                })
            })
    }

    fn source_files(&self) -> usize {
        self.store.sources()
    }

    /// Reparses the changed files among `paths` (a path may be a directory that went away);
    /// `None` when a new file outside git needs the file list read again.
    fn update(&mut self, paths: &BTreeSet<String>) -> Option<usize> {
        let mut candidates: BTreeSet<String> = BTreeSet::new();
        for path in paths {
            if self.store.contains(path) {
                candidates.insert(path.clone());
                continue;
            }
            let under = format!("{path}/");
            let before = candidates.len();
            candidates.extend(self.store.paths().filter(|k| k.starts_with(&under)).map(str::to_owned));
            let new_file = candidates.len() == before;
            if new_file && !self.in_git {
                let meta = std::fs::metadata(self.workspace.join(path));
                if meta.is_ok_and(|m| m.is_file() && candidate(path, &FileStat::of(&m))) {
                    return None;
                }
            }
        }
        let mut stale = Vec::new();
        for rel in candidates {
            let path = self.workspace.join(&rel);
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_file() => {
                    let seen = Seen::of(&meta);
                    if !self.store.get(&rel).is_some_and(|c| seen.is(c)) {
                        stale.push((Tracked { rel, path }, seen));
                    }
                }
                _ => {
                    self.store.remove(&rel);
                    self.dirty = true;
                }
            }
        }
        let parsed = self.reparse(stale);
        self.save_if_dirty();
        Some(parsed)
    }

    /// Opens the saved cache, once: its entries are read, its facts and name lists are read
    /// as queries need them.
    fn load(&mut self) {
        if !std::mem::replace(&mut self.loaded, true) {
            // No cache yet, one of another version or a damaged one: everything is parsed.
            self.store = match Saved::open(&self.file, self.check_whole_below) {
                Ok((saved, listing)) => {
                    self.tree = listing.tree;
                    Store::open(std::sync::Arc::new(saved), listing.entries)
                }
                Err(_) => Store::default(),
            };
            if let Some(dir) = self.file.parent() {
                remove_stale_temporaries(dir);
            }
        }
    }

    /// Forgets a saved cache found damaged while answering: the store starts empty, so the
    /// next refresh parses everything (and saves a sound cache).
    fn start_over(&mut self) {
        self.store = Store::default();
        self.tree = None;
        self.loaded = true;
        self.scanned = None;
        // What the map read from the damaged facts is as wrong as they were.
        self.map = map::MapCache::default();
        let _ = std::fs::remove_file(&self.file);
    }

    /// Answers with `answer`, and again from a fresh parse when a piece of the saved cache it
    /// read turned out damaged: a damaged cache costs a parse, never a wrong answer.
    fn checked<T>(&mut self, answer: impl Fn(&mut Self) -> T) -> T {
        let first = answer(self);
        if !self.store.take_damaged() {
            return first;
        }
        self.start_over();
        answer(self)
    }

    /// Brings the cache up to date; returns (files parsed now, source files).
    fn refresh(&mut self) -> Result<(usize, usize), String> {
        self.load();
        // Stamped before it is read: an index written meanwhile differs from the stamp.
        let index_now = self.git_index.as_deref().and_then(file_stamp);
        // Relative paths only: a path on disk is joined for each directory, and for each file
        // that is read again (60,000 joins of a kernel took 15 ms).
        let (sources, mut skipped): (Vec<String>, _) = match self.tree.as_ref().filter(|t| index_now == Some(t.index)) {
            Some(tree) => {
                let mut rels: Vec<&str> = self.store.paths().chain(tree.unlisted.iter().map(String::as_str)).collect();
                // Saved in order: a sort of 60,000 paths is then skipped.
                if !rels.is_sorted() {
                    rels.sort_unstable();
                }
                rels.dedup();
                (rels.into_iter().map(str::to_owned).collect(), tree.other.clone())
            }
            None => {
                let tracked = tracked_files(&self.workspace).map_err(|e| e.to_string())?;
                let mut other: BTreeMap<String, usize> = BTreeMap::new();
                let mut sources = Vec::new();
                for f in tracked {
                    if lang::by_extension(&f.rel).is_some() || lang::extensionless(&f.rel) {
                        sources.push(f.rel);
                    } else if let Some(language) = lang::other_language(&f.rel) {
                        *other.entry(language.to_owned()).or_default() += 1;
                    }
                }
                (sources, other)
            }
        };
        let mut stale = Vec::new();
        let mut live: rustc_hash::FxHashSet<&str> = Default::default();
        let mut unlisted = Vec::new();
        for (rel, meta) in sources.iter().zip(stat_all(&self.workspace, &sources)) {
            let Some(meta) = meta.filter(|m| candidate(rel, m)) else {
                unlisted.push(rel.clone());
                continue;
            };
            live.insert(rel);
            let seen = Seen { size: meta.len, mtime_ns: meta.mtime_ns, ino: meta.ino };
            if !self.store.get(rel).is_some_and(|c| seen.is(c)) {
                let f = Tracked { rel: rel.clone(), path: self.workspace.join(rel) };
                stale.push((f, seen));
            }
        }
        let parsed = self.reparse(stale);
        let gone: Vec<String> = self.store.paths().filter(|k| !live.contains(k)).map(str::to_owned).collect();
        for rel in gone {
            self.store.remove(&rel);
            self.dirty = true;
        }
        if let Some(index) = index_now {
            let tree = TreeStamp { index, other: skipped.clone(), unlisted };
            if self.tree.as_ref() != Some(&tree) {
                self.tree = Some(tree);
                self.dirty = true;
            }
        }
        for (_, _, s) in self.store.summaries() {
            if !s.lang.is_empty() && lang::by_name(&s.lang).is_none() {
                *skipped.entry(s.lang.clone()).or_default() += 1;
            }
        }
        self.skipped = skipped;
        self.save_if_dirty();
        let sources = self.source_files();
        self.scanned = Some(sources);
        Ok((parsed, sources))
    }

    /// Reads the `stale` files (file, size, mtime in ns, as stat saw them) on every core and
    /// merges them into the cache: one whose content hash is the cached one (a `touch`, a
    /// checkout back and forth) only takes its new mtime — hashing is far cheaper than
    /// parsing — and any other is parsed. A file that cannot be read keeps its entry. Returns
    /// the number of files parsed.
    fn reparse(&mut self, stale: Vec<(Tracked, Seen)>) -> usize {
        let work: Vec<(Tracked, Seen, Option<Hash>)> = stale
            .into_iter()
            .map(|(f, seen)| {
                let known = self.store.get(&f.rel).filter(|c| c.size == seen.size).map(|c| c.hash);
                (f, seen, known)
            })
            .collect();
        let read = parse_all(&work);
        let mut parsed = 0;
        for (rel, reread) in read {
            self.dirty = true;
            match reread {
                Reread::Same { mtime_ns, ino } => self.store.touch(&rel, mtime_ns, ino),
                Reread::Parsed(c) => {
                    parsed += usize::from(lang::by_name(&c.facts.lang).is_some());
                    self.store.insert(rel, c);
                }
            }
        }
        parsed
    }

    /// Hands a snapshot of the cache to the saving thread when it changed.
    fn save_if_dirty(&mut self) {
        if !std::mem::take(&mut self.dirty) {
            return;
        }
        let snapshot = Snapshot { entries: self.store.snapshot(), tree: self.tree.clone() };
        let file = &self.file;
        self.saver.get_or_insert_with(|| Saver::start(file.clone())).save(snapshot);
    }

    fn counts(&self, parsed: usize, scanned: usize) -> answer::Counts {
        answer::Counts { parsed, scanned, skipped: self.skipped.clone() }
    }

    fn callers(&mut self, msg: Callers) -> Result<CallersReply, String> {
        self.checked(|me| {
            let (parsed, scanned) = me.fresh()?;
            let counts = me.counts(parsed, scanned);
            Ok(answer::callers(&me.workspace, &me.store, &msg.symbol, msg.path.as_deref(), msg.limit, counts))
        })
    }

    fn impact(&mut self, msg: Impact) -> Result<ImpactReply, String> {
        self.checked(|me| {
            me.fresh()?;
            Ok(answer::impact(&me.workspace, &me.store, &msg.symbol, msg.depth, me.skipped.clone()))
        })
    }

    fn symbols(&mut self, msg: Symbols) -> Result<SymbolsReply, SymbolsError> {
        match &msg.target {
            SymbolsOf::File(rel) => self.outline(rel, msg.offset, msg.limit).map(SymbolsReply::Outline),
            SymbolsOf::Query { query, kind, path } => self.checked(|me| {
                let (parsed, scanned) = me.fresh().map_err(SymbolsError::Internal)?;
                me.store.list_constants();
                let counts = me.counts(parsed, scanned);
                let args = answer::FindArgs {
                    query,
                    kind: *kind,
                    path: path.as_deref(),
                    offset: msg.offset,
                    limit: msg.limit,
                };
                Ok(SymbolsReply::Found(answer::find(&me.workspace, &me.store, args, counts)))
            }),
        }
    }

    /// The repository's map: its most referenced definitions within `msg.tokens`.
    fn map(&mut self, msg: Map) -> Result<MapReply, String> {
        self.checked(|me| {
            let (parsed, scanned) = me.fresh()?;
            let graph = me.map.graph(&me.store);
            let focus = map::Focus::of(&graph, &msg.focus);
            let ranked = map::rank(&graph, &me.store, &focus, msg.path.as_deref());
            let shown = map_text::render(&me.workspace, &graph, &me.store, &ranked, msg.tokens.saturating_mul(4));
            Ok(MapReply {
                tokens: shown.text.len().div_ceil(4),
                map: shown.text,
                files: shown.files,
                definitions: shown.definitions,
                cut: shown.cut,
                fresh: parsed,
                files_scanned: scanned,
                skipped: me.skipped.clone(),
            })
        })
    }

    /// One file's outline. The file is read as it is now: from the index when its entry is
    /// fresh, else parsed on the spot (without reading the whole cache, which a first call on
    /// a large tree would wait for).
    fn outline(&mut self, rel: &str, offset: usize, limit: usize) -> Result<OutlineReply, SymbolsError> {
        let path = self.workspace.join(rel);
        let meta = std::fs::metadata(&path).map_err(|_| SymbolsError::NotFound(rel.to_owned()))?;
        if meta.is_dir() {
            return Err(SymbolsError::IsADirectory(rel.to_owned()));
        }
        let fresh = self.store.get(rel).is_some_and(|c| Seen::of(&meta).is(c));
        if self.loaded && fresh {
            if let Some((facts, summary)) = self.store.facts(rel) {
                if lang::by_name(&summary.lang).is_some() {
                    let reply = answer::outline(&self.workspace, rel, facts, offset, limit);
                    if !self.store.take_damaged() {
                        return Ok(reply);
                    }
                    // Its saved facts are damaged: parsed below, and the rest on the next call.
                    self.start_over();
                }
            }
        }
        let bytes = std::fs::read(&path).map_err(|e| SymbolsError::Internal(format!("cannot read {rel}: {e}")))?;
        let lang = language_of(rel, &bytes).map_err(|other| SymbolsError::Unsupported {
            path: rel.to_owned(),
            language: if other.is_empty() { None } else { Some(other.to_owned()) },
        })?;
        if std::str::from_utf8(&bytes).is_err() {
            return Err(SymbolsError::NotText { path: rel.to_owned(), size: bytes.len() as u64 });
        }
        let facts = lang
            .compiled()
            .and_then(|compiled| extract::analyze(lang, compiled, &bytes, &mut Parser::new()))
            .ok_or_else(|| SymbolsError::Internal(format!("the {} parser could not read {rel}", lang.name)))?;
        Ok(answer::outline(&self.workspace, rel, &facts, offset, limit))
    }
}

/// Reads and parses files on every core; returns what each read found.
fn parse_all(work: &[(Tracked, Seen, Option<Hash>)]) -> Vec<(String, Reread)> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    // Small pieces handed out in turn, so that one core is not left with the big files.
    let next = std::sync::atomic::AtomicUsize::new(0);
    const PIECE: usize = 16;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads.min(work.len().div_ceil(PIECE)).max(1))
            .map(|_| {
                scope.spawn(|| {
                    let mut parser = Parser::new();
                    let mut out = Vec::new();
                    loop {
                        let from = next.fetch_add(PIECE, std::sync::atomic::Ordering::Relaxed);
                        let Some(part) = work.get(from..(from + PIECE).min(work.len())) else { break };
                        if part.is_empty() {
                            break;
                        }
                        for (f, seen, known) in part {
                            let Ok(bytes) = std::fs::read(&f.path) else { continue };
                            let hash: Hash = Sha256::digest(&bytes).into();
                            if *known == Some(hash) {
                                out.push((f.rel.clone(), Reread::Same { mtime_ns: seen.mtime_ns, ino: seen.ino }));
                                continue;
                            }
                            // The size of the bytes parsed, not the one stat saw: the entry
                            // describes what was parsed even when the file was written in
                            // between (its older mtime makes the next call look).
                            let size = bytes.len() as u64;
                            let facts = Arc::new(parse(&f.rel, bytes, &mut parser));
                            out.push((
                                f.rel.clone(),
                                Reread::Parsed(Cached {
                                    stamp: Stamp { size, mtime_ns: seen.mtime_ns, hash, ino: seen.ino },
                                    facts,
                                }),
                            ));
                        }
                    }
                    out
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).flatten().collect()
    })
}

/// What reading a stale file found.
enum Reread {
    /// The cached content, under a new mtime (or inode).
    Same {
        mtime_ns: u64,
        ino: u64,
    },
    Parsed(Cached),
}

/// What stat said of a file: enough to tell whether its cached facts still hold.
#[derive(Debug, Clone, Copy)]
struct Seen {
    size: u64,
    mtime_ns: u64,
    ino: u64,
}

impl Seen {
    fn of(meta: &std::fs::Metadata) -> Self {
        Seen { size: meta.len(), mtime_ns: mtime_ns(meta), ino: gm_actors::sys::inode(meta) }
    }

    fn is(&self, stamp: &Stamp) -> bool {
        stamp.matches(self.size, self.mtime_ns, self.ino)
    }
}

/// A file's size, mtime (ns) and inode (0 where the OS does not say).
fn file_stamp(path: &std::path::Path) -> Option<(u64, u64, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    let inode = gm_actors::sys::file_identity(&meta).map_or(0, |(_, ino)| ino);
    Some((meta.len(), mtime_ns(&meta), inode))
}

fn mtime_ns(meta: &std::fs::Metadata) -> u64 {
    let since_epoch = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok());
    since_epoch.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

impl Actor for CallIndex {
    type Context = SyncContext<Self>;
}

/// Who calls `symbol` (a function or method name; `Type.name`, `module.name` narrow it).
#[derive(Message)]
#[rtype(result = "Result<CallersReply, String>")]
pub struct Callers {
    pub symbol: String,
    pub path: Option<String>,
    pub limit: usize,
}

/// What calls `symbol`, and what calls those, up to `depth` steps.
#[derive(Message)]
#[rtype(result = "Result<ImpactReply, String>")]
pub struct Impact {
    pub symbol: String,
    pub depth: usize,
}

/// A file's outline, or the workspace's definitions matching a name.
#[derive(Message)]
#[rtype(result = "Result<SymbolsReply, SymbolsError>")]
pub struct Symbols {
    pub target: SymbolsOf,
    pub offset: usize,
    pub limit: usize,
}

/// The repository at a glance: its most referenced definitions, `focus` raised, within
/// `tokens` (estimated as bytes / 4).
#[derive(Message)]
#[rtype(result = "Result<MapReply, String>")]
pub struct Map {
    pub tokens: usize,
    /// Files or folders (relative paths) and words.
    pub focus: Vec<String>,
    /// Only definitions in files under this path.
    pub path: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MapReply {
    /// File headers with the signatures of their ranked definitions, best file first.
    pub map: String,
    /// Files in the map.
    pub files: usize,
    /// Ranked definitions in the map (the lines that only show what they are nested in are
    /// not counted).
    pub definitions: usize,
    /// The map's size in tokens, estimated as bytes / 4.
    pub tokens: usize,
    /// Ranked definitions left out to fit the budget.
    pub cut: usize,
    /// Files parsed again for this answer (changed since the last call); the map is of the
    /// tree as it is now.
    pub fresh: usize,
    pub files_scanned: usize,
    /// Files of languages gm does not parse, by language.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub skipped: BTreeMap<String, usize>,
}

pub enum SymbolsOf {
    File(String),
    Query { query: String, kind: Option<DefKind>, path: Option<String> },
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum SymbolsReply {
    Outline(OutlineReply),
    Found(FoundReply),
}

#[derive(Debug, thiserror::Error)]
pub enum SymbolsError {
    #[error("no file at {0}")]
    NotFound(String),
    #[error("{0} is a directory")]
    IsADirectory(String),
    #[error("{path} is not UTF-8 text ({size} bytes)")]
    NotText { path: String, size: u64 },
    #[error("{path} is not in a language gm reads{}; it reads {}", language.as_ref().map(|l| format!(" (it is {l})")).unwrap_or_default(), lang::all().iter().map(|l| l.name).collect::<Vec<_>>().join(", "))]
    Unsupported { path: String, language: Option<String> },
    #[error("{0}")]
    Internal(String),
}

impl Handler<Callers> for CallIndex {
    type Result = Result<CallersReply, String>;
    fn handle(&mut self, msg: Callers, _: &mut SyncContext<Self>) -> Self::Result {
        self.callers(msg)
    }
}

impl Handler<Impact> for CallIndex {
    type Result = Result<ImpactReply, String>;
    fn handle(&mut self, msg: Impact, _: &mut SyncContext<Self>) -> Self::Result {
        self.impact(msg)
    }
}

impl Handler<Map> for CallIndex {
    type Result = Result<MapReply, String>;
    fn handle(&mut self, msg: Map, _: &mut SyncContext<Self>) -> Self::Result {
        self.map(msg)
    }
}

impl Handler<Symbols> for CallIndex {
    type Result = Result<SymbolsReply, SymbolsError>;
    fn handle(&mut self, msg: Symbols, _: &mut SyncContext<Self>) -> Self::Result {
        self.symbols(msg)
    }
}

#[cfg(test)]
mod tests;
