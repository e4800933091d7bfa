//! One file's facts from its language's queries. The queries say *what* is a definition, a
//! call, an import or a typed variable; this module, the same for every language, works out
//! how they nest (a method in its class, a call in its function), what a receiver's type is
//! where the file says it, and what each import binds.
//!
//! The captures a query may use:
//!
//! | capture | on | meaning |
//! |---|---|---|
//! | `@definition.<kind>` + `@name` | the definition, its name | kinds: see `DefKind::from_capture` |
//! | `@owner` | in a definition's match | the type a method belongs to when it is not nested in it (Go receivers, `void T::f()`) |
//! | `@base` | in a type's match | a superclass, interface or implemented trait |
//! | `@declaration` | in a definition's match | a declaration without a body (a prototype) |
//! | `@extends` | in a definition's match | a method added to another module's function (Julia's `Base.length(r::Repo)`) |
//! | `@clause` | in a definition's match | one clause of a function written as several, one after another (Haskell's `f 0 = ..` then `f n = ..`): the clauses that follow the first widen it |
//! | `@reference.call` / `.new` / `.macro` / `.in_macro` + `@name` | the call, the called name | a call, a constructor call, a macro call, a call-like token run in a macro's arguments |
//! | `@receiver` | in a call's match | the object of `obj.f()` |
//! | `@dispatch` | in a call's match | the argument a call is dispatched on (Julia's first): its type, when the file says it, is the call's receiver type, the call staying a plain call |
//! | `@qualifier` | in a call's match | the path of `Type::f()`, `ns::f()` (several are joined) |
//! | `@import` + `@import.module`, `@import.name`, `@import.alias` | an import | what it binds (several modules are joined; a module that holds the name is its parts before it) |
//! | `@bind.name` / `@bind.field` + `@bind.type` | anywhere | a variable, or a field of the current type, has that type |
//! | `@module` | anywhere | the package or namespace the file declares |

use std::collections::HashMap;

use tree_sitter::{Node, Parser, QueryCursor, StreamingIterator};

use super::facts::{number, offset, Builder, Call, CallKind, Def, DefKind, FileFacts, Import, NONE};
use super::spec::{Compiled, Lang, Role};

/// Parses one file into its facts; `None` when the language's queries do not compile or the
/// parser gives up (a timeout, a cancelled parse). A file with syntax errors yields what
/// parsed, marked `partial`. The source is bytes: a file with a stray byte that is not UTF-8
/// (a test of an encoding error, a Latin-1 comment) still has its calls.
pub fn analyze(lang: &Lang, compiled: &Compiled, src: &[u8], parser: &mut Parser) -> Option<FileFacts> {
    parser.set_language(&lang.language()).ok()?;
    let tree = parser.parse(src, None)?;
    let raw = collect(compiled, tree.root_node(), src);
    let mut b = Builder::default();
    b.facts.lang = lang.name.to_owned();
    b.facts.partial = tree.root_node().has_error();
    build(lang, raw, src, &mut b)?;
    Some(b.facts)
}

struct RawDef<'t> {
    node: Node<'t>,
    name: Node<'t>,
    kind: DefKind,
    pattern: usize,
    owner: Option<Node<'t>>,
    bases: Vec<Node<'t>>,
    decl: bool,
    extends: bool,
    clause: bool,
    /// The last clause of a definition written as several; the definition itself otherwise.
    last: Node<'t>,
}

struct RawCall<'t> {
    node: Node<'t>,
    name: Node<'t>,
    kind: CallKind,
    pattern: usize,
    receiver: Option<Node<'t>>,
    dispatch: Option<Node<'t>>,
    qualifier: Vec<Node<'t>>,
}

struct RawImport<'t> {
    modules: Vec<Node<'t>>,
    name: Option<Node<'t>>,
    alias: Option<Node<'t>>,
}

struct RawBind<'t> {
    name: Node<'t>,
    ty: Node<'t>,
    field: bool,
}

#[derive(Default)]
struct Raw<'t> {
    defs: Vec<RawDef<'t>>,
    calls: Vec<RawCall<'t>>,
    imports: Vec<RawImport<'t>>,
    binds: Vec<RawBind<'t>>,
    module: Option<Node<'t>>,
}

/// Runs the query once over the tree and sorts its matches into raw facts. Where several
/// patterns capture the same name (gm's and the shipped query's), the definition or call is
/// kept once: the lowest pattern's kind, with every pattern's receiver, qualifier and bases.
fn collect<'t>(compiled: &Compiled, root: Node<'t>, src: &[u8]) -> Raw<'t> {
    let mut raw = Raw::default();
    let mut def_at: HashMap<usize, usize> = HashMap::new();
    let mut call_at: HashMap<usize, usize> = HashMap::new();
    let mut cursor = QueryCursor::new();
    let mut matches = cursor.matches(&compiled.query, root, src);
    while let Some(m) = matches.next() {
        let own = m.pattern_index < compiled.own_patterns;
        let mut def = None;
        let mut call = None;
        let (mut name, mut receiver, mut owner, mut decl, mut import) = (None, None, None, false, false);
        let mut dispatch = None;
        let (mut clause, mut extends) = (false, false);
        let (mut qualifier, mut bases, mut modules) = (Vec::new(), Vec::new(), Vec::new());
        let (mut import_name, mut alias, mut bind_name, mut bind_field, mut bind_type) = (None, None, None, None, None);
        for c in m.captures {
            let n = c.node;
            match compiled.roles.get(c.index as usize).copied().unwrap_or(Role::Other) {
                Role::Name => name = Some(n),
                Role::Definition(kind) => def = Some((n, kind)),
                Role::Reference(kind) => call = Some((n, kind)),
                Role::Receiver => receiver = Some(n),
                Role::Dispatch => dispatch = Some(n),
                Role::Qualifier => qualifier.push(n),
                Role::Owner => owner = Some(n),
                Role::Base => bases.push(n),
                Role::Declaration => decl = true,
                Role::Extends => extends = true,
                Role::Clause => clause = true,
                Role::Import => import = true,
                Role::ImportModule => modules.push(n),
                Role::ImportName => import_name = Some(n),
                Role::ImportAlias => alias = Some(n),
                Role::BindName => bind_name = Some(n),
                Role::BindField => bind_field = Some(n),
                Role::BindType => bind_type = Some(n),
                Role::Module => {
                    raw.module.get_or_insert(n);
                }
                Role::Other => {}
            }
        }
        if let (Some((node, kind)), Some(name)) = (def, name) {
            match def_at.get(&name.start_byte()).map(|&i| &mut raw.defs[i]) {
                Some(d) => {
                    if m.pattern_index < d.pattern {
                        (d.node, d.kind, d.pattern, d.decl) = (node, kind, m.pattern_index, decl);
                        d.last = node;
                    }
                    d.owner = d.owner.or(owner);
                    d.bases.extend(bases);
                    d.clause |= clause;
                    d.extends |= extends;
                }
                None => {
                    def_at.insert(name.start_byte(), raw.defs.len());
                    let pattern = m.pattern_index;
                    raw.defs.push(RawDef {
                        node,
                        name,
                        kind,
                        pattern,
                        owner,
                        bases,
                        decl,
                        extends,
                        clause,
                        last: node,
                    });
                }
            }
        } else if let (Some((node, kind)), Some(name)) = (call, name) {
            if !own && kind != CallKind::Call {
                continue;
            }
            match call_at.get(&name.start_byte()).map(|&i| &mut raw.calls[i]) {
                Some(c) => {
                    if m.pattern_index < c.pattern {
                        (c.node, c.kind, c.pattern) = (node, kind, m.pattern_index);
                    }
                    c.receiver = c.receiver.or(receiver);
                    c.dispatch = c.dispatch.or(dispatch);
                    if c.qualifier.is_empty() {
                        c.qualifier = qualifier;
                    }
                }
                None => {
                    call_at.insert(name.start_byte(), raw.calls.len());
                    let pattern = m.pattern_index;
                    raw.calls.push(RawCall { node, name, kind, pattern, receiver, dispatch, qualifier });
                }
            }
        } else if import && (!modules.is_empty() || import_name.is_some()) {
            raw.imports.push(RawImport { modules, name: import_name, alias });
        } else if let (Some(ty), Some(name)) = (bind_type, bind_name.or(bind_field)) {
            raw.binds.push(RawBind { name, ty, field: bind_field.is_some() });
        }
    }
    // A grammar that parses a definition's head as a call (Elixir's `def run(x)` is a call of
    // `def` whose argument is a call of `run`) gives the query no way to tell that head from a
    // call: a name that is a definition's is no call.
    raw.calls.retain(|c| !def_at.contains_key(&c.name.start_byte()));
    raw
}

/// An import's module as written. A grammar that parses `import a.b.C` or `import a.b.{C, D}`
/// as one node gives the query no node for `a.b` alone: the query captures the whole node as
/// the module and the imported name inside it, and the module is the node's parts before the
/// one that holds the name (a leading `import` keyword is no named part).
fn module_text<'a>(module: Node, name: Option<Node>, src: &'a [u8]) -> &'a str {
    let inside = name.filter(|n| {
        n.id() != module.id() && module.start_byte() <= n.start_byte() && n.end_byte() <= module.end_byte()
    });
    let path = match inside {
        Some(name) => {
            let mut cursor = module.walk();
            let before: Vec<Node> =
                module.named_children(&mut cursor).take_while(|c| c.end_byte() <= name.start_byte()).collect();
            match (before.first(), before.last()) {
                (Some(first), Some(last)) => {
                    std::str::from_utf8(&src[first.start_byte()..last.end_byte()]).unwrap_or("")
                }
                _ => "",
            }
        }
        None => text(module, src),
    };
    path.trim_matches(|c| c == '"' || c == '\'')
}

fn text<'a>(node: Node, src: &'a [u8]) -> &'a str {
    std::str::from_utf8(&src[node.byte_range()]).unwrap_or("")
}

/// A node's last line: the one before when it ends at the start of a line (a `#define`
/// takes its line's newline).
fn end_line(node: Node) -> u32 {
    let (start, end) = (node.start_position(), node.end_position());
    number(if end.column == 0 && end.row > start.row { end.row - 1 } else { end.row })
}

/// Where the line holding byte `at` starts.
fn line_start(src: &[u8], at: usize) -> usize {
    memchr::memrchr(b'\n', &src[..at.min(src.len())]).map_or(0, |i| i + 1)
}

/// The definitions of a file in source order, each with its parent, and a way to find the
/// innermost one around a position.
struct Scopes {
    /// (start byte, end byte) per definition, in the order of `FileFacts::definitions`.
    ranges: Vec<(usize, usize)>,
    parents: Vec<u32>,
}

impl Scopes {
    /// The innermost definition containing byte `at`.
    fn innermost(&self, at: usize) -> u32 {
        let after = self.ranges.partition_point(|&(start, _)| start <= at);
        let mut i = if after == 0 { NONE } else { (after - 1) as u32 };
        while let Some(&(start, end)) = self.ranges.get(i as usize) {
            if start <= at && at < end {
                return i;
            }
            i = self.parents[i as usize];
        }
        NONE
    }
}

fn build(lang: &Lang, mut raw: Raw, src: &[u8], b: &mut Builder) -> Option<()> {
    // Definitions in source order, outer before inner, with their parents.
    raw.defs.sort_by_key(|d| (d.node.start_byte(), std::cmp::Reverse(d.node.end_byte())));
    merge_clauses(&mut raw.defs, src);
    let mut scopes = Scopes { ranges: Vec::with_capacity(raw.defs.len()), parents: Vec::with_capacity(raw.defs.len()) };
    let mut stack: Vec<u32> = Vec::new();
    for (i, d) in raw.defs.iter().enumerate() {
        let (start, end) = (d.node.start_byte(), d.last.end_byte());
        while let Some(&top) = stack.last() {
            if scopes.ranges[top as usize].1 >= end && scopes.ranges[top as usize].0 <= start {
                break;
            }
            stack.pop();
        }
        scopes.parents.push(stack.last().copied().unwrap_or(NONE));
        scopes.ranges.push((start, end));
        stack.push(i as u32);
    }
    for (i, d) in raw.defs.iter().enumerate() {
        let parent = scopes.parents[i];
        let parent_def = raw.defs.get(parent as usize);
        let name = text(d.name, src);
        // A method's type: said by the definition itself, or the type it is nested in.
        let owner = match (d.owner, parent_def) {
            (Some(o), _) => type_name(text(o, src)).unwrap_or(""),
            (None, Some(p)) if p.kind.is_type() => text(p.name, src),
            _ => "",
        };
        let kind = if d.kind == DefKind::Function && !owner.is_empty() { DefKind::Method } else { d.kind };
        let def = Def {
            name: b.intern(name)?,
            kind,
            line: number(d.node.start_position().row),
            end_line: end_line(d.last),
            sig_start: offset(line_start(src, d.name.start_byte())),
            parent,
            owner: b.intern(owner)?,
            decl: d.decl,
            extends: d.extends,
        };
        b.facts.definitions.push(def);
        for base in &d.bases {
            if let Some(base) = type_name(text(*base, src)) {
                let pair = (b.intern(name)?, b.intern(base)?);
                b.facts.bases.push(pair);
            }
        }
    }
    let types = Types::new(lang, &raw, &scopes, src);
    raw.calls.sort_by_key(|c| c.node.start_byte().min(c.name.start_byte()));
    for c in &raw.calls {
        let start = c.node.start_byte().min(c.name.start_byte());
        let position =
            if c.node.start_byte() <= c.name.start_byte() { c.node.start_position() } else { c.name.start_position() };
        let mut enclosing = scopes.innermost(c.name.start_byte());
        while enclosing != NONE && !raw.defs[enclosing as usize].kind.encloses() {
            enclosing = scopes.parents[enclosing as usize];
        }
        let kind = match (c.kind, c.receiver) {
            (CallKind::Call, Some(_)) => CallKind::Method,
            (kind, _) => kind,
        };
        let joined: String;
        let path = match (c.receiver, c.qualifier.as_slice()) {
            (Some(r), _) => segments(text(r, src)),
            (None, []) => None,
            (None, q) => {
                joined = q.iter().map(|n| text(*n, src)).collect::<Vec<_>>().join("::");
                segments(&joined)
            }
        };
        // A dispatched-on argument gives the call a receiver type, never a qualifier: the
        // call is still a plain call of the name, which is how it resolves when the type is
        // not one of the method's.
        let dispatched = match (&path, c.dispatch) {
            (None, Some(arg)) => segments(text(arg, src)),
            _ => None,
        };
        let recv_type = match path.as_ref().or(dispatched.as_ref()) {
            Some(path) => types.of_path(path, enclosing),
            None => None,
        };
        let qualifier = path.map(|p| p.join(".")).unwrap_or_default();
        let call = Call {
            line: number(position.row),
            column: number(position.column),
            start: offset(start),
            callee: b.intern(text(c.name, src))?,
            kind,
            enclosing,
            qualifier: b.intern(&qualifier)?,
            recv_type: b.intern(recv_type.unwrap_or(""))?,
        };
        b.facts.calls.push(call);
    }
    for i in &raw.imports {
        let modules: Vec<&str> = i.modules.iter().map(|n| module_text(*n, i.name, src)).collect();
        let module = modules.join(".");
        let name = i.name.map(|n| text(n, src)).unwrap_or("");
        let local = match (i.alias, name) {
            (Some(alias), _) => text(alias, src),
            (None, name) if !name.is_empty() => name.rsplit(['.', ':', '\\']).next().unwrap_or(name),
            // `import a.b` binds `a`; `import "x/y"` (Go) binds `y`.
            (None, _) if module.contains('/') => module.rsplit('/').next().unwrap_or(&module),
            (None, _) => module.split('.').next().unwrap_or(&module),
        };
        let import = Import { local: b.intern(local)?, name: b.intern(name)?, module: b.intern(&module)? };
        b.facts.imports.push(import);
    }
    if let Some(m) = raw.module {
        b.facts.module = b.intern(text(m, src))?;
    }
    Some(())
}

/// Folds the clauses of a function written as several into its first: a clause marked
/// `@clause` that directly follows one of the same name (its next sibling) continues it. Defs
/// nested in a clause (a `where` block's) come between them in source order, so the clause
/// is looked for among the last few kept.
fn merge_clauses<'t>(defs: &mut Vec<RawDef<'t>>, src: &[u8]) {
    if !defs.iter().any(|d| d.clause) {
        return;
    }
    let mut kept: Vec<RawDef<'t>> = Vec::with_capacity(defs.len());
    for d in defs.drain(..) {
        let continued = d.clause.then(|| {
            kept.iter_mut().rev().take(64).find(|p| {
                p.clause
                    && p.kind == d.kind
                    && p.last.next_named_sibling() == Some(d.node)
                    && text(p.name, src) == text(d.name, src)
            })
        });
        match continued.flatten() {
            Some(first) => first.last = d.node,
            None => kept.push(d),
        }
    }
    *defs = kept;
}

/// What the file says about its variables' and fields' types.
struct Types<'a> {
    lang: &'a Lang,
    /// (scope definition or NONE, variable) -> its type, `None` when bound to several.
    locals: HashMap<(u32, &'a str), Option<&'a str>>,
    /// (type, field) -> its type.
    fields: HashMap<(&'a str, &'a str), Option<&'a str>>,
    /// Per definition: its name, kind, owner as the file says it, and its parent.
    defs: Vec<(&'a str, DefKind, &'a str, u32)>,
}

impl<'a> Types<'a> {
    fn new(lang: &'a Lang, raw: &Raw, scopes: &Scopes, src: &'a [u8]) -> Self {
        let defs: Vec<(&str, DefKind, &str, u32)> = raw
            .defs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let parent = scopes.parents[i];
                let owner = match (d.owner, raw.defs.get(parent as usize)) {
                    (Some(o), _) => type_name(text(o, src)).unwrap_or(""),
                    (None, Some(p)) if p.kind.is_type() => text(p.name, src),
                    _ => "",
                };
                (text(d.name, src), d.kind, owner, parent)
            })
            .collect();
        let mut types = Types { lang, locals: HashMap::new(), fields: HashMap::new(), defs };
        for bind in &raw.binds {
            let Some(ty) = type_name(text(bind.ty, src)) else { continue };
            let mut scope = scopes.innermost(bind.name.start_byte());
            while scope != NONE && !types.defs[scope as usize].1.encloses() {
                scope = scopes.parents[scope as usize];
            }
            let name = text(bind.name, src);
            if bind.field {
                let Some(owner) = types.owner_at(scope) else { continue };
                merge(types.fields.entry((owner, name)).or_insert(Some(ty)), ty);
            } else {
                merge(types.locals.entry((scope, name)).or_insert(Some(ty)), ty);
            }
        }
        types
    }

    /// The type whose code `scope` is: a type itself, or the type of the method it is in.
    fn owner_at(&self, mut scope: u32) -> Option<&'a str> {
        while let Some(&(name, kind, owner, parent)) = self.defs.get(scope as usize) {
            if kind.is_type() {
                return Some(name);
            }
            if !owner.is_empty() {
                return Some(owner);
            }
            scope = parent;
        }
        None
    }

    fn local(&self, name: &str, mut scope: u32) -> Option<&'a str> {
        loop {
            if let Some(ty) = self.locals.get(&(scope, name)) {
                return *ty;
            }
            if scope == NONE {
                return None;
            }
            scope = self.defs.get(scope as usize).map_or(NONE, |d| d.3);
        }
    }

    /// The type a receiver path has at a call in `scope`: `self`, a typed variable, a field of
    /// one, a field of the current object.
    fn of_path(&self, path: &[&str], scope: u32) -> Option<&'a str> {
        let (first, rest) = path.split_first()?;
        let mut ty = if self.lang.rules.self_names.contains(first) {
            self.owner_at(scope)?
        } else if let Some(ty) = self.local(first, scope) {
            ty
        } else {
            let owner = self.owner_at(scope)?;
            (*self.fields.get(&(owner, *first))?)?
        };
        for field in rest {
            ty = (*self.fields.get(&(ty, *field))?)?;
        }
        Some(ty)
    }
}

/// A variable bound to two different types has no one type.
fn merge<'a>(slot: &mut Option<&'a str>, ty: &'a str) {
    if slot.is_some_and(|t| t != ty) {
        *slot = None;
    }
}

/// Types that only hold another: a variable of `Box<T>` or `Optional[T]` calls T's methods.
const WRAPPERS: &[&str] = &[
    "Box",
    "Rc",
    "Arc",
    "RefCell",
    "Cell",
    "Mutex",
    "RwLock",
    "Option",
    "Pin",
    "Weak",
    "shared_ptr",
    "unique_ptr",
    "weak_ptr",
    "Optional",
    "Ref",
    "RefMut",
];

/// The plain name of a type as written (`&mut Repo` -> `Repo`, `*pkg.Repo` -> `Repo`,
/// `Box<Repo>` -> `Repo`, `Map<K, V>` -> `Map`); `None` when it is no plain name.
pub fn type_name(text: &str) -> Option<&str> {
    let mut t = text.trim().trim_matches(|c| c == '\'' || c == '"');
    loop {
        let before = t;
        for prefix in [
            "&",
            "*",
            "?",
            "mut ",
            "dyn ",
            "impl ",
            "const ",
            "struct ",
            "class ",
            "enum ",
            "union ",
            "typename ",
            "::",
            "\\",
        ] {
            t = t.strip_prefix(prefix).unwrap_or(t).trim_start();
        }
        for suffix in ["*", "&", "?", "[]", " const", "..."] {
            t = t.strip_suffix(suffix).unwrap_or(t).trim_end();
        }
        if t == before {
            break;
        }
    }
    if let Some(open) = t.find(['<', '[']) {
        let outer = last_segment(t[..open].trim());
        if WRAPPERS.contains(&outer) {
            let inner = t[open + 1..].split([',', '>', ']']).next().unwrap_or("");
            return type_name(inner);
        }
        return identifier(outer);
    }
    identifier(last_segment(t))
}

fn last_segment(t: &str) -> &str {
    t.rsplit(['.', ':', '\\']).next().unwrap_or(t)
}

fn identifier(t: &str) -> Option<&str> {
    let ok = !t.is_empty() && t.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '$' | '@'));
    ok.then_some(t)
}

/// A receiver or qualifier as a path of identifiers (`self.repo`, `a::b`, `$this->x`,
/// `\App\Util`); `None` when it is an expression (`f().g`, `a[0]`).
pub fn segments(text: &str) -> Option<Vec<&str>> {
    let text = text.trim().trim_start_matches('\\').trim_start_matches("::");
    let mut out = Vec::new();
    for part in text.split("::").flat_map(|p| p.split("->")).flat_map(|p| p.split(['.', '\\'])) {
        // `a?.b` and `a!.b` (null-aware access, a non-null assertion) name the same `a`.
        let part = part.strip_suffix(['?', '!']).unwrap_or(part);
        out.push(identifier(part)?);
    }
    (!out.is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_are_read_through_references_pointers_paths_and_wrappers() {
        for (written, name) in [
            ("&mut Repo", Some("Repo")),
            ("*Repo", Some("Repo")),
            ("*pkg.Repo", Some("Repo")),
            ("Box<dyn Saver>", Some("Saver")),
            ("Map<u8, u8>", Some("Map")),
            ("Optional[Repo]", Some("Repo")),
            ("std::shared_ptr<Repo>", Some("Repo")),
            ("'Repo'", Some("Repo")),
            ("const Repo&", Some("Repo")),
            ("fn(u8) -> u8", None),
        ] {
            assert_eq!(type_name(written), name, "{written}");
        }
    }

    #[test]
    fn receivers_are_paths_of_identifiers_or_nothing() {
        assert_eq!(segments("self.repo"), Some(vec!["self", "repo"]));
        assert_eq!(segments("$this->repo"), Some(vec!["$this", "repo"]));
        assert_eq!(segments("\\App\\Util"), Some(vec!["App", "Util"]));
        assert_eq!(segments("std::mem"), Some(vec!["std", "mem"]));
        assert_eq!(segments("a?.b"), Some(vec!["a", "b"]));
        assert_eq!(segments("r!.save"), Some(vec!["r", "save"]));
        assert_eq!(segments("f().g"), None);
        assert_eq!(segments("items[0]"), None);
    }
}
