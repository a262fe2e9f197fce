//! A version 2 log read into memory for its view (format-spec.md 3,
//! "Reading"): the whole file in one read, every record's framing and heads
//! checked, the body of a record checked (and decompressed) only when
//! something of it is used. Records from the proven end on, where a crash
//! may have torn a body under intact heads, are checked whole as they are
//! walked, so a torn record is never seen.
//!
//! Entries are read where they lie: [`LogImage::heads`] borrows every entry
//! head from the image, [`LogImage::entry_body`] an entry's head with its record's decoded body, and
//! [`LogImage::entry`] decodes one entry to the owned model when a caller
//! needs it.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::OnceLock;

use super::codec::LogEntry;
use super::meta::MetaPatch;
use super::sections::{self, decode_body, decode_meta, entry_body, OpenHeads};
use super::state::ConversationState;
use super::ConversationId;
use crate::error::{Error, Result};
use crate::event::binary::decode::{decode_entry, AuxFields, BodyParts};
use crate::event::binary::{Kind, Part, RawHead};
use crate::event::head::EntryHead;
use crate::event::{BlobRef, Entry, Object};
use crate::log::{
    Framing, HeadsSection, LogEnd, LogReader, RecordHeader, Step, Walker, CODEC_ZSTD, FIRST_RECORD,
};

/// The decoded entry heads and aux of a record.
#[derive(Debug)]
enum PlainHeads {
    /// Plain in the file: where.
    InFile(Range<usize>),
    /// Decompressed.
    Decompressed(Vec<u8>),
}

/// One record of an image.
#[derive(Debug)]
struct ImageRecord {
    offset: u64,
    record_crc: u32,
    section: HeadsSection,
    heads: PlainHeads,
    body: Range<usize>,
    body_crc: u32,
    body_checked: bool,
    /// The body once checked: `None` when it is plain (it is read where it
    /// lies), else its decompressed bytes.
    decoded: OnceLock<std::result::Result<Option<Vec<u8>>, String>>,
}

/// Where an entry or metadata patch lies: its record and its place there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    record: u32,
    index: u32,
}

/// An entry of an image with its head and aux fields read (and checked).
#[derive(Debug, Clone)]
pub struct ParsedEntry<'a> {
    /// The entry head.
    pub raw: RawHead<'a>,
    /// Its aux fields.
    pub fields: AuxFields<'a>,
    /// Offset of its record.
    pub offset: u64,
}

/// Entries parsed, and their heads, in order
/// ([`LogImage::parse_entries_and_heads`]).
pub type ParsedAndHeads<'a> = (Vec<ParsedEntry<'a>>, Vec<EntryHead<'a>>);

/// Entries of an image parsed on all cores from this many on.
const PARALLEL_PARSE: usize = 4096;

/// A version 2 log in memory ([`LogImage::read`]).
#[derive(Debug)]
pub struct LogImage {
    id: ConversationId,
    path: std::path::PathBuf,
    max: u32,
    bytes: Vec<u8>,
    records: Vec<ImageRecord>,
    /// The conversation's entries, in order.
    entries: Vec<Place>,
    /// Every entry and metadata patch, in order (`true`: a patch).
    order: Vec<(Place, bool)>,
    log_end: u64,
    torn_tail: Option<crate::log::TornTail>,
}

impl LogImage {
    /// Reads the version 2 log `reader` opened (with the proven end its
    /// caller knows) into memory and checks the framing and heads of every
    /// record (and the bodies from the proven end on). It ends quietly at a
    /// torn tail (a record being written is not there yet); damage is an
    /// error naming the file and offset, confirmed by a second read.
    pub fn read(reader: &mut LogReader, id: &ConversationId) -> Result<LogImage> {
        if reader.format().framing != Framing::V2 {
            return Err(Error::WrongFraming {
                path: reader.path().to_path_buf(),
                log: reader.format().framing.version(),
                record: Framing::V2.version(),
            });
        }
        let (bytes, len) = reader.take_file()?;
        match Self::read_bytes(reader, id, bytes, len) {
            // Damage seen while a writer cut a torn tail and appended over
            // it is not there on a second look, of the file as it is then
            // (`take_file` reads it again); real damage is.
            Err(e) if e.is_corruption() => {
                let (again, len) = reader.take_file()?;
                Self::read_bytes(reader, id, again, len)
            }
            other => other,
        }
    }

    /// Walks `bytes`, the first bytes of the log, which was `len` bytes
    /// long ([`LogReader::take_file`]).
    fn read_bytes(
        reader: &LogReader,
        id: &ConversationId,
        bytes: Vec<u8>,
        len: u64,
    ) -> Result<LogImage> {
        let path = reader.path().to_path_buf();
        let max = reader.options().max_record_size;
        let corrupt = |offset: u64, found: String| Error::Corrupt {
            path: path.clone(),
            offset,
            expected: "a heads section whose entry heads read".into(),
            found,
        };
        let mut walker = Walker::in_memory(&bytes, len, Framing::V2, max)
            .with_proven_end(reader.proven_end())
            .with_lazy_bodies();
        // Sized for a short log's records at once (a vector grown from
        // nothing allocates three times for ten records, and a short view
        // is made of a few dozen allocations); a long log's grow.
        let mut records = Vec::with_capacity((bytes.len() / 128).min(256));
        let mut pos = FIRST_RECORD;
        let io = |source| Error::Io {
            op: "read",
            path: path.clone(),
            source,
        };
        let log_end = loop {
            match walker.step(pos).map_err(io)? {
                Step::Record {
                    header:
                        header @ RecordHeader::V2 {
                            heads_len,
                            body_len,
                            body_crc,
                            ..
                        },
                    body_checked,
                    section,
                } => {
                    let start = (pos + header.header_len()) as usize;
                    let heads_end = start + heads_len as usize;
                    let body = heads_end..heads_end + body_len as usize;
                    let plain_start = start + crate::log::HEADS_SECTION_HEADER_LEN as usize;
                    // The walk checked the section header: a plain section
                    // is read where it lies.
                    let (section, heads) = match section {
                        Some(section) if section.heads_codec != CODEC_ZSTD => {
                            (section, PlainHeads::InFile(plain_start..heads_end))
                        }
                        _ => {
                            let open = OpenHeads::open(&bytes[start..heads_end], body_len, max)
                                .map_err(|found| corrupt(pos, found))?;
                            let section = open.section;
                            match open.into_plain() {
                                Cow::Borrowed(_) => {
                                    (section, PlainHeads::InFile(plain_start..heads_end))
                                }
                                Cow::Owned(v) => (section, PlainHeads::Decompressed(v)),
                            }
                        }
                    };
                    records.push(ImageRecord {
                        offset: pos,
                        record_crc: header.record_crc(),
                        section,
                        heads,
                        body,
                        body_crc,
                        body_checked,
                        decoded: OnceLock::new(),
                    });
                    pos += header.record_len();
                }
                Step::Record { .. } => {
                    return Err(corrupt(pos, "a version 1 record in a version 2 log".into()))
                }
                Step::End(LogEnd::Damaged { offset, damage }) => {
                    return Err(damage.to_error(&path, offset))
                }
                Step::End(end) => break end,
            }
        };
        let torn_tail = crate::log::TornTail::of(Some(&log_end));
        let log_end = log_end.valid_end();
        let mut image = LogImage {
            id: id.clone(),
            path,
            max,
            bytes,
            records,
            entries: Vec::new(),
            order: Vec::new(),
            log_end,
            torn_tail,
        };
        let count: usize = image.records.iter().map(|r| r.section.count as usize).sum();
        let mut order = Vec::with_capacity(count);
        for (r, record) in image.records.iter().enumerate() {
            let plain = image.plain(record);
            for i in 0..record.section.count {
                let place = Place {
                    record: r as u32,
                    index: i,
                };
                let is_meta = sections::kind_byte(plain, i as usize) == Some(Kind::MetaPatch as u8);
                order.push((place, is_meta));
            }
        }
        let mut entries = Vec::with_capacity(order.len());
        entries.extend(order.iter().filter(|(_, meta)| !meta).map(|(p, _)| *p));
        image.entries = entries;
        image.order = order;
        Ok(image)
    }

    /// The conversation's id.
    pub fn id(&self) -> &ConversationId {
        &self.id
    }

    /// The log file, as the storage displays it.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Where the records read end.
    pub fn log_end(&self) -> u64 {
        self.log_end
    }

    /// What the read left out after the last whole record.
    pub fn torn_tail(&self) -> Option<crate::log::TornTail> {
        self.torn_tail
    }

    /// Number of records read.
    pub fn records(&self) -> usize {
        self.records.len()
    }

    /// Number of entries (metadata patches are not entries).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the conversation has no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Offset and record checksum of the first and of the last record.
    pub fn first_and_last(&self) -> Option<((u64, u32), (u64, u32))> {
        let first = self.records.first()?;
        let last = self.records.last()?;
        Some((
            (first.offset, first.record_crc),
            (last.offset, last.record_crc),
        ))
    }

    fn plain<'s>(&'s self, record: &'s ImageRecord) -> &'s [u8] {
        match &record.heads {
            PlainHeads::InFile(range) => self.bytes.get(range.clone()).unwrap_or_default(),
            PlainHeads::Decompressed(v) => v,
        }
    }

    fn corrupt(&self, offset: u64, found: String) -> Error {
        Error::Corrupt {
            path: self.path.clone(),
            offset,
            expected: "entries whose heads, aux and body parts read".into(),
            found,
        }
    }

    fn raw_at(&self, place: Place) -> Result<(RawHead<'_>, u64)> {
        let record = &self.records[place.record as usize];
        sections::raw_head(&record.section, self.plain(record), place.index as usize)
            .map(|raw| (raw, record.offset))
            .map_err(|found| self.corrupt(record.offset, found))
    }

    /// The head of entry `i` as stored (kind, flags, timestamp, aux, body
    /// range), and the offset of its record.
    pub fn raw(&self, i: usize) -> Result<(RawHead<'_>, u64)> {
        self.raw_at(self.place(i)?)
    }

    /// Where entry `i` lies.
    fn place(&self, i: usize) -> Result<Place> {
        self.entries.get(i).copied().ok_or_else(|| {
            self.corrupt(
                self.log_end,
                format!("no entry {i} of {}", self.entries.len()),
            )
        })
    }

    /// The decoded body of record `r`, its checksum checked the first time
    /// (and it decompressed) unless the walk checked it.
    fn record_body(&self, r: usize) -> Result<&[u8]> {
        let record = &self.records[r];
        let stored = self.bytes.get(record.body.clone()).unwrap_or_default();
        let state = record.decoded.get_or_init(|| {
            if !record.body_checked {
                let computed = crc32fast::hash(stored);
                if computed != record.body_crc {
                    return Err(format!(
                        "a body section with checksum {computed:#010x} where its record header stores {:#010x}: damage to a record the log held whole; run `jp-store fsck --repair`",
                        record.body_crc
                    ));
                }
            }
            if record.section.body_codec == CODEC_ZSTD {
                decode_body(&record.section, stored, self.max).map(|b| Some(b.into_owned()))
            } else {
                Ok(None)
            }
        });
        match state {
            Ok(None) => Ok(stored),
            Ok(Some(decoded)) => Ok(decoded),
            Err(found) => Err(self.corrupt(record.offset, found.clone())),
        }
    }

    /// The body bytes of entry `raw` of the record at `record_offset`
    /// (checked before they are handed out).
    fn body_of(&self, raw: &RawHead<'_>, record_offset: u64) -> Result<&[u8]> {
        let r = self
            .records
            .binary_search_by_key(&record_offset, |r| r.offset)
            .map_err(|_| self.corrupt(record_offset, "no record there".into()))?;
        self.body_in(raw, r)
    }

    /// The body bytes of entry `raw` of record `r` (checked before they are
    /// handed out).
    fn body_in(&self, raw: &RawHead<'_>, r: usize) -> Result<&[u8]> {
        let body = self.record_body(r)?;
        entry_body(raw, body).map_err(|found| self.corrupt(self.records[r].offset, found))
    }

    /// The head of entry `i`, its body bytes (checked first) and the
    /// offset of its record; `BodyParts::new(&head, body)` reads its parts.
    pub fn entry_body(&self, i: usize) -> Result<(RawHead<'_>, &[u8], u64)> {
        let place = self.place(i)?;
        let (raw, offset) = self.raw_at(place)?;
        let body = self.body_in(&raw, place.record as usize)?;
        Ok((raw, body, offset))
    }

    /// An error of damage in entry `i`'s record, with what was found.
    pub fn damage(&self, i: usize, found: String) -> Error {
        let offset = self
            .entries
            .get(i)
            .and_then(|p| self.records.get(p.record as usize))
            .map_or(self.log_end, |r| r.offset);
        self.corrupt(offset, found)
    }

    /// The heads of every entry, in order: checked (aux read whole), config
    /// deltas decoded from their bodies. Nothing else of a body is read.
    pub fn heads(&self) -> Result<Vec<EntryHead<'_>>> {
        Ok(self.parse_entries_and_heads()?.1)
    }

    /// Every entry's head and aux fields, read and checked, in order (on
    /// all cores for long logs).
    pub fn parse_entries(&self) -> Result<Vec<ParsedEntry<'_>>> {
        Ok(self.parse_chunks(false)?.0)
    }

    /// [`LogImage::parse_entries`] and the entries' heads (config deltas
    /// decoded from their bodies), in one pass (on all cores for long
    /// logs).
    pub fn parse_entries_and_heads(&self) -> Result<ParsedAndHeads<'_>> {
        self.parse_chunks(true)
    }

    /// Every entry parsed, and its head if `heads`, in order: on all cores,
    /// in one chunk of entries each, for long logs. (Each chunk's vectors
    /// are sized first: collected through `Result`, they grew from nothing,
    /// moving every entry at each growth.)
    fn parse_chunks(&self, heads: bool) -> Result<ParsedAndHeads<'_>> {
        let parse = |places: &[Place]| -> Result<ParsedAndHeads<'_>> {
            // The first chunk's vectors take the others after them: sized
            // for all entries.
            let room = if std::ptr::eq(places.as_ptr(), self.entries.as_ptr()) {
                self.entries.len()
            } else {
                places.len()
            };
            let mut parsed = Vec::with_capacity(room);
            let mut made = Vec::with_capacity(if heads { room } else { 0 });
            for &place in places {
                let p = self.parsed(place)?;
                if heads {
                    made.push(self.head_of(&p)?);
                }
                parsed.push(p);
            }
            Ok((parsed, made))
        };
        let threads = crate::parallel::cores();
        if self.entries.len() < PARALLEL_PARSE || threads < 2 {
            return parse(&self.entries);
        }
        let chunks: Vec<&[Place]> = self
            .entries
            .chunks(self.entries.len().div_ceil(threads))
            .collect();
        let mut parts = crate::parallel::map_ordered(&chunks, |c| parse(c)).into_iter();
        let (mut parsed, mut made) = parts
            .next()
            .unwrap_or_else(|| Ok((Vec::new(), Vec::new())))?;
        parsed.reserve(self.entries.len() - parsed.len());
        made.reserve(if heads {
            self.entries.len() - made.len()
        } else {
            0
        });
        for part in parts {
            let (mut p, mut h) = part?;
            parsed.append(&mut p);
            made.append(&mut h);
        }
        Ok((parsed, made))
    }

    /// The entry at `place`, its head and aux fields read and checked.
    fn parsed(&self, place: Place) -> Result<ParsedEntry<'_>> {
        let (raw, offset) = self.raw_at(place)?;
        let fields =
            AuxFields::read(raw.kind, raw.aux).map_err(|found| self.corrupt(offset, found))?;
        Ok(ParsedEntry {
            raw,
            fields,
            offset,
        })
    }

    /// The head of the entry `p`, a config delta decoded from its body.
    fn head_of<'a>(&'a self, p: &ParsedEntry<'a>) -> Result<EntryHead<'a>> {
        EntryHead::from_fields(&p.raw, &p.fields, &mut |raw| {
            let body = self.body_of(raw, p.offset).map_err(|e| e.to_string())?;
            BodyParts::new(raw, body)?.object(Part::Delta)
        })
        .map_err(|found| self.corrupt(p.offset, found))
    }

    /// Entry `i`, decoded to the owned model (its body checked first).
    pub fn entry(&self, i: usize) -> Result<Entry> {
        let (raw, offset) = self.raw(i)?;
        let body = self.body_of(&raw, offset)?;
        decode_entry(&raw, body).map_err(|found| self.corrupt(offset, found))
    }

    /// The base config of the conversation: that of the last metadata patch
    /// that sets one (read from aux: no body is read).
    pub fn base_config(&self) -> Result<Option<BlobRef>> {
        let mut base = None;
        for &(place, is_meta) in &self.order {
            if !is_meta {
                continue;
            }
            let (raw, offset) = self.raw_at(place)?;
            match AuxFields::read(raw.kind, raw.aux) {
                Ok(AuxFields::MetaPatch {
                    base_config: Some(b),
                }) => base = Some(b),
                Ok(_) => {}
                Err(found) => return Err(self.corrupt(offset, found)),
            }
        }
        Ok(base)
    }

    /// The config deltas of the conversation with their entry indices, in
    /// order (their bodies checked and decoded; nothing else is read).
    pub fn config_deltas(&self) -> Result<Vec<(usize, Object)>> {
        let mut out = Vec::new();
        for (i, &place) in self.entries.iter().enumerate() {
            let record = &self.records[place.record as usize];
            if sections::kind_byte(self.plain(record), place.index as usize)
                != Some(Kind::ConfigDelta as u8)
            {
                continue;
            }
            let (raw, offset) = self.raw_at(place)?;
            let body = self.body_of(&raw, offset)?;
            let delta = BodyParts::new(&raw, body)
                .and_then(|parts| parts.object(Part::Delta))
                .map_err(|found| self.corrupt(offset, found))?;
            out.push((i, delta));
        }
        Ok(out)
    }

    /// Every entry and metadata patch decoded, in order, with the offset of
    /// each entry's record, and the state they fold to; records decoded on
    /// all cores when there are many.
    pub fn decode_all(&self) -> Result<(Vec<Entry>, Vec<u64>, ConversationState)> {
        let decode_record = |r: &usize| -> Result<Vec<LogEntry>> {
            let record = &self.records[*r];
            let body = self.record_body(*r)?;
            let plain = self.plain(record);
            (0..record.section.count as usize)
                .map(|i| {
                    let raw = sections::raw_head(&record.section, plain, i)
                        .map_err(|found| self.corrupt(record.offset, found))?;
                    let bytes = entry_body(&raw, body)
                        .map_err(|found| self.corrupt(record.offset, found))?;
                    match raw.kind {
                        Kind::MetaPatch => decode_meta(&raw, bytes).map(LogEntry::Meta),
                        _ => decode_entry(&raw, bytes).map(LogEntry::Event),
                    }
                    .map_err(|found| self.corrupt(record.offset, format!("entry {i}: {found}")))
                })
                .collect()
        };
        let indices: Vec<usize> = (0..self.records.len()).collect();
        let decoded: Vec<Result<Vec<LogEntry>>> =
            if self.bytes.len() < 256 * 1024 || crate::parallel::cores() < 2 {
                indices.iter().map(decode_record).collect()
            } else {
                crate::parallel::map_ordered(&indices, decode_record)
            };
        let mut state = ConversationState::default();
        let mut entries = Vec::with_capacity(self.entries.len());
        let mut offsets = Vec::with_capacity(self.entries.len());
        for (r, decoded) in decoded.into_iter().enumerate() {
            state.records += 1;
            for entry in decoded? {
                state.apply(&entry);
                if let LogEntry::Event(e) = entry {
                    entries.push(e);
                    offsets.push(self.records[r].offset);
                }
            }
        }
        Ok((entries, offsets, state))
    }

    /// The state the log folds to (metadata, counts, turns), from the
    /// heads of its entries (`heads`: [`LogImage::heads`] of this image)
    /// and its metadata patches, as a listing folds it: no other entry is
    /// decoded.
    pub fn state(&self, heads: &[EntryHead<'_>]) -> Result<ConversationState> {
        let mut state = ConversationState {
            records: self.records.len() as u64,
            ..ConversationState::default()
        };
        let mut heads = heads.iter();
        for &(place, is_meta) in &self.order {
            if is_meta {
                let (raw, offset) = self.raw_at(place)?;
                let body = self.body_of(&raw, offset)?;
                let patch = decode_meta(&raw, body).map_err(|found| self.corrupt(offset, found))?;
                state.apply(&LogEntry::Meta(patch));
            } else {
                let head = heads.next().ok_or_else(|| {
                    self.corrupt(self.log_end, "fewer entry heads than entries".into())
                })?;
                state.apply_head(head);
            }
        }
        Ok(state)
    }

    /// The metadata patches, decoded, in order.
    pub fn metadata_patches(&self) -> Result<Vec<MetaPatch>> {
        let mut out = Vec::new();
        for &(place, is_meta) in &self.order {
            if is_meta {
                let (raw, offset) = self.raw_at(place)?;
                let body = self.body_of(&raw, offset)?;
                out.push(decode_meta(&raw, body).map_err(|found| self.corrupt(offset, found))?);
            }
        }
        Ok(out)
    }
}
