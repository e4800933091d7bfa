//! The relay out of the way: when the host's stdin and stdout are a pipe or a socket, the
//! relay hands them to the worker with its hello (`crate::worker::direct`), so a message costs
//! no hop through a third process. The relay keeps what needs a process that outlives the
//! worker: the session's journal (a memory file it made; see [`super::journal`]), the big
//! answers it writes for the worker, and, when the worker dies, the answers to the calls the
//! journal says it held, the replayed handshake and the start of the next worker.
//!
//! Before the first worker is reached, the host's first lines are read here (an `initialize`
//! is answered at once, as the relay always does while a worker starts) and handed over as the
//! journal's first bytes.

use std::fs::File;
use std::io::BufReader;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

use gm_actors::sys::{self, local::Half};
use serde_json::json;

use super::connect::Connection;
use super::journal::{Journal, JournalError, State, GATE_SKILL};
use super::lines;
use super::{lock, with_id, Ended, Relay, REPLAY_INIT_ID};
use crate::worker::direct::WRITTEN;
use std::sync::atomic::Ordering;

/// Whether this relay's host can be handed to the worker: its stdin and stdout are pipes or
/// sockets (a terminal or a file is relayed), and `GM_RELAY_DIRECT` is not `0`.
pub fn eligible() -> bool {
    if std::env::var_os("GM_RELAY_DIRECT").is_some_and(|v| v == "0") {
        return false;
    }
    sys::is_pipe_or_socket(std::io::stdin().as_fd()) && sys::is_pipe_or_socket(std::io::stdout().as_fd())
}

/// A direct session's side in the relay.
pub struct Direct {
    max_line: usize,
    /// The journal, once the first hello made it.
    journal: Mutex<Option<File>>,
    /// The stage (read end, write end): the pipe a worker puts its small answers in before it
    /// moves them to stdout (see `crate::worker::direct::DirectWriter`).
    stage: Mutex<Option<(OwnedFd, OwnedFd)>>,
    /// The host's first lines, read until the first hello.
    early: Mutex<Option<EarlyReader>>,
    /// The keys of the last big answer this relay wrote for the worker: the worker records
    /// them only once told, so a worker that died meanwhile has not.
    last_big: Mutex<Vec<String>>,
}

impl Direct {
    pub fn new(max_line: usize) -> Direct {
        Direct {
            max_line,
            journal: Mutex::new(None),
            stage: Mutex::new(None),
            early: Mutex::new(None),
            last_big: Mutex::new(Vec::new()),
        }
    }

    /// Reads the host's first lines until the first hello.
    pub fn read_early(&self, relay: Arc<Relay>) -> std::io::Result<()> {
        *lock(&self.early) = Some(EarlyReader::start(relay)?);
        Ok(())
    }

    /// The descriptors of a direct hello. The first makes the journal from the host's first
    /// lines; a later one first settles what the last worker left in it.
    pub fn hello_fds(&self, relay: &Relay) -> std::io::Result<Vec<OwnedFd>> {
        let mut journal = lock(&self.journal);
        let file = match journal.as_ref() {
            Some(file) => {
                let message = "gm's worker stopped while this call was running, and was restarted; the call's effects may be partial: check before retrying";
                self.settle(relay, file, message).map_err(std::io::Error::other)?;
                file.try_clone()?
            }
            None => {
                let early = lock(&self.early).take().map(EarlyReader::stop).unwrap_or_default();
                let file = sys::memory_file(c"gm-session-journal")?;
                Journal::create(file.try_clone()?, self.max_line, State::default(), &early)
                    .map_err(std::io::Error::other)?;
                journal.insert(file).try_clone()?
            }
        };
        let mut stage = lock(&self.stage);
        if stage.is_none() {
            *stage = Some(sys::scratch_pipe()?);
        }
        let Some((stage_read, stage_write)) = stage.as_ref() else { return Err(std::io::ErrorKind::Other.into()) };
        Ok(vec![
            std::io::stdin().as_fd().try_clone_to_owned()?,
            std::io::stdout().as_fd().try_clone_to_owned()?,
            OwnedFd::from(file),
            stage_read.try_clone()?,
            stage_write.try_clone()?,
        ])
    }

    /// After a worker's connection closed: whether it ended the session itself (the host
    /// left), in which case there is nothing to answer for it.
    pub fn session_ended(&self) -> Result<bool, JournalError> {
        let journal = lock(&self.journal);
        let Some(file) = journal.as_ref() else { return Ok(false) };
        Ok(Journal::recover(file, self.max_line, still_first_on_stdin)?.ended)
    }

    /// After a worker died: the calls it held are answered with `message` and the journal
    /// made ready for the next worker.
    pub fn after_death(&self, relay: &Relay, message: &str) -> Result<bool, JournalError> {
        let journal = lock(&self.journal);
        let Some(file) = journal.as_ref() else { return Ok(false) };
        self.settle(relay, file, message)
    }

    /// Reads a worker's journal; answers what it held; writes a new one whose first bytes
    /// replay the handshake and finish the line it was reading. Returns whether the session
    /// had ended. A journal no worker wrote to is left as it is.
    fn settle(&self, relay: &Relay, file: &File, message: &str) -> Result<bool, JournalError> {
        let recovered = Journal::recover(file, self.max_line, still_first_on_stdin)?;
        if recovered.ended {
            return Ok(true);
        }
        if !recovered.touched {
            return Ok(false);
        }
        let written = std::mem::take(&mut *lock(&self.last_big));
        // What the worker left on the stage: recorded as answered, it goes to the host now;
        // not recorded, its calls are answered as lost below.
        let mut staged = Vec::new();
        if let Some((stage_read, _)) = lock(&self.stage).as_ref() {
            sys::drain(stage_read.as_fd(), &mut staged);
        }
        let recorded = staged.split(|&b| b == b'\n').filter(|l| !l.is_empty()).all(|line| {
            let keys = crate::worker::direct::answer_keys(std::str::from_utf8(line).unwrap_or(""));
            keys.unwrap_or_default().iter().all(|k| !recovered.state.inflight.contains_key(k))
        });
        if recorded {
            relay.write_host(&staged);
        }
        for (key, call) in &recovered.state.inflight {
            if !written.contains(key) {
                relay.answer_lost(call, "worker_restarted", message);
            }
        }
        let state = State { handshake: recovered.state.handshake.clone(), ..State::default() };
        let mut unread = replay_lines(&state);
        if !recovered.state.overflow {
            unread.extend_from_slice(&recovered.state.partial);
        }
        Journal::create(file.try_clone()?, self.max_line, state, &unread)?;
        Ok(false)
    }

    /// The journal's bytes to read first and the state they leave, for a worker that did not
    /// take the host's stdio (an older build): the relay sends them itself.
    pub fn take_unread(&self) -> Result<(Vec<u8>, State), JournalError> {
        let journal = lock(&self.journal);
        let Some(file) = journal.as_ref() else { return Ok((Vec::new(), State::default())) };
        let (journal, unread) = Journal::open(file.try_clone()?, self.max_line)?;
        Ok((unread, journal.state))
    }
}

/// The host's handshake as lines for a new worker, under the relay's own ids.
fn replay_lines(state: &State) -> Vec<u8> {
    let mut out = Vec::new();
    let hs = &state.handshake;
    // A stateless (2026-07-28) host never initialized: only its skill read is replayed.
    if let Some(init) = &hs.initialize {
        if let Some(line) = with_id(init, REPLAY_INIT_ID) {
            out.extend_from_slice(&line);
            out.push(b'\n');
        }
        if hs.initialized {
            out.extend_from_slice(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
            out.push(b'\n');
        }
    }
    if hs.skill_read {
        let read = json!({ "jsonrpc": "2.0", "id": "gm-relay:skill-read", "method": "resources/read", "params": { "uri": GATE_SKILL } });
        out.extend_from_slice(read.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

/// Whether `bytes` are still the first bytes waiting on the host's stdin.
fn still_first_on_stdin(bytes: &[u8]) -> bool {
    if bytes.is_empty() {
        return true;
    }
    let stdin = std::io::stdin();
    let scratch = if sys::is_socket_fd(stdin.as_fd()) { None } else { sys::scratch_pipe().ok() };
    let mut buf = vec![0u8; bytes.len()];
    let scratch_fds = scratch.as_ref().map(|(r, w)| (r.as_fd(), w.as_fd()));
    match sys::peek_input(stdin.as_fd(), scratch_fds, &mut buf) {
        Ok(n) => n == bytes.len() && buf == bytes,
        Err(_) => false,
    }
}

impl Relay {
    /// The worker's side of a direct session, for as long as the relay runs: big answers
    /// written for the worker; when the connection drops, the journal settled and the next
    /// worker found.
    pub(super) fn supervise_direct(
        self: &Arc<Self>,
        direct: &Direct,
        mut reader: BufReader<Half>,
        mut pid: u32,
    ) -> Ended {
        loop {
            self.write_big_answers(direct, &mut reader);
            if let Some(code) = self.ending() {
                return Ended::Exit(code);
            }
            match direct.session_ended() {
                Ok(true) => return Ended::Exit(0),
                Ok(false) => {}
                Err(e) => {
                    gm_actors::stderr_line!("gm: {e}");
                    return Ended::Exit(1);
                }
            }
            let mut pipe = lock(&self.pipe);
            pipe.writer = None;
            let cause = self.cause_of(pid);
            let message = format!(
                "gm's worker stopped ({cause}) while this call was running, and was restarted; the call's effects may be partial: check before retrying"
            );
            match direct.after_death(self, &message) {
                Ok(true) => return Ended::Exit(0),
                Ok(false) => {}
                Err(e) => {
                    gm_actors::stderr_line!("gm: {e}");
                    return Ended::Exit(1);
                }
            }
            match self.reconnect(&mut pipe) {
                Ok(conn) if conn.direct => {
                    reader = conn.reader;
                    pid = conn.worker.pid;
                    pipe.writer = Some(conn.writer);
                    pipe.generation += 1;
                }
                Ok(conn) => {
                    // An older build took over: the relay carries the session from here.
                    drop(pipe);
                    return self.carry(direct, conn);
                }
                Err(ended) => return ended,
            }
        }
    }

    /// Carries the session as a relay (reading the host, writing to the worker) from now on:
    /// the worker did not take the host's stdio (an older build). What the journal held for
    /// the next worker goes first.
    pub(super) fn carry(self: &Arc<Self>, direct: &Direct, conn: Connection) -> Ended {
        self.carried.store(true, Ordering::SeqCst);
        // A worker that read the host directly before may have left it non-blocking.
        let _ = sys::set_blocking(std::io::stdin().as_fd());
        let (unread, state) = match direct.take_unread() {
            Ok(taken) => taken,
            Err(e) => {
                gm_actors::stderr_line!("gm: {e}");
                return Ended::Exit(1);
            }
        };
        *lock(&self.handshake) = state.handshake;
        lock(&self.inflight).extend(state.inflight);
        let Connection { reader, mut writer, worker, .. } = conn;
        // Sent as read, an unfinished line's end follows from the host's reader.
        let _ = super::write_counting(&mut writer, &unread);
        {
            let mut pipe = lock(&self.pipe);
            pipe.writer = Some(writer);
            pipe.connected = true;
        }
        let host = match self.clone().start_host_reader() {
            Ok(host) => host,
            Err(e) => {
                gm_actors::stderr_line!("gm: cannot start the relay's reader: {e}");
                return Ended::Exit(1);
            }
        };
        match self.supervise(reader, worker) {
            Ended::GaveUp => {
                let _ = host.join();
                Ended::Exit(1)
            }
            exit => exit,
        }
    }

    /// Writes the big answers the worker hands over on the socket, each acknowledged once
    /// written, until the connection closes. A line cut by the worker's death is not written:
    /// its call is answered as lost.
    fn write_big_answers(&self, direct: &Direct, reader: &mut BufReader<Half>) {
        let mut line = Vec::with_capacity(1 << 16);
        loop {
            line.clear();
            match lines::read_whole_line(reader, &mut line, self.max_line) {
                Ok(true) => {}
                Ok(false) | Err(_) => return,
            }
            self.write_host(&line);
            let keys = crate::worker::direct::answer_keys(std::str::from_utf8(&line[..line.len() - 1]).unwrap_or(""));
            *lock(&direct.last_big) = keys.unwrap_or_default();
            let mut pipe = lock(&self.pipe);
            if let Some(writer) = pipe.writer.as_mut() {
                let _ = super::send(writer, WRITTEN.as_bytes());
            }
        }
    }
}

/// Reads the host's first lines on a thread until the first hello takes them.
struct EarlyReader {
    stop: OwnedFd,
    thread: std::thread::JoinHandle<Vec<u8>>,
}

impl EarlyReader {
    fn start(relay: Arc<Relay>) -> std::io::Result<EarlyReader> {
        let (wake, stop) = sys::scratch_pipe()?;
        let thread = std::thread::Builder::new().name("gm-relay-early".into()).spawn(move || {
            let bytes = read_until_woken(&relay, wake);
            relay.first_line_done();
            bytes
        })?;
        Ok(EarlyReader { stop, thread })
    }

    /// Stops the reader; returns what it read (its first line answered and rewritten).
    fn stop(self) -> Vec<u8> {
        // One byte wakes the reader's poll; the pipe cannot be full.
        let _ = sys::write_all_fd(self.stop.as_fd(), b"x");
        self.thread.join().unwrap_or_default()
    }
}

fn read_until_woken(relay: &Relay, wake: OwnedFd) -> Vec<u8> {
    let stdin = std::io::stdin();
    let mut bytes = Vec::new();
    let mut first_done = false;
    let mut buf = vec![0u8; 64 << 10];
    while let Ok(true) = sys::wait_either(stdin.as_fd().as_raw_fd(), wake.as_raw_fd()) {
        match sys::read_stdin(&mut buf) {
            // The host left before any worker: the worker sees the end itself.
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
        }
        if !first_done {
            if let Some(end) = memchr::memchr(b'\n', &bytes) {
                first_done = true;
                if let Some(rewritten) = relay.answer_early(&bytes[..end]) {
                    bytes.splice(..end, rewritten);
                }
                relay.first_line_done();
            }
        }
    }
    bytes
}
