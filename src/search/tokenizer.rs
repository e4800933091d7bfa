//! A code-aware tokenizer: identifiers and paths are indexed whole and split into their words,
//! so `getUserName`, `get_user_name` and `src/user/name.rs` all match a search for `user name`,
//! and a search for the whole identifier or path matches too. Everything is lowercased.

use tantivy::tokenizer::{Token, TokenStream, Tokenizer};

#[derive(Clone, Default)]
pub struct CodeTokenizer;

pub struct CodeTokenStream {
    tokens: Vec<Token>,
    next: usize,
}

impl Tokenizer for CodeTokenizer {
    type TokenStream<'a> = CodeTokenStream;
    fn token_stream<'a>(&'a mut self, text: &'a str) -> CodeTokenStream {
        CodeTokenStream { tokens: tokens(text), next: 0 }
    }
}

impl TokenStream for CodeTokenStream {
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

/// Longest token indexed; longer runs (minified code, base64) are cut into words only.
const MAX_TOKEN: usize = 64;

/// The tokens of `text`: each run of word characters and path separators whole (when it has
/// separators), each word (`[A-Za-z0-9_]+`) whole, and each word's camelCase / snake_case /
/// digit parts.
pub fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    let mut position = 0;
    let push = |from: usize, to: usize, out: &mut Vec<Token>, position: &mut usize| {
        let t = &text[from..to];
        if t.is_empty() || t.len() > MAX_TOKEN {
            return;
        }
        out.push(Token {
            offset_from: from,
            offset_to: to,
            position: *position,
            text: t.to_lowercase(),
            position_length: 1,
        });
        *position += 1;
    };
    let is_word = |c: char| c.is_alphanumeric() || c == '_';
    let is_path = |c: char| is_word(c) || matches!(c, '/' | '.' | '-' | ':');
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        if !is_path(chars[i].1) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_path(chars[i].1) {
            i += 1;
        }
        let (from, to) = (chars[start].0, chars.get(i).map_or(text.len(), |c| c.0));
        let run = &text[from..to];
        let run = run.trim_matches(|c: char| !is_word(c));
        let run_from = from + text[from..to].find(run).unwrap_or(0);
        if run.contains(|c: char| !is_word(c)) {
            push(run_from, run_from + run.len(), &mut out, &mut position);
        }
        // The words inside the run.
        let mut w = run_from;
        for part in run.split(|c: char| !is_word(c)) {
            if !part.is_empty() {
                let parts = sub_words(part);
                if parts.len() > 1 {
                    push(w, w + part.len(), &mut out, &mut position);
                }
                for (a, b) in parts {
                    push(w + a, w + b, &mut out, &mut position);
                }
            }
            w += part.len() + 1;
        }
    }
    out
}

/// Byte ranges of the parts of a word: split at `_`, at lower-to-upper (`userName`), at the
/// end of an acronym (`HTTPServer` -> HTTP, Server) and between letters and digits.
fn sub_words(word: &str) -> Vec<(usize, usize)> {
    let chars: Vec<(usize, char)> = word.char_indices().collect();
    let mut parts = Vec::new();
    let mut start: Option<usize> = None;
    for (k, &(i, c)) in chars.iter().enumerate() {
        if c == '_' {
            if let Some(s) = start.take() {
                parts.push((s, i));
            }
            continue;
        }
        let Some(s) = start else {
            start = Some(i);
            continue;
        };
        let prev = chars[k - 1].1;
        let next = chars.get(k + 1).map(|x| x.1);
        let boundary = (prev.is_lowercase() && c.is_uppercase())
            || (prev.is_uppercase() && c.is_uppercase() && next.is_some_and(char::is_lowercase))
            || (prev.is_alphabetic() && c.is_ascii_digit())
            || (prev.is_ascii_digit() && c.is_alphabetic());
        if boundary && prev != '_' {
            parts.push((s, i));
            start = Some(i);
        }
    }
    if let Some(s) = start {
        parts.push((s, word.len()));
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(s: &str) -> Vec<String> {
        tokens(s).into_iter().map(|t| t.text).collect()
    }

    #[test]
    fn camel_case_is_kept_whole_and_split() {
        assert_eq!(texts("getUserName()"), ["getusername", "get", "user", "name"]);
        assert_eq!(texts("HTTPServer2"), ["httpserver2", "http", "server", "2"]);
    }

    #[test]
    fn snake_case_is_kept_whole_and_split() {
        assert_eq!(texts("max_line_bytes = 3"), ["max_line_bytes", "max", "line", "bytes", "3"]);
    }

    #[test]
    fn paths_are_kept_whole_and_split_into_segments() {
        assert_eq!(texts("see src/verbs/files.rs."), ["see", "src/verbs/files.rs", "src", "verbs", "files", "rs"]);
    }

    #[test]
    fn plain_words_are_lowercased_once() {
        assert_eq!(texts("Hello, world"), ["hello", "world"]);
    }
}
