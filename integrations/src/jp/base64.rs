//! JP's base64 (jp-format.md section 2): standard alphabet, padded, over
//! UTF-8, applied to the whole `tool_call_response.content`, every string
//! leaf of `tool_call_request.arguments` and every string leaf of an event's
//! `metadata`. JP decodes leniently: a value that is not valid base64, or
//! does not decode to UTF-8, is kept as it is.
//!
//! To export exactly what was imported, decoding records the paths of the
//! leaves that were kept as they were (*raw* leaves), and encoding skips
//! them. A valid padded base64 string decodes to bytes whose encoding is that
//! same string (the decoder refuses non-canonical trailing bits), so
//! everything else round-trips.

use base64::Engine as _;
use serde_json::Value;

/// Decodes `s` as JP does: `Some` only for valid padded standard base64 of
/// UTF-8 text.
pub fn decode(s: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
    String::from_utf8(bytes).ok()
}

/// Encodes `s` as JP does.
pub fn encode(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

/// Which of the strings JP encodes get its base64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base64 {
    /// Every one, as JP writes its files.
    Always,
    /// Only the text JP's loader would decode (text that could be base64):
    /// the rest stays plain, which JP's loader keeps as it is (it decodes
    /// leniently), so that it reads the same text without encoding and
    /// decoding it.
    WhereDecoded,
}

impl Base64 {
    /// `s` as JP's loader is to read it (`None`: as it is).
    pub fn apply(self, s: &str) -> Option<String> {
        match self {
            Base64::WhereDecoded if !could_be_base64(s) => None,
            _ => Some(encode(s)),
        }
    }
}

/// Whether `s` could be JP's base64 (padded standard alphabet): if not,
/// [`decode`] keeps it as it is.
fn could_be_base64(s: &str) -> bool {
    s.len() % 4 == 0
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='))
}

/// Calls `f` on every string leaf of `v` with its JSON Pointer (RFC 6901,
/// `path` followed by the leaf's position).
fn walk_string_leaves(v: &mut Value, path: &mut String, f: &mut impl FnMut(&mut String, &str)) {
    match v {
        Value::String(s) => f(s, path),
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push('/');
                path.push_str(&i.to_string());
                walk_string_leaves(item, path, f);
                path.truncate(len);
            }
        }
        Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                let len = path.len();
                path.push('/');
                path.push_str(&k.replace('~', "~0").replace('/', "~1"));
                walk_string_leaves(item, path, f);
                path.truncate(len);
            }
        }
        _ => {}
    }
}

/// Decodes every string leaf of `v` in place; pushes the path (JSON
/// Pointer, relative to `path`) of every leaf kept as it was.
pub fn decode_leaves(v: &mut Value, path: &mut String, raw: &mut Vec<String>) {
    walk_string_leaves(v, path, &mut |s, at| match decode(s) {
        Some(d) => *s = d,
        None => raw.push(at.to_owned()),
    });
}

/// Encodes every string leaf of `v` in place, except those at the paths in
/// `raw` (as recorded by [`decode_leaves`]).
pub fn encode_leaves(v: &mut Value, path: &mut String, raw: &[String]) {
    encode_leaves_as(v, path, raw, Base64::Always);
}

/// [`encode_leaves`], applying `base64`.
pub fn encode_leaves_as(v: &mut Value, path: &mut String, raw: &[String], base64: Base64) {
    let mut leaf = |s: &mut String| {
        if let Some(encoded) = base64.apply(s) {
            *s = encoded;
        }
    };
    if raw.is_empty() {
        // No leaf kept as it was: their paths are not needed.
        every_string_leaf(v, &mut leaf);
        return;
    }
    walk_string_leaves(v, path, &mut |s, at| {
        if !raw.iter().any(|r| r == at) {
            leaf(s);
        }
    });
}

/// Calls `f` on every string leaf of `v`.
fn every_string_leaf(v: &mut Value, f: &mut impl FnMut(&mut String)) {
    match v {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter_mut().for_each(|item| every_string_leaf(item, f)),
        Value::Object(map) => map.values_mut().for_each(|item| every_string_leaf(item, f)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lenient_like_jp() {
        assert_eq!(decode("aGVsbG8="), Some("hello".into()));
        assert_eq!(decode("aGVsbG8"), None, "unpadded is not JP's base64");
        assert_eq!(decode("not base64!"), None);
        assert_eq!(
            decode("//79"),
            None,
            "valid base64 of bytes that are not UTF-8"
        );
        assert_eq!(decode(""), Some(String::new()));
    }

    #[test]
    fn text_that_cannot_be_base64_is_left_plain_where_only_decoded_text_is_encoded() {
        for (s, plain) in [
            ("plain text!", true),
            ("src/lib.rs", true),
            ("abc", true),
            ("line\n", true),
            ("abcd", false),
            ("aGVsbG8=", false),
            ("//79", false),
            ("", false),
        ] {
            let applied = Base64::WhereDecoded.apply(s);
            assert_eq!(applied.is_none(), plain, "{s:?}");
            // What JP's lenient loader reads is `s` either way.
            let read = applied.map_or_else(
                || decode(s).unwrap_or(s.into()),
                |e| decode(&e).expect("decodes"),
            );
            assert_eq!(read, s);
            assert_eq!(Base64::Always.apply(s), Some(encode(s)));
        }
    }

    #[test]
    fn leaves_round_trip_with_raw_ones_kept() {
        let original = json!({"a": encode("x/y"), "b": [encode("1"), "plain text!", 5], "c~/d": {"e": "//79"}});
        let mut v = original.clone();
        let mut raw = Vec::new();
        decode_leaves(&mut v, &mut String::new(), &mut raw);
        assert_eq!(v["a"], "x/y");
        assert_eq!(v["b"][0], "1");
        assert_eq!(raw, vec!["/b/1".to_string(), "/c~0~1d/e".to_string()]);
        encode_leaves(&mut v, &mut String::new(), &raw);
        assert_eq!(v, original);
    }
}
