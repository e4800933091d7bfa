//! Every file's facts in memory, and where each name is defined and called: a query looks up
//! its names instead of reading every call site of the tree (millions on a kernel-size one).
//! The name lists are kept up to date as files are replaced, so a changed file costs its own
//! names, never a rebuild.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use super::cache::{Cached, Snapshot};
use super::facts::FileFacts;

pub type FileId = u32;

/// A definition or call site: its file and its index in that file's list.
pub type At = (FileId, u32);

#[derive(Default)]
pub struct Store {
    slots: Vec<Option<(String, Cached)>>,
    ids: HashMap<String, FileId>,
    free: Vec<FileId>,
    calls: FxHashMap<Box<str>, Vec<At>>,
    defs: FxHashMap<Box<str>, Vec<At>>,
}

impl Store {
    pub fn from_map(map: HashMap<String, Cached>) -> Self {
        let mut store = Store::default();
        store.slots.reserve(map.len());
        for (rel, cached) in map {
            store.insert(rel, cached);
        }
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
        index(&mut self.calls, &mut self.defs, id, &cached.facts, true);
        self.ids.insert(rel.clone(), id);
        match self.slots.get_mut(id as usize) {
            Some(slot) => *slot = Some((rel, cached)),
            None => self.slots.push(Some((rel, cached))),
        }
    }

    pub fn remove(&mut self, rel: &str) -> bool {
        let Some(id) = self.ids.remove(rel) else { return false };
        if let Some((_, cached)) = self.slots.get_mut(id as usize).and_then(Option::take) {
            index(&mut self.calls, &mut self.defs, id, &cached.facts, false);
        }
        self.free.push(id);
        true
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

    pub fn calls_named(&self, name: &str) -> &[At] {
        self.calls.get(name).map_or(&[], Vec::as_slice)
    }

    pub fn defs_named(&self, name: &str) -> &[At] {
        self.defs.get(name).map_or(&[], Vec::as_slice)
    }

    /// Every defined name, for a search by prefix or by parts.
    pub fn def_names(&self) -> impl Iterator<Item = (&str, &[At])> {
        self.defs.iter().map(|(n, v)| (&**n, v.as_slice()))
    }

    pub fn snapshot(&self) -> Snapshot {
        self.slots.iter().flatten().map(|(rel, c)| (rel.clone(), c.clone())).collect()
    }
}

/// Adds a file's names to the lists, or takes them out.
fn index<'f>(
    calls: &mut FxHashMap<Box<str>, Vec<At>>,
    defs: &mut FxHashMap<Box<str>, Vec<At>>,
    id: FileId,
    f: &'f FileFacts,
    add: bool,
) {
    let names = f
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| (true, f.str(c.callee), i))
        .chain(f.definitions.iter().enumerate().map(|(i, d)| (false, f.str(d.name), i)));
    // A name called fifty times in the file is taken out of its list once.
    let mut removed: rustc_hash::FxHashSet<(bool, &'f str)> = Default::default();
    for (is_call, name, i) in names {
        let map = if is_call { &mut *calls } else { &mut *defs };
        if add {
            match map.get_mut(name) {
                Some(list) => list.push((id, i as u32)),
                None => {
                    map.insert(name.into(), vec![(id, i as u32)]);
                }
            }
        } else if removed.insert((is_call, name)) {
            if let Some(list) = map.get_mut(name) {
                list.retain(|a| a.0 != id);
                if list.is_empty() {
                    map.remove(name);
                }
            }
        }
    }
}
