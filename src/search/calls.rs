//! Call sites in JavaScript and TypeScript (tree-sitter): who calls a function or method, and
//! what a change to it reaches, transitively.
//!
//! Each tracked `.js/.jsx/.mjs/.cjs/.ts/.tsx/.mts/.cts` file is parsed once and its facts —
//! definitions, call sites with their enclosing function, import and export aliases — are
//! cached by size and mtime, so only changed files are parsed again.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::time::UNIX_EPOCH;

use actix::prelude::*;
use serde::Serialize;
use tree_sitter::{Language, Node, Parser};

use super::tracked::{tracked_files, Tracked};

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

#[derive(Debug, Clone, Default)]
struct FileFacts {
    definitions: Vec<(String, Definition)>,
    calls: Vec<CallSite>,
    /// (local name, original name) from `import { a as b }` and `export { a as b }`.
    aliases: Vec<(String, String)>,
}

struct Cached {
    size: u64,
    mtime_ns: u128,
    facts: FileFacts,
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
    let mut facts = FileFacts::default();
    let mut cursor = tree.walk();
    let mut stack = vec![tree.root_node()];
    let src = source.as_bytes();
    while let Some(node) = stack.pop() {
        visit(node, rel, src, &mut facts);
        if node.child_count() > 0 {
            let mut children: Vec<Node> = node.children(&mut cursor).collect();
            children.reverse();
            stack.extend(children);
        }
    }
    Some(facts)
}

fn text<'a>(node: Node, src: &'a [u8]) -> &'a str {
    node.utf8_text(src).unwrap_or("")
}

fn visit(node: Node, rel: &str, src: &[u8], facts: &mut FileFacts) {
    let line = node.start_position().row + 1;
    match node.kind() {
        "call_expression" | "new_expression" => {
            let target =
                node.child_by_field_name(if node.kind() == "new_expression" { "constructor" } else { "function" });
            let Some(target) = target else { return };
            let (callee, kind) = match target.kind() {
                "identifier" => {
                    (text(target, src).to_owned(), if node.kind() == "new_expression" { "new" } else { "call" })
                }
                "member_expression" => match target.child_by_field_name("property") {
                    Some(p) => (text(p, src).to_owned(), "method"),
                    None => return,
                },
                _ => return,
            };
            let mut snippet: String = text(node, src).lines().next().unwrap_or("").trim().to_owned();
            if snippet.len() > 160 {
                snippet = format!("{}…", crate::text::head(&snippet, 160));
            }
            facts.calls.push(CallSite {
                path: rel.to_owned(),
                line,
                column: node.start_position().column + 1,
                callee,
                kind,
                enclosing: enclosing(node, src),
                text: snippet,
            });
        }
        "import_specifier" | "export_specifier" => {
            if let (Some(name), Some(alias)) = (node.child_by_field_name("name"), node.child_by_field_name("alias")) {
                facts.aliases.push((text(alias, src).to_owned(), text(name, src).to_owned()));
            }
        }
        _ => {
            if let Some((name, kind)) = defined_name(node, src) {
                facts.definitions.push((name, Definition { path: rel.to_owned(), line, kind }));
            }
        }
    }
}

/// The name a node defines, if it is a function-like definition.
fn defined_name(node: Node, src: &[u8]) -> Option<(String, &'static str)> {
    let named = |field: &str| node.child_by_field_name(field).map(|n| text(n, src).to_owned());
    match node.kind() {
        "function_declaration" | "generator_function_declaration" => Some((named("name")?, "function")),
        "method_definition" => Some((named("name")?, "method")),
        "class_declaration" => Some((named("name")?, "class")),
        "variable_declarator" | "public_field_definition" | "field_definition" => {
            let value = node.child_by_field_name("value")?;
            matches!(value.kind(), "arrow_function" | "function_expression" | "function")
                .then(|| Some((named("name").or_else(|| named("property"))?, "function")))?
        }
        "pair" => {
            let value = node.child_by_field_name("value")?;
            matches!(value.kind(), "arrow_function" | "function_expression" | "function")
                .then(|| Some((named("key")?, "method")))?
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
    cache: HashMap<String, Cached>,
}

impl CallIndex {
    pub fn new(workspace: PathBuf) -> Self {
        Self { workspace, cache: HashMap::new() }
    }

    /// Brings the cache up to date; returns (files parsed now, files considered).
    fn refresh(&mut self) -> Result<(usize, usize), String> {
        let files: Vec<Tracked> = tracked_files(&self.workspace)
            .map_err(|e| e.to_string())?
            .into_iter()
            .filter(|f| language(&f.rel).is_some())
            .collect();
        let mut stale = Vec::new();
        for f in &files {
            let Ok(meta) = std::fs::metadata(&f.path) else { continue };
            let mtime_ns =
                meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
            let fresh = self.cache.get(&f.rel).is_some_and(|c| c.size == meta.len() && c.mtime_ns == mtime_ns);
            if !fresh {
                stale.push((f.clone(), meta.len(), mtime_ns));
            }
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        let chunk = stale.len().div_ceil(threads).max(1);
        let parsed: Vec<(String, Cached)> = std::thread::scope(|scope| {
            let handles: Vec<_> = stale
                .chunks(chunk)
                .map(|part| {
                    scope.spawn(move || {
                        let mut parser = Parser::new();
                        part.iter()
                            .filter_map(|(f, size, mtime_ns)| {
                                let source = std::fs::read_to_string(&f.path).ok()?;
                                let facts = analyze(&f.rel, &source, &mut parser).unwrap_or_default();
                                Some((f.rel.clone(), Cached { size: *size, mtime_ns: *mtime_ns, facts }))
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).flatten().collect()
        });
        let n = parsed.len();
        self.cache.extend(parsed);
        let live: BTreeSet<&str> = files.iter().map(|f| f.rel.as_str()).collect();
        self.cache.retain(|k, _| live.contains(k.as_str()));
        Ok((n, files.len()))
    }

    fn definitions(&self, name: &str) -> Vec<Definition> {
        let mut d: Vec<Definition> = self
            .cache
            .values()
            .flat_map(|c| c.facts.definitions.iter())
            .filter(|(n, _)| n == name)
            .map(|(_, d)| d.clone())
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
                for (local, original) in &c.facts.aliases {
                    if *original == current && !names.contains(local) {
                        names.push(local.clone());
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
            .flat_map(|(_, c)| c.facts.calls.iter())
            .filter(|s| names.contains(&s.callee))
            .cloned()
            .collect();
        sites.sort_by(|a, b| (&a.path, a.line, a.column).cmp(&(&b.path, b.line, b.column)));
        sites
    }
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
        let (parsed, scanned) = self.refresh()?;
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
}

impl Handler<Impact> for CallIndex {
    type Result = Result<ImpactReply, String>;
    fn handle(&mut self, msg: Impact, _: &mut SyncContext<Self>) -> Self::Result {
        self.refresh()?;
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
        let got: Vec<(String, &str, String, usize)> =
            f.calls.iter().map(|c| (c.callee.clone(), c.kind, c.enclosing.clone(), c.line)).collect();
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
        let defs: Vec<&str> = f.definitions.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(defs, ["outer", "arrow", "C", "run"]);
    }

    #[test]
    fn import_and_export_aliases_are_recorded() {
        let f = facts("b.js", "import { load as fetchIt } from './a';\nexport { fetchIt as get };\nfetchIt();\n");
        assert_eq!(f.aliases, [("fetchIt".to_owned(), "load".to_owned()), ("get".to_owned(), "fetchIt".to_owned())]);
    }

    #[test]
    fn tsx_and_jsx_parse() {
        let f = facts("c.tsx", "export const App = () => <div onClick={() => track('x')}>{render()}</div>;\n");
        let callees: Vec<&str> = f.calls.iter().map(|c| c.callee.as_str()).collect();
        assert_eq!(callees, ["track", "render"]);
    }
}
