//! `gm serve --http [ADDR]`: a front process that is to Streamable HTTP what the relay is to
//! stdio. It listens on a loopback address (unless `--http-allow-remote`), checks the bearer
//! token of `.gm/http.token` (a loopback port is open to every local user: the token guards
//! it), `Host` and `Origin` on every request, and speaks to the
//! workspace's worker as the relay does ([`crate::relay::connect`]): one worker connection per
//! MCP session, one more shared by the stateless 2026-07-28 requests. The worker does the MCP;
//! the front only routes messages by id. It also serves the status page (`page.rs`).
//!
//! Files: `auth.rs` (token, login codes, the page's logins, `Host`/`Origin`), `session.rs` (a
//! worker connection and its reader thread), `sse.rs` (streams with ids and replay), `mcp.rs`
//! (the `/mcp` endpoint), `page.rs` (the status page). `.gm/http.json` says where the front listens while
//! it runs.
//!
//! A session whose worker dies ends with it (its calls in flight are answered with an error,
//! its next request gets 404): an HTTP client opens a new session, which starts a new worker.

mod auth;
mod mcp;
mod page;
mod session;
mod sse;

use std::collections::HashMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use axum::extract::DefaultBodyLimit;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::json;

pub use auth::LoginCodes;
use auth::{Denied, Guard};
use session::Link;
use sse::Events;

use crate::relay::connect::{ConnectError, Finder};
use crate::relay::{RelayOptions, CRASH_WINDOW, MAX_CRASHES};
use crate::worker::exits;
use crate::worker::hello::{Build, Hello, WorkerSettings, PROTOCOL};
use crate::worker::paths::Files;

/// MCP sessions open at once.
const MAX_SESSIONS: usize = 64;
/// GET streams open at once per session.
const MAX_STREAMS: usize = 4;
/// A session with nothing to do for this long is ended (its client left without DELETE; a
/// client that comes back gets 404 and initializes again). `GM_HTTP_SESSION_IDLE_MS` sets
/// another, for tests.
const SESSION_IDLE: std::time::Duration = std::time::Duration::from_secs(3600);
/// The shared stateless link is closed after this without a request.
const STATELESS_IDLE: std::time::Duration = std::time::Duration::from_secs(60);
/// HTTP connections open at once.
const MAX_CONNECTIONS: usize = 512;
/// How long a client may take to send a request's headers (`GM_HTTP_HEADER_TIMEOUT_MS` sets
/// another, for tests).
const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A duration in milliseconds from the environment, else `default`.
fn env_ms(name: &str, default: std::time::Duration) -> std::time::Duration {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map_or(default, std::time::Duration::from_millis)
}
/// Server messages kept per session for `Last-Event-ID`.
const REPLAY_KEEP: usize = 256;

/// `gm serve --http`'s options.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The address asked for (`127.0.0.1:0` by default).
    pub addr: String,
    pub allow_remote: bool,
    /// `--http-token none`.
    pub no_token: bool,
    /// What each session asks of the worker, as a relay's options.
    pub session: RelayOptions,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("workspace {path}: {source}")]
    Workspace { path: PathBuf, source: std::io::Error },
    #[error("--http {addr}: {why}")]
    Addr { addr: String, why: String },
    #[error("--http {0} is not a loopback address: other machines could reach it. Pass --http-allow-remote to mean it (the token then guards it), or reach a loopback listener through `ssh -L`")]
    NotLoopback(String),
    #[error("--http-token none is allowed on a loopback address only")]
    NoTokenRemote,
    #[error("the token: {0}")]
    Token(#[from] auth::TokenError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    McpConfig(#[from] crate::mcp_config::ConfigError),
}

/// Why a worker connection could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("too many sessions are open")]
    Full,
    #[error("gm's worker died {0} times within a minute and is not started again; see .gm/worker-exits.jsonl")]
    Crashing(usize),
    #[error("{0}")]
    Connect(String),
}

/// What every handler shares.
pub struct Front {
    finder: Finder,
    hello: Hello,
    guard: Guard,
    sessions: Mutex<HashMap<String, Arc<Link>>>,
    stateless: tokio::sync::Mutex<Option<Arc<Link>>>,
    files: Files,
    codes: LoginCodes,
    /// The log's last events, for the page's timeline.
    timeline: Arc<Events>,
    /// Where the front listens, for the page.
    url: String,
    body_timeout: std::time::Duration,
    me: Weak<Front>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A refused request: 401 asks for the bearer token.
fn refuse(denied: Denied) -> Response {
    // A JSON-RPC error without an id, as the transport's spec allows for a refused request.
    let body = json!({ "jsonrpc": "2.0", "error": { "code": -32600, "message": denied.message() } });
    let mut response =
        (denied.status(), [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response();
    if denied == Denied::Token {
        response.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
    }
    response
}

impl Front {
    fn session(&self, id: &str) -> Option<Arc<Link>> {
        lock(&self.sessions).get(id).cloned()
    }

    /// Ends session `id` (its worker connection closes); false when there was none.
    async fn end_session(&self, id: &str) -> bool {
        let link = lock(&self.sessions).remove(id);
        match link {
            Some(link) => {
                link.close().await;
                true
            }
            None => false,
        }
    }

    /// Connects to the worker (starting it when none runs) as session `hello.session`.
    async fn connect(&self, hello: Hello) -> Result<crate::relay::connect::Connection, OpenError> {
        let deaths = exits::deaths(&self.files.exits, CRASH_WINDOW).len();
        if deaths >= MAX_CRASHES {
            return Err(OpenError::Crashing(deaths));
        }
        let me = self.me.upgrade().ok_or_else(|| OpenError::Connect("gm is stopping".into()))?;
        // Blocking: the start lock, perhaps a worker's start.
        let joined = tokio::task::spawn_blocking(move || me.finder.connect(&hello, deaths, &|| {}, None)).await;
        match joined {
            Ok(Ok(conn)) => Ok(conn),
            Ok(Err(ConnectError::Startup { message })) => Err(OpenError::Connect(message)),
            Ok(Err(e)) => Err(OpenError::Connect(e.to_string())),
            Err(e) => Err(OpenError::Connect(e.to_string())),
        }
    }

    /// A new MCP session: a worker connection under a new session id.
    async fn open_session(&self) -> Result<Arc<Link>, OpenError> {
        if lock(&self.sessions).len() >= MAX_SESSIONS {
            return Err(OpenError::Full);
        }
        let mut hello = self.hello.clone();
        hello.session = crate::run_state::new_session_id();
        let conn = self.connect(hello.clone()).await?;
        let me = self.me.clone();
        let events = Events::new(REPLAY_KEEP, MAX_STREAMS);
        let link = Link::start(hello.session.clone(), conn, Some(events), move |id| {
            if let Some(front) = me.upgrade() {
                lock(&front.sessions).remove(id);
            }
        })
        .map_err(|e| OpenError::Connect(e.to_string()))?;
        lock(&self.sessions).insert(link.id.clone(), link.clone());
        Ok(link)
    }

    /// The connection the stateless requests share, opened at the first.
    async fn stateless_link(&self) -> Result<Arc<Link>, OpenError> {
        let mut shared = self.stateless.lock().await;
        if let Some(link) = shared.as_ref().filter(|l| !l.is_closed()) {
            return Ok(link.clone());
        }
        let mut hello = self.hello.clone();
        hello.session = format!("http-stateless-{}", crate::run_state::new_run_id());
        hello.stateless = true;
        let conn = self.connect(hello.clone()).await?;
        let link = Link::start(hello.session, conn, None, |_| {}).map_err(|e| OpenError::Connect(e.to_string()))?;
        *shared = Some(link.clone());
        Ok(link)
    }

    /// Ends the sessions left idle (no request, no call in flight, no stream open) for
    /// `session_idle` — a client that went away without DELETE — and closes the shared link
    /// after `STATELESS_IDLE` without a request, so the worker can leave when nobody uses it.
    async fn sweep(&self, session_idle: std::time::Duration) {
        let idle: Vec<String> = lock(&self.sessions)
            .iter()
            .filter(|(_, l)| l.idle_for().is_some_and(|d| d >= session_idle))
            .map(|(id, _)| id.clone())
            .collect();
        for id in idle {
            self.end_session(&id).await;
        }
        let mut shared = self.stateless.lock().await;
        if shared.as_ref().is_some_and(|l| l.idle_for().is_some_and(|d| d >= STATELESS_IDLE)) {
            if let Some(link) = shared.take() {
                link.close().await;
            }
        }
    }

    /// Closes every worker connection (each session ends on the worker).
    async fn close_all(&self) {
        let links: Vec<Arc<Link>> = lock(&self.sessions).drain().map(|(_, l)| l).collect();
        for link in links {
            link.close().await;
        }
        if let Some(link) = self.stateless.lock().await.take() {
            link.close().await;
        }
    }
}

/// Reads `--http`'s address: `HOST:PORT`, or a port alone (on 127.0.0.1).
fn parse_addr(addr: &str) -> Result<SocketAddr, HttpError> {
    let text = if addr.chars().all(|c| c.is_ascii_digit()) { format!("127.0.0.1:{addr}") } else { addr.to_owned() };
    let bad = |why: String| HttpError::Addr { addr: addr.to_owned(), why };
    let mut found = text.to_socket_addrs().map_err(|e| bad(format!("{e} (give HOST:PORT, e.g. 127.0.0.1:8765)")))?;
    found.next().ok_or_else(|| bad("names no address".into()))
}

/// Runs the front until SIGINT or SIGTERM; returns the exit code.
pub fn run(opts: HttpOptions) -> i32 {
    match start(opts) {
        Ok(code) => code,
        Err(e) => {
            gm_actors::stderr_line!("gm: {e}");
            1
        }
    }
}

fn start(opts: HttpOptions) -> Result<i32, HttpError> {
    // As the relay: a small process whose first arena would otherwise be resident 2 MB at a
    // time (a worker it starts turns them back on).
    gm_actors::sys::huge_pages(false);
    let workspace = std::fs::canonicalize(&opts.session.workspace)
        .map_err(|source| HttpError::Workspace { path: opts.session.workspace.clone(), source })?;
    if let Some(named) = &opts.session.mcp_config {
        crate::mcp_config::load(&workspace, Some(named))?;
    }
    let addr = parse_addr(&opts.addr)?;
    if !addr.ip().is_loopback() && !opts.allow_remote {
        return Err(HttpError::NotLoopback(opts.addr.clone()));
    }
    if opts.no_token && !addr.ip().is_loopback() {
        return Err(HttpError::NoTokenRemote);
    }
    let files = Files::of(&workspace);
    let state_error = |e: gm_actors::state_file::StateFileError| HttpError::Workspace {
        path: files.state_dir.clone(),
        source: e.into(),
    };
    // Before anything is written under `.gm/`: what a repository committed there is checked, as
    // every gm does — a link or another user's file in gm's place (the token's too) stops it.
    files.check().map_err(state_error)?;
    // A token that is a plain file of the user's but unfit (open to others, known to git,
    // empty) is replaced.
    let token_path = files.state_dir.join("http.token");
    let token = if opts.no_token { None } else { Some(auth::load_or_create(&workspace, &token_path)?) };
    if let Some(why) = token.as_ref().and_then(|t| t.replaced.as_ref()) {
        // The front has no run log of its own (the worker writes it): stderr is where it speaks.
        gm_actors::stderr_line!("gm: {} was not used: {why}; a new token was made", token_path.display());
    }
    let token = token.map(|t| t.value);
    let _ = crate::gitignore::ignore_own_folder(&files.state_dir);
    // One thread: the front only routes bytes (the worker does the work), and an answer read
    // from the worker reaches its waiting request without waking another thread.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(serve(opts, workspace, files, addr, token))
}

async fn serve(
    opts: HttpOptions,
    workspace: PathBuf,
    files: Files,
    addr: SocketAddr,
    token: Option<String>,
) -> Result<i32, HttpError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| HttpError::Bind { addr, source })?;
    let bound = listener.local_addr()?;
    let url = format!("http://{bound}");
    let s = &opts.session;
    let hello = Hello {
        protocol: PROTOCOL,
        session: String::new(),
        relay: Build::this_process(),
        surface: s.surface.as_str().to_owned(),
        page_size: s.page_size,
        step_budget: s.step_budget,
        max_line_bytes: s.max_line_bytes,
        worker: WorkerSettings {
            max_inflight: s.max_inflight,
            mcp_config: s.mcp_config.clone().map(|p| std::path::absolute(&p).unwrap_or(p)),
            sandbox: s.sandbox.clone(),
            max_result_bytes: Some(s.budget.max_result_bytes),
        },
        notes: Vec::new(),
        stateless: false,
        pipes: false,
        direct: false,
        http: true,
    };
    let hosts = if addr.ip().is_loopback() { Guard::loopback_hosts(bound) } else { Vec::new() };
    let timeline = Events::new(page::TIMELINE_KEEP, page::MAX_PAGES);
    let front = Arc::new_cyclic(|me| Front {
        finder: Finder {
            files: files.clone(),
            exe: crate::relay::worker_exe(),
            serve_args: worker_args(&opts.session, &workspace),
            reaped: Default::default(),
        },
        hello,
        guard: Guard { token, hosts, pages: Arc::new(auth::PageLogins::new(bound.port())) },
        sessions: Mutex::new(HashMap::new()),
        stateless: tokio::sync::Mutex::new(None),
        files: files.clone(),
        codes: LoginCodes::new(&files.state_dir),
        timeline: timeline.clone(),
        url: url.clone(),
        body_timeout: env_ms("GM_HTTP_BODY_TIMEOUT_MS", mcp::BODY_TIMEOUT),
        me: me.clone(),
    });
    let info = files.state_dir.join("http.json");
    let described = json!({ "url": format!("{url}/mcp"), "pid": std::process::id(), "port": bound.port(), "page": format!("{url}/") });
    gm_actors::fs::replace(&info, format!("{described}\n").as_bytes())?;
    gm_actors::stderr_line!("gm: listening on {url}/mcp");
    match front.codes.mint() {
        Ok(code) => gm_actors::stderr_line!("gm: status page (this link works once): {url}/login?t={code}"),
        Err(e) => gm_actors::stderr_line!("gm: no login link for the status page: {e}"),
    }
    tokio::spawn(page::tail_log(files.state_dir.join("log.jsonl"), timeline));
    let session_idle = env_ms("GM_HTTP_SESSION_IDLE_MS", SESSION_IDLE);
    let sweeping = Arc::downgrade(&front);
    tokio::spawn(async move {
        let every = (session_idle / 4).clamp(std::time::Duration::from_millis(50), std::time::Duration::from_secs(30));
        loop {
            tokio::time::sleep(every).await;
            let Some(front) = sweeping.upgrade() else { return };
            front.sweep(session_idle).await;
        }
    });
    let app = Router::new()
        .route("/mcp", get(mcp::get).post(mcp::post).delete(mcp::delete))
        .route("/", get(page::index))
        .route("/login", get(page::login))
        .route("/status.json", get(page::status))
        .route("/events", get(page::events))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(opts.session.max_line_bytes))
        .with_state(front.clone());
    let code = tokio::select! {
        () = accept(listener, app) => 0,
        signal = stop_signal() => signal.map_or(0, |s| 128 + s),
    };
    front.close_all().await;
    let _ = std::fs::remove_file(&info);
    Ok(code)
}

/// Serves each connection with hyper (HTTP/1.1 with keep-alive), with what `axum::serve` does
/// not set: a deadline for a request's headers (a client sending a byte a second holds no
/// connection for long) and a cap on connections open at once.
async fn accept(listener: tokio::net::TcpListener, app: Router) {
    use hyper_util::rt::{TokioIo, TokioTimer};
    use hyper_util::service::TowerToHyperService;
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let header_timeout = env_ms("GM_HTTP_HEADER_TIMEOUT_MS", HEADER_TIMEOUT);
    loop {
        let Ok(permit) = open.clone().acquire_owned().await else { return };
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of file descriptors and the like: wait a moment rather than spin.
                gm_actors::stderr_line!("gm: accepting a connection: {e}");
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                continue;
            }
        };
        // Answers are written whole; small SSE events must not wait for an ACK.
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(permit);
        });
    }
}

/// SIGINT or SIGTERM (its number); never when they cannot be watched.
async fn stop_signal() -> Option<i32> {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
        gm_actors::stderr_line!("gm: cannot watch for signals");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = int.recv() => Some(2),
        _ = term.recv() => Some(15),
    }
}

/// The `gm serve` arguments of a worker this front starts: the worker's own settings, none of
/// the front's.
fn worker_args(s: &RelayOptions, workspace: &std::path::Path) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = vec!["--workspace".into(), workspace.into()];
    args.extend(["--surface".into(), s.surface.as_str().into()]);
    args.extend(["--max-inflight".into(), s.max_inflight.to_string().into()]);
    args.extend(["--max-line-bytes".into(), s.max_line_bytes.to_string().into()]);
    args.extend(["--page-size".into(), s.page_size.to_string().into()]);
    args.extend(["--step-budget".into(), s.step_budget.to_string().into()]);
    if let Some(config) = &s.mcp_config {
        args.extend(["--mcp-config".into(), std::path::absolute(config).unwrap_or(config.clone()).into()]);
    }
    args
}

/// What `.gm/http.json` says of the workspace's running front (`url`, `pid`, `port`, `page`);
/// `None` when none runs there.
pub fn front_info(workspace: &std::path::Path) -> Option<serde_json::Value> {
    let bytes = std::fs::read(workspace.join(".gm").join("http.json")).ok()?;
    let info: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    let pid = u32::try_from(info["pid"].as_u64()?).ok()?;
    gm_actors::sys::process_exists(pid).then_some(info)
}

/// A fresh one-time link to the status page of the workspace's front, for `gm status --open`;
/// `None` when no front runs there.
pub fn open_link(workspace: &std::path::Path) -> Result<Option<String>, std::io::Error> {
    let Some(page) = front_info(workspace).and_then(|i| i["page"].as_str().map(str::to_owned)) else {
        return Ok(None);
    };
    let code = LoginCodes::new(&workspace.join(".gm")).mint()?;
    Ok(Some(format!("{page}login?t={code}")))
}

/// The reply to a request the front cannot route.
async fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "gm serves /mcp and its status page at /").into_response()
}
