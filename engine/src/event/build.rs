//! Constructors of entries (the example is in the module doc of
//! [`crate::event`]): each makes the entry that
//! [`super::input::parse_input`] makes of the equivalent JSON (the tests
//! below check it), and those that take JSON values refuse what
//! `parse_input` refuses, with the same [`FieldError`]. The fields stay
//! public: what no constructor sets (a request's `schema`, a resource's
//! `title`) is set on the value.

use serde_json::Value;

use super::json::{describe, FieldError};
use super::model::*;
use crate::timestamp::Timestamp;

impl<C> Entry<C> {
    /// An event of `kind` at `timestamp`, without metadata.
    ///
    /// ```
    /// # use jpstore_engine::event::{ChatResponse, Entry, Payload};
    /// # use jpstore_engine::timestamp::Timestamp;
    /// let at = Timestamp::from_unix(1_780_000_000, 0).expect("a time");
    /// let entry: Entry<Payload> = Entry::at(at, ChatResponse::message("Done."));
    /// assert_eq!(entry.event().map(|e| e.timestamp), Some(at));
    /// ```
    pub fn at(timestamp: Timestamp, kind: impl Into<EventKind<C>>) -> Entry<C> {
        Entry::Event(Event::at(timestamp, kind))
    }

    /// An event of `kind` now ([`Timestamp::now`]), without metadata.
    ///
    /// ```
    /// # use jpstore_engine::event::{Entry, EventKind, Payload};
    /// let entry: Entry<Payload> = Entry::now(EventKind::TurnStart);
    /// assert_eq!(entry.event().map(|e| e.kind.type_name()), Some("turn_start"));
    /// ```
    pub fn now(kind: impl Into<EventKind<C>>) -> Entry<C> {
        Entry::Event(Event::now(kind))
    }
}

impl<C> From<Event<C>> for Entry<C> {
    fn from(event: Event<C>) -> Entry<C> {
        Entry::Event(event)
    }
}

impl<C> Event<C> {
    /// An event of `kind` at `timestamp`, without metadata.
    ///
    /// ```
    /// # use jpstore_engine::event::{ChatRequest, Event, Payload};
    /// # use jpstore_engine::timestamp::Timestamp;
    /// let at = Timestamp::from_unix(1_780_000_000, 0).expect("a time");
    /// let event: Event<Payload> = Event::at(at, ChatRequest::text("Hello"));
    /// assert_eq!((event.timestamp, event.kind.type_name()), (at, "chat_request"));
    /// ```
    pub fn at(timestamp: Timestamp, kind: impl Into<EventKind<C>>) -> Event<C> {
        Event {
            timestamp,
            kind: kind.into(),
            metadata: Object::new(),
            extra: Object::new(),
        }
    }

    /// An event of `kind` now ([`Timestamp::now`]), without metadata.
    ///
    /// ```
    /// # use jpstore_engine::event::{ChatResponse, Event, Payload};
    /// let event: Event<Payload> = Event::now(ChatResponse::reasoning("Check the file first."));
    /// assert!(event.metadata.is_empty());
    /// ```
    pub fn now(kind: impl Into<EventKind<C>>) -> Event<C> {
        Event::at(Timestamp::now(), kind)
    }

    /// The event with `metadata` as its opaque `metadata` object (a
    /// reasoning's signature, say).
    ///
    /// ```
    /// # use jpstore_engine::event::{ChatResponse, Entry, Event, Payload};
    /// let mut metadata = serde_json::Map::new();
    /// metadata.insert("signature".into(), "c2lnbmVk".into());
    /// let entry: Entry<Payload> =
    ///     Event::now(ChatResponse::reasoning("Thinking.")).with_metadata(metadata).into();
    /// assert_eq!(entry.event().map(|e| e.metadata.len()), Some(1));
    /// ```
    pub fn with_metadata(mut self, metadata: Object) -> Event<C> {
        self.metadata = metadata;
        self
    }
}

impl<C> From<ChatRequest<C>> for EventKind<C> {
    fn from(r: ChatRequest<C>) -> EventKind<C> {
        EventKind::ChatRequest(r)
    }
}

impl<C> From<ChatResponse> for EventKind<C> {
    fn from(r: ChatResponse) -> EventKind<C> {
        EventKind::ChatResponse(r)
    }
}

impl<C> From<ToolCallRequest> for EventKind<C> {
    fn from(r: ToolCallRequest) -> EventKind<C> {
        EventKind::ToolCallRequest(r)
    }
}

impl<C> From<ToolCallResponse<C>> for EventKind<C> {
    fn from(r: ToolCallResponse<C>) -> EventKind<C> {
        EventKind::ToolCallResponse(r)
    }
}

impl<C> From<InquiryRequest> for EventKind<C> {
    fn from(r: InquiryRequest) -> EventKind<C> {
        EventKind::InquiryRequest(r)
    }
}

impl<C> From<InquiryResponse> for EventKind<C> {
    fn from(r: InquiryResponse) -> EventKind<C> {
        EventKind::InquiryResponse(r)
    }
}

impl<C> From<ConfigDelta> for EventKind<C> {
    fn from(d: ConfigDelta) -> EventKind<C> {
        EventKind::ConfigDelta(d)
    }
}

impl<C> From<Compaction> for EventKind<C> {
    fn from(c: Compaction) -> EventKind<C> {
        EventKind::Compaction(c)
    }
}

impl<C> From<CompactionUndo> for EventKind<C> {
    fn from(u: CompactionUndo) -> EventKind<C> {
        EventKind::CompactionUndo(u)
    }
}

impl<C> ChatRequest<C> {
    /// A user message of `content`, without resources (`{"type":
    /// "chat_request", "content": ..}`).
    ///
    /// ```
    /// # use jpstore_engine::event::{ChatRequest, Payload};
    /// let request: ChatRequest<Payload> = ChatRequest::text("What changed?");
    /// assert_eq!(request.content, "What changed?");
    /// ```
    pub fn text(content: impl Into<String>) -> ChatRequest<C> {
        ChatRequest {
            content: content.into(),
            schema: None,
            author: None,
            resources: Vec::new(),
        }
    }

    /// The request with `resources` attached after those it has (RFD 065:
    /// files, tool output; see [`Resource::text`]).
    ///
    /// ```
    /// # use jpstore_engine::event::{ChatRequest, Resource};
    /// let request = ChatRequest::text("Review this.")
    ///     .with_resources([Resource::text("file:///project/notes.md", "# Notes")]);
    /// assert_eq!(request.resources.len(), 1);
    /// ```
    pub fn with_resources(mut self, resources: impl IntoIterator<Item = Resource<C>>) -> Self {
        self.resources.extend(resources);
        self
    }
}

impl ChatResponse {
    /// Text of the assistant's answer (`{"type": "chat_response",
    /// "message": ..}`).
    ///
    /// ```
    /// # use jpstore_engine::event::ChatResponse;
    /// assert_eq!(ChatResponse::message("Done."), ChatResponse::Message("Done.".into()));
    /// ```
    pub fn message(text: impl Into<String>) -> ChatResponse {
        ChatResponse::Message(text.into())
    }

    /// The model's reasoning (`{"type": "chat_response", "reasoning": ..}`).
    ///
    /// ```
    /// # use jpstore_engine::event::ChatResponse;
    /// assert_eq!(ChatResponse::reasoning("Hm."), ChatResponse::Reasoning("Hm.".into()));
    /// ```
    pub fn reasoning(text: impl Into<String>) -> ChatResponse {
        ChatResponse::Reasoning(text.into())
    }

    /// Structured output, any JSON (`{"type": "chat_response", "data":
    /// ..}`).
    ///
    /// ```
    /// # use jpstore_engine::event::ChatResponse;
    /// let data = ChatResponse::data(serde_json::json!({"answer": 42}));
    /// assert!(matches!(data, ChatResponse::Data(_)));
    /// ```
    pub fn data(value: impl Into<Value>) -> ChatResponse {
        ChatResponse::Data(value.into())
    }
}

impl ToolCallRequest {
    /// A call, `id`, of the tool `name` with `arguments`: a JSON object,
    /// given as a [`serde_json::Map`] or a [`Value`] (`json!({..})`).
    /// Arguments that are not an object are refused as `parse_input`
    /// refuses them (field `arguments`).
    ///
    /// ```
    /// # use jpstore_engine::event::ToolCallRequest;
    /// let call = ToolCallRequest::new("c1", "fs_read_file", serde_json::json!({"path": "a.rs"}))?;
    /// assert_eq!(call.arguments["path"], "a.rs");
    /// assert!(ToolCallRequest::new("c2", "ls", serde_json::json!("a.rs")).is_err());
    /// # Ok::<(), jpstore_engine::event::FieldError>(())
    /// ```
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<Value>,
    ) -> Result<ToolCallRequest, FieldError> {
        Ok(ToolCallRequest {
            id: id.into(),
            name: name.into(),
            arguments: object(arguments.into(), "arguments")?,
        })
    }
}

impl ToolCallResponse<Payload> {
    /// The successful result of call `id`: its output as one text
    /// (`{"type": "tool_call_response", "id": .., "content": "<text>"}`).
    /// The text goes into the blob store when it is appended.
    ///
    /// ```
    /// # use jpstore_engine::event::ToolCallResponse;
    /// let result = ToolCallResponse::text("c1", "Cargo.toml\nsrc/");
    /// assert!(!result.is_error && result.plain);
    /// ```
    pub fn text(id: impl Into<String>, text: impl Into<String>) -> Self {
        ToolCallResponse {
            id: id.into(),
            content: vec![Block::text(text)],
            plain: true,
            is_error: false,
        }
    }

    /// The failure of call `id`: what the tool said, as one text
    /// (`"is_error": true`).
    ///
    /// ```
    /// # use jpstore_engine::event::ToolCallResponse;
    /// let failed = ToolCallResponse::error("c1", "no such file: a.rs");
    /// assert!(failed.is_error);
    /// ```
    pub fn error(id: impl Into<String>, text: impl Into<String>) -> Self {
        ToolCallResponse {
            is_error: true,
            ..ToolCallResponse::text(id, text)
        }
    }
}

impl<C> ToolCallResponse<C> {
    /// The successful result of call `id` as content blocks (RFD 058: text
    /// and resources, [`Block::text`], [`Block::resource`]).
    ///
    /// ```
    /// # use jpstore_engine::event::{Block, Resource, ToolCallResponse};
    /// let result = ToolCallResponse::blocks(
    ///     "c1",
    ///     vec![
    ///         Block::text("Read 1 file."),
    ///         Block::resource(Resource::text("file:///p/a.rs", "fn main() {}")),
    ///     ],
    /// );
    /// assert_eq!(result.content.len(), 2);
    /// ```
    pub fn blocks(id: impl Into<String>, blocks: Vec<Block<C>>) -> Self {
        ToolCallResponse {
            id: id.into(),
            content: blocks,
            plain: false,
            is_error: false,
        }
    }
}

impl Block<Payload> {
    /// A `text` block (`{"type": "text", "text": ..}`).
    ///
    /// ```
    /// # use jpstore_engine::event::{Block, Payload};
    /// let Block::Text(block) = Block::text("ok") else { unreachable!() };
    /// assert_eq!(block.text, Payload::Inline(b"ok".to_vec()));
    /// ```
    pub fn text(text: impl Into<String>) -> Self {
        Block::Text(TextBlock {
            text: Payload::Inline(text.into().into_bytes()),
            mime_type: None,
            annotations: None,
            extra: Object::new(),
        })
    }
}

impl<C> Block<C> {
    /// A `resource` block holding `resource` (`{"type": "resource",
    /// "resource": ..}`).
    ///
    /// ```
    /// # use jpstore_engine::event::{Block, Resource};
    /// let block = Block::resource(Resource::text("file:///p/a.rs", "fn main() {}"));
    /// assert!(matches!(block, Block::Resource(_)));
    /// ```
    pub fn resource(resource: Resource<C>) -> Self {
        Block::Resource(ResourceBlock {
            resource,
            extra: Object::new(),
        })
    }
}

impl Resource<Payload> {
    /// A text resource: `text` identified by `uri` (`{"uri": ..,
    /// "text": ..}`), as an attach makes of a text file. The text goes
    /// into the blob store when it is appended.
    ///
    /// ```
    /// # use jpstore_engine::event::Resource;
    /// let notes = Resource::text("file:///p/notes.md", "# Notes")
    ///     .with_mime_type("text/markdown")
    ///     .with_name("notes.md");
    /// assert_eq!(notes.name.as_deref(), Some("notes.md"));
    /// ```
    pub fn text(uri: impl Into<String>, text: impl Into<String>) -> Self {
        Resource::new(
            uri,
            ResourceContent::Text(Payload::Inline(text.into().into_bytes())),
        )
    }

    /// A binary resource: `bytes` identified by `uri` (`{"uri": ..,
    /// "blob": "<base64>"}`), as an attach makes of a file that is not
    /// text.
    ///
    /// ```
    /// # use jpstore_engine::event::{Resource, ResourceContent};
    /// let logo = Resource::binary("file:///p/logo.png", b"\x89PNG".to_vec()).with_mime_type("image/png");
    /// assert!(matches!(logo.content, ResourceContent::Binary(_)));
    /// ```
    pub fn binary(uri: impl Into<String>, bytes: impl Into<Vec<u8>>) -> Self {
        Resource::new(uri, ResourceContent::Binary(Payload::Inline(bytes.into())))
    }
}

impl<C> Resource<C> {
    /// A resource of `content` identified by `uri`, with no other field.
    ///
    /// ```
    /// # use jpstore_engine::event::{Payload, Resource, ResourceContent};
    /// let r = Resource::new("file:///p/a.txt", ResourceContent::Text(Payload::Inline(b"a".to_vec())));
    /// assert_eq!(r, Resource::text("file:///p/a.txt", "a"));
    /// ```
    pub fn new(uri: impl Into<String>, content: ResourceContent<C>) -> Self {
        Resource {
            uri: uri.into(),
            content,
            mime_type: None,
            annotations: None,
            name: None,
            title: None,
            description: None,
            formatted: None,
            extra: Object::new(),
        }
    }

    /// The resource with the MIME type of its content (`mimeType`).
    ///
    /// ```
    /// # use jpstore_engine::event::Resource;
    /// let r = Resource::text("file:///p/a.md", "# A").with_mime_type("text/markdown");
    /// assert_eq!(r.mime_type.as_deref(), Some("text/markdown"));
    /// ```
    pub fn with_mime_type(mut self, mime_type: impl Into<String>) -> Self {
        self.mime_type = Some(mime_type.into());
        self
    }

    /// The resource with a short `name` (an attach's: the path relative to
    /// the directory it was run in).
    ///
    /// ```
    /// # use jpstore_engine::event::Resource;
    /// let r = Resource::text("file:///p/src/a.rs", "").with_name("src/a.rs");
    /// assert_eq!(r.name.as_deref(), Some("src/a.rs"));
    /// ```
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

impl ConfigDelta {
    /// A config delta setting what `delta` holds: a sparse config object,
    /// given as a [`serde_json::Map`] or a [`Value`] (`json!({..})`),
    /// merged over the config before it (format-spec.md 4.5). The settings
    /// jp-store reads are checked as `parse_input` checks them: one of the
    /// wrong type, or a delta that is not an object, is refused with the
    /// same [`FieldError`] (field `delta.<key>`, or `delta`).
    ///
    /// ```
    /// # use jpstore_engine::event::ConfigDelta;
    /// use serde_json::json;
    /// let delta = ConfigDelta::new(json!({"assistant": {"model": {"id": "anthropic/claude-sonnet-4-5"}}}))?;
    /// assert!(delta.delta.contains_key("assistant"));
    /// let bad = ConfigDelta::new(json!({"conversation": {"compaction": {"keep_last": "two"}}}));
    /// assert_eq!(bad.expect_err("a string").field, "delta.conversation.compaction.keep_last");
    /// # Ok::<(), jpstore_engine::event::FieldError>(())
    /// ```
    pub fn new(delta: impl Into<Value>) -> Result<ConfigDelta, FieldError> {
        let delta = object(delta.into(), "delta")?;
        check_settings(&delta)?;
        Ok(ConfigDelta { delta })
    }
}

/// The object `value` is, or the error of the JSON parser for the field
/// `field` that is not one.
fn object(value: Value, field: &str) -> Result<Object, FieldError> {
    match value {
        Value::Object(o) => Ok(o),
        other => Err(FieldError {
            field: field.to_owned(),
            message: format!("expected an object, found {}", describe(&other)),
        }),
    }
}

/// Checks the settings of the `delta` of a config delta a user gives
/// (format-spec.md 4.5): a setting of the wrong type is an error naming
/// it as the field `delta.<key>`.
pub(crate) fn check_settings(delta: &Object) -> Result<(), FieldError> {
    crate::config::Settings::parse(delta)
        .map(drop)
        .map_err(|bad| FieldError {
            field: format!("delta.{}", bad.key()),
            message: format!("must be {}, found {}", bad.expected, bad.found),
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::conversation::ConversationId;
    use crate::event::input::parse_input;
    use crate::event::json::ParseMode;
    use crate::{NewConversation, Store, StoreOptions};

    fn at() -> Timestamp {
        Timestamp::from_unix(1_780_000_000, 123_000).expect("a time")
    }

    /// Entries of every shape the constructors make, and the JSON text
    /// `jp-store append` reads for each.
    fn built_and_json() -> Vec<(Entry<Payload>, &'static str)> {
        let t = at();
        let mut signature = Object::new();
        signature.insert("signature".into(), json!("c2ln"));
        vec![
            (
                Entry::at(t, EventKind::TurnStart),
                r#"{"type": "turn_start"}"#,
            ),
            (
                Entry::at(t, ChatRequest::text("What is in Cargo.toml?")),
                r#"{"type": "chat_request", "content": "What is in Cargo.toml?"}"#,
            ),
            (
                Entry::at(
                    t,
                    ChatRequest::text("Review these.").with_resources([
                        Resource::text("file:///p/notes.md", "Notes\n")
                            .with_mime_type("text/markdown")
                            .with_name("notes.md"),
                        Resource::binary("file:///p/logo.png", b"\x89PNG\x00\x01".to_vec())
                            .with_mime_type("image/png")
                            .with_name("logo.png"),
                    ]),
                ),
                r#"{"type": "chat_request", "content": "Review these.", "resources": [
                    {"uri": "file:///p/notes.md", "text": "Notes\n", "mimeType": "text/markdown", "name": "notes.md"},
                    {"uri": "file:///p/logo.png", "blob": "iVBORwAB", "mimeType": "image/png", "name": "logo.png"}]}"#,
            ),
            (
                Entry::at(
                    t,
                    ToolCallRequest::new("c1", "fs_read_file", json!({"path": "Cargo.toml"}))
                        .expect("an object"),
                ),
                r#"{"type": "tool_call_request", "id": "c1", "name": "fs_read_file", "arguments": {"path": "Cargo.toml"}}"#,
            ),
            (
                Entry::at(
                    t,
                    ToolCallResponse::text("c1", "[package]\nname = \"demo\""),
                ),
                r#"{"type": "tool_call_response", "id": "c1", "content": "[package]\nname = \"demo\""}"#,
            ),
            (
                Entry::at(
                    t,
                    ToolCallRequest::new("c2", "ls", Object::new()).expect("an object"),
                ),
                r#"{"type": "tool_call_request", "id": "c2", "name": "ls", "arguments": {}}"#,
            ),
            (
                Entry::at(t, ToolCallResponse::error("c2", "permission denied")),
                r#"{"type": "tool_call_response", "id": "c2", "content": "permission denied", "is_error": true}"#,
            ),
            (
                Entry::at(
                    t,
                    ToolCallRequest::new("c3", "read", json!({})).expect("an object"),
                ),
                r#"{"type": "tool_call_request", "id": "c3", "name": "read"}"#,
            ),
            (
                Entry::at(
                    t,
                    ToolCallResponse::blocks(
                        "c3",
                        vec![
                            Block::text("Read 1 file."),
                            Block::resource(
                                Resource::text("file:///p/a.rs", "fn main() {}")
                                    .with_mime_type("text/x-rust"),
                            ),
                        ],
                    ),
                ),
                r#"{"type": "tool_call_response", "id": "c3", "content": [
                    {"type": "text", "text": "Read 1 file."},
                    {"type": "resource", "resource": {"uri": "file:///p/a.rs", "text": "fn main() {}", "mimeType": "text/x-rust"}}]}"#,
            ),
            (
                Event::at(t, ChatResponse::reasoning("Read the file first."))
                    .with_metadata(signature)
                    .into(),
                r#"{"type": "chat_response", "reasoning": "Read the file first.", "metadata": {"signature": "c2ln"}}"#,
            ),
            (
                Entry::at(t, ChatResponse::data(json!({"files": 1}))),
                r#"{"type": "chat_response", "data": {"files": 1}}"#,
            ),
            (
                Entry::at(t, ChatResponse::message("A package named demo.")),
                r#"{"type": "chat_response", "message": "A package named demo."}"#,
            ),
            (
                Entry::at(
                    t,
                    ConfigDelta::new(json!({"conversation": {"compaction": {"keep_last": 2}}}))
                        .expect("settings of the right types"),
                ),
                r#"{"type": "config_delta", "delta": {"conversation": {"compaction": {"keep_last": 2}}}}"#,
            ),
        ]
    }

    #[test]
    fn constructors_make_the_entries_parse_input_makes_of_the_same_json() {
        for (built, text) in built_and_json() {
            let parsed = parse_input(&format!("[{text}]"), ParseMode::Strict { now: at() })
                .expect("valid input")
                .entries;
            assert_eq!(parsed, vec![built], "{text}");
        }
    }

    #[test]
    fn constructors_refuse_what_parse_input_refuses_with_the_same_error() {
        let strict = ParseMode::Strict { now: at() };
        let input_error = |text: &str| {
            let e = parse_input(text, strict).expect_err("refused");
            (e.field.unwrap_or_default(), e.message)
        };
        let e = ToolCallRequest::new("c1", "ls", json!(["a"])).expect_err("not an object");
        assert_eq!(
            (e.field, e.message),
            input_error(
                r#"{"type": "tool_call_request", "id": "c1", "name": "ls", "arguments": ["a"]}"#
            )
        );
        let e = ConfigDelta::new(json!({"conversation": {"compaction": {"keep_last": "two"}}}))
            .expect_err("a setting of the wrong type");
        assert_eq!(
            (e.field, e.message),
            input_error(
                r#"{"type": "config_delta", "delta": {"conversation": {"compaction": {"keep_last": "two"}}}}"#
            )
        );
        let e = ConfigDelta::new(json!(null)).expect_err("not an object");
        assert_eq!(
            (e.field, e.message),
            input_error(r#"{"type": "config_delta", "delta": null}"#)
        );
    }

    #[test]
    fn constructed_entries_round_trip_through_append_read_and_view() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::init_dir(&dir.path().join("s"), StoreOptions::default()).expect("init");
        let id = ConversationId::parse("built").expect("id");
        let mut writer = store
            .create(NewConversation {
                id: Some(id.clone()),
                ..Default::default()
            })
            .expect("create");
        let built: Vec<Entry<Payload>> = built_and_json().into_iter().map(|(e, _)| e).collect();
        writer.append(built.clone()).expect("append");
        drop(writer);

        // Read back: the same entries, each payload a reference to its
        // content's blob.
        let conversation = store.read(&id).expect("read");
        let logged: Vec<Entry> = built.iter().cloned().map(Entry::hashed).collect();
        assert_eq!(conversation.entries, logged);

        // The view: the entries a view shows, tool results as blocks.
        let view = crate::export::view(&store, &conversation).expect("view");
        let expected: Vec<Entry<Payload>> = logged
            .into_iter()
            .filter(in_view)
            .map(|e| {
                let mut e = e.into_payload_refs();
                if let Entry::Event(Event {
                    kind: EventKind::ToolCallResponse(r),
                    ..
                }) = &mut e
                {
                    r.plain = false;
                }
                e
            })
            .collect();
        assert_eq!(view, expected);
        assert_eq!(view.len(), built.len() - 1, "all but the config delta");
    }
}
