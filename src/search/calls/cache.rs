//! The call index's cache on disk (`<state dir>/calls/cache.bin`): every file's facts with the
//! size, mtime and content hash they were read at, so that a new gm parses only what changed.
//! It is written on a thread of its own, off every reply's path.

use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use super::facts::FileFacts;

/// SHA-256 of a file's bytes.
pub type Hash = [u8; 32];

#[derive(Debug, Clone, bitcode::Encode, bitcode::Decode)]
pub struct Cached {
    pub size: u64,
    pub mtime_ns: u64,
    pub hash: Hash,
    /// Shared with the saving thread's snapshot, so taking one copies no facts.
    pub facts: Arc<FileFacts>,
}

/// The cache's entries, as handed to the saving thread.
pub type Snapshot = Vec<(String, Cached)>;

/// Writes the cache on a thread of its own, so that no reply waits for the encoding and the
/// disk; when snapshots queue up, only the newest is written.
pub struct Saver {
    file: PathBuf,
    tx: Option<mpsc::Sender<Snapshot>>,
    thread: Option<JoinHandle<()>>,
}

impl Saver {
    pub fn start(file: PathBuf) -> Self {
        let (tx, rx) = mpsc::channel::<Snapshot>();
        let to = file.clone();
        let thread = std::thread::Builder::new()
            .name("gm-calls-save".into())
            .spawn(move || {
                while let Ok(mut snapshot) = rx.recv() {
                    while let Ok(newer) = rx.try_recv() {
                        snapshot = newer;
                    }
                    // A cache that cannot be written costs the next gm a parse, nothing else.
                    let _ = save(&to, &snapshot);
                }
            })
            .ok();
        // Without a thread, the index saves on its own (the reply waits).
        Self { file, tx: thread.is_some().then_some(tx), thread }
    }

    pub fn save(&self, snapshot: Snapshot) {
        let unsent = match &self.tx {
            Some(tx) => tx.send(snapshot).err().map(|e| e.0),
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

/// The cache file starts with this, then the format version (u32 LE), the languages'
/// fingerprint (u32 LE, see [`fingerprint`]) and the number of parts (u32 LE); then each part:
/// its length (u64 LE), its CRC-32 (u32 LE) and its entries, bitcode-encoded. The checksum catches damage that
/// would still decode (a flipped byte in a name), which would otherwise answer wrongly until
/// the file changed.
pub const MAGIC: &[u8; 8] = b"gm-calls";
/// Bump it when `Cached` or anything it holds changes, or what `extract` records, or when the
/// bitcode dependency moves to another 0.x (its encoding may change between those): a cache of
/// another version is ignored.
pub const FORMAT_VERSION: u32 = 4;
const HEADER_LEN: usize = 20;

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
    #[error("the call-site cache is damaged (its checksum does not match)")]
    Checksum,
    #[error("the call-site cache cannot be decoded: {0}")]
    Decode(#[from] bitcode::Error),
}

/// The entries are saved in this many parts, each with its length and checksum, so that a
/// new gm decodes them on every core.
const PARTS: usize = 8;

fn encode(entries: &[(String, Cached)]) -> Vec<u8> {
    let size = entries.len().div_ceil(PARTS).max(1);
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&fingerprint().to_le_bytes());
    out.extend_from_slice(&(PARTS as u32).to_le_bytes());
    for i in 0..PARTS {
        let part = entries.get(i * size..((i + 1) * size).min(entries.len())).unwrap_or(&[]);
        let body = bitcode::encode(part);
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.extend_from_slice(&body);
    }
    out
}

fn decode(bytes: &[u8]) -> Result<Vec<(String, Cached)>, CacheError> {
    let (header, mut rest) = bytes.split_at_checked(HEADER_LEN).ok_or(CacheError::Version)?;
    if header[..8] != MAGIC[..]
        || header[8..12] != FORMAT_VERSION.to_le_bytes()
        || header[12..16] != fingerprint().to_le_bytes()
        || header[16..] != (PARTS as u32).to_le_bytes()
    {
        return Err(CacheError::Version);
    }
    let mut parts = Vec::with_capacity(PARTS);
    for _ in 0..PARTS {
        let (len, after) = rest.split_at_checked(8).ok_or(CacheError::Checksum)?;
        let (crc, after) = after.split_at_checked(4).ok_or(CacheError::Checksum)?;
        let len = u64::from_le_bytes(len.try_into().map_err(|_| CacheError::Checksum)?);
        let (body, after) = after
            .split_at_checked(usize::try_from(len).map_err(|_| CacheError::Checksum)?)
            .ok_or(CacheError::Checksum)?;
        parts.push((crc, body));
        rest = after;
    }
    if !rest.is_empty() {
        return Err(CacheError::Checksum);
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, PARTS);
    let decoded: Vec<Result<Vec<(String, Cached)>, CacheError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = parts
            .chunks(PARTS.div_ceil(threads))
            .map(|mine| {
                scope.spawn(move || {
                    let mut out = Vec::new();
                    for (crc, body) in mine {
                        if crc[..] != crc32fast::hash(body).to_le_bytes() {
                            return Err(CacheError::Checksum);
                        }
                        out.extend(bitcode::decode::<Vec<(String, Cached)>>(body)?);
                    }
                    Ok(out)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(Err(CacheError::Checksum))).collect()
    });
    let mut entries = Vec::new();
    for part in decoded {
        entries.extend(part?);
    }
    Ok(entries)
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

pub fn load(file: &Path) -> Result<Vec<(String, Cached)>, CacheError> {
    let f = std::fs::File::open(file)?;
    // Mapped, not read: a kernel-size cache is half a gigabyte, and a read would first have
    // the kernel zero that much fresh memory to copy it into.
    // SAFETY: gm never writes into a cache file: a save writes a new file and renames it over
    // the old one (`gm_actors::fs::replace`), so the mapped bytes stay as they are while they
    // are decoded, and the mapping is dropped before this returns.
    let map = unsafe { memmap2::Mmap::map(&f)? };
    decode(&map)
}

pub fn save(file: &Path, entries: &[(String, Cached)]) -> Result<(), CacheError> {
    let bytes = encode(entries);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    gm_actors::fs::replace(file, &bytes)?;
    Ok(())
}
