//! `map`: the definitions that matter most in the repository, as Aider's repository map gives
//! them to a model. Files are nodes of a graph whose edges are references (a call, a type a
//! receiver or qualifier names) from one file to the definitions of that name in another;
//! PageRank over it says which files the rest of the tree leans on, and each file's rank flows
//! to the definitions it references, in proportion to how often (as Aider's repomap does).
//! `map_text.rs` renders the best of them within a budget.
//!
//! References are matched by name, not resolved one by one as `callers` does: resolving every
//! call of a kernel-size tree takes far longer than a map may, and a map wants the weight of a
//! name, not each call's target. A name reaches definitions in the languages the calling file
//! can call (C with C++, JavaScript with TypeScript); one defined in several files splits its
//! weight between them; one the calling file defines itself stays in that file. As in Aider,
//! a specific name (long, with words: `parse_symbol`, `formatName`) weighs ten times a short
//! generic one (`map`, `get`, `new`, which are mostly a library's methods on receivers of a
//! type gm does not know), and a private `_name` a tenth.
//!
//! What is worked out from every file is kept: each file's references by its content hash, and
//! the graph until a file's facts change, so an edit costs that file's references and a walk
//! over the others, never a parse of the tree. PageRank itself runs per call: `focus` changes it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use super::entry::Hash;
use super::facts::{CallKind, DefKind, FileFacts};
use super::store::{FileId, Store};

/// Which definitions of its name a reference may reach.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Reach {
    /// Any: a bare call, `Type::f`, `module.f`.
    Any,
    /// A method of this type (the receiver's type is known); when no definition of the name
    /// is one of its, any method of the name if the type is the workspace's (an inherited or
    /// a trait's method, a guess), else none (`str`, `Vec`: a library's).
    Owner(Box<str>),
    /// A method, on a receiver of a type gm does not know: only a method of a type the file
    /// mentions (imports, constructs, calls through). `.map()`, `.is_empty()` on a library's
    /// values name no type the file mentions, and reach nothing.
    Mentioned,
}

/// What a [`Reach::Mentioned`] reference weighs against a sure one: most calls on a receiver
/// of unknown type are a library's (`.is_empty()` on a `Vec`, `.map()` on an iterator), even in
/// a file that mentions a type of the workspace with a method of that name.
const GUESS: f64 = 0.1;

/// What the map needs of one file, worked out once per content.
#[derive(Debug, Default)]
pub struct FileRefs {
    /// What the file references, each once with how often, sorted.
    refs: Vec<(Box<str>, Reach, u32)>,
    /// Names the file defines (no constants, no `impl` blocks, no lowercase modules: nothing
    /// calls those by name), each once with its definitions' indices and the types those
    /// belong to (`""` for none), sorted by name.
    defs: Vec<Defined>,
    /// Names the file mentions that may be types, sorted: what it imports, constructs, calls
    /// through, and defines.
    mentions: Vec<Box<str>>,
}

/// The definitions of one name in a file.
#[derive(Debug)]
struct Defined {
    name: Box<str>,
    /// Indices into the file's definitions.
    indices: Vec<u32>,
    /// The types they belong to (`""` for none), sorted.
    owners: Vec<Box<str>>,
}

/// The type a definition belongs to: its owner, or the type it is nested in.
fn owner_of(f: &FileFacts, i: u32) -> &str {
    let Some(d) = f.def(i) else { return "" };
    if !d.owner.is_empty() {
        return f.str(d.owner);
    }
    f.parents(i).find(|(_, p)| p.kind.is_type()).map_or("", |(_, p)| f.str(p.name))
}

impl FileRefs {
    pub fn of(f: &FileFacts) -> Self {
        let mut refs: BTreeMap<(&str, Reach), u32> = BTreeMap::new();
        let mut mentions: BTreeSet<&str> = BTreeSet::new();
        for i in &f.imports {
            mentions.extend([f.str(i.local), f.str(i.name)]);
        }
        let imported = |name: &str| f.imports.iter().any(|i| f.is(i.local, name));
        for c in &f.calls {
            let callee = f.str(c.callee);
            if callee.is_empty() {
                continue;
            }
            // `from m import f as g; g()` calls `f`.
            let renamed = f.imports.iter().find(|i| !i.name.is_empty() && f.is(i.local, callee));
            let name = renamed.map_or(callee, |i| f.str(i.name));
            let qualifier = f.str(c.qualifier);
            let first = qualifier.split('.').next().unwrap_or("");
            // A call dispatched on an argument's type (no qualifier) may reach a method of
            // another type when that one has none: any of the name's.
            let reach = if !c.recv_type.is_empty() && !qualifier.is_empty() {
                Reach::Owner(f.str(c.recv_type).into())
            } else if c.kind == CallKind::Method && !imported(first) {
                Reach::Mentioned
            } else {
                Reach::Any
            };
            *refs.entry((name, reach)).or_default() += 1;
            mentions.insert(name);
            // The type a call goes through is used too: `Store::open`, `store.get()` on a
            // `Store`. A lowercase qualifier is a variable or a module, not a type.
            let through = if c.recv_type.is_empty() {
                Some(qualifier.rsplit('.').next().unwrap_or("")).filter(|q| q.starts_with(char::is_uppercase))
            } else {
                Some(f.str(c.recv_type))
            };
            if let Some(ty) = through.filter(|t| !t.is_empty()) {
                *refs.entry((ty, Reach::Any)).or_default() += 1;
                mentions.insert(ty);
            }
        }
        let mut defs: BTreeMap<&str, (Vec<u32>, BTreeSet<&str>)> = BTreeMap::new();
        for (i, d) in f.definitions.iter().enumerate() {
            let name = f.str(d.name);
            mentions.insert(name);
            // A lowercase module (Rust's `mod map;`) is no call's target.
            let module = d.kind == DefKind::Module && !name.starts_with(char::is_uppercase);
            if !matches!(d.kind, DefKind::Constant | DefKind::Impl) && !module {
                let entry = defs.entry(name).or_default();
                entry.0.push(i as u32);
                entry.1.insert(owner_of(f, i as u32));
            }
        }
        mentions.remove("");
        Self {
            refs: refs.into_iter().map(|((n, r), c)| (n.into(), r, c)).collect(),
            defs: defs
                .into_iter()
                .map(|(n, (indices, o))| Defined {
                    name: n.into(),
                    indices,
                    owners: o.into_iter().map(Into::into).collect(),
                })
                .collect(),
            mentions: mentions.into_iter().map(Into::into).collect(),
        }
    }

    /// Where `name` is in [`Self::defs`].
    fn defined_at(&self, name: &str) -> Option<u32> {
        self.defs.binary_search_by(|d| (*d.name).cmp(name)).ok().map(|at| at as u32)
    }

    /// The types the file's definitions of `name` belong to (`""` for none).
    fn owners_of(&self, name: &str) -> &[Box<str>] {
        match self.defs.binary_search_by(|d| (*d.name).cmp(name)) {
            Ok(at) => &self.defs[at].owners,
            Err(_) => &[],
        }
    }

    fn mentions(&self, name: &str) -> bool {
        self.mentions.binary_search_by(|m| (**m).cmp(name)).is_ok()
    }
}

/// A file of the graph.
pub struct Node {
    pub rel: String,
    pub id: FileId,
    /// The languages whose definitions its calls may reach ([`super::lang::family`]).
    family: &'static str,
    refs: Arc<FileRefs>,
}

/// How much a reference to `name` weighs, before its count: Aider's rule.
fn weight_of(name: &str) -> f64 {
    let words = name.contains('_') && name.chars().any(char::is_alphabetic)
        || name.chars().any(char::is_uppercase) && name.chars().any(char::is_lowercase);
    let specific = if words && name.len() >= 8 { 10.0 } else { 1.0 };
    let private = if name.starts_with('_') { 0.1 } else { 1.0 };
    specific * private
}

/// A file's reference to the definitions of a name in a file (maybe itself).
struct Ref {
    to: u32,
    name: u32,
    /// Where the name is in `to`'s definitions ([`FileRefs::defs`]): found once per graph,
    /// not by name at every map (a kernel's millions of references).
    at: u32,
    weight: f64,
}

/// The reference graph of one generation of the store.
pub struct Graph {
    generation: u64,
    /// Sorted by path: every sum below runs in this order, so the same tree ranks the same in
    /// every gm, whatever order its files were parsed in.
    pub nodes: Vec<Node>,
    /// Every defined name, each once (a [`Ref`]'s `name`).
    names: Vec<Box<str>>,
    /// Per node, its references.
    refs: Vec<Vec<Ref>>,
    /// Per node, the weight of all its references.
    out: Vec<f64>,
    /// (from, to, weight) between different files, sorted, each pair once.
    edges: Vec<(u32, u32, f64)>,
    /// Per node, the weight of its edges to other files.
    cross_out: Vec<f64>,
}

/// Each file's references by content, and the graph of the last generation seen.
#[derive(Default)]
pub struct MapCache {
    refs: FxHashMap<String, (Hash, Arc<FileRefs>)>,
    graph: Option<Arc<Graph>>,
}

impl MapCache {
    /// The graph of the store as it is: the kept one while no file changed.
    pub fn graph(&mut self, store: &Store) -> Arc<Graph> {
        if let Some(g) = self.graph.as_ref().filter(|g| g.generation == store.generation()) {
            return g.clone();
        }
        let mut files: Vec<(FileId, &str, &'static str)> = store
            .summaries()
            .filter(|(_, _, s)| super::lang::by_name(&s.lang).is_some())
            .map(|(id, rel, s)| (id, rel, super::lang::family(&s.lang)))
            .collect();
        files.sort_unstable_by(|a, b| a.1.cmp(b.1));
        // After a restart the facts are still in the saved cache: those of changed files are
        // read on every core first.
        let unread: Vec<FileId> = files
            .iter()
            .filter(|(_, rel, _)| {
                let hash = store.get(rel).map(|s| s.hash);
                self.refs.get(*rel).is_none_or(|(h, _)| Some(*h) != hash)
            })
            .map(|(id, _, _)| *id)
            .collect();
        if store.reads_saved() {
            store.prefetch(&unread);
        }
        let mut kept = FxHashMap::default();
        let mut nodes = Vec::with_capacity(files.len());
        for (id, rel, family) in files {
            let Some(stamp) = store.get(rel) else { continue };
            let refs = match self.refs.remove(rel) {
                Some((hash, refs)) if hash == stamp.hash => refs,
                _ => match store.file(id) {
                    Some((_, f)) => Arc::new(FileRefs::of(f)),
                    None => continue,
                },
            };
            kept.insert(rel.to_owned(), (stamp.hash, refs.clone()));
            nodes.push(Node { rel: rel.to_owned(), id, family, refs });
        }
        // Files gone since are dropped with the old map.
        self.refs = kept;
        let graph = Arc::new(Graph::build(store.generation(), nodes));
        self.graph = Some(graph.clone());
        graph
    }
}

impl Graph {
    fn build(generation: u64, nodes: Vec<Node>) -> Self {
        // Where each name is defined, per family of languages: its id and its files, in path
        // order.
        let mut definers: FxHashMap<(&str, &str), (u32, Vec<u32>)> = FxHashMap::default();
        let mut names: Vec<Box<str>> = Vec::new();
        for (n, node) in nodes.iter().enumerate() {
            for Defined { name, .. } in &node.refs.defs {
                let entry = definers.entry((node.family, &**name)).or_insert_with(|| {
                    names.push(name.clone());
                    (names.len() as u32 - 1, Vec::new())
                });
                entry.1.push(n as u32);
            }
        }
        let mut refs: Vec<Vec<Ref>> = Vec::with_capacity(nodes.len());
        let mut out = vec![0.0; nodes.len()];
        // Each pair's sum runs in node order whatever the map's order: the same every time.
        let mut pairs: FxHashMap<(u32, u32), f64> = FxHashMap::default();
        for (a, node) in nodes.iter().enumerate() {
            let a = a as u32;
            let mut mine = Vec::new();
            for (name, reach, count) in &node.refs.refs {
                let Some((name_id, all)) = definers.get(&(node.family, &**name)) else { continue };
                let owned_by = |b: &u32, ty: &str| nodes[*b as usize].refs.owners_of(name).iter().any(|o| **o == *ty);
                let mut guess = *reach == Reach::Mentioned;
                let files: Vec<u32> = match reach {
                    Reach::Any => all.clone(),
                    Reach::Owner(ty) => {
                        let owned: Vec<u32> = all.iter().copied().filter(|b| owned_by(b, ty)).collect();
                        // None of the type's own: inherited, or a trait's, when the type is
                        // the workspace's (a guess); a library type's (`str`, `Vec`) otherwise.
                        if owned.is_empty() && definers.contains_key(&(node.family, &**ty)) {
                            guess = true;
                            all.iter().copied().filter(|b| !owned_by(b, "")).collect()
                        } else {
                            owned
                        }
                    }
                    Reach::Mentioned => all
                        .iter()
                        .copied()
                        .filter(|b| {
                            *b == a
                                || nodes[*b as usize]
                                    .refs
                                    .owners_of(name)
                                    .iter()
                                    .any(|o| !o.is_empty() && node.refs.mentions(o))
                        })
                        .collect(),
                };
                if files.is_empty() {
                    continue;
                }
                // Repeated calls count less than distinct ones (Aider takes the square root);
                // a guess a tenth.
                let weight = f64::from(*count).sqrt() * weight_of(name) * if guess { GUESS } else { 1.0 };
                let at = |b: u32| nodes[b as usize].refs.defined_at(name);
                if files.binary_search(&a).is_ok() {
                    if let Some(at) = at(a) {
                        mine.push(Ref { to: a, name: *name_id, at, weight });
                    }
                    continue;
                }
                let share = weight / files.len() as f64;
                for &b in &files {
                    if let Some(at) = at(b) {
                        mine.push(Ref { to: b, name: *name_id, at, weight: share });
                    }
                    *pairs.entry((a, b)).or_default() += share;
                }
            }
            out[a as usize] = mine.iter().map(|r| r.weight).sum();
            refs.push(mine);
        }
        let mut cross_out = vec![0.0; nodes.len()];
        let mut edges: Vec<(u32, u32, f64)> = pairs.into_iter().map(|((a, b), w)| (a, b, w)).collect();
        edges.sort_unstable_by_key(|&(a, b, _)| (a, b));
        for &(a, _, w) in &edges {
            cross_out[a as usize] += w;
        }
        Graph { generation, nodes, names, refs, out, edges, cross_out }
    }

    /// PageRank over the files; `focus` files take the random jumps (all files when none).
    fn pagerank(&self, focus: &BTreeSet<u32>) -> Vec<f64> {
        const DAMPING: f64 = 0.85;
        const ROUNDS: usize = 50;
        let n = self.nodes.len();
        if n == 0 {
            return Vec::new();
        }
        let jump: Vec<f64> = if focus.is_empty() {
            vec![1.0 / n as f64; n]
        } else {
            (0..n as u32).map(|i| if focus.contains(&i) { 1.0 / focus.len() as f64 } else { 0.0 }).collect()
        };
        let mut rank = jump.clone();
        let mut next = vec![0.0; n];
        for _ in 0..ROUNDS {
            // A file that references no other hands its rank back through the jumps.
            let dangling: f64 = (0..n).filter(|&i| self.cross_out[i] == 0.0).map(|i| rank[i]).sum();
            for (i, x) in next.iter_mut().enumerate() {
                *x = (1.0 - DAMPING + DAMPING * dangling) * jump[i];
            }
            for &(a, b, w) in &self.edges {
                next[b as usize] += DAMPING * rank[a as usize] * w / self.cross_out[a as usize];
            }
            let moved: f64 = rank.iter().zip(&next).map(|(r, x)| (r - x).abs()).sum();
            std::mem::swap(&mut rank, &mut next);
            if moved < 1e-12 {
                break;
            }
        }
        rank
    }
}

/// A definition the map may show.
#[derive(Debug, Clone, Copy)]
pub struct Ranked {
    pub node: u32,
    pub def: u32,
    /// 0 for a focus file's definitions, which come first; 1 for those whose name a focus
    /// word is a word of, next; 2 for the rest.
    pub tier: u8,
    pub score: f64,
}

/// What raises definitions: files (by node), and words (a name holding one is raised).
#[derive(Debug, Default)]
pub struct Focus {
    pub files: BTreeSet<u32>,
    pub words: Vec<String>,
}

impl Focus {
    /// Splits `focus` into the graph's files (a path, or a folder's files) and words.
    pub fn of(graph: &Graph, focus: &[String]) -> Self {
        let mut out = Focus::default();
        for item in focus {
            let item = item.trim().trim_start_matches("./").trim_end_matches('/');
            if item.is_empty() {
                continue;
            }
            let under = format!("{item}/");
            let files: Vec<u32> = (0..graph.nodes.len() as u32)
                .filter(|&i| {
                    let rel = &graph.nodes[i as usize].rel;
                    rel == item || rel.starts_with(&under)
                })
                .collect();
            if files.is_empty() {
                out.words.extend(crate::search::tokenizer::words(item));
            } else {
                out.files.extend(files);
            }
        }
        out.words.sort();
        out.words.dedup();
        out
    }

    fn mentions(&self, name: &str) -> bool {
        !self.words.is_empty() && crate::search::tokenizer::words(name).iter().any(|w| self.words.contains(w))
    }
}

/// The definitions in rank order: a focus file's first, then those a focus word names, then
/// the rest; within each, by the rank that reaches them, then by their file's rank, then by
/// path and line. Only definitions something references are ranked, and every definition of
/// a focus file or whose name a focus word is a word of.
pub fn rank(graph: &Graph, store: &Store, focus: &Focus, under: Option<&str>) -> Vec<Ranked> {
    let file_rank = graph.pagerank(&focus.files);
    let mentioned: Vec<bool> = graph.names.iter().map(|n| focus.mentions(n)).collect();
    // The rank of each (file, name) defined there: what its referencing files give it.
    // Each sum runs in node order; the map's own order is undone by `picked` below.
    let mut by_name: FxHashMap<(u32, u32), (f64, u32)> = FxHashMap::default();
    for (a, refs) in graph.refs.iter().enumerate() {
        if graph.out[a] == 0.0 {
            continue;
        }
        for r in refs {
            by_name.entry((r.to, r.name)).or_insert((0.0, r.at)).0 += file_rank[a] * r.weight / graph.out[a];
        }
    }
    let mut picked: BTreeMap<(u32, u32), Ranked> = BTreeMap::new();
    let in_scope = |node: u32| under.is_none_or(|p| in_path(&graph.nodes[node as usize].rel, p));
    let tier = |node: u32, mentioned: bool| match (focus.files.contains(&node), mentioned) {
        (true, _) => 0,
        (false, true) => 1,
        (false, false) => 2,
    };
    for (&(node, name), &(score, at)) in &by_name {
        if !in_scope(node) {
            continue;
        }
        let tier = tier(node, mentioned[name as usize]);
        for &def in &graph.nodes[node as usize].refs.defs[at as usize].indices {
            picked.insert((node, def), Ranked { node, def, tier, score });
        }
    }
    // Mentioned names that nothing references: ranked by their file.
    let named: rustc_hash::FxHashSet<&str> =
        graph.names.iter().zip(&mentioned).filter(|(_, m)| **m).map(|(n, _)| &**n).collect();
    if !named.is_empty() {
        for (node, n) in graph.nodes.iter().enumerate() {
            let node = node as u32;
            if !in_scope(node) {
                continue;
            }
            let tier = tier(node, true);
            for defined in n.refs.defs.iter().filter(|d| named.contains(&*d.name)) {
                for &def in &defined.indices {
                    picked.entry((node, def)).or_insert(Ranked { node, def, tier, score: 0.0 });
                }
            }
        }
    }
    for &node in focus.files.iter().filter(|n| in_scope(**n)) {
        let Some((_, f)) = store.file(graph.nodes[node as usize].id) else { continue };
        for (def, d) in f.definitions.iter().enumerate() {
            if d.kind != DefKind::Impl {
                picked.entry((node, def as u32)).or_insert(Ranked { node, def: def as u32, tier: 0, score: 0.0 });
            }
        }
    }
    let mut ranked: Vec<Ranked> = picked.into_values().collect();
    // Picked in (node, def) order, which is path and source order: a stable sort keeps it
    // for equal scores.
    ranked.sort_by(|a, b| {
        a.tier
            .cmp(&b.tier)
            .then(b.score.total_cmp(&a.score))
            .then(file_rank[b.node as usize].total_cmp(&file_rank[a.node as usize]))
    });
    ranked
}

/// Whether `rel` is the file or folder `prefix`, or under it.
fn in_path(rel: &str, prefix: &str) -> bool {
    let prefix = prefix.trim_end_matches('/');
    rel == prefix || rel.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/')) || prefix.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(rel: &str, refs: &[(&str, u32)], defs: &[&str]) -> Node {
        let refs = FileRefs {
            refs: refs.iter().map(|(n, c)| ((*n).into(), Reach::Any, *c)).collect(),
            defs: defs
                .iter()
                .enumerate()
                .map(|(i, n)| Defined { name: (*n).into(), indices: vec![i as u32], owners: vec!["".into()] })
                .collect(),
            mentions: Vec::new(),
        };
        Node { rel: rel.into(), id: 0, family: "python", refs: Arc::new(refs) }
    }

    #[test]
    fn the_file_everything_references_ranks_highest_and_focus_moves_the_jumps() {
        let g = Graph::build(
            0,
            vec![
                node("a.py", &[("util", 3)], &["main"]),
                node("b.py", &[("util", 1)], &["other"]),
                node("c.py", &[("util", 2), ("other", 1)], &["third"]),
                node("u.py", &[], &["util"]),
            ],
        );
        let r = g.pagerank(&BTreeSet::new());
        let best = (0..4).max_by(|&a, &b| r[a].total_cmp(&r[b])).unwrap_or(0);
        assert_eq!(g.nodes[best].rel, "u.py", "{r:?}");
        assert!((r.iter().sum::<f64>() - 1.0).abs() < 1e-9, "ranks sum to one: {r:?}");
        let focused = g.pagerank(&BTreeSet::from([1]));
        assert!(focused[1] > r[1], "a focus file gets the jumps: {focused:?} vs {r:?}");
        assert_eq!(focused[0], 0.0, "a file nothing jumps to or references has no rank");
    }

    #[test]
    fn a_name_defined_in_several_files_splits_its_weight_and_a_local_one_stays_home() {
        let g = Graph::build(
            0,
            vec![
                node("a.rs", &[("helper", 1), ("new", 4)], &["helper"]),
                node("b.rs", &[], &["new"]),
                node("c.rs", &[], &["new"]),
            ],
        );
        let to: Vec<(u32, f64)> = g.refs[0].iter().map(|r| (r.to, r.weight)).collect();
        assert_eq!(to, [(0, 1.0), (1, 1.0), (2, 1.0)], "sqrt(4) = 2 split in two; helper is a.rs's own");
        assert_eq!(g.edges, [(0, 1, 1.0), (0, 2, 1.0)], "no edge from a file to itself");
    }

    #[test]
    fn a_method_on_a_library_type_reaches_nothing_and_one_on_an_unknown_receiver_is_a_guess() {
        let refs = |refs: Vec<(&str, Reach, u32)>, mentions: &[&str]| FileRefs {
            refs: refs.into_iter().map(|(n, r, c)| (n.into(), r, c)).collect(),
            defs: Vec::new(),
            mentions: mentions.iter().map(|m| (*m).into()).collect(),
        };
        let defined = Defined { name: "is_empty".into(), indices: vec![0], owners: vec!["Span".into()] };
        let span = FileRefs { defs: vec![defined], ..FileRefs::default() };
        let nodes = vec![
            Node {
                rel: "a.rs".into(),
                id: 0,
                family: "rust",
                refs: Arc::new(refs(
                    vec![("is_empty", Reach::Owner("str".into()), 3), ("is_empty", Reach::Mentioned, 2)],
                    &[],
                )),
            },
            Node { rel: "b.rs".into(), id: 1, family: "rust", refs: Arc::new(span) },
            Node {
                rel: "c.rs".into(),
                id: 2,
                family: "rust",
                refs: Arc::new(refs(vec![("is_empty", Reach::Mentioned, 1)], &["Span"])),
            },
        ];
        let g = Graph::build(0, nodes);
        assert!(g.refs[0].is_empty(), "a str's is_empty, and a guess in a file that names no Span");
        let to: Vec<(u32, f64)> = g.refs[2].iter().map(|r| (r.to, r.weight)).collect();
        assert_eq!(to.len(), 1);
        assert_eq!(to[0].0, 1);
        assert!((to[0].1 - GUESS * 10.0).abs() < 1e-12, "a guess at a specific name: {to:?}");
    }

    #[test]
    fn specific_names_weigh_more_than_generic_ones_and_private_ones_less() {
        assert_eq!(weight_of("map"), 1.0);
        assert_eq!(weight_of("get_user"), 10.0);
        assert_eq!(weight_of("formatName"), 10.0);
        assert_eq!(weight_of("Resolver"), 10.0, "a type's name is one word, in two cases");
        assert_eq!(weight_of("RESOLVER"), 1.0);
        assert_eq!(weight_of("_private"), 1.0, "specific, and private");
    }

    #[test]
    fn paths_match_as_files_or_folders_never_as_prefixes_of_names() {
        assert!(in_path("src/a.rs", "src"));
        assert!(in_path("src/a.rs", "src/"));
        assert!(in_path("src/a.rs", "src/a.rs"));
        assert!(!in_path("srcx/a.rs", "src"));
    }
}
