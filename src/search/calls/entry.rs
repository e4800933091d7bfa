//! What the call index keeps of each file besides its facts — what the file was when read
//! ([`Stamp`]), what the resolver asks of every file ([`Summary`]), where its facts lie in the
//! saved cache ([`Blob`]) — shared by the store (`store.rs`), which holds them, and the cache
//! (`cache.rs`), which writes and reads them.

use std::sync::Arc;

use super::facts::FileFacts;

/// SHA-256 of a file's bytes.
pub type Hash = [u8; 32];

/// What a file was when its facts were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bitcode::Encode, bitcode::Decode)]
pub struct Stamp {
    pub size: u64,
    pub mtime_ns: u64,
    pub hash: Hash,
    /// 0 where the OS has none: then size and mtime alone say whether the file changed.
    pub ino: u64,
}

impl Stamp {
    /// Whether a file stat'ed as `seen` is still the one these facts were read from: a file
    /// replaced by another of the same size and mtime (a rename over it) has another inode.
    pub fn matches(&self, size: u64, mtime_ns: u64, ino: u64) -> bool {
        self.size == size && self.mtime_ns == mtime_ns && (self.ino == 0 || self.ino == ino)
    }
}

/// What the resolver asks of every file of the tree (a module's files, the type hierarchy,
/// renaming imports): kept beside the facts, so that those questions read no facts.
#[derive(Debug, Clone, Default, PartialEq, Eq, bitcode::Encode, bitcode::Decode)]
pub struct Summary {
    pub lang: String,
    /// The package or namespace the file declares.
    pub module: String,
    /// (type, base).
    pub bases: Vec<(String, String)>,
    /// Imports under another name: (original, local).
    pub renames: Vec<(String, String)>,
}

impl Summary {
    pub fn of(f: &FileFacts) -> Self {
        Self {
            lang: f.lang.clone(),
            module: f.str(f.module).to_owned(),
            bases: f.bases.iter().map(|&(t, b)| (f.str(t).to_owned(), f.str(b).to_owned())).collect(),
            renames: f
                .imports
                .iter()
                .map(|i| (f.str(i.name), f.str(i.local)))
                .filter(|(original, local)| !original.is_empty() && original != local)
                .map(|(o, l)| (o.to_owned(), l.to_owned()))
                .collect(),
        }
    }
}

/// A freshly parsed file.
#[derive(Debug, Clone)]
pub struct Cached {
    pub stamp: Stamp,
    pub facts: Arc<FileFacts>,
}

/// Where a file's facts lie in the cache file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bitcode::Encode, bitcode::Decode)]
pub struct Blob {
    pub offset: u64,
    pub len: u32,
    pub crc: u32,
}

/// A file's entry as saved.
#[derive(Debug, Clone, bitcode::Encode, bitcode::Decode)]
pub struct Entry {
    pub path: String,
    pub stamp: Stamp,
    pub summary: Summary,
    pub facts: Blob,
}
