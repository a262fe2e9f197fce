//! Encoding of log entries (format-spec.md section 4.2).
//!
//! Each entry of a log record is one byte of kind followed by a MessagePack
//! value (maps with field names, as `rmp_serde::to_vec_named` writes them):
//!
//! | kind | value |
//! |---|---|
//! | `0x01` | an [`Entry`] (an event or a verbatim unknown entry) |
//! | `0x02` | a [`MetaPatch`] (a change of the conversation's metadata) |
//! | `0x03` | packed: one zstd frame holding a batch of `0x01`/`0x02` entries |
//!
//! Readers refuse other kinds: a log with entries this build cannot read is
//! reported, never skipped. A writer packs a batch ([`pack`]) only in a log
//! whose header has the flag [`FLAG_PACKED`](crate::log::FLAG_PACKED), so a
//! build that does not know packed entries refuses such a log as a whole.

use std::cell::RefCell;

use serde::{Deserialize, Serialize};

use super::meta::MetaPatch;
use crate::event::Entry;

/// Kind byte of an event entry.
pub const KIND_EVENT: u8 = 0x01;
/// Kind byte of a metadata patch.
pub const KIND_META: u8 = 0x02;
/// Kind byte of a packed run of entries.
pub const KIND_PACKED: u8 = 0x03;

/// Encoded batches smaller than this stay plain. Unpacking a frame has a
/// fixed cost (about 10,000 instructions: tables rebuilt per frame), which
/// for the small batches of an agent's appends (a few KiB) is more than
/// decoding their entries; large batches (imports, forks, long answers)
/// amortize it and shrink the most.
pub const PACK_MIN: usize = 16 * 1024;
/// zstd level of packed entries (the blob store's default).
const PACK_LEVEL: i32 = 3;
/// A large batch is packed in runs of entries of about this many bytes, one
/// packed entry each ([`pack_runs`]): readers unpack them on all cores, and
/// none has to hold a whole import's text decompressed at once.
pub const PACK_RUN: usize = 1 << 20;

/// Deepest nesting of MessagePack containers a reader accepts.
pub const MAX_DEPTH: usize = 256;

/// One entry of a log record.
#[derive(Debug, Clone, PartialEq)]
// Short-lived (decoded and folded one at a time); events are the common case.
#[allow(clippy::large_enum_variant)]
pub enum LogEntry {
    /// An event (or unknown entry) of the conversation.
    Event(Entry),
    /// A change of the conversation's metadata.
    Meta(MetaPatch),
}

fn encode_value<T: Serialize>(kind: u8, value: &T) -> Vec<u8> {
    let mut out = vec![kind];
    // Serializing these types into a Vec cannot fail: every map key is a
    // string and every value has a MessagePack form.
    if let Err(e) = rmp_serde::encode::write_named(&mut out, value) {
        unreachable!("MessagePack encoding of a log entry failed: {e}");
    }
    out
}

/// Encodes one entry.
pub fn encode(entry: &LogEntry) -> Vec<u8> {
    match entry {
        LogEntry::Event(e) => encode_value(KIND_EVENT, e),
        LogEntry::Meta(m) => encode_value(KIND_META, m),
    }
}

/// Encodes an event entry.
pub fn encode_event(entry: &Entry) -> Vec<u8> {
    encode_value(KIND_EVENT, entry)
}

/// Encodes a metadata patch.
pub fn encode_meta(patch: &MetaPatch) -> Vec<u8> {
    encode_value(KIND_META, patch)
}

fn decode_value<T: for<'a> Deserialize<'a>>(bytes: &[u8], what: &str) -> Result<T, String> {
    // Strings are copied straight out of `bytes` (no intermediate buffer).
    let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
    // serde_json refuses input nested deeper than 128, so nothing appended
    // is deeper than this; the limit keeps hostile bytes off the stack.
    de.set_max_depth(MAX_DEPTH);
    let value = T::deserialize(&mut de).map_err(|e| format!("an undecodable {what}: {e}"))?;
    // The value must be all of `bytes`: reading one more value must find
    // the end of the input at its very first byte.
    match serde::de::IgnoredAny::deserialize(&mut de) {
        Err(rmp_serde::decode::Error::InvalidMarkerRead(e))
            if e.kind() == std::io::ErrorKind::UnexpectedEof =>
        {
            Ok(value)
        }
        // Rare: count the extra bytes with a reader that tracks its place.
        _ => {
            let mut de = rmp_serde::Deserializer::new(std::io::Cursor::new(bytes));
            de.set_max_depth(MAX_DEPTH);
            let extra = match serde::de::IgnoredAny::deserialize(&mut de) {
                Ok(_) => bytes.len() as u64 - de.position(),
                Err(_) => 0,
            };
            Err(format!("{extra} bytes after the {what}"))
        }
    }
}

/// Checks that encoded entry bytes decode again (a value nested deeper than
/// readers accept, [`MAX_DEPTH`], does not), so that nothing is acknowledged
/// that cannot be read back.
pub fn check_readable(bytes: &[u8]) -> Result<(), String> {
    decode(bytes).map(|_| ())
}

/// The encoded entries of a batch as they go into a record (format-spec.md
/// 4.2): split into consecutive runs of about [`PACK_RUN`] bytes, each run
/// replaced by one packed entry where [`pack`] finds that worth it and kept
/// plain otherwise. Runs are compressed on all cores. `None` when no run is
/// packed: the entries go in as they are.
pub fn pack_runs(entries: &[Vec<u8>]) -> Option<Vec<Vec<u8>>> {
    let total: usize = entries.iter().map(|e| e.len() + 4).sum();
    if total < PACK_MIN {
        return None;
    }
    let mut runs: Vec<&[Vec<u8>]> = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, e) in entries.iter().enumerate() {
        bytes += e.len() + 4;
        if bytes >= PACK_RUN {
            runs.push(&entries[start..=i]);
            (start, bytes) = (i + 1, 0);
        }
    }
    if start < entries.len() {
        runs.push(&entries[start..]);
    }
    let packed = crate::parallel::map_ordered(&runs, |run| pack(run));
    if packed.iter().all(Option::is_none) {
        return None;
    }
    let mut out = Vec::new();
    for (run, packed) in runs.into_iter().zip(packed) {
        match packed {
            Some(p) => out.push(p),
            None => out.extend_from_slice(run),
        }
    }
    Some(out)
}

/// The encoded entries of a batch as one packed entry (format-spec.md 4.2),
/// if the batch is at least [`PACK_MIN`] bytes and packing saves at least an
/// eighth of them; `None` keeps the entries as they are.
pub fn pack(entries: &[Vec<u8>]) -> Option<Vec<u8>> {
    let batch = crate::log::encode_batch(entries);
    if batch.len() < PACK_MIN {
        return None;
    }
    // Single-shot compression writes the content size into the frame
    // header, which readers require.
    let frame = with_zstd(|z| z.compressor.compress(&batch)).ok()?;
    if 1 + frame.len() > batch.len() - batch.len() / 8 {
        return None;
    }
    let mut out = Vec::with_capacity(1 + frame.len());
    out.push(KIND_PACKED);
    out.extend_from_slice(&frame);
    Some(out)
}

/// This thread's zstd contexts for packed entries and version 2 sections.
pub(crate) struct Zstd {
    pub(crate) compressor: zstd::bulk::Compressor<'static>,
    pub(crate) decompressor: zstd::bulk::Decompressor<'static>,
}

thread_local! {
    /// Creating a zstd context costs more than packing or unpacking a small
    /// batch (a log of appends holds thousands of packed records), so each
    /// thread keeps one pair.
    static ZSTD: RefCell<Option<Zstd>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's contexts (made on first use; dropped after
/// an error, so a context that saw damaged input is never reused).
pub(crate) fn with_zstd<T>(f: impl FnOnce(&mut Zstd) -> std::io::Result<T>) -> std::io::Result<T> {
    ZSTD.with(|cell| {
        let mut slot = cell.borrow_mut();
        let zstd = match slot.as_mut() {
            Some(z) => z,
            None => slot.insert(Zstd {
                compressor: zstd::bulk::Compressor::new(PACK_LEVEL)?,
                decompressor: zstd::bulk::Decompressor::new()?,
            }),
        };
        let result = f(zstd);
        if result.is_err() {
            *slot = None;
        }
        result
    })
}

/// Decodes one entry of a record into `out`: one entry, or every entry of a
/// packed one ([`unpack`]).
pub fn decode_all(bytes: &[u8], max_plain: u32, out: &mut Vec<LogEntry>) -> Result<(), String> {
    unpack(bytes, max_plain)?.each(|e| {
        out.push(decode(e)?);
        Ok(())
    })
}

/// The plain entries one entry of a record stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unpacked<'a> {
    /// A plain entry: itself.
    Plain(&'a [u8]),
    /// A packed entry: the batch it holds (checked to be a batch, and to
    /// hold no packed entry, as [`Unpacked::each`] walks it).
    Batch(Vec<u8>),
}

impl Unpacked<'_> {
    /// Hands each plain entry to `f`, in order; stops at the first error.
    pub fn each<'s>(
        &'s self,
        mut f: impl FnMut(&'s [u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        match self {
            Unpacked::Plain(e) => f(e),
            Unpacked::Batch(batch) => {
                let mut result = Ok(());
                crate::log::walk_batch(batch, |e| {
                    if result.is_ok() {
                        result = match e.first() {
                            Some(&KIND_PACKED) => {
                                Err("a packed entry inside a packed entry".to_string())
                            }
                            _ => f(e),
                        };
                    }
                })
                .map_err(|found| format!("a packed entry whose content is not a batch: {found}"))?;
                result
            }
        }
    }
}

/// Whether an entry is packed (kind `0x03`).
pub fn is_packed(bytes: &[u8]) -> bool {
    bytes.first() == Some(&KIND_PACKED)
}

/// The content size a packed entry's frame declares (`None` for a plain
/// entry, or a frame that declares none: [`unpack`] refuses that).
pub fn declared_size(bytes: &[u8]) -> Option<u64> {
    match bytes.split_first() {
        Some((&KIND_PACKED, frame)) => zstd::zstd_safe::get_frame_content_size(frame)
            .ok()
            .flatten(),
        _ => None,
    }
}

/// Checks that the packed entries of one record declare no more in all
/// than `max_plain` (the record limit holds for the batch before packing,
/// however many runs it was packed in): called before unpacking any of
/// them, so that a record of many packed entries cannot expand past it.
pub fn check_declared<'a>(
    entries: impl IntoIterator<Item = &'a [u8]>,
    max_plain: u32,
) -> Result<(), String> {
    let declared = entries
        .into_iter()
        .filter_map(declared_size)
        .fold(0u64, u64::saturating_add);
    if declared > u64::from(max_plain) {
        return Err(format!(
            "packed entries declaring {declared} bytes in all, more than a record holds ({max_plain})"
        ));
    }
    Ok(())
}

/// Undoes the packing of one entry of a record. A packed entry must be
/// exactly one zstd frame declaring its content size, at most `max_plain`
/// bytes (the record size limit: a batch is never larger before packing),
/// checked before anything is allocated. Its content must be a batch of
/// plain entries (packed ones do not nest): [`Unpacked::each`] checks that
/// as it walks it.
pub fn unpack(bytes: &[u8], max_plain: u32) -> Result<Unpacked<'_>, String> {
    let Some((&KIND_PACKED, frame)) = bytes.split_first() else {
        return Ok(Unpacked::Plain(bytes));
    };
    let declared = match zstd::zstd_safe::get_frame_content_size(frame) {
        Ok(Some(n)) => n,
        Ok(None) => return Err("a packed entry whose zstd frame does not declare its size".into()),
        Err(_) => return Err("a packed entry that does not start with a zstd frame".into()),
    };
    if declared > u64::from(max_plain) {
        return Err(format!(
            "a packed entry declaring {declared} bytes, more than a record holds ({max_plain})"
        ));
    }
    match zstd::zstd_safe::find_frame_compressed_size(frame) {
        Ok(n) if n == frame.len() => {}
        Ok(n) => {
            return Err(format!(
                "{} bytes after the packed entry's zstd frame",
                frame.len() - n.min(frame.len())
            ))
        }
        Err(code) => {
            return Err(format!(
                "a damaged zstd frame in a packed entry ({})",
                zstd::zstd_safe::get_error_name(code)
            ))
        }
    }
    let batch = with_zstd(|z| z.decompressor.decompress(frame, declared as usize))
        .map_err(|e| format!("a packed entry that does not decompress: {e}"))?;
    if batch.len() as u64 != declared {
        return Err(format!(
            "a packed entry of {} bytes where its frame declares {declared}",
            batch.len()
        ));
    }
    Ok(Unpacked::Batch(batch))
}

/// What can be decompressed of a packed entry that may be damaged, at most
/// `max_plain` bytes: zstd's output up to the first error (empty for a
/// plain entry). For best-effort use only (gc keeping what a damaged record
/// may reference); nothing here is checked.
pub fn unpack_lossy(bytes: &[u8], max_plain: u32) -> Vec<u8> {
    match bytes.split_first() {
        Some((&KIND_PACKED, frame)) => decompress_lossy(frame, max_plain),
        _ => Vec::new(),
    }
}

/// What can be decompressed of the one zstd frame at the start of `bytes`
/// (what follows it is not read), at most `max_plain` bytes: zstd's output
/// up to the first error. Nothing here is checked.
pub fn decompress_lossy(bytes: &[u8], max_plain: u32) -> Vec<u8> {
    use std::io::Read as _;
    let mut out = Vec::new();
    if let Ok(decoder) = zstd::stream::read::Decoder::with_buffer(bytes) {
        // An error ends the output; what came before it is kept.
        let _ = decoder
            .single_frame()
            .take(u64::from(max_plain))
            .read_to_end(&mut out);
    }
    out
}

/// Decodes one plain entry; the error says what was found (the caller adds
/// the file and offset).
pub fn decode(bytes: &[u8]) -> Result<LogEntry, String> {
    match bytes.split_first() {
        None => Err("an empty entry".into()),
        Some((&KIND_EVENT, rest)) => decode_value(rest, "event").map(LogEntry::Event),
        Some((&KIND_META, rest)) => decode_value(rest, "metadata patch").map(LogEntry::Meta),
        Some((k, _)) => Err(format!("an entry of unknown kind {k:#04x}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::json::{parse_entry, ParseMode};
    use crate::event::BlobRef;
    use crate::timestamp::Timestamp;
    use jpstore_blobstore::BlobId;
    use serde_json::json;

    fn stored(v: serde_json::Value) -> Entry {
        let now = Timestamp::from_unix(1_780_000_000, 5).expect("time");
        parse_entry(&v, ParseMode::Strict { now })
            .expect("parse")
            .hashed()
    }

    #[test]
    fn every_kind_of_entry_round_trips() {
        let entries = [
            json!({"type": "turn_start", "timestamp": "2026-05-29 19:42:36.46732"}),
            json!({"type": "chat_request", "timestamp": "2026-05-29 19:42:36.0", "content": "hi",
                   "schema": {"type": "object"}, "author": "me", "metadata": {"k": [1, 2.5, null]},
                   "resources": [{"uri": "file:///a", "mimeType": "text/plain", "text": "A",
                                  "annotations": {"priority": 1}, "name": "a", "formatted": "`A`"}]}),
            json!({"type": "chat_response", "timestamp": "2026-05-29 19:42:36.0", "reasoning": "hmm"}),
            json!({"type": "chat_response", "timestamp": "2026-05-29 19:42:36.0", "data": {"x": [true]}}),
            json!({"type": "tool_call_request", "timestamp": "2026-05-29 19:42:36.0", "id": "t1",
                   "name": "fs_read_file", "arguments": {"path": "a"}}),
            json!({"type": "tool_call_response", "timestamp": "2026-05-29 19:42:36.0", "id": "t1",
                   "content": [{"type": "text", "text": "x"}, {"type": "question", "q": 1},
                               {"type": "resource", "resource": {"uri": "file:///b", "blob": "AAEC"}}],
                   "is_error": true}),
            json!({"type": "inquiry_request", "timestamp": "2026-05-29 19:42:36.0", "id": "i",
                   "source": {"source": "user"}, "question": {"text": "ok?", "answer_type": "bool"}}),
            json!({"type": "inquiry_response", "timestamp": "2026-05-29 19:42:36.0", "id": "i", "answer": true}),
            json!({"type": "config_delta", "timestamp": "2026-05-29 19:42:36.0", "delta": {"a": {"b": 1}}}),
            json!({"type": "compaction", "timestamp": "2026-05-29 19:42:36.0", "from_turn": 0, "to_turn": 3,
                   "reasoning": "strip", "tool_calls": {"policy": "strip", "request": true, "response": false},
                   "tool_overrides": {"fs_read_file": {"request": "keep"}}, "source": "auto",
                   "unknown_field": "kept"}),
            json!({"type": "future_thing", "whatever": {"nested": [1, "two"]}}),
        ];
        for v in entries {
            let e = stored(v.clone());
            let bytes = encode_event(&e);
            assert_eq!(bytes[0], KIND_EVENT);
            match decode(&bytes).expect("decode") {
                LogEntry::Event(back) => assert_eq!(back, e, "{v}"),
                other => panic!("decoded {other:?}"),
            }
        }
    }

    fn long_batch() -> Vec<Vec<u8>> {
        (0..300)
            .map(|i| {
                encode_event(&stored(json!({"type": "chat_response",
                    "timestamp": "2026-05-29 19:42:36.0",
                    "message": format!("answer {i}: the scheduler may delay the timer")})))
            })
            .collect()
    }

    fn decode_entries(bytes: &[u8], max: u32) -> Result<Vec<LogEntry>, String> {
        let mut out = Vec::new();
        decode_all(bytes, max, &mut out).map(|()| out)
    }

    #[test]
    fn a_packed_batch_decodes_to_its_entries_in_order() {
        let batch = long_batch();
        let packed = pack(&batch).expect("worth packing");
        assert_eq!(packed[0], KIND_PACKED);
        let plain_len = crate::log::encode_batch(&batch).len();
        assert!(
            packed.len() < plain_len / 2,
            "{} of {plain_len}",
            packed.len()
        );
        let back = decode_entries(&packed, u32::MAX).expect("decode");
        let expected: Vec<LogEntry> = batch.iter().map(|b| decode(b).expect("plain")).collect();
        assert_eq!(back, expected);
        // A plain entry goes through decode_all as itself.
        assert_eq!(
            decode_entries(&batch[0], u32::MAX).expect("plain"),
            expected[..1]
        );
        // Small or incompressible batches stay plain.
        assert!(pack(&batch[..1]).is_none());
        // 32 KiB of SHA-256 digests (their hex digits read back as bytes).
        let nibble = |d: u8| if d <= b'9' { d - b'0' } else { d - b'a' + 10 };
        let noise: Vec<u8> = (0u32..1024)
            .flat_map(|i| {
                let hex = BlobId::of(&i.to_le_bytes()).to_hex();
                let bytes: Vec<u8> = hex
                    .as_bytes()
                    .chunks(2)
                    .map(|p| nibble(p[0]) * 16 + nibble(p[1]))
                    .collect();
                bytes
            })
            .collect();
        assert!(noise.len() > PACK_MIN);
        assert!(pack(&[noise]).is_none());
    }

    #[test]
    fn a_large_batch_is_packed_in_runs_that_decode_to_it_in_order() {
        // About 3.3 MiB of entries: at least three runs.
        let batch: Vec<Vec<u8>> = (0..12_000)
            .map(|i| {
                encode_event(&stored(json!({"type": "chat_response",
                    "timestamp": "2026-05-29 19:42:36.0",
                    "message": format!("answer {i}: {}", "the scheduler may delay the timer; ".repeat(7))})))
            })
            .collect();
        let plain: usize = batch.iter().map(|e| e.len() + 4).sum();
        assert!(plain > 3 * PACK_RUN, "{plain} bytes");
        let runs = pack_runs(&batch).expect("worth packing");
        assert!(runs.len() >= 3, "{} runs", runs.len());
        assert!(runs.iter().all(|r| is_packed(r)), "every run is packed");
        let declared: u64 = runs.iter().filter_map(|r| declared_size(r)).sum();
        assert_eq!(declared, plain as u64 + 4 * runs.len() as u64);
        let mut back = Vec::new();
        for r in &runs {
            decode_all(r, u32::MAX, &mut back).expect("decode");
        }
        let expected: Vec<LogEntry> = batch.iter().map(|b| decode(b).expect("plain")).collect();
        assert_eq!(back, expected);
        // Below the threshold, or not worth it: the entries as they are.
        assert!(pack_runs(&batch[..3]).is_none());
        assert!(pack_runs(&[]).is_none());
        assert_eq!(declared_size(&batch[0]), None);
        assert!(!is_packed(&batch[0]));
    }

    #[test]
    fn bad_packed_entries_are_errors_without_large_allocations() {
        let batch = long_batch();
        let packed = pack(&batch).expect("worth packing");
        let plain_len = crate::log::encode_batch(&batch).len() as u32;
        // The declared size is checked against the limit first.
        assert!(decode_entries(&packed, plain_len - 1)
            .expect_err("over the limit")
            .contains("more than a record holds"));
        assert!(decode_entries(&packed, plain_len).is_ok());
        // Truncated, with bytes after the frame, or flipped: never a panic.
        for cut in 1..packed.len() {
            assert!(
                decode_entries(&packed[..cut], u32::MAX).is_err(),
                "cut at {cut}"
            );
        }
        let mut trailing = packed.clone();
        trailing.push(0);
        assert!(decode_entries(&trailing, u32::MAX).is_err());
        for i in 1..packed.len() {
            let mut flipped = packed.clone();
            flipped[i] ^= 0x10;
            let _ = decode_entries(&flipped, u32::MAX);
        }
        // A frame without a declared size (streamed) is refused.
        let mut streamed = Vec::new();
        {
            let mut enc = zstd::stream::Encoder::new(&mut streamed, 3).expect("encoder");
            std::io::Write::write_all(&mut enc, &crate::log::encode_batch(&batch)).expect("write");
            enc.finish().expect("finish");
        }
        let mut entry = vec![KIND_PACKED];
        entry.extend_from_slice(&streamed);
        assert!(decode_entries(&entry, u32::MAX)
            .expect_err("no size")
            .contains("does not declare its size"));
        // A bomb: a frame declaring more than the limit (1 MiB of zeros in
        // a few hundred bytes, against 64 KiB) is refused before decompressing.
        let zeros = vec![0u8; 1 << 20];
        let mut bomb = vec![KIND_PACKED];
        bomb.extend_from_slice(&zstd::bulk::compress(&zeros, 19).expect("compress"));
        assert!(decode_entries(&bomb, 64 << 10)
            .expect_err("bomb")
            .contains("more than a record holds"));
        // Packed entries do not nest.
        let mut nested = vec![KIND_PACKED];
        let inner = crate::log::encode_batch(&[packed.clone(), packed]);
        nested.extend_from_slice(&zstd::bulk::compress(&inner, 3).expect("compress"));
        assert!(decode_entries(&nested, u32::MAX)
            .expect_err("nested")
            .contains("inside a packed entry"));
    }

    #[test]
    fn meta_patch_round_trips() {
        let mut p = MetaPatch::default();
        p.fields.insert("title".into(), json!("hello"));
        p.base_config = Some(BlobRef {
            id: BlobId::of(b"{}"),
            size: 2,
        });
        let bytes = encode_meta(&p);
        assert_eq!(decode(&bytes).expect("decode"), LogEntry::Meta(p));
    }

    #[test]
    fn bad_bytes_are_errors_not_panics() {
        let good = encode_event(&stored(
            json!({"type": "turn_start", "timestamp": "2026-05-29 19:42:36.0"}),
        ));
        assert!(decode(&[]).is_err());
        assert!(decode(&[0x7f, 0x80])
            .expect_err("kind")
            .contains("unknown kind 0x7f"));
        for cut in 1..good.len() {
            assert!(
                decode(&good[..cut]).is_err(),
                "accepted a prefix of {cut} bytes"
            );
        }
        let mut trailing = good.clone();
        trailing.push(0xc0);
        assert!(decode(&trailing)
            .expect_err("trailing")
            .contains("1 bytes after"));
        // A map claiming 2^32-1 items must fail without allocating them.
        assert!(decode(&[KIND_EVENT, 0xdf, 0xff, 0xff, 0xff, 0xff]).is_err());
    }
}
