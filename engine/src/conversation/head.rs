//! The head cache of a conversation (format-spec.md section 4.6): the folded
//! [`ConversationState`] as of a record boundary of the log, so that
//! listings and writers read only the records appended since, not the whole
//! log.
//!
//! The cache is never authoritative. It is written without a sync (a temp
//! file renamed over `head`), checked by a CRC-32, and trusted only if the
//! record it claims ends its prefix is really there (its header's checksum
//! and payload CRC match and it ends where the cache says). Anything else
//! (missing, damaged, stale beyond the log's end, another log) means: fold
//! the whole log, as if there were no cache.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use jpstore_blobstore::backend::{read_all, read_exact_at, Backend, Expect, ObjectReader};
use jpstore_blobstore::BlobId;
use serde_json::Value;

use super::meta::Metadata;
use super::state::ConversationState;
use super::ConversationId;
use crate::config::Settings;
use crate::event::binary::value::{put_object, read_object, skip_object};
use crate::event::binary::wire::{put_ref, put_str, put_varint, Reader};
use crate::event::turns::TurnCounter;
use crate::log::{
    check_file_header, decode_record_header, Framing, RecordHeader, FILE_HEADER_LEN, FIRST_RECORD,
    RECORD_HEADER_LEN_V2,
};
use crate::timestamp::Timestamp;

/// Name of the head cache inside a conversation's directory.
pub const HEAD_FILE: &str = "head";
/// Magic of a head file.
pub const HEAD_MAGIC: [u8; 4] = *b"jpsH";
/// Version of the head file layout (3: a body read without a
/// deserializer). A head of version 2 (a MessagePack body) gives its
/// evidence only (`read_for_log`); one of any other version is refused
/// like any head that cannot be trusted. Either is written again.
pub const HEAD_VERSION: u16 = 3;
/// Length of the head file's header.
pub const HEAD_HEADER_LEN: usize = 16;
/// Largest head file read (the state holds metadata and the current turn's
/// tool call ids, so it is small; this bounds what a damaged file costs).
pub const MAX_HEAD_LEN: u64 = 16 << 20;

/// A folded state and the log prefix it covers.
#[derive(Debug, Clone, PartialEq)]
pub struct Head {
    /// End of the covered prefix: a record boundary.
    pub log_end: u64,
    /// Offset of the last record of the prefix (it ends at `log_end`).
    pub last_record: u64,
    /// That record's checksum as its header stores it
    /// ([`RecordHeader::record_crc`]: version 1, the payload CRC; version 2,
    /// the header CRC).
    pub last_record_crc: u32,
    /// The record checksum of the log's first record (the creation
    /// metadata, which holds the creation time to the nanosecond): ties the
    /// head to this conversation's log and no other.
    pub first_record_crc: u32,
    /// The state after folding the prefix.
    pub state: ConversationState,
    /// The settings in effect at the start of the conversation, cached
    /// (format-spec.md 4.6): valid only for the key it holds.
    pub settings: Option<SettingsCache>,
}

/// What jp-store reads of a conversation's config at its start (the
/// workspace config with the conversation's base config merged over it,
/// checked), cached so that a view parses neither TOML nor JSON, and what
/// it was made from. It is used only when its key matches: the SHA-256 of
/// `config.toml` as the store read it, the base config blob the log names,
/// and this build's `SETTINGS_VERSION`.
/// Config deltas are never cached: they are merged from the log.
#[derive(Debug, Clone, PartialEq)]
pub struct SettingsCache {
    /// SHA-256 of the bytes of `config.toml` (of no bytes when there is
    /// none).
    pub workspace: BlobId,
    /// The base config blob (none: the conversation has none).
    pub base_config: Option<BlobId>,
    /// The settings version of the build that made it.
    pub version: u32,
    /// The settings.
    pub settings: Settings,
}

impl SettingsCache {
    /// Whether it was made from `workspace`, `base_config` and this build.
    pub fn matches(&self, workspace: &BlobId, base_config: Option<&BlobId>) -> bool {
        self.version == crate::config::SETTINGS_VERSION
            && self.workspace == *workspace
            && self.base_config.as_ref() == base_config
    }
}

/// Path of the head file of `id`, relative to the store root.
pub fn head_path(id: &ConversationId) -> PathBuf {
    id.file(HEAD_FILE)
}

/// Encodes a head file.
pub fn encode(head: &Head) -> Vec<u8> {
    let body = encode_body(head);
    let mut out = Vec::with_capacity(HEAD_HEADER_LEN + body.len());
    out.extend_from_slice(&HEAD_MAGIC);
    out.extend_from_slice(&HEAD_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Decodes a head file; `None` if it is not a valid one of this version.
pub fn decode(bytes: &[u8]) -> Option<Head> {
    match decode_file(bytes, decode_body)? {
        HeadFile::Current(head) => Some(head),
        HeadFile::Older(_) => None,
    }
}

/// A head file that decodes.
enum HeadFile<T> {
    /// Of this version: what its body gave (the head, or its evidence and
    /// cache).
    Current(T),
    /// Of version 2: its evidence is still used, its cache is not.
    Older(Evidence),
}

/// What a head proves about its log (format-spec.md 4.6, "The head as
/// evidence"). Read from a head of version 2 by name, the other fields of
/// its MessagePack map (state, settings) skipped.
#[derive(serde::Deserialize)]
struct Evidence {
    log_end: u64,
    first_record_crc: u32,
}

/// Decodes a head file of this version (its body by `current`), or the
/// evidence of one of version 2; `None` if it is neither.
fn decode_file<T>(
    bytes: &[u8],
    current: impl FnOnce(&[u8]) -> Result<T, String>,
) -> Option<HeadFile<T>> {
    let header = bytes.get(..HEAD_HEADER_LEN)?;
    let version = u16::from_le_bytes([header[4], header[5]]);
    if header[0..4] != HEAD_MAGIC
        || !(2..=HEAD_VERSION).contains(&version)
        || header[6..8] != [0, 0]
    {
        return None;
    }
    let len = u32::from_le_bytes([header[8], header[9], header[10], header[11]]) as usize;
    let crc = u32::from_le_bytes([header[12], header[13], header[14], header[15]]);
    let body = &bytes[HEAD_HEADER_LEN..];
    if body.len() != len || crc32fast::hash(body) != crc {
        return None;
    }
    if version == HEAD_VERSION {
        return current(body).ok().map(HeadFile::Current);
    }
    let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(body));
    de.set_max_depth(super::codec::MAX_DEPTH);
    let evidence = <Evidence as serde::Deserialize>::deserialize(&mut de).ok()?;
    (de.position() == body.len() as u64).then_some(HeadFile::Older(evidence))
}

/// The body of a head file (format-spec.md 4.6): fixed fields, varints,
/// strings and JSON values in the binary form of log entries, read back
/// without a deserializer.
fn encode_body(head: &Head) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    put_varint(&mut out, head.log_end);
    put_varint(&mut out, head.last_record);
    out.extend_from_slice(&head.last_record_crc.to_le_bytes());
    out.extend_from_slice(&head.first_record_crc.to_le_bytes());
    let state = &head.state;
    put_optional(&mut out, state.metadata.base_config.as_ref(), put_ref);
    // Metadata is JSON read from the log (nested at most as deep as an
    // entry may be), so it encodes; if it did not, the cache would only
    // be refused when read.
    let _ = put_object(&mut out, &state.metadata.fields, 0);
    put_varint(&mut out, state.entries);
    put_varint(&mut out, state.unknown_entries);
    put_varint(&mut out, state.records);
    let (turn, has_event) = state.turns.parts();
    put_optional(&mut out, turn, put_varint);
    out.push(u8::from(has_event));
    put_varint(&mut out, state.open_requests.len() as u64);
    for (id, tool) in &state.open_requests {
        put_str(&mut out, id);
        put_str(&mut out, tool);
    }
    put_optional(&mut out, state.last_event, |out, t| {
        out.extend_from_slice(&t.unix_secs().to_le_bytes());
        put_varint(out, u64::from(t.subsec_nanos()));
    });
    put_varint(&mut out, state.blob_refs);
    put_varint(&mut out, state.content_bytes);
    put_varint(&mut out, state.compactions);
    // The settings as the JSON of a config holding exactly them (their
    // serialization), read back by `Settings::parse`; settings that do not
    // serialize are not cached.
    let settings =
        head.settings
            .as_ref()
            .and_then(|cache| match serde_json::to_value(&cache.settings) {
                Ok(Value::Object(config)) => Some((cache, config)),
                _ => None,
            });
    put_optional(&mut out, settings, |out, (cache, config)| {
        out.extend_from_slice(cache.workspace.as_bytes());
        put_optional(out, cache.base_config, |out, id| {
            out.extend_from_slice(id.as_bytes())
        });
        put_varint(out, u64::from(cache.version));
        let _ = put_object(out, &config, 0);
    });
    out
}

/// A presence byte, then `value` written by `put` if there is one.
fn put_optional<T>(out: &mut Vec<u8>, value: Option<T>, put: impl FnOnce(&mut Vec<u8>, T)) {
    match value {
        Some(v) => {
            out.push(1);
            put(out, v);
        }
        None => out.push(0),
    }
}

/// A presence byte, then the value `read` reads if it says there is one.
fn read_optional<'a, T>(
    r: &mut Reader<'a>,
    read: impl FnOnce(&mut Reader<'a>) -> Result<T, String>,
) -> Result<Option<T>, String> {
    if present(r)? {
        read(r).map(Some)
    } else {
        Ok(None)
    }
}

/// Reads a presence byte: `0` absent, `1` present, anything else refused.
fn present(r: &mut Reader<'_>) -> Result<bool, String> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        other => Err(r.error(format_args!("presence byte {other:#04x}"))),
    }
}

/// Decodes the body of a head file of this version (what follows the
/// header, whose CRC it is not checked against here: fuzzing and tools);
/// the error says what was found where.
pub fn decode_body(body: &[u8]) -> Result<Head, String> {
    decode_body_using(body, &|_| None)
}

/// The key of a settings cache: the workspace digest, the base config and
/// the settings version it was made for ([`SettingsCache`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SettingsKey<'a> {
    /// SHA-256 of `config.toml`.
    pub workspace: &'a BlobId,
    /// The base config blob.
    pub base_config: Option<&'a BlobId>,
    /// `SETTINGS_VERSION` of the writer.
    pub version: u32,
}

/// Settings the reader of a head already has for a key (a store's memo,
/// `Store::remembered_settings`):
/// then the cached settings are not parsed.
pub type Remembered<'a> = &'a dyn Fn(SettingsKey<'_>) -> Option<Settings>;

/// [`decode_body`], with the settings of a cache whose key `remembered`
/// knows taken from it instead of parsed from the body. The rest of the
/// body is then not read (its checksum held): the settings cache is the
/// body's last field.
fn decode_body_using(body: &[u8], remembered: Remembered<'_>) -> Result<Head, String> {
    let mut r = Reader::new(body);
    let evidence = read_evidence(&mut r)?;
    let state = read_state(&mut r, Build::State)?;
    let settings = read_settings_cache(&mut r, remembered)?;
    Ok(Head {
        log_end: evidence.log_end,
        last_record: evidence.last_record,
        last_record_crc: evidence.last_record_crc,
        first_record_crc: evidence.first_record_crc,
        // `Build::State` builds it.
        state: state.unwrap_or_default(),
        settings,
    })
}

/// `decode_body_using` for a reader that wants only the evidence and
/// the settings cache (a view): the state between them is checked as
/// decoding checks it (a body one refuses, the other refuses) but not
/// built, which spares a view the allocations of its metadata and open
/// requests.
pub fn decode_body_for_log(
    body: &[u8],
    remembered: Remembered<'_>,
) -> Result<(BodyEvidence, Option<SettingsCache>), String> {
    let mut r = Reader::new(body);
    let evidence = read_evidence(&mut r)?;
    read_state(&mut r, Build::Nothing)?;
    let settings = read_settings_cache(&mut r, remembered)?;
    Ok((evidence, settings))
}

/// The fixed fields that open a head body: where the covered prefix ends
/// and the checksums that tie it to its log (those of [`Head`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyEvidence {
    /// [`Head::log_end`].
    pub log_end: u64,
    /// [`Head::last_record`].
    pub last_record: u64,
    /// [`Head::last_record_crc`].
    pub last_record_crc: u32,
    /// [`Head::first_record_crc`].
    pub first_record_crc: u32,
}

fn read_evidence(r: &mut Reader<'_>) -> Result<BodyEvidence, String> {
    Ok(BodyEvidence {
        log_end: r.varint()?,
        last_record: r.varint()?,
        last_record_crc: r.u32_le()?,
        first_record_crc: r.u32_le()?,
    })
}

/// Whether [`read_state`] builds the state or only checks it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Build {
    State,
    Nothing,
}

/// The folded state of a head body, built or (`Build::Nothing`) checked
/// alike and skipped.
fn read_state(r: &mut Reader<'_>, build: Build) -> Result<Option<ConversationState>, String> {
    let base_config = read_optional(r, Reader::blob_ref)?;
    let fields = match build {
        Build::State => Some(read_object(r, 0)?),
        Build::Nothing => {
            skip_object(r, 0)?;
            None
        }
    };
    let entries = r.varint()?;
    let unknown_entries = r.varint()?;
    let records = r.varint()?;
    let turn = read_optional(r, Reader::varint)?;
    let has_event = present(r)?;
    let count = r.varint()?;
    let mut open_requests: BTreeMap<String, String> = BTreeMap::new();
    let mut last: Option<&str> = None;
    for _ in 0..count {
        let id = r.str()?;
        let tool = r.str()?;
        // Written in order, each id once: anything else is not a head this
        // code wrote.
        if last.is_some_and(|last| last >= id) {
            return Err(r.error("open requests out of order"));
        }
        last = Some(id);
        if build == Build::State {
            open_requests.insert(id.to_owned(), tool.to_owned());
        }
    }
    let last_event = read_optional(r, |r| {
        let secs = r.i64_le()?;
        let nanos = r.varint_u32()?;
        Timestamp::from_unix(secs, nanos).ok_or_else(|| r.error("a timestamp out of range"))
    })?;
    let blob_refs = r.varint()?;
    let content_bytes = r.varint()?;
    let compactions = r.varint()?;
    Ok(fields.map(|fields| ConversationState {
        metadata: Metadata {
            base_config,
            fields,
        },
        entries,
        unknown_entries,
        records,
        turns: TurnCounter::from_parts(turn, has_event),
        open_requests,
        last_event,
        blob_refs,
        content_bytes,
        compactions,
    }))
}

/// The settings cache that ends a head body. The settings of a key that
/// `remembered` knows are taken from it, and the rest of the body is then
/// not read (its checksum held: the settings are the body's last field).
fn read_settings_cache(
    r: &mut Reader<'_>,
    remembered: Remembered<'_>,
) -> Result<Option<SettingsCache>, String> {
    let mut known = false;
    let settings = read_optional(r, |r| {
        let workspace = r.blob_id()?;
        let base_config = read_optional(r, Reader::blob_id)?;
        let version = r.varint_u32()?;
        let key = SettingsKey {
            workspace: &workspace,
            base_config: base_config.as_ref(),
            version,
        };
        let settings = match remembered(key) {
            Some(settings) => {
                known = true;
                settings
            }
            None => {
                let config = read_object(r, 0)?;
                Settings::parse(&config).map_err(|e| r.error(e))?
            }
        };
        Ok(SettingsCache {
            workspace,
            base_config,
            version,
            settings,
        })
    })?;
    if !known {
        r.finish("a head")?;
    }
    Ok(settings)
}

/// Reads the head cache of `id` and checks it against the log; `None` when
/// there is none or it cannot be trusted.
pub fn load(backend: &dyn Backend, id: &ConversationId) -> Option<Head> {
    let log = backend.open(&id.log_path()).ok()?;
    load_with(backend, id, &*log)
}

/// [`load`], checked against the log file `log` (a handle the caller reads
/// the log through, so that the head and what is read are of the same
/// file even if the name was given to another meanwhile).
pub fn load_with(
    backend: &dyn Backend,
    id: &ConversationId,
    log: &dyn ObjectReader,
) -> Option<Head> {
    let head = read(backend, id)?;
    matches_log(log, &head).then_some(head)
}

/// What the head file of `id` gives a reader of the log file `log`.
#[derive(Debug)]
pub struct ForLog {
    /// The proven end ([`proven_end`]): the `log_end` of a head that
    /// decodes and belongs to the log, of this version or of version 2;
    /// else 0.
    pub proven_end: u64,
    /// The settings cache of a head of this version that belongs to the
    /// log: it may be used when its key matches. The head's state is
    /// checked but not built (a writer or a listing [`load`]s it).
    pub settings: Option<SettingsCache>,
}

/// Opens a log with `open` (`file` gives its file) and judges the head file
/// of `id` against it (`read_for_log`), so that the head's evidence holds
/// for the log as opened (format-spec.md 4.6, "The head as evidence").
///
/// The head is read after the open first: an object store's cache serves a
/// head by the listing of its log, so a view of an unchanged log reads no
/// head. A head that covers more than the log as opened was written by an
/// append in between: a file would show those records anyway (a walk reads
/// its length when it starts), but a log on an object store is the listing
/// taken at the open, and they would look lost. Then the head is read again
/// and the log opened after it, the order in which the evidence always
/// holds.
pub fn open_judged<R>(
    backend: &dyn Backend,
    id: &ConversationId,
    open: impl Fn() -> crate::error::Result<R>,
    file: impl Fn(&R) -> &dyn ObjectReader,
    remembered: Remembered<'_>,
) -> crate::error::Result<(R, ForLog)> {
    let opened = open()?;
    let for_log = read_for_log(read_bytes(backend, id), file(&opened), remembered);
    if file(&opened)
        .len()
        .map_or(true, |len| for_log.proven_end <= len)
    {
        return Ok((opened, for_log));
    }
    drop(opened);
    let head = read_bytes(backend, id);
    let opened = open()?;
    let for_log = read_for_log(head, file(&opened), remembered);
    Ok((opened, for_log))
}

/// [`open_judged`] for the proven end alone (any cached settings are left
/// unparsed).
pub fn open_proven<R>(
    backend: &dyn Backend,
    id: &ConversationId,
    open: impl Fn() -> crate::error::Result<R>,
    file: impl Fn(&R) -> &dyn ObjectReader,
) -> crate::error::Result<(R, u64)> {
    let (opened, for_log) = open_judged(backend, id, open, file, &|_| Some(Settings::default()))?;
    Ok((opened, for_log.proven_end))
}

/// What the head file of `id` gives a reader of the log's state (a
/// listing): the proven end, as [`open_proven`] judges it, and the head
/// itself when it may be used as a cache ([`load_with`]'s checks).
#[derive(Debug)]
pub(crate) struct ForState {
    /// The proven end ([`ForLog::proven_end`]).
    pub(crate) proven_end: u64,
    /// The head, when it decodes, is of this version and matches the log
    /// as opened (format-spec.md 4.6: the record it ends with is there,
    /// whole).
    pub(crate) cache: Option<Head>,
}

/// [`open_proven`] and [`load_with`] in one: the log opened with `open`
/// (`file` gives its file) and the head file of `id` read once, judged
/// against it both as evidence (its proven end) and as a cache, in the
/// order [`open_judged`] reads them (the head after the log, and again
/// before a second open of the log when it covers more than the log as
/// first opened).
pub(crate) fn open_for_state<R>(
    backend: &dyn Backend,
    id: &ConversationId,
    open: impl Fn() -> crate::error::Result<R>,
    file: impl Fn(&R) -> &dyn ObjectReader,
) -> crate::error::Result<(R, ForState)> {
    let opened = open()?;
    let for_state = read_for_state(read_bytes(backend, id), file(&opened));
    if file(&opened)
        .len()
        .map_or(true, |len| for_state.proven_end <= len)
    {
        return Ok((opened, for_state));
    }
    drop(opened);
    let head = read_bytes(backend, id);
    let opened = open()?;
    let for_state = read_for_state(head, file(&opened));
    Ok((opened, for_state))
}

/// The head file of bytes `head` judged against the log file `log`, for
/// its evidence and as a cache ([`open_for_state`]).
fn read_for_state(head: Option<Vec<u8>>, log: &dyn ObjectReader) -> ForState {
    let none = ForState {
        proven_end: 0,
        cache: None,
    };
    let Some(decoded) = head.and_then(|bytes| decode_file(&bytes, decode_body)) else {
        return none;
    };
    let (evidence, head) = match decoded {
        HeadFile::Current(head) => (
            Evidence {
                log_end: head.log_end,
                first_record_crc: head.first_record_crc,
            },
            Some(head),
        ),
        HeadFile::Older(evidence) => (evidence, None),
    };
    if log_first_record_crc(log) != Some(evidence.first_record_crc) {
        return none;
    }
    ForState {
        proven_end: evidence.log_end,
        cache: head.filter(|head| matches_log(log, head)),
    }
}

/// The head file of bytes `head` judged against the log file `log` (its
/// first record stores the head's `first_record_crc`; see [`open_judged`]
/// for the order of the two reads). Settings cached for a key that
/// `remembered` knows are taken from it, not parsed.
fn read_for_log(
    head: Option<Vec<u8>>,
    log: &dyn ObjectReader,
    remembered: Remembered<'_>,
) -> ForLog {
    let none = ForLog {
        proven_end: 0,
        settings: None,
    };
    let Some(bytes) = head else {
        return none;
    };
    let Some(decoded) = decode_file(&bytes, |body| decode_body_for_log(body, remembered)) else {
        return none;
    };
    let (evidence, settings) = match decoded {
        HeadFile::Current((evidence, settings)) => (
            Evidence {
                log_end: evidence.log_end,
                first_record_crc: evidence.first_record_crc,
            },
            settings,
        ),
        HeadFile::Older(evidence) => (evidence, None),
    };
    if log_first_record_crc(log) != Some(evidence.first_record_crc) {
        return none;
    }
    // The bytes are freed at once: a short view allocates next, and a
    // block freed just now is the one in the CPU's caches.
    drop(bytes);
    ForLog {
        proven_end: evidence.log_end,
        settings,
    }
}

/// The head file of `id` as it is, decoded if of this version; not
/// checked against the log.
fn read(backend: &dyn Backend, id: &ConversationId) -> Option<Head> {
    match read_file(backend, id, decode_body)? {
        HeadFile::Current(head) => Some(head),
        HeadFile::Older(_) => None,
    }
}

fn read_file<T>(
    backend: &dyn Backend,
    id: &ConversationId,
    current: impl FnOnce(&[u8]) -> Result<T, String>,
) -> Option<HeadFile<T>> {
    decode_file(&read_bytes(backend, id)?, current)
}

/// The bytes of the head file of `id`, if it can be read.
fn read_bytes(backend: &dyn Backend, id: &ConversationId) -> Option<Vec<u8>> {
    let file = backend.open(&head_path(id)).ok()?;
    read_all(&*file, MAX_HEAD_LEN).ok()
}

/// How far the log of `id` is known to have been whole: the `log_end` of a
/// head file that decodes (its own CRC holds) and belongs to this log (the
/// log's first record stores its `first_record_crc`), else 0.
///
/// Every head is written after the records it covers were synced (a
/// writer's after its acknowledged appends, a listing's after an
/// `fdatasync` of the log, the creator's before the log is published with
/// all its records synced), and records are never cut below a proven end,
/// so a record ending at or before it was whole once: a bad record there is
/// damage, not a torn tail (format-spec.md 3 and 4.6). Unlike [`load`], this
/// does not need the last covered record to be intact: that is what it
/// judges.
pub fn proven_end(backend: &dyn Backend, id: &ConversationId) -> u64 {
    let path = id.log_path();
    let open = || {
        backend
            .open(&path)
            .map_err(|source| crate::error::Error::Io {
                op: "open",
                path: backend.display(&path),
                source,
            })
    };
    open_proven(backend, id, open, |log| &**log).map_or(0, |(_, proven)| proven)
}

/// Whether the log file `log` has, at `head.last_record`, a valid record
/// header with the cached record checksum that ends at `head.log_end`, and
/// a valid record there.
fn matches_log(log: &dyn ObjectReader, head: &Head) -> bool {
    if head.last_record < FIRST_RECORD || head.log_end <= head.last_record {
        return false;
    }
    match log.len() {
        Ok(len) if len >= head.log_end => {}
        _ => return false,
    }
    let Some(framing) = framing_of(log) else {
        return false;
    };
    let first_ok = header_at(log, framing, FIRST_RECORD)
        .is_some_and(|h| h.record_crc() == head.first_record_crc);
    let last = header_at(log, framing, head.last_record).filter(|h| {
        h.record_crc() == head.last_record_crc && head.last_record + h.record_len() == head.log_end
    });
    // The last covered record's content is checked too (every section): a
    // cache trusted over a damaged last record would list events that
    // reading the log refuses.
    first_ok
        && last.is_some_and(|h| {
            let Ok(len) = usize::try_from(h.content_len()) else {
                return false;
            };
            let mut content = vec![0u8; len];
            read_exact_at(log, &mut content, head.last_record + h.header_len()).is_ok()
                && crate::log::check_content_whole(&h, &content)
        })
}

/// The framing of an open log, from its file header.
fn framing_of(log: &dyn ObjectReader) -> Option<Framing> {
    let mut buf = [0u8; FILE_HEADER_LEN as usize];
    read_exact_at(log, &mut buf, 0).ok()?;
    check_file_header(&buf).ok().map(|f| f.framing)
}

/// The record header at `offset` of an open log of `framing`, if valid.
fn header_at(log: &dyn ObjectReader, framing: Framing, offset: u64) -> Option<RecordHeader> {
    let mut buf = [0u8; RECORD_HEADER_LEN_V2 as usize];
    let len = framing.record_header_len() as usize;
    read_exact_at(log, &mut buf[..len], offset).ok()?;
    decode_record_header(framing, &buf[..len])
}

/// The record checksum of the first record of the log of `id`, if
/// readable.
pub fn first_record_crc(backend: &dyn Backend, id: &ConversationId) -> Option<u32> {
    let log = backend.open(&id.log_path()).ok()?;
    log_first_record_crc(&*log)
}

/// The record checksum of the first record of the log file `log`.
pub fn log_first_record_crc(log: &dyn ObjectReader) -> Option<u32> {
    let framing = framing_of(log)?;
    header_at(log, framing, FIRST_RECORD).map(|h| h.record_crc())
}

/// Replaces the head cache of `id`, best effort: the cache is an
/// optimisation, so failures (a read-only store, a full disk) are ignored.
/// Not synced: after a crash the file may be stale or damaged, which
/// [`load`] detects.
pub fn store(backend: &dyn Backend, id: &ConversationId, head: &Head) {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let tmp = id.dir().join(format!(
        "{HEAD_FILE}.tmp.{}.{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = backend.replace(&head_path(id), &encode(head), &tmp, Expect::Any, false);
}

/// Writes the head cache of `id` durably before its log is published
/// (creation: the published records are proven whole from the start): a
/// temp file, synced, renamed over `head`, the directory synced. Unlike
/// [`store`], a failure is an error: the creation is refused.
pub fn store_synced(
    backend: &dyn Backend,
    id: &ConversationId,
    head: &Head,
) -> crate::error::Result<()> {
    let tmp = id
        .dir()
        .join(format!("{HEAD_FILE}.tmp.{}.created", std::process::id()));
    backend
        .replace(&head_path(id), &encode(head), &tmp, Expect::Any, true)
        .map_err(|e| crate::error::Error::from_backend(backend, e))
}

/// Removes temp files of head writes that a crash interrupted. Called by a
/// writer holding the conversation's lock; a temp file of a concurrent
/// listing may be removed too, which only makes that listing's best-effort
/// write fail.
pub fn remove_stale_temps(backend: &dyn Backend, id: &ConversationId) {
    if !backend.leaves_scratch() {
        return;
    }
    let Ok(entries) = backend.list(&id.dir()) else {
        return;
    };
    let prefix = format!("{HEAD_FILE}.tmp.");
    let stale: Vec<_> = entries
        .iter()
        .filter(|e| e.name.starts_with(&prefix) && !e.is_prefix())
        .map(|e| Path::new(&id.dir()).join(&e.name))
        .collect();
    if !stale.is_empty() {
        let _ = backend.delete(&stale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Head {
        let mut state = ConversationState {
            entries: 7,
            ..Default::default()
        };
        state
            .open_requests
            .insert("call_1".into(), "fs_read_file".into());
        let mut settings = crate::config::Settings::default();
        settings.conversation.deduplication.min_bytes = Some(7);
        settings.assistant.system_prompt = Some("be brief".into());
        settings.conversation.compaction.auto.trigger_ratio = Some(0.75);
        Head {
            log_end: 4096,
            last_record: 4000,
            last_record_crc: 0xdead_beef,
            first_record_crc: 0x1234_5678,
            state,
            settings: Some(SettingsCache {
                workspace: BlobId::of(b"config"),
                base_config: Some(BlobId::of(b"{}")),
                version: crate::config::SETTINGS_VERSION,
                settings,
            }),
        }
    }

    /// A head of version 2 (the committed store of version 2's): its
    /// evidence is read, its cache is not, and flipping any byte of it
    /// loses the evidence too.
    #[test]
    fn a_head_of_version_2_gives_its_evidence_only() {
        let bytes =
            include_bytes!("../../../tests/fixtures/store-v2/store/conversations/native/head");
        assert_eq!(decode(bytes), None, "not a head of this version");
        let Some(HeadFile::Older(evidence)) = decode_file(bytes, decode_body) else {
            panic!("the evidence of a head of version 2 is read");
        };
        // `log_end` is the body's first value: `cd 07 1a`, a u16.
        assert_eq!(evidence.log_end, 0x071a);
        for i in 0..bytes.len() {
            let mut bad = bytes.to_vec();
            bad[i] ^= 0x10;
            assert!(
                decode_file(&bad, decode_body).is_none(),
                "flip at byte {i} accepted"
            );
        }
    }

    /// The layout is pinned: a head of version 3 written by `jp-store`
    /// (the fuzz seed) decodes and is written again byte for byte.
    #[test]
    fn a_written_head_of_version_3_is_written_again_byte_for_byte() {
        let bytes = include_bytes!("../../../tests/fuzz/corpus/head_file/head");
        let head = decode(bytes).expect("a head of version 3");
        assert!(head.settings.is_some() && !head.state.open_requests.is_empty());
        assert_eq!(encode(&head), bytes.to_vec());
    }

    /// Settings a reader has for the cache's key are taken from it, with
    /// the key asked as written; any other key's are parsed.
    #[test]
    fn remembered_settings_are_taken_for_their_key_only() {
        let head = sample();
        let bytes = encode(&head);
        let cache = head.settings.clone().expect("a cache");
        let mut other = Settings::default();
        other.assistant.system_prompt = Some("remembered".into());
        let asked = std::cell::RefCell::new(Vec::new());
        let remembered = |key: SettingsKey<'_>| {
            asked
                .borrow_mut()
                .push((*key.workspace, key.base_config.copied(), key.version));
            (key.base_config == cache.base_config.as_ref()).then(|| other.clone())
        };
        let Some(HeadFile::Current(read)) =
            decode_file(&bytes, |body| decode_body_using(body, &remembered))
        else {
            panic!("the head decodes");
        };
        assert_eq!(read.settings.as_ref().map(|c| &c.settings), Some(&other));
        assert_eq!((read.log_end, &read.state), (head.log_end, &head.state));
        assert_eq!(
            asked.take(),
            vec![(cache.workspace, cache.base_config, cache.version)]
        );
        let not_known = |_: SettingsKey<'_>| None;
        let Some(HeadFile::Current(read)) =
            decode_file(&bytes, |body| decode_body_using(body, &not_known))
        else {
            panic!("the head decodes");
        };
        assert_eq!(read, head);
    }

    /// What a view reads of a head (evidence and settings, the state
    /// checked and skipped) is what decoding the whole head gives, and a
    /// body one refuses the other refuses: every byte of a body flipped
    /// and every prefix of it (the file's CRC is not in the way here).
    #[test]
    fn a_head_read_for_its_log_accepts_what_decoding_accepts() {
        let seed = include_bytes!("../../../tests/fuzz/corpus/head_file/head");
        let mut bodies = vec![encode_body(&sample()), seed[HEAD_HEADER_LEN..].to_vec()];
        for body in bodies.clone() {
            for i in 0..body.len() {
                for bit in [0x01, 0x10, 0x80] {
                    let mut bad = body.clone();
                    bad[i] ^= bit;
                    bodies.push(bad);
                }
            }
            bodies.extend((0..body.len()).map(|cut| body[..cut].to_vec()));
        }
        let mut accepted = 0;
        for body in &bodies {
            let whole = decode_body(body).map(|h| {
                let evidence = BodyEvidence {
                    log_end: h.log_end,
                    last_record: h.last_record,
                    last_record_crc: h.last_record_crc,
                    first_record_crc: h.first_record_crc,
                };
                (evidence, h.settings)
            });
            let for_log = decode_body_for_log(body, &|_| None);
            assert_eq!(whole.is_ok(), for_log.is_ok(), "{whole:?} / {for_log:?}");
            if let (Ok(whole), Ok(for_log)) = (whole, for_log) {
                assert_eq!(whole, for_log);
                accepted += 1;
            }
        }
        assert!(accepted > 2, "some flips still decode ({accepted})");
    }

    #[test]
    fn round_trips_and_refuses_every_damage() {
        let bytes = encode(&sample());
        assert_eq!(decode(&bytes), Some(sample()));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert_eq!(decode(&bad), None, "flip at byte {i} accepted");
        }
        for cut in 0..bytes.len() {
            assert_eq!(
                decode(&bytes[..cut]),
                None,
                "prefix of {cut} bytes accepted"
            );
        }
    }
}
