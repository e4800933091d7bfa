//! The relay: `gm serve` as the host sees it. It owns the host's stdio and one session of the
//! workspace's worker (`crate::worker`), which it finds on the worker's socket or starts
//! ([`connect`]), and forwards lines both ways. When the worker dies (a panic that escapes, an
//! abort in the engine's C code, SIGKILL, the OOM killer) the calls this session had in flight
//! are answered with `worker_restarted`, the worker is found again — started by this relay, or
//! by another relay of the workspace that saw the death first — and the host's `initialize`,
//! `notifications/initialized` and read of `skill://gm/SKILL.md` are replayed to it under the
//! same session, so the connection, its read gate and its run carry on.
//!
//! Nothing here can crash: no JS, no verbs, no JSON beyond [`peek`] (ids and methods) and the
//! small lines it writes itself. Each line is held once, in the buffer it was read into.
//!
//! Threads: the caller's thread reads the host and writes to the worker; a supervisor thread
//! reads the worker, writes to the host, and reconnects; a signal thread ends the session on
//! SIGINT, SIGTERM and SIGHUP.

pub(crate) mod connect;
mod direct;
pub mod journal;
mod lines;
pub mod peek;
mod rollback;

use gm_actors::sys::local::{self, Half};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufReader, Write};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use gm_actors::sys;
use serde_json::{json, Value};

use crate::server::surface::Surface;
use crate::worker::exits::{self, Exit};
use crate::worker::hello::{Build, Hello, WorkerSettings, PROTOCOL};
use crate::worker::paths::Files;
use connect::{ConnectError, Connection, Finder};
use journal::{Call, Handshake, GATE_SKILL, OWN_ID_PREFIX};
use lines::{LineReader, ReadLine};
use peek::{id_key, Peek};

/// Lines that arrive together are written on in batches of up to this many bytes.
const BATCH_BYTES: usize = 256 << 10;
/// Deaths of the workspace's worker within [`CRASH_WINDOW`] after which it is not started again.
pub const MAX_CRASHES: usize = 5;
pub const CRASH_WINDOW: Duration = Duration::from_secs(60);
/// The pause before starting the worker again after its 1st, 2nd, 3rd and 4th death in the window.
const BACKOFF: [Duration; 4] =
    [Duration::ZERO, Duration::from_millis(200), Duration::from_millis(800), Duration::from_millis(3200)];
/// Failed attempts in a row (a refused session, a socket that will not connect) after which the
/// relay gives up.
const MAX_ATTEMPTS: usize = 10;
/// The longest a relay about to start a worker waits for the host's first line, already
/// on stdin, to be answered.
const FIRST_LINE_WAIT: Duration = Duration::from_millis(20);
/// How long a relay ended by a signal waits for the worker to end its session.
const SIGNAL_GRACE: Duration = Duration::from_millis(800);
/// Ids of the relay's own replayed calls; their answers never reach the host.
const REPLAY_INIT_ID: &str = "\"gm-relay:initialize\"";
const REPLAY_SKILL_ID: &str = "\"gm-relay:skill-read\"";
/// The id an `initialize` the relay answered itself goes to the worker with: its answer is
/// dropped.
const EARLY_INIT_ID: &str = "\"gm-relay:early-initialize\"";
/// The notification a relay sends when a signal ends it: the worker cancels the session's
/// calls at once instead of giving them a grace.
pub const END_NOW: &str = "gm/relay/end";

#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// The `gm serve` arguments the relay was given, passed on to a worker it starts.
    pub serve_args: Vec<OsString>,
    pub workspace: PathBuf,
    pub surface: Surface,
    pub max_line_bytes: usize,
    pub page_size: usize,
    pub step_budget: u64,
    pub max_inflight: usize,
    pub mcp_config: Option<PathBuf>,
    /// The box chosen by the flags and `~/.gmnew/config.json` (the worker applies its own).
    pub sandbox: crate::sandbox_config::SandboxSettings,
    /// The reply budget (the worker applies its own).
    pub budget: crate::budget::Limits,
}

/// Runs the relay until the host closes stdin (or a signal ends it); returns the exit code.
pub fn run(opts: RelayOptions) -> i32 {
    sys::huge_pages(false);
    let workspace = match std::fs::canonicalize(&opts.workspace) {
        Ok(w) if w.is_dir() => w,
        Ok(w) => {
            gm_actors::stderr_line!("gm: workspace {}: not a directory", w.display());
            return 1;
        }
        Err(e) => {
            gm_actors::stderr_line!("gm: workspace {}: {e}", opts.workspace.display());
            return 1;
        }
    };
    // A config the user named must be there, whether this relay starts the worker or joins one.
    if let Some(named) = &opts.mcp_config {
        if let Err(e) = crate::mcp_config::load(&workspace, Some(named)) {
            gm_actors::stderr_line!("gm: {e}");
            return 1;
        }
    }
    // Before anything is written under `.gm/`: what a repository committed there is checked.
    if let Err(e) = Files::of(&workspace).check() {
        gm_actors::stderr_line!("gm: {e}");
        return 1;
    }
    let relay = Arc::new(Relay::new(opts, workspace));
    if relay.direct.is_some() {
        return run_direct(relay);
    }
    // The host's reader starts before the worker is reached: an `initialize` that arrives
    // while a worker starts is answered at once (see `answer_early`), and every other line
    // waits in `send_to_worker` for the connection.
    let host = match relay.clone().start_host_reader() {
        Ok(handle) => handle,
        Err(e) => {
            gm_actors::stderr_line!("gm: cannot start the relay's reader: {e}");
            return 1;
        }
    };
    let Some(conn) = relay.connect_reporting() else { return 1 };
    let Connection { reader, writer, worker, .. } = conn;
    {
        let mut pipe = lock(&relay.pipe);
        // A host that left while the worker started: the worker hears it (the reader found
        // no connection to close).
        if relay.host_closed.load(Ordering::SeqCst) {
            let _ = local::end_writes(&writer);
        }
        pipe.writer = Some(writer);
        pipe.connected = true;
    }
    watch_stop_signals(relay.clone());
    match relay.supervise(reader, worker) {
        // The host's reader may be blocked on its stdin: the process ends without it.
        Ended::Exit(code) => code,
        Ended::GaveUp => {
            let _ = host.join();
            1
        }
    }
}

/// `run` for a host whose stdio the worker can take (see [`direct`]).
fn run_direct(relay: Arc<Relay>) -> i32 {
    let Some(direct) = relay.direct.as_ref() else { return 1 };
    if let Err(e) = direct.read_early(relay.clone()) {
        gm_actors::stderr_line!("gm: cannot start the relay's reader: {e}");
        return 1;
    }
    let Some(conn) = relay.connect_reporting() else { return 1 };
    watch_stop_signals(relay.clone());
    let ended = if conn.direct {
        let Connection { reader, writer, worker, .. } = conn;
        {
            let mut pipe = lock(&relay.pipe);
            pipe.writer = Some(writer);
            pipe.connected = true;
        }
        relay.supervise_direct(direct, reader, worker.pid)
    } else {
        relay.carry(direct, conn)
    };
    match ended {
        Ended::Exit(code) => code,
        Ended::GaveUp => {
            // Every later call is answered with the reason, until the host leaves.
            if !relay.carried.load(Ordering::SeqCst) {
                let _ = sys::set_blocking(std::io::stdin().as_fd());
                relay.read_host();
            }
            1
        }
    }
}

/// How the supervisor ended.
enum Ended {
    /// The host left or a signal ended the relay: exit with this code.
    Exit(i32),
    /// The worker kept dying; the relay answers calls with the reason until the host leaves.
    GaveUp,
}

/// The worker's side of the session and whether the relay gave up on it.
struct Pipe {
    writer: Option<Half>,
    /// Which connection `writer` belongs to: 0 for the first, one more for each reconnect.
    generation: u64,
    /// Set once the relay gave up: every later call is answered with this.
    dead: Option<String>,
    /// A worker has been reached once: from then on `initialize` goes to it.
    connected: bool,
}

/// Lines to write to the worker, with where each ends and the calls among them.
#[derive(Default)]
struct Outgoing {
    bytes: Vec<u8>,
    /// The end offset of each line in `bytes`.
    ends: Vec<usize>,
    /// (line index, id key, call).
    calls: Vec<(usize, String, Call)>,
    /// Ids the host cancelled in these lines: they leave the calls in flight once written.
    cancels: Vec<String>,
}

impl Outgoing {
    fn clear(&mut self) {
        self.bytes.clear();
        self.ends.clear();
        self.calls.clear();
        self.cancels.clear();
    }

    fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The lines from `first` on, as their own batch.
    fn lines_from(&self, first: usize) -> Outgoing {
        let start = if first == 0 { 0 } else { self.ends[first - 1] };
        Outgoing {
            bytes: self.bytes[start..].to_vec(),
            ends: self.ends[first..].iter().map(|e| e - start).collect(),
            calls: self
                .calls
                .iter()
                .filter(|(l, ..)| *l >= first)
                .map(|(l, k, c)| (l - first, k.clone(), c.clone()))
                .collect(),
            cancels: self.cancels.clone(),
        }
    }
}

struct Relay {
    finder: Finder,
    hello: Hello,
    max_line: usize,
    /// Held while lines are written to the worker and while the connection is replaced, so a
    /// call is either in flight on the old worker (and answered as lost) or sent to the new one.
    pipe: Mutex<Pipe>,
    /// Calls sent to the worker and not answered yet, by [`id_key`].
    inflight: Mutex<HashMap<String, Call>>,
    handshake: Mutex<Handshake>,
    /// Events for the next worker to log (a rollback), sent in the next hello.
    notes: Mutex<Vec<Value>>,
    /// Messages of the workers that failed to start, in a row.
    failed_starts: Mutex<Vec<String>>,
    host_out: Mutex<std::io::Stdout>,
    host_closed: AtomicBool,
    /// A signal ended the relay (its number), or 0.
    signalled: AtomicI32,
    /// Set once the host's first line was dealt with (answered early, or waiting for the
    /// worker), or the host closed: see [`Relay::let_host_first`].
    first_line: (Mutex<bool>, std::sync::Condvar),
    /// The host's stdio can be handed to the worker.
    direct: Option<direct::Direct>,
    /// The relay reads the host itself (never direct, or since a worker would not take it).
    carried: AtomicBool,
}

/// A mutex whose holder panicked still guards sound data here (plain maps and handles).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Relay {
    fn new(opts: RelayOptions, workspace: PathBuf) -> Relay {
        let files = Files::of(&workspace);
        let hello = Hello {
            protocol: PROTOCOL,
            session: crate::run_state::new_session_id(),
            relay: Build::this_process(),
            surface: opts.surface.as_str().to_owned(),
            page_size: opts.page_size,
            step_budget: opts.step_budget,
            max_line_bytes: opts.max_line_bytes,
            worker: WorkerSettings {
                max_inflight: opts.max_inflight,
                // The worker resolves it against the relay's folder: give it whole.
                mcp_config: opts.mcp_config.map(|p| std::path::absolute(&p).unwrap_or(p)),
                sandbox: opts.sandbox,
                max_result_bytes: Some(opts.budget.max_result_bytes),
            },
            notes: Vec::new(),
            stateless: false,
            pipes: true,
            direct: false,
            http: false,
        };
        let direct = direct::eligible().then(|| direct::Direct::new(opts.max_line_bytes));
        Relay {
            finder: Finder { files, exe: worker_exe(), serve_args: opts.serve_args, reaped: Default::default() },
            hello,
            max_line: opts.max_line_bytes,
            pipe: Mutex::new(Pipe { writer: None, generation: 0, dead: None, connected: false }),
            inflight: Mutex::new(HashMap::new()),
            handshake: Mutex::new(Handshake::default()),
            notes: Mutex::new(Vec::new()),
            failed_starts: Mutex::new(Vec::new()),
            host_out: Mutex::new(std::io::stdout()),
            host_closed: AtomicBool::new(false),
            signalled: AtomicI32::new(0),
            first_line: (Mutex::new(false), std::sync::Condvar::new()),
            carried: AtomicBool::new(direct.is_none()),
            direct,
        }
    }

    /// The first connection, with what the host should know of it on stderr: `None` when no
    /// worker could be reached (the reason printed).
    fn connect_reporting(&self) -> Option<Connection> {
        let conn = match self.connect_first() {
            Ok(conn) => conn,
            Err(e) => {
                gm_actors::stderr_line!("gm: {e}");
                return None;
            }
        };
        for d in &conn.differs {
            gm_actors::stderr_line!(
                "gm: the workspace's worker was already running; it keeps its own setting instead of {d}"
            );
        }
        Some(conn)
    }

    fn start_host_reader(self: Arc<Self>) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name("gm-relay-host".into()).spawn(move || self.read_host())
    }

    /// Called just before this relay starts a worker. A host's `initialize` already waiting
    /// on stdin is answered first: the worker's start (a process, an index, child servers)
    /// would otherwise take the core from the relay's early answer where cores are few. A
    /// host that has written nothing yet costs no wait.
    fn let_host_first(&self) {
        let (done, cvar) = &self.first_line;
        let done = lock(done);
        if *done || !sys::input_waiting(&std::io::stdin()) {
            return;
        }
        let _ = cvar.wait_timeout_while(done, FIRST_LINE_WAIT, |done| !*done);
    }

    fn first_line_done(&self) {
        let (done, cvar) = &self.first_line;
        let mut done = lock(done);
        if !*done {
            *done = true;
            cvar.notify_all();
        }
    }

    /// The first connection: a worker that cannot start ends the relay with its message
    /// (unless it is an update that can be rolled back).
    fn connect_first(&self) -> Result<Connection, ConnectError> {
        let mut attempts = 0;
        loop {
            let deaths = exits::deaths(&self.finder.files.exits, CRASH_WINDOW);
            if deaths.len() >= MAX_CRASHES {
                return Err(ConnectError::Other(self.gave_up_message(&deaths)));
            }
            match self.connect(deaths.len()) {
                // Refused while another worker was leaving, a socket gone stale: try again.
                Err(ConnectError::Refused(_) | ConnectError::Other(_)) if attempts < 3 => {
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(ConnectError::Startup { message }) if rollback::is_update(&self.finder.exe) => {
                    gm_actors::stderr_line!("gm: {message}");
                }
                other => return other,
            }
        }
    }

    /// Connects, saying hello with the notes waiting for a worker to log. A start that fails
    /// is counted; two in a row of a build the Updater staged roll it back.
    fn connect(&self, restarts: usize) -> Result<Connection, ConnectError> {
        let mut hello = self.hello.clone();
        hello.notes = lock(&self.notes).clone();
        let direct = self.direct.as_ref().filter(|_| !self.carried.load(Ordering::SeqCst));
        hello.direct = direct.is_some();
        // A worker that does not know of direct sessions (an older build) then drops the
        // descriptors and speaks on the socket; one asked for pipes too would refuse them.
        hello.pipes &= !hello.direct;
        let fds = || direct.map_or_else(|| Ok(Vec::new()), |d| d.hello_fds(self));
        match self.finder.connect(&hello, restarts, &|| self.let_host_first(), Some(&fds)) {
            Ok(conn) => {
                lock(&self.notes).clear();
                lock(&self.failed_starts).clear();
                Ok(conn)
            }
            Err(ConnectError::Startup { message }) => {
                let causes = {
                    let mut failed = lock(&self.failed_starts);
                    failed.push(message.clone());
                    (failed.len() >= rollback::FAILED_STARTS).then(|| std::mem::take(&mut *failed))
                };
                if let Some(note) = causes.and_then(|causes| rollback::roll_back(&self.finder.exe, &causes)) {
                    gm_actors::stderr_line!(
                        "gm: the build the update staged did not start twice; {} runs again",
                        note["to"]
                    );
                    lock(&self.notes).push(note);
                }
                Err(ConnectError::Startup { message })
            }
            Err(e) => Err(e),
        }
    }

    fn gave_up_message(&self, deaths: &[Exit]) -> String {
        let causes: Vec<&str> = deaths.iter().map(|d| d.cause.as_str()).collect();
        format!(
            "gm's worker died {} times within a minute ({}) and is not started again; the run log is {}; restart the MCP server to try again",
            deaths.len(),
            causes.join(", "),
            self.finder.files.state_dir.join("log.jsonl").display()
        )
    }

    /// The host's side: each line is peeked, noted when it belongs to the handshake, tracked
    /// when it is a call, and written to the worker.
    fn read_host(&self) {
        let mut reader = LineReader::new(std::io::stdin().lock(), self.max_line);
        // Grown once to the line limit when a line needs more: a big line is not copied from
        // buffer to buffer as it arrives.
        let mut line = Vec::with_capacity(1 << 16);
        // Lines that arrived together go to the worker in one write.
        let mut out = Outgoing { bytes: Vec::with_capacity(BATCH_BYTES), ..Outgoing::default() };
        loop {
            match reader.read_line(&mut line) {
                Ok(ReadLine::Line) => {}
                Ok(ReadLine::TooLong) => {
                    self.send_to_worker(&out);
                    out.clear();
                    // Past the limit the worker drops it unread and answers; the relay only
                    // passes the bytes on, never holding more than the limit.
                    let mut pipe = lock(&self.pipe);
                    if let Some(writer) = pipe.writer.as_mut() {
                        let _ = writer.write_all(&line);
                        let _ = reader.pass_rest(|chunk| writer.write_all(chunk));
                    } else {
                        let _ = reader.pass_rest(|_| Ok(()));
                    }
                    continue;
                }
                Ok(ReadLine::Eof) | Err(_) => break,
            }
            if let Some(rewritten) = self.answer_early(&line) {
                line = rewritten;
            }
            self.first_line_done();
            let mut notes = Outgoing::default();
            if Peek::is_batch(&line) {
                for peek in Peek::of_batch(&line) {
                    self.note(peek, &line, &mut notes);
                }
            } else {
                self.note(Peek::of(&line), &line, &mut notes);
            }
            line.push(b'\n');
            if line.len() >= BATCH_BYTES {
                // A big line goes alone, from its own buffer: never copied into a batch.
                self.send_to_worker(&out);
                out.clear();
                notes.ends.push(line.len());
                notes.bytes = std::mem::take(&mut line);
                self.send_to_worker(&notes);
                line = std::mem::take(&mut notes.bytes);
                continue;
            }
            let index = out.ends.len();
            out.calls.extend(notes.calls.drain(..).map(|(_, key, call)| (index, key, call)));
            out.cancels.append(&mut notes.cancels);
            out.bytes.extend_from_slice(&line);
            out.ends.push(out.bytes.len());
            // A lone call (nothing else in flight) goes at once: the host is waiting for it.
            let more = out.bytes.len() < BATCH_BYTES
                && (reader.has_buffered()
                    || (!lock(&self.inflight).is_empty() && sys::more_input_soon(&std::io::stdin())));
            if !more {
                self.send_to_worker(&out);
                out.clear();
            }
        }
        self.first_line_done();
        self.send_to_worker(&out);
        self.host_closed.store(true, Ordering::SeqCst);
        // Closing our side is how the worker learns the host left; its answers still come.
        if let Some(writer) = lock(&self.pipe).writer.as_ref() {
            let _ = local::end_writes(writer);
        }
    }

    /// An `initialize` that arrives before any worker was reached (this relay is starting
    /// one, or waiting for it) is answered now, from this build's own answer, so a host's
    /// connect does not wait for a worker to start; the line goes on to the worker under
    /// [`EARLY_INIT_ID`] (so the session is initialized as the host asked) and its answer is
    /// dropped. Returns the line to send instead.
    fn answer_early(&self, line: &[u8]) -> Option<Vec<u8>> {
        if Peek::is_batch(line) || lock(&self.pipe).connected {
            return None;
        }
        let peek = Peek::of(line);
        if peek.method.as_deref() != Some("initialize") {
            return None;
        }
        let raw_id = peek.id?;
        let id: Value = serde_json::from_str(&raw_id).ok()?;
        let message: Value = serde_json::from_slice(line).ok()?;
        let requested = message.pointer("/params/protocolVersion").and_then(Value::as_str);
        let rewritten = with_id(line, EARLY_INIT_ID)?;
        let result = serde_json::to_value(crate::protocol::mcp::initialize_result(requested)).ok()?;
        let mut reply = json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string().into_bytes();
        reply.push(b'\n');
        self.write_host(&reply);
        Some(rewritten)
    }

    /// Writes host lines to the worker, tracking the calls among them. A write that fails
    /// part way reached a worker that is gone: the lines it took whole may have run (their
    /// calls stay in flight, to be answered as lost), the rest wait for the next worker.
    fn send_to_worker(&self, out: &Outgoing) {
        if out.is_empty() {
            return;
        }
        let mut pending: Option<Outgoing> = None;
        let mut tried: Option<u64> = None;
        loop {
            let batch = pending.as_ref().unwrap_or(out);
            let mut pipe = lock(&self.pipe);
            if let Some(why) = &pipe.dead {
                let why = why.clone();
                drop(pipe);
                for (_, _, call) in &batch.calls {
                    self.answer_lost(call, "worker_failed", &why);
                }
                return;
            }
            if tried == Some(pipe.generation) || pipe.writer.is_none() {
                drop(pipe);
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            {
                let mut inflight = lock(&self.inflight);
                for (_, key, call) in &batch.calls {
                    inflight.insert(key.clone(), call.clone());
                }
            }
            let generation = pipe.generation;
            let Some(writer) = pipe.writer.as_mut() else { continue };
            let written = write_counting(writer, &batch.bytes);
            if written == batch.bytes.len() {
                let mut inflight = lock(&self.inflight);
                for key in &batch.cancels {
                    // A cancelled call gets no answer: it must not be answered later as lost.
                    inflight.remove(key);
                }
                return;
            }
            let first_unsent = batch.ends.iter().position(|&end| end > written).unwrap_or(batch.ends.len());
            let rest = batch.lines_from(first_unsent);
            {
                let mut inflight = lock(&self.inflight);
                for (_, key, _) in &rest.calls {
                    inflight.remove(key);
                }
            }
            if rest.is_empty() {
                return;
            }
            pending = Some(rest);
            tried = Some(generation);
        }
    }

    /// Notes what one message means for the handshake and adds its call (or cancellation) to
    /// `out`, as part of line 0.
    fn note(&self, peek: Peek, raw: &[u8], out: &mut Outgoing) {
        self.note_handshake(&peek, raw);
        if peek.method.as_deref() == Some("notifications/cancelled") {
            if let Some(id) = &peek.cancels {
                out.cancels.push(id_key(id));
            }
        }
        // An initialize the relay answered itself is nobody's call to answer again.
        if let Some((key, call)) = journal::call_of(&peek) {
            out.calls.push((0, key, call));
        }
    }

    fn note_handshake(&self, peek: &Peek, line: &[u8]) {
        if peek.method.is_some() {
            lock(&self.handshake).note(peek, line);
        }
    }

    fn ending(&self) -> Option<i32> {
        match self.signalled.load(Ordering::SeqCst) {
            0 if self.host_closed.load(Ordering::SeqCst) => Some(0),
            0 => None,
            n => Some(128 + n),
        }
    }

    /// The worker's side, for as long as the relay runs: forwards its lines, and when the
    /// connection drops, answers what it held and connects again.
    fn supervise(&self, mut reader: BufReader<Half>, mut worker: Build) -> Ended {
        loop {
            self.pump(&mut reader);
            if let Some(code) = self.ending() {
                return Ended::Exit(code);
            }
            // Holding the pipe: the host's next lines wait for the new connection.
            let mut pipe = lock(&self.pipe);
            pipe.writer = None;
            let cause = self.cause_of(worker.pid);
            let message = format!(
                "gm's worker stopped ({cause}) while this call was running, and was restarted; the call's effects may be partial: check before retrying"
            );
            self.answer_inflight("worker_restarted", &message);
            match self.reconnect(&mut pipe) {
                Ok(conn) => {
                    reader = conn.reader;
                    worker = conn.worker;
                    pipe.writer = Some(conn.writer);
                    pipe.generation += 1;
                }
                Err(ended) => return ended,
            }
        }
    }

    /// Finds a worker again after one died, within the workspace's allowance of deaths; the
    /// host's handshake is replayed to it, unless it took the host's stdio (its journal
    /// replays it). Gives up after [`MAX_CRASHES`] deaths in [`CRASH_WINDOW`] or
    /// [`MAX_ATTEMPTS`] failures in a row, setting `pipe.dead`.
    fn reconnect(&self, pipe: &mut MutexGuard<'_, Pipe>) -> Result<Connection, Ended> {
        let mut attempts = 0;
        loop {
            if let Some(code) = self.ending() {
                return Err(Ended::Exit(code));
            }
            let deaths = exits::deaths(&self.finder.files.exits, CRASH_WINDOW);
            if deaths.len() >= MAX_CRASHES || attempts >= MAX_ATTEMPTS {
                let why = if deaths.len() >= MAX_CRASHES {
                    self.gave_up_message(&deaths)
                } else {
                    format!(
                        "gm's worker could not be reached again after {attempts} attempts; the run log is {}; restart the MCP server to try again",
                        self.finder.files.state_dir.join("log.jsonl").display()
                    )
                };
                gm_actors::stderr_line!("gm: {why}");
                self.answer_inflight("worker_failed", &why);
                pipe.dead = Some(why);
                return Err(Ended::GaveUp);
            }
            std::thread::sleep(BACKOFF[deaths.len().min(BACKOFF.len() - 1)]);
            match self.connect(deaths.len()) {
                Ok(conn) if conn.direct => return Ok(conn),
                Ok(mut conn) => match self.replay(&mut conn) {
                    Ok(()) => return Ok(conn),
                    Err(why) => {
                        // That worker died too: its death counts before the next look.
                        let cause = self.cause_of(conn.worker.pid);
                        gm_actors::stderr_line!("gm: {why} ({cause})");
                        attempts += 1;
                    }
                },
                // Recorded as a death by the finder: the deaths decide what follows.
                Err(ConnectError::Startup { message }) => gm_actors::stderr_line!("gm: {message}"),
                Err(e) => {
                    gm_actors::stderr_line!("gm: {e}");
                    attempts += 1;
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    }

    /// How worker `pid` ended, as recorded by the relay that reaps it (or the worker itself,
    /// when it stopped on purpose); a death nobody recorded is recorded here.
    fn cause_of(&self, pid: u32) -> String {
        let exits_file = &self.finder.files.exits;
        // A worker this relay started: its reaper says how it ended (a clean stop's own line
        // wins).
        if let Some(cause) = self.finder.reaped.cause(pid, Duration::from_secs(10)) {
            return exits::of(exits_file, pid).filter(|e| e.clean).map_or(cause, |e| e.cause);
        }
        for _ in 0..30 {
            if let Some(exit) = exits::of(exits_file, pid) {
                return exit.cause;
            }
            if !sys::process_exists(pid) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(exit) = exits::of(exits_file, pid) {
            return exit.cause;
        }
        if sys::process_exists(pid) {
            return "its connection closed".into();
        }
        let cause = "it ended unseen".to_owned();
        exits::record(exits_file, &Exit::now(pid, false, cause.clone()));
        cause
    }

    /// Replays the host's handshake to a new worker under the same session; its answers are
    /// read here and dropped.
    fn replay(&self, conn: &mut Connection) -> Result<(), String> {
        let (initialize, initialized, skill_read) = {
            let hs = lock(&self.handshake);
            (hs.initialize.clone(), hs.initialized, hs.skill_read)
        };
        // A stateless (2026-07-28) host never initialized: only its skill read is replayed.
        if let Some(initialize) = initialize {
            let init_id = match with_id(&initialize, REPLAY_INIT_ID) {
                Some(line) => {
                    send(&mut conn.writer, &line)?;
                    REPLAY_INIT_ID.to_string()
                }
                None => {
                    // Not rewritable: sent as the host wrote it, its answer still dropped here.
                    send(&mut conn.writer, &initialize)?;
                    Peek::of(&initialize).id.unwrap_or_default()
                }
            };
            self.await_answer(&mut conn.reader, &init_id)?;
            if initialized {
                send(&mut conn.writer, br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
            }
        }
        if skill_read {
            let read = json!({ "jsonrpc": "2.0", "id": "gm-relay:skill-read", "method": "resources/read", "params": { "uri": GATE_SKILL } });
            send(&mut conn.writer, read.to_string().as_bytes())?;
            self.await_answer(&mut conn.reader, REPLAY_SKILL_ID)?;
        }
        Ok(())
    }

    /// Reads the worker until it answers `id`; anything else it says meanwhile goes to the host.
    fn await_answer(&self, reader: &mut BufReader<Half>, id: &str) -> Result<(), String> {
        let mut line = Vec::new();
        loop {
            line.clear();
            match lines::read_whole_line(reader, &mut line, self.max_line) {
                Ok(true) => {}
                Ok(false) | Err(_) => return Err("the new worker ended during the replayed handshake".into()),
            }
            let peek = Peek::of(&line);
            if peek.response && peek.id.as_deref() == Some(id) {
                return Ok(());
            }
            self.write_host(&line);
        }
    }

    /// Forwards the worker's lines to the host until the connection closes; lines that arrived
    /// together go out in one write.
    fn pump(&self, reader: &mut BufReader<Half>) {
        let mut line = Vec::with_capacity(1 << 16);
        let mut batch = Vec::with_capacity(BATCH_BYTES);
        loop {
            line.clear();
            match lines::read_whole_line(reader, &mut line, self.max_line) {
                Ok(true) => {}
                // A line cut off by the worker's death is not sent: its call is answered as lost.
                Ok(false) | Err(_) => break,
            }
            if Peek::is_batch(&line) {
                let mut inflight = lock(&self.inflight);
                for peek in Peek::of_batch(&line) {
                    if let (true, Some(id)) = (peek.response, &peek.id) {
                        inflight.remove(&id_key(id));
                    }
                }
            } else {
                let peek = Peek::of(&line);
                if let (true, Some(id)) = (peek.response, &peek.id) {
                    if id.starts_with(OWN_ID_PREFIX) {
                        // The host had its answer from the relay, or never asked.
                        continue;
                    }
                    lock(&self.inflight).remove(&id_key(id));
                }
            }
            if line.len() >= BATCH_BYTES {
                self.write_host(&batch);
                batch.clear();
                self.write_host(&line);
                continue;
            }
            batch.extend_from_slice(&line);
            // Give way for more replies only while other calls are in flight: the answer to a
            // lone call goes at once. (Giving way after every reply handed the core to the
            // worker's own work after a reply — a run_code body's engine thread — and cost a
            // run_code round trip some 250 µs.)
            let others = !lock(&self.inflight).is_empty();
            let more = !reader.buffer().is_empty() || (others && sys::more_input_soon(reader.get_ref()));
            if !more || batch.len() >= BATCH_BYTES {
                self.write_host(&batch);
                batch.clear();
            }
        }
        self.write_host(&batch);
    }

    /// Answers every call the dead worker held.
    fn answer_inflight(&self, code: &str, message: &str) {
        let lost: Vec<Call> = lock(&self.inflight).drain().map(|(_, call)| call).collect();
        for call in lost {
            self.answer_lost(&call, code, message);
        }
    }

    /// A tool error result for a tools/call, a JSON-RPC error for anything else.
    fn answer_lost(&self, call: &Call, code: &str, message: &str) {
        let id: Value = serde_json::from_str(&call.raw_id).unwrap_or(Value::Null);
        let error = json!({ "error": { "code": code, "message": message } });
        let reply = if call.tool_call {
            json!({
                "jsonrpc": "2.0",
                "id": id,
                "result": {
                    "content": [{ "type": "text", "text": error.to_string() }],
                    "structuredContent": error,
                    "isError": true,
                    // Required by the stateless revision, harmless to the older ones (the relay
                    // does not read which one a call spoke).
                    "resultType": "complete",
                },
            })
        } else {
            json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32603, "message": message, "data": error["error"] } })
        };
        let mut line = reply.to_string().into_bytes();
        line.push(b'\n');
        self.write_host(&line);
    }

    fn write_host(&self, line: &[u8]) {
        if line.is_empty() {
            return;
        }
        let out = lock(&self.host_out);
        // A host that stopped reading is gone; its stdin closing ends the relay. Written
        // unbuffered and waiting on a full pipe: a worker that wrote it directly left it
        // non-blocking.
        let _ = sys::write_all_fd(out.as_fd(), line);
    }

    /// A signal ends this session (not the worker, which other sessions may share): the
    /// worker is asked to cancel the session's calls at once, and the relay exits once it has
    /// closed the connection, or after a short grace.
    fn end_by_signal(&self, signal: i32) {
        if self.signalled.swap(signal, Ordering::SeqCst) != 0 {
            return;
        }
        let end = json!({ "jsonrpc": "2.0", "method": END_NOW, "params": { "signal": sys::signal_name(signal) } });
        if let Some(writer) = lock(&self.pipe).writer.as_mut() {
            let _ = send(writer, end.to_string().as_bytes());
            let _ = local::end_writes(writer);
        }
        std::thread::sleep(SIGNAL_GRACE);
        std::process::exit(128 + signal);
    }
}

/// Writes as much of `bytes` as the socket takes; returns how many bytes went.
fn write_counting(writer: &mut Half, bytes: &[u8]) -> usize {
    let mut written = 0;
    while written < bytes.len() {
        match writer.write(&bytes[written..]) {
            Ok(0) => break,
            Ok(n) => written += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    written
}

fn send(writer: &mut Half, line: &[u8]) -> Result<(), String> {
    writer
        .write_all(line)
        .and_then(|()| writer.write_all(b"\n"))
        .map_err(|e| format!("cannot write to the new worker: {e}"))
}

/// The line with its `id` replaced.
fn with_id(line: &[u8], id: &str) -> Option<Vec<u8>> {
    let mut message: Value = serde_json::from_slice(line).ok()?;
    let object = message.as_object_mut()?;
    object.insert("id".into(), serde_json::from_str(id).ok()?);
    serde_json::to_vec(&message).ok()
}

/// The binary a worker is started from: the path the relay was started by when it names one,
/// so a build installed under `~/.gmnew/current` meanwhile is the one the next worker runs
/// (`current_exe` would resolve the link to the old build); else the running binary.
pub(crate) fn worker_exe() -> PathBuf {
    let invoked = std::env::args_os().next().map(PathBuf::from);
    if let Some(path) = invoked.filter(|p| p.components().count() > 1) {
        let absolute =
            if path.is_absolute() { path } else { std::env::current_dir().map(|d| d.join(&path)).unwrap_or(path) };
        if absolute.is_file() {
            return absolute;
        }
    }
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("gm"))
}

/// SIGINT, SIGTERM and SIGHUP end this relay's session.
fn watch_stop_signals(relay: Arc<Relay>) {
    let spawned = std::thread::Builder::new().name("gm-relay-signals".into()).spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            if let Ok(signal) = sys::stop_signal().await {
                let relay = relay.clone();
                // Off the runtime's thread: the wait for the worker blocks.
                let _ =
                    std::thread::Builder::new().name("gm-relay-end".into()).spawn(move || relay.end_by_signal(signal));
                std::future::pending::<()>().await;
            }
        });
    });
    if let Err(e) = spawned {
        gm_actors::stderr_line!("gm: cannot watch for signals in the relay: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, Read};

    fn relay(dir: &std::path::Path) -> Arc<Relay> {
        let opts = RelayOptions {
            serve_args: Vec::new(),
            workspace: dir.to_owned(),
            surface: Surface::Code,
            max_line_bytes: 1 << 20,
            page_size: 100,
            step_budget: 10,
            max_inflight: 8,
            mcp_config: None,
            sandbox: Default::default(),
            budget: Default::default(),
        };
        Arc::new(Relay::new(opts, dir.to_owned()))
    }

    /// `n` tools/call lines of about `size` bytes, ids 0..n, noted as the host's side notes them.
    fn calls(relay: &Relay, n: usize, size: usize) -> Outgoing {
        let mut out = Outgoing::default();
        for id in 0..n {
            let line = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"stat_file","arguments":{{"path":"{}"}}}}}}"#,
                "x".repeat(size)
            );
            let mut notes = Outgoing::default();
            relay.note(Peek::of(line.as_bytes()), line.as_bytes(), &mut notes);
            out.calls.extend(notes.calls.drain(..).map(|(_, key, call)| (id, key, call)));
            out.bytes.extend_from_slice(line.as_bytes());
            out.bytes.push(b'\n');
            out.ends.push(out.bytes.len());
        }
        out
    }

    fn ids(text: &[u8]) -> Vec<u64> {
        text.split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice::<Value>(l).expect("whole lines")["id"].as_u64().expect("id"))
            .collect()
    }

    /// (the relay's end, the worker's end) of a socket.
    fn socket() -> (Half, Half) {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("pair");
        (local::half_of(ours), local::half_of(theirs))
    }

    /// (the relay's end, the worker's end) of a pipe to the worker.
    fn pipe() -> (Half, Half) {
        let (theirs, ours) = local::pipe().expect("pipe");
        (ours, theirs)
    }

    #[test]
    fn a_write_that_fails_part_way_resends_only_the_lines_the_dead_worker_never_took() {
        resends_only_lines_never_taken(socket);
        resends_only_lines_never_taken(pipe);
    }

    fn resends_only_lines_never_taken(pair: fn() -> (Half, Half)) {
        let dir = tempfile::tempdir().expect("tempdir");
        let relay = relay(dir.path());
        let (ours, mut dead) = pair();
        lock(&relay.pipe).writer = Some(ours);
        // Far more than a socket's buffers hold: the write blocks, then fails.
        let batch = calls(&relay, 500, 4000);
        let sender = {
            let relay = relay.clone();
            std::thread::spawn(move || relay.send_to_worker(&batch))
        };
        // The worker reads three lines and dies.
        let mut read = vec![0u8; 3 * 4100];
        dead.read_exact(&mut read).expect("the first lines");
        drop(dead);
        // The next worker: the relay's lock is held until the write failed.
        let (ours, next) = pair();
        {
            let mut pipe = lock(&relay.pipe);
            pipe.writer = Some(ours);
            pipe.generation += 1;
        }
        let received = std::thread::spawn(move || {
            let mut all = Vec::new();
            std::io::BufReader::new(next).read_to_end(&mut all).expect("read");
            all
        });
        sender.join().expect("the sender ends");
        lock(&relay.pipe).writer = None;
        let resent = ids(&received.join().expect("reader"));
        let first = *resent.first().expect("some lines waited for the next worker");
        assert!(first > 3, "lines the dead worker's socket took whole are not sent twice: first resent {first}");
        assert_eq!(resent, (first..500).collect::<Vec<_>>(), "every later line, whole, in order");
        // Every call is in flight: the first ones to be answered as lost, the rest on the new worker.
        assert_eq!(lock(&relay.inflight).len(), 500);
    }

    #[test]
    fn a_cancelled_call_leaves_the_calls_in_flight_whatever_the_id_is_written_as() {
        let dir = tempfile::tempdir().expect("tempdir");
        let relay = relay(dir.path());
        let (ours, theirs) = pipe();
        lock(&relay.pipe).writer = Some(ours);
        let drain = std::thread::spawn(move || std::io::BufReader::new(theirs).lines().count());
        relay.send_to_worker(&calls(&relay, 2, 10));
        assert_eq!(lock(&relay.inflight).len(), 2);
        let cancel =
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1.0,"reason":"no"}}"#;
        let mut out = Outgoing::default();
        relay.note(Peek::of(cancel), cancel, &mut out);
        out.bytes.extend_from_slice(cancel);
        out.bytes.push(b'\n');
        out.ends.push(out.bytes.len());
        relay.send_to_worker(&out);
        let left: Vec<String> = lock(&relay.inflight).values().map(|c| c.raw_id.clone()).collect();
        assert_eq!(left, ["0"], "the cancelled call 1 will not be answered later as lost");
        lock(&relay.pipe).writer = None;
        assert_eq!(drain.join().expect("drain"), 3);
    }
}
