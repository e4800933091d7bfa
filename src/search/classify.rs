//! The byte classes of a short ASCII line as bit masks, one bit per byte: which bytes are
//! lowercase or capital letters, digits, underscores, or the separators that join words into
//! a path. The tokenizer finds words and their parts with bit operations on these instead of
//! a branch per byte: on code, where a word ends every few bytes, those branches are
//! mispredicted once a word and cost more than the rest of the tokenizing.

/// Lines up to this many bytes have masks.
pub const MAX: usize = 128;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Masks {
    pub lower: u128,
    pub upper: u128,
    pub digit: u128,
    pub under: u128,
    /// `/ . - :`
    pub sep: u128,
}

impl Masks {
    /// The masks of `line`, at most [`MAX`] bytes long (`None` for a longer one). Bytes
    /// outside ASCII are in no class.
    pub fn of(line: &[u8]) -> Option<Self> {
        if line.len() > MAX {
            return None;
        }
        #[cfg(target_arch = "x86_64")]
        {
            Some(sse2::masks(line))
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            Some(scalar(line))
        }
    }

    /// Bytes of words: letters, digits and underscores.
    pub fn word(&self) -> u128 {
        self.lower | self.upper | self.digit | self.under
    }

    pub fn letter(&self) -> u128 {
        self.lower | self.upper
    }
}

/// The masks one byte at a time (other architectures, and the reference for the tests).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn scalar(line: &[u8]) -> Masks {
    let mut m = Masks::default();
    for (i, &c) in line.iter().enumerate() {
        let bit = 1u128 << i;
        match c {
            b'a'..=b'z' => m.lower |= bit,
            b'A'..=b'Z' => m.upper |= bit,
            b'0'..=b'9' => m.digit |= bit,
            b'_' => m.under |= bit,
            b'/' | b'.' | b'-' | b':' => m.sep |= bit,
            _ => {}
        }
    }
    m
}

#[cfg(target_arch = "x86_64")]
mod sse2 {
    use super::Masks;
    use std::arch::x86_64::*;

    /// Sixteen bytes at a time; the last block is read from a zero-padded copy (a zero byte is
    /// in no class).
    pub fn masks(line: &[u8]) -> Masks {
        let mut m = Masks::default();
        for (block, chunk) in line.chunks(16).enumerate() {
            let mut bytes = [0u8; 16];
            bytes[..chunk.len()].copy_from_slice(chunk);
            // SAFETY: SSE2 is part of the x86_64 baseline; `bytes` is 16 readable bytes and
            // the load is unaligned.
            let b = unsafe { classify(&bytes) };
            let shift = 16 * block;
            m.lower |= u128::from(b[0]) << shift;
            m.upper |= u128::from(b[1]) << shift;
            m.digit |= u128::from(b[2]) << shift;
            m.under |= u128::from(b[3]) << shift;
            m.sep |= u128::from(b[4]) << shift;
        }
        m
    }

    /// Lowercase, capital, digit, underscore and separator bits of 16 bytes.
    unsafe fn classify(bytes: &[u8; 16]) -> [u16; 5] {
        let v = _mm_loadu_si128(bytes.as_ptr().cast());
        // `lo <= v <= hi` as `v - lo <= hi - lo` unsigned: `min(x, limit) == x`.
        let in_range = |lo: u8, hi: u8| {
            let x = _mm_sub_epi8(v, _mm_set1_epi8(lo as i8));
            let limit = _mm_set1_epi8((hi - lo) as i8);
            _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_min_epu8(x, limit), x)) as u16
        };
        let eq = |c: u8| _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8))) as u16;
        [in_range(b'a', b'z'), in_range(b'A', b'Z'), in_range(b'0', b'9'), eq(b'_'), in_range(b'-', b'/') | eq(b':')]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ascii_byte_is_classified_like_the_byte_loop() {
        let all: Vec<u8> = (0u8..=255).collect();
        for chunk in all.chunks(MAX).chain(all.chunks(37)).chain([&all[5..6], &all[..0]]) {
            assert_eq!(Masks::of(chunk), Some(scalar(chunk)), "{chunk:?}");
        }
        let line = b"fn get_user(x: &Path) -> io::Result<U8> { /* 0-9 */ }";
        let m = Masks::of(line).expect("masks");
        assert_eq!(m.under, 1 << 6);
        assert_eq!(m.upper.count_ones(), 3);
    }

    #[test]
    fn long_lines_have_none() {
        assert!(Masks::of(&[b'a'; MAX + 1]).is_none());
        assert_eq!(Masks::of("é".as_bytes()), Some(Masks::default()));
    }
}
