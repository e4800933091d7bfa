//! The SearchIndex actor: the BM25 line index on a thread of its own, answering searches,
//! reindexing files gm wrote, and rescanning the tree in the background when a search finds the
//! last scan old.

use std::path::PathBuf;

use actix::prelude::*;
use serde::Serialize;

use super::index::{scan, IndexError, LineIndex, RefreshStats, Scan, SearchHit};

/// The index as an actor on its own thread (start it with `SyncArbiter::start(1, ...)`).
pub struct SearchIndex {
    workspace: PathBuf,
    dir: PathBuf,
    index: Option<LineIndex>,
    scanning: bool,
}

impl SearchIndex {
    pub fn new(workspace: PathBuf, dir: PathBuf) -> Self {
        Self { workspace, dir, index: None, scanning: false }
    }

    fn index(&mut self) -> Result<&mut LineIndex, IndexError> {
        if self.index.is_none() {
            self.index = Some(LineIndex::open(&self.workspace, &self.dir)?);
        }
        self.index
            .as_mut()
            .ok_or_else(|| IndexError::Io { path: self.dir.clone(), source: std::io::Error::other("index not open") })
    }

    /// Starts a scan on a thread of its own; its result comes back as [`Scanned`].
    fn scan_in_background(&mut self, ctx: &SyncContext<Self>) {
        if self.scanning {
            return;
        }
        self.scanning = true;
        let addr = ctx.address();
        let workspace = self.workspace.clone();
        let spawned = std::thread::Builder::new().name("gm-index-scan".into()).spawn(move || {
            // Lowered so that the scan gives way to the calls being served and to reindexing.
            gm_actors::sys::lower_thread_priority();
            addr.do_send(Scanned(scan(&workspace).map_err(|e| e.to_string())));
        });
        if spawned.is_err() {
            self.scanning = false;
        }
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
struct Scanned(Result<Scan, String>);

impl Handler<Search> for SearchIndex {
    type Result = Result<SearchReply, String>;
    fn handle(&mut self, msg: Search, ctx: &mut SyncContext<Self>) -> Self::Result {
        let index = self.index().map_err(|e| e.to_string())?;
        let mut refreshed = None;
        if !index.is_scanned() {
            refreshed = Some(index.refresh().map_err(|e| e.to_string())?);
        }
        index.reload_if_changed().map_err(|e| e.to_string())?;
        let hits = index.search(&msg.query, msg.limit, msg.path_prefix.as_deref()).map_err(|e| e.to_string())?;
        let reply = SearchReply { hits, refreshed, indexed_files: index.indexed_files() };
        if index.needs_scan() {
            self.scan_in_background(ctx);
        }
        Ok(reply)
    }
}

impl Handler<Scanned> for SearchIndex {
    type Result = ();
    fn handle(&mut self, msg: Scanned, _: &mut SyncContext<Self>) {
        self.scanning = false;
        let result = msg.0.map_err(|e| e.to_string()).and_then(|scan| {
            let index = self.index().map_err(|e| e.to_string())?;
            index.apply(scan).map_err(|e| e.to_string())
        });
        if let Err(e) = result {
            eprintln!("gm: search index refresh failed: {e}");
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
