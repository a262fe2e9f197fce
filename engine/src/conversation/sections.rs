//! The two sections of a version 2 record (format-spec.md section 3 and
//! 4.2): the heads section (its 16-byte header, the entry heads and their
//! aux bytes, plain or as one zstd frame) and the body section (the entries'
//! body parts, plain or as zstd runs); building them from entries, and
//! opening them again, every size bounded by the record limit before
//! anything is allocated.
//!
//! A metadata patch is an entry of kind `MetaPatch` here: its aux holds the
//! base config reference (so gc marks it from heads), its body the `fields`
//! merge patch.

use std::borrow::Cow;

use super::codec::{with_zstd, LogEntry};
use super::meta::MetaPatch;
use crate::event::binary::decode::{decode_entry, AuxFields, BodyParts, META_BASE_CONFIG};
use crate::event::binary::encode::RecordBuilder;
use crate::event::binary::wire::put_ref;
use crate::event::binary::{Kind, Part, RawHead, ENTRY_HEAD_LEN};
use crate::log::{HeadsSection, CODEC_PLAIN, CODEC_ZSTD, HEADS_SECTION_HEADER_LEN};

/// Sections smaller than this stay plain: a frame has a fixed cost to
/// unpack that the small records of an agent's appends would pay on every
/// read, and compressing costs the append (format-spec.md 4.2).
pub const COMPRESS_MIN: usize = 16 * 1024;

/// The zstd level of the records an agent writes (appends, new
/// conversations, forks): cheap to write. Imports and upgrades use the
/// level of the store's import compression (19 by default).
pub const LOG_LEVEL: i32 = 3;
/// A large body is compressed in runs of this many bytes, one zstd frame
/// each: readers unpack them on all cores.
pub const BODY_RUN: usize = 1 << 20;

/// The encoded sections of one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sections {
    /// The heads section.
    pub heads: Vec<u8>,
    /// The body section.
    pub body: Vec<u8>,
    /// Bytes of the entry heads, aux and body once decoded.
    pub plain_len: u64,
}

/// Appends a metadata patch to a record being built.
pub fn push_meta(record: &mut RecordBuilder, patch: &MetaPatch) -> Result<(), String> {
    let MetaPatch {
        base_config,
        fields,
    } = patch;
    record.push(Kind::MetaPatch, 0, None, &mut |b| {
        if !fields.is_empty() {
            b.object(Part::Fields, fields)?;
        }
        match base_config {
            Some(r) => {
                b.fields.push(META_BASE_CONFIG);
                put_ref(&mut b.fields, r);
            }
            None => b.fields.push(0),
        }
        Ok(())
    })
}

/// The sections of a record holding what `record` built. Each section is
/// compressed when it is at least [`COMPRESS_MIN`] bytes and that saves at
/// least an eighth of it, at zstd level `level` (`None` keeps both plain).
pub fn finish(record: &RecordBuilder, level: Option<i32>) -> Sections {
    let plain_heads = record.heads.len() + record.aux.len();
    let mut section = HeadsSection {
        count: record.count,
        aux_len: u32::try_from(record.aux.len()).unwrap_or(u32::MAX),
        body_raw_len: u32::try_from(record.body.len()).unwrap_or(u32::MAX),
        heads_codec: CODEC_PLAIN,
        body_codec: CODEC_PLAIN,
    };
    let packed_heads = level
        .filter(|_| plain_heads >= COMPRESS_MIN)
        .and_then(|level| {
            let mut plain = Vec::with_capacity(plain_heads);
            plain.extend_from_slice(&record.heads);
            plain.extend_from_slice(&record.aux);
            compress_frame(&plain, level)
        })
        .filter(|frame| frame.len() <= plain_heads - plain_heads / 8);
    let packed_body = level
        .filter(|_| record.body.len() >= COMPRESS_MIN)
        .and_then(|level| compress_runs(&record.body, level))
        .filter(|runs| runs.len() <= record.body.len() - record.body.len() / 8);
    if packed_heads.is_some() {
        section.heads_codec = CODEC_ZSTD;
    }
    if packed_body.is_some() {
        section.body_codec = CODEC_ZSTD;
    }
    let mut heads = Vec::with_capacity(HEADS_SECTION_HEADER_LEN as usize + plain_heads);
    heads.extend_from_slice(&section.encode());
    match packed_heads {
        Some(frame) => heads.extend_from_slice(&frame),
        None => {
            heads.extend_from_slice(&record.heads);
            heads.extend_from_slice(&record.aux);
        }
    }
    Sections {
        heads,
        body: packed_body.unwrap_or_else(|| record.body.clone()),
        plain_len: record.plain_len(),
    }
}

/// One zstd frame declaring its size, or `None` if zstd failed.
/// (at level [`LOG_LEVEL`], the thread's compressor; at another, one made
/// for the frame: its setup is small beside compressing a run at a high
/// level).
fn compress_frame(bytes: &[u8], level: i32) -> Option<Vec<u8>> {
    if level == LOG_LEVEL {
        return with_zstd(|z| z.compressor.compress(bytes)).ok();
    }
    zstd::bulk::Compressor::new(level)
        .and_then(|mut z| z.compress(bytes))
        .ok()
}

/// A compressed body: a u32 run count, a u32 raw and a u32 stored length per
/// run, then the runs' frames; runs compressed on all cores.
fn compress_runs(body: &[u8], level: i32) -> Option<Vec<u8>> {
    let runs: Vec<&[u8]> = body.chunks(BODY_RUN).collect();
    let frames = crate::parallel::map_ordered(&runs, |run| compress_frame(run, level));
    let frames: Vec<Vec<u8>> = frames.into_iter().collect::<Option<_>>()?;
    let mut out =
        Vec::with_capacity(4 + 8 * runs.len() + frames.iter().map(Vec::len).sum::<usize>());
    out.extend_from_slice(&u32::try_from(runs.len()).ok()?.to_le_bytes());
    for (run, frame) in runs.iter().zip(&frames) {
        out.extend_from_slice(&u32::try_from(run.len()).ok()?.to_le_bytes());
        out.extend_from_slice(&u32::try_from(frame.len()).ok()?.to_le_bytes());
    }
    for frame in &frames {
        out.extend_from_slice(frame);
    }
    Some(out)
}

/// Decompresses one zstd frame that must declare exactly `expected` bytes
/// and be all of `frame`.
fn decompress_exact(frame: &[u8], expected: u64, what: &str) -> Result<Vec<u8>, String> {
    let declared = match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(n)) => n,
        Ok(None) => {
            return Err(format!(
                "{what}: a zstd frame that does not declare its size"
            ))
        }
        Err(_) => return Err(format!("{what}: not a zstd frame")),
    };
    if declared != expected {
        return Err(format!(
            "{what}: a zstd frame declaring {declared} bytes where {expected} are due"
        ));
    }
    match zstd::zstd_safe::find_frame_compressed_size(frame) {
        Ok(n) if n == frame.len() => {}
        Ok(n) => {
            return Err(format!(
                "{what}: {} bytes after its zstd frame",
                frame.len().saturating_sub(n)
            ))
        }
        Err(code) => {
            return Err(format!(
                "{what}: a damaged zstd frame ({})",
                zstd::zstd_safe::get_error_name(code)
            ))
        }
    }
    let len = usize::try_from(expected).map_err(|_| format!("{what}: too large"))?;
    let out = with_zstd(|z| z.decompressor.decompress(frame, len))
        .map_err(|e| format!("{what}: a zstd frame that does not decompress: {e}"))?;
    if out.len() != len {
        return Err(format!(
            "{what}: {} bytes decompressed where {len} are due",
            out.len()
        ));
    }
    Ok(out)
}

/// The heads section of a record, opened: its header checked and its entry
/// heads and aux decoded.
#[derive(Debug, Clone)]
pub struct OpenHeads<'a> {
    /// The section header.
    pub section: HeadsSection,
    plain: Cow<'a, [u8]>,
}

impl<'a> OpenHeads<'a> {
    /// Opens the heads section `heads` of a record whose body section is
    /// `body_len` bytes, at most `max` bytes decoded in all.
    pub fn open(heads: &'a [u8], body_len: u32, max: u32) -> Result<OpenHeads<'a>, String> {
        let section = HeadsSection::parse(heads, body_len, max)?;
        let stored = &heads[HEADS_SECTION_HEADER_LEN as usize..];
        let plain = match section.heads_codec {
            CODEC_ZSTD => Cow::Owned(decompress_exact(
                stored,
                section.plain_len(),
                "the heads section",
            )?),
            _ => Cow::Borrowed(stored),
        };
        Ok(OpenHeads { section, plain })
    }

    /// The decoded entry heads and aux: borrowed from the section when it
    /// is plain, decompressed when it was not.
    pub fn into_plain(self) -> Cow<'a, [u8]> {
        self.plain
    }

    /// Number of entries.
    pub fn count(&self) -> usize {
        self.section.count as usize
    }

    /// The aux bytes of the record.
    pub fn aux(&self) -> &[u8] {
        self.plain
            .get(self.count() * ENTRY_HEAD_LEN..)
            .unwrap_or_default()
    }

    /// Entry head `i`, read and checked.
    pub fn raw(&self, i: usize) -> Result<RawHead<'_>, String> {
        raw_head(&self.section, &self.plain, i)
    }
}

/// Whether the version 2 record whose heads section is `heads` (its body
/// section `body_len` bytes) holds an entry of kind `kind`, from the kind
/// bytes of its entry heads alone (a compressed section decompressed, at
/// most `max` bytes): what a writer learns of a record as it walks the log
/// (the records that hold config deltas).
pub(crate) fn holds_kind(
    heads: &[u8],
    body_len: u32,
    max: u32,
    kind: Kind,
) -> Result<bool, String> {
    let open = OpenHeads::open(heads, body_len, max)?;
    Ok((0..open.count()).any(|i| kind_byte(&open.plain, i) == Some(kind.to_byte())))
}

/// [`holds_kind`] of a record whose heads section is stored plain; `None`
/// (not looked into) when it is compressed, so that a walk that only
/// notes the records holding a kind decompresses nothing.
pub(crate) fn holds_kind_if_plain(
    heads: &[u8],
    body_len: u32,
    max: u32,
    kind: Kind,
) -> Result<Option<bool>, String> {
    let section = HeadsSection::parse(heads, body_len, max)?;
    if section.heads_codec != CODEC_PLAIN {
        return Ok(None);
    }
    holds_kind(heads, body_len, max, kind).map(Some)
}

/// Entry head `i` of a record whose section header is `section` and whose
/// decoded entry heads and aux are `plain`, read and checked.
pub fn raw_head<'p>(
    section: &HeadsSection,
    plain: &'p [u8],
    i: usize,
) -> Result<RawHead<'p>, String> {
    let count = section.count as usize;
    let head = plain
        .get(i * ENTRY_HEAD_LEN..(i + 1) * ENTRY_HEAD_LEN)
        .filter(|_| i < count)
        .ok_or_else(|| format!("no entry head {i} of {count}"))?;
    let aux = plain.get(count * ENTRY_HEAD_LEN..).unwrap_or_default();
    RawHead::parse(head, aux, section.body_raw_len)
        .map_err(|e| format!("entry {i} of the record: {e}"))
}

/// The kind byte of entry head `i` of decoded heads `plain` (unchecked: for
/// telling metadata patches from entries before the head is read).
pub fn kind_byte(plain: &[u8], i: usize) -> Option<u8> {
    plain.get(i * ENTRY_HEAD_LEN).copied()
}

/// The decoded body of a record whose heads section header is `section`
/// from its stored body section `body` (whose checksum the caller checked),
/// at most `max` bytes: as it is, or its runs decompressed (on all cores).
pub fn decode_body<'a>(
    section: &HeadsSection,
    body: &'a [u8],
    max: u32,
) -> Result<Cow<'a, [u8]>, String> {
    if section.body_codec != CODEC_ZSTD {
        return Ok(Cow::Borrowed(body));
    }
    let le32 = |b: &[u8]| u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let count = body
        .get(..4)
        .map(le32)
        .ok_or("a compressed body without its run count")?;
    let table_len = 8u64 * u64::from(count);
    let table = usize::try_from(table_len)
        .ok()
        .and_then(|len| body.get(4..4 + len))
        .ok_or_else(|| {
            format!(
                "a compressed body of {} bytes claiming {count} runs",
                body.len()
            )
        })?;
    let mut runs = Vec::with_capacity(count as usize);
    let (mut raw_total, mut at) = (0u64, 4 + table.len());
    for pair in table.chunks_exact(8) {
        let (raw, stored) = (le32(&pair[..4]), le32(&pair[4..]));
        raw_total += u64::from(raw);
        let frame = body
            .get(at..at + stored as usize)
            .ok_or_else(|| format!("a body run of {stored} bytes past the end of the section"))?;
        runs.push((frame, u64::from(raw)));
        at += stored as usize;
    }
    if at != body.len() {
        return Err(format!(
            "{} bytes after the last run of a compressed body",
            body.len() - at
        ));
    }
    if raw_total != u64::from(section.body_raw_len) || raw_total > u64::from(max) {
        return Err(format!(
            "body runs of {raw_total} bytes in all where the heads declare {}",
            section.body_raw_len
        ));
    }
    let decoded = if runs.len() > 1 {
        crate::parallel::map_ordered(&runs, |&(frame, raw)| {
            decompress_exact(frame, raw, "a body run")
        })
    } else {
        runs.iter()
            .map(|&(frame, raw)| decompress_exact(frame, raw, "a body run"))
            .collect()
    };
    let mut out = Vec::with_capacity(section.body_raw_len as usize);
    for run in decoded {
        out.extend_from_slice(&run?);
    }
    Ok(Cow::Owned(out))
}

/// The bytes of `raw`'s entry in the record's decoded body.
pub fn entry_body<'b>(raw: &RawHead<'_>, body: &'b [u8]) -> Result<&'b [u8], String> {
    let start = raw.body_offset as usize;
    body.get(start..start + raw.body_len as usize)
        .ok_or_else(|| "an entry body past the end of its record's body".to_string())
}

/// The metadata patch of `raw` (of kind `MetaPatch`), from its body bytes.
pub fn decode_meta(raw: &RawHead<'_>, body: &[u8]) -> Result<MetaPatch, String> {
    let parts = BodyParts::new(raw, body)?;
    match AuxFields::read(raw.kind, raw.aux)? {
        AuxFields::MetaPatch { base_config } => Ok(MetaPatch {
            base_config,
            fields: parts.object(Part::Fields)?,
        }),
        other => Err(format!(
            "aux fields {other:?} where a metadata patch is due"
        )),
    }
}

/// A record's two sections opened: its entry heads read and its body
/// decoded (the body's checksum checked by the caller), for walking its
/// entries.
#[derive(Debug)]
pub struct OpenRecord<'a> {
    /// The heads section.
    pub heads: OpenHeads<'a>,
    /// The decoded body.
    pub body: Cow<'a, [u8]>,
}

impl<'a> OpenRecord<'a> {
    /// Opens the sections `heads` and `body`, at most `max` bytes decoded.
    pub fn open(heads: &'a [u8], body: &'a [u8], max: u32) -> Result<OpenRecord<'a>, String> {
        let body_len = u32::try_from(body.len()).map_err(|_| "a body beyond 4 GiB".to_string())?;
        let heads = OpenHeads::open(heads, body_len, max)?;
        let body = decode_body(&heads.section, body, max)?;
        Ok(OpenRecord { heads, body })
    }

    /// Number of entries (metadata patches included).
    pub fn count(&self) -> usize {
        self.heads.count()
    }

    /// Entry `i`: its head, read and checked, and its body bytes.
    pub fn entry(&self, i: usize) -> Result<(RawHead<'_>, &[u8]), String> {
        let raw = self.heads.raw(i)?;
        let bytes = entry_body(&raw, &self.body)?;
        Ok((raw, bytes))
    }
}

/// Every entry of a record, owned and in order, from its sections (the
/// body's checksum checked by the caller).
pub fn decode_record(heads: &[u8], body: &[u8], max: u32) -> Result<Vec<LogEntry>, String> {
    let record = OpenRecord::open(heads, body, max)?;
    let mut out = Vec::with_capacity(record.count());
    for i in 0..record.count() {
        let (raw, bytes) = record.entry(i)?;
        out.push(match raw.kind {
            Kind::MetaPatch => LogEntry::Meta(decode_meta(&raw, bytes)?),
            _ => LogEntry::Event(
                decode_entry(&raw, bytes).map_err(|e| format!("entry {i} of the record: {e}"))?,
            ),
        });
    }
    Ok(out)
}
