//! A session's server→client stream: what the worker sends unasked (notifications, requests
//! such as `elicitation/create`) becomes an SSE event with an id, kept in a bounded buffer so a
//! client that reconnects with `Last-Event-ID` gets what it missed, and handed to every open
//! GET stream. The status page's live timeline is an `Events` too.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use tokio::sync::broadcast;

/// One message on a stream: its id and its data (one JSON text).
pub type Item = (u64, Arc<str>);

pub struct Events {
    inner: Mutex<Inner>,
    /// GET streams open now, for the per-session cap.
    open: AtomicUsize,
    cap: usize,
}

struct Inner {
    next_id: u64,
    kept: VecDeque<Item>,
    keep: usize,
    live: broadcast::Sender<Item>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held by an open stream; lets go of its place under the cap when the stream is dropped.
pub struct Open(Arc<Events>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Events {
    /// `keep`: messages kept for replay; `cap`: streams open at once.
    pub fn new(keep: usize, cap: usize) -> Arc<Events> {
        let (live, _) = broadcast::channel(keep.max(16));
        Arc::new(Events {
            inner: Mutex::new(Inner { next_id: 1, kept: VecDeque::new(), keep, live }),
            open: 0.into(),
            cap,
        })
    }

    /// Adds a message: kept, and sent to every open stream.
    pub fn push(&self, data: Arc<str>) {
        let mut inner = lock(&self.inner);
        let item = (inner.next_id, data);
        inner.next_id += 1;
        if inner.kept.len() == inner.keep {
            inner.kept.pop_front();
        }
        inner.kept.push_back(item.clone());
        // No stream open is fine: the message waits in the buffer.
        let _ = inner.live.send(item);
    }

    /// Streams open now.
    pub fn streams_open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Opens a stream of the messages after `after` (those still kept), then the new ones; `None`
    /// when `cap` streams are open already.
    pub fn open(self: &Arc<Self>, after: Option<u64>) -> Option<(Open, Vec<Item>, broadcast::Receiver<Item>)> {
        if self.open.fetch_add(1, Ordering::Relaxed) >= self.cap {
            self.open.fetch_sub(1, Ordering::Relaxed);
            return None;
        }
        let guard = Open(self.clone());
        // Under the lock: no message falls between the replay and the subscription.
        let inner = lock(&self.inner);
        let replay = match after {
            Some(after) => inner.kept.iter().filter(|(id, _)| *id > after).cloned().collect(),
            None => Vec::new(),
        };
        Some((guard, replay, inner.live.subscribe()))
    }
}

/// An SSE response of `replay` then what `live` brings. A stream that falls too far behind
/// ends: its client reconnects with `Last-Event-ID` and is replayed what is still kept.
pub fn respond(
    open: Open,
    replay: Vec<Item>,
    live: broadcast::Receiver<Item>,
    name: Option<&'static str>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let last = replay.last().map(|(id, _)| *id).unwrap_or(0);
    let state = (open, replay.into_iter(), live, last);
    let stream = futures::stream::unfold(state, move |(open, mut replay, mut live, mut last)| async move {
        let item = match replay.next() {
            Some(item) => item,
            None => loop {
                match live.recv().await {
                    Ok((id, _)) if id <= last => continue,
                    Ok(item) => break item,
                    Err(_) => return None,
                }
            },
        };
        last = item.0;
        let mut event = Event::default().id(item.0.to_string()).data(&*item.1);
        if let Some(name) = name {
            event = event.event(name);
        }
        Some((Ok(event), (open, replay, live, last)))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
