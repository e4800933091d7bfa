//! A code-aware tokenizer: identifiers and paths are indexed whole and split into their words,
//! so `getUserName`, `get_user_name` and `src/user/name.rs` all match a search for `user name`,
//! and a search for the whole identifier or path matches too. Everything is lowercased.
//!
//! Indexing a large repository runs this on tens of millions of lines, so it allocates nothing
//! per line (the tokenizer keeps its tokens and their strings and reuses them) and reads ASCII
//! lines, nearly all of them, as bytes.

use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::tokenizer::{Token, TokenStream, Tokenizer};
use tantivy::Term;

use super::classify::Masks;

#[derive(Clone, Default)]
pub struct CodeTokenizer {
    tokens: Vec<Token>,
    len: usize,
    parts: Vec<(usize, usize)>,
}

pub struct CodeTokenStream<'a> {
    tokens: &'a mut [Token],
    next: usize,
}

impl Tokenizer for CodeTokenizer {
    type TokenStream<'a> = CodeTokenStream<'a>;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> CodeTokenStream<'a> {
        self.fill(text);
        CodeTokenStream { tokens: &mut self.tokens[..self.len], next: 0 }
    }
}

impl TokenStream for CodeTokenStream<'_> {
    fn advance(&mut self) -> bool {
        self.next += 1;
        self.next <= self.tokens.len()
    }
    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }
    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

/// Byte kinds for ASCII: word bytes (`[A-Za-z0-9_]`) by kind, the path separators
/// `/ . - :` that join words into a path token, and everything else.
const OTHER: u8 = 0;
const LOWER: u8 = 1;
const UPPER: u8 = 2;
const DIGIT: u8 = 3;
const UNDER: u8 = 4;
const SEP: u8 = 8;
const WORDISH: u8 = 7;
static KIND: [u8; 256] = {
    let mut t = [OTHER; 256];
    let mut c = 0;
    while c < 128 {
        let b = c as u8;
        t[c] = if b.is_ascii_lowercase() {
            LOWER
        } else if b.is_ascii_uppercase() {
            UPPER
        } else if b.is_ascii_digit() {
            DIGIT
        } else if b == b'_' {
            UNDER
        } else if matches!(b, b'/' | b'.' | b'-' | b':') {
            SEP
        } else {
            OTHER
        };
        c += 1;
    }
    t
};

/// Longest token indexed; longer runs (minified code, base64) are cut into words only. Tokens
/// of one ASCII character are not indexed either (see [`CodeTokenizer::push`]).
const MAX_TOKEN: usize = 64;

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

fn is_path(c: char) -> bool {
    is_word(c) || matches!(c, '/' | '.' | '-' | ':')
}

/// The character at byte `i` of `text` and its length in bytes (ASCII without decoding).
fn char_at(text: &str, i: usize) -> (char, usize) {
    let b = text.as_bytes()[i];
    if b.is_ascii() {
        return (b as char, 1);
    }
    let c = text[i..].chars().next().unwrap_or(char::REPLACEMENT_CHARACTER);
    (c, c.len_utf8())
}

impl CodeTokenizer {
    /// Tokenizes `text` into the reused buffer: each run of word characters and path separators
    /// whole (when it has separators), each word (`[A-Za-z0-9_]+`) whole, and each word's
    /// camelCase / snake_case / digit parts. A word starting with a digit is a number
    /// (`0x1F00`, `1024UL`) and stays whole: its parts would be noise.
    fn fill(&mut self, text: &str) {
        self.len = 0;
        if text.is_ascii() {
            match Masks::of(text.as_bytes()) {
                Some(masks) => self.fill_masked(text, &masks),
                None => self.fill_ascii(text),
            }
        } else {
            self.fill_unicode(text);
        }
    }

    /// [`Self::fill`] for ASCII text (nearly every line of code): a byte-kind table instead of
    /// decoding characters, loops of one test per byte (the branches that depend on the text
    /// are what costs, so each byte meets as few as possible), and words without parts, most
    /// of them, recognized in one pass.
    fn fill_ascii(&mut self, text: &str) {
        let b = text.as_bytes();
        let n = b.len();
        let mut i = 0;
        loop {
            // Outside a run, or separators before its first word.
            while i < n && KIND[b[i] as usize] & WORDISH == 0 {
                i += 1;
            }
            if i == n {
                return;
            }
            // The run: words joined by separators, from its first word byte to its last.
            let start = i;
            let mut kinds = 0;
            while i < n && KIND[b[i] as usize] != OTHER {
                kinds |= KIND[b[i] as usize];
                i += 1;
            }
            let mut end = i;
            while KIND[b[end - 1] as usize] == SEP {
                end -= 1; // stops at the run's first byte, a word byte
            }
            if kinds & SEP == 0 || !b[start..end].iter().any(|&c| KIND[c as usize] == SEP) {
                self.word_ascii(text, start, end);
                continue;
            }
            self.push_ascii(text, start, end);
            let mut w = start;
            while w < end {
                let word = w;
                while w < end && KIND[b[w] as usize] != SEP {
                    w += 1;
                }
                self.word_ascii(text, word, w);
                while w < end && KIND[b[w] as usize] == SEP {
                    w += 1;
                }
            }
        }
    }

    /// A word (`[A-Za-z0-9_]+`): whole when it has parts, then its parts.
    fn word_ascii(&mut self, text: &str, from: usize, to: usize) {
        let b = &text.as_bytes()[from..to];
        let first = KIND[b[0] as usize];
        if first == DIGIT {
            self.push_ascii(text, from, to);
            return;
        }
        // Lowercase, capitals, or capitalized: no parts.
        let (mut seen, mut capitals) = (0u8, 0usize);
        for &c in b {
            let k = KIND[c as usize];
            seen |= 1 << k;
            capitals += usize::from(k == UPPER);
        }
        let whole = seen == 1 << LOWER
            || seen == 1 << UPPER
            || seen == (1 << LOWER | 1 << UPPER) && capitals == 1 && first == UPPER;
        if whole {
            self.push_ascii(text, from, to);
            return;
        }
        let mut parts = std::mem::take(&mut self.parts);
        parts.clear();
        let mut start = (first != UNDER).then_some(0);
        let mut prev = first;
        for j in 1..b.len() {
            let k = KIND[b[j] as usize];
            if k == UNDER {
                if let Some(s) = start.take() {
                    parts.push((s, j));
                }
            } else if let Some(s) = start {
                let boundary = match (prev, k) {
                    (LOWER, UPPER) | (LOWER | UPPER, DIGIT) | (DIGIT, LOWER | UPPER) => true,
                    // The end of an acronym: `HTTPServer` splits before the S.
                    (UPPER, UPPER) => b.get(j + 1).is_some_and(|&n| KIND[n as usize] == LOWER),
                    _ => false,
                };
                if boundary {
                    parts.push((s, j));
                    start = Some(j);
                }
            } else {
                start = Some(j);
            }
            prev = k;
        }
        if let Some(s) = start {
            parts.push((s, b.len()));
        }
        if parts.len() > 1 || parts.first().is_some_and(|&p| p != (0, b.len())) {
            self.push_ascii(text, from, to);
        }
        for &(x, y) in &parts {
            self.push_ascii(text, from + x, from + y);
        }
        self.parts = parts;
    }

    /// [`Self::fill`] for a short ASCII line, from its byte classes: runs of word bytes and
    /// separators, their words and the words' parts are found with bit operations.
    fn fill_masked(&mut self, text: &str, m: &Masks) {
        let word = m.word();
        let mut runs = word | m.sep;
        while runs != 0 {
            let run = first_run(runs);
            runs &= !run;
            let words = word & run;
            if words == 0 {
                continue; // separators only
            }
            if (words & !(words << 1)).count_ones() == 1 {
                self.word_masked(text, m, words);
                continue;
            }
            // A path: whole, from its first word byte to its last, then its words.
            self.push_ascii(text, words.trailing_zeros() as usize, 128 - words.leading_zeros() as usize);
            let mut rest = words;
            while rest != 0 {
                let w = first_run(rest);
                rest &= !w;
                self.word_masked(text, m, w);
            }
        }
    }

    /// [`Self::word_ascii`] from the byte classes: `w` has the bits of one word.
    fn word_masked(&mut self, text: &str, m: &Masks, w: u128) {
        let (from, to) = (w.trailing_zeros() as usize, 128 - w.leading_zeros() as usize);
        if m.digit & w & (1 << from) != 0 {
            self.push_ascii(text, from, to); // a number
            return;
        }
        // Lowercase, capitals, or capitalized: no parts.
        if w & (m.digit | m.under) == 0 && (w & m.upper == 0 || w & m.lower == 0 || w & m.upper == 1 << from) {
            self.push_ascii(text, from, to);
            return;
        }
        // Parts: runs without underscores, split at lower-to-upper, at the end of an acronym
        // (`HTTPServer` before the S) and between letters and digits.
        let (lower, upper, digit, letter) = (m.lower, m.upper, m.digit, m.letter());
        let inner = w & !m.under;
        let boundary = upper & lower << 1 | digit & letter << 1 | letter & digit << 1 | upper & upper << 1 & lower >> 1;
        let starts = (inner & !(inner << 1)) | (boundary & inner);
        let parts = starts.count_ones();
        if parts > 1 || parts == 1 && inner != w {
            self.push_ascii(text, from, to);
        }
        let ends = !inner | starts;
        let mut rest = starts;
        while rest != 0 {
            let start = rest.trailing_zeros();
            rest &= rest - 1;
            let end = (ends & !ones(start + 1)).trailing_zeros();
            self.push_ascii(text, start as usize, end as usize);
        }
    }

    /// [`Self::push`] for ASCII: bytes `from..to` of `text` are known to be ASCII.
    fn push_ascii(&mut self, text: &str, from: usize, to: usize) {
        if !(2..=MAX_TOKEN).contains(&(to - from)) {
            return;
        }
        let token = self.next_token(from, to);
        token.text.push_str(&text[from..to]);
        token.text.make_ascii_lowercase();
    }

    /// The next token slot, reused from earlier lines, with its offsets set and its text empty.
    fn next_token(&mut self, from: usize, to: usize) -> &mut Token {
        if self.len == self.tokens.len() {
            self.tokens.push(Token::default());
        }
        let token = &mut self.tokens[self.len];
        token.offset_from = from;
        token.offset_to = to;
        token.position = self.len;
        token.text.clear();
        self.len += 1;
        token
    }

    fn fill_unicode(&mut self, text: &str) {
        let mut i = 0;
        while i < text.len() {
            let (c, n) = char_at(text, i);
            if !is_path(c) {
                i += n;
                continue;
            }
            let start = i;
            i += n;
            while i < text.len() {
                let (c, n) = char_at(text, i);
                if !is_path(c) {
                    break;
                }
                i += n;
            }
            let run = text[start..i].trim_matches(|c: char| !is_word(c));
            if run.is_empty() {
                continue;
            }
            let run_from = run.as_ptr() as usize - text.as_ptr() as usize;
            if run.contains(|c: char| !is_word(c)) {
                self.push(text, run_from, run_from + run.len());
            }
            for part in run.split(|c: char| !is_word(c)) {
                if part.is_empty() {
                    continue;
                }
                let w = part.as_ptr() as usize - text.as_ptr() as usize;
                if part.starts_with(|c: char| c.is_ascii_digit()) {
                    self.push(text, w, w + part.len());
                    continue;
                }
                let mut parts = std::mem::take(&mut self.parts);
                sub_words(part, &mut parts);
                if parts.len() > 1 || parts.first().is_some_and(|&p| p != (0, part.len())) {
                    self.push(text, w, w + part.len());
                }
                for &(a, b) in &parts {
                    self.push(text, w + a, w + b);
                }
                self.parts = parts;
            }
        }
    }

    fn push(&mut self, text: &str, from: usize, to: usize) {
        let t = &text[from..to];
        // A single ASCII letter or digit is in most lines: as a term it would rank nothing and
        // cost an index entry per line.
        if t.len() > MAX_TOKEN || t.len() <= 1 && t.is_ascii() {
            return;
        }
        let token = self.next_token(from, to);
        if t.is_ascii() {
            token.text.push_str(t);
            token.text.make_ascii_lowercase();
        } else {
            token.text.extend(t.chars().flat_map(char::to_lowercase));
        }
    }
}

/// Byte ranges of the parts of a word: split at `_`, at lower-to-upper (`userName`), at the
/// end of an acronym (`HTTPServer` -> HTTP, Server) and between letters and digits.
fn sub_words(word: &str, parts: &mut Vec<(usize, usize)>) {
    parts.clear();
    let mut start: Option<usize> = None;
    let mut prev = '_';
    let mut chars = word.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c == '_' {
            if let Some(s) = start.take() {
                parts.push((s, i));
            }
            prev = c;
            continue;
        }
        let Some(s) = start else {
            start = Some(i);
            prev = c;
            continue;
        };
        let next = chars.peek().map(|x| x.1);
        let boundary = (prev.is_lowercase() && c.is_uppercase())
            || (prev.is_uppercase() && c.is_uppercase() && next.is_some_and(char::is_lowercase))
            || (prev.is_alphabetic() && c.is_ascii_digit())
            || (prev.is_ascii_digit() && c.is_alphabetic());
        if boundary {
            parts.push((s, i));
            start = Some(i);
        }
        prev = c;
    }
    if let Some(s) = start {
        parts.push((s, word.len()));
    }
}

/// The distinct lowercased tokens of `text`, in order of first appearance.
pub fn words(text: &str) -> Vec<String> {
    let mut t = CodeTokenizer::default();
    t.fill(text);
    let mut out: Vec<String> = Vec::with_capacity(t.len);
    for token in &t.tokens[..t.len] {
        if !out.contains(&token.text) {
            out.push(token.text.clone());
        }
    }
    out
}

/// Whether `line` can hold a token at all (lines of only punctuation and blanks cannot match
/// any query, so the index skips them).
pub fn has_words(line: &str) -> bool {
    line.bytes().any(|b| b.is_ascii_alphanumeric() || !b.is_ascii())
}

/// The lowest run of set bits of `bits` (not zero).
fn first_run(bits: u128) -> u128 {
    let start = bits.trailing_zeros();
    ones((!(bits >> start)).trailing_zeros()) << start
}

/// The `n` lowest bits.
fn ones(n: u32) -> u128 {
    u128::MAX.checked_shr(128 - n).filter(|_| n > 0).unwrap_or(0)
}

/// A BM25 query for free text: every token of `text` (whole identifiers and their parts) as
/// a term that may match in any of `fields`, scored together. `None` when `text` has no
/// token. Query syntax is not interpreted: code is full of `:`, `(` and quotes, and an agent
/// pasting an identifier or a line expects it to be looked up, not parsed.
pub fn terms_query(fields: &[Field], text: &str, record: IndexRecordOption) -> Option<Box<dyn Query>> {
    let words = words(text);
    if words.is_empty() {
        return None;
    }
    let clauses: Vec<(Occur, Box<dyn Query>)> = words
        .iter()
        .flat_map(|w| fields.iter().map(move |f| (*f, w)))
        .map(|(f, w)| {
            let q: Box<dyn Query> = Box::new(TermQuery::new(Term::from_field_text(f, w), record));
            (Occur::Should, q)
        })
        .collect();
    Some(Box::new(BooleanQuery::new(clauses)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(s: &str) -> Vec<String> {
        let mut t = CodeTokenizer::default();
        let mut stream = t.token_stream(s);
        let mut out = Vec::new();
        while stream.advance() {
            out.push(stream.token().text.clone());
        }
        out
    }

    #[test]
    fn camel_case_is_kept_whole_and_split() {
        assert_eq!(texts("getUserName()"), ["getusername", "get", "user", "name"]);
        assert_eq!(texts("HTTPServer2"), ["httpserver2", "http", "server"]);
    }

    #[test]
    fn snake_case_is_kept_whole_and_split() {
        assert_eq!(texts("max_line_bytes = 3"), ["max_line_bytes", "max", "line", "bytes"]);
        assert_eq!(texts("__init__"), ["__init__", "init"]);
    }

    #[test]
    fn paths_are_kept_whole_and_split_into_segments() {
        assert_eq!(texts("see src/verbs/files.rs."), ["see", "src/verbs/files.rs", "src", "verbs", "files", "rs"]);
    }

    #[test]
    fn numbers_are_kept_whole() {
        assert_eq!(texts("x = 0x1F00 + 1024UL; v2 = 3 + 42"), ["0x1f00", "1024ul", "v2", "42"]);
    }

    #[test]
    fn plain_words_are_lowercased_once() {
        assert_eq!(texts("Hello, world"), ["hello", "world"]);
    }

    #[test]
    fn non_ascii_words_are_split_and_lowercased() {
        assert_eq!(texts("Größe = straßeName; ünïcode"), ["größe", "straßename", "straße", "name", "ünïcode"]);
    }

    /// The tokens (text and place) of `line` by the mask path, the ASCII byte loop and the
    /// Unicode path are the same.
    fn assert_paths_agree(line: &str) {
        let texts = |fill: &dyn Fn(&mut CodeTokenizer)| {
            let mut t = CodeTokenizer::default();
            fill(&mut t);
            t.tokens[..t.len].iter().map(|t| (t.text.clone(), t.offset_from, t.offset_to)).collect::<Vec<_>>()
        };
        let unicode = texts(&|t| t.fill_unicode(line));
        assert_eq!(texts(&|t| t.fill_ascii(line)), unicode, "byte loop: {line:?}");
        if let Some(m) = Masks::of(line.as_bytes()) {
            assert_eq!(texts(&|t| t.fill_masked(line, &m)), unicode, "masks: {line:?}");
        }
    }

    #[test]
    fn the_ascii_path_tokenizes_like_the_unicode_path() {
        let lines = [
            "static int foo_probe(struct platform_device *pdev) { return -ENODEV; }",
            "import { getUserName } from './user/name.ts'; // HTTPServer2 x86_64 __init__",
            "see https://example.com/a-b/c_d.html?x=1 and ../up/./dir/ v1.2.3 _x_ a__b",
            "ABCDef aB Ab AB 9a a9 99 __ _ ::std::io::Result<()> -- // .. : 0x1F 1.5e3 x86_64",
        ];
        for line in lines {
            assert_paths_agree(line);
        }
    }

    #[test]
    fn the_ascii_path_tokenizes_like_the_unicode_path_on_any_mix_of_byte_kinds() {
        // Runs of every byte kind in every order: what the ASCII path's shortcuts must agree on.
        let alphabet = b"abzABZ019_/.-: (x";
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..20_000 {
            // Mostly short lines; some reach the end of the masks, and some are longer.
            let len = (seed % [24, 140, 300][n % 3]) as usize;
            let mut line = String::with_capacity(len);
            for _ in 0..len {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                line.push(alphabet[(seed % alphabet.len() as u64) as usize] as char);
            }
            assert_paths_agree(&line);
        }
    }

    #[test]
    fn a_reused_tokenizer_forgets_the_previous_line() {
        let mut t = CodeTokenizer::default();
        t.fill("many words on this first line");
        t.fill("short");
        assert_eq!(t.tokens[..t.len].iter().map(|t| t.text.as_str()).collect::<Vec<_>>(), ["short"]);
    }

    #[test]
    fn single_ascii_characters_are_not_tokens() {
        assert_eq!(texts("for (i = 0; i < n; i++) p->x = 1;"), ["for"]);
        assert_eq!(texts("a.b"), ["a.b"]);
        assert_eq!(texts("語"), ["語"]);
    }

    #[test]
    fn overlong_runs_are_cut_into_words() {
        let long = "a".repeat(70);
        assert_eq!(texts(&format!("{long} ok")), ["ok"]);
    }

    #[test]
    fn punctuation_only_lines_have_no_words() {
        assert!(!has_words("  });"));
        assert!(!has_words(" */"));
        assert!(has_words("} else {"));
        assert!(has_words("  é"));
    }

    #[test]
    fn words_are_distinct_and_in_order() {
        assert_eq!(words("user user_name"), ["user", "user_name", "name"]);
    }
}
