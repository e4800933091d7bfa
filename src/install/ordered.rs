//! A JSON object read as its members in file order, each value kept as the text it was written
//! with, so a rewrite changes only the members it means to. serde_json's `Map` is sorted unless
//! the crate's `preserve_order` feature is on, and that feature would change the order of every
//! JSON object the whole binary writes.

use std::fmt;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

/// One member's value: as it was read, or written by gm.
#[derive(Debug)]
pub enum Member {
    /// The original text, written back as it was.
    Raw(Box<RawValue>),
    /// An object gm changed a member of; its other members are still raw.
    Object(Object),
    /// A value gm made (objects gm makes are [`Member::Object`]s, which keep their order).
    New(Value),
}

impl Member {
    /// The value, parsed (for comparing meaning rather than text).
    pub fn value(&self) -> Result<Value, serde_json::Error> {
        match self {
            Member::Raw(raw) => serde_json::from_str(raw.get()),
            Member::Object(o) => serde_json::to_value(o),
            Member::New(v) => Ok(v.clone()),
        }
    }
}

/// The members of a JSON object in the order they were written. Duplicate keys are kept as
/// they are; lookups take the last one, as JSON readers do.
#[derive(Debug, Default)]
pub struct Object(Vec<(String, Member)>);

/// What a JSON text holds at its top, when it is not an object.
#[derive(Debug, thiserror::Error)]
pub enum NotAnObject {
    #[error("is not JSON ({0})")]
    NotJson(serde_json::Error),
    #[error("is {0}, not a JSON object")]
    Other(&'static str),
}

impl Object {
    /// Parses `text`, which must be one JSON object.
    pub fn parse(text: &str) -> Result<Object, NotAnObject> {
        let raw: Box<RawValue> = serde_json::from_str(text).map_err(NotAnObject::NotJson)?;
        Object::from_raw(&raw)
    }

    /// Parses a member's raw text, which must be an object.
    pub fn from_raw(raw: &RawValue) -> Result<Object, NotAnObject> {
        let kind = match raw.get().trim_start().as_bytes().first() {
            Some(b'{') => return serde_json::from_str(raw.get()).map_err(NotAnObject::NotJson),
            Some(b'[') => "an array",
            Some(b'"') => "a string",
            Some(b't' | b'f') => "a boolean",
            Some(b'n') => "null",
            _ => "a number",
        };
        Err(NotAnObject::Other(kind))
    }

    pub fn get(&self, key: &str) -> Option<&Member> {
        self.0.iter().rev().find(|(k, _)| k == key).map(|(_, m)| m)
    }

    /// Sets `key` to `member`: in place of the first member of that name (dropping any later
    /// duplicates, which readers would have let win), else at the end.
    pub fn set(&mut self, key: &str, member: Member) {
        match self.0.iter().position(|(k, _)| k == key) {
            Some(i) => {
                self.0[i].1 = member;
                let mut seen = 0;
                self.0.retain(|(k, _)| {
                    if k != key {
                        return true;
                    }
                    seen += 1;
                    seen == 1
                });
            }
            None => self.0.push((key.to_owned(), member)),
        }
    }

    /// Removes every member named `key`; whether there was one.
    pub fn remove(&mut self, key: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|(k, _)| k != key);
        self.0.len() != before
    }

    /// The object as Claude Code writes its files: two spaces of indentation. A raw member
    /// keeps its own text, whatever its indentation was.
    pub fn to_pretty(&self) -> Result<String, serde_json::Error> {
        let mut out = Vec::new();
        let mut ser =
            serde_json::Serializer::with_formatter(&mut out, serde_json::ser::PrettyFormatter::with_indent(b"  "));
        self.serialize(&mut ser)?;
        // The serializer writes only UTF-8: JSON text, and raw members that were read as &str.
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

impl Serialize for Member {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Member::Raw(raw) => raw.serialize(s),
            Member::Object(o) => o.serialize(s),
            Member::New(v) => v.serialize(s),
        }
    }
}

impl Serialize for Object {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Object {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct InOrder;
        impl<'de> Visitor<'de> for InOrder {
            type Value = Object;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Object, A::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((k, v)) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push((k, Member::Raw(v)));
                }
                Ok(Object(members))
            }
        }
        d.deserialize_map(InOrder).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_come_back_in_file_order_with_their_own_text() {
        let text = r#"{"zeta": 1, "alpha": {"b":2,  "a":[1, 2]}, "mid": "x"}"#;
        let o = Object::parse(text).unwrap();
        let back = o.to_pretty().unwrap();
        assert_eq!(back, "{\n  \"zeta\": 1,\n  \"alpha\": {\"b\":2,  \"a\":[1, 2]},\n  \"mid\": \"x\"\n}");
    }

    #[test]
    fn a_set_member_replaces_in_place_and_a_new_one_goes_last() {
        let mut o = Object::parse(r#"{"a": 1, "b": 2, "a": 3}"#).unwrap();
        o.set("a", Member::New(Value::from(9)));
        o.set("c", Member::New(Value::from(4)));
        assert_eq!(o.to_pretty().unwrap(), "{\n  \"a\": 9,\n  \"b\": 2,\n  \"c\": 4\n}");
    }

    #[test]
    fn the_last_of_duplicate_keys_is_the_one_read() {
        let o = Object::parse(r#"{"a": 1, "a": 3}"#).unwrap();
        assert_eq!(o.get("a").unwrap().value().unwrap(), Value::from(3));
    }

    #[test]
    fn what_is_not_an_object_is_named() {
        assert!(matches!(Object::parse("[1]"), Err(NotAnObject::Other("an array"))));
        assert!(matches!(Object::parse(" 12 "), Err(NotAnObject::Other("a number"))));
        assert!(matches!(Object::parse("null"), Err(NotAnObject::Other("null"))));
        assert!(matches!(Object::parse("{\"a\": }"), Err(NotAnObject::NotJson(_))));
        assert!(matches!(Object::parse("{} {}"), Err(NotAnObject::NotJson(_))));
    }

    #[test]
    fn a_nested_object_is_indented_at_its_depth() {
        let mut o = Object::parse(r#"{"servers": {"x": {"command": "x"}}}"#).unwrap();
        let Some(Member::Raw(raw)) = o.get("servers") else { panic!("raw") };
        let mut servers = Object::from_raw(raw).unwrap();
        let mut gm = Object::default();
        gm.set("command", Member::New(Value::from("/bin/gm")));
        gm.set("args", Member::New(serde_json::json!(["serve"])));
        servers.set("gm", Member::Object(gm));
        o.set("servers", Member::Object(servers));
        let want = "{\n  \"servers\": {\n    \"x\": {\"command\": \"x\"},\n    \"gm\": {\n      \"command\": \"/bin/gm\",\n      \"args\": [\n        \"serve\"\n      ]\n    }\n  }\n}";
        assert_eq!(o.to_pretty().unwrap(), want);
    }
}
