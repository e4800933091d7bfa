//! The cache's name table: for every name, where it is called and where it is defined (no
//! constants), so that a new gm answers `callers NAME` by reading that name's lists instead
//! of listing ten million names first.
//!
//! Names are spread over a power-of-two number of buckets by their CRC-32. The table is the
//! buckets' offsets into the records (one more than there are buckets, so that a bucket ends
//! where the next starts) followed by each bucket's CRC-32; a bucket is its names' records,
//! sorted by name, each `name length (u32) | name | calls (u32) | definitions (u32) |
//! (file, index) pairs (u32, u32)`, all little-endian. A bucket is checked as it is read: a
//! query reads only the bucket of its name.

use rustc_hash::FxHashMap;

use super::facts::{At, DefKind, FileFacts};

/// The bucket of a name among `buckets` (a power of two). CRC-32, not the process's hasher:
/// the table must be read the same way by every gm of this format.
pub fn bucket_of(name: &str, buckets: u32) -> u32 {
    crc32fast::hash(name.as_bytes()) & (buckets - 1)
}

/// A name's call sites and definitions, in file order.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Named {
    pub calls: Vec<At>,
    pub defs: Vec<At>,
}

/// Collects the names of the files given one by one (in their id order), then writes them.
#[derive(Default)]
pub struct Builder {
    names: FxHashMap<Box<str>, Named>,
}

impl Builder {
    pub fn add(&mut self, id: u32, f: &FileFacts) {
        for (i, c) in f.calls.iter().enumerate() {
            self.entry(f.str(c.callee)).calls.push((id, i as u32));
        }
        for (i, d) in f.definitions.iter().enumerate() {
            // Constants (a kernel's millions of `#define X 1`) are never called: a search by
            // name lists them from the facts when it first needs them.
            if d.kind != DefKind::Constant {
                self.entry(f.str(d.name)).defs.push((id, i as u32));
            }
        }
    }

    fn entry(&mut self, name: &str) -> &mut Named {
        // Most names come again and again: looked up before a key is allocated.
        if !self.names.contains_key(name) {
            self.names.insert(name.into(), Named::default());
        }
        self.names.get_mut(name).expect("inserted above")
    }

    /// The table and the records, and the number of buckets.
    pub fn finish(self) -> (Vec<u8>, Vec<u8>, u32) {
        let buckets = u32::try_from((self.names.len() / 2).next_power_of_two().max(16)).unwrap_or(1 << 31);
        let mut names: Vec<(u32, Box<str>, Named)> =
            self.names.into_iter().map(|(n, l)| (bucket_of(&n, buckets), n, l)).collect();
        names.sort_unstable_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut records = Vec::new();
        let mut offsets = Vec::with_capacity(buckets as usize + 1);
        let mut crcs = Vec::with_capacity(buckets as usize);
        let mut next = names.iter().peekable();
        for b in 0..buckets {
            let start = records.len();
            offsets.push(start as u64);
            while let Some((_, name, lists)) = next.next_if(|n| n.0 == b) {
                put_u32(&mut records, name.len() as u32);
                records.extend_from_slice(name.as_bytes());
                put_u32(&mut records, lists.calls.len() as u32);
                put_u32(&mut records, lists.defs.len() as u32);
                for (file, index) in lists.calls.iter().chain(&lists.defs) {
                    put_u32(&mut records, *file);
                    put_u32(&mut records, *index);
                }
            }
            crcs.push(crc32fast::hash(&records[start..]));
        }
        offsets.push(records.len() as u64);
        let mut table = Vec::with_capacity(offsets.len() * 8 + crcs.len() * 4);
        for o in offsets {
            table.extend_from_slice(&o.to_le_bytes());
        }
        for c in crcs {
            put_u32(&mut table, c);
        }
        (table, records, buckets)
    }
}

fn put_u32(out: &mut Vec<u8>, n: u32) {
    out.extend_from_slice(&n.to_le_bytes());
}

/// The table as read back: each bucket's place in the records and its checksum.
pub struct Table {
    offsets: Vec<u64>,
    crcs: Vec<u32>,
}

impl Table {
    /// `None` when the bytes are not a table of `buckets` buckets.
    pub fn read(bytes: &[u8], buckets: u32) -> Option<Self> {
        let n = buckets as usize;
        if !buckets.is_power_of_two() || bytes.len() != (n + 1) * 8 + n * 4 {
            return None;
        }
        let (offsets, crcs) = bytes.split_at((n + 1) * 8);
        let offsets: Vec<u64> =
            offsets.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).collect();
        let crcs = crcs.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap_or_default())).collect();
        offsets.windows(2).all(|w| w[0] <= w[1]).then_some(Self { offsets, crcs })
    }

    pub fn buckets(&self) -> u32 {
        self.crcs.len() as u32
    }

    /// Where `name`'s bucket lies in the records, and its checksum.
    pub fn bucket(&self, name: &str) -> (u64, u64, u32) {
        let b = bucket_of(name, self.buckets()) as usize;
        (self.offsets[b], self.offsets[b + 1], self.crcs[b])
    }

    /// Every bucket: where it lies and its checksum (to check a small cache whole).
    pub fn all(&self) -> impl Iterator<Item = (u64, u64, u32)> + '_ {
        self.offsets.windows(2).zip(&self.crcs).map(|(w, c)| (w[0], w[1], *c))
    }
}

/// Finds `name` in a bucket's bytes (already checked); `None` when the bytes do not parse.
pub fn find(bucket: &[u8], name: &str) -> Option<Named> {
    let mut rest = bucket;
    while !rest.is_empty() {
        let len = take_u32(&mut rest)? as usize;
        let (here, after) = rest.split_at_checked(len)?;
        rest = after;
        let calls = take_u32(&mut rest)? as usize;
        let defs = take_u32(&mut rest)? as usize;
        let pairs = calls.checked_add(defs)?.checked_mul(8)?;
        let (lists, after) = rest.split_at_checked(pairs)?;
        rest = after;
        if here == name.as_bytes() {
            let mut at = lists.chunks_exact(8).map(|p| {
                let (file, index) = p.split_at(4);
                (
                    u32::from_le_bytes(file.try_into().unwrap_or_default()),
                    u32::from_le_bytes(index.try_into().unwrap_or_default()),
                )
            });
            let calls = at.by_ref().take(calls).collect();
            return Some(Named { calls, defs: at.collect() });
        }
    }
    Some(Named::default())
}

fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    let (n, after) = rest.split_at_checked(4)?;
    *rest = after;
    Some(u32::from_le_bytes(n.try_into().ok()?))
}
