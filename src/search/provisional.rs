//! A provisional answer to a line search while the line index does not exist yet (the first
//! search of a tree, a format change, a damaged index): one parallel pass over the files,
//! ranked by BM25 the way the line index (`index.rs`) ranks, so the first query of a
//! large tree is answered in about the time of a grep instead of the index build's (~17 s on
//! the Linux kernel).
//!
//! Tokenizing every line would cost as much as indexing, so each file's bytes go through a
//! case-insensitive literal search for the query's terms first, and only the lines it finds
//! are tokenized by [`CodeTokenizer`]: the search finds a superset of the matching lines, the
//! tokenizer decides which match and how often each term occurs.
//!
//! What differs from the index, on purpose:
//! - The statistics (number of lines, average line length) come from the files searched: with
//!   a `prefix`, from those under it, where the index uses the whole tree's.
//! - On trees over 1 MiB (`EXACT_BYTES`), the number of lines with words and their average
//!   token count are estimated from a sample of lines (see `Stats`); smaller trees get them
//!   exactly, and then the scores are the index's.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::io::Read;
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::atomic::{self, AtomicUsize};

use grep_matcher::Matcher;
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use memchr::{memchr, memchr_iter, memrchr};
use tantivy::fieldnorm::FieldNormReader;
use tantivy::tokenizer::{TokenStream, Tokenizer};

use super::hit::{SearchHit, MAX_FILE_BYTES};
use super::tokenizer::{has_words, words, CodeTokenizer};
use super::tracked::Tracked;

/// tantivy's BM25 parameters.
const K1: f32 = 1.2;
const B: f32 = 0.75;

/// About how many lines are sampled for the statistics the index keeps and a scan cannot count
/// cheaply (see [`Stats`]). On a 650 MB tree of Rust and C, 32k samples put the number of
/// lines with words within 2% of the count, and their average token count within 0.5%.
const SAMPLES: u64 = 1 << 15;
/// Trees of up to this many bytes have every line counted (tokenizing them all takes a few
/// milliseconds): their scores are the index's.
const EXACT_BYTES: u64 = 1 << 20;

/// A sampled line's weight is this over its length, in integers so that the sums do not depend
/// on which thread scanned which file.
const UNIT: u128 = 1 << 32;

/// A file to search.
#[derive(Debug, Clone)]
pub struct ProvisionalFile {
    /// Relative to the workspace, with `/`.
    pub rel: String,
    /// On disk: a regular file when it was stat'ed (it is opened without another stat).
    pub path: PathBuf,
    /// Its size when it was stat'ed, or as git's index recorded it: it orders the work and
    /// places the samples, and one over [`MAX_FILE_BYTES`] is skipped unread. The file is read
    /// as it is now (and skipped if it is over the limit now).
    pub size: u64,
}

impl ProvisionalFile {
    /// `tracked` with their sizes; what is not a regular file on disk is left out.
    pub fn stat(tracked: Vec<Tracked>) -> Vec<ProvisionalFile> {
        tracked
            .into_iter()
            .filter_map(|t| {
                let meta = std::fs::metadata(&t.path).ok().filter(std::fs::Metadata::is_file)?;
                Some(ProvisionalFile { rel: t.rel, path: t.path, size: meta.len() })
            })
            .collect()
    }
}

/// The `limit` best lines of `files` for `query`, as the line index's search would
/// rank them, optionally only in files whose path starts with `prefix`. A query without any
/// word finds nothing. Unreadable, binary (a NUL byte), non-UTF-8 and oversized files are
/// skipped, as the index skips them.
pub fn search(files: &[ProvisionalFile], query: &str, limit: usize, prefix: Option<&str>) -> Vec<SearchHit> {
    search_with(files, query, limit, prefix, Candidates::Prefiltered, all_cores())
}

/// [`search`] on at most `threads` threads: while the index builds on the other cores, a
/// search must not take them all.
pub fn search_on(
    files: &[ProvisionalFile],
    query: &str,
    limit: usize,
    prefix: Option<&str>,
    threads: usize,
) -> Vec<SearchHit> {
    search_with(files, query, limit, prefix, Candidates::Prefiltered, threads)
}

/// The machine's cores.
pub fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(1, NonZeroUsize::get)
}

/// A built index's statistics for one query, so that lines scored here rank among its own
/// hits: the documents (lines) it holds, their average token count, and each of the query's
/// terms' document frequency, in the order of [`words`].
#[derive(Debug, Clone)]
pub struct IndexStats {
    pub docs: u64,
    pub average: f32,
    pub df: Vec<u64>,
}

/// [`search`] scored with a built index's statistics instead of the scan's: for files whose
/// indexed lines are out of date, read as they are now and merged into the index's answer.
pub fn search_like_index(
    files: &[ProvisionalFile],
    query: &str,
    limit: usize,
    prefix: Option<&str>,
    stats: &IndexStats,
    threads: usize,
) -> Vec<SearchHit> {
    let Some(parsed) = Query::new(query) else { return Vec::new() };
    if limit == 0 || stats.df.len() != parsed.terms.len() {
        return Vec::new();
    }
    let files: Vec<&ProvisionalFile> =
        files.iter().filter(|f| prefix.is_none_or(|p| f.rel.starts_with(p)) && f.size <= MAX_FILE_BYTES).collect();
    if files.is_empty() {
        return Vec::new();
    }
    let partials = scan(&files, &parsed, Candidates::Prefiltered, threads.max(1));
    let top = rank(&files, &parsed, &partials, limit, Some(stats));
    hits(&files, top)
}

/// Which lines are tokenized: those the byte search finds, or (to check it) every line.
#[derive(Clone, Copy, PartialEq)]
enum Candidates {
    Prefiltered,
    #[cfg_attr(not(test), allow(dead_code))]
    Every,
}

fn search_with(
    files: &[ProvisionalFile],
    query: &str,
    limit: usize,
    prefix: Option<&str>,
    candidates: Candidates,
    threads: usize,
) -> Vec<SearchHit> {
    let Some(query) = Query::new(query) else { return Vec::new() };
    if limit == 0 {
        return Vec::new();
    }
    let files: Vec<&ProvisionalFile> =
        files.iter().filter(|f| prefix.is_none_or(|p| f.rel.starts_with(p)) && f.size <= MAX_FILE_BYTES).collect();
    if files.is_empty() {
        return Vec::new();
    }
    let partials = scan(&files, &query, candidates, threads);
    let top = rank(&files, &query, &partials, limit, None);
    hits(&files, top)
}

/// The query's terms, exactly those `terms_query` makes clauses of, and the byte search that
/// finds the lines that may hold them.
struct Query {
    terms: Vec<String>,
    finder: RegexMatcher,
    /// The terms, when all are ASCII: the byte search then looks for them whole, and a match
    /// inside a word can be told apart from a token (see [`Query::may_be_token`]).
    ascii: Option<Vec<String>>,
}

impl Query {
    fn new(text: &str) -> Option<Query> {
        let terms = words(text);
        if terms.is_empty() {
            return None;
        }
        let mut needles: Vec<String> = terms.iter().map(|t| escape(needle(t))).collect();
        needles.sort();
        needles.dedup();
        // Case-insensitive literals: regex-automata searches for their case variants with a
        // vectorized multi-literal search (Teddy), as `rg -i` does. Aho-Corasick's own ASCII
        // case folding has no vectorized prefilter past three distinct first bytes: its DFA
        // then reads every byte, and searches took 1.3 to 2 times as long.
        let finder = RegexMatcherBuilder::new().case_insensitive(true).build_literals(&needles).ok()?;
        let ascii = terms.iter().all(|t| t.is_ascii()).then(|| terms.clone());
        Some(Query { terms, finder, ascii })
    }

    /// Where the first possible term at or after `at` starts.
    fn find(&self, bytes: &[u8], at: usize) -> Option<usize> {
        self.finder.find_at(bytes, at).ok().flatten().map(|m| m.start())
    }

    /// Whether a term found at `at` may be one of the line's tokens. Tokens start and end at
    /// word boundaries, separators and camelCase / snake_case / digit boundaries, never
    /// between a letter and a lowercase letter or between two digits; so `get` in `target`
    /// or `user` in `users` is no token, and their lines (most of those a common part like
    /// `get` finds) need not be tokenized. Only ASCII neighbours are judged: the Unicode rules
    /// are the tokenizer's.
    fn may_be_token(&self, bytes: &[u8], at: usize) -> bool {
        let Some(terms) = &self.ascii else { return true };
        let inside = |a: u8, b: u8| {
            a.is_ascii_alphabetic() && b.is_ascii_lowercase() || a.is_ascii_digit() && b.is_ascii_digit()
        };
        if at > 0 && inside(bytes[at - 1], bytes[at]) {
            return false;
        }
        // Each term that starts here, not just the one the search reported.
        terms.iter().any(|t| {
            let end = at + t.len();
            match bytes.get(at..end) {
                Some(found) if found.eq_ignore_ascii_case(t.as_bytes()) => {
                    end == bytes.len() || !inside(bytes[end - 1], bytes[end])
                }
                // A match through a non-ASCII case variant (the Kelvin sign for `k`).
                Some(found) => !found.is_ascii(),
                None => !bytes[at..].is_ascii(),
            }
        })
    }
}

/// What to look for in the bytes of a line that has `term` among its tokens, ignoring case
/// (Unicode's simple case folding, so `K` finds the Kelvin sign that lowercases to `k`). A
/// non-ASCII term is looked for by its longest ASCII part when it has one: a letter whose
/// lowercase is two characters (`İ`) is not its case fold.
fn needle(term: &str) -> &str {
    if term.is_ascii() {
        return term;
    }
    let ascii = term.split(|c: char| !c.is_ascii()).max_by_key(|s| s.len()).unwrap_or_default();
    if ascii.len() >= 2 {
        ascii
    } else {
        term
    }
}

/// `text` as a regular expression matching it literally (terms hold `.`, `-` and `:`).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A line with at least one of the query's terms.
struct Candidate {
    file: u32,
    line: u32,
    /// Its token count as tantivy stores it (one byte, exact up to 40).
    norm: u8,
}

/// One thread's findings. The sampled sums are in units of `1 / UNIT`.
#[derive(Default)]
struct Partial {
    /// Lines of the files scanned (their newlines, and a last line without one).
    lines: u64,
    /// Per term, the lines holding it.
    df: Vec<u64>,
    found: Vec<Candidate>,
    /// Per found line, each term's count in it (`df.len()` per line).
    tf: Vec<u32>,
    stats: Stats,
}

/// The statistics the index counts over every line and a scan estimates: how many lines have
/// words (the index's documents) and their average token count. Lines are sampled at every
/// `step`-th byte of the files searched, where `step` spreads about [`SAMPLES`] samples over
/// them; a long line is more likely to be sampled, so each sample weighs one over its line's
/// length in bytes. At a step of one byte every line is counted once, exactly.
#[derive(Default, Clone, Copy)]
struct Stats {
    all: u128,
    with_words: u128,
    tokens: u128,
}

impl Stats {
    fn add(&mut self, other: &Stats) {
        self.all += other.all;
        self.with_words += other.with_words;
        self.tokens += other.tokens;
    }
}

/// Scans `files` on `threads` threads, largest first (the last file taken finishes soon after
/// the others).
fn scan(files: &[&ProvisionalFile], query: &Query, candidates: Candidates, threads: usize) -> Vec<Partial> {
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by(|&a, &b| files[b].size.cmp(&files[a].size).then_with(|| files[a].rel.cmp(&files[b].rel)));
    // Where each file starts in the concatenation of all, in `order`: samples fall at the same
    // places whichever thread reads the file.
    let mut offsets = vec![0u64; files.len()];
    let mut total = 0u64;
    for &i in &order {
        offsets[i] = total;
        total += files[i].size;
    }
    let step = if total <= EXACT_BYTES { 1 } else { total.div_ceil(SAMPLES) };
    let next = AtomicUsize::new(0);
    let threads = threads.min(files.len()).max(1);
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut scanner = Scanner::new(query, step, candidates);
                    let mut buf = Vec::new();
                    loop {
                        let n = next.fetch_add(1, atomic::Ordering::Relaxed);
                        let Some(&i) = order.get(n) else { break };
                        if read(files[i], &mut buf) {
                            // The index skips a file that is not UTF-8 or has a NUL byte.
                            if memchr(0, &buf).is_none() {
                                if let Ok(text) = std::str::from_utf8(&buf) {
                                    scanner.file(i as u32, text, offsets[i]);
                                }
                            }
                        }
                    }
                    scanner.out
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    })
}

/// Reads `file` whole into `buf`; false when it cannot be read or is over [`MAX_FILE_BYTES`].
fn read(file: &ProvisionalFile, buf: &mut Vec<u8>) -> bool {
    buf.clear();
    let Ok(f) = std::fs::File::open(&file.path) else { return false };
    // It may have grown, or been replaced by something else, since it was stat'ed.
    match f.metadata() {
        Ok(meta) if meta.is_file() && meta.len() <= MAX_FILE_BYTES => buf.reserve(meta.len() as usize + 1),
        _ => return false,
    }
    f.take(MAX_FILE_BYTES + 1).read_to_end(buf).is_ok() && buf.len() as u64 <= MAX_FILE_BYTES
}

struct Scanner<'q> {
    query: &'q Query,
    step: u64,
    candidates: Candidates,
    tokenizer: CodeTokenizer,
    /// The term counts of the line being tokenized.
    tf: Vec<u32>,
    out: Partial,
}

impl<'q> Scanner<'q> {
    fn new(query: &'q Query, step: u64, candidates: Candidates) -> Self {
        let n = query.terms.len();
        Scanner {
            query,
            step,
            candidates,
            tokenizer: CodeTokenizer::default(),
            tf: vec![0; n],
            out: Partial { df: vec![0; n], ..Partial::default() },
        }
    }

    /// The lines of `text` (file `file`, starting at `offset` of all the files' bytes) that
    /// hold a term, its line count, and its samples.
    fn file(&mut self, file: u32, text: &str, offset: u64) {
        let bytes = text.as_bytes();
        let mut newlines = 0u64;
        if self.candidates == Candidates::Every {
            let mut start = 0;
            for (n, line) in text.split('\n').enumerate() {
                if start < bytes.len() {
                    self.line(file, n as u32 + 1, line);
                }
                start += line.len() + 1;
            }
            newlines = memchr_iter(b'\n', bytes).count() as u64;
        } else {
            // Line numbers come from counting the newlines between one found line and the
            // next, so the whole file is counted once, in passes of the vectorized count.
            // `from` is where the search goes on, `line` the start of the line it is in.
            let (mut from, mut line, mut counted) = (0, 0, 0);
            while from < bytes.len() {
                let Some(at) = self.query.find(bytes, from) else { break };
                let start = memrchr(b'\n', &bytes[line..at]).map_or(line, |i| line + i + 1);
                if !self.query.may_be_token(bytes, at) {
                    (from, line) = (at + 1, start);
                    continue;
                }
                let end = memchr(b'\n', &bytes[at..]).map_or(bytes.len(), |i| at + i);
                newlines += memchr_iter(b'\n', &bytes[counted..start]).count() as u64;
                counted = start;
                self.line(file, newlines as u32 + 1, &text[start..end]);
                (from, line) = (end + 1, end + 1);
            }
            newlines += memchr_iter(b'\n', &bytes[counted.min(bytes.len())..]).count() as u64;
        }
        self.out.lines += newlines + u64::from(bytes.last().is_some_and(|&b| b != b'\n'));
        self.sample(text, offset);
    }

    /// Tokenizes line `n` of `file`, and keeps it when it holds a term.
    fn line(&mut self, file: u32, n: u32, line: &str) {
        let line = line.strip_suffix('\r').unwrap_or(line);
        self.tf.iter_mut().for_each(|c| *c = 0);
        let mut tokens = 0u32;
        let mut stream = self.tokenizer.token_stream(line);
        while stream.advance() {
            tokens += 1;
            let token = &stream.token().text;
            // `words` gives distinct terms: a token is at most one of them.
            if let Some(i) = self.query.terms.iter().position(|t| t == token) {
                self.tf[i] += 1;
            }
        }
        if self.tf.iter().all(|&c| c == 0) {
            return;
        }
        for (df, &tf) in self.out.df.iter_mut().zip(&self.tf) {
            *df += u64::from(tf > 0);
        }
        self.out.tf.extend_from_slice(&self.tf);
        self.out.found.push(Candidate { file, line: n, norm: FieldNormReader::fieldnorm_to_id(tokens) });
    }

    /// Samples the lines at every `step`-th byte of all the files' bytes that fall in `text`.
    fn sample(&mut self, text: &str, offset: u64) {
        let bytes = text.as_bytes();
        let first = ((self.step - offset % self.step) % self.step) as usize;
        // The line of the last sample, which the next sample may fall in too: (end, weight,
        // has words, tokens).
        let mut last: Option<(usize, u128, bool, u32)> = None;
        let mut stats = self.out.stats;
        for p in (first..bytes.len()).step_by(self.step as usize) {
            let (weight, words, tokens) = match last {
                Some((end, w, h, t)) if p <= end => (w, h, t),
                _ => {
                    let start = memrchr(b'\n', &bytes[..p]).map_or(0, |i| i + 1);
                    let end = memchr(b'\n', &bytes[p..]).map_or(bytes.len(), |i| p + i);
                    // Its bytes with its newline: the chance a sample falls in it.
                    let len = (end - start + usize::from(end < bytes.len())) as u128;
                    let line = &text[start..end];
                    let line = line.strip_suffix('\r').unwrap_or(line);
                    let words = has_words(line);
                    let tokens = if words { self.count_tokens(line) } else { 0 };
                    let weight = UNIT / len;
                    last = Some((end, weight, words, tokens));
                    (weight, words, tokens)
                }
            };
            stats.all += weight;
            if words {
                stats.with_words += weight;
                stats.tokens += weight * u128::from(tokens);
            }
        }
        self.out.stats = stats;
    }

    fn count_tokens(&mut self, line: &str) -> u32 {
        let mut stream = self.tokenizer.token_stream(line);
        let mut n = 0;
        while stream.advance() {
            n += 1;
        }
        n
    }
}

/// A found line's place in the ranking: a higher score first, then by path and line, so the
/// order does not depend on which thread found what. `Greater` is worse.
struct Ranked {
    score: f32,
    /// The file's place in path order.
    path: u32,
    line: u32,
    file: u32,
}

impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> Ordering {
        other.score.total_cmp(&self.score).then(self.path.cmp(&other.path)).then(self.line.cmp(&other.line))
    }
}

impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Ranked {}

/// tantivy's idf.
fn idf(df: u64, docs: u64) -> f32 {
    let x = ((docs - df) as f32 + 0.5) / (df as f32 + 0.5);
    (1.0 + x).ln()
}

/// Scores the found lines with the statistics of all the partials (as tantivy scores a
/// BooleanQuery of one should-clause per term: the sum of each present term's BM25) and keeps
/// the `limit` best, best first.
fn rank(
    files: &[&ProvisionalFile],
    query: &Query,
    partials: &[Partial],
    limit: usize,
    index: Option<&IndexStats>,
) -> Vec<Ranked> {
    let n = query.terms.len();
    let mut df = vec![0u64; n];
    let mut lines = 0u64;
    let mut stats = Stats::default();
    for p in partials {
        lines += p.lines;
        stats.add(&p.stats);
        for (a, b) in df.iter_mut().zip(&p.df) {
            *a += b;
        }
    }
    // The index's documents are the lines with words; at least every line found is one.
    let share = if stats.all > 0 { stats.with_words as f64 / stats.all as f64 } else { 1.0 };
    let docs = ((lines as f64 * share).round() as u64).max(df.iter().copied().max().unwrap_or(0)).max(1);
    let average = if stats.with_words > 0 { (stats.tokens as f64 / stats.with_words as f64) as f32 } else { 1.0 };
    let average = average.max(f32::MIN_POSITIVE);
    // A built index's statistics, when given, replace the scan's.
    let (df, docs, average) = match index {
        Some(ix) => {
            let docs = ix.docs.max(ix.df.iter().copied().max().unwrap_or(0)).max(1);
            (ix.df.clone(), docs, ix.average.max(f32::MIN_POSITIVE))
        }
        None => (df, docs, average),
    };
    let weights: Vec<f32> = df.iter().map(|&d| idf(d.min(docs), docs) * (1.0 + K1)).collect();
    let norms: Vec<f32> =
        (0..=255u8).map(|id| K1 * (1.0 - B + B * FieldNormReader::id_to_fieldnorm(id) as f32 / average)).collect();
    let mut by_path: Vec<u32> = (0..files.len() as u32).collect();
    by_path.sort_by(|&a, &b| files[a as usize].rel.cmp(&files[b as usize].rel));
    let mut path = vec![0u32; files.len()];
    for (place, &f) in by_path.iter().enumerate() {
        path[f as usize] = place as u32;
    }
    let mut heap: BinaryHeap<Ranked> = BinaryHeap::with_capacity(limit.min(1 << 16) + 1);
    for p in partials {
        for (c, tf) in p.found.iter().zip(p.tf.chunks_exact(n)) {
            let norm = norms[c.norm as usize];
            let score = tf
                .iter()
                .zip(&weights)
                .filter(|(&t, _)| t > 0)
                .map(|(&t, &w)| {
                    let t = t as f32;
                    w * (t / (t + norm))
                })
                .sum();
            let ranked = Ranked { score, path: path[c.file as usize], line: c.line, file: c.file };
            if heap.len() < limit {
                heap.push(ranked);
            } else if heap.peek().is_some_and(|worst| ranked < *worst) {
                heap.pop();
                heap.push(ranked);
            }
        }
    }
    heap.into_sorted_vec()
}

/// The hits' text and neighbours, read from their files now (as the index does).
fn hits(files: &[&ProvisionalFile], top: Vec<Ranked>) -> Vec<SearchHit> {
    let mut texts: HashMap<u32, String> = HashMap::new();
    top.into_iter()
        .map(|r| {
            let file = files[r.file as usize];
            let text = texts.entry(r.file).or_insert_with(|| std::fs::read_to_string(&file.path).unwrap_or_default());
            let [before, text, after] = lines_around(text, u64::from(r.line));
            SearchHit {
                path: file.rel.clone(),
                line: u64::from(r.line),
                text: text.unwrap_or_default(),
                score: r.score,
                before,
                after,
            }
        })
        .collect()
}

/// Lines `n - 1`, `n` and `n + 1` of `text` (1-based), as the index shows them.
fn lines_around(text: &str, n: u64) -> [Option<String>; 3] {
    let first = n.saturating_sub(2) as usize;
    let mut it = text.lines().skip(first).map(str::to_owned);
    let before = if n >= 2 { it.next() } else { None };
    [before, it.next(), it.next()]
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::search::index::LineIndex;
    use crate::search::tracked::tracked_files;

    /// A git repository in a temporary directory holding `files`, all added to git's index.
    fn repo(files: &[(&str, &[u8])]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("tempdir");
        for (rel, bytes) in files {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(&path, bytes).expect("write");
        }
        let repo = git2::Repository::init(dir.path()).expect("git init");
        let mut index = repo.index().expect("git index");
        index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).expect("git add");
        index.write().expect("write git index");
        dir
    }

    fn files_of(dir: &Path) -> Vec<ProvisionalFile> {
        ProvisionalFile::stat(tracked_files(dir).expect("tracked files"))
    }

    fn places(hits: &[SearchHit]) -> Vec<(String, u64)> {
        hits.iter().map(|h| (h.path.clone(), h.line)).collect()
    }

    const USER_TS: &str = "\
import { getUserName } from './user/name';
export function getUserName(user: User): string {
  // the user's name, or the user name of a guest
  return user.name ?? guestName();
}

const userName = getUserName(current);
function greet() { return `hello ${userName}`; }
";

    const USER_RS: &str = "\
pub fn user_name(user: &User) -> &str {
    &user.name
}

/// Renames a user: the new name replaces the old name.
pub fn rename(user: &mut User, name: String) {
    user.name = name;
}
";

    const NOTES_MD: &str = "\
# Notes

The user name is shown in the header. Names are not unique.
See getUserName for the lookup; a user without a name is a guest.
Nothing else here.\r
Last line without a newline: user";

    fn sample_tree() -> tempfile::TempDir {
        repo(&[
            ("src/user.ts", USER_TS.as_bytes()),
            ("src/user.rs", USER_RS.as_bytes()),
            ("docs/notes.md", NOTES_MD.as_bytes()),
            ("docs/empty.txt", b""),
        ])
    }

    #[test]
    fn ranks_the_lines_of_a_small_tree_as_the_index_does() {
        let tree = sample_tree();
        let state = tempfile::tempdir().expect("tempdir");
        let mut index = LineIndex::open(tree.path(), &state.path().join("index")).expect("open the index");
        index.refresh().expect("build the index");
        let files = files_of(tree.path());
        for query in ["user name", "getUserName", "name", "guest user", "header lookup", "src/user"] {
            for candidates in [Candidates::Prefiltered, Candidates::Every] {
                let want = index.search(query, 50, None).expect("index search");
                let got = search_with(&files, query, 50, None, candidates, all_cores());
                assert!(!want.is_empty(), "{query:?} finds something");
                assert_eq!(places(&got), places(&want), "{query:?}");
                for (g, w) in got.iter().zip(&want) {
                    // The tree is smaller than EXACT_BYTES: its statistics are exact.
                    assert!((g.score - w.score).abs() <= 1e-4 * w.score, "{query:?}: {g:?} vs {w:?}");
                    assert_eq!((&g.text, &g.before, &g.after), (&w.text, &w.before, &w.after), "{query:?}");
                }
            }
        }
    }

    #[test]
    fn a_query_for_an_identifier_finds_its_parts_and_the_whole() {
        let tree = sample_tree();
        let files = files_of(tree.path());
        let hits = search(&files, "getUserName", 3, None);
        // The lines with the whole identifier (and its three parts) come before lines with
        // only `user` or `name`.
        assert!(hits.iter().all(|h| h.text.contains("getUserName")), "{hits:#?}");
        let by_parts = search(&files, "user name", 50, None);
        assert!(by_parts.iter().any(|h| h.path == "src/user.ts" && h.line == 7), "userName is found: {by_parts:#?}");
    }

    #[test]
    fn binary_non_utf8_and_oversized_files_are_skipped() {
        let big = {
            let mut b = b"needle\n".repeat(1 + MAX_FILE_BYTES as usize / 7);
            b.truncate(MAX_FILE_BYTES as usize + 1);
            b
        };
        let tree = repo(&[
            ("text.txt", b"a needle here\n"),
            ("binary.bin", b"a needle\0here\n"),
            ("latin1.txt", b"a needle caf\xe9\n"),
            ("big.txt", &big),
        ]);
        let mut files = files_of(tree.path());
        assert_eq!(files.len(), 4);
        assert_eq!(places(&search(&files, "needle", 10, None)), [("text.txt".to_owned(), 1)]);
        // A file that grew past the cap since it was stat'ed is skipped too.
        files.iter_mut().for_each(|f| f.size = 1);
        assert_eq!(places(&search(&files, "needle", 10, None)), [("text.txt".to_owned(), 1)]);
    }

    #[test]
    fn a_prefix_keeps_only_the_files_under_it() {
        let tree = sample_tree();
        let files = files_of(tree.path());
        let hits = search(&files, "user", 50, Some("docs/"));
        assert!(!hits.is_empty());
        assert!(hits.iter().all(|h| h.path.starts_with("docs/")), "{hits:#?}");
        assert!(search(&files, "user", 50, Some("nowhere/")).is_empty());
    }

    #[test]
    fn the_limit_is_kept_and_equal_scores_go_by_path_then_line() {
        let same = b"alpha beta\nalpha beta\nalpha beta\n";
        let tree = repo(&[("b.txt", same), ("a.txt", same), ("c/a.txt", same)]);
        let files = files_of(tree.path());
        let all = search(&files, "alpha", 100, None);
        assert_eq!(all.len(), 9);
        assert!(all.iter().all(|h| h.score == all[0].score));
        let want: Vec<(String, u64)> =
            ["a.txt", "b.txt", "c/a.txt"].iter().flat_map(|p| (1..=3).map(move |n| (p.to_string(), n))).collect();
        assert_eq!(places(&all), want);
        assert_eq!(places(&search(&files, "alpha", 4, None)), want[..4]);
        assert!(search(&files, "alpha", 0, None).is_empty());
    }

    #[test]
    fn a_query_without_an_indexable_word_finds_nothing() {
        let tree = repo(&[("a.txt", b"x = 1; (a) { b }\n")]);
        let files = files_of(tree.path());
        assert!(search(&files, "x 1 ( ) ; {", 10, None).is_empty());
        assert!(search(&files, "", 10, None).is_empty());
    }

    #[test]
    fn the_tokenizer_decides_which_lines_the_byte_search_found_match() {
        let tree = repo(&[("a.ts", b"const x = getUserName();\nconst y = 2;\n")]);
        let files = files_of(tree.path());
        // A part of the identifier is a token ...
        assert_eq!(places(&search(&files, "user", 10, None)), [("a.ts".to_owned(), 1)]);
        assert_eq!(places(&search(&files, "USERNAME", 10, None)), []);
        // ... but bytes inside it that are no token are not, whatever their case.
        assert!(search(&files, "serna", 10, None).is_empty());
        assert!(search(&files, "etuser", 10, None).is_empty());
    }

    #[test]
    fn the_byte_search_finds_every_line_the_tokenizer_matches() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = files_of(root);
        files.retain(|f| f.rel.starts_with("src/"));
        let text = "Größe GRÖSSE straßeName Ünïcode ÜNÏCODE 語 \u{212A}ernel İstanbul a.b-c\n";
        let tree = repo(&[("u.txt", text.as_bytes())]);
        files.extend(files_of(tree.path()));
        let same = |query: &str| {
            let fast = search_with(&files, query, 10_000, None, Candidates::Prefiltered, all_cores());
            let every = search_with(&files, query, 10_000, None, Candidates::Every, all_cores());
            assert_eq!(places(&fast), places(&every), "{query:?}");
            fast.iter().any(|h| h.path == "u.txt")
        };
        for query in ["search", "index line", "fn", "MAX_FILE_BYTES", "io::Error", "Vec<String>"] {
            same(query);
        }
        // Case differs in bytes outside ASCII; the Kelvin sign lowercases to `k`.
        for query in ["größe", "GRÖSSE", "ünïcode", "straße", "語", "kernel", "İSTANBUL", "a.b-c"] {
            assert!(same(query), "{query:?}");
        }
        // `istanbul` is not the lowercase of `İstanbul` (`i̇stanbul`, with a combining dot).
        assert!(!same("istanbul"));
    }

    #[test]
    fn the_byte_search_finds_every_line_the_tokenizer_matches_in_random_text() {
        // Runs of every kind of character the tokenizer tells apart, and queries made of the
        // lines' own tokens and of pieces of them.
        let alphabet: Vec<char> = "abzABZ019_/.-: (éÉ\u{212A}ſ".chars().collect();
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = move |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let mut text = String::new();
        for _ in 0..400 {
            let len = next(40);
            text.extend((0..len).map(|_| alphabet[next(alphabet.len())]));
            text.push('\n');
        }
        let tree = repo(&[("r.txt", text.as_bytes())]);
        let files = files_of(tree.path());
        let lines: Vec<&str> = text.lines().collect();
        let mut queries: Vec<String> = Vec::new();
        while queries.len() < 120 {
            let line = lines[next(lines.len())];
            let tokens = words(line);
            if !tokens.is_empty() {
                queries.push(tokens[next(tokens.len())].to_uppercase());
            }
            let chars: Vec<char> = line.chars().collect();
            if chars.len() > 2 {
                let from = next(chars.len() - 1);
                let to = from + 1 + next((chars.len() - from).min(6));
                queries.push(chars[from..to.min(chars.len())].iter().collect());
            }
        }
        for query in &queries {
            let fast = search_with(&files, query, 1000, None, Candidates::Prefiltered, all_cores());
            let every = search_with(&files, query, 1000, None, Candidates::Every, all_cores());
            assert_eq!(places(&fast), places(&every), "{query:?}");
        }
    }
}
