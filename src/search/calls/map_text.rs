//! The map's text: the ranked definitions, best first, as long as they fit the budget, grouped
//! under their files' paths (files in the order their best definition ranked, definitions in
//! source order) and each under the types or functions it is nested in, shown for context:
//!
//! ```text
//! src/server/call.rs:
//!   fn call_tool(app: Rc<App>, ...) -> Option<String>
//!   impl Server
//!     fn start_call(&mut self, call: ToolCall) -> Later
//! ```
//!
//! The ranking is cut at the first definition that does not fit, so the map is always a prefix
//! of it: what `cut` counts is exactly what ranked below the last one shown.

use std::collections::BTreeSet;
use std::path::Path;

use rustc_hash::FxHashMap;

use super::answer::signature_in;
use super::facts::FileFacts;
use super::map::{Graph, Ranked};
use super::store::Store;

/// A shown line's longest signature, in bytes: one long line must not eat the budget.
const MAX_SIGNATURE: usize = 160;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Rendered {
    pub text: String,
    pub files: usize,
    /// Ranked definitions shown (the context lines around them not counted).
    pub definitions: usize,
    /// Ranked definitions left out.
    pub cut: usize,
}

/// The shown lines of one file: definition indices, in source order.
struct Shown {
    node: u32,
    defs: BTreeSet<u32>,
}

/// A definition's line without its indent: its signature, without the brace that opens its
/// body, bounded.
fn line_of(source: &[u8], f: &FileFacts, def: u32) -> String {
    let Some(d) = f.def(def) else { return String::new() };
    let sig = signature_in(source, d.sig_start);
    let sig = sig.trim_end().trim_end_matches('{').trim_end();
    let sig = if sig.is_empty() { f.str(d.name) } else { sig };
    if sig.len() > MAX_SIGNATURE {
        format!("{}…", crate::text::head(sig, MAX_SIGNATURE))
    } else {
        sig.to_owned()
    }
}

/// How deep a definition is nested (0 at the top of its file).
fn depth(f: &FileFacts, def: u32) -> usize {
    f.parents(def).count()
}

/// Renders `ranked` (best first) within `budget` bytes.
pub fn render(workspace: &Path, graph: &Graph, store: &Store, ranked: &[Ranked], budget: usize) -> Rendered {
    let mut shown: Vec<Shown> = Vec::new();
    let mut at: FxHashMap<u32, usize> = FxHashMap::default();
    // Each shown file's bytes, read once: the signatures are read from them.
    let mut sources: FxHashMap<u32, Vec<u8>> = FxHashMap::default();
    let mut lines: FxHashMap<(u32, u32), String> = FxHashMap::default();
    let mut used = 0usize;
    let mut definitions = 0;
    let mut cut = 0;
    for (k, r) in ranked.iter().enumerate() {
        let node = &graph.nodes[r.node as usize];
        let Some((_, f)) = store.file(node.id) else { continue };
        let source =
            sources.entry(r.node).or_insert_with(|| std::fs::read(workspace.join(&node.rel)).unwrap_or_default());
        let known = at.get(&r.node).map(|&i| &shown[i].defs);
        let mut new_lines: Vec<u32> = std::iter::once(r.def)
            .chain(f.parents(r.def).map(|(i, _)| i))
            .filter(|i| known.is_none_or(|s| !s.contains(i)))
            .collect();
        new_lines.sort_unstable();
        let mut cost = if known.is_none() { node.rel.len() + 2 } else { 0 };
        for &i in &new_lines {
            let line = lines.entry((r.node, i)).or_insert_with(|| line_of(source, f, i));
            cost += 2 * (depth(f, i) + 1) + line.len() + 1;
        }
        if used + cost > budget {
            cut = ranked.len() - k;
            break;
        }
        used += cost;
        definitions += 1;
        let slot = *at.entry(r.node).or_insert_with(|| {
            shown.push(Shown { node: r.node, defs: BTreeSet::new() });
            shown.len() - 1
        });
        shown[slot].defs.extend(new_lines);
    }
    let mut text = String::with_capacity(used);
    for s in &shown {
        let node = &graph.nodes[s.node as usize];
        let Some((_, f)) = store.file(node.id) else { continue };
        text.push_str(&node.rel);
        text.push_str(":\n");
        for &i in &s.defs {
            text.extend(std::iter::repeat_n("  ", depth(f, i) + 1));
            text.push_str(lines.get(&(s.node, i)).map_or("", String::as_str));
            text.push('\n');
        }
    }
    Rendered { text, files: shown.len(), definitions, cut }
}
