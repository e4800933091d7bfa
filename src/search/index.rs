//! The BM25 line index (tantivy): one document per line of each tracked text file, tokenized
//! by [`CodeTokenizer`], kept in `.gm/index/`.
//!
//! Freshness: the first search builds the index (scanning every tracked file's size and
//! mtime). After that, the workspace watcher (`crate::watch`) says which files changed, whoever
//! changed them, and a search reads a few changed files as they are now, scored with this
//! index's statistics ([`LineIndex::search_with_pending`], reindexed after the reply), reindexes
//! more of them first ([`LineIndex::update_dirty`]), or scans the tracked set again when git's
//! index moved. Without a watcher (none could be had, or it lost events), every search first
//! checks every tracked file by size, mtime and inode ([`LineIndex::refresh`]): a kernel's
//! 78,000 files take ~0.3 s of stat calls, the price of never answering stale.
//! Changed files are reindexed and removed files dropped; files written through gm's own verbs
//! are reindexed before the next search in either case.
//! The index is served by the [`super::index_actor::SearchIndex`] actor on a thread of its
//! own, so indexing never holds up the protocol.
//!
//! Only the file id and line number are kept per document (as fast fields); a hit's text is
//! read from the file, which also shows the line as it is now.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tantivy::collector::{FilterCollector, TopDocs};
use tantivy::columnar::Column;
use tantivy::indexer::{LogMergePolicy, NoMergePolicy, UserOperation};
use tantivy::schema::{Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, FAST};
use tantivy::{Index, IndexReader, IndexWriter, ReloadPolicy};

use super::batch::{Batcher, Fields, LineDoc};
pub use super::hit::{SearchHit, MAX_FILE_BYTES};
use super::loc;
use super::provisional::{self, IndexStats, ProvisionalFile};
use super::tokenizer::{has_words, terms_query, words, CodeTokenizer};
use super::tracked::{stat_all, tracked_files};

/// Bump when the schema or tokenizer changes: an older index is rebuilt.
const FORMAT: u32 = 6;
/// The heap of the writer that builds the index, split between tantivy's indexing threads.
/// Larger heaps make fewer segments but build slower here (each thread's term hash table
/// outgrows the caches). Kernel builds, alternating in one session: 64 MB 20.8-21.8 s (78
/// segments), 96 MB 20.8-22.8 s (42), 128 MB 21.2-23.3 s (31), 192 MB 25.8-26.8 s.
const BULK_HEAP: usize = 96 << 20;
/// The heap of the writer for a few changed files. Every commit starts fresh segment writers
/// whose hash tables scale with the heap, so a small one keeps an incremental commit cheap.
const SMALL_HEAP: usize = 15_000_000;
/// A refresh reindexing more than this many bytes uses the bulk writer.
const BULK_BYTES: u64 = 32 << 20;
/// Or more than this many files (a branch switch): the bulk writer indexes on every core.
const BULK_FILES: usize = 256;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("search index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error("search index files in {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Tracked(#[from] super::tracked::TrackedError),
}

/// What the index holds per file, saved in `manifest.json` after each scan. Between scans the
/// saved manifest may lag the index (files reindexed after a gm write): the next start then
/// finds those files changed and reindexes them again, which is correct, only slower.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    next_id: u64,
    files: HashMap<String, FileState>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
struct FileState {
    id: u64,
    size: u64,
    mtime_ns: u128,
    lines: u64,
    /// 0 in a manifest written before inodes were kept: then only size and mtime are compared.
    #[serde(default)]
    ino: u64,
}

impl FileState {
    /// Whether the file is as it was indexed: same size, mtime and (where known) inode.
    fn same(&self, size: u64, mtime_ns: u128, ino: u64) -> bool {
        self.size == size && self.mtime_ns == mtime_ns && (self.ino == 0 || self.ino == ino)
    }
}

/// A build that was asked a search commits as it goes, every this many bytes indexed or every
/// [`MIDWAY_COMMITS`]th of the build, whichever is more: each commit waits for every indexing
/// thread and syncs its segments and the manifest to disk, and every eighth of a 64 MB build
/// cost it half again its time alone (`bench/search_build.py`), while scanning a few more
/// megabytes costs a search less.
const MIDWAY_COMMIT_BYTES: u64 = 16 << 20;
const MIDWAY_COMMITS: u64 = 6;
#[cfg(test)]
thread_local! {
    /// [`MIDWAY_COMMIT_BYTES`] for the tests on this thread: small trees commit too.
    static MIDWAY_COMMIT_TEST: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

fn midway_commit_bytes() -> u64 {
    #[cfg(test)]
    if let Some(bytes) = MIDWAY_COMMIT_TEST.with(std::cell::Cell::get) {
        return bytes;
    }
    MIDWAY_COMMIT_BYTES
}

/// A search asked of a build in progress ([`LineIndex::apply_answering`]).
pub struct Ask {
    pub query: String,
    pub limit: usize,
    pub prefix: Option<String>,
    /// Files the watcher saw change since the build began: read as they are now.
    pub changed: BTreeSet<String>,
    pub reply: std::sync::mpsc::Sender<Result<Vec<SearchHit>, String>>,
}

/// Where a build's searches come from, and whether it takes them yet.
pub struct Asks {
    pub from: std::sync::mpsc::Receiver<Ask>,
    /// Set while the build is between files, where it answers; the asker scans itself
    /// before (while the tree is stat'ed) and after.
    pub open: Arc<std::sync::atomic::AtomicBool>,
}

impl Asks {
    fn next(&self) -> Option<Ask> {
        self.from.try_recv().ok()
    }
}

/// The commit payload: the next file id, saved with every commit so that ids are never reused
/// even when the manifest lags (a reused id would give one file's lines another's path).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Payload {
    next_id: u64,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RefreshStats {
    pub files: u64,
    pub indexed: u64,
    pub removed: u64,
    pub skipped_binary: u64,
    pub skipped_large: u64,
    pub bytes_indexed: u64,
    pub ms: u64,
}

/// The tracked files as one scan saw them.
pub struct Scan {
    files: Vec<Seen>,
    took: Duration,
}

struct Seen {
    rel: String,
    path: PathBuf,
    size: u64,
    mtime_ns: u128,
    ino: u64,
}

impl Scan {
    /// A scan that found nothing.
    pub fn empty() -> Scan {
        Scan { files: Vec::new(), took: Duration::ZERO }
    }

    /// Bytes of the files an index build would read (each up to the size limit).
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|s| s.size.min(MAX_FILE_BYTES)).sum()
    }

    /// The files found, as (relative path, path, size).
    pub fn files(&self) -> impl Iterator<Item = (&str, &Path, u64)> {
        self.files.iter().map(|s| (s.rel.as_str(), s.path.as_path(), s.size))
    }
}

/// Stats every tracked file of `workspace`, on every core (files missing on disk are left
/// out, so they count as removed). Runs on any thread.
pub fn scan(workspace: &Path) -> Result<Scan, IndexError> {
    let started = Instant::now();
    let tracked = tracked_files(workspace)?;
    let rels: Vec<&str> = tracked.iter().map(|f| f.rel.as_str()).collect();
    let stats = stat_all(workspace, &rels);
    let files = tracked
        .into_iter()
        .zip(stats)
        .filter_map(|(f, stat)| {
            let stat = stat.filter(|s| s.is_file)?;
            Some(Seen { rel: f.rel, path: f.path, size: stat.len, mtime_ns: u128::from(stat.mtime_ns), ino: stat.ino })
        })
        .collect();
    Ok(Scan { files, took: started.elapsed() })
}

fn mtime_ns(meta: &std::fs::Metadata) -> u128 {
    meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos())
}

/// Merges only the small segments that incremental updates leave. The build's segments (about
/// a million lines each on a large tree) stay as they are: searching 30 of them costs no more
/// than searching a few (3 ms on the kernel either way), and merging them would keep a core
/// busy for tens of seconds.
fn small_merges() -> LogMergePolicy {
    let mut policy = LogMergePolicy::default();
    policy.set_max_docs_before_merge(200_000);
    policy
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let loc = b.add_u64_field(loc::FIELD, FAST);
    let text_options = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default().set_tokenizer("code").set_index_option(IndexRecordOption::WithFreqs),
    );
    let text = b.add_text_field("text", text_options);
    (b.build(), Fields { loc, text })
}

pub struct LineIndex {
    workspace: PathBuf,
    dir: PathBuf,
    index: Index,
    /// `None` only while one writer is swapped for the other (tantivy allows one at a time).
    writer: Option<IndexWriter<LineDoc>>,
    bulk: bool,
    reader: IndexReader,
    fields: Fields,
    batcher: Batcher,
    manifest: Manifest,
    paths: HashMap<u64, String>,
    last_scan: Option<(Instant, Duration)>,
    /// Whether the workspace is in a git repository (the tracked files are git's).
    in_git: bool,
    /// Files whose old lines the next commit deletes (one query for all of them). A file
    /// reindexed gets a new id, so that the delete cannot reach its new lines.
    doomed: Vec<u64>,
    meta_seen: Option<(std::time::SystemTime, u64)>,
}

/// The manifest saved in `dir`, if it is of this format.
fn read_manifest(dir: &Path) -> Option<Manifest> {
    std::fs::read(dir.join("manifest.json"))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .filter(|m: &Manifest| m.format == FORMAT)
}

/// When tantivy's `meta.json` was last written (and its size): it changes with every commit
/// and every finished merge.
fn meta_stamp(dir: &Path) -> Option<(std::time::SystemTime, u64)> {
    let meta = std::fs::metadata(dir.join("meta.json")).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Whether an index on disk can be used as it is: this schema, and term dictionaries this build
/// can read. The manifest's format number cannot tell what wrote the files (another build,
/// a disk error); an index that fails here is rebuilt instead of failing every search.
fn usable(index: &Index, schema: &Schema, text: Field) -> bool {
    if index.schema() != *schema {
        return false;
    }
    let Ok(reader) = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into() else { return false };
    let reader: IndexReader = reader;
    reader.searcher().segment_readers().iter().all(|segment| segment.inverted_index(text).is_ok())
}

impl LineIndex {
    /// Opens the index in `dir`, or builds an empty one (also when the one there is from an
    /// older format, from another schema, or unreadable).
    pub fn open(workspace: &Path, dir: &Path) -> Result<Self, IndexError> {
        let io = |source| IndexError::Io { path: dir.to_owned(), source };
        let manifest = read_manifest(dir);
        let (schema, fields) = schema();
        let existing = manifest
            .as_ref()
            .and_then(|_| Index::open_in_dir(dir).ok())
            .filter(|index| usable(index, &schema, fields.text));
        let (index, mut manifest) = match (existing, manifest) {
            (Some(index), Some(manifest)) => (index, manifest),
            _ => {
                let _ = std::fs::remove_dir_all(dir);
                std::fs::create_dir_all(dir).map_err(io)?;
                let index = Index::create_in_dir(dir, schema)?;
                (index, Manifest { format: FORMAT, ..Default::default() })
            }
        };
        let committed: Payload =
            index.load_metas()?.payload.and_then(|p| serde_json::from_str(&p).ok()).unwrap_or_default();
        manifest.next_id = manifest.next_id.max(committed.next_id);
        index.tokenizers().register("code", CodeTokenizer::default());
        let writer = index.writer_with_num_threads(1, SMALL_HEAP)?;
        writer.set_merge_policy(Box::new(small_merges()));
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        let paths = manifest.files.iter().map(|(rel, s)| (s.id, rel.clone())).collect();
        Ok(Self {
            workspace: workspace.to_owned(),
            dir: dir.to_owned(),
            index,
            writer: Some(writer),
            bulk: false,
            reader,
            fields,
            batcher: Batcher::new(fields),
            manifest,
            paths,
            last_scan: None,
            in_git: crate::git::git_dir(workspace).is_some(),
            doomed: Vec::new(),
            meta_seen: meta_stamp(dir),
        })
    }

    pub fn is_scanned(&self) -> bool {
        self.last_scan.is_some()
    }

    /// Whether the index holds nothing yet and has never been built: a first search, a
    /// format change, or a damaged index that was set aside.
    pub fn is_unbuilt(&self) -> bool {
        self.last_scan.is_none() && self.manifest.files.is_empty()
    }

    pub fn indexed_files(&self) -> u64 {
        self.manifest.files.len() as u64
    }

    fn writer(&mut self) -> Result<&mut IndexWriter<LineDoc>, IndexError> {
        self.writer.as_mut().ok_or_else(|| IndexError::Io {
            path: self.dir.clone(),
            source: std::io::Error::other("the index writer is gone"),
        })
    }

    /// Swaps in the bulk or the small writer.
    fn use_writer(&mut self, bulk: bool) -> Result<(), IndexError> {
        if self.bulk == bulk && self.writer.is_some() {
            return Ok(());
        }
        // Dropping the old writer releases tantivy's lock for the new one.
        self.writer = None;
        let writer = if bulk {
            let writer = self.index.writer(BULK_HEAP)?;
            // Merging while building would compete with the build for the cores.
            writer.set_merge_policy(Box::new(NoMergePolicy));
            writer
        } else {
            let writer = self.index.writer_with_num_threads(1, SMALL_HEAP)?;
            writer.set_merge_policy(Box::new(small_merges()));
            writer
        };
        self.writer = Some(writer);
        self.bulk = bulk;
        Ok(())
    }

    /// Brings the index up to date with the tracked files now.
    pub fn refresh(&mut self) -> Result<RefreshStats, IndexError> {
        let scan = scan(&self.workspace)?;
        self.apply(scan)
    }

    /// Reindexes what `scan` found changed and drops what it found gone.
    pub fn apply(&mut self, scan: Scan) -> Result<RefreshStats, IndexError> {
        self.apply_answering(scan, None)
    }

    /// [`Self::apply`], answering the searches `asks` brings meanwhile (the first build of a
    /// big tree, on its own thread): each from what is indexed so far, committed for it,
    /// plus a scan of only the files not indexed yet. So a search during the build costs
    /// less the further the build is, and takes one core, not the build's.
    pub fn apply_answering(&mut self, scan: Scan, asks: Option<&Asks>) -> Result<RefreshStats, IndexError> {
        let started = Instant::now();
        let mut stats = RefreshStats { files: scan.files.len() as u64, ..Default::default() };
        let changed: Vec<&Seen> = scan
            .files
            .iter()
            .filter(|s| self.manifest.files.get(&s.rel).is_none_or(|k| !k.same(s.size, s.mtime_ns, s.ino)))
            .collect();
        let bytes: u64 = changed.iter().map(|s| s.size.min(MAX_FILE_BYTES)).sum();
        if bytes > BULK_BYTES || changed.len() > BULK_FILES {
            self.use_writer(true)?;
        }
        let result = self.apply_changes(&scan, &changed, &mut stats, asks);
        if result.is_err() {
            self.roll_back();
        }
        let back = self.use_writer(false);
        result?;
        back?;
        self.last_scan = Some((Instant::now(), scan.took));
        stats.ms = (started.elapsed() + scan.took).as_millis() as u64;
        Ok(stats)
    }

    /// Forgets what a failed refresh did: its uncommitted lines, and the files it recorded as
    /// indexed (back to the saved manifest, whose files the next scan checks again).
    fn roll_back(&mut self) {
        self.batcher.clear();
        self.doomed.clear();
        if let Some(writer) = self.writer.as_mut() {
            let _ = writer.rollback();
        }
        let next_id = self.manifest.next_id;
        self.manifest = read_manifest(&self.dir).unwrap_or(Manifest { format: FORMAT, ..Default::default() });
        self.manifest.next_id = self.manifest.next_id.max(next_id);
        self.paths = self.manifest.files.iter().map(|(rel, s)| (s.id, rel.clone())).collect();
    }

    fn apply_changes(
        &mut self,
        scan: &Scan,
        changed: &[&Seen],
        stats: &mut RefreshStats,
        asks: Option<&Asks>,
    ) -> Result<(), IndexError> {
        // Once a search came, the build commits as it goes (every `every` bytes), so that
        // the next search finds most of what was indexed committed, and scans only the rest:
        // a search never waits for a commit, and a build nobody asks commits once. Where the
        // last such commit left the build: the files from there on are read, not looked up.
        let total: u64 = changed.iter().map(|s| s.size.min(MAX_FILE_BYTES)).sum();
        let every = midway_commit_bytes().max(total / MIDWAY_COMMITS);
        let mut committed = (0, 0u64);
        let mut asked = false;
        for (i, seen) in changed.iter().enumerate() {
            if let Some(asks) = asks {
                if asked && i > committed.0 && stats.bytes_indexed - committed.1 >= every {
                    self.commit()?;
                    // The saved manifest names every file the commit holds: a worker killed
                    // now starts its next build from here, with no lines of unknown files.
                    self.save_manifest()?;
                    committed = (i, stats.bytes_indexed);
                }
                while let Some(ask) = asks.next() {
                    asked = true;
                    self.answer_midway(ask, changed, committed.0);
                }
            }
            self.reindex(&seen.rel, &seen.path, stats)?;
        }
        let present: std::collections::HashSet<&str> = scan.files.iter().map(|s| s.rel.as_str()).collect();
        let gone: Vec<String> =
            self.manifest.files.keys().filter(|k: &&String| !present.contains(String::as_str(k))).cloned().collect();
        for rel in gone {
            self.forget(&rel)?;
            stats.removed += 1;
        }
        if !changed.is_empty() || stats.removed > 0 {
            self.commit()?;
            self.save_manifest()?;
        }
        Ok(())
    }

    /// Reindexes the named files now (they were written through gm). Only files the index
    /// already covers are looked at: a new file is not tracked by git yet, and the next scan
    /// picks it up once it is.
    pub fn update(&mut self, rels: &[String]) -> Result<(), IndexError> {
        if self.last_scan.is_none() {
            return Ok(()); // the first search scans everything anyway
        }
        let mut stats = RefreshStats::default();
        for rel in rels {
            if !self.manifest.files.contains_key(rel) {
                continue;
            }
            let path = self.workspace.join(rel);
            if path.is_file() {
                self.reindex(rel, &path, &mut stats)?;
            } else {
                self.forget(rel)?;
                stats.removed += 1;
            }
        }
        if stats.indexed > 0 || stats.removed > 0 {
            // The manifest is saved by the next scan (see [`Manifest`]): writing all of it
            // for one file would cost more than the reindexing.
            self.commit()?;
        }
        Ok(())
    }

    /// Brings the files the watcher saw change up to date, and reports what it did; `None`
    /// when the changes need the tracked list read again (a new file outside git, where
    /// every file not ignored is covered), which only a full [`LineIndex::refresh`] does.
    /// A path stands for a file or for everything the index holds under it (a directory that
    /// was removed or renamed). A path the index does not hold, in a git repository, is not
    /// tracked yet: `git add` changes git's index, and the watcher says so.
    pub fn update_dirty(&mut self, paths: &BTreeSet<String>) -> Result<Option<RefreshStats>, IndexError> {
        let started = Instant::now();
        let Some(rels) = self.resolve_dirty(paths) else { return Ok(None) };
        let mut stats = RefreshStats { files: rels.len() as u64, ..Default::default() };
        let bytes: u64 = rels
            .iter()
            .filter_map(|rel| std::fs::metadata(self.workspace.join(rel)).ok())
            .map(|m| m.len().min(MAX_FILE_BYTES))
            .sum();
        // A branch switch can touch thousands of files: those are indexed on every core.
        if bytes > BULK_BYTES || rels.len() > BULK_FILES {
            self.use_writer(true)?;
        }
        let result = self.reindex_each(&rels, &mut stats);
        if result.is_err() {
            self.roll_back();
        }
        let back = self.use_writer(false);
        result?;
        back?;
        stats.ms = started.elapsed().as_millis() as u64;
        Ok(Some(stats))
    }

    /// The indexed files the watcher's `paths` stand for (a path may be a directory that went
    /// away); `None` when they need the tracked list read again (see [`Self::update_dirty`]).
    pub fn resolve_dirty(&self, paths: &BTreeSet<String>) -> Option<Vec<String>> {
        let mut rels: Vec<String> = Vec::new();
        for path in paths {
            if self.manifest.files.contains_key(path) {
                rels.push(path.clone());
                continue;
            }
            let under = format!("{path}/");
            let before = rels.len();
            rels.extend(self.manifest.files.keys().filter(|k| k.starts_with(&under)).cloned());
            if rels.len() == before && !self.in_git && self.workspace.join(path).is_file() {
                return None;
            }
        }
        rels.sort();
        rels.dedup();
        Some(rels)
    }

    /// The indexed files under `dirs` (directories the watcher could not watch) that changed
    /// or went since they were indexed, by size and modification time; `None` when one of
    /// them holds a file the index does not know outside git (the tracked list must be read
    /// again, as [`Self::resolve_dirty`] says for a new file).
    pub fn changed_under(&self, dirs: &BTreeSet<String>) -> Option<Vec<String>> {
        let mut changed = Vec::new();
        for dir in dirs {
            let under = format!("{dir}/");
            for (rel, known) in self.manifest.files.iter().filter(|(k, _)| k.starts_with(&under)) {
                let same = std::fs::metadata(self.workspace.join(rel))
                    .is_ok_and(|m| m.is_file() && known.same(m.len(), mtime_ns(&m), gm_actors::sys::inode(&m)));
                if !same {
                    changed.push(rel.clone());
                }
            }
            if !self.in_git
                && crate::watch::files_under(&self.workspace, dir).any(|rel| !self.manifest.files.contains_key(&rel))
            {
                return None;
            }
        }
        Some(changed)
    }

    /// Answers `ask` while [`Self::apply_changes`] builds: the files committed so far from the
    /// index, `changed[committed..]` (not indexed yet, or not committed) and the files the
    /// watcher saw change read as they are now, on every core (the build waits meanwhile).
    fn answer_midway(&self, ask: Ask, changed: &[&Seen], committed: usize) {
        let mut pending: BTreeSet<String> = changed[committed..].iter().map(|s| s.rel.clone()).collect();
        pending.extend(ask.changed);
        let hits =
            self.search_pending_on(&ask.query, ask.limit, ask.prefix.as_deref(), &pending, provisional::all_cores());
        // The asker may have given up; the build goes on.
        let _ = ask.reply.send(hits.map_err(|e| e.to_string()));
    }

    /// The statistics this index scores `query` with (see [`IndexStats`]).
    fn stats_for(&self, searcher: &tantivy::Searcher, query: &str) -> Result<IndexStats, IndexError> {
        let mut docs = 0u64;
        let mut tokens = 0u64;
        for segment in searcher.segment_readers() {
            docs += u64::from(segment.max_doc());
            tokens += segment.inverted_index(self.fields.text)?.total_num_tokens();
        }
        let mut df = Vec::new();
        for word in words(query) {
            df.push(searcher.doc_freq(&tantivy::Term::from_field_text(self.fields.text, &word))?);
        }
        Ok(IndexStats { docs, average: tokens as f32 / docs.max(1) as f32, df })
    }

    fn reindex_each(&mut self, rels: &[String], stats: &mut RefreshStats) -> Result<(), IndexError> {
        for rel in rels {
            let path = self.workspace.join(rel);
            if path.is_file() {
                self.reindex(rel, &path, stats)?;
            } else if self.manifest.files.contains_key(rel) {
                self.forget(rel)?;
                stats.removed += 1;
            }
        }
        if stats.indexed > 0 || stats.removed > 0 {
            self.commit()?;
        }
        Ok(())
    }

    fn forget(&mut self, rel: &str) -> Result<(), IndexError> {
        if let Some(state) = self.manifest.files.remove(rel) {
            self.paths.remove(&state.id);
            self.doomed.push(state.id);
        }
        Ok(())
    }

    fn record(&mut self, rel: &str, state: FileState) {
        self.paths.insert(state.id, rel.to_owned());
        self.manifest.files.insert(rel.to_owned(), state);
    }

    fn reindex(&mut self, rel: &str, path: &Path, stats: &mut RefreshStats) -> Result<(), IndexError> {
        let Ok(meta) = std::fs::metadata(path) else { return Ok(()) };
        if !meta.is_file() {
            return Ok(());
        }
        let (size, mtime_ns, ino) = (meta.len(), mtime_ns(&meta), gm_actors::sys::inode(&meta));
        let known = self.manifest.files.get(rel).copied();
        if known.is_some_and(|k| k.same(size, mtime_ns, ino)) {
            return Ok(());
        }
        if let Some(k) = known {
            self.paths.remove(&k.id);
            self.doomed.push(k.id);
        }
        self.manifest.next_id += 1;
        let id = self.manifest.next_id;
        let mut state = FileState { id, size, mtime_ns, lines: 0, ino };
        if size > MAX_FILE_BYTES {
            stats.skipped_large += 1;
            self.record(rel, state);
            return Ok(());
        }
        let Ok(bytes) = std::fs::read(path) else { return Ok(()) };
        // Binary or not UTF-8: recorded (so it is not read again) but not indexed.
        let contents = match String::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => Arc::new(text),
            _ => {
                stats.skipped_binary += 1;
                self.record(rel, state);
                return Ok(());
            }
        };
        let mut start = 0;
        for (n, line) in contents.split('\n').enumerate() {
            let end = start + line.len();
            if start < contents.len() {
                state.lines += 1;
            }
            let line = line.strip_suffix('\r').unwrap_or(line);
            if has_words(line) {
                if let Some(docs) = self.batcher.push(&contents, loc::pack(id, n as u64 + 1), start, start + line.len())
                {
                    self.send(docs)?;
                }
            }
            start = end + 1;
        }
        stats.indexed += 1;
        stats.bytes_indexed += size;
        self.record(rel, state);
        Ok(())
    }

    fn send(&mut self, docs: Vec<LineDoc>) -> Result<(), IndexError> {
        self.writer()?.run(docs.into_iter().map(UserOperation::Add))?;
        Ok(())
    }

    /// Sends the lines gathered so far.
    fn send_batch(&mut self) -> Result<(), IndexError> {
        match self.batcher.flush() {
            Some(docs) => self.send(docs),
            None => Ok(()),
        }
    }

    fn commit(&mut self) -> Result<(), IndexError> {
        self.send_batch()?;
        if !self.doomed.is_empty() {
            let doomed = loc::FilesLines::new(std::mem::take(&mut self.doomed));
            self.writer()?.delete_query(Box::new(doomed))?;
        }
        let payload = serde_json::to_string(&Payload { next_id: self.manifest.next_id }).unwrap_or_default();
        let mut prepared = self.writer()?.prepare_commit()?;
        prepared.set_payload(&payload);
        prepared.commit()?;
        self.reload()
    }

    fn reload(&mut self) -> Result<(), IndexError> {
        self.meta_seen = meta_stamp(&self.dir);
        self.reader.reload()?;
        Ok(())
    }

    /// Reloads the reader when `meta.json` changed since the last reload: a background merge
    /// finished. One stat per search; reloading itself opens every segment, so only on change.
    pub fn reload_if_changed(&mut self) -> Result<(), IndexError> {
        if meta_stamp(&self.dir) != self.meta_seen {
            self.reload()?;
        }
        Ok(())
    }

    fn save_manifest(&self) -> Result<(), IndexError> {
        let path = self.dir.join("manifest.json");
        let bytes = serde_json::to_vec(&self.manifest).unwrap_or_default();
        gm_actors::fs::replace(&path, &bytes).map_err(|source| IndexError::Io { path, source })
    }

    /// The `limit` best lines for `query`, optionally only in files whose path starts with
    /// `prefix`. A query without any word finds nothing.
    pub fn search(&self, query: &str, limit: usize, prefix: Option<&str>) -> Result<Vec<SearchHit>, IndexError> {
        self.search_with_pending(query, limit, prefix, &BTreeSet::new())
    }

    /// [`Self::search`], where the `pending` files (changed since they were indexed) are read
    /// as they are now and scored with this index's statistics, in place of their indexed
    /// lines: a search right after an edit does not wait for the edit's commit.
    pub fn search_with_pending(
        &self,
        text: &str,
        limit: usize,
        prefix: Option<&str>,
        pending: &BTreeSet<String>,
    ) -> Result<Vec<SearchHit>, IndexError> {
        self.search_pending_on(text, limit, prefix, pending, provisional::all_cores())
    }

    /// [`Self::search_with_pending`], scanning the pending files on `threads` threads.
    fn search_pending_on(
        &self,
        text: &str,
        limit: usize,
        prefix: Option<&str>,
        pending: &BTreeSet<String>,
        threads: usize,
    ) -> Result<Vec<SearchHit>, IndexError> {
        let Some(query) = terms_query(&[self.fields.text], text, IndexRecordOption::WithFreqs) else {
            return Ok(Vec::new());
        };
        let searcher = self.reader.searcher();
        let top = match (prefix, pending.is_empty()) {
            (None, true) => searcher.search(&*query, &TopDocs::with_limit(limit))?,
            _ => {
                // Filtering by file id while collecting keeps the page full, however few of
                // the best lines are under the prefix or outside the pending files.
                let mut allowed = vec![0u64; (self.manifest.next_id / 64 + 1) as usize];
                let kept = self
                    .manifest
                    .files
                    .iter()
                    .filter(|(rel, _)| prefix.is_none_or(|p| rel.starts_with(p)) && !pending.contains(*rel));
                for (_, state) in kept {
                    allowed[(state.id / 64) as usize] |= 1 << (state.id % 64);
                }
                let allowed = Arc::new(allowed);
                let keep = move |id: u64| allowed.get((id / 64) as usize).is_some_and(|w| w & (1 << (id % 64)) != 0);
                let keep = move |at: u64| keep(loc::file(at));
                searcher.search(&*query, &FilterCollector::new(loc::FIELD.into(), keep, TopDocs::with_limit(limit)))?
            }
        };
        let mut columns: HashMap<u32, Column<u64>> = HashMap::new();
        let mut texts: HashMap<&str, String> = HashMap::new();
        let mut hits = Vec::with_capacity(top.len());
        for (score, addr) in top {
            let locs = match columns.entry(addr.segment_ord) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    e.insert(searcher.segment_reader(addr.segment_ord).fast_fields().u64(loc::FIELD)?)
                }
            };
            let Some((id, line)) = locs.first(addr.doc_id).map(loc::unpack) else { continue };
            let Some(rel) = self.paths.get(&id) else { continue };
            let text = texts
                .entry(rel.as_str())
                .or_insert_with(|| std::fs::read_to_string(self.workspace.join(rel)).unwrap_or_default());
            let [before, text, after] = lines_around(text, line);
            hits.push(SearchHit { path: rel.clone(), line, text: text.unwrap_or_default(), score, before, after });
        }
        if pending.is_empty() {
            return Ok(hits);
        }
        let files: Vec<ProvisionalFile> = pending
            .iter()
            .filter_map(|rel| {
                let path = self.workspace.join(rel);
                let meta = std::fs::metadata(&path).ok().filter(std::fs::Metadata::is_file)?;
                Some(ProvisionalFile { rel: rel.clone(), path, size: meta.len() })
            })
            .collect();
        let stats = self.stats_for(&searcher, text)?;
        hits.extend(provisional::search_like_index(&files, text, limit, prefix, &stats, threads));
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| (&a.path, a.line).cmp(&(&b.path, b.line))));
        hits.truncate(limit);
        Ok(hits)
    }
}

/// Lines `n - 1`, `n` and `n + 1` of `text` (1-based), as they are now.
fn lines_around(text: &str, n: u64) -> [Option<String>; 3] {
    let first = n.saturating_sub(2) as usize;
    let mut it = text.lines().skip(first).map(str::to_owned);
    let before = if n >= 2 { it.next() } else { None };
    [before, it.next(), it.next()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn ask(query: &str) -> (Ask, mpsc::Receiver<Result<Vec<SearchHit>, String>>) {
        let (reply, answer) = mpsc::channel();
        (Ask { query: query.into(), limit: 100, prefix: None, changed: BTreeSet::new(), reply }, answer)
    }

    fn places(hits: &[SearchHit]) -> BTreeSet<(String, u64)> {
        hits.iter().map(|h| (h.path.clone(), h.line)).collect()
    }

    #[test]
    fn a_search_during_the_build_is_answered_from_the_committed_files_and_a_scan_of_the_rest() {
        let ws = tempfile::tempdir().expect("tempdir");
        for i in 0..6 {
            let text = format!("fn f{i}() {{\n    let wombat = {i};\n}}\n// nothing here\n");
            std::fs::write(ws.path().join(format!("f{i}.rs")), text).expect("write");
        }
        let dir = ws.path().join(".gm/index");
        let mut index = LineIndex::open(ws.path(), &dir).expect("open");
        // Every search commits what came before it: the later ones read the index for the
        // first files and scan the others.
        MIDWAY_COMMIT_TEST.with(|c| c.set(Some(0)));
        let (from_tx, from) = mpsc::channel();
        let answers: Vec<_> = (0..4)
            .map(|_| {
                let (a, answer) = ask("wombat");
                from_tx.send(a).expect("queued");
                answer
            })
            .collect();
        let asks = Asks { from, open: Arc::new(std::sync::atomic::AtomicBool::new(true)) };
        index.apply_answering(scan(ws.path()).expect("scan"), Some(&asks)).expect("built");
        let built = index.search("wombat", 100, None).expect("search");
        assert_eq!(built.len(), 6);
        for (i, answer) in answers.into_iter().enumerate() {
            let hits = answer.recv().expect("answered").expect("no error");
            assert_eq!(places(&hits), places(&built), "search {i} during the build");
        }
        // Each midway commit saved a manifest that names what it committed.
        assert!(read_manifest(&dir).is_some_and(|m| m.files.len() == 6));
    }

    #[test]
    fn a_search_during_the_build_reads_a_file_changed_since_it_was_indexed() {
        let ws = tempfile::tempdir().expect("tempdir");
        std::fs::write(ws.path().join("a.rs"), "let other = 1;\n").expect("write");
        let dir = ws.path().join(".gm/index");
        let mut index = LineIndex::open(ws.path(), &dir).expect("open");
        index.refresh().expect("first build");
        // A new file for the next build, and, after its scan, an edit of an indexed file,
        // which the watcher's word brings with the question.
        std::fs::write(ws.path().join("b.rs"), "let quokka = 2;\n").expect("write");
        let scanned = scan(ws.path()).expect("scan");
        std::fs::write(ws.path().join("a.rs"), "let quokka = 1;\n").expect("write");
        let (from_tx, from) = mpsc::channel();
        let (mut a, answer) = ask("quokka");
        a.changed.insert("a.rs".into());
        from_tx.send(a).expect("queued");
        let asks = Asks { from, open: Arc::new(std::sync::atomic::AtomicBool::new(true)) };
        index.apply_answering(scanned, Some(&asks)).expect("built");
        let hits = answer.recv().expect("answered").expect("no error");
        assert_eq!(places(&hits), BTreeSet::from([("a.rs".to_owned(), 1), ("b.rs".to_owned(), 1)]));
    }
}
