//! Pages of a large text file by line number, read without holding the file in memory.
//!
//! A page reads the file from the top (or from the nearest line start noted before) only as
//! far as the page needs, noting where every `STRIDE`th line starts on the way; those notes are
//! kept (for a few files, keyed by device, inode, size and modification time, so any change to
//! the file starts over) and a later page seeks to the nearest noted line and reads only from
//! there. A file up to [`COUNT_WHOLE_MAX`] is read to its end once, so its pages know its
//! line count; a bigger one learns it only when a page reaches its end (the first page of a
//! 2 GB log reads a megabyte, not 2 GB). Memory stays at one read buffer plus the page,
//! whatever the file's size.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

/// Lines between two noted line starts.
const STRIDE: usize = 16 * 1024;
/// Files whose line index is kept.
const KEPT: usize = 8;
const CHUNK: usize = 1 << 20;
/// The longest single line a page holds; a longer one is refused rather than read into memory.
pub const MAX_LINE_BYTES: usize = 16 << 20;
/// Files up to this size are read to their end by their first page, so every page can say how
/// many lines they have (16 MiB is a few milliseconds of reading); bigger ones are read only
/// as far as a page needs.
pub const COUNT_WHOLE_MAX: u64 = 16 << 20;

/// One page of lines.
#[derive(Debug, PartialEq)]
pub struct Page {
    /// The page's bytes: whole lines, each with its newline.
    pub bytes: Vec<u8>,
    /// The first and last line in the page, 1-based; `end_line < start_line` when empty.
    pub start_line: usize,
    pub end_line: usize,
    /// The file's line count, when known: a file up to [`COUNT_WHOLE_MAX`], or a page that
    /// reached (or a page before that reached) the end of this version of the file.
    pub total_lines: Option<usize>,
    pub file_bytes: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("line {line} is longer than {MAX_LINE_BYTES} bytes")]
    LineTooLong { line: usize },
}

/// Where lines start in one version of a file, as far as pages have read it.
struct LineIndex {
    /// Known once a page has read to the end of the file.
    total_lines: Option<usize>,
    /// `starts[k]` is the byte offset of line `k * STRIDE + 1`.
    starts: Vec<u64>,
}

#[derive(Clone, PartialEq, Eq)]
struct Version {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

/// The kept line indexes, least recently used first.
type Kept = Mutex<Vec<(Version, Arc<LineIndex>)>>;

fn indexes() -> &'static Kept {
    static INDEXES: OnceLock<Kept> = OnceLock::new();
    INDEXES.get_or_init(Mutex::default)
}

fn cached(version: &Version) -> Option<Arc<LineIndex>> {
    let mut kept = indexes().lock().ok()?;
    let at = kept.iter().position(|(v, _)| v == version)?;
    let entry = kept.remove(at);
    let index = entry.1.clone();
    kept.push(entry);
    Some(index)
}

fn keep(version: Version, index: Arc<LineIndex>) {
    if let Ok(mut kept) = indexes().lock() {
        kept.retain(|(v, _)| !(v.dev == version.dev && v.ino == version.ino));
        if kept.len() >= KEPT {
            kept.remove(0);
        }
        kept.push((version, index));
    }
}

/// Lines `offset..offset + limit` (1-based) of the file at `path`, stopping early rather than
/// let the page pass `max_bytes` (a page always holds its first line).
pub fn page(path: &Path, offset: usize, limit: usize, max_bytes: usize) -> Result<Page, PageError> {
    let mut file = File::open(path)?;
    let meta = file.metadata()?;
    let (dev, ino) = gm_actors::sys::file_identity(&meta).unwrap_or_default();
    let mtime_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos() as i128);
    let size = meta.len();
    let version = Version { dev, ino, size, mtime_ns };
    let known = cached(&version);
    let known_total = known.as_ref().and_then(|k| k.total_lines);
    let noted = known.as_ref().map(|k| k.starts.clone()).unwrap_or_default();
    // Start at the noted line at or before `offset`; with none noted, at the top.
    let k = ((offset - 1) / STRIDE).min(noted.len().saturating_sub(1));
    let (first_line, start_byte) = match noted.get(k) {
        Some(&at) => (k * STRIDE + 1, at),
        None => (1, 0),
    };
    // A small file is read to its end so that its line count is known; a big one only as
    // far as the page needs.
    let to_the_end = known_total.is_none() && size <= COUNT_WHOLE_MAX;
    file.seek(SeekFrom::Start(start_byte))?;
    let noted_before = noted.len();
    let mut scan = Scan::new(offset, limit, max_bytes, first_line, noted);
    let mut buf = vec![0u8; CHUNK];
    let mut pos = start_byte;
    let mut at_end = false;
    loop {
        // Past the page's last byte with more of the file left: there are more lines.
        if scan.page_done && !to_the_end && pos < size {
            break;
        }
        let n = match file.read(&mut buf) {
            Ok(0) => {
                at_end = true;
                break;
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        scan.feed(&buf[..n], pos)?;
        pos += n as u64;
    }
    let total_lines = if at_end {
        scan.finish();
        Some(scan.line - 1)
    } else {
        known_total
    };
    if known_total.is_none() && (total_lines.is_some() || scan.starts.len() > noted_before) {
        keep(version, Arc::new(LineIndex { total_lines, starts: std::mem::take(&mut scan.starts) }));
    }
    let end_line = offset + scan.page_lines - 1;
    Ok(Page { bytes: scan.page, start_line: offset, end_line, total_lines, file_bytes: size })
}

/// The state of one pass over a file.
struct Scan {
    offset: usize,
    limit: usize,
    max_bytes: usize,
    /// The line the next byte belongs to.
    line: usize,
    /// The next byte starts a line.
    at_line_start: bool,
    /// The line being read, when it belongs in the page.
    current: Vec<u8>,
    page: Vec<u8>,
    page_lines: usize,
    page_done: bool,
    /// Where every `STRIDE`th line starts, as far as this version of the file has been read
    /// (by earlier pages, then by this one).
    starts: Vec<u64>,
}

impl Scan {
    fn new(offset: usize, limit: usize, max_bytes: usize, first_line: usize, starts: Vec<u64>) -> Self {
        Self {
            offset,
            limit,
            max_bytes,
            line: first_line,
            at_line_start: true,
            current: Vec::new(),
            page: Vec::new(),
            page_lines: 0,
            page_done: false,
            starts,
        }
    }

    fn wanted(&self) -> bool {
        !self.page_done && self.line >= self.offset
    }

    fn feed(&mut self, chunk: &[u8], pos: u64) -> Result<(), PageError> {
        let mut from = 0;
        for nl in memchr::memchr_iter(b'\n', chunk) {
            self.line_starts_at(pos + from as u64);
            if self.wanted() {
                self.take(&chunk[from..=nl])?;
                self.end_line();
            }
            self.line += 1;
            self.at_line_start = true;
            from = nl + 1;
        }
        if from < chunk.len() {
            self.line_starts_at(pos + from as u64);
            self.at_line_start = false;
            if self.wanted() {
                self.take(&chunk[from..])?;
            }
        }
        Ok(())
    }

    fn line_starts_at(&mut self, at: u64) {
        // Only the next start not noted yet: a pass that began at a noted line sees the ones
        // before it again.
        if self.at_line_start && (self.line - 1) % STRIDE == 0 && (self.line - 1) / STRIDE == self.starts.len() {
            self.starts.push(at);
        }
    }

    fn take(&mut self, bytes: &[u8]) -> Result<(), PageError> {
        if self.current.len() + bytes.len() > MAX_LINE_BYTES {
            return Err(PageError::LineTooLong { line: self.line });
        }
        self.current.extend_from_slice(bytes);
        Ok(())
    }

    /// The line in `current` is whole: into the page, unless the page is full.
    fn end_line(&mut self) {
        let fits = self.page.is_empty() || self.page.len() + self.current.len() <= self.max_bytes;
        if fits && self.page_lines < self.limit {
            self.page.append(&mut self.current);
            self.page_lines += 1;
        } else {
            self.current.clear();
            self.page_done = true;
        }
        if self.page_lines >= self.limit {
            self.page_done = true;
        }
    }

    /// The end of the file: a last line without a newline is a line too.
    fn finish(&mut self) {
        if !self.at_line_start {
            if self.wanted() {
                self.end_line();
            }
            self.line += 1;
            self.at_line_start = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What read_file's in-memory path returns for the same text.
    fn expected(text: &str, offset: usize, limit: usize, max: usize) -> (String, usize, usize) {
        let total = text.split_inclusive('\n').count();
        let mut content = String::new();
        let mut end = offset - 1;
        for line in text.split_inclusive('\n').skip(offset - 1).take(limit) {
            if !content.is_empty() && content.len() + line.len() > max {
                break;
            }
            content.push_str(line);
            end += 1;
        }
        (content, end, total)
    }

    #[test]
    fn pages_match_the_in_memory_pages_with_and_without_the_line_index() {
        let dir = tempfile::tempdir().expect("tempdir");
        let lines: Vec<String> = (0..STRIDE * 3 + 7).map(|i| format!("line {i} {}\n", "x".repeat(i % 13))).collect();
        for (name, text) in [
            ("ends-with-newline", lines.concat()),
            ("no-final-newline", lines.concat().trim_end().to_owned()),
            ("empty", String::new()),
            ("one", "only\n".into()),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, &text).expect("write");
            let total = text.split_inclusive('\n').count();
            for (offset, limit, max) in [
                (1, 10, 1 << 20),
                (STRIDE, 3, 1 << 20),
                (STRIDE + 1, 2, 1 << 20),
                (2 * STRIDE + 5, 4000, 1 << 20),
                (total.max(1), 5, 1 << 20),
                (total + 3, 5, 1 << 20),
                (100, 100, 50),
            ] {
                // First with no index (a fresh version of the file), then with one.
                for pass in ["cold", "warm"] {
                    let p = page(&path, offset, limit, max).expect("page");
                    let (content, end, total) = expected(&text, offset, limit, max);
                    assert_eq!(String::from_utf8(p.bytes).expect("utf8"), content, "{name} {offset} {limit} {pass}");
                    assert_eq!((p.end_line, p.total_lines), (end, Some(total)), "{name} {offset} {limit} {pass}");
                }
            }
            // A changed file is read again, not from the old index.
            let changed = format!("{text}more\n");
            std::fs::write(&path, &changed).expect("append");
            let total = page(&path, 1, 1, 1 << 20).expect("page").total_lines;
            assert_eq!(total, Some(expected(&changed, 1, 1, 1).2), "{name}");
        }
    }

    #[test]
    fn a_big_file_is_read_only_as_far_as_its_pages_go_until_one_reaches_its_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("big.log");
        let lines: Vec<String> = (0..STRIDE * 90).map(|i| format!("line {i:08}\n")).collect();
        let text = lines.concat();
        assert!(text.len() as u64 > COUNT_WHOLE_MAX);
        std::fs::write(&path, &text).expect("write");
        let first = page(&path, 1, 2, 1 << 20).expect("page");
        assert_eq!((first.bytes.as_slice(), first.total_lines), (b"line 00000000\nline 00000001\n".as_slice(), None));
        // Further in: from the nearest line noted on the way, still without a count.
        let middle = page(&path, STRIDE * 40 + 3, 1, 1 << 20).expect("page");
        assert_eq!(String::from_utf8(middle.bytes).expect("utf8"), lines[STRIDE * 40 + 2]);
        assert_eq!(middle.total_lines, None);
        // A page that reaches the end learns the count, and later pages know it.
        let last = page(&path, STRIDE * 90, 5, 1 << 20).expect("page");
        assert_eq!((last.end_line, last.total_lines), (STRIDE * 90, Some(STRIDE * 90)));
        assert_eq!(page(&path, 1, 1, 1 << 20).expect("page").total_lines, Some(STRIDE * 90));
    }
}
