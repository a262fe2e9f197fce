//! Importing NDJSON streams of conversations (`jp-store import FILE`, or
//! `-` for standard input): the lines `export --format ndjson` writes, one
//! conversation a line ([`jpstore_engine::internal::stream`]), stored by chunks as a
//! JP import is, with the same report.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Result;
use jpstore_engine::import::{Imported, Prepared};
use jpstore_engine::internal::stream::{parse_conversation_line, read_line, LineError, MAX_LINE};
use jpstore_engine::Store;

use crate::jp::import::{
    given_again, ImportFailure, ImportProgress, ImportReport, JpImportError, IMPORT_CHUNK_BYTES,
};
use crate::user_file::{self, LastLink};

/// Where a stream is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamSource {
    /// A file (a regular file: a FIFO or a device is refused, as for every
    /// file a user names).
    File(PathBuf),
    /// Standard input.
    Stdin,
}

impl StreamSource {
    /// The name of the source in messages and reports (`-` for standard
    /// input).
    pub fn name(&self) -> PathBuf {
        match self {
            StreamSource::File(p) => p.clone(),
            StreamSource::Stdin => PathBuf::from("-"),
        }
    }
}

/// Whether `path` names a stream to import rather than JP conversation
/// directories: `-`, or a regular file (a link to one followed). Anything
/// else (a directory, a missing path, a FIFO) is for the JP import, which
/// names what it found there.
pub fn is_stream(path: &Path) -> bool {
    path == Path::new("-") || path.is_file()
}

/// Imports every conversation of each source into `store`, by chunks of
/// [`IMPORT_CHUNK_BYTES`] of lines, each chunk's content as one pack
/// ([`Store::import`]). A conversation already in the store is skipped, or
/// with `force` replaced. A line that is not a conversation is reported in
/// [`ImportReport::failed`] (named `SOURCE:LINE`) and the others are
/// imported; a source that cannot be read stops at that point, reported
/// the same way; an error of the store stops the import. A line that gives
/// a conversation given by an earlier line again is reported the same way
/// and skipped, or with `force` imported over the earlier one (named in
/// [`ImportProgress::Again`]).
pub fn import_streams(
    store: &Store,
    sources: &[StreamSource],
    force: bool,
    progress: &mut dyn FnMut(ImportProgress<'_>),
) -> Result<ImportReport, JpImportError> {
    let mut report = ImportReport::default();
    let total: u64 = sources
        .iter()
        .map(|s| match s {
            StreamSource::File(p) => std::fs::metadata(p).map_or(0, |m| m.len()),
            StreamSource::Stdin => 0,
        })
        .sum();
    let mut done = 0u64;
    let mut chunk: Vec<Prepared> = Vec::new();
    let mut chunk_bytes = 0u64;
    // Where each conversation was first given, to name a line that gives
    // it again.
    let mut given: HashMap<ConversationId, PathBuf> = HashMap::new();
    for source in sources {
        let name = source.name();
        let mut reader: Box<dyn BufRead> = match source {
            StreamSource::Stdin => Box::new(std::io::stdin().lock()),
            StreamSource::File(path) => match user_file::open_regular(path, LastLink::Follow) {
                Ok((file, _)) => Box::new(std::io::BufReader::with_capacity(1 << 20, file)),
                Err(e) => {
                    let failure = ImportFailure {
                        path: name,
                        reason: e.to_string(),
                    };
                    progress(ImportProgress::Failed(&failure));
                    report.failed.push(failure);
                    continue;
                }
            },
        };
        let mut line = Vec::new();
        let mut number = 0usize;
        // Whether a line that is not blank was read: the first tells a
        // stream (a conversation object on each line) from one document.
        let mut first = true;
        // Whether the source was read whole, as one document.
        let mut whole = false;
        loop {
            match read_line(&mut *reader, &mut line, MAX_LINE) {
                Ok(false) => break,
                Ok(true) => {}
                Err(e) => {
                    let failure = ImportFailure {
                        path: PathBuf::from(format!("{}:{}", name.display(), number + 1)),
                        reason: format!("cannot read the stream: {e}"),
                    };
                    progress(ImportProgress::Failed(&failure));
                    report.failed.push(failure);
                    break;
                }
            }
            number += 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let mut at = PathBuf::from(format!("{}:{number}", name.display()));
            // Not a stream (its first line is not a conversation object):
            // the source is read whole, as one document (a conversation as
            // `export --format json` writes it, or a file given by
            // mistake, named once), unless it is a stream whose first line
            // is bad.
            let parsed = if std::mem::take(&mut first) && !is_object_line(&line) {
                let mut all = std::mem::take(&mut line);
                if let Err(e) = read_rest(&mut *reader, &mut all) {
                    let failure = ImportFailure {
                        path: name.clone(),
                        reason: format!("cannot read it: {e}"),
                    };
                    progress(ImportProgress::Failed(&failure));
                    report.failed.push(failure);
                    break;
                }
                match document(&name, &all) {
                    Document::Stream => {
                        reader = Box::new(std::io::Cursor::new(all));
                        number = 0;
                        continue;
                    }
                    Document::One(one) => {
                        whole = true;
                        at = name.clone();
                        (*one).map_err(|message| LineError { line: 0, message })
                    }
                }
            } else {
                parse_conversation_line(&line, number)
            };
            // A JP import's `jp` field names the directory export writes:
            // checked before it is stored.
            let parsed =
                parsed.and_then(
                    |prepared| match crate::jp::export::prepared_problem(&prepared) {
                        None => Ok(prepared),
                        Some(message) => Err(LineError {
                            line: number,
                            message,
                        }),
                    },
                );
            match parsed {
                Ok(prepared) => {
                    match given.get(&prepared.id) {
                        None => {
                            given.insert(prepared.id.clone(), at);
                        }
                        Some(first) => {
                            let failure = given_again(&prepared.id, first, at, force);
                            if !force {
                                progress(ImportProgress::Failed(&failure));
                                report.failed.push(failure);
                                continue;
                            }
                            progress(ImportProgress::Again(&failure));
                            // Imported over the earlier one, which must be
                            // stored first.
                            if chunk.iter().any(|p| p.id == prepared.id) {
                                flush(
                                    store,
                                    &mut chunk,
                                    force,
                                    &mut report,
                                    &mut done,
                                    total,
                                    progress,
                                )?;
                                chunk_bytes = 0;
                            }
                        }
                    }
                    chunk_bytes += prepared.source_bytes;
                    chunk.push(prepared);
                    if chunk_bytes >= IMPORT_CHUNK_BYTES {
                        flush(
                            store,
                            &mut chunk,
                            force,
                            &mut report,
                            &mut done,
                            total,
                            progress,
                        )?;
                        chunk_bytes = 0;
                    }
                }
                Err(e) => {
                    let failure = ImportFailure {
                        path: at,
                        reason: e.message,
                    };
                    progress(ImportProgress::Failed(&failure));
                    report.failed.push(failure);
                }
            }
            if whole {
                break;
            }
        }
    }
    flush(
        store,
        &mut chunk,
        force,
        &mut report,
        &mut done,
        total,
        progress,
    )?;
    report.bytes_stored = report.blob_bytes_stored + report.log_bytes;
    Ok(report)
}

/// What `import` reads, for a message about a file it cannot.
const WHAT_IMPORT_READS: &str = "import reads JP conversation directories (or a directory \
     holding them: a workspace, its .jp, its .jp/conversations), NDJSON streams of \
     conversations as `jp-store export --format ndjson` writes them, and one conversation \
     as `jp-store export --format json` writes it";

/// Whether a stream's first line that is not blank is a JSON object on its
/// own, as each line of a stream is.
fn is_object_line(line: &[u8]) -> bool {
    line.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        && serde_json::from_slice::<serde::de::IgnoredAny>(line).is_ok()
}

/// Reads the rest of a source after its first line into `buf` (after that
/// line and its `\n`), at most [`MAX_LINE`] bytes in all.
fn read_rest(reader: &mut dyn BufRead, buf: &mut Vec<u8>) -> std::io::Result<()> {
    use std::io::Read;
    buf.push(b'\n');
    let left = MAX_LINE.saturating_sub(buf.len() as u64);
    let read = reader.take(left + 1).read_to_end(buf)?;
    if read as u64 > left {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("more than {MAX_LINE} bytes"),
        ));
    }
    Ok(())
}

/// What a source whose first line is not a conversation object holds.
enum Document {
    /// A stream all the same (a later line is a conversation object): its
    /// first line is a bad line.
    Stream,
    /// One document: the conversation, as `export --format json` writes
    /// it; else what the source is, and what import reads.
    One(Box<std::result::Result<Prepared, String>>),
}

/// What the source `name`, whose bytes are `bytes`, holds.
fn document(name: &Path, bytes: &[u8]) -> Document {
    let value = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(value) => value,
        Err(_) if bytes.split(|b| *b == b'\n').skip(1).any(is_object_line) => {
            return Document::Stream
        }
        Err(e) => {
            return Document::One(Box::new(Err(format!(
                "not JSON ({e}); {WHAT_IMPORT_READS}"
            ))))
        }
    };
    let file = name.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let dir = match name.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
        _ => ".".to_string(),
    };
    let what = match value {
        serde_json::Value::Object(doc) if doc.contains_key("id") => {
            return Document::One(Box::new(
                parse_conversation_line(bytes, 1).map_err(|e| e.message),
            ))
        }
        serde_json::Value::Array(items) => {
            let events = !items.is_empty()
                && items
                    .iter()
                    .all(|i| i.get("type").is_some_and(serde_json::Value::is_string));
            match (events, file) {
                (true, "events.json") => format!(
                    "the events.json of a JP conversation (an array of {} events): import its \
                     directory, {dir}, instead",
                    items.len()
                ),
                (true, _) => format!(
                    "an array of {} events, not a conversation (`jp-store append ID < FILE` \
                     appends events to one)",
                    items.len()
                ),
                (false, _) => format!("a JSON array of {} items, not a conversation", items.len()),
            }
        }
        serde_json::Value::Object(_) if matches!(file, "metadata.json" | "base_config.json") => {
            format!("the {file} of a JP conversation: import its directory, {dir}, instead")
        }
        serde_json::Value::Object(_) => {
            "a JSON object without an `id`, not a conversation".to_string()
        }
        other => format!(
            "{}, not a conversation",
            jpstore_engine::internal::event::json::describe(&other)
        ),
    };
    Document::One(Box::new(Err(format!("{what}; {WHAT_IMPORT_READS}"))))
}

/// Stores one chunk and adds what happened to `report`.
fn flush(
    store: &Store,
    chunk: &mut Vec<Prepared>,
    force: bool,
    report: &mut ImportReport,
    done: &mut u64,
    total: u64,
    progress: &mut dyn FnMut(ImportProgress<'_>),
) -> Result<(), JpImportError> {
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
                *done += source_bytes;
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
    progress(ImportProgress::Bytes {
        done: *done,
        total: total.max(*done),
    });
    Ok(())
}

/// `a` with `b`'s counts and failures added (one report for an import of
/// JP directories and streams together).
pub fn merge_reports(mut a: ImportReport, b: ImportReport) -> ImportReport {
    a.imported += b.imported;
    a.skipped += b.skipped;
    a.failed.extend(b.failed);
    a.not_byte_identical.extend(b.not_byte_identical);
    a.not_in_view.extend(b.not_in_view);
    a.settings_not_applied.extend(b.settings_not_applied);
    a.events += b.events;
    a.bytes_read += b.bytes_read;
    a.bytes_stored += b.bytes_stored;
    a.blob_bytes_stored += b.blob_bytes_stored;
    a.new_blobs += b.new_blobs;
    a.log_bytes += b.log_bytes;
    a
}
