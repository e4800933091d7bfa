//! How lines travel to tantivy's indexing threads: in batches that share their files' text,
//! with a bound on how many batches are queued.
//!
//! tantivy's writer queues up to ten thousand batches, and reading files is several times faster
//! than indexing them, so without a bound the reader runs ahead until most of a large tree sits
//! in the queue (900 MB on the kernel), every line on fresh memory the kernel has to fault in
//! and zero. A bounded queue keeps the same memory in use, hot in the caches.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use tantivy::schema::document::{Document, ReferenceValue, ReferenceValueLeaf, Value};
use tantivy::schema::Field;

/// Lines per batch: one channel send each, small enough to stay in the caches.
const LINES: usize = 256;
/// Batches queued or being indexed at most (a few per indexing thread). A full queue is
/// refilled once it is down to [`REFILL`]: waking the reader for every batch indexed would
/// cost a context switch per batch.
const IN_FLIGHT: usize = 16;
const REFILL: usize = IN_FLIGHT / 2;
/// How long a full queue is waited for before one more batch is queued anyway: a stall this
/// long means tantivy's threads are busy writing segments, or gone (then the writer reports it).
const STALL: Duration = Duration::from_secs(1);

#[derive(Clone, Copy)]
pub struct Fields {
    /// The file id and line number, packed ([`super::loc`]).
    pub loc: Field,
    pub text: Field,
}

/// One line as a tantivy document: its place in a batch.
pub struct LineDoc {
    batch: Arc<Batch>,
    index: usize,
}

struct Line {
    loc: u64,
    /// Which of the batch's texts, and the line's bytes in it.
    text: u32,
    start: usize,
    end: usize,
}

/// Lines sharing their files' text (one reference count per file and batch, not per line).
struct Batch {
    fields: Fields,
    texts: Vec<Arc<String>>,
    lines: Vec<Line>,
    /// Frees the batch's place in the queue when tantivy drops its last line.
    _slot: Slot,
}

#[derive(Debug, Clone)]
pub enum LineValue<'a> {
    U64(u64),
    Str(&'a str),
}

impl<'a> Value<'a> for LineValue<'a> {
    type ArrayIter = std::iter::Empty<Self>;
    type ObjectIter = std::iter::Empty<(&'a str, Self)>;
    fn as_value(&self) -> ReferenceValue<'a, Self> {
        match self {
            LineValue::U64(n) => ReferenceValue::Leaf(ReferenceValueLeaf::U64(*n)),
            LineValue::Str(s) => ReferenceValue::Leaf(ReferenceValueLeaf::Str(s)),
        }
    }
}

impl Document for LineDoc {
    type Value<'a> = LineValue<'a>;
    type FieldsValuesIter<'a> = std::array::IntoIter<(Field, LineValue<'a>), 2>;
    fn iter_fields_and_values(&self) -> Self::FieldsValuesIter<'_> {
        let b = &*self.batch;
        let l = &b.lines[self.index];
        let text = b.texts.get(l.text as usize).and_then(|t| t.get(l.start..l.end)).unwrap_or_default();
        [(b.fields.loc, LineValue::U64(l.loc)), (b.fields.text, LineValue::Str(text))].into_iter()
    }
}

/// Counts the batches in flight; [`Slot`]s give theirs back when dropped.
#[derive(Default)]
struct Queue {
    in_flight: Mutex<usize>,
    freed: Condvar,
}

struct Slot(Arc<Queue>);

impl Queue {
    /// Takes a place, waiting (up to [`STALL`]) for the queue to go down to [`REFILL`] when
    /// it is full.
    fn take(self: &Arc<Self>) -> Slot {
        let mut n = self.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        if *n >= IN_FLIGHT {
            n = self.freed.wait_timeout_while(n, STALL, |n| *n > REFILL).unwrap_or_else(PoisonError::into_inner).0;
        }
        *n += 1;
        Slot(self.clone())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut n = self.0.in_flight.lock().unwrap_or_else(PoisonError::into_inner);
        *n = n.saturating_sub(1);
        if *n == REFILL {
            self.0.freed.notify_one();
        }
    }
}

/// Gathers lines into batches; `push` hands back a full batch's documents to send.
pub struct Batcher {
    fields: Fields,
    queue: Arc<Queue>,
    texts: Vec<Arc<String>>,
    lines: Vec<Line>,
}

impl Batcher {
    pub fn new(fields: Fields) -> Self {
        Self { fields, queue: Arc::default(), texts: Vec::new(), lines: Vec::with_capacity(LINES) }
    }

    /// Adds the line at `loc` ([`super::loc::pack`]): bytes `start..end` of `text`. Returns
    /// the documents of a batch that is full.
    pub fn push(&mut self, text: &Arc<String>, loc: u64, start: usize, end: usize) -> Option<Vec<LineDoc>> {
        if !self.texts.last().is_some_and(|t| Arc::ptr_eq(t, text)) {
            self.texts.push(text.clone());
        }
        let text = (self.texts.len() - 1) as u32;
        self.lines.push(Line { loc, text, start, end });
        (self.lines.len() >= LINES).then(|| self.flush()).flatten()
    }

    /// Drops the lines gathered so far.
    pub fn clear(&mut self) {
        self.texts.clear();
        self.lines.clear();
    }

    /// The documents of the lines gathered so far, if any: waits while the queue is full.
    pub fn flush(&mut self) -> Option<Vec<LineDoc>> {
        if self.lines.is_empty() {
            self.texts.clear();
            return None;
        }
        let slot = self.queue.take();
        let batch = Arc::new(Batch {
            fields: self.fields,
            texts: std::mem::take(&mut self.texts),
            lines: std::mem::replace(&mut self.lines, Vec::with_capacity(LINES)),
            _slot: slot,
        });
        Some((0..batch.lines.len()).map(|index| LineDoc { batch: batch.clone(), index }).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tantivy::schema::{Schema, FAST, TEXT};

    fn fields() -> Fields {
        let mut b = Schema::builder();
        Fields { loc: b.add_u64_field("loc", FAST), text: b.add_text_field("text", TEXT) }
    }

    fn values(doc: &LineDoc) -> (u64, String) {
        let v: Vec<LineValue> = doc.iter_fields_and_values().map(|(_, v)| v).collect();
        match (&v[0], &v[1]) {
            (LineValue::U64(loc), LineValue::Str(s)) => (*loc, s.to_string()),
            _ => panic!("unexpected values {v:?}"),
        }
    }

    #[test]
    fn lines_of_several_files_share_a_batch_and_keep_their_text() {
        let mut batcher = Batcher::new(fields());
        let a = Arc::new("alpha\nbeta".to_owned());
        let b = Arc::new("gamma".to_owned());
        assert!(batcher.push(&a, 11, 0, 5).is_none());
        assert!(batcher.push(&a, 12, 6, 10).is_none());
        assert!(batcher.push(&b, 21, 0, 5).is_none());
        let docs = batcher.flush().expect("a batch");
        let got: Vec<_> = docs.iter().map(values).collect();
        assert_eq!(got, [(11, "alpha".to_owned()), (12, "beta".to_owned()), (21, "gamma".to_owned())]);
        assert_eq!(docs[0].batch.texts.len(), 2, "one text per file, not per line");
        assert!(batcher.flush().is_none(), "nothing left");
    }

    #[test]
    fn a_full_batch_comes_back_from_push() {
        let mut batcher = Batcher::new(fields());
        let text = Arc::new("x".repeat(10));
        let full = (0..LINES).filter_map(|n| batcher.push(&text, n as u64, 0, 1)).next();
        assert_eq!(full.map(|d| d.len()), Some(LINES));
    }

    #[test]
    fn dropping_a_batch_frees_its_place_in_the_queue() {
        let mut batcher = Batcher::new(fields());
        let text = Arc::new("line".to_owned());
        let mut held = Vec::new();
        for n in 0..IN_FLIGHT {
            batcher.push(&text, n as u64, 0, 4);
            held.push(batcher.flush().expect("a batch"));
        }
        assert_eq!(*batcher.queue.in_flight.lock().unwrap(), IN_FLIGHT);
        held.truncate(REFILL);
        assert_eq!(*batcher.queue.in_flight.lock().unwrap(), REFILL, "freed when their last lines drop");
        batcher.push(&text, 99, 0, 4);
        let started = std::time::Instant::now();
        assert!(batcher.flush().is_some());
        assert!(started.elapsed() < STALL, "a free place is taken without waiting");
    }
}
