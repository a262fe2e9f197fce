//! The fuzz targets' bodies: one function per decoder of bytes from disk
//! (and of JSON input). Each must return without panicking, whatever the
//! bytes. The cargo-fuzz targets in `tests/fuzz/` call these, and
//! `tests/tests/it/fuzz_corpus.rs` replays the committed corpus (and every
//! crash found) through them in an ordinary test, so CI covers them
//! without fuzzing.

use jpstore_engine::internal::{EntryInterior as _, IntoPayloadRefs as _};
use std::path::Path;

use jpstore_blobstore::backend::{Backend, Mapping, MemoryBackend};
use jpstore_blobstore::pack::Found;
use jpstore_blobstore::{group, object, pack, BlobId};
use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;
use jpstore_engine::internal::log::{scan, Holds, LogOptions, LogReader};
use jpstore_engine::timestamp::Timestamp;

/// The body of a fuzz target.
pub type Target = fn(&[u8]);

/// Every target, by name (the corpus directory names).
pub const TARGETS: &[(&str, Target)] = &[
    ("blob_object", blob_object),
    ("pack_index", pack_index),
    ("pack_v2", pack_v2),
    ("log_file", log_file),
    ("log_entry", log_entry),
    ("record_v2", record_v2),
    ("head_file", head_file),
    ("config_toml", config_toml),
    ("config_json", config_json),
    ("json_events", json_events),
    ("jp_files", jp_files),
];

/// A stored blob object (header, CRC, bounded zstd, SHA-256).
pub fn blob_object(data: &[u8]) {
    let _ = object::check_stored(data);
    let _ = object::decode(data, &BlobId::of(b""), 1 << 20);
    if data.len() > 32 {
        // Also with an id taken from the input, so a matching hash is
        // reachable for content the fuzzer builds.
        let mut id = [0u8; 32];
        id.copy_from_slice(&data[..32]);
        let _ = object::decode(&data[32..], &BlobId::from_bytes(id), 1 << 20);
    }
}

/// A pack index (and a pack header).
pub fn pack_index(data: &[u8]) {
    let _ = pack::check_index(data);
    let _ = pack::check_pack_header(data);
}

/// A pack index of version 2 and a group of a pack of version 2 (format
/// 2.12): the input checked as an index and, when it passes, every object
/// and group checked against the bounds of a pack a little longer than the
/// input (as a reader does before it reads); the input also read as a
/// stored group (header, CRC, then decompression bounded to 1 MiB), and,
/// past its CRC, its payload decoded as the header says.
pub fn pack_v2(data: &[u8]) {
    const MAX: u64 = 1 << 20;
    if pack::check_index(data).is_ok() {
        if let Ok(p) = pack::Pack::new(
            "n".into(),
            "n.pack".into(),
            "n.idx".into(),
            Mapping::Owned(data.to_vec()),
            data.len() as u64 + 4096,
        ) {
            for i in 0..p.len() {
                match p.found(i) {
                    Found::Grouped(e) => drop(p.check_grouped_bounds(&e, MAX)),
                    Found::Object(e) => drop(p.check_entry_bounds(&e)),
                }
            }
            for g in 0..p.group_count() {
                let _ = p.check_group_bounds(g, MAX);
            }
            if p.version() == 2 {
                let _ = p.group_members();
            }
        }
    }
    let mut buf = Vec::new();
    if let Ok(h) = group::check_group(data) {
        let _ = group::group_content(data, &h, MAX, &mut buf);
    }
    if let Ok(h) = group::GroupHeader::decode(data) {
        let _ = group::group_content(data, &h, MAX, &mut buf);
    }
}

/// A whole log file: read by a scan (as fsck does) and by a reader walk.
pub fn log_file(data: &[u8]) {
    let backend = MemoryBackend::new();
    let path = Path::new("log");
    if backend
        .put_if_absent(path, data, Path::new("log.tmp"))
        .is_err()
    {
        return;
    }
    let options = LogOptions {
        max_record_size: 1 << 20,
    };
    let _ = scan(&backend, path, options);
    // gc's marking: the tolerant walk, every damaged region searched, and
    // the same bytes as a tail copy (walked in both framings, from 0).
    let mut live = std::collections::HashSet::new();
    for holds in [Holds::Log, Holds::Part] {
        let _ = jpstore_engine::internal::gc::mark::mark_log(
            &backend,
            path,
            holds,
            options,
            &std::sync::atomic::AtomicBool::new(false),
            &mut live,
        );
    }
    if let Ok(reader) = LogReader::open(&backend, path, options) {
        if let Ok(records) = reader.records() {
            for r in records {
                if r.is_err() {
                    break;
                }
            }
        }
    }
    // A version 2 log read whole as a view reads it: its image, every
    // entry's parsed head and aux, and each entry decoded.
    if let (Ok(mut reader), Ok(id)) = (
        LogReader::open(&backend, path, options),
        jpstore_engine::conversation::ConversationId::parse("fuzz"),
    ) {
        if let Ok(image) =
            jpstore_engine::internal::conversation::image::LogImage::read(&mut reader, &id)
        {
            if image.parse_entries_and_heads().is_ok() {
                for i in 0..image.len() {
                    let _ = image.entry(i);
                }
            }
        }
    }
}

/// One log entry (kind byte and MessagePack, or a packed zstd frame of a
/// batch of them), with a 1 MiB record limit.
pub fn log_entry(data: &[u8]) {
    let mut out = Vec::new();
    let _ = jpstore_engine::internal::conversation::codec::decode_all(data, 1 << 20, &mut out);
}

/// The sections of a record of version 2: a `u32` (little endian) length
/// of the heads section, that section, then the body section. Decoded as a
/// view or a writer decodes it (`decode_record`), and each entry checked as
/// fsck checks it (`check_entry`), which must refuse exactly what decoding
/// the entry refuses, with the same message: a difference panics.
pub fn record_v2(data: &[u8]) {
    use jpstore_engine::internal::conversation::sections::{
        decode_meta, decode_record, OpenRecord,
    };
    use jpstore_engine::internal::event::binary::decode::{check_entry, decode_entry};
    use jpstore_engine::internal::event::binary::Kind;

    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return;
    };
    let split = usize::try_from(u32::from_le_bytes(*len))
        .unwrap_or(usize::MAX)
        .min(rest.len());
    let (heads, body) = rest.split_at(split);
    let max = 1 << 20;
    let _ = decode_record(heads, body, max);
    let Ok(record) = OpenRecord::open(heads, body, max) else {
        return;
    };
    for i in 0..record.count() {
        let Ok((raw, bytes)) = record.entry(i) else {
            continue;
        };
        if raw.kind == Kind::MetaPatch {
            let _ = decode_meta(&raw, bytes);
            continue;
        }
        let mut seen = Vec::new();
        let checked = check_entry(&raw, bytes, &mut |r| seen.push(r));
        let built = decode_entry(&raw, bytes);
        if let (Ok(_), Ok(entry)) = (&checked, &built) {
            let mut refs = Vec::new();
            entry.for_each_content(&mut |r| refs.push(*r));
            assert_eq!(seen, refs, "the references check_entry saw on entry {i}");
        }
        if let (Ok(fields), Ok(entry)) = (&checked, &built) {
            same_event(&raw, fields, bytes, entry, i);
        }
        assert_eq!(
            checked.map(|_| ()),
            built.map(|_| ()),
            "check_entry and decode_entry on entry {i}"
        );
    }
}

/// The event a provider request reads of a stored entry, borrowed where it
/// lies (`ViewEvent::of_stored`), against the event of the same entry
/// decoded: the same text, signature, arguments (written as JSON, compact
/// and pretty) and content references.
fn same_event(
    raw: &jpstore_engine::internal::event::binary::RawHead<'_>,
    fields: &jpstore_engine::internal::event::binary::decode::AuxFields<'_>,
    body: &[u8],
    entry: &jpstore_engine::event::Entry,
    i: usize,
) {
    use jpstore_engine::internal::event::binary::decode::{AuxFields, BlockFields};
    use jpstore_engine::internal::event::binary::Kind;
    use jpstore_engine::internal::export::ViewEvent;
    use jpstore_engine::internal::projection::ItemKind;
    let borrowed_shape = match (raw.kind, fields) {
        (Kind::Data, _) => false,
        (Kind::ChatRequest, AuxFields::ChatRequest { resources, .. }) => resources.count == 0,
        (Kind::ToolCallResponse, AuxFields::ToolCallResponse { blocks, .. }) => blocks
            .blocks()
            .all(|b| matches!(b, BlockFields::Text { .. })),
        _ => true,
    };
    if !borrowed_shape {
        return;
    }
    let decoded = entry.clone().into_payload_refs();
    for kind in [ItemKind::Entry, ItemKind::StripArguments] {
        let stored = ViewEvent::of_stored(raw, body, &kind)
            .unwrap_or_else(|e| panic!("entry {i} checked but not read borrowed: {e}"));
        let mut owned = decoded.clone();
        if let (
            ItemKind::StripArguments,
            jpstore_engine::event::Entry::Event(jpstore_engine::event::Event {
                kind: jpstore_engine::event::EventKind::ToolCallRequest(r),
                ..
            }),
        ) = (&kind, &mut owned)
        {
            r.arguments = Default::default();
        }
        assert_eq!(
            event_form(&stored),
            event_form(&ViewEvent::of(&owned)),
            "entry {i} read borrowed and decoded, as {kind:?}"
        );
    }
}

/// What a provider request takes of an event, as text.
fn event_form(event: &jpstore_engine::internal::export::ViewEvent<'_>) -> String {
    use jpstore_engine::event::{Block, Payload};
    use jpstore_engine::internal::event::binary::value::JsonStyle;
    use jpstore_engine::internal::export::{ToolContent, ViewEvent};
    match event {
        ViewEvent::ToolCall {
            id,
            name,
            arguments,
        } => {
            let mut compact = Vec::new();
            let mut pretty = Vec::new();
            let written = arguments
                .write_json(&mut compact, JsonStyle::Compact)
                .and_then(|()| arguments.write_json(&mut pretty, JsonStyle::Pretty(3)));
            format!(
                "call {id:?} {name:?} {written:?} {} {}",
                String::from_utf8_lossy(&compact),
                String::from_utf8_lossy(&pretty)
            )
        }
        ViewEvent::ToolResult {
            id,
            is_error,
            content,
        } => {
            let refs: Vec<String> = match content {
                ToolContent::Texts(texts) => texts.iter().map(|r| r.id.to_string()).collect(),
                ToolContent::Blocks(blocks) => blocks
                    .iter()
                    .map(|b| match b {
                        Block::Text(t) => match &t.text {
                            Payload::Ref(r) => r.id.to_string(),
                            Payload::Inline(b) => format!("inline {b:?}"),
                        },
                        other => format!("{other:?}"),
                    })
                    .collect(),
            };
            format!("result {id:?} {is_error} {refs:?}")
        }
        ViewEvent::Request { content, resources } => {
            format!("request {content:?} {}", resources.len())
        }
        other => format!("{other:?}"),
    }
}

/// A head cache file, and the same bytes as the body of one (past the CRC
/// a mutated file rarely gets): a body that decodes is written again and
/// decodes to the same head.
pub fn head_file(data: &[u8]) {
    use jpstore_engine::internal::conversation::head;
    let _ = head::decode(data);
    let whole = head::decode_body(data);
    // What a view reads (evidence and settings, the state skipped) is what
    // the whole head gives, and refused alike.
    let for_log = head::decode_body_for_log(data, &|_| None);
    assert_eq!(
        whole.as_ref().ok().map(|h| (
            h.log_end,
            h.last_record,
            h.last_record_crc,
            h.first_record_crc,
            &h.settings
        )),
        for_log.as_ref().ok().map(|(e, settings)| (
            e.log_end,
            e.last_record,
            e.last_record_crc,
            e.first_record_crc,
            settings
        )),
        "a head read for its log as decoded whole"
    );
    if let Ok(decoded) = whole {
        assert_eq!(
            head::decode(&head::encode(&decoded)),
            Some(decoded),
            "a head written again decodes to itself"
        );
    }
}

/// The workspace config (TOML).
pub fn config_toml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ =
            jpstore_engine::internal::config::parse_workspace_toml(text, Path::new("config.toml"));
    }
}

/// A base config blob (JSON).
pub fn config_json(data: &[u8]) {
    let _ = jpstore_engine::internal::config::parse_config_json(data, "a config");
}

/// Events given to `append` (a JSON array or JSON Lines), strict and
/// lenient.
pub fn json_events(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let now = Timestamp::from_unix(1_800_000_000, 0).unwrap_or_else(Timestamp::now);
        let _ = parse_input(text, ParseMode::Strict { now });
        let _ = parse_input(text, ParseMode::Lenient);
    }
}

/// A JP conversation's files: the input is `events.json`, then (after a
/// byte 0xFF, which UTF-8 never holds) `metadata.json`, then (after
/// another) `base_config.json`. Import's byte check, and when it says the
/// files will come back byte for byte, the files rendered from what import
/// prepared must be those bytes (a difference panics: the fuzzer found a
/// file the check let through wrongly).
pub fn jp_files(data: &[u8]) {
    use jpstore_integrations::jp::export::prepared_files;
    use jpstore_integrations::jp::import::{
        prepare_checked, source_from_bytes, ByteCheck, JpFileBytes,
    };
    let mut parts = data.splitn(3, |b| *b == 0xff);
    let files = JpFileBytes {
        events: parts.next().unwrap_or_default().to_vec(),
        metadata: parts.next().map(<[u8]>::to_vec),
        base_config: parts.next().map(<[u8]>::to_vec),
    };
    let Ok(source) = source_from_bytes(Path::new("17738399400-fuzz"), files.clone()) else {
        return;
    };
    let (prepared, check) = prepare_checked(source);
    if let ByteCheck::Identical { .. } = check {
        match prepared_files(&prepared) {
            Ok(out) => {
                assert!(out.events == files.events, "events.json comes back");
                if let Some(m) = &files.metadata {
                    assert!(&out.metadata == m, "metadata.json comes back");
                }
                if let (Some(b), Some(out)) = (&files.base_config, &out.base_config) {
                    assert!(b == out, "base_config.json comes back");
                }
            }
            Err(e) => panic!("a prepared conversation renders: {e}"),
        }
    }
}
