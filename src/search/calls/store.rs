//! Every file's facts in memory, and where each name is defined and called: a query looks up
//! its names instead of reading every call site of the tree (millions on a kernel-size one).
//! The name lists are kept up to date as files are replaced, so a changed file costs its own
//! names, never a rebuild.
//!
//! The lists are split into shards by the name's hash, built on every core when a saved cache
//! is read back (a kernel has ten million names to list). Constants (a kernel's millions of
//! `#define X 1`) are never called, so they are listed only when a search by name first needs
//! them.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHasher};

use super::cache::{Cached, Snapshot};
use super::facts::{DefKind, FileFacts};

pub type FileId = u32;

/// A definition or call site: its file and its index in that file's list.
pub type At = (FileId, u32);

type Lists = FxHashMap<Box<str>, Vec<At>>;

/// The names whose hash falls in one shard.
#[derive(Default)]
struct Shard {
    calls: Lists,
    defs: Lists,
    /// `None` until a search by name needs them.
    constants: Option<Lists>,
}

pub struct Store {
    slots: Vec<Option<(String, Cached)>>,
    ids: HashMap<String, FileId>,
    free: Vec<FileId>,
    shards: Vec<Shard>,
    /// Renaming imports, worked out on a query's first need and kept until a file changes.
    aliases: std::cell::RefCell<Option<Arc<Aliases>>>,
}

/// Renaming imports: original name -> the local names it is imported as.
pub type Aliases = HashMap<String, Vec<String>>;

impl Default for Store {
    fn default() -> Self {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
        Self {
            slots: Vec::new(),
            ids: HashMap::new(),
            free: Vec::new(),
            shards: (0..n).map(|_| Shard::default()).collect(),
            aliases: Default::default(),
        }
    }
}

fn shard_of(name: &str, shards: usize) -> usize {
    (BuildHasherDefault::<FxHasher>::default().hash_one(name) as usize >> 7) % shards
}

impl Store {
    /// A store of the saved entries, its lists built on every core.
    pub fn from_entries(map: Vec<(String, Cached)>) -> Self {
        let mut store = Store::default();
        store.slots.reserve(map.len());
        for (rel, cached) in map {
            store.ids.insert(rel.clone(), store.slots.len() as FileId);
            store.slots.push(Some((rel, cached)));
        }
        let count = store.shards.len();
        let slots = &store.slots;
        std::thread::scope(|scope| {
            for (n, shard) in store.shards.iter_mut().enumerate() {
                scope.spawn(move || {
                    for (id, slot) in slots.iter().enumerate() {
                        if let Some((_, c)) = slot {
                            shard.index(id as FileId, &c.facts, true, |name| shard_of(name, count) == n);
                        }
                    }
                });
            }
        });
        store
    }

    pub fn get(&self, rel: &str) -> Option<&Cached> {
        let id = *self.ids.get(rel)?;
        self.slots.get(id as usize)?.as_ref().map(|(_, c)| c)
    }

    pub fn contains(&self, rel: &str) -> bool {
        self.ids.contains_key(rel)
    }

    /// Sets the mtime of an entry whose content did not change.
    pub fn touch(&mut self, rel: &str, mtime_ns: u64) {
        if let Some(id) = self.ids.get(rel) {
            if let Some(Some((_, c))) = self.slots.get_mut(*id as usize) {
                c.mtime_ns = mtime_ns;
            }
        }
    }

    pub fn insert(&mut self, rel: String, cached: Cached) {
        self.remove(&rel);
        let id = self.free.pop().unwrap_or(self.slots.len() as FileId);
        self.index(id, &cached.facts, true);
        self.ids.insert(rel.clone(), id);
        match self.slots.get_mut(id as usize) {
            Some(slot) => *slot = Some((rel, cached)),
            None => self.slots.push(Some((rel, cached))),
        }
    }

    pub fn remove(&mut self, rel: &str) -> bool {
        let Some(id) = self.ids.remove(rel) else { return false };
        if let Some((_, cached)) = self.slots.get_mut(id as usize).and_then(Option::take) {
            self.index(id, &cached.facts, false);
        }
        self.free.push(id);
        true
    }

    fn index(&mut self, id: FileId, f: &FileFacts, add: bool) {
        if !f.imports.is_empty() {
            self.aliases.get_mut().take();
        }
        let count = self.shards.len();
        for (n, shard) in self.shards.iter_mut().enumerate() {
            shard.index(id, f, add, |name| shard_of(name, count) == n);
        }
    }

    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.ids.keys().map(String::as_str)
    }

    /// Every file: its id, path and facts.
    pub fn files(&self) -> impl Iterator<Item = (FileId, &str, &FileFacts)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|(rel, c)| (i as FileId, rel.as_str(), &*c.facts)))
    }

    pub fn file(&self, id: FileId) -> Option<(&str, &FileFacts)> {
        self.slots.get(id as usize)?.as_ref().map(|(rel, c)| (rel.as_str(), &*c.facts))
    }

    fn shard(&self, name: &str) -> &Shard {
        &self.shards[shard_of(name, self.shards.len())]
    }

    pub fn calls_named(&self, name: &str) -> &[At] {
        self.shard(name).calls.get(name).map_or(&[], Vec::as_slice)
    }

    /// The definitions of a name that are no constants.
    pub fn defs_named(&self, name: &str) -> &[At] {
        self.shard(name).defs.get(name).map_or(&[], Vec::as_slice)
    }

    /// Lists the constants, once: a search by name reads them.
    pub fn list_constants(&mut self) {
        if self.shards.iter().all(|s| s.constants.is_some()) {
            return;
        }
        let count = self.shards.len();
        let slots = &self.slots;
        std::thread::scope(|scope| {
            for (n, shard) in self.shards.iter_mut().enumerate() {
                scope.spawn(move || {
                    let mut constants = Lists::default();
                    for (id, slot) in slots.iter().enumerate() {
                        let Some((_, c)) = slot else { continue };
                        let f = &c.facts;
                        for (i, d) in f.definitions.iter().enumerate() {
                            let name = f.str(d.name);
                            if d.kind == DefKind::Constant && shard_of(name, count) == n {
                                push(&mut constants, name, (id as FileId, i as u32));
                            }
                        }
                    }
                    shard.constants = Some(constants);
                });
            }
        });
    }

    /// Every defined name (constants too, once listed), for a search by prefix or by parts.
    pub fn def_names(&self) -> impl Iterator<Item = (&str, &[At])> {
        self.shards
            .iter()
            .flat_map(|s| s.defs.iter().chain(s.constants.iter().flatten()))
            .map(|(n, v)| (&**n, v.as_slice()))
    }

    /// Every renaming import of the workspace (an `impact` asks for thousands of names' aliases).
    pub fn aliases(&self) -> Arc<Aliases> {
        if let Some(a) = self.aliases.borrow().as_ref() {
            return a.clone();
        }
        let mut map: Aliases = HashMap::new();
        for (_, _, f) in self.files() {
            for imp in &f.imports {
                let (original, local) = (f.str(imp.name), f.str(imp.local));
                if !original.is_empty() && original != local {
                    let locals = map.entry(original.to_owned()).or_default();
                    if !locals.iter().any(|l| l == local) {
                        locals.push(local.to_owned());
                    }
                }
            }
        }
        let map = Arc::new(map);
        *self.aliases.borrow_mut() = Some(map.clone());
        map
    }

    pub fn snapshot(&self) -> Snapshot {
        self.slots.iter().flatten().map(|(rel, c)| (rel.clone(), c.clone())).collect()
    }
}

fn push(map: &mut Lists, name: &str, at: At) {
    match map.get_mut(name) {
        Some(list) => list.push(at),
        None => {
            map.insert(name.into(), vec![at]);
        }
    }
}

impl Shard {
    /// Adds a file's names that `mine` says belong here to the lists, or takes them out.
    fn index<'f>(&mut self, id: FileId, f: &'f FileFacts, add: bool, mine: impl Fn(&str) -> bool) {
        let calls = f.calls.iter().enumerate().map(|(i, c)| (0u8, f.str(c.callee), i));
        let defs = f
            .definitions
            .iter()
            .enumerate()
            .map(|(i, d)| (1 + u8::from(d.kind == DefKind::Constant), f.str(d.name), i));
        // A name called fifty times in the file is taken out of its list once.
        let mut removed: rustc_hash::FxHashSet<(u8, &'f str)> = Default::default();
        for (list, name, i) in calls.chain(defs) {
            if !mine(name) {
                continue;
            }
            let map = match list {
                0 => &mut self.calls,
                1 => &mut self.defs,
                _ => match self.constants.as_mut() {
                    Some(c) => c,
                    None => continue,
                },
            };
            if add {
                push(map, name, (id, i as u32));
            } else if removed.insert((list, name)) {
                if let Some(entries) = map.get_mut(name) {
                    entries.retain(|a| a.0 != id);
                    if entries.is_empty() {
                        map.remove(name);
                    }
                }
            }
        }
    }
}
