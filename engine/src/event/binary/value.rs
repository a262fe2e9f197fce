//! JSON values in the binary form (format-spec.md 4.2, version 2): a tag
//! byte, then what the tag says. Object keys keep their order; numbers are
//! what `serde_json` holds (an unsigned or negative 64-bit integer, or a
//! finite 64-bit float); a string that is the canonical standard base64 of
//! at least 48 bytes (a thinking signature) is stored as those bytes and
//! written back as the same base64 text.
//!
//! | tag | value |
//! |---|---|
//! | `00` | null |
//! | `01` | false |
//! | `02` | true |
//! | `03` | varint `n`: the integer `n` |
//! | `04` | varint `n` (below 2⁶³): the integer `-(n + 1)` |
//! | `05` | 8 bytes: a finite f64, little endian |
//! | `06` | varint length, UTF-8 bytes: a string |
//! | `07` | varint length, bytes: a string, the standard base64 (with padding) of the bytes |
//! | `08` | varint count, then that many values: an array |
//! | `09` | varint count, then that many (string key, value): an object, keys distinct |

use base64::Engine as _;
use serde_json::{Map, Number, Value};

use super::wire::{put_str, put_varint, Reader};
use crate::event::Object;

/// Deepest nesting of arrays and objects written or read (as for version 1
/// entries: `serde_json` refuses input nested deeper than 128, so nothing
/// appended is deeper; the bound keeps hostile bytes off the stack).
pub const MAX_DEPTH: usize = 256;

/// Tag of `null`.
pub const TAG_NULL: u8 = 0x00;
/// Tag of `false`.
pub const TAG_FALSE: u8 = 0x01;
/// Tag of `true`.
pub const TAG_TRUE: u8 = 0x02;
/// Tag of a non-negative integer.
pub const TAG_UINT: u8 = 0x03;
/// Tag of a negative integer.
pub const TAG_NEG_INT: u8 = 0x04;
/// Tag of a float.
pub const TAG_FLOAT: u8 = 0x05;
/// Tag of a string.
pub const TAG_STR: u8 = 0x06;
/// Tag of a string kept as the bytes it is the base64 of.
pub const TAG_BASE64: u8 = 0x07;
/// Tag of an array.
pub const TAG_ARRAY: u8 = 0x08;
/// Tag of an object.
pub const TAG_OBJECT: u8 = 0x09;

/// Strings shorter than this are never stored as base64 bytes.
pub const BASE64_MIN_CHARS: usize = 64;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// The bytes `s` is the canonical standard base64 of (padding included, no
/// other character, re-encoding gives `s` back), if `s` is at least
/// [`BASE64_MIN_CHARS`] long; else `None`.
pub fn base64_bytes(s: &str) -> Option<Vec<u8>> {
    let b = s.as_bytes();
    if b.len() < BASE64_MIN_CHARS || b.len() % 4 != 0 {
        return None;
    }
    let body = b.len() - b.iter().rev().take(2).take_while(|&&c| c == b'=').count();
    if !b[..body]
        .iter()
        .all(|&c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
    {
        return None;
    }
    let bytes = B64.decode(b).ok()?;
    (B64.encode(&bytes) == s).then_some(bytes)
}

/// Appends `value`; fails (having appended part of it) if it is nested
/// deeper than [`MAX_DEPTH`] counting from `depth`.
pub fn put_value(out: &mut Vec<u8>, value: &Value, depth: usize) -> Result<(), String> {
    match value {
        Value::Null => out.push(TAG_NULL),
        Value::Bool(false) => out.push(TAG_FALSE),
        Value::Bool(true) => out.push(TAG_TRUE),
        Value::Number(n) => put_number(out, n),
        Value::String(s) => match base64_bytes(s) {
            Some(bytes) => {
                out.push(TAG_BASE64);
                put_varint(out, bytes.len() as u64);
                out.extend_from_slice(&bytes);
            }
            None => {
                out.push(TAG_STR);
                put_str(out, s);
            }
        },
        Value::Array(items) => {
            let depth = deeper(depth)?;
            out.push(TAG_ARRAY);
            put_varint(out, items.len() as u64);
            for item in items {
                put_value(out, item, depth)?;
            }
        }
        Value::Object(o) => put_object(out, o, depth)?,
    }
    Ok(())
}

/// Appends an object (as [`put_value`] would the value holding it).
pub fn put_object(out: &mut Vec<u8>, object: &Object, depth: usize) -> Result<(), String> {
    let depth = deeper(depth)?;
    out.push(TAG_OBJECT);
    put_varint(out, object.len() as u64);
    for (k, v) in object {
        put_str(out, k);
        put_value(out, v, depth)?;
    }
    Ok(())
}

fn deeper(depth: usize) -> Result<usize, String> {
    if depth >= MAX_DEPTH {
        return Err(format!("a value nested deeper than {MAX_DEPTH} levels"));
    }
    Ok(depth + 1)
}

fn put_number(out: &mut Vec<u8>, n: &Number) {
    if let Some(u) = n.as_u64() {
        out.push(TAG_UINT);
        put_varint(out, u);
    } else if let Some(i) = n.as_i64() {
        // Negative: as_u64 failed.
        out.push(TAG_NEG_INT);
        put_varint(out, !(i as u64));
    } else {
        out.push(TAG_FLOAT);
        out.extend_from_slice(&n.as_f64().unwrap_or(0.0).to_le_bytes());
    }
}

/// Reads one value, at most [`MAX_DEPTH`] levels deep counting from
/// `depth`.
pub fn read_value(r: &mut Reader<'_>, depth: usize) -> Result<Value, String> {
    let tag = r.u8()?;
    Ok(match tag {
        TAG_NULL => Value::Null,
        TAG_FALSE => Value::Bool(false),
        TAG_TRUE => Value::Bool(true),
        TAG_UINT => Value::Number(r.varint()?.into()),
        TAG_NEG_INT => Value::Number(read_negative(r)?.into()),
        TAG_FLOAT => Value::Number(read_float(r)?),
        TAG_STR => Value::String(r.str()?.to_owned()),
        TAG_BASE64 => {
            let len = r.varint()?;
            let len = usize::try_from(len).map_err(|_| r.error("a huge base64 length"))?;
            Value::String(B64.encode(r.take(len)?))
        }
        TAG_ARRAY => {
            let depth = deeper(depth).map_err(|e| r.error(e))?;
            let count = r.varint()?;
            // Each value takes at least one byte: a count beyond what is
            // left is refused before anything is reserved.
            let count = bounded_count(r, count)?;
            let mut items = Vec::with_capacity(count);
            for _ in 0..count {
                items.push(read_value(r, depth)?);
            }
            Value::Array(items)
        }
        TAG_OBJECT => Value::Object(read_object_after_tag(r, depth)?),
        other => return Err(r.error(format_args!("value tag {other:#04x}"))),
    })
}

/// Reads one value that must be an object.
pub fn read_object(r: &mut Reader<'_>, depth: usize) -> Result<Object, String> {
    match r.u8()? {
        TAG_OBJECT => read_object_after_tag(r, depth),
        other => Err(r.error(format_args!(
            "value tag {other:#04x} where an object is due"
        ))),
    }
}

fn read_object_after_tag(r: &mut Reader<'_>, depth: usize) -> Result<Object, String> {
    let depth = deeper(depth).map_err(|e| r.error(e))?;
    let count = r.varint()?;
    // A key and a value take at least two bytes.
    let count = bounded_count(r, count.saturating_mul(2))? / 2;
    let mut map = Map::with_capacity(count);
    for _ in 0..count {
        let key = r.str()?;
        let value = read_value(r, depth)?;
        if map.insert(key.to_owned(), value).is_some() {
            return Err(r.error(format_args!("the key {key:?} twice in one object")));
        }
    }
    Ok(map)
}

/// `count` as a usize, if the bytes left can hold that many one-byte items.
fn bounded_count(r: &Reader<'_>, count: u64) -> Result<usize, String> {
    usize::try_from(count)
        .ok()
        .filter(|&c| c <= r.remaining())
        .ok_or_else(|| {
            r.error(format_args!(
                "a count of {count} where {} bytes remain",
                r.remaining()
            ))
        })
}

fn read_negative(r: &mut Reader<'_>) -> Result<i64, String> {
    let n = r.varint()?;
    if n > i64::MAX as u64 {
        return Err(r.error(format_args!("a negative integer -({n} + 1) beyond 64 bits")));
    }
    Ok(!(n as i64))
}

fn read_float(r: &mut Reader<'_>) -> Result<Number, String> {
    let bytes: [u8; 8] = r
        .take(8)?
        .try_into()
        .map_err(|_| r.error("a short float"))?;
    let f = f64::from_le_bytes(bytes);
    Number::from_f64(f).ok_or_else(|| r.error(format_args!("the float {f}, not finite")))
}

/// Checks one value without building it (as [`read_value`] would accept
/// it).
pub fn skip_value(r: &mut Reader<'_>, depth: usize) -> Result<(), String> {
    match r.u8()? {
        TAG_NULL | TAG_FALSE | TAG_TRUE => {}
        TAG_UINT => {
            r.varint()?;
        }
        TAG_NEG_INT => {
            read_negative(r)?;
        }
        TAG_FLOAT => {
            read_float(r)?;
        }
        TAG_STR => {
            r.str()?;
        }
        TAG_BASE64 => {
            let len = r.varint()?;
            let len = usize::try_from(len).map_err(|_| r.error("a huge base64 length"))?;
            r.take(len)?;
        }
        TAG_ARRAY => {
            let depth = deeper(depth).map_err(|e| r.error(e))?;
            let count = r.varint()?;
            let count = bounded_count(r, count)?;
            for _ in 0..count {
                skip_value(r, depth)?;
            }
        }
        TAG_OBJECT => skip_object_after_tag(r, depth)?,
        other => return Err(r.error(format_args!("value tag {other:#04x}"))),
    }
    Ok(())
}

/// The first string leaf of a value whose key is `key`, searched depth
/// first in document order, without building the value: what a search of
/// the [`Value`] [`read_value`] gives finds (a string stored as base64
/// bytes is given as its base64 text, the others borrowed). The bytes were
/// checked already; an error here says they were not.
pub fn find_string_leaf<'a>(
    r: &mut Reader<'a>,
    key: &str,
) -> Result<Option<std::borrow::Cow<'a, str>>, String> {
    find_string_leaf_at(r, key, false, 0)
}

/// [`find_string_leaf`] of a value that is the member `key` of its object
/// when `keyed`.
fn find_string_leaf_at<'a>(
    r: &mut Reader<'a>,
    key: &str,
    keyed: bool,
    depth: usize,
) -> Result<Option<std::borrow::Cow<'a, str>>, String> {
    use std::borrow::Cow;
    let tag = r.rest().first().copied();
    match tag {
        Some(TAG_STR) if keyed => {
            r.u8()?;
            Ok(Some(Cow::Borrowed(r.str()?)))
        }
        Some(TAG_BASE64) if keyed => {
            r.u8()?;
            let len = r.varint()?;
            let len = usize::try_from(len).map_err(|_| r.error("a huge base64 length"))?;
            Ok(Some(Cow::Owned(B64.encode(r.take(len)?))))
        }
        Some(TAG_ARRAY) => {
            r.u8()?;
            let depth = deeper(depth).map_err(|e| r.error(e))?;
            let count = r.varint()?;
            let count = bounded_count(r, count)?;
            for _ in 0..count {
                if let Some(found) = find_string_leaf_at(r, key, false, depth)? {
                    return Ok(Some(found));
                }
            }
            Ok(None)
        }
        Some(TAG_OBJECT) => {
            r.u8()?;
            let depth = deeper(depth).map_err(|e| r.error(e))?;
            let count = r.varint()?;
            let count = bounded_count(r, count.saturating_mul(2))? / 2;
            for _ in 0..count {
                let member = r.str()?;
                if let Some(found) = find_string_leaf_at(r, key, member == key, depth)? {
                    return Ok(Some(found));
                }
            }
            Ok(None)
        }
        _ => skip_value(r, depth).map(|()| None),
    }
}

/// Checks one value that must be an object without building it (as
/// [`read_object`] would accept it).
pub fn skip_object(r: &mut Reader<'_>, depth: usize) -> Result<(), String> {
    match r.u8()? {
        TAG_OBJECT => skip_object_after_tag(r, depth),
        other => Err(r.error(format_args!(
            "value tag {other:#04x} where an object is due"
        ))),
    }
}

/// Objects of at most this many keys are checked for a key twice by
/// comparing each key with those before it; larger ones with a hash set.
const LINEAR_KEYS: usize = 16;

/// [`read_object_after_tag`]'s checks, refusing what it refuses at the same
/// place, with the keys borrowed and the values skipped.
fn skip_object_after_tag(r: &mut Reader<'_>, depth: usize) -> Result<(), String> {
    let depth = deeper(depth).map_err(|e| r.error(e))?;
    let count = r.varint()?;
    let count = bounded_count(r, count.saturating_mul(2))? / 2;
    // The keys of a small object are kept on the stack.
    let mut small: [&str; LINEAR_KEYS] = [""; LINEAR_KEYS];
    let mut large: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for k in 0..count {
        let key = r.str()?;
        skip_value(r, depth)?;
        let fresh = if count <= LINEAR_KEYS {
            let fresh = !small[..k].contains(&key);
            small[k] = key;
            fresh
        } else {
            large.insert(key)
        };
        if !fresh {
            return Err(r.error(format_args!("the key {key:?} twice in one object")));
        }
    }
    Ok(())
}

/// How a value is written as JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonStyle {
    /// No whitespace (`serde_json::to_writer`).
    Compact,
    /// Two-space indentation (`serde_json::to_writer_pretty`), the value
    /// starting at this nesting level.
    Pretty(usize),
}

/// Writes one value as JSON text, byte for byte as `serde_json` writes the
/// [`Value`] [`read_value`] gives, without building it. The bytes were
/// checked already (a [`skip_value`] or [`read_value`] of them succeeded);
/// an error here says they were not.
pub fn write_json(r: &mut Reader<'_>, out: &mut Vec<u8>, style: JsonStyle) -> Result<(), String> {
    write_json_at(r, out, style, 0)
}

fn write_json_at(
    r: &mut Reader<'_>,
    out: &mut Vec<u8>,
    style: JsonStyle,
    depth: usize,
) -> Result<(), String> {
    match r.u8()? {
        TAG_NULL => out.extend_from_slice(b"null"),
        TAG_FALSE => out.extend_from_slice(b"false"),
        TAG_TRUE => out.extend_from_slice(b"true"),
        TAG_UINT => push_u64(out, r.varint()?),
        TAG_NEG_INT => {
            let n = read_negative(r)?;
            out.push(b'-');
            push_u64(out, n.unsigned_abs());
        }
        TAG_FLOAT => {
            let n = read_float(r)?;
            out.extend_from_slice(n.to_string().as_bytes());
        }
        TAG_STR => push_json_str(out, r.str()?),
        TAG_BASE64 => {
            let len = r.varint()?;
            let len = usize::try_from(len).map_err(|_| r.error("a huge base64 length"))?;
            let bytes = r.take(len)?;
            out.push(b'"');
            let start = out.len();
            out.resize(start + len.div_ceil(3) * 4, 0);
            let written = B64
                .encode_slice(bytes, &mut out[start..])
                .map_err(|e| format!("base64 of {len} bytes: {e}"))?;
            out.truncate(start + written);
            out.push(b'"');
        }
        TAG_ARRAY => {
            let depth = deeper(depth).map_err(|e| r.error(e))?;
            let count = r.varint()?;
            let count = bounded_count(r, count)?;
            if count == 0 {
                out.extend_from_slice(b"[]");
                return Ok(());
            }
            out.push(b'[');
            for i in 0..count {
                if i > 0 {
                    out.push(b',');
                }
                newline(out, style, 1);
                write_json_at(r, out, nested(style), depth)?;
            }
            newline(out, style, 0);
            out.push(b']');
        }
        TAG_OBJECT => {
            let depth = deeper(depth).map_err(|e| r.error(e))?;
            let count = r.varint()?;
            let count = bounded_count(r, count.saturating_mul(2))? / 2;
            if count == 0 {
                out.extend_from_slice(b"{}");
                return Ok(());
            }
            out.push(b'{');
            for i in 0..count {
                if i > 0 {
                    out.push(b',');
                }
                newline(out, style, 1);
                push_json_str(out, r.str()?);
                out.extend_from_slice(match style {
                    JsonStyle::Compact => b":",
                    JsonStyle::Pretty(_) => b": ",
                });
                write_json_at(r, out, nested(style), depth)?;
            }
            newline(out, style, 0);
            out.push(b'}');
        }
        other => return Err(r.error(format_args!("value tag {other:#04x}"))),
    }
    Ok(())
}

fn nested(style: JsonStyle) -> JsonStyle {
    match style {
        JsonStyle::Compact => JsonStyle::Compact,
        JsonStyle::Pretty(level) => JsonStyle::Pretty(level + 1),
    }
}

/// A newline and the indentation of `level + extra` (pretty style only).
fn newline(out: &mut Vec<u8>, style: JsonStyle, extra: usize) {
    if let JsonStyle::Pretty(level) = style {
        push_pretty_indent(out, level + extra);
    }
}

/// Appends `n` in decimal.
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    const PAIRS: &[u8; 200] = b"00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    while n >= 100 {
        let d = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        buf[i] = PAIRS[d];
        buf[i + 1] = PAIRS[d + 1];
    }
    if n >= 10 {
        let d = n as usize * 2;
        i -= 2;
        buf[i] = PAIRS[d];
        buf[i + 1] = PAIRS[d + 1];
    } else {
        i -= 1;
        buf[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&buf[i..]);
}

/// What each byte becomes inside a JSON string, as `serde_json` escapes it:
/// 0 unchanged, `u` a `\u00XX` escape, else the letter after a backslash.
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// The index of the first byte at or after `from` of `bytes` that a JSON
/// string escapes (a control character, `"` or `\\`), or `bytes.len()`.
/// Eight bytes at a time: in each word, a flag is set in the lowest byte
/// that is below 0x20 or equal to `"` or `\\` (borrows only run upwards,
/// so the lowest flag is exact), and the bytes from it on are looked at one
/// by one.
fn next_escape(bytes: &[u8], from: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let mut i = from;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let x = u64::from_le_bytes(word);
        let quote = x ^ (ONES * u64::from(b'"'));
        let backslash = x ^ (ONES * u64::from(b'\\'));
        let flags = (x.wrapping_sub(ONES * 0x20) & !x
            | quote.wrapping_sub(ONES) & !quote
            | backslash.wrapping_sub(ONES) & !backslash)
            & HIGH;
        if flags != 0 {
            return i + (flags.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while let Some(&b) = bytes.get(i) {
        if ESCAPE[b as usize] != 0 {
            return i;
        }
        i += 1;
    }
    i
}

/// Appends `s` as a JSON string, escaped as `serde_json` escapes it.
pub fn push_json_str(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 2);
    out.push(b'"');
    push_json_str_body(out, s);
    out.push(b'"');
}

/// Appends `s` escaped as inside a JSON string, without the quotes: a
/// string written in pieces is the quote, each piece's body, the quote.
pub fn push_json_str_body(out: &mut Vec<u8>, s: &str) {
    push_json_utf8_body(out, s.as_bytes());
}

/// [`push_json_str_body`] of bytes the caller checked to be UTF-8 (a
/// blob's text read once and checked once): a JSON string escapes byte by
/// byte, so the bytes need not be made a `&str` again to be written.
pub fn push_json_utf8_body(out: &mut Vec<u8>, bytes: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(bytes.len());
    let mut start = 0;
    loop {
        let i = next_escape(bytes, start);
        out.extend_from_slice(&bytes[start..i]);
        let Some(&b) = bytes.get(i) else { break };
        match ESCAPE[b as usize] {
            b'u' => out.extend_from_slice(&[
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[(b >> 4) as usize],
                HEX[(b & 0xf) as usize],
            ]),
            letter => out.extend_from_slice(&[b'\\', letter]),
        }
        start = i + 1;
    }
}

/// Appends `v` as JSON text with two-space indentation, byte for byte as
/// `serde_json::to_writer_pretty` writes it (strings escaped eight bytes
/// at a time, see [`push_json_str`]).
pub fn push_value_pretty(out: &mut Vec<u8>, v: &Value) {
    push_value_pretty_at(out, v, 0);
}

/// A line break and the indentation of `depth` in pretty JSON.
pub fn push_pretty_indent(out: &mut Vec<u8>, depth: usize) {
    /// A line break and the indentation of the deepest levels a request
    /// body or a view reaches (32), copied at once.
    const LINE: &[u8; 65] = b"\n                                                                ";
    match LINE.get(..1 + 2 * depth) {
        Some(line) => out.extend_from_slice(line),
        None => {
            out.push(b'\n');
            for _ in 0..depth {
                out.extend_from_slice(b"  ");
            }
        }
    }
}

/// [`push_value_pretty`] of a value nested `depth` levels deep (its
/// inner lines indented as they are inside a document written whole).
pub fn push_value_pretty_at(out: &mut Vec<u8>, v: &Value, depth: usize) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => match n.as_u64() {
            Some(u) => push_u64(out, u),
            None => out.extend_from_slice(n.to_string().as_bytes()),
        },
        Value::String(s) => push_json_str(out, s),
        Value::Array(items) if items.is_empty() => out.extend_from_slice(b"[]"),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                push_pretty_indent(out, depth + 1);
                push_value_pretty_at(out, item, depth + 1);
            }
            push_pretty_indent(out, depth);
            out.push(b']');
        }
        Value::Object(map) => push_object_pretty_at(out, map, depth),
    }
}

/// [`push_value_pretty_at`] of an object held as its map.
pub fn push_object_pretty_at(out: &mut Vec<u8>, map: &Map<String, Value>, depth: usize) {
    if map.is_empty() {
        out.extend_from_slice(b"{}");
        return;
    }
    out.push(b'{');
    for (i, (key, item)) in map.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        push_pretty_indent(out, depth + 1);
        push_json_str(out, key);
        out.extend_from_slice(b": ");
        push_value_pretty_at(out, item, depth + 1);
    }
    push_pretty_indent(out, depth);
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn round_trip(v: &Value) -> Value {
        let mut out = Vec::new();
        put_value(&mut out, v, 0).expect("encode");
        let mut r = Reader::new(&out);
        let back = read_value(&mut r, 0).expect("decode");
        assert!(r.is_empty());
        let mut r = Reader::new(&out);
        skip_value(&mut r, 0).expect("skip");
        assert!(r.is_empty());
        for (style, expected) in [
            (JsonStyle::Compact, serde_json::to_vec(v)),
            (JsonStyle::Pretty(0), serde_json::to_vec_pretty(v)),
        ] {
            let mut text = Vec::new();
            write_json(&mut Reader::new(&out), &mut text, style).expect("write");
            assert_eq!(
                String::from_utf8_lossy(&text),
                String::from_utf8_lossy(&expected.expect("serialize")),
                "{style:?}"
            );
        }
        back
    }

    /// An object of `keys` (each with a null value), in the binary form.
    fn object_of(keys: &[String]) -> Vec<u8> {
        let mut out = vec![TAG_OBJECT];
        put_varint(&mut out, keys.len() as u64);
        for k in keys {
            put_str(&mut out, k);
            out.push(TAG_NULL);
        }
        out
    }

    #[test]
    fn skipping_an_object_refuses_a_key_twice_where_reading_it_does() {
        // Small objects are checked key by key, large ones with a set.
        for n in [2usize, LINEAR_KEYS, LINEAR_KEYS + 1, 100] {
            let mut keys: Vec<String> = (0..n - 1).map(|i| format!("k{i}")).collect();
            let fine = object_of(&keys);
            assert_eq!(skip_value(&mut Reader::new(&fine), 0), Ok(()), "{n} keys");
            assert_eq!(skip_object(&mut Reader::new(&fine), 0), Ok(()), "{n} keys");
            keys.push(format!("k{}", n / 2 - 1));
            let twice = object_of(&keys);
            let read = read_object(&mut Reader::new(&twice), 0).map(|_| ());
            assert!(read.is_err(), "{n} keys");
            assert_eq!(skip_object(&mut Reader::new(&twice), 0), read, "{n} keys");
            assert_eq!(skip_value(&mut Reader::new(&twice), 0), read, "{n} keys");
            // Nested in an array, too.
            let mut nested = vec![TAG_ARRAY, 1];
            nested.extend_from_slice(&twice);
            assert!(
                skip_value(&mut Reader::new(&nested), 0).is_err(),
                "{n} keys"
            );
        }
        // An object part must be an object.
        assert_eq!(
            skip_object(&mut Reader::new(&[TAG_NULL]), 0),
            read_object(&mut Reader::new(&[TAG_NULL]), 0).map(|_| ())
        );
    }

    /// Indentation is copied from a line of 32 levels; deeper levels are
    /// written two spaces at a time, as `serde_json` writes every level.
    #[test]
    fn deep_values_are_indented_as_serde_json_indents_them() {
        for depth in [0usize, 1, 15, 16, 17, 24, 40] {
            let mut v = json!({"leaf": [1, "two"]});
            for level in 0..depth {
                v = if level % 2 == 0 {
                    json!([v, level])
                } else {
                    json!({"level": level, "inner": v})
                };
            }
            assert_eq!(round_trip(&v), v, "depth {depth}");
            let mut pretty = Vec::new();
            push_value_pretty(&mut pretty, &v);
            let expected = serde_json::to_vec_pretty(&v).expect("serialize");
            assert_eq!(
                String::from_utf8_lossy(&pretty),
                String::from_utf8_lossy(&expected),
                "depth {depth}"
            );
        }
    }

    #[test]
    fn values_round_trip_and_write_as_serde_json_does() {
        let signature = B64.encode((0..200u32).map(|i| (i * 7 % 251) as u8).collect::<Vec<_>>());
        let v = json!({
            "z": null, "a": [true, false, 0, 1, -1, u64::MAX, i64::MIN, 1.5, -0.0, 1e300, 3.0],
            "s": "quote \" backslash \\ newline \n tab \t ctl \u{1} é \u{2028}",
            "empty": {}, "list": [], "nested": {"k": [{"x": []}]},
            "signature": signature,
            "not base64": "A".repeat(63),
            "padded": format!("{}=", "A".repeat(67)),
        });
        assert_eq!(round_trip(&v), v);
        let mut out = Vec::new();
        put_value(&mut out, &json!(signature), 0).expect("encode");
        assert_eq!(out[0], TAG_BASE64, "a signature is stored as its bytes");
        assert!(out.len() < signature.len());
    }

    #[test]
    fn strings_and_values_are_written_as_serde_json_writes_them() {
        // Every escaped byte at every position of an eight-byte word, with
        // multi-byte characters and DEL (not escaped) around it.
        let specials = [
            '"', '\\', '\n', '\t', '\r', '\u{8}', '\u{c}', '\u{0}', '\u{1f}',
        ];
        for len in 0..20 {
            for at in 0..len.max(1) {
                for &c in &specials {
                    let mut s: String =
                        (0..len).map(|i| ['a', 'é', '\u{7f}', '€'][i % 4]).collect();
                    let cut = s.char_indices().nth(at).map_or(s.len(), |(i, _)| i);
                    s.insert(cut, c);
                    let mut out = Vec::new();
                    push_json_str(&mut out, &s);
                    let expected = serde_json::to_vec(&s).expect("serialize");
                    assert_eq!(out, expected, "{s:?}");
                }
            }
        }
        let v = json!({
            "empty": {}, "none": [], "n": [0, 1, -7, 18_446_744_073_709_551_615u64, 1.5, -0.25, 1e300],
            "nested": [{"a": [[], {}, [1, {"b": null}]], "t": true, "f": false}],
            "text": "line one\nline \"two\"\t\u{1}\\ end",
        });
        for v in [v, json!([]), json!({}), json!("x"), json!(null)] {
            let mut out = Vec::new();
            push_value_pretty(&mut out, &v);
            assert_eq!(
                out,
                serde_json::to_vec_pretty(&v).expect("serialize"),
                "{v}"
            );
        }
    }

    #[test]
    fn only_canonical_base64_is_stored_as_bytes() {
        let canonical = B64.encode([0xabu8; 48]);
        assert_eq!(base64_bytes(&canonical), Some(vec![0xab; 48]));
        // Non-zero trailing bits, a space, URL-safe letters, too short.
        let mut trailing = B64.encode([0xabu8; 49]);
        trailing.replace_range(trailing.len() - 3..trailing.len() - 2, "r");
        for s in [
            trailing,
            format!("{} ", &canonical[..canonical.len() - 1]),
            canonical.replace('+', "-").replace('/', "_") + "-_-_",
            B64.encode([1u8; 30]),
        ] {
            if let Some(bytes) = base64_bytes(&s) {
                assert_eq!(B64.encode(bytes), s, "not canonical: {s}");
            }
        }
    }

    #[test]
    fn hostile_bytes_are_errors_without_large_allocations() {
        // Counts far beyond the bytes left.
        let mut big = vec![TAG_ARRAY];
        put_varint(&mut big, u64::MAX);
        assert!(read_value(&mut Reader::new(&big), 0).is_err());
        let mut big = vec![TAG_OBJECT];
        put_varint(&mut big, 1 << 40);
        assert!(read_value(&mut Reader::new(&big), 0).is_err());
        // Too deep, and just deep enough.
        let nested = |levels: usize| {
            let mut bytes = [TAG_ARRAY, 1].repeat(levels);
            bytes.push(TAG_NULL);
            bytes
        };
        assert!(read_value(&mut Reader::new(&nested(MAX_DEPTH)), 0).is_ok());
        assert!(skip_value(&mut Reader::new(&nested(MAX_DEPTH)), 0).is_ok());
        assert!(read_value(&mut Reader::new(&nested(MAX_DEPTH + 1)), 0).is_err());
        assert!(skip_value(&mut Reader::new(&nested(MAX_DEPTH + 1)), 0).is_err());
        // A key twice, a float that is not finite, an unknown tag.
        let mut twice = vec![TAG_OBJECT, 2];
        for _ in 0..2 {
            put_str(&mut twice, "k");
            twice.push(TAG_NULL);
        }
        assert!(read_value(&mut Reader::new(&twice), 0).is_err());
        let mut nan = vec![TAG_FLOAT];
        nan.extend_from_slice(&f64::NAN.to_le_bytes());
        assert!(read_value(&mut Reader::new(&nan), 0).is_err());
        assert!(read_value(&mut Reader::new(&[0x0a]), 0).is_err());
        // Every prefix of a value fails.
        let mut out = Vec::new();
        put_value(&mut out, &json!({"a": [1, "two", {"b": null}]}), 0).expect("encode");
        for cut in 0..out.len() {
            assert!(
                read_value(&mut Reader::new(&out[..cut]), 0).is_err(),
                "{cut}"
            );
        }
        // Encoding refuses what reading would refuse.
        let mut v = json!(1);
        for _ in 0..MAX_DEPTH {
            v = json!([v]);
        }
        assert!(put_value(&mut Vec::new(), &v, 0).is_ok());
        assert!(put_value(&mut Vec::new(), &json!([v]), 0).is_err());
    }
}
