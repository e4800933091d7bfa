//! Reading the run log back without reading it whole: a query starts where its `since_seq`
//! is and reads only from there, a tail reads backwards from the end.
//!
//! `seq` increases with every line, so the file is its own index from seq to byte offset: a
//! bisection over byte offsets finds the first line past a seq in about log2(size / line)
//! short reads. Lines are filtered on their header (`{"seq":N,"ts":"…","run":"…","kind":"K"`,
//! then `,"session":"S"` for a session's event, always first, as
//! [`crate::log_writer::LogWriter`] writes them) and only the events a query returns are
//! parsed; the rest are counted.
//!
//! These functions do blocking reads: the LogWriter runs them on a blocking thread (the one-shot
//! CLI, which has no server, calls them directly).

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;

/// Which events to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    pub kind: Option<String>,
    pub since_seq: Option<u64>,
    pub limit: usize,
    /// The last `limit` matching events (still oldest first) instead of the first.
    pub newest: bool,
    /// Only the events of this host session. A newest-first read looks back at most
    /// [`SESSION_LOOKBACK`] bytes for them.
    pub session: Option<String>,
}

/// How far back a newest-first read of one session's events looks: a session that made no
/// call for a long time finds fewer events rather than reading the whole log.
pub const SESSION_LOOKBACK: u64 = 16 << 20;

#[derive(Debug, Clone, Default)]
pub struct QueryResult {
    pub events: Vec<Value>,
    /// Events that matched but were left out by `limit`. A newest-first read stops at its
    /// limit and does not count them: `None`.
    pub more: Option<usize>,
    /// The last seq in the log.
    pub last_seq: u64,
    /// Why the log cannot be written now, from a live worker: the events waiting in memory are
    /// not in `events` yet. `None` when it can (and for a read of the file alone).
    pub trouble: Option<Value>,
}

/// What a line's header says: its seq, kind and session.
struct Head {
    seq: u64,
    kind: Option<String>,
    session: Option<String>,
}

/// A line's header read without parsing the rest: seq, kind, and the session that directly
/// follows the kind when there is one.
fn header(line: &[u8]) -> Option<Head> {
    let rest = line.strip_prefix(b"{\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    let seq = std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()?;
    // The first `"kind":"` is the header's: inside a JSON string a quote is escaped.
    let at = memchr::memmem::find(rest, b"\"kind\":\"")? + 8;
    let len = memchr::memchr(b'"', &rest[at..])?;
    let kind = std::str::from_utf8(&rest[at..at + len]).ok().map(str::to_owned);
    let after = &rest[at + len + 1..];
    let session = after.strip_prefix(b",\"session\":\"").and_then(|s| {
        let end = memchr::memchr(b'"', s)?;
        std::str::from_utf8(&s[..end]).ok().map(str::to_owned)
    });
    Some(Head { seq, kind, session })
}

/// A line's header: read directly when the line has gm's layout, else by parsing it.
fn head_of(line: &[u8]) -> Option<Head> {
    if let Some(head) = header(line) {
        return Some(head);
    }
    let v: Value = serde_json::from_slice(line).ok()?;
    let text = |key: &str| v.get(key).and_then(Value::as_str).map(str::to_owned);
    Some(Head { seq: v.get("seq")?.as_u64()?, kind: text("kind"), session: text("session") })
}

fn matches(q: &Query, head: &Head) -> bool {
    q.kind.as_deref().is_none_or(|k| Some(k) == head.kind.as_deref())
        && q.session.as_deref().is_none_or(|s| Some(s) == head.session.as_deref())
}

/// The byte offset of the first complete line at or after `at`.
fn next_line_start(file: &mut File, at: u64, len: u64) -> std::io::Result<u64> {
    if at == 0 {
        return Ok(0);
    }
    file.seek(SeekFrom::Start(at - 1))?;
    let mut reader = BufReader::with_capacity(4096, file.take(len - (at - 1)));
    let mut skipped = Vec::new();
    let n = reader.read_until(b'\n', &mut skipped)?;
    Ok(at - 1 + n as u64)
}

/// The seq of the line starting at `at`, if that line reads as an event.
fn seq_at(file: &mut File, at: u64, len: u64) -> std::io::Result<Option<u64>> {
    file.seek(SeekFrom::Start(at))?;
    let mut reader = BufReader::with_capacity(4096, file.take(len - at));
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line)?;
    Ok(head_of(trim_newline(&line)).map(|h| h.seq))
}

/// The offset of the first line whose seq is above `since`: a bisection over line starts. A
/// line that does not read as an event sends the search right (it was torn or foreign); the
/// scan after the bisection still checks every seq, so a wrong turn costs time, never events.
fn offset_after(file: &mut File, since: u64, len: u64) -> std::io::Result<u64> {
    let (mut lo, mut hi) = (0u64, len);
    while hi - lo > 64 * 1024 {
        let mid = next_line_start(file, lo + (hi - lo) / 2, len)?;
        if mid >= hi {
            break;
        }
        match seq_at(file, mid, len)? {
            Some(seq) if seq > since => hi = mid,
            _ => lo = mid,
        }
    }
    next_line_start(file, lo, len)
}

fn trim_newline(line: &[u8]) -> &[u8] {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    line.strip_suffix(b"\r").unwrap_or(line)
}

/// Reads matching events from a log file. Lines that do not parse (a torn last line being
/// written by another process) are skipped.
pub fn query_file(path: &Path, q: &Query) -> std::io::Result<QueryResult> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(QueryResult::default()),
        Err(e) => return Err(e),
    };
    let len = file.metadata()?.len();
    let mut out = QueryResult { last_seq: last_seq(&mut file, len)?, ..QueryResult::default() };
    if q.newest {
        return newest(&mut file, len, q, out);
    }
    let since = q.since_seq.unwrap_or(0);
    let start = if since > 0 { offset_after(&mut file, since, len)? } else { 0 };
    file.seek(SeekFrom::Start(start))?;
    let mut reader = file.take(len - start);
    let scan = Forward::new(q, since);
    // Blocks of whole lines; a line cut by the end of a read waits at the front of the buffer.
    let mut buf = vec![0u8; BLOCK];
    let mut held = 0;
    loop {
        if held == buf.len() {
            // One line longer than the buffer: make room for it.
            buf.resize(buf.len() * 2, 0);
        }
        let n = match reader.read(&mut buf[held..]) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if n == 0 {
            scan.block(&buf[..held], &mut out);
            break;
        }
        held += n;
        let Some(last_newline) = memchr::memrchr(b'\n', &buf[..held]) else { continue };
        scan.block(&buf[..=last_newline], &mut out);
        buf.copy_within(last_newline + 1..held, 0);
        held -= last_newline + 1;
    }
    out.more.get_or_insert(0);
    Ok(out)
}

const BLOCK: usize = 1 << 20;

/// A forward scan's filter, applied a block of whole lines at a time.
struct Forward<'q> {
    q: &'q Query,
    since: u64,
    /// `"kind":"<kind>"`, to jump from one candidate line to the next.
    pattern: Option<memchr::memmem::Finder<'static>>,
}

impl<'q> Forward<'q> {
    fn new(q: &'q Query, since: u64) -> Self {
        let pattern =
            q.kind.as_ref().map(|k| memchr::memmem::Finder::new(format!("\"kind\":\"{k}\"").as_bytes()).into_owned());
        Self { q, since, pattern }
    }

    fn block(&self, block: &[u8], out: &mut QueryResult) {
        match &self.pattern {
            // With a kind, only the lines that hold it are looked at.
            Some(finder) => {
                let mut at = 0;
                while let Some(hit) = finder.find(&block[at..]) {
                    let hit = at + hit;
                    let start = memchr::memrchr(b'\n', &block[..hit]).map_or(0, |i| i + 1);
                    let end = memchr::memchr(b'\n', &block[hit..]).map_or(block.len(), |i| hit + i);
                    self.line(&block[start..end], out);
                    at = end + 1;
                    if at >= block.len() {
                        break;
                    }
                }
            }
            None => {
                let mut start = 0;
                for end in memchr::memchr_iter(b'\n', block).chain(std::iter::once(block.len())) {
                    if start < end {
                        self.line(&block[start..end], out);
                    }
                    start = end + 1;
                }
            }
        }
    }

    fn line(&self, line: &[u8], out: &mut QueryResult) {
        let text = trim_newline(line);
        let Some(head) = head_of(text) else { return };
        if head.seq <= self.since || !matches(self.q, &head) {
            return;
        }
        if out.events.len() < self.q.limit {
            if let Ok(v) = serde_json::from_slice(text) {
                out.events.push(v);
            }
        } else {
            *out.more.get_or_insert(0) += 1;
        }
    }
}

/// The last `q.limit` matching events, read backwards from the end in growing windows, which
/// stop once they are found.
fn newest(file: &mut File, len: u64, q: &Query, mut out: QueryResult) -> std::io::Result<QueryResult> {
    if q.limit == 0 {
        return Ok(out);
    }
    let since = q.since_seq.unwrap_or(0);
    let mut found: Vec<Vec<u8>> = Vec::new();
    let mut end = len;
    let mut window: u64 = 256 * 1024;
    let mut done = false;
    let stop_at = if q.session.is_some() { len.saturating_sub(SESSION_LOOKBACK) } else { 0 };
    while end > stop_at && !done {
        let start = end.saturating_sub(window);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::with_capacity((end - start) as usize);
        (&mut *file).take(end - start).read_to_end(&mut bytes)?;
        // The first line of a window that does not start the file may be cut: it is read again
        // as the last line of the next window.
        let cut = if start > 0 { memchr::memchr(b'\n', &bytes).map_or(bytes.len(), |i| i + 1) } else { 0 };
        for line in bytes[cut..].rsplit(|&b| b == b'\n') {
            let text = trim_newline(line);
            let Some(head) = head_of(text) else { continue };
            if head.seq <= since {
                done = true;
                break;
            }
            if !matches(q, &head) {
                continue;
            }
            found.push(text.to_vec());
            if found.len() >= q.limit {
                done = true;
                break;
            }
        }
        if cut == bytes.len() && start > 0 {
            // One line longer than the window: read a larger window.
            window *= 4;
            continue;
        }
        end = start + cut as u64;
        window = (window * 2).min(64 << 20);
    }
    out.events = found.iter().rev().filter_map(|l| serde_json::from_slice(l).ok()).collect();
    Ok(out)
}

/// The seq of the log's last event.
fn last_seq(file: &mut File, len: u64) -> std::io::Result<u64> {
    let start = len.saturating_sub(64 * 1024);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::new();
    (&mut *file).take(len - start).read_to_end(&mut bytes)?;
    Ok(bytes.rsplit(|&b| b == b'\n').find_map(|l| head_of(trim_newline(l)).map(|h| h.seq)).unwrap_or(0))
}

/// The last `n` events of a log file, oldest first.
pub fn tail_file(path: &Path, n: usize) -> std::io::Result<Vec<Value>> {
    Ok(query_file(path, &Query { limit: n, newest: true, ..Query::default() })?.events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A log of `n` events, every third an action, with lines of varying length.
    fn log(n: u64) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log.jsonl");
        let mut f = std::io::BufWriter::new(File::create(&path).expect("create"));
        for seq in 1..=n {
            let kind = if seq % 3 == 0 { "action" } else { "code-call" };
            let pad = "x".repeat((seq % 50) as usize);
            writeln!(
                f,
                r#"{{"seq":{seq},"ts":"t","run":"r","kind":"{kind}","pad":"{pad}","note":"\"kind\":\"fake\""}}"#
            )
            .expect("write");
        }
        f.flush().expect("flush");
        drop(f);
        (dir, path)
    }

    fn seqs(r: &QueryResult) -> Vec<u64> {
        r.events.iter().filter_map(|e| e["seq"].as_u64()).collect()
    }

    #[test]
    fn a_query_from_a_seq_returns_what_follows_it_wherever_it_falls() {
        let (_dir, path) = log(20_000);
        for since in [0u64, 1, 2, 4_999, 12_345, 19_998, 19_999, 20_000, 30_000] {
            let r = query_file(
                &path,
                &Query { kind: None, since_seq: Some(since), limit: 3, newest: false, session: None },
            )
            .expect("query");
            let expected: Vec<u64> = (since + 1..=20_000).take(3).collect();
            assert_eq!(seqs(&r), expected, "since {since}");
            assert_eq!(r.more, Some(20_000u64.saturating_sub(since).saturating_sub(3) as usize), "since {since}");
            assert_eq!(r.last_seq, 20_000);
        }
    }

    #[test]
    fn a_kind_filter_reads_the_header_not_a_field_that_looks_like_it() {
        let (_dir, path) = log(100);
        let r = query_file(
            &path,
            &Query { kind: Some("action".into()), since_seq: Some(90), limit: 10, newest: false, session: None },
        )
        .expect("query");
        assert_eq!(seqs(&r), [93, 96, 99]);
        let r = query_file(
            &path,
            &Query { kind: Some("fake".into()), since_seq: None, limit: 10, newest: false, session: None },
        )
        .expect("query");
        assert!(r.events.is_empty());
        // A field deeper in the line with the same shape as the header's kind is not the kind.
        let nested = path.with_file_name("nested.jsonl");
        std::fs::write(
            &nested,
            "{\"seq\":1,\"ts\":\"t\",\"run\":\"r\",\"kind\":\"action\",\"args\":{\"kind\":\"end\"}}\n\
             {\"seq\":2,\"ts\":\"t\",\"run\":\"r\",\"kind\":\"end\",\"args\":{\"kind\":\"end\"}}\n",
        )
        .expect("write");
        let r = query_file(
            &nested,
            &Query { kind: Some("end".into()), since_seq: None, limit: 10, newest: false, session: None },
        )
        .expect("query");
        assert_eq!(seqs(&r), [2]);
    }

    #[test]
    fn the_newest_events_come_oldest_first_and_the_read_stops_at_the_limit() {
        let (_dir, path) = log(50_000);
        let r = query_file(
            &path,
            &Query { kind: Some("action".into()), since_seq: None, limit: 4, newest: true, session: None },
        )
        .expect("query");
        assert_eq!(seqs(&r), [49_989, 49_992, 49_995, 49_998]);
        assert_eq!(r.more, None, "a newest-first read stops at its limit");
        let r =
            query_file(&path, &Query { kind: None, since_seq: Some(49_990), limit: 100, newest: true, session: None })
                .expect("query");
        assert_eq!(seqs(&r), (49_991..=50_000).collect::<Vec<_>>());
        assert_eq!(tail_file(&path, 2).expect("tail").len(), 2);
    }

    #[test]
    fn a_missing_log_reads_as_empty_and_a_torn_line_is_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("none.jsonl");
        assert!(query_file(&missing, &Query { limit: 5, ..Query::default() }).expect("query").events.is_empty());
        let (_d, path) = log(10);
        std::fs::OpenOptions::new().append(true).open(&path).expect("open").write_all(b"{\"seq\":11,\"ts").expect("w");
        let r = query_file(&path, &Query { limit: 100, ..Query::default() }).expect("query");
        assert_eq!(r.events.len(), 10);
        assert_eq!(r.last_seq, 10);
    }
}
