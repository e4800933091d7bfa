//! Small text helpers shared by the verbs: cutting at a character boundary, reading a file
//! that must be text.

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_never_splits_a_character() {
        assert_eq!(head("aé", 2), "a");
        assert_eq!(head("aé", 3), "aé");
        assert_eq!(head("abc", 10), "abc");
        assert_eq!(head("€€", 4), "€");
    }
}
