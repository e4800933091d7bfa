//! The SearchIndex actor: the BM25 line index on a thread of its own, answering searches after
//! bringing the files the watcher saw change up to date (or, without a watcher, rescanning the
//! tree in the background when a search finds the last scan old), and reindexing files gm wrote.
//!
//! A big tree with no index yet is not made to wait for the build (17 s for the Linux kernel):
//! the first searches are answered from a scan of the files ([`super::provisional`], marked
//! `provisional`) while the index builds on a thread of its own, which hands it back when done.
//! The first scan takes every core (the build has not started). Later ones are answered by the
//! build itself, between two files: from what it has indexed so far plus a scan of only the
//! files it has not reached, on one core, so that each search costs less than the one before
//! and the build is not starved (before the build has stat'ed the tree, half the cores scan
//! everything). A query asked again while the watcher reports no change is answered from its
//! earlier answer (`reused`), so that a client polling until the index is ready does not make
//! it search again and again. What the watcher reports
//! during the build is held and brought into the index by the first search after it.

use std::collections::{BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};

use actix::prelude::*;
use gm_actors::log_writer::{Event, LogWriter};
use serde::Serialize;
use serde_json::json;

use super::index::{scan, Ask, Asks, IndexError, LineIndex, RefreshStats, Scan, SearchHit, MAX_FILE_BYTES};
use super::provisional::{self, ProvisionalFile};
use super::tracked::tracked_with_git_sizes;
use crate::watch::{Changes, Dirty, Readiness, Subscription};

/// The index as an actor on its own thread (start it with `SyncArbiter::start(1, ...)`).
pub struct SearchIndex {
    workspace: PathBuf,
    dir: PathBuf,
    index: Option<LineIndex>,
    changes: Subscription,
    /// Whether the last search had the watcher's word: when the watcher stops, the next
    /// search scans everything once, since what changed in between is not known.
    watched: bool,
    /// While the tree's first index builds (the index is on the build's thread meanwhile):
    /// the files searches scan, and the answers they gave.
    building: Option<Building>,
    /// What the watcher reported while the index built, for the first search after it.
    held: Dirty,
    /// Where the build's outcome is logged (`search-index` events).
    log: Option<Addr<LogWriter>>,
    /// What the background build did, for the first reply after it.
    built: Option<RefreshStats>,
    /// Files the watcher saw change that are not reindexed yet: searches read them as they
    /// are now (see [`LineIndex::search_with_pending`]) and a [`Flush`] after the reply
    /// reindexes them, so a search right after an edit does not wait for the commit.
    pending: BTreeSet<String>,
}

/// A tree whose first index is building.
struct Building {
    files: Vec<ProvisionalFile>,
    /// Answers already given, by query, limit and prefix: good while nothing changes.
    answers: HashMap<(String, usize, Option<String>), Vec<SearchHit>>,
    /// The build's door for searches: while it is open, the build answers from what it has
    /// indexed plus a scan of the rest ([`LineIndex::apply_answering`]).
    asks: mpsc::Sender<Ask>,
    open: Arc<AtomicBool>,
}

impl Building {
    /// `msg` answered by the build, or `None` when it does not take searches now (still
    /// stat'ing the tree, or done) or failed to answer: the caller scans.
    fn ask(&self, msg: &Search, changed: &BTreeSet<String>) -> Option<Vec<SearchHit>> {
        if !self.open.load(Ordering::Acquire) {
            return None;
        }
        let (reply, answer) = mpsc::channel();
        let ask = Ask {
            query: msg.query.clone(),
            limit: msg.limit,
            prefix: msg.path_prefix.clone(),
            changed: changed.clone(),
            reply,
        };
        self.asks.send(ask).ok()?;
        // Disconnected when the build ended before it saw the question.
        answer.recv().ok()?.ok()
    }
}

/// At most this many changed files are read at search time rather than reindexed first.
const PENDING_FILES: usize = 64;
/// And at most this many bytes of them.
const PENDING_BYTES: u64 = 8 << 20;

/// Trees up to this many bytes are indexed before the first search answers (about half a
/// second of building); bigger ones get a provisional answer. `GM_SEARCH_SYNC_BYTES` sets it.
const SYNC_BUILD_BYTES: u64 = 32 << 20;

fn sync_build_bytes() -> u64 {
    std::env::var("GM_SEARCH_SYNC_BYTES").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(SYNC_BUILD_BYTES)
}

impl SearchIndex {
    pub fn new(workspace: PathBuf, dir: PathBuf, changes: Subscription, log: Option<Addr<LogWriter>>) -> Self {
        Self {
            workspace,
            dir,
            index: None,
            changes,
            watched: false,
            building: None,
            held: Dirty::default(),
            log,
            built: None,
            pending: BTreeSet::new(),
        }
    }

    /// A search while the index builds: answered from a scan of the files on half the cores,
    /// or from an earlier scan of the same query when the watcher says nothing changed since.
    fn search_while_building(&mut self, msg: &Search) -> Option<SearchReply> {
        let building = self.building.as_mut()?;
        // Every change is held for after the build; any change makes earlier answers stale.
        let trusted = match self.changes.changes() {
            Changes::Watched(dirty) => {
                if dirty.changed() {
                    building.answers.clear();
                }
                let unwatched = !dirty.unwatched.is_empty();
                self.held.merge(dirty);
                !unwatched
            }
            Changes::Unwatched(_) => {
                // What changed is not known: the first search after the build rescans.
                self.held.all = true;
                building.answers.clear();
                false
            }
        };
        let key = (msg.query.clone(), msg.limit, msg.path_prefix.clone());
        let reply = |hits, reused| SearchReply {
            hits,
            provisional: true,
            reused,
            refreshed: None,
            indexed_files: 0,
            fresh: "scan",
        };
        if let Some(hits) = building.answers.get(&key).filter(|_| trusted) {
            return Some(reply(hits.clone(), true));
        }
        // Files changed during the build may be indexed as they were: they are read now.
        let changed = if self.held.all { BTreeSet::new() } else { self.held.paths.clone() };
        let hits = building.ask(msg, &changed).unwrap_or_else(|| {
            let threads = (provisional::all_cores() / 2).max(1);
            provisional::search_on(&building.files, &msg.query, msg.limit, msg.path_prefix.as_deref(), threads)
        });
        if trusted {
            building.answers.insert(key, hits.clone());
        }
        Some(reply(hits, false))
    }

    /// The first search of a big tree with no index: answered from a scan of the files as
    /// they are now, while the index builds in the background. It does not wait for the
    /// watcher's first walk (a few hundred milliseconds on the kernel), since it reads the
    /// files now; what stats the files for the index waits for it. `None`: the tree has an
    /// index, or is small enough to index before answering (the caller goes on).
    fn first_answer(&mut self, msg: &Search, ctx: &SyncContext<Self>) -> Result<Option<SearchReply>, String> {
        let workspace = self.workspace.clone();
        if !self.index().map_err(|e| e.to_string())?.is_unbuilt() {
            return Ok(None);
        }
        let ready = self.changes.readiness();
        // In git, the sizes git recorded are enough to answer; elsewhere the files are
        // stat'ed now.
        let (files, scan) = match tracked_with_git_sizes(&workspace).map_err(|e| e.to_string())? {
            Some(tracked) => {
                let files =
                    tracked.into_iter().map(|(t, size)| ProvisionalFile { rel: t.rel, path: t.path, size }).collect();
                (files, None)
            }
            None => {
                ready.wait();
                let scan = scan(&workspace).map_err(|e| e.to_string())?;
                let files: Vec<ProvisionalFile> = scan
                    .files()
                    .map(|(rel, path, size)| ProvisionalFile { rel: rel.to_owned(), path: path.to_owned(), size })
                    .collect();
                (files, Some(scan))
            }
        };
        let bytes: u64 = files.iter().map(|f: &ProvisionalFile| f.size.min(MAX_FILE_BYTES)).sum();
        if bytes <= sync_build_bytes() {
            return Ok(None);
        }
        // Answered before the build starts: the build takes both cores.
        let hits = provisional::search(&files, &msg.query, msg.limit, msg.path_prefix.as_deref());
        match self.build_in_background(scan, files, ready.clone(), ctx) {
            Ok(()) => {
                self.watched = !ready.failed();
                // The same query asked again during the build gets this answer, while the
                // watcher reports no change (the next search asks it).
                if let Some(building) = self.building.as_mut() {
                    let key = (msg.query.clone(), msg.limit, msg.path_prefix.clone());
                    building.answers.insert(key, hits.clone());
                }
                Ok(Some(SearchReply {
                    hits,
                    provisional: true,
                    reused: false,
                    refreshed: None,
                    indexed_files: 0,
                    fresh: "scan",
                }))
            }
            Err(scan) => {
                // No thread for the build: it is built here, and the caller answers from it.
                let scan = scan.unwrap_or_else(|| scan_again(&workspace));
                let index = self.index().map_err(|e| e.to_string())?;
                index.apply(scan).map_err(|e| e.to_string())?;
                Ok(None)
            }
        }
    }

    fn log(&self, fields: serde_json::Value) {
        if let Some(log) = &self.log {
            log.do_send(Event::new("search-index", fields));
        }
    }

    /// Builds the index on a thread of its own from `scan` (made there when `None`, once the
    /// watcher's first watches are in place, so that no change after it is missed: stat'ing
    /// every file is the build's work, not the first answer's); the index comes back as
    /// [`Built`]. Returns the scan back when the thread cannot start (the caller builds in
    /// place).
    fn build_in_background(
        &mut self,
        scan: Option<Scan>,
        files: Vec<ProvisionalFile>,
        ready: Readiness,
        ctx: &SyncContext<Self>,
    ) -> Result<(), Option<Scan>> {
        let Some(index) = self.index.take() else { return Err(scan) };
        let addr = ctx.address();
        let workspace = self.workspace.clone();
        let (tx, rx) = mpsc::channel::<LineIndex>();
        let (asks, from) = mpsc::channel::<Ask>();
        let open = Arc::new(AtomicBool::new(false));
        let door = Asks { from, open: open.clone() };
        let spawned = std::thread::Builder::new().name("gm-index-build".into()).spawn(move || {
            let Ok(mut index) = rx.recv() else { return };
            let scanned = match scan {
                Some(scan) => Ok(scan),
                None => {
                    ready.wait();
                    self::scan(&workspace).map_err(|e| e.to_string())
                }
            };
            let result = scanned.and_then(|scan| {
                door.open.store(true, Ordering::Release);
                let result = index.apply_answering(scan, Some(&door)).map_err(|e| e.to_string());
                door.open.store(false, Ordering::Release);
                result
            });
            // Searches that came in as the door closed: answered from the whole index (or,
            // when the build failed, left to the asker's own scan).
            while let Ok(ask) = door.from.try_recv() {
                if result.is_ok() {
                    let hits = index.search_with_pending(&ask.query, ask.limit, ask.prefix.as_deref(), &ask.changed);
                    let _ = ask.reply.send(hits.map_err(|e| e.to_string()));
                }
            }
            addr.do_send(Built { index, result });
        });
        match spawned {
            Ok(_) => {
                // The thread owns the scan now; the index follows it.
                let _ = tx.send(index);
                self.building = Some(Building { files, answers: HashMap::new(), asks, open });
                self.log(json!({ "state": "building" }));
                Ok(())
            }
            Err(_) => {
                self.index = Some(index);
                Err(Some(scan_again(&self.workspace)))
            }
        }
    }

    /// The index folder deleted under a running worker (someone cleaning `.gm/`): the open
    /// index, whose files and lock are gone, is dropped, and the next use opens a new one and
    /// builds it, instead of failing on the missing lock file. A build in progress is left to
    /// finish (its own failure says what happened).
    fn reopen_if_deleted(&mut self) {
        if self.index.is_some() && self.building.is_none() && !self.dir.join("meta.json").exists() {
            self.index = None;
            self.pending.clear();
            self.log(serde_json::json!({ "state": "reopened", "why": "the index folder was deleted" }));
        }
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
    /// Set while the tree's first index builds: the hits come from a scan of the files,
    /// ranked by BM25 with the statistics of that scan; later searches use the index.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub provisional: bool,
    /// A provisional answer given again: the same query was scanned earlier in the build and
    /// the watcher reports no change since.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reused: bool,
    /// Set when this search had to build or refresh the index first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refreshed: Option<RefreshStats>,
    pub indexed_files: u64,
    /// How this answer was kept fresh: `watch` (every change made before the call is in it)
    /// or `rescan` (no watcher: every tracked file was checked by size, mtime and inode before
    /// this answer).
    pub fresh: &'static str,
}

/// Files written through gm: reindex them before the next search.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Touched(pub Vec<String>);

/// Reindex the pending files now.
#[derive(Message)]
#[rtype(result = "()")]
struct Flush;

impl Handler<Flush> for SearchIndex {
    type Result = ();
    fn handle(&mut self, _: Flush, _: &mut SyncContext<Self>) {
        let pending = std::mem::take(&mut self.pending);
        let Some(index) = self.index.as_mut().filter(|_| !pending.is_empty()) else { return };
        if let Err(e) = index.update_dirty(&pending) {
            // They are read from disk at the next search instead; the watcher saw them.
            gm_actors::stderr_line!("gm: reindexing changed files failed: {e}");
            self.pending = pending;
        }
    }
}

/// The background build is done: the index comes back.
#[derive(Message)]
#[rtype(result = "()")]
struct Built {
    index: LineIndex,
    result: Result<RefreshStats, String>,
}

/// A scan for the rare path where a thread cannot start: an empty one if even that fails.
fn scan_again(workspace: &std::path::Path) -> Scan {
    scan(workspace).unwrap_or_else(|_| Scan::empty())
}

impl Handler<Search> for SearchIndex {
    type Result = Result<SearchReply, String>;
    fn handle(&mut self, msg: Search, ctx: &mut SyncContext<Self>) -> Self::Result {
        if let Some(reply) = self.search_while_building(&msg) {
            return Ok(reply);
        }
        self.reopen_if_deleted();
        if let Some(reply) = self.first_answer(&msg, ctx)? {
            return Ok(reply);
        }
        // Asked before the index is touched, so that every change made before this call is in;
        // with what was held while the index built.
        let changes = match self.changes.changes() {
            Changes::Watched(dirty) => {
                let mut held = std::mem::take(&mut self.held);
                held.merge(dirty);
                Changes::Watched(held)
            }
            unwatched => unwatched,
        };
        let was_watched = self.watched;
        let workspace = self.workspace.clone();
        let mut pending = std::mem::take(&mut self.pending);
        let index = self.index.as_mut().ok_or("the search index is not open")?;
        let first = !index.is_scanned();
        let (mut refreshed, fresh) = match changes {
            Changes::Watched(mut dirty) => {
                // What the watcher could not watch is checked here, by size and mtime.
                if !(first || dirty.all || dirty.tracked || dirty.unwatched.is_empty()) {
                    match index.changed_under(&dirty.unwatched) {
                        Some(changed) => dirty.paths.extend(changed),
                        None => dirty.all = true,
                    }
                }
                let refreshed = if first || dirty.all || dirty.tracked {
                    pending.clear(); // a full refresh reindexes them too
                    Some(index.refresh().map_err(|e| e.to_string())?)
                } else if dirty.paths.is_empty() {
                    None
                } else {
                    match index.resolve_dirty(&dirty.paths) {
                        Some(rels) => {
                            pending.extend(rels);
                            let bytes: u64 = pending
                                .iter()
                                .filter_map(|rel| std::fs::metadata(workspace.join(rel)).ok())
                                .map(|m| m.len())
                                .sum();
                            if pending.len() > PENDING_FILES || bytes > PENDING_BYTES {
                                let stats = index.update_dirty(&std::mem::take(&mut pending));
                                stats.map_err(|e| e.to_string())?
                            } else {
                                None
                            }
                        }
                        None => {
                            pending.clear();
                            Some(index.refresh().map_err(|e| e.to_string())?)
                        }
                    }
                };
                (refreshed, "watch")
            }
            Changes::Unwatched(_) => {
                // No watcher (none could be had, or it lost its events): nothing says what
                // changed, so every tracked file is checked now, by size, mtime and inode,
                // before the answer. A background rescan every few seconds answered stale
                // right after an edit made outside gm; fresh beats fast.
                let _ = was_watched;
                pending.clear(); // a full refresh reindexes them too
                let stats = index.refresh().map_err(|e| e.to_string())?;
                let changed = first || stats.indexed > 0 || stats.removed > 0;
                (changed.then_some(stats), "rescan")
            }
        };
        // A tree small enough to index before answering: this was its first build.
        if let (true, Some(stats), Some(t)) = (first, &refreshed, crate::telemetry::get()) {
            t.index_built(stats.ms as f64 / 1000.0);
        }
        index.reload_if_changed().map_err(|e| e.to_string())?;
        let hits = index
            .search_with_pending(&msg.query, msg.limit, msg.path_prefix.as_deref(), &pending)
            .map_err(|e| e.to_string())?;
        if !pending.is_empty() {
            // Reindexed after this reply, before the next message is handled.
            ctx.address().do_send(Flush);
        }
        self.pending = pending;
        if refreshed.is_none() {
            refreshed = self.built.take();
        }
        let index = self.index().map_err(|e| e.to_string())?;
        let reply = SearchReply {
            hits,
            provisional: false,
            reused: false,
            refreshed,
            indexed_files: index.indexed_files(),
            fresh,
        };
        self.watched = fresh == "watch";
        Ok(reply)
    }
}

impl Handler<Built> for SearchIndex {
    type Result = ();
    fn handle(&mut self, msg: Built, _: &mut SyncContext<Self>) {
        self.building = None;
        match msg.result {
            Ok(stats) => {
                let mut fields = serde_json::to_value(&stats).unwrap_or_else(|_| json!({}));
                fields["state"] = json!("built");
                self.log(fields);
                if let Some(t) = crate::telemetry::get() {
                    t.index_built(stats.ms as f64 / 1000.0);
                }
                self.index = Some(msg.index);
                self.built = Some(stats);
            }
            // The next search opens the index again and starts over.
            Err(e) => {
                self.log(json!({ "state": "failed", "why": e }));
                gm_actors::stderr_line!("gm: building the search index failed: {e}");
            }
        }
    }
}

impl Handler<Touched> for SearchIndex {
    type Result = ();
    fn handle(&mut self, msg: Touched, _: &mut SyncContext<Self>) {
        if let Some(index) = self.index.as_mut() {
            if let Err(e) = index.update(&msg.0) {
                gm_actors::stderr_line!("gm: search index update failed: {e}");
            }
        }
    }
}
