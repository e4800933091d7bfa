//! The relay: `gm serve` as the host sees it. It owns the host's stdio and runs the server as a
//! worker child (`gm serve --worker`), forwarding lines both ways. When the worker dies (a
//! panic that escapes, an abort in the engine's C code, SIGKILL, the OOM killer) the calls it
//! held are answered with `worker_restarted`, a new worker is started, and the host's
//! `initialize`, `notifications/initialized` and read of `skill://gm/SKILL.md` are replayed to
//! it, so the connection, its read gate, the run and its jobs carry on.
//!
//! Nothing here can crash: no JS, no verbs, no JSON beyond [`peek`] (ids and methods) and the
//! small replies it writes itself. Each line is held once, in the buffer it was read into.
//!
//! Threads: the caller's thread reads the host and writes to the worker; a supervisor thread
//! reads the worker, writes to the host, and restarts the worker; a signal thread forwards
//! SIGINT, SIGTERM and SIGHUP to the worker.

mod lines;
pub mod peek;

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gm_actors::sys;
use serde_json::{json, Value};

use lines::{LineReader, ReadLine};
use peek::Peek;

/// Lines that arrive together are written on in batches of up to this many bytes.
const BATCH_BYTES: usize = 256 << 10;
/// Deaths within [`CRASH_WINDOW`] after which the worker is not started again.
pub const MAX_CRASHES: usize = 5;
pub const CRASH_WINDOW: Duration = Duration::from_secs(60);
/// The skill whose read opens run_code's gate; replayed to a new worker.
const GATE_SKILL: &str = "skill://gm/SKILL.md";
/// Ids of the relay's own replayed calls; their answers never reach the host.
const REPLAY_INIT_ID: &str = "\"gm-relay:initialize\"";
const REPLAY_SKILL_ID: &str = "\"gm-relay:skill-read\"";

#[derive(Debug, Clone)]
pub struct RelayOptions {
    /// The `gm serve` arguments the relay was given, passed on to each worker.
    pub serve_args: Vec<OsString>,
    pub max_line_bytes: usize,
    /// The run log, named in the final error when the worker keeps dying.
    pub log_path: PathBuf,
}

/// Runs the relay until the host closes stdin (or a signal stops it); returns the exit code.
pub fn run(opts: RelayOptions) -> i32 {
    sys::huge_pages(false);
    let relay = Arc::new(Relay::new(opts));
    let (child, stdout) = match relay.spawn_worker(0) {
        Ok((child, stdin, stdout)) => {
            lock(&relay.pipe).stdin = Some(stdin);
            (child, stdout)
        }
        Err(why) => {
            eprintln!("gm: {why}");
            return 1;
        }
    };
    forward_stop_signals(relay.clone());
    let host = {
        let relay = relay.clone();
        std::thread::Builder::new().name("gm-relay-host".into()).spawn(move || relay.read_host())
    };
    let host = match host {
        Ok(handle) => handle,
        Err(e) => {
            eprintln!("gm: cannot start the relay's reader: {e}");
            return 1;
        }
    };
    match relay.supervise(child, stdout) {
        // The host's reader may be blocked on its stdin: the process ends without it.
        Ended::Exit(code) => code,
        Ended::GaveUp => {
            let _ = host.join();
            1
        }
    }
}

/// How the supervisor ended.
enum Ended {
    /// The worker exited after the host left or a signal: the relay exits with this code.
    Exit(i32),
    /// The worker kept dying; the relay answers calls with the reason until the host leaves.
    GaveUp,
}

/// The worker's stdin and whether the relay gave up on it.
struct Pipe {
    stdin: Option<ChildStdin>,
    /// Which worker `stdin` belongs to: 0 for the first, one more for each restart.
    generation: u64,
    /// Set after [`MAX_CRASHES`]: every later call is answered with this.
    dead: Option<String>,
}

/// What the host said to open the connection, to say again to a new worker.
#[derive(Default)]
struct Handshake {
    initialize: Option<Vec<u8>>,
    initialized: bool,
    skill_read: bool,
}

struct Relay {
    exe: PathBuf,
    serve_args: Vec<OsString>,
    max_line: usize,
    log_path: PathBuf,
    /// Held while a line is written to the worker and while a worker is replaced, so a call
    /// is either in flight on the old worker (and answered as lost) or sent to the new one.
    pipe: Mutex<Pipe>,
    /// Calls sent to the worker and not answered yet: id -> whether it is a tools/call.
    inflight: Mutex<HashMap<String, bool>>,
    handshake: Mutex<Handshake>,
    host_out: Mutex<std::io::Stdout>,
    host_closed: AtomicBool,
    stopping: AtomicBool,
    worker_pid: AtomicU32,
}

/// A mutex whose holder panicked still guards sound data here (plain maps and handles).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Relay {
    fn new(opts: RelayOptions) -> Relay {
        Relay {
            exe: worker_exe(),
            serve_args: opts.serve_args,
            max_line: opts.max_line_bytes,
            log_path: opts.log_path,
            pipe: Mutex::new(Pipe { stdin: None, generation: 0, dead: None }),
            inflight: Mutex::new(HashMap::new()),
            handshake: Mutex::new(Handshake::default()),
            host_out: Mutex::new(std::io::stdout()),
            host_closed: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            worker_pid: AtomicU32::new(0),
        }
    }

    /// Starts a worker. Its stdin goes into the pipe only once any replay is done.
    fn spawn_worker(&self, restarts: u32) -> Result<(Child, ChildStdin, ChildStdout), String> {
        let mut child = Command::new(&self.exe)
            .arg("serve")
            .arg("--worker")
            .arg(restarts.to_string())
            .args(&self.serve_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the worker {}: {e}", self.exe.display()))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the worker's pipes were not made".into());
        };
        self.worker_pid.store(child.id(), Ordering::SeqCst);
        Ok((child, stdin, stdout))
    }

    /// The host's side: each line is peeked, noted when it belongs to the handshake, tracked
    /// when it is a call, and written to the worker.
    fn read_host(&self) {
        let mut reader = LineReader::new(std::io::stdin().lock(), self.max_line);
        // Grown once to the line limit when a line needs more: a big line is not copied from
        // buffer to buffer as it arrives.
        let mut line = Vec::with_capacity(1 << 16);
        // Lines that arrived together go to the worker in one write.
        let mut batch = Vec::with_capacity(BATCH_BYTES);
        let mut calls: Vec<(String, bool)> = Vec::new();
        let mut line_calls: Vec<(String, bool)> = Vec::new();
        loop {
            match reader.read_line(&mut line) {
                Ok(ReadLine::Line) => {}
                Ok(ReadLine::TooLong) => {
                    self.send_to_worker(&batch, &calls);
                    batch.clear();
                    calls.clear();
                    // Past the limit the worker drops it unread and answers; the relay only
                    // passes the bytes on, never holding more than the limit.
                    let mut pipe = lock(&self.pipe);
                    if let Some(stdin) = pipe.stdin.as_mut() {
                        let _ = stdin.write_all(&line);
                        let _ = reader.pass_rest(|chunk| stdin.write_all(chunk));
                    } else {
                        let _ = reader.pass_rest(|_| Ok(()));
                    }
                    continue;
                }
                Ok(ReadLine::Eof) | Err(_) => break,
            }
            line_calls.clear();
            if Peek::is_batch(&line) {
                for peek in Peek::of_batch(&line) {
                    self.note_call(peek, &line, &mut line_calls);
                }
            } else {
                self.note_call(Peek::of(&line), &line, &mut line_calls);
            }
            line.push(b'\n');
            if line.len() >= BATCH_BYTES {
                self.send_to_worker(&batch, &calls);
                batch.clear();
                calls.clear();
                self.send_to_worker(&line, &line_calls);
                continue;
            }
            batch.extend_from_slice(&line);
            calls.append(&mut line_calls);
            // A lone call (nothing else in flight) goes at once: the host is waiting for it.
            let more =
                reader.has_buffered() || (!lock(&self.inflight).is_empty() && sys::more_input_soon(&std::io::stdin()));
            if !more || batch.len() >= BATCH_BYTES {
                self.send_to_worker(&batch, &calls);
                batch.clear();
                calls.clear();
            }
        }
        self.send_to_worker(&batch, &calls);
        self.host_closed.store(true, Ordering::SeqCst);
        // Closing the worker's stdin is how it learns the host left.
        lock(&self.pipe).stdin = None;
    }

    /// Writes host lines to the worker, tracking the calls among them (id, whether a
    /// tools/call). A write that fails reached no worker (the pipe has no reader once the
    /// worker is dead, and what was in it died with it), so the lines wait for the next worker
    /// instead of being answered as lost.
    fn send_to_worker(&self, bytes: &[u8], calls: &[(String, bool)]) {
        if bytes.is_empty() {
            return;
        }
        let mut tried: Option<u64> = None;
        loop {
            let mut pipe = lock(&self.pipe);
            if let Some(why) = &pipe.dead {
                let why = why.clone();
                drop(pipe);
                for (id, tool_call) in calls {
                    self.answer_lost(id, *tool_call, "worker_failed", &why);
                }
                return;
            }
            if tried == Some(pipe.generation) || pipe.stdin.is_none() {
                drop(pipe);
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            lock(&self.inflight).extend(calls.iter().cloned());
            let generation = pipe.generation;
            let written = pipe.stdin.as_mut().is_some_and(|stdin| stdin.write_all(bytes).is_ok());
            if written {
                return;
            }
            let mut inflight = lock(&self.inflight);
            for (id, _) in calls {
                inflight.remove(id);
            }
            tried = Some(generation);
        }
    }

    /// Notes what one message means for the handshake, and adds it to `calls` when it is a
    /// call (its id, and whether it is a tools/call).
    fn note_call(&self, peek: Peek, line: &[u8], calls: &mut Vec<(String, bool)>) {
        self.note_handshake(&peek, line);
        let tool_call = peek.method.as_deref() == Some("tools/call");
        if let Some(id) = peek.id.filter(|_| peek.method.is_some()) {
            calls.push((id, tool_call));
        }
    }

    fn note_handshake(&self, peek: &Peek, line: &[u8]) {
        let Some(method) = peek.method.as_deref() else { return };
        match method {
            // A batch cannot hold an initialize (and the line would be the whole batch).
            "initialize" if peek.id.is_some() && !Peek::is_batch(line) => {
                let mut hs = lock(&self.handshake);
                *hs = Handshake { initialize: Some(line.to_vec()), ..Handshake::default() };
            }
            "notifications/initialized" => lock(&self.handshake).initialized = true,
            "resources/read" if peek.uri.as_deref() == Some(GATE_SKILL) => lock(&self.handshake).skill_read = true,
            _ => {}
        }
    }

    /// The worker's side, for as long as the relay runs: forwards its lines, and when it dies,
    /// answers what it held and starts another. Returns the relay's exit code.
    fn supervise(&self, mut child: Child, stdout: ChildStdout) -> Ended {
        let mut reader = BufReader::with_capacity(1 << 16, stdout);
        let mut crashes: VecDeque<(Instant, String)> = VecDeque::new();
        let mut restarts = 0u32;
        loop {
            self.pump(&mut reader);
            let cause = match child.wait() {
                Ok(status) if self.host_closed.load(Ordering::SeqCst) || self.stopping.load(Ordering::SeqCst) => {
                    return Ended::Exit(sys::exit_code_of(&status));
                }
                Ok(status) => sys::exit_cause(&status),
                Err(e) => format!("cannot be waited for ({e})"),
            };
            if self.host_closed.load(Ordering::SeqCst) || self.stopping.load(Ordering::SeqCst) {
                return Ended::Exit(1);
            }
            // Holding the pipe: the host's next lines wait for the new worker.
            let mut pipe = lock(&self.pipe);
            pipe.stdin = None;
            let mut cause = cause;
            let mut lost_answered = false;
            loop {
                let now = Instant::now();
                crashes.push_back((now, cause));
                while crashes.front().is_some_and(|(t, _)| now.duration_since(*t) > CRASH_WINDOW) {
                    crashes.pop_front();
                }
                if crashes.len() >= MAX_CRASHES {
                    let causes: Vec<&str> = crashes.iter().map(|(_, c)| c.as_str()).collect();
                    let why = format!(
                        "gm's worker died {} times within a minute ({}) and is not started again; the run log is {}; restart the MCP server to try again",
                        crashes.len(),
                        causes.join(", "),
                        self.log_path.display()
                    );
                    eprintln!("gm: {why}");
                    self.answer_inflight("worker_failed", &why);
                    pipe.dead = Some(why);
                    self.worker_pid.store(0, Ordering::SeqCst);
                    return Ended::GaveUp;
                }
                if !lost_answered {
                    let (_, cause) = crashes.back().map(|(t, c)| (t, c.as_str())).unwrap_or((&now, "?"));
                    let message = format!(
                        "gm's worker stopped ({cause}) while this call was running, and was restarted; the call's effects may be partial: check before retrying"
                    );
                    self.answer_inflight("worker_restarted", &message);
                    lost_answered = true;
                }
                restarts += 1;
                match self.restart(restarts) {
                    Ok((new_child, new_reader, stdin)) => {
                        child = new_child;
                        reader = new_reader;
                        pipe.stdin = Some(stdin);
                        pipe.generation += 1;
                        break;
                    }
                    Err(why) => cause = why,
                }
            }
        }
    }

    /// Starts a worker and replays the handshake to it; its answers to the replay are read
    /// here and dropped.
    fn restart(&self, restarts: u32) -> Result<(Child, BufReader<ChildStdout>, ChildStdin), String> {
        let (mut child, mut stdin, stdout) = self.spawn_worker(restarts)?;
        let mut reader = BufReader::with_capacity(1 << 16, stdout);
        let replayed = self.replay(&mut stdin, &mut reader);
        match replayed {
            Ok(()) => Ok((child, reader, stdin)),
            Err(why) => {
                drop(stdin);
                let _ = child.kill();
                let status = child.wait().map(|s| sys::exit_cause(&s)).unwrap_or_default();
                Err(format!("{why} ({status})"))
            }
        }
    }

    fn replay(&self, stdin: &mut ChildStdin, reader: &mut BufReader<ChildStdout>) -> Result<(), String> {
        let (initialize, initialized, skill_read) = {
            let hs = lock(&self.handshake);
            (hs.initialize.clone(), hs.initialized, hs.skill_read)
        };
        let Some(initialize) = initialize else { return Ok(()) };
        let init_id = match with_id(&initialize, REPLAY_INIT_ID) {
            Some(line) => {
                send(stdin, &line)?;
                REPLAY_INIT_ID.to_string()
            }
            None => {
                // Not rewritable: sent as the host wrote it, its answer still dropped here.
                send(stdin, &initialize)?;
                Peek::of(&initialize).id.unwrap_or_default()
            }
        };
        self.await_answer(reader, &init_id)?;
        if initialized {
            send(stdin, br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
        }
        if skill_read {
            let read = json!({ "jsonrpc": "2.0", "id": "gm-relay:skill-read", "method": "resources/read", "params": { "uri": GATE_SKILL } });
            send(stdin, read.to_string().as_bytes())?;
            self.await_answer(reader, REPLAY_SKILL_ID)?;
        }
        Ok(())
    }

    /// Reads the worker until it answers `id`; anything else it says meanwhile goes to the host.
    fn await_answer(&self, reader: &mut BufReader<ChildStdout>, id: &str) -> Result<(), String> {
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

    /// Forwards the worker's lines to the host until it closes its stdout; lines that arrived
    /// together go out in one write.
    fn pump(&self, reader: &mut BufReader<ChildStdout>) {
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
                        inflight.remove(id);
                    }
                }
            } else {
                let peek = Peek::of(&line);
                if let (true, Some(id)) = (peek.response, &peek.id) {
                    lock(&self.inflight).remove(id);
                }
            }
            if line.len() >= BATCH_BYTES {
                self.write_host(&batch);
                batch.clear();
                self.write_host(&line);
                continue;
            }
            batch.extend_from_slice(&line);
            let more = !reader.buffer().is_empty() || sys::more_input_soon(reader.get_ref());
            if !more || batch.len() >= BATCH_BYTES {
                self.write_host(&batch);
                batch.clear();
            }
        }
        self.write_host(&batch);
    }

    /// Answers every call the dead worker held.
    fn answer_inflight(&self, code: &str, message: &str) {
        let lost: Vec<(String, bool)> = lock(&self.inflight).drain().collect();
        for (id, tool_call) in lost {
            self.answer_lost(&id, tool_call, code, message);
        }
    }

    /// A tool error result for a tools/call, a JSON-RPC error for anything else.
    fn answer_lost(&self, id: &str, tool_call: bool, code: &str, message: &str) {
        let id: Value = serde_json::from_str(id).unwrap_or(Value::Null);
        let error = json!({ "error": { "code": code, "message": message } });
        let reply = if tool_call {
            json!({
                "jsonrpc": "2.0",
                "id": id,
                "result": {
                    "content": [{ "type": "text", "text": error.to_string() }],
                    "structuredContent": error,
                    "isError": true,
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
        let mut out = lock(&self.host_out);
        // A host that stopped reading is gone; its stdin closing ends the relay.
        let _ = out.write_all(line).and_then(|()| out.flush());
    }
}

fn send(stdin: &mut ChildStdin, line: &[u8]) -> Result<(), String> {
    stdin
        .write_all(line)
        .and_then(|()| stdin.write_all(b"\n"))
        .map_err(|e| format!("cannot write to the new worker: {e}"))
}

/// The line with its `id` replaced.
fn with_id(line: &[u8], id: &str) -> Option<Vec<u8>> {
    let mut message: Value = serde_json::from_slice(line).ok()?;
    let object = message.as_object_mut()?;
    object.insert("id".into(), serde_json::from_str(id).ok()?);
    serde_json::to_vec(&message).ok()
}

/// The binary each worker runs: the path the relay was started by when it names one, so a
/// build installed under `~/.gmnew/current` meanwhile is the one a restarted worker runs
/// (`current_exe` would resolve the link to the old build); else the running binary.
fn worker_exe() -> PathBuf {
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

/// SIGINT, SIGTERM and SIGHUP go to the worker, which ends what it started; the relay then
/// exits with the worker's code.
fn forward_stop_signals(relay: Arc<Relay>) {
    let spawned = std::thread::Builder::new().name("gm-relay-signals".into()).spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
        rt.block_on(async {
            while let Ok(signal) = sys::stop_signal().await {
                relay.stopping.store(true, Ordering::SeqCst);
                match relay.worker_pid.load(Ordering::SeqCst) {
                    0 => std::process::exit(128 + signal),
                    pid => sys::signal_process(pid, signal),
                }
            }
        });
    });
    if let Err(e) = spawned {
        eprintln!("gm: cannot watch for signals in the relay: {e}");
    }
}

/// Where the relay's log path points, for the final error: the workspace's run log.
pub fn log_path(workspace: &Path) -> PathBuf {
    std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf()).join(".gm/log.jsonl")
}
