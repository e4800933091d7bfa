//! The journal of a direct session: a worker that reads the host's stdin and writes its stdout
//! itself (the relay out of the way of every message) records here, in a memory file the relay
//! made and holds, what it took from the host and which calls it answered. When that worker
//! dies, the relay reads the journal to do what it does for a session it relays: answer the
//! calls the dead worker held with `worker_restarted`, hand the next worker the bytes of a line
//! the dead one had only begun to read, and replay the host's handshake.
//!
//! Layout: a header at 0 (magic, the active region, its epoch), then two regions that take
//! turns. A region starts with a snapshot of the [`State`]; records follow, each
//! `[len u32][crc32 u32][epoch u32][kind u8][payload]`. A record whose length, epoch or CRC
//! does not hold ends the region: a worker killed mid-write leaves at most one such record,
//! and a region used before keeps nothing that passes for this epoch's. When a region grows
//! past [`COMPACT_AT`], the state is written as the other region's snapshot and the header
//! flipped (one small write, in one page: all or nothing).
//!
//! Order is what makes it exact. Input: the worker copies what waits on stdin, appends it as an
//! `I` record, then takes it; killed between the two, the relay finds the last record's bytes
//! still first on stdin and leaves them there. (A host that wrote the very same bytes again
//! right behind them, with the worker killed in that instant after taking them, would have
//! them read as not taken: ids make two equal lines all but impossible; equal chunks of one
//! long line of repeated content are the case left.) Answers: a reply is put on the stage (a
//! pipe the relay holds too), its id appended, then the reply moved to stdout; killed before
//! the record, the relay drops what is staged and answers the call as lost; after it, the
//! relay writes the staged reply itself — each call answered once.

use std::collections::HashMap;
use std::fs::File;

use gm_actors::sys;

use super::peek::{id_key, Peek};

const MAGIC: u32 = 0x474d_4a31;
const HEADER_LEN: u64 = 4096;
/// Each region's room (a memory file is sparse: only what is written takes memory).
const REGION: u64 = 1 << 36;
/// A region is compacted once it holds this much and more than 4 times its snapshot.
const COMPACT_AT: u64 = 1 << 20;
/// How much of each region a worker maps: its records are written there with no system call
/// (the rest, a snapshot of a very long unfinished line, with pwrite).
const WINDOW: usize = 8 << 20;
const RECORD_HEAD: usize = 13;

/// The ids of the relay's own lines (a replayed handshake, an `initialize` it answered
/// itself): their answers never reach the host, and they are nobody's call.
pub const OWN_ID_PREFIX: &str = "\"gm-relay:";
/// The skill whose read opens run_code's gate; replayed to a new worker.
pub const GATE_SKILL: &str = "skill://gm/SKILL.md";

const SNAPSHOT: u8 = b'S';
const INPUT: u8 = b'I';
const ANSWERED: u8 = b'A';
const ENDED: u8 = b'E';

/// A call taken from the host and not answered yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The id as the host wrote it, for an answer the relay writes itself.
    pub raw_id: String,
    pub tool_call: bool,
}

/// What the host said to open the connection, to say again to a new worker.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Handshake {
    pub initialize: Option<Vec<u8>>,
    pub initialized: bool,
    pub skill_read: bool,
}

impl Handshake {
    /// Notes what one message means for the handshake.
    pub fn note(&mut self, peek: &Peek, line: &[u8]) {
        let Some(method) = peek.method.as_deref() else { return };
        match method {
            // A batch cannot hold an initialize (and the line would be the whole batch).
            "initialize" if peek.id.is_some() && !Peek::is_batch(line) => {
                *self = Handshake { initialize: Some(line.to_vec()), ..Handshake::default() };
            }
            "notifications/initialized" => self.initialized = true,
            "resources/read" if peek.uri.as_deref() == Some(GATE_SKILL) => self.skill_read = true,
            _ => {}
        }
    }
}

/// The call a message opens, if it opens one: a request with an id that is not the relay's own.
pub fn call_of(peek: &Peek) -> Option<(String, Call)> {
    let id = peek.id.as_ref().filter(|id| peek.method.is_some() && !id.starts_with(OWN_ID_PREFIX))?;
    Some((id_key(id), Call { raw_id: id.clone(), tool_call: peek.method.as_deref() == Some("tools/call") }))
}

/// What the journal says of a session: the calls in flight, the line being read, the handshake.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct State {
    /// The bytes of a line not yet whole.
    pub partial: Vec<u8>,
    /// The line being read passed the line limit: its bytes are dropped up to its end (the
    /// worker answers it with an error of no id).
    pub overflow: bool,
    pub inflight: HashMap<String, Call>,
    pub handshake: Handshake,
}

impl State {
    /// Takes bytes read from the host: each whole line is noted, the rest kept as `partial`.
    pub fn take_input(&mut self, mut bytes: &[u8], max_line: usize) {
        while !bytes.is_empty() {
            let (chunk, whole) = match memchr::memchr(b'\n', bytes) {
                Some(i) => (&bytes[..i], true),
                None => (bytes, false),
            };
            bytes = &bytes[chunk.len() + usize::from(whole)..];
            if self.overflow || self.partial.len() + chunk.len() > max_line {
                self.overflow = true;
                self.partial.clear();
            } else if whole && self.partial.is_empty() {
                // The usual case, a whole line in one read: noted where it lies.
                self.note_line(chunk);
                continue;
            } else {
                self.partial.extend_from_slice(chunk);
            }
            if whole {
                if !self.overflow {
                    let line = std::mem::take(&mut self.partial);
                    self.note_line(&line);
                }
                self.overflow = false;
            }
        }
    }

    fn note_line(&mut self, line: &[u8]) {
        if !Peek::is_batch(line) {
            return self.note_peek(Peek::of(line), line);
        }
        for peek in Peek::of_batch(line) {
            self.note_peek(peek, line);
        }
    }

    fn note_peek(&mut self, peek: Peek, line: &[u8]) {
        self.handshake.note(&peek, line);
        if peek.method.as_deref() == Some("notifications/cancelled") {
            // A cancelled call gets no answer: it must not be answered later as lost.
            if let Some(id) = &peek.cancels {
                self.inflight.remove(&id_key(id));
            }
        }
        if let Some((key, call)) = call_of(&peek) {
            self.inflight.insert(key, call);
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.partial.len());
        put_bytes(&mut out, &self.partial);
        out.push(u8::from(self.overflow));
        match &self.handshake.initialize {
            Some(line) => {
                out.push(1);
                put_bytes(&mut out, line);
            }
            None => out.push(0),
        }
        out.push(u8::from(self.handshake.initialized));
        out.push(u8::from(self.handshake.skill_read));
        out.extend_from_slice(&(self.inflight.len() as u32).to_le_bytes());
        for (key, call) in &self.inflight {
            out.push(u8::from(call.tool_call));
            put_bytes(&mut out, key.as_bytes());
            put_bytes(&mut out, call.raw_id.as_bytes());
        }
        out
    }

    /// Reads what [`State::encode`] wrote from the start of `bytes`, leaving the rest.
    fn decode(bytes: &mut &[u8]) -> Option<State> {
        let partial = take_bytes(bytes)?.to_vec();
        let mut state = State { partial, overflow: take_u8(bytes)? != 0, ..State::default() };
        if take_u8(bytes)? != 0 {
            state.handshake.initialize = Some(take_bytes(bytes)?.to_vec());
        }
        state.handshake.initialized = take_u8(bytes)? != 0;
        state.handshake.skill_read = take_u8(bytes)? != 0;
        let n = u32::from_le_bytes(take(bytes, 4)?.try_into().ok()?);
        for _ in 0..n {
            let tool_call = take_u8(bytes)? != 0;
            let key = String::from_utf8(take_bytes(bytes)?.to_vec()).ok()?;
            let raw_id = String::from_utf8(take_bytes(bytes)?.to_vec()).ok()?;
            state.inflight.insert(key, Call { raw_id, tool_call });
        }
        Some(state)
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

fn take<'a>(bytes: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
    if bytes.len() < n {
        return None;
    }
    let (head, rest) = bytes.split_at(n);
    *bytes = rest;
    Some(head)
}

fn take_u8(bytes: &mut &[u8]) -> Option<u8> {
    take(bytes, 1).map(|b| b[0])
}

fn take_bytes<'a>(bytes: &mut &'a [u8]) -> Option<&'a [u8]> {
    let n = u32::from_le_bytes(take(bytes, 4)?.try_into().ok()?) as usize;
    take(bytes, n)
}

/// Why a journal cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("the session's journal: {0}")]
    Io(#[from] std::io::Error),
    #[error("the session's journal is not one (bad header or snapshot)")]
    Corrupt,
}

/// One process's handle on a session's journal: the relay's, or its worker's.
pub struct Journal {
    file: File,
    region: u32,
    epoch: u32,
    /// Where the next record goes, from the region's start.
    end: u64,
    snapshot_len: u64,
    max_line: usize,
    /// The start of each region, mapped (a worker's journal; `None` where mapping failed).
    windows: [Option<sys::SharedWindow>; 2],
    /// The state as the records so far leave it.
    pub state: State,
}

/// What the relay reads of a dead worker's journal.
#[derive(Debug)]
pub struct Recovered {
    pub state: State,
    /// A worker wrote to it since its snapshot: it may have acted on what it read.
    pub touched: bool,
    /// The worker ended the session itself (the host left): nothing to recover.
    pub ended: bool,
}

impl Journal {
    /// A new journal in `file`, its first snapshot `state` and the bytes the next worker reads
    /// before stdin (`unread`, noted into the state as they will be read).
    /// A journal written before in the same file is replaced: the new one takes the other
    /// region under the next epoch, so none of the old records reads as the new one's.
    pub fn create(file: File, max_line: usize, state: State, unread: &[u8]) -> Result<Journal, JournalError> {
        let (region, epoch) = read_header(&file).map(|(r, e)| (1 - r, e.wrapping_add(1))).unwrap_or((0, 1));
        // Long enough for both regions (sparse: only what is written takes memory), so a
        // worker can map their starts.
        if file.metadata()?.len() < region_base(2) {
            file.set_len(region_base(2))?;
        }
        let mut journal =
            Journal { file, region: 0, epoch: 0, end: 0, snapshot_len: 0, max_line, windows: [None, None], state };
        journal.write_snapshot(epoch, region, unread)?;
        Ok(journal)
    }

    /// Opens the journal a relay handed over: the state its snapshot and records leave, and
    /// the bytes of an unfinished line to read before stdin.
    pub fn open(file: File, max_line: usize) -> Result<(Journal, Vec<u8>), JournalError> {
        let (region, epoch) = read_header(&file)?;
        let windows = [0, 1].map(|r| sys::SharedWindow::map(&file, region_base(r), WINDOW).ok());
        let mut journal =
            Journal { file, region, epoch, end: 0, snapshot_len: 0, max_line, windows, state: State::default() };
        let records = journal.records()?;
        let mut unread = Vec::new();
        for (kind, payload) in records {
            journal.end += (RECORD_HEAD + payload.len()) as u64;
            match kind {
                SNAPSHOT => {
                    journal.snapshot_len = journal.end;
                    let (state, bytes) = decode_snapshot(&payload).ok_or(JournalError::Corrupt)?;
                    journal.state = state;
                    journal.state.take_input(&bytes, max_line);
                    unread = bytes;
                }
                // A journal handed to a new worker holds its snapshot only.
                _ => return Err(JournalError::Corrupt),
            }
        }
        if journal.snapshot_len == 0 {
            return Err(JournalError::Corrupt);
        }
        Ok((journal, unread))
    }

    /// Reads a dead worker's journal. `still_waiting` says whether bytes are still first on
    /// the host's stdin: the last input record's, when the worker may have died before taking
    /// them.
    pub fn recover(
        file: &File,
        max_line: usize,
        still_waiting: impl Fn(&[u8]) -> bool,
    ) -> Result<Recovered, JournalError> {
        let (region, epoch) = read_header(file)?;
        let file = file.try_clone()?;
        let journal = Journal {
            file,
            region,
            epoch,
            end: 0,
            snapshot_len: 0,
            max_line,
            windows: [None, None],
            state: State::default(),
        };
        let mut records = journal.records()?;
        let touched = records.len() > 1;
        if let Some((INPUT, bytes)) = records.last() {
            if still_waiting(bytes) {
                records.pop();
            }
        }
        let mut state = State::default();
        let mut ended = false;
        for (kind, payload) in records {
            match kind {
                SNAPSHOT => {
                    let (snapshot, unread) = decode_snapshot(&payload).ok_or(JournalError::Corrupt)?;
                    state = snapshot;
                    state.take_input(&unread, max_line);
                }
                INPUT => state.take_input(&payload, max_line),
                ANSWERED => {
                    let mut rest = payload.as_slice();
                    while let Some(key) = take_bytes(&mut rest) {
                        state.inflight.remove(String::from_utf8_lossy(key).as_ref());
                    }
                }
                ENDED => ended = true,
                _ => {}
            }
        }
        Ok(Recovered { state, touched, ended })
    }

    /// Records bytes about to be taken from the host.
    pub fn input(&mut self, bytes: &[u8]) -> Result<(), JournalError> {
        self.append(INPUT, bytes)?;
        self.state.take_input(bytes, self.max_line);
        Ok(())
    }

    /// Records that the calls of these keys were answered.
    pub fn answered<'a>(&mut self, keys: impl IntoIterator<Item = &'a str>) -> Result<(), JournalError> {
        let mut payload = Vec::new();
        for key in keys {
            if self.state.inflight.remove(key).is_some() {
                put_bytes(&mut payload, key.as_bytes());
            }
        }
        if payload.is_empty() {
            return Ok(());
        }
        self.append(ANSWERED, &payload)
    }

    /// Records that the session ended: the relay exits instead of recovering.
    pub fn ended(&mut self) -> Result<(), JournalError> {
        self.append(ENDED, &[])
    }

    fn append(&mut self, kind: u8, payload: &[u8]) -> Result<(), JournalError> {
        if self.end > COMPACT_AT && self.end > 4 * self.snapshot_len {
            self.compact()?;
        }
        let record = record(self.epoch, kind, payload);
        let at = region_base(self.region) + self.end;
        let mapped = self.windows[self.region as usize].as_ref().is_some_and(|w| w.write(at, &record));
        if !mapped {
            sys::write_all_at(&self.file, &record, at)?;
        }
        self.end += record.len() as u64;
        Ok(())
    }

    fn compact(&mut self) -> Result<(), JournalError> {
        let unread = std::mem::take(&mut self.state.partial);
        let overflow = std::mem::replace(&mut self.state.overflow, false);
        let written = self.write_snapshot(self.epoch.wrapping_add(1), 1 - self.region, &unread);
        self.state.partial = unread;
        self.state.overflow = overflow;
        written
    }

    /// Writes `self.state` (with `unread` as the bytes to read first) as the snapshot opening
    /// `region`, then points the header at it.
    fn write_snapshot(&mut self, epoch: u32, region: u32, unread: &[u8]) -> Result<(), JournalError> {
        let mut payload = State { partial: Vec::new(), overflow: self.state.overflow, ..self.state.clone() }.encode();
        put_bytes(&mut payload, unread);
        let record = record(epoch, SNAPSHOT, &payload);
        sys::write_all_at(&self.file, &record, region_base(region))?;
        let mut header = Vec::with_capacity(12);
        header.extend_from_slice(&MAGIC.to_le_bytes());
        header.extend_from_slice(&region.to_le_bytes());
        header.extend_from_slice(&epoch.to_le_bytes());
        sys::write_all_at(&self.file, &header, 0)?;
        self.region = region;
        self.epoch = epoch;
        self.end = record.len() as u64;
        self.snapshot_len = record.len() as u64;
        Ok(())
    }

    /// The active region's valid records, in order.
    fn records(&self) -> Result<Vec<(u8, Vec<u8>)>, JournalError> {
        let base = region_base(self.region);
        let held = held_bytes(&self.file.metadata()?);
        let mut offset = 0u64;
        let mut out = Vec::new();
        loop {
            let mut head = [0u8; RECORD_HEAD];
            match sys::read_exact_at(&self.file, &mut head, base + offset) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e.into()),
            }
            let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
            let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
            let epoch = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
            if len < RECORD_HEAD || epoch != self.epoch || (offset == 0) != (head[12] == SNAPSHOT) {
                break;
            }
            // The length is read before the CRC can vouch for it: a damaged one (up to 4 GiB)
            // must not be allocated. A record lies in its region and in bytes the file holds.
            if !fits(len as u64, offset, held) {
                break;
            }
            let mut payload = vec![0u8; len - RECORD_HEAD];
            match sys::read_exact_at(&self.file, &mut payload, base + offset + RECORD_HEAD as u64) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(e.into()),
            }
            if checksum(&head[8..], &payload) != crc {
                break;
            }
            out.push((head[12], payload));
            offset += len as u64;
        }
        if out.is_empty() {
            return Err(JournalError::Corrupt);
        }
        Ok(out)
    }
}

/// Whether a record of `len` bytes at `offset` in its region can be one the journal wrote:
/// it ends inside the region, and is no longer than the bytes the file holds.
fn fits(len: u64, offset: u64, held: u64) -> bool {
    offset.checked_add(len).is_some_and(|end| end <= REGION) && len <= held
}

/// How many bytes of the file hold data: a memory file is sparse, and every byte a record was
/// written to takes memory, so a record can be no longer than this (its length alone can say
/// up to 4 GiB of a hole, read as zeros).
fn held_bytes(meta: &std::fs::Metadata) -> u64 {
    #[cfg(unix)]
    {
        std::os::unix::fs::MetadataExt::blocks(meta).saturating_mul(512)
    }
    #[cfg(not(unix))]
    {
        meta.len()
    }
}

fn region_base(region: u32) -> u64 {
    HEADER_LEN + u64::from(region) * REGION
}

fn read_header(file: &File) -> Result<(u32, u32), JournalError> {
    let mut header = [0u8; 12];
    sys::read_exact_at(file, &mut header, 0)?;
    let word = |i: usize| u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]]);
    if word(0) != MAGIC || word(4) > 1 {
        return Err(JournalError::Corrupt);
    }
    Ok((word(4), word(8)))
}

fn decode_snapshot(payload: &[u8]) -> Option<(State, Vec<u8>)> {
    // The state's own encoding, then the bytes to read first.
    let mut rest = payload;
    let state = State::decode(&mut rest)?;
    let unread = take_bytes(&mut rest)?.to_vec();
    Some((state, unread))
}

fn record(epoch: u32, kind: u8, payload: &[u8]) -> Vec<u8> {
    let len = (RECORD_HEAD + payload.len()) as u32;
    let mut head_tail = [0u8; 5];
    head_tail[..4].copy_from_slice(&epoch.to_le_bytes());
    head_tail[4] = kind;
    let crc = checksum(&head_tail, payload);
    let mut out = Vec::with_capacity(len as usize);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(&head_tail);
    out.extend_from_slice(payload);
    out
}

fn checksum(head_tail: &[u8], payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(head_tail);
    hasher.update(payload);
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory() -> File {
        sys::memory_file(c"gm-journal-test").expect("memfd")
    }

    fn call(id: u32) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"stat_file","arguments":{{}}}}}}"#
        ) + "\n"
    }

    #[test]
    fn a_dead_workers_calls_and_unfinished_line_are_read_back() {
        let file = memory();
        let mut relay_side =
            Journal::create(file.try_clone().expect("clone"), 1 << 20, State::default(), b"").expect("create");
        relay_side.state = State::default();
        let (mut worker, unread) = Journal::open(file.try_clone().expect("clone"), 1 << 20).expect("open");
        assert!(unread.is_empty());
        let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#;
        worker.input(&[init.as_slice(), b"\n"].concat()).expect("input");
        worker.input(call(1).as_bytes()).expect("input");
        let two = call(2);
        worker.input(&two.as_bytes()[..20]).expect("input");
        worker.answered(["n0", "n1"]).expect("answered");
        let recovered = Journal::recover(&file, 1 << 20, |_| false).expect("recover");
        assert!(!recovered.ended);
        assert!(recovered.state.inflight.is_empty(), "{:?}", recovered.state.inflight);
        assert_eq!(recovered.state.partial, &two.as_bytes()[..20]);
        assert_eq!(recovered.state.handshake.initialize.as_deref(), Some(init.as_slice()));
        worker.input(&two.as_bytes()[20..]).expect("input");
        // The last record's bytes are still on stdin: the worker never took them.
        let recovered = Journal::recover(&file, 1 << 20, |b| b == &two.as_bytes()[20..]).expect("recover");
        assert!(recovered.state.inflight.is_empty());
        let recovered = Journal::recover(&file, 1 << 20, |_| false).expect("recover");
        assert_eq!(recovered.state.inflight.keys().collect::<Vec<_>>(), ["n2"]);
        worker.ended().expect("ended");
        assert!(Journal::recover(&file, 1 << 20, |_| false).expect("recover").ended);
    }

    #[test]
    fn a_journal_compacted_many_times_keeps_exactly_the_calls_in_flight() {
        let file = memory();
        Journal::create(file.try_clone().expect("clone"), 1 << 20, State::default(), b"").expect("create");
        let (mut worker, _) = Journal::open(file.try_clone().expect("clone"), 1 << 20).expect("open");
        // Far more than a region holds before it is compacted; 5 calls stay open throughout.
        for id in 0..40_000u32 {
            worker.input(call(id).as_bytes()).expect("input");
            if id >= 5 {
                worker.answered([format!("n{}", id - 5).as_str()]).expect("answered");
            }
        }
        worker.input(b"{\"jsonrpc\":\"2.0\",\"id\":77,\"meth").expect("input");
        let recovered = Journal::recover(&file, 1 << 20, |_| false).expect("recover");
        let mut open: Vec<&String> = recovered.state.inflight.keys().collect();
        open.sort();
        assert_eq!(open, ["n39995", "n39996", "n39997", "n39998", "n39999"]);
        assert_eq!(recovered.state.partial, b"{\"jsonrpc\":\"2.0\",\"id\":77,\"meth");
    }

    #[test]
    fn a_journal_made_again_in_the_same_file_reads_none_of_the_old_records() {
        let file = memory();
        for round in 0..4u32 {
            Journal::create(file.try_clone().expect("clone"), 1 << 20, State::default(), b"").expect("create");
            let (mut worker, _) = Journal::open(file.try_clone().expect("clone"), 1 << 20).expect("open");
            worker.input(call(round).as_bytes()).expect("input");
            let recovered = Journal::recover(&file, 1 << 20, |_| false).expect("recover");
            let open: Vec<String> = recovered.state.inflight.keys().cloned().collect();
            assert_eq!(open, [format!("n{round}")], "only this round's call is in flight");
        }
    }

    #[test]
    fn a_record_cut_by_a_death_is_not_read() {
        let file = memory();
        Journal::create(file.try_clone().expect("clone"), 1 << 20, State::default(), b"").expect("create");
        let (mut worker, _) = Journal::open(file.try_clone().expect("clone"), 1 << 20).expect("open");
        worker.input(call(1).as_bytes()).expect("input");
        let end = region_base(worker.region) + worker.end;
        worker.input(call(2).as_bytes()).expect("input");
        // The second record's last bytes never made it.
        sys::write_all_at(&file, &[0u8; 8], end + 30).expect("cut");
        let recovered = Journal::recover(&file, 1 << 20, |_| false).expect("recover");
        assert_eq!(recovered.state.inflight.keys().collect::<Vec<_>>(), ["n1"]);
    }

    /// The process's peak resident memory (`VmHWM`), in bytes.
    fn peak_rss() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).expect("VmHWM");
        line.split_whitespace().nth(1).and_then(|kb| kb.parse::<u64>().ok()).expect("kB") * 1024
    }

    #[test]
    fn a_record_with_a_forged_huge_length_ends_the_region_without_being_allocated() {
        let file = memory();
        Journal::create(file.try_clone().expect("clone"), 1 << 20, State::default(), b"").expect("create");
        let (mut worker, _) = Journal::open(file.try_clone().expect("clone"), 1 << 20).expect("open");
        worker.input(call(1).as_bytes()).expect("input");
        // A head that passes every check but the CRC's, saying nearly 4 GiB follow (a hole of
        // the sparse file, read as zeros, would fill all of it).
        let at = region_base(worker.region) + worker.end;
        let mut head = Vec::new();
        head.extend_from_slice(&(u32::MAX - 1).to_le_bytes());
        head.extend_from_slice(&0u32.to_le_bytes());
        head.extend_from_slice(&worker.epoch.to_le_bytes());
        head.push(INPUT);
        sys::write_all_at(&file, &head, at).expect("forge");
        let held = held_bytes(&file.metadata().expect("meta"));
        assert!(held < u64::from(u32::MAX - 1), "the file holds {held} bytes");
        assert!(!fits(u64::from(u32::MAX - 1), worker.end, held), "refused before any allocation");

        let before = peak_rss();
        let recovered = Journal::recover(&file, 1 << 20, |_| false).expect("recover");
        assert_eq!(recovered.state.inflight.keys().collect::<Vec<_>>(), ["n1"], "the records before it are kept");
        assert!(recovered.touched);
        // Reading it would have taken gigabytes; other tests running meanwhile take far less.
        let grew = peak_rss().saturating_sub(before);
        assert!(grew < 1 << 30, "the peak memory grew by {grew} bytes");
    }

    #[test]
    fn a_record_must_end_in_its_region_and_in_what_the_file_holds() {
        assert!(fits(13, 0, 4096));
        assert!(fits(4096, 0, 4096));
        assert!(!fits(4097, 0, 4096), "longer than the file holds");
        assert!(!fits(100, REGION - 50, 1 << 40), "past its region's end");
        assert!(!fits(u64::MAX, 1, u64::MAX), "no overflow");
    }

    #[test]
    fn cancelled_calls_the_relays_own_lines_and_overlong_lines_are_nobodys_to_answer() {
        let mut state = State::default();
        state.take_input(call(1).as_bytes(), 1 << 10);
        state.take_input(call(2).as_bytes(), 1 << 10);
        state.take_input(
            b"{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":1.0}}\n",
            1 << 10,
        );
        state.take_input(b"{\"jsonrpc\":\"2.0\",\"id\":\"gm-relay:skill-read\",\"method\":\"resources/read\",\"params\":{\"uri\":\"skill://gm/SKILL.md\"}}\n", 1 << 10);
        let long =
            format!(r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"x":"{}"}}}}"#, "y".repeat(2000));
        state.take_input(long.as_bytes(), 1 << 10);
        state.take_input(b"\n", 1 << 10);
        assert_eq!(state.inflight.keys().collect::<Vec<_>>(), ["n2"]);
        assert!(state.handshake.skill_read);
        assert!(state.partial.is_empty() && !state.overflow);
    }
}
