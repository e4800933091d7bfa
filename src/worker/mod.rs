//! The workspace's worker: one process per workspace that every host session shares.
//!
//! `gm serve` is a relay a host starts; it finds the workspace's worker on a Unix socket (or
//! starts it, under `.gm/worker.lock`) and speaks to it as one session. The worker holds
//! everything a workspace has one of — the log, the scheduler, the file locks, the watcher,
//! the search and call-site indexes, the child MCP servers, jobs and background bodies — and
//! serves each connection as a session of its own ([`crate::server::Server`]). It runs
//! detached, holds `.gm/worker.pid` locked for its whole life (so there is never a second),
//! and exits once no session has been connected for its idle grace and no background body
//! runs, logging `stop` with reason `idle`.
//!
//! - [`paths`]: where the socket and the worker's files are.
//! - [`hello`]: the first line each way on a connection (hello and welcome, or status).
//! - [`exits`]: how workers ended, for the relays' five-deaths rule.
//! - [`status`]: `gm status`, the client side.

pub mod direct;
pub mod exits;
pub mod hello;
pub mod paths;
pub mod status;

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use gm_actors::jobs::{JobKind, JobState, KillForeground, ListJobs};
use gm_actors::log_writer::{Event, Flush};
use gm_actors::sys::local;
use gm_actors::transport::{Incoming, Send as SendLine, SocketLines, SocketWriter};
use serde_json::{json, Value};

use crate::app::{App, Conn};
use crate::run::RunSession;
use crate::run_state::{valid_session_id, Opened, RunState};
use crate::server::surface::Surface;
use crate::server::{Describe, EndNow, Server, SessionNews};
use hello::{Answer, Build, First, Hello, Welcome, WorkerSettings};
use paths::Files;

/// How long a worker with no session stays up (`GM_WORKER_IDLE_MS` sets another).
pub const IDLE_GRACE: Duration = Duration::from_secs(600);
/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest first line read (a hello is a few hundred bytes).
const HELLO_MAX: usize = 64 << 10;
/// Replies queued for a relay that does not read, past which its connection is closed.
const QUEUE_LIMIT: usize = 256 << 20;
/// How often an idle worker with a background body still running looks again.
const BODY_RECHECK: Duration = Duration::from_secs(5);

/// Why the worker stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Message)]
#[rtype(result = "()")]
pub enum Stop {
    /// `--no-relay`: the stdio host closed stdin.
    StdinClosed,
    /// A signal (SIGINT, SIGTERM, SIGHUP, by number).
    Signal(i32),
    /// No session for the idle grace.
    Idle,
}

impl Stop {
    /// The process's exit code: 0, or 128 + the signal's number, as a shell reports it.
    pub fn exit_code(self) -> i32 {
        match self {
            Stop::StdinClosed | Stop::Idle => 0,
            Stop::Signal(n) => 128 + n,
        }
    }

    fn reason(self) -> &'static str {
        match self {
            Stop::StdinClosed => "stdin closed",
            Stop::Signal(_) => "signal",
            Stop::Idle => "idle",
        }
    }
}

/// Opens the stdio session of `--no-relay`.
#[derive(Message)]
#[rtype(result = "Result<Addr<Server>, String>")]
pub struct OpenStdio {
    pub hello: Hello,
    pub out: Recipient<SendLine>,
}

/// What `gm status` shows.
#[derive(Debug, Message)]
#[rtype(result = "Value")]
pub struct Status;

/// A session the worker serves.
struct Session {
    server: Addr<Server>,
    /// A second descriptor of its connection, to see whether its relay has gone before the
    /// server has read the end (`None` for stdio).
    probe: Option<std::os::fd::OwnedFd>,
    /// A direct session's reader of the host's stdin, told to stop taking when the worker stops.
    leave: Option<direct::LeaveInput>,
    /// The options its relay asked that this worker cannot apply, with why (`gm status`).
    not_in_force: Vec<NotInForce>,
}

/// An option a session asked for that the workspace's worker does not apply to it, and why.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct NotInForce {
    option: &'static str,
    asked: Value,
    in_force: Value,
    why: &'static str,
}

impl Session {
    fn peer_gone(&self) -> bool {
        self.probe.as_ref().is_some_and(|fd| gm_actors::sys::peer_closed(std::os::fd::AsFd::as_fd(fd)))
    }
}

/// What the worker is, fixed at its start.
pub struct WorkerSpec {
    pub files: Files,
    /// The socket it listens on (already bound), and its path.
    pub listener: Option<(gm_actors::sys::local::Listener, PathBuf)>,
    pub settings: WorkerSettings,
    pub idle: Duration,
    /// Its id: the `run` of its own events.
    pub id: String,
}

pub struct Worker {
    app: Rc<App>,
    spec: WorkerSpec,
    build: Build,
    started: Instant,
    sessions: HashMap<Arc<str>, Session>,
    /// Sessions whose host has gone, still ending.
    leaving: std::collections::HashSet<Arc<str>>,
    /// Connections accepted whose hello has not been read yet.
    opening: usize,
    stopping: Option<Stop>,
    idle_timer: Option<SpawnHandle>,
    /// The listening socket's descriptor, to see whether a connection waits to be accepted.
    listen_fd: Option<i32>,
    /// Held from the moment the worker decides to leave while idle until it exits.
    _start_lock: Option<std::fs::File>,
}

impl Worker {
    pub fn new(app: Rc<App>, spec: WorkerSpec) -> Self {
        Self {
            app,
            spec,
            build: Build::this_process(),
            started: Instant::now(),
            sessions: HashMap::new(),
            leaving: std::collections::HashSet::new(),
            opening: 0,
            stopping: None,
            idle_timer: None,
            listen_fd: None,
            _start_lock: None,
        }
    }

    fn log(&self, event: Event) {
        if let Some(log) = &self.app.ctx.log {
            log.do_send(event);
        }
    }

    /// Opens a session for `hello`: its run found (its own, one a gone session left, or new),
    /// its server started.
    fn open_session(
        &mut self,
        hello: Hello,
        out: Recipient<SendLine>,
        probe: Option<std::os::fd::OwnedFd>,
        leave: Option<direct::LeaveInput>,
        ctx: &mut Context<Self>,
    ) -> Result<Addr<Server>, String> {
        let stdio = probe.is_none();
        if self.stopping.is_some() {
            return Err("the workspace's worker is stopping; connect again".into());
        }
        if !valid_session_id(&hello.session) {
            return Err(format!("not a session id: {:?}", hello.session));
        }
        if self.sessions.contains_key(hello.session.as_str()) {
            return Err(format!("session {} is already connected", hello.session));
        }
        let surface = <Surface as clap::ValueEnum>::from_str(&hello.surface, true)
            .map_err(|_| format!("unknown surface: {}", hello.surface))?;
        let budget = hello.step_budget.max(1);
        // A session whose relay has gone is not live, even before its server has read the end:
        // the host that comes back at once continues its run.
        let (sessions, leaving) = (&self.sessions, &self.leaving);
        let live = |s: &str| sessions.get(s).is_some_and(|e| !leaving.contains(s) && !e.peer_gone());
        let (run, opened, problems) =
            self.app.runs.open(&hello.session, &live, || RunState::new(crate::run_state::new_run_id(), budget));
        let session: Arc<str> = hello.session.as_str().into();
        let mut run = RunSession::new(session.clone(), run, opened.clone(), budget);
        // Stateless requests have no connection of their own to have read the skill: a step,
        // which hands the model the rules, opens run_code too.
        run.step_opens_gate = hello.stateless;
        let scope = run.scope().clone();
        let (how, from, step) = match &opened {
            Opened::New => ("new", None, None),
            Opened::Resumed { step } => ("resumed", None, Some(*step)),
            Opened::TakenOver { from, step } => ("taken-over", Some(from.clone()), Some(*step)),
        };
        let differs = self.differences(&hello.worker);
        let not_in_force = self.not_in_force(&hello.worker);
        self.log(
            Event::new(
                "session",
                json!({
                    "state": "opened",
                    "transport": if stdio { "stdio" } else if hello.stateless { "stateless" } else { "relay" },
                    // The worker reads and writes the host's own stdin and stdout.
                    "direct": hello.direct.then_some(true),
                    "relay": (!stdio).then_some(&hello.relay),
                    "surface": surface.as_str(),
                    "runOpened": { "how": how, "fromSession": from, "step": step },
                    "differs": (!differs.is_empty()).then_some(&differs),
                    "notInForce": (!not_in_force.is_empty()).then_some(&not_in_force),
                }),
            )
            .in_scope(Some(&scope)),
        );
        for note in &hello.notes {
            let mut fields = note.clone();
            let kind = fields.as_object_mut().and_then(|m| m.remove("kind"));
            if let Some(kind) = kind.as_ref().and_then(Value::as_str) {
                self.log(Event::new(kind, fields).in_scope(Some(&scope)));
            }
        }
        for why in problems {
            self.log(
                Event::new("run-state", json!({ "state": "unreadable", "error": why, "then": "left as it is" }))
                    .in_scope(Some(&scope)),
            );
        }
        let conn = Conn {
            session: session.clone(),
            surface,
            out,
            max_line_bytes: hello.max_line_bytes,
            page_size: hello.page_size.max(1),
            step_budget: budget,
            relay: (!stdio).then(|| serde_json::to_value(&hello.relay).unwrap_or_default()),
            stateless: hello.stateless,
            direct: hello.direct,
            http: hello.http,
        };
        let server = Server::new(self.app.clone(), conn, run, ctx.address().recipient(), stdio).start();
        self.sessions.insert(session, Session { server: server.clone(), probe, leave, not_in_force });
        self.disarm_idle(ctx);
        Ok(server)
    }

    /// The options a relay asked that this worker cannot apply to its session, each with why:
    /// both are the workspace's, shared by every session, so one session's value would change
    /// the others' (the child servers a call of theirs reaches, the slots their calls wait for).
    fn not_in_force(&self, asked: &WorkerSettings) -> Vec<NotInForce> {
        let mine = &self.spec.settings;
        let mut out = Vec::new();
        if asked.max_inflight != mine.max_inflight {
            out.push(NotInForce {
                option: "--max-inflight",
                asked: json!(asked.max_inflight),
                in_force: json!(mine.max_inflight),
                why: "calls of every session share the workspace worker's slots; its limit is the one its first \
                      session started it with (stop the worker to start one with this limit)",
            });
        }
        if asked.max_result_bytes.is_some() && asked.max_result_bytes != mine.max_result_bytes {
            out.push(NotInForce {
                option: "--max-result-bytes",
                asked: json!(asked.max_result_bytes),
                in_force: json!(mine.max_result_bytes),
                why: "replies of every session are cut by the workspace worker's budget, the one its first session \
                      started it with; a run_code call can still ask for another with maxResultBytes",
            });
        }
        if asked.sandbox != mine.sandbox {
            out.push(NotInForce {
                option: "--sandbox",
                asked: json!(asked.sandbox),
                in_force: json!(mine.sandbox),
                why: "shells, jobs and child servers are the workspace's, shared by every session; the worker keeps \
                      the box it started with (stop the worker to start one in this box)",
            });
        }
        if asked.mcp_config != mine.mcp_config {
            out.push(NotInForce {
                option: "--mcp-config",
                asked: json!(asked.mcp_config),
                in_force: json!(mine.mcp_config),
                why: "child servers are the workspace's, shared by every session; the worker follows the config \
                      it started with, edits to it included (stop the worker to start one with this config)",
            });
        }
        out
    }

    /// What a relay asked of the worker that this worker does otherwise (it keeps its own).
    fn differences(&self, asked: &WorkerSettings) -> Vec<String> {
        let mine = &self.spec.settings;
        let mut out = Vec::new();
        if asked.max_inflight != mine.max_inflight {
            out.push(format!("--max-inflight {} (the running worker has {})", asked.max_inflight, mine.max_inflight));
        }
        if asked.sandbox != mine.sandbox {
            out.push(format!(
                "--sandbox {} (the running worker has {})",
                asked.sandbox.mode.as_str(),
                mine.sandbox.mode.as_str()
            ));
        }
        if asked.mcp_config != mine.mcp_config {
            let show = |p: &Option<PathBuf>| p.as_ref().map_or("none".to_owned(), |p| p.display().to_string());
            out.push(format!(
                "--mcp-config {} (the running worker has {})",
                show(&asked.mcp_config),
                show(&mine.mcp_config)
            ));
        }
        out
    }

    /// A new connection: its peer checked, its first line read, then a session or a status.
    fn accepted(&mut self, stream: local::AsyncStream, ctx: &mut Context<Self>) {
        if self.stopping.is_some() {
            return;
        }
        let uid = gm_actors::sys::current_uid();
        match local::peer(&stream) {
            Ok((peer_uid, _)) if peer_uid == uid => {}
            other => {
                let peer = other.ok().map(|(uid, pid)| json!({ "uid": uid, "pid": pid }));
                self.log(Event::new("session", json!({ "state": "refused", "why": "another user", "peer": peer })));
                return;
            }
        }
        self.opening += 1;
        self.disarm_idle(ctx);
        let split = stream.into_std().and_then(local::split);
        let Ok((read, write)) = split else {
            self.opening -= 1;
            self.arm_idle(ctx);
            return;
        };
        let first = async move {
            let mut lines = SocketLines::new(read, HELLO_MAX);
            let first = tokio::time::timeout(HELLO_TIMEOUT, lines.first_with_fds()).await;
            (first, lines)
        };
        ctx.spawn(actix::fut::wrap_future(first).map(move |(first, lines), act: &mut Self, ctx| {
            act.opening -= 1;
            let (first, fds) = match first {
                Ok((Some(Incoming::Line(text)), fds)) => (serde_json::from_str::<First>(&text).ok(), fds),
                _ => (None, Vec::new()),
            };
            let writer = SocketWriter::new(write, QUEUE_LIMIT).start();
            match first {
                Some(First::Status) => {
                    let status = act.status(ctx);
                    actix::spawn(async move {
                        writer.do_send(SendLine(status.await.to_string()));
                    });
                }
                Some(First::Hello(hello)) if hello.protocol != hello::PROTOCOL => {
                    let why = format!(
                        "this worker (gm {}, pid {}) speaks relay protocol {}, the relay {}: stop the worker or wait for it to go idle",
                        act.build.version,
                        act.build.pid,
                        hello::PROTOCOL,
                        hello.protocol
                    );
                    send_answer(&writer, &Answer::Refused { why });
                }
                Some(First::Hello(mut hello)) => {
                    // As a build from before direct sessions would: the fds are dropped unread
                    // and the session stays on the socket (`GM_WORKER_DIRECT=0`, for tests and
                    // diagnosis).
                    hello.direct &= std::env::var_os("GM_WORKER_DIRECT").is_none_or(|v| v != "0");
                    let session = match session_io(&hello, fds, lines, &writer) {
                        Ok(io) => io,
                        Err(why) => {
                            send_answer(&writer, &Answer::Refused { why });
                            act.arm_idle(ctx);
                            return;
                        }
                    };
                    let differs = act.differences(&hello.worker);
                    let SessionIo { lines, out, probe, pipes, control, leave } = session;
                    let direct = control.is_some();
                    match act.open_session(hello, out, probe, leave, ctx) {
                        Ok(server) => {
                            let welcome = Welcome {
                                protocol: hello::PROTOCOL,
                                worker: act.build.clone(),
                                differs,
                                pipes,
                                direct,
                            };
                            send_answer(&writer, &Answer::Welcome(welcome));
                            let reader = {
                                let server = server.clone();
                                actix::spawn(async move {
                                    match lines {
                                        SessionLines::Socket(mut lines) => {
                                            while let Some(message) = lines.next().await {
                                                server.do_send(message);
                                            }
                                        }
                                        SessionLines::Direct(mut lines) => {
                                            while let Some(message) = lines.next().await {
                                                server.do_send(message);
                                            }
                                        }
                                    }
                                })
                            };
                            if let Some((control, direct_writer)) = control {
                                let host_lines = reader.abort_handle();
                                actix::spawn(direct::read_relay(
                                    control,
                                    direct_writer.downgrade(),
                                    server.recipient(),
                                    host_lines,
                                ));
                            }
                        }
                        Err(why) => send_answer(&writer, &Answer::Refused { why }),
                    }
                }
                None => {}
            }
            act.arm_idle(ctx);
        }));
    }

    /// Everything `gm status` shows, as of now.
    fn status(&self, _: &mut Context<Self>) -> impl std::future::Future<Output = Value> + 'static {
        let sessions: Vec<(Addr<Server>, Vec<NotInForce>)> =
            self.sessions.values().map(|s| (s.server.clone(), s.not_in_force.clone())).collect();
        let (jobs, children) = (self.app.ctx.jobs.clone(), self.app.ctx.children.clone());
        let worker = json!({
            "pid": self.build.pid,
            "version": self.build.version,
            "exe": self.build.exe,
            "id": self.spec.id,
            "uptimeMs": self.started.elapsed().as_millis() as u64,
            "rssBytes": gm_actors::sys::rss_bytes(self.build.pid),
            "workspace": self.spec.files.workspace,
            "socket": self.spec.listener.as_ref().map(|(_, p)| p.clone()),
            "maxInflight": self.spec.settings.max_inflight,
            "mcpConfig": self.spec.settings.mcp_config,
            "sandbox": crate::sandbox_config::describe(self.app.ctx.sandbox.as_deref())
                .unwrap_or_else(|| json!({ "mode": "off" })),
            "idleGraceMs": self.spec.idle.as_millis() as u64,
        });
        async move {
            let mut described = Vec::new();
            for (s, not_in_force) in sessions {
                if let Ok(mut d) = s.send(Describe).await {
                    if let (false, Some(m)) = (not_in_force.is_empty(), d.as_object_mut()) {
                        m.insert("notInForce".into(), json!(not_in_force));
                    }
                    described.push(d);
                }
            }
            described.sort_by_key(|d| std::cmp::Reverse(d["connectedMs"].as_u64()));
            let jobs = jobs.send(ListJobs).await.unwrap_or_default();
            let (bodies, shells): (Vec<_>, Vec<_>) = jobs.into_iter().partition(|j| j.kind == JobKind::Body);
            json!({
                "worker": worker,
                "sessions": described,
                "jobs": shells,
                "bodies": bodies,
                "children": children.describe(),
            })
        }
    }

    /// The idle countdown starts when the last session and the last half-open connection are
    /// gone.
    fn arm_idle(&mut self, ctx: &mut Context<Self>) {
        if self.stopping.is_some() || !self.sessions.is_empty() || self.opening > 0 || self.idle_timer.is_some() {
            return;
        }
        if self.spec.listener.is_none() {
            return; // a stdio worker that does not listen ends with its host
        }
        self.idle_timer = Some(ctx.run_later(self.spec.idle, |act, ctx| {
            act.idle_timer = None;
            act.try_idle_exit(ctx);
        }));
    }

    fn disarm_idle(&mut self, ctx: &mut Context<Self>) {
        if let Some(timer) = self.idle_timer.take() {
            ctx.cancel_future(timer);
        }
    }

    fn quiet(&self) -> bool {
        self.stopping.is_none() && self.sessions.is_empty() && self.opening == 0
    }

    /// Leaves when still quiet and no background body runs: under the relays' start lock, so
    /// that no relay connects between the last look and the socket's removal.
    fn try_idle_exit(&mut self, ctx: &mut Context<Self>) {
        if !self.quiet() {
            return;
        }
        let jobs = self.app.ctx.jobs.clone();
        let lock_path = self.spec.files.start_lock.clone();
        let check = async move {
            let jobs = jobs.send(ListJobs).await.unwrap_or_default();
            let bodies = jobs.iter().any(|j| j.kind == JobKind::Body && j.state == JobState::Running);
            if bodies {
                return (true, None);
            }
            let lock = tokio::task::spawn_blocking(move || gm_actors::state_file::lock(&lock_path, true)).await;
            // A lock file that cannot be made (the workspace was deleted) keeps no relay out
            // either: leave without it.
            (false, lock.ok().and_then(Result::ok))
        };
        ctx.spawn(actix::fut::wrap_future(check).map(|(bodies, lock), act: &mut Self, ctx| {
            if bodies {
                act.idle_timer = Some(ctx.run_later(BODY_RECHECK, |act, ctx| {
                    act.idle_timer = None;
                    act.try_idle_exit(ctx);
                }));
                return;
            }
            let waiting =
                act.listen_fd.is_some_and(|fd| gm_actors::sys::wait_readable(fd, Duration::ZERO).unwrap_or(false));
            if !act.quiet() || waiting {
                // A relay came meanwhile: stay.
                act.arm_idle(ctx);
                return;
            }
            act._start_lock = lock.flatten();
            act.stop(Stop::Idle, ctx);
        }));
    }

    /// Stops the worker: no new connection (the socket is removed), every session's calls
    /// cancelled and drained, foreground shells and child servers ended, then `stop` — the
    /// last event this worker writes — synced, a clean exit line, and the exit.
    fn stop(&mut self, stop: Stop, ctx: &mut Context<Self>) {
        if self.stopping.is_some() {
            return;
        }
        self.stopping = Some(stop);
        // What the hosts of direct sessions write from now on waits on their stdin for the
        // next worker, which runs it (the relay answers only the calls this one took).
        for session in self.sessions.values() {
            if let Some(leave) = &session.leave {
                leave.now();
            }
        }
        self.disarm_idle(ctx);
        if let Some((_, socket)) = &self.spec.listener {
            let _ = std::fs::remove_file(socket);
        }
        let sessions: Vec<Addr<Server>> = self.sessions.values().map(|s| s.server.clone()).collect();
        let (log, jobs, children) =
            (self.app.ctx.log.clone(), self.app.ctx.jobs.clone(), self.app.ctx.children.clone());
        let (exits, pid) = (self.spec.files.exits.clone(), self.build.pid);
        let count = sessions.len();
        let uptime = self.started.elapsed();
        ctx.spawn(actix::fut::wrap_future(async move {
            futures::future::join_all(sessions.iter().map(|s| s.send(EndNow))).await;
            // Foreground shells end with the worker, and so do the child servers; background
            // jobs outlive it.
            let _ = jobs.send(KillForeground).await;
            children.stop().await;
            if let Some(log) = log {
                let mut fields =
                    json!({ "reason": stop.reason(), "sessions": count, "uptimeMs": uptime.as_millis() as u64 });
                if let Stop::Signal(n) = stop {
                    fields["signal"] = json!(gm_actors::sys::signal_name(n));
                }
                log.do_send(Event::new("stop", fields));
                let _ = tokio::time::timeout(Duration::from_millis(500), log.send(Flush)).await;
            }
            exits::record(&exits, &exits::Exit::now(pid, true, stop.reason()));
            System::current().stop_with_code(stop.exit_code());
        }));
    }
}

/// Where a session's lines come from.
enum SessionLines {
    Socket(SocketLines),
    Direct(direct::DirectLines),
}

/// Where a session's lines come from and go to: the host's own stdio, the pipes its hello
/// brought, or the socket.
struct SessionIo {
    lines: SessionLines,
    out: Recipient<SendLine>,
    /// A copy of what the session is read from, to ask whether the relay left.
    probe: Option<std::os::fd::OwnedFd>,
    pipes: bool,
    /// A direct session: the relay's lines on the socket, and the host's writer they concern.
    control: Option<(SocketLines, Addr<direct::DirectWriter>)>,
    leave: Option<direct::LeaveInput>,
}

fn session_io(
    hello: &Hello,
    fds: Vec<std::os::fd::OwnedFd>,
    socket_lines: SocketLines,
    socket_out: &Addr<SocketWriter>,
) -> Result<SessionIo, String> {
    if hello.direct {
        if socket_lines.holds_more() {
            return Err("lines followed a direct hello".into());
        }
        let probe = socket_lines.probe().map_err(|e| format!("the session's socket: {e}"))?;
        let socket_end = socket_lines.probe().map_err(|e| format!("the session's socket: {e}"))?;
        let mut control = socket_lines;
        control.set_max_line(hello.max_line_bytes);
        let io = direct::open(fds, hello.max_line_bytes, socket_out.clone(), local::Half::from(socket_end))?;
        return Ok(SessionIo {
            lines: SessionLines::Direct(io.lines),
            out: io.out.clone().recipient(),
            probe: Some(probe),
            pipes: false,
            control: Some((control, io.out)),
            leave: Some(io.leave),
        });
    }
    if !hello.pipes {
        // Descriptors nobody asked for are closed here (dropped with `fds`).
        let probe = socket_lines.probe().ok();
        let mut lines = socket_lines;
        lines.set_max_line(hello.max_line_bytes);
        return Ok(SessionIo {
            lines: SessionLines::Socket(lines),
            out: socket_out.clone().recipient(),
            probe,
            pipes: false,
            control: None,
            leave: None,
        });
    }
    // Nothing may follow a hello that brought pipes: the session speaks on them.
    let [from_relay, to_relay]: [std::os::fd::OwnedFd; 2] =
        fds.try_into().map_err(|fds: Vec<_>| format!("the hello named pipes but brought {} descriptors", fds.len()))?;
    if socket_lines.holds_more() {
        return Err("lines followed a hello that brought pipes".into());
    }
    let io = |e: std::io::Error| format!("the session's pipes: {e}");
    let read = local::Reader::new(from_relay).map_err(io)?;
    let probe = read.probe().ok();
    let out = SocketWriter::new(local::Writer::new(to_relay).map_err(io)?, QUEUE_LIMIT).start();
    Ok(SessionIo {
        lines: SessionLines::Socket(SocketLines::new(read, hello.max_line_bytes)),
        out: out.recipient(),
        probe,
        pipes: true,
        control: None,
        leave: None,
    })
}

fn send_answer(writer: &Addr<SocketWriter>, answer: &Answer) {
    if let Ok(line) = serde_json::to_string(answer) {
        writer.do_send(SendLine(line));
    }
}

impl Actor for Worker {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        let Some((listener, _)) = self.spec.listener.as_ref() else { return };
        let listener = listener.try_clone().and_then(|l| {
            l.set_nonblocking(true)?;
            local::AsyncListener::from_std(l)
        });
        match listener {
            Ok(listener) => {
                self.listen_fd = Some(std::os::fd::AsRawFd::as_raw_fd(&listener));
                let connections = futures::stream::unfold(listener, |l| async move {
                    let next = l.accept().await.map(|(stream, _)| stream);
                    Some((next, l))
                });
                ctx.add_stream(connections);
                self.arm_idle(ctx);
            }
            Err(e) => {
                gm_actors::stderr_line!("gm: the worker cannot listen: {e}");
                self.stop(Stop::Idle, ctx);
            }
        }
    }
}

impl StreamHandler<std::io::Result<local::AsyncStream>> for Worker {
    fn handle(&mut self, item: std::io::Result<local::AsyncStream>, ctx: &mut Context<Self>) {
        match item {
            Ok(stream) => self.accepted(stream, ctx),
            // Out of descriptors, a connection reset before accept: the next one may do.
            Err(e) => gm_actors::stderr_line!("gm: accepting a connection failed: {e}"),
        }
    }

    fn finished(&mut self, _: &mut Context<Self>) {}
}

impl Handler<OpenStdio> for Worker {
    type Result = Result<Addr<Server>, String>;
    fn handle(&mut self, msg: OpenStdio, ctx: &mut Context<Self>) -> Self::Result {
        self.open_session(msg.hello, msg.out, None, None, ctx)
    }
}

impl Handler<SessionNews> for Worker {
    type Result = ();
    fn handle(&mut self, news: SessionNews, ctx: &mut Context<Self>) {
        match news {
            SessionNews::Ended(session) => {
                self.sessions.remove(&session);
                self.leaving.remove(&session);
                self.arm_idle(ctx);
            }
            SessionNews::Leaving(session) => {
                if self.sessions.contains_key(&session) {
                    self.leaving.insert(session);
                }
            }
            SessionNews::StdinClosed => self.stop(Stop::StdinClosed, ctx),
        }
    }
}

impl Handler<Stop> for Worker {
    type Result = ();
    fn handle(&mut self, stop: Stop, ctx: &mut Context<Self>) {
        self.stop(stop, ctx);
    }
}

impl Handler<Status> for Worker {
    type Result = ResponseFuture<Value>;

    fn handle(&mut self, _: Status, ctx: &mut Context<Self>) -> Self::Result {
        Box::pin(self.status(ctx))
    }
}

/// The idle grace from `GM_WORKER_IDLE_MS`, else [`IDLE_GRACE`].
pub fn idle_grace() -> Duration {
    std::env::var("GM_WORKER_IDLE_MS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map_or(IDLE_GRACE, Duration::from_millis)
}
