//! Small text helpers shared by the verbs: cutting at a character boundary, reading a file
//! that must be text, showing a stranger's text to a person without letting it act on the
//! screen.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::path::Path;

/// The longest prefix of `s` that is at most `max` bytes and ends on a character boundary.
pub fn head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Why a file could not be read as text.
#[derive(Debug)]
pub enum ReadTextError {
    Io(std::io::Error),
    /// It is not UTF-8; `size` is its length in bytes.
    NotText {
        size: u64,
    },
}

/// A whole file as UTF-8 text.
pub fn read_text(path: &Path) -> Result<String, ReadTextError> {
    let bytes = std::fs::read(path).map_err(ReadTextError::Io)?;
    let size = bytes.len() as u64;
    String::from_utf8(bytes).map_err(|_| ReadTextError::NotText { size })
}

/// `s` as a person can read it for what it is: each character that is not seen as itself is
/// written as an escape. Those are the controls (C0, DEL, C1: `ESC [2K` and `\r` erase and
/// rewrite the line a terminal shows, `\n` fakes a line of its own) and the invisible format
/// characters (Unicode's category Cf: bidi embeddings, overrides and isolates reorder what
/// follows, zero-width spaces and joiners and the BOM hide in a word), plus the line and
/// paragraph separators U+2028 and U+2029 (a host's dialog breaks the line there). Everything
/// else, `é` and emoji included, is kept as is.
///
/// The escape is JSON's: `\u` and 4 hex digits (`\u001b`, `\u202e`); a character past the
/// BMP (the tag characters U+E0000.., a few others) is written as its UTF-16 pair
/// (`\udb40\udc01`). A backslash is kept as is: this is for a person to read, never parsed
/// back, and a literal `\u202e` someone typed shows as the harmless text it is.
pub fn escape_invisible(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_invisible) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if is_invisible(c) {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{unit:04x}");
            }
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether `c` is a control or an invisible format character (see [`escape_invisible`]). The
/// Cf list is Unicode 15.1's (std has no table of categories).
fn is_invisible(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{ad}'
                | '\u{600}'..='\u{605}'
                | '\u{61c}'
                | '\u{6dd}'
                | '\u{70f}'
                | '\u{890}'..='\u{891}'
                | '\u{8e2}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206f}'
                | '\u{feff}'
                | '\u{fff9}'..='\u{fffb}'
                | '\u{110bd}'
                | '\u{110cd}'
                | '\u{13430}'..='\u{1343f}'
                | '\u{1bca0}'..='\u{1bca3}'
                | '\u{1d173}'..='\u{1d17a}'
                | '\u{e0001}'
                | '\u{e0020}'..='\u{e007f}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_and_invisible_format_characters_are_escaped_and_nothing_else() {
        // C0 (the line-erasing sequence, a newline, a NUL), DEL, C1 (CSI, NEL).
        assert_eq!(escape_invisible("a\u{1b}[2K\rb"), "a\\u001b[2K\\u000db");
        assert_eq!(escape_invisible("x\ny\0"), "x\\u000ay\\u0000");
        assert_eq!(escape_invisible("\u{7f}"), "\\u007f");
        assert_eq!(escape_invisible("\u{9b}31m\u{85}"), "\\u009b31m\\u0085");
        // Bidi overrides and isolates, zero-width characters, the BOM, the line separator.
        assert_eq!(escape_invisible("npx \u{202e}gpj.exe"), "npx \\u202egpj.exe");
        assert_eq!(escape_invisible("\u{202a}\u{202d}\u{2066}\u{2069}"), "\\u202a\\u202d\\u2066\\u2069");
        assert_eq!(escape_invisible("s\u{200b}h\u{200d}\u{200f}"), "s\\u200bh\\u200d\\u200f");
        assert_eq!(escape_invisible("\u{feff}x\u{2028}"), "\\ufeffx\\u2028");
        assert_eq!(escape_invisible("soft\u{ad}hyphen"), "soft\\u00adhyphen");
        // Past the BMP: a tag character, as its UTF-16 pair.
        assert_eq!(escape_invisible("\u{e0001}"), "\\udb40\\udc01");
    }

    #[test]
    fn plain_text_accents_and_emoji_are_kept_as_they_are() {
        for kept in ["npx -y @scope/server", "café", "日本語", "🦀 ok", "a\\u001b is text", "tab-free"] {
            assert_eq!(escape_invisible(kept), kept);
            assert!(matches!(escape_invisible(kept), Cow::Borrowed(_)), "no copy when nothing changes");
        }
    }

    #[test]
    fn a_head_never_splits_a_character() {
        assert_eq!(head("aé", 2), "a");
        assert_eq!(head("aé", 3), "aé");
        assert_eq!(head("abc", 10), "abc");
        assert_eq!(head("€€", 4), "€");
    }
}
