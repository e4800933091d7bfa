//! The McpClient actor: one per child MCP server. It starts the server's process, does the MCP
//! handshake, lists its tools (every page), keeps them current when the server says they
//! changed, starts the server again when a call finds it gone, and stops it when gm exits.
//!
//! A server that could not be started (every attempt of one start failed) is started again by
//! a later call, once a backoff has passed (1 s, doubling with each failed start up to a
//! minute): calls before that are answered with the failure at once.
//!
//! The actor supervises; it is not on a call's path. [`Connect`] hands out the live
//! [`Session`] (the connection and its tools), and calls go straight through the connection
//! from whichever thread makes them.

pub mod connection;
pub mod stdio;

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use serde_json::{json, Value};
use tokio::sync::oneshot;

pub use connection::{ConnError, Connection, Launch};

use crate::cancel::CancelToken;

/// The protocol version gm offers a child; it accepts any version the child answers with.
pub const PROTOCOL_VERSION: &str = "2025-11-25";
/// Attempts to start a server that exits before it answers `initialize`.
pub const START_ATTEMPTS: usize = 3;
/// How long a child gets between each step of being stopped (stdin closed, SIGTERM, SIGKILL).
const STOP_GRACE: Duration = Duration::from_millis(250);
/// The most tools/list pages read from one server.
const MAX_PAGES: usize = 1000;
/// How long after a failed start a call may start the server again; doubled after each
/// further failed start, up to [`MAX_RETRY_AFTER`].
const RETRY_AFTER: Duration = Duration::from_secs(1);
const MAX_RETRY_AFTER: Duration = Duration::from_secs(60);

/// The wait before the next start, after `failed` failed starts in a row.
fn retry_after(failed: u32) -> Duration {
    RETRY_AFTER.saturating_mul(1 << failed.saturating_sub(1).min(16)).min(MAX_RETRY_AFTER)
}

/// A child server, as gm starts it.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub name: String,
    pub launch: Launch,
    /// The budget for starting, over every attempt: the handshake and the first tools/list.
    pub startup_timeout: Duration,
}

/// A started server: its connection and what it said of itself.
#[derive(Debug)]
pub struct Session {
    pub conn: Arc<Connection>,
    /// The tools as the server listed them (`name`, `description`, `inputSchema`, ...).
    pub tools: Vec<Value>,
    pub protocol: String,
    pub server_info: Value,
    /// Which start of the server this is (1 for the first).
    pub generation: u64,
}

/// Why a server could not be started.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{server} did not start ({} attempt{}, startup budget {budget_ms} ms): {}{}", causes.len(), if causes.len() == 1 { "" } else { "s" }, causes.join("; "), retry_note(*.retry_in_ms))]
pub struct StartFailure {
    pub server: String,
    /// Each attempt's cause, in order.
    pub causes: Vec<String>,
    pub budget_ms: u64,
    /// The end of the last attempt's stderr.
    pub stderr: String,
    /// When a call may start it again, from now (`None`: never, gm is stopping).
    pub retry_in_ms: Option<u64>,
}

fn retry_note(retry_in_ms: Option<u64>) -> String {
    match retry_in_ms {
        Some(0) => "; the next call starts it again".into(),
        Some(ms) => format!("; a call starts it again after {ms} ms"),
        None => String::new(),
    }
}

/// What happens to a server, for the log.
#[derive(Debug, Clone, Message)]
#[rtype(result = "()")]
pub enum ClientEvent {
    Starting {
        server: String,
        attempt: usize,
    },
    Ready {
        server: String,
        session: Arc<Session>,
    },
    Failed {
        failure: StartFailure,
    },
    /// A started server's stdout ended (it exited or crashed).
    Exited {
        server: String,
        why: String,
    },
    ToolsChanged {
        server: String,
        session: Arc<Session>,
    },
}

/// The live session, starting the server first if it is not running (or was running and has
/// gone). A server whose start failed answers with that failure.
#[derive(Message)]
#[rtype(result = "Result<Arc<Session>, StartFailure>")]
pub struct Connect;

/// Stop the server (gm is exiting). Answers when it is gone.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;

/// A message the child sent that is not a reply.
#[derive(Message)]
#[rtype(result = "()")]
struct FromChild {
    generation: u64,
    message: Value,
}

/// The child's stdout ended.
#[derive(Message)]
#[rtype(result = "()")]
struct Closed {
    generation: u64,
    why: ConnError,
}

enum State {
    Idle,
    Starting,
    Ready(Arc<Session>),
    /// The last start failed; a call from `retry_at` on starts it again.
    Failed {
        failure: StartFailure,
        retry_at: Instant,
    },
    Stopped,
}

pub struct McpClient {
    spec: ServerSpec,
    state: State,
    /// Starts that failed in a row, for the backoff.
    failed_starts: u32,
    generation: u64,
    waiting: Vec<oneshot::Sender<Result<Arc<Session>, StartFailure>>>,
    events: Recipient<ClientEvent>,
}

impl McpClient {
    pub fn new(spec: ServerSpec, events: Recipient<ClientEvent>) -> Self {
        Self { spec, state: State::Idle, failed_starts: 0, generation: 0, waiting: Vec::new(), events }
    }

    fn start(&mut self, ctx: &mut Context<Self>) {
        self.state = State::Starting;
        let spec = self.spec.clone();
        let me = ctx.address();
        let events = self.events.clone();
        let first_generation = self.generation + 1;
        let work = async move { start(spec, me, events, first_generation).await };
        ctx.spawn(work.into_actor(self).map(|outcome, act, _| {
            if matches!(act.state, State::Stopped) {
                // gm stopped while the server was starting: it goes too.
                if let Ok(session) = outcome {
                    let conn = session.conn.clone();
                    std::thread::spawn(move || conn.stop(STOP_GRACE));
                }
                return;
            }
            let reply = match outcome {
                Ok(session) => {
                    act.generation = session.generation;
                    act.failed_starts = 0;
                    act.state = State::Ready(session.clone());
                    act.events.do_send(ClientEvent::Ready { server: act.spec.name.clone(), session: session.clone() });
                    Ok(session)
                }
                Err((mut failure, generation)) => {
                    act.generation = generation;
                    act.failed_starts += 1;
                    let wait = retry_after(act.failed_starts);
                    failure.retry_in_ms = Some(wait.as_millis() as u64);
                    act.state = State::Failed { failure: failure.clone(), retry_at: Instant::now() + wait };
                    act.events.do_send(ClientEvent::Failed { failure: failure.clone() });
                    Err(failure)
                }
            };
            for w in act.waiting.drain(..) {
                let _ = w.send(reply.clone());
            }
        }));
    }
}

/// Starts the server: up to [`START_ATTEMPTS`] attempts while it exits before answering, all
/// within the startup budget. Returns the session, or the failure and the last generation used.
async fn start(
    spec: ServerSpec,
    me: Addr<McpClient>,
    events: Recipient<ClientEvent>,
    first_generation: u64,
) -> Result<Arc<Session>, (StartFailure, u64)> {
    let deadline = Instant::now() + spec.startup_timeout;
    let mut causes = Vec::new();
    let mut stderr = String::new();
    let mut generation = first_generation;
    for attempt in 1..=START_ATTEMPTS {
        generation = first_generation + attempt as u64 - 1;
        events.do_send(ClientEvent::Starting { server: spec.name.clone(), attempt });
        let (on_message, on_close) = (me.clone(), me.clone());
        let conn = match Connection::spawn(
            &spec.name,
            &spec.launch,
            Box::new(move |message| on_message.do_send(FromChild { generation, message })),
            Box::new(move |why| on_close.do_send(Closed { generation, why })),
        ) {
            Ok(c) => c,
            Err(e) => {
                // A command that cannot be started will not start on a second try.
                causes.push(e.to_string());
                break;
            }
        };
        match handshake(&conn, deadline).await {
            Ok((protocol, server_info, tools)) => {
                return Ok(Arc::new(Session { conn, tools, protocol, server_info, generation }));
            }
            Err(e) => {
                stderr = conn.stderr_tail();
                let gone = matches!(e, ConnError::Gone { .. });
                causes.push(match &e {
                    // The stderr goes once, at the end, not in every cause.
                    ConnError::Gone { how, .. } => format!("attempt {attempt}: it ended before answering ({how})"),
                    other => format!("attempt {attempt}: {other}"),
                });
                let stopping = conn.clone();
                let _ = tokio::task::spawn_blocking(move || stopping.stop(STOP_GRACE)).await;
                // Only a server that exits early is tried again; one that hangs or answers
                // with an error would do the same again.
                if !gone || Instant::now() >= deadline {
                    break;
                }
            }
        }
    }
    let failure = StartFailure {
        server: spec.name.clone(),
        causes,
        budget_ms: spec.startup_timeout.as_millis() as u64,
        stderr,
        retry_in_ms: None,
    };
    Err((failure, generation))
}

/// `initialize`, `notifications/initialized`, then every page of `tools/list`.
async fn handshake(conn: &Connection, deadline: Instant) -> Result<(String, Value, Vec<Value>), ConnError> {
    let left = || deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    let never = CancelToken::default();
    let init = conn
        .request(
            "initialize",
            json!({
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": { "name": "gm", "version": env!("CARGO_PKG_VERSION") },
            }),
            left(),
            &never,
        )
        .await?;
    let protocol = init.get("protocolVersion").and_then(Value::as_str).unwrap_or(PROTOCOL_VERSION).to_owned();
    let server_info = init.get("serverInfo").cloned().unwrap_or(Value::Null);
    conn.notify("notifications/initialized", json!({}))?;
    let tools = list_tools(conn, left(), &never).await?;
    Ok((protocol, server_info, tools))
}

/// Every page of the server's tools.
pub async fn list_tools(conn: &Connection, timeout: Duration, cancel: &CancelToken) -> Result<Vec<Value>, ConnError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(c) => json!({ "cursor": c }),
            None => json!({}),
        };
        let page = conn.request("tools/list", params, timeout, cancel).await?;
        if let Some(list) = page.get("tools").and_then(Value::as_array) {
            tools.extend(list.iter().cloned());
        }
        cursor = page.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
        if cursor.is_none() {
            break;
        }
    }
    Ok(tools)
}

impl Actor for McpClient {
    type Context = Context<Self>;
}

impl Handler<Connect> for McpClient {
    type Result = ResponseFuture<Result<Arc<Session>, StartFailure>>;
    fn handle(&mut self, _: Connect, ctx: &mut Context<Self>) -> Self::Result {
        match &self.state {
            State::Ready(session) if session.conn.is_open() => {
                let session = session.clone();
                return Box::pin(async move { Ok(session) });
            }
            State::Failed { failure, retry_at } if Instant::now() < *retry_at => {
                let mut failure = failure.clone();
                failure.retry_in_ms = Some(retry_at.saturating_duration_since(Instant::now()).as_millis() as u64);
                return Box::pin(async move { Err(failure) });
            }
            State::Stopped => {
                let failure = StartFailure {
                    server: self.spec.name.clone(),
                    causes: vec!["gm is stopping".into()],
                    budget_ms: 0,
                    stderr: String::new(),
                    retry_in_ms: None,
                };
                return Box::pin(async move { Err(failure) });
            }
            // Not started yet, started and gone since, or failed long enough ago: start it
            // (again).
            State::Idle | State::Ready(_) | State::Failed { .. } => self.start(ctx),
            State::Starting => {}
        }
        let (tx, rx) = oneshot::channel();
        self.waiting.push(tx);
        let server = self.spec.name.clone();
        Box::pin(async move {
            rx.await.unwrap_or_else(|_| {
                Err(StartFailure {
                    server,
                    causes: vec!["its client went away".into()],
                    budget_ms: 0,
                    stderr: String::new(),
                    retry_in_ms: None,
                })
            })
        })
    }
}

impl Handler<FromChild> for McpClient {
    type Result = ();
    fn handle(&mut self, msg: FromChild, ctx: &mut Context<Self>) {
        let State::Ready(session) = &self.state else { return };
        if msg.generation != session.generation
            || msg.message.get("method").and_then(Value::as_str) != Some("notifications/tools/list_changed")
        {
            return;
        }
        // The server's tools changed: list them again and hand on the new session.
        let old = session.clone();
        let work = async move {
            let tools = list_tools(&old.conn, Duration::from_secs(30), &CancelToken::default()).await;
            tools.map(|tools| {
                Arc::new(Session {
                    conn: old.conn.clone(),
                    tools,
                    protocol: old.protocol.clone(),
                    server_info: old.server_info.clone(),
                    generation: old.generation,
                })
            })
        };
        ctx.spawn(work.into_actor(self).map(|listed, act, _| {
            let Ok(session) = listed else { return };
            if let State::Ready(current) = &act.state {
                if current.generation == session.generation {
                    act.state = State::Ready(session.clone());
                    act.events.do_send(ClientEvent::ToolsChanged { server: act.spec.name.clone(), session });
                }
            }
        }));
    }
}

impl Handler<Closed> for McpClient {
    type Result = ();
    fn handle(&mut self, msg: Closed, _: &mut Context<Self>) {
        // Only the running session's end is news; an attempt that failed was already reported.
        if let State::Ready(session) = &self.state {
            if session.generation == msg.generation {
                self.events.do_send(ClientEvent::Exited { server: self.spec.name.clone(), why: msg.why.to_string() });
            }
        }
    }
}

impl Handler<Stop> for McpClient {
    type Result = ResponseFuture<()>;
    fn handle(&mut self, _: Stop, _: &mut Context<Self>) -> Self::Result {
        let state = std::mem::replace(&mut self.state, State::Stopped);
        Box::pin(async move {
            if let State::Ready(session) = state {
                let conn = session.conn.clone();
                let _ = tokio::task::spawn_blocking(move || conn.stop(STOP_GRACE)).await;
            }
        })
    }
}
