//! Reading JP conversation directories and importing them into a store.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::base64::{decode, decode_leaves};
use super::{ConfigLayout, JpInfo, JP_FIELD};
use crate::user_file::{self, LastLink};
use jpstore_engine::config::SettingPlace;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::{Error, Result};
use jpstore_engine::event::json::{parse_entry, ParseMode};
use jpstore_engine::event::{Entry, EventKind, Object, Payload};
pub use jpstore_engine::import::{Imported, Prepared};
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::Store;

/// Largest JP file read.
pub const MAX_JP_FILE: u64 = 2 << 30;

/// The files of one JP conversation, parsed as JSON.
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
    /// Bytes of the files read.
    pub bytes: u64,
}

fn invalid(path: &Path, reason: impl Into<String>) -> Error {
    Error::NotJp {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Finds JP conversation directories under `path`: `path` itself if it holds
/// an `events.json`; else its subdirectories that do (and those of its
/// `.archive/`); a workspace root is searched at `.jp/conversations`.
pub fn find_sources(path: &Path) -> Result<Vec<PathBuf>> {
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
    let workspace = path.join(".jp").join("conversations");
    let base = if workspace.is_dir() {
        workspace
    } else {
        path.to_path_buf()
    };
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

/// Reads `dir/name` as JSON: a regular file of at most [`MAX_JP_FILE`]
/// bytes (a FIFO, a device or a link there is refused without blocking:
/// [`user_file`]); `None` if it does not exist.
fn read_json(dir: &Path, name: &str) -> Result<Option<(Value, u64)>> {
    let path = dir.join(name);
    let bytes = match user_file::read(&path, MAX_JP_FILE, LastLink::Refuse) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(Error::Io {
                op: "read",
                path,
                source,
            })
        }
    };
    // JP's loader (serde derive) refuses a field given twice; a file with
    // a duplicate key anywhere is damaged or hand-edited, and which value
    // was meant is unknown: refused, naming the key's path.
    let v = jpstore_engine::json_text::parse(&bytes).map_err(|e| {
        let at = match &e.duplicate {
            Some(path) => format!(" at `{}`", jpstore_engine::json_text::path_string(path)),
            None => String::new(),
        };
        invalid(
            &dir.join(name),
            format!(
                "invalid JSON at line {}, column {}{at}: {}",
                e.line, e.column, e.message
            ),
        )
    })?;
    Ok(Some((v, bytes.len() as u64)))
}

/// Reads one JP conversation directory.
pub fn read_source(dir: &Path) -> Result<JpSource> {
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
    let archived = dir
        .parent()
        .and_then(|p| p.file_name())
        .is_some_and(|n| n == ".archive");
    let (events, mut bytes) =
        read_json(dir, "events.json")?.ok_or_else(|| invalid(dir, "no events.json"))?;
    let Value::Array(events) = events else {
        return Err(invalid(
            &dir.join("events.json"),
            "expected a JSON array of entries",
        ));
    };
    let metadata = match read_json(dir, "metadata.json")? {
        None => Map::new(),
        Some((Value::Object(o), n)) => {
            bytes += n;
            o
        }
        Some(_) => {
            return Err(invalid(
                &dir.join("metadata.json"),
                "expected a JSON object",
            ))
        }
    };
    let base_config = match read_json(dir, "base_config.json")? {
        None => None,
        Some((Value::Object(o), n)) => {
            bytes += n;
            Some(o)
        }
        Some(_) => {
            return Err(invalid(
                &dir.join("base_config.json"),
                "expected a JSON object",
            ))
        }
    };
    check_settings(dir, base_config.as_ref(), &events)?;
    Ok(JpSource {
        path: dir.to_path_buf(),
        dir_name,
        archived,
        id,
        metadata,
        events,
        base_config,
        bytes,
    })
}

/// Refuses a JP conversation whose config holds a setting jp-store reads
/// of the wrong type (format-spec.md 4.5), naming the file (and the entry of
/// a `config_delta`) that holds it: stored, it would fail every later view.
/// The layers are those [`prepare`] finds: `base_config.json` or a first
/// `config_delta`, then every `config_delta` of `events.json`.
fn check_settings(
    dir: &Path,
    base_config: Option<&Map<String, Value>>,
    events: &[Value],
) -> Result<()> {
    let deltas: Vec<(usize, &Map<String, Value>)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e.get("type").and_then(Value::as_str) == Some("config_delta"))
        .filter_map(|(i, e)| match e.get("delta") {
            Some(Value::Object(d)) => Some((i, d)),
            _ => None,
        })
        .collect();
    let empty = Map::new();
    let layers =
        std::iter::once(base_config.unwrap_or(&empty)).chain(deltas.iter().map(|(_, d)| *d));
    match jpstore_engine::config::settings::parse_layers(layers) {
        Ok(_) => Ok(()),
        Err((layer, setting)) => {
            let place = match layer {
                0 => SettingPlace::JpFile {
                    path: dir.join("base_config.json"),
                    entry: None,
                },
                n => SettingPlace::JpFile {
                    path: dir.join("events.json"),
                    entry: deltas.get(n - 1).map(|(i, _)| i + 1),
                },
            };
            Err(Error::BadSetting {
                place: Box::new(place),
                setting: Box::new(setting),
            })
        }
    }
}

/// Converts a JP conversation: detects the config layout, undoes base64
/// where JP applies it (recording the leaves that were not base64), and
/// parses entries leniently (entries that do not fit the model are kept
/// verbatim).
pub fn prepare(src: JpSource) -> Prepared {
    let mut events = src.events;
    let first_is_delta = events
        .first()
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
        == Some("config_delta");
    let (layout, base_config, first_entry) = if src.base_config.is_some() {
        (ConfigLayout::BaseConfigFile, src.base_config, None)
    } else if first_is_delta {
        match events.first().and_then(|e| e.get("delta")) {
            Some(Value::Object(delta)) => {
                let delta = delta.clone();
                let mut first = match events.remove(0) {
                    Value::Object(o) => o,
                    _ => Map::new(),
                };
                first.remove("delta");
                (ConfigLayout::FirstConfigDelta, Some(delta), Some(first))
            }
            Some(_) => (ConfigLayout::None, None, None),
            None => (ConfigLayout::Flattened, None, None),
        }
    } else {
        (ConfigLayout::None, None, None)
    };
    let mut raw = std::collections::BTreeMap::new();
    // JP writes no `compaction_undo`. One naming a compaction that is not
    // before it would revoke a later one (format-spec.md 4.2): it is kept
    // verbatim, as an entry that does not fit the model is, and revokes
    // nothing.
    let mut compactions = 0u64;
    let entries = events
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let (entry, leaves) = import_entry(v);
            if !leaves.is_empty() {
                raw.insert(i.to_string(), leaves);
            }
            match (entry.event().map(|e| &e.kind), v) {
                (Some(EventKind::Compaction(_)), _) => compactions += 1,
                (Some(EventKind::CompactionUndo(u)), Value::Object(o))
                    if u.undoes >= compactions =>
                {
                    return Entry::Unknown(o.clone());
                }
                _ => {}
            }
            entry
        })
        .collect();
    let mut fields = src.metadata;
    let created_added = !fields.contains_key("created");
    if created_added {
        // JP's id is the creation time in deciseconds.
        if let Ok(ds) = src.id.as_str().parse::<i64>() {
            if let Some(t) = Timestamp::from_unix(ds / 10, (ds % 10) as u32 * 100_000_000) {
                fields.insert("created".into(), t.to_jp_string().into());
            }
        }
    }
    let created_added = created_added && fields.contains_key("created");
    let info = JpInfo {
        dir: src.dir_name,
        archived: src.archived,
        layout,
        first_entry,
        raw,
        created_added,
    };
    fields.insert(JP_FIELD.into(), info.to_value());
    Prepared {
        id: src.id,
        fields,
        base_config,
        entries,
        source_bytes: src.bytes,
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
        Ok(Entry::Event(e)) => (Entry::Event(e), raw),
        // Unknown, or not fitting the model: the original bytes' JSON, with
        // its base64 untouched, so export writes it back as it was.
        _ => (Entry::Unknown(obj.clone()), Vec::new()),
    }
}

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
pub struct ImportReport {
    /// Conversations stored (new or replaced).
    pub imported: usize,
    /// Conversations skipped: already in the store, and not forced.
    pub skipped: usize,
    /// Paths that were not imported: no JP data found, or not valid JP data.
    pub failed: Vec<ImportFailure>,
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
    /// A conversation directory found could not be read or is not valid JP
    /// data (a path under which none was found is only in the report).
    Failed(&'a ImportFailure),
}

/// `jp-store import`: finds the JP conversations under each of `paths`
/// ([`find_sources`]), reads and prepares them ([`read_source`],
/// [`prepare`]) and stores them by chunks of [`IMPORT_CHUNK_BYTES`] of
/// files, each chunk's content as one pack ([`Store::import`]). A
/// conversation already in the store is skipped, or with `force` replaced.
///
/// A path without JP data, or a conversation that is not valid JP data, is
/// reported in [`ImportReport::failed`] and the others are imported; an
/// error of the store (I/O, a failed sync) stops the import, with the
/// chunks before it stored.
pub fn import_paths(
    store: &Store,
    paths: &[PathBuf],
    force: bool,
    progress: &mut dyn FnMut(ImportProgress<'_>),
) -> Result<ImportReport> {
    let mut report = ImportReport::default();
    let mut sources = Vec::new();
    for p in paths {
        match find_sources(p) {
            Ok(found) if found.is_empty() => report.failed.push(ImportFailure {
                path: p.clone(),
                reason: "no JP conversation directories (with an events.json) found".into(),
            }),
            Ok(found) => sources.extend(found),
            Err(e) => report.failed.push(ImportFailure {
                path: p.clone(),
                reason: e.to_string(),
            }),
        }
    }
    let total: u64 = sources
        .iter()
        .map(|d| {
            ["events.json", "metadata.json", "base_config.json"]
                .iter()
                .map(|f| std::fs::metadata(d.join(f)).map_or(0, |m| m.len()))
                .sum::<u64>()
        })
        .sum();
    let mut done = 0u64;
    let mut chunk = Vec::new();
    let mut chunk_bytes = 0u64;
    let mut flush = |chunk: &mut Vec<Prepared>,
                     report: &mut ImportReport,
                     progress: &mut dyn FnMut(ImportProgress<'_>)|
     -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        let (results, totals) = store.import(std::mem::take(chunk), force, &mut |_| {})?;
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
                }
                Imported::Skipped { id } => {
                    report.skipped += 1;
                    progress(ImportProgress::Skipped(&id));
                }
            }
        }
        progress(ImportProgress::Bytes { done, total });
        Ok(())
    };
    for src in sources {
        match read_source(&src) {
            Ok(s) => {
                chunk_bytes += s.bytes;
                chunk.push(prepare(s));
                if chunk_bytes >= IMPORT_CHUNK_BYTES {
                    flush(&mut chunk, &mut report, progress)?;
                    chunk_bytes = 0;
                }
            }
            Err(e) => {
                let failure = ImportFailure {
                    path: src,
                    reason: e.to_string(),
                };
                progress(ImportProgress::Failed(&failure));
                report.failed.push(failure);
            }
        }
    }
    flush(&mut chunk, &mut report, progress)?;
    report.bytes_stored = report.blob_bytes_stored + report.log_bytes;
    Ok(report)
}
