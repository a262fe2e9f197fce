//! Reading events given as JSON text (the input of `append`): one JSON
//! array of entries, or one entry per line (JSON Lines). Errors name the
//! line, and the entry and field when the JSON is valid but an entry is not.

use std::fmt;

use serde_json::Value;

use super::json::{parse_entry, FieldError, ParseMode};
use super::model::{Entry, EventKind, Payload};
use crate::json_text::{self, path_string, JsonTextError, Step};

/// Entries parsed from text, with the line each one starts on (1-based).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedInput {
    /// The entries, in order.
    pub entries: Vec<Entry<Payload>>,
    /// Line of each entry (parallel to `entries`).
    pub lines: Vec<usize>,
}

/// Why input text is not a batch of entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputError {
    /// 1-based line of the problem.
    pub line: usize,
    /// 1-based column, when known (JSON syntax errors).
    pub column: Option<usize>,
    /// 1-based number of the entry, when the problem is in one entry.
    pub entry: Option<usize>,
    /// The field inside the entry, when known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}", self.line)?;
        if let Some(c) = self.column {
            write!(f, ", column {c}")?;
        }
        if let Some(e) = self.entry {
            write!(f, " (entry {e})")?;
        }
        f.write_str(": ")?;
        if let Some(field) = &self.field {
            write!(f, "field `{field}`: ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for InputError {}

/// An error of JSON text starting at line `line_offset + 1`. A duplicate
/// key is named by its entry (the array item it is in, or `entry` for a
/// line of JSON Lines) and its field path.
fn syntax(e: JsonTextError, line_offset: usize, entry: Option<usize>) -> InputError {
    let Some(path) = e.duplicate else {
        return InputError {
            line: e.line + line_offset,
            column: Some(e.column),
            entry: None,
            field: None,
            message: format!("invalid JSON: {e}"),
        };
    };
    let (entry, field) = match (entry, path.split_first()) {
        (None, Some((Step::Index(i), rest))) => (Some(i + 1), rest),
        (entry, _) => (entry, &path[..]),
    };
    InputError {
        line: e.line + line_offset,
        column: Some(e.column),
        entry,
        field: Some(path_string(field)),
        message: e.message,
    }
}

fn entry_error(e: FieldError, line: usize, entry: usize) -> InputError {
    InputError {
        line,
        column: None,
        entry: Some(entry),
        field: (!e.field.is_empty()).then_some(e.field),
        message: e.message,
    }
}

/// The entries of valid input `text`, parsed strictly as `jp-store append`
/// parses it, a missing timestamp set to `now` (for tests).
#[cfg(test)]
pub(crate) fn entries_at(text: &str, now: crate::timestamp::Timestamp) -> Vec<Entry<Payload>> {
    parse_input(text, ParseMode::Strict { now })
        .expect("valid input")
        .entries
}

/// [`entries_at`] now (for tests).
#[cfg(test)]
pub(crate) fn entries_now(text: &str) -> Vec<Entry<Payload>> {
    entries_at(text, crate::timestamp::Timestamp::now())
}

/// Parses input text: a JSON array of entries (if the first non-blank
/// character is `[`), else JSON Lines (blank lines skipped). An empty input
/// is an error: there is nothing to append.
pub fn parse_input(text: &str, mode: ParseMode) -> Result<ParsedInput, InputError> {
    let trimmed = text.trim_start();
    let mut out = ParsedInput {
        entries: Vec::new(),
        lines: Vec::new(),
    };
    if trimmed.starts_with('[') {
        let items = match json_text::parse(text.as_bytes()).map_err(|e| syntax(e, 0, None))? {
            Value::Array(items) => items,
            _ => {
                return Err(InputError {
                    line: 1,
                    column: None,
                    entry: None,
                    field: None,
                    message: "invalid JSON: expected an array of entries".into(),
                })
            }
        };
        // Line of each item: found by a second, position-reporting pass.
        let lines = item_lines(text, items.len());
        for (i, v) in items.iter().enumerate() {
            let line = lines.get(i).copied().unwrap_or(1);
            out.entries
                .push(parse_user_entry(v, mode).map_err(|e| entry_error(e, line, i + 1))?);
            out.lines.push(line);
        }
    } else {
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let entry = out.entries.len() + 1;
            let v = json_text::parse(line.as_bytes()).map_err(|e| syntax(e, n, Some(entry)))?;
            out.entries
                .push(parse_user_entry(&v, mode).map_err(|e| entry_error(e, n + 1, entry))?);
            out.lines.push(n + 1);
        }
    }
    if out.entries.is_empty() {
        return Err(InputError {
            line: text.lines().count().max(1),
            column: None,
            entry: None,
            field: None,
            message: "no events in the input (expected a JSON array or one JSON object per line)"
                .into(),
        });
    }
    Ok(out)
}

/// [`parse_entry`] of an entry a user gives: in [`ParseMode::Strict`], the
/// settings of a `config_delta` are checked too, so that one of the wrong
/// type is refused before it is stored (format-spec.md 4.5).
fn parse_user_entry(v: &Value, mode: ParseMode) -> Result<Entry<Payload>, FieldError> {
    let entry = parse_entry(v, mode)?;
    if let (ParseMode::Strict { .. }, Some(EventKind::ConfigDelta(d))) =
        (mode, entry.event().map(|e| &e.kind))
    {
        super::build::check_settings(&d.delta)?;
    }
    Ok(entry)
}

/// The 1-based line on which each top-level item of a valid JSON array
/// starts.
fn item_lines(text: &str, count: usize) -> Vec<usize> {
    let mut lines = Vec::with_capacity(count);
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut line = 1;
    let mut expecting_item = false;
    for c in text.chars() {
        if c == '\n' {
            line += 1;
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        if expecting_item && !c.is_whitespace() && c != ']' {
            lines.push(line);
            expecting_item = false;
        }
        match c {
            '"' => in_string = true,
            '[' | '{' => {
                depth += 1;
                if depth == 1 {
                    expecting_item = true;
                }
            }
            ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 1 => expecting_item = true,
            _ => {}
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timestamp::Timestamp;

    fn strict() -> ParseMode {
        ParseMode::Strict {
            now: Timestamp::from_unix(1_780_000_000, 0).expect("time"),
        }
    }

    #[test]
    fn arrays_and_json_lines_give_the_same_entries() {
        let a = parse_input(
            "[\n {\"type\": \"turn_start\"},\n {\"type\": \"chat_request\", \"content\": \"hi\"}\n]",
            strict(),
        )
        .expect("array");
        let b = parse_input(
            "{\"type\": \"turn_start\"}\n\n{\"type\": \"chat_request\", \"content\": \"hi\"}\n",
            strict(),
        )
        .expect("lines");
        assert_eq!(a.entries, b.entries);
        assert_eq!(a.lines, vec![2, 3]);
        assert_eq!(b.lines, vec![1, 3]);
    }

    #[test]
    fn errors_name_line_entry_and_field() {
        let e = parse_input(
            "{\"type\": \"turn_start\"}\n{\"type\": \"chat_request\", \"content\": 5}\n",
            strict(),
        )
        .expect_err("bad field");
        assert_eq!(
            (e.line, e.entry, e.field.as_deref()),
            (2, Some(2), Some("content"))
        );
        assert!(
            e.to_string()
                .contains("expected a string, found the number 5"),
            "{e}"
        );

        let e =
            parse_input("{\"type\": \"turn_start\"}\n{\"type\": \n", strict()).expect_err("syntax");
        assert_eq!(e.line, 2);
        assert!(e.to_string().starts_with("line 2, column"), "{e}");

        let e = parse_input("[\n{\"type\": \"turn_start\"},\n\"x\"\n]", strict())
            .expect_err("not an object");
        assert_eq!((e.line, e.entry), (3, Some(2)));

        assert!(parse_input("  \n", strict()).is_err());
        assert!(parse_input("[]", strict()).is_err());
    }

    #[test]
    fn item_lines_skip_brackets_inside_strings() {
        let text = "[{\"a\": \"[,]\"},\n  {\"b\": [1,\n2]},\n\n 3]";
        assert_eq!(item_lines(text, 3), vec![1, 2, 5]);
    }
}
