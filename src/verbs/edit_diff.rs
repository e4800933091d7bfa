//! The unified diff of an exact replacement, made from the places that changed.
//!
//! edit_file knows where every replacement is, so it diffs only a window of whole lines around
//! each (three lines of context, windows that meet merged into one), and numbers the hunks from
//! the windows' places in the file. The cost is that of the changed lines, not of the file: a
//! diff of a one-line edit in a 100 MB file diffs a few lines.

use std::time::{Duration, Instant};

use similar::{ChangeTag, TextDiff};

const CONTEXT: usize = 3;
/// How long finding the fewest changed lines may take, for all the windows of one edit together.
/// Past it the diff is still exact, but may show more lines removed and added than it had to (a
/// replacement on every line of a large file, say).
const MINIMIZE_FOR: Duration = Duration::from_millis(300);

/// Lines a window reaches past an occurrence: the context, and one more each side, since a
/// replacement that adds or removes a newline joins or splits the lines next to it.
const MARGIN: usize = CONTEXT + 2;

/// The diff of `before` -> `after`, where `after` is `before` with the `old_len` bytes at each
/// of `starts` (ascending, not overlapping) replaced by `new_len` bytes. `label` names the file
/// in the `---`/`+++` header.
pub fn replacement_diff(
    before: &str,
    after: &str,
    starts: &[usize],
    old_len: usize,
    new_len: usize,
    label: &str,
) -> String {
    let mut out = format!("--- a/{label}\n+++ b/{label}\n");
    let shift = new_len as isize - old_len as isize;
    // Windows of whole lines in `before`, with the occurrences each holds.
    let mut windows: Vec<(usize, usize, usize, usize)> = Vec::new(); // (lo, hi, first occurrence, occurrences)
    for (i, &s) in starts.iter().enumerate() {
        let lo = back_lines(before, line_start(before, s), MARGIN);
        let hi = forward_lines(before, line_end(before, s + old_len.max(1) - 1), MARGIN);
        match windows.last_mut() {
            Some(w) if lo <= w.1 => {
                w.1 = hi.max(w.1);
                w.3 += 1;
            }
            _ => windows.push((lo, hi, i, 1)),
        }
    }
    let deadline = Instant::now() + MINIMIZE_FOR;
    let (mut b_at, mut b_line, mut a_at, mut a_line) = (0usize, 1usize, 0usize, 1usize);
    for (lo, hi, first, count) in windows {
        // Outside the occurrences nothing moved but by the occurrences before it.
        let a_lo = (lo as isize + first as isize * shift) as usize;
        let a_hi = (hi as isize + (first + count) as isize * shift) as usize;
        b_line += newlines(&before[b_at..lo]);
        a_line += newlines(&after[a_at..a_lo]);
        (b_at, a_at) = (lo, a_lo);
        hunks(&mut out, &before[lo..hi], &after[a_lo..a_hi], b_line, a_line, deadline);
    }
    out
}

/// Writes the hunks of one window, whose first lines are `old_line` and `new_line`.
fn hunks(out: &mut String, old: &str, new: &str, old_line: usize, new_line: usize, deadline: Instant) {
    let diff = TextDiff::configure().deadline(deadline).diff_lines(old, new);
    for group in diff.grouped_ops(CONTEXT) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else { continue };
        let (o, n) = (first.old_range().start..last.old_range().end, first.new_range().start..last.new_range().end);
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            range(old_line + o.start, o.len()),
            range(new_line + n.start, n.len())
        ));
        for op in &group {
            for change in diff.iter_changes(op) {
                out.push(match change.tag() {
                    ChangeTag::Delete => '-',
                    ChangeTag::Insert => '+',
                    ChangeTag::Equal => ' ',
                });
                out.push_str(change.value());
                if change.missing_newline() {
                    out.push_str("\n\\ No newline at end of file\n");
                }
            }
        }
    }
}

/// A hunk range as unified diffs write it: `start` alone for one line, `start-1,0` for none.
fn range(start: usize, len: usize) -> String {
    match len {
        1 => start.to_string(),
        0 => format!("{},0", start - 1),
        n => format!("{start},{n}"),
    }
}

fn newlines(text: &str) -> usize {
    memchr::memchr_iter(b'\n', text.as_bytes()).count()
}

/// The start of the line holding byte `at`.
fn line_start(text: &str, at: usize) -> usize {
    memchr::memrchr(b'\n', &text.as_bytes()[..at.min(text.len())]).map_or(0, |i| i + 1)
}

/// Just past the newline ending the line that holds byte `at` (or the end of the text).
fn line_end(text: &str, at: usize) -> usize {
    let at = at.min(text.len());
    memchr::memchr(b'\n', &text.as_bytes()[at..]).map_or(text.len(), |i| at + i + 1)
}

/// `lo` moved back over `n` whole lines.
fn back_lines(text: &str, mut lo: usize, n: usize) -> usize {
    for _ in 0..n {
        if lo == 0 {
            break;
        }
        lo = line_start(text, lo - 1);
    }
    lo
}

/// `hi` moved forward over `n` whole lines.
fn forward_lines(text: &str, mut hi: usize, n: usize) -> usize {
    for _ in 0..n {
        if hi >= text.len() {
            break;
        }
        hi = line_end(text, hi);
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The diff of the whole texts, as similar writes it.
    fn whole(before: &str, after: &str, label: &str) -> String {
        TextDiff::from_lines(before, after)
            .unified_diff()
            .context_radius(CONTEXT)
            .header(&format!("a/{label}"), &format!("b/{label}"))
            .to_string()
    }

    fn replaced(before: &str, old: &str, new: &str) -> (String, Vec<usize>) {
        (before.replace(old, new), before.match_indices(old).map(|(i, _)| i).collect())
    }

    #[test]
    fn the_windowed_diff_is_the_whole_files_diff() {
        let base: String = (1..=60).map(|i| format!("line {i}\n")).collect();
        let cases: Vec<(String, &str, &str)> = vec![
            (base.clone(), "line 7\n", "seven\n"),
            (base.clone(), "line 1\n", ""),
            (base.clone(), "line 60\n", "last\nand more\n"),
            (base.clone(), "ne 2", "NE 2"),
            (base.clone(), "line 3\nline 4\n", "x\n"),
            (format!("{base}tail without newline"), "tail", "end"),
            (format!("{base}tail without newline"), "\ntail without newline", ""),
            ("a\nb\na\nb\na\n".repeat(10), "a\n", "A\nA\n"),
            ((1..=40).map(|i| format!("{}\n", i % 5)).collect(), "3\n", "three\n"),
            ("one".into(), "one", "two"),
        ];
        for (before, old, new) in cases {
            let (after, starts) = replaced(&before, old, new);
            assert!(!starts.is_empty(), "{old:?}");
            let got = replacement_diff(&before, &after, &starts, old.len(), new.len(), "f");
            assert_eq!(got, whole(&before, &after, "f"), "replacing {old:?} with {new:?}");
        }
    }

    /// `before` with a unified diff applied (hunks in order, each checked against `before`).
    fn apply(before: &str, diff: &str) -> String {
        let old: Vec<&str> = before.split_inclusive('\n').collect();
        let mut out = String::new();
        let mut at = 0; // lines of `old` used
        let mut lines = diff.split_inclusive('\n').skip(2).peekable();
        while let Some(header) = lines.next() {
            let minus = header.trim_start_matches("@@ -").split([' ', ',']).next().expect("start");
            let start: usize = minus.parse().expect("a number");
            let first = if header.contains(&format!("-{start},0 ")) { start } else { start - 1 };
            out.extend(old[at..first].iter().copied());
            at = first;
            while let Some(line) = lines.next_if(|l| !l.starts_with("@@")) {
                let text = &line[1..];
                let no_newline = lines.next_if(|l| l.starts_with("\\ No newline"));
                let text = if no_newline.is_some() { text.trim_end_matches('\n') } else { text };
                match &line[..1] {
                    " " => {
                        assert_eq!(old[at], text, "context line");
                        out.push_str(text);
                        at += 1;
                    }
                    "-" => {
                        assert_eq!(old[at], text, "removed line");
                        at += 1;
                    }
                    "+" => out.push_str(text),
                    other => panic!("unexpected line kind {other:?}"),
                }
            }
        }
        out.extend(old[at..].iter().copied());
        out
    }

    fn changed_lines(diff: &str) -> usize {
        diff.lines().skip(2).filter(|l| l.starts_with('+') || l.starts_with('-')).count()
    }

    #[test]
    fn random_replacements_give_diffs_that_apply_and_change_as_few_lines_as_the_whole_files() {
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % n
        };
        let words = ["a", "b", "c", "ab", "", "x y"];
        for round in 0..3000 {
            let lines = 1 + next(40) as usize;
            let mut before: String =
                (0..lines).map(|_| format!("{}\n", words[next(words.len() as u64) as usize])).collect();
            if next(4) == 0 {
                before.pop();
            }
            if before.is_empty() {
                continue;
            }
            // `old` is a piece of the text itself, so it occurs at least once.
            let from = next(before.len() as u64) as usize;
            let len = 1 + next((before.len() - from).min(8) as u64) as usize;
            let old = &before[from..from + len];
            let new = ["", "Z", "Z\n", "\nQ\n", "ab"][next(5) as usize];
            let (after, starts) = replaced(&before, old, new);
            let got = replacement_diff(&before, &after, &starts, old.len(), new.len(), "f");
            let context = format!("round {round}: {before:?} {old:?} -> {new:?}\n{got}");
            assert_eq!(apply(&before, &got), after, "{context}");
            assert_eq!(changed_lines(&got), changed_lines(&whole(&before, &after, "f")), "{context}");
        }
    }
}
