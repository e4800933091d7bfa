//! Call sites in JavaScript and TypeScript (tree-sitter): who calls a function or method, and
//! what a change to it reaches, transitively.
//!
//! Each tracked `.js/.jsx/.mjs/.cjs/.ts/.tsx/.mts/.cts` file is parsed once and its facts —
//! definitions, call sites with their enclosing function, import and export aliases — are
//! cached by size, mtime and content hash, so only changed files are parsed again. The cache
//! is kept in `<state dir>/calls/` too, so a new gm does not parse the whole tree again: a
//! parse of a large tree takes seconds, reading the cache back tens of milliseconds.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::UNIX_EPOCH;

use actix::prelude::*;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tree_sitter::{Language, Node, Parser};

use super::tracked::{tracked_files, Tracked};
use crate::watch::{Changes, Subscription};

/// Where a name is defined.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Definition {
    pub path: String,
    pub line: usize,
    pub kind: &'static str,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct CallSite {
    pub path: String,
    pub line: usize,
    pub column: usize,
    /// The called name as written (an alias when the import renamed it).
    pub callee: String,
    /// `call`, `method` (`obj.name(...)`) or `new`.
    pub kind: &'static str,
    /// The function the call is in (`<top level>` outside any).
    pub enclosing: String,
    /// The call's source text, shortened.
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, bitcode::Encode, bitcode::Decode)]
enum DefKind {
    Function,
    Method,
    Class,
}

impl DefKind {
    fn as_str(self) -> &'static str {
        match self {
            DefKind::Function => "function",
            DefKind::Method => "method",
            DefKind::Class => "class",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, bitcode::Encode, bitcode::Decode)]
enum CallKind {
    Call,
    Method,
    New,
}

impl CallKind {
    fn as_str(self) -> &'static str {
        match self {
            CallKind::Call => "call",
            CallKind::Method => "method",
            CallKind::New => "new",
        }
    }
}

/// A piece of [`FileFacts::strings`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, bitcode::Encode, bitcode::Decode)]
struct Span {
    start: u32,
    len: u32,
}

/// A definition in one file. The file's path is left out (it is the cache's key): the cache
/// file is smaller and reads back faster without one copy of it per fact.
#[derive(Debug, Clone, bitcode::Encode, bitcode::Decode)]
struct Def {
    name: Span,
    line: u32,
    kind: DefKind,
}

/// A call site in one file (see [`CallSite`]; the path is left out as in [`Def`]).
#[derive(Debug, Clone, bitcode::Encode, bitcode::Decode)]
struct Call {
    line: u32,
    column: u32,
    callee: Span,
    kind: CallKind,
    enclosing: Span,
    text: Span,
}

/// What one file defines and calls.
#[derive(Debug, Clone, Default, bitcode::Encode, bitcode::Decode)]
struct FileFacts {
    /// Every name and snippet of the file, each once, one after another: the facts point into
    /// it. A new gm reading the cache back then makes a few allocations per file instead of
    /// three per call site — those cost it most of its time, the kernel zeroing fresh pages.
    strings: String,
    definitions: Vec<Def>,
    calls: Vec<Call>,
    /// (local name, original name) from `import { a as b }` and `export { a as b }`.
    aliases: Vec<(Span, Span)>,
}

impl FileFacts {
    fn str(&self, span: Span) -> &str {
        let start = span.start as usize;
        self.strings.get(start..start + span.len as usize).unwrap_or("")
    }

    /// Whether `span` holds `s`; the lengths are compared first, which rules out most spans
    /// without touching the strings (`impact` compares every call site of the tree per name).
    fn is(&self, span: Span, s: &str) -> bool {
        span.len as usize == s.len() && self.str(span) == s
    }

    fn site(&self, path: &str, call: &Call) -> CallSite {
        CallSite {
            path: path.to_owned(),
            line: call.line as usize,
            column: call.column as usize,
            callee: self.str(call.callee).to_owned(),
            kind: call.kind.as_str(),
            enclosing: self.str(call.enclosing).to_owned(),
            text: self.str(call.text).to_owned(),
        }
    }
}

/// Builds one file's [`FileFacts`], storing each distinct string once.
#[derive(Default)]
struct Facts {
    facts: FileFacts,
    seen: HashMap<String, Span>,
}

impl Facts {
    /// `s`'s place in the strings; none past 4 GiB of them (the fact is then left out).
    fn intern(&mut self, s: &str) -> Option<Span> {
        if let Some(span) = self.seen.get(s) {
            return Some(*span);
        }
        let span = Span { start: u32::try_from(self.facts.strings.len()).ok()?, len: u32::try_from(s.len()).ok()? };
        span.start.checked_add(span.len)?;
        self.facts.strings.push_str(s);
        self.seen.insert(s.to_owned(), span);
        Some(span)
    }
}

/// SHA-256 of a file's bytes.
type Hash = [u8; 32];

#[derive(Debug, Clone, bitcode::Encode, bitcode::Decode)]
struct Cached {
    size: u64,
    mtime_ns: u64,
    hash: Hash,
    /// Shared with the saving thread's snapshot, so taking one copies no facts.
    facts: Arc<FileFacts>,
}

fn language(rel: &str) -> Option<Language> {
    let ext = rel.rsplit('.').next()?;
    Some(match ext {
        "js" | "jsx" | "mjs" | "cjs" => tree_sitter_javascript::LANGUAGE.into(),
        "ts" | "mts" | "cts" => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
        "tsx" => tree_sitter_typescript::LANGUAGE_TSX.into(),
        _ => return None,
    })
}

/// Parses one file into its facts.
fn analyze(rel: &str, source: &str, parser: &mut Parser) -> Option<FileFacts> {
    parser.set_language(&language(rel)?).ok()?;
    let tree = parser.parse(source, None)?;
    let mut facts = Facts::default();
    let mut cursor = tree.walk();
    let mut stack = vec![tree.root_node()];
    let src = source.as_bytes();
    while let Some(node) = stack.pop() {
        visit(node, src, &mut facts);
        if node.child_count() > 0 {
            let mut children: Vec<Node> = node.children(&mut cursor).collect();
            children.reverse();
            stack.extend(children);
        }
    }
    Some(facts.facts)
}

fn text<'a>(node: Node, src: &'a [u8]) -> &'a str {
    node.utf8_text(src).unwrap_or("")
}

/// A line or column number as stored (1-based).
fn number(n: usize) -> u32 {
    u32::try_from(n + 1).unwrap_or(u32::MAX)
}

fn visit(node: Node, src: &[u8], facts: &mut Facts) -> Option<()> {
    let line = number(node.start_position().row);
    match node.kind() {
        "call_expression" | "new_expression" => {
            let field = if node.kind() == "new_expression" { "constructor" } else { "function" };
            let target = node.child_by_field_name(field)?;
            let (callee, kind) = match target.kind() {
                "identifier" => {
                    let kind = if node.kind() == "new_expression" { CallKind::New } else { CallKind::Call };
                    (text(target, src), kind)
                }
                "member_expression" => (text(target.child_by_field_name("property")?, src), CallKind::Method),
                _ => return None,
            };
            let mut snippet: String = text(node, src).lines().next().unwrap_or("").trim().to_owned();
            if snippet.len() > 160 {
                snippet = format!("{}…", crate::text::head(&snippet, 160));
            }
            let call = Call {
                line,
                column: number(node.start_position().column),
                callee: facts.intern(callee)?,
                kind,
                enclosing: facts.intern(&enclosing(node, src))?,
                text: facts.intern(&snippet)?,
            };
            facts.facts.calls.push(call);
        }
        "import_specifier" | "export_specifier" => {
            if let (Some(name), Some(alias)) = (node.child_by_field_name("name"), node.child_by_field_name("alias")) {
                let alias = (facts.intern(text(alias, src))?, facts.intern(text(name, src))?);
                facts.facts.aliases.push(alias);
            }
        }
        _ => {
            if let Some((name, kind)) = defined_name(node, src) {
                let name = facts.intern(&name)?;
                facts.facts.definitions.push(Def { name, line, kind });
            }
        }
    }
    Some(())
}

/// The name a node defines, if it is a function-like definition.
fn defined_name(node: Node, src: &[u8]) -> Option<(String, DefKind)> {
    let named = |field: &str| node.child_by_field_name(field).map(|n| text(n, src).to_owned());
    match node.kind() {
        "function_declaration" | "generator_function_declaration" => Some((named("name")?, DefKind::Function)),
        "method_definition" => Some((named("name")?, DefKind::Method)),
        "class_declaration" => Some((named("name")?, DefKind::Class)),
        "variable_declarator" | "public_field_definition" | "field_definition" => {
            let value = node.child_by_field_name("value")?;
            matches!(value.kind(), "arrow_function" | "function_expression" | "function")
                .then(|| Some((named("name").or_else(|| named("property"))?, DefKind::Function)))?
        }
        "pair" => {
            let value = node.child_by_field_name("value")?;
            matches!(value.kind(), "arrow_function" | "function_expression" | "function")
                .then(|| Some((named("key")?, DefKind::Method)))?
        }
        _ => None,
    }
}

/// The name of the function a node is in.
fn enclosing(node: Node, src: &[u8]) -> String {
    let mut cur = node.parent();
    while let Some(n) = cur {
        match n.kind() {
            "function_declaration" | "generator_function_declaration" | "method_definition" => {
                if let Some((name, _)) = defined_name(n, src) {
                    return name;
                }
            }
            "arrow_function" | "function_expression" | "function" => {
                if let Some(p) = n.parent() {
                    if let Some((name, _)) = defined_name(p, src) {
                        return name;
                    }
                }
                if let Some(name) = n.child_by_field_name("name") {
                    return text(name, src).to_owned();
                }
            }
            _ => {}
        }
        cur = n.parent();
    }
    "<top level>".into()
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallersReply {
    pub symbol: String,
    pub callers: Vec<CallSite>,
    pub total: usize,
    pub left_out: usize,
    pub definitions: Vec<Definition>,
    /// More than one definition has this name: the call sites may belong to any of them.
    pub ambiguous: bool,
    /// Other names this symbol is called by (import/export aliases).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    pub files_parsed: usize,
    pub files_scanned: usize,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ImpactReply {
    pub symbol: String,
    pub depth: usize,
    /// Every function reached, with the step at which it was reached (0 = the symbol).
    pub nodes: Vec<ImpactNode>,
    /// caller -> callee, one per call site.
    pub edges: Vec<ImpactEdge>,
    pub files: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImpactNode {
    pub name: String,
    pub level: usize,
    pub definitions: Vec<Definition>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImpactEdge {
    pub from: String,
    pub to: String,
    pub path: String,
    pub line: usize,
}

/// The call-site index as an actor on its own thread (`SyncArbiter::start(1, ...)`).
pub struct CallIndex {
    workspace: PathBuf,
    /// `<state dir>/calls/cache.bin`.
    file: PathBuf,
    cache: HashMap<String, Cached>,
    /// The saved cache is read on the first call rather than at start: most sessions never ask
    /// for callers, and those that do pay for the read once.
    loaded: bool,
    /// The cache changed since it was last saved.
    dirty: bool,
    saver: Option<Saver>,
    /// What the watcher saw change: with it, a call looks only at those files.
    changes: Subscription,
    /// Tracked JS/TS files as the last full refresh counted them; `None` before the first.
    scanned: Option<usize>,
    /// Whether the workspace is in a git repository (a new file is not tracked until added).
    in_git: bool,
}

impl CallIndex {
    /// The index of `workspace`, keeping its cache under `state_dir` (the workspace's `.gm`).
    pub fn new(workspace: PathBuf, state_dir: PathBuf, changes: Subscription) -> Self {
        let file = state_dir.join("calls").join("cache.bin");
        let in_git = git2::Repository::discover(&workspace).is_ok();
        Self {
            workspace,
            file,
            cache: HashMap::new(),
            loaded: false,
            dirty: false,
            saver: None,
            changes,
            scanned: None,
            in_git,
        }
    }

    /// Brings the cache up to date with every change made before this call: only the files
    /// the watcher saw change, or everything when it cannot say (no watcher, lost events,
    /// git's index moved). Returns (files parsed now, tracked files).
    fn fresh(&mut self) -> Result<(usize, usize), String> {
        let changes = self.changes.changes();
        if let (Changes::Watched(dirty), Some(tracked)) = (&changes, self.scanned) {
            if !dirty.all && !dirty.tracked && !self.new_file_under(&dirty.unwatched) {
                // A directory the watcher could not watch stands for the files under it,
                // which `update` checks by size and mtime.
                let paths: BTreeSet<String> = dirty.paths.union(&dirty.unwatched).cloned().collect();
                if let Some(parsed) = self.update(&paths) {
                    return Ok((parsed, tracked));
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
                crate::watch::files_under(&self.workspace, dir)
                    .any(|rel| language(&rel).is_some() && !self.cache.contains_key(&rel))
            })
    }

    /// Reparses the changed files among `paths` (a path may be a directory that went away);
    /// `None` when a new file outside git needs the file list read again.
    fn update(&mut self, paths: &BTreeSet<String>) -> Option<usize> {
        let mut candidates: BTreeSet<String> = BTreeSet::new();
        for path in paths {
            if self.cache.contains_key(path) {
                candidates.insert(path.clone());
                continue;
            }
            let under = format!("{path}/");
            let before = candidates.len();
            candidates.extend(self.cache.keys().filter(|k| k.starts_with(&under)).cloned());
            let new_file = candidates.len() == before && language(path).is_some();
            if new_file && !self.in_git && self.workspace.join(path).is_file() {
                return None;
            }
        }
        let mut stale = Vec::new();
        for rel in candidates {
            let path = self.workspace.join(&rel);
            match std::fs::metadata(&path) {
                Ok(meta) if meta.is_file() => {
                    let mtime_ns = mtime_ns(&meta);
                    let fresh = self.cache.get(&rel).is_some_and(|c| c.size == meta.len() && c.mtime_ns == mtime_ns);
                    if !fresh {
                        stale.push((Tracked { rel, path }, meta.len(), mtime_ns));
                    }
                }
                _ => {
                    self.cache.remove(&rel);
                    self.dirty = true;
                }
            }
        }
        let parsed = self.reparse(stale);
        self.save_if_dirty();
        Some(parsed)
    }

    /// Brings the cache up to date; returns (files parsed now, files considered).
    fn refresh(&mut self) -> Result<(usize, usize), String> {
        if !std::mem::replace(&mut self.loaded, true) {
            // No cache yet, one of another version or a damaged one: everything is parsed.
            self.cache = load(&self.file).unwrap_or_default();
            if let Some(dir) = self.file.parent() {
                remove_stale_temporaries(dir);
            }
        }
        let files: Vec<Tracked> = tracked_files(&self.workspace)
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|f| language(&f.rel).is_some())
            .collect();
        let mut stale = Vec::new();
        for f in &files {
            let Ok(meta) = std::fs::metadata(&f.path) else { continue };
            let mtime_ns = mtime_ns(&meta);
            let fresh = self.cache.get(&f.rel).is_some_and(|c| c.size == meta.len() && c.mtime_ns == mtime_ns);
            if !fresh {
                stale.push((f.clone(), meta.len(), mtime_ns));
            }
        }
        let parsed = self.reparse(stale);
        let live: BTreeSet<&str> = files.iter().map(|f| f.rel.as_str()).collect();
        let before = self.cache.len();
        self.cache.retain(|k, _| live.contains(k.as_str()));
        self.dirty |= self.cache.len() != before;
        self.save_if_dirty();
        self.scanned = Some(files.len());
        Ok((parsed, files.len()))
    }

    /// Reads the `stale` files (file, size, mtime in ns, as stat saw them) in parallel and
    /// merges them into the cache: one whose content hash is the cached one (a `touch`, a
    /// checkout back and forth) only takes its new mtime — hashing is far cheaper than
    /// parsing — and any other is parsed. A file that cannot be read keeps its entry. Returns
    /// the number of files parsed.
    fn reparse(&mut self, stale: Vec<(Tracked, u64, u64)>) -> usize {
        let work: Vec<(Tracked, u64, Option<Hash>)> = stale
            .into_iter()
            .map(|(f, size, mtime_ns)| {
                let known = self.cache.get(&f.rel).filter(|c| c.size == size).map(|c| c.hash);
                (f, mtime_ns, known)
            })
            .collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = work.len().div_ceil(threads).max(1);
        let read: Vec<(String, Reread)> = std::thread::scope(|scope| {
            let handles: Vec<_> = work
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        let mut parser = Parser::new();
                        part.iter()
                            .filter_map(|(f, mtime_ns, known)| {
                                let bytes = std::fs::read(&f.path).ok()?;
                                let hash: Hash = Sha256::digest(&bytes).into();
                                if *known == Some(hash) {
                                    return Some((f.rel.clone(), Reread::Same { mtime_ns: *mtime_ns }));
                                }
                                // The size of the bytes parsed, not the one stat saw: the
                                // entry describes what was parsed even when the file was
                                // written in between (its older mtime makes the next call look).
                                let size = bytes.len() as u64;
                                let source = String::from_utf8(bytes).ok()?;
                                let facts = Arc::new(analyze(&f.rel, &source, &mut parser).unwrap_or_default());
                                Some((f.rel.clone(), Reread::Parsed(Cached { size, mtime_ns: *mtime_ns, hash, facts })))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).flatten().collect()
        });
        let mut parsed = 0;
        for (rel, reread) in read {
            self.dirty = true;
            match reread {
                Reread::Same { mtime_ns } => {
                    if let Some(c) = self.cache.get_mut(&rel) {
                        c.mtime_ns = mtime_ns;
                    }
                }
                Reread::Parsed(c) => {
                    parsed += 1;
                    self.cache.insert(rel, c);
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
        let snapshot: Snapshot = self.cache.iter().map(|(k, c)| (k.clone(), c.clone())).collect();
        let file = &self.file;
        self.saver.get_or_insert_with(|| Saver::start(file.clone())).save(snapshot);
    }

    fn definitions(&self, name: &str) -> Vec<Definition> {
        let mut d: Vec<Definition> = self
            .cache
            .iter()
            .flat_map(|(rel, c)| {
                c.facts.definitions.iter().filter(|d| c.facts.is(d.name, name)).map(move |d| Definition {
                    path: rel.clone(),
                    line: d.line as usize,
                    kind: d.kind.as_str(),
                })
            })
            .collect();
        d.sort();
        d
    }

    /// The names `name` is called by: itself and its import/export aliases, transitively.
    fn names_of(&self, name: &str) -> Vec<String> {
        let mut names = vec![name.to_owned()];
        let mut i = 0;
        while i < names.len() {
            let current = names[i].clone();
            for c in self.cache.values() {
                for &(local, original) in &c.facts.aliases {
                    let local = c.facts.str(local);
                    if c.facts.is(original, &current) && !names.iter().any(|n| n == local) {
                        names.push(local.to_owned());
                    }
                }
            }
            i += 1;
        }
        names
    }

    fn call_sites(&self, names: &[String], path: Option<&str>) -> Vec<CallSite> {
        let mut sites: Vec<CallSite> = self
            .cache
            .iter()
            .filter(|(rel, _)| path.is_none_or(|p| rel.starts_with(p)))
            .flat_map(|(rel, c)| {
                let f = &c.facts;
                f.calls.iter().filter(|s| names.iter().any(|n| f.is(s.callee, n))).map(|s| f.site(rel, s))
            })
            .collect();
        sites.sort_by(|a, b| (&a.path, a.line, a.column).cmp(&(&b.path, b.line, b.column)));
        sites
    }

    fn callers(&mut self, msg: Callers) -> Result<CallersReply, String> {
        let (parsed, scanned) = self.fresh()?;
        let name = last_segment(&msg.symbol);
        let names = self.names_of(&name);
        let mut sites = self.call_sites(&names, msg.path.as_deref());
        let total = sites.len();
        sites.truncate(msg.limit);
        let definitions = self.definitions(&name);
        Ok(CallersReply {
            symbol: msg.symbol,
            left_out: total - sites.len(),
            total,
            callers: sites,
            ambiguous: definitions.len() > 1,
            definitions,
            aliases: names.into_iter().skip(1).collect(),
            files_parsed: parsed,
            files_scanned: scanned,
        })
    }

    fn impact(&mut self, msg: Impact) -> Result<ImpactReply, String> {
        self.fresh()?;
        let start = last_segment(&msg.symbol);
        let mut level: BTreeMap<String, usize> = BTreeMap::from([(start.clone(), 0)]);
        let mut queue = VecDeque::from([start.clone()]);
        let mut edges = Vec::new();
        let mut files = BTreeSet::new();
        while let Some(name) = queue.pop_front() {
            let at = level[&name];
            if at >= msg.depth {
                continue;
            }
            for site in self.call_sites(&self.names_of(&name), None) {
                files.insert(site.path.clone());
                edges.push(ImpactEdge {
                    from: site.enclosing.clone(),
                    to: name.clone(),
                    path: site.path.clone(),
                    line: site.line,
                });
                if site.enclosing != "<top level>" && !level.contains_key(&site.enclosing) {
                    level.insert(site.enclosing.clone(), at + 1);
                    queue.push_back(site.enclosing);
                }
            }
        }
        let mut nodes: Vec<ImpactNode> = level
            .into_iter()
            .map(|(name, level)| ImpactNode { definitions: self.definitions(&name), name, level })
            .collect();
        nodes.sort_by(|a, b| (a.level, &a.name).cmp(&(b.level, &b.name)));
        Ok(ImpactReply { symbol: msg.symbol, depth: msg.depth, nodes, edges, files: files.into_iter().collect() })
    }
}

/// What reading a stale file found.
enum Reread {
    /// The cached content, under a new mtime.
    Same {
        mtime_ns: u64,
    },
    Parsed(Cached),
}

fn mtime_ns(meta: &std::fs::Metadata) -> u64 {
    let since_epoch = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok());
    since_epoch.map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// The cache's entries, as handed to the saving thread.
type Snapshot = Vec<(String, Cached)>;

/// Writes the cache on a thread of its own, so that no reply waits for the encoding and the
/// disk; when snapshots queue up, only the newest is written.
struct Saver {
    file: PathBuf,
    tx: Option<mpsc::Sender<Snapshot>>,
    thread: Option<JoinHandle<()>>,
}

impl Saver {
    fn start(file: PathBuf) -> Self {
        let (tx, rx) = mpsc::channel::<Snapshot>();
        let to = file.clone();
        let thread = std::thread::Builder::new()
            .name("gm-calls-save".into())
            .spawn(move || {
                while let Ok(mut snapshot) = rx.recv() {
                    while let Ok(newer) = rx.try_recv() {
                        snapshot = newer;
                    }
                    // A cache that cannot be written costs the next gm a parse, nothing else.
                    let _ = save(&to, &snapshot);
                }
            })
            .ok();
        // Without a thread, the index saves on its own (the reply waits).
        Self { file, tx: thread.is_some().then_some(tx), thread }
    }

    fn save(&self, snapshot: Snapshot) {
        let unsent = match &self.tx {
            Some(tx) => tx.send(snapshot).err().map(|e| e.0),
            None => Some(snapshot),
        };
        if let Some(snapshot) = unsent {
            let _ = save(&self.file, &snapshot);
        }
    }
}

impl Drop for Saver {
    /// Waits for the last snapshot to be written, so that an index started after this one is
    /// dropped finds it.
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The cache file starts with this, then the format version (u32 LE), then the CRC-32 of the
/// body (u32 LE); the body is the entries, bitcode-encoded. The checksum catches damage that
/// would still decode (a flipped byte in a name), which would otherwise answer wrongly until
/// the file changed.
const MAGIC: &[u8; 8] = b"gm-calls";
/// Bump it when `Cached` or anything it holds changes, or what `analyze` records, or when the
/// bitcode dependency moves to another 0.x (its encoding may change between those): a cache of
/// another version is ignored.
const FORMAT_VERSION: u32 = 1;
const HEADER_LEN: usize = 16;

#[derive(Debug, thiserror::Error)]
enum CacheError {
    #[error("call-site cache: {0}")]
    Io(#[from] std::io::Error),
    #[error("the call-site cache is not of format version {FORMAT_VERSION}")]
    Version,
    #[error("the call-site cache is damaged (its checksum does not match)")]
    Checksum,
    #[error("the call-site cache cannot be decoded: {0}")]
    Decode(#[from] bitcode::Error),
}

fn encode(entries: &[(String, Cached)]) -> Vec<u8> {
    let body = bitcode::encode(entries);
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

fn decode(bytes: &[u8]) -> Result<HashMap<String, Cached>, CacheError> {
    let (header, body) = bytes.split_at_checked(HEADER_LEN).ok_or(CacheError::Version)?;
    if header[..8] != MAGIC[..] || header[8..12] != FORMAT_VERSION.to_le_bytes() {
        return Err(CacheError::Version);
    }
    if header[12..] != crc32fast::hash(body).to_le_bytes() {
        return Err(CacheError::Checksum);
    }
    let entries: Vec<(String, Cached)> = bitcode::decode(body)?;
    Ok(entries.into_iter().collect())
}

/// Removes the temporary files of saves cut short (a gm that exited while its saving thread
/// wrote; `gm_actors::fs::replace` names them `.<name>.gm-tmp-<pid>-<n>`). One older than a
/// minute is no live save's: a save takes well under a second.
fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let temporary = entry.file_name().to_string_lossy().contains(".gm-tmp-");
        let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        if temporary && age.is_some_and(|a| a > std::time::Duration::from_secs(60)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn load(file: &Path) -> Result<HashMap<String, Cached>, CacheError> {
    decode(&std::fs::read(file)?)
}

fn save(file: &Path, entries: &[(String, Cached)]) -> Result<(), CacheError> {
    let bytes = encode(entries);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    gm_actors::fs::replace(file, &bytes)?;
    Ok(())
}

impl Actor for CallIndex {
    type Context = SyncContext<Self>;
}

/// Who calls `symbol` (a function or method name; `obj.name` means `name`).
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

fn last_segment(symbol: &str) -> String {
    symbol.rsplit('.').next().unwrap_or(symbol).trim_end_matches("()").to_owned()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(rel: &str, src: &str) -> FileFacts {
        analyze(rel, src, &mut Parser::new()).expect("parsed")
    }

    #[test]
    fn calls_methods_and_constructors_with_their_enclosing_function() {
        let f = facts(
            "a.ts",
            "function outer() { helper(1); obj.save(); }\nconst arrow = () => new Thing();\nclass C { run() { this.helper(); } }\nhelper();\n",
        );
        let got: Vec<(String, &str, String, usize)> = f
            .calls
            .iter()
            .map(|c| (f.str(c.callee).to_owned(), c.kind.as_str(), f.str(c.enclosing).to_owned(), c.line as usize))
            .collect();
        assert_eq!(
            got,
            [
                ("helper".to_owned(), "call", "outer".to_owned(), 1),
                ("save".to_owned(), "method", "outer".to_owned(), 1),
                ("Thing".to_owned(), "new", "arrow".to_owned(), 2),
                ("helper".to_owned(), "method", "run".to_owned(), 3),
                ("helper".to_owned(), "call", "<top level>".to_owned(), 4),
            ]
        );
        let defs: Vec<&str> = f.definitions.iter().map(|d| f.str(d.name)).collect();
        assert_eq!(defs, ["outer", "arrow", "C", "run"]);
    }

    #[test]
    fn import_and_export_aliases_are_recorded() {
        let f = facts("b.js", "import { load as fetchIt } from './a';\nexport { fetchIt as get };\nfetchIt();\n");
        let aliases: Vec<(&str, &str)> =
            f.aliases.iter().map(|&(local, original)| (f.str(local), f.str(original))).collect();
        assert_eq!(aliases, [("fetchIt", "load"), ("get", "fetchIt")]);
    }

    #[test]
    fn tsx_and_jsx_parse() {
        let f = facts("c.tsx", "export const App = () => <div onClick={() => track('x')}>{render()}</div>;\n");
        let callees: Vec<&str> = f.calls.iter().map(|c| f.str(c.callee)).collect();
        assert_eq!(callees, ["track", "render"]);
    }

    /// A workspace of two files: `a.ts` defines and calls `helper`, `b.ts` calls it from `run`.
    fn workspace() -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "a.ts", "export function helper() {}\nhelper();\n");
        write(dir.path(), "b.ts", "import { helper } from './a';\nfunction run() { helper(); }\n");
        dir
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        std::fs::write(dir.join(rel), text).expect("write");
    }

    /// An index as gm starts one: a new process's, over the workspace's `.gm`.
    fn index(dir: &Path) -> CallIndex {
        CallIndex::new(dir.to_owned(), dir.join(".gm"), crate::watch::Watcher::off("unit test").subscribe())
    }

    fn callers(index: &mut CallIndex, symbol: &str) -> CallersReply {
        index.callers(Callers { symbol: symbol.into(), path: None, limit: 50 }).expect("callers")
    }

    fn sites(r: &CallersReply) -> Vec<String> {
        r.callers.iter().map(|c| format!("{}:{} in {}", c.path, c.line, c.enclosing)).collect()
    }

    /// A first gm's whole run: its index answers once and is dropped, which waits for its save.
    fn first_run(dir: &Path) -> CallersReply {
        let mut first = index(dir);
        let r = callers(&mut first, "helper");
        assert_eq!((r.files_parsed, r.files_scanned), (2, 2));
        r
    }

    fn cache_file(dir: &Path) -> PathBuf {
        dir.join(".gm").join("calls").join("cache.bin")
    }

    #[test]
    fn a_new_index_answers_from_the_saved_cache_without_parsing_unchanged_files() {
        let dir = workspace();
        let before = first_run(dir.path());
        let saved_at = std::fs::metadata(cache_file(dir.path())).and_then(|m| m.modified()).expect("saved");
        let mut second = index(dir.path());
        let r = callers(&mut second, "helper");
        assert_eq!((r.files_parsed, r.files_scanned), (0, 2));
        assert_eq!(sites(&r), sites(&before));
        assert_eq!(sites(&r), ["a.ts:2 in <top level>", "b.ts:2 in run"]);
        assert_eq!(r.definitions, before.definitions);
        drop(second);
        let now = std::fs::metadata(cache_file(dir.path())).and_then(|m| m.modified()).expect("saved");
        assert_eq!(now, saved_at, "a refresh that changed nothing does not write the cache again");
    }

    #[test]
    fn a_file_changed_while_gm_was_not_running_is_parsed_again_and_its_new_call_found() {
        let dir = workspace();
        first_run(dir.path());
        write(
            dir.path(),
            "b.ts",
            "import { helper } from './a';\nfunction run() { helper(); }\nconst later = () => helper();\n",
        );
        let r = callers(&mut index(dir.path()), "helper");
        assert_eq!(r.files_parsed, 1);
        assert_eq!(sites(&r), ["a.ts:2 in <top level>", "b.ts:2 in run", "b.ts:3 in later"]);
    }

    #[test]
    fn a_touched_file_with_the_same_content_is_not_parsed_again() {
        let dir = workspace();
        first_run(dir.path());
        let touched = std::time::SystemTime::now() + std::time::Duration::from_secs(60);
        let file = std::fs::File::options().write(true).open(dir.path().join("a.ts")).expect("open");
        file.set_modified(touched).expect("touch");
        let mut second = index(dir.path());
        let r = callers(&mut second, "helper");
        assert_eq!(r.files_parsed, 0);
        assert_eq!(sites(&r), ["a.ts:2 in <top level>", "b.ts:2 in run"]);
        drop(second);
        // The new mtime was saved: the next gm finds the file fresh without hashing it.
        let mut third = index(dir.path());
        third.refresh().expect("refresh");
        let want = mtime_ns(&std::fs::metadata(dir.path().join("a.ts")).expect("stat"));
        assert_eq!(third.cache.get("a.ts").map(|c| c.mtime_ns), Some(want));
    }

    #[test]
    fn a_damaged_truncated_or_other_version_cache_is_ignored_and_everything_parsed_again() {
        let dir = workspace();
        first_run(dir.path());
        let good = std::fs::read(cache_file(dir.path())).expect("saved");
        let mut flipped = good.clone();
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x55;
        let mut other_version = good.clone();
        other_version[8..12].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
        let damaged = [flipped, good[..good.len() / 2].to_vec(), other_version, b"gm".to_vec(), Vec::new()];
        for bad in damaged {
            std::fs::write(cache_file(dir.path()), &bad).expect("damage");
            let mut again = index(dir.path());
            let r = callers(&mut again, "helper");
            assert_eq!(r.files_parsed, 2, "a damaged cache of {} bytes is not used", bad.len());
            assert_eq!(sites(&r), ["a.ts:2 in <top level>", "b.ts:2 in run"]);
            drop(again);
            assert_eq!(std::fs::read(cache_file(dir.path())).expect("saved").len(), good.len(), "saved again");
        }
    }

    #[test]
    fn a_temporary_left_by_a_save_cut_short_is_removed_once_old() {
        let dir = workspace();
        first_run(dir.path());
        let calls = dir.path().join(".gm").join("calls");
        let (old, recent) = (calls.join(".cache.bin.gm-tmp-1-0"), calls.join(".cache.bin.gm-tmp-2-0"));
        for f in [&old, &recent] {
            std::fs::write(f, b"half a cache").expect("write");
        }
        let an_hour_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options().write(true).open(&old).and_then(|f| f.set_modified(an_hour_ago)).expect("age");
        assert_eq!(callers(&mut index(dir.path()), "helper").files_parsed, 0);
        assert!(!old.exists() && recent.exists(), "only the old one is removed: the recent one may be a live save's");
    }

    #[test]
    fn a_file_deleted_between_runs_is_gone_from_the_answer() {
        let dir = workspace();
        first_run(dir.path());
        std::fs::remove_file(dir.path().join("b.ts")).expect("rm");
        let mut second = index(dir.path());
        let r = callers(&mut second, "helper");
        assert_eq!((r.files_parsed, r.files_scanned), (0, 1));
        assert_eq!(sites(&r), ["a.ts:2 in <top level>"]);
        drop(second);
        assert_eq!(callers(&mut index(dir.path()), "helper").files_scanned, 1);
        let saved = load(&cache_file(dir.path())).expect("saved");
        assert_eq!(saved.keys().collect::<Vec<_>>(), ["a.ts"], "the dropped file is dropped from the saved cache");
    }

    #[test]
    fn a_touch_during_a_session_is_not_parsed_again_but_a_same_size_edit_is() {
        let dir = workspace();
        let mut idx = index(dir.path());
        assert_eq!(callers(&mut idx, "helper").files_parsed, 2);
        let file = std::fs::File::options().write(true).open(dir.path().join("a.ts")).expect("open");
        file.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60)).expect("touch");
        assert_eq!(callers(&mut idx, "helper").files_parsed, 0);
        // Same size, new content: the hash differs, so the file is parsed.
        write(dir.path(), "a.ts", "export function helper() {}\nhelpex();\n");
        let r = callers(&mut idx, "helper");
        assert_eq!(r.files_parsed, 1);
        assert_eq!(sites(&r), ["b.ts:2 in run"]);
    }
}
