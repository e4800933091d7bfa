//! The replies: `callers`, `impact` and `symbols`, computed from the store with the resolver.
//! Call snippets and signature lines are read from the files here, for the sites and
//! definitions a reply shows (the index does not keep them).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

use serde::Serialize;

use super::facts::{Call, CallKind, DefKind, FileFacts, NONE};
use super::resolve::{owner_key, resolution, Reach, Resolver};
use super::store::{At, Store};
use crate::search::tokenizer::words;

/// Where a name is defined.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Definition {
    pub path: String,
    pub line: usize,
    pub kind: &'static str,
    /// The type a method belongs to.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub owner: String,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CallSite {
    pub path: String,
    pub line: usize,
    pub column: usize,
    /// The called name as written (an alias when the import renamed it).
    pub callee: String,
    /// `call`, `method` (`obj.name(...)`), `new` or `macro`.
    pub kind: &'static str,
    /// The function the call is in (`<top level>` outside any).
    pub enclosing: String,
    /// The type whose method the call is in.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub enclosing_type: String,
    /// `exact`: the call goes to one definition of the symbol; `ambiguous`: it may go to
    /// another definition too (an unknown receiver, several of the name); `unresolved`: a
    /// macro, or a name nothing in the workspace defines.
    pub resolution: &'static str,
    /// The call's source text, shortened.
    pub text: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CallersReply {
    pub symbol: String,
    pub callers: Vec<CallSite>,
    pub total: usize,
    pub left_out: usize,
    pub definitions: Vec<Definition>,
    /// More than one definition has this name, or a listed call site may go to another
    /// definition: the reply cannot say which one each call reaches.
    pub ambiguous: bool,
    /// Other names this symbol is called by (import/export aliases).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    /// Call sites of the name that go to another definition (another type's method, another
    /// module's function, a library's), left out.
    pub excluded: usize,
    /// Listed call sites gm cannot resolve: macros, names nothing in the workspace defines.
    pub unresolved: usize,
    pub files_parsed: usize,
    pub files_scanned: usize,
    /// Files of languages gm does not parse, by language.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub skipped: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImpactReply {
    pub symbol: String,
    pub depth: usize,
    /// Every function reached, with the step at which it was reached (0 = the symbol).
    pub nodes: Vec<ImpactNode>,
    /// caller -> callee, one per call site; `from` and `to` are nodes' `qualified` names.
    pub edges: Vec<ImpactEdge>,
    pub files: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub skipped: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImpactNode {
    pub name: String,
    /// `Type.name` for a method, else the name.
    pub qualified: String,
    pub level: usize,
    pub definitions: Vec<Definition>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ImpactEdge {
    pub from: String,
    pub to: String,
    pub path: String,
    pub line: usize,
    pub resolution: &'static str,
}

/// A definition in a file's outline.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutlineSymbol {
    pub name: String,
    pub kind: &'static str,
    pub line: usize,
    pub end_line: usize,
    pub signature: String,
    /// The type a method belongs to, when it is not nested in it (a Go method, `void T::f()`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// A declaration without a body (a prototype).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub declaration: bool,
    /// The definition it is nested in, when that one is on an earlier page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub within: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<OutlineSymbol>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutlineReply {
    pub file: String,
    pub language: String,
    pub symbols: Vec<OutlineSymbol>,
    /// Definitions in the file (nested ones included); a page holds `limit` of them.
    pub total: usize,
    pub offset: usize,
    /// The offset of the next page, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<usize>,
    /// The file has syntax errors: the outline is what parsed.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

/// A definition found by name across the workspace.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FoundSymbol {
    pub name: String,
    pub kind: &'static str,
    pub path: String,
    pub line: usize,
    pub end_line: usize,
    pub signature: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub owner: String,
    /// `exact`, `prefix` or `parts` (every word of the query is a word of the name).
    #[serde(rename = "match")]
    pub matched: &'static str,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FoundReply {
    pub query: String,
    pub symbols: Vec<FoundSymbol>,
    pub total: usize,
    pub offset: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<usize>,
    pub files_parsed: usize,
    pub files_scanned: usize,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub skipped: BTreeMap<String, usize>,
}

/// A symbol as an agent writes it: `name`, `Type.name`, `module.name`, `Type::name`,
/// `ns::name`, `Class#method`, `name()`.
pub fn parse_symbol(symbol: &str) -> (Vec<&str>, &str) {
    let s = symbol.trim().trim_end_matches("()");
    let mut parts: Vec<&str> = s
        .split("::")
        .flat_map(|p| p.split("->"))
        .flat_map(|p| p.split(['.', '#', '\\']))
        .filter(|p| !p.is_empty())
        .collect();
    let name = parts.pop().unwrap_or("");
    (parts, name)
}

/// Reads a file's bytes from `start` up to `max` bytes (a snippet, a signature).
fn read_at(workspace: &Path, rel: &str, start: u32, max: usize) -> String {
    let Ok(file) = std::fs::File::open(workspace.join(rel)) else { return String::new() };
    let mut buf = vec![0u8; max];
    let n = gm_actors::sys::read_at(&file, &mut buf, u64::from(start)).unwrap_or(0);
    buf.truncate(n);
    String::from_utf8_lossy(&buf).into_owned()
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() > max {
        format!("{}…", crate::text::head(s, max))
    } else {
        s.to_owned()
    }
}

/// A call as the reply shows it: its first line, up to the parenthesis that closes its
/// arguments.
fn snippet(workspace: &Path, rel: &str, start: u32) -> String {
    let text = read_at(workspace, rel, start, 640);
    let line = text.lines().next().unwrap_or("");
    let mut depth = 0usize;
    let mut end = line.len();
    for (i, c) in line.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => {
                if depth <= 1 {
                    end = i + 1;
                    break;
                }
                depth -= 1;
            }
            _ => {}
        }
    }
    shorten(line[..end].trim(), 160)
}

/// A definition's signature: the line with its name, and the next ones while its
/// parentheses are open (up to five lines), joined.
fn signature(workspace: &Path, rel: &str, start: u32) -> String {
    joined_signature(&read_at(workspace, rel, start, 2048))
}

/// The first line of `text`, and the next ones while its parentheses are open (up to five),
/// joined and shortened.
fn joined_signature(text: &str) -> String {
    let mut out = String::new();
    let mut depth: i32 = 0;
    for line in text.lines().take(5) {
        let line = line.trim();
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(line);
        depth += line.matches(['(', '[']).count() as i32 - line.matches([')', ']']).count() as i32;
        if depth <= 0 {
            break;
        }
    }
    shorten(&out, 240)
}

fn definition(r: &Resolver, (id, i): At) -> Option<Definition> {
    let (path, f) = r.facts(id)?;
    let d = f.def(i)?;
    Some(Definition {
        path: path.to_owned(),
        line: d.line as usize,
        kind: d.kind.as_str(),
        owner: f.str(d.owner).to_owned(),
    })
}

fn site(workspace: &Path, r: &Resolver, (id, ci): At, reach: &Reach) -> Option<CallSite> {
    let (path, f) = r.facts(id)?;
    let c = f.calls.get(ci as usize)?;
    let enclosing = f.def(c.enclosing);
    let macro_call = matches!(reach, Reach::Macro);
    Some(CallSite {
        path: path.to_owned(),
        line: c.line as usize,
        column: c.column as usize,
        callee: f.str(c.callee).to_owned(),
        kind: if macro_call && c.kind == CallKind::Call { "macro" } else { c.kind.as_str() },
        enclosing: enclosing.map_or("<top level>", |d| f.str(d.name)).to_owned(),
        enclosing_type: enclosing.map_or("", |d| f.str(d.owner)).to_owned(),
        resolution: resolution(reach),
        text: snippet(workspace, path, c.start),
    })
}

/// The call sites that may reach one of `targets` (every definition of `name` when none is
/// in the workspace), with what gm left out.
struct Sites {
    found: Vec<(At, Reach)>,
    excluded: usize,
}

fn sites(r: &Resolver, names: &[String], targets: &[At], defined: bool, path: Option<&str>) -> Sites {
    let mut found = Vec::new();
    let mut excluded = 0;
    let mut listed: Vec<At> = Vec::new();
    for name in names {
        let calls = r.store.calls_named(name);
        let under = |at: &At| path.is_none_or(|prefix| r.store.path(at.0).is_some_and(|p| p.starts_with(prefix)));
        listed.extend(calls.into_iter().filter(under));
    }
    // Every site needs its file's facts: after a restart they are still in the saved cache,
    // and are read on every core first.
    if r.store.reads_saved() {
        let mut calling: Vec<u32> = listed.iter().map(|(id, _)| *id).collect();
        calling.sort_unstable();
        calling.dedup();
        r.store.prefetch(&calling);
    }
    // The call records first, with their enclosing definitions' owners, in a loop that does
    // nothing else: they lie all over the facts (a kernel-wide name's sites, all over 230 MB of
    // them), and loads that do not wait on each other are fetched several at once, where
    // resolving each site as it was read waited for every one.
    let records: Vec<Option<(Call, u32)>> = listed
        .iter()
        .map(|&(id, ci)| {
            let (_, f) = r.facts(id)?;
            let c = f.calls.get(ci as usize)?;
            Some((c.clone(), owner_key(f, c.enclosing)))
        })
        .collect();
    for (at, record) in listed.into_iter().zip(records) {
        let reach = match (&record, r.facts(at.0)) {
            (Some((call, owner)), Some((_, f))) => r.reach_of(at.0, f, call, *owner),
            _ => Reach::Outside,
        };
        let keep = match &reach {
            Reach::Defs { defs, .. } => defs.iter().any(|d| targets.contains(d)),
            Reach::Macro => true,
            Reach::Outside => !defined,
        };
        if keep {
            let (line, column) = record.map_or((0, 0), |(c, _)| (c.line, c.column));
            found.push(((0, line, column), at, reach));
        } else {
            excluded += 1;
        }
    }
    // By path, line and column: the files' order is worked out once, then the sites sort by
    // numbers (a kernel function has tens of thousands of call sites).
    let mut files: Vec<u32> = found.iter().map(|(_, (id, _), _)| *id).collect();
    files.sort_unstable();
    files.dedup();
    files.sort_by_key(|id| r.store.path(*id).unwrap_or(""));
    let rank: rustc_hash::FxHashMap<u32, u32> = files.iter().enumerate().map(|(i, id)| (*id, i as u32)).collect();
    for (key, (id, _), _) in &mut found {
        key.0 = rank.get(id).copied().unwrap_or(u32::MAX);
    }
    found.sort_by_key(|(key, _, _)| *key);
    Sites { found: found.into_iter().map(|(_, at, reach)| (at, reach)).collect(), excluded }
}

static EMPTY: std::sync::OnceLock<FileFacts> = std::sync::OnceLock::new();

pub struct Counts {
    pub parsed: usize,
    pub scanned: usize,
    pub skipped: BTreeMap<String, usize>,
}

pub fn callers(
    workspace: &Path,
    store: &Store,
    symbol: &str,
    path: Option<&str>,
    limit: usize,
    counts: Counts,
) -> CallersReply {
    let r = Resolver::new(store).in_workspace(workspace);
    let (qualifier, name) = parse_symbol(symbol);
    let targets = r.targets(&qualifier, name);
    let names = r.names_of(name);
    let defined = !targets.is_empty();
    let Sites { found, excluded } = sites(&r, &names, &targets, defined, path);
    let total = found.len();
    let unresolved = found.iter().filter(|(_, reach)| resolution(reach) == "unresolved").count();
    let ambiguous = targets.len() > 1 || found.iter().any(|(_, reach)| resolution(reach) == "ambiguous");
    let callers: Vec<CallSite> =
        found.iter().take(limit).filter_map(|(at, reach)| site(workspace, &r, *at, reach)).collect();
    let mut definitions: Vec<Definition> = targets.iter().filter_map(|at| definition(&r, *at)).collect();
    definitions.sort();
    CallersReply {
        symbol: symbol.to_owned(),
        left_out: total - callers.len(),
        total,
        callers,
        definitions,
        ambiguous,
        aliases: names.into_iter().skip(1).collect(),
        excluded,
        unresolved,
        files_parsed: counts.parsed,
        files_scanned: counts.scanned,
        skipped: counts.skipped,
    }
}

pub fn impact(
    workspace: &Path,
    store: &Store,
    symbol: &str,
    depth: usize,
    skipped: BTreeMap<String, usize>,
) -> ImpactReply {
    let r = Resolver::new(store).in_workspace(workspace);
    let (qualifier, name) = parse_symbol(symbol);
    let start = r.targets(&qualifier, name);
    // Nodes by qualified name: each with the definitions reached under it.
    let start_label = match start.as_slice() {
        [one] => label(&r, *one),
        _ => name.to_owned(),
    };
    let mut nodes: BTreeMap<String, (String, usize, BTreeSet<At>)> =
        BTreeMap::from([(start_label.clone(), (name.to_owned(), 0, start.iter().copied().collect()))]);
    let mut queue = VecDeque::from([start_label]);
    let mut edges = Vec::new();
    let mut files = BTreeSet::new();
    let mut seen_sites: BTreeSet<At> = BTreeSet::new();
    while let Some(node) = queue.pop_front() {
        let Some((node_name, level, defs)) = nodes.get(&node).cloned() else { continue };
        if level >= depth {
            continue;
        }
        let targets: Vec<At> = defs.iter().copied().collect();
        let names = r.names_of(&node_name);
        for (at, reach) in sites(&r, &names, &targets, !targets.is_empty(), None).found {
            if !seen_sites.insert(at) {
                continue;
            }
            let Some((path, f)) = r.facts(at.0) else { continue };
            let Some(c) = f.calls.get(at.1 as usize) else { continue };
            files.insert(path.to_owned());
            let from = if c.enclosing == NONE { "<top level>".to_owned() } else { f.qualified(c.enclosing) };
            edges.push(ImpactEdge {
                from: from.clone(),
                to: node.clone(),
                path: path.to_owned(),
                line: c.line as usize,
                resolution: resolution(&reach),
            });
            if c.enclosing == NONE {
                continue;
            }
            let caller = (at.0, c.enclosing);
            match nodes.get_mut(&from) {
                Some((_, _, defs)) => {
                    defs.insert(caller);
                }
                None => {
                    let caller_name = f.def(c.enclosing).map_or("", |d| f.str(d.name)).to_owned();
                    nodes.insert(from.clone(), (caller_name, level + 1, BTreeSet::from([caller])));
                    queue.push_back(from);
                }
            }
        }
    }
    let mut nodes: Vec<ImpactNode> = nodes
        .into_iter()
        .map(|(qualified, (name, level, defs))| {
            let mut definitions: Vec<Definition> = defs.iter().filter_map(|at| definition(&r, *at)).collect();
            definitions.sort();
            ImpactNode { name, qualified, level, definitions }
        })
        .collect();
    nodes.sort_by(|a, b| (a.level, &a.name, &a.qualified).cmp(&(b.level, &b.name, &b.qualified)));
    ImpactReply { symbol: symbol.to_owned(), depth, nodes, edges, files: files.into_iter().collect(), skipped }
}

fn label(r: &Resolver, (id, i): At) -> String {
    r.facts(id).map_or_else(String::new, |(_, f)| f.qualified(i))
}

/// A file's definitions as an outline: a page of `limit` of them in source order, each under
/// the one it is nested in.
pub fn outline(workspace: &Path, rel: &str, f: &FileFacts, offset: usize, limit: usize) -> OutlineReply {
    let total = f.definitions.len();
    let end = (offset + limit).min(total);
    let source = std::fs::read(workspace.join(rel)).unwrap_or_default();
    let sig = |start: u32| signature_in(&source, start);
    // Each definition's children on this page, in order (a parent comes before its children).
    let on_page = offset.min(end)..end;
    let mut children_of: Vec<Vec<usize>> = vec![Vec::new(); on_page.len()];
    let mut roots: Vec<usize> = Vec::new();
    for i in on_page.clone() {
        let parent = f.definitions[i].parent as usize;
        match parent.checked_sub(on_page.start).filter(|_| on_page.contains(&parent)) {
            Some(at) => children_of[at].push(i),
            None => roots.push(i),
        }
    }
    // Built inside out: every definition's children are done before it.
    let mut done: Vec<Option<OutlineSymbol>> = (0..on_page.len()).map(|_| None).collect();
    for i in on_page.clone().rev() {
        let d = &f.definitions[i];
        let at = i - on_page.start;
        let children = std::mem::take(&mut children_of[at]);
        let symbol = OutlineSymbol {
            name: f.str(d.name).to_owned(),
            kind: d.kind.as_str(),
            line: d.line as usize,
            end_line: d.end_line as usize,
            signature: sig(d.sig_start),
            owner: match f.def(d.parent) {
                Some(p) if p.kind.is_type() && f.str(p.name) == f.str(d.owner) => String::new(),
                _ => f.str(d.owner).to_owned(),
            },
            declaration: d.decl,
            within: (d.parent != NONE && !on_page.contains(&(d.parent as usize))).then(|| f.qualified(d.parent)),
            children: children.into_iter().filter_map(|k| done[k - on_page.start].take()).collect(),
        };
        done[at] = Some(symbol);
    }
    let symbols = roots.into_iter().filter_map(|i| done[i - on_page.start].take()).collect();
    OutlineReply {
        file: rel.to_owned(),
        language: f.lang.clone(),
        symbols,
        total,
        offset,
        next: (end < total).then_some(end),
        partial: f.partial,
    }
}

/// [`signature`] over a file already read.
pub(super) fn signature_in(source: &[u8], start: u32) -> String {
    let from = (start as usize).min(source.len());
    let to = (from + 2048).min(source.len());
    joined_signature(&String::from_utf8_lossy(&source[from..to]))
}

/// How a name matches a query: exactly, by prefix, or by its words. Run on every defined
/// name of the tree (a million on a kernel), so it allocates nothing until the words test.
fn matches(name: &str, query: &str, query_words: &[String]) -> Option<(u8, &'static str)> {
    // Exact and prefix matches share the first byte, in some case.
    let (n, q) = (name.as_bytes(), query.as_bytes());
    if n.first().map(u8::to_ascii_lowercase) != q.first().map(u8::to_ascii_lowercase) {
        return by_parts(name, query_words);
    }
    if name == query {
        return Some((0, "exact"));
    }
    if name.eq_ignore_ascii_case(query) {
        return Some((1, "exact"));
    }
    if name.starts_with(query) {
        return Some((2, "prefix"));
    }
    if name.len() > query.len() && name.as_bytes()[..query.len()].eq_ignore_ascii_case(query.as_bytes()) {
        return Some((3, "prefix"));
    }
    by_parts(name, query_words)
}

fn by_parts(name: &str, query_words: &[String]) -> Option<(u8, &'static str)> {
    // Cheap test first: every word of the query occurs in the name; then the real one.
    if !query_words.is_empty() && query_words.iter().all(|w| contains_ignore_case(name, w)) {
        let name_words = words(name);
        if query_words.iter().all(|w| name_words.contains(w)) {
            return Some((4, "parts"));
        }
    }
    None
}

/// Whether `hay` contains `needle` (lowercase) in any ASCII case. Only where the needle's
/// first byte occurs (found with SIMD) is the rest compared.
fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    let (hay, needle) = (hay.as_bytes(), needle.as_bytes());
    let Some(&first) = needle.first() else { return true };
    let Some(last_start) = hay.len().checked_sub(needle.len()) else { return false };
    memchr::memchr2_iter(first.to_ascii_lowercase(), first.to_ascii_uppercase(), &hay[..=last_start])
        .any(|i| hay[i..i + needle.len()].eq_ignore_ascii_case(needle))
}

/// A query's words as `search` splits them, without the whole identifiers that are split
/// into parts (`userName` -> `user`, `name`): a name matches by its parts.
fn parts(query: &str) -> Vec<String> {
    let all = words(query);
    all.iter().filter(|w| !all.iter().any(|o| o != *w && w.contains(o.as_str()))).cloned().collect()
}

pub struct FindArgs<'a> {
    pub query: &'a str,
    pub kind: Option<DefKind>,
    pub path: Option<&'a str>,
    pub offset: usize,
    pub limit: usize,
}

/// Definitions across the workspace whose name matches `query` (`Type.name` narrows to that
/// type's), best first: exact, then prefix, then by words; within each, types before
/// functions, then by path.
pub fn find(workspace: &Path, store: &Store, args: FindArgs, counts: Counts) -> FoundReply {
    let r = Resolver::new(store).in_workspace(workspace);
    let (qualifier, name) = parse_symbol(args.query);
    let query_words = parts(name);
    // The names first, on every core (millions of them on a kernel); then their definitions.
    let matched: Vec<(u8, &'static str, &[At])> = std::thread::scope(|scope| {
        let query_words = &query_words;
        let handles: Vec<_> = store
            .def_names()
            .into_iter()
            .map(|names| {
                scope.spawn(move || {
                    let mut names = names.peekable();
                    let mut batch = Vec::with_capacity(64);
                    let mut found = Vec::new();
                    while names.peek().is_some() {
                        batch.clear();
                        batch.extend(names.by_ref().take(64));
                        // Each name's first byte is read for the whole batch before any is
                        // matched: the names lie all over the heap, a cache miss each, and
                        // loads that do not wait on each other are fetched several at once.
                        let first_bytes = batch
                            .iter()
                            .fold(0u32, |sum, (n, _)| sum.wrapping_add(u32::from(*n.as_bytes().first().unwrap_or(&0))));
                        std::hint::black_box(first_bytes);
                        found.extend(batch.iter().filter_map(|&(defined, ats)| {
                            matches(defined, name, query_words).map(|(r, how)| (r, how, ats))
                        }));
                    }
                    found
                })
            })
            .collect();
        // A thread's panic is the call's (its reply would otherwise miss names).
        handles.into_iter().flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    let mut hits: Vec<(u8, &'static str, At)> = Vec::new();
    for (rank, how, ats) in matched {
        for &at in ats {
            let Some((path, f)) = r.facts(at.0) else { continue };
            let Some(d) = f.def(at.1) else { continue };
            let kind_ok =
                args.kind.is_none_or(|k| k == d.kind || (k == DefKind::Interface && d.kind == DefKind::Trait));
            let path_ok = args.path.is_none_or(|p| path.starts_with(p));
            let qualifier_ok = qualifier.last().is_none_or(|q| r.lives_in(at, q));
            if kind_ok && path_ok && qualifier_ok {
                hits.push((rank, how, at));
            }
        }
    }
    let key = |&(rank, _, (id, i)): &(u8, &str, At)| {
        let (path, f) = r.facts(id).unwrap_or(("", EMPTY.get_or_init(FileFacts::default)));
        let d = f.def(i);
        let type_first = d.is_none_or(|d| !d.kind.is_type());
        (rank, type_first, path.to_owned(), d.map_or(0, |d| d.line))
    };
    hits.sort_by_cached_key(key);
    let total = hits.len();
    let end = (args.offset + args.limit).min(total);
    let symbols = hits[args.offset.min(end)..end]
        .iter()
        .filter_map(|&(_, how, (id, i))| {
            let (path, f) = r.facts(id)?;
            let d = f.def(i)?;
            Some(FoundSymbol {
                name: f.str(d.name).to_owned(),
                kind: d.kind.as_str(),
                path: path.to_owned(),
                line: d.line as usize,
                end_line: d.end_line as usize,
                signature: signature(workspace, path, d.sig_start),
                owner: f.str(d.owner).to_owned(),
                matched: how,
            })
        })
        .collect();
    FoundReply {
        query: args.query.to_owned(),
        symbols,
        total,
        offset: args.offset,
        next: (end < total).then_some(end),
        files_parsed: counts.parsed,
        files_scanned: counts.scanned,
        skipped: counts.skipped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_are_read_in_every_spelling_an_agent_uses() {
        assert_eq!(parse_symbol("save"), (vec![], "save"));
        assert_eq!(parse_symbol("Repo.save()"), (vec!["Repo"], "save"));
        assert_eq!(parse_symbol("crate::repo::Repo::new"), (vec!["crate", "repo", "Repo"], "new"));
        assert_eq!(parse_symbol("Cache#save"), (vec!["Cache"], "save"));
        assert_eq!(parse_symbol("\\App\\Util\\log"), (vec!["App", "Util"], "log"));
    }

    #[test]
    fn names_match_exactly_by_prefix_or_by_their_words() {
        let q = |name: &str, query: &str| matches(name, query, &parts(query)).map(|m| m.1);
        assert_eq!(q("getUserName", "getUserName"), Some("exact"));
        assert_eq!(q("getUserName", "getuser"), Some("prefix"));
        assert_eq!(q("getUserName", "user name"), Some("parts"));
        assert_eq!(q("get_user_name", "userName"), Some("parts"));
        assert_eq!(q("getUserName", "username"), None);
        assert_eq!(q("reuse", "use"), None);
        assert_eq!(q("GetUserName", "getUser"), Some("prefix"), "the first byte in another case");
        assert_eq!(q("x", "getUser"), None);
        assert_eq!(q("", "get"), None);
    }

    #[test]
    fn a_word_is_found_in_a_name_in_any_ascii_case_wherever_it_starts() {
        let c = contains_ignore_case;
        assert!(c("getUserName", "user"));
        assert!(c("GET_USER", "user"), "at the end");
        assert!(c("USERx", "user"), "at the start");
        assert!(c("aaab", "aab"), "after a false start on the same first byte");
        assert!(c("anything", ""));
        assert!(!c("use", "user"), "longer than the name");
        assert!(!c("getUsrName", "user"));
        assert!(!c("", "u"));
    }
}
