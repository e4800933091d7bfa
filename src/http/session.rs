//! One connection to the workspace's worker, as the relay has one: lines go to the worker's
//! socket; a reader task (on the front's one thread, so an answer reaches its POST without a
//! wake-up of another thread) reads the worker's lines and hands each answer to the POST waiting
//! for it (by id) and everything else — notifications, the worker's own requests — to the
//! session's SSE stream. An MCP session over HTTP is one such link; the stateless 2026-07-28
//! requests share one more, whose ids the front rewrites so clients cannot collide.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use gm_actors::sys::local::WriteHalf;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

use super::sse::Events;
use crate::relay::connect::Connection;
use crate::relay::peek::{id_key, Peek};

/// Someone waiting for the answer to a call.
struct Waiter {
    /// The id the client wrote, when the front wrote another on the worker's side.
    client_id: Option<Value>,
    reply: oneshot::Sender<Vec<u8>>,
}

pub struct Link {
    /// The session id, also the worker's session id (the hello's).
    pub id: String,
    writer: tokio::sync::Mutex<WriteHalf>,
    waiting: Mutex<HashMap<String, Waiter>>,
    /// Where the worker's unasked messages go; `None` for the stateless link.
    pub events: Option<Arc<Events>>,
    closed: AtomicBool,
    /// When a message last went to the worker or an answer came back, for the idle sweep.
    last_used: Mutex<std::time::Instant>,
    /// The stateless link's ids on the worker's side.
    next_id: AtomicU64,
    /// Calls whose progress goes to their own POST's stream, by progress token (its JSON text).
    progress: Mutex<HashMap<String, tokio::sync::mpsc::UnboundedSender<Arc<str>>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The answer to a pending call once it is known.
pub struct Pending {
    link: Arc<Link>,
    key: String,
    reply: oneshot::Receiver<Vec<u8>>,
    /// The call's id on the shared stateless link: a client that goes away unanswered has
    /// cancelled it (2026-07-28: closing the response is the cancellation).
    cancels_as: Option<u64>,
}

/// A call's progress notifications, routed to its POST.
pub struct Following {
    link: Arc<Link>,
    key: String,
    pub rx: tokio::sync::mpsc::UnboundedReceiver<Arc<str>>,
}

impl Drop for Following {
    fn drop(&mut self) {
        lock(&self.link.progress).remove(&self.key);
    }
}

impl Pending {
    /// The answer; `None` when the link dropped the call unanswered.
    pub async fn wait(&mut self) -> Option<Vec<u8>> {
        (&mut self.reply).await.ok()
    }
}

impl Drop for Pending {
    /// A client that went away stops waiting and its answer is dropped. On a session's link
    /// the call runs on (a dropped HTTP request is not a cancel there: the session's stream may
    /// resume); on the shared stateless link, where nothing can resume, it is cancelled, as
    /// 2026-07-28 says a closed response is.
    fn drop(&mut self) {
        let unanswered = lock(&self.link.waiting).remove(&self.key).is_some();
        let (Some(ours), true) = (self.cancels_as, unanswered) else { return };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        let link = self.link.clone();
        let cancel = serde_json::json!({
            "jsonrpc": "2.0",
            "method": "notifications/cancelled",
            "params": { "requestId": ours, "reason": "the client closed its HTTP request" },
        });
        runtime.spawn(async move {
            let _ = link.send(format!("{cancel}\n").as_bytes()).await;
        });
    }
}

impl Link {
    /// Takes over `conn` (made blocking by the connect, which may start a worker) and starts its
    /// reader task; `gone` runs once the worker closes it.
    pub fn start(
        id: String,
        conn: Connection,
        events: Option<Arc<Events>>,
        gone: impl FnOnce(&str) + Send + 'static,
    ) -> std::io::Result<Arc<Link>> {
        let Connection { reader, writer, .. } = conn;
        // What the welcome's read took beyond its line (nothing, as the worker says nothing
        // before the session speaks, but kept all the same).
        let early = reader.buffer().to_vec();
        drop(writer); // the same socket as the reader's
        let stream = gm_actors::sys::local::stream_of(reader.into_inner());
        stream.set_nonblocking(true)?;
        let (read, write) = tokio::net::UnixStream::from_std(stream)?.into_split();
        let link = Arc::new(Link {
            id,
            writer: tokio::sync::Mutex::new(write),
            waiting: Mutex::new(HashMap::new()),
            events,
            closed: AtomicBool::new(false),
            last_used: Mutex::new(std::time::Instant::now()),
            next_id: AtomicU64::new(1),
            progress: Mutex::new(HashMap::new()),
        });
        let reading = link.clone();
        tokio::spawn(async move {
            let mut reader = tokio::io::BufReader::with_capacity(1 << 16, early.chain(read));
            let mut line = Vec::with_capacity(4096);
            loop {
                line.clear();
                match reader.read_until(b'\n', &mut line).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => reading.route(&line),
                }
            }
            reading.closed.store(true, Ordering::Release);
            reading.fail_waiting();
            gone(&reading.id);
        });
        Ok(link)
    }

    /// How long the link has had nothing to do: `None` while a call waits for its answer or a
    /// GET stream is open.
    pub fn idle_for(&self) -> Option<std::time::Duration> {
        let streaming = self.events.as_ref().is_some_and(|e| e.streams_open() > 0);
        if streaming || !lock(&self.waiting).is_empty() {
            return None;
        }
        Some(lock(&self.last_used).elapsed())
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// A line from the worker: an answer to its waiter, anything else to the stream.
    fn route(&self, line: &[u8]) {
        let line = line.strip_suffix(b"\n").unwrap_or(line);
        let peek = Peek::of(line);
        if let (true, Some(id)) = (peek.response, &peek.id) {
            let Some(waiter) = lock(&self.waiting).remove(&id_key(id)) else { return };
            let line = match waiter.client_id {
                None => line.to_vec(),
                Some(client_id) => with_id(line, client_id),
            };
            let _ = waiter.reply.send(line);
            *lock(&self.last_used) = std::time::Instant::now();
            return;
        }
        let text: Arc<str> = String::from_utf8_lossy(line).into();
        if peek.method.as_deref() == Some("notifications/progress") {
            let token = serde_json::from_slice::<Value>(line)
                .ok()
                .and_then(|v| v.pointer("/params/progressToken").map(Value::to_string));
            let follower = token.and_then(|t| lock(&self.progress).get(&t).cloned());
            if let Some(follower) = follower {
                if follower.send(text.clone()).is_ok() {
                    return;
                }
            }
        }
        if let Some(events) = &self.events {
            events.push(text);
        }
    }

    /// Sends the progress notifications of `token` to the returned receiver (the POST's SSE
    /// stream) instead of the session's GET stream, until the guard is dropped.
    pub fn follow_progress(self: &Arc<Self>, token: &Value) -> Following {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let key = token.to_string();
        lock(&self.progress).insert(key.clone(), tx);
        Following { link: self.clone(), key, rx }
    }

    /// Every call still waiting when the worker closed the session gets an error answer.
    fn fail_waiting(&self) {
        let waiting: Vec<(String, Waiter)> = lock(&self.waiting).drain().collect();
        for (key, waiter) in waiting {
            let id = waiter.client_id.unwrap_or_else(|| key_to_id(&key));
            let error = serde_json::json!({
                "jsonrpc": "2.0",
                "id": id,
                "error": {
                    "code": -32603,
                    "message": "the workspace's worker closed this session (it stopped or restarted); open a new session",
                },
            });
            let _ = waiter.reply.send(error.to_string().into_bytes());
        }
    }

    /// Notes that the call with id `raw_id` (its JSON text) waits for an answer.
    pub fn expect(self: &Arc<Self>, raw_id: &str) -> Pending {
        let key = id_key(raw_id);
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(key.clone(), Waiter { client_id: None, reply: tx });
        Pending { link: self.clone(), key, reply: rx, cancels_as: None }
    }

    /// For the shared link: gives `message` a front-unique id, notes the client's, and returns
    /// the rewritten message with its waiter.
    pub fn expect_rewritten(self: &Arc<Self>, mut message: Value) -> (Value, Pending) {
        let ours = self.next_id.fetch_add(1, Ordering::Relaxed);
        let client_id = message.get("id").cloned().unwrap_or(Value::Null);
        message["id"] = Value::from(ours);
        let key = id_key(&ours.to_string());
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(key.clone(), Waiter { client_id: Some(client_id), reply: tx });
        (message, Pending { link: self.clone(), key, reply: rx, cancels_as: Some(ours) })
    }

    /// Writes `lines` (each ending in a newline) to the worker; a worker slow to read holds
    /// this session's writes only.
    pub async fn send(&self, lines: &[u8]) -> std::io::Result<()> {
        if self.is_closed() {
            return Err(std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the worker closed this session"));
        }
        *lock(&self.last_used) = std::time::Instant::now();
        self.writer.lock().await.write_all(lines).await
    }

    /// Ends the session: the worker reads the end of its connection and ends it
    /// (`session-end`), then closes its side, which ends the reader task.
    pub async fn close(&self) {
        let _ = self.writer.lock().await.shutdown().await;
    }
}

/// `line` with its `id` replaced by `id` (the stateless link's answers going back to their client).
fn with_id(line: &[u8], id: Value) -> Vec<u8> {
    match serde_json::from_slice::<Value>(line) {
        Ok(mut v) => {
            v["id"] = id;
            serde_json::to_vec(&v).unwrap_or_else(|_| line.to_vec())
        }
        Err(_) => line.to_vec(),
    }
}

/// The JSON id an [`id_key`] was made of (numbers and strings, which is what ids are).
fn key_to_id(key: &str) -> Value {
    match key.split_at(1) {
        ("n", n) => serde_json::from_str(n).unwrap_or(Value::Null),
        ("s", s) => Value::String(s.to_owned()),
        _ => Value::Null,
    }
}
