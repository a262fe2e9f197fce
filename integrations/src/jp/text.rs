//! JSON text as JP's files hold it, below the level of values: the layout
//! of a file ([`Shape`]), text pretty-printed exactly as serde_json's
//! `PrettyFormatter` writes it ([`pretty`]), insignificant whitespace
//! removed ([`minify`]), the spans of the items of an array and of one
//! member of an object, and edits that turn one text into another
//! ([`diff`], [`apply`]).
//!
//! Every function here takes text that was parsed as JSON already (a JP
//! file read by import, or JSON that serde_json or this module wrote) and
//! walks its bytes without building values. Given anything else they do not
//! panic: the span finders answer `None`, [`pretty`] and [`minify`] copy
//! what they do not understand.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// The longest indentation unit (bytes) export writes: it is repeated at
/// every depth of every line, so a long one would multiply what export
/// writes. [`Shape::detect`] takes a file indented by a longer one as
/// JP's layout.
pub const MAX_INDENT: usize = 64;

/// The layout of a JSON text beyond its tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// The indentation unit of the pretty form (JP's: two spaces); `None`
    /// for the compact form (serde_json's `to_vec`: no whitespace at all).
    pub indent: Option<String>,
    /// Whether lines end with `\r\n` rather than `\n`.
    pub crlf: bool,
}

impl Default for Shape {
    /// JP's: two spaces, `\n`.
    fn default() -> Self {
        Shape {
            indent: Some("  ".to_owned()),
            crlf: false,
        }
    }
}

impl Shape {
    /// The line end.
    pub fn newline(&self) -> &'static str {
        if self.crlf {
            "\r\n"
        } else {
            "\n"
        }
    }

    /// The shape of `text` (one JSON value): for an array or object that
    /// holds a value, pretty when there is a line break inside it, with the
    /// indentation unit read from the first indented line (the whitespace
    /// after the first line break) and the line end from that break, else
    /// compact. A text that shows neither (`[]`, `{}`, a scalar, not one
    /// value), or whose unit is longer than
    /// [`MAX_INDENT`], has JP's shape.
    pub fn detect(text: &str) -> Shape {
        let b = text.as_bytes();
        let start = skip_ws(b, 0);
        let end = b.len() - b.iter().rev().take_while(|&&c| is_ws(c)).count();
        let inner = skip_ws(b, start + 1);
        let holds_a_value = matches!(b.get(start), Some(b'[' | b'{'))
            && inner < end
            && !matches!(b.get(inner), Some(b']' | b'}'));
        if !holds_a_value {
            return Shape::default();
        }
        // A raw line break is never inside a JSON string (control
        // characters are escaped there): the first one is whitespace.
        match memchr::memchr(b'\n', &b[start..end]) {
            Some(at) => {
                let nl = start + at;
                let crlf = nl > 0 && b[nl - 1] == b'\r';
                let indent_start = nl + 1;
                let indent_end = b[indent_start..]
                    .iter()
                    .position(|&c| c != b' ' && c != b'\t')
                    .map_or(b.len(), |n| indent_start + n);
                let unit = &text[indent_start..indent_end];
                if unit.len() > MAX_INDENT {
                    return Shape::default();
                }
                Shape {
                    indent: Some(unit.to_owned()),
                    crlf,
                }
            }
            None => Shape {
                indent: None,
                crlf: false,
            },
        }
    }

    /// A line break followed by the indentation of `depth`; nothing in the
    /// compact form.
    fn break_to(&self, depth: usize, out: &mut String) {
        if let Some(unit) = &self.indent {
            out.push_str(self.newline());
            for _ in 0..depth {
                out.push_str(unit);
            }
        }
    }
}

fn is_ws(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

/// The first position at or after `i` that is not whitespace.
fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_ws(b[i]) {
        i += 1;
    }
    i
}

/// The end (after the closing quote) of the string starting at `i` (a
/// `"`); the end of the text if it is not closed.
fn string_end(b: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    while let Some(at) = b
        .get(j..)
        .and_then(|rest| memchr::memchr2(b'"', b'\\', rest))
    {
        match b[j + at] {
            b'"' => return j + at + 1,
            _ => j += at + 2,
        }
    }
    b.len()
}

/// The end of the scalar (number, `true`, `false`, `null`) starting at `i`.
fn scalar_end(b: &[u8], i: usize) -> usize {
    let mut j = i;
    while j < b.len()
        && !is_ws(b[j])
        && !matches!(b[j], b',' | b':' | b']' | b'}' | b'[' | b'{' | b'"')
    {
        j += 1;
    }
    j.max(i + 1).min(b.len())
}

/// The end of the value starting at `i` (not whitespace); `None` if the
/// text ends first or a bracket does not match.
fn value_end(b: &[u8], i: usize) -> Option<usize> {
    match *b.get(i)? {
        b'"' => {
            let end = string_end(b, i);
            (end > i + 1 && b[end - 1] == b'"').then_some(end)
        }
        b'[' | b'{' => {
            let mut stack = Vec::new();
            let mut j = i;
            while j < b.len() {
                match b[j] {
                    b'"' => {
                        j = string_end(b, j);
                        continue;
                    }
                    c @ (b'[' | b'{') => stack.push(if c == b'[' { b']' } else { b'}' }),
                    c @ (b']' | b'}') => {
                        if stack.pop() != Some(c) {
                            return None;
                        }
                        if stack.is_empty() {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        b']' | b'}' | b',' | b':' => None,
        _ => Some(scalar_end(b, i)),
    }
}

/// The span of the one JSON value of `text` (whitespace around it left
/// out); `None` if `text` is not one value.
pub fn value_span(text: &str) -> Option<Range<usize>> {
    let b = text.as_bytes();
    let start = skip_ws(b, 0);
    let end = value_end(b, start)?;
    (skip_ws(b, end) == b.len()).then_some(start..end)
}

/// The spans of the items of the array that is `text` (whitespace around
/// it allowed), in order; `None` if `text` is not one array.
pub fn array_items(text: &str) -> Option<Vec<Range<usize>>> {
    let b = text.as_bytes();
    let open = skip_ws(b, 0);
    if b.get(open) != Some(&b'[') {
        return None;
    }
    let mut items = Vec::new();
    let mut i = skip_ws(b, open + 1);
    if b.get(i) != Some(&b']') {
        loop {
            let end = value_end(b, i)?;
            items.push(i..end);
            i = skip_ws(b, end);
            match b.get(i) {
                Some(b',') => i = skip_ws(b, i + 1),
                Some(b']') => break,
                _ => return None,
            }
        }
    }
    (skip_ws(b, i + 1) == b.len()).then_some(items)
}

/// The span of the value of member `key` of the object that is `text`
/// (keys compared once their escapes are undone); `None` if `text` is not
/// one object or has no such member.
pub fn object_member(text: &str, key: &str) -> Option<Range<usize>> {
    let b = text.as_bytes();
    let outer = value_span(text)?;
    if b[outer.start] != b'{' {
        return None;
    }
    let mut i = skip_ws(b, outer.start + 1);
    if b.get(i) == Some(&b'}') {
        return None;
    }
    loop {
        let key_end = value_end(b, i)?;
        let name: String = serde_json::from_str(text.get(i..key_end)?).ok()?;
        i = skip_ws(b, key_end);
        if b.get(i) != Some(&b':') {
            return None;
        }
        i = skip_ws(b, i + 1);
        let end = value_end(b, i)?;
        if name == key {
            return Some(i..end);
        }
        i = skip_ws(b, end);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            _ => return None,
        }
    }
}

/// `text` without whitespace outside strings: everything else (key order,
/// escapes, the text of numbers) as it was.
pub fn minify(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if is_ws(b[i]) {
            i += 1;
            continue;
        }
        // Runs end at ASCII bytes (quotes, whitespace, punctuation), so
        // every slice lies on character boundaries.
        let end = if b[i] == b'"' {
            string_end(b, i)
        } else {
            let mut j = i + 1;
            while j < b.len() && !is_ws(b[j]) && b[j] != b'"' {
                j += 1;
            }
            j
        };
        out.push_str(&text[i..end]);
        i = end;
    }
    out
}

/// Appends `text` (one JSON value, in any layout) to `out` in `shape`, as
/// serde_json's pretty printer writes it with that indentation (or as its
/// compact writer does), the value starting at nesting `depth`: a line
/// break and indentation after `[`, `{` and `,` and before `]`, `}`;
/// `": "` between a key and its value; `[]` and `{}` for empty ones.
/// Strings, numbers and literals are copied as they are.
pub fn pretty(text: &str, mut depth: usize, shape: &Shape, out: &mut String) {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            c if is_ws(c) => i += 1,
            b'"' => {
                let end = string_end(b, i);
                out.push_str(&text[i..end]);
                i = end;
            }
            open @ (b'[' | b'{') => {
                let close = if open == b'[' { ']' } else { '}' };
                let next = skip_ws(b, i + 1);
                out.push(open as char);
                if b.get(next) == Some(&(close as u8)) {
                    out.push(close);
                    i = next + 1;
                } else {
                    depth += 1;
                    shape.break_to(depth, out);
                    i += 1;
                }
            }
            close @ (b']' | b'}') => {
                depth = depth.saturating_sub(1);
                shape.break_to(depth, out);
                out.push(close as char);
                i += 1;
            }
            b',' => {
                out.push(',');
                shape.break_to(depth, out);
                i += 1;
            }
            b':' => {
                out.push(':');
                if shape.indent.is_some() {
                    out.push(' ');
                }
                i += 1;
            }
            _ => {
                let end = scalar_end(b, i);
                // A scalar ends at an ASCII byte or the end, so `end` is a
                // character boundary; a stray non-ASCII byte is copied with
                // the rest of its character.
                let end = (end..=b.len())
                    .find(|&e| text.is_char_boundary(e))
                    .unwrap_or(b.len());
                out.push_str(&text[i..end]);
                i = end;
            }
        }
    }
}

/// Writes `value` into `out` in `shape`, starting at nesting `depth`: what
/// [`pretty`] makes of its compact text, written in one pass by
/// serde_json's serializer (strings escaped as serde_json escapes them).
pub fn write_value(value: &serde_json::Value, depth: usize, shape: &Shape, out: &mut Vec<u8>) {
    let formatter = ShapeFormatter {
        shape,
        depth,
        has_value: false,
    };
    let mut ser = serde_json::Serializer::with_formatter(out, formatter);
    // Writing a `Value` into a `Vec` fails only for a map key that is not
    // a string, which a `Value` cannot hold.
    if let Err(e) = serde::Serialize::serialize(value, &mut ser) {
        unreachable!("a JSON value always serializes: {e}");
    }
}

/// serde_json's `PrettyFormatter` (or, without an indentation unit, its
/// compact one) with the line end of a [`Shape`] and a starting depth.
struct ShapeFormatter<'s> {
    shape: &'s Shape,
    depth: usize,
    has_value: bool,
}

impl ShapeFormatter<'_> {
    fn break_to<W: ?Sized + std::io::Write>(&self, w: &mut W, depth: usize) -> std::io::Result<()> {
        if let Some(unit) = &self.shape.indent {
            w.write_all(self.shape.newline().as_bytes())?;
            for _ in 0..depth {
                w.write_all(unit.as_bytes())?;
            }
        }
        Ok(())
    }

    fn begin<W: ?Sized + std::io::Write>(&mut self, w: &mut W, open: &[u8]) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(open)
    }

    fn end<W: ?Sized + std::io::Write>(&mut self, w: &mut W, close: &[u8]) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.break_to(w, self.depth)?;
        }
        w.write_all(close)
    }

    fn item<W: ?Sized + std::io::Write>(&mut self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(b",")?;
        }
        self.break_to(w, self.depth)
    }
}

impl serde_json::ser::Formatter for ShapeFormatter<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.begin(w, b"[")
    }

    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.end(w, b"]")
    }

    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }

    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }

    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.begin(w, b"{")
    }

    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.end(w, b"}")
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.item(w, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(if self.shape.indent.is_some() {
            b": "
        } else {
            b":"
        })
    }

    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
}

/// A change of a text: at byte `at`, `delete` bytes are replaced by
/// `insert`. Stored as the JSON array `[at, delete, insert]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Edit(pub usize, pub usize, pub String);

/// The edits that turn `from` into `to`: lines that both share at the
/// start and at the end are kept; between them, when both have the same
/// number of lines, each pair of lines that differs is one edit (of the
/// bytes between what the two lines share at their start and end),
/// otherwise one edit covers the part between. `apply(from, &diff(from,
/// to)) == Some(to)`.
pub fn diff(from: &str, to: &str) -> Vec<Edit> {
    if from == to {
        return Vec::new();
    }
    let a: Vec<&str> = from.split_inclusive('\n').collect();
    let b: Vec<&str> = to.split_inclusive('\n').collect();
    let shortest = a.len().min(b.len());
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(shortest - head)
        .take_while(|(x, y)| x == y)
        .count();
    let offset = |lines: &[&str], n: usize| lines[..n].iter().map(|l| l.len()).sum::<usize>();
    let mut edits = Vec::new();
    if a.len() == b.len() {
        let mut at = offset(&a, head);
        for (x, y) in a[head..a.len() - tail].iter().zip(&b[head..b.len() - tail]) {
            if x != y {
                edits.push(edit_between(at, x, y));
            }
            at += x.len();
        }
    } else {
        let (a_start, b_start) = (offset(&a, head), offset(&b, head));
        let a_end = from.len() - a[a.len() - tail..].iter().map(|l| l.len()).sum::<usize>();
        let b_end = to.len() - b[b.len() - tail..].iter().map(|l| l.len()).sum::<usize>();
        edits.push(edit_between(
            a_start,
            &from[a_start..a_end],
            &to[b_start..b_end],
        ));
    }
    edits
}

/// One edit turning `x` (found at `at`) into `y`, without what they share
/// at their start and end (cut on character boundaries).
fn edit_between(at: usize, x: &str, y: &str) -> Edit {
    let mut prefix = x.bytes().zip(y.bytes()).take_while(|(p, q)| p == q).count();
    while !x.is_char_boundary(prefix) || !y.is_char_boundary(prefix) {
        prefix -= 1;
    }
    let mut suffix = x[prefix..]
        .bytes()
        .rev()
        .zip(y[prefix..].bytes().rev())
        .take_while(|(p, q)| p == q)
        .count();
    while !x.is_char_boundary(x.len() - suffix) || !y.is_char_boundary(y.len() - suffix) {
        suffix -= 1;
    }
    Edit(
        at + prefix,
        x.len() - suffix - prefix,
        y[prefix..y.len() - suffix].to_owned(),
    )
}

/// `text` with `edits` applied; `None` unless the edits are in order, do
/// not overlap, and each lies within `text` on character boundaries.
pub fn apply(text: &str, edits: &[Edit]) -> Option<String> {
    let mut out = String::with_capacity(text.len());
    let mut done = 0;
    for Edit(at, delete, insert) in edits {
        let end = at.checked_add(*delete)?;
        if *at < done || !text.is_char_boundary(*at) || !text.is_char_boundary(end) {
            return None;
        }
        out.push_str(text.get(done..*at)?);
        out.push_str(insert);
        done = end;
    }
    out.push_str(text.get(done..)?);
    Some(out)
}

/// The number of bytes `edits` keep beside the rendering (for the budget
/// of what import keeps).
pub fn edit_bytes(edits: &[Edit]) -> usize {
    edits
        .iter()
        .map(|Edit(_, _, insert)| insert.len() + 8)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    fn serde_pretty(v: &Value, indent: &str) -> String {
        use serde::Serialize as _;
        let mut buf = Vec::new();
        let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(&mut buf, fmt);
        v.serialize(&mut ser).expect("serialize");
        String::from_utf8(buf).expect("utf-8")
    }

    fn sample() -> Value {
        json!({"a": [], "b": {}, "c": [1, -2.5, "x\"y\\z\n", {"d": null, "e": [true, false]}],
               "é": "\u{2028}", "f": {"g": {"h": [[]]}}, "n": 1e21, "m": 1.0})
    }

    #[test]
    fn pretty_writes_what_serde_json_writes_from_any_layout() {
        let v = sample();
        for indent in ["  ", "    ", "\t", ""] {
            let expected = serde_pretty(&v, indent);
            let shape = Shape {
                indent: Some(indent.to_owned()),
                crlf: false,
            };
            for input in [v.to_string(), serde_pretty(&v, "   ")] {
                let mut out = String::new();
                pretty(&input, 0, &shape, &mut out);
                assert_eq!(out, expected, "indent {indent:?}");
            }
        }
        let mut out = String::new();
        pretty(
            &serde_pretty(&v, "  "),
            0,
            &Shape {
                indent: None,
                crlf: false,
            },
            &mut out,
        );
        assert_eq!(out, v.to_string());
        assert_eq!(minify(&serde_pretty(&v, "  ")), v.to_string());
    }

    #[test]
    fn write_value_writes_what_pretty_writes_in_every_shape() {
        let v = sample();
        for shape in [
            Shape::default(),
            Shape {
                indent: Some("\t".into()),
                crlf: true,
            },
            Shape {
                indent: Some(String::new()),
                crlf: false,
            },
            Shape {
                indent: None,
                crlf: false,
            },
        ] {
            for depth in [0, 1, 3] {
                let mut expected = String::new();
                pretty(&v.to_string(), depth, &shape, &mut expected);
                let mut out = Vec::new();
                write_value(&v, depth, &shape, &mut out);
                assert_eq!(
                    String::from_utf8(out).expect("utf-8"),
                    expected,
                    "{shape:?} {depth}"
                );
            }
        }
    }

    #[test]
    fn a_nested_value_is_indented_from_its_depth() {
        let whole = json!([{"k": {"x": [1]}}]);
        let expected = serde_pretty(&whole, "  ");
        let mut item = String::new();
        pretty(&whole[0].to_string(), 1, &Shape::default(), &mut item);
        assert_eq!(format!("[\n  {item}\n]"), expected);
    }

    #[test]
    fn shapes_are_read_from_the_first_indented_line() {
        assert_eq!(Shape::detect("[\n  {}\n]\n"), Shape::default());
        assert_eq!(
            Shape::detect("{\r\n\t\"a\": 1\r\n}"),
            Shape {
                indent: Some("\t".into()),
                crlf: true
            }
        );
        assert_eq!(Shape::detect("[{\"a\":1}]").indent, None);
        assert_eq!(Shape::detect("[]\n"), Shape::default());
        assert_eq!(Shape::detect("{}"), Shape::default());
    }

    #[test]
    fn spans_of_items_and_members() {
        let text = " [ {\"a\": \"]\\\"}\"} , 12 ,\"s\",[[]] ] \n";
        let items = array_items(text).expect("array");
        let parts: Vec<&str> = items.iter().map(|r| &text[r.clone()]).collect();
        assert_eq!(parts, ["{\"a\": \"]\\\"}\"}", "12", "\"s\"", "[[]]"]);
        assert_eq!(array_items("[]"), Some(vec![]));
        assert_eq!(array_items("[1,]"), None);
        assert_eq!(array_items("[1] x"), None);
        assert_eq!(array_items("{}"), None);
        let obj = "{\"type\": \"config_delta\", \"\\u0064elta\" : {\"x\": [1]}, \"z\": 0}";
        let span = object_member(obj, "delta").expect("member");
        assert_eq!(&obj[span], "{\"x\": [1]}");
        assert_eq!(object_member(obj, "nope"), None);
    }

    #[test]
    fn diffs_apply_back_and_stay_small() {
        let from = "{\n  \"a\": \"fail\",\n  \"b\": 1000.0\n}";
        let to = "{\n  \"a\": \"\\u0066ail\",\n  \"b\": 1e3\n}";
        let edits = diff(from, to);
        assert_eq!(edits.len(), 2);
        assert!(edit_bytes(&edits) < 30, "{edits:?}");
        assert_eq!(apply(from, &edits).as_deref(), Some(to));
        let inserted = "{\n  \"a\": 1,\n  \"metadata\": {}\n}";
        let edits = diff("{\n  \"a\": 1\n}", inserted);
        assert_eq!(edits.len(), 1);
        assert_eq!(apply("{\n  \"a\": 1\n}", &edits).as_deref(), Some(inserted));
        assert_eq!(apply("abc", &[Edit(2, 5, String::new())]), None);
        assert_eq!(apply("é", &[Edit(1, 0, String::new())]), None);
        assert_eq!(
            apply(
                "abc",
                &[Edit(2, 1, String::new()), Edit(0, 1, String::new())]
            ),
            None
        );
    }

    proptest! {
        #[test]
        fn any_diff_applies_back(a in "[a\n\"é{}\\\\]{0,40}", b in "[a\n\"é{}\\\\]{0,40}") {
            prop_assert_eq!(apply(&a, &diff(&a, &b)), Some(b));
        }

        #[test]
        fn pretty_and_minify_agree_with_serde_json(v in crate::jp::tests::json_value(3)) {
            let compact = v.to_string();
            prop_assert_eq!(minify(&serde_pretty(&v, "  ")), compact.clone());
            let mut out = String::new();
            pretty(&compact, 0, &Shape::default(), &mut out);
            prop_assert_eq!(&out, &serde_pretty(&v, "  "));
            let mut written = Vec::new();
            write_value(&v, 0, &Shape::default(), &mut written);
            prop_assert_eq!(String::from_utf8(written).expect("utf-8"), out);
        }
    }
}
