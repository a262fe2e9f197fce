//! Provider request bodies from hand-built views, asserted as exact JSON.

use std::collections::HashMap;

use base64::Engine as _;
use jpstore_blobstore::BlobId;
use serde_json::{json, Value};

use super::*;
use jpstore_engine::event::{
    ChatRequest, ChatResponse, Compaction, Event, EventKind, ResourceBlock, TextBlock,
    ToolCallPolicy, ToolCallRequest, ToolCallResponse,
};
use jpstore_engine::internal::export::find_signature;
use jpstore_engine::timestamp::Timestamp;

// ----- building views ------------------------------------------------------------

/// Blob contents by id: what the reader closure serves.
#[derive(Default)]
struct Blobs(HashMap<BlobId, Vec<u8>>);

impl Blobs {
    /// Stores `bytes` and gives a reference to them.
    fn put(&mut self, bytes: impl Into<Vec<u8>>) -> Payload {
        let bytes = bytes.into();
        let r = BlobRef {
            id: BlobId::of(&bytes),
            size: bytes.len() as u64,
        };
        self.0.insert(r.id, bytes);
        Payload::Ref(r)
    }

    fn read(&self, r: &BlobRef) -> Result<Content, Error> {
        self.0
            .get(&r.id)
            .cloned()
            .map(Content::from)
            .ok_or_else(|| Error::Render {
                what: format!("test reader has no blob {}", r.id),
            })
    }
}

fn inline(text: &str) -> Payload {
    Payload::Inline(text.as_bytes().to_vec())
}

fn event(kind: EventKind<Payload>) -> Entry<Payload> {
    with_metadata(kind, json!({}))
}

fn with_metadata(kind: EventKind<Payload>, metadata: Value) -> Entry<Payload> {
    let Value::Object(metadata) = metadata else {
        panic!("metadata must be an object")
    };
    Entry::Event(Event {
        timestamp: Timestamp::from_unix(1_700_000_000, 0).expect("time"),
        kind,
        metadata,
        extra: Default::default(),
    })
}

fn turn() -> Entry<Payload> {
    event(EventKind::TurnStart)
}

fn ask(text: &str) -> Entry<Payload> {
    ask_with(text, Vec::new())
}

fn ask_with(text: &str, resources: Vec<Resource<Payload>>) -> Entry<Payload> {
    event(EventKind::ChatRequest(ChatRequest {
        content: text.into(),
        schema: None,
        author: None,
        resources,
    }))
}

fn answer(text: &str) -> Entry<Payload> {
    event(EventKind::ChatResponse(ChatResponse::Message(text.into())))
}

fn reasoning(text: &str, metadata: Value) -> Entry<Payload> {
    with_metadata(
        EventKind::ChatResponse(ChatResponse::Reasoning(text.into())),
        metadata,
    )
}

fn call(id: &str, name: &str, arguments: Value) -> Entry<Payload> {
    let Value::Object(arguments) = arguments else {
        panic!("arguments must be an object")
    };
    event(EventKind::ToolCallRequest(ToolCallRequest {
        id: id.into(),
        name: name.into(),
        arguments,
    }))
}

fn result(id: &str, content: Vec<Block<Payload>>, is_error: bool) -> Entry<Payload> {
    event(EventKind::ToolCallResponse(ToolCallResponse {
        id: id.into(),
        content,
        plain: false,
        is_error,
    }))
}

fn text(payload: Payload) -> Block<Payload> {
    Block::Text(TextBlock {
        text: payload,
        mime_type: None,
        annotations: None,
        extra: Default::default(),
    })
}

fn resource(uri: &str, content: ResourceContent<Payload>, mime: Option<&str>) -> Resource<Payload> {
    Resource {
        uri: uri.into(),
        content,
        mime_type: mime.map(str::to_owned),
        annotations: None,
        name: None,
        title: None,
        description: None,
        formatted: None,
        extra: Default::default(),
    }
}

fn resource_block(resource: Resource<Payload>) -> Block<Payload> {
    Block::Resource(ResourceBlock {
        resource,
        extra: Default::default(),
    })
}

fn options() -> RequestOptions {
    RequestOptions {
        model: Some("m-1".into()),
        max_tokens: 1000,
        system: None,
    }
}

/// The body as written and as a `Value`, after checking that the bytes
/// written are those of `serde_json`'s pretty printer of that value (the
/// writer's indentation and escapes).
fn written(write: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>) -> Value {
    let mut out = Vec::new();
    write(&mut out).expect("the request body");
    let value: Value = serde_json::from_slice(&out).expect("the body is JSON");
    let pretty = serde_json::to_vec_pretty(&value).expect("serialize");
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&pretty),
        "written as serde_json writes it pretty"
    );
    value
}

fn anthropic(view: &[Entry<Payload>], blobs: &Blobs) -> Value {
    written(|out| write_anthropic_request(view, &options(), &mut |r| blobs.read(r), out))
}

fn openai(view: &[Entry<Payload>], blobs: &Blobs) -> Value {
    written(|out| write_openai_request(view, &options(), &mut |r| blobs.read(r), out))
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

// ----- tests ---------------------------------------------------------------------

#[test]
fn provider_simple_exchange() {
    let view = vec![turn(), ask("Hello?"), answer("Hi!"), turn(), ask("Bye.")];
    let options = RequestOptions {
        model: Some("claude-x".into()),
        max_tokens: 512,
        system: Some("Be brief.".into()),
    };
    let mut none =
        |r: &BlobRef| -> Result<Content, Error> { panic!("nothing to read, asked for {}", r.id) };
    assert_eq!(
        anthropic_request(&view, &options, &mut none).expect("anthropic"),
        json!({
            "model": "claude-x",
            "max_tokens": 512,
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Hello?"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "Hi!"}]},
                {"role": "user", "content": [{"type": "text", "text": "Bye."}]},
            ],
        })
    );
    assert_eq!(
        openai_request(&view, &options, &mut none).expect("openai"),
        json!({
            "model": "claude-x",
            "max_completion_tokens": 512,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hello?"},
                {"role": "assistant", "content": "Hi!"},
                {"role": "user", "content": "Bye."},
            ],
        })
    );
}

#[test]
fn provider_empty_view_gives_a_body_without_messages() {
    let blobs = Blobs::default();
    assert_eq!(
        anthropic(&[], &blobs),
        json!({"model": "m-1", "max_tokens": 1000, "messages": []})
    );
    assert_eq!(
        openai(&[], &blobs),
        json!({"model": "m-1", "max_completion_tokens": 1000, "messages": []})
    );
    // Without a model the field is left out; an empty system prompt too.
    let bare = RequestOptions {
        system: Some(String::new()),
        ..RequestOptions::default()
    };
    let mut none = |_: &BlobRef| -> Result<Content, Error> { panic!("nothing to read") };
    assert_eq!(
        anthropic_request(&[], &bare, &mut none).expect("anthropic"),
        json!({"max_tokens": 4096, "messages": []})
    );
    assert_eq!(
        openai_request(&[], &bare, &mut none).expect("openai"),
        json!({"max_completion_tokens": 4096, "messages": []})
    );
}

#[test]
fn provider_tool_use_and_results() {
    let mut blobs = Blobs::default();
    let listing = blobs.put("a.rs\nb.rs\n");
    let view = vec![
        turn(),
        ask("List and read."),
        answer("Listing."),
        call("c1", "fs_list", json!({"dir": "src"})),
        call("c2", "fs_read", json!({"path": "nope.rs"})),
        result("c1", vec![text(listing)], false),
        result("c2", vec![text(inline("no such file"))], true),
        answer("Done."),
    ];
    assert_eq!(
        anthropic(&view, &blobs),
        json!({
            "model": "m-1",
            "max_tokens": 1000,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "List and read."}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Listing."},
                    {"type": "tool_use", "id": "c1", "name": "fs_list", "input": {"dir": "src"}},
                    {"type": "tool_use", "id": "c2", "name": "fs_read", "input": {"path": "nope.rs"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "c1",
                     "content": [{"type": "text", "text": "a.rs\nb.rs\n"}], "is_error": false},
                    {"type": "tool_result", "tool_use_id": "c2",
                     "content": [{"type": "text", "text": "no such file"}], "is_error": true},
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
            ],
        })
    );
    assert_eq!(
        openai(&view, &blobs),
        json!({
            "model": "m-1",
            "max_completion_tokens": 1000,
            "messages": [
                {"role": "user", "content": "List and read."},
                {"role": "assistant", "content": "Listing.", "tool_calls": [
                    {"id": "c1", "type": "function",
                     "function": {"name": "fs_list", "arguments": "{\"dir\":\"src\"}"}},
                    {"id": "c2", "type": "function",
                     "function": {"name": "fs_read", "arguments": "{\"path\":\"nope.rs\"}"}},
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "a.rs\nb.rs\n"},
                {"role": "tool", "tool_call_id": "c2", "content": "no such file"},
                {"role": "assistant", "content": "Done."},
            ],
        })
    );
}

#[test]
fn provider_compacted_and_interrupted_tool_calls_from_the_projection() {
    // A log with a stripped tool call (turn 0) and an interrupted one (turn 1),
    // through the real projection.
    let ts = Timestamp::from_unix(1_700_000_000, 0).expect("time");
    let stored = |kind: EventKind<BlobRef>| {
        Entry::Event(Event {
            timestamp: ts,
            kind,
            metadata: Default::default(),
            extra: Default::default(),
        })
    };
    let mut blobs = Blobs::default();
    let Payload::Ref(output) = blobs.put("long output") else {
        panic!("put gives a reference")
    };
    let log = vec![
        stored(EventKind::TurnStart),
        stored(EventKind::ChatRequest(ChatRequest {
            content: "Check.".into(),
            schema: None,
            author: None,
            resources: Vec::new(),
        })),
        stored(EventKind::ToolCallRequest(ToolCallRequest {
            id: "c1".into(),
            name: "cargo_check".into(),
            arguments: json!({"all": true}).as_object().cloned().expect("object"),
        })),
        stored(EventKind::ToolCallResponse(ToolCallResponse {
            id: "c1".into(),
            content: vec![Block::Text(TextBlock {
                text: output,
                mime_type: None,
                annotations: None,
                extra: Default::default(),
            })],
            plain: true,
            is_error: true,
        })),
        stored(EventKind::TurnStart),
        stored(EventKind::ChatRequest(ChatRequest {
            content: "Again.".into(),
            schema: None,
            author: None,
            resources: Vec::new(),
        })),
        stored(EventKind::ToolCallRequest(ToolCallRequest {
            id: "c2".into(),
            name: "cargo_check".into(),
            arguments: Default::default(),
        })),
        stored(EventKind::Compaction(Compaction {
            from_turn: 0,
            to_turn: 0,
            summary: None,
            strip_reasoning: false,
            tool_calls: Some(ToolCallPolicy::Strip {
                request: true,
                response: true,
            }),
            tool_overrides: Default::default(),
            source: None,
        })),
    ];
    let view = jpstore_engine::internal::projection::view(&log);
    assert_eq!(
        anthropic(&view, &blobs)["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Check."}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "c1", "name": "cargo_check", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1",
                 "content": [{"type": "text", "text": "[compacted] cargo_check: error"}],
                 "is_error": true},
                {"type": "text", "text": "Again."},
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "c2", "name": "cargo_check", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c2",
                 "content": [{"type": "text", "text": "Tool call was interrupted."}],
                 "is_error": true},
            ]},
        ])
    );
    assert_eq!(
        openai(&view, &blobs)["messages"],
        json!([
            {"role": "user", "content": "Check."},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "cargo_check", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "[compacted] cargo_check: error"},
            {"role": "user", "content": "Again."},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c2", "type": "function",
                 "function": {"name": "cargo_check", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "c2", "content": "Tool call was interrupted."},
        ])
    );
}

#[test]
fn provider_anthropic_merges_consecutive_roles() {
    let blobs = Blobs::default();
    let view = vec![
        turn(),
        ask("First."),
        turn(),
        ask("Second."),
        answer("One."),
        event(EventKind::ChatResponse(ChatResponse::Data(
            json!({"ok": true, "n": [1, 2]}),
        ))),
        answer("  \n"),
        call("c1", "t", json!({})),
        // A user message between a call and its result: the result still
        // comes first in the merged user message.
        ask("Meanwhile."),
        result("c1", vec![text(inline("r"))], false),
    ];
    assert_eq!(
        anthropic(&view, &blobs)["messages"],
        json!([
            {"role": "user", "content": [
                {"type": "text", "text": "First."},
                {"type": "text", "text": "Second."},
            ]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "One."},
                {"type": "text", "text": "{\"ok\":true,\"n\":[1,2]}"},
                {"type": "tool_use", "id": "c1", "name": "t", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1",
                 "content": [{"type": "text", "text": "r"}], "is_error": false},
                {"type": "text", "text": "Meanwhile."},
            ]},
        ])
    );
    // OpenAI keeps one message per event; data is its JSON text.
    assert_eq!(
        openai(&view, &blobs)["messages"],
        json!([
            {"role": "user", "content": "First."},
            {"role": "user", "content": "Second."},
            {"role": "assistant", "content": "One."},
            {"role": "assistant", "content": "{\"ok\":true,\"n\":[1,2]}"},
            {"role": "assistant", "content": "  \n", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            ]},
            {"role": "user", "content": "Meanwhile."},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ])
    );
}

#[test]
fn provider_thinking_only_with_a_signature() {
    let blobs = Blobs::default();
    let view = vec![
        ask("Think."),
        reasoning("unsigned thought", json!({"openai": {"id": "rs_1"}})),
        reasoning(
            "signed thought",
            json!({"anthropic": {"n": 1, "list": [{"signature": 7}], "signature": "c2lnCg=="}}),
        ),
        answer("Answer."),
    ];
    assert_eq!(
        anthropic(&view, &blobs)["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "Think."}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "signed thought", "signature": "c2lnCg=="},
                {"type": "text", "text": "Answer."},
            ]},
        ])
    );
    // Reasoning alone without a signature leaves no assistant message.
    let unsigned = vec![
        ask("Think."),
        reasoning("t", json!({"signature": {"x": 1}})),
    ];
    assert_eq!(
        anthropic(&unsigned, &blobs)["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "Think."}]}])
    );
    assert_eq!(
        openai(&view, &blobs)["messages"],
        json!([
            {"role": "user", "content": "Think."},
            {"role": "assistant", "content": "Answer."},
        ])
    );
}

#[test]
fn provider_signature_is_found_at_any_depth_in_document_order() {
    let metadata = json!({
        "a": [{"b": {"signature": "deep"}}],
        "signature": "top",
    });
    let Value::Object(metadata) = metadata else {
        panic!("object")
    };
    assert_eq!(find_signature(&metadata), Some("deep"));
    assert_eq!(find_signature(&Default::default()), None);
}

#[test]
fn provider_request_resources() {
    let mut blobs = Blobs::default();
    let pdf = b"%PDF-1.7\n\xe2\xe3 binary".to_vec();
    let png = b"\x89PNG\r\n\x1a\n\x00\x00pixels".to_vec();
    let jpeg = b"\xff\xd8\xff\xe0 jfif".to_vec();
    let mut main_rs = resource(
        "file:///p/src/main.rs",
        ResourceContent::Text(blobs.put("fn main() {}\n")),
        Some("text/x-rust"),
    );
    main_rs.name = Some("src/main.rs".into());
    let mut notes = resource(
        "file:///p/notes.md",
        ResourceContent::Text(inline("# Notes")),
        Some("text/markdown"),
    );
    notes.title = Some("Notes".into());
    notes.name = Some("notes.md".into());
    notes.description = Some("Meeting notes".into());
    notes.formatted = Some(blobs.put("NOTES (formatted)"));
    let spec = resource(
        "file:///p/spec.pdf",
        ResourceContent::Binary(blobs.put(pdf.clone())),
        Some("application/pdf"),
    );
    let logo = resource(
        "file:///p/logo.png",
        ResourceContent::Binary(blobs.put(png.clone())),
        Some("image/png"),
    );
    // No usable MIME type: recognised by its first bytes.
    let photo = resource(
        "file:///p/photo",
        ResourceContent::Binary(Payload::Inline(jpeg.clone())),
        Some("application/octet-stream"),
    );
    let archive = resource(
        "file:///p/a.zip",
        ResourceContent::Binary(blobs.put(b"PK\x03\x04zip".to_vec())),
        Some("application/zip"),
    );
    let view = vec![ask_with(
        "Review these.",
        vec![main_rs, notes, spec, logo, photo, archive],
    )];
    let zip_note = "[binary resource file:///p/a.zip (application/zip, 7 bytes) is not shown]";
    assert_eq!(
        anthropic(&view, &blobs)["messages"],
        json!([{"role": "user", "content": [
            {"type": "document",
             "source": {"type": "text", "media_type": "text/plain", "data": "fn main() {}\n"},
             "title": "src/main.rs"},
            {"type": "document",
             "source": {"type": "text", "media_type": "text/plain", "data": "NOTES (formatted)"},
             "title": "Notes", "context": "Meeting notes"},
            {"type": "document",
             "source": {"type": "base64", "media_type": "application/pdf", "data": b64(&pdf)},
             "title": "file:///p/spec.pdf"},
            {"type": "image",
             "source": {"type": "base64", "media_type": "image/png", "data": b64(&png)}},
            {"type": "image",
             "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(&jpeg)}},
            {"type": "text", "text": zip_note},
            {"type": "text", "text": "Review these."},
        ]}])
    );
    assert_eq!(
        openai(&view, &blobs)["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text":
                "<resource uri=\"file:///p/src/main.rs\" name=\"src/main.rs\" mimeType=\"text/x-rust\">\nfn main() {}\n</resource>"},
            {"type": "text", "text":
                "<resource uri=\"file:///p/notes.md\" name=\"notes.md\" title=\"Notes\" description=\"Meeting notes\" mimeType=\"text/markdown\">\nNOTES (formatted)\n</resource>"},
            {"type": "file", "file": {
                "filename": "spec.pdf",
                "file_data": format!("data:application/pdf;base64,{}", b64(&pdf))}},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{}", b64(&png))}},
            {"type": "image_url", "image_url": {"url": format!("data:image/jpeg;base64,{}", b64(&jpeg))}},
            {"type": "text", "text": zip_note},
            {"type": "text", "text": "Review these."},
        ]}])
    );
}

#[test]
fn provider_tool_resource_blocks() {
    let mut blobs = Blobs::default();
    let mut formatted = resource(
        "file:///p/src/main.rs",
        ResourceContent::Text(blobs.put("fn main() {}")),
        Some("text/rust"),
    );
    formatted.formatted = Some(blobs.put("```rs (src/main.rs, lines 1-1)\nfn main() {}\n```"));
    let rust = resource(
        "file:///p/src/lib.rs",
        ResourceContent::Text(blobs.put("pub mod a;\n")),
        Some("text/x-rust"),
    );
    let readme = resource(
        "file:///p/README.md",
        ResourceContent::Text(inline("Use ```code```.")),
        Some("text/markdown; charset=utf-8"),
    );
    let json_file = resource(
        "file:///p/a.json",
        ResourceContent::Text(inline("{}")),
        Some("application/json"),
    );
    let unknown = resource(
        "file:///p/data.xyz",
        ResourceContent::Text(inline("stuff")),
        Some("application/x-unknown-thing"),
    );
    let untyped = resource("mem://x", ResourceContent::Text(inline("")), None);
    let logo = resource(
        "file:///p/logo.gif",
        ResourceContent::Binary(Payload::Inline(b"GIF89a..".to_vec())),
        Some("image/gif"),
    );
    let question = Block::Other(
        json!({"type": "question", "question": {"id": "q", "text": "Go on?", "schema": {"type": "boolean"}}})
            .as_object()
            .cloned()
            .expect("object"),
    );
    let view = vec![
        ask("Read."),
        call("c1", "read", json!({})),
        result(
            "c1",
            vec![
                text(inline("Here:")),
                resource_block(formatted),
                resource_block(rust),
                resource_block(readme),
                resource_block(json_file),
                resource_block(unknown),
                resource_block(untyped),
                resource_block(logo),
                question,
            ],
            false,
        ),
    ];
    let texts = [
        "Here:",
        "```rs (src/main.rs, lines 1-1)\nfn main() {}\n```",
        "file:///p/src/lib.rs\n```rs\npub mod a;\n```",
        "file:///p/README.md\n````md\nUse ```code```.\n````",
        "file:///p/a.json\n```json\n{}\n```",
        "file:///p/data.xyz\n```\nstuff\n```",
        "mem://x\n```\n```",
    ];
    let question_text =
        r#"{"type":"question","question":{"id":"q","text":"Go on?","schema":{"type":"boolean"}}}"#;
    let mut content: Vec<Value> = texts
        .iter()
        .map(|t| json!({"type": "text", "text": t}))
        .collect();
    content.push(json!({"type": "image",
        "source": {"type": "base64", "media_type": "image/gif", "data": b64(b"GIF89a..")}}));
    content.push(json!({"type": "text", "text": question_text}));
    assert_eq!(
        anthropic(&view, &blobs)["messages"][2],
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "c1", "content": content, "is_error": false},
        ]})
    );
    let mut joined = texts.to_vec();
    let gif_note = "[binary resource file:///p/logo.gif (image/gif, 8 bytes) is not shown]";
    joined.push(gif_note);
    joined.push(question_text);
    assert_eq!(
        openai(&view, &blobs)["messages"][2],
        json!({"role": "tool", "tool_call_id": "c1", "content": joined.join("\n\n")})
    );
}

#[test]
fn provider_fence_language_from_mime_type() {
    let cases = [
        (Some("text/rust"), "rs"),
        (Some("text/x-rust"), "rs"),
        (Some("TEXT/X-Rust; charset=utf-8"), "rs"),
        (Some("text/markdown"), "md"),
        (Some("application/json"), "json"),
        (Some("application/ld+json"), "json"),
        (Some("text/x-python"), "py"),
        (Some("application/toml"), "toml"),
        (Some("text/x-shellscript"), "sh"),
        (Some("text/plain"), ""),
        (Some("text/x-unheard-of"), ""),
        (Some("image/png"), ""),
        (Some("garbage"), ""),
        (None, ""),
    ];
    for (mime, language) in cases {
        assert_eq!(fence_language(mime), language, "{mime:?}");
    }
}

#[test]
fn provider_openai_groups_tool_calls() {
    let blobs = Blobs::default();
    let r = |id: &str| result(id, vec![text(inline("ok"))], false);
    let view = vec![
        turn(),
        ask("Go."),
        reasoning("hidden", json!({})),
        call("a", "t", json!({"n": 1})),
        call("b", "t", json!({"n": 2})),
        r("a"),
        r("b"),
        answer("Next."),
        reasoning("hidden", json!({})),
        call("c", "t", json!({})),
        r("c"),
        answer("Done with this turn."),
        turn(),
        // A call in a new turn does not join the previous turn's message.
        call("d", "t", json!({})),
        r("d"),
    ];
    let call_json = |id: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": "t", "arguments": args}});
    let tool = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "ok"});
    assert_eq!(
        openai(&view, &blobs)["messages"],
        json!([
            {"role": "user", "content": "Go."},
            {"role": "assistant", "content": null,
             "tool_calls": [call_json("a", "{\"n\":1}"), call_json("b", "{\"n\":2}")]},
            tool("a"),
            tool("b"),
            {"role": "assistant", "content": "Next.", "tool_calls": [call_json("c", "{}")]},
            tool("c"),
            {"role": "assistant", "content": "Done with this turn."},
            {"role": "assistant", "content": null, "tool_calls": [call_json("d", "{}")]},
            tool("d"),
        ])
    );
}

#[test]
fn provider_text_that_is_not_utf8_is_an_error_naming_the_blob() {
    let mut blobs = Blobs::default();
    let bad = blobs.put(b"caf\xe9".to_vec());
    let Payload::Ref(bad_ref) = bad.clone() else {
        panic!("put gives a reference")
    };
    let id = bad_ref.id.to_hex();
    let views = [
        vec![
            ask("q"),
            call("c", "t", json!({})),
            result("c", vec![text(bad.clone())], false),
        ],
        vec![ask_with(
            "q",
            vec![resource(
                "file:///x",
                ResourceContent::Text(bad.clone()),
                None,
            )],
        )],
    ];
    for view in &views {
        let reader = |r: &BlobRef| blobs.read(r);
        for rendered in [
            anthropic_request(view, &options(), &mut { reader }),
            openai_request(view, &options(), &mut { reader }),
        ] {
            let error = rendered.expect_err("not UTF-8");
            assert!(matches!(error, Error::Render { .. }), "{error:?}");
            let message = error.to_string();
            assert!(message.contains(&id), "{message}");
            assert!(message.contains("not UTF-8"), "{message}");
        }
    }
    // The same bytes as binary content are fine.
    let view = vec![ask_with(
        "q",
        vec![resource(
            "file:///x",
            ResourceContent::Binary(bad),
            Some("image/png"),
        )],
    )];
    assert_eq!(
        anthropic(&view, &blobs)["messages"][0]["content"][0]["source"]["data"],
        json!(b64(b"caf\xe9"))
    );
    // Errors of the reader pass through.
    let mut failing =
        |_: &BlobRef| -> Result<Content, Error> { Err(Error::NotFound { id: "gone".into() }) };
    let view = vec![
        ask("q"),
        call("c", "t", json!({})),
        result("c", vec![text(Payload::Ref(bad_ref))], false),
    ];
    assert!(matches!(
        anthropic_request(&view, &options(), &mut failing),
        Err(Error::NotFound { .. })
    ));
}

#[test]
fn provider_options_from_settings() {
    let settings = |v: Value| {
        serde_json::from_value::<jpstore_engine::internal::config::Settings>(v)
            .expect("good settings")
    };
    assert_eq!(
        RequestOptions::from_settings(&settings(json!({
            "assistant": {
                "model": {"id": "anthropic/claude-sonnet-4", "parameters": {"max_tokens": 8192}},
                "system_prompt": "You are helpful.",
            }
        }))),
        RequestOptions {
            model: Some("claude-sonnet-4".into()),
            max_tokens: 8192,
            system: Some("You are helpful.".into()),
        }
    );
    assert_eq!(
        RequestOptions::from_settings(&settings(json!({
            "assistant": {"model": {"id": "gpt-5", "parameters": {"temperature": 1}}}
        }))),
        RequestOptions {
            model: Some("gpt-5".into()),
            max_tokens: 4096,
            system: None,
        }
    );
    assert_eq!(
        RequestOptions::from_settings(&settings(json!({
            "assistant": {"model": {"id": {"provider": "openai", "name": "o3"}}}
        })))
        .model,
        Some("o3".into())
    );
    for no_model in [json!({"provider": "openai"}), json!(""), json!("openai/")] {
        assert_eq!(
            RequestOptions::from_settings(&settings(json!({
                "assistant": {"model": {"id": no_model}}
            })))
            .model,
            None,
            "{no_model}"
        );
    }
    assert_eq!(
        RequestOptions::from_settings(&settings(json!({}))),
        RequestOptions::default()
    );
}

/// A blob's text is blank exactly when `str::trim` leaves nothing of it
/// (every white space `char::is_whitespace` knows, ASCII or not).
#[test]
fn provider_blank_text_is_what_trim_empties() {
    let cases = [
        "",
        " ",
        "\t\n\r",
        "\u{0b}",
        "\u{0c}",
        "\u{a0}",
        " \u{3000}\u{2028} ",
        "\u{85}",
        "x",
        " x ",
        "\u{a0}x",
        "é",
        "\u{200b}",
        "\n\n\u{feff}",
    ];
    for s in cases {
        assert_eq!(blank(s.as_bytes()), s.trim().is_empty(), "{s:?}");
    }
    proptest::proptest!(|(s in "[ \\t\\n\\x0b\\x0c\\r\\u{85}\\u{a0}\\u{3000}a-zé]{0,6}")| {
        proptest::prop_assert_eq!(blank(s.as_bytes()), s.trim().is_empty());
    });
}

/// A body of a few MiB is written on two cores ([`Pretty::items`]): the
/// same bytes as `serde_json` writes pretty, and the same messages as the
/// turns written one by one (each small enough to be written on one).
#[test]
fn provider_large_bodies_are_written_in_halves_as_in_one_piece() {
    let mut blobs = Blobs::default();
    let mut turns = Vec::new();
    for t in 0..240 {
        let id = format!("call_{t}");
        let output = format!("line \"{t}\"\t\\ of the tool's output\n").repeat(300);
        turns.push(vec![
            turn(),
            ask(&format!("question {t}: \"why?\"\n")),
            reasoning(
                &format!("thinking {t}"),
                json!({"anthropic": {"signature": b64(&[t as u8; 64])}}),
            ),
            call(
                &id,
                "fs_read_file",
                json!({"path": format!("src/{t}.rs"), "n": t}),
            ),
            result(&id, vec![text(blobs.put(output.into_bytes()))], t % 7 == 0),
            answer(&format!("answer {t} \u{2028} é")),
        ]);
    }
    let view: Vec<Entry<Payload>> = turns.concat();
    for (write, messages_key) in [
        (
            anthropic as fn(&[Entry<Payload>], &Blobs) -> Value,
            "messages",
        ),
        (openai, "messages"),
    ] {
        let whole = write(&view, &blobs);
        let one_by_one: Vec<Value> = turns
            .iter()
            .flat_map(|t| {
                let body = write(t, &blobs);
                body[messages_key].as_array().expect("messages").clone()
            })
            .collect();
        let messages = whole[messages_key].as_array().expect("messages");
        assert!(serde_json::to_vec(&whole).expect("json").len() > 2 << 20);
        assert_eq!(messages.len(), one_by_one.len());
        assert!(messages == &one_by_one, "the same messages");
    }
}
