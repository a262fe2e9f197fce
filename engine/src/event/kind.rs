//! The one vocabulary of entry kinds, [`Kind`]: the kind byte of an entry
//! head in a version 2 log (format-spec.md 4.2, "Entries of version 2"),
//! and what is decided from the kind alone: the entry's JSON `type`, how it
//! counts for turn numbering ([`TurnRole`]), whether a view shows it.
//!
//! The types that carry an entry's fields keep their shapes: the model
//! ([`EventKind`](super::EventKind)), what decisions read of a head
//! ([`HeadKind`](super::head::HeadKind)), an event of a provider request
//! (`export::ViewEvent`); each says its [`Kind`] by an exhaustive match,
//! and every codec between them and the bytes matches exhaustively on the
//! kind, so that a new kind does not compile until each one handles it.
//! A tag read from bytes becomes a kind through [`Kind::from_byte`], which
//! `byte_tags!` generates from the enum's own list: it cannot miss a kind,
//! and its one arm for other bytes covers no kind.

/// Defines a fieldless enum of byte tags (`#[repr(u8)]`, each variant
/// given its byte) with, generated from the same list so that none can
/// miss a variant: `ALL` (every variant, in the order listed),
/// `to_byte` and `from_byte` (`None` for a byte no variant has).
macro_rules! byte_tags {
    (
        $(#[$meta:meta])*
        $vis:vis enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $byte:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        $vis enum $name {
            $( $(#[$vmeta])* $variant = $byte, )+
        }

        impl $name {
            /// Every value, in the order of the definition.
            pub const ALL: [$name; [$($byte),+].len()] = [$($name::$variant),+];

            /// The byte of this value.
            pub const fn to_byte(self) -> u8 {
                self as u8
            }

            /// The value of byte `b`; `None` for a byte no value has.
            pub const fn from_byte(b: u8) -> Option<$name> {
                match b {
                    $( $byte => Some($name::$variant), )+
                    _ => None,
                }
            }
        }
    };
}

pub(crate) use byte_tags;

byte_tags! {
    /// The kind of an entry: the kind byte of its head in a version 2 log
    /// (format-spec.md 4.2); a chat response is of one of three kinds, by
    /// which field it has.
    pub enum Kind {
        /// `turn_start`.
        TurnStart = 0x01,
        /// `chat_request`.
        ChatRequest = 0x02,
        /// `chat_response` with a `message`.
        Message = 0x03,
        /// `chat_response` with `reasoning`.
        Reasoning = 0x04,
        /// `chat_response` with `data`.
        Data = 0x05,
        /// `tool_call_request`.
        ToolCallRequest = 0x06,
        /// `tool_call_response`.
        ToolCallResponse = 0x07,
        /// `inquiry_request`.
        InquiryRequest = 0x08,
        /// `inquiry_response`.
        InquiryResponse = 0x09,
        /// `config_delta`.
        ConfigDelta = 0x0a,
        /// `compaction`.
        Compaction = 0x0b,
        /// `compaction_undo`.
        CompactionUndo = 0x0c,
        /// An entry of unknown type, kept as its JSON object.
        Unknown = 0x20,
        /// A metadata patch (format-spec.md 4.3; not an entry of the
        /// conversation).
        MetaPatch = 0x21,
    }
}

/// How an entry counts for turn numbering (jp-format.md section 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnRole {
    /// A `turn_start`.
    TurnStart,
    /// A conversation event (opens turn 0 if there is none, and makes the
    /// next `turn_start` open a new turn).
    Event,
    /// Config deltas, compactions, undos and unknown entries: never open a
    /// turn.
    Other,
}

impl Kind {
    /// The JSON `type` of an entry of this kind; `None` for an entry of
    /// unknown type (its object has its own) and a metadata patch (no
    /// entry).
    pub const fn type_name(self) -> Option<&'static str> {
        Some(match self {
            Kind::TurnStart => "turn_start",
            Kind::ChatRequest => "chat_request",
            Kind::Message | Kind::Reasoning | Kind::Data => "chat_response",
            Kind::ToolCallRequest => "tool_call_request",
            Kind::ToolCallResponse => "tool_call_response",
            Kind::InquiryRequest => "inquiry_request",
            Kind::InquiryResponse => "inquiry_response",
            Kind::ConfigDelta => "config_delta",
            Kind::Compaction => "compaction",
            Kind::CompactionUndo => "compaction_undo",
            Kind::Unknown | Kind::MetaPatch => return None,
        })
    }

    /// How an entry of this kind counts for turn numbering: inquiries are
    /// conversation events; config deltas, compactions, undos and unknown
    /// entries are not.
    pub const fn turn_role(self) -> TurnRole {
        match self {
            Kind::TurnStart => TurnRole::TurnStart,
            Kind::ChatRequest
            | Kind::Message
            | Kind::Reasoning
            | Kind::Data
            | Kind::ToolCallRequest
            | Kind::ToolCallResponse
            | Kind::InquiryRequest
            | Kind::InquiryResponse => TurnRole::Event,
            Kind::ConfigDelta
            | Kind::Compaction
            | Kind::CompactionUndo
            | Kind::Unknown
            | Kind::MetaPatch => TurnRole::Other,
        }
    }

    /// Whether a view shows an entry of this kind: the five conversation
    /// event types (config deltas, inquiries, compactions and unknown
    /// entries are not part of a view).
    pub const fn in_view(self) -> bool {
        match self {
            Kind::TurnStart
            | Kind::ChatRequest
            | Kind::Message
            | Kind::Reasoning
            | Kind::Data
            | Kind::ToolCallRequest
            | Kind::ToolCallResponse => true,
            Kind::InquiryRequest
            | Kind::InquiryResponse
            | Kind::ConfigDelta
            | Kind::Compaction
            | Kind::CompactionUndo
            | Kind::Unknown
            | Kind::MetaPatch => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::conversation::codec::{decode, encode_event, LogEntry};
    use crate::conversation::meta::MetaPatch;
    use crate::conversation::sections::{
        decode_body, decode_record, entry_body, finish, push_meta, OpenHeads,
    };
    use crate::event::binary::decode::BodyParts;
    use crate::event::binary::encode::RecordBuilder;
    use crate::event::binary::Part;
    use crate::event::head::EntryHead;
    use crate::event::json::{parse_entry, payload_json, render_entry, ParseMode, EVENT_TYPES};
    use crate::event::turns::role_of;
    use crate::event::*;
    use crate::export::events::ViewEvent;
    use crate::timestamp::Timestamp;

    /// The kind bytes of format-spec.md 4.2 ("Entries of version 2"):
    /// bytes on disk, which no change of the code may move.
    const SPEC_KIND_BYTES: [(Kind, u8); 14] = [
        (Kind::TurnStart, 0x01),
        (Kind::ChatRequest, 0x02),
        (Kind::Message, 0x03),
        (Kind::Reasoning, 0x04),
        (Kind::Data, 0x05),
        (Kind::ToolCallRequest, 0x06),
        (Kind::ToolCallResponse, 0x07),
        (Kind::InquiryRequest, 0x08),
        (Kind::InquiryResponse, 0x09),
        (Kind::ConfigDelta, 0x0a),
        (Kind::Compaction, 0x0b),
        (Kind::CompactionUndo, 0x0c),
        (Kind::Unknown, 0x20),
        (Kind::MetaPatch, 0x21),
    ];

    #[test]
    fn every_kind_and_part_has_its_byte_and_no_other_byte_is_one() {
        assert_eq!(Kind::ALL.len(), SPEC_KIND_BYTES.len());
        for (kind, byte) in SPEC_KIND_BYTES {
            assert_eq!(kind.to_byte(), byte, "{kind:?}");
            assert_eq!(Kind::from_byte(byte), Some(kind));
            assert!(Kind::ALL.contains(&kind));
        }
        for (i, part) in Part::ALL.into_iter().enumerate() {
            // Tags 1 to 14, in order (format-spec.md 4.2, "Body parts").
            assert_eq!(usize::from(part.to_byte()), i + 1, "{part:?}");
            assert_eq!(Part::from_byte(part.to_byte()), Some(part));
        }
        for b in 0..=u8::MAX {
            assert_eq!(Kind::from_byte(b).map(Kind::to_byte).unwrap_or(b), b);
            assert_eq!(
                Kind::from_byte(b).is_some(),
                SPEC_KIND_BYTES.iter().any(|k| k.1 == b)
            );
            assert_eq!(Part::from_byte(b).is_some(), (1..=14).contains(&b));
        }
    }

    fn object(v: serde_json::Value) -> Object {
        match v {
            serde_json::Value::Object(o) => o,
            other => panic!("not an object: {other}"),
        }
    }

    /// An entry of `kind` with every field its kind has (none for a
    /// metadata patch, which is no entry). Exhaustive: a new kind needs its
    /// sample, and then goes through every codec below.
    fn sample(kind: Kind) -> Option<Entry<Payload>> {
        let t = Timestamp::from_unix(1_780_000_000, 5_000).expect("a time");
        let mut metadata = Object::new();
        metadata.insert("signature".into(), json!("c2ln"));
        let kind: EventKind<Payload> = match kind {
            Kind::TurnStart => EventKind::TurnStart,
            Kind::ChatRequest => EventKind::from(ChatRequest {
                schema: Some(object(json!({"type": "object"}))),
                author: Some("me".into()),
                ..ChatRequest::text("Review these.").with_resources([
                    Resource::text("file:///p/a.md", "# A").with_mime_type("text/markdown"),
                    Resource::binary("file:///p/b.png", b"\x89PNG".to_vec()).with_name("b.png"),
                ])
            }),
            Kind::Message => ChatResponse::message("Done.").into(),
            Kind::Reasoning => ChatResponse::reasoning("Check first.").into(),
            Kind::Data => ChatResponse::data(json!({"files": [1, 2]})).into(),
            Kind::ToolCallRequest => ToolCallRequest::new("c1", "ls", json!({"path": "."}))
                .expect("an object")
                .into(),
            Kind::ToolCallResponse => ToolCallResponse {
                is_error: true,
                ..ToolCallResponse::blocks(
                    "c1",
                    vec![
                        Block::text("two files"),
                        Block::resource(Resource::text("file:///p/a.md", "# A")),
                        Block::Other(object(json!({"type": "question", "text": "?"}))),
                    ],
                )
            }
            .into(),
            Kind::InquiryRequest => InquiryRequest {
                id: "q1".into(),
                source: object(json!({"source": "tool", "name": "ls"})),
                question: object(json!({"text": "Go on?", "answer_type": "boolean"})),
            }
            .into(),
            Kind::InquiryResponse => InquiryResponse {
                id: "q1".into(),
                answer: json!(true),
            }
            .into(),
            Kind::ConfigDelta => {
                ConfigDelta::new(json!({"conversation": {"compaction": {"keep_last": 1}}}))
                    .expect("settings")
                    .into()
            }
            Kind::Compaction => Compaction {
                from_turn: 0,
                to_turn: 1,
                summary: Some("Listed files.".into()),
                strip_reasoning: true,
                tool_calls: Some(ToolCallPolicy::Strip {
                    request: true,
                    response: false,
                }),
                tool_overrides: [(
                    "ls".to_owned(),
                    ToolOverride {
                        request: Some(FieldMode::Keep),
                        response: None,
                    },
                )]
                .into(),
                source: Some(CompactionSource::Manual),
            }
            .into(),
            Kind::CompactionUndo => CompactionUndo { undoes: 0 }.into(),
            Kind::Unknown => {
                return Some(Entry::Unknown(object(
                    json!({"type": "a_type_of_later", "timestamp": "then", "x": 1}),
                )))
            }
            Kind::MetaPatch => return None,
        };
        Some(Event::at(t, kind).with_metadata(metadata).into())
    }

    #[test]
    fn every_kind_round_trips_through_every_codec() {
        for kind in Kind::ALL {
            let Some(entry) = sample(kind) else {
                // A metadata patch: only in the binary form of version 2.
                let patch = MetaPatch {
                    base_config: None,
                    fields: object(json!({"title": "t"})),
                };
                let mut record = RecordBuilder::new();
                push_meta(&mut record, &patch).expect("encode");
                let sections = finish(&record, None);
                let open = OpenHeads::open(&sections.heads, sections.body.len() as u32, u32::MAX)
                    .expect("open");
                assert_eq!(open.raw(0).expect("head").kind, kind);
                assert_eq!(
                    decode_record(&sections.heads, &sections.body, u32::MAX).expect("decode"),
                    [LogEntry::Meta(patch)]
                );
                continue;
            };
            // The model, and what is decided from the kind alone.
            assert_eq!(entry.kind(), kind);
            assert_eq!(entry.event().map(|e| e.kind.type_name()), kind.type_name());
            if let Some(name) = kind.type_name() {
                assert!(EVENT_TYPES.contains(&name), "{name}");
            }
            assert_eq!(role_of(&entry), kind.turn_role(), "{kind:?}");
            assert_eq!(in_view(&entry), kind.in_view(), "{kind:?}");
            // A provider request is made of what a view shows.
            assert_eq!(
                matches!(ViewEvent::of(&entry), ViewEvent::Other),
                !kind.in_view(),
                "{kind:?}"
            );

            // JSON: rendered and parsed back.
            let rendered = render_entry(&entry, &mut |p, k| payload_json(p, k)).expect("render");
            let now = Timestamp::from_unix(0, 0).expect("epoch");
            let parsed = parse_entry(&rendered, ParseMode::Strict { now }).expect("parse");
            assert_eq!(parsed, entry, "{rendered}");

            // Logged: each payload a reference to its blob.
            let stored = entry.clone().hashed();
            let head = EntryHead::of(&stored);
            assert_eq!(head.kind.kind(), kind);
            assert_eq!(head.turn_role(), kind.turn_role());
            assert_eq!(head.in_view(), kind.in_view());

            // Version 1: MessagePack.
            assert_eq!(
                decode(&encode_event(&stored)).expect("decode"),
                LogEntry::Event(stored.clone())
            );

            // Version 2: the binary form; its head read from the bytes.
            let mut record = RecordBuilder::new();
            record.push_entry(&stored).expect("encode");
            let sections = finish(&record, None);
            assert_eq!(
                decode_record(&sections.heads, &sections.body, u32::MAX).expect("decode"),
                [LogEntry::Event(stored.clone())]
            );
            let open = OpenHeads::open(&sections.heads, sections.body.len() as u32, u32::MAX)
                .expect("open");
            let raw = open.raw(0).expect("head");
            assert_eq!(raw.kind, kind);
            let body = decode_body(&open.section, &sections.body, u32::MAX).expect("body");
            let read = EntryHead::from_raw(&raw, &mut |raw| {
                let body = entry_body(raw, &body)?;
                BodyParts::new(raw, body)?.object(Part::Delta)
            })
            .expect("head");
            assert_eq!(read, head);
        }
    }

    #[test]
    fn the_listed_event_types_are_the_type_names_of_the_kinds() {
        let mut names: Vec<&str> = Kind::ALL.into_iter().filter_map(Kind::type_name).collect();
        names.dedup();
        assert_eq!(names, EVENT_TYPES);
    }
}
