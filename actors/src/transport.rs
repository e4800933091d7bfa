//! Stdio transport: newline-delimited JSON-RPC lines in, protocol lines out.
//!
//! Lines are handed to a recipient actor. The reader never buffers more than `max_line` bytes
//! of one line: past the limit the rest of that line is read and dropped, and the recipient is
//! told how long it was.

use std::io::{BufRead, Write};

use actix::prelude::*;

use crate::sys;

/// One unit read from stdin.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub enum Incoming {
    /// A complete line (without its newline), valid UTF-8.
    Line(String),
    /// A line longer than the limit; its bytes were dropped unread.
    TooLong { bytes: u64 },
    /// A line that is not valid UTF-8.
    InvalidUtf8,
    /// stdin reached end of file or failed: the client is gone.
    Closed,
}

/// Starts reading stdin. When stdin can be polled (a pipe or a socket, as MCP hosts give it)
/// it is read on the current arbiter, so a request reaches the server without a cross-thread
/// wake-up (25-60 µs on these machines). Otherwise (a regular file, a terminal that cannot be
/// polled) a reader thread does the blocking reads.
pub fn spawn_stdin_reader(max_line: usize, sink: Recipient<Incoming>) -> std::io::Result<()> {
    #[cfg(unix)]
    if let Some(fd) = pollable_stdin() {
        actix::spawn(read_polled(fd, max_line, sink));
        return Ok(());
    }
    std::thread::Builder::new().name("gm-stdin".into()).spawn(move || {
        let stdin = std::io::stdin();
        read_lines(stdin.lock(), max_line, |msg| sink.do_send(msg));
    })?;
    Ok(())
}

/// Stdin's descriptor, not owned: closing it is left to the process. (Polling stdin is the
/// Unix path; elsewhere the reader thread reads it.)
#[cfg(unix)]
struct StdinFd;

#[cfg(unix)]
impl std::os::fd::AsRawFd for StdinFd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        0
    }
}

#[cfg(unix)]
fn pollable_stdin() -> Option<tokio::io::unix::AsyncFd<StdinFd>> {
    // SAFETY: fd 0 stays open, naming the same file description, for the whole process:
    // nothing in gm closes or replaces stdin.
    let fd = unsafe { tokio::io::unix::AsyncFd::register_with_interest(StdinFd, tokio::io::Interest::READABLE).ok()? };
    sys::set_stdin_nonblocking().then_some(fd)
}

#[cfg(unix)]
async fn read_polled(fd: tokio::io::unix::AsyncFd<StdinFd>, max_line: usize, sink: Recipient<Incoming>) {
    let mut splitter = LineSplitter::new(max_line);
    let mut buf = vec![0u8; 64 * 1024];
    let mut emit = |m| sink.do_send(m);
    let drains = sys::stdin_is_pipe_or_socket();
    loop {
        let Ok(mut guard) = fd.readable().await else { break };
        let read = guard.try_io(|_| sys::read_stdin(&mut buf));
        match read {
            Ok(Ok(0)) => break,
            Ok(Ok(n)) => {
                splitter.feed(&buf[..n], &mut emit);
                // A short read emptied the pipe: wait for the next readiness edge now rather
                // than make one more read only to see EAGAIN (a syscall per request). Safe on
                // this single-threaded runtime: the driver cannot have taken an edge for data
                // that arrived after the read, so that data wakes the next wait.
                if drains && n < buf.len() {
                    guard.clear_ready();
                }
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Ok(Err(_)) => break,
            Err(_would_block) => {}
        }
    }
    splitter.finish(&mut emit);
    emit(Incoming::Closed);
}

/// Splits `input` into lines of at most `max_line` bytes, calling `emit` for each, then
/// `emit(Incoming::Closed)`.
pub fn read_lines<R: BufRead>(mut input: R, max_line: usize, mut emit: impl FnMut(Incoming)) {
    let mut splitter = LineSplitter::new(max_line);
    loop {
        let n = match input.fill_buf() {
            Ok([]) => break,
            Ok(buf) => {
                splitter.feed(buf, &mut emit);
                buf.len()
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        input.consume(n);
    }
    splitter.finish(&mut emit);
    emit(Incoming::Closed);
}

/// Cuts a byte stream into lines, never holding more than `max_line` bytes of one line: past
/// the limit the rest of that line is counted and dropped.
pub struct LineSplitter {
    max_line: usize,
    line: Vec<u8>,
    overflow: u64,
}

impl LineSplitter {
    pub fn new(max_line: usize) -> Self {
        Self { max_line, line: Vec::new(), overflow: 0 }
    }

    pub fn feed(&mut self, mut bytes: &[u8], emit: &mut impl FnMut(Incoming)) {
        while !bytes.is_empty() {
            let (chunk, found_newline) = match bytes.iter().position(|&b| b == b'\n') {
                Some(i) => (&bytes[..i], true),
                None => (bytes, false),
            };
            if self.overflow > 0 || self.line.len() + chunk.len() > self.max_line {
                self.overflow += (self.line.len() + chunk.len()) as u64;
                self.line.clear();
            } else {
                self.line.extend_from_slice(chunk);
            }
            bytes = &bytes[chunk.len() + usize::from(found_newline)..];
            if found_newline {
                self.end_line(emit);
            }
        }
    }

    pub fn finish(&mut self, emit: &mut impl FnMut(Incoming)) {
        if self.overflow > 0 || !self.line.is_empty() {
            self.end_line(emit);
        }
    }

    fn end_line(&mut self, emit: &mut impl FnMut(Incoming)) {
        if self.overflow > 0 {
            emit(Incoming::TooLong { bytes: self.overflow });
            self.overflow = 0;
        } else {
            emit_line(&mut self.line, emit);
        }
    }
}

fn emit_line(line: &mut Vec<u8>, emit: &mut impl FnMut(Incoming)) {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    let bytes = std::mem::take(line);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match String::from_utf8(bytes) {
        Ok(s) => emit(Incoming::Line(s)),
        Err(_) => emit(Incoming::InvalidUtf8),
    }
}

/// The stdout writer. Only protocol lines go to stdout; everything else goes to stderr.
///
/// Writes happen on the caller's arbiter: a reply is one small `write` on a pipe, and handing
/// it to another thread would cost a cross-core wake-up (25-60 µs here) per reply.
pub struct StdoutWriter {
    out: std::io::Stdout,
}

impl Default for StdoutWriter {
    fn default() -> Self {
        Self { out: std::io::stdout() }
    }
}

impl Actor for StdoutWriter {
    type Context = Context<Self>;
}

/// One serialized protocol message, written as a single line.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Send(pub String);

impl Handler<Send> for StdoutWriter {
    type Result = ();
    fn handle(&mut self, msg: Send, _: &mut Context<Self>) {
        let mut out = self.out.lock();
        let mut line = msg.0.into_bytes();
        line.push(b'\n');
        // A closed stdout means the client is gone; stdin's end will stop the server.
        let _ = out.write_all(&line).and_then(|()| out.flush());
    }
}

/// Lines split from a stream of bytes, waiting to be taken one [`Incoming`] at a time, and
/// whether the stream ended.
pub struct LineQueue {
    splitter: LineSplitter,
    ready: std::collections::VecDeque<Incoming>,
    closed: bool,
}

impl LineQueue {
    pub fn new(max_line: usize) -> Self {
        Self { splitter: LineSplitter::new(max_line), ready: std::collections::VecDeque::new(), closed: false }
    }

    /// The next message: `Some(Some(_))` one that waits, `Some(None)` once the stream ended and
    /// all were taken, `None` when more bytes are needed.
    pub fn next_ready(&mut self) -> Option<Option<Incoming>> {
        match self.ready.pop_front() {
            Some(m) => Some(Some(m)),
            None if self.closed => Some(None),
            None => None,
        }
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        let ready = &mut self.ready;
        self.splitter.feed(bytes, &mut |m| ready.push_back(m));
    }

    /// The stream ended: a last line without its newline, then [`Incoming::Closed`].
    pub fn close(&mut self) {
        if self.closed {
            return;
        }
        let ready = &mut self.ready;
        self.splitter.finish(&mut |m| ready.push_back(m));
        self.ready.push_back(Incoming::Closed);
        self.closed = true;
    }

    /// The stream ends here: nothing more is taken, not even what waits.
    pub fn stop(&mut self) {
        self.ready.clear();
        self.closed = true;
    }

    /// Whether bytes past the lines taken have been read.
    pub fn holds_more(&self) -> bool {
        !self.ready.is_empty() || !self.splitter.line.is_empty() || self.splitter.overflow > 0
    }

    /// Sets a limit on the next line (the first line, a relay's hello, is small).
    pub fn set_max_line(&mut self, max_line: usize) {
        self.splitter.max_line = max_line;
    }
}

/// Lines read from one connection of the worker's socket, one [`Incoming`] at a time.
#[cfg(unix)]
pub struct SocketLines {
    read: crate::sys::local::Reader,
    lines: LineQueue,
    buf: Vec<u8>,
}

#[cfg(unix)]
impl SocketLines {
    pub fn new(read: crate::sys::local::Reader, max_line: usize) -> Self {
        Self { read, lines: LineQueue::new(max_line), buf: vec![0u8; 64 * 1024] }
    }

    /// The next line (or what stands for one); `None` after [`Incoming::Closed`].
    pub async fn next(&mut self) -> Option<Incoming> {
        loop {
            if let Some(m) = self.lines.next_ready() {
                return m;
            }
            match self.read.read(&mut self.buf).await {
                Ok(0) | Err(_) => self.lines.close(),
                Ok(n) => self.lines.feed(&self.buf[..n]),
            }
        }
    }

    /// The connection's first line, with the descriptors sent along with it (a relay passes
    /// its session's pipes with its hello).
    pub async fn first_with_fds(&mut self) -> (Option<Incoming>, Vec<std::os::fd::OwnedFd>) {
        let mut fds = Vec::new();
        loop {
            if let Some(m) = self.lines.next_ready() {
                return (m, fds);
            }
            match self.read.read_with_fds(&mut self.buf, &mut fds).await {
                Ok(0) | Err(_) => self.lines.close(),
                Ok(n) => self.lines.feed(&self.buf[..n]),
            }
        }
    }

    /// A copy of the descriptor read, to ask later whether the other end closed.
    pub fn probe(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        self.read.probe()
    }

    /// Whether bytes past the lines taken have been read.
    pub fn holds_more(&self) -> bool {
        self.lines.holds_more()
    }

    /// Sets a limit on the next line (the first line, a relay's hello, is small).
    pub fn set_max_line(&mut self, max_line: usize) {
        self.lines.set_max_line(max_line);
    }
}

/// A connection's writer: lines go out at once when the socket takes them, else wait in a
/// queue written as the socket drains, so one relay that reads slowly never blocks the arbiter
/// every other session shares. A queue past its limit (a relay that stopped reading) closes the
/// connection.
#[cfg(unix)]
pub struct SocketWriter {
    write: std::rc::Rc<crate::sys::local::Writer>,
    queue: Vec<u8>,
    /// Bytes of `queue` already written.
    done: usize,
    flushing: bool,
    /// A write is due once the messages waiting in the mailbox are queued too.
    due: bool,
    limit: usize,
    broken: bool,
}

#[cfg(unix)]
impl SocketWriter {
    pub fn new(write: crate::sys::local::Writer, limit: usize) -> Self {
        Self {
            write: std::rc::Rc::new(write),
            queue: Vec::new(),
            done: 0,
            flushing: false,
            due: false,
            limit,
            broken: false,
        }
    }

    /// Writes what the socket takes now; false when it failed (the peer is gone).
    fn write_some(&mut self) -> bool {
        while self.done < self.queue.len() {
            match self.write.try_write(&self.queue[self.done..]) {
                Ok(0) => return false,
                Ok(n) => self.done += n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        if self.done == self.queue.len() {
            self.queue.clear();
            self.done = 0;
        }
        true
    }

    fn flush_later(&mut self, ctx: &mut Context<Self>) {
        if self.flushing || self.queue.is_empty() {
            return;
        }
        self.flushing = true;
        let write = self.write.clone();
        ctx.spawn(actix::fut::wrap_future(async move { write.writable().await }).map(|ready, act: &mut Self, ctx| {
            act.flushing = false;
            if ready.is_err() || !act.write_some() {
                act.broken = true;
                act.queue = Vec::new();
                return;
            }
            act.flush_later(ctx);
        }));
    }
}

#[cfg(unix)]
impl Actor for SocketWriter {
    type Context = Context<Self>;
}

#[cfg(unix)]
impl Handler<Send> for SocketWriter {
    type Result = ();
    fn handle(&mut self, msg: Send, ctx: &mut Context<Self>) {
        if self.broken {
            return;
        }
        self.queue.extend_from_slice(msg.0.as_bytes());
        self.queue.push(b'\n');
        if self.flushing {
            if self.queue.len() - self.done > self.limit {
                // The peer stopped reading: end the connection rather than hold without end.
                self.broken = true;
                self.queue = Vec::new();
                ctx.stop();
            }
            return;
        }
        if self.due {
            return;
        }
        // Written once the mailbox is drained (an actor's waiting messages are handled before
        // its spawned futures are polled): answers finished together go in one write, and
        // the relay that reads them wakes once instead of once per answer.
        self.due = true;
        ctx.spawn(actix::fut::ready(()).map(|(), act: &mut Self, ctx| {
            act.due = false;
            if act.broken {
                return;
            }
            if !act.write_some() {
                act.broken = true;
                act.queue = Vec::new();
                return;
            }
            act.flush_later(ctx);
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<String> {
        let mut got = Vec::new();
        read_lines(input, max, |m| {
            got.push(match m {
                Incoming::Line(s) => format!("line:{s}"),
                Incoming::TooLong { bytes } => format!("toolong:{bytes}"),
                Incoming::InvalidUtf8 => "utf8".into(),
                Incoming::Closed => "closed".into(),
            })
        });
        got
    }

    #[test]
    fn splits_lines_and_strips_carriage_returns() {
        assert_eq!(lines(b"a\r\nb\n\nc", 100), ["line:a", "line:b", "line:c", "closed"]);
    }

    #[test]
    fn an_overlong_line_is_dropped_and_counted_and_the_next_line_still_arrives() {
        assert_eq!(lines(b"0123456789\nok\n", 4), ["toolong:10", "line:ok", "closed"]);
    }

    #[test]
    fn lines_split_across_reads_are_joined() {
        let mut got = Vec::new();
        let mut s = LineSplitter::new(8);
        let mut emit = |m| {
            if let Incoming::Line(l) = m {
                got.push(l)
            }
        };
        s.feed(b"ab", &mut emit);
        s.feed(b"c\nd", &mut emit);
        s.feed(b"e\n", &mut emit);
        s.finish(&mut emit);
        assert_eq!(got, ["abc", "de"]);
    }

    /// Lines written in every split — one byte at a time, several lines in one write, a line
    /// larger than the read buffer — all arrive, in order, however the reads fall around the
    /// readiness a short read clears. Run many times: the race is between a read and a write.
    #[cfg(unix)]
    #[test]
    fn socket_lines_arrive_whole_however_the_writes_fall() {
        use std::io::Write as _;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        for round in 0..50 {
            let (a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
            b.set_nonblocking(true).expect("nonblocking");
            let big = "x".repeat(100 << 10);
            let expected: Vec<String> =
                (0..20).map(|i| if i == 7 { big.clone() } else { format!("line {round} {i}") }).collect();
            let writes = expected.clone();
            let writer = std::thread::spawn(move || {
                let mut a = a;
                for (i, line) in writes.iter().enumerate() {
                    let bytes = format!("{line}\n");
                    match i % 3 {
                        0 => bytes.bytes().for_each(|byte| a.write_all(&[byte]).expect("write")),
                        _ => a.write_all(bytes.as_bytes()).expect("write"),
                    }
                    if i % 5 == 0 {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                    }
                }
            });
            let got = rt.block_on(async move {
                let (read, _write) = crate::sys::local::split(b).expect("split");
                let mut lines = SocketLines::new(read, 1 << 20);
                let mut got = Vec::new();
                while let Some(m) = lines.next().await {
                    match m {
                        Incoming::Line(l) => got.push(l),
                        Incoming::Closed => break,
                        other => panic!("unexpected {other:?}"),
                    }
                }
                got
            });
            writer.join().expect("writer");
            assert_eq!(got, expected, "round {round}");
        }
    }

    /// A peer that reads late fills the socket: the writer waits for it to drain (registered
    /// for writability only then) and every line still arrives, whole and in order.
    #[cfg(unix)]
    #[test]
    fn a_writer_whose_peer_reads_late_delivers_every_line_in_order() {
        use std::io::BufRead as _;
        const LINES: usize = 3000;
        let (a, b) = std::os::unix::net::UnixStream::pair().expect("pair");
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            let mut got = 0;
            for (i, line) in std::io::BufReader::new(b).lines().enumerate().take(LINES) {
                let line = line.expect("line");
                assert_eq!(line, format!("{i} {}", "y".repeat(1000)));
                got += 1;
            }
            let _ = done_tx.send(got);
        });
        let got = actix::System::new().block_on(async move {
            let (_read, write) = crate::sys::local::split(a).expect("split");
            let writer = SocketWriter::new(write, 64 << 20).start();
            for i in 0..LINES {
                writer.do_send(Send(format!("{i} {}", "y".repeat(1000))));
            }
            for _ in 0..2000 {
                if let Ok(got) = done_rx.try_recv() {
                    return got;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            0
        });
        reader.join().expect("reader");
        assert_eq!(got, LINES);
    }

    /// Answers handed to the writer together (one mailbox's worth) leave in one write: the
    /// peer is a packet socket here, so each write is one packet it can count.
    #[cfg(unix)]
    #[test]
    fn lines_sent_together_leave_in_one_write() {
        use std::os::fd::{FromRawFd, OwnedFd};
        let mut fds = [0; 2];
        // SAFETY: socketpair(2) fills two descriptors, each owned once below.
        assert_eq!(unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0, fds.as_mut_ptr()) }, 0);
        // SAFETY: both were just opened and are owned by nothing else.
        let (ours, theirs) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let packets = actix::System::new().block_on(async move {
            let writer = SocketWriter::new(crate::sys::local::Writer::new(ours).expect("writer"), 1 << 20).start();
            for i in 0..10 {
                writer.do_send(Send(format!("answer {i}")));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            let mut packets = Vec::new();
            let mut buf = vec![0u8; 1 << 16];
            loop {
                // SAFETY: recv(2) into a buffer we own, without waiting.
                let n = unsafe {
                    libc::recv(
                        std::os::fd::AsRawFd::as_raw_fd(&theirs),
                        buf.as_mut_ptr().cast(),
                        buf.len(),
                        libc::MSG_DONTWAIT,
                    )
                };
                let Ok(n) = usize::try_from(n) else { break };
                packets.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
            packets
        });
        let expected: String = (0..10).map(|i| format!("answer {i}\n")).collect();
        assert_eq!(packets, [expected]);
    }

    #[test]
    fn invalid_utf8_is_reported_not_fatal() {
        assert_eq!(lines(b"\xff\xfe\nok\n", 100), ["utf8", "line:ok", "closed"]);
    }
}
