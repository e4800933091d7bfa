//! Starting gm: the actors and the server for `gm serve`, and the one-shot CLI verb runner.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use actix::prelude::*;
use gm_actors::file_locks::FileLocks;
use gm_actors::jobs::{Jobs, TakeStartupEvents};
use gm_actors::js_engine::JsEngines;
use gm_actors::log_writer::{Event, LogError, LogWriter};
use gm_actors::scheduler::Scheduler;
use gm_actors::sys;
use gm_actors::transport::{spawn_stdin_reader, StdoutWriter};
use serde_json::{json, Value};

use crate::app::App;
use crate::blobs::Blobs;
use crate::children::Children;
use crate::gitignore;
use crate::mcp_config;
use crate::run_state::{Loaded, RunState, RunStateFile};
use crate::search::calls::CallIndex;
use crate::search::index_actor::SearchIndex;
use crate::secrets::SecretsFile;
use crate::server::surface::Surface;
use crate::server::{Server, Stop};
use crate::skills::Skills;
use crate::verbs::{self, Ctx, Shared, VerbError};
use crate::watch::{Status as WatchStatus, Watcher};

pub const DEFAULT_MAX_INFLIGHT: usize = 8;
/// The longest JSON-RPC line gm reads; longer lines are dropped unread and answered with an error.
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 << 20;
pub const DEFAULT_PAGE_SIZE: usize = 100;
/// JS engine threads: a body busy in a tight loop holds one, the others keep serving.
pub const JS_ENGINES: usize = 3;

#[derive(Debug, Clone)]
pub struct ServeOptions {
    pub workspace: PathBuf,
    pub surface: Surface,
    pub max_inflight: usize,
    pub max_line_bytes: usize,
    pub page_size: usize,
    /// Steps a new run may take unless its task sets another budget.
    pub step_budget: u64,
    /// `--mcp-config`: a third layer of child server config.
    pub mcp_config: Option<PathBuf>,
    /// Under the relay: how many workers it started before this one.
    pub worker: Option<u32>,
}

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("workspace {path}: {source}")]
    Workspace { path: PathBuf, source: std::io::Error },
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("cannot start the stdin reader: {0}")]
    Stdin(std::io::Error),
    #[error("the actor system failed: {0}")]
    System(std::io::Error),
    #[error(transparent)]
    McpConfig(#[from] crate::mcp_config::ConfigError),
}

pub fn workspace(path: &Path) -> Result<PathBuf, ServeError> {
    let canonical =
        std::fs::canonicalize(path).map_err(|source| ServeError::Workspace { path: path.to_owned(), source })?;
    if !canonical.is_dir() {
        let source = std::io::Error::new(std::io::ErrorKind::NotADirectory, "not a directory");
        return Err(ServeError::Workspace { path: path.to_owned(), source });
    }
    Ok(canonical)
}

/// The search index, on a thread of its own (indexing is blocking work).
fn start_search(workspace: &Path, state_dir: &Path, watcher: &Watcher) -> Addr<SearchIndex> {
    let (workspace, dir, watcher) = (workspace.to_owned(), state_dir.join("index"), watcher.clone());
    SyncArbiter::start(1, move || SearchIndex::new(workspace.clone(), dir.clone(), watcher.subscribe()))
}

/// The workspace watcher, which tells search and callers what changed; how it went is a
/// `watch` event.
fn start_watcher(workspace: &Path, state_dir: &Path, log: Addr<LogWriter>) -> Watcher {
    Watcher::start(workspace, state_dir, move |status| {
        let fields = match status {
            WatchStatus::Watching { backend, dirs, ms } => {
                json!({ "state": "watching", "backend": backend, "dirs": dirs, "ms": ms })
            }
            WatchStatus::Failed { why } => json!({ "state": "failed", "why": why, "then": "searches rescan" }),
        };
        log.do_send(Event::new("watch", fields));
    })
}

/// The call-site index, on a thread of its own (parsing is blocking work).
fn start_calls(workspace: &Path, state_dir: &Path, watcher: &Watcher) -> Addr<CallIndex> {
    let (workspace, state_dir, watcher) = (workspace.to_owned(), state_dir.to_owned(), watcher.clone());
    SyncArbiter::start(1, move || CallIndex::new(workspace.clone(), state_dir.clone(), watcher.subscribe()))
}

/// How often a long call with a progressToken reports progress (`GM_PROGRESS_INTERVAL_MS`
/// sets another interval, for tests).
pub const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// A duration in milliseconds from the environment, when set to a positive number.
fn env_millis(name: &str) -> Option<std::time::Duration> {
    let ms: u64 = std::env::var(name).ok()?.trim().parse().ok()?;
    (ms > 0).then(|| std::time::Duration::from_millis(ms))
}

/// Prunes the blob store on a thread of its own, logging what it removed.
fn prune_blobs(blobs: Arc<Blobs>, log: Addr<LogWriter>) {
    let spawned = std::thread::Builder::new().name("gm-blobs".into()).spawn(move || {
        let (files, bytes) = blobs.prune(crate::blobs::MAX_BYTES, crate::blobs::KEEP_BYTES);
        if files > 0 {
            log.do_send(Event::new("blobs", json!({ "pruned": files, "bytes": bytes })));
        }
    });
    if let Err(e) = spawned {
        eprintln!("gm: cannot start pruning the blob store: {e}");
    }
}

/// A run id: UTC start time plus a random suffix, sortable and unique.
pub fn new_run_id() -> String {
    let now = time::OffsetDateTime::now_utc();
    let stamp =
        now.format(time::macros::format_description!("[year][month][day]T[hour][minute][second]Z")).unwrap_or_default();
    let id = uuid::Uuid::new_v4().simple().to_string();
    format!("{stamp}-{}", &id[..8])
}

/// Serves MCP on stdio until stdin closes or a signal stops it; returns the exit code.
pub fn serve(opts: ServeOptions) -> Result<i32, ServeError> {
    // A worker inherits the relay's small-pages setting; its heaps are the big ones.
    sys::huge_pages(true);
    let workspace = workspace(&opts.workspace)?;
    // A config the user named must be there; the other layers only say what is wrong.
    let mcp_config = mcp_config::load(&workspace, opts.mcp_config.as_deref())?;
    let system = System::new();
    let started: Result<(), ServeError> = system.block_on(async {
        let state_dir = workspace.join(".gm");
        // An unfinished run left by an earlier gm is continued; otherwise a new one starts.
        let run_file = RunStateFile::new(&state_dir);
        let (run, resumed, run_state_error) = match run_file.load() {
            Loaded::Unfinished(run) => (run, true, None),
            Loaded::None => (RunState::new(new_run_id(), opts.step_budget), false, None),
            Loaded::Unreadable(why) => (RunState::new(new_run_id(), opts.step_budget), false, Some(why)),
        };
        let (writer, report) = LogWriter::open(&state_dir.join("log.jsonl"), &run.run_id)?;
        let log = writer.start();
        let skills = Arc::new(Skills::locate());
        let jobs = Jobs::new(state_dir.join("jobs")).start();
        let watcher = start_watcher(&workspace, &state_dir, log.clone());
        let ctx = Ctx::new(Shared {
            search: start_search(&workspace, &state_dir, &watcher),
            calls: start_calls(&workspace, &state_dir, &watcher),
            workspace: workspace.clone().into(),
            secrets: Arc::new(SecretsFile::new(state_dir.join("secrets.env"))),
            state_dir: state_dir.clone().into(),
            locks: FileLocks::default().start(),
            log: Some(log.clone()),
            skills: skills.clone(),
            jobs: jobs.clone(),
            scheduler: Scheduler::new(opts.max_inflight),
            blobs: Arc::new(Blobs::new(&state_dir)),
            children: Children::start(&mcp_config, &workspace, log.clone(), mcp_config::depth()),
        });
        log.do_send(Event::new(
            "start",
            json!({
                "pid": std::process::id(),
                "version": env!("CARGO_PKG_VERSION"),
                "exe": std::env::current_exe().ok(),
                "workspace": workspace,
                "surface": opts.surface.as_str(),
                "relay": opts.worker.map(|restarts| json!({ "restarts": restarts })),
                "maxInflight": opts.max_inflight,
                "skills": skills.source(),
                "previousSeq": report.last_seq,
                "repairedBytes": report.repaired_bytes,
                "resumed": resumed.then(|| json!({ "step": run.step, "task": run.task })),
            }),
        ));
        if let Some(why) = run_state_error {
            log.do_send(Event::new(
                "run-state",
                json!({ "state": "unreadable", "error": why, "then": "a new run started" }),
            ));
        }
        if let Some(fields) = gitignore::own_folder_event(&state_dir) {
            log.do_send(Event::new("gitignore", fields));
        }
        // Jobs started by an earlier gm: adopted if still running, settled if they ended.
        for event in jobs.send(TakeStartupEvents).await.unwrap_or_default() {
            log.do_send(Event::new("job", serde_json::to_value(&event).unwrap_or_default()));
        }
        prune_blobs(ctx.blobs.clone(), log.clone());
        // A newer release is fetched and staged off the calls' path; the one-shot CLI does not.
        crate::update::start(log.clone());
        if report.repaired_bytes > 0 {
            eprintln!("gm: cut a torn last line ({} bytes) from the run log", report.repaired_bytes);
        }
        // The JS engines start when a connection opens the read gate (run_code is near), or
        // at the first body: an idle server or the tools surface does not pay for them.
        let js = JsEngines::new(JS_ENGINES);
        let app = App {
            ctx,
            surface: opts.surface,
            run_file,
            step_budget: opts.step_budget,
            js,
            out: StdoutWriter::default().start(),
            max_line_bytes: opts.max_line_bytes,
            page_size: opts.page_size.max(1),
            progress_every: env_millis("GM_PROGRESS_INTERVAL_MS").unwrap_or(PROGRESS_EVERY),
        };
        let server = Server::new(app, run, resumed).start();
        spawn_stdin_reader(opts.max_line_bytes, server.clone().recipient()).map_err(ServeError::Stdin)?;
        // SIGINT, SIGTERM and SIGHUP end what gm started, then gm.
        actix::spawn(async move {
            match sys::stop_signal().await {
                Ok(signal) => server.do_send(Stop::Signal(signal)),
                Err(e) => eprintln!("gm: cannot watch for signals: {e}"),
            }
        });
        Ok(())
    });
    let code = match started {
        Ok(()) => system.run_with_code().map_err(ServeError::System),
        Err(e) => Err(e),
    };
    // stdin's flags are shared with the parent: give them back however gm stops.
    sys::restore_stdin();
    code
}

/// Runs one verb in `workspace` and returns its result or its structured error.
pub fn run_verb(workspace_dir: &Path, name: &str, args: Value) -> Result<Value, Value> {
    let workspace =
        workspace(workspace_dir).map_err(|e| json!({ "code": "invalid_args", "message": e.to_string() }))?;
    let system = System::new();
    system.block_on(async move {
        let state_dir = workspace.join(".gm");
        let ctx = Ctx::new(Shared {
            search: start_search(&workspace, &state_dir, &Watcher::off("the one-shot CLI does not watch")),
            calls: start_calls(&workspace, &state_dir, &Watcher::off("the one-shot CLI does not watch")),
            secrets: Arc::new(SecretsFile::new(state_dir.join("secrets.env"))),
            jobs: Jobs::new(state_dir.join("jobs")).start(),
            state_dir: state_dir.clone().into(),
            workspace: workspace.into(),
            locks: FileLocks::default().start(),
            log: None,
            skills: Arc::new(Skills::locate()),
            scheduler: Scheduler::new(DEFAULT_MAX_INFLIGHT),
            blobs: Arc::new(Blobs::new(&state_dir)),
            children: Children::none(),
        });
        let args = verbs::to_json(&args).map_err(|e| e.to_json())?;
        let called = verbs::call(ctx, name, &args).await;
        // A verb that made gm's folder (spilled output, rows, the wiki) leaves it ignoring itself.
        let _ = gitignore::ignore_own_folder(&state_dir);
        called.result.map(|json| verbs::to_value(&json)).map_err(|e: VerbError| e.to_json())
    })
}
