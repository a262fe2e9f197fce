//! Conversation metadata: title, creation time, labels, the base config, and
//! any other keys (such as JP's `pinned_at` or `archived_at`), kept as they
//! are.
//!
//! Metadata is not a separate file: it is the fold of the metadata patches
//! in the conversation's own log (format-spec.md section 4.3), so it is as
//! durable and crash-safe as the events, and a conversation appears with its
//! metadata from the first moment (its log is published with the first
//! patch in its first record).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::event::{BlobRef, Object};
use crate::timestamp::Timestamp;

/// The metadata field in which a JP import keeps what a JP export needs to
/// write the files back as they were (`jp::JpInfo`). A fork drops it: the
/// fork is a new conversation, not the imported one.
pub const JP_FIELD: &str = "jp";

/// A change of metadata, stored as one log entry.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetaPatch {
    /// A new base config (a blob holding its canonical JSON bytes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_config: Option<BlobRef>,
    /// A JSON merge patch (RFC 7396) over the metadata fields: objects merge
    /// key by key, `null` removes a key, anything else replaces it.
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    pub fields: Object,
}

/// The metadata of a conversation.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Metadata {
    /// The base config blob, if the conversation has one.
    pub base_config: Option<BlobRef>,
    /// All fields: `title` (string), `created` (timestamp string), `labels`
    /// (object of strings), and whatever else was set.
    pub fields: Object,
}

impl Metadata {
    /// Applies a patch.
    pub(crate) fn apply(&mut self, patch: &MetaPatch) {
        if let Some(b) = patch.base_config {
            self.base_config = Some(b);
        }
        merge_patch(&mut self.fields, &patch.fields);
    }

    /// The title, if set.
    pub fn title(&self) -> Option<&str> {
        self.fields.get("title").and_then(Value::as_str)
    }

    /// When the conversation was created, if recorded.
    pub fn created(&self) -> Option<Timestamp> {
        self.fields
            .get("created")
            .and_then(Value::as_str)
            .and_then(|s| Timestamp::parse(s).ok())
    }

    /// The labels (string values only).
    pub fn labels(&self) -> Vec<(String, String)> {
        match self.fields.get("labels") {
            Some(Value::Object(o)) => o
                .iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// RFC 7396 JSON merge patch of `patch` over `target`.
pub fn merge_patch(target: &mut Object, patch: &Object) {
    for (k, v) in patch {
        match v {
            Value::Null => {
                target.remove(k);
            }
            Value::Object(p) => {
                let slot = target
                    .entry(k.clone())
                    .or_insert_with(|| Value::Object(Map::new()));
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(t) = slot {
                    merge_patch(t, p);
                }
            }
            other => {
                target.insert(k.clone(), other.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Object {
        match v {
            Value::Object(o) => o,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn patches_merge_and_remove() {
        let mut m = Metadata::default();
        m.apply(&MetaPatch {
            base_config: None,
            fields: obj(json!({"title": "a", "labels": {"x": "1", "y": "2"}, "created": "2026-01-02 03:04:05.0"})),
        });
        m.apply(&MetaPatch {
            base_config: None,
            fields: obj(json!({"title": null, "labels": {"y": null, "z": "3"}})),
        });
        assert_eq!(m.title(), None);
        assert_eq!(
            m.labels(),
            vec![
                ("x".to_string(), "1".to_string()),
                ("z".to_string(), "3".to_string())
            ]
        );
        assert_eq!(
            m.created().map(|t| t.to_string()),
            Some("2026-01-02 03:04:05.0".to_string())
        );
    }
}
