//! JSON text read into a [`Value`], refusing an object that has a key twice.
//!
//! RFC 8259 leaves the meaning of duplicate names open and `serde_json`
//! keeps the last value silently, so `{"content": "a", "content": "b"}`
//! would store one of two contents the writer gave without a word. Every
//! JSON text jp-store takes in (`append` input, JP files on import, config
//! JSON) goes through [`parse`], which names the duplicate key by its path.

use std::cell::RefCell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// One step of a path inside a JSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The value of a key of an object.
    Key(String),
    /// An item of an array (0-based).
    Index(usize),
}

/// Writes `steps` as the engine's field paths: keys joined by `.`, items
/// as `[i]` (`resources[0].uri`).
pub fn path_string(steps: &[Step]) -> String {
    let mut out = String::new();
    for step in steps {
        match step {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Why text is not a JSON value with unique keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonTextError {
    /// 1-based line of the problem.
    pub line: usize,
    /// 1-based column of the problem.
    pub column: usize,
    /// For a duplicate key: the path of the key's second occurrence (its
    /// object's path, then the key).
    pub duplicate: Option<Vec<Step>>,
    /// What is wrong (without the position).
    pub message: String,
}

impl fmt::Display for JsonTextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // As serde_json writes its own errors.
        write!(
            f,
            "{} at line {} column {}",
            self.message, self.line, self.column
        )
    }
}

impl std::error::Error for JsonTextError {}

/// Parses `text` as one JSON value (whitespace around it allowed), refusing
/// any object with a key twice.
pub fn parse(text: &[u8]) -> Result<Value, JsonTextError> {
    let state = State::default();
    let mut de = serde_json::Deserializer::from_slice(text);
    let result = Seed { state: &state }
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v));
    result.map_err(|e| {
        let duplicate = state.duplicate.into_inner();
        let full = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        let message = match &duplicate {
            Some(path) => format!(
                "duplicate key `{}` in one JSON object (which value was meant is unknown)",
                match path.last() {
                    Some(Step::Key(k)) => k.as_str(),
                    _ => "",
                }
            ),
            None => full.strip_suffix(&position).unwrap_or(&full).to_string(),
        };
        JsonTextError {
            line: e.line(),
            column: e.column(),
            duplicate,
            message,
        }
    })
}

#[derive(Default)]
struct State {
    /// The path of the value being read.
    path: RefCell<Vec<Step>>,
    /// Set when a duplicate key is found (the error itself is serde's).
    duplicate: RefCell<Option<Vec<Step>>>,
}

#[derive(Clone, Copy)]
struct Seed<'s> {
    state: &'s State,
}

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        // serde_json never produces a non-finite float from text.
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        loop {
            self.state.path.borrow_mut().push(Step::Index(items.len()));
            let item = seq.next_element_seed(self);
            self.state.path.borrow_mut().pop();
            match item? {
                Some(v) => items.push(v),
                None => return Ok(Value::Array(items)),
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut obj = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.state.path.borrow_mut().push(Step::Key(key.clone()));
            if obj.contains_key(&key) {
                *self.state.duplicate.borrow_mut() = Some(self.state.path.borrow().clone());
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            let value = map.next_value_seed(self);
            self.state.path.borrow_mut().pop();
            obj.insert(key, value?);
        }
        Ok(Value::Object(obj))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_serde_json_reads_them() {
        for text in [
            r#"{"a": [1, -2, 3.5, "x", null, true, {"b": {}}], "c": "\u00e9"}"#,
            "[]",
            " 7 ",
            r#"{"a": {"k": 1}, "b": {"k": 2}}"#,
        ] {
            let expected: Value = serde_json::from_str(text).expect(text);
            assert_eq!(parse(text.as_bytes()).expect(text), expected, "{text}");
        }
    }

    #[test]
    fn a_duplicate_key_is_named_by_its_path_at_any_depth() {
        let cases: [(&str, &str, usize); 4] = [
            (r#"{"a": 1, "a": 2}"#, "a", 1),
            (
                "[{}, {\"x\": [0, {\"k\": 1,\n \"k\": 1}]}]",
                "[1].x[1].k",
                2,
            ),
            (r#"{"o": {"a": 1, "b": 2, "a": 1}}"#, "o.a", 1),
            (r#"{"a": 1, "b": {"a": 2}, "a": 3}"#, "a", 1),
        ];
        for (text, path, line) in cases {
            let e = parse(text.as_bytes()).expect_err(text);
            let found = e.duplicate.as_deref().map(path_string);
            assert_eq!(found.as_deref(), Some(path), "{text}");
            assert_eq!(e.line, line, "{text}");
            assert!(e.message.contains("duplicate key"), "{text}: {e}");
        }
    }

    #[test]
    fn syntax_errors_keep_their_position_and_no_path() {
        let e = parse(b"{\"a\": 1,\n}").expect_err("trailing comma");
        assert_eq!((e.line, e.duplicate), (2, None));
        let e = parse(b"{} {}").expect_err("two values");
        assert_eq!(e.duplicate, None);
    }
}
