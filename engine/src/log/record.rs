//! The byte codec of a log: file header, record headers, record contents.
//!
//! Pure functions over byte slices; no I/O. The layout is specified in
//! `format-spec.md` (section 3); every constant here is named there. Two
//! framings exist, chosen by the file header's version and fixed for the
//! life of a log:
//!
//! - **version 1**: a 12-byte record header and one payload, a *batch* of
//!   length-prefixed entries under one checksum;
//! - **version 2**: a 20-byte record header and two sections, each with
//!   its own checksum: the *heads* section (a 16-byte section header, the
//!   fixed-size entry heads and their aux bytes, everything a view decides
//!   from) and the *body* section (the text and values the view only
//!   carries), so that a reader can check and use the heads without
//!   reading or checking the body.

/// First bytes of every log file: a byte with the high bit set (catches 7-bit
/// transports), the name, CR LF (catches newline translation).
pub const MAGIC: [u8; 8] = *b"\x89JPLOG\r\n";
/// Framing version 1: one checksummed batch per record.
pub const VERSION_1: u16 = 1;
/// Framing version 2: heads and body sections per record.
pub const VERSION_2: u16 = 2;
/// The newest framing version, which new conversations are created with.
pub const FORMAT_VERSION: u16 = VERSION_2;
/// Header flag of version 1: entries of this log may be packed (several
/// entries compressed into one, format-spec.md 4.2). A build that does not
/// know it refuses the file instead of misreading it.
pub const FLAG_PACKED: u16 = 0x0001;
/// Flags this build knows in a version 1 header; any other set bit is
/// refused. Version 2 defines no flag.
pub(crate) const KNOWN_FLAGS_V1: u16 = FLAG_PACKED;
/// Length of the file header; the first record starts here.
pub const FILE_HEADER_LEN: u64 = 16;
/// Length of a version 1 record header (payload length, payload crc,
/// header crc).
pub const RECORD_HEADER_LEN: u64 = 12;
/// Length of a version 2 record header (heads length, body length, heads
/// crc, body crc, header crc).
pub const RECORD_HEADER_LEN_V2: u64 = 20;
/// Smallest version 1 payload: a batch count.
pub(crate) const MIN_PAYLOAD_LEN: u32 = 4;
/// Length of the header of a version 2 heads section, its smallest size.
pub const HEADS_SECTION_HEADER_LEN: u32 = 16;
/// Length of one entry head in a version 2 heads section.
pub const ENTRY_HEAD_LEN: u32 = 32;
/// Section codec: the bytes as they are.
pub const CODEC_PLAIN: u8 = 0;
/// Section codec: zstd (heads: one frame; body: runs of frames).
pub const CODEC_ZSTD: u8 = 1;

/// The framing of a log, fixed by its file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Framing {
    /// Version 1: one batch per record.
    V1,
    /// Version 2: heads and body sections per record.
    V2,
}

impl Framing {
    /// The version number in the file header.
    pub fn version(self) -> u16 {
        match self {
            Framing::V1 => VERSION_1,
            Framing::V2 => VERSION_2,
        }
    }

    /// Length of a record header of this framing.
    pub(crate) fn record_header_len(self) -> u64 {
        match self {
            Framing::V1 => RECORD_HEADER_LEN,
            Framing::V2 => RECORD_HEADER_LEN_V2,
        }
    }
}

/// What a log's file header declares: its framing and flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogFormat {
    /// The framing of every record.
    pub framing: Framing,
    /// The flags (version 1 only; 0 in version 2).
    pub flags: u16,
}

impl LogFormat {
    /// Version 1 with `flags` (known ones only).
    pub fn v1(flags: u16) -> LogFormat {
        LogFormat {
            framing: Framing::V1,
            flags: flags & KNOWN_FLAGS_V1,
        }
    }

    /// Version 2 (no flags).
    pub fn v2() -> LogFormat {
        LogFormat {
            framing: Framing::V2,
            flags: 0,
        }
    }
}

/// The file header of a new log of `format`.
pub fn encode_file_header(format: LogFormat) -> [u8; FILE_HEADER_LEN as usize] {
    let flags = match format.framing {
        Framing::V1 => format.flags & KNOWN_FLAGS_V1,
        Framing::V2 => 0,
    };
    let mut h = [0u8; FILE_HEADER_LEN as usize];
    h[..8].copy_from_slice(&MAGIC);
    h[8..10].copy_from_slice(&format.framing.version().to_le_bytes());
    h[10..12].copy_from_slice(&flags.to_le_bytes());
    let crc = crc32fast::hash(&h[..12]);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}

/// What is wrong with a file header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderProblem {
    /// Bytes that are not a log header; `(offset, expected, found)`.
    Damaged(u64, &'static str, String),
    /// A valid header of a version or with flags this build does not know.
    Unsupported {
        /// The version found.
        version: u16,
        /// The flags found.
        flags: u16,
    },
}

/// Checks a file header (`bytes` may be short if the file is); returns the
/// log's format.
pub fn check_file_header(bytes: &[u8]) -> Result<LogFormat, HeaderProblem> {
    if bytes.len() < FILE_HEADER_LEN as usize {
        return Err(HeaderProblem::Damaged(
            0,
            "a 16-byte log file header",
            format!("a file of {} bytes", bytes.len()),
        ));
    }
    if bytes[..8] != MAGIC {
        return Err(HeaderProblem::Damaged(
            0,
            "the log magic 89 4a 50 4c 4f 47 0d 0a",
            hex(&bytes[..8]),
        ));
    }
    let stored = le32(&bytes[12..16]);
    let actual = crc32fast::hash(&bytes[..12]);
    if stored != actual {
        return Err(HeaderProblem::Damaged(
            12,
            "a file header checksum matching bytes 0..12",
            format!("{stored:#010x} (computed {actual:#010x})"),
        ));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    let flags = u16::from_le_bytes([bytes[10], bytes[11]]);
    match version {
        VERSION_1 if flags & !KNOWN_FLAGS_V1 == 0 => Ok(LogFormat {
            framing: Framing::V1,
            flags,
        }),
        VERSION_2 if flags == 0 => Ok(LogFormat::v2()),
        // No jp-store writes version 0: damage, not a newer format.
        0 => Err(HeaderProblem::Damaged(
            8,
            "log format version 1 or 2",
            "version 0, which no jp-store writes".into(),
        )),
        _ => Err(HeaderProblem::Unsupported { version, flags }),
    }
}

/// A record header whose checksum matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordHeader {
    /// Version 1: one payload.
    V1 {
        /// Length of the payload that follows the header.
        payload_len: u32,
        /// crc32 of the payload.
        payload_crc: u32,
    },
    /// Version 2: a heads section, then a body section.
    V2 {
        /// Length of the heads section.
        heads_len: u32,
        /// Length of the body section as stored.
        body_len: u32,
        /// crc32 of the heads section.
        heads_crc: u32,
        /// crc32 of the body section.
        body_crc: u32,
        /// crc32 of bytes 0..16 of the header (so of both lengths and both
        /// section checksums).
        header_crc: u32,
    },
}

impl RecordHeader {
    /// Bytes after the header: the payload, or both sections.
    pub fn content_len(&self) -> u64 {
        match *self {
            RecordHeader::V1 { payload_len, .. } => u64::from(payload_len),
            RecordHeader::V2 {
                heads_len,
                body_len,
                ..
            } => u64::from(heads_len) + u64::from(body_len),
        }
    }

    /// Length of the header.
    pub fn header_len(&self) -> u64 {
        match self {
            RecordHeader::V1 { .. } => RECORD_HEADER_LEN,
            RecordHeader::V2 { .. } => RECORD_HEADER_LEN_V2,
        }
    }

    /// Total bytes of the record on disk.
    pub fn record_len(&self) -> u64 {
        self.header_len() + self.content_len()
    }

    /// The checksum that stands for the whole record (what a head cache
    /// records, format-spec.md 4.6): version 1, the payload crc; version
    /// 2, the header crc, which covers both section checksums.
    pub fn record_crc(&self) -> u32 {
        match *self {
            RecordHeader::V1 { payload_crc, .. } => payload_crc,
            RecordHeader::V2 { header_crc, .. } => header_crc,
        }
    }
}

/// Decodes a record header of `framing` from the first bytes of `bytes`,
/// or `None` if they are too few or its checksum does not match (a torn or
/// damaged header: none of its fields may be used).
pub fn decode_record_header(framing: Framing, bytes: &[u8]) -> Option<RecordHeader> {
    match framing {
        Framing::V1 => {
            let b = bytes.get(..RECORD_HEADER_LEN as usize)?;
            (le32(&b[8..12]) == crc32fast::hash(&b[..8])).then(|| RecordHeader::V1 {
                payload_len: le32(&b[0..4]),
                payload_crc: le32(&b[4..8]),
            })
        }
        Framing::V2 => {
            let b = bytes.get(..RECORD_HEADER_LEN_V2 as usize)?;
            let header_crc = le32(&b[16..20]);
            (header_crc == crc32fast::hash(&b[..16])).then(|| RecordHeader::V2 {
                heads_len: le32(&b[0..4]),
                body_len: le32(&b[4..8]),
                heads_crc: le32(&b[8..12]),
                body_crc: le32(&b[12..16]),
                header_crc,
            })
        }
    }
}

/// Encoded payload length of a version 1 batch, or `None` beyond `u64`
/// (never in practice).
pub fn payload_len<E: AsRef<[u8]>>(entries: &[E]) -> Option<u64> {
    entries
        .iter()
        .try_fold(u64::from(MIN_PAYLOAD_LEN), |acc, e| {
            acc.checked_add(4)?.checked_add(e.as_ref().len() as u64)
        })
}

/// A whole record (header and content) ready to be written, with the
/// checksum that stands for it ([`RecordHeader::record_crc`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FramedRecord {
    /// The record's bytes.
    pub bytes: Vec<u8>,
    /// Its record checksum.
    pub record_crc: u32,
    /// Its framing.
    pub framing: Framing,
}

impl FramedRecord {
    /// A version 1 record of a batch, or the size of its payload if that
    /// is over `max`.
    pub fn batch<E: AsRef<[u8]>>(entries: &[E], max: u32) -> Result<FramedRecord, u64> {
        let size = payload_len(entries).unwrap_or(u64::MAX);
        if size > u64::from(max) {
            return Err(size);
        }
        let bytes = encode_record(entries);
        let record_crc = le32(&bytes[4..8]);
        let record = FramedRecord {
            bytes,
            record_crc,
            framing: Framing::V1,
        };
        assert_eq!(
            record.bytes.len() as u64,
            RECORD_HEADER_LEN + size,
            "a version 1 record is its header and the batch measured"
        );
        record.assert_framed();
        Ok(record)
    }

    /// A version 2 record of a heads section and a body section, or their
    /// total size if that is over `max`.
    pub fn split(heads: &[u8], body: &[u8], max: u32) -> Result<FramedRecord, u64> {
        let size = heads.len() as u64 + body.len() as u64;
        if size > u64::from(max) {
            return Err(size);
        }
        let bytes = encode_record_v2(heads, body);
        let record_crc = le32(&bytes[16..20]);
        let record = FramedRecord {
            bytes,
            record_crc,
            framing: Framing::V2,
        };
        assert_eq!(
            record.bytes.len() as u64,
            RECORD_HEADER_LEN_V2 + size,
            "a version 2 record is its header and its two sections"
        );
        record.assert_framed();
        Ok(record)
    }

    /// Asserts what format-spec.md section 3 ("Byte layout") makes of a
    /// record: its header reads (its own checksum matches) and says the
    /// record's length and the checksum that stands for it. The checksums
    /// of the content are computed again in debug builds only (they cost
    /// a pass over the record).
    pub(crate) fn assert_framed(&self) {
        let header = decode_record_header(self.framing, &self.bytes);
        assert!(
            header
                .is_some_and(|h| h.record_len() == self.bytes.len() as u64
                    && h.record_crc() == self.record_crc),
            "a framed record of {} bytes whose header does not say so",
            self.bytes.len()
        );
        debug_assert!(
            header.is_some_and(|h| {
                let content = &self.bytes[h.header_len() as usize..];
                match h {
                    RecordHeader::V1 { payload_crc, .. } => crc32fast::hash(content) == payload_crc,
                    RecordHeader::V2 {
                        heads_len,
                        heads_crc,
                        body_crc,
                        ..
                    } => {
                        let (heads, body) = content.split_at(heads_len as usize);
                        crc32fast::hash(heads) == heads_crc && crc32fast::hash(body) == body_crc
                    }
                }
            }),
            "a framed record whose content does not match its checksums"
        );
    }
}

/// Encodes a whole version 1 record (header and payload) for a batch.
///
/// The caller has checked that [`payload_len`] fits the limit (and so `u32`);
/// a batch too large for that is encoded with saturated lengths, which no
/// reader accepts.
pub(crate) fn encode_record<E: AsRef<[u8]>>(entries: &[E]) -> Vec<u8> {
    let payload_len = payload_len(entries).unwrap_or(u64::MAX);
    let payload_len = u32::try_from(payload_len).unwrap_or(u32::MAX);
    let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
    let mut rec = Vec::with_capacity(RECORD_HEADER_LEN as usize + payload_len as usize);
    rec.extend_from_slice(&[0u8; RECORD_HEADER_LEN as usize]);
    put_batch(&mut rec, count, entries);
    let payload_crc = crc32fast::hash(&rec[RECORD_HEADER_LEN as usize..]);
    rec[0..4].copy_from_slice(&payload_len.to_le_bytes());
    rec[4..8].copy_from_slice(&payload_crc.to_le_bytes());
    let header_crc = crc32fast::hash(&rec[0..8]);
    rec[8..12].copy_from_slice(&header_crc.to_le_bytes());
    rec
}

/// Encodes a whole version 2 record: header, heads section, body section.
/// Sections longer than `u32` are encoded with saturated lengths, which no
/// reader accepts (writers check the limit first).
pub fn encode_record_v2(heads: &[u8], body: &[u8]) -> Vec<u8> {
    let mut rec = Vec::with_capacity(RECORD_HEADER_LEN_V2 as usize + heads.len() + body.len());
    let heads_len = u32::try_from(heads.len()).unwrap_or(u32::MAX);
    let body_len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    rec.extend_from_slice(&heads_len.to_le_bytes());
    rec.extend_from_slice(&body_len.to_le_bytes());
    rec.extend_from_slice(&crc32fast::hash(heads).to_le_bytes());
    rec.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    let header_crc = crc32fast::hash(&rec[0..16]);
    rec.extend_from_slice(&header_crc.to_le_bytes());
    rec.extend_from_slice(heads);
    rec.extend_from_slice(body);
    rec
}

/// Encodes a batch (count, then each entry with its length) alone: the
/// payload of a version 1 record, and the content of a packed entry.
pub fn encode_batch<E: AsRef<[u8]>>(entries: &[E]) -> Vec<u8> {
    let len = payload_len(entries).unwrap_or(0);
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
    put_batch(&mut out, count, entries);
    out
}

fn put_batch<E: AsRef<[u8]>>(out: &mut Vec<u8>, count: u32, entries: &[E]) {
    out.extend_from_slice(&count.to_le_bytes());
    for e in entries {
        let e = e.as_ref();
        let len = u32::try_from(e.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(e);
    }
}

/// Splits a checksum-valid payload into its entries, or says why it is not a
/// batch (as "found ..." text; the caller adds the offset).
pub(crate) fn decode_batch(payload: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut entries = Vec::new();
    walk_batch(payload, |e| entries.push(e.to_vec()))?;
    Ok(entries)
}

/// Checks the batch structure without copying entries; returns the count.
pub(crate) fn check_batch(payload: &[u8]) -> Result<u32, String> {
    walk_batch(payload, |_| {})
}

/// Hands each entry of a batch to `each`, or says why the bytes are not a
/// batch.
pub fn walk_batch<'a>(payload: &'a [u8], mut each: impl FnMut(&'a [u8])) -> Result<u32, String> {
    let Some((count, mut rest)) = split_u32(payload) else {
        return Err(format!(
            "a payload of {} bytes, too short for a batch count",
            payload.len()
        ));
    };
    for i in 0..count {
        let Some((len, after)) = split_u32(rest) else {
            return Err(format!(
                "the payload ends inside the length of entry {i} of {count}"
            ));
        };
        let len = len as usize;
        if len > after.len() {
            return Err(format!(
                "entry {i} of {count} claiming {len} bytes where {} remain",
                after.len()
            ));
        }
        each(&after[..len]);
        rest = &after[len..];
    }
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes after the last of {count} entries",
            rest.len()
        ));
    }
    Ok(count)
}

/// The header of a version 2 heads section (its first 16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadsSection {
    /// Number of entries (and of entry heads).
    pub count: u32,
    /// Length of the aux bytes after the entry heads.
    pub aux_len: u32,
    /// Length of the body once decoded (the offsets of entry heads point
    /// into it).
    pub body_raw_len: u32,
    /// How the entry heads and aux are stored: [`CODEC_PLAIN`], or
    /// [`CODEC_ZSTD`] (one frame holding both).
    pub heads_codec: u8,
    /// How the body is stored: [`CODEC_PLAIN`], or [`CODEC_ZSTD`] (runs).
    pub body_codec: u8,
}

impl HeadsSection {
    /// The 16 bytes of this section header.
    pub fn encode(&self) -> [u8; HEADS_SECTION_HEADER_LEN as usize] {
        let mut h = [0u8; HEADS_SECTION_HEADER_LEN as usize];
        h[0..4].copy_from_slice(&self.count.to_le_bytes());
        h[4..8].copy_from_slice(&self.aux_len.to_le_bytes());
        h[8..12].copy_from_slice(&self.body_raw_len.to_le_bytes());
        h[12] = self.heads_codec;
        h[13] = self.body_codec;
        h
    }

    /// Bytes of the entry heads and aux once decoded.
    pub fn plain_len(&self) -> u64 {
        u64::from(self.count) * u64::from(ENTRY_HEAD_LEN) + u64::from(self.aux_len)
    }

    /// Reads and checks the header of the heads section `heads` of a
    /// record whose body section is `body_len` bytes: the codecs are known,
    /// the reserved bytes are 0, a plain section is exactly as long as its
    /// count and aux length say, a plain body exactly as long as its raw
    /// length, and what the sections decode to is at most `max` bytes in
    /// all (so it is bounded before anything is allocated). Says why not
    /// as "found ..." text.
    pub fn parse(heads: &[u8], body_len: u32, max: u32) -> Result<HeadsSection, String> {
        let Some(h) = heads.get(..HEADS_SECTION_HEADER_LEN as usize) else {
            return Err(format!(
                "a heads section of {} bytes, shorter than its 16-byte header",
                heads.len()
            ));
        };
        let section = HeadsSection {
            count: le32(&h[0..4]),
            aux_len: le32(&h[4..8]),
            body_raw_len: le32(&h[8..12]),
            heads_codec: h[12],
            body_codec: h[13],
        };
        if h[14..16] != [0, 0] {
            return Err(format!(
                "reserved bytes {} in the heads section header",
                hex(&h[14..16])
            ));
        }
        for (what, codec) in [("heads", section.heads_codec), ("body", section.body_codec)] {
            if codec != CODEC_PLAIN && codec != CODEC_ZSTD {
                return Err(format!("{what} codec {codec}, not 0 (plain) or 1 (zstd)"));
            }
        }
        let plain = section.plain_len();
        let raw = plain + u64::from(section.body_raw_len);
        if raw > u64::from(max) {
            return Err(format!(
                "sections declaring {raw} bytes once decoded, more than a record holds ({max})"
            ));
        }
        let stored = heads.len() as u64 - u64::from(HEADS_SECTION_HEADER_LEN);
        if section.heads_codec == CODEC_PLAIN && stored != plain {
            return Err(format!(
                "{stored} bytes of entry heads and aux where {} heads and {} aux bytes take {plain}",
                section.count, section.aux_len
            ));
        }
        if section.heads_codec == CODEC_ZSTD && stored == 0 {
            return Err("a compressed heads section without its frame".into());
        }
        if section.body_codec == CODEC_PLAIN && body_len != section.body_raw_len {
            return Err(format!(
                "a plain body of {body_len} bytes where the heads declare {}",
                section.body_raw_len
            ));
        }
        if section.body_codec == CODEC_ZSTD && body_len < 4 {
            return Err(format!(
                "a compressed body of {body_len} bytes, too short for its run count"
            ));
        }
        Ok(section)
    }
}

/// A part of a record whose checksum is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// The payload of a version 1 record.
    Payload,
    /// The heads section of a version 2 record.
    Heads,
    /// The body section of a version 2 record.
    Body,
}

impl Section {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            Section::Payload => "payload",
            Section::Heads => "heads section",
            Section::Body => "body section",
        }
    }
}

/// Why the content of a record (after a valid header) is not valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ContentFault {
    /// A section's checksum does not match.
    Checksum {
        /// Which section.
        section: Section,
        /// The checksum in the record header.
        stored: u32,
        /// The checksum of the bytes as read.
        computed: u32,
    },
    /// The checksums match but the content is not of its framing's shape.
    Malformed(String),
}

/// Checks the content (the bytes after the header) of a record whose
/// header is `header`: every checksum (the body's only if `check_body`),
/// then the structure (a batch; a heads section header consistent with the
/// sections, `max` bounding what they decode to). Returns the heads
/// section header of a version 2 record.
pub(crate) fn check_content(
    header: &RecordHeader,
    content: &[u8],
    max: u32,
    check_body: bool,
) -> Result<Option<HeadsSection>, ContentFault> {
    let mismatch = |section, stored: u32, bytes: &[u8]| {
        let computed = crc32fast::hash(bytes);
        (computed != stored).then_some(ContentFault::Checksum {
            section,
            stored,
            computed,
        })
    };
    match *header {
        RecordHeader::V1 { payload_crc, .. } => {
            if let Some(fault) = mismatch(Section::Payload, payload_crc, content) {
                return Err(fault);
            }
            check_batch(content)
                .map(|_| None)
                .map_err(ContentFault::Malformed)
        }
        RecordHeader::V2 {
            heads_len,
            body_len,
            heads_crc,
            body_crc,
            ..
        } => {
            let split = (heads_len as usize).min(content.len());
            let (heads, body) = content.split_at(split);
            if let Some(fault) = mismatch(Section::Heads, heads_crc, heads) {
                return Err(fault);
            }
            if check_body {
                if let Some(fault) = mismatch(Section::Body, body_crc, body) {
                    return Err(fault);
                }
            }
            HeadsSection::parse(heads, body_len, max)
                .map(Some)
                .map_err(ContentFault::Malformed)
        }
    }
}

/// Whether `content` is the valid content of the record whose header is
/// `header`: every checksum matches (structure not checked). For callers
/// that only need to know that a record is intact, such as a head cache
/// judging its last covered record.
pub fn check_content_whole(header: &RecordHeader, content: &[u8]) -> bool {
    matches!(
        check_content(header, content, u32::MAX, true),
        Ok(_) | Err(ContentFault::Malformed(_))
    )
}

/// The smallest content a valid header of this kind may announce, or why
/// it is too small.
pub(crate) fn check_min_len(header: &RecordHeader) -> Result<(), String> {
    match *header {
        RecordHeader::V1 { payload_len, .. } if payload_len < MIN_PAYLOAD_LEN => Err(format!(
            "a payload length of {payload_len}, too short for a batch count"
        )),
        RecordHeader::V2 { heads_len, .. } if heads_len < HEADS_SECTION_HEADER_LEN => Err(format!(
            "a heads section length of {heads_len}, shorter than its 16-byte header"
        )),
        _ => Ok(()),
    }
}

fn split_u32(b: &[u8]) -> Option<(u32, &[u8])> {
    if b.len() < 4 {
        return None;
    }
    Some((le32(&b[..4]), &b[4..]))
}

/// A little-endian u32 from the first 4 bytes of `b` (the caller ensures
/// there are 4).
pub(crate) fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_of(rec: &[u8]) -> RecordHeader {
        decode_record_header(Framing::V1, rec).expect("valid header")
    }

    /// The worked example of `format-spec.md` (section 3), byte for byte.
    #[test]
    fn bytes_match_the_spec_example() {
        assert_eq!(
            encode_file_header(LogFormat::v1(0)),
            [
                0x89, 0x4a, 0x50, 0x4c, 0x4f, 0x47, 0x0d, 0x0a, 0x01, 0x00, 0x00, 0x00, 0x82, 0x53,
                0x6d, 0x0c
            ]
        );
        let entries: [&[u8]; 2] = [b"hi", b""];
        assert_eq!(
            encode_record(&entries),
            [
                0x0e, 0x00, 0x00, 0x00, 0x5c, 0xf5, 0xa5, 0x44, 0x5f, 0x01, 0xbd, 0xe0, 0x02, 0x00,
                0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x68, 0x69, 0x00, 0x00, 0x00, 0x00
            ]
        );
    }

    /// The worked example of version 2 in `format-spec.md` (section 3):
    /// a heads section of no entry and 2 aux bytes, and a body of 2 bytes.
    #[test]
    fn bytes_match_the_spec_example_of_version_2() {
        assert_eq!(
            encode_file_header(LogFormat::v2()),
            [
                0x89, 0x4a, 0x50, 0x4c, 0x4f, 0x47, 0x0d, 0x0a, 0x02, 0x00, 0x00, 0x00, 0x6c, 0xfc,
                0xd8, 0x1e
            ]
        );
        let section = HeadsSection {
            count: 0,
            aux_len: 2,
            body_raw_len: 2,
            heads_codec: CODEC_PLAIN,
            body_codec: CODEC_PLAIN,
        };
        let mut heads = section.encode().to_vec();
        heads.extend_from_slice(b"hi");
        let rec = encode_record_v2(&heads, b"yo");
        assert_eq!(
            rec,
            [
                0x12, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x8e, 0xe3, 0xca, 0x1b, 0x89, 0xac,
                0x29, 0x62, 0x3e, 0xbc, 0x74, 0x15, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00,
                0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x68, 0x69, 0x79, 0x6f
            ]
        );
        let h = decode_record_header(Framing::V2, &rec).expect("valid header");
        assert_eq!(h.record_len(), rec.len() as u64);
        assert!(check_content(&h, &rec[20..], 1 << 20, true).is_ok());
    }

    #[test]
    fn record_round_trips() {
        let entries: Vec<Vec<u8>> = vec![b"one".to_vec(), Vec::new(), vec![0xff; 300]];
        let rec = encode_record(&entries);
        let h = header_of(&rec);
        assert_eq!(h.record_len(), rec.len() as u64);
        assert_eq!(h.content_len(), payload_len(&entries).expect("len"));
        let payload = &rec[12..];
        assert_eq!(crc32fast::hash(payload), h.record_crc());
        assert_eq!(decode_batch(payload).expect("batch"), entries);
        assert_eq!(check_batch(payload), Ok(3));
    }

    #[test]
    fn any_flipped_header_bit_is_detected() {
        let v1 = encode_record(&[b"x".to_vec()]);
        let v2 = encode_record_v2(&[0u8; 16], b"");
        for (framing, rec) in [(Framing::V1, v1), (Framing::V2, v2)] {
            let len = framing.record_header_len() as usize;
            for byte in 0..len {
                for bit in 0..8 {
                    let mut h = rec[..len].to_vec();
                    h[byte] ^= 1 << bit;
                    assert_eq!(
                        decode_record_header(framing, &h),
                        None,
                        "{framing:?} byte {byte} bit {bit}"
                    );
                }
            }
            assert_eq!(
                decode_record_header(framing, &vec![0u8; len]),
                None,
                "zeros pass as a header"
            );
            assert_eq!(decode_record_header(framing, &rec[..len - 1]), None);
        }
    }

    #[test]
    fn malformed_batches_are_refused() {
        // count 2, one entry of 1 byte: ends inside entry 1's length
        let p = [2, 0, 0, 0, 1, 0, 0, 0, b'a'];
        assert!(decode_batch(&p).is_err());
        // entry claiming more than remains
        let p = [1, 0, 0, 0, 9, 0, 0, 0, b'a'];
        assert!(decode_batch(&p).is_err());
        // trailing bytes
        let p = [1, 0, 0, 0, 1, 0, 0, 0, b'a', b'b'];
        assert!(decode_batch(&p).is_err());
        // hostile count with no room for entries
        let p = [0xff, 0xff, 0xff, 0xff];
        assert!(decode_batch(&p).is_err());
        assert!(decode_batch(&[1, 0]).is_err());
        assert_eq!(decode_batch(&[0, 0, 0, 0]), Ok(Vec::new()));
    }

    #[test]
    fn heads_section_headers_are_checked_before_anything_is_allocated() {
        let ok = HeadsSection {
            count: 1,
            aux_len: 3,
            body_raw_len: 5,
            heads_codec: CODEC_PLAIN,
            body_codec: CODEC_PLAIN,
        };
        let mut heads = ok.encode().to_vec();
        heads.extend_from_slice(&[0u8; 35]);
        assert_eq!(HeadsSection::parse(&heads, 5, 1000), Ok(ok));
        // The body must be as long as declared when plain.
        assert!(HeadsSection::parse(&heads, 4, 1000).is_err());
        // Heads and aux must be exactly as long as declared.
        assert!(HeadsSection::parse(&heads[..heads.len() - 1], 5, 1000).is_err());
        // Decoded sizes above the limit, hostile counts included.
        assert!(HeadsSection::parse(&heads, 5, 39).is_err());
        for (at, value) in [(0usize, u32::MAX), (4, u32::MAX), (8, u32::MAX)] {
            let mut bad = heads.clone();
            bad[at..at + 4].copy_from_slice(&value.to_le_bytes());
            assert!(HeadsSection::parse(&bad, 5, 64 << 20).is_err(), "at {at}");
        }
        // Unknown codecs and reserved bytes.
        for at in [12usize, 13, 14, 15] {
            let mut bad = heads.clone();
            bad[at] = 7;
            assert!(HeadsSection::parse(&bad, 5, 1000).is_err(), "at {at}");
        }
        assert!(HeadsSection::parse(&heads[..15], 5, 1000).is_err());
    }

    #[test]
    fn file_header_is_checked() {
        let h = encode_file_header(LogFormat::v1(0));
        assert_eq!(check_file_header(&h), Ok(LogFormat::v1(0)));
        assert_eq!(
            check_file_header(&encode_file_header(LogFormat::v1(FLAG_PACKED))),
            Ok(LogFormat::v1(FLAG_PACKED))
        );
        assert_eq!(
            check_file_header(&encode_file_header(LogFormat::v2())),
            Ok(LogFormat::v2())
        );
        let with = |version: u16, flags: u16| {
            let mut b = encode_file_header(LogFormat::v1(0));
            b[8..10].copy_from_slice(&version.to_le_bytes());
            b[10..12].copy_from_slice(&flags.to_le_bytes());
            let crc = crc32fast::hash(&b[..12]);
            b[12..16].copy_from_slice(&crc.to_le_bytes());
            b
        };
        for (version, flags) in [(1, 2), (2, 1), (3, 0)] {
            assert_eq!(
                check_file_header(&with(version, flags)),
                Err(HeaderProblem::Unsupported { version, flags })
            );
        }
        assert!(matches!(
            check_file_header(&with(0, 0)),
            Err(HeaderProblem::Damaged(8, _, _))
        ));
        assert!(matches!(
            check_file_header(&h[..15]),
            Err(HeaderProblem::Damaged(0, _, _))
        ));
        let mut bad = h;
        bad[3] ^= 1;
        assert!(matches!(
            check_file_header(&bad),
            Err(HeaderProblem::Damaged(0, _, _))
        ));
        let mut bad = h;
        bad[9] ^= 1;
        assert!(matches!(
            check_file_header(&bad),
            Err(HeaderProblem::Damaged(12, _, _))
        ));
    }
}
