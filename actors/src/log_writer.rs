//! The run log: `.gm/log.jsonl`, one JSON object per line, written only by this actor.
//!
//! Every line starts with `seq` (strictly increasing, continued across restarts), `ts`
//! (RFC 3339, UTC), `run` and `kind`, then `session` for an event of a host's session, then the
//! event's own fields. An event of a session carries that session's run; the worker's own events
//! (start, watch, child servers, jobs it adopts) carry the worker's id as their `run`.
//!
//! Durability: events are buffered and group-committed — handed over together at most
//! [`COMMIT_INTERVAL`] after the first unwritten event to a write thread, after which a sync
//! thread fdatasyncs the file, so neither the ~170 µs fsync nor the write of a commit's lines
//! (tens of KB copied into the page cache) stalls the arbiter that serves requests. A [`Flush`] (sent by
//! `finish` before it replies) writes and syncs everything at once, on the spot. A crash can lose at most the last
//! commit interval of events; a torn last line is cut off at the next open, and nothing
//! before it is lost.
//!
//! A write that fails (a full disk, a file size limit) is cut back to the last whole line and
//! its lines wait in memory, up to [`HOLD_LIMIT`], for the next commit to try again: a disk
//! that fills for a while loses no event, and the file never holds a torn line between whole
//! ones. Meanwhile [`Tail`] reports the trouble (next_context shows it to the agent), and the
//! first commit that succeeds logs a `log` event saying what happened.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use actix::prelude::*;

use crate::clock::now_rfc3339;
use serde_json::{json, Map, Value};

pub use crate::log_reader::{query_file, tail_file, Query, QueryResult};

pub const COMMIT_INTERVAL: Duration = Duration::from_millis(5);
/// Lines kept in memory while the log cannot be written; newer ones are dropped and counted.
pub const HOLD_LIMIT: usize = 16 << 20;
const OPEN_SCAN_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot open the run log {path}: {source}")]
    Open { path: PathBuf, source: std::io::Error },
    #[error("cannot write the run log: {0}")]
    Write(#[from] std::io::Error),
}

/// What [`LogWriter::open`] found in an existing log.
#[derive(Debug, Clone, Default)]
pub struct OpenReport {
    /// The last `seq` already in the file (0 for a new log).
    pub last_seq: u64,
    /// Bytes of a torn last line that were cut off.
    pub repaired_bytes: u64,
}

pub struct LogWriter {
    path: PathBuf,
    file: File,
    /// Wakes the sync thread; a sync already due covers us.
    sync: Syncer,
    buf: Vec<u8>,
    seq: u64,
    run: String,
    commit_scheduled: bool,
}

impl LogWriter {
    /// Opens (or creates) the log at `path`, repairing a torn last line.
    pub fn open(path: &Path, run: &str) -> Result<(Self, OpenReport), LogError> {
        let open_err = |source| LogError::Open { path: path.to_owned(), source };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(open_err)?;
        }
        // Never through a link a repository committed in the log's place.
        let mut file = crate::state_file::open_own(path, crate::state_file::How::APPEND)
            .map_err(|e| open_err(std::io::Error::from(e)))?;
        let report = repair_and_scan(&mut file).map_err(open_err)?;
        let sync =
            spawn_syncer(file.try_clone().map_err(open_err)?, file.try_clone().map_err(open_err)?).map_err(open_err)?;
        let writer = Self {
            path: path.to_owned(),
            file,
            sync,
            buf: Vec::with_capacity(64 * 1024),
            seq: report.last_seq,
            run: run.to_owned(),
            commit_scheduled: false,
        };
        Ok((writer, report))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Serializes one event into the buffer and returns its seq.
    pub fn append(&mut self, event: Event) -> u64 {
        self.seq += 1;
        let ts = now_rfc3339();
        self.buf.extend_from_slice(b"{\"seq\":");
        self.buf.extend_from_slice(self.seq.to_string().as_bytes());
        self.buf.extend_from_slice(b",\"ts\":\"");
        self.buf.extend_from_slice(ts.as_bytes());
        self.buf.extend_from_slice(b"\",\"run\":");
        let run = event.scope.as_ref().map_or(self.run.as_str(), |s| &*s.run);
        write_json_str(&mut self.buf, run);
        self.buf.extend_from_slice(b",\"kind\":");
        write_json_str(&mut self.buf, &event.kind);
        if let Some(scope) = &event.scope {
            self.buf.extend_from_slice(b",\"session\":");
            write_json_str(&mut self.buf, &scope.session);
        }
        match &event.fields {
            Fields::Map(fields) => {
                for (k, v) in fields {
                    if matches!(k.as_str(), "seq" | "ts" | "run" | "kind" | "session") {
                        continue;
                    }
                    self.buf.push(b',');
                    write_json_str(&mut self.buf, k);
                    self.buf.push(b':');
                    // Writing a Value into a Vec cannot fail.
                    let _ = serde_json::to_writer(&mut self.buf, v);
                }
            }
            Fields::Text(text) => {
                let text = text.trim();
                let members = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')).unwrap_or_default().trim();
                if !members.is_empty() {
                    self.buf.push(b',');
                    self.buf.extend_from_slice(members.as_bytes());
                }
            }
        }
        self.buf.extend_from_slice(b"}\n");
        self.seq
    }

    /// Writes everything not yet in the file (the write thread's share first) and syncs it.
    /// It syncs even when nothing was left to write: lines the write thread already wrote may
    /// still wait for their sync, and a flush (`finish`) promises them on disk.
    pub fn commit(&mut self) -> Result<(), LogError> {
        self.write_out()?;
        self.file.sync_data()?;
        Ok(())
    }

    /// Hands the buffer to the write thread, which writes it and has the sync thread sync it.
    pub fn commit_in_background(&mut self) -> Result<(), LogError> {
        self.log_recovery();
        if !self.buf.is_empty() {
            self.sync.hand(&mut self.buf);
        }
        Ok(())
    }

    /// Writes everything not yet in the file, without syncing (for readers in this process).
    /// Lines that cannot be written wait for the next commit, as the write thread's do.
    fn write_out(&mut self) -> Result<(), LogError> {
        self.sync.write_now(&mut self.buf)?;
        if self.log_recovery() {
            self.sync.write_now(&mut self.buf)?;
        }
        Ok(())
    }

    /// After a trouble that has ended, an event saying what it was and what it cost; true when
    /// one was added.
    fn log_recovery(&mut self) -> bool {
        let Some(ended) = self.sync.take_ended() else { return false };
        crate::stderr_line!("gm: the run log is written again ({} events lost)", ended.lost_events);
        self.append(Event::new("log", json!({ "recovered": ended.describe(0) })));
        true
    }

    /// Why the log cannot be written now, with what waits and what was lost; `None` when it can.
    pub fn trouble(&self) -> Option<Value> {
        let state = self.sync.0.state.lock().ok()?;
        let held =
            state.pending.iter().filter(|&&b| b == b'\n').count() + self.buf.iter().filter(|&&b| b == b'\n').count();
        state.trouble.as_ref().map(|t| t.describe(held))
    }

    fn note_failure(&mut self, res: Result<(), LogError>) {
        if let Err(e) = res {
            crate::stderr_line!("gm: {e}");
        }
    }

    pub fn last_seq(&self) -> u64 {
        self.seq
    }
}

/// The log's two threads: `gm-log-write` writes each commit's lines, `gm-log-sync` syncs the
/// file after. Two, so that lines reach the file (where `gm log` and other processes read
/// them) within a commit interval even while a sync waits on a busy disk for far longer. Each
/// sleeps on a flag under a mutex and a condition variable, at once between turns (a
/// channel's receive spins and yields first, and on a busy core each yield takes a turn from
/// the calls being served). Dropping it ends both.
struct Syncer(Arc<SyncSignal>);

struct SyncSignal {
    state: Mutex<SyncState>,
    wake: Condvar,
    /// Every write to the file, the write thread's and the actor's. Lines are taken from
    /// `pending` only while it is held, so they reach the file in the order they were committed.
    out: Mutex<File>,
    /// A sync is due (`.0`), the log is closing (`.1`).
    sync: Mutex<(bool, bool)>,
    sync_wake: Condvar,
    /// Milliseconds each sync waits first: a disk busy for that long, in tests.
    #[cfg(test)]
    slow_sync: std::sync::atomic::AtomicU64,
}

struct SyncState {
    /// Committed lines not yet written.
    pending: Vec<u8>,
    due: bool,
    closed: bool,
    /// Set by a write or sync that failed, cleared by the next write that succeeds.
    trouble: Option<Trouble>,
    /// A trouble that has ended, for the actor to log.
    ended: Option<Trouble>,
    /// [`HOLD_LIMIT`], smaller in tests.
    hold_limit: usize,
}

/// A time the log could not be written.
#[derive(Debug, Clone)]
struct Trouble {
    /// The last failure.
    error: String,
    /// When the first failure was.
    since: String,
    failures: u64,
    /// Events dropped: more than [`HOLD_LIMIT`] waited.
    lost_events: u64,
}

impl Trouble {
    fn describe(&self, held_events: usize) -> Value {
        let mut v = json!({
            "error": self.error,
            "since": self.since,
            "failedWrites": self.failures,
            "lostEvents": self.lost_events,
        });
        if held_events > 0 {
            v["heldEvents"] = json!(held_events);
        }
        v
    }
}

/// Said once when a trouble starts, outside the state's lock: stderr may be a pipe nobody
/// reads, and a write blocked there must not hold up the actor's next commit.
fn say_trouble(e: &std::io::Error) {
    crate::stderr_line!("gm: cannot write the run log (its lines wait in memory for the next try): {e}");
}

impl SyncState {
    /// Notes a failure; true when it starts a trouble.
    fn failed(&mut self, e: &std::io::Error) -> bool {
        match &mut self.trouble {
            Some(t) => {
                t.error = e.to_string();
                t.failures += 1;
                false
            }
            None => {
                self.trouble =
                    Some(Trouble { error: e.to_string(), since: now_rfc3339(), failures: 1, lost_events: 0 });
                true
            }
        }
    }

    fn written(&mut self) {
        if let Some(t) = self.trouble.take() {
            self.ended = Some(t);
        }
    }

    /// Puts lines that could not be written back in front of those handed over since.
    fn put_back(&mut self, mut lines: Vec<u8>) {
        if !self.pending.is_empty() {
            lines.extend_from_slice(&self.pending);
        }
        self.pending = lines;
    }

    /// Takes `more` after the lines waiting, or drops and counts them when too much waits.
    fn hold(&mut self, more: &mut Vec<u8>) {
        if self.pending.len() + more.len() > self.hold_limit && self.trouble.is_some() {
            let dropped = more.iter().filter(|&&b| b == b'\n').count() as u64;
            if let Some(t) = &mut self.trouble {
                t.lost_events += dropped;
            }
            more.clear();
        } else if self.pending.is_empty() {
            std::mem::swap(&mut self.pending, more);
        } else {
            self.pending.extend_from_slice(more);
            more.clear();
        }
    }
}

impl Syncer {
    /// Hands `buf`'s lines over (leaving it empty, with room) and wakes the write thread.
    fn hand(&self, buf: &mut Vec<u8>) {
        if let Ok(mut state) = self.0.state.lock() {
            state.hold(buf);
            state.due = true;
        }
        self.0.wake.notify_one();
    }

    /// Writes the lines handed over and not yet written, then `more` (leaving it empty), on
    /// this thread. Lines that cannot be written wait with the write thread's.
    fn write_now(&self, more: &mut Vec<u8>) -> std::io::Result<()> {
        let mut out = self.0.out.lock().map_err(|_| std::io::Error::other("the log's writer panicked"))?;
        let Ok(mut state) = self.0.state.lock() else { return Ok(()) };
        state.hold(more);
        let lines = std::mem::take(&mut state.pending);
        drop(state);
        let res = write_whole(&mut out, &lines);
        let Ok(mut state) = self.0.state.lock() else { return res };
        match &res {
            // Nothing written proves nothing about the disk.
            Ok(()) if lines.is_empty() => {}
            Ok(()) => state.written(),
            Err(e) => {
                let first = state.failed(e);
                state.put_back(lines);
                drop(state);
                if first {
                    say_trouble(e);
                }
            }
        }
        res
    }

    fn take_ended(&self) -> Option<Trouble> {
        self.0.state.lock().ok()?.ended.take()
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        if let Ok(mut state) = self.0.state.lock() {
            state.closed = true;
        }
        self.0.wake.notify_one();
    }
}

impl SyncSignal {
    fn failed(&self, e: std::io::Error) {
        let first = self.state.lock().is_ok_and(|mut state| state.failed(&e));
        if first {
            say_trouble(&e);
        }
    }

    fn ask_sync(&self, close: bool) {
        if let Ok(mut sync) = self.sync.lock() {
            sync.0 |= !close;
            sync.1 |= close;
        }
        self.sync_wake.notify_one();
    }
}

fn spawn_syncer(file: File, out: File) -> std::io::Result<Syncer> {
    let signal = Arc::new(SyncSignal {
        state: Mutex::new(SyncState {
            pending: Vec::new(),
            due: false,
            closed: false,
            trouble: None,
            ended: None,
            hold_limit: HOLD_LIMIT,
        }),
        wake: Condvar::new(),
        out: Mutex::new(out),
        sync: Mutex::new((false, false)),
        sync_wake: Condvar::new(),
        #[cfg(test)]
        slow_sync: std::sync::atomic::AtomicU64::new(0),
    });
    let theirs = signal.clone();
    std::thread::Builder::new().name("gm-log-sync".into()).spawn(move || loop {
        let Ok(mut sync) = theirs.sync.lock() else { return };
        while !sync.0 && !sync.1 {
            sync = match theirs.sync_wake.wait(sync) {
                Ok(sync) => sync,
                Err(_) => return,
            };
        }
        if !sync.0 {
            return; // closed, nothing left to sync
        }
        sync.0 = false;
        drop(sync);
        #[cfg(test)]
        std::thread::sleep(Duration::from_millis(theirs.slow_sync.load(std::sync::atomic::Ordering::Relaxed)));
        if let Err(e) = file.sync_data() {
            theirs.failed(e);
        }
    })?;
    let theirs = signal.clone();
    let spawned = std::thread::Builder::new().name("gm-log-write".into()).spawn(move || {
        'run: loop {
            let Ok(mut state) = theirs.state.lock() else { break };
            while !state.due && !state.closed {
                state = match theirs.wake.wait(state) {
                    Ok(state) => state,
                    Err(_) => break 'run,
                };
            }
            if !state.due {
                break; // closed, nothing left to write
            }
            state.due = false;
            drop(state);
            if write_pending(&theirs) {
                theirs.ask_sync(false);
            }
        }
        theirs.ask_sync(true);
    });
    if let Err(e) = spawned {
        signal.ask_sync(true);
        return Err(e);
    }
    Ok(Syncer(signal))
}

/// The write thread's turn: the lines handed over, written (their vector, emptied, goes back
/// for the next commit), or put back to wait for the next try. True when they were written.
fn write_pending(signal: &SyncSignal) -> bool {
    let Ok(mut out) = signal.out.lock() else { return false };
    let Ok(mut state) = signal.state.lock() else { return false };
    let mut lines = std::mem::take(&mut state.pending);
    drop(state);
    // Empty when the actor wrote them itself (a reader came first): they are synced still.
    let res = write_whole(&mut out, &lines);
    // Still holding `out`: lines put back go in front of any a reader would write next.
    let Ok(mut state) = signal.state.lock() else { return false };
    match res {
        Ok(()) => {
            if !lines.is_empty() {
                state.written();
            }
            lines.clear();
            if state.pending.is_empty() && state.pending.capacity() < lines.capacity() {
                state.pending = lines;
            }
            true
        }
        Err(e) => {
            let first = state.failed(&e);
            state.put_back(lines);
            drop(state);
            drop(out);
            if first {
                say_trouble(&e);
            }
            false
        }
    }
}

/// Writes `lines` whole or not at all: a write that fails part way (a disk that fills, a file
/// size limit) is cut back, so the file never holds a torn line with whole ones after it.
fn write_whole(out: &mut File, lines: &[u8]) -> std::io::Result<()> {
    let mut done = 0;
    while done < lines.len() {
        let err = match out.write(&lines[done..]) {
            Ok(0) => std::io::Error::from(std::io::ErrorKind::WriteZero),
            Ok(n) => {
                done += n;
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => e,
        };
        if done > 0 {
            // The file is opened to append: its end is where this write's bytes stop.
            if let Ok(meta) = out.metadata() {
                let _ = out.set_len(meta.len().saturating_sub(done as u64));
            }
        }
        return Err(err);
    }
    Ok(())
}

fn repair_and_scan(file: &mut File) -> std::io::Result<OpenReport> {
    let len = file.metadata()?.len();
    if len == 0 {
        return Ok(OpenReport::default());
    }
    let start = len.saturating_sub(OPEN_SCAN_BYTES);
    file.seek(SeekFrom::Start(start))?;
    let mut tail = Vec::with_capacity((len - start) as usize);
    file.read_to_end(&mut tail)?;
    let mut repaired_bytes = 0;
    if tail.last() != Some(&b'\n') {
        let keep = tail.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        // A log whose only line is torn and longer than the scan window keeps nothing.
        let keep_abs = if keep == 0 && start > 0 { start } else { start + keep as u64 };
        repaired_bytes = len - keep_abs;
        file.set_len(keep_abs)?;
        file.sync_data()?;
        tail.truncate(keep);
    }
    let last_seq = tail
        .split(|&b| b == b'\n')
        .rev()
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .find_map(|v| v.get("seq").and_then(Value::as_u64))
        .unwrap_or(0);
    file.seek(SeekFrom::End(0))?;
    Ok(OpenReport { last_seq, repaired_bytes })
}

fn write_json_str(buf: &mut Vec<u8>, s: &str) {
    let _ = serde_json::to_writer(&mut *buf, s);
}

/// One log event: its kind, its own fields, and the session and run it belongs to.
#[derive(Debug, Clone, Message)]
#[rtype(result = "u64")]
pub struct Event {
    pub kind: String,
    pub fields: Fields,
    /// `None` for the worker's own events.
    pub scope: Option<Scope>,
}

/// The host session an event belongs to, and that session's run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub session: std::sync::Arc<str>,
    pub run: std::sync::Arc<str>,
}

/// An event's own fields: a JSON object, or (on hot paths) already serialized.
#[derive(Debug, Clone)]
pub enum Fields {
    Map(Map<String, Value>),
    /// The text of a JSON object, written as it is. It must not use the line's own keys
    /// (`seq`, `ts`, `run`, `kind`, `session`): [`Event::serialized`] is for gm's own fixed
    /// shapes.
    Text(String),
}

impl Event {
    pub fn new(kind: &str, fields: Value) -> Self {
        let fields = match fields {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                let mut map = Map::new();
                map.insert("value".into(), other);
                map
            }
        };
        Self { kind: kind.to_owned(), fields: Fields::Map(fields), scope: None }
    }

    /// The event as one of `scope`'s session (or the worker's own, for `None`).
    pub fn in_scope(mut self, scope: Option<&Scope>) -> Self {
        self.scope = scope.cloned();
        self
    }

    /// An event whose fields are a struct, serialized here without building a JSON value.
    /// Falls back to [`Event::new`]'s shape if `fields` is not an object.
    pub fn serialized<T: serde::Serialize>(kind: &str, fields: &T) -> Self {
        match serde_json::to_string(fields) {
            Ok(text) if text.starts_with('{') => {
                Self { kind: kind.to_owned(), fields: Fields::Text(text), scope: None }
            }
            _ => Self::new(kind, serde_json::to_value(fields).unwrap_or_default()),
        }
    }
}

/// Write everything appended so far to the file (without syncing it): a reader of the file sees
/// every event sent before this message. Answers with the last seq.
#[derive(Debug, Message)]
#[rtype(result = "Result<u64, String>")]
pub struct WriteOut;

/// Write and sync everything appended so far.
#[derive(Debug, Message)]
#[rtype(result = "Result<u64, String>")]
pub struct Flush;

/// Read events back from the file (on a blocking thread: a query of a long log never holds up
/// the arbiter that writes it).
#[derive(Debug, Clone, Message)]
#[rtype(result = "Result<QueryResult, String>")]
pub struct ReadLog(pub Query);

/// The log's last `n` events, oldest first: all of them, or one session's.
#[derive(Debug, Message)]
#[rtype(result = "TailResult")]
pub struct Tail {
    pub n: usize,
    pub session: Option<String>,
}

#[derive(Debug, Default, MessageResponse)]
pub struct TailResult {
    pub events: Vec<Value>,
    /// Why the log cannot be written now (what waits in memory, what was lost); `None` when
    /// it can.
    pub trouble: Option<Value>,
}

impl Actor for LogWriter {
    type Context = Context<Self>;

    fn stopping(&mut self, _: &mut Context<Self>) -> Running {
        let res = self.commit();
        self.note_failure(res);
        Running::Stop
    }
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        let _ = self.commit();
    }
}

impl Handler<Event> for LogWriter {
    type Result = u64;
    fn handle(&mut self, event: Event, ctx: &mut Context<Self>) -> u64 {
        let seq = self.append(event);
        if !self.commit_scheduled {
            self.commit_scheduled = true;
            ctx.run_later(COMMIT_INTERVAL, |act, _| {
                act.commit_scheduled = false;
                let res = act.commit_in_background();
                act.note_failure(res);
            });
        }
        seq
    }
}

impl Handler<WriteOut> for LogWriter {
    type Result = Result<u64, String>;
    fn handle(&mut self, _: WriteOut, _: &mut Context<Self>) -> Self::Result {
        self.write_out().map_err(|e| e.to_string())?;
        Ok(self.seq)
    }
}

impl Handler<Flush> for LogWriter {
    type Result = Result<u64, String>;
    fn handle(&mut self, _: Flush, _: &mut Context<Self>) -> Self::Result {
        self.commit().map_err(|e| e.to_string())?;
        Ok(self.seq)
    }
}

impl Handler<Tail> for LogWriter {
    type Result = ResponseFuture<TailResult>;
    fn handle(&mut self, msg: Tail, _: &mut Context<Self>) -> Self::Result {
        // Read back from the file when asked (once per step) rather than kept per event (on
        // every call's path). A write that fails is the trouble reported below.
        let _ = self.write_out();
        let trouble = self.trouble();
        let path = self.path.clone();
        Box::pin(async move {
            let q = Query { limit: msg.n, newest: true, session: msg.session, ..Query::default() };
            let events =
                tokio::task::spawn_blocking(move || query_file(&path, &q).map(|r| r.events).unwrap_or_default())
                    .await
                    .unwrap_or_default();
            TailResult { events, trouble }
        })
    }
}

impl Handler<ReadLog> for LogWriter {
    type Result = ResponseFuture<Result<QueryResult, String>>;
    fn handle(&mut self, msg: ReadLog, _: &mut Context<Self>) -> Self::Result {
        // A log that cannot be written (a full disk) is still read: what the file holds, with
        // the trouble saying what waits in memory.
        let _ = self.write_out();
        let trouble = self.trouble();
        let path = self.path.clone();
        Box::pin(async move {
            let mut result = tokio::task::spawn_blocking(move || query_file(&path, &msg.0).map_err(|e| e.to_string()))
                .await
                .map_err(|e| e.to_string())??;
            result.trouble = trouble;
            Ok(result)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn temp_log(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gm-log-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("log.jsonl")
    }

    #[test]
    fn the_tail_is_the_last_events_of_the_file_across_runs_and_window_sizes() {
        let path = temp_log("tail");
        assert!(tail_file(&path, 5).expect("missing file reads as empty").is_empty());
        let (mut first, _) = LogWriter::open(&path, "run-a").expect("open");
        first.append(Event::new("action", json!({ "n": 0 })));
        first.commit().expect("commit");
        drop(first);
        // A second run whose events are large enough that the last ten span several of the
        // growing read windows (64 KiB, then 256 KiB, ...), the first of them cut mid-line.
        let (mut second, _) = LogWriter::open(&path, "run-b").expect("open");
        let padding = "x".repeat(20_000);
        for n in 1..=30 {
            second.append(Event::new("action", json!({ "n": n, "pad": padding })));
        }
        second.commit().expect("commit");
        let tail = tail_file(&path, 10).expect("tail");
        let ns: Vec<u64> = tail.iter().filter_map(|e| e["n"].as_u64()).collect();
        assert_eq!(ns, (21..=30).collect::<Vec<_>>());
        let all = tail_file(&path, 100).expect("tail");
        assert_eq!(all.len(), 31, "the whole file when it holds fewer events than asked");
        assert_eq!(all[0]["run"], "run-a", "a young run's tail reaches into the previous run");
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    /// The seqs in the file, each line whole.
    fn seqs_in(path: &Path) -> Vec<u64> {
        let text = std::fs::read_to_string(path).expect("read");
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("a whole line")["seq"].as_u64().expect("seq"))
            .collect()
    }

    #[test]
    fn lines_handed_to_the_write_thread_and_lines_a_reader_writes_out_reach_the_file_whole_and_in_order() {
        let path = temp_log("handover");
        let (mut w, _) = LogWriter::open(&path, "run").expect("open");
        let mut last = 0;
        // The thread writes a commit while the actor hands over the next or writes out for a
        // reader: every interleaving of the two, by repetition.
        for round in 0..400usize {
            for _ in 0..round % 7 + 1 {
                last = w.append(Event::new("action", json!({ "pad": "y".repeat(round % 300) })));
            }
            w.commit_in_background().expect("commit");
            if round % 3 == 0 {
                // A reader comes while lines wait both with the thread and in the buffer.
                last = w.append(Event::new("action", json!({ "after": round })));
                w.write_out().expect("write out");
                assert_eq!(seqs_in(&path), (1..=last).collect::<Vec<_>>(), "a reader sees every event, round {round}");
            }
        }
        w.commit().expect("commit");
        assert_eq!(seqs_in(&path), (1..=last).collect::<Vec<_>>());
        drop(w);
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    #[test]
    fn a_commit_reaches_the_file_while_the_sync_before_it_still_waits_on_the_disk() {
        // Other processes (`gm log`, a host's tests) read the file: a commit's lines must not
        // wait behind a slow sync of the commit before.
        let path = temp_log("slow-sync");
        let (mut w, _) = LogWriter::open(&path, "run").expect("open");
        w.sync.0.slow_sync.store(3_000, std::sync::atomic::Ordering::Relaxed);
        let within = |seq: u64| {
            let deadline = std::time::Instant::now() + Duration::from_millis(1_500);
            while seqs_in(&path).last() != Some(&seq) {
                assert!(std::time::Instant::now() < deadline, "event {seq} was not written while the sync waited");
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        let first = w.append(Event::new("action", json!({ "n": 1 })));
        w.commit_in_background().expect("commit");
        within(first);
        // The first commit's sync now waits; the second commit is written meanwhile.
        let second = w.append(Event::new("action", json!({ "n": 2 })));
        w.commit_in_background().expect("commit");
        within(second);
        w.sync.0.slow_sync.store(0, std::sync::atomic::Ordering::Relaxed);
        drop(w);
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    /// The log's file swapped for `/dev/full` (every write fails with ENOSPC, as on a full
    /// disk) and back.
    fn disk_full(w: &LogWriter, full: bool) {
        let file = if full {
            File::options().write(true).open("/dev/full").expect("/dev/full")
        } else {
            w.file.try_clone().expect("the log")
        };
        *w.sync.0.out.lock().expect("out") = file;
    }

    #[test]
    fn lines_held_past_the_limit_are_dropped_and_counted_and_the_rest_written_in_order_once_the_disk_takes_them() {
        let path = temp_log("full");
        let (mut w, _) = LogWriter::open(&path, "run").expect("open");
        for n in 0..3 {
            w.append(Event::new("action", json!({ "n": n })));
        }
        w.commit().expect("commit");
        assert!(w.trouble().is_none());
        disk_full(&w, true);
        w.sync.0.state.lock().expect("state").hold_limit = 2_000;
        // Commits the write thread fails on, each put back before the next is handed over.
        for round in 0..12 {
            for _ in 0..4 {
                w.append(Event::new("action", json!({ "round": round, "pad": "z".repeat(40) })));
            }
            w.commit_in_background().expect("handed over");
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            while !w.sync.0.state.lock().expect("state").pending.is_empty() && w.trouble().is_none() {
                assert!(std::time::Instant::now() < deadline, "the write thread never tried");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        assert!(w.commit().is_err(), "a flush says the log could not be written");
        let trouble = w.trouble().expect("trouble");
        assert!(trouble["error"].as_str().is_some_and(|e| e.contains("No space")), "{trouble}");
        let lost = trouble["lostEvents"].as_u64().expect("lost");
        let held = trouble["heldEvents"].as_u64().expect("held");
        assert!(lost > 0 && held > 0, "{trouble}");
        assert_eq!(lost + held, 48, "every event is held or counted: {trouble}");
        assert_eq!(seqs_in(&path), vec![1, 2, 3], "nothing of the failed writes in the file");

        disk_full(&w, false);
        w.commit().expect("the disk takes lines again");
        assert!(w.trouble().is_none());
        let seqs = seqs_in(&path);
        // The held lines follow the first three in order; the dropped ones (the newest) are
        // a gap before the event that says how many they were.
        let kept: Vec<u64> = (1..=3 + held).collect();
        assert_eq!(&seqs[..kept.len()], &kept[..]);
        assert_eq!(seqs[kept.len()..], [3 + held + lost + 1], "{seqs:?}");
        let text = std::fs::read_to_string(&path).expect("read");
        let last: Value = serde_json::from_str(text.lines().last().expect("a line")).expect("json");
        assert_eq!(last["kind"], "log");
        assert_eq!(last["recovered"]["lostEvents"], lost);
        drop(w);
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    #[test]
    fn a_disk_that_fills_and_frees_again_and_again_loses_no_line_and_tears_none() {
        // The write thread's failed commits are put back while the actor hands over the next
        // and readers write out: every interleaving, by repetition.
        let path = temp_log("flapping");
        let (mut w, _) = LogWriter::open(&path, "run").expect("open");
        let mut last = 0;
        for round in 0..300usize {
            disk_full(&w, round % 3 != 2);
            for _ in 0..round % 5 + 1 {
                last = w.append(Event::new("action", json!({ "pad": "q".repeat(round % 200) })));
            }
            w.commit_in_background().expect("handed over");
            if round % 4 == 0 {
                last = w.append(Event::new("action", json!({ "reader": round })));
                let _ = w.write_out();
            }
            if round % 7 == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        disk_full(&w, false);
        w.commit().expect("commit");
        // Each recovery adds its own event after the lines that waited.
        assert!(w.last_seq() >= last);
        assert_eq!(seqs_in(&path), (1..=w.last_seq()).collect::<Vec<_>>(), "every line once, whole, in order");
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.lines().any(|l| l.contains(r#""kind":"log""#)), "the disk was full at times, and freed");
        drop(w);
        let _ = std::fs::remove_dir_all(path.parent().expect("dir"));
    }

    #[test]
    fn seq_continues_across_reopen() {
        let path = temp_log("reopen");
        {
            let (mut w, report) = LogWriter::open(&path, "r1").expect("open");
            assert_eq!(report.last_seq, 0);
            w.append(Event::new("start", json!({})));
            w.append(Event::new("action", json!({"tool": "x"})));
            w.commit().expect("commit");
        }
        let (mut w, report) = LogWriter::open(&path, "r2").expect("reopen");
        assert_eq!(report.last_seq, 2);
        assert_eq!(w.append(Event::new("start", json!({}))), 3);
    }

    #[test]
    fn a_torn_last_line_is_cut_and_earlier_lines_are_kept() {
        let path = temp_log("torn");
        {
            let (mut w, _) = LogWriter::open(&path, "r1").expect("open");
            w.append(Event::new("start", json!({"a": 1})));
            w.commit().expect("commit");
        }
        let mut f = std::fs::OpenOptions::new().append(true).open(&path).expect("append");
        let torn = b"{\"seq\":2,\"ts\":\"x\",\"ki";
        f.write_all(torn).expect("write torn");
        drop(f);
        let (w, report) = LogWriter::open(&path, "r2").expect("reopen");
        assert_eq!(report.last_seq, 1);
        assert_eq!(report.repaired_bytes, torn.len() as u64);
        drop(w);
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(text.lines().count(), 1);
        let first: Value = serde_json::from_str(text.lines().next().expect("line")).expect("json");
        assert_eq!(first["a"], 1);
        assert_eq!(first["kind"], "start");
    }

    #[test]
    fn reserved_fields_cannot_be_overridden_by_an_event() {
        let path = temp_log("reserved");
        let (mut w, _) = LogWriter::open(&path, "run-x").expect("open");
        w.append(Event::new("action", json!({"seq": 99, "run": "evil", "ok": true})));
        w.commit().expect("commit");
        let line = std::fs::read_to_string(&path).expect("read");
        let v: Value = serde_json::from_str(line.trim()).expect("json");
        assert_eq!(v["seq"], 1);
        assert_eq!(v["run"], "run-x");
        assert_eq!(v["ok"], true);
    }

    #[test]
    fn a_scoped_event_carries_its_session_and_run_and_a_worker_event_the_default_run() {
        let path = temp_log("scoped");
        let (mut w, _) = LogWriter::open(&path, "worker-1").expect("open");
        let scope = Scope { session: "s-a".into(), run: "run-a".into() };
        w.append(Event::new("action", json!({ "session": "forged", "ok": 1 })).in_scope(Some(&scope)));
        w.append(Event::new("watch", json!({})));
        w.commit().expect("commit");
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("{\"seq\":1,\"ts\":\""), "{}", lines[0]);
        assert!(
            lines[0].contains("\"run\":\"run-a\",\"kind\":\"action\",\"session\":\"s-a\",\"ok\":1}"),
            "{}",
            lines[0]
        );
        let watch: Value = serde_json::from_str(lines[1]).expect("json");
        assert_eq!((watch["run"].as_str(), watch.get("session")), (Some("worker-1"), None));
        let tail =
            query_file(&path, &Query { limit: 5, newest: true, session: Some("s-a".into()), ..Query::default() })
                .expect("tail");
        assert_eq!(tail.events.len(), 1, "only the session's own events: {:?}", tail.events);
        assert_eq!(tail.events[0]["ok"], 1);
    }

    #[test]
    fn serialized_fields_are_written_as_the_same_line_a_value_gives() {
        #[derive(serde::Serialize)]
        struct Fields<'a> {
            tool: &'a str,
            nested: Value,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<u8>,
        }
        #[derive(serde::Serialize)]
        struct Nothing {}
        let path = temp_log("serialized");
        let (mut w, _) = LogWriter::open(&path, "run-s").expect("open");
        let fields = Fields { tool: "a \"q\"", nested: json!({ "x": { "y": [1, {}] } }), error: None };
        w.append(Event::serialized("action", &fields));
        w.append(Event::serialized("empty", &Nothing {}));
        w.append(Event::serialized("scalar", &7));
        w.commit().expect("commit");
        let text = std::fs::read_to_string(&path).expect("read");
        let lines: Vec<Value> = text.lines().map(|l| serde_json::from_str(l).expect("each line is JSON")).collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0]["tool"], "a \"q\"");
        assert_eq!(lines[0]["nested"], json!({ "x": { "y": [1, {}] } }));
        assert!(lines[0].get("error").is_none());
        assert_eq!((lines[1]["kind"].as_str(), lines[1]["seq"].as_u64()), (Some("empty"), Some(2)));
        assert_eq!(lines[2]["value"], 7, "a non-object is kept under value, as Event::new does");
    }
}
