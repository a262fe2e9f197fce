//! Writing a conversation as a JP conversation directory.
//!
//! For a conversation imported from JP, the files are equal as JSON values to
//! the ones imported: the same entries in the same order, base64 applied
//! exactly where JP applies it (and not to the leaves that were not base64 in
//! the original), the same config layout. Content JP's format cannot express
//! (typed blocks other than one text block, resources on a request) is
//! written in the closest form JP reads and reported as lossy.

use std::path::{Path, PathBuf};

use jpstore_blobstore::storage::{publish_new_file, LocalStorage, Storage};
use serde_json::{Map, Value};

use super::base64::{encode, encode_leaves};
use super::{ConfigLayout, JpInfo, JP_FIELD};
use jpstore_engine::conversation::read::Conversation;
use jpstore_engine::error::{Error, Result};
use jpstore_engine::event::{Entry, EventKind};
use jpstore_engine::export::{entry_json, ContentMode};
use jpstore_engine::store::Store;

/// The three files of a JP conversation, as JSON values.
#[derive(Debug, Clone, PartialEq)]
pub struct JpFiles {
    /// The directory name JP would use (`<id>-<slug>`, or the imported one).
    pub dir_name: String,
    /// `events.json`.
    pub events: Value,
    /// `metadata.json`.
    pub metadata: Value,
    /// `base_config.json`, when the layout has one.
    pub base_config: Option<Value>,
    /// What could not be expressed exactly (empty when the export is exact).
    pub lossy: Vec<String>,
}

/// The keys of JP's `metadata.json`, for conversations not imported from JP.
const JP_METADATA_KEYS: [&str; 5] = ["title", "pinned_at", "archived_at", "expires_at", "labels"];

/// Builds the JP files of a conversation (reads its content blobs).
pub fn jp_files(store: &Store, conv: &Conversation) -> Result<JpFiles> {
    let fields = &conv.state.metadata.fields;
    let info = JpInfo::from_metadata(fields);
    let mut lossy = Vec::new();
    let mut events = Vec::with_capacity(conv.entries.len() + 1);
    let base = match conv.state.metadata.base_config {
        Some(_) => Some(store.base_config(conv)?),
        None => None,
    };
    let layout = info
        .as_ref()
        .map_or(ConfigLayout::BaseConfigFile, |i| i.layout);
    if layout == ConfigLayout::FirstConfigDelta {
        let mut first = info
            .as_ref()
            .and_then(|i| i.first_entry.clone())
            .unwrap_or_default();
        first.insert(
            "delta".into(),
            Value::Object(base.clone().unwrap_or_default()),
        );
        events.push(Value::Object(first));
    }
    // JP has no revocation: revoked compactions and the undo entries are
    // left out, which gives JP the same view.
    let revoked = jpstore_engine::projection::revoked_compactions(&conv.entries);
    let mut ordinal = 0u64;
    let mut left_out = 0usize;
    for (i, entry) in conv.entries.iter().enumerate() {
        match entry.event().map(|e| &e.kind) {
            Some(EventKind::CompactionUndo(_)) => {
                left_out += 1;
                continue;
            }
            Some(EventKind::Compaction(_)) => {
                ordinal += 1;
                if revoked.contains(&(ordinal - 1)) {
                    left_out += 1;
                    continue;
                }
            }
            _ => {}
        }
        let raw: &[String] = info
            .as_ref()
            .and_then(|inf| inf.raw.get(&i.to_string()))
            .map_or(&[], Vec::as_slice);
        events.push(jp_entry(store, entry, raw, &mut lossy)?);
    }
    if left_out > 0 {
        lossy.push(format!(
            "{left_out} undone compaction(s) and undo entries left out (JP has no undo; its view is the same)"
        ));
    }
    let metadata = match &info {
        Some(inf) => {
            let mut m = fields.clone();
            m.remove(JP_FIELD);
            if inf.created_added {
                m.remove("created");
            }
            m
        }
        None => {
            let mut m = Map::new();
            for k in JP_METADATA_KEYS {
                if let Some(v) = fields.get(k) {
                    m.insert(k.into(), v.clone());
                }
            }
            if let Some(t) = conv.state.last_activity() {
                m.insert("last_activated_at".into(), t.to_jp_string().into());
            }
            m
        }
    };
    let dir_name = match &info {
        Some(inf) => inf.dir.clone(),
        None => match conv.state.metadata.title() {
            Some(t) => format!("{}-{}", conv.id, slug(t)),
            None => conv.id.to_string(),
        },
    };
    let base_config = match layout {
        ConfigLayout::BaseConfigFile => Some(Value::Object(base.unwrap_or_default())),
        _ => None,
    };
    Ok(JpFiles {
        dir_name,
        events: Value::Array(events),
        metadata: Value::Object(metadata),
        base_config,
        lossy,
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

/// One entry in JP's form.
fn jp_entry(
    store: &Store,
    entry: &Entry,
    raw: &[String],
    lossy: &mut Vec<String>,
) -> Result<Value> {
    let Entry::Event(event) = entry else {
        return Ok(match entry {
            // A non-object entry of a JP file, kept under `$value`.
            Entry::Unknown(o) if o.len() == 1 && o.contains_key("$value") => {
                o.get("$value").cloned().unwrap_or(Value::Null)
            }
            Entry::Unknown(o) => Value::Object(o.clone()),
            Entry::Event(_) => unreachable!(),
        });
    };
    let mut v = entry_json(store, entry, ContentMode::Inline)?;
    let Value::Object(o) = &mut v else {
        return Ok(v);
    };
    match &event.kind {
        EventKind::ToolCallResponse(r) => {
            if let Some(content) = o.get_mut("content") {
                if !content.is_string() {
                    lossy.push(format!(
                        "tool call `{}`: {} content blocks written as one text",
                        r.id,
                        r.content.len()
                    ));
                    *content = Value::String(blocks_as_text(content));
                }
                if let Value::String(s) = content {
                    if !raw.iter().any(|p| p == "/content") {
                        *s = encode(s);
                    }
                }
            }
        }
        EventKind::ToolCallRequest(_) => {
            if let Some(args) = o.get_mut("arguments") {
                encode_leaves(args, &mut "/arguments".to_string(), raw);
            }
        }
        EventKind::ChatRequest(r) if !r.resources.is_empty() => {
            lossy.push(format!(
                "a chat request's {} resources written into its content",
                r.resources.len()
            ));
            let resources = o.remove("resources").unwrap_or(Value::Null);
            let mut text = o
                .get("content")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            if let Value::Array(items) = resources {
                for item in items {
                    text.push_str("\n\n");
                    text.push_str(&resource_as_text(&item));
                }
            }
            o.insert("content".into(), text.into());
        }
        _ => {}
    }
    if let Some(meta) = o.get_mut("metadata") {
        encode_leaves(meta, &mut "/metadata".to_string(), raw);
    }
    Ok(v)
}

/// Typed blocks as one text, the closest form JP reads.
fn blocks_as_text(content: &Value) -> String {
    let Value::Array(blocks) = content else {
        return content.to_string();
    };
    let parts: Vec<String> = blocks
        .iter()
        .map(|b| match b.get("type").and_then(Value::as_str) {
            Some("text") => b
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned(),
            Some("resource") => b.get("resource").map_or(String::new(), resource_as_text),
            _ => b.to_string(),
        })
        .collect();
    parts.join("\n\n")
}

fn resource_as_text(r: &Value) -> String {
    let uri = r.get("uri").and_then(Value::as_str).unwrap_or("");
    if let Some(f) = r.get("formatted").and_then(Value::as_str) {
        return f.to_owned();
    }
    match (r.get("text").and_then(Value::as_str), r.get("blob")) {
        (Some(t), _) => format!("{uri}:\n{t}"),
        (None, Some(Value::String(b))) => {
            format!("{uri}: binary content, {} bytes of base64", b.len())
        }
        _ => uri.to_owned(),
    }
}

/// Writes the files into `dir` (created if needed; the files must not
/// exist): `events.json` (2-space indent, trailing newline, as JP writes
/// it), `metadata.json`, and `base_config.json` when the layout has one.
/// Each file is written to a temp name, synced and published.
pub fn write_jp_dir(dir: &Path, files: &JpFiles) -> Result<Vec<PathBuf>> {
    let storage = LocalStorage::create(dir).map_err(|source| Error::Io {
        op: "create",
        path: dir.to_path_buf(),
        source,
    })?;
    let mut written = Vec::new();
    let mut list = vec![
        ("events.json", &files.events),
        ("metadata.json", &files.metadata),
    ];
    if let Some(b) = &files.base_config {
        list.push(("base_config.json", b));
    }
    // Checked for all the files before any is written, so that a directory
    // holding one of them is left as it was. (Each file is still published
    // without replacing one made meanwhile.)
    for (name, _) in &list {
        match storage.metadata(Path::new(name)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Ok(_) => {
                return Err(Error::AlreadyExists {
                    path: dir.join(name),
                })
            }
            Err(source) => {
                return Err(Error::Io {
                    op: "stat",
                    path: dir.join(name),
                    source,
                })
            }
        }
    }
    for (name, value) in list {
        let mut bytes = match serde_json::to_vec_pretty(value) {
            Ok(b) => b,
            Err(e) => unreachable!("JSON values always serialize: {e}"),
        };
        bytes.push(b'\n');
        let tmp = PathBuf::from(format!(".{name}.tmp.{}", std::process::id()));
        match publish_new_file(&storage, &tmp, Path::new(name), &bytes) {
            Ok(true) => written.push(dir.join(name)),
            Ok(false) => {
                return Err(Error::AlreadyExists {
                    path: dir.join(name),
                })
            }
            Err(e) => return Err(Error::from_publish(&storage, e)),
        }
    }
    Ok(written)
}
