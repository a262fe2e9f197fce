//! Attaching files to a conversation (RFD 065) and resolving `file://`
//! resources again (the handler side of RFD 065's `refresh_resource`).
//!
//! [`collect`] turns the paths a user names into [`FileToAttach`]es;
//! [`attach()`] stores their content as one blob batch (one pack) and
//! appends one request whose resources reference it; [`attach_paths`] does
//! both as `jp-store attach` does; [`resolve`] reads the current content of
//! a `file://` URI as a resource.
//!
//! Rules (decisions are marked as such):
//!
//! - **Which files.** A path named explicitly is always taken, even when it
//!   is hidden or matched by a `.gitignore` (decision: the user asked for
//!   it, as ripgrep does). Directories, named explicitly or found while
//!   walking, are walked recursively with the `ignore` crate's standard
//!   filters: hidden files and directories are skipped, and `.gitignore`,
//!   `.ignore`, `.git/info/exclude` and the global git excludes are honoured.
//!   `.gitignore` files count outside a git repository too (decision:
//!   `require_git(false)`, so the result does not depend on where `.git`
//!   is). A file reached twice (named twice, or through a link) is
//!   attached once. Special files (FIFOs, sockets, devices) are reported,
//!   never read.
//! - **Symbolic links.** A path named explicitly that is a link is followed
//!   (decision: naming it is the user's choice; a named directory that is a
//!   link is walked as the directory it leads to). In a walk, a link to a
//!   file is attached (by its target's URI) only if its target, all links
//!   resolved, is inside the walked directory (decision: such a link adds
//!   nothing the user did not already attach; a tree is not trusted to
//!   decide what else on the machine is sent to a model, so
//!   `link -> /etc/passwd` is skipped and reported with the reason).
//!   [`Links::Follow`] attaches every link's target. Links to directories
//!   found in a walk are never followed (no cycles). A file is read through
//!   its canonical path without following a link at its last component, so
//!   a link put in place of a collected file is refused, not read.
//! - **Order.** Files are sorted by `name`, then by URI: the same tree gives
//!   the same request whatever the order of the arguments or the directory.
//! - **URIs.** `file://` URIs of the canonical path (absolute, `.` and `..`
//!   resolved, symbolic links resolved by `std::fs::canonicalize`; for a
//!   file found in a walk, the walked directory's canonical path joined with
//!   the file's path below it, which is the same path since walks do not
//!   follow links to directories), percent-encoded by
//!   `url::Url::from_file_path` (a space is `%20`, `%` is `%25`, non-ASCII
//!   is UTF-8 percent-encoded).
//! - **Names.** `name` is the path relative to the current directory as the
//!   user reached it (lexically normalised, links not resolved, so a file
//!   named through a link keeps the link's name); if that is not below the
//!   current directory, the canonical path relative to the canonical current
//!   directory; else the canonical absolute path.
//! - **Text or binary.** Content is binary if its first 8 KiB hold a NUL
//!   byte or if it is not valid UTF-8 (decision: validity is checked over the
//!   whole content, not only the first 8 KiB, since a text resource must be
//!   UTF-8 throughout to be rendered). The MIME type comes from the
//!   extension (`mime_guess`); text without a known type is `text/plain`;
//!   binary content without a known type, or whose extension says `text/*`,
//!   is `application/octet-stream`.
//! - **Snapshots.** A file is read once, when its content is stored; one
//!   that changes between [`collect`] and that read is stored as it is then
//!   (its size is taken from what was read, not from `collect`).

use jpstore_engine::internal::{ConversationIdInterior as _, StoreInterior as _};
use std::collections::HashSet;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use jpstore_blobstore::{BatchProgress, BlobId};
use serde_json::Value;
use url::Url;

use crate::user_file::{self, LastLink};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::{Error, Result};
use jpstore_engine::event::{
    BlobRef, ChatRequest, Entry, EventKind, Payload, Resource, ResourceContent,
};
use jpstore_engine::internal::append::retry_on_conflict;
use jpstore_engine::internal::conversation::codec;
use jpstore_engine::internal::conversation::writer::{ConversationWriter, PreparedBatch};
use jpstore_engine::internal::event::json::{payload_json, render_resource};
use jpstore_engine::internal::log::payload_len;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::Store;

/// How much of the content is searched for a NUL byte.
pub const SNIFF_LEN: usize = 8 << 10;

/// Largest file [`resolve`] reads (the blob store's default maximum blob
/// size).
pub const RESOLVE_MAX_BYTES: u64 = 1 << 30;

/// The MIME type of binary content of unknown type.
const OCTET_STREAM: &str = "application/octet-stream";

/// Which symbolic links found in a walk [`collect`] follows (see the module
/// docs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Links {
    /// Links whose target is inside the walked directory; the others are
    /// reported as skipped.
    #[default]
    StayInside,
    /// Every link to a file, wherever its target is.
    Follow,
}

/// A file found by [`collect`], not read yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileToAttach {
    /// The canonical path (read from here).
    pub path: PathBuf,
    /// The canonical `file://` URI.
    pub uri: String,
    /// The path relative to the current directory (see the module docs).
    pub name: String,
}

/// ` (N skipped: path: reason, ...)` for [`AttachError::NothingToAttach`],
/// naming at most three.
fn skipped_list(skipped: &[(PathBuf, io::Error)]) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    let named: Vec<String> = skipped
        .iter()
        .take(3)
        .map(|(path, e)| format!("{}: {e}", path.display()))
        .collect();
    let more = match skipped.len() {
        n if n > 3 => format!(", and {} more", n - 3),
        _ => String::new(),
    };
    format!(" ({} skipped: {}{more})", skipped.len(), named.join("; "))
}

/// Why files could not be attached or a resource not resolved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachError {
    /// A path named could not be used ([`collect`] skipped it) and the
    /// attach was strict: nothing was read or appended.
    #[error("cannot use {}: {reason}; nothing was appended", path.display())]
    Unusable {
        /// The path, as named or found in a walk.
        path: PathBuf,
        /// Why.
        reason: io::Error,
    },
    /// Paths named do not exist (a typo, as `cp` takes one), and missing
    /// paths were not to be skipped: nothing was read or appended.
    #[error("no such file or directory: {}; nothing was appended", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    Missing {
        /// The paths, as named.
        paths: Vec<PathBuf>,
    },
    /// A file could not be read and the attach was strict: nothing was
    /// appended.
    /// (The reason is part of the message and not a `source`, so that it
    /// is not printed twice by whoever prints the chain of causes.)
    #[error("cannot read {}: {reason}; nothing was appended", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: io::Error,
    },
    /// No file could be attached: nothing was appended (and nothing
    /// stored).
    #[error(
        "no file could be attached{}; nothing was appended",
        skipped_list(skipped)
    )]
    NothingToAttach {
        /// The files that were given but could not be read, and why.
        skipped: Vec<(PathBuf, io::Error)>,
    },
    /// The URI is not one [`resolve`] handles.
    #[error("cannot resolve {uri:?}: {reason}")]
    NotFileUri {
        /// The URI as given.
        uri: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The file of a URI cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] Error),
}

/// What [`attach()`] did. Its `Serialize` is what `jp-store attach --json`
/// prints: these fields, each skipped file as `path` (lossy UTF-8) and
/// `error` (its message).
#[derive(Debug, serde::Serialize)]
#[non_exhaustive]
pub struct AttachOutcome {
    /// The conversation appended to.
    pub id: ConversationId,
    /// Offset of the appended record in the log.
    pub offset: u64,
    /// The turn the request belongs to.
    pub turn: u64,
    /// Files attached (resources of the request).
    pub files: usize,
    /// Of those, attached as text.
    pub text_files: usize,
    /// Raw bytes of the attached files.
    pub bytes: u64,
    /// Blobs the batch stored (content not in the store before).
    pub new_blobs: usize,
    /// Bytes of the pack written (0 if every content was stored already).
    pub pack_bytes: u64,
    /// The pack's name, if one was written.
    pub pack: Option<String>,
    /// Files that could not be read, with the reason (skipped).
    #[serde(serialize_with = "serialize_skipped")]
    pub skipped: Vec<(PathBuf, io::Error)>,
}

/// Skipped files as a list of `{"path", "error"}`.
fn serialize_skipped<S: serde::Serializer>(
    skipped: &[(PathBuf, io::Error)],
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    #[derive(serde::Serialize)]
    struct Shape {
        path: String,
        error: String,
    }
    serializer.collect_seq(skipped.iter().map(|(path, e)| Shape {
        path: path.to_string_lossy().into_owned(),
        error: e.to_string(),
    }))
}

/// The request of an attach, ready to append once its blobs are durable.
struct Prepared<'a> {
    /// Files attached (resources of the request).
    files: usize,
    /// Of those, attached as text.
    text_files: usize,
    /// Raw bytes of the attached files.
    bytes: u64,
    /// The `turn_start` and the `chat_request`, encoded and packed.
    batch: PreparedBatch,
    /// The conversation's writer, opened for the append.
    writer: ConversationWriter<'a>,
}

/// Finds the files to attach for `paths` (relative ones against `cwd`,
/// which should be absolute): files as named, directories walked (see the
/// module docs for the rules), following the links `links` allows. Returns
/// the files sorted by name, and the paths that could not be used with the
/// reason (missing, unreadable directories, special files, dangling links,
/// links leaving the walked directory).
pub fn collect(
    paths: &[PathBuf],
    cwd: &Path,
    links: Links,
) -> (Vec<FileToAttach>, Vec<(PathBuf, io::Error)>) {
    let names = Names::new(cwd);
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for given in paths {
        let path = names.cwd.join(given);
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) => {
                errors.push((given.clone(), e));
                continue;
            }
        };
        if meta.is_file() {
            match names.canonical(&path) {
                Ok(f) => files.push(f),
                Err(e) => errors.push((path, e)),
            }
        } else if meta.is_dir() {
            walk(&path, &names, links, &mut files, &mut errors);
        } else {
            errors.push((
                given.clone(),
                user_file::not_regular(user_file::kind_name(meta.file_type())),
            ));
        }
    }
    files.sort_by(|a, b| a.name.cmp(&b.name).then_with(|| a.uri.cmp(&b.uri)));
    let mut seen = HashSet::new();
    files.retain(|f| seen.insert(f.uri.clone()));
    errors.sort_by(|a, b| a.0.cmp(&b.0));
    (files, errors)
}

/// Paths that could not be used, each with the reason.
type PathErrors = Vec<(PathBuf, io::Error)>;

fn walk(
    dir: &Path,
    names: &Names,
    links: Links,
    files: &mut Vec<FileToAttach>,
    errors: &mut PathErrors,
) {
    // A walk reaches its files through real directories (links to
    // directories are not followed), so a file's canonical path is the
    // canonical directory joined with its path below it: one canonicalize
    // for the walk instead of one (a readlink per path component) per file.
    let canonical_dir = match std::fs::canonicalize(dir) {
        Ok(c) => c,
        Err(e) => {
            errors.push((dir.to_path_buf(), e));
            return;
        }
    };
    // Likewise a file's name, when the walked directory is below the current
    // directory: that name joined with the file's path below it (a walk
    // yields no `.` or `..` components).
    let name_dir = normalize(dir)
        .strip_prefix(&names.cwd)
        .ok()
        .map(Path::to_path_buf);
    let found: Mutex<(Vec<FileToAttach>, PathErrors)> = Mutex::default();
    let record = |result: io::Result<FileToAttach>, path: &Path| {
        let mut found = found.lock().unwrap_or_else(|e| e.into_inner());
        match result {
            Ok(f) => found.0.push(f),
            Err(e) => found.1.push((path.to_path_buf(), e)),
        }
    };
    // On several threads: listing directories, reading ignore files and
    // inspecting files is most of the work, all of it system calls.
    ignore::WalkBuilder::new(dir)
        .standard_filters(true)
        .require_git(false)
        .follow_links(false)
        .build_parallel()
        .run(|| {
            let (record, canonical_dir, name_dir) = (&record, &canonical_dir, &name_dir);
            Box::new(move |item| {
                let entry = match item {
                    Ok(e) => e,
                    Err(e) => {
                        let (path, e) = walk_error(e, dir);
                        record(Err(e), &path);
                        return ignore::WalkState::Continue;
                    }
                };
                let path = entry.path();
                match entry.file_type() {
                    _ if entry.depth() == 0 => {}
                    None => {}
                    Some(kind) if kind.is_dir() => {}
                    // The type comes from the directory entry: a file found
                    // in a walk costs no system call of its own here.
                    Some(kind) if kind.is_file() => {
                        let described = match below_dir(path, dir) {
                            Some(below) => {
                                let canonical = canonical_dir.join(below);
                                let name = match name_dir {
                                    Some(d) => d.join(below).to_string_lossy().into_owned(),
                                    None => names.name(path, &canonical),
                                };
                                describe(canonical, name)
                            }
                            None => names.canonical(path),
                        };
                        record(described, path);
                    }
                    Some(kind) if kind.is_symlink() => match std::fs::metadata(path) {
                        Ok(m) if m.is_file() => {
                            record(link_target(path, canonical_dir, names, links), path)
                        }
                        // Links to directories are not followed.
                        Ok(m) if m.is_dir() => {}
                        Ok(m) => record(
                            Err(user_file::not_regular(user_file::kind_name(m.file_type()))),
                            path,
                        ),
                        Err(e) => record(Err(e), path),
                    },
                    Some(kind) => record(
                        Err(user_file::not_regular(user_file::kind_name(kind))),
                        path,
                    ),
                }
                ignore::WalkState::Continue
            })
        });
    let (found_files, found_errors) = found.into_inner().unwrap_or_else(|e| e.into_inner());
    files.extend(found_files);
    errors.extend(found_errors);
}

/// `path` below `dir`, for a path the walk of `dir` made (`dir`, a
/// separator, the rest): compared as bytes, where `Path::strip_prefix`
/// compares component by component.
fn below_dir<'a>(path: &'a Path, dir: &Path) -> Option<&'a Path> {
    use std::os::unix::ffi::OsStrExt;
    let (p, d) = (path.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    match p.strip_prefix(d) {
        Some([b'/', rest @ ..]) if !rest.is_empty() && !d.ends_with(b"/") => {
            Some(Path::new(std::ffi::OsStr::from_bytes(rest)))
        }
        _ => path.strip_prefix(dir).ok(),
    }
}

/// The file a link found in the walk of `canonical_dir` leads to, unless
/// `links` refuses it: a target outside the walked directory is an error
/// naming it.
fn link_target(
    link: &Path,
    canonical_dir: &Path,
    names: &Names,
    links: Links,
) -> io::Result<FileToAttach> {
    let file = names.canonical(link)?;
    // `starts_with` compares whole components: `/a/proj2` is not inside
    // `/a/proj`.
    if links == Links::StayInside && !file.path.starts_with(canonical_dir) {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "a symbolic link to {}, outside the attached directory {}: not followed",
                file.path.display(),
                canonical_dir.display()
            ),
        ));
    }
    Ok(file)
}

fn walk_error(e: ignore::Error, fallback: &Path) -> (PathBuf, io::Error) {
    fn path_of(e: &ignore::Error) -> Option<&Path> {
        match e {
            ignore::Error::WithPath { path, .. } => Some(path),
            ignore::Error::WithDepth { err, .. } | ignore::Error::WithLineNumber { err, .. } => {
                path_of(err)
            }
            ignore::Error::Partial(errs) => errs.iter().find_map(path_of),
            _ => None,
        }
    }
    let path = path_of(&e).unwrap_or(fallback).to_path_buf();
    let message = e.to_string();
    let io = e
        .into_io_error()
        .unwrap_or_else(|| io::Error::other(message));
    (path, io)
}

/// Names files relative to the current directory.
struct Names {
    /// The current directory, lexically normalised.
    cwd: PathBuf,
    /// The current directory with links resolved (if it can be).
    canonical_cwd: Option<PathBuf>,
}

impl Names {
    fn new(cwd: &Path) -> Names {
        let cwd = if cwd.is_absolute() {
            normalize(cwd)
        } else {
            normalize(&std::env::current_dir().unwrap_or_default().join(cwd))
        };
        let canonical_cwd = std::fs::canonicalize(&cwd).ok();
        Names { cwd, canonical_cwd }
    }

    /// The name of the file reached as `path` (absolute) whose canonical
    /// path is `canonical`.
    fn name(&self, path: &Path, canonical: &Path) -> String {
        let lexical = normalize(path);
        let relative = lexical.strip_prefix(&self.cwd).ok().or_else(|| {
            self.canonical_cwd
                .as_deref()
                .and_then(|c| canonical.strip_prefix(c).ok())
        });
        match relative {
            Some(r) if !r.as_os_str().is_empty() => r.to_string_lossy().into_owned(),
            _ => canonical.to_string_lossy().into_owned(),
        }
    }

    /// The file reached as `path` (absolute), its canonical path found by
    /// `canonicalize`.
    fn canonical(&self, path: &Path) -> io::Result<FileToAttach> {
        let canonical = std::fs::canonicalize(path)?;
        let name = self.name(path, &canonical);
        describe(canonical, name)
    }
}

/// The file whose canonical path is `canonical`, named `name`.
fn describe(canonical: PathBuf, name: String) -> io::Result<FileToAttach> {
    let uri = file_uri(&canonical)?;
    Ok(FileToAttach {
        name,
        path: canonical,
        uri,
    })
}

/// The `file://` URI of an absolute, canonical path.
fn file_uri(canonical: &Path) -> io::Result<String> {
    Url::from_file_path(canonical)
        .map(String::from)
        .map_err(|()| io::Error::other("the path cannot be written as a file:// URI"))
}

/// Resolves `.` and `..` without touching the file system.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Whether content is text: no NUL in its first [`SNIFF_LEN`] bytes, and
/// valid UTF-8 throughout.
pub fn is_text(bytes: &[u8]) -> bool {
    !bytes[..bytes.len().min(SNIFF_LEN)].contains(&0) && std::str::from_utf8(bytes).is_ok()
}

/// The MIME type of a file at `path` whose content is text or not.
pub fn mime_type(path: &Path, text: bool) -> String {
    let guess = mime_guess::from_path(path).first();
    match (guess, text) {
        (Some(m), true) => m.essence_str().to_owned(),
        (None, true) => "text/plain".to_owned(),
        (Some(m), false) if m.type_() != mime_guess::mime::TEXT => m.essence_str().to_owned(),
        (_, false) => OCTET_STREAM.to_owned(),
    }
}

fn resource<C>(file_path: &Path, uri: String, name: String, content: C, text: bool) -> Resource<C> {
    let content = if text {
        ResourceContent::Text(content)
    } else {
        ResourceContent::Binary(content)
    };
    Resource::new(uri, content)
        .with_mime_type(mime_type(file_path, text))
        .with_name(name)
}

/// The entries an attach appends: a `turn_start` (as every JP query begins
/// with one; it opens a new turn only if the current one holds an event)
/// and the `chat_request`.
fn request_entries<C>(message: &str, resources: Vec<Resource<C>>) -> Vec<Entry<C>> {
    let now = Timestamp::now();
    vec![
        Entry::at(now, EventKind::TurnStart),
        Entry::at(now, ChatRequest::text(message).with_resources(resources)),
    ]
}

/// Attaches `files` (from [`collect`]) to conversation `id` of `store`: one
/// `chat_request` with `message` (or empty) whose resources are
/// snapshots of the files, appended as one durable record after a
/// `turn_start`.
///
/// Every file's content goes into the blob store as one batch
/// ([`BlobStore::put_batch_buffered_then`](jpstore_blobstore::BlobStore::put_batch_buffered_then):
/// files are read, hashed and compressed on worker threads, one at a
/// time per worker into a buffer it reuses, into one pack); the request
/// holds only references. It is built, encoded and packed, and the
/// writer opened, while the pack is made durable; it is appended once
/// the pack is.
/// `progress` is called as items are stored.
///
/// A file that cannot be read is skipped and reported in
/// [`AttachOutcome::skipped`]; with `strict` the attach fails with
/// [`AttachError::Unreadable`] instead and appends nothing (the batch
/// fails before its pack is published). If no file could be read,
/// nothing is appended ([`AttachError::NothingToAttach`]).
///
/// Decision: the conversation's writer lock is taken only once every
/// file is read and hashed, for the pack's syncs and the append. The
/// append protocol needs the blobs durable before the record, not the
/// lock around them (blobs are content-addressed and immutable), and
/// holding the lock through minutes of reading and hashing would stall
/// every other appender of the conversation. The conversation's
/// existence and the record size are checked before anything is read.
/// If the append fails after the batch (the conversation was removed
/// meanwhile, a failed sync), the log is unchanged and the stored blobs
/// are unreferenced: gc removes them.
pub fn attach(
    store: &Store,
    id: &ConversationId,
    files: &[FileToAttach],
    message: Option<String>,
    strict: bool,
    progress: &mut dyn FnMut(BatchProgress),
) -> Result<AttachOutcome, AttachError> {
    if !store.exists(id)? {
        return Err(Error::NotFound { id: id.to_string() }.into());
    }
    let message = message.unwrap_or_default();
    check_record_size(store, id, &message, files)?;
    // From the first blob stored until the record referencing it is
    // durable, gc must wait (format-spec.md 4.7). Writers share this
    // lock, so other appends go on meanwhile.
    let _gc = store.gc_shared()?;
    let max = store.blobs().options().max_blob_len;
    // Per file: text or not once read, or why it could not be read.
    let slots: Vec<OnceLock<io::Result<bool>>> = files.iter().map(|_| OnceLock::new()).collect();
    let failures = AtomicUsize::new(0);
    if files.is_empty() {
        return Err(AttachError::NothingToAttach {
            skipped: Vec::new(),
        });
    }
    // Once every file is read and hashed, the request is built and the
    // writer opened on this thread while another makes the pack durable
    // (the record is written only after both).
    let prepare = |ids: &[BlobId], sizes: &[u64]| -> Result<Option<Prepared<'_>>> {
        let mut resources = Vec::with_capacity(files.len());
        let (mut text_files, mut bytes) = (0, 0);
        for (i, file) in files.iter().enumerate() {
            if let Some(Ok(text)) = slots[i].get() {
                let r = BlobRef {
                    id: ids[i],
                    size: sizes[i],
                };
                text_files += usize::from(*text);
                bytes += r.size;
                resources.push(resource(
                    &file.path,
                    file.uri.clone(),
                    file.name.clone(),
                    r,
                    *text,
                ));
            }
        }
        if resources.is_empty() {
            return Ok(None);
        }
        let files = resources.len();
        let writer = store.writer(id)?;
        let batch = writer.prepare_stored(request_entries(&message, resources))?;
        Ok(Some(Prepared {
            files,
            text_files,
            bytes,
            batch,
            writer,
        }))
    };
    let batch = store.blobs().put_batch_buffered_then(
        files.len(),
        |i, buf| match user_file::read_into(&files[i].path, max, LastLink::Refuse, buf) {
            Ok(()) => {
                let _ = slots[i].set(Ok(is_text(buf)));
                Ok(())
            }
            Err(e) => {
                let message = e.to_string();
                let _ = slots[i].set(Err(e));
                // When every file fails the batch fails too, before its
                // pack is published: a refused attach stores nothing.
                // (Every read ends before the batch can be published,
                // so the last failure sees the count of all.)
                let all_failed = failures.fetch_add(1, Ordering::AcqRel) + 1 == files.len();
                if strict || all_failed {
                    Err(io::Error::other(message))
                } else {
                    // Stored as nothing: the others are.
                    Err(jpstore_blobstore::skip_item())
                }
            }
        },
        progress,
        prepare,
    );
    let mut slots: Vec<Option<io::Result<bool>>> =
        slots.into_iter().map(OnceLock::into_inner).collect();
    let (batch, prepared) = match batch {
        Ok(b) => b,
        Err(_) if !strict && failures.load(Ordering::Acquire) == files.len() => {
            let skipped = files
                .iter()
                .zip(slots)
                .map(|(file, slot)| {
                    let e = match slot {
                        Some(Err(e)) => e,
                        _ => io::Error::other("the file was not read"),
                    };
                    (file.path.clone(), e)
                })
                .collect();
            return Err(AttachError::NothingToAttach { skipped });
        }
        Err(e) => {
            let failed = slots
                .iter_mut()
                .enumerate()
                .find_map(|(i, s)| match s.take() {
                    Some(Err(source)) => Some((i, source)),
                    _ => None,
                });
            return Err(match failed {
                Some((i, reason)) => AttachError::Unreadable {
                    path: files[i].path.clone(),
                    reason,
                },
                None => Error::from(e).into(),
            });
        }
    };
    let mut skipped = Vec::new();
    for (file, slot) in files.iter().zip(slots) {
        match slot {
            Some(Ok(_)) => {}
            Some(Err(e)) => skipped.push((file.path.clone(), e)),
            None => skipped.push((file.path.clone(), io::Error::other("the file was not read"))),
        }
    }
    let Some(prepared) = prepared? else {
        return Err(AttachError::NothingToAttach { skipped });
    };
    let (files_attached, text_files, bytes) = (prepared.files, prepared.text_files, prepared.bytes);
    // On a store on S3 another writer may append first: the request is
    // appended again after what it wrote (it depends on nothing read).
    let entries = prepared.batch.entries().to_vec();
    let mut first = Some((prepared.writer, prepared.batch));
    let (offset, turn) = retry_on_conflict(|_| {
        let (mut writer, batch) = match first.take() {
            Some(ready) => ready,
            None => {
                let writer = store.writer(id)?;
                let batch = writer.prepare_stored(entries.clone())?;
                (writer, batch)
            }
        };
        let offset = writer.append_prepared(batch)?;
        let turn = writer.state().turns().saturating_sub(1);
        // The head cache left current for the next open.
        writer.close();
        Ok((offset, turn))
    })?;
    Ok(AttachOutcome {
        id: id.clone(),
        offset,
        turn,
        files: files_attached,
        text_files,
        bytes,
        new_blobs: batch.new_objects,
        pack_bytes: batch.pack_bytes,
        pack: batch.pack,
        skipped,
    })
}

/// What to attach, as `jp-store attach` is asked ([`attach_paths`]).
#[derive(Debug, Clone)]
pub struct AttachRequest<'a> {
    /// The paths named: files, and directories to walk.
    pub paths: &'a [PathBuf],
    /// The current directory, against which relative paths are taken (and
    /// names made); absolute.
    pub cwd: &'a Path,
    /// Which links found in a walk are followed.
    pub links: Links,
    /// The message of the request (default: empty).
    pub message: Option<String>,
    /// Whether a path or file that cannot be used fails the attach
    /// (nothing appended) rather than being skipped.
    pub strict: bool,
    /// Whether a path named that does not exist is skipped (with the
    /// others that cannot be used) rather than failing the attach
    /// ([`AttachError::Missing`]).
    pub skip_missing: bool,
}

/// Attaches what `request` names to conversation `id`, as `jp-store
/// attach` does: [`collect`] finds the files, then [`attach()`] stores and
/// appends them. `on_skip` hears of each path skipped, as it is known: those
/// [`collect`] could not use before any file is read, then those that could
/// not be read.
///
/// A path named that does not exist fails the attach before anything is
/// read ([`AttachError::Missing`]), unless `skip_missing`.
/// Strict, a path [`collect`] could not use fails the attach before
/// anything is read ([`AttachError::Unusable`], `on_skip` not called), and
/// a file that cannot be read fails it as in [`attach()`]. The outcome's
/// [`AttachOutcome::skipped`] lists [`collect`]'s skipped paths first; if
/// no file could be attached, [`AttachError::NothingToAttach`] lists all
/// of them.
pub fn attach_paths(
    store: &Store,
    id: &ConversationId,
    request: AttachRequest<'_>,
    on_skip: &mut dyn FnMut(&Path, &io::Error),
    progress: &mut dyn FnMut(BatchProgress),
) -> Result<AttachOutcome, AttachError> {
    let (files, mut skipped) = collect(request.paths, request.cwd, request.links);
    if !request.skip_missing {
        let missing: Vec<PathBuf> = skipped
            .iter()
            .filter(|(path, e)| e.kind() == io::ErrorKind::NotFound && request.paths.contains(path))
            .map(|(path, _)| path.clone())
            .collect();
        if !missing.is_empty() {
            return Err(AttachError::Missing { paths: missing });
        }
    }
    if request.strict && !skipped.is_empty() {
        let (path, reason) = skipped.swap_remove(0);
        return Err(AttachError::Unusable { path, reason });
    }
    for (path, e) in &skipped {
        on_skip(path, e);
    }
    match attach(store, id, &files, request.message, request.strict, progress) {
        Ok(mut outcome) => {
            for (path, e) in &outcome.skipped {
                on_skip(path, e);
            }
            skipped.append(&mut outcome.skipped);
            outcome.skipped = skipped;
            Ok(outcome)
        }
        Err(AttachError::NothingToAttach {
            skipped: mut unread,
        }) => {
            for (path, e) in &unread {
                on_skip(path, e);
            }
            skipped.append(&mut unread);
            Err(AttachError::NothingToAttach { skipped })
        }
        Err(e) => Err(e),
    }
}

/// Refuses, before anything is read, a request that could not fit in a
/// record whatever the files hold (references at their largest).
fn check_record_size(
    store: &Store,
    id: &ConversationId,
    message: &str,
    files: &[FileToAttach],
) -> Result<()> {
    let widest = BlobRef {
        id: jpstore_blobstore::BlobId::from_bytes([0xff; 32]),
        size: u64::MAX,
    };
    let resources = files
        .iter()
        .map(|f| resource(&f.path, f.uri.clone(), f.name.clone(), widest, false))
        .collect();
    let encoded: Vec<Vec<u8>> = request_entries(message, resources)
        .iter()
        .map(codec::encode_event)
        .collect();
    let size = payload_len(&encoded).unwrap_or(u64::MAX);
    let max = u64::from(store.options().log.max_record_size);
    if size > max {
        return Err(Error::RecordTooLarge {
            path: store.display(&id.log_path()),
            offset: None,
            size,
            max,
        });
    }
    Ok(())
}

/// The current content of the file a `file://` URI names, as a resource in
/// its JSON form (RFD 065): the canonical `uri`, `mimeType`, `text` or
/// base64 `blob`, and `name` relative to `cwd`. Refuses other schemes, URIs
/// with a host other than `localhost`, a query or a fragment (decision: a
/// fragment such as `#L10-20` names part of a file, which this does not
/// resolve), missing files, directories and other non-regular files.
/// Symbolic links in the path are followed (decision: the URI names the file
/// itself, so a link in it reaches nothing the URI could not name directly;
/// the `uri` returned is the target's), which is why a caller that lets a
/// model ask for resources decides itself which URIs to allow.
pub fn resolve(uri: &str, cwd: &Path) -> Result<Value, AttachError> {
    let refuse = |reason: String| AttachError::NotFileUri {
        uri: uri.to_owned(),
        reason,
    };
    let url = Url::parse(uri).map_err(|e| match e {
        // A path given for a URI: the URI it would be.
        url::ParseError::RelativeUrlWithoutBase => {
            let hint = Url::from_file_path(cwd.join(uri))
                .map(|u| format!(" (here: {u})"))
                .unwrap_or_default();
            refuse(format!(
                "a path, not a URI: give it as a file:// URI, file:///absolute/path{hint}"
            ))
        }
        e => refuse(format!("not a URI: {e}")),
    })?;
    if url.scheme() != "file" {
        return Err(refuse(format!(
            "the scheme is `{}`; only file:// resources are resolved here",
            url.scheme()
        )));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(refuse(
            "a file URI with a query or a fragment names no whole file".into(),
        ));
    }
    let path = url
        .to_file_path()
        .map_err(|()| refuse("it names a host other than localhost, or no absolute path".into()))?;
    let read_error = |source| AttachError::Read {
        path: path.clone(),
        source,
    };
    let canonical = std::fs::canonicalize(&path).map_err(read_error)?;
    // The canonical path holds no link: one put there since is refused.
    let bytes =
        user_file::read(&canonical, RESOLVE_MAX_BYTES, LastLink::Refuse).map_err(read_error)?;
    let text = is_text(&bytes);
    let names = Names::new(cwd);
    let r = resource(
        &canonical,
        file_uri(&canonical).map_err(read_error)?,
        names.name(&path, &canonical),
        Payload::Inline(bytes),
        text,
    );
    render_resource(&r, &mut |p, kind| payload_json(p, kind))
        .map_err(|what| Error::Render { what }.into())
}

#[cfg(test)]
mod tests;
