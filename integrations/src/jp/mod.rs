//! JP interop: import JP conversation directories and export them back
//! (jp-format.md sections 1-2), byte for byte.
//!
//! Import undoes JP's base64 ([`base64`]), moves tool response content and
//! the base config into the blob store, and keeps in the conversation's
//! metadata field `jp` ([`JpInfo`]) what is needed to write the same bytes
//! back: the config layout, the first config entry of the legacy layout,
//! the original directory name, the string leaves that were not base64
//! (JP keeps those as they are, so export must too), the order of the keys
//! of entries ([`order`]), and the text of each file beyond its values
//! ([`FileText`]): its layout, and the few places where JP's serializer
//! would not have written what the file holds (a hand-edited file), found
//! by rendering every file at import and comparing it with the bytes read
//! ([`render`], [`text`]). The base config blob holds the config's own text
//! without whitespace (format-spec.md 4.5), so its key order, escapes and
//! number forms come back as they were.

pub mod base64;
pub mod check;
pub mod export;
pub mod export_dir;
pub mod import;
pub mod order;
pub mod render;
pub mod text;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use jpstore_engine::event::Object;

pub use order::KeyOrder;
pub use text::{Edit, Shape};

pub use jpstore_engine::internal::conversation::meta::JP_FIELD;

/// The most text import keeps per conversation beside what rendering gives
/// (gaps, edits and per-entry key orders of hand-edited files), in bytes:
/// the metadata that holds it is read with every read of the conversation.
/// A conversation that would need more is imported without it: it exports
/// equal as JSON, in its own layout and key order, and the import says so.
pub const MAX_KEPT_TEXT: usize = 256 << 10;

/// How a JP conversation kept its base config (jp-format.md section 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConfigLayout {
    /// A separate `base_config.json`.
    BaseConfigFile,
    /// The first entry of `events.json` is a `config_delta` whose `delta` is
    /// the base config; it is stored as the base config blob, not as an event.
    FirstConfigDelta,
    /// The oldest layout: the first entry has the config keys flattened into
    /// it (no `delta`); JP treats the base config as empty. The entry is kept
    /// as an unknown entry.
    Flattened,
    /// No base config at all.
    None,
}

/// What import recorded to export the same files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JpInfo {
    /// The conversation directory's name (`<id>-<slug>`).
    pub dir: String,
    /// Whether it was under `.archive/` (for JP's storage backend over a
    /// store, `jpstore-jp`: whether it is in JP's archive partition).
    #[serde(default, skip_serializing_if = "is_false")]
    pub archived: bool,
    /// Written by JP's storage backend over a store (`jpstore-jp`) for the
    /// user alone, not projected into a workspace (JP's
    /// `Projection::LocalOnly`); export ignores it.
    #[serde(default, skip_serializing_if = "is_false")]
    pub local: bool,
    /// The config layout.
    pub layout: ConfigLayout,
    /// For [`ConfigLayout::FirstConfigDelta`]: the first entry with `{}`
    /// holding the place of its `delta` (type, timestamp and anything else,
    /// as in the file; stored by earlier builds without `delta`, which
    /// export then writes last). Not `null`: metadata fields are stored as
    /// a JSON merge patch, in which `null` removes a key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_entry: Option<Object>,
    /// String leaves that were not base64, by entry index (in the stored
    /// conversation): JSON Pointers into the entry (`/content`,
    /// `/arguments/...`, `/metadata/...`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub raw: BTreeMap<String, Vec<String>>,
    /// Whether `created` was added to the metadata by the import (JP's
    /// `metadata.json` has no such key), so export leaves it out.
    #[serde(default, skip_serializing_if = "is_false")]
    pub created_added: bool,
    /// The order of the keys of every event: `type` first (jp-store's, and
    /// what absent means) or `timestamp` first.
    #[serde(default, skip_serializing_if = "KeyOrder::is_type_first")]
    pub key_order: KeyOrder,
    /// Per entry type whose events the file wrote in another order: the
    /// order of their keys ([`order`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub type_keys: BTreeMap<String, Vec<String>>,
    /// Per entry (stored index) whose keys follow neither: their order.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub entry_keys: BTreeMap<String, Vec<String>>,
    /// The text of `events.json` beyond its values (fix keys: the stored
    /// entry's index, `first` for the first entry of the legacy layout).
    #[serde(default, skip_serializing_if = "FileText::is_plain")]
    pub events_text: FileText,
    /// The text of `metadata.json` beyond its value (fix key `value`).
    #[serde(default, skip_serializing_if = "FileText::is_plain")]
    pub metadata_text: FileText,
    /// The text of `base_config.json` beyond its value (fix key `value`).
    #[serde(default, skip_serializing_if = "FileText::is_plain")]
    pub base_config_text: FileText,
    /// The value `metadata.json` held under `jp` (the key this info is
    /// stored at), if it held one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata_jp: Option<Value>,
}

/// How a JSON file of a JP conversation was written beyond its values: the
/// layout (absent: JP's, two spaces and `\n`), the whitespace between
/// values where it is not the layout's, and the values whose text is not
/// what rendering them gives (a hand-edited file: escapes, number forms,
/// RFC 3339 timestamps, `"metadata": {}`). Empty for the files JP writes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileText {
    /// The indentation unit, when it is not two spaces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indent: Option<String>,
    /// Written compact (one line, no whitespace), not pretty.
    #[serde(default, skip_serializing_if = "is_false")]
    pub compact: bool,
    /// Lines end with `\r\n`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub crlf: bool,
    /// The text between values, where it is not the layout's: `start`
    /// (before the first value, with the `[` of `events.json`), `end`
    /// (after the last, with its `]` and the final line break), or the key
    /// of the value it comes before.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub gaps: BTreeMap<String, String>,
    /// The values whose text is not their rendering, by key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub fixes: BTreeMap<String, Fix>,
}

impl FileText {
    /// Whether nothing is recorded (the file is as JP writes it).
    pub fn is_plain(&self) -> bool {
        *self == FileText::default()
    }

    /// The layout.
    pub fn shape(&self) -> Shape {
        Shape {
            indent: match (self.compact, &self.indent) {
                (true, _) => None,
                (false, Some(unit)) => Some(unit.clone()),
                (false, None) => Some("  ".to_owned()),
            },
            crlf: self.crlf,
        }
    }

    /// Records a layout (only what differs from JP's).
    pub fn set_shape(&mut self, shape: &Shape) {
        self.compact = shape.indent.is_none();
        self.indent = shape.indent.clone().filter(|unit| unit != "  ");
        self.crlf = shape.crlf;
    }
}

/// The text of one value as the file held it: the CRC-32 of the value's
/// rendering the edits apply to (so that a rendering that changed is
/// noticed, not edited blindly), and the edits. Stored as the JSON array
/// `[crc, [[at, delete, insert], ...]]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fix(pub u32, pub Vec<Edit>);

fn is_false(b: &bool) -> bool {
    !*b
}

impl JpInfo {
    /// The info of a conversation imported from directory `dir`, with
    /// nothing else recorded yet.
    pub fn new(dir: String, archived: bool, layout: ConfigLayout) -> JpInfo {
        JpInfo {
            dir,
            archived,
            local: false,
            layout,
            first_entry: None,
            raw: BTreeMap::new(),
            created_added: false,
            key_order: KeyOrder::TypeFirst,
            type_keys: BTreeMap::new(),
            entry_keys: BTreeMap::new(),
            events_text: FileText::default(),
            metadata_text: FileText::default(),
            base_config_text: FileText::default(),
            metadata_jp: None,
        }
    }

    /// Reads the info from a conversation's metadata fields: `None` if it
    /// did not come from JP, the reason if its `jp` field is not what this
    /// build reads (written by a newer one, or damaged).
    pub fn from_metadata(fields: &Object) -> Result<Option<JpInfo>, String> {
        match fields.get(JP_FIELD) {
            None => Ok(None),
            Some(v) => serde_json::from_value(v.clone())
                .map(Some)
                .map_err(|e| e.to_string()),
        }
    }

    /// The JSON value stored in the metadata.
    pub fn to_value(&self) -> serde_json::Value {
        match serde_json::to_value(self) {
            Ok(v) => v,
            Err(e) => unreachable!("JpInfo always serializes: {e}"),
        }
    }
}

#[cfg(test)]
pub(crate) mod fixtures;
#[cfg(test)]
pub(crate) mod tests;
