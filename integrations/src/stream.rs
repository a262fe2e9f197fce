//! Importing NDJSON streams of conversations (`jp-store import FILE`, or
//! `-` for standard input): the lines `export --format ndjson` writes, one
//! conversation a line ([`jpstore_engine::stream`]), stored by chunks as a
//! JP import is, with the same report.

use std::collections::HashMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Result;
use jpstore_engine::import::{Imported, Prepared};
use jpstore_engine::stream::{parse_conversation_line, read_line, LineError, MAX_LINE};
use jpstore_engine::Store;

use crate::jp::import::{
    given_again, ImportFailure, ImportProgress, ImportReport, IMPORT_CHUNK_BYTES,
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
) -> Result<ImportReport> {
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
            let at = PathBuf::from(format!("{}:{number}", name.display()));
            // A JP import's `jp` field names the directory export writes:
            // checked before it is stored.
            let parsed = parse_conversation_line(&line, number).and_then(|prepared| {
                match crate::jp::export::prepared_problem(&prepared) {
                    None => Ok(prepared),
                    Some(message) => Err(LineError {
                        line: number,
                        message,
                    }),
                }
            });
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

/// Stores one chunk and adds what happened to `report`.
fn flush(
    store: &Store,
    chunk: &mut Vec<Prepared>,
    force: bool,
    report: &mut ImportReport,
    done: &mut u64,
    total: u64,
    progress: &mut dyn FnMut(ImportProgress<'_>),
) -> Result<()> {
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
