//! What a conversation's `jp` metadata field ([`JpInfo`]) may hold, so
//! that writing it as JP's files stays inside the conversations directory
//! and gives files JP loads. It is checked where it enters (the directory
//! name of a JP conversation read, the `jp` field of an NDJSON stream's
//! line) and again where it is used (every export), since a store may
//! hold one stored by an earlier build or by hand.

use serde_json::Value;

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::Entry;

use super::render::{self, kept_bytes, FileKind, END_KEY, FIRST_KEY, START_KEY, VALUE_KEY};
use super::text::MAX_INDENT;
use super::{ConfigLayout, FileText, JpInfo, MAX_KEPT_TEXT};

/// Longest directory name written, in bytes: what common file systems
/// take (255 bytes on ext4, XFS, btrfs and APFS; 255 UTF-16 units on NTFS,
/// which 255 bytes never exceed).
pub const MAX_DIR_NAME: usize = 255;

/// Why `name` cannot be the directory of conversation `id` in a
/// conversations directory, or `None` if it can: one path component that
/// JP finds as that conversation's, `<id>` or `<id>-<anything>` (so not
/// empty, not `.` or `..`, not hidden), without a separator (`/`, `\`), a
/// NUL or another control character, and at most [`MAX_DIR_NAME`] bytes.
/// A name of another id would write into that conversation's directory.
pub fn dir_name_problem(name: &str, id: &ConversationId) -> Option<String> {
    let id = id.as_str();
    let problem = if name.is_empty() {
        "it is empty".to_owned()
    } else if name == "." || name == ".." {
        format!("{name:?} is not a directory of its own")
    } else if let Some(c) = name.chars().find(|c| matches!(c, '/' | '\\')) {
        format!("it holds the path separator {c:?}")
    } else if let Some(c) = name.chars().find(|c| c.is_control()) {
        format!("it holds the control character {c:?}")
    } else if name.len() > MAX_DIR_NAME {
        format!(
            "it is {} bytes long, more than the {MAX_DIR_NAME} a file system takes",
            name.len()
        )
    } else if !name
        .strip_prefix(id)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
    {
        format!("it does not start with the conversation's id `{id}` (then `-` or the end), as JP names it")
    } else {
        return None;
    };
    Some(format!("directory name {name:?}: {problem}"))
}

/// What is wrong with a [`JpInfo`]: the field (a path inside it, such as
/// `dir` or `events_text.indent`) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoProblem {
    /// The field.
    pub field: String,
    /// Why it cannot be used.
    pub message: String,
}

impl std::fmt::Display for InfoProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "field `{}`: {}", self.field, self.message)
    }
}

/// Whether `c` is JSON whitespace (RFC 8259: space, tab, line feed,
/// carriage return), the only text JP's loader takes between values.
fn is_json_ws(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

/// Whether `key` names a value of `events.json`: a stored entry's index
/// (decimal, as import writes it) or [`FIRST_KEY`].
fn is_entry_key(key: &str) -> bool {
    key == FIRST_KEY
        || (!key.is_empty()
            && key.bytes().all(|b| b.is_ascii_digit())
            && (key == "0" || !key.starts_with('0')))
}

/// `text`, cut for a message.
fn shown(text: &str) -> String {
    let cut: String = text.chars().take(40).collect();
    if cut.len() < text.len() {
        format!("{cut:?}…")
    } else {
        format!("{cut:?}")
    }
}

/// Why the text `file` (of a file of `kind`, its field `name` in the
/// [`JpInfo`]) cannot be recorded beside the values of that file, or
/// `None`: an indentation unit of spaces and tabs of at most
/// [`MAX_INDENT`] bytes; gaps of JSON whitespace around the one character
/// JSON puts there (`[` before the first value of `events.json`, `]`
/// after the last, `,` between two; none around the value of the other
/// files), at places the file has; fixes of values the file has. (What a
/// fix's edits make of a value is known only once it is rendered:
/// [`files_problem`].)
fn file_text_problem(file: &FileText, kind: FileKind, name: &str) -> Option<InfoProblem> {
    let problem = |field: String, message: String| {
        Some(InfoProblem {
            field: format!("{name}.{field}"),
            message,
        })
    };
    if let Some(unit) = &file.indent {
        if let Some(c) = unit.chars().find(|c| !matches!(c, ' ' | '\t')) {
            return problem(
                "indent".into(),
                format!("an indentation unit is spaces and tabs, found {c:?}"),
            );
        }
        if unit.len() > MAX_INDENT {
            return problem(
                "indent".into(),
                format!(
                    "an indentation unit of {} bytes, more than {MAX_INDENT}",
                    unit.len()
                ),
            );
        }
    }
    for (key, text) in &file.gaps {
        let between = match (kind, key.as_str()) {
            (FileKind::Array, START_KEY) => Some('['),
            (FileKind::Array, END_KEY) => Some(']'),
            (FileKind::Array, k) if is_entry_key(k) => Some(','),
            (FileKind::Single, START_KEY | END_KEY) => None,
            _ => {
                return problem(
                    format!("gaps.{key}"),
                    "not a place between the values of this file".into(),
                )
            }
        };
        let mut found = text.chars().filter(|c| !is_json_ws(*c));
        let fits = match between {
            Some(c) => found.next() == Some(c) && found.next().is_none(),
            None => found.next().is_none(),
        };
        if !fits {
            let expected = match between {
                Some(c) => format!("JSON whitespace around one `{c}`"),
                None => "JSON whitespace".to_owned(),
            };
            return problem(
                format!("gaps.{key}"),
                format!("expected {expected}, found {}", shown(text)),
            );
        }
    }
    for key in file.fixes.keys() {
        let of_a_value = match kind {
            FileKind::Array => is_entry_key(key),
            FileKind::Single => key == VALUE_KEY,
        };
        if !of_a_value {
            return problem(format!("fixes.{key}"), "not a value of this file".into());
        }
    }
    None
}

/// Why `info` cannot be written as the JP files of conversation `id`, or
/// `None`: its directory name ([`dir_name_problem`]), the text of each
/// file beside its values (`file_text_problem`), and the bytes of that
/// text, at most what import keeps ([`MAX_KEPT_TEXT`]).
pub fn info_problem(info: &JpInfo, id: &ConversationId) -> Option<InfoProblem> {
    if let Some(message) = dir_name_problem(&info.dir, id) {
        return Some(InfoProblem {
            field: "dir".to_owned(),
            message,
        });
    }
    let files = [
        ("events_text", &info.events_text, FileKind::Array),
        ("metadata_text", &info.metadata_text, FileKind::Single),
        ("base_config_text", &info.base_config_text, FileKind::Single),
    ];
    for (name, file, kind) in files {
        if let Some(p) = file_text_problem(file, kind, name) {
            return Some(p);
        }
    }
    let kept: usize = files.iter().map(|(_, f, _)| kept_bytes(f)).sum();
    (kept > MAX_KEPT_TEXT).then(|| InfoProblem {
        field: "events_text".to_owned(),
        message: format!(
            "{kept} bytes of text kept beside the values of the files, more than the \
             {MAX_KEPT_TEXT} import keeps"
        ),
    })
}

/// The number of values `events.json` holds for `entries` written with
/// `info`: the entries written ([`render::written_entries`]), and the first
/// entry of the legacy layout.
pub fn events_values<C>(entries: &[Entry<C>], info: &JpInfo) -> usize {
    render::written_entries(entries).0.len()
        + usize::from(info.layout == ConfigLayout::FirstConfigDelta)
}

/// Why the files of an export (`events.json`, `metadata.json` and, in its
/// layout, `base_config.json`) are not files JP loads, or `None`: each one
/// JSON value with no key twice in an object (JP's loader refuses a field
/// given twice), as its loader reads them (serde_json: whitespace around
/// the value and nothing else), `events.json` an array of `values`
/// entries, the others objects.
pub fn files_problem(
    events: &[u8],
    metadata: &[u8],
    base_config: Option<&[u8]>,
    values: usize,
) -> Option<String> {
    let parse = |name: &str, bytes: &[u8]| {
        jpstore_engine::internal::json_text::parse(bytes)
            .map_err(|e| format!("its {name} would not be JSON JP loads: {e}"))
    };
    match parse("events.json", events) {
        Err(e) => return Some(e),
        Ok(Value::Array(items)) if items.len() == values => {}
        Ok(Value::Array(items)) => {
            return Some(format!(
                "its events.json would hold {} entries, not the {values} written",
                items.len()
            ))
        }
        Ok(_) => return Some("its events.json would not be a JSON array".to_owned()),
    }
    let objects = [
        ("metadata.json", Some(metadata)),
        ("base_config.json", base_config),
    ];
    for (name, bytes) in objects {
        match bytes.map(|b| parse(name, b)) {
            None | Some(Ok(Value::Object(_))) => {}
            Some(Err(e)) => return Some(e),
            Some(Ok(_)) => return Some(format!("its {name} would not be a JSON object")),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::export::{prepared_files, prepared_problem};
    use super::super::{Fix, JP_FIELD};
    use super::*;
    use jpstore_engine::import::Prepared;
    use proptest::prelude::*;

    #[test]
    fn only_a_name_of_the_conversation_of_one_component_is_taken() {
        let id = ConversationId::parse("17738399401").expect("id");
        for good in [
            "17738399401",
            "17738399401-a-title",
            "17738399401-é ü",
            "17738399401-",
        ] {
            assert_eq!(dir_name_problem(good, &id), None, "{good}");
        }
        let long = format!("17738399401-{}", "x".repeat(244));
        assert_eq!(long.len(), 256);
        for (bad, why) in [
            ("", "empty"),
            (".", "not a directory"),
            ("..", "not a directory"),
            ("../escaped-dir", "separator"),
            ("/tmp/abs", "separator"),
            ("17738399401-a/b", "separator"),
            ("17738399401-a\\b", "separator"),
            ("17738399401-a\0b", "control"),
            ("17738399401-\u{1b}[2J", "control"),
            ("17738399401-a\nb", "control"),
            ("17738399401-\u{9b}", "control"),
            (long.as_str(), "256 bytes"),
            ("17738399402-first-config-delta", "conversation's id"),
            ("177383994011", "conversation's id"),
            (".17738399401", "conversation's id"),
        ] {
            let problem = dir_name_problem(bad, &id).unwrap_or_else(|| panic!("{bad:?} taken"));
            assert!(problem.contains(why), "{bad:?}: {problem}");
        }
    }

    #[test]
    fn the_text_of_a_file_is_whitespace_around_what_json_puts_there() {
        let array = |gaps: &[(&str, &str)]| FileText {
            gaps: gaps
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..FileText::default()
        };
        for good in [
            array(&[("start", "[\n  "), ("end", "\n]\n"), ("3", " ,\r\n\t")]),
            array(&[("start", " ["), ("end", "]"), ("first", ",")]),
            FileText {
                indent: Some("\t \t".into()),
                ..FileText::default()
            },
        ] {
            assert_eq!(
                file_text_problem(&good, FileKind::Array, "f"),
                None,
                "{good:?}"
            );
        }
        for (bad, kind, field) in [
            (array(&[("start", "")]), FileKind::Array, "f.gaps.start"),
            (array(&[("start", "[[")]), FileKind::Array, "f.gaps.start"),
            (array(&[("end", "] x")]), FileKind::Array, "f.gaps.end"),
            (array(&[("2", "")]), FileKind::Array, "f.gaps.2"),
            (array(&[("02", ",")]), FileKind::Array, "f.gaps.02"),
            (array(&[("value", ",")]), FileKind::Array, "f.gaps.value"),
            (array(&[("end", "\u{a0}")]), FileKind::Single, "f.gaps.end"),
            (array(&[("1", "")]), FileKind::Single, "f.gaps.1"),
            (
                FileText {
                    indent: Some("  x".into()),
                    ..FileText::default()
                },
                FileKind::Single,
                "f.indent",
            ),
            (
                FileText {
                    indent: Some(" ".repeat(MAX_INDENT + 1)),
                    ..FileText::default()
                },
                FileKind::Single,
                "f.indent",
            ),
            (
                FileText {
                    fixes: [("first".to_owned(), Fix(0, Vec::new()))].into(),
                    ..FileText::default()
                },
                FileKind::Single,
                "f.fixes.first",
            ),
        ] {
            match file_text_problem(&bad, kind, "f") {
                Some(p) => assert_eq!(p.field, field, "{bad:?}: {p}"),
                None => panic!("{bad:?} taken"),
            }
        }
    }

    /// A fixture conversation of each layout, prepared for import.
    fn fixtures() -> &'static [Prepared] {
        static ALL: std::sync::OnceLock<Vec<Prepared>> = std::sync::OnceLock::new();
        ALL.get_or_init(|| {
            super::super::import::find_sources(&super::super::fixtures::workspace())
                .expect("find")
                .iter()
                .map(|d| {
                    super::super::import::prepare(
                        super::super::import::read_source(d).expect("read"),
                    )
                })
                .collect()
        })
    }

    /// Text beside the values of a file, drawn from JSON's whitespace and
    /// structural characters and a few others: an indentation unit, the
    /// flags, and gaps at places of either kind of file.
    fn file_text() -> impl Strategy<Value = FileText> {
        let text = |chars: Vec<char>, most: usize| {
            prop::collection::vec(prop::sample::select(chars), 0..most)
                .prop_map(|v| v.into_iter().collect::<String>())
        };
        let places =
            prop::sample::select(vec!["start", "end", "0", "1", "2", "first", "value", "01"]);
        (
            prop::option::of(text(vec![' ', '\t', 'x', '\n'], 4)),
            any::<bool>(),
            any::<bool>(),
            prop::collection::btree_map(
                places.prop_map(str::to_owned),
                text(
                    vec![
                        ' ', '\t', '\n', '\r', '[', ']', ',', '{', '}', '"', 'x', '\u{b}',
                        '\u{a0}', '\u{feff}',
                    ],
                    5,
                ),
                0..4,
            ),
        )
            .prop_map(|(indent, compact, crlf, gaps)| FileText {
                indent,
                compact,
                crlf,
                gaps,
                fixes: Default::default(),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever layout the rules take gives files JP loads: JSON, the
        /// values written, every file of its kind; over fixture
        /// conversations of every config layout. (Fixes are judged by the
        /// files they give, not by rules: `files_problem`.)
        #[test]
        fn every_layout_the_rules_take_gives_files_jp_loads(
            which in any::<prop::sample::Index>(),
            events in file_text(),
            metadata in file_text(),
            base in file_text(),
        ) {
            let all = fixtures();
            let mut prepared = all[which.index(all.len())].clone();
            let mut info = JpInfo::from_metadata(&prepared.fields)
                .expect("reads")
                .expect("a JP import");
            info.events_text = events;
            info.metadata_text = metadata;
            info.base_config_text = base;
            prepared.fields.insert(JP_FIELD.into(), info.to_value());
            if info_problem(&info, &prepared.id).is_none() {
                let files = prepared_files(&prepared).expect("renders");
                let values = events_values(&prepared.entries, &info);
                let problem = files_problem(
                    &files.events,
                    &files.metadata,
                    files.base_config.as_deref(),
                    values,
                );
                prop_assert_eq!(problem, None);
                prop_assert_eq!(prepared_problem(&prepared), None);
            } else {
                prop_assert!(prepared_problem(&prepared).is_some());
            }
        }
    }
}
