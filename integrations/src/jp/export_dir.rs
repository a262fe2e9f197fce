//! Writing a conversation's JP files into a conversations directory: each
//! file published whole by the store's file backend (written to a temp
//! name, synced, then linked or renamed into place, the directory synced),
//! files already holding the export's bytes left untouched, and files that
//! differ replaced only when asked.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jpstore_blobstore::backend::{read_all, Backend, Expect, FileBackend, Put, Version};
use jpstore_blobstore::storage::{FileKind, LocalStorage, Modes};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::{Error, Result};

use super::export::JpFiles;

/// The files of a JP conversation directory, in the order they are written.
pub const JP_FILES: [&str; 3] = ["events.json", "metadata.json", "base_config.json"];

/// What [`write_jp_dir`] did with one of the conversation's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileWritten {
    /// It did not exist; it was created.
    Created,
    /// It held other bytes; it was replaced.
    Replaced,
    /// It held the export's bytes already; it was left as it was.
    Unchanged,
    /// A `base_config.json` the export has none of (the conversation's
    /// layout keeps its base config elsewhere); it was removed.
    Removed,
}

/// What is to be done with one file; `Replace` and `Remove` hold the
/// version that was read, so that a file changed since is not overwritten.
enum Step<'a> {
    Create(&'a [u8]),
    Replace(&'a [u8], Version),
    Keep,
    Remove(Version),
}

/// Writes the files of `files` into `dir` (created if needed):
/// `events.json`, `metadata.json`, and `base_config.json` when the layout
/// has one. A file that already holds the export's bytes is left as it is.
/// A file that holds other bytes, or a `base_config.json` the export has
/// none of, is replaced (removed) only with `replace`; otherwise the
/// export is refused before anything is written ([`Error::AlreadyExists`]
/// naming it). A name that is not a regular file is refused either way,
/// and so is a file changed since it was read.
///
/// Each file is published whole through the file backend of the store
/// (`put_if_absent`, a durable `replace`: written to a temp name, synced,
/// then linked or renamed into place and the directory synced). A crash
/// leaves every file either as it was or as exported; a crash between two
/// files leaves some of each (each a whole file JP reads).
pub fn write_jp_dir(
    dir: &Path,
    files: &JpFiles,
    replace: bool,
) -> Result<Vec<(PathBuf, FileWritten)>> {
    // The user's files: made as the umask says, a file replaced keeping its
    // mode (a store's own files are owner-only).
    let storage = LocalStorage::create_with(dir, Modes::USER).map_err(|source| Error::Io {
        op: "create",
        path: dir.to_path_buf(),
        source,
    })?;
    let backend = FileBackend::new(Arc::new(storage));
    let wanted: [Option<&[u8]>; 3] = [
        Some(&files.events),
        Some(&files.metadata),
        files.base_config.as_deref(),
    ];
    // Every file is looked at before any is written, so that a refused
    // export leaves the directory as it was.
    let mut steps = Vec::with_capacity(JP_FILES.len());
    for (name, bytes) in JP_FILES.into_iter().zip(wanted) {
        let existing = existing(&backend, name, bytes)?;
        let step = match (bytes, existing) {
            (None, None) => continue,
            (Some(b), None) => Step::Create(b),
            (_, Some((false, _))) => Step::Keep,
            (Some(b), Some((true, version))) if replace => Step::Replace(b, version),
            (None, Some((true, version))) if replace => Step::Remove(version),
            (_, Some((true, _))) => {
                return Err(Error::AlreadyExists {
                    path: dir.join(name),
                })
            }
        };
        steps.push((name, step));
    }
    let failed = |e| jpstore_engine::internal::error_from_backend(&backend, e);
    let mut done = Vec::with_capacity(steps.len());
    for (name, step) in steps {
        let key = Path::new(name);
        let outcome = match step {
            Step::Keep => FileWritten::Unchanged,
            Step::Create(bytes) => match backend
                .put_if_absent(key, bytes, &temp_name(name))
                .map_err(failed)?
            {
                Put::Created => FileWritten::Created,
                // Made by someone else since it was looked at.
                Put::Existed => {
                    return Err(Error::AlreadyExists {
                        path: dir.join(name),
                    })
                }
            },
            Step::Replace(bytes, version) => {
                let expect = Expect::Version(version);
                backend
                    .replace(key, bytes, &temp_name(name), expect, true)
                    .map_err(failed)?;
                FileWritten::Replaced
            }
            Step::Remove(version) => {
                if backend.head(key).map(|m| m.version).ok() != Some(version) {
                    return Err(Error::AlreadyExists {
                        path: dir.join(name),
                    });
                }
                backend.delete(&[key.to_path_buf()]).map_err(failed)?;
                FileWritten::Removed
            }
        };
        done.push((dir.join(name), outcome));
    }
    Ok(done)
}

/// Whether `name` exists in `backend`, and if so whether it holds other
/// bytes than `bytes` (any bytes differ from no file) and its version.
/// Refuses a name that is not a regular file.
fn existing(
    backend: &FileBackend,
    name: &str,
    bytes: Option<&[u8]>,
) -> Result<Option<(bool, Version)>> {
    let key = Path::new(name);
    let io = |op, source| Error::Io {
        op,
        path: backend.display(key),
        source,
    };
    let meta = match backend.head(key) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("stat", e)),
    };
    if meta.kind != FileKind::Regular {
        return Err(io(
            "export into",
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{}, not a regular file", meta.kind.describe()),
            ),
        ));
    }
    let differs = match bytes {
        Some(bytes) if meta.len == bytes.len() as u64 => {
            let file = backend.open(key).map_err(|e| io("open", e))?;
            read_all(&*file, meta.len).map_err(|e| io("read", e))? != bytes
        }
        _ => true,
    };
    Ok(Some((differs, meta.version)))
}

/// A temp name beside `name`, hidden (JP lists only directories) and this
/// process's own.
fn temp_name(name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    PathBuf::from(format!(".{name}.tmp.{}.{nanos}", std::process::id()))
}

/// The directories of a conversations directory (a workspace's
/// `.jp/conversations`) and of its `.archive/`, but hidden ones: where
/// [`other_dirs_of`] looks for a conversation's directories. A directory
/// that does not exist has none.
pub fn jp_dirs(conversations: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for dir in [conversations.to_path_buf(), conversations.join(".archive")] {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(Error::Io {
                    op: "list",
                    path: dir,
                    source,
                })
            }
        };
        for entry in entries {
            let entry = entry.map_err(|source| Error::Io {
                op: "list",
                path: dir.clone(),
                source,
            })?;
            if !entry.file_name().to_string_lossy().starts_with('.') {
                found.push(entry.path());
            }
        }
    }
    Ok(found)
}

/// The directories of `found` ([`jp_dirs`]) named for conversation `id`
/// (`<id>`, or `<id>-<slug>` as JP names them) other than `target`, where
/// its export goes: JP would find the conversation twice, so the export is
/// refused while there are any.
pub fn other_dirs_of<'a>(
    found: &'a [PathBuf],
    id: &ConversationId,
    target: &Path,
) -> Vec<&'a Path> {
    let id = id.as_str();
    found
        .iter()
        .filter(|d| d.as_path() != target)
        .filter(|d| {
            d.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                n.strip_prefix(id)
                    .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
            })
        })
        .map(PathBuf::as_path)
        .collect()
}
