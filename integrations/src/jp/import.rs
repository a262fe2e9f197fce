//! Reading JP conversation directories and importing them into a store.

use std::ops::Range;
use std::path::{Path, PathBuf};

use jpstore_blobstore::BlobId;
use serde_json::{Map, Value};

use super::base64::{decode, decode_leaves};
use super::order::{self, SeenKeys};
use super::render::{self, Element, FileKind};
use super::text::{self, Shape};
use super::{ConfigLayout, JpInfo, JP_FIELD};
use crate::user_file::{self, LastLink};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::{Error, Result};
use jpstore_engine::event::{Entry, EventKind, Object, Payload};
pub use jpstore_engine::import::{Imported, Prepared};
use jpstore_engine::internal::conversation::meta::merge_patch;
use jpstore_engine::internal::event::json::{parse_entry, payload_json, ParseMode};
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::Store;

/// Largest JP file read.
pub const MAX_JP_FILE: u64 = 2 << 30;

/// The files of one JP conversation, parsed as JSON, with their text.
#[derive(Debug, Clone, PartialEq)]
pub struct JpSource {
    /// The directory.
    pub path: PathBuf,
    /// Its name.
    pub dir_name: String,
    /// Whether it is under `.archive/`.
    pub archived: bool,
    /// The id (the number before the first `-` of the name).
    pub id: ConversationId,
    /// `metadata.json`.
    pub metadata: Object,
    /// `events.json`.
    pub events: Vec<Value>,
    /// `base_config.json`, if present.
    pub base_config: Option<Object>,
    /// The text of `events.json`.
    pub events_text: String,
    /// The text of `metadata.json`, if present.
    pub metadata_text: Option<String>,
    /// The text of `base_config.json`, if present.
    pub base_config_text: Option<String>,
    /// Bytes of the files read.
    pub bytes: u64,
}

/// Why JP files could not be read for an import.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JpImportError {
    /// Reading the files, or the store, failed.
    #[error(transparent)]
    Store(#[from] Error),
    /// Storing the conversations read failed.
    #[error(transparent)]
    Import(#[from] jpstore_engine::import::ImportError),
    /// A file or directory to import is not valid JP data.
    #[error("{}: not valid JP data: {reason}", path.display())]
    NotJp {
        /// The file or directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

fn invalid(path: &Path, reason: impl Into<String>) -> JpImportError {
    JpImportError::NotJp {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Finds JP conversation directories under `path`: `path` itself if it holds
/// an `events.json`; else its subdirectories that do (and those of its
/// `.archive/`); a workspace root is searched at `.jp/conversations`, and
/// a workspace's `.jp` at `conversations`.
pub fn find_sources(path: &Path) -> Result<Vec<PathBuf>, JpImportError> {
    let io = |op, source| Error::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    // An `events.json` of any type marks a conversation directory: one
    // that is not a regular file is refused when it is read, by name.
    let has_events = |dir: &Path| dir.join("events.json").symlink_metadata().is_ok();
    if has_events(path) {
        return Ok(vec![path.to_path_buf()]);
    }
    let meta = std::fs::metadata(path).map_err(|e| io("open", e))?;
    if !meta.is_dir() {
        return Err(invalid(
            path,
            "not a directory (expected a JP conversation directory or a directory holding them)",
        ));
    }
    // A workspace's conversations are in `.jp/conversations`, whether the
    // workspace or its `.jp` is named.
    let base = [
        path.join(".jp").join("conversations"),
        path.join("conversations"),
    ]
    .into_iter()
    .find(|d| d.is_dir())
    .unwrap_or_else(|| path.to_path_buf());
    let mut found = Vec::new();
    for dir in [base.clone(), base.join(".archive")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let e = e.map_err(|e| io("list", e))?;
            let p = e.path();
            if p.is_dir() && has_events(&p) {
                found.push(p);
            }
        }
    }
    found.sort();
    Ok(found)
}

/// Reads `dir/name`: a regular file of at most [`MAX_JP_FILE`] bytes (a
/// FIFO, a device or a link there is refused without blocking:
/// [`user_file`]); `None` if it does not exist.
fn read_file(dir: &Path, name: &str) -> Result<Option<Vec<u8>>, JpImportError> {
    let path = dir.join(name);
    match user_file::read(&path, MAX_JP_FILE, LastLink::Refuse) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(JpImportError::Store(Error::Io {
            op: "read",
            path,
            source,
        })),
    }
}

/// Parses the bytes of `path` as JSON: the value and the text.
fn parse_json(path: &Path, bytes: Vec<u8>) -> Result<(Value, String), JpImportError> {
    // JP's loader (serde derive) refuses a field given twice; a file with
    // a duplicate key anywhere is damaged or hand-edited, and which value
    // was meant is unknown: refused, naming the key's path.
    let v = jpstore_engine::internal::json_text::parse(&bytes).map_err(|e| {
        let at = match &e.duplicate {
            Some(path) => format!(
                " at `{}`",
                jpstore_engine::internal::json_text::path_string(path)
            ),
            None => String::new(),
        };
        invalid(
            path,
            format!(
                "invalid JSON at line {}, column {}{at}: {}",
                e.line, e.column, e.message
            ),
        )
    })?;
    // A JSON text serde_json accepts is UTF-8 (strings are checked, the
    // rest is ASCII); the check costs one pass and keeps that an
    // assumption of nobody's.
    let text = String::from_utf8(bytes).map_err(|e| invalid(path, format!("not UTF-8: {e}")))?;
    Ok((v, text))
}

/// The bytes of the files of one JP conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JpFileBytes {
    /// `events.json`.
    pub events: Vec<u8>,
    /// `metadata.json`, if present.
    pub metadata: Option<Vec<u8>>,
    /// `base_config.json`, if present.
    pub base_config: Option<Vec<u8>>,
}

/// Reads one JP conversation directory.
pub fn read_source(dir: &Path) -> Result<JpSource, JpImportError> {
    let events = read_file(dir, "events.json")?.ok_or_else(|| invalid(dir, "no events.json"))?;
    let files = JpFileBytes {
        events,
        metadata: read_file(dir, "metadata.json")?,
        base_config: read_file(dir, "base_config.json")?,
    };
    source_from_bytes(dir, files)
}

/// One JP conversation from the bytes of its files, as [`read_source`]
/// reads it from directory `dir` (its name gives the id; under
/// `.archive/`, it is archived; errors name its files).
pub fn source_from_bytes(dir: &Path, files: JpFileBytes) -> Result<JpSource, JpImportError> {
    let dir_name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| invalid(dir, "the directory name is not UTF-8"))?
        .to_owned();
    let id_part = dir_name.split('-').next().unwrap_or("");
    if id_part.is_empty() || !id_part.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(
            dir,
            "the directory name does not start with a JP conversation id (digits, then `-` or the end)",
        ));
    }
    let id = ConversationId::parse(id_part).map_err(|e| {
        invalid(
            dir,
            format!("no conversation id in the directory name: {e}"),
        )
    })?;
    if let Some(problem) = super::check::dir_name_problem(&dir_name, &id) {
        return Err(invalid(dir, problem));
    }
    let archived = dir
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == ".archive");
    let (events, events_text) = parse_json(&dir.join("events.json"), files.events)?;
    let mut bytes = events_text.len() as u64;
    let Value::Array(events) = events else {
        return Err(invalid(
            &dir.join("events.json"),
            "expected a JSON array of entries",
        ));
    };
    let (metadata, metadata_text) = match files.metadata {
        None => (Map::new(), None),
        Some(b) => match parse_json(&dir.join("metadata.json"), b)? {
            (Value::Object(o), t) => {
                bytes += t.len() as u64;
                (o, Some(t))
            }
            _ => {
                return Err(invalid(
                    &dir.join("metadata.json"),
                    "expected a JSON object",
                ))
            }
        },
    };
    let (base_config, base_config_text) = match files.base_config {
        None => (None, None),
        Some(b) => match parse_json(&dir.join("base_config.json"), b)? {
            (Value::Object(o), t) => {
                bytes += t.len() as u64;
                (Some(o), Some(t))
            }
            _ => {
                return Err(invalid(
                    &dir.join("base_config.json"),
                    "expected a JSON object",
                ))
            }
        },
    };
    Ok(JpSource {
        path: dir.to_path_buf(),
        dir_name,
        archived,
        id,
        metadata,
        events,
        base_config,
        events_text,
        metadata_text,
        base_config_text,
        bytes,
    })
}

/// The settings of a JP conversation's config that jp-store cannot read
/// (of a type or shape it does not know: format-spec.md 4.5), for the
/// report: at most `NOT_APPLIED_NAMED` of them named, each with the file
/// (and the entry of a `config_delta`) that holds it. JP's loader reads
/// such a config too (it drops what does not fit its schema), so the
/// conversation is imported with its files as they are; the settings are
/// not applied to what jp-store does (compaction, deduplication, provider
/// requests). The layers are those [`prepare_checked`] finds:
/// `base_config.json` or a first `config_delta`, then every `config_delta`
/// of `events.json`.
pub fn settings_not_applied(src: &JpSource) -> Option<String> {
    let deltas: Vec<(usize, &Map<String, Value>)> = src
        .events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.get("type").and_then(Value::as_str) == Some("config_delta"))
        .filter_map(|(i, e)| match e.get("delta") {
            Some(Value::Object(d)) => Some((i, d)),
            _ => None,
        })
        .collect();
    let empty = Map::new();
    let layers = std::iter::once(src.base_config.as_ref().unwrap_or(&empty))
        .chain(deltas.iter().map(|(_, d)| *d));
    let bad = jpstore_engine::internal::config::settings_not_applied(layers);
    if bad.is_empty() {
        return None;
    }
    let named: Vec<String> = bad
        .iter()
        .take(NOT_APPLIED_NAMED)
        .map(|(layer, setting)| {
            let place = match (*layer, deltas.get(layer.wrapping_sub(1))) {
                (0, _) => "base_config.json".to_owned(),
                (_, Some((i, _))) => format!("events.json entry {} (config_delta)", i + 1),
                (_, None) => "events.json".to_owned(),
            };
            format!("{place}: {setting}")
        })
        .collect();
    let more = match bad.len() - named.len() {
        0 => String::new(),
        n => format!("; and {n} more"),
    };
    let (count, them) = match bad.len() {
        1 => ("1 setting".to_owned(), "it"),
        n => (format!("{n} settings"), "them"),
    };
    Some(format!(
        "{count} of its config not applied, of a shape jp-store does not read ({}{more}): kept as written, so that export gives {them} back",
        named.join("; ")
    ))
}

/// Settings named in a [`settings_not_applied`] warning; the rest are
/// counted.
const NOT_APPLIED_NAMED: usize = 5;

pub use super::MAX_KEPT_TEXT;

/// Whether a conversation's files will be exported byte for byte, as
/// [`prepare_checked`] found by rendering them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ByteCheck {
    /// Every file comes back byte for byte; `kept` bytes of text are kept
    /// for it beside the values (0 for the files JP writes).
    Identical {
        /// Bytes kept (gaps, edits, per-entry key orders).
        kept: usize,
    },
    /// The files come back equal as JSON values, not byte for byte.
    NotIdentical {
        /// Why.
        reason: String,
    },
}

/// Converts a JP conversation ([`prepare_checked`], without its report).
pub fn prepare(src: JpSource) -> Prepared {
    prepare_checked(src).0
}

/// Converts a JP conversation: detects the config layout, undoes base64
/// where JP applies it (recording the leaves that were not base64), parses
/// entries leniently (entries that do not fit the model are kept
/// verbatim), and records what export needs to write the same bytes: the
/// base config's own text (without whitespace) for its blob, the key order
/// of entries ([`order::choose`]), and for each file its layout and, found
/// by rendering it and comparing with the bytes read, whatever else
/// differs ([`render::record`]).
pub fn prepare_checked(src: JpSource) -> (Prepared, ByteCheck) {
    let mut events = src.events;
    let first_is_delta = events
        .first()
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        == Some("config_delta");
    let items = text::array_items(&src.events_text);
    let (layout, base_config, base_text, first_entry) = if let Some(base) = src.base_config {
        let base_text = src.base_config_text.as_deref().map(text::minify);
        (ConfigLayout::BaseConfigFile, Some(base), base_text, None)
    } else if first_is_delta {
        match events.first().and_then(|e| e.get("delta")) {
            Some(Value::Object(delta)) => {
                let delta = delta.clone();
                let mut first = match events.remove(0) {
                    Value::Object(o) => o,
                    _ => Map::new(),
                };
                // `{}` holds the place of the delta (the base config).
                if let Some(v) = first.get_mut("delta") {
                    *v = Value::Object(Map::new());
                }
                let delta_text = items
                    .as_ref()
                    .and_then(|spans| spans.first())
                    .and_then(|span| src.events_text.get(span.clone()))
                    .and_then(|entry| {
                        let at = text::object_member(entry, "delta")?;
                        entry.get(at).map(text::minify)
                    });
                (
                    ConfigLayout::FirstConfigDelta,
                    Some(delta),
                    delta_text,
                    Some(first),
                )
            }
            Some(_) => (ConfigLayout::None, None, None, None),
            None => (ConfigLayout::Flattened, None, None, None),
        }
    } else {
        (ConfigLayout::None, None, None, None)
    };
    // The base config blob holds the config's text as the file has it
    // (format-spec.md 4.5); canonical bytes only if the text was not found.
    let base_text = match (&base_config, base_text) {
        (Some(_), Some(t)) => Some(t),
        (Some(c), None) => {
            String::from_utf8(jpstore_engine::internal::config::canonical_bytes(c)).ok()
        }
        (None, _) => None,
    };
    let mut raw = std::collections::BTreeMap::new();
    let entries: Vec<Entry<Payload>> = events
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let (entry, leaves) = import_entry(v);
            if !leaves.is_empty() {
                raw.insert(i.to_string(), leaves);
            }
            entry
        })
        .collect();
    let mut fields = src.metadata;
    let mut info = JpInfo::new(src.dir_name, src.archived, layout);
    info.first_entry = first_entry;
    info.raw = raw;
    info.metadata_jp = fields.get(JP_FIELD).cloned();
    // Every entry as export renders it (keys in the rendering's order), once:
    // their keys decide the key order, then they are written in it.
    let mut lossy = Vec::new();
    let mut failed = Vec::new();
    let (written, _) = render::written_entries(&entries);
    let mut values = Vec::with_capacity(written.len());
    let mut seen = Vec::new();
    for i in written {
        match render::jp_value(&entries[i], i, &info, &mut payload_json, &mut lossy) {
            Ok(value) => {
                if let (Entry::Event(e), Value::Object(rendered), Some(Value::Object(file))) =
                    (&entries[i], &value, events.get(i))
                {
                    seen.push(SeenKeys {
                        index: i,
                        type_name: e.kind.type_name().to_owned(),
                        rendered: rendered.keys().cloned().collect(),
                        file: file.keys().cloned().collect(),
                    });
                }
                values.push((i, value));
            }
            Err(e) => failed.push(format!("events.json: entry {i}: {e}")),
        }
    }
    if !lossy.is_empty() {
        failed.push(format!("events.json: {}", lossy.join("; ")));
    }
    order::choose(&mut info, &seen);
    let created_added = !fields.contains_key("created");
    if created_added {
        // JP's id is the creation time in deciseconds.
        if let Ok(ds) = src.id.as_str().parse::<i64>() {
            if let Some(t) = Timestamp::from_unix(ds / 10, (ds % 10) as u32 * 100_000_000) {
                fields.insert("created".into(), t.to_string().into());
            }
        }
    }
    info.created_added = created_added && fields.contains_key("created");
    // The fields as the store will hold them: a JSON merge patch over
    // nothing, in which `null` removes a key (format-spec.md 4.3). The
    // check renders what export will render from those.
    fields.insert(JP_FIELD.into(), info.to_value());
    let mut stored = Map::new();
    merge_patch(&mut stored, &fields);
    if let Some(Ok(Some(kept))) = stored
        .contains_key(JP_FIELD)
        .then(|| JpInfo::from_metadata(&stored))
    {
        info = kept;
    }
    let shape = Shape::detect(&src.events_text);
    info.events_text.set_shape(&shape);
    let mut elements = Vec::with_capacity(values.len() + 1);
    elements.extend(render::first_element(&info, base_text.as_deref(), &shape));
    for (i, value) in values {
        elements.push(render::entry_element(&entries[i], i, value, &info, &shape));
    }
    let metadata = super::export::imported_metadata(&stored, &info);
    let check = record_text(
        &mut info,
        failed,
        (&src.events_text, items.as_deref(), &elements, &shape),
        src.metadata_text.as_deref().map(|t| (t, metadata)),
        base_text.as_deref(),
        src.base_config_text.as_deref(),
    );
    fields.insert(JP_FIELD.into(), info.to_value());
    let prepared = Prepared {
        id: src.id,
        fields,
        base_config,
        base_config_text: base_text.map(String::into_bytes),
        entries,
        source_bytes: src.bytes,
    };
    (prepared, check)
}

/// Renders the files of a conversation being imported as export will
/// write them, compares them with the text read, and records in `info`
/// what makes them the same (their [`super::FileText`]s). A file whose values do
/// not match the rendered ones one to one, or a conversation that would
/// keep more than [`MAX_KEPT_TEXT`], keeps only its layout.
fn record_text(
    info: &mut JpInfo,
    mut failed: Vec<String>,
    (events_text, items, elements, shape): (&str, Option<&[Range<usize>]>, &[Element], &Shape),
    metadata: Option<(&str, Object)>,
    base_text: Option<&str>,
    base_config_text: Option<&str>,
) -> ByteCheck {
    // events.json
    let recorded = items
        .and_then(|spans| render::record(elements, events_text, spans, FileKind::Array, shape));
    match recorded {
        Some(file) if failed.is_empty() => info.events_text = file,
        Some(_) => {}
        None => failed.push(
            "events.json: its text could not be recorded (its values and the entries do not \
             match one to one)"
                .to_owned(),
        ),
    }
    // metadata.json: the fields as export gives them back.
    if let Some((text, fields)) = metadata {
        let shape = Shape::detect(text);
        let element = render::object_element(&Value::Object(fields), &shape);
        let span = text::value_span(text);
        match span.and_then(|s| render::record(&[element], text, &[s], FileKind::Single, &shape)) {
            Some(file) => info.metadata_text = file,
            None => {
                info.metadata_text.set_shape(&shape);
                failed.push("metadata.json: its text could not be recorded".to_owned());
            }
        }
    }
    // base_config.json: the text kept in the blob.
    if let (Some(text), Some(base)) = (base_config_text, base_text) {
        let shape = Shape::detect(text);
        let element = render::value_element(base, &shape);
        let span = text::value_span(text);
        match span.and_then(|s| render::record(&[element], text, &[s], FileKind::Single, &shape)) {
            Some(file) => info.base_config_text = file,
            None => {
                info.base_config_text.set_shape(&shape);
                failed.push("base_config.json: its text could not be recorded".to_owned());
            }
        }
    }
    let lists = |lists: &std::collections::BTreeMap<String, Vec<String>>| {
        lists
            .iter()
            .map(|(k, keys)| k.len() + keys.iter().map(|s| s.len() + 1).sum::<usize>())
            .sum::<usize>()
    };
    // What is kept for text a serializer would not have written; the
    // orders of types (a serializer's own) count toward the bound only.
    let kept = render::kept_bytes(&info.events_text)
        + render::kept_bytes(&info.metadata_text)
        + render::kept_bytes(&info.base_config_text)
        + lists(&info.entry_keys);
    if kept + lists(&info.type_keys) > MAX_KEPT_TEXT {
        // The layout and the order of each type stay (a few bytes); what
        // grows with the file goes.
        for file in [
            &mut info.events_text,
            &mut info.metadata_text,
            &mut info.base_config_text,
        ] {
            file.gaps.clear();
            file.fixes.clear();
        }
        info.entry_keys.clear();
        failed.push(format!(
            "{kept} bytes of its text differ from what JP's serializer writes, more than the \
             {MAX_KEPT_TEXT} bytes kept per conversation"
        ));
    }
    if failed.is_empty() {
        ByteCheck::Identical { kept }
    } else {
        ByteCheck::NotIdentical {
            reason: format!(
                "it will export equal as JSON, not byte for byte: {}",
                failed.join("; ")
            ),
        }
    }
}

/// Converts one entry of `events.json`: the entry and the JSON Pointers of
/// the string leaves that JP would have encoded but that are not base64.
fn import_entry(v: &Value) -> (Entry<Payload>, Vec<String>) {
    let Value::Object(obj) = v else {
        // Not an object: JP could not have written it; kept verbatim.
        let mut o = Map::new();
        o.insert("$value".into(), v.clone());
        return (Entry::Unknown(o), Vec::new());
    };
    let mut decoded = obj.clone();
    let mut raw = Vec::new();
    match obj.get("type").and_then(Value::as_str) {
        Some("tool_call_response") => {
            if let Some(Value::String(s)) = decoded.get_mut("content") {
                match decode(s) {
                    Some(d) => *s = d,
                    None => raw.push("/content".to_string()),
                }
            }
        }
        Some("tool_call_request") => {
            if let Some(args) = decoded.get_mut("arguments") {
                decode_leaves(args, &mut "/arguments".to_string(), &mut raw);
            }
        }
        _ => {}
    }
    if let Some(meta) = decoded.get_mut("metadata") {
        decode_leaves(meta, &mut "/metadata".to_string(), &mut raw);
    }
    match parse_entry(&Value::Object(decoded), ParseMode::Lenient) {
        // JP has no `compaction_undo` (a jp-store extension): JP passes one
        // through as an entry it does not know, and its compaction stays in
        // effect. So does it here: kept verbatim, it revokes nothing.
        Ok(Entry::Event(e)) if matches!(e.kind, EventKind::CompactionUndo(_)) => {
            (Entry::Unknown(obj.clone()), Vec::new())
        }
        Ok(Entry::Event(e)) => (Entry::Event(e), raw),
        // Unknown, or not fitting the model: the original bytes' JSON, with
        // its base64 untouched, so export writes it back as it was.
        _ => (Entry::Unknown(obj.clone()), Vec::new()),
    }
}

/// Entries of an `events.json` that JP's serializer wrote (JP's storage
/// backend over a store hands over what JP writes), converted as import
/// converts them, for appending to a conversation imported before. `None`
/// when one holds a string leaf JP would have encoded but that is not
/// base64 (import records such leaves for the file as a whole, which an
/// append cannot), or is nested deeper than JP's reader reads back from an
/// `events.json` ([`JP_EVENT_DEPTH_MAX`]: import refuses such a file, and
/// so must a write that appends to one).
pub fn entries_written_by_jp(values: &[Value]) -> Option<Vec<Entry<Payload>>> {
    values
        .iter()
        .map(|v| {
            // Measured before anything walks the value recursively.
            if depth(v) > JP_EVENT_DEPTH_MAX {
                return None;
            }
            match import_entry(v) {
                (entry, raw) if raw.is_empty() => Some(entry),
                _ => None,
            }
        })
        .collect()
}

/// The deepest nesting of arrays and objects an event of an `events.json`
/// may have for JP to read the file back: JP reads it with `serde_json`,
/// which refuses a text nested 128 containers deep, and the file's array
/// of events is one of them (an event object with nothing nested in it is
/// 1 deep).
pub const JP_EVENT_DEPTH_MAX: usize = 126;

/// How many arrays and objects `v` nests, itself included (a scalar: 0).
fn depth(v: &Value) -> usize {
    // Iterative: a hostile value may nest deeper than the stack allows.
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, above)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(fields) => Box::new(fields.values()),
            _ => continue,
        };
        deepest = deepest.max(above + 1);
        stack.extend(children.map(|c| (c, above + 1)));
    }
    deepest
}

/// `items.iter().map(f).collect()`, the items handed out one by one to as
/// many threads as there are cores (at most 8; the caller's among them).
/// A panic in `f` goes on in the caller's thread.
fn map_ordered<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
        .min(items.len());
    if threads < 2 {
        return items.iter().map(f).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return done;
            };
            done.push((i, f(item)));
        }
    };
    let mut all: Vec<(usize, U)> = std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut all = work();
        for h in helpers {
            match h.join() {
                Ok(done) => all.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    });
    all.sort_unstable_by_key(|(i, _)| *i);
    all.into_iter().map(|(_, u)| u).collect()
}

/// A list of [`ImportReport`] that warnings about a conversation go to.
type ReportList = fn(&mut ImportReport) -> &mut Vec<ImportFailure>;

/// The entries of `entries` kept verbatim although their type is known
/// ([`jpstore_engine::internal::event::json::misfit`]), and why, for the report; at
/// most `MISFITS_NAMED` of them named.
pub fn misfits(entries: &[Entry<Payload>]) -> Option<String> {
    let mut named = Vec::new();
    let mut count = 0usize;
    for (i, entry) in entries.iter().enumerate() {
        let Entry::Unknown(obj) = entry else {
            continue;
        };
        // The first entry of the oldest layout, a config with its keys
        // flattened into it ([`ConfigLayout::Flattened`]), is as JP reads it.
        if i == 0
            && obj.get("type") == Some(&Value::from("config_delta"))
            && !obj.contains_key("delta")
        {
            continue;
        }
        let Some(why) = jpstore_engine::internal::event::json::misfit(obj) else {
            continue;
        };
        count += 1;
        if named.len() < MISFITS_NAMED {
            let type_name = obj.get("type").and_then(Value::as_str).unwrap_or("?");
            named.push(format!("entry {i} (`{type_name}`): {why}"));
        }
    }
    if count == 0 {
        return None;
    }
    let more = match count - named.len() {
        0 => String::new(),
        n => format!("; and {n} more"),
    };
    let (entries, them) = match count {
        1 => ("entry of a known type does", "it"),
        _ => ("entries of known types do", "them"),
    };
    Some(format!(
        "events.json: {count} {entries} not read as one ({}{more}): kept as written, so that export gives {them} back, but left out of the view",
        named.join("; ")
    ))
}

/// Entries named in a [`misfits`] warning; the rest are counted.
const MISFITS_NAMED: usize = 5;

/// JP files read per chunk: each chunk's content is stored as one pack
/// ([`Store::import`]), so memory stays bounded by about this much plus
/// one conversation.
pub const IMPORT_CHUNK_BYTES: u64 = 256 << 20;

/// A path of [`import_paths`] that was not imported, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ImportFailure {
    /// The path given, or the conversation directory found under it.
    pub path: PathBuf,
    /// Why it was not imported.
    pub reason: String,
}

/// What [`import_paths`] did (the `--json` output of `jp-store import`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct ImportReport {
    /// Conversations stored (new or replaced).
    pub imported: usize,
    /// Conversations skipped: already in the store, and not forced.
    pub skipped: usize,
    /// Paths that were not imported: no JP data found, or not valid JP data.
    pub failed: Vec<ImportFailure>,
    /// Conversations imported whose files will not export byte for byte
    /// (only equal as JSON), and why ([`ByteCheck::NotIdentical`]).
    pub not_byte_identical: Vec<ImportFailure>,
    /// Conversations imported with entries of a known type that do not fit
    /// its model (a timestamp that does not read, a field of the wrong
    /// type): kept as written, so that export gives them back, but no
    /// event, so neither the view nor a provider request holds them; which
    /// entries, and why ([`misfits`]).
    pub not_in_view: Vec<ImportFailure>,
    /// Conversations imported whose config holds settings jp-store cannot
    /// read (of a shape it does not know): kept as written, so that export
    /// gives them back, but not applied; which settings
    /// ([`settings_not_applied`]).
    pub settings_not_applied: Vec<ImportFailure>,
    /// Entries stored.
    pub events: usize,
    /// Bytes of the JP files of the conversations stored.
    pub bytes_read: u64,
    /// Bytes written: new blobs and logs.
    pub bytes_stored: u64,
    /// Bytes of the new blobs (objects or packs, compressed).
    pub blob_bytes_stored: u64,
    /// Blobs that were not in the store before.
    pub new_blobs: usize,
    /// Bytes of the logs written.
    pub log_bytes: u64,
}

/// What [`import_paths`] tells its caller as it goes.
#[derive(Debug)]
pub enum ImportProgress<'a> {
    /// Bytes of JP files imported so far, of all those found.
    Bytes {
        /// Imported so far.
        done: u64,
        /// Found in all.
        total: u64,
    },
    /// A conversation already in the store was replaced (forced).
    Replaced(&'a ConversationId),
    /// A conversation already in the store was left as it is.
    Skipped(&'a ConversationId),
    /// A path given holds no JP conversation or cannot be read, or a
    /// conversation directory found is not valid JP data: each is also in
    /// the report's `failed`.
    Failed(&'a ImportFailure),
    /// A conversation given again (a second directory or stream line with
    /// its id) is imported over the earlier one, as `force` asks
    /// ([`given_again`]; without `force` it is one of `failed`).
    Again(&'a ImportFailure),
}

/// The report of conversation `id` given again at `at`, having been given
/// first at `first` (a directory, or a stream's `SOURCE:LINE`): skipped,
/// or with `force` imported over the earlier one.
pub fn given_again(id: &ConversationId, first: &Path, at: PathBuf, force: bool) -> ImportFailure {
    let outcome = if force {
        "imported over it (--force)"
    } else {
        "skipped (--force imports it over the earlier one)"
    };
    ImportFailure {
        path: at,
        reason: format!(
            "conversation {id} was given already, at {}: {outcome}",
            first.display()
        ),
    }
}

/// A digest of the files of a JP conversation (their text, and whether it
/// is archived): two directories with the same are copies of one.
fn files_digest(source: &JpSource) -> BlobId {
    let mut all = Vec::new();
    for text in [
        Some(&source.events_text),
        source.metadata_text.as_ref(),
        source.base_config_text.as_ref(),
    ] {
        match text {
            Some(t) => {
                all.extend_from_slice(&(t.len() as u64).to_le_bytes());
                all.extend_from_slice(t.as_bytes());
            }
            None => all.extend_from_slice(&u64::MAX.to_le_bytes()),
        }
    }
    all.push(u8::from(source.archived));
    BlobId::of(&all)
}

/// Which of the conversation directories `sources` hold conversations JP
/// wrote local (its `Projection::LocalOnly`): JP keeps every conversation
/// in the user's storage and the projected ones also in the workspace's
/// `.jp` directory, so when an import takes both places, a conversation
/// found only outside a `.jp` directory is local (format-spec.md 4.11).
/// None is local when the import takes only one of the two places.
fn local_only(sources: &[PathBuf]) -> impl Fn(&Path) -> bool {
    let in_workspace = |p: &Path| p.components().any(|c| c.as_os_str() == ".jp");
    // A directory `<id>` or `<id>-<title>`: JP's id.
    let id_of = |p: &Path| -> Option<String> {
        let name = p.file_name()?.to_str()?;
        Some(name.split('-').next().unwrap_or(name).to_owned())
    };
    let both = sources.iter().any(|s| in_workspace(s)) && sources.iter().any(|s| !in_workspace(s));
    let projected: std::collections::HashSet<String> = if both {
        sources
            .iter()
            .filter(|s| in_workspace(s))
            .filter_map(|s| id_of(s))
            .collect()
    } else {
        std::collections::HashSet::new()
    };
    move |p: &Path| both && !in_workspace(p) && id_of(p).is_some_and(|id| !projected.contains(&id))
}

/// `jp-store import`: finds the JP conversations under each of `paths`
/// ([`find_sources`]), reads and prepares them ([`read_source`],
/// [`prepare`]) and stores them by chunks of [`IMPORT_CHUNK_BYTES`] of
/// files, each chunk's content as one pack ([`Store::import`]). A
/// conversation already in the store is skipped, or with `force` replaced.
///
/// A path without JP data, or a conversation that is not valid JP data, is
/// reported in [`ImportReport::failed`] and the others are imported; so is
/// a directory of a conversation found in an earlier one (two directories
/// with one id), unless `force` imports it over the earlier one (a
/// directory holding the very same files, as JP keeps a projected
/// conversation in two places, is taken once, without a word); an
/// error of the store (I/O, a failed sync) stops the import, with the
/// chunks before it stored.
pub fn import_paths(
    store: &Store,
    paths: &[PathBuf],
    force: bool,
    progress: &mut dyn FnMut(ImportProgress<'_>),
) -> Result<ImportReport, JpImportError> {
    let mut report = ImportReport::default();
    let mut sources = Vec::new();
    for p in paths {
        let reason = match find_sources(p) {
            Ok(found) if found.is_empty() => {
                "no JP conversation directories (with an events.json) found".to_owned()
            }
            Ok(found) => {
                sources.extend(found);
                continue;
            }
            Err(e) => e.to_string(),
        };
        let failure = ImportFailure {
            path: p.clone(),
            reason,
        };
        progress(ImportProgress::Failed(&failure));
        report.failed.push(failure);
    }
    let sizes: Vec<u64> = sources
        .iter()
        .map(|d| {
            ["events.json", "metadata.json", "base_config.json"]
                .iter()
                .map(|f| std::fs::metadata(d.join(f)).map_or(0, |m| m.len()))
                .sum::<u64>()
        })
        .collect();
    let total: u64 = sizes.iter().sum();
    let mut done = 0u64;
    let mut chunk = Vec::new();
    // Warnings about conversations of the chunk (not byte for byte, entries
    // left out of the view, settings not applied), each with the list of
    // the report it goes to:
    // reported once they are stored (not when skipped).
    let mut inexact: Vec<(ConversationId, ImportFailure, ReportList)> = Vec::new();
    let mut flush = |chunk: &mut Vec<Prepared>,
                     inexact: &mut Vec<(ConversationId, ImportFailure, ReportList)>,
                     report: &mut ImportReport,
                     progress: &mut dyn FnMut(ImportProgress<'_>)|
     -> Result<(), JpImportError> {
        if chunk.is_empty() {
            return Ok(());
        }
        let (results, totals) =
            jpstore_engine::import::run(store, std::mem::take(chunk), force, &mut |_| {})?;
        report.blob_bytes_stored += totals.stored_bytes;
        report.new_blobs += totals.new_blobs;
        for r in results {
            match r {
                Imported::Stored {
                    id,
                    entries,
                    source_bytes,
                    log_bytes,
                    replaced,
                } => {
                    report.imported += 1;
                    report.events += entries;
                    report.bytes_read += source_bytes;
                    report.log_bytes += log_bytes;
                    done += source_bytes;
                    if replaced {
                        progress(ImportProgress::Replaced(&id));
                    }
                    while let Some(at) = inexact.iter().position(|(i, ..)| *i == id) {
                        let (_, failure, list) = inexact.swap_remove(at);
                        list(report).push(failure);
                    }
                }
                Imported::Skipped { id } => {
                    report.skipped += 1;
                    progress(ImportProgress::Skipped(&id));
                }
            }
        }
        inexact.clear();
        progress(ImportProgress::Bytes { done, total });
        Ok(())
    };
    let local = local_only(&sources);
    // Where each conversation was first found, to name a directory that
    // holds it again, and the digest of its files: a copy of the same
    // files (JP keeps a projected conversation in its user storage and in
    // the workspace) is the same conversation, taken once without a word.
    let mut given: std::collections::HashMap<ConversationId, (PathBuf, BlobId)> =
        std::collections::HashMap::new();
    // Sources in chunks of about IMPORT_CHUNK_BYTES of files (by their
    // sizes when listed), each chunk read and prepared on all cores, in
    // order, then stored.
    let mut start = 0;
    while start < sources.len() {
        let mut end = start;
        let mut chunk_bytes = 0u64;
        while end < sources.len() && (end == start || chunk_bytes < IMPORT_CHUNK_BYTES) {
            chunk_bytes += sizes[end];
            end += 1;
        }
        let prepared = map_ordered(&sources[start..end], |src| {
            read_source(src).map(|source| {
                let not_applied = settings_not_applied(&source);
                let digest = files_digest(&source);
                let (prepared, check) = prepare_checked(source);
                (prepared, check, not_applied, digest)
            })
        });
        for (src, result) in sources[start..end].iter().zip(prepared) {
            match result {
                Ok((mut prepared, check, not_applied, digest)) => {
                    if local(src) {
                        if let Some(Value::Object(info)) = prepared.fields.get_mut(JP_FIELD) {
                            info.insert("local".into(), Value::Bool(true));
                        }
                    }
                    match given.get(&prepared.id) {
                        None => {
                            given.insert(prepared.id.clone(), (src.clone(), digest));
                        }
                        Some((_, same)) if *same == digest => continue,
                        Some((first, _)) => {
                            let failure = given_again(&prepared.id, first, src.clone(), force);
                            if !force {
                                progress(ImportProgress::Failed(&failure));
                                report.failed.push(failure);
                                continue;
                            }
                            progress(ImportProgress::Again(&failure));
                            // Imported over the earlier one, which must be
                            // stored first.
                            if chunk.iter().any(|p: &Prepared| p.id == prepared.id) {
                                flush(&mut chunk, &mut inexact, &mut report, progress)?;
                            }
                        }
                    }
                    let failure = |reason| ImportFailure {
                        path: src.clone(),
                        reason,
                    };
                    if let ByteCheck::NotIdentical { reason } = check {
                        let list: ReportList = |r| &mut r.not_byte_identical;
                        inexact.push((prepared.id.clone(), failure(reason), list));
                    }
                    if let Some(reason) = misfits(&prepared.entries) {
                        let list: ReportList = |r| &mut r.not_in_view;
                        inexact.push((prepared.id.clone(), failure(reason), list));
                    }
                    if let Some(reason) = not_applied {
                        let list: ReportList = |r| &mut r.settings_not_applied;
                        inexact.push((prepared.id.clone(), failure(reason), list));
                    }
                    chunk.push(prepared);
                }
                Err(e) => {
                    let failure = ImportFailure {
                        path: src.clone(),
                        reason: e.to_string(),
                    };
                    progress(ImportProgress::Failed(&failure));
                    report.failed.push(failure);
                }
            }
        }
        flush(&mut chunk, &mut inexact, &mut report, progress)?;
        start = end;
    }
    flush(&mut chunk, &mut inexact, &mut report, progress)?;
    report.bytes_stored = report.blob_bytes_stored + report.log_bytes;
    Ok(report)
}
