//! Starting gm: the actors and the server for `gm serve`, and the one-shot CLI verb runner.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use gm_actors::file_locks::FileLocks;
use gm_actors::jobs::{Jobs, TakeStartupEvents};
use gm_actors::js_engine::JsEngines;
use gm_actors::log_writer::{Event, LogError, LogWriter, WriteOut};
use gm_actors::scheduler::Scheduler;
use gm_actors::sys;
use gm_actors::transport::{spawn_stdin_reader, StdoutWriter};
use serde_json::{json, Value};

use crate::app::App;
use crate::blobs::Blobs;
use crate::children::Children;
use crate::gitignore;
use crate::mcp_config;
use crate::run_state::{new_run_id, new_session_id, RunStore};
use crate::search::calls::CallIndex;
use crate::search::index_actor::SearchIndex;
use crate::secrets::SecretsFile;
use crate::server::surface::Surface;
use crate::skills::Skills;
use crate::verbs::{self, Ctx, Shared, VerbError};
use crate::watch::{Status as WatchStatus, Unwatched, Watcher};
use crate::worker::hello::{Build, Hello, WorkerSettings};
use crate::worker::paths::{self, Files};
use crate::worker::{OpenStdio, Stop, Worker, WorkerSpec};

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
    pub mode: Mode,
    /// The box chosen by the flags and `~/.gmnew/config.json`.
    pub sandbox: crate::sandbox_config::SandboxSettings,
    /// The reply budget: `--max-result-bytes`, `--max-result-bytes-ceiling` or their variables.
    pub budget: crate::budget::Limits,
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
    #[error("workspace {} is already served by a gm worker{}: `gm status` shows it; a relay (`gm serve` without --no-relay) joins it", workspace.display(), pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    AlreadyServed { workspace: PathBuf, pid: Option<u64> },
    #[error("the worker's socket: {0}")]
    Socket(std::io::Error),
    #[error("cannot open the session: {0}")]
    Session(String),
    #[error(transparent)]
    State(#[from] gm_actors::state_file::StateFileError),
    #[error("--sandbox {mode}: {source}")]
    Sandbox { mode: &'static str, source: gm_actors::sandbox::SandboxError },
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

/// The search index, on a thread of its own (indexing is blocking work); a background build's
/// outcome is logged.
fn start_search(
    workspace: &Path,
    state_dir: &Path,
    watcher: &Watcher,
    log: Option<Addr<LogWriter>>,
) -> Addr<SearchIndex> {
    let (workspace, dir, watcher) = (workspace.to_owned(), state_dir.join("index"), watcher.clone());
    SyncArbiter::start(1, move || SearchIndex::new(workspace.clone(), dir.clone(), watcher.subscribe(), log.clone()))
}

/// The workspace watcher, which tells search and callers what changed; how it went is a
/// `watch` event.
fn start_watcher(workspace: &Path, state_dir: &Path, log: Addr<LogWriter>) -> Watcher {
    Watcher::start(workspace, state_dir, move |status| {
        let unwatched_json =
            |u: &[Unwatched]| -> Vec<Value> { u.iter().map(|u| json!({ "dir": u.dir, "why": u.why })).collect() };
        let fields = match status {
            WatchStatus::Watching { backend, dirs, ms, unwatched } if unwatched.is_empty() => {
                json!({ "state": "watching", "backend": backend, "dirs": dirs, "ms": ms })
            }
            WatchStatus::Watching { backend, dirs, ms, unwatched } => json!({
                "state": "watching", "backend": backend, "dirs": dirs, "ms": ms,
                "unwatched": unwatched_json(&unwatched), "then": "searches check these directories' files at each call",
            }),
            WatchStatus::Skipped(u) => json!({
                "state": "watching", "unwatched": unwatched_json(std::slice::from_ref(&u)),
                "then": "searches check these directories' files at each call",
            }),
            WatchStatus::Failed { why } => json!({ "state": "failed", "why": why, "then": "searches rescan" }),
            WatchStatus::Released { idle_ms } => json!({
                "state": "released", "idleMs": idle_ms,
                "then": "watches given back while no call asks; the next call places them again and checks every file once",
            }),
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
        gm_actors::stderr_line!("gm: cannot start pruning the blob store: {e}");
    }
}

/// How this gm serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `--no-relay`: the workspace's worker, serving its own stdio as one session (and
    /// relays on its socket) until stdin closes.
    Stdio,
    /// Started by a relay: detached, it serves relays on its socket until it has been idle for
    /// its grace. `restarts`: how many workers of this workspace died in the last minute.
    Worker { restarts: u32 },
}

/// Serves until the end its mode gives (stdin closing, the idle grace, a signal); returns the
/// exit code.
pub fn serve(opts: ServeOptions) -> Result<i32, ServeError> {
    // A worker inherits the relay's small-pages setting; its heaps are the big ones.
    sys::huge_pages(true);
    sys::survive_file_size_limit();
    let workspace = workspace(&opts.workspace)?;
    // A config the user named must be there; the other layers only say what is wrong.
    let mcp_config = mcp_config::load(&workspace, opts.mcp_config.as_deref())?;
    let files = Files::of(&workspace);
    files.check()?;
    let sandbox = confinement(&opts.sandbox, &workspace)?;
    let life = take_life_lock(&files, opts.mode)?;
    let socket_path = paths::socket_path(&workspace).map_err(ServeError::Socket)?;
    // Holding the life lock, any socket at this path is a dead worker's.
    let _ = std::fs::remove_file(&socket_path);
    let listener = sys::local::Listener::bind(&socket_path).map_err(ServeError::Socket)?;
    let worker_id = format!("worker-{}", new_run_id());
    write_life_lock(&life, &worker_id, &socket_path);
    // OpenTelemetry export, when the user turned it on; before the arbiters, whose calls it
    // watches. A setting gm cannot use is said (and logged below), and gm serves without export.
    let workspace_name = workspace.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let telemetry = crate::telemetry::start(
        &crate::telemetry::Worker { workspace_name: &workspace_name, worker_id: &worker_id },
        crate::sandbox_config::home_config().as_deref(),
    );
    if let Err(e) = &telemetry {
        gm_actors::stderr_line!("gm: OpenTelemetry export is off: {e}");
    }
    let system = System::new();
    let started: Result<(), ServeError> = system.block_on(async {
        let state_dir = files.state_dir.clone();
        let (writer, report) = LogWriter::open(&state_dir.join("log.jsonl"), &worker_id)?;
        let log = writer.start();
        let skills = Arc::new(Skills::locate());
        let jobs = Jobs::new(state_dir.join("jobs")).start();
        let watcher = start_watcher(&workspace, &state_dir, log.clone());
        let losses = log.clone();
        crate::telemetry::watch_losses(move |fields| losses.do_send(Event::new("telemetry", fields)));
        // What the child servers of a worker that was killed started is ended before this
        // worker starts its own.
        let leftovers = crate::child_groups::ChildGroups::of(&state_dir).end_leftovers();
        if !leftovers.is_empty() {
            log.do_send(Event::new("mcp-server", json!({ "state": "leftovers-ended", "groups": leftovers })));
        }
        let ctx = Ctx::new(Shared {
            search: start_search(&workspace, &state_dir, &watcher, Some(log.clone())),
            calls: start_calls(&workspace, &state_dir, &watcher),
            workspace: workspace.clone().into(),
            secrets: Arc::new(SecretsFile::new(state_dir.join("secrets.env"), workspace.clone(), Some(log.clone()))),
            state_dir: state_dir.clone().into(),
            locks: FileLocks::default().start(),
            log: Some(log.clone()),
            skills: skills.clone(),
            jobs: jobs.clone(),
            scheduler: Scheduler::new(opts.max_inflight),
            blobs: Arc::new(Blobs::new(&state_dir)),
            children: Children::start(
                &mcp_config,
                &workspace,
                log.clone(),
                mcp_config::depth(),
                |name| crate::verbs::find(name).is_some(),
                sandbox.clone(),
            ),
            sandbox: sandbox.clone(),
        });
        // The worker outlives sessions: config edits and approvals reach the running servers.
        let otel_log = log.clone();
        crate::config_watch::follow(
            ctx.children.clone(),
            workspace.clone(),
            opts.mcp_config.clone(),
            crate::sandbox_config::home_config(),
            move |fields| otel_log.do_send(Event::new("otel", fields)),
        );
        log.do_send(Event::new(
            "start",
            json!({
                "pid": std::process::id(),
                "version": env!("CARGO_PKG_VERSION"),
                "exe": std::env::current_exe().ok(),
                "workspace": workspace,
                "worker": worker_id,
                "socket": socket_path,
                "mode": match opts.mode { Mode::Stdio => "stdio", Mode::Worker { .. } => "worker" },
                "relay": match opts.mode { Mode::Worker { restarts } => json!({ "restarts": restarts }), Mode::Stdio => Value::Null },
                "maxInflight": opts.max_inflight,
                "sandbox": crate::sandbox_config::describe(sandbox.as_deref()).unwrap_or_else(|| json!({ "mode": "off" })),
                "skills": skills.source(),
                "previousSeq": report.last_seq,
                "repairedBytes": report.repaired_bytes,
            }),
        ));
        match &telemetry {
            Ok(Some(t)) => log.do_send(Event::new("otel", json!({ "exporting": t.describe() }))),
            Ok(None) => {}
            Err(e) => log.do_send(Event::new("otel", json!({ "error": e.to_string() }))),
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
            gm_actors::stderr_line!("gm: cut a torn last line ({} bytes) from the run log", report.repaired_bytes);
        }
        // The start is in the file before the worker answers anyone: whoever reads the log
        // after a reply (a host, `gm status`, a test) finds the worker that gave it, where a
        // commit handed to the log's write thread could still be on its way.
        if let Err(e) = log.send(WriteOut).await.map_err(|e| e.to_string()).and_then(|r| r) {
            gm_actors::stderr_line!("gm: cannot write the run log: {e}");
        }
        // The JS engines start when a session opens the read gate (run_code is near), or at
        // the first body: an idle worker or the tools surface does not pay for them.
        let app = Rc::new(App {
            ctx,
            runs: RunStore::new(&state_dir),
            js: JsEngines::new(JS_ENGINES),
            progress_every: env_millis("GM_PROGRESS_INTERVAL_MS").unwrap_or(PROGRESS_EVERY),
            budget: opts.budget,
        });
        let settings = WorkerSettings {
            max_inflight: opts.max_inflight,
            mcp_config: opts.mcp_config.clone(),
            sandbox: opts.sandbox.clone(),
            max_result_bytes: Some(opts.budget.max_result_bytes),
        };
        let spec = WorkerSpec {
            files: files.clone(),
            listener: Some((listener, socket_path.clone())),
            settings: settings.clone(),
            idle: crate::worker::idle_grace(),
            id: worker_id.clone(),
        };
        let worker = Worker::new(app, spec).start();
        if opts.mode == Mode::Stdio {
            let hello = Hello {
                protocol: crate::worker::hello::PROTOCOL,
                session: new_session_id(),
                relay: Build::this_process(),
                surface: opts.surface.as_str().to_owned(),
                page_size: opts.page_size,
                step_budget: opts.step_budget,
                max_line_bytes: opts.max_line_bytes,
                worker: settings,
                notes: Vec::new(),
                stateless: false,
                pipes: false,
                direct: false,
                http: false,
            };
            let out = StdoutWriter::default().start().recipient();
            let server = worker
                .send(OpenStdio { hello, out })
                .await
                .map_err(|e| ServeError::Session(e.to_string()))?
                .map_err(ServeError::Session)?;
            spawn_stdin_reader(opts.max_line_bytes, server.recipient()).map_err(ServeError::Stdin)?;
        }
        // SIGINT, SIGTERM and SIGHUP end what gm started, then gm.
        actix::spawn(async move {
            match sys::stop_signal().await {
                Ok(signal) => worker.do_send(Stop::Signal(signal)),
                Err(e) => gm_actors::stderr_line!("gm: cannot watch for signals: {e}"),
            }
        });
        Ok(())
    });
    let code = match started {
        Ok(()) => {
            if let Mode::Worker { .. } = opts.mode {
                signal_ready(&files);
            }
            system.run_with_code().map_err(ServeError::System)
        }
        Err(e) => Err(e),
    };
    // stdin's flags are shared with the parent: give them back however gm stops.
    sys::restore_stdin();
    // A call-site cache still being written (a whole tree's parse) is finished before the
    // workspace is let go: the next worker reads it instead of parsing again.
    if !crate::search::calls::wait_for_saves(SAVE_WAIT) {
        gm_actors::stderr_line!(
            "gm: the call-site cache was still being written after {}s; the next gm parses again",
            SAVE_WAIT.as_secs()
        );
    }
    drop(life);
    // The last spans go out, or are given up after at most two seconds (the workspace is
    // already free for the next worker).
    crate::telemetry::shutdown();
    code
}

/// The longest a stopping worker waits for its call-site cache to be written (a kernel's
/// takes seconds).
const SAVE_WAIT: Duration = Duration::from_secs(60);

/// How long a worker started by a relay waits for the worker before it to let go of the
/// workspace (one leaving after its idle grace, or stopping after a signal).
const LIFE_LOCK_WAIT: Duration = Duration::from_secs(30);

/// Takes `.gm/worker.pid`, held for the worker's life: never two workers for one workspace.
/// `--no-relay` refuses at once when a worker holds it; a worker a relay started waits for
/// the one before it to finish leaving.
fn take_life_lock(files: &Files, mode: Mode) -> Result<std::fs::File, ServeError> {
    let deadline = std::time::Instant::now() + LIFE_LOCK_WAIT;
    loop {
        match gm_actors::state_file::lock(&files.life_lock, false) {
            Ok(Some(file)) => return Ok(file),
            Ok(None) if mode != Mode::Stdio && std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(None) => {
                let holder: Option<Value> =
                    std::fs::read(&files.life_lock).ok().and_then(|b| serde_json::from_slice(&b).ok());
                return Err(ServeError::AlreadyServed {
                    workspace: files.workspace.clone(),
                    pid: holder.as_ref().and_then(|h| h["pid"].as_u64()),
                });
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The box of `settings` for `workspace`, checked on this kernel (a confined probe runs): a
/// mode this system cannot enforce stops gm, never runs unconfined.
fn confinement(
    settings: &crate::sandbox_config::SandboxSettings,
    workspace: &Path,
) -> Result<Option<Arc<gm_actors::sandbox::Confinement>>, ServeError> {
    if settings.mode == gm_actors::sandbox::Mode::Off {
        return Ok(None);
    }
    let socket_dir = paths::socket_dir().ok();
    let policy = crate::sandbox_config::policy(settings, workspace, socket_dir.as_deref());
    let exe = std::env::current_exe().map_err(|source| ServeError::Workspace { path: "gm".into(), source })?;
    gm_actors::sandbox::Confinement::new(policy, exe)
        .map(|c| Some(Arc::new(c)))
        .map_err(|source| ServeError::Sandbox { mode: settings.mode.as_str(), source })
}

/// Says who holds the life lock, for `--no-relay` refusals and for people.
fn write_life_lock(life: &std::fs::File, id: &str, socket: &Path) {
    let me = json!({
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "exe": std::env::current_exe().ok(),
        "worker": id,
        "socket": socket,
        "startedMs": gm_actors::clock::now_ms(),
    });
    let _ = life.set_len(0);
    let _ = (&*life).write_all(format!("{me}\n").as_bytes());
}

/// A worker a relay started tells it that it listens: `ready` on the stdout pipe, after which
/// stdout and stdin go to /dev/null and stderr to `.gm/worker.log` (the relay may be gone
/// before the worker). Until then, anything it printed (a startup error) reached the relay.
fn signal_ready(files: &Files) {
    use std::os::fd::AsFd;
    let ready = std::io::stdout().as_fd().try_clone_to_owned().map(std::fs::File::from);
    let log = gm_actors::state_file::open_own(&files.worker_log, gm_actors::state_file::How::APPEND);
    if let Ok(log) = &log {
        let _ = sys::detach_stdio(log);
    }
    if let Ok(mut ready) = ready {
        let _ = ready.write_all(b"ready\n");
    }
}

/// Runs one verb in `workspace` and returns its result or its structured error.
pub fn run_verb(workspace_dir: &Path, name: &str, args: Value) -> Result<Value, Value> {
    let workspace =
        workspace(workspace_dir).map_err(|e| json!({ "code": "invalid_args", "message": e.to_string() }))?;
    let system = System::new();
    Files::of(&workspace).check().map_err(|e| json!({ "code": "refused", "message": e.to_string() }))?;
    system.block_on(async move {
        let state_dir = workspace.join(".gm");
        let ctx = Ctx::new(Shared {
            search: start_search(&workspace, &state_dir, &Watcher::off("the one-shot CLI does not watch"), None),
            calls: start_calls(&workspace, &state_dir, &Watcher::off("the one-shot CLI does not watch")),
            secrets: Arc::new(SecretsFile::new(state_dir.join("secrets.env"), workspace.clone(), None)),
            jobs: Jobs::new(state_dir.join("jobs")).start(),
            state_dir: state_dir.clone().into(),
            workspace: workspace.into(),
            locks: FileLocks::default().start(),
            log: None,
            skills: Arc::new(Skills::locate()),
            scheduler: Scheduler::new(DEFAULT_MAX_INFLIGHT),
            blobs: Arc::new(Blobs::new(&state_dir)),
            children: Children::none(),
            // The one-shot CLI runs no shell of an agent's: no box (it is the user at a terminal).
            sandbox: None,
        });
        let args = verbs::to_json(&args).map_err(|e| e.to_json())?;
        let called = verbs::call(ctx, name, &args).await;
        // A verb that made gm's folder (spilled output, rows, the wiki) leaves it ignoring itself.
        let _ = gitignore::ignore_own_folder(&state_dir);
        called.result.map(|json| verbs::to_value(&json)).map_err(|e: VerbError| e.to_json())
    })
}
