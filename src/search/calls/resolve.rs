//! Which definitions a call site may reach. A call is resolved by its name, narrowed by what
//! the code says: the receiver's type (`self` in a method, a typed variable), a qualifier
//! (`Type::f`, `module.f`, `pkg.F`), an import (`from m import f as g`, `use a::b as c`), the
//! file's own definitions, the class a bare call is made in (Java, C#, C++, Ruby), the
//! package (Go). The same rules hold for every language; the languages differ only in the
//! facts their queries produce and in the few switches of [`Lang`].

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::rc::Rc;

use super::facts::{Call, CallKind, DefKind, FileFacts, NONE};
use super::lang::{self, Lang};
use super::store::{At, FileId, Store};

/// Where a call site may go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// These definitions; `known` when the code determined them (a scope, an import, a typed
    /// receiver, a qualifier), not when they are every definition of the name (a receiver of
    /// unknown type).
    Defs { defs: Rc<[At]>, known: bool },
    /// Nothing in the workspace: a library's function, a builtin, an outside type's method.
    Outside,
    /// A macro: counted as a call, never expanded, so never resolved.
    Macro,
}

/// How sure a listed call site is, as replies say it.
pub fn resolution(reach: &Reach) -> &'static str {
    match reach {
        Reach::Defs { defs, known: true } if defs.len() == 1 => "exact",
        Reach::Defs { .. } => "ambiguous",
        Reach::Outside | Reach::Macro => "unresolved",
    }
}

/// The per-query view of the store: lookups it repeats are remembered for the query's life.
pub struct Resolver<'a> {
    pub store: &'a Store,
    hierarchy: RefCell<Option<Rc<Hierarchy>>>,
    modules: RefCell<ModuleFiles>,
    named: RefCell<HashMap<String, Rc<[At]>>>,
    /// Every definition of a name (declarations and `impl` blocks too), by name.
    all_named: RefCell<HashMap<String, Rc<[At]>>>,
    /// Bare calls' reach by (file, callee, the enclosing type): the same in every call.
    bare: RefCell<rustc_hash::FxHashMap<(FileId, u32, u32), Reach>>,
    /// The workspace, where a Go module's `go.mod` is read; `None`: module paths are matched
    /// by their ends only.
    workspace: Option<&'a Path>,
    /// The Go module a directory belongs to: (module path, the directory of its `go.mod`).
    go_modules: RefCell<HashMap<String, Option<(String, String)>>>,
}

/// The files of a module path, by (importing directory, module, the importer's language family).
type ModuleFiles = HashMap<(String, String, &'static str), Rc<Vec<FileId>>>;

/// Types and their bases, from every file.
#[derive(Default)]
struct Hierarchy {
    bases: HashMap<String, Vec<String>>,
    derived: HashMap<String, Vec<String>>,
}

/// How far inheritance is followed (a cycle in broken code must not loop).
const MAX_DEPTH: usize = 16;

impl<'a> Resolver<'a> {
    pub fn new(store: &'a Store) -> Self {
        Self {
            store,
            hierarchy: RefCell::new(None),
            modules: RefCell::new(HashMap::new()),
            named: RefCell::new(HashMap::new()),
            all_named: RefCell::new(HashMap::new()),
            bare: RefCell::default(),
            workspace: None,
            go_modules: RefCell::default(),
        }
    }

    /// Reads `go.mod` files under `workspace` to resolve Go import paths exactly.
    pub fn in_workspace(mut self, workspace: &'a Path) -> Self {
        self.workspace = Some(workspace);
        self
    }

    /// The Go module the workspace-relative directory `dir` belongs to: the nearest `go.mod`
    /// at or above it, as (module path, its directory).
    fn go_module(&self, dir: &str) -> Option<(String, String)> {
        let workspace = self.workspace?;
        if let Some(hit) = self.go_modules.borrow().get(dir) {
            return hit.clone();
        }
        let found = std::fs::read_to_string(workspace.join(dir).join("go.mod"))
            .ok()
            .and_then(|text| {
                text.lines().find_map(|l| {
                    let rest = l.trim().strip_prefix("module")?;
                    let path = rest.trim().trim_matches('"');
                    (rest.starts_with(char::is_whitespace) && !path.is_empty()).then(|| path.to_owned())
                })
            })
            .map(|module| (module, dir.to_owned()))
            .or_else(|| {
                let parent = dir.rsplit_once('/').map_or("", |(p, _)| p);
                (!dir.is_empty()).then(|| self.go_module(parent)).flatten()
            });
        self.go_modules.borrow_mut().insert(dir.to_owned(), found.clone());
        found
    }

    pub fn facts(&self, id: FileId) -> Option<(&'a str, &'a FileFacts)> {
        self.store.file(id)
    }

    fn lang_of(&self, id: FileId) -> Option<&'static Lang> {
        lang::by_name(self.store.lang(id)?)
    }

    /// The definitions named `name` that a call can reach: no `impl` blocks, and no
    /// declaration whose definition (same name and owner) is known.
    pub fn defs_named(&self, name: &str) -> Rc<[At]> {
        // A query resolves many calls of the same few names (a kernel function's thousands
        // of call sites): each name's list is worked out once.
        if let Some(hit) = self.named.borrow().get(name) {
            return hit.clone();
        }
        let found: Rc<[At]> = self.find_defs_named(name).into();
        self.named.borrow_mut().insert(name.to_owned(), found.clone());
        found
    }

    /// Every definition of a name as the store lists it, read once per query (a type's name
    /// is asked for at every call through a receiver of that type).
    fn all_defs_named(&self, name: &str) -> Rc<[At]> {
        if let Some(hit) = self.all_named.borrow().get(name) {
            return hit.clone();
        }
        let found: Rc<[At]> = self.store.defs_named(name).into();
        self.all_named.borrow_mut().insert(name.to_owned(), found.clone());
        found
    }

    fn find_defs_named(&self, name: &str) -> Vec<At> {
        let all = self.all_defs_named(name);
        let key = |&(id, i): &At| {
            let (_, f) = self.facts(id)?;
            let d = f.def(i)?;
            Some((d.kind, d.decl, f.str(d.owner)))
        };
        let defined: HashSet<&str> =
            all.iter().filter_map(key).filter(|(k, decl, _)| !decl && *k != DefKind::Impl).map(|(_, _, o)| o).collect();
        all.iter()
            .copied()
            .filter(|at| match key(at) {
                Some((DefKind::Impl, _, _)) | None => false,
                Some((_, true, owner)) => !defined.contains(owner),
                Some(_) => true,
            })
            .collect()
    }

    fn kind(&self, (id, i): At) -> Option<DefKind> {
        Some(self.facts(id)?.1.def(i)?.kind)
    }

    fn extends(&self, (id, i): At) -> bool {
        self.facts(id).and_then(|(_, f)| f.def(i)).is_some_and(|d| d.extends)
    }

    fn owner(&self, (id, i): At) -> &'a str {
        self.facts(id).and_then(|(_, f)| Some(f.str(f.def(i)?.owner))).unwrap_or("")
    }

    /// Whether the workspace defines a type by that name.
    pub fn is_type(&self, name: &str) -> bool {
        self.all_defs_named(name).iter().any(|at| self.kind(*at).is_some_and(DefKind::is_type))
    }

    fn hierarchy(&self) -> Rc<Hierarchy> {
        if let Some(h) = self.hierarchy.borrow().as_ref() {
            return h.clone();
        }
        let mut h = Hierarchy::default();
        for (_, _, summary) in self.store.summaries() {
            for (ty, base) in &summary.bases {
                h.derived.entry(base.clone()).or_default().push(ty.clone());
                h.bases.entry(ty.clone()).or_default().push(base.clone());
            }
        }
        let h = Rc::new(h);
        *self.hierarchy.borrow_mut() = Some(h.clone());
        h
    }

    /// The methods among `defs` a call on a `ty` may run: `ty`'s own or, when it has none,
    /// the nearest base's that has one (inherited), and the overrides of the types derived
    /// from it (dispatch may reach them).
    fn owned_by(&self, defs: &[At], ty: &str) -> Vec<At> {
        let h = self.hierarchy();
        let of = |types: &HashSet<String>| -> Vec<At> {
            defs.iter().copied().filter(|at| types.contains(self.owner(*at))).collect()
        };
        let mut seen: HashSet<String> = HashSet::from([ty.to_owned()]);
        let mut level = seen.clone();
        let mut own = of(&level);
        for _ in 0..MAX_DEPTH {
            if !own.is_empty() {
                break;
            }
            level = level
                .iter()
                .flat_map(|t| h.bases.get(t).into_iter().flatten())
                .filter(|t| seen.insert((*t).clone()))
                .cloned()
                .collect();
            if level.is_empty() {
                break;
            }
            own = of(&level);
        }
        let mut derived = HashSet::new();
        let mut frontier = vec![ty.to_owned()];
        for _ in 0..MAX_DEPTH {
            frontier = frontier
                .iter()
                .flat_map(|t| h.derived.get(t).into_iter().flatten())
                .filter(|t| derived.insert((*t).clone()))
                .cloned()
                .collect();
            if frontier.is_empty() {
                break;
            }
        }
        own.extend(of(&derived));
        own
    }

    /// An interface nothing in the workspace says it implements (Go's are implemented
    /// without saying so): a call through it may reach any method of the name.
    fn unknown_implementors(&self, ty: &str) -> bool {
        let interface = self.all_defs_named(ty).iter().any(|at| self.kind(*at) == Some(DefKind::Interface));
        interface && !self.hierarchy().derived.contains_key(ty)
    }

    /// Whether a definition lives in `q`: a type or namespace around it, its file (`db` for
    /// `db.py`), its directory (a Go package) or the package its file declares.
    pub fn lives_in(&self, (id, i): At, q: &str) -> bool {
        let Some((path, f)) = self.facts(id) else { return false };
        let Some(d) = f.def(i) else { return false };
        let last = |s: &'a str| s.rsplit(['.', ':', '\\']).next().unwrap_or(s);
        if f.is(d.owner, q) || f.parents(i).any(|(_, p)| last(f.str(p.name)) == q) || last(f.str(f.module)) == q {
            return true;
        }
        let mut parts = path.rsplit('/');
        let file = parts.next().unwrap_or(path);
        let stem = file.split('.').next().unwrap_or(file);
        // Any directory on the way: a package, a crate (`crates/rand/src/...`, or a vendored
        // `rand-0.8.8/src/...`), a Go package.
        let versioned = |dir: &str| {
            dir.strip_prefix(q).is_some_and(|v| v.starts_with('-') && v[1..].starts_with(|c: char| c.is_ascii_digit()))
        };
        let module_named = self.lang_of(id).is_some_and(|l| l.rules.capitalized_file_modules) && capitalized(stem) == q;
        stem == q || module_named || parts.any(|dir| dir == q || versioned(dir))
    }

    /// The files a module path names, seen from the file `from`: relative paths (`./db`,
    /// `.util`, `super::x`), module paths matched against the end of file paths (`a.b` ->
    /// `…/a/b.py`, `…/a/b/__init__.py`, `…/a/b.rs`, `…/a/b/mod.rs`), a Go import path's
    /// directory, or the package or namespace files declare.
    pub fn module_files(&self, from: FileId, module: &str) -> Rc<Vec<FileId>> {
        let Some((from_path, _)) = self.facts(from) else { return Rc::default() };
        if module.is_empty() {
            // `export { a as b }`: a name of the file itself.
            return Rc::new(vec![from]);
        }
        let dir = from_path.rsplit_once('/').map_or("", |(d, _)| d);
        let from_family = lang::family(self.store.lang(from).unwrap_or(""));
        let key = (dir.to_owned(), module.to_owned(), from_family);
        if let Some(hit) = self.modules.borrow().get(&key) {
            return hit.clone();
        }
        let mut found = self.find_module(dir, module, from_family);
        found.retain(|id| lang::family(self.store.lang(*id).unwrap_or("")) == from_family);
        let found = Rc::new(found);
        self.modules.borrow_mut().insert(key, found.clone());
        found
    }

    fn find_module(&self, dir: &str, module: &str, from_family: &str) -> Vec<FileId> {
        let module = module.trim().trim_matches(|c| c == '"' || c == '\'' || c == '<' || c == '>');
        // A Go import path inside the importer's own module names one directory exactly:
        // the module's directory joined with what follows the module path.
        if from_family == "go" {
            if let Some((path, mod_dir)) = self.go_module(dir) {
                let rest = if module == path { Some("") } else { module.strip_prefix(&format!("{path}/")) };
                if let Some(rest) = rest {
                    let target = [mod_dir.as_str(), rest]
                        .iter()
                        .filter(|s| !s.is_empty())
                        .copied()
                        .collect::<Vec<_>>()
                        .join("/");
                    return self
                        .store
                        .summaries()
                        .filter(|(_, p, f)| f.lang == "go" && p.rsplit_once('/').map_or("", |(d, _)| d) == target)
                        .map(|(id, _, _)| id)
                        .collect();
                }
            }
        }
        // A path relative to the importing file: `./x`, `../x` (JavaScript), `.x`, `..x` (Python).
        let relative = if module.starts_with("./") || module.starts_with("../") {
            Some(normalize(&format!("{dir}/{module}")))
        } else if let Some(rest) = module.strip_prefix('.') {
            let ups = rest.len() - rest.trim_start_matches('.').len();
            let mut base: Vec<&str> = dir.split('/').filter(|s| !s.is_empty()).collect();
            base.truncate(base.len().saturating_sub(ups));
            let rest = rest.trim_start_matches('.').replace('.', "/");
            Some([base.join("/"), rest].iter().filter(|s| !s.is_empty()).cloned().collect::<Vec<_>>().join("/"))
        } else {
            None
        };
        if let Some(base) = relative {
            return self.store.summaries().filter(|(_, p, _)| is_module_file(p, &base)).map(|(id, _, _)| id).collect();
        }
        // A file named by its path from the importing file's directory, extension and all
        // (Zig's `@import("store.zig")`, Dart's `import 'src/store.dart'`), before the dotted
        // reading would take `zig` for a name; Dart's `package:shop/src/store.dart` is the
        // file `src/store.dart` in a package's `lib` directory.
        let beside = normalize(&format!("{dir}/{module}"));
        let in_package =
            module.strip_prefix("package:").and_then(|m| m.split_once('/')).map(|(_, path)| format!("lib/{path}"));
        let found: Vec<FileId> = self
            .store
            .summaries()
            .filter(|(_, p, _)| *p == beside || in_package.as_deref().is_some_and(|lib| ends_with_path(p, lib)))
            .map(|(id, _, _)| id)
            .collect();
        if !found.is_empty() {
            return found;
        }
        let segments: Vec<&str> = module
            .split(['.', '/', '\\', ':'])
            .filter(|s| !s.is_empty() && !matches!(*s, "crate" | "self" | "super"))
            .collect();
        if segments.is_empty() {
            return Vec::new();
        }
        // A Go import path starts with the module's own path (a host, an owner), which the
        // workspace's relative paths do not have: its last elements name the directory.
        let shortest = if module.contains('/') { 1 } else { segments.len() };
        // `Store` names `store.ml` where a file is the module of its capitalized name.
        let capitalized_files = lang::by_name(from_family).is_some_and(|l| l.rules.capitalized_file_modules);
        for take in (shortest..=segments.len()).rev() {
            let tail = segments[segments.len() - take..].join("/");
            let dotted = segments[segments.len() - take..].join(".");
            let go = module.contains('/');
            let found: Vec<FileId> = self
                .store
                .summaries()
                .filter(|(_, p, f)| {
                    let (file_dir, file) = p.rsplit_once('/').unwrap_or(("", p));
                    let stem = file.split('.').next().unwrap_or(file);
                    ends_with_path(p.rsplit_once('.').map_or(*p, |(s, _)| s), &tail)
                        || capitalized_files && ends_with_path(&format!("{file_dir}/{}", capitalized(stem)), &tail)
                        || (matches!(stem, "__init__" | "mod" | "index" | "lib") || go)
                            && ends_with_path(file_dir, &tail)
                        || (!f.module.is_empty() && f.module.replace(['\\', ':'], ".").replace("..", ".") == dotted)
                })
                .map(|(id, _, _)| id)
                .collect();
            if !found.is_empty() {
                return found;
            }
        }
        Vec::new()
    }

    /// The definitions a module's files give a name: defined there, or imported there and
    /// re-exported (`export { a as b } from './x'`, `from .x import f` in `__init__.py`).
    pub fn defs_in_module(&self, files: &[FileId], name: &str, depth: usize) -> Vec<At> {
        let mut out: Vec<At> = self.defs_named(name).iter().copied().filter(|(id, _)| files.contains(id)).collect();
        if out.is_empty() && depth > 0 {
            for &id in files {
                let Some((_, f)) = self.facts(id) else { continue };
                for imp in f.imports.iter().filter(|i| f.is(i.local, name)) {
                    let original = if imp.name.is_empty() { name } else { f.str(imp.name) };
                    let files = self.module_files(id, f.str(imp.module));
                    out.extend(self.defs_in_module(&files, original, depth - 1));
                }
            }
        }
        out
    }

    /// Where `call`, a call site of file `id`, may go; `owner` is [`owner_key`] of its
    /// enclosing definition.
    pub fn reach_of(&self, id: FileId, f: &FileFacts, call: &Call, owner: u32) -> Reach {
        if !matches!(call.kind, CallKind::Call | CallKind::New)
            || !call.recv_type.is_empty()
            || !call.qualifier.is_empty()
        {
            return self.find_reach(id, f, call);
        }
        let key = (id, call.callee.start, owner);
        if let Some(hit) = self.bare.borrow().get(&key) {
            return hit.clone();
        }
        let found = self.find_reach(id, f, call);
        self.bare.borrow_mut().insert(key, found.clone());
        found
    }

    fn find_reach(&self, id: FileId, f: &FileFacts, call: &Call) -> Reach {
        let Some((path, _)) = self.facts(id) else { return Reach::Outside };
        if matches!(call.kind, CallKind::Macro | CallKind::InMacro) {
            return Reach::Macro;
        }
        let callee = f.str(call.callee);
        let lang = self.lang_of(id);
        let qualifier = f.str(call.qualifier);
        let dispatches = lang.is_some_and(|l| l.rules.dispatch);
        // A call dispatched on an argument of a type the file says reaches that type's method
        // (or its base's, or its derived types'); one of another type is resolved as a bare
        // call, among every method of the name.
        if dispatches && !call.recv_type.is_empty() && qualifier.is_empty() {
            // The type need not be the workspace's: a method for a library's type
            // (`process(df::DataFrame)`) is that type's.
            let owned = self.owned_by(&self.defs_named(callee), f.str(call.recv_type));
            if !owned.is_empty() {
                return Reach::Defs { defs: constructors_as_types(self, owned, callee).into(), known: true };
            }
        }
        let bare = qualifier.is_empty() && (call.recv_type.is_empty() || dispatches);
        if bare {
            if let Some(imp) = f.imports.iter().find(|i| f.is(i.local, callee)) {
                let original = if imp.name.is_empty() { callee } else { f.str(imp.name) };
                let files = self.module_files(id, f.str(imp.module));
                if files.is_empty() {
                    return Reach::Outside;
                }
                let defs = self.defs_in_module(&files, original, 4);
                if !defs.is_empty() {
                    return Reach::Defs { defs: constructors_as_types(self, defs, original).into(), known: true };
                }
                return self.by_name(original, false);
            }
        }
        let all: Vec<At> = self.defs_named(callee).to_vec();
        if all.is_empty() {
            return Reach::Outside;
        }
        if all.iter().all(|at| self.kind(*at) == Some(DefKind::Macro)) {
            return Reach::Macro;
        }
        let known = |defs: Vec<At>| Reach::Defs { defs: constructors_as_types(self, defs, callee).into(), known: true };
        let guess =
            |defs: Vec<At>| Reach::Defs { defs: constructors_as_types(self, defs, callee).into(), known: false };
        // A receiver whose type the file says.
        if !call.recv_type.is_empty() && !bare {
            let ty = f.str(call.recv_type);
            if self.unknown_implementors(ty) {
                return guess(all);
            }
            if self.is_type(ty) {
                let owned = self.owned_by(&all, ty);
                return if owned.is_empty() { guess(all) } else { known(owned) };
            }
            if !self.all_defs_named(ty).is_empty() {
                return guess(all);
            }
            return Reach::Outside;
        }
        if !qualifier.is_empty() {
            return self.through_qualifier(id, f, call, qualifier, all);
        }
        if call.kind == CallKind::Method {
            // `f().g()`, `a[0].g()`: a receiver that is no plain path, of unknown type.
            return guess(all);
        }
        // A bare call: this file's function, the class's own method, the package's, the one
        // function of that name.
        // Where methods are called as functions (dispatch), each of them is one. When every
        // one is for a type of its first argument (none takes any), a call on an argument of
        // another type reaches none of them; when one is added to another module's function,
        // a call on an argument of unknown type may reach that function's own methods
        // (`length(x)` may be Base's).
        let free: Vec<At> = all.iter().copied().filter(|at| dispatches || self.owner(*at).is_empty()).collect();
        if dispatches {
            if !call.recv_type.is_empty() && free.iter().all(|at| !self.owner(*at).is_empty()) {
                return Reach::Outside;
            }
            if call.recv_type.is_empty() && free.iter().any(|at| self.extends(*at)) {
                return guess(free);
            }
        }
        let mut here: Vec<At> = free.iter().copied().filter(|(fid, _)| *fid == id).collect();
        if here.len() > 1 {
            // Functions of that name in two modules or namespaces of the file (Elixir's
            // `defmodule`s, C++ namespaces): a bare call reaches its own module's.
            let own = enclosing_module(f, call.enclosing);
            let mine: Vec<At> = here
                .iter()
                .copied()
                .filter(|(_, i)| f.def(*i).map(|d| enclosing_module(f, d.parent)) == Some(own))
                .collect();
            if !mine.is_empty() {
                here = mine;
            }
        }
        if !here.is_empty() {
            return known(here);
        }
        if lang.is_some_and(|l| l.rules.implicit_self) {
            if let Some(owner) = enclosing_owner(f, call.enclosing) {
                let owned = self.owned_by(&all, owner);
                if !owned.is_empty() {
                    return known(owned);
                }
            }
        }
        if lang.is_some_and(|l| l.rules.package_is_directory) {
            let dir = path.rsplit_once('/').map_or("", |(d, _)| d);
            let package: Vec<At> = free
                .iter()
                .copied()
                .filter(|(fid, _)| {
                    self.store.path(*fid).is_some_and(|p| p.rsplit_once('/').map_or("", |(d, _)| d) == dir)
                })
                .collect();
            return if package.is_empty() { Reach::Outside } else { known(package) };
        }
        match free.len() {
            0 => Reach::Outside,
            1 => known(free),
            _ => guess(free),
        }
    }

    fn through_qualifier(&self, id: FileId, f: &FileFacts, call: &Call, qualifier: &str, all: Vec<At>) -> Reach {
        let callee = f.str(call.callee);
        let known = |defs: Vec<At>| Reach::Defs { defs: constructors_as_types(self, defs, callee).into(), known: true };
        let segments: Vec<&str> = qualifier.split('.').collect();
        let first = segments[0];
        let mut q: String = segments.last().copied().unwrap_or(first).to_owned();
        if let Some(imp) = f.imports.iter().find(|i| f.is(i.local, first)) {
            if imp.name.is_empty() {
                // `import a.b as m; m.f()`: the module, and what follows it in the path.
                let module = f.str(imp.module);
                let full = if f.is(imp.local, module.split('.').next().unwrap_or(module)) && !module.contains('/') {
                    qualifier.to_owned()
                } else {
                    std::iter::once(module).chain(segments[1..].iter().copied()).collect::<Vec<_>>().join(".")
                };
                let files = self.module_files(id, &full);
                if !files.is_empty() {
                    let defs = self.defs_in_module(&files, callee, 4);
                    return if defs.is_empty() { Reach::Outside } else { known(defs) };
                }
                // No file by that path: a namespace (`namespace u = shop::util;`), named by
                // its last part below.
                q = full.rsplit(['.', ':', '/', '\\']).next().unwrap_or(&q).to_owned();
            } else if segments.len() == 1 {
                // `from m import Repo; Repo.load()`, `use a::Repo as R; R::new()`.
                q = f.str(imp.name).to_owned();
            }
        }
        let q = q.as_str();
        if self.is_type(q) {
            let owned = self.owned_by(&all, q);
            return if owned.is_empty() { Reach::Outside } else { known(owned) };
        }
        let inside: Vec<At> = all.iter().copied().filter(|at| self.lives_in(*at, q)).collect();
        if !inside.is_empty() {
            return known(inside);
        }
        // `Type::f` or `ns::f` outside the workspace, `Math.max`: a path, or a capitalized
        // name, that is no workspace type. A lowercase receiver is a variable of unknown type.
        let looks_static = call.kind == CallKind::Call || q.starts_with(|c: char| c.is_uppercase());
        if looks_static {
            Reach::Outside
        } else {
            Reach::Defs { defs: constructors_as_types(self, all, callee).into(), known: false }
        }
    }

    /// Every definition of a name, as a guess.
    fn by_name(&self, name: &str, known: bool) -> Reach {
        let all = self.defs_named(name);
        if all.is_empty() {
            Reach::Outside
        } else {
            Reach::Defs { defs: constructors_as_types(self, all.to_vec(), name).into(), known }
        }
    }

    /// The definitions a symbol names: `name`, `Type.name`, `module.name`, `ns::name`...
    pub fn targets(&self, qualifier: &[&str], name: &str) -> Vec<At> {
        let all = self.defs_named(name);
        match qualifier.last() {
            None => all.to_vec(),
            Some(q) => all.iter().copied().filter(|at| self.lives_in(*at, q)).collect(),
        }
    }

    /// The names a definition is called by: its own and its import/export aliases, followed
    /// through re-exports (`export { a as b }`, `from m import a as b`, `use m::a as b`).
    pub fn names_of(&self, name: &str) -> Vec<String> {
        let aliases = self.store.aliases();
        let mut names = vec![name.to_owned()];
        let mut i = 0;
        while i < names.len() && i < 64 {
            for local in aliases.get(names[i].as_str()).into_iter().flatten() {
                if !names.iter().any(|n| n == local) {
                    names.push(local.clone());
                }
            }
            i += 1;
        }
        names
    }
}

/// A constructor call reaches the class: its constructors (methods named after it, in it)
/// are the class's own, so a call of `Repo(...)` is one site of `Repo`, not two.
fn constructors_as_types(r: &Resolver, defs: Vec<At>, name: &str) -> Vec<At> {
    if !defs.iter().any(|at| r.kind(*at).is_some_and(DefKind::is_type)) {
        return defs;
    }
    defs.into_iter().filter(|at| !(r.kind(*at) == Some(DefKind::Method) && r.owner(*at) == name)).collect()
}

/// The type whose method (or body) a call is in.
/// Names are interned per file: the offsets of a bare call's callee and of its enclosing
/// type's name (this) say which bare call it is.
pub fn owner_key(f: &FileFacts, enclosing: u32) -> u32 {
    enclosing_owner(f, enclosing)
        .map_or(u32::MAX, |o| (o.as_ptr() as usize).wrapping_sub(f.strings.as_ptr() as usize) as u32)
}

/// The innermost module or namespace definition around or at `at`; `NONE` at the top level.
fn enclosing_module(f: &FileFacts, mut at: u32) -> u32 {
    while let Some(d) = f.def(at) {
        if d.kind == DefKind::Module {
            return at;
        }
        at = d.parent;
    }
    NONE
}

fn enclosing_owner(f: &FileFacts, mut at: u32) -> Option<&str> {
    while let Some(d) = f.def(at) {
        if d.kind.is_type() {
            return Some(f.str(d.name));
        }
        if !d.owner.is_empty() {
            return Some(f.str(d.owner));
        }
        at = d.parent;
    }
    let _ = NONE;
    None
}

/// `store` -> `Store`.
fn capitalized(name: &str) -> String {
    let mut chars = name.chars();
    chars.next().map_or_else(String::new, |first| first.to_uppercase().chain(chars).collect())
}

/// `a/./b/../c` -> `a/c`.
fn normalize(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            p => out.push(p),
        }
    }
    out.join("/")
}

/// Whether a file is the module at `base` (a path without extension): `base.ext`, or the
/// package's own file in the directory `base` (`__init__.py`, `mod.rs`, `index.ts`).
fn is_module_file(path: &str, base: &str) -> bool {
    let Some(rest) = path.strip_prefix(base) else { return false };
    if rest.is_empty() {
        // Named with its extension: `./store.js`.
        return true;
    }
    match rest.strip_prefix('/') {
        Some(file) => {
            let stem = file.split('.').next().unwrap_or(file);
            !file.contains('/') && matches!(stem, "__init__" | "mod" | "index" | "lib")
        }
        None => {
            rest.starts_with('.') && !rest[1..].contains('/') && (rest.matches('.').count() == 1 || rest == ".d.ts")
        }
    }
}

/// Whether `path` ends with the path `tail`, on a `/` boundary.
fn ends_with_path(path: &str, tail: &str) -> bool {
    if tail.is_empty() {
        return true;
    }
    path == tail || path.strip_suffix(tail).is_some_and(|head| head.ends_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_files_are_matched_by_their_path() {
        assert!(is_module_file("src/db.ts", "src/db"));
        assert!(is_module_file("src/db.js", "src/db.js"));
        assert!(is_module_file("src/db/index.ts", "src/db"));
        assert!(is_module_file("pkg/util/__init__.py", "pkg/util"));
        assert!(!is_module_file("src/dbx.ts", "src/db"));
        assert!(!is_module_file("src/db/x/index.ts", "src/db"));
        assert!(ends_with_path("src/acme/util", "acme/util"));
        assert!(!ends_with_path("src/xacme/util", "acme/util"));
        assert_eq!(normalize("src/a/../b/./c"), "src/b/c");
        assert_eq!(capitalized("store"), "Store");
        assert_eq!(capitalized(""), "");
    }
}
