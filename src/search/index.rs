//! The BM25 line index (tantivy): one document per line of each tracked text file, tokenized
//! by [`CodeTokenizer`], kept in `.gm/index/`.
//!
//! Freshness: the first search builds the index; a search finding the last full scan older
//! than [`RESCAN_AFTER`] answers from the index it has and then rescans (files whose size or
//! mtime changed are reindexed, removed files dropped). Files written through gm's own verbs
//! are reindexed before the next search, so a search right after write_file sees the new text.
//! The index lives in a [`SearchIndex`] actor on a thread of its own, so indexing never holds
//! up the protocol.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, UNIX_EPOCH};

use actix::prelude::*;
use serde::{Deserialize, Serialize};
use tantivy::collector::TopDocs;
use tantivy::query::QueryParser;
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value as _, FAST, INDEXED, STORED,
};
use tantivy::{doc, Index, IndexReader, IndexWriter, ReloadPolicy, TantivyDocument, Term};

use super::tokenizer::CodeTokenizer;
use super::tracked::{tracked_files, Tracked};

pub const RESCAN_AFTER: Duration = Duration::from_secs(2);
/// Files larger than this are not indexed (generated or data files); they are counted.
const MAX_FILE_BYTES: u64 = 8 << 20;
/// Bump when the schema or tokenizer changes: an older index is rebuilt.
const FORMAT: u32 = 2;
/// tantivy splits this between its indexing threads; a larger budget means fewer segments to
/// merge later.
const WRITER_HEAP: usize = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("search index: {0}")]
    Tantivy(#[from] tantivy::TantivyError),
    #[error("search index files in {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Tracked(#[from] super::tracked::TrackedError),
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    next_id: u64,
    files: HashMap<String, FileState>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct FileState {
    id: u64,
    size: u64,
    mtime_ns: u128,
    lines: u64,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    pub path: String,
    pub line: u64,
    pub text: String,
    pub score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
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

pub struct LineIndex {
    workspace: PathBuf,
    dir: PathBuf,
    index: Index,
    writer: IndexWriter,
    reader: IndexReader,
    file: Field,
    line: Field,
    text: Field,
    manifest: Manifest,
    last_scan: Option<Instant>,
}

fn schema() -> (Schema, Field, Field, Field) {
    let mut b = Schema::builder();
    let file = b.add_u64_field("file", INDEXED | STORED | FAST);
    let line = b.add_u64_field("line", STORED);
    // The text is not stored: hits read their line (and its neighbours) from the file, which
    // also shows the line as it is now. That halves the index and its build time.
    let text_options = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default().set_tokenizer("code").set_index_option(IndexRecordOption::WithFreqs),
    );
    let text = b.add_text_field("text", text_options);
    (b.build(), file, line, text)
}

impl LineIndex {
    /// Opens the index in `dir`, or builds an empty one (also when the one there is from an
    /// older format or unreadable).
    pub fn open(workspace: &Path, dir: &Path) -> Result<Self, IndexError> {
        let io = |source| IndexError::Io { path: dir.to_owned(), source };
        let manifest_path = dir.join("manifest.json");
        let manifest: Option<Manifest> = std::fs::read(&manifest_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .filter(|m: &Manifest| m.format == FORMAT);
        let (schema, file, line, text) = schema();
        let existing = manifest.as_ref().and_then(|_| Index::open_in_dir(dir).ok());
        let (index, manifest) = match (existing, manifest) {
            (Some(index), Some(manifest)) => (index, manifest),
            _ => {
                let _ = std::fs::remove_dir_all(dir);
                std::fs::create_dir_all(dir).map_err(io)?;
                let index = Index::create_in_dir(dir, schema)?;
                (index, Manifest { format: FORMAT, ..Default::default() })
            }
        };
        index.tokenizers().register("code", CodeTokenizer);
        let writer = index.writer(WRITER_HEAP)?;
        let reader = index.reader_builder().reload_policy(ReloadPolicy::Manual).try_into()?;
        Ok(Self {
            workspace: workspace.to_owned(),
            dir: dir.to_owned(),
            index,
            writer,
            reader,
            file,
            line,
            text,
            manifest,
            last_scan: None,
        })
    }

    pub fn needs_scan(&self) -> bool {
        self.last_scan.is_none_or(|t| t.elapsed() >= RESCAN_AFTER)
    }

    pub fn is_scanned(&self) -> bool {
        self.last_scan.is_some()
    }

    /// Brings the index up to date with the tracked files.
    pub fn refresh(&mut self) -> Result<RefreshStats, IndexError> {
        let started = Instant::now();
        let files = tracked_files(&self.workspace)?;
        let mut stats = RefreshStats { files: files.len() as u64, ..Default::default() };
        let mut seen = std::collections::HashSet::with_capacity(files.len());
        for f in &files {
            seen.insert(f.rel.clone());
            self.reindex(f, &mut stats)?;
        }
        let gone: Vec<String> = self.manifest.files.keys().filter(|k| !seen.contains(*k)).cloned().collect();
        for rel in gone {
            if let Some(state) = self.manifest.files.remove(&rel) {
                self.writer.delete_term(Term::from_field_u64(self.file, state.id));
                stats.removed += 1;
            }
        }
        if stats.indexed > 0 || stats.removed > 0 {
            self.commit()?;
        }
        self.last_scan = Some(Instant::now());
        stats.ms = started.elapsed().as_millis() as u64;
        Ok(stats)
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
                self.reindex(&Tracked { rel: rel.clone(), path }, &mut stats)?;
            } else if let Some(state) = self.manifest.files.remove(rel) {
                self.writer.delete_term(Term::from_field_u64(self.file, state.id));
                stats.removed += 1;
            }
        }
        if stats.indexed > 0 || stats.removed > 0 {
            self.commit()?;
        }
        Ok(())
    }

    fn reindex(&mut self, f: &Tracked, stats: &mut RefreshStats) -> Result<(), IndexError> {
        let Ok(meta) = std::fs::metadata(&f.path) else { return Ok(()) };
        if !meta.is_file() {
            return Ok(());
        }
        let mtime_ns = meta.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
        let size = meta.len();
        let known = self.manifest.files.get(&f.rel).cloned();
        if known.as_ref().is_some_and(|k| k.size == size && k.mtime_ns == mtime_ns) {
            return Ok(());
        }
        if let Some(k) = &known {
            self.writer.delete_term(Term::from_field_u64(self.file, k.id));
        }
        let id = match &known {
            Some(k) => k.id,
            None => {
                self.manifest.next_id += 1;
                self.manifest.next_id
            }
        };
        if size > MAX_FILE_BYTES {
            stats.skipped_large += 1;
            self.manifest.files.insert(f.rel.clone(), FileState { id, size, mtime_ns, lines: 0 });
            return Ok(());
        }
        let Ok(bytes) = std::fs::read(&f.path) else { return Ok(()) };
        let Ok(text) = std::str::from_utf8(&bytes) else {
            // Binary or not UTF-8: recorded (so it is not read again) but not indexed.
            stats.skipped_binary += 1;
            self.manifest.files.insert(f.rel.clone(), FileState { id, size, mtime_ns, lines: 0 });
            return Ok(());
        };
        if text.contains('\0') {
            stats.skipped_binary += 1;
            self.manifest.files.insert(f.rel.clone(), FileState { id, size, mtime_ns, lines: 0 });
            return Ok(());
        }
        let mut lines = 0;
        for (n, line) in text.lines().enumerate() {
            lines += 1;
            if line.trim().is_empty() {
                continue;
            }
            self.writer.add_document(doc!(self.file => id, self.line => (n + 1) as u64, self.text => line))?;
        }
        stats.indexed += 1;
        stats.bytes_indexed += size;
        self.manifest.files.insert(f.rel.clone(), FileState { id, size, mtime_ns, lines });
        Ok(())
    }

    fn commit(&mut self) -> Result<(), IndexError> {
        self.writer.commit()?;
        self.reader.reload()?;
        let path = self.dir.join("manifest.json");
        let tmp = self.dir.join("manifest.json.tmp");
        let bytes = serde_json::to_vec(&self.manifest).unwrap_or_default();
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|source| IndexError::Io { path, source })
    }

    pub fn search(&self, query: &str, limit: usize, prefix: Option<&str>) -> Result<Vec<SearchHit>, IndexError> {
        let searcher = self.reader.searcher();
        let parser = QueryParser::for_index(&self.index, vec![self.text]);
        let (q, _errors) = parser.parse_query_lenient(query);
        let by_id: HashMap<u64, &str> = self.manifest.files.iter().map(|(rel, s)| (s.id, rel.as_str())).collect();
        // Fetch more than asked when filtering by path, so the filter still fills the page.
        let fetch = if prefix.is_some() { limit * 20 } else { limit };
        let top = searcher.search(&q, &TopDocs::with_limit(fetch.max(1)))?;
        let mut hits = Vec::new();
        let mut files: HashMap<String, Vec<String>> = HashMap::new();
        for (score, addr) in top {
            let doc: TantivyDocument = searcher.doc(addr)?;
            let id = doc.get_first(self.file).and_then(|v| v.as_u64()).unwrap_or(0);
            let Some(rel) = by_id.get(&id) else { continue };
            if prefix.is_some_and(|p| !rel.starts_with(p)) {
                continue;
            }
            let line = doc.get_first(self.line).and_then(|v| v.as_u64()).unwrap_or(0);
            let text = doc.get_first(self.text).and_then(|v| v.as_str()).unwrap_or("").to_owned();
            let lines = files.entry(rel.to_string()).or_insert_with(|| {
                std::fs::read_to_string(self.workspace.join(rel))
                    .map(|t| t.lines().map(str::to_owned).collect())
                    .unwrap_or_default()
            });
            let at = |n: u64| n.checked_sub(1).and_then(|i| lines.get(i as usize)).cloned();
            hits.push(SearchHit {
                path: rel.to_string(),
                line,
                text,
                score,
                before: at(line.saturating_sub(1)),
                after: at(line + 1),
            });
            if hits.len() == limit {
                break;
            }
        }
        Ok(hits)
    }
}

/// The index as an actor on its own thread (start it with `SyncArbiter::start(1, ...)`).
pub struct SearchIndex {
    workspace: PathBuf,
    dir: PathBuf,
    index: Option<LineIndex>,
}

impl SearchIndex {
    pub fn new(workspace: PathBuf, dir: PathBuf) -> Self {
        Self { workspace, dir, index: None }
    }

    fn index(&mut self) -> Result<&mut LineIndex, IndexError> {
        if self.index.is_none() {
            self.index = Some(LineIndex::open(&self.workspace, &self.dir)?);
        }
        self.index
            .as_mut()
            .ok_or_else(|| IndexError::Io { path: self.dir.clone(), source: std::io::Error::other("index not open") })
    }
}

impl Actor for SearchIndex {
    type Context = SyncContext<Self>;
}

/// BM25 search over the lines of the tracked files.
#[derive(Message)]
#[rtype(result = "Result<SearchReply, String>")]
pub struct Search {
    pub query: String,
    pub limit: usize,
    pub path_prefix: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SearchReply {
    pub hits: Vec<SearchHit>,
    /// Set when this search had to build or refresh the index first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refreshed: Option<RefreshStats>,
    pub indexed_files: u64,
}

/// Files written through gm: reindex them before the next search.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Touched(pub Vec<String>);

#[derive(Message)]
#[rtype(result = "()")]
struct Rescan;

impl Handler<Search> for SearchIndex {
    type Result = Result<SearchReply, String>;
    fn handle(&mut self, msg: Search, ctx: &mut SyncContext<Self>) -> Self::Result {
        let index = self.index().map_err(|e| e.to_string())?;
        let mut refreshed = None;
        if !index.is_scanned() {
            refreshed = Some(index.refresh().map_err(|e| e.to_string())?);
        } else if index.needs_scan() {
            // Answer from the index as it is; the rescan runs right after this reply.
            ctx.address().do_send(Rescan);
        }
        let hits = index.search(&msg.query, msg.limit, msg.path_prefix.as_deref()).map_err(|e| e.to_string())?;
        Ok(SearchReply { hits, refreshed, indexed_files: index.manifest.files.len() as u64 })
    }
}

impl Handler<Rescan> for SearchIndex {
    type Result = ();
    fn handle(&mut self, _: Rescan, _: &mut SyncContext<Self>) {
        if let Ok(index) = self.index() {
            if index.needs_scan() {
                if let Err(e) = index.refresh() {
                    eprintln!("gm: search index refresh failed: {e}");
                }
            }
        }
    }
}

impl Handler<Touched> for SearchIndex {
    type Result = ();
    fn handle(&mut self, msg: Touched, _: &mut SyncContext<Self>) {
        if let Some(index) = self.index.as_mut() {
            if let Err(e) = index.update(&msg.0) {
                eprintln!("gm: search index update failed: {e}");
            }
        }
    }
}
