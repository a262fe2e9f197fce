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

use jpstore_engine::internal::{ConversationIdInterior as _, StoreInterior as _};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::base64::Base64;
use super::check::{events_values, files_problem, info_problem};
use super::render::{self, FileKind};
use super::{ConfigLayout, FileText, JpInfo, JP_FIELD};
use jpstore_engine::error::{Error, Result};
use jpstore_engine::event::{BlobRef, Entry, Object, Payload};
use jpstore_engine::import::Prepared;
use jpstore_engine::internal::config::canonical_bytes;
use jpstore_engine::internal::conversation::meta::merge_patch;
use jpstore_engine::internal::conversation::read::Conversation;
use jpstore_engine::internal::event::json::{payload_json, PayloadKind};
use jpstore_engine::Store;

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
    let (info, imported) = checked_info(store, conv)?;
    let metadata = match imported {
        true => imported_metadata(&conv.state.metadata.fields, &info),
        false => native_metadata(conv),
    };
    let base_text = match conv.state.metadata.base_config {
        Some(r) => Some(base_config_text(store, &r)?.0),
        None => None,
    };
    let files = files_of(
        &conv.entries,
        &info,
        metadata,
        base_text.as_deref(),
        &mut |r, kind| blob_content(store, r, kind),
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

/// The values JP's loader reads from the files [`jp_files`] writes for a
/// conversation, taken from its entries without writing the files: the
/// stream's parts, as JP's `ConversationStream` is made from them.
#[derive(Debug, Clone, PartialEq)]
pub struct JpValues {
    /// The value of `base_config.json`, in the layout that has one (an
    /// object).
    pub base_config: Option<Value>,
    /// The values of `events.json`, in order (for the legacy layout, the
    /// first is the `config_delta` holding the base config).
    pub events: Vec<Value>,
}

/// The values of a conversation's `base_config.json` and `events.json`
/// as JP's loader (serde_json) reads them from the files [`jp_files`]
/// writes, in one pass over the entries, the files' text not written:
/// each entry's value as JP writes it, with JP's base64 as `base64` says
/// ([`Base64::Always`]: as the files hold it; [`Base64::WhereDecoded`]:
/// what JP's lenient loader decodes to the same text), its keys in the
/// order of the rendering (JP reads an entry into its types, whatever the
/// order of its keys; `Value`s compare without it). An entry whose text
/// import kept as the file had it (a hand-edited file: number forms,
/// escapes), and the first entry of the legacy layout, are rendered and
/// read as that text. Reads the content blobs and the base config, the
/// entries in runs on the machine's cores for a long conversation. An
/// error where [`jp_files`] gives one for those two files.
pub fn jp_values(
    store: &Store,
    conv: &Conversation,
    base64: Base64,
) -> std::result::Result<JpValues, JpExportError> {
    let (info, _) = checked_info(store, conv)?;
    let base = match conv.state.metadata.base_config {
        Some(r) => Some(base_config_text(store, &r)?),
        None => None,
    };
    let base_text = base.as_ref().map(|(text, _)| text.as_str());
    let not_json = |found: String| JpExportError::NotJson {
        id: conv.id.to_string(),
        log: store.display(&conv.id.log_path()),
        found,
    };
    // The text of one value, read as JP's loader reads it (a key twice
    // refused, as `files_problem` refuses it).
    let read = |file: &str, key: &str, text: &str| {
        jpstore_engine::internal::json_text::parse(text.as_bytes()).map_err(|e| {
            not_json(format!(
                "its {file} would not be JSON JP loads (value `{key}`): {e}"
            ))
        })
    };
    let shape = info.events_text.shape();
    let (written, _) = render::written_entries(&conv.entries);
    let mut events = Vec::with_capacity(written.len() + 1);
    if let Some(first) = render::first_element(&info, base_text, &shape) {
        let text = render::element_text(&first, &info.events_text, "", &mut Vec::new());
        events.push(read("events.json", &first.key, &text)?);
    }
    // Each entry's value on its own: the entries in runs, on the cores.
    let value_of = |i: usize| -> std::result::Result<Value, JpExportError> {
        let entry = &conv.entries[i];
        let mut lossy = Vec::new();
        // Text kept for the entry applies to its rendering as written.
        let fixed = !info.events_text.fixes.is_empty()
            && info.events_text.fixes.contains_key(&i.to_string());
        // An event's keys as rendered: JP reads an entry into its types,
        // whatever the order of its keys (and `Value`s compare without it).
        let value = render::jp_value_unordered(
            entry,
            i,
            &info,
            if fixed { Base64::Always } else { base64 },
            &mut |r, kind| blob_content(store, r, kind),
            &mut lossy,
        )?;
        if !fixed {
            return Ok(value);
        }
        let element = render::entry_element(entry, i, value, &info, &shape);
        let text = render::element_text(&element, &info.events_text, "", &mut lossy);
        read("events.json", &element.key, &text)
    };
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(written.len() / PARALLEL_RUN)
        .max(1);
    if threads == 1 {
        for &i in &written {
            events.push(value_of(i)?);
        }
    } else {
        let run = written.len().div_ceil(threads);
        let runs: Vec<std::result::Result<Vec<Value>, JpExportError>> = std::thread::scope(|s| {
            let value_of = &value_of;
            let mut runs = written.chunks(run);
            let first = runs.next().unwrap_or(&[]);
            let others: Vec<_> = runs
                .map(|run| s.spawn(move || run.iter().map(|&i| value_of(i)).collect()))
                .collect();
            let mut out = vec![first.iter().map(|&i| value_of(i)).collect()];
            for handle in others {
                out.push(
                    handle
                        .join()
                        .unwrap_or_else(|e| std::panic::resume_unwind(e)),
                );
            }
            out
        });
        for run in runs {
            events.extend(run?);
        }
    }
    let base_config = match info.layout {
        ConfigLayout::BaseConfigFile => {
            let value = match base {
                Some((_, value)) if info.base_config_text.fixes.is_empty() => Value::Object(value),
                _ => {
                    let element = render::value_element(
                        base_text.unwrap_or("{}"),
                        &info.base_config_text.shape(),
                    );
                    let text =
                        render::element_text(&element, &info.base_config_text, "", &mut Vec::new());
                    read("base_config.json", &element.key, &text)?
                }
            };
            if !value.is_object() {
                return Err(not_json(
                    "its base_config.json would not be a JSON object".to_owned(),
                ));
            }
            Some(value)
        }
        _ => None,
    };
    Ok(JpValues {
        base_config,
        events,
    })
}

/// The fewest entries [`jp_values`] gives a thread of its own.
const PARALLEL_RUN: usize = 256;

/// The [`JpInfo`] a conversation is written as JP's files with, checked
/// ([`info_problem`]), and whether it was imported from JP (else it is
/// JP's layout for a conversation made in the store).
fn checked_info(
    store: &Store,
    conv: &Conversation,
) -> std::result::Result<(JpInfo, bool), JpExportError> {
    let imported = JpInfo::from_metadata(&conv.state.metadata.fields).map_err(|found| {
        JpExportError::Info {
            id: conv.id.to_string(),
            log: store.display(&conv.id.log_path()),
            expected: "the `JpInfo` of format-spec.md 4.3",
            found,
        }
    })?;
    let (info, imported) = match imported {
        Some(info) => (info, true),
        None => (
            JpInfo::new(native_dir(conv), false, ConfigLayout::BaseConfigFile),
            false,
        ),
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
    Ok((info, imported))
}

/// The directory JP names a conversation made in the store.
fn native_dir(conv: &Conversation) -> String {
    match conv.state.metadata.title() {
        Some(t) => format!("{}-{}", conv.id, slug(t)),
        None => conv.id.to_string(),
    }
}

/// `metadata.json` of a conversation made in the store.
fn native_metadata(conv: &Conversation) -> Object {
    let fields = &conv.state.metadata.fields;
    let mut metadata = Map::new();
    for k in JP_METADATA_KEYS {
        if let Some(v) = fields.get(k) {
            metadata.insert(k.into(), v.clone());
        }
    }
    if let Some(t) = conv.state.last_activity() {
        metadata.insert("last_activated_at".into(), t.to_string().into());
    }
    metadata
}

/// The content of blob `r` as the JSON of a payload of `kind`.
fn blob_content(store: &Store, r: &BlobRef, kind: PayloadKind) -> Result<Value> {
    let bytes = store.blobs().get(&r.id)?;
    payload_json(&Payload::Inline(bytes), kind).map_err(|found| {
        Error::Blob(jpstore_blobstore::Error::Corrupt {
            path: store.display(store.blobs().base()),
            offset: None,
            expected: format!("blob {} to be UTF-8 text, as it is referenced", r.id),
            found,
        })
    })
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
/// bytes, or for a JP import the file's own text without whitespace), and
/// that object.
fn base_config_text(store: &Store, r: &BlobRef) -> Result<(String, Object)> {
    let bytes = store.blobs().get(&r.id)?;
    let what = format!("base config blob {}", r.id);
    let value = jpstore_engine::internal::config::parse_config_json(&bytes, &what)?;
    // Parsed as JSON, so UTF-8.
    let text = String::from_utf8(bytes).map_err(|e| {
        Error::from(jpstore_engine::internal::config::ConfigError::Json {
            what,
            line: 1,
            column: 1,
            message: format!("not UTF-8: {e}"),
        })
    })?;
    Ok((text, value))
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
