//! Output capture with no silent caps: the first and last bytes stay inline, and once an
//! output passes the inline cap the whole of it is spilled to a file the reply names.

use std::collections::VecDeque;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Secret values and the names that stand for them in anything gm returns or logs.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// (value, `[secret:NAME]`), longest value first so a value inside another is not split.
    pairs: Vec<(String, String)>,
}

impl Redactor {
    pub fn new(secrets: &[(String, String)]) -> Self {
        let mut pairs: Vec<(String, String)> = secrets
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|(name, value)| (value.clone(), format!("[secret:{name}]")))
            .collect();
        pairs.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
        Self { pairs }
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_owned();
        for (value, name) in &self.pairs {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), name);
            }
        }
        out
    }
}

/// One captured stream, as a reply shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Captured {
    /// The output, or its head and tail around a marker saying what was cut and where the
    /// whole is.
    pub text: String,
    /// Bytes the stream produced.
    pub bytes: u64,
    /// Bytes left out of `text` (0 when it is whole).
    pub cut: u64,
    /// Where the whole output is, when it was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spilled: Option<PathBuf>,
}

pub struct Capture {
    cap: usize,
    /// Until the output passes `cap`: all of it. After: its first `cap / 2` bytes.
    head: Vec<u8>,
    /// After the output passed `cap`: its last bytes (at most `cap / 2`) that are not in `head`.
    tail: VecDeque<u8>,
    total: u64,
    spill_path: PathBuf,
    spill: Option<File>,
    spill_error: Option<String>,
}

impl Capture {
    /// `cap`: bytes kept inline (half head, half tail once cut); `spill_path`: where the whole
    /// goes if the output is longer.
    pub fn new(cap: usize, spill_path: PathBuf) -> Self {
        Self {
            cap: cap.max(2),
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            spill_path,
            spill: None,
            spill_error: None,
        }
    }

    fn cut(&self) -> bool {
        self.spill.is_some() || self.spill_error.is_some()
    }

    pub fn push(&mut self, mut chunk: &[u8]) {
        self.total += chunk.len() as u64;
        if !self.cut() && self.head.len() + chunk.len() <= self.cap {
            self.head.extend_from_slice(chunk);
            return;
        }
        let half = self.cap / 2;
        if !self.cut() {
            // The output passes the cap now: everything so far goes to the spill file, the
            // head keeps its first half and what it held beyond that starts the tail.
            // A new file, never one a link in its place leads to.
            let opened = crate::state_file::open_own(&self.spill_path, crate::state_file::How::NEW)
                .map_err(std::io::Error::from)
                .and_then(|mut f| f.write_all(&self.head).map(|()| f));
            match opened {
                Ok(f) => self.spill = Some(f),
                Err(e) => self.spill_error = Some(e.to_string()),
            }
            if self.head.len() > half {
                self.tail.extend(&self.head[half..]);
                self.head.truncate(half);
            }
        }
        if let Some(f) = &mut self.spill {
            if let Err(e) = f.write_all(chunk) {
                self.spill_error = Some(e.to_string());
                self.spill = None;
            }
        }
        // A head still short of its half (a first read larger than the cap) fills up first, so
        // the reply always starts with the output's start.
        if self.head.len() < half {
            let take = (half - self.head.len()).min(chunk.len());
            self.head.extend_from_slice(&chunk[..take]);
            chunk = &chunk[take..];
        }
        if chunk.len() >= half {
            self.tail.clear();
            self.tail.extend(&chunk[chunk.len() - half..]);
        } else {
            self.tail.extend(chunk);
            let excess = self.tail.len().saturating_sub(half);
            self.tail.drain(..excess);
        }
    }

    pub fn finish(mut self, redactor: &Redactor) -> Captured {
        let spilled = self.spill.take().is_some() || self.spill_error.is_some();
        if !spilled {
            let text = redactor.redact(&String::from_utf8_lossy(&self.head));
            return Captured { text, bytes: self.total, cut: 0, spilled: None };
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let cut = self.total - self.head.len() as u64 - tail.len() as u64;
        let (whole, note) = match &self.spill_error {
            None => {
                if !redactor.is_empty() {
                    redact_file(&self.spill_path, redactor);
                }
                let note = format!("the whole output is in {}", self.spill_path.display());
                (Some(self.spill_path.clone()), note)
            }
            Some(e) => (None, format!("it could not be saved: {e}")),
        };
        let text = format!(
            "{}\n[... {cut} bytes cut; {note} ...]\n{}",
            String::from_utf8_lossy(&self.head),
            String::from_utf8_lossy(&tail)
        );
        Captured { text: redactor.redact(&text), bytes: self.total, cut, spilled: whole }
    }
}

/// Rewrites a spilled file with secrets replaced. Bytes that are not UTF-8 are kept as they are
/// only when no secret needs replacing.
fn redact_file(path: &Path, redactor: &Redactor) {
    let Ok(bytes) = std::fs::read(path) else { return };
    let text = String::from_utf8_lossy(&bytes);
    let redacted = redactor.redact(&text);
    if redacted != text {
        let _ = std::fs::write(path, redacted);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_stays_whole() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_owned();
        let mut c = Capture::new(100, dir.join("x.txt"));
        c.push(b"hello ");
        c.push(b"world");
        let out = c.finish(&Redactor::default());
        assert_eq!(out, Captured { text: "hello world".into(), bytes: 11, cut: 0, spilled: None });
    }

    #[test]
    fn long_output_keeps_head_and_tail_and_spills_the_whole() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_owned();
        let path = dir.join("x.txt");
        let mut c = Capture::new(10, path.clone());
        let data: Vec<u8> = (0..1000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for chunk in data.chunks(7) {
            c.push(chunk);
        }
        let out = c.finish(&Redactor::default());
        assert_eq!(out.bytes, 1000);
        assert_eq!(out.cut, 990);
        assert!(out.text.starts_with("abcde\n[... 990 bytes cut;"));
        assert!(out.text.ends_with(&String::from_utf8_lossy(&data[995..]).into_owned()));
        assert_eq!(std::fs::read(&path).expect("spill"), data);
        assert_eq!(out.spilled, Some(path));
    }

    /// The head and tail a finished capture shows, and its cut.
    fn shown(out: &Captured) -> (&str, &str) {
        let (head, rest) = out.text.split_once("\n[... ").expect("a cut marker");
        (head, rest.split_once(" ...]\n").expect("marker end").1)
    }

    #[test]
    fn a_first_read_larger_than_the_cap_still_keeps_the_head() {
        // A pipe that filled before the first read hands over more than the cap at once.
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_owned();
        let data: Vec<u8> = (0..100u32).map(|i| b'a' + (i % 26) as u8).collect();
        for first in [30usize, 11, 10, 9, 5, 1] {
            let mut c = Capture::new(10, dir.join(format!("x{first}.txt")));
            c.push(&data[..first]);
            for chunk in data[first..].chunks(7) {
                c.push(chunk);
            }
            let out = c.finish(&Redactor::default());
            let (head, tail) = shown(&out);
            assert_eq!(head.as_bytes(), &data[..5], "first read of {first}");
            assert_eq!(tail.as_bytes(), &data[95..], "first read of {first}");
            assert_eq!(out.cut, 90, "first read of {first}");
        }
    }

    #[test]
    fn head_cut_and_tail_always_add_up_to_the_output() {
        // Every split of an output into two reads, around the cap.
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_owned();
        for len in [9usize, 10, 11, 12, 15, 20, 21, 40] {
            let data: Vec<u8> = (0..len as u32).map(|i| b'A' + (i % 26) as u8).collect();
            for split in 0..=len {
                let mut c = Capture::new(10, dir.join("y.txt"));
                c.push(&data[..split]);
                c.push(&data[split..]);
                let out = c.finish(&Redactor::default());
                if len <= 10 {
                    assert_eq!(out.text.as_bytes(), &data[..], "len {len} split {split}");
                    continue;
                }
                let (head, tail) = shown(&out);
                assert_eq!(head.as_bytes(), &data[..5], "len {len} split {split}");
                assert_eq!(tail.as_bytes(), &data[len - tail.len()..], "len {len} split {split}");
                assert_eq!(out.cut as usize + head.len() + tail.len(), len, "len {len} split {split}");
                assert_eq!(tail.len(), 5.min(len - 5), "len {len} split {split}");
            }
        }
    }

    #[test]
    fn secrets_are_replaced_inline_and_in_the_spill_file() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().to_owned();
        let path = dir.join("x.txt");
        let r = Redactor::new(&[("TOKEN".into(), "s3cr3t-value".into())]);
        let mut c = Capture::new(16, path.clone());
        c.push(b"key=s3cr3t-value\n");
        c.push(&[b'.'; 100]);
        c.push(b"again s3cr3t-value");
        let out = c.finish(&r);
        assert!(!out.text.contains("s3cr3t"));
        let file = std::fs::read_to_string(&path).expect("spill");
        assert!(!file.contains("s3cr3t") && file.contains("[secret:TOKEN]"));
    }
}
