//! A stdio MCP peer process and the one client of it every part of gm uses: the child servers
//! (whose [`super::Connection`] routes replies on a reader thread), and, reading on the caller's
//! thread, the tests' client, `gm bench` and `mcp-bench`.
//!
//! [`Process`] starts the program (in a process group of its own) and owns its pipes: a writer
//! for its stdin, a [`LineReader`] for its stdout (newline-delimited JSON-RPC, read with an
//! optional timeout) and, when asked, a thread keeping the end of its stderr.
//! [`StdioClient`] speaks JSON-RPC over them for a single caller: requests matched to their
//! replies by id, with whatever else arrives kept in order for the caller.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::sys;

/// Lines of a child's stderr kept for error messages.
const STDERR_LINES: usize = 40;
/// The longest stdout line read; longer ones are skipped as noise.
pub const MAX_LINE: usize = 64 << 20;

/// How to start a peer's process.
#[derive(Debug, Clone)]
pub struct Launch {
    pub command: String,
    pub args: Vec<String>,
    /// Added to (or replacing in) gm's own environment.
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// The box it runs in, if any.
    pub confine: Option<std::sync::Arc<crate::sandbox::Confinement>>,
}

/// A number for each confined start, for the name of its temporary folder.
fn next_box() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// What becomes of the peer's stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stderr {
    /// Kept: the last lines, for error messages ([`Process::stderr_tail`]).
    Tail,
    /// Passed through to this process's stderr (a test's output).
    Inherit,
    Discard,
}

/// The last lines a peer wrote to stderr, and whether it has closed it.
#[derive(Default)]
pub struct StderrTail {
    lines: Mutex<VecDeque<String>>,
    done: Mutex<bool>,
    closed: std::sync::Condvar,
}

impl StderrTail {
    pub fn text(&self) -> String {
        lock(&self.lines).iter().map(|l| format!("{l}\n")).collect()
    }

    /// Waits up to `wait` for the peer to close its stderr (it exited), so that the tail is
    /// whole. A peer's stdout and stderr close at about the same time.
    pub fn wait_closed(&self, wait: Duration) {
        let done = lock(&self.done);
        let _ = self.closed.wait_timeout_while(done, wait, |done| !*done);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded data stays consistent: nothing panics while holding these locks.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A started peer process and its pipes.
pub struct Process {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    pub stdout: LineReader,
    pub stderr: Arc<StderrTail>,
    /// The peer's process group (its pid: it leads a group of its own).
    pub pgid: i32,
}

impl Process {
    /// Starts `launch` with piped stdin and stdout, in a process group of its own, dying with
    /// the process that started it (a child server never outlives its worker, even one killed).
    pub fn spawn(launch: &Launch, stderr: Stderr) -> std::io::Result<Process> {
        let mut cmd = Self::command_of(launch)?;
        cmd.envs(launch.env.iter().map(|(k, v)| (k, v))).current_dir(&launch.cwd);
        crate::sys::die_with_parent(&mut cmd);
        Self::spawn_command(cmd, stderr)
    }

    /// The command of `launch`, in its box when it has one.
    fn command_of(launch: &Launch) -> std::io::Result<Command> {
        let Some(confine) = &launch.confine else {
            let mut cmd = Command::new(&launch.command);
            cmd.args(&launch.args);
            return Ok(cmd);
        };
        // A read-only box's temporary folder lives as long as the server (a name per start).
        let tmp = match confine.policy().mode {
            crate::sandbox::Mode::ReadOnly => {
                let dir = std::env::temp_dir().join(format!("gm-box-server-{}-{}", std::process::id(), next_box()));
                let mut builder = std::fs::DirBuilder::new();
                std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
                builder.create(&dir)?;
                Some(dir)
            }
            _ => None,
        };
        confine
            .command(&launch.command, &launch.args, tmp.as_deref())
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::PermissionDenied, e.to_string()))
    }

    /// Starts a prepared command (its stdio is set here).
    pub fn spawn_command(cmd: Command, stderr: Stderr) -> std::io::Result<Process> {
        Self::spawn_with_stdin(cmd, stderr, Stdio::piped())
    }

    /// Starts a prepared command whose stdin is `stdin` (a pipe the caller made, say);
    /// `Stdio::piped()` gives [`Process::stdin`].
    pub fn spawn_with_stdin(mut cmd: Command, stderr: Stderr, stdin: Stdio) -> std::io::Result<Process> {
        cmd.stdin(stdin).stdout(Stdio::piped()).stderr(match stderr {
            Stderr::Tail => Stdio::piped(),
            Stderr::Inherit => Stdio::inherit(),
            Stderr::Discard => Stdio::null(),
        });
        crate::sys::own_process_group(&mut cmd);
        let mut child = cmd.spawn()?;
        let pgid = child.id() as i32;
        let stdin = child.stdin.take();
        let Some(stdout) = child.stdout.take() else {
            sys::kill_group(pgid);
            return Err(std::io::Error::other("its stdout could not be opened"));
        };
        let tail = Arc::new(StderrTail::default());
        match child.stderr.take() {
            Some(pipe) => {
                let keep = tail.clone();
                std::thread::Builder::new().name("gm-stderr".into()).spawn(move || read_stderr(pipe, &keep))?;
            }
            None => *lock(&tail.done) = true,
        }
        Ok(Process { child, stdin, stdout: LineReader::new(stdout), stderr: tail, pgid })
    }

    pub fn stderr_tail(&self) -> String {
        self.stderr.text()
    }
}

fn read_stderr(stderr: impl Read, tail: &StderrTail) {
    use std::io::BufRead;
    for line in std::io::BufReader::new(stderr).split(b'\n') {
        let Ok(line) = line else { break };
        let mut t = lock(&tail.lines);
        if t.len() == STDERR_LINES {
            t.pop_front();
        }
        t.push_back(String::from_utf8_lossy(&line).chars().take(2000).collect());
    }
    *lock(&tail.done) = true;
    tail.closed.notify_all();
}

/// Newline-delimited lines from a peer's stdout, read on the caller's thread, with a timeout
/// when asked (a poll of the pipe, not a thread of its own: the benchmarks time round trips
/// through it).
pub struct LineReader {
    pipe: ChildStdout,
    buf: Vec<u8>,
    /// Bytes of `buf` already handed out.
    start: usize,
}

/// What [`LineReader::next_line`] found.
#[derive(Debug)]
pub enum Line {
    Line(Vec<u8>),
    /// Nothing arrived within the timeout.
    TimedOut,
    /// The peer closed its stdout.
    Closed,
}

impl LineReader {
    fn new(pipe: ChildStdout) -> Self {
        Self { pipe, buf: Vec::with_capacity(64 * 1024), start: 0 }
    }

    /// The next line (without its newline). A line longer than [`MAX_LINE`] is skipped.
    pub fn next_line(&mut self, timeout: Option<Duration>) -> std::io::Result<Line> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if let Some(at) = memchr::memchr(b'\n', &self.buf[self.start..]) {
                let end = self.start + at;
                let line = self.buf[self.start..end].to_vec();
                self.start = end + 1;
                if self.start == self.buf.len() {
                    self.buf.clear();
                    self.start = 0;
                }
                return Ok(Line::Line(line));
            }
            if self.start > 0 {
                self.buf.drain(..self.start);
                self.start = 0;
            }
            if self.buf.len() > MAX_LINE {
                // Drop what was held of an over-long line; its end is skipped at the next newline.
                self.buf.clear();
            }
            if let Some(deadline) = deadline {
                let left = deadline.saturating_duration_since(Instant::now());
                if !sys::wait_readable(self.pipe.as_raw_fd(), left)? {
                    return Ok(Line::TimedOut);
                }
            }
            let mut chunk = [0u8; 64 * 1024];
            match self.pipe.read(&mut chunk) {
                Ok(0) => return Ok(Line::Closed),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot start the server: {0}")]
    Spawn(std::io::Error),
    #[error("the server closed its stdout")]
    Closed,
    #[error("the server sent no reply within {0:?}")]
    Timeout(Duration),
    #[error("cannot talk to the server: {0}")]
    Io(#[from] std::io::Error),
    #[error("the server answered {method} with an error: {error}")]
    Rpc { method: String, error: Value },
}

/// A JSON-RPC client of a stdio MCP server for a single caller, which reads on its own thread.
/// Replies are matched to requests by id; what else arrives (notifications, replies the caller
/// has not asked for yet, lines that are not JSON) is kept in order for [`StdioClient::recv`].
pub struct StdioClient {
    pub process: Process,
    /// Where requests go: the server's stdin.
    writer: Option<Box<dyn Write + Send>>,
    /// Messages read while waiting for another id.
    pending: VecDeque<Value>,
    next_id: i64,
}

impl StdioClient {
    pub fn spawn(cmd: Command, stderr: Stderr) -> Result<Self, ClientError> {
        let mut process = Process::spawn_command(cmd, stderr).map_err(ClientError::Spawn)?;
        let writer = process.stdin.take().map(|s| Box::new(s) as Box<dyn Write + Send>);
        Ok(Self { process, writer, pending: VecDeque::new(), next_id: 0 })
    }

    /// A client whose requests go into `writer`, the other end of the `stdin` the server is
    /// given (a pipe the caller made and watches).
    pub fn spawn_with_stdin(
        cmd: Command,
        stderr: Stderr,
        stdin: Stdio,
        writer: Box<dyn Write + Send>,
    ) -> Result<Self, ClientError> {
        let process = Process::spawn_with_stdin(cmd, stderr, stdin).map_err(ClientError::Spawn)?;
        Ok(Self { process, writer: Some(writer), pending: VecDeque::new(), next_id: 0 })
    }

    /// Writes bytes as they are (a test sending malformed input).
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        let stdin = self.writer.as_mut().ok_or(ClientError::Closed)?;
        stdin.write_all(bytes)?;
        stdin.flush()?;
        Ok(())
    }

    /// Writes one message as a line.
    pub fn send(&mut self, message: &Value) -> Result<(), ClientError> {
        let mut line = serde_json::to_vec(message).unwrap_or_default();
        line.push(b'\n');
        self.send_raw(&line)
    }

    pub fn notify(&mut self, method: &str, params: Value) -> Result<(), ClientError> {
        self.send(&json!({ "jsonrpc": "2.0", "method": method, "params": params }))
    }

    /// Sends a request with the next id and returns that id.
    pub fn send_request(&mut self, method: &str, params: Value) -> Result<Value, ClientError> {
        self.next_id += 1;
        let id = json!(self.next_id);
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        Ok(id)
    }

    /// The next message: one kept earlier, else the next line read (a line that is not JSON
    /// comes as a string). `None` when nothing arrives within `timeout`.
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Option<Value>, ClientError> {
        if let Some(v) = self.pending.pop_front() {
            return Ok(Some(v));
        }
        self.read(timeout)
    }

    fn read(&mut self, timeout: Option<Duration>) -> Result<Option<Value>, ClientError> {
        loop {
            match self.process.stdout.next_line(timeout)? {
                Line::Closed => return Err(ClientError::Closed),
                Line::TimedOut => return Ok(None),
                Line::Line(bytes) if bytes.iter().all(u8::is_ascii_whitespace) => {}
                Line::Line(bytes) => {
                    return Ok(Some(
                        serde_json::from_slice(&bytes)
                            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
                    ))
                }
            }
        }
    }

    /// Waits for the reply with this id, keeping what else arrives.
    pub fn recv_id(&mut self, id: &Value, timeout: Option<Duration>) -> Result<Value, ClientError> {
        let is_reply = |m: &Value| m.get("id") == Some(id) && m.get("method").is_none();
        if let Some(i) = self.pending.iter().position(is_reply) {
            return Ok(self.pending.remove(i).unwrap_or_default());
        }
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            match self.read(left)? {
                None => return Err(ClientError::Timeout(timeout.unwrap_or_default())),
                Some(m) if is_reply(&m) => return Ok(m),
                Some(m) => self.pending.push_back(m),
            }
        }
    }

    /// Sends a request and waits for its reply (the whole reply message).
    pub fn request(&mut self, method: &str, params: Value, timeout: Option<Duration>) -> Result<Value, ClientError> {
        let id = self.send_request(method, params)?;
        self.recv_id(&id, timeout)
    }

    /// A request's `result`; an error reply is an error.
    pub fn call(&mut self, method: &str, params: Value, timeout: Option<Duration>) -> Result<Value, ClientError> {
        let reply = self.request(method, params, timeout)?;
        match reply.get("error") {
            Some(error) => Err(ClientError::Rpc { method: method.to_owned(), error: error.clone() }),
            None => Ok(reply.get("result").cloned().unwrap_or(Value::Null)),
        }
    }

    /// The MCP handshake: `initialize` with `version`, then `notifications/initialized`.
    pub fn initialize(&mut self, version: &str, client: &str) -> Result<Value, ClientError> {
        let params = json!({ "protocolVersion": version, "capabilities": {}, "clientInfo": { "name": client, "version": env!("CARGO_PKG_VERSION") } });
        let result = self.call("initialize", params, Some(Duration::from_secs(60)))?;
        self.notify("notifications/initialized", json!({}))?;
        Ok(result)
    }

    /// Closes the server's stdin (as a host does when it is done).
    pub fn close_stdin(&mut self) {
        self.writer.take();
    }

    pub fn stdin_open(&self) -> bool {
        self.writer.is_some()
    }

    pub fn pid(&self) -> u32 {
        self.process.child.id()
    }

    /// The server's exit status, waiting up to `timeout`.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.process.child.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether the server has exited.
    pub fn exited(&mut self) -> bool {
        matches!(self.process.child.try_wait(), Ok(Some(_)))
    }
}

impl Drop for StdioClient {
    fn drop(&mut self) {
        let _ = self.process.child.kill();
        let _ = self.process.child.wait();
    }
}

/// The `p`th percentile (0 to 1) of `sorted` values, by the nearest rank; NaN for none. The one
/// percentile every gm benchmark reports.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p.clamp(0.0, 1.0)).round() as usize;
    sorted[rank]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(
            (percentile(&v, 0.0), percentile(&v, 0.5), percentile(&v, 0.99), percentile(&v, 1.0)),
            (1.0, 51.0, 99.0, 100.0)
        );
        assert!(percentile(&[], 0.5).is_nan());
    }

    #[test]
    fn a_client_reads_lines_with_timeouts_and_matches_replies_by_id() {
        // A peer that turns each `echo` request into its reply (same id, a result).
        let mut sed = Command::new("sed");
        sed.args(["-u", r#"s/"method":"echo"/"result":"ok"/"#]);
        let mut c = StdioClient::spawn(sed, Stderr::Discard).expect("sed");
        assert!(c.recv(Some(Duration::from_millis(50))).expect("read").is_none(), "nothing yet");
        c.send(&json!({ "jsonrpc": "2.0", "method": "note" })).expect("send");
        c.send_raw(b"not json\n").expect("send");
        let reply = c.request("echo", json!({ "x": 1 }), Some(Duration::from_secs(5))).expect("echoed");
        assert_eq!(reply["params"]["x"], 1);
        assert_eq!(c.recv(None).expect("read").expect("kept")["method"], "note");
        assert_eq!(c.recv(None).expect("read"), Some(json!("not json")));
        c.close_stdin();
        assert!(matches!(c.recv(Some(Duration::from_secs(5))), Err(ClientError::Closed)));
    }
}
