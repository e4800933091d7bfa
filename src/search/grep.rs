//! grep over the tracked files with ripgrep's own libraries (grep-searcher, grep-regex):
//! literal, regex or whole-word patterns, binary files skipped and counted, files searched on
//! every core, and a cap on the matches returned that says how many were left out.

use gm_actors::cancel::CancelToken;
use std::sync::atomic::{AtomicUsize, Ordering};

use grep_matcher::Matcher;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::{BinaryDetection, Searcher, SearcherBuilder, Sink, SinkContext, SinkContextKind, SinkMatch};
use serde::Serialize;

use super::tracked::Tracked;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The pattern is plain text.
    #[default]
    Literal,
    /// The pattern is a regular expression (Rust regex syntax).
    Regex,
    /// The pattern is plain text that must stand as a whole word.
    Word,
}

#[derive(Debug, Clone)]
pub struct GrepQuery {
    pub pattern: String,
    pub mode: Mode,
    pub ignore_case: bool,
    pub limit: usize,
    pub context: usize,
    /// Only files whose relative path starts with this.
    pub path_prefix: Option<String>,
    /// Only files whose relative path matches this glob.
    pub glob: Option<globset::GlobMatcher>,
    /// Stops the search between files (the call was cancelled).
    pub cancel: CancelToken,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Hit {
    pub path: String,
    pub line: u64,
    pub text: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct GrepResult {
    pub matches: Vec<Hit>,
    /// Matching lines in all files.
    pub total: u64,
    /// Matching lines left out by the limit.
    pub left_out: u64,
    pub files_searched: u64,
    pub files_with_matches: u64,
    /// Files skipped because they hold binary data.
    pub binary_skipped: u64,
    /// Files that could not be read (deleted since they were tracked, permissions).
    pub unreadable: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum GrepError {
    #[error("invalid pattern: {0}")]
    Pattern(String),
}

/// Searches `files` in parallel. Results come in file order, then line order.
pub fn grep(files: &[Tracked], q: &GrepQuery) -> Result<GrepResult, GrepError> {
    let matcher = RegexMatcherBuilder::new()
        .case_insensitive(q.ignore_case)
        .fixed_strings(q.mode != Mode::Regex)
        .word(q.mode == Mode::Word)
        // Matches never span lines: this lets `\s` drop `\n` and the search stay line-oriented
        // (ripgrep does the same), which is several times faster for such patterns.
        .line_terminator(Some(b'\n'))
        .build(&q.pattern)
        .map_err(|e| GrepError::Pattern(e.to_string()))?;
    let selected: Vec<&Tracked> = files
        .iter()
        .filter(|f| q.path_prefix.as_deref().is_none_or(|p| f.rel.starts_with(p)))
        .filter(|f| q.glob.as_ref().is_none_or(|g| g.is_match(&f.rel)))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(selected.len().max(1));
    // Threads take the next file as they finish one: contiguous halves left one thread alone
    // with the larger half whenever the bytes were unevenly spread (on the kernel, most of them).
    let next = AtomicUsize::new(0);
    let mut parts: Vec<PartResult> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                let (matcher, next, selected) = (matcher.clone(), &next, &selected);
                scope.spawn(move || search_files(selected, next, &matcher, q))
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    let mut out = GrepResult::default();
    let mut hits = Vec::new();
    for part in &mut parts {
        out.total += part.total;
        out.files_searched += part.files;
        out.files_with_matches += part.files_with_matches;
        out.binary_skipped += part.binary;
        out.unreadable += part.unreadable;
        hits.append(&mut part.hits);
    }
    // File order, then line order: one thread searches a whole file, so a stable sort by file
    // keeps each file's hits in line order. Each thread kept at most `limit` hits, from files
    // it took in increasing order, so the first `limit` overall are all here.
    hits.sort_by_key(|(file, _)| *file);
    out.matches = hits.into_iter().take(q.limit).map(|(_, hit)| hit).collect();
    out.left_out = out.total - out.matches.len() as u64;
    Ok(out)
}

#[derive(Default)]
struct PartResult {
    /// Hits with the index of their file in the selection.
    hits: Vec<(usize, Hit)>,
    total: u64,
    files: u64,
    files_with_matches: u64,
    binary: u64,
    unreadable: u64,
}

fn search_files<M: Matcher + Clone>(files: &[&Tracked], next: &AtomicUsize, matcher: &M, q: &GrepQuery) -> PartResult {
    let mut searcher: Searcher = SearcherBuilder::new()
        .binary_detection(BinaryDetection::quit(b'\x00'))
        .line_number(true)
        .before_context(q.context)
        .after_context(q.context)
        .build();
    let mut part = PartResult::default();
    while let Some((index, file)) = {
        let i = next.fetch_add(1, Ordering::Relaxed);
        files.get(i).filter(|_| !q.cancel.is_cancelled()).map(|f| (i, f))
    } {
        let mut sink = Collect {
            index,
            rel: &file.rel,
            keep: q.limit,
            hits: &mut part.hits,
            pending: Vec::new(),
            count: 0,
            binary: false,
        };
        if searcher.search_path(matcher, &file.path, &mut sink).is_err() {
            part.unreadable += 1;
            continue;
        }
        part.files += 1;
        if sink.binary {
            part.binary += 1;
        }
        let count = sink.count;
        part.total += count;
        if count > 0 {
            part.files_with_matches += 1;
        }
    }
    part
}

struct Collect<'a> {
    /// The file's index in the selection.
    index: usize,
    rel: &'a str,
    /// Hits kept by this thread at most (the limit overall).
    keep: usize,
    hits: &'a mut Vec<(usize, Hit)>,
    pending: Vec<String>,
    count: u64,
    binary: bool,
}

fn line_text(bytes: &[u8]) -> String {
    let t = String::from_utf8_lossy(bytes);
    t.trim_end_matches(['\n', '\r']).to_owned()
}

impl Sink for Collect<'_> {
    type Error = std::io::Error;

    fn matched(&mut self, _: &Searcher, mat: &SinkMatch<'_>) -> Result<bool, Self::Error> {
        self.count += 1;
        if self.hits.len() < self.keep {
            let hit = Hit {
                path: self.rel.to_owned(),
                line: mat.line_number().unwrap_or(0),
                text: line_text(mat.bytes()),
                before: std::mem::take(&mut self.pending),
                after: Vec::new(),
            };
            self.hits.push((self.index, hit));
        } else {
            self.pending.clear();
        }
        Ok(true)
    }

    fn context(&mut self, _: &Searcher, ctx: &SinkContext<'_>) -> Result<bool, Self::Error> {
        match ctx.kind() {
            SinkContextKind::Before => self.pending.push(line_text(ctx.bytes())),
            SinkContextKind::After => {
                if let Some((_, last)) = self.hits.last_mut().filter(|(file, _)| *file == self.index) {
                    last.after.push(line_text(ctx.bytes()));
                }
            }
            SinkContextKind::Other => {}
        }
        Ok(true)
    }

    fn binary_data(&mut self, _: &Searcher, _: u64) -> Result<bool, Self::Error> {
        self.binary = true;
        Ok(false)
    }
}
