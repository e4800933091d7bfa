//! Every file's facts, and where each name is defined and called: a query looks up its names
//! instead of reading every call site of the tree (millions on a kernel-size one).
//!
//! After a restart the facts and the name lists stay in the saved cache (`cache.rs`) and are
//! read as queries need them: a first `callers` reads its name's lists and the facts of the
//! files that call it, not ten million names. Files parsed since are listed in memory, in
//! shards by the name's hash, kept up to date as files are replaced, so a changed file costs
//! its own names, never a rebuild. A search by name reads every name: it reads the rest of the
//! cache first, on every core. Constants (a kernel's millions of `#define X 1`) are never
//! called, so they are listed only when a search by name first needs them.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rustc_hash::{FxHashMap, FxHasher};

use super::entry::{Blob, Cached, Entry, Stamp, Summary};
pub use super::facts::{At, FileId};
use super::facts::{DefKind, FileFacts};
use super::names::Named;

/// The saved cache as the store reads it (`cache.rs`'s `Saved`): a file's facts and a name's
/// lists, each `None` when its piece of the file is damaged. The store knows no more of the
/// cache than this.
pub trait SavedFacts: Send + Sync {
    fn facts(&self, blob: Blob) -> Option<FileFacts>;
    /// The facts' bytes as saved (copied into the next cache file as they are).
    fn raw(&self, blob: Blob) -> Option<Vec<u8>>;
    fn named(&self, name: &str) -> Option<Named>;
}

/// A file's facts as handed to the saving thread: decoded, or still in an earlier cache file
/// (copied as they are).
pub enum SnapFacts {
    Decoded(Arc<FileFacts>),
    Saved(Arc<dyn SavedFacts>, Blob),
}

pub struct SnapEntry {
    pub path: String,
    pub stamp: Stamp,
    pub summary: Arc<Summary>,
    pub facts: SnapFacts,
}

type Lists = FxHashMap<Box<str>, Vec<At>>;

/// The names whose hash falls in one shard.
#[derive(Default)]
struct Shard {
    calls: Lists,
    defs: Lists,
    /// `None` until a search by name needs them.
    constants: Option<Lists>,
}

/// A file's facts: parsed by this gm, or still in the saved cache, read on first use.
enum Facts {
    Ready(Arc<FileFacts>),
    Saved { blob: Blob, read: OnceLock<Arc<FileFacts>> },
}

struct Slot {
    rel: String,
    stamp: Stamp,
    summary: Arc<Summary>,
    facts: Facts,
}

/// Every file's facts, and where each name is called and defined: the saved cache's name
/// table for the files still as saved, and lists in memory for the files parsed since (or for
/// all of them once a search by name has read everything).
pub struct Store {
    slots: Vec<Option<Slot>>,
    ids: FxHashMap<String, FileId>,
    free: Vec<FileId>,
    shards: Vec<Shard>,
    /// The cache the saved slots are read from.
    saved: Option<Arc<dyn SavedFacts>>,
    /// A piece of the saved cache did not match its checksum: the answer just computed may be
    /// wrong, and the index starts over (`take_damaged`).
    damaged: AtomicBool,
    /// Renaming imports, worked out on a query's first need and kept until a file changes.
    aliases: Mutex<Option<Arc<Aliases>>>,
    /// Files of a language gm parses, counted as they come and go (every reply gives the
    /// count; counting 60,000 summaries took a millisecond of each warm `callers`).
    sources: usize,
    /// Changes whenever a file's facts come or go, unique across stores (a store started
    /// over never repeats an old one's): what is worked out from every file (the map's
    /// graph) is kept until it changes.
    generation: u64,
}

/// The next [`Store::generation`].
fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn is_source(summary: &Summary) -> bool {
    super::lang::by_name(&summary.lang).is_some()
}

/// Renaming imports: original name -> the local names it is imported as.
pub type Aliases = HashMap<String, Vec<String>>;

impl Default for Store {
    fn default() -> Self {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 8);
        Self {
            slots: Vec::new(),
            ids: FxHashMap::default(),
            free: Vec::new(),
            shards: (0..n).map(|_| Shard::default()).collect(),
            saved: None,
            damaged: AtomicBool::new(false),
            aliases: Default::default(),
            sources: 0,
            generation: next_generation(),
        }
    }
}

fn shard_of(name: &str, shards: usize) -> usize {
    (BuildHasherDefault::<FxHasher>::default().hash_one(name) as usize >> 7) % shards
}

static EMPTY: OnceLock<Arc<FileFacts>> = OnceLock::new();

impl Store {
    /// A store over a saved cache: its entries are in memory, its facts and name lists are
    /// read as queries need them.
    pub fn open(saved: Arc<dyn SavedFacts>, entries: Vec<Entry>) -> Self {
        let mut store = Store { saved: Some(saved), ..Store::default() };
        store.slots.reserve(entries.len());
        for e in entries {
            store.sources += usize::from(is_source(&e.summary));
            store.ids.insert(e.path.clone(), store.slots.len() as FileId);
            store.slots.push(Some(Slot {
                rel: e.path,
                stamp: e.stamp,
                summary: Arc::new(e.summary),
                facts: Facts::Saved { blob: e.facts, read: OnceLock::new() },
            }));
        }
        store
    }

    /// Whether a piece of the saved cache was found damaged since the last call.
    pub fn take_damaged(&self) -> bool {
        self.damaged.swap(false, Ordering::Relaxed)
    }

    fn slot(&self, id: FileId) -> Option<&Slot> {
        self.slots.get(id as usize)?.as_ref()
    }

    fn facts_of<'s>(&'s self, slot: &'s Slot) -> &'s FileFacts {
        match &slot.facts {
            Facts::Ready(f) => f,
            Facts::Saved { blob, read } => read.get_or_init(|| match self.saved.as_ref().map(|s| s.facts(*blob)) {
                Some(Some(f)) => Arc::new(f),
                _ => {
                    self.damaged.store(true, Ordering::Relaxed);
                    EMPTY.get_or_init(Default::default).clone()
                }
            }),
        }
    }

    /// Whether some facts are still in the saved cache (worth a `prefetch`).
    pub fn reads_saved(&self) -> bool {
        self.saved.is_some()
    }

    /// Reads the saved facts of `ids` on every core (a query about to look at them all).
    pub fn prefetch(&self, ids: &[FileId]) {
        let unread: Vec<&Slot> = ids
            .iter()
            .filter_map(|id| self.slot(*id))
            .filter(|s| matches!(&s.facts, Facts::Saved { read, .. } if read.get().is_none()))
            .collect();
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        if unread.len() < 64 || threads == 1 {
            return;
        }
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| loop {
                    let from = next.fetch_add(32, Ordering::Relaxed);
                    let Some(part) = unread.get(from..(from + 32).min(unread.len())) else { break };
                    if part.is_empty() {
                        break;
                    }
                    for slot in part {
                        self.facts_of(slot);
                    }
                });
            }
        });
    }

    pub fn get(&self, rel: &str) -> Option<&Stamp> {
        self.slot(*self.ids.get(rel)?).map(|s| &s.stamp)
    }

    /// A file's facts and what they summarize.
    pub fn facts(&self, rel: &str) -> Option<(&FileFacts, &Summary)> {
        let slot = self.slot(*self.ids.get(rel)?)?;
        Some((self.facts_of(slot), &slot.summary))
    }

    pub fn contains(&self, rel: &str) -> bool {
        self.ids.contains_key(rel)
    }

    /// Sets the mtime and inode of an entry whose content did not change.
    pub fn touch(&mut self, rel: &str, mtime_ns: u64, ino: u64) {
        if let Some(id) = self.ids.get(rel) {
            if let Some(Some(slot)) = self.slots.get_mut(*id as usize) {
                slot.stamp.mtime_ns = mtime_ns;
                slot.stamp.ino = ino;
            }
        }
    }

    pub fn insert(&mut self, rel: String, cached: Cached) {
        self.remove(&rel);
        self.generation = next_generation();
        let id = self.free.pop().unwrap_or(self.slots.len() as FileId);
        let summary = Arc::new(Summary::of(&cached.facts));
        self.sources += usize::from(is_source(&summary));
        self.index(id, &cached.facts, &summary, true);
        self.ids.insert(rel.clone(), id);
        let slot = Slot { rel, stamp: cached.stamp, summary, facts: Facts::Ready(cached.facts) };
        match self.slots.get_mut(id as usize) {
            Some(s) => *s = Some(slot),
            None => self.slots.push(Some(slot)),
        }
    }

    pub fn remove(&mut self, rel: &str) -> bool {
        let Some(id) = self.ids.remove(rel) else { return false };
        self.generation = next_generation();
        if let Some(slot) = self.slots.get_mut(id as usize).and_then(Option::take) {
            self.sources -= usize::from(is_source(&slot.summary));
            match &slot.facts {
                Facts::Ready(f) => self.index(id, f, &slot.summary, false),
                // Its names are in the saved table, which lists only slots still as saved.
                Facts::Saved { .. } => self.forget_aliases(&slot.summary),
            }
        }
        self.free.push(id);
        true
    }

    fn forget_aliases(&mut self, summary: &Summary) {
        if !summary.renames.is_empty() {
            *self.aliases.get_mut().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }

    fn index(&mut self, id: FileId, f: &FileFacts, summary: &Summary, add: bool) {
        self.forget_aliases(summary);
        let count = self.shards.len();
        for (n, shard) in self.shards.iter_mut().enumerate() {
            shard.index(id, f, add, |name| shard_of(name, count) == n);
        }
    }

    /// What [`Store::generation`] the facts are at.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How many files are of a language gm parses.
    pub fn sources(&self) -> usize {
        self.sources
    }

    pub fn paths(&self) -> impl Iterator<Item = &str> {
        self.ids.keys().map(String::as_str)
    }

    /// Every file: its id, path and summary (no facts are read).
    pub fn summaries(&self) -> impl Iterator<Item = (FileId, &str, &Summary)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.as_ref().map(|s| (i as FileId, s.rel.as_str(), &*s.summary)))
    }

    pub fn file(&self, id: FileId) -> Option<(&str, &FileFacts)> {
        let slot = self.slot(id)?;
        Some((slot.rel.as_str(), self.facts_of(slot)))
    }

    pub fn lang(&self, id: FileId) -> Option<&str> {
        self.slot(id).map(|s| s.summary.lang.as_str())
    }

    /// The path of a file, without reading its facts.
    pub fn path(&self, id: FileId) -> Option<&str> {
        self.slot(id).map(|s| s.rel.as_str())
    }

    fn shard(&self, name: &str) -> &Shard {
        &self.shards[shard_of(name, self.shards.len())]
    }

    /// Whether `id`'s names are the saved table's.
    fn as_saved(&self, id: FileId) -> bool {
        self.slot(id).is_some_and(|s| matches!(s.facts, Facts::Saved { .. }))
    }

    /// The saved table's lists of a name, for the files still as saved.
    fn saved_named(&self, name: &str, calls: bool) -> Vec<At> {
        let Some(saved) = &self.saved else { return Vec::new() };
        match saved.named(name) {
            Some(named) => {
                let mut list = if calls { named.calls } else { named.defs };
                list.retain(|(id, _)| self.as_saved(*id));
                list
            }
            None => {
                self.damaged.store(true, Ordering::Relaxed);
                Vec::new()
            }
        }
    }

    /// The call sites of a name, in file order (files parsed since the cache was saved last).
    pub fn calls_named(&self, name: &str) -> Vec<At> {
        let mut list = self.saved_named(name, true);
        list.extend_from_slice(self.shard(name).calls.get(name).map_or(&[], Vec::as_slice));
        list
    }

    /// The definitions of a name that are no constants.
    pub fn defs_named(&self, name: &str) -> Vec<At> {
        let mut list = self.saved_named(name, false);
        list.extend_from_slice(self.shard(name).defs.get(name).map_or(&[], Vec::as_slice));
        list
    }

    /// Reads every saved file's facts and lists their names in memory, and the constants,
    /// once: a search by name reads every defined name.
    pub fn list_constants(&mut self) {
        if self.saved.is_some() {
            self.read_everything();
        }
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
                        let Some(Slot { facts: Facts::Ready(f), .. }) = slot else { continue };
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

    /// Turns every saved slot into a read one and lists all names in memory, on every core;
    /// the saved cache is no longer read.
    fn read_everything(&mut self) {
        let ids: Vec<FileId> = (0..self.slots.len() as FileId).collect();
        self.prefetch(&ids);
        // The few `prefetch` leaves to this thread.
        for id in &ids {
            if let Some(slot) = self.slot(*id) {
                self.facts_of(slot);
            }
        }
        let mut saved_ids = Vec::new();
        for (id, slot) in self.slots.iter_mut().enumerate() {
            let Some(slot) = slot else { continue };
            if let Facts::Saved { read, .. } = &mut slot.facts {
                let f = read.take().unwrap_or_else(|| EMPTY.get_or_init(Default::default).clone());
                slot.facts = Facts::Ready(f);
                saved_ids.push(id);
            }
        }
        self.saved = None;
        let count = self.shards.len();
        let slots = &self.slots;
        let saved_ids = &saved_ids;
        std::thread::scope(|scope| {
            for (n, shard) in self.shards.iter_mut().enumerate() {
                scope.spawn(move || {
                    for &id in saved_ids {
                        if let Some(Slot { facts: Facts::Ready(f), .. }) = &slots[id] {
                            shard.index(id as FileId, f, true, |name| shard_of(name, count) == n);
                        }
                    }
                });
            }
        });
    }

    /// Every defined name (constants too, once listed), for a search by prefix or by parts: one
    /// list per shard, each name in one of them (a kernel's millions are read on every core).
    pub fn def_names(&self) -> Vec<impl Iterator<Item = (&str, &[At])> + Send> {
        self.shards
            .iter()
            .map(|s| s.defs.iter().chain(s.constants.iter().flatten()).map(|(n, v)| (&**n, v.as_slice())))
            .collect()
    }

    /// Every renaming import of the workspace (an `impact` asks for thousands of names' aliases).
    pub fn aliases(&self) -> Arc<Aliases> {
        let mut cached = self.aliases.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(a) = cached.as_ref() {
            return a.clone();
        }
        let mut map: Aliases = HashMap::new();
        for (_, _, summary) in self.summaries() {
            for (original, local) in &summary.renames {
                let locals = map.entry(original.clone()).or_default();
                if !locals.iter().any(|l| l == local) {
                    locals.push(local.clone());
                }
            }
        }
        let map = Arc::new(map);
        *cached = Some(map.clone());
        map
    }

    pub fn snapshot(&self) -> Vec<SnapEntry> {
        self.slots
            .iter()
            .flatten()
            .map(|s| SnapEntry {
                path: s.rel.clone(),
                stamp: s.stamp,
                summary: s.summary.clone(),
                // Facts still as saved are copied from the saved cache, checked again there,
                // never from what a read of a damaged piece left in memory.
                facts: match (&s.facts, &self.saved) {
                    (Facts::Ready(f), _) => SnapFacts::Decoded(f.clone()),
                    (Facts::Saved { blob, .. }, Some(saved)) => SnapFacts::Saved(saved.clone(), *blob),
                    (Facts::Saved { read, .. }, None) => SnapFacts::Decoded(read.get().cloned().unwrap_or_default()),
                },
            })
            .collect()
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
