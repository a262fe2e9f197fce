//! Writing a conversation as a JP conversation directory.
//!
//! For a conversation imported from JP, the files are the bytes imported
//! (format-spec.md 4.3): the entries in their order with their keys in the
//! recorded order, base64 applied exactly where JP applies it (and not to
//! the leaves that were not base64 in the original), the same config
//! layout, the base config's own text, each file's layout and what import
//! kept of hand-edited text. Entries appended since the import are written
//! in the same layout and key order. Content JP's format cannot express
//! (typed blocks other than one text block, resources on a request) is
//! written in the closest form JP reads and reported as lossy.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::check::{events_values, files_problem, info_problem};
use super::render::{self, FileKind};
use super::{ConfigLayout, FileText, JpInfo, JP_FIELD};
use jpstore_engine::config::canonical_bytes;
use jpstore_engine::conversation::meta::merge_patch;
use jpstore_engine::conversation::read::Conversation;
use jpstore_engine::error::{Error, Result};
use jpstore_engine::event::json::{payload_json, PayloadKind};
use jpstore_engine::event::{BlobRef, Entry, Object, Payload};
use jpstore_engine::import::Prepared;
use jpstore_engine::store::Store;

/// Why a conversation could not be written as JP's files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JpExportError {
    /// The store failed (I/O, a damaged blob, a base config that is not a
    /// JSON object).
    #[error(transparent)]
    Store(#[from] Error),
    /// The conversation's `jp` metadata field is not what this build reads
    /// (written by a newer build, or damaged), or names a directory outside
    /// its conversations directory.
    #[error("conversation {id} ({}): its `jp` metadata field is not what this build reads: expected {expected}; found: {found}", log.display())]
    Info {
        /// The conversation.
        id: String,
        /// Its log.
        log: PathBuf,
        /// What this build reads there.
        expected: &'static str,
        /// What is wrong with it.
        found: String,
    },
    /// The files would not be JSON that JP loads (text recorded beside the
    /// values by an earlier build, which took a stream's as it came, or by
    /// hand): nothing of them is written.
    #[error("conversation {id} ({}): {found}; nothing of it is written", log.display())]
    NotJson {
        /// The conversation.
        id: String,
        /// Its log.
        log: PathBuf,
        /// Which file, and what is wrong with it.
        found: String,
    },
}

/// The files of a JP conversation, as the bytes to write.
#[derive(Debug, Clone, PartialEq)]
pub struct JpFiles {
    /// The directory name JP would use (`<id>-<slug>`, or the imported one).
    pub dir_name: String,
    /// Whether JP keeps it under `.archive/` (it was imported from there).
    pub archived: bool,
    /// `events.json`.
    pub events: Vec<u8>,
    /// `metadata.json`.
    pub metadata: Vec<u8>,
    /// `base_config.json`, when the layout has one.
    pub base_config: Option<Vec<u8>>,
    /// What could not be written exactly (empty when the export is exact).
    pub lossy: Vec<String>,
}

impl JpFiles {
    /// The directory JP keeps the conversation in, inside a conversations
    /// directory (`.jp/conversations`): `<dir_name>`, or
    /// `.archive/<dir_name>` for an archived one.
    pub fn dir_in(&self, conversations: &Path) -> PathBuf {
        if self.archived {
            conversations.join(".archive").join(&self.dir_name)
        } else {
            conversations.join(&self.dir_name)
        }
    }
}

/// The keys of JP's `metadata.json`, for conversations not imported from JP.
const JP_METADATA_KEYS: [&str; 5] = ["title", "pinned_at", "archived_at", "expires_at", "labels"];

/// Builds the JP files of a conversation (reads its content blobs and its
/// base config).
pub fn jp_files(store: &Store, conv: &Conversation) -> std::result::Result<JpFiles, JpExportError> {
    let fields = &conv.state.metadata.fields;
    let imported = JpInfo::from_metadata(fields).map_err(|found| JpExportError::Info {
        id: conv.id.to_string(),
        log: store.display(&conv.id.log_path()),
        expected: "the `JpInfo` of format-spec.md 4.3",
        found,
    })?;
    let native = || {
        let dir = match conv.state.metadata.title() {
            Some(t) => format!("{}-{}", conv.id, slug(t)),
            None => conv.id.to_string(),
        };
        let mut metadata = Map::new();
        for k in JP_METADATA_KEYS {
            if let Some(v) = fields.get(k) {
                metadata.insert(k.into(), v.clone());
            }
        }
        if let Some(t) = conv.state.last_activity() {
            metadata.insert("last_activated_at".into(), t.to_jp_string().into());
        }
        (
            JpInfo::new(dir, false, ConfigLayout::BaseConfigFile),
            metadata,
        )
    };
    let (info, metadata) = match imported {
        Some(inf) => {
            let metadata = imported_metadata(fields, &inf);
            (inf, metadata)
        }
        None => native(),
    };
    // Checked again where it is used: a store may hold a field stored by
    // an earlier build, which took a stream's as it came.
    if let Some(problem) = info_problem(&info, &conv.id) {
        return Err(JpExportError::Info {
            id: conv.id.to_string(),
            log: store.display(&conv.id.log_path()),
            expected: "files that stay in their conversation's directory (format-spec.md 4.3)",
            found: problem.to_string(),
        });
    }
    let base_text = match conv.state.metadata.base_config {
        Some(r) => Some(base_config_text(store, &r)?),
        None => None,
    };
    let mut content = |r: &BlobRef, kind: PayloadKind| -> Result<Value> {
        let bytes = store.blobs().get(&r.id)?;
        payload_json(&Payload::Inline(bytes), kind).map_err(|found| {
            Error::Blob(jpstore_blobstore::Error::Corrupt {
                path: store.display(store.blobs().base()),
                offset: None,
                expected: format!("blob {} to be UTF-8 text, as it is referenced", r.id),
                found,
            })
        })
    };
    let files = files_of(
        &conv.entries,
        &info,
        metadata,
        base_text.as_deref(),
        &mut content,
    )?;
    // An export is JSON that JP loads, whatever the store holds.
    let values = events_values(&conv.entries, &info);
    let found = files_problem(
        &files.events,
        &files.metadata,
        files.base_config.as_deref(),
        values,
    );
    if let Some(found) = found {
        return Err(JpExportError::NotJson {
            id: conv.id.to_string(),
            log: store.display(&conv.id.log_path()),
            found,
        });
    }
    Ok(files)
}

/// The JP files a conversation prepared for import will export once
/// stored (its fields as the store keeps them, a merge patch; its content
/// inline), without a store: what import's check compares, whole.
pub fn prepared_files(prepared: &Prepared) -> std::result::Result<JpFiles, String> {
    let mut fields = Object::new();
    merge_patch(&mut fields, &prepared.fields);
    let info = JpInfo::from_metadata(&fields)?
        .ok_or_else(|| "the conversation was not prepared from JP's files".to_owned())?;
    if let Some(problem) = info_problem(&info, &prepared.id) {
        return Err(format!("its `jp` metadata {problem}"));
    }
    let metadata = imported_metadata(&fields, &info);
    let base_text = match (&prepared.base_config_text, &prepared.base_config) {
        (Some(t), _) => Some(String::from_utf8_lossy(t).into_owned()),
        (None, Some(c)) => Some(String::from_utf8_lossy(&canonical_bytes(c)).into_owned()),
        (None, None) => None,
    };
    files_of(
        &prepared.entries,
        &info,
        metadata,
        base_text.as_deref(),
        &mut payload_json,
    )
}

/// The JP files of entries rendered with `content`, the value of
/// `metadata.json`, the base config's text and what import recorded
/// (`info`; for a conversation not imported, JP's layout).
fn files_of<C, E>(
    entries: &[Entry<C>],
    info: &JpInfo,
    metadata: Object,
    base_text: Option<&str>,
    content: &mut impl FnMut(&C, PayloadKind) -> std::result::Result<Value, E>,
) -> std::result::Result<JpFiles, E> {
    let mut lossy = Vec::new();
    let elements = render::event_elements(entries, info, base_text, content, &mut lossy)?;
    let events = render::assemble(
        &elements,
        &info.events_text,
        FileKind::Array,
        "events.json",
        &mut lossy,
    );
    let element = render::object_element(&Value::Object(metadata), &info.metadata_text.shape());
    let metadata = render::assemble(
        &[element],
        &info.metadata_text,
        FileKind::Single,
        "metadata.json",
        &mut lossy,
    );
    let base_config = match info.layout {
        ConfigLayout::BaseConfigFile => Some(single_file(
            base_text.unwrap_or("{}"),
            &info.base_config_text,
            "base_config.json",
            &mut lossy,
        )),
        _ => None,
    };
    Ok(JpFiles {
        dir_name: info.dir.clone(),
        archived: info.archived,
        events: events.into_bytes(),
        metadata: metadata.into_bytes(),
        base_config: base_config.map(String::into_bytes),
        lossy,
    })
}

/// Why the `jp` metadata field of a conversation read from a stream cannot
/// be stored, naming the field from the line's top (`metadata.jp.dir`), or
/// `None` (also when it has none): [`info_problem`], then the files it
/// gives, rendered ([`files_problem`]).
pub fn prepared_problem(prepared: &Prepared) -> Option<String> {
    let field = |f: &str| format!("field `metadata.{JP_FIELD}{f}`");
    match JpInfo::from_metadata(&prepared.fields) {
        Ok(None) => None,
        Err(e) => Some(format!(
            "{}: not the `jp` field of a JP import (format-spec.md 4.3): {e}",
            field("")
        )),
        Ok(Some(info)) => {
            if let Some(p) = info_problem(&info, &prepared.id) {
                return Some(format!(
                    "{}: {}",
                    field(&format!(".{}", p.field)),
                    p.message
                ));
            }
            let files = match prepared_files(prepared) {
                Ok(files) => files,
                Err(e) => return Some(format!("{}: {e}", field(""))),
            };
            files_problem(
                &files.events,
                &files.metadata,
                files.base_config.as_deref(),
                events_values(&prepared.entries, &info),
            )
            .map(|p| format!("{}: {p}", field("")))
        }
    }
}

/// `metadata.json` of an imported conversation: its metadata fields
/// without what the import added (`jp`, or in its place the value the file
/// held there; `created` when the import derived it), in their order.
pub fn imported_metadata(fields: &Object, info: &JpInfo) -> Object {
    let mut m = fields.clone();
    match &info.metadata_jp {
        Some(v) => {
            m.insert(JP_FIELD.into(), v.clone());
        }
        None => {
            m.shift_remove(JP_FIELD);
        }
    }
    if info.created_added {
        m.shift_remove("created");
    }
    m
}

/// A file of one value (`json`, its text in any layout: the base config
/// blob's), written as recorded in `file`.
fn single_file(json: &str, file: &FileText, what: &str, lossy: &mut Vec<String>) -> String {
    let element = render::value_element(json, &file.shape());
    render::assemble(&[element], file, FileKind::Single, what, lossy)
}

/// The text of a base config blob, checked to be a JSON object (canonical
/// bytes, or for a JP import the file's own text without whitespace).
fn base_config_text(store: &Store, r: &BlobRef) -> Result<String> {
    let bytes = store.blobs().get(&r.id)?;
    let what = format!("base config blob {}", r.id);
    jpstore_engine::config::parse_config_json(&bytes, &what)?;
    // Parsed as JSON, so UTF-8.
    String::from_utf8(bytes).map_err(|e| {
        Error::from(jpstore_engine::config::ConfigError::Json {
            what,
            line: 1,
            column: 1,
            message: format!("not UTF-8: {e}"),
        })
    })
}

/// A title as JP's directory slug: lowercase ASCII letters and digits, runs
/// of anything else as one `-`, at most 60 characters.
pub fn slug(title: &str) -> String {
    let mut out = String::new();
    for c in title.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') && !out.is_empty() {
            out.push('-');
        }
        if out.len() >= 60 {
            break;
        }
    }
    out.trim_end_matches('-').to_owned()
}
