//! What a conversation's `jp` metadata field ([`JpInfo`]) may hold, so
//! that writing it as JP's files stays inside the conversations directory.
//! It is checked where it enters (the directory name of a JP conversation
//! read, the `jp` field of an NDJSON stream's line) and again where it is
//! used (every export), since a store may hold one stored by an earlier
//! build or by hand.

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::import::Prepared;

use super::{JpInfo, JP_FIELD};

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

/// Why `info` cannot be written as the JP files of conversation `id`, or
/// `None`: its directory name ([`dir_name_problem`]).
pub fn info_problem(info: &JpInfo, id: &ConversationId) -> Option<InfoProblem> {
    dir_name_problem(&info.dir, id).map(|message| InfoProblem {
        field: "dir".to_owned(),
        message,
    })
}

/// Why the `jp` metadata field of a conversation read from a stream cannot
/// be stored, naming the field from the line's top (`metadata.jp.dir`), or
/// `None` (also when it has none).
pub fn prepared_problem(prepared: &Prepared) -> Option<String> {
    let field = |f: &str| format!("field `metadata.{JP_FIELD}{f}`");
    match JpInfo::from_metadata(&prepared.fields) {
        Ok(None) => None,
        Err(e) => Some(format!(
            "{}: not the `jp` field of a JP import (format-spec.md 4.3): {e}",
            field("")
        )),
        Ok(Some(info)) => info_problem(&info, &prepared.id)
            .map(|p| format!("{}: {}", field(&format!(".{}", p.field)), p.message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
