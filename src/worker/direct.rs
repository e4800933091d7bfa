//! A direct session: the relay handed the worker its host's stdin and stdout (and the
//! session's journal, `crate::relay::journal`), so the host's lines reach the worker and its
//! answers reach the host with no process between them. The relay stays on the socket for
//! what only it can do: write an answer too big to be written whole in one go (a worker killed
//! part way through would leave the host half a line), end the session on a signal, and, when
//! the worker dies, answer its calls from the journal.
//!
//! What the worker owes the journal: every byte is recorded before it is taken from stdin, and
//! every answer's id after the answer was written (see the journal's order rules).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::os::fd::{AsFd, OwnedFd};
use std::rc::Rc;

use actix::prelude::*;
use gm_actors::sys::{self, local};
use gm_actors::transport::{Incoming, LineQueue, Send as SendLine, SocketLines, SocketWriter};

use crate::relay::journal::{Journal, OWN_ID_PREFIX};
use crate::relay::peek::{id_key, Peek};

/// The line the relay writes on the socket once it has written a big answer to the host.
pub const WRITTEN: &str = r#"{"gm":"written"}"#;

/// The bytes of answers a session may hold for a host that does not read them before its
/// reader stops taking the host's calls (they wait in the host's pipe, and its writes block).
/// A host must read while it writes with any stdio server (one that writes synchronously stops
/// reading at the first full 64 KiB pipe); this one waits for 8 MiB.
const BACKLOG_LIMIT: usize = 8 << 20;

/// Answers waiting for the host: past the limit the session's reader takes nothing more from
/// stdin until half of them are written, so a host that stops reading holds a bounded part of
/// the worker's memory, and nothing is lost or refused: its calls run once it reads again.
struct Backlog {
    bytes: std::cell::Cell<usize>,
    limit: usize,
    drained: tokio::sync::Notify,
}

impl Backlog {
    fn new(limit: usize) -> Self {
        Self { bytes: std::cell::Cell::new(0), limit, drained: tokio::sync::Notify::new() }
    }

    fn full(&self) -> bool {
        self.bytes.get() > self.limit
    }

    fn add(&self, n: usize) {
        self.bytes.set(self.bytes.get() + n);
    }

    fn remove(&self, n: usize) {
        let left = self.bytes.get().saturating_sub(n);
        self.bytes.set(left);
        if left <= self.limit / 2 {
            self.drained.notify_one();
        }
    }

    fn clear(&self) {
        self.bytes.set(0);
        self.drained.notify_one();
    }
}

/// The host's lines, read from its stdin.
pub struct DirectLines {
    input: local::HostInput,
    journal: Rc<RefCell<Journal>>,
    lines: LineQueue,
    buf: Vec<u8>,
    /// Set once stdin ended: the host left, and the session's end is its own.
    host_left: Rc<std::cell::Cell<bool>>,
    /// Set once the session's writer stopped (the relay may be settling the journal for the
    /// next worker) or the worker began to stop: nothing more is taken from stdin.
    over: Rc<std::cell::Cell<bool>>,
    backlog: Rc<Backlog>,
}

impl DirectLines {
    pub async fn next(&mut self) -> Option<Incoming> {
        loop {
            if let Some(m) = self.lines.next_ready() {
                return m;
            }
            while self.backlog.full() {
                self.backlog.drained.notified().await;
            }
            let n = match self.input.peek(&mut self.buf).await {
                Ok(0) | Err(_) => {
                    self.host_left.set(true);
                    self.lines.close();
                    continue;
                }
                Ok(n) => n,
            };
            if self.over.get() {
                self.lines.stop();
                continue;
            }
            // Recorded first: a worker killed before it takes them leaves them on stdin, and
            // the relay sees they are still there.
            if let Err(e) = self.journal.borrow_mut().input(&self.buf[..n]) {
                gm_actors::stderr_line!("gm: {e}");
            }
            if self.input.take(n).is_err() {
                self.host_left.set(true);
                self.lines.close();
                continue;
            }
            self.lines.feed(&self.buf[..n]);
        }
    }
}

/// The relay has written the big answer it was given.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Written;

/// Writes a session's answers to the host's stdout: small ones itself, whole lines of at most
/// [`sys::ATOMIC_WRITE`] bytes at a time (never half a line); a bigger one through the relay,
/// and nothing else meanwhile (its write may take several, and another writer's would land
/// inside it).
///
/// A small write goes through the stage, a pipe the relay holds too: written there, recorded
/// as answered, then moved to stdout (splice, a page at a time, whole). A worker killed
/// before the record leaves the relay an unanswered call and bytes it drops; after it, bytes
/// it writes to the host itself — so each call is answered once, whenever the worker dies.
pub struct DirectWriter {
    out: Rc<local::Writer>,
    host_left: Rc<std::cell::Cell<bool>>,
    over: Rc<std::cell::Cell<bool>>,
    out_fd: OwnedFd,
    stage: (OwnedFd, OwnedFd),
    /// Bytes in the stage, recorded and not yet moved to stdout.
    staged: usize,
    journal: Rc<RefCell<Journal>>,
    /// The socket to the relay, for big answers, and a descriptor of it to end writes on.
    socket: Addr<SocketWriter>,
    socket_end: local::Half,
    queue: VecDeque<String>,
    backlog: Rc<Backlog>,
    /// Whole lines about to be written, and the keys of the calls they answer.
    chunk: Vec<u8>,
    chunk_keys: Vec<String>,
    /// The key of the big answer the relay is writing (`Some("")` for one that answers none).
    with_relay: Option<String>,
    flushing: bool,
    due: bool,
    broken: bool,
}

impl DirectWriter {
    fn write_all(&mut self, ctx: &mut Context<Self>) {
        loop {
            if self.broken {
                return;
            }
            if self.staged > 0 {
                match sys::splice_out(self.stage.0.as_fd(), self.out_fd.as_fd(), self.staged) {
                    Ok(n) => self.staged -= n.min(self.staged),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return self.flush_later(ctx),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => return self.host_gone(),
                }
                continue;
            }
            if self.with_relay.is_some() {
                return;
            }
            if self.chunk.is_empty() && !self.fill_chunk() {
                return;
            }
            if self.chunk.is_empty() {
                continue;
            }
            // The stage is empty and holds 16 pages: a chunk of one page goes in whole.
            match sys::write_once(self.stage.1.as_fd(), &self.chunk) {
                Ok(n) if n == self.chunk.len() => {}
                _ => return self.host_gone(),
            }
            self.staged = self.chunk.len();
            self.chunk.clear();
            let keys = std::mem::take(&mut self.chunk_keys);
            if let Err(e) = self.journal.borrow_mut().answered(keys.iter().map(String::as_str)) {
                gm_actors::stderr_line!("gm: {e}");
            }
        }
    }

    /// The host stopped reading for good: its stdin's end ends the session.
    fn host_gone(&mut self) {
        self.broken = true;
        self.queue.clear();
        self.backlog.clear();
    }

    fn pop_line(&mut self) -> Option<String> {
        let line = self.queue.pop_front()?;
        self.backlog.remove(line.len() + 1);
        Some(line)
    }

    /// Moves queued lines into the chunk, up to the atomic size; a line too big for it goes
    /// to the relay instead. False when nothing is left.
    fn fill_chunk(&mut self) -> bool {
        if self.queue.is_empty() {
            return false;
        }
        while let Some(line) = self.queue.front() {
            let keys = answer_keys(line);
            if keys.is_none() {
                // The answer to one of the relay's own lines (a replayed handshake).
                self.pop_line();
                continue;
            }
            if line.len() + 1 > sys::ATOMIC_WRITE {
                if !self.chunk.is_empty() {
                    break;
                }
                let Some(line) = self.pop_line() else { break };
                self.with_relay = Some(keys.unwrap_or_default().join("\n"));
                self.socket.do_send(SendLine(line));
                return true;
            }
            if self.chunk.len() + line.len() + 1 > sys::ATOMIC_WRITE {
                break;
            }
            let Some(line) = self.pop_line() else { break };
            self.chunk.extend_from_slice(line.as_bytes());
            self.chunk.push(b'\n');
            self.chunk_keys.extend(keys.unwrap_or_default());
        }
        true
    }

    fn flush_later(&mut self, ctx: &mut Context<Self>) {
        if self.flushing {
            return;
        }
        self.flushing = true;
        let out = self.out.clone();
        ctx.spawn(actix::fut::wrap_future(async move { out.writable().await }).map(|ready, act: &mut Self, ctx| {
            act.flushing = false;
            if ready.is_err() {
                return act.host_gone();
            }
            act.write_all(ctx);
        }));
    }
}

/// The keys of the calls a line answers (none for a request or notification of the worker's
/// own); `None` for the answer to one of the relay's own lines, which the host never sees.
pub fn answer_keys(line: &str) -> Option<Vec<String>> {
    let bytes = line.as_bytes();
    let peeks = if Peek::is_batch(bytes) { Peek::of_batch(bytes) } else { vec![Peek::of(bytes)] };
    let mut keys = Vec::new();
    for peek in peeks {
        if let (true, Some(id)) = (peek.response, &peek.id) {
            if id.starts_with(OWN_ID_PREFIX) {
                return None;
            }
            keys.push(id_key(id));
        }
    }
    Some(keys)
}

impl Actor for DirectWriter {
    type Context = Context<Self>;

    fn stopped(&mut self, _: &mut Context<Self>) {
        // Before the relay can hear of it: what comes on stdin from now on is the next
        // worker's (this arbiter runs one thing at a time, so no read is half done).
        self.over.set(true);
        // The host left and the session is over: the relay exits instead of answering for a
        // dead worker. A worker that stops on its own (a signal, an update) leaves no such
        // record: to the relay that is a worker gone, and it finds the next one.
        if self.host_left.get() {
            if let Err(e) = self.journal.borrow_mut().ended() {
                gm_actors::stderr_line!("gm: {e}");
            }
        }
        let _ = local::end_writes(&self.socket_end);
    }
}

impl Handler<SendLine> for DirectWriter {
    type Result = ();
    fn handle(&mut self, msg: SendLine, ctx: &mut Context<Self>) {
        if self.broken {
            return;
        }
        self.backlog.add(msg.0.len() + 1);
        self.queue.push_back(msg.0);
        // Answers that finish together go out in one write (see SocketWriter).
        if self.due || self.flushing {
            return;
        }
        self.due = true;
        ctx.spawn(actix::fut::ready(()).map(|(), act: &mut Self, ctx| {
            act.due = false;
            act.write_all(ctx);
        }));
    }
}

impl Handler<Written> for DirectWriter {
    type Result = ();
    fn handle(&mut self, _: Written, ctx: &mut Context<Self>) {
        if let Some(keys) = self.with_relay.take() {
            if let Err(e) = self.journal.borrow_mut().answered(keys.split('\n').filter(|k| !k.is_empty())) {
                gm_actors::stderr_line!("gm: {e}");
            }
        }
        self.write_all(ctx);
    }
}

/// A direct session's three parts.
pub struct DirectIo {
    pub lines: DirectLines,
    pub out: Addr<DirectWriter>,
    pub leave: LeaveInput,
}

/// Tells a direct session's reader to take nothing more from the host's stdin: the worker is
/// stopping, and what the host writes from now on is the next worker's to run (taken now, it
/// could only be answered `worker_restarted`).
#[derive(Clone)]
pub struct LeaveInput(Rc<std::cell::Cell<bool>>);

impl LeaveInput {
    pub fn now(&self) {
        self.0.set(true);
    }
}

/// Opens a direct session from the descriptors its hello brought: the host's stdin, its
/// stdout, the journal, and the stage's read and write ends (non-blocking).
pub fn open(
    fds: Vec<OwnedFd>,
    max_line: usize,
    socket: Addr<SocketWriter>,
    socket_end: local::Half,
) -> Result<DirectIo, String> {
    let [stdin, stdout, journal, stage_read, stage_write]: [OwnedFd; 5] =
        fds.try_into().map_err(|fds: Vec<_>| format!("a direct hello brings 5 descriptors, not {}", fds.len()))?;
    // Each checked before anything is written anywhere: a hello from a client that is not a
    // relay is refused with the reason and changes nothing.
    let input = local::HostInput::new(stdin).map_err(|e| format!("the host's stdin: {e}"))?;
    if !sys::is_pipe_or_socket(stdout.as_fd()) {
        return Err("the host's stdout: neither a pipe nor a socket".into());
    }
    let out_fd = stdout.try_clone().map_err(|e| format!("the host's stdout: {e}"))?;
    let (mut journal, unread) = Journal::open(std::fs::File::from(journal), max_line).map_err(|e| e.to_string())?;
    // Whatever happens next, the relay must not hand the bytes read first to another worker:
    // this one may have acted on them.
    journal.input(&[]).map_err(|e| e.to_string())?;
    let journal = Rc::new(RefCell::new(journal));
    let out = local::Writer::as_is(stdout);
    let host_left = Rc::new(std::cell::Cell::new(false));
    let over = Rc::new(std::cell::Cell::new(false));
    let backlog = Rc::new(Backlog::new(BACKLOG_LIMIT));
    let mut lines = DirectLines {
        backlog: backlog.clone(),
        input,
        host_left: host_left.clone(),
        over: over.clone(),
        journal: journal.clone(),
        lines: LineQueue::new(max_line),
        buf: vec![0u8; 64 << 10],
    };
    lines.lines.feed(&unread);
    let writer = DirectWriter {
        out: Rc::new(out),
        host_left,
        over,
        out_fd,
        stage: (stage_read, stage_write),
        staged: 0,
        journal,
        socket,
        socket_end,
        queue: VecDeque::new(),
        backlog,
        chunk: Vec::new(),
        chunk_keys: Vec::new(),
        with_relay: None,
        flushing: false,
        due: false,
        broken: false,
    };
    let leave = LeaveInput(writer.over.clone());
    Ok(DirectIo { lines, out: writer.start(), leave })
}

/// Reads the relay's lines on the socket for as long as it is there: its acknowledgements of
/// big answers go to the writer, anything else (the end on a signal) to the session. The
/// relay gone ends the session. The writer is held weakly: it ends with the session, which
/// is how the relay learns the session is over.
pub async fn read_relay(
    mut control: SocketLines,
    writer: actix::WeakAddr<DirectWriter>,
    server: Recipient<Incoming>,
    host_lines: tokio::task::AbortHandle,
) {
    while let Some(message) = control.next().await {
        match message {
            Incoming::Line(line) if line == WRITTEN => {
                if let Some(writer) = writer.upgrade() {
                    writer.do_send(Written);
                }
            }
            Incoming::Closed => break,
            other => server.do_send(other),
        }
    }
    // The host's lines are no longer this session's to read.
    host_lines.abort();
    server.do_send(Incoming::Closed);
}
