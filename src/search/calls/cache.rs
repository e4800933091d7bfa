//! The call index's cache on disk (`<state dir>/calls/cache.bin`): every file's facts with the
//! size, mtime and content hash they were read at, so that a new gm parses only what changed.
//! It is written on a thread of its own, off every reply's path.

use std::collections::HashMap;
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
/// fingerprint (u32 LE, see [`fingerprint`]), then the CRC-32 of the body (u32 LE); the body
/// is the entries, bitcode-encoded. The checksum catches damage that
/// would still decode (a flipped byte in a name), which would otherwise answer wrongly until
/// the file changed.
pub const MAGIC: &[u8; 8] = b"gm-calls";
/// Bump it when `Cached` or anything it holds changes, or what `extract` records, or when the
/// bitcode dependency moves to another 0.x (its encoding may change between those): a cache of
/// another version is ignored.
pub const FORMAT_VERSION: u32 = 2;
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

fn encode(entries: &[(String, Cached)]) -> Vec<u8> {
    let body = bitcode::encode(entries);
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&fingerprint().to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

fn decode(bytes: &[u8]) -> Result<HashMap<String, Cached>, CacheError> {
    let (header, body) = bytes.split_at_checked(HEADER_LEN).ok_or(CacheError::Version)?;
    if header[..8] != MAGIC[..]
        || header[8..12] != FORMAT_VERSION.to_le_bytes()
        || header[12..16] != fingerprint().to_le_bytes()
    {
        return Err(CacheError::Version);
    }
    if header[16..] != crc32fast::hash(body).to_le_bytes() {
        return Err(CacheError::Checksum);
    }
    let entries: Vec<(String, Cached)> = bitcode::decode(body)?;
    Ok(entries.into_iter().collect())
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

pub fn load(file: &Path) -> Result<HashMap<String, Cached>, CacheError> {
    decode(&std::fs::read(file)?)
}

pub fn save(file: &Path, entries: &[(String, Cached)]) -> Result<(), CacheError> {
    let bytes = encode(entries);
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)?;
    }
    gm_actors::fs::replace(file, &bytes)?;
    Ok(())
}
