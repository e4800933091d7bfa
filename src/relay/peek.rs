//! What the relay reads of a JSON-RPC line: its id, its method, whether it is a response, and
//! the uri of a `resources/read`. Nothing else is parsed: the scan stops as soon as those are
//! known, so a 60 MiB `result` or `params` after them is never walked.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The parts of one line the relay acts on.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Peek {
    /// The id's JSON text as written (`7`, `"a"`, `1.0`).
    pub id: Option<String>,
    pub method: Option<String>,
    /// The line has `result` or `error`: an answer, not a call.
    pub response: bool,
    /// `params.uri` of a `resources/read`.
    pub uri: Option<String>,
    /// `params.requestId` of a `notifications/cancelled`, as written.
    pub cancels: Option<String>,
}

/// The key a call is tracked by: ids that are the same JSON value are the same key (`1`,
/// `1.0` and `1e0`; `"a"` and `"\u0061"`), ids of different types are not (`1` and `"1"`).
pub fn id_key(raw: &str) -> String {
    // The ids hosts write: a small integer, a string without escapes. Their key is their text.
    let bytes = raw.as_bytes();
    let canonical_int = !bytes.is_empty()
        && bytes.len() <= 18
        && bytes.iter().all(u8::is_ascii_digit)
        && (bytes[0] != b'0' || bytes.len() == 1);
    if canonical_int {
        return format!("n{raw}");
    }
    if let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) {
        if !inner.bytes().any(|b| b == b'\\' || b == b'"' || b < 0x20) {
            return format!("s{inner}");
        }
    }
    match serde_json::from_str::<serde_json::Value>(raw) {
        Ok(serde_json::Value::Number(n)) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => format!("n{i}"),
            (_, Some(u), _) => format!("n{u}"),
            (_, _, Some(f)) if f.fract() == 0.0 && f.abs() < 9.2e18 => format!("n{}", f as i64),
            (_, _, Some(f)) => format!("n{f}"),
            _ => format!("n{n}"),
        },
        Ok(serde_json::Value::String(s)) => format!("s{s}"),
        Ok(other) => format!("o{other}"),
        Err(_) => format!("r{raw}"),
    }
}

impl Peek {
    /// Reads what it can of `line`; a line that is not a JSON object peeks as nothing (the
    /// worker answers it).
    pub fn of(line: &[u8]) -> Peek {
        if let Some(peek) = fast::of(line) {
            return peek;
        }
        Self::of_slowly(line)
    }

    /// [`Peek::of`] by serde alone: any line, whatever its keys' order, escapes and spaces.
    fn of_slowly(line: &[u8]) -> Peek {
        let mut peek = Peek::default();
        let mut de = serde_json::Deserializer::from_slice(line);
        // Err is also how the scan stops early; what was read by then is kept.
        let _ = (&mut de).deserialize_map(Scan { peek: &mut peek, early: true });
        peek
    }

    /// Whether the line is a JSON-RPC batch (an array of messages).
    pub fn is_batch(line: &[u8]) -> bool {
        line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'[')
    }

    /// Each message of a batch line. Batches are rare and small: each is read whole.
    pub fn of_batch(line: &[u8]) -> Vec<Peek> {
        let mut peeks = Vec::new();
        let mut de = serde_json::Deserializer::from_slice(line);
        let _ = (&mut de).deserialize_seq(Batch { peeks: &mut peeks });
        peeks
    }

    /// A call that expects an answer.
    pub fn is_request(&self) -> bool {
        self.id.is_some() && self.method.is_some()
    }

    fn settled(&self) -> bool {
        let known = match self.method.as_deref() {
            Some("resources/read") => self.uri.is_some(),
            Some("notifications/cancelled") => self.cancels.is_some(),
            Some(_) => true,
            None => self.response,
        };
        self.id.is_some() && known
    }
}

const DONE: &str = "gm-relay: seen enough";

struct Scan<'a> {
    peek: &'a mut Peek,
    /// Stop once the peek is settled (a line of its own), or read to the end (a batch member).
    early: bool,
}

struct Batch<'a> {
    peeks: &'a mut Vec<Peek>,
}

impl<'de> Visitor<'de> for Batch<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC batch")
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            let mut peek = Peek::default();
            match seq.next_element_seed(Member { peek: &mut peek })? {
                Some(()) => self.peeks.push(peek),
                None => return Ok(()),
            }
        }
    }
}

/// One message of a batch, read whole.
struct Member<'a> {
    peek: &'a mut Peek,
}

impl<'de> DeserializeSeed<'de> for Member<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(Scan { peek: self.peek, early: false })
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON-RPC message")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        // params seen before the method: kept as a slice of the line, read if it turns out to
        // be a resources/read.
        let mut early_params: Option<&'de RawValue> = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "id" => {
                    let raw: &RawValue = map.next_value()?;
                    self.peek.id = Some(raw.get().to_owned());
                }
                "method" => self.peek.method = Some(map.next_value::<String>()?),
                "result" | "error" => {
                    self.peek.response = true;
                    if self.early && self.peek.id.is_some() {
                        return Err(de::Error::custom(DONE));
                    }
                    map.next_value::<IgnoredAny>()?;
                }
                "params" if reads_params(self.peek.method.as_deref()) => {
                    map.next_value_seed(Uri { peek: self.peek })?;
                }
                "params" if self.early && self.peek.method.is_some() && self.peek.id.is_some() => {
                    return Err(de::Error::custom(DONE));
                }
                "params" if self.peek.method.is_none() => early_params = Some(map.next_value()?),
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            if let (Some(raw), true) = (early_params, reads_params(self.peek.method.as_deref())) {
                let mut de = serde_json::Deserializer::from_str(raw.get());
                Uri { peek: self.peek }.deserialize(&mut de).map_err(de::Error::custom)?;
                early_params = None;
            }
            if self.early && self.peek.settled() {
                return Err(de::Error::custom(DONE));
            }
        }
        Ok(())
    }
}

/// The lines hosts and gm write nearly always: the id and the method (or `result`) first, as
/// plain integers and strings. Read by hand, they cost no serde error to stop early (an error
/// is an allocation and a formatted position); anything else gives up, and serde reads it.
mod fast {
    use super::{reads_params, Peek};

    struct Cursor<'a> {
        line: &'a [u8],
        at: usize,
    }

    impl<'a> Cursor<'a> {
        fn skip_space(&mut self) {
            while matches!(self.line.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.at += 1;
            }
        }

        fn eat(&mut self, byte: u8) -> Option<()> {
            self.skip_space();
            (self.line.get(self.at) == Some(&byte)).then(|| self.at += 1)
        }

        /// A string of printable ASCII without escapes, quotes excluded.
        fn plain_string(&mut self) -> Option<&'a str> {
            self.eat(b'"')?;
            let start = self.at;
            loop {
                match *self.line.get(self.at)? {
                    b'"' => break,
                    b'\\' | 0..0x20 | 0x80.. => return None,
                    _ => self.at += 1,
                }
            }
            self.at += 1;
            std::str::from_utf8(&self.line[start..self.at - 1]).ok()
        }

        /// An integer as JSON writes one (no leading zero), its text.
        fn integer(&mut self) -> Option<&'a str> {
            self.skip_space();
            let start = self.at;
            if self.line.get(self.at) == Some(&b'-') {
                self.at += 1;
            }
            let digits = self.at;
            while self.line.get(self.at).is_some_and(u8::is_ascii_digit) {
                self.at += 1;
            }
            let n = self.at - digits;
            let leading_zero = n > 1 && self.line[digits] == b'0';
            // A fraction or an exponent follows, or the line ends: serde reads it.
            let ends = matches!(self.line.get(self.at), Some(b' ' | b'\t' | b'\n' | b'\r' | b',' | b'}'));
            if n == 0 || leading_zero || !ends {
                return None;
            }
            std::str::from_utf8(&self.line[start..self.at]).ok()
        }

        /// A plain string or integer as written (quotes kept), or a literal.
        fn plain_value(&mut self) -> Option<&'a str> {
            self.skip_space();
            match *self.line.get(self.at)? {
                b'"' => {
                    let start = self.at;
                    self.plain_string()?;
                    std::str::from_utf8(&self.line[start..self.at]).ok()
                }
                b'-' | b'0'..=b'9' => self.integer(),
                _ => {
                    let rest = &self.line[self.at..];
                    let word = ["true", "false", "null"].into_iter().find(|w| rest.starts_with(w.as_bytes()))?;
                    self.at += word.len();
                    Some(word)
                }
            }
        }
    }

    /// The peek of a line read by hand, or None where serde must read it.
    pub(super) fn of(line: &[u8]) -> Option<Peek> {
        let mut c = Cursor { line, at: 0 };
        let mut peek = Peek::default();
        c.eat(b'{')?;
        loop {
            let key = c.plain_string()?;
            c.eat(b':')?;
            match key {
                "id" => {
                    let raw = c.plain_value()?;
                    // null, true and false are ids serde reads as written too, but rare.
                    if matches!(raw, "null" | "true" | "false") {
                        return None;
                    }
                    peek.id = Some(raw.to_owned());
                }
                "method" => peek.method = Some(c.plain_string()?.to_owned()),
                "result" | "error" if peek.id.is_some() => {
                    peek.response = true;
                    return Some(peek);
                }
                "params" if peek.method.is_some() && peek.id.is_some() && !reads_params(peek.method.as_deref()) => {
                    return Some(peek);
                }
                "result" | "error" | "params" => return None,
                _ => {
                    c.plain_value()?;
                }
            }
            if peek.settled() {
                return Some(peek);
            }
            c.skip_space();
            match c.line.get(c.at)? {
                b',' => c.at += 1,
                b'}' => return Some(peek),
                _ => return None,
            }
        }
    }
}

/// The methods whose params the relay reads: a resource read (its uri), a cancellation (the
/// request it cancels).
fn reads_params(method: Option<&str>) -> bool {
    matches!(method, Some("resources/read" | "notifications/cancelled"))
}

/// `params` of a `resources/read` or a `notifications/cancelled`: only `uri` and `requestId`
/// are kept.
struct Uri<'a> {
    peek: &'a mut Peek,
}

impl<'de> DeserializeSeed<'de> for Uri<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for Uri<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("params")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if key == "uri" {
                self.peek.uri = Some(map.next_value::<String>()?);
            } else if key == "requestId" {
                let raw: &RawValue = map.next_value()?;
                self.peek.cancels = Some(raw.get().to_owned());
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_gives_its_id_and_method() {
        let p = Peek::of(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#);
        assert_eq!(p.id.as_deref(), Some("7"));
        assert_eq!(p.method.as_deref(), Some("tools/call"));
        assert!(p.is_request() && !p.response);
    }

    #[test]
    fn keys_in_any_order_are_found() {
        let p = Peek::of(br#"{"params":{"a":[1,2,{"b":"}"}]},"method":"ping","id":"x y","jsonrpc":"2.0"}"#);
        assert_eq!(p.id.as_deref(), Some(r#""x y""#));
        assert_eq!(p.method.as_deref(), Some("ping"));
    }

    #[test]
    fn a_response_is_told_from_a_call() {
        let p = Peek::of(br#"{"jsonrpc":"2.0","id":3,"result":{"content":[]}}"#);
        assert!(p.response);
        assert_eq!(p.id.as_deref(), Some("3"));
        let e = Peek::of(br#"{"jsonrpc":"2.0","error":{"code":1},"id":null}"#);
        assert!(e.response);
        assert_eq!(e.id.as_deref(), Some("null"));
    }

    #[test]
    fn the_uri_of_a_resource_read_is_read_wherever_params_is() {
        let p =
            Peek::of(br#"{"params":{"uri":"skill://gm/SKILL.md"},"jsonrpc":"2.0","method":"resources/read","id":1}"#);
        assert_eq!(p.uri.as_deref(), Some("skill://gm/SKILL.md"));
        assert_eq!(p.id.as_deref(), Some("1"));
        let q =
            Peek::of(br#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"skill://gm/SKILL.md"}}"#);
        assert_eq!(q.uri.as_deref(), Some("skill://gm/SKILL.md"));
    }

    #[test]
    fn a_notification_has_no_id() {
        let p = Peek::of(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert_eq!(p.method.as_deref(), Some("notifications/initialized"));
        assert!(!p.is_request());
    }

    #[test]
    fn a_line_that_is_not_an_object_peeks_as_nothing() {
        assert_eq!(Peek::of(b"[1,2]"), Peek::default());
        assert_eq!(Peek::of(b"not json"), Peek::default());
        assert_eq!(Peek::of(b""), Peek::default());
    }

    #[test]
    fn each_message_of_a_batch_is_read() {
        let line = br#" [{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x"}},{"jsonrpc":"2.0","method":"notifications/initialized"},{"id":"b","result":{}}]"#;
        assert!(Peek::is_batch(line));
        let peeks = Peek::of_batch(line);
        assert_eq!(peeks.len(), 3);
        assert_eq!(peeks[0].id.as_deref(), Some("1"));
        assert!(peeks[0].is_request());
        assert!(!peeks[1].is_request());
        assert!(peeks[2].response);
        assert_eq!(peeks[2].id.as_deref(), Some(r#""b""#));
        assert!(!Peek::is_batch(br#"{"id":1}"#));
    }

    #[test]
    fn a_cancellation_names_the_request_it_cancels_wherever_params_is() {
        let p = Peek::of(
            br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1.0,"reason":"x"}}"#,
        );
        assert_eq!(p.cancels.as_deref(), Some("1.0"));
        let q = Peek::of(
            br#"{"params":{"reason":"x","requestId":"a"},"method":"notifications/cancelled","jsonrpc":"2.0"}"#,
        );
        assert_eq!(q.cancels.as_deref(), Some(r#""a""#));
    }

    #[test]
    fn ids_that_are_the_same_json_value_have_one_key() {
        assert_eq!(id_key("1"), id_key("1.0"));
        assert_eq!(id_key("1"), id_key("1e0"));
        assert_eq!(id_key(r#""a""#), id_key(r#""\u0061""#));
        assert_ne!(id_key("1"), id_key(r#""1""#));
        assert_ne!(id_key("1"), id_key("2"));
        assert_ne!(id_key("0.5"), id_key("0"));
        // The short way (plain integers and strings) agrees with the long one.
        assert_eq!(id_key("12"), id_key("12.0"));
        assert_eq!(id_key("-3"), id_key("-3.0"));
        assert_eq!(id_key(r#""ab""#), id_key(r#""\u0061b""#));
        assert_ne!(id_key(r#""a\"b""#), id_key(r#""a""#));
        assert_eq!(id_key("123456789012345678901"), id_key("123456789012345678901.0"));
    }

    /// Lines of every shape the hand-read way could meet, each of them cut at every byte (what
    /// a broken host writes) and with each byte changed: it agrees with serde on every one, or
    /// leaves it to serde.
    #[test]
    fn the_hand_read_peek_agrees_with_serde_on_every_line() {
        let whole: Vec<String> = [
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":"a b","method":"ping"}"#,
            r#"{"id":-12,"jsonrpc":"2.0","result":{"content":[]}}"#,
            r#"{"jsonrpc":"2.0","id":0,"result":{}}"#,
            r#"{"jsonrpc":"2.0","error":{"code":1},"id":null}"#,
            r#"{"jsonrpc":"2.0","id":null,"error":{"code":1}}"#,
            r#"{"jsonrpc":"2.0","id":01,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1e3,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":"a\"b","method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":"\u00e9","method":"x"}"#,
            "{\"jsonrpc\":\"2.0\",\"id\":\"\u{e9}\",\"method\":\"x\"}",
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}"#,
            r#"{"method":"notifications/cancelled","params":{"requestId":3},"jsonrpc":"2.0"}"#,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"resources/read","params":{"uri":"skill://gm/SKILL.md"}}"#,
            r#"{"params":{},"id":4,"method":"tools/list"}"#,
            r#" { "jsonrpc" : "2.0" , "id" : 5 , "method" : "tools/call" , "params" : { } } "#,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools\/call"}"#,
            r#"{"jsonrpc":"2.0","extra":[1,2],"id":5,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","flag":true,"other":false,"none":null,"id":5,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"x"}"#,
            r#"{"jsonrpc":"2.0","id":5,"id":6,"method":"x"}"#,
            r#"{"result":{},"id":3}"#,
            r#"{"id":3}"#,
            r#"{"id":3,"method":"resources/read"}"#,
            r#"{}"#,
            r#"{"id":5 "method":"x"}"#,
            r#"[1]"#,
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let mut lines = whole.clone();
        for line in &whole {
            lines.extend((0..line.len()).filter(|&cut| line.is_char_boundary(cut)).map(|cut| line[..cut].to_owned()));
        }
        for line in &lines {
            if let Some(fast) = fast::of(line.as_bytes()) {
                assert_eq!(fast, Peek::of_slowly(line.as_bytes()), "{line}");
            }
        }
        // And each with one byte changed, at every place, to what JSON turns on.
        for line in &whole {
            for at in 0..line.len() {
                for b in [b'"', b'\\', b'{', b'}', b',', b':', b' ', b'0', b'7', b'-', b'.', b'e', b'a', 0x01, 0xc3] {
                    let mut bytes = line.clone().into_bytes();
                    bytes[at] = b;
                    if let Some(fast) = fast::of(&bytes) {
                        assert_eq!(fast, Peek::of_slowly(&bytes), "{}", String::from_utf8_lossy(&bytes));
                    }
                }
            }
        }
        // The lines hosts and gm write are read by hand.
        for line in &whole[..4] {
            assert!(fast::of(line.as_bytes()).is_some(), "{line}");
        }
    }

    #[test]
    fn a_big_result_after_the_id_is_not_walked() {
        // A result that is not even valid JSON past the point of interest: the scan stopped.
        let line = format!(r#"{{"jsonrpc":"2.0","id":9,"result":{{"text":"unterminated{}"#, "x".repeat(10_000));
        let p = Peek::of(line.as_bytes());
        assert!(p.response);
        assert_eq!(p.id.as_deref(), Some("9"));
    }
}
