//! The binary form of entries in version 2 logs (format-spec.md 4.2,
//! "Entries of version 2"): per entry a fixed 32-byte head, its *aux* bytes
//! (what the projection, deduplication, gc and `view --refs` decide from:
//! call ids, tool names, resources and their blob references, compaction
//! fields) and its *body* parts (the text and values a view only carries:
//! messages, reasoning, arguments, metadata, ...). The heads and aux of a
//! record are read and checked without its body.
//!
//! Entry head (32 bytes, little endian):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 1 | kind ([`Kind`]) |
//! | 1 | 1 | flags: bit 0 `is_error`, bit 1 `plain` (tool call responses only); other bits 0 |
//! | 2 | 2 | reserved, 0 |
//! | 4 | 4 | offset of the entry's aux in the record's aux bytes |
//! | 8 | 4 | length of the entry's aux |
//! | 12 | 4 | timestamp: nanoseconds (below 10⁹) |
//! | 16 | 8 | timestamp: seconds since the Unix epoch (i64; years 0000 to 9999) |
//! | 24 | 4 | offset of the entry's body in the record's decoded body |
//! | 28 | 4 | length of the entry's body |
//!
//! The aux of an entry starts with its *part table* (a byte `n`, then `n`
//! pairs of a part tag byte and a varint length): the body parts of the
//! entry in order, back to back from its body offset, their lengths
//! summing to its body length. Then come the kind's own fields
//! ([`encode`] writes them, [`crate::event::head`] and [`decode`] read
//! them).
//!
//! Modules: [`wire`] (varints, strings, blob references), [`value`] (JSON
//! values), [`encode`] and [`decode`] (an [`Entry`](crate::event::Entry)
//! to and from its head, aux and body).

pub mod decode;
pub mod encode;
pub mod value;
pub mod wire;

use super::kind::byte_tags;
pub use super::kind::Kind;
use crate::timestamp::Timestamp;

use wire::Reader;

/// Length of an entry head.
pub const ENTRY_HEAD_LEN: usize = 32;

/// Flag: the tool failed (`tool_call_response`).
pub const FLAG_IS_ERROR: u8 = 0x01;
/// Flag: the content was given as one string (`tool_call_response`).
pub const FLAG_PLAIN: u8 = 0x02;

impl Kind {
    /// The body parts an entry of this kind must have, in order.
    pub fn required_parts(self) -> &'static [Part] {
        match self {
            Kind::ChatRequest => &[Part::Content],
            Kind::Message => &[Part::Message],
            Kind::Reasoning => &[Part::Reasoning],
            Kind::Data => &[Part::Data],
            Kind::ToolCallRequest => &[Part::Arguments],
            Kind::InquiryRequest => &[Part::Source, Part::Question],
            Kind::InquiryResponse => &[Part::Answer],
            Kind::ConfigDelta => &[Part::Delta],
            Kind::Unknown => &[Part::Entry],
            Kind::TurnStart
            | Kind::ToolCallResponse
            | Kind::Compaction
            | Kind::CompactionUndo
            | Kind::MetaPatch => &[],
        }
    }

    /// The body parts an entry of this kind may have after its required
    /// ones, in order.
    pub fn optional_parts(self) -> &'static [Part] {
        match self {
            Kind::ChatRequest => &[Part::Schema, Part::Metadata, Part::Extra],
            Kind::Unknown => &[],
            Kind::MetaPatch => &[Part::Fields],
            Kind::TurnStart
            | Kind::Message
            | Kind::Reasoning
            | Kind::Data
            | Kind::ToolCallRequest
            | Kind::ToolCallResponse
            | Kind::InquiryRequest
            | Kind::InquiryResponse
            | Kind::ConfigDelta
            | Kind::Compaction
            | Kind::CompactionUndo => &[Part::Metadata, Part::Extra],
        }
    }
}

byte_tags! {
    /// A body part: which field of the entry it holds (its tag byte in a
    /// part table).
    pub enum Part {
        /// `content` of a `chat_request` (UTF-8 text).
        Content = 1,
        /// `message` (UTF-8 text).
        Message = 2,
        /// `reasoning` (UTF-8 text).
        Reasoning = 3,
        /// `data` (a value).
        Data = 4,
        /// `arguments` of a tool call (an object).
        Arguments = 5,
        /// `source` of an inquiry (an object).
        Source = 6,
        /// `question` of an inquiry (an object).
        Question = 7,
        /// `answer` of an inquiry (a value).
        Answer = 8,
        /// `delta` of a config delta (an object).
        Delta = 9,
        /// `schema` of a `chat_request` (an object).
        Schema = 10,
        /// The event's `metadata` (an object).
        Metadata = 11,
        /// The event's fields this build does not know (an object).
        Extra = 12,
        /// A whole entry of unknown type (an object).
        Entry = 13,
        /// The `fields` merge patch of a metadata patch (an object).
        Fields = 14,
    }
}

impl Part {
    /// Whether the part is UTF-8 text (else a value).
    pub fn is_text(self) -> bool {
        matches!(self, Part::Content | Part::Message | Part::Reasoning)
    }

    /// The JSON name of the field it holds.
    pub fn name(self) -> &'static str {
        match self {
            Part::Content => "content",
            Part::Message => "message",
            Part::Reasoning => "reasoning",
            Part::Data => "data",
            Part::Arguments => "arguments",
            Part::Source => "source",
            Part::Question => "question",
            Part::Answer => "answer",
            Part::Delta => "delta",
            Part::Schema => "schema",
            Part::Metadata => "metadata",
            Part::Extra => "extra",
            Part::Entry => "entry",
            Part::Fields => "fields",
        }
    }
}

/// Most body parts an entry has (chat requests: content, schema, metadata,
/// extra).
pub const MAX_PARTS: usize = 4;

/// The part table of an entry: its body parts in order, with their lengths.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Parts {
    items: [(u8, u32); MAX_PARTS],
    len: u8,
}

impl Parts {
    /// The parts, in order: `(part, offset in the entry's body, length)`.
    pub fn iter(&self) -> impl Iterator<Item = (Part, u32, u32)> + '_ {
        let mut offset = 0u32;
        self.items[..usize::from(self.len)]
            .iter()
            .filter_map(move |&(tag, len)| {
                let at = offset;
                offset = offset.saturating_add(len);
                Part::from_byte(tag).map(|p| (p, at, len))
            })
    }

    /// Offset (in the entry's body) and length of `part`, if present.
    pub fn find(&self, part: Part) -> Option<(u32, u32)> {
        self.iter()
            .find(|(p, _, _)| *p == part)
            .map(|(_, o, l)| (o, l))
    }

    /// Adds a part (the encoder's: at most [`MAX_PARTS`], in order).
    pub(crate) fn push(&mut self, part: Part, len: u32) {
        if let Some(slot) = self.items.get_mut(usize::from(self.len)) {
            *slot = (part as u8, len);
            self.len += 1;
        }
    }

    /// The table's bytes, as the aux starts with them.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        out.push(self.len);
        for &(tag, len) in &self.items[..usize::from(self.len)] {
            out.push(tag);
            wire::put_varint(out, u64::from(len));
        }
    }

    /// Reads the part table at the start of an entry's aux and checks it
    /// against the entry's kind (required parts present, parts in order,
    /// none of another kind) and body length.
    pub fn read(r: &mut Reader<'_>, kind: Kind, body_len: u32) -> Result<Parts, String> {
        let n = r.u8()?;
        if usize::from(n) > MAX_PARTS {
            return Err(r.error(format_args!("{n} body parts")));
        }
        // The parts of a kind, required then optional, come in increasing
        // tag order: "in order" is "tags increasing".
        let mask = |parts: &[Part]| parts.iter().fold(0u32, |m, p| m | 1 << (*p as u8));
        let required = mask(kind.required_parts());
        let allowed = required | mask(kind.optional_parts());
        let mut parts = Parts::default();
        let (mut seen, mut last, mut total) = (0u32, 0u8, 0u64);
        for _ in 0..n {
            let tag = r.u8()?;
            if tag <= last || tag >= 32 || allowed & (1 << tag) == 0 {
                let name = Part::from_byte(tag).map_or("unknown", Part::name);
                return Err(r.error(format_args!(
                    "body part {tag} ({name}) out of order or not of a {kind:?} entry"
                )));
            }
            last = tag;
            seen |= 1 << tag;
            let len = r.varint_u32()?;
            total += u64::from(len);
            parts.items[usize::from(parts.len)] = (tag, len);
            parts.len += 1;
        }
        if required & !seen != 0 {
            let missing = kind
                .required_parts()
                .iter()
                .find(|p| seen & (1 << (**p as u8)) == 0)
                .map_or("?", |p| p.name());
            return Err(r.error(format_args!("no body part {missing} for a {kind:?} entry")));
        }
        if total != u64::from(body_len) {
            return Err(r.error(format_args!(
                "body parts of {total} bytes in all where the head says {body_len}"
            )));
        }
        Ok(parts)
    }
}

/// An entry head as read from a record, its aux borrowed from the
/// record's aux bytes and its body part table read. Nothing of the body is
/// read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawHead<'a> {
    /// The kind.
    pub kind: Kind,
    /// The flags ([`FLAG_IS_ERROR`], [`FLAG_PLAIN`]).
    pub flags: u8,
    /// The timestamp (the epoch for unknown entries and metadata patches,
    /// which have none).
    pub timestamp: Timestamp,
    /// The entry's aux after its part table.
    pub aux: &'a [u8],
    /// Offset of the entry's body in the record's decoded body.
    pub body_offset: u32,
    /// Length of the entry's body.
    pub body_len: u32,
    /// The body parts.
    pub parts: Parts,
}

impl<'a> RawHead<'a> {
    /// Reads the head `head` (32 bytes) of a record whose aux bytes are
    /// `aux` and whose decoded body is `body_raw_len` bytes: every field
    /// checked (kind, flags, reserved bytes, timestamp, the aux and body
    /// ranges inside the record, the part table).
    pub fn parse(head: &[u8], aux: &'a [u8], body_raw_len: u32) -> Result<RawHead<'a>, String> {
        let h: &[u8; ENTRY_HEAD_LEN] = head
            .try_into()
            .map_err(|_| format!("an entry head of {} bytes, not 32", head.len()))?;
        let le32 = |at: usize| u32::from_le_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let kind = Kind::from_byte(h[0]).ok_or_else(|| format!("entry kind {:#04x}", h[0]))?;
        let flags = h[1];
        let allowed_flags = match kind {
            Kind::ToolCallResponse => FLAG_IS_ERROR | FLAG_PLAIN,
            _ => 0,
        };
        if flags & !allowed_flags != 0 {
            return Err(format!("flags {flags:#04x} on a {kind:?} entry"));
        }
        if h[2..4] != [0, 0] {
            return Err(format!(
                "reserved bytes {:02x} {:02x} in an entry head",
                h[2], h[3]
            ));
        }
        let (aux_offset, aux_len) = (le32(4), le32(8));
        let nanos = le32(12);
        let mut secs_bytes = [0u8; 8];
        secs_bytes.copy_from_slice(&h[16..24]);
        let secs = i64::from_le_bytes(secs_bytes);
        let timestamp = Timestamp::from_unix(secs, nanos)
            .ok_or_else(|| format!("a timestamp of {secs} s and {nanos} ns, out of range"))?;
        if matches!(kind, Kind::Unknown | Kind::MetaPatch) && (secs, nanos) != (0, 0) {
            return Err(format!("a timestamp on a {kind:?} entry, which has none"));
        }
        let (body_offset, body_len) = (le32(24), le32(28));
        let aux_end = u64::from(aux_offset) + u64::from(aux_len);
        let entry_aux = usize::try_from(aux_end)
            .ok()
            .and_then(|end| aux.get(aux_offset as usize..end))
            .ok_or_else(|| {
                format!(
                    "aux bytes {aux_offset}..{aux_end} of an entry beyond the {} aux bytes of its record",
                    aux.len()
                )
            })?;
        if u64::from(body_offset) + u64::from(body_len) > u64::from(body_raw_len) {
            return Err(format!(
                "body bytes {body_offset}+{body_len} of an entry beyond the {body_raw_len} body bytes of its record"
            ));
        }
        let mut r = Reader::new(entry_aux);
        let parts = Parts::read(&mut r, kind, body_len)?;
        Ok(RawHead {
            kind,
            flags,
            timestamp,
            aux: r.rest(),
            body_offset,
            body_len,
            parts,
        })
    }

    /// Range (in the record's decoded body) of `part`, if the entry has it.
    pub fn part_range(&self, part: Part) -> Option<std::ops::Range<usize>> {
        self.parts.find(part).map(|(offset, len)| {
            let start = self.body_offset as usize + offset as usize;
            start..start + len as usize
        })
    }
}

/// Writes an entry head.
#[allow(clippy::too_many_arguments)]
pub(crate) fn put_head(
    out: &mut Vec<u8>,
    kind: Kind,
    flags: u8,
    timestamp: Option<Timestamp>,
    aux_offset: u32,
    aux_len: u32,
    body_offset: u32,
    body_len: u32,
) {
    let (secs, nanos) = timestamp.map_or((0, 0), |t| (t.unix_secs(), t.subsec_nanos()));
    out.push(kind.to_byte());
    out.push(flags);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&aux_offset.to_le_bytes());
    out.extend_from_slice(&aux_len.to_le_bytes());
    out.extend_from_slice(&nanos.to_le_bytes());
    out.extend_from_slice(&secs.to_le_bytes());
    out.extend_from_slice(&body_offset.to_le_bytes());
    out.extend_from_slice(&body_len.to_le_bytes());
}
