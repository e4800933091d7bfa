//! Newline-delimited reading for the relay: whole lines into one reused buffer, with a limit on
//! the host's side past which the rest of a line is passed on in chunks instead of held.

use std::io::{self, BufRead, BufReader, Read};

pub enum ReadLine {
    /// `buf` holds one whole line, without its newline.
    Line,
    /// `buf` holds the first `max` bytes of a longer line; [`LineReader::pass_rest`] gives
    /// the rest.
    TooLong,
    Eof,
}

pub struct LineReader<R> {
    input: BufReader<R>,
    max: usize,
}

impl<R: Read> LineReader<R> {
    pub fn new(input: R, max: usize) -> Self {
        LineReader { input: BufReader::with_capacity(1 << 16, input), max }
    }

    pub fn read_line(&mut self, buf: &mut Vec<u8>) -> io::Result<ReadLine> {
        buf.clear();
        loop {
            let chunk = fill(&mut self.input)?;
            if chunk.is_empty() {
                // A last line without a newline is still a line.
                return Ok(if buf.is_empty() { ReadLine::Eof } else { ReadLine::Line });
            }
            let (take, end) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            let room = self.max.saturating_sub(buf.len());
            if take > room {
                reserve_once(buf, room, self.max);
                buf.extend_from_slice(&chunk[..room]);
                self.input.consume(room);
                return Ok(ReadLine::TooLong);
            }
            reserve_once(buf, take, self.max);
            buf.extend_from_slice(&chunk[..take]);
            self.input.consume(take + usize::from(end));
            if end {
                return Ok(ReadLine::Line);
            }
        }
    }

    /// Whether input is already buffered: more lines may follow without waiting.
    pub fn has_buffered(&self) -> bool {
        !self.input.buffer().is_empty()
    }

    /// Hands the rest of an over-long line, up to and with its newline, to `sink` in chunks.
    pub fn pass_rest(&mut self, mut sink: impl FnMut(&[u8]) -> io::Result<()>) -> io::Result<()> {
        loop {
            let chunk = fill(&mut self.input)?;
            if chunk.is_empty() {
                return sink(b"\n");
            }
            match memchr::memchr(b'\n', chunk) {
                Some(i) => {
                    let result = sink(&chunk[..=i]);
                    self.input.consume(i + 1);
                    return result;
                }
                None => {
                    let n = chunk.len();
                    let result = sink(chunk);
                    self.input.consume(n);
                    result?;
                }
            }
        }
    }
}

/// What is buffered, reading more when nothing is; empty at the end. A read cut short by a
/// signal is tried again.
fn fill<B: BufRead>(input: &mut B) -> io::Result<&[u8]> {
    loop {
        match input.fill_buf() {
            Ok(_) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    input.fill_buf()
}

/// Makes room for `more` bytes. A buffer that must grow grows once to the line limit (or to
/// what is needed, past it) instead of doubling, so a big line is never copied from a smaller
/// buffer into a bigger one more than once; small lines never touch more than they use.
fn reserve_once(buf: &mut Vec<u8>, more: usize, limit: usize) {
    let needed = buf.len() + more;
    if needed > buf.capacity() {
        buf.reserve_exact(needed.max(limit.saturating_add(1)) - buf.len());
    }
}

/// Reads one whole line with its newline into `buf` (growing as [`reserve_once`] does up to
/// `limit`); false at the end, including a last line with no newline (cut off when its writer
/// died).
pub fn read_whole_line<R: BufRead>(input: &mut R, buf: &mut Vec<u8>, limit: usize) -> io::Result<bool> {
    loop {
        let chunk = fill(input)?;
        if chunk.is_empty() {
            return Ok(false);
        }
        let (take, end) = match memchr::memchr(b'\n', chunk) {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        reserve_once(buf, take, limit);
        buf.extend_from_slice(&chunk[..take]);
        input.consume(take);
        if end {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(input: &[u8], max: usize) -> Vec<String> {
        let mut r = LineReader::new(input, max);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            match r.read_line(&mut buf).unwrap() {
                ReadLine::Line => out.push(String::from_utf8_lossy(&buf).into_owned()),
                ReadLine::TooLong => {
                    let mut rest = Vec::new();
                    r.pass_rest(|c| {
                        rest.extend_from_slice(c);
                        Ok(())
                    })
                    .unwrap();
                    out.push(format!("long:{}+{}", String::from_utf8_lossy(&buf), String::from_utf8_lossy(&rest)));
                }
                ReadLine::Eof => return out,
            }
        }
    }

    #[test]
    fn lines_are_split_at_newlines_and_a_last_line_needs_none() {
        assert_eq!(lines_of(b"a\nbb\n\nccc", 10), ["a", "bb", "", "ccc"]);
    }

    #[test]
    fn a_line_past_the_limit_is_cut_and_its_rest_passed_with_the_newline() {
        assert_eq!(lines_of(b"abcdefgh\nxy\n", 3), ["long:abc+defgh\n", "xy"]);
    }

    #[test]
    fn a_line_cut_off_by_the_end_of_input_is_not_whole() {
        let mut input: &[u8] = b"done\npart";
        let mut buf = Vec::new();
        assert!(read_whole_line(&mut input, &mut buf, 100).unwrap());
        assert_eq!(buf, b"done\n");
        buf.clear();
        assert!(!read_whole_line(&mut input, &mut buf, 100).unwrap());
    }
}
