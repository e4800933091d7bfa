//! The reply budget: the most bytes of content one tool result may carry to the model, and the
//! cut that makes a bigger value fit while it stays valid JSON of the same shape.
//!
//! The scarce resource of an agent loop is the model's context: hosts refuse or cut a big
//! result on their own terms (Claude Code fails one over 25,000 tokens), so gm cuts first, the
//! largest parts first, and keeps the whole value on disk (`server/call.rs` writes the spill
//! and the reply; this module only computes).
//!
//! How a value over its budget is cut, so that what is left still shows what was there:
//! - whatever fits is kept whole; numbers, `true`, `false` and `null` are never cut;
//! - an object keeps every key: its values share its budget largest first (every value smaller
//!   than a common level stays whole, every larger one is cut to that level), so ten small
//!   fields stay whole beside a huge one. Only an object whose keys alone cannot fit keeps its
//!   first members and ends with the member `"…": "[cut N keys]"`;
//! - an array keeps its first items, as many as fit at [`item_floor`] bytes each (or whole when
//!   smaller), shares its budget among them the same way, and ends with the string item
//!   `"…[cut N items]"` when it left some out;
//! - a string keeps its head and ends with `…[cut N bytes]`, N the bytes of its text left out.
//!
//! The cut reads the value's JSON text, never `serde_json::Value`s: one pass notes every
//! value's place and size in a flat list in document order, a second writes the cut value. A
//! 10 MB value is cut in milliseconds (PERFORMANCE.md, "The reply budget").

use std::borrow::Cow;

use gm_actors::js_engine::ConsoleLine;

/// Bytes of content a reply carries at most unless `--max-result-bytes` or
/// `GM_MAX_RESULT_BYTES` says otherwise: about 20,000 tokens, under the 25,000 Claude Code
/// accepts from an MCP tool.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 80_000;
/// The most a run_code call may ask for with `maxResultBytes` unless
/// `--max-result-bytes-ceiling` or `GM_MAX_RESULT_BYTES_CEILING` says otherwise.
pub const DEFAULT_CEILING: usize = 1_000_000;
/// The smallest budget: below it a cut value would be little more than its markers.
pub const MIN_RESULT_BYTES: usize = 1_000;
pub const MAX_RESULT_BYTES_ENV: &str = "GM_MAX_RESULT_BYTES";
pub const CEILING_ENV: &str = "GM_MAX_RESULT_BYTES_CEILING";

/// Nesting read at most; a deeper value is cut as the text of its JSON.
const MAX_DEPTH: usize = 1024;
const ELLIPSIS: &str = "…";

/// The worker's reply budget and how far one call may raise it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_result_bytes: usize,
    pub ceiling: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self { max_result_bytes: DEFAULT_MAX_RESULT_BYTES, ceiling: DEFAULT_CEILING }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("{name} must be a whole number of bytes, at least {MIN_RESULT_BYTES} (it is {value:?})")]
    Setting { name: &'static str, value: String },
    #[error("maxResultBytes must be between {MIN_RESULT_BYTES} and {ceiling} (the server's --max-result-bytes-ceiling); got {asked}")]
    OutOfRange { asked: u64, ceiling: usize },
}

impl Limits {
    /// The limits from the command line's flags, else the environment (`env` reads a
    /// variable), else the defaults. The ceiling is never below the budget.
    pub fn resolve(
        max_flag: Option<usize>,
        ceiling_flag: Option<usize>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, BudgetError> {
        let setting = |flag: Option<usize>, name: &'static str, default: usize| {
            let n = match (flag, env(name)) {
                (Some(n), _) => n,
                (None, None) => default,
                (None, Some(text)) => {
                    text.trim().parse().map_err(|_| BudgetError::Setting { name, value: text.clone() })?
                }
            };
            if n < MIN_RESULT_BYTES {
                return Err(BudgetError::Setting { name, value: n.to_string() });
            }
            Ok(n)
        };
        let max_result_bytes = setting(max_flag, MAX_RESULT_BYTES_ENV, DEFAULT_MAX_RESULT_BYTES)?;
        let ceiling = setting(ceiling_flag, CEILING_ENV, DEFAULT_CEILING)?.max(max_result_bytes);
        Ok(Self { max_result_bytes, ceiling })
    }

    /// [`Limits::resolve`] from this process's environment.
    pub fn from_env(max_flag: Option<usize>, ceiling_flag: Option<usize>) -> Result<Self, BudgetError> {
        Self::resolve(max_flag, ceiling_flag, |name| std::env::var(name).ok())
    }

    /// The budget of a call that asked for `asked` (run_code's `maxResultBytes`).
    pub fn for_call(&self, asked: Option<u64>) -> Result<usize, BudgetError> {
        match asked {
            None => Ok(self.max_result_bytes),
            Some(n) if n >= MIN_RESULT_BYTES as u64 && n <= self.ceiling as u64 => Ok(n as usize),
            Some(n) => Err(BudgetError::OutOfRange { asked: n, ceiling: self.ceiling }),
        }
    }
}

/// `n` with a comma every three digits, as the markers show it: `2,918,000`.
pub fn grouped(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn grouped_len(n: usize) -> usize {
    let digits = n.checked_ilog10().unwrap_or(0) as usize + 1;
    digits + (digits - 1) / 3
}

/// Bytes an array item (or an object's value) keeps at least when its array is cut: below
/// this, more items each cut shorter say less than fewer items kept longer.
pub fn item_floor(budget: usize) -> usize {
    (budget / 64).clamp(16, 4096)
}

/// The value `json` cut to at most `target` bytes of JSON (see the module's docs); a value
/// that fits comes back as it is. The result always parses; it is over `target` only when
/// `target` is smaller than the value's markers.
pub fn cut_json(json: &str, target: usize) -> String {
    let json = json.trim();
    if json.len() <= target {
        return json.to_owned();
    }
    match Tree::parse(json) {
        Some(tree) => {
            let mut w = Writer { tree: &tree, out: String::with_capacity(target), floor: item_floor(target) };
            w.write(0, target);
            w.out
        }
        None => cut_as_text(json, target),
    }
}

/// `obj` (an object's JSON text) with the member `key: value` (`value` JSON text) added at its
/// end; `None` when `obj` is no object or has that key already.
pub fn with_member(obj: &str, key: &str, value: &str) -> Option<String> {
    let obj = obj.trim();
    let tree = Tree::parse(obj)?;
    let root = tree.node(0);
    if root.kind != Kind::Obj {
        return None;
    }
    let quoted = serde_json::to_string(key).ok()?;
    if tree.children(0).any(|(k, _)| k.is_some_and(|k| tree.slice(tree.node(k)) == quoted)) {
        return None;
    }
    let body = obj.strip_suffix('}')?;
    let comma = if root.count > 0 { "," } else { "" };
    Some(format!("{body}{comma}{quoted}:{value}}}"))
}

/// A text that is not JSON we can read, as a JSON string of its head.
fn cut_as_text(text: &str, target: usize) -> String {
    // Escaping at most doubles what JSON text holds (quotes and backslashes; it has no raw
    // control characters), so a head of a third of the target leaves room for the marker.
    let head = crate::text::head(text, target / 3);
    let quoted = serde_json::to_string(&format!("{head}{ELLIPSIS}[cut {} bytes]", grouped(text.len() - head.len())));
    quoted.unwrap_or_else(|_| "null".into())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A number, `true`, `false` or `null`.
    Atom,
    Str,
    Arr,
    Obj,
}

/// One value of the JSON text, as the writer reads it (see [`Packed`] for how it is kept).
#[derive(Debug, Clone, Copy)]
struct Node {
    kind: Kind,
    start: u32,
    end: u32,
    /// The items of an array, the members of an object (each a key node then a value node).
    count: u32,
    /// The index of the first node after this one's subtree.
    after: u32,
    /// Bytes of its compact JSON.
    size: u32,
    /// The fewest bytes it can be cut to.
    min: u32,
    /// An object's fewest bytes with every key kept; a string's bytes of text (its escapes
    /// read); else `min`.
    keep: u32,
}

/// A node as kept: 16 bytes, so that a 10 MB value of small items (a million nodes) is noted
/// in 16 MB, written once (fresh memory costs a page fault per 4 KiB); what only arrays and
/// objects have is in [`Container`]s. Offsets are u32: a text from 1 GiB on is cut as text.
#[derive(Debug, Clone, Copy)]
struct Packed {
    /// The kind in the top two bits, the start's offset in the rest.
    head: u32,
    size: u32,
    min: u32,
    /// A string's bytes of text; an array's or object's index among the containers.
    aux: u32,
}

#[derive(Debug, Clone, Copy, Default)]
struct Container {
    end: u32,
    count: u32,
    after: u32,
    keep: u32,
}

const START_BITS: u32 = 30;
const START_MASK: u32 = (1 << START_BITS) - 1;

impl Kind {
    fn bits(self) -> u32 {
        (self as u32) << START_BITS
    }

    fn of(head: u32) -> Kind {
        match head >> START_BITS {
            0 => Kind::Atom,
            1 => Kind::Str,
            2 => Kind::Arr,
            _ => Kind::Obj,
        }
    }
}

struct Tree<'a> {
    text: &'a str,
    nodes: Vec<Packed>,
    containers: Vec<Container>,
}

impl<'a> Tree<'a> {
    fn parse(text: &'a str) -> Option<Tree<'a>> {
        if text.len() > START_MASK as usize {
            return None;
        }
        // About a node per four bytes of compact JSON at most (`[1,2]`): no copy as it grows.
        let mut p =
            Parser { b: text.as_bytes(), i: 0, nodes: Vec::with_capacity(text.len() / 4 + 1), containers: Vec::new() };
        p.value(0)?;
        p.ws();
        (p.i == p.b.len()).then_some(Tree { text, nodes: p.nodes, containers: p.containers })
    }

    fn node(&self, at: u32) -> Node {
        let p = self.nodes[at as usize];
        let (kind, start) = (Kind::of(p.head), p.head & START_MASK);
        match kind {
            Kind::Atom | Kind::Str => Node {
                kind,
                start,
                end: start + p.size,
                count: 0,
                after: at + 1,
                size: p.size,
                min: p.min,
                keep: if kind == Kind::Str { p.aux } else { p.min },
            },
            Kind::Arr | Kind::Obj => {
                let c = self.containers[p.aux as usize];
                Node { kind, start, end: c.end, count: c.count, after: c.after, size: p.size, min: p.min, keep: c.keep }
            }
        }
    }

    fn slice(&self, n: Node) -> &'a str {
        &self.text[n.start as usize..n.end as usize]
    }

    /// An array's items, or an object's members as (key, value), in order: lazily, since a
    /// cut array of a million items looks at its first few.
    fn children(&self, at: u32) -> impl Iterator<Item = (Option<u32>, u32)> + '_ {
        let n = self.node(at);
        let mut c = at + 1;
        (0..n.count).map(move |_| {
            let (key, value) = if n.kind == Kind::Obj { (Some(c), self.node(c).after) } else { (None, c) };
            c = self.node(value).after;
            (key, value)
        })
    }
}

struct Parser<'a> {
    b: &'a [u8],
    i: usize,
    nodes: Vec<Packed>,
    containers: Vec<Container>,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\r' | b'\t') = self.b.get(self.i) {
            self.i += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        self.ws();
        (self.b.get(self.i) == Some(&byte)).then(|| self.i += 1)
    }

    /// Reads one value and its subtree; returns its node's index.
    fn value(&mut self, depth: usize) -> Option<usize> {
        if depth > MAX_DEPTH {
            return None;
        }
        self.ws();
        let start = self.i;
        let at = self.nodes.len();
        self.nodes.push(Packed { head: 0, size: 0, min: 0, aux: 0 });
        // A container's notes are kept in the order containers start, as nodes are.
        let container = self.containers.len();
        if let Some(b'[' | b'{') = self.b.get(start) {
            self.containers.push(Container::default());
        }
        let (kind, count, size, keep) = match *self.b.get(start)? {
            b'"' => {
                let text = self.string()?;
                (Kind::Str, 0, self.i - start, text)
            }
            b'[' => {
                self.i += 1;
                let (mut size, mut count) = (2, 0);
                if self.eat(b']').is_none() {
                    loop {
                        let item = self.value(depth + 1)?;
                        size += self.nodes[item].size as usize + usize::from(count > 0);
                        count += 1;
                        if self.eat(b',').is_none() {
                            self.eat(b']')?;
                            break;
                        }
                    }
                }
                (Kind::Arr, count, size, 0)
            }
            b'{' => {
                self.i += 1;
                let (mut size, mut keep, mut count) = (2, 2, 0);
                if self.eat(b'}').is_none() {
                    loop {
                        self.ws();
                        if self.b.get(self.i) != Some(&b'"') {
                            return None;
                        }
                        let key = self.value(depth + 1)?;
                        self.eat(b':')?;
                        let value = self.value(depth + 1)?;
                        let (k, v) = (self.nodes[key], self.nodes[value]);
                        let comma = usize::from(count > 0);
                        size += comma + k.size as usize + 1 + v.size as usize;
                        keep += comma + k.size as usize + 1 + v.min as usize;
                        count += 1;
                        if self.eat(b',').is_none() {
                            self.eat(b'}')?;
                            break;
                        }
                    }
                }
                (Kind::Obj, count, size, keep)
            }
            _ => {
                while let Some(b'0'..=b'9' | b'a'..=b'z' | b'-' | b'+' | b'.' | b'E') = self.b.get(self.i) {
                    self.i += 1;
                }
                if self.i == start {
                    return None;
                }
                (Kind::Atom, 0, self.i - start, 0)
            }
        };
        let min = match kind {
            Kind::Atom => size,
            Kind::Str => size.min(str_marker_len(size - 2)),
            Kind::Arr if count == 0 => size,
            Kind::Arr => size.min(arr_marker_len(count)),
            Kind::Obj if count == 0 => size,
            Kind::Obj => size.min(keep).min(obj_marker_len(count)),
        };
        let keep = match kind {
            Kind::Obj => keep.min(size),
            Kind::Str => keep,
            _ => min,
        };
        // Every number here is at most the text's length, which fits in 30 bits.
        let narrow = |n: usize| n as u32;
        let aux = match kind {
            Kind::Atom => 0,
            Kind::Str => narrow(keep),
            Kind::Arr | Kind::Obj => {
                let after = narrow(self.nodes.len());
                self.containers[container] =
                    Container { end: narrow(self.i), count: narrow(count), after, keep: narrow(keep) };
                narrow(container)
            }
        };
        self.nodes[at] = Packed { head: kind.bits() | narrow(start), size: narrow(size), min: narrow(min), aux };
        Some(at)
    }

    /// Skips a string, from its opening quote to past its closing one; returns the bytes of
    /// text it stands for (escapes read).
    fn string(&mut self) -> Option<usize> {
        let b = self.b;
        let start = self.i + 1;
        let mut i = start;
        let mut saved = 0;
        loop {
            // The few bytes after an escape are read one by one (text dense with escapes, a
            // memchr call for each would cost more than the bytes), the rest by memchr.
            let near = (i + 16).min(b.len());
            while i < near && b[i] != b'"' && b[i] != b'\\' {
                i += 1;
            }
            if i == near {
                i += memchr::memchr2(b'"', b'\\', b.get(i..)?)?;
            }
            if b[i] == b'"' {
                self.i = i + 1;
                return Some(i - start - saved);
            }
            let (len, bytes) = escape_at(b, i);
            saved += len - bytes;
            i += len;
        }
    }
}

/// `"…[cut N bytes]"` for a string of `content` escaped bytes (N at most that many).
fn str_marker_len(content: usize) -> usize {
    2 + ELLIPSIS.len() + "[cut ".len() + grouped_len(content) + " bytes]".len()
}

/// `"…[cut N items]"`, the last item of a cut array.
fn items_marker_len(left: usize) -> usize {
    2 + ELLIPSIS.len() + "[cut ".len() + grouped_len(left) + " items]".len()
}

/// An array with only its marker.
fn arr_marker_len(count: usize) -> usize {
    2 + items_marker_len(count)
}

/// `"…":"[cut N keys]"`, the last member of an object whose keys do not all fit.
fn keys_marker_len(left: usize) -> usize {
    2 + ELLIPSIS.len() + 1 + 2 + "[cut ".len() + grouped_len(left) + " keys]".len()
}

/// An object with only its marker.
fn obj_marker_len(count: usize) -> usize {
    2 + keys_marker_len(count)
}

struct Writer<'t, 'a> {
    tree: &'t Tree<'a>,
    out: String,
    floor: usize,
}

impl Writer<'_, '_> {
    /// Writes node `at` in at most `budget` bytes (at least its `min`).
    fn write(&mut self, at: u32, budget: usize) {
        let n = self.tree.node(at);
        if n.size as usize <= budget {
            return self.copy(at);
        }
        match n.kind {
            Kind::Atom => self.copy(at),
            Kind::Str => self.cut_string(n, budget),
            Kind::Arr | Kind::Obj => self.cut_container(at, budget),
        }
    }

    /// Writes node `at` whole, compact.
    fn copy(&mut self, at: u32) {
        let n = self.tree.node(at);
        if (n.end - n.start) == n.size {
            self.out.push_str(self.tree.slice(n));
            return;
        }
        // The text has whitespace inside: written compact, as sizes were counted.
        let (open, close) = if n.kind == Kind::Obj { ('{', '}') } else { ('[', ']') };
        self.out.push(open);
        for (i, (key, value)) in self.tree.children(at).enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            if let Some(key) = key {
                self.out.push_str(self.tree.slice(self.tree.node(key)));
                self.out.push(':');
            }
            self.copy(value);
        }
        self.out.push(close);
    }

    fn cut_string(&mut self, n: Node, budget: usize) {
        let content = &self.tree.slice(n)[1..(n.size - 1) as usize];
        let room = budget.saturating_sub(str_marker_len(content.len()));
        let keep = safe_prefix(content.as_bytes(), room);
        self.out.push('"');
        self.out.push_str(&content[..keep]);
        let left = (n.keep as usize).saturating_sub(unescaped_len(&content.as_bytes()[..keep]));
        self.out.push_str(&format!("{ELLIPSIS}[cut {} bytes]\"", grouped(left)));
    }

    /// An array's first items, or an object's members, sharing `budget` largest first.
    fn cut_container(&mut self, at: u32, budget: usize) {
        let tree = self.tree;
        let n = tree.node(at);
        let object = n.kind == Kind::Obj;
        let key_len = |key: Option<u32>| key.map_or(0, |k| tree.node(k).size as usize + 1);
        // Which children are kept: all of an object's while its keys fit; else as many first
        // ones as fit at the floor each, with the marker that says how many were left.
        let marker = |left: usize| if object { keys_marker_len(left) } else { items_marker_len(left) };
        let count = n.count as usize;
        let kept_children: Vec<(Option<u32>, u32)> = if object && n.keep as usize <= budget {
            tree.children(at).collect()
        } else {
            let mut used = 2;
            let mut kept = Vec::new();
            for (i, (key, value)) in tree.children(at).enumerate() {
                let v = tree.node(value);
                let cost = key_len(key) + (v.min as usize).max((v.size as usize).min(self.floor));
                let with = used + cost + usize::from(i > 0);
                let rest = count - i - 1;
                if with + if rest > 0 { 1 + marker(rest) } else { 0 } > budget {
                    break;
                }
                used = with;
                kept.push((key, value));
            }
            kept
        };
        let kept = kept_children.len();
        let kept_children = &kept_children[..];
        let left = count - kept;
        let overhead = 2
            + kept.saturating_sub(1)
            + kept_children.iter().map(|&(k, _)| key_len(k)).sum::<usize>()
            + if left > 0 { usize::from(kept > 0) + marker(left) } else { 0 };
        let level = self.level(kept_children, budget.saturating_sub(overhead));
        self.out.push(if object { '{' } else { '[' });
        for (i, &(key, value)) in kept_children.iter().enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            if let Some(key) = key {
                self.out.push_str(self.tree.slice(self.tree.node(key)));
                self.out.push(':');
            }
            self.write(value, grant(self.tree.node(value), level));
        }
        if left > 0 {
            if kept > 0 {
                self.out.push(',');
            }
            let what = if object { "\"…\":\"[cut" } else { "\"…[cut" };
            let unit = if object { "keys" } else { "items" };
            self.out.push_str(&format!("{what} {} {unit}]\"", grouped(left)));
        }
        self.out.push(if object { '}' } else { ']' });
    }

    /// The highest level at which the values of `children`, each granted [`grant`], take at
    /// most `avail` bytes (0 when even their minimums do not fit).
    fn level(&self, children: &[(Option<u32>, u32)], avail: usize) -> usize {
        let granted = |level: usize| {
            children.iter().map(|&(_, v)| grant(self.tree.node(v), level)).fold(0usize, usize::saturating_add)
        };
        let mut hi = children.iter().map(|&(_, v)| self.tree.node(v).size as usize).max().unwrap_or(0);
        if granted(hi) <= avail {
            return hi;
        }
        let mut lo = 0;
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if granted(mid) <= avail {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }
}

/// The bytes a value gets at `level`: whole below it, cut to it above, never under its minimum.
fn grant(n: Node, level: usize) -> usize {
    (n.min as usize).max((n.size as usize).min(level))
}

/// The longest prefix of an escaped string's content, at most `room` bytes, that ends neither
/// inside an escape (a surrogate pair counts as one) nor inside a UTF-8 character.
fn safe_prefix(content: &[u8], room: usize) -> usize {
    if room >= content.len() {
        return content.len();
    }
    let mut i = 0;
    let mut safe;
    loop {
        match memchr::memchr(b'\\', &content[i..room]) {
            None => {
                safe = room;
                break;
            }
            Some(j) => {
                i += j;
                safe = i;
                let (len, _) = escape_at(content, i);
                if i + len > room {
                    break;
                }
                i += len;
            }
        }
    }
    // Back to the start of a character; escapes are ASCII, so this never enters one.
    while safe > 0 && content[safe] & 0xC0 == 0x80 {
        safe -= 1;
    }
    safe
}

/// The escape at `content[i]` (a backslash): its length in the text and the bytes it stands for.
fn escape_at(content: &[u8], i: usize) -> (usize, usize) {
    if content.get(i + 1) != Some(&b'u') {
        return (2, 1);
    }
    let unit = |at: usize| {
        content.get(at..at + 4).and_then(|h| std::str::from_utf8(h).ok()).and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    match unit(i + 2) {
        Some(0xD800..=0xDBFF)
            if content.get(i + 6..i + 8) == Some(b"\\u") && matches!(unit(i + 8), Some(0xDC00..=0xDFFF)) =>
        {
            (12, 4)
        }
        Some(c) if c < 0x80 => (6, 1),
        Some(c) if c < 0x800 => (6, 2),
        // The rest of the plane, and a lone surrogate (read as U+FFFD).
        _ => (6, 3),
    }
}

/// The bytes of text an escaped string's content stands for.
fn unescaped_len(content: &[u8]) -> usize {
    let (mut n, mut i) = (0, 0);
    while let Some(j) = memchr::memchr(b'\\', content.get(i..).unwrap_or_default()) {
        let (len, bytes) = escape_at(content, i + j);
        n += j + bytes;
        i += j + len;
    }
    n + content.len().saturating_sub(i)
}

/// `text` in at most about `cap` bytes: its head and its tail around a line saying how much was
/// cut (a text block beside a value that holds the same lines).
pub fn cut_text(text: &str, cap: usize) -> Cow<'_, str> {
    if text.len() <= cap {
        return Cow::Borrowed(text);
    }
    let half = cap.saturating_sub(40) / 2;
    let head = crate::text::head(text, half);
    let tail = tail_of(text, half);
    let left = text.len() - head.len() - tail.len();
    Cow::Owned(format!("{head}\n{ELLIPSIS}[cut {} bytes]\n{tail}", grouped(left)))
}

/// The longest suffix of `s` that is at most `max` bytes and starts on a character boundary.
fn tail_of(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// The bytes a console line takes as text: `[level] text\n`.
fn line_len(l: &ConsoleLine) -> usize {
    l.level.len() + l.text.len() + 4
}

/// Bytes of a body's console as text (`[level] text\n` a line).
pub fn console_bytes(lines: &[ConsoleLine]) -> usize {
    lines.iter().map(line_len).sum()
}

/// A console cut to its head and tail.
#[derive(Debug, PartialEq)]
pub struct ConsoleCut {
    /// The first lines, the last one perhaps cut at its end (marked `…`).
    pub head: Vec<ConsoleLine>,
    /// The last lines, the first one perhaps cut at its start (marked `…`).
    pub tail: Vec<ConsoleLine>,
    /// Bytes of text left out.
    pub bytes: usize,
}

/// A part of a line shorter than this is left out rather than kept.
const MIN_PART: usize = 16;

/// A console over `cap` bytes (as text) keeps its first lines up to half of it and its last
/// lines up to the other half, as a shell's output keeps its head and tail: a long run's end
/// (where it failed) matters as much as its start. `Ok` when it fits.
pub fn cut_console(lines: Vec<ConsoleLine>, cap: usize) -> Result<Vec<ConsoleLine>, ConsoleCut> {
    if console_bytes(&lines) <= cap {
        return Ok(lines);
    }
    let total_text: usize = lines.iter().map(|l| l.text.len()).sum();
    let half = cap / 2;
    let room =
        |used: usize, l: &ConsoleLine| half.saturating_sub(used + l.level.len() + 4 + ELLIPSIS.len()).min(l.text.len());
    let (mut h, mut used) = (0, 0);
    while h < lines.len() && used + line_len(&lines[h]) <= half {
        used += line_len(&lines[h]);
        h += 1;
    }
    let head_part = lines.get(h).map(|l| room(used, l)).filter(|&r| r >= MIN_PART);
    let (mut t, mut used_tail) = (lines.len(), 0);
    let lowest = h + usize::from(head_part.is_some());
    while t > lowest && used_tail + line_len(&lines[t - 1]) <= half {
        used_tail += line_len(&lines[t - 1]);
        t -= 1;
    }
    let tail_part = (t > h).then(|| room(used_tail, &lines[t - 1])).filter(|&r| r >= MIN_PART);
    let mut head: Vec<ConsoleLine> = lines[..h].to_vec();
    let mut kept: usize = head.iter().map(|l| l.text.len()).sum();
    if let (Some(r), Some(l)) = (head_part, lines.get(h)) {
        let part = crate::text::head(&l.text, r);
        kept += part.len();
        head.push(ConsoleLine { level: l.level.clone(), text: format!("{part}{ELLIPSIS}") });
    }
    let mut tail = Vec::new();
    if let Some(r) = tail_part {
        let l = &lines[t - 1];
        let part = tail_of(&l.text, r);
        kept += part.len();
        tail.push(ConsoleLine { level: l.level.clone(), text: format!("{ELLIPSIS}{part}") });
    }
    kept += lines[t..].iter().map(|l| l.text.len()).sum::<usize>();
    tail.extend_from_slice(&lines[t..]);
    Err(ConsoleCut { head, tail, bytes: total_text.saturating_sub(kept) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    /// Each fixture: a value, a budget, the cut expected.
    const FIXTURES: &[(&str, usize, &str)] = &[
        // Whatever fits is kept as it is.
        (r#"{"a":1}"#, 100, r#"{"a":1}"#),
        // A string keeps its head and says how many bytes of its text were cut.
        (r#""abcdefghijklmnopqrstuvwxyz0123456789""#, 30, r#""abcdefghijk…[cut 25 bytes]""#),
        // An escape or a character is never split; the count is of the text's bytes.
        (r#""ab\ncdéfghijklmnopqrstuvwxyz""#, 24, r#""ab\nc…[cut 24 bytes]""#),
        (r#""ab\ud83d\ude00cdefghijklmnopqrstuvwxyz""#, 30, r#""ab…[cut 28 bytes]""#),
        // Small fields stay whole beside a big one, which is cut.
        (
            r#"{"a":1,"b":"bb","big":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx","c":[1,2]}"#,
            60,
            r#"{"a":1,"b":"bb","big":"xxxxxxxx…[cut 56 bytes]","c":[1,2]}"#,
        ),
        // The largest string is cut first: the shorter one stays whole.
        (
            r#"["aaaaaaaaaaaaaaaaaaaa","bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","cc"]"#,
            70,
            r#"["aaaaaaaaaaaaaaaaaaaa","bbbbbbbbbbbbbbbbbbbbb…[cut 59 bytes]","cc"]"#,
        ),
        // Two long ones are cut to a common length.
        (
            r#"["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","cc"]"#,
            90,
            r#"["aaaaaaaaaaaaaaaaaaaaaa…[cut 18 bytes]","bbbbbbbbbbbbbbbbbbbbbb…[cut 58 bytes]","cc"]"#,
        ),
        // A long array keeps its first items and says how many it left out.
        (
            r#"[{"i":0},{"i":1},{"i":2},{"i":3},{"i":4},{"i":5},{"i":6},{"i":7},{"i":8},{"i":9}]"#,
            50,
            r#"[{"i":0},{"i":1},{"i":2},"…[cut 7 items]"]"#,
        ),
        // Nesting is kept; a nested array is cut like any other.
        (
            r#"{"list":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20],"ok":true}"#,
            50,
            r#"{"list":[1,2,3,4,5,"…[cut 15 items]"],"ok":true}"#,
        ),
        // An object whose keys alone do not fit keeps its first members.
        (
            r#"{"k0":0,"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9}"#,
            40,
            r#"{"k0":0,"k1":1,"…":"[cut 8 keys]"}"#,
        ),
        // Whitespace in the text is not kept.
        ("[ 1 , 2 , { \"a\" : \"b\" } ]", 17, r#"[1,2,{"a":"b"}]"#),
    ];

    #[test]
    fn each_fixture_is_cut_as_expected_and_parses() {
        for (value, budget, expected) in FIXTURES {
            let cut = cut_json(value, *budget);
            assert_eq!(cut, *expected, "{value} in {budget}");
            serde_json::from_str::<Value>(&cut).unwrap_or_else(|e| panic!("{cut}: {e}"));
            if value.len() > *budget {
                assert!(cut.len() <= *budget, "{cut} is over {budget}");
            }
        }
    }

    /// Values of many shapes, cut to many budgets: the cut always parses, fits, keeps the
    /// root's kind and every key of an object that has few.
    #[test]
    fn every_cut_parses_fits_and_keeps_the_shape() {
        let long = "é\"\\\n😀x".repeat(3000);
        let values = [
            json!(long),
            json!({ "result": long, "console": [], "ms": 1.5 }),
            json!((0..2000).map(|i| json!({ "i": i, "name": format!("item {i}") })).collect::<Vec<_>>()),
            json!({ "a": [long, long, { "deep": [[[long]]] }], "b": null, "c": -1.5e10, "d": "" }),
            json!((0..500).map(|i| (format!("key{i}"), json!(i))).collect::<serde_json::Map<_, _>>()),
        ];
        for value in &values {
            let text = value.to_string();
            for budget in [120, 500, 1000, 4096, 20_000, 80_000] {
                let cut = cut_json(&text, budget);
                let parsed: Value = serde_json::from_str(&cut).unwrap_or_else(|e| panic!("{e}: {cut}"));
                assert!(cut.len() <= budget, "{} over {budget}", cut.len());
                assert_eq!(std::mem::discriminant(&parsed), std::mem::discriminant(value), "the root keeps its kind");
                // A cut string's kept text and the bytes its marker counts make up the whole.
                if let (Some(before), Some(after), true) = (value.as_str(), parsed.as_str(), text.len() > budget) {
                    let (kept, marker) = after.rsplit_once("…[cut ").expect("a marker");
                    let n: usize = marker.trim_end_matches(" bytes]").replace(',', "").parse().expect("a count");
                    assert_eq!(kept.len() + n, before.len(), "{budget}");
                }
                if let (Some(before), Some(after)) = (value.as_object(), parsed.as_object()) {
                    if before.len() <= 4 {
                        assert!(before.keys().all(|k| after.contains_key(k)), "{cut}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_huge_string_keeps_its_head_and_counts_what_was_cut() {
        let text = serde_json::to_string(&"x".repeat(3_000_000)).unwrap_or_default();
        let cut = cut_json(&text, 80_000);
        let s: String = serde_json::from_str(&cut).unwrap_or_default();
        let kept = s.find('…').unwrap_or(0);
        assert!(s.ends_with(&format!("…[cut {} bytes]", grouped(3_000_000 - kept))), "{}", &s[kept..]);
        assert!(cut.len() <= 80_000 && cut.len() > 79_900, "{}", cut.len());
    }

    #[test]
    fn a_member_is_added_unless_the_key_is_there() {
        assert_eq!(with_member(r#"{"a":1}"#, "cut", r#"{"bytes":2}"#).as_deref(), Some(r#"{"a":1,"cut":{"bytes":2}}"#));
        assert_eq!(with_member("{}", "cut", "1").as_deref(), Some(r#"{"cut":1}"#));
        assert_eq!(with_member(r#"{"cut":0}"#, "cut", "1"), None);
        assert_eq!(with_member("[1]", "cut", "1"), None);
    }

    #[test]
    fn numbers_are_grouped_by_thousands() {
        for (n, s) in [(0, "0"), (999, "999"), (1000, "1,000"), (2_918_000, "2,918,000"), (99_990, "99,990")] {
            assert_eq!(grouped(n), s);
            assert_eq!(grouped_len(n), s.len());
        }
    }

    #[test]
    fn the_flag_wins_over_the_environment_and_a_call_stays_under_the_ceiling() {
        let env = |name: &str| match name {
            MAX_RESULT_BYTES_ENV => Some("5000".to_owned()),
            _ => None,
        };
        assert_eq!(Limits::resolve(None, None, env), Ok(Limits { max_result_bytes: 5000, ceiling: DEFAULT_CEILING }));
        assert_eq!(Limits::resolve(Some(7000), Some(9000), env), Ok(Limits { max_result_bytes: 7000, ceiling: 9000 }));
        let bad = |name: &str| (name == CEILING_ENV).then(|| "lots".to_owned());
        assert!(matches!(Limits::resolve(None, None, bad), Err(BudgetError::Setting { name: CEILING_ENV, .. })));
        let limits = Limits::default();
        assert_eq!(limits.for_call(None), Ok(DEFAULT_MAX_RESULT_BYTES));
        assert_eq!(limits.for_call(Some(2000)), Ok(2000));
        assert!(limits.for_call(Some(999)).is_err());
        assert!(limits.for_call(Some(DEFAULT_CEILING as u64 + 1)).is_err());
    }

    fn line(level: &str, text: &str) -> ConsoleLine {
        ConsoleLine { level: level.into(), text: text.into() }
    }

    #[test]
    fn a_long_console_keeps_its_first_and_last_lines() {
        let lines: Vec<ConsoleLine> = (0..1000).map(|i| line("log", &format!("line {i:04}"))).collect();
        let cut = cut_console(lines.clone(), 400).expect_err("over the cap");
        assert_eq!(cut.head.first(), lines.first());
        assert_eq!(cut.tail.last(), lines.last());
        let kept: usize = cut.head.iter().chain(&cut.tail).map(|l| l.text.replace('…', "").len()).sum();
        assert_eq!(kept + cut.bytes, 9000, "every byte is kept or counted");
        assert!(console_bytes(&cut.head) + console_bytes(&cut.tail) <= 400);
        assert_eq!(cut_console(lines[..3].to_vec(), 400), Ok(lines[..3].to_vec()));
    }

    #[test]
    fn one_huge_console_line_keeps_its_start_and_its_end() {
        let text = format!("start{}end", "x".repeat(100_000));
        let cut = cut_console(vec![line("log", "first"), line("error", &text)], 1000).expect_err("over the cap");
        assert_eq!(cut.head[0], line("log", "first"));
        assert!(cut.head[1].text.starts_with("startxxx") && cut.head[1].text.ends_with('…'));
        assert!(cut.tail[0].text.starts_with('…') && cut.tail[0].text.ends_with("xxxend"));
        assert_eq!(cut.tail[0].level, "error");
        assert!(console_bytes(&cut.head) + console_bytes(&cut.tail) <= 1000 + 2 * ELLIPSIS.len());
    }

    #[test]
    fn a_text_block_keeps_its_head_and_tail() {
        let text = format!("head{}tail", "-".repeat(10_000));
        let cut = cut_text(&text, 1000);
        assert!(cut.starts_with("head") && cut.ends_with("tail") && cut.contains("…[cut "), "{cut}");
        assert!(cut.len() <= 1000);
        assert_eq!(cut_text("short", 1000), "short");
    }
}
