//! One stdio connection to a child MCP server: the process, a writer thread that owns its
//! stdin, a reader thread that routes replies by id, and the table of calls waiting for them.
//!
//! Shaped after helix-lsp's transport: when the child's stdout ends (it exited, crashed or
//! closed it), every call still waiting is failed at once with the server's name, how it
//! ended and the last lines of its stderr — a dead child never hangs a call.
//!
//! A call hands its request line to the writer thread and waits on a oneshot; the reader
//! thread answers it. Nothing on the caller's thread writes to the pipe: a child that stops
//! reading (its event loop blocked) fills the pipe's 64 KiB, and a write there would block the
//! caller — a JS engine thread — before its timeout and cancel were armed. The writer blocks
//! instead, and the call still times out or is cancelled on time.

use std::collections::HashMap;
use std::io::Write;
use std::process::{Child, ChildStdin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::sync::oneshot;

pub use super::stdio::Launch;
use super::stdio::{Line, LineReader, Process, Stderr, StderrTail};
use crate::cancel::CancelToken;
use crate::sys;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ConnError {
    #[error("cannot start `{command}`: {why}")]
    Spawn { command: String, why: String },
    /// The child's stdout ended: it exited or closed it.
    #[error("{server} ended ({how}){}", stderr_note(.stderr))]
    Gone { server: String, how: String, stderr: String },
    #[error("{server} did not answer {method} within {ms} ms")]
    Timeout { server: String, method: String, ms: u64 },
    #[error("the call was cancelled")]
    Cancelled,
    /// The child answered with a JSON-RPC error.
    #[error("{server} answered {method} with error {code}: {message}")]
    Rpc { server: String, method: String, code: i64, message: String, data: Option<Value> },
}

fn stderr_note(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("; the end of its stderr:\n{}", stderr.trim_end())
    }
}

type Waiter = oneshot::Sender<Result<Value, ConnError>>;

/// The calls waiting for a reply, until the connection closes.
#[derive(Default)]
struct Pending {
    waiting: HashMap<u64, Waiter>,
    /// Why the connection is closed, once it is.
    closed: Option<ConnError>,
}

/// What the reader thread hands on: notifications and requests the child sends.
pub type OnMessage = Box<dyn Fn(Value) + Send + Sync>;
/// Called once when the child's stdout ends, with why.
pub type OnClose = Box<dyn FnOnce(ConnError) + Send>;

/// A line for the child's stdin; `id` is the request it carries, if it is one.
struct Outgoing {
    line: Vec<u8>,
    id: Option<u64>,
}

pub struct Connection {
    server: String,
    /// To the writer thread; taken when the child is stopped, which closes its stdin once the
    /// lines before are written.
    writer: Mutex<Option<mpsc::Sender<Outgoing>>>,
    /// A write to the child's stdin failed: it closed it.
    stdin_closed: Arc<AtomicBool>,
    pending: Arc<Mutex<Pending>>,
    next_id: AtomicU64,
    stderr: Arc<StderrTail>,
    child: Arc<Mutex<Child>>,
    pgid: i32,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Connection({}, pgid {})", self.server, self.pgid)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The guarded data stays consistent: nothing panics while holding these locks.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Connection {
    /// The child's process group (its pid).
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// Starts the child in a process group of its own, with its stdin, stdout and stderr piped.
    pub fn spawn(
        server: &str,
        launch: &Launch,
        on_message: OnMessage,
        on_close: OnClose,
    ) -> Result<Arc<Self>, ConnError> {
        let spawn_err = |why: String| ConnError::Spawn { command: launch.command.clone(), why };
        let Process { mut child, stdin, stdout, stderr, pgid } =
            Process::spawn(launch, Stderr::Tail).map_err(|e| spawn_err(e.to_string()))?;
        let (to_writer, lines) = mpsc::channel::<Outgoing>();
        let pending: Arc<Mutex<Pending>> = Arc::default();
        let stdin_closed = Arc::new(AtomicBool::new(false));
        if let Some(stdin) = stdin {
            let (pending, closed, name) = (pending.clone(), stdin_closed.clone(), server.to_owned());
            let spawned = std::thread::Builder::new()
                .name(format!("gm-mcp-{server}-in"))
                .spawn(move || write_stdin(stdin, &lines, &pending, &closed, &name));
            if let Err(e) = spawned {
                // No writer: the child must not run on unreachable.
                let _ = child.kill();
                let _ = child.wait();
                return Err(spawn_err(e.to_string()));
            }
        }
        let conn = Arc::new(Self {
            server: server.to_owned(),
            writer: Mutex::new(Some(to_writer)),
            stdin_closed,
            pending,
            next_id: AtomicU64::new(1),
            stderr,
            child: Arc::new(Mutex::new(child)),
            pgid,
        });
        let reader = Arc::downgrade(&conn);
        let (pending, stderr_tail, child, name) =
            (conn.pending.clone(), conn.stderr.clone(), conn.child.clone(), server.to_owned());
        std::thread::Builder::new()
            .name(format!("gm-mcp-{server}"))
            .spawn(move || {
                read_stdout(stdout, &pending, &reader, &on_message);
                let how = exit_of(&child);
                stderr_tail.wait_closed(Duration::from_millis(300));
                let why = ConnError::Gone { server: name, how, stderr: stderr_tail.text() };
                let waiting = {
                    let mut p = lock(&pending);
                    p.closed = Some(why.clone());
                    std::mem::take(&mut p.waiting)
                };
                for (_, waiter) in waiting {
                    let _ = waiter.send(Err(why.clone()));
                }
                on_close(why);
            })
            .map_err(|e| spawn_err(e.to_string()))?;
        Ok(conn)
    }

    pub fn server(&self) -> &str {
        &self.server
    }

    /// Whether the child's stdout is still open.
    pub fn is_open(&self) -> bool {
        lock(&self.pending).closed.is_none()
    }

    /// The last lines the child wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        self.stderr.text()
    }

    /// Hands one JSON-RPC message, as a line, to the writer thread; never blocks. `id` is the
    /// request's, whose waiter the writer fails if the line cannot be written.
    fn write(&self, message: &Value, id: Option<u64>) -> Result<(), ConnError> {
        let mut line = serde_json::to_vec(message).unwrap_or_default();
        line.push(b'\n');
        let queued = !self.stdin_closed.load(Ordering::Acquire)
            && lock(&self.writer).as_ref().is_some_and(|tx| tx.send(Outgoing { line, id }).is_ok());
        if queued {
            Ok(())
        } else {
            // The child closed its stdin, or it is being stopped.
            Err(self.closed_now())
        }
    }

    pub fn notify(&self, method: &str, params: Value) -> Result<(), ConnError> {
        self.write(&json!({ "jsonrpc": "2.0", "method": method, "params": params }), None)
    }

    /// Sends a request and waits for its reply, at most `timeout`. A request that times out or
    /// is cancelled is withdrawn and the child is sent `notifications/cancelled` for it.
    pub async fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        cancel: &CancelToken,
    ) -> Result<Value, ConnError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut p = lock(&self.pending);
            if let Some(why) = &p.closed {
                return Err(why.clone());
            }
            p.waiting.insert(id, tx);
        }
        if self.write(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }), Some(id)).is_err() {
            lock(&self.pending).waiting.remove(&id);
            // Its reader says how it ended, in a moment.
            return Err(self.closed_reason(Duration::from_millis(500)).await);
        }
        let withdraw = |reason: &str| {
            lock(&self.pending).waiting.remove(&id);
            let _ = self.notify("notifications/cancelled", json!({ "requestId": id, "reason": reason }));
        };
        tokio::select! {
            biased;
            () = cancel.cancelled() => {
                withdraw("cancelled by the caller");
                Err(ConnError::Cancelled)
            }
            reply = rx => reply.unwrap_or_else(|_| Err(self.gone("the reply was dropped"))),
            () = tokio::time::sleep(timeout) => {
                let ms = timeout.as_millis() as u64;
                withdraw(&format!("timed out after {ms} ms"));
                Err(ConnError::Timeout { server: self.server.clone(), method: method.to_owned(), ms })
            }
        }
        .and_then(|reply| match reply.get("error") {
            Some(err) => Err(ConnError::Rpc {
                server: self.server.clone(),
                method: method.to_owned(),
                code: err.get("code").and_then(Value::as_i64).unwrap_or(0),
                message: err.get("message").and_then(Value::as_str).unwrap_or("").to_owned(),
                data: err.get("data").cloned(),
            }),
            None => Ok(reply.get("result").cloned().unwrap_or(Value::Null)),
        })
    }

    /// Why the connection closed, waiting up to `wait` for the reader thread to say.
    async fn closed_reason(&self, wait: Duration) -> ConnError {
        let until = Instant::now() + wait;
        loop {
            if let Some(why) = lock(&self.pending).closed.clone() {
                return why;
            }
            if Instant::now() >= until {
                return self.closed_now();
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Why the connection closed, as far as is known now.
    fn closed_now(&self) -> ConnError {
        lock(&self.pending).closed.clone().unwrap_or_else(|| ConnError::Gone {
            server: self.server.clone(),
            how: "its stdin is closed".into(),
            stderr: self.stderr_tail(),
        })
    }

    fn gone(&self, how: &str) -> ConnError {
        lock(&self.pending).closed.clone().unwrap_or_else(|| ConnError::Gone {
            server: self.server.clone(),
            how: how.into(),
            stderr: self.stderr_tail(),
        })
    }

    /// Stops the child: stdin closed (once the lines queued before are written), then SIGTERM
    /// to its process group after `grace`, then SIGKILL after `grace` again. Blocks for at most
    /// twice `grace`.
    pub fn stop(&self, grace: Duration) {
        lock(&self.writer).take();
        let exited = |c: &Mutex<Child>| lock(c).try_wait().ok().flatten().is_some();
        let wait = |limit: Duration| {
            let until = Instant::now() + limit;
            while Instant::now() < until {
                if exited(&self.child) {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            exited(&self.child)
        };
        if !wait(grace) {
            sys::term_group(self.pgid);
            if !wait(grace) {
                sys::kill_group(self.pgid);
                let _ = lock(&self.child).wait();
            }
        }
        // What the server left in its group goes with it.
        sys::kill_group(self.pgid);
    }
}

/// The writer thread: writes the lines it is handed, in order, until the connection lets go
/// of it (stdin is closed then) or a write fails (the child closed its stdin): the calls whose
/// requests were not written are failed at once, not left to their timeout.
fn write_stdin(
    mut stdin: ChildStdin,
    lines: &mpsc::Receiver<Outgoing>,
    pending: &Mutex<Pending>,
    closed: &AtomicBool,
    server: &str,
) {
    let mut failed = false;
    for out in lines {
        if !failed && stdin.write_all(&out.line).and_then(|()| stdin.flush()).is_ok() {
            continue;
        }
        if !failed {
            failed = true;
            closed.store(true, Ordering::Release);
            // A child that closed its stdin is usually ending: its reader fails every waiting
            // call with how it ended and its stderr. Give it a moment to say so.
            let until = Instant::now() + Duration::from_millis(500);
            while lock(pending).closed.is_none() && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let waiter = out.id.and_then(|id| lock(pending).waiting.remove(&id));
        if let Some(w) = waiter {
            let why =
                ConnError::Gone { server: server.to_owned(), how: "its stdin is closed".into(), stderr: String::new() };
            let _ = w.send(Err(why));
        }
    }
}

/// Reads the child's stdout: replies go to their waiters, everything else to `on_message`.
fn read_stdout(
    mut stdout: LineReader,
    pending: &Mutex<Pending>,
    conn: &std::sync::Weak<Connection>,
    on_message: &OnMessage,
) {
    loop {
        let line = match stdout.next_line(None) {
            Ok(Line::Line(line)) => line,
            Ok(Line::Closed) | Err(_) => return,
            Ok(Line::TimedOut) => continue,
        };
        let Ok(message) = serde_json::from_slice::<Value>(&line) else { continue };
        let is_reply =
            message.get("method").is_none() && (message.get("result").is_some() || message.get("error").is_some());
        if is_reply {
            let waiter = message.get("id").and_then(Value::as_u64).and_then(|id| lock(pending).waiting.remove(&id));
            if let Some(w) = waiter {
                let _ = w.send(Ok(message));
            }
            continue;
        }
        if let (Some(id), Some(method)) = (message.get("id"), message.get("method").and_then(Value::as_str)) {
            // A request from the child: gm answers ping and declines the rest (it offers the
            // child no capabilities).
            let reply = if method == "ping" {
                json!({ "jsonrpc": "2.0", "id": id, "result": {} })
            } else {
                json!({ "jsonrpc": "2.0", "id": id, "error": { "code": -32601, "message": format!("gm does not serve {method}") } })
            };
            if let Some(conn) = conn.upgrade() {
                let _ = conn.write(&reply, None);
            }
            continue;
        }
        on_message(message);
    }
}

/// How the child ended, waiting a moment for its exit status (its stdout can close first).
fn exit_of(child: &Mutex<Child>) -> String {
    let until = Instant::now() + Duration::from_millis(200);
    loop {
        match lock(child).try_wait() {
            Ok(Some(status)) => {
                return match (status.code(), sys::exit_signal(&status)) {
                    (Some(code), _) => format!("exit code {code}"),
                    (None, Some(signal)) => format!("killed by {}", sys::signal_name(signal)),
                    _ => status.to_string(),
                };
            }
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => return "it closed its stdout".into(),
            Err(e) => return format!("its status is unknown: {e}"),
        }
    }
}
