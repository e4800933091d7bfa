//! The call index's cache on disk (`<state dir>/calls/cache.bin`), used where it lies: a new
//! gm reads every file's entry (path, size, mtime, hash, and the little the resolver asks of
//! every file), and then only the name lists and the facts a query needs, each checked by its
//! own checksum as it is read. It is written on a thread of its own, off every reply's path.
//!
//! Layout (little-endian): the header (see [`Header`]); the entries, bitcode-encoded; the name
//! table and its records (`names.rs`); every file's facts, bitcode-encoded one by one.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub use super::entry::{Blob, Cached, Entry, Hash, Stamp};
use super::facts::FileFacts;
use super::names::{self, Named, Table};
use super::store::{SavedFacts, SnapEntry, SnapFacts};

/// The cache's entries and the tree they were checked against, as handed to the saving thread.
pub struct Snapshot {
    pub entries: Vec<SnapEntry>,
    pub tree: Option<TreeStamp>,
}

/// What git's index said of the tree when the entries were last checked against it: while
/// the index file is the same (size, mtime, inode: git replaces it whole on every change), the
/// tracked files are the same, and a new gm checks the entries without reading the index
/// (a kernel's takes 100 ms).
#[derive(Debug, Clone, PartialEq, Eq, bitcode::Encode, bitcode::Decode)]
pub struct TreeStamp {
    /// The index file's size, mtime (ns) and inode.
    pub index: (u64, u64, u64),
    /// Tracked files of languages gm does not parse, by language.
    pub other: std::collections::BTreeMap<String, usize>,
    /// Tracked files that looked like source by their name but were none (missing from the
    /// disk, an extensionless file that is no script): checked again with the entries.
    pub unlisted: Vec<String>,
}

/// The entries section as saved.
#[derive(Debug, Clone, bitcode::Encode, bitcode::Decode)]
pub struct Listing {
    pub tree: Option<TreeStamp>,
    pub entries: Vec<Entry>,
}

/// Writes the cache on a thread of its own, so that no reply waits for the encoding and the
/// disk; when snapshots queue up, only the newest is written.
pub struct Saver {
    file: PathBuf,
    tx: Option<mpsc::Sender<Snapshot>>,
    thread: Option<JoinHandle<()>>,
}

/// Snapshots handed to a saving thread and not written yet, in this process: a worker that
/// stops waits for them ([`wait_for_saves`]) before it lets the workspace go, or the parse of
/// a whole tree (two minutes for a kernel) would be lost to a stop right after it.
static UNSAVED: (Mutex<usize>, Condvar) = (Mutex::new(0), Condvar::new());

fn unsaved(change: isize) {
    let (count, changed) = &UNSAVED;
    let mut n = count.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    *n = n.saturating_add_signed(change);
    changed.notify_all();
}

/// Waits until every snapshot handed to a saving thread is written, at most `limit`; `false`
/// when some were still being written at the end.
pub fn wait_for_saves(limit: Duration) -> bool {
    let (count, changed) = &UNSAVED;
    let n = count.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let (n, _) = changed.wait_timeout_while(n, limit, |n| *n > 0).unwrap_or_else(std::sync::PoisonError::into_inner);
    *n == 0
}

impl Saver {
    pub fn start(file: PathBuf) -> Self {
        let (tx, rx) = mpsc::channel::<Snapshot>();
        let to = file.clone();
        let thread = std::thread::Builder::new()
            .name("gm-calls-save".into())
            .spawn(move || {
                while let Ok(mut snapshot) = rx.recv() {
                    let mut taken = 1;
                    while let Ok(newer) = rx.try_recv() {
                        snapshot = newer;
                        taken += 1;
                    }
                    // A cache that cannot be written costs the next gm a parse, nothing else.
                    let _ = save(&to, &snapshot);
                    unsaved(-taken);
                }
            })
            .ok();
        // Without a thread, the index saves on its own (the reply waits).
        Self { file, tx: thread.is_some().then_some(tx), thread }
    }

    pub fn save(&self, snapshot: Snapshot) {
        let unsent = match &self.tx {
            Some(tx) => {
                unsaved(1);
                tx.send(snapshot).err().map(|e| {
                    unsaved(-1);
                    e.0
                })
            }
            None => Some(snapshot),
        };
        if let Some(snapshot) = unsent {
            let _ = save(&self.file, &snapshot);
        }
    }
}

impl Drop for Saver {
    /// Waits for the last snapshot to be written, so that an index started after this one is
    /// dropped finds it.
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

pub const MAGIC: &[u8; 8] = b"gm-calls";
/// Bump it when the layout changes, or `Entry`, `FileFacts` or anything they hold, or what
/// `extract` records, or when the bitcode dependency moves to another 0.x (its encoding may
/// change between those): a cache of another version is ignored.
pub const FORMAT_VERSION: u32 = 7;

/// The header: `MAGIC`, the format version (u32), the languages' fingerprint (u32, see
/// [`fingerprint`]), the file's length (u64), the entries' length (u64), the records' length
/// (u64), the number of name buckets (u32), the entries' CRC-32, the name table's CRC-32, and
/// the CRC-32 of the header before it. The entries start right after it, then the table, the
/// records, and the facts up to the end.
struct Header {
    total: u64,
    entries_len: u64,
    records_len: u64,
    buckets: u32,
    entries_crc: u32,
    table_crc: u32,
}

const HEADER_LEN: usize = 56;

impl Header {
    fn table_len(&self) -> u64 {
        (u64::from(self.buckets) + 1) * 8 + u64::from(self.buckets) * 4
    }

    fn table_at(&self) -> u64 {
        HEADER_LEN as u64 + self.entries_len
    }

    fn records_at(&self) -> u64 {
        self.table_at() + self.table_len()
    }

    fn facts_at(&self) -> u64 {
        self.records_at() + self.records_len
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&fingerprint().to_le_bytes());
        for n in [self.total, self.entries_len, self.records_len] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        for n in [self.buckets, self.entries_crc, self.table_crc] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        let crc = crc32fast::hash(&out[out.len() - (HEADER_LEN - 4)..]);
        out.extend_from_slice(&crc.to_le_bytes());
    }

    fn read(bytes: &[u8; HEADER_LEN]) -> Result<Self, CacheError> {
        if bytes[..8] != MAGIC[..]
            || bytes[8..12] != FORMAT_VERSION.to_le_bytes()
            || bytes[12..16] != fingerprint().to_le_bytes()
        {
            return Err(CacheError::Version);
        }
        if bytes[52..] != crc32fast::hash(&bytes[..52]).to_le_bytes() {
            return Err(CacheError::Damaged);
        }
        let u64_at = |i: usize| u64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or_default());
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i..i + 4].try_into().unwrap_or_default());
        let header = Self {
            total: u64_at(16),
            entries_len: u64_at(24),
            records_len: u64_at(32),
            buckets: u32_at(40),
            entries_crc: u32_at(44),
            table_crc: u32_at(48),
        };
        if !header.buckets.is_power_of_two() || header.facts_at() > header.total {
            return Err(CacheError::Damaged);
        }
        Ok(header)
    }
}

/// What the facts depend on besides the file: every language's extensions and queries. A gm
/// whose queries changed (a new language, a fixed pattern) reads no cache of another's.
pub fn fingerprint() -> u32 {
    let mut h = crc32fast::Hasher::new();
    for l in super::lang::all() {
        h.update(l.name.as_bytes());
        for piece in l.extensions.iter().chain(l.interpreters).chain(l.query).chain(l.tags) {
            h.update(piece.as_bytes());
            h.update(b"\0");
        }
    }
    h.finalize()
}

#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("call-site cache: {0}")]
    Io(#[from] std::io::Error),
    #[error("the call-site cache is not of format version {FORMAT_VERSION} with these languages")]
    Version,
    #[error("the call-site cache is damaged (a length or a checksum does not match)")]
    Damaged,
    #[error("the call-site cache cannot be decoded: {0}")]
    Decode(#[from] bitcode::Error),
}

/// An open cache file: read piece by piece with `pread`, never mapped, so that a file cut short
/// or rewritten under gm by another program reads as damaged (a short read, a checksum that
/// does not match), never as a fault. gm itself never writes into a cache file: a save writes a
/// new file and renames it over the old one, and this handle keeps reading the old one.
pub struct Saved {
    file: File,
    header: Header,
    table: Table,
}

/// Caches up to this size are checked whole when opened (a few milliseconds): damage anywhere
/// is then found before the first answer. A larger one is checked piece by piece as queries
/// read it.
pub const CHECK_WHOLE_BELOW: u64 = 64 << 20;

impl Saved {
    /// Opens a cache and reads its entries, checked; `check_whole_below`: see [`CHECK_WHOLE_BELOW`].
    pub fn open(path: &Path, check_whole_below: u64) -> Result<(Self, Listing), CacheError> {
        let file = File::open(path)?;
        let mut head = [0u8; HEADER_LEN];
        gm_actors::sys::read_exact_at(&file, &mut head, 0).map_err(|_| CacheError::Damaged)?;
        let header = Header::read(&head)?;
        if file.metadata()?.len() != header.total {
            return Err(CacheError::Damaged);
        }
        let entries = read_exact(&file, HEADER_LEN as u64, header.entries_len)?;
        if crc32fast::hash(&entries) != header.entries_crc {
            return Err(CacheError::Damaged);
        }
        let listing: Listing = bitcode::decode(&entries)?;
        let entries = &listing.entries;
        let table = read_exact(&file, header.table_at(), header.table_len())?;
        if crc32fast::hash(&table) != header.table_crc {
            return Err(CacheError::Damaged);
        }
        let table = Table::read(&table, header.buckets).ok_or(CacheError::Damaged)?;
        let saved = Self { file, header, table };
        let facts_at = saved.header.facts_at();
        let in_bounds = entries.iter().all(|e| {
            e.facts.offset >= facts_at && e.facts.offset.saturating_add(u64::from(e.facts.len)) <= saved.header.total
        });
        if !in_bounds {
            return Err(CacheError::Damaged);
        }
        if saved.header.total < check_whole_below {
            saved.check_whole(entries)?;
        }
        Ok((saved, listing))
    }

    /// Checks every bucket's and every file's checksum, from one read of the file.
    fn check_whole(&self, entries: &[Entry]) -> Result<(), CacheError> {
        let all = read_exact(&self.file, 0, self.header.total)?;
        let records = self.header.records_at();
        for (start, end, crc) in self.table.all() {
            let piece = all.get(slice(records + start, records + end)?).ok_or(CacheError::Damaged)?;
            if crc32fast::hash(piece) != crc {
                return Err(CacheError::Damaged);
            }
        }
        for e in entries {
            let b = e.facts;
            let piece = all.get(slice(b.offset, b.offset + u64::from(b.len))?).ok_or(CacheError::Damaged)?;
            if crc32fast::hash(piece) != b.crc {
                return Err(CacheError::Damaged);
            }
        }
        Ok(())
    }

    /// A file's facts, checked and decoded.
    ///
    /// A first `callers` after a start reads thousands of files' facts on every core: each
    /// thread reads them into one buffer and decodes them with one decoder, kept between
    /// calls. Fresh buffers cost more than the decoding itself: the kernel zeroes the new
    /// memory they take.
    pub fn facts(&self, blob: Blob) -> Result<FileFacts, CacheError> {
        thread_local! {
            static SCRATCH: std::cell::RefCell<(Vec<u8>, bitcode::Buffer)> = Default::default();
        }
        SCRATCH.with_borrow_mut(|(bytes, decoder)| {
            let len = usize::try_from(blob.len).map_err(|_| CacheError::Damaged)?;
            bytes.clear();
            bytes.resize(len, 0);
            read_exact_into(&self.file, bytes, blob.offset)?;
            if crc32fast::hash(bytes) != blob.crc {
                return Err(CacheError::Damaged);
            }
            Ok(decoder.decode(bytes)?)
        })
    }

    /// A file's facts as saved, checked.
    pub fn raw(&self, blob: Blob) -> Result<Vec<u8>, CacheError> {
        let bytes = read_exact(&self.file, blob.offset, u64::from(blob.len))?;
        if crc32fast::hash(&bytes) != blob.crc {
            return Err(CacheError::Damaged);
        }
        Ok(bytes)
    }

    /// Where `name` is called and defined, as saved.
    pub fn named(&self, name: &str) -> Result<Named, CacheError> {
        let (start, end, crc) = self.table.bucket(name);
        if end > self.header.records_len {
            return Err(CacheError::Damaged);
        }
        let bucket = read_exact(&self.file, self.header.records_at() + start, end - start)?;
        if crc32fast::hash(&bucket) != crc {
            return Err(CacheError::Damaged);
        }
        names::find(&bucket, name).ok_or(CacheError::Damaged)
    }
}

impl SavedFacts for Saved {
    fn facts(&self, blob: Blob) -> Option<FileFacts> {
        Saved::facts(self, blob).ok()
    }
    fn raw(&self, blob: Blob) -> Option<Vec<u8>> {
        Saved::raw(self, blob).ok()
    }
    fn named(&self, name: &str) -> Option<Named> {
        Saved::named(self, name).ok()
    }
}

fn slice(start: u64, end: u64) -> Result<std::ops::Range<usize>, CacheError> {
    let start = usize::try_from(start).map_err(|_| CacheError::Damaged)?;
    let end = usize::try_from(end).map_err(|_| CacheError::Damaged)?;
    Ok(start..end)
}

/// `len` bytes at `at`; a file shorter than that is damaged.
fn read_exact(file: &File, at: u64, len: u64) -> Result<Vec<u8>, CacheError> {
    let mut buf = vec![0u8; usize::try_from(len).map_err(|_| CacheError::Damaged)?];
    read_exact_into(file, &mut buf, at)?;
    Ok(buf)
}

/// Fills `buf` from `at`; a file that ends first is damaged.
fn read_exact_into(file: &File, buf: &mut [u8], at: u64) -> Result<(), CacheError> {
    gm_actors::sys::read_exact_at(file, buf, at).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => CacheError::Damaged,
        _ => CacheError::Io(e),
    })
}

fn encode(snapshot: &Snapshot) -> Vec<u8> {
    let mut names = names::Builder::default();
    let mut facts: Vec<u8> = Vec::new();
    let mut blobs: Vec<(u64, u32, u32)> = Vec::with_capacity(snapshot.entries.len());
    let mut kept: Vec<&SnapEntry> = Vec::with_capacity(snapshot.entries.len());
    for e in &snapshot.entries {
        // Facts still in the cache being replaced are copied as they are; their names are
        // read from them decoded, one file at a time.
        let (bytes, decoded) = match &e.facts {
            SnapFacts::Decoded(f) => (bitcode::encode(&**f), None),
            SnapFacts::Saved(saved, blob) => match saved.raw(*blob) {
                Some(bytes) => match bitcode::decode::<FileFacts>(&bytes) {
                    Ok(f) => (bytes, Some(f)),
                    Err(_) => continue,
                },
                // A damaged entry is left out: the next gm parses that file.
                None => continue,
            },
        };
        let f = match (&e.facts, &decoded) {
            (SnapFacts::Decoded(f), _) => &**f,
            (_, Some(f)) => f,
            _ => continue,
        };
        let Ok(len) = u32::try_from(bytes.len()) else { continue };
        names.add(kept.len() as u32, f);
        blobs.push((facts.len() as u64, len, crc32fast::hash(&bytes)));
        facts.extend_from_slice(&bytes);
        kept.push(e);
    }
    let (table, records, buckets) = names.finish();
    let mut header = Header {
        total: 0,
        entries_len: 0,
        records_len: records.len() as u64,
        buckets,
        entries_crc: 0,
        table_crc: crc32fast::hash(&table),
    };
    // The entries say where their facts lie, which depends on the entries' own length: the
    // offsets are saved relative to the facts and moved once that length is known.
    let entries = |facts_at: u64| -> Vec<u8> {
        let entries: Vec<Entry> = kept
            .iter()
            .zip(&blobs)
            .map(|(e, &(offset, len, crc))| Entry {
                path: e.path.clone(),
                stamp: e.stamp,
                summary: (*e.summary).clone(),
                facts: Blob { offset: facts_at + offset, len, crc },
            })
            .collect();
        bitcode::encode(&Listing { tree: snapshot.tree.clone(), entries })
    };
    let mut encoded = entries(0);
    // The length can grow with the offsets (bitcode packs small numbers tighter): again until
    // it stays.
    loop {
        header.entries_len = encoded.len() as u64;
        let again = entries(header.facts_at());
        if again.len() == encoded.len() {
            encoded = again;
            break;
        }
        encoded = again;
    }
    header.entries_crc = crc32fast::hash(&encoded);
    header.total = header.facts_at() + facts.len() as u64;
    let mut out = Vec::with_capacity(usize::try_from(header.total).unwrap_or(0));
    header.write(&mut out);
    out.extend_from_slice(&encoded);
    out.extend_from_slice(&table);
    out.extend_from_slice(&records);
    out.extend_from_slice(&facts);
    out
}

/// Removes the temporary files of saves cut short (a gm that exited while its saving thread
/// wrote; `gm_actors::fs::replace` names them `.<name>.gm-tmp-<pid>-<n>`). One older than a
/// minute is no live save's: a save takes well under a second.
pub fn remove_stale_temporaries(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let temporary = entry.file_name().to_string_lossy().contains(".gm-tmp-");
        let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
        if temporary && age.is_some_and(|a| a > std::time::Duration::from_secs(60)) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

pub fn save(file: &Path, snapshot: &Snapshot) -> Result<(), CacheError> {
    let bytes = encode(snapshot);
    if let Some(dir) = file.parent() {
        gm_actors::state_file::open_own_folder(dir).map_err(std::io::Error::from)?;
    }
    gm_actors::fs::replace(file, &bytes)?;
    Ok(())
}
