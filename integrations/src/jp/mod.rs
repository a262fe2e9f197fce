//! JP interop: import JP conversation directories and export them back
//! (jp-format.md sections 1-2).
//!
//! Import undoes JP's base64 ([`base64`]), moves tool response content and
//! the base config into the blob store, and keeps everything needed to write
//! the same files back in the conversation's metadata field `jp` ([`JpInfo`]):
//! the config layout, the first config entry of the legacy layout, the
//! original directory name, and the string leaves that were not base64 (JP
//! keeps those as they are, so export must too).

pub mod base64;
pub mod export;
pub mod import;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use jpstore_engine::event::Object;

pub use jpstore_engine::conversation::meta::JP_FIELD;

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
    /// Whether it was under `.archive/`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub archived: bool,
    /// The config layout.
    pub layout: ConfigLayout,
    /// For [`ConfigLayout::FirstConfigDelta`]: the first entry without its
    /// `delta` (type, timestamp and anything else, as in the file).
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
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl JpInfo {
    /// Reads the info from a conversation's metadata fields, if it came from
    /// JP.
    pub fn from_metadata(fields: &Object) -> Option<JpInfo> {
        serde_json::from_value(fields.get(JP_FIELD)?.clone()).ok()
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
mod tests;
