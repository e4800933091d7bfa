//! Stdio transport: newline-delimited JSON-RPC lines in, protocol lines out.
//!
//! The reader runs on a thread of its own (stdin reads block) and hands each line to a
//! recipient actor. It never buffers more than `max_line` bytes of one line: past the limit
//! the rest of that line is read and dropped, and the recipient is told how long it was.

use std::io::{BufRead, Write};

use actix::prelude::*;

/// One unit read from stdin.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub enum Incoming {
    /// A complete line (without its newline), valid UTF-8.
    Line(String),
    /// A line longer than the limit; its bytes were dropped unread.
    TooLong { bytes: u64 },
    /// A line that is not valid UTF-8.
    InvalidUtf8,
    /// stdin reached end of file or failed: the client is gone.
    Closed,
}

/// Starts the stdin reader thread. Each line goes to `sink`; `Closed` is the last message.
pub fn spawn_stdin_reader(max_line: usize, sink: Recipient<Incoming>) -> std::io::Result<()> {
    std::thread::Builder::new().name("gm-stdin".into()).spawn(move || {
        let stdin = std::io::stdin();
        read_lines(stdin.lock(), max_line, |msg| sink.do_send(msg));
    })?;
    Ok(())
}

/// Splits `input` into lines of at most `max_line` bytes, calling `emit` for each, then
/// `emit(Incoming::Closed)`. Separate from the thread so it can be tested on byte slices.
pub fn read_lines<R: BufRead>(mut input: R, max_line: usize, mut emit: impl FnMut(Incoming)) {
    let mut line: Vec<u8> = Vec::new();
    let mut overflow: u64 = 0;
    loop {
        let buf = match input.fill_buf() {
            Ok([]) => break,
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let (chunk, found_newline) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (&buf[..i], true),
            None => (buf, false),
        };
        let consumed = chunk.len() + usize::from(found_newline);
        if overflow > 0 || line.len() + chunk.len() > max_line {
            overflow += (line.len() + chunk.len()) as u64;
            line.clear();
        } else {
            line.extend_from_slice(chunk);
        }
        input.consume(consumed);
        if found_newline {
            if overflow > 0 {
                emit(Incoming::TooLong { bytes: overflow });
                overflow = 0;
            } else {
                emit_line(&mut line, &mut emit);
            }
        }
    }
    if overflow > 0 {
        emit(Incoming::TooLong { bytes: overflow });
    } else if !line.is_empty() {
        emit_line(&mut line, &mut emit);
    }
    emit(Incoming::Closed);
}

fn emit_line(line: &mut Vec<u8>, emit: &mut impl FnMut(Incoming)) {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    let bytes = std::mem::take(line);
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    match String::from_utf8(bytes) {
        Ok(s) => emit(Incoming::Line(s)),
        Err(_) => emit(Incoming::InvalidUtf8),
    }
}

/// The stdout writer. Only protocol lines go to stdout; everything else goes to stderr.
///
/// Writes happen on the caller's arbiter: a reply is one small `write` on a pipe, and handing
/// it to another thread would cost a cross-core wake-up (25-60 µs here) per reply.
pub struct StdoutWriter {
    out: std::io::Stdout,
}

impl Default for StdoutWriter {
    fn default() -> Self {
        Self { out: std::io::stdout() }
    }
}

impl Actor for StdoutWriter {
    type Context = Context<Self>;
}

/// One serialized protocol message, written as a single line.
#[derive(Debug, Message)]
#[rtype(result = "()")]
pub struct Send(pub String);

impl Handler<Send> for StdoutWriter {
    type Result = ();
    fn handle(&mut self, msg: Send, _: &mut Context<Self>) {
        let mut out = self.out.lock();
        let mut line = msg.0.into_bytes();
        line.push(b'\n');
        // A closed stdout means the client is gone; stdin's end will stop the server.
        let _ = out.write_all(&line).and_then(|()| out.flush());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], max: usize) -> Vec<String> {
        let mut got = Vec::new();
        read_lines(input, max, |m| {
            got.push(match m {
                Incoming::Line(s) => format!("line:{s}"),
                Incoming::TooLong { bytes } => format!("toolong:{bytes}"),
                Incoming::InvalidUtf8 => "utf8".into(),
                Incoming::Closed => "closed".into(),
            })
        });
        got
    }

    #[test]
    fn splits_lines_and_strips_carriage_returns() {
        assert_eq!(lines(b"a\r\nb\n\nc", 100), ["line:a", "line:b", "line:c", "closed"]);
    }

    #[test]
    fn an_overlong_line_is_dropped_and_counted_and_the_next_line_still_arrives() {
        assert_eq!(lines(b"0123456789\nok\n", 4), ["toolong:10", "line:ok", "closed"]);
    }

    #[test]
    fn invalid_utf8_is_reported_not_fatal() {
        assert_eq!(lines(b"\xff\xfe\nok\n", 100), ["utf8", "line:ok", "closed"]);
    }
}
