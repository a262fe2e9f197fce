//! Rendering a view (see [`jpstore_engine::projection::view`]) as the request body of
//! a provider's message API: Anthropic Messages ([`anthropic_request`]) and
//! OpenAI Chat Completions ([`openai_request`]).
//!
//! This is the one place where content is read: inline payloads are used as
//! they are, references are read through the caller's [`ContentReader`].
//! Text (messages, text blocks, text resources, `formatted`) must be UTF-8.
//!
//! What is sent, per view event (`turn_start` is never sent):
//!
//! | event | Anthropic | OpenAI |
//! |---|---|---|
//! | `chat_request` | user: one block per resource, then a `text` block | `user`: a string, or parts when there are resources |
//! | message | assistant `text` | `assistant` |
//! | reasoning | assistant `thinking`, only with a stored signature | not sent |
//! | data | assistant `text` holding the JSON | `assistant` holding the JSON |
//! | `tool_call_request` | assistant `tool_use` | `tool_calls` of an `assistant` message |
//! | `tool_call_response` | user `tool_result` | `tool` |
//!
//! Resources attached to a request: text (or a resource with `formatted`)
//! becomes an Anthropic `document` with a text source, titled by the
//! resource's `title`, else `name`, else `uri` (RFD 065), and for OpenAI a
//! text part wrapped in a `<resource>` element; PDFs a base64 `document`
//! (OpenAI: a `file` part); PNG, JPEG, GIF and WebP images an `image` block
//! (OpenAI: an `image_url` data URL); other binary content a short text
//! note. A binary resource without a MIME type (or `application/octet-stream`)
//! is recognised by its first bytes.
//!
//! Tool responses (RFD 058): `text` blocks as they are; a `resource` block as
//! its `formatted` text if present, else its URI followed by the content in a
//! fenced code block whose language comes from the MIME type
//! ([`fence_language`]); other blocks (`question`, unknown types) as their
//! JSON. For Anthropic, images and PDFs inside a tool response are sent as
//! `image` and `document` blocks of the `tool_result`; OpenAI tool messages
//! hold text only, so they become notes there.
//!
//! Anthropic requires alternating roles and non-blank text blocks: blank text
//! blocks are left out, consecutive events of the same role are merged into
//! one message, and in a user message the `tool_result` blocks are moved
//! before the other blocks (keeping their order), as the API requires.

use std::borrow::Cow;

use base64::Engine as _;
use serde_json::{json, Map, Value};

use jpstore_engine::config::settings::ModelId;
use jpstore_engine::config::Settings;
use jpstore_engine::conversation::read::Conversation;
use jpstore_engine::error::Error;
use jpstore_engine::event::{
    BlobRef, Block, ChatRequest, ChatResponse, Entry, EventKind, Object, Payload, Resource,
    ResourceContent, ToolCallRequest, ToolCallResponse,
};
use jpstore_engine::export::view_and_settings;
use jpstore_engine::Store;

/// A provider whose request body [`provider_request`] renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Chat Completions API.
    OpenAi,
}

/// The request body of `provider`'s message API for the view of a
/// conversation ([`jpstore_engine::export::view`]), with model and system
/// prompt from the config in effect at its end; content is read from the
/// blob store.
pub fn provider_request(
    store: &Store,
    conversation: &Conversation,
    provider: Provider,
) -> Result<Value, Error> {
    let (view, settings) = view_and_settings(store, conversation)?;
    let options = RequestOptions::from_settings(&settings);
    let mut read = |r: &BlobRef| -> Result<Vec<u8>, Error> { Ok(store.blobs().get(&r.id)?) };
    match provider {
        Provider::Anthropic => anthropic_request(&view, &options, &mut read),
        Provider::OpenAi => openai_request(&view, &options, &mut read),
    }
}

/// [`provider_request`] of a conversation opened for its view
/// ([`Store::open_view`]: the settings from the head cache when they are
/// current), which it consumes.
pub fn provider_request_view(
    store: &Store,
    view: jpstore_engine::export::ConversationView<'_>,
    provider: Provider,
) -> Result<Value, Error> {
    let options = RequestOptions::from_settings(&view.settings().end);
    let view = view.into_entries()?;
    let mut read = |r: &BlobRef| -> Result<Vec<u8>, Error> { Ok(store.blobs().get(&r.id)?) };
    match provider {
        Provider::Anthropic => anthropic_request(&view, &options, &mut read),
        Provider::OpenAi => openai_request(&view, &options, &mut read),
    }
}

/// Reads the raw bytes of a referenced payload (the caller reads the blob
/// store).
pub type ContentReader<'a> = dyn FnMut(&BlobRef) -> Result<Vec<u8>, Error> + 'a;

/// `max_tokens` when neither the caller nor the config sets it.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

/// Request settings besides the messages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestOptions {
    /// The model id as the provider knows it (no `provider/` prefix); the
    /// `model` field is left out when `None`.
    pub model: Option<String>,
    /// The most tokens the answer may have (OpenAI: `max_completion_tokens`).
    pub max_tokens: u32,
    /// The system prompt; left out when `None` or empty.
    pub system: Option<String>,
}

impl Default for RequestOptions {
    fn default() -> Self {
        RequestOptions {
            model: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            system: None,
        }
    }
}

impl RequestOptions {
    /// Options from a conversation's settings (JP's keys):
    /// - `model` from `assistant.model.id`, a string `provider/model` whose
    ///   first segment is stripped (`anthropic/claude-sonnet-4` gives
    ///   `claude-sonnet-4`), or a table `{provider, name}` whose `name` is
    ///   taken;
    /// - `max_tokens` from `assistant.model.parameters.max_tokens`, else
    ///   [`DEFAULT_MAX_TOKENS`];
    /// - `system` from `assistant.system_prompt`.
    pub fn from_settings(settings: &Settings) -> Self {
        let model = &settings.assistant.model;
        let name = match &model.id {
            None => None,
            Some(ModelId::Joined(id)) => Some(id.split_once('/').map_or(id.as_str(), |(_, m)| m)),
            Some(ModelId::Parts(parts)) => parts.name.as_deref(),
        };
        RequestOptions {
            model: name.filter(|m| !m.is_empty()).map(str::to_owned),
            max_tokens: model.parameters.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            system: settings.assistant.system_prompt.clone(),
        }
    }

    fn system(&self) -> Option<&str> {
        self.system.as_deref().filter(|s| !s.is_empty())
    }
}

// ----- reading content ---------------------------------------------------------

/// Reads payloads: inline ones as they are, references through the caller.
struct Reader<'r, 'a> {
    content: &'r mut ContentReader<'a>,
}

impl Reader<'_, '_> {
    fn bytes<'p>(&mut self, payload: &'p Payload) -> Result<Cow<'p, [u8]>, Error> {
        Ok(match payload {
            Payload::Inline(b) => Cow::Borrowed(b),
            Payload::Ref(r) => Cow::Owned((self.content)(r)?),
        })
    }

    fn text(&mut self, payload: &Payload) -> Result<String, Error> {
        match payload {
            Payload::Inline(b) => match std::str::from_utf8(b) {
                Ok(s) => Ok(s.to_owned()),
                Err(e) => Err(Error::Render {
                    what: format!("inline text is not UTF-8 ({e})"),
                }),
            },
            Payload::Ref(r) => String::from_utf8((self.content)(r)?).map_err(|e| Error::Render {
                what: format!("blob {} is not UTF-8 text ({})", r.id, e.utf8_error()),
            }),
        }
    }

    fn base64(&mut self, payload: &Payload) -> Result<String, Error> {
        Ok(base64::engine::general_purpose::STANDARD.encode(self.bytes(payload)?))
    }
}

// ----- MIME types --------------------------------------------------------------

/// The essence of a MIME type: no parameters, trimmed, lower case.
fn essence(mime: &str) -> String {
    mime.split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The language tag of a fenced code block for content of MIME type `mime`
/// (RFD 058): e.g. `text/rust` and `text/x-rust` give `rs`, `text/markdown`
/// `md`, `application/json` (and any `+json` type) `json`. Parameters and
/// case are ignored. Unknown types, `text/plain` and no type give `""` (a
/// fence without a tag).
pub fn fence_language(mime: Option<&str>) -> &'static str {
    let Some(mime) = mime else { return "" };
    let essence = essence(mime);
    let Some((kind, sub)) = essence.split_once('/') else {
        return "";
    };
    if sub.ends_with("+json") {
        return "json";
    }
    if sub.ends_with("+xml") {
        return "xml";
    }
    if sub.ends_with("+yaml") {
        return "yaml";
    }
    if !matches!(kind, "text" | "application") {
        return "";
    }
    let sub = sub.strip_prefix("x-").unwrap_or(sub);
    match sub {
        "rust" | "rustsrc" => "rs",
        "markdown" | "md" => "md",
        "json" | "ndjson" | "jsonl" => "json",
        "python" | "python3" | "script.python" => "py",
        "javascript" | "ecmascript" => "js",
        "typescript" => "ts",
        "toml" => "toml",
        "yaml" => "yaml",
        "xml" => "xml",
        "html" => "html",
        "css" => "css",
        "csv" => "csv",
        "sql" => "sql",
        "shellscript" | "sh" | "shell" | "bash" | "zsh" => "sh",
        "c" | "csrc" | "chdr" => "c",
        "c++" | "c++src" | "c++hdr" | "cpp" => "cpp",
        "go" => "go",
        "java" | "java-source" => "java",
        "kotlin" => "kt",
        "scala" => "scala",
        "swift" => "swift",
        "ruby" => "rb",
        "php" => "php",
        "perl" => "pl",
        "lua" => "lua",
        "haskell" => "hs",
        "diff" | "patch" => "diff",
        "nix" => "nix",
        "dockerfile" => "dockerfile",
        "makefile" => "makefile",
        _ => "",
    }
}

/// Image types both providers accept.
fn image_type(essence: &str) -> Option<&'static str> {
    match essence {
        "image/png" => Some("image/png"),
        "image/jpeg" | "image/jpg" | "image/pjpeg" => Some("image/jpeg"),
        "image/gif" => Some("image/gif"),
        "image/webp" => Some("image/webp"),
        _ => None,
    }
}

/// The kind of binary content, by its first bytes.
fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"%PDF-") {
        Some("application/pdf")
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else {
        None
    }
}

// ----- parts ---------------------------------------------------------------------

/// A piece of user or tool content, before a provider's shape is applied.
enum Part<'v> {
    /// Plain text.
    Text(String),
    /// A text resource attached to a request (`text` is its content, or its
    /// `formatted` text).
    Document {
        resource: &'v Resource<Payload>,
        text: String,
    },
    /// A PDF, base64.
    Pdf {
        resource: &'v Resource<Payload>,
        data: String,
    },
    /// An image of a type both providers accept, base64.
    Image {
        resource: &'v Resource<Payload>,
        media_type: &'static str,
        data: String,
    },
}

/// The title of a resource: `title`, else `name`, else `uri` (RFD 065).
fn title(resource: &Resource<Payload>) -> &str {
    resource
        .title
        .as_deref()
        .or(resource.name.as_deref())
        .unwrap_or(&resource.uri)
}

/// The text that stands for binary content that is not sent.
fn binary_note(resource: &Resource<Payload>) -> String {
    let mime = resource
        .mime_type
        .as_deref()
        .unwrap_or("unknown type")
        .to_owned();
    let size = resource.content.payload().len();
    let name = title(resource);
    let named = if name == resource.uri {
        String::new()
    } else {
        format!("{name}, ")
    };
    format!(
        "[binary resource {} ({named}{mime}, {size} bytes) is not shown]",
        resource.uri
    )
}

/// The part for binary content: a PDF, an image, or (when `inline` is false
/// or the type is neither) a note. Content is read only when it is sent or
/// its type must be recognised by its first bytes.
fn binary_part<'v>(
    resource: &'v Resource<Payload>,
    payload: &Payload,
    reader: &mut Reader<'_, '_>,
    inline: bool,
) -> Result<Part<'v>, Error> {
    if !inline {
        return Ok(Part::Text(binary_note(resource)));
    }
    let declared = resource.mime_type.as_deref().map(essence);
    let bytes = match declared.as_deref() {
        None | Some("application/octet-stream") => Some(reader.bytes(payload)?),
        _ => None,
    };
    let kind = match (&declared, &bytes) {
        (_, Some(b)) => sniff(b),
        (Some(m), None) if m == "application/pdf" => Some("application/pdf"),
        (Some(m), None) => image_type(m),
        (None, None) => None,
    };
    let Some(kind) = kind else {
        return Ok(Part::Text(binary_note(resource)));
    };
    let engine = base64::engine::general_purpose::STANDARD;
    let data = match bytes {
        Some(b) => engine.encode(b),
        None => reader.base64(payload)?,
    };
    Ok(if kind == "application/pdf" {
        Part::Pdf { resource, data }
    } else {
        Part::Image {
            resource,
            media_type: kind,
            data,
        }
    })
}

/// A resource attached to a request.
fn request_resource<'v>(
    resource: &'v Resource<Payload>,
    reader: &mut Reader<'_, '_>,
) -> Result<Part<'v>, Error> {
    if let Some(formatted) = &resource.formatted {
        let text = reader.text(formatted)?;
        return Ok(Part::Document { resource, text });
    }
    match &resource.content {
        ResourceContent::Text(p) => Ok(Part::Document {
            resource,
            text: reader.text(p)?,
        }),
        ResourceContent::Binary(p) => binary_part(resource, p, reader, true),
    }
}

/// The fence for `text`: three backticks, or one more than the longest run
/// of backticks in it.
fn fence(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        if c == '`' {
            run += 1;
            longest = longest.max(run);
        } else {
            run = 0;
        }
    }
    "`".repeat((longest + 1).max(3))
}

/// A text resource of a tool response without `formatted` (RFD 058): its URI,
/// then the content in a fenced code block tagged by the MIME type.
fn fenced(resource: &Resource<Payload>, text: &str) -> String {
    let fence = fence(text);
    let language = fence_language(resource.mime_type.as_deref());
    let newline = if text.is_empty() || text.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    format!(
        "{}\n{fence}{language}\n{text}{newline}{fence}",
        resource.uri
    )
}

/// A block of a tool response. `inline_binary`: images and PDFs are sent as
/// such (else as notes).
fn tool_block<'v>(
    block: &'v Block<Payload>,
    reader: &mut Reader<'_, '_>,
    inline_binary: bool,
) -> Result<Part<'v>, Error> {
    match block {
        Block::Text(t) => Ok(Part::Text(reader.text(&t.text)?)),
        Block::Resource(rb) => {
            let resource = &rb.resource;
            if let Some(formatted) = &resource.formatted {
                return Ok(Part::Text(reader.text(formatted)?));
            }
            match &resource.content {
                ResourceContent::Text(p) => Ok(Part::Text(fenced(resource, &reader.text(p)?))),
                ResourceContent::Binary(p) => binary_part(resource, p, reader, inline_binary),
            }
        }
        Block::Other(o) => Ok(Part::Text(Value::Object(o.clone()).to_string())),
    }
}

/// The JSON of structured output, as text.
fn data_text(data: &Value) -> String {
    data.to_string()
}

// ----- Anthropic -----------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }
}

/// The first string leaf whose key is `signature`, searched depth first in
/// document order.
fn find_signature(metadata: &Object) -> Option<&str> {
    // Values are pushed in reverse so that they pop in document order.
    let mut stack: Vec<(Option<&str>, &Value)> = metadata
        .iter()
        .rev()
        .map(|(k, v)| (Some(k.as_str()), v))
        .collect();
    while let Some((key, value)) = stack.pop() {
        match value {
            Value::String(s) if key == Some("signature") => return Some(s),
            Value::Object(o) => stack.extend(o.iter().rev().map(|(k, v)| (Some(k.as_str()), v))),
            Value::Array(a) => stack.extend(a.iter().rev().map(|v| (None, v))),
            _ => {}
        }
    }
    None
}

fn anthropic_text(text: String) -> Option<Value> {
    if text.trim().is_empty() {
        None
    } else {
        Some(json!({"type": "text", "text": text}))
    }
}

fn anthropic_part(part: Part<'_>) -> Option<Value> {
    match part {
        Part::Text(text) => anthropic_text(text),
        Part::Document { resource, text } => {
            let mut block = json!({
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": text},
                "title": title(resource),
            });
            if let Some(d) = &resource.description {
                block["context"] = Value::String(d.clone());
            }
            Some(block)
        }
        Part::Pdf { resource, data } => {
            let mut block = json!({
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": data},
                "title": title(resource),
            });
            if let Some(d) = &resource.description {
                block["context"] = Value::String(d.clone());
            }
            Some(block)
        }
        Part::Image {
            media_type, data, ..
        } => Some(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        })),
    }
}

fn anthropic_request_blocks(
    request: &ChatRequest<Payload>,
    reader: &mut Reader<'_, '_>,
) -> Result<Vec<Value>, Error> {
    let mut blocks = Vec::with_capacity(request.resources.len() + 1);
    for resource in &request.resources {
        blocks.extend(anthropic_part(request_resource(resource, reader)?));
    }
    blocks.extend(anthropic_text(request.content.clone()));
    Ok(blocks)
}

fn anthropic_tool_result(
    response: &ToolCallResponse<Payload>,
    reader: &mut Reader<'_, '_>,
) -> Result<Value, Error> {
    let mut content = Vec::with_capacity(response.content.len());
    for block in &response.content {
        content.extend(anthropic_part(tool_block(block, reader, true)?));
    }
    let mut result = json!({"type": "tool_result", "tool_use_id": response.id});
    if !content.is_empty() {
        result["content"] = Value::Array(content);
    }
    result["is_error"] = Value::Bool(response.is_error);
    Ok(result)
}

fn anthropic_tool_use(call: &ToolCallRequest) -> Value {
    json!({
        "type": "tool_use",
        "id": call.id,
        "name": call.name,
        "input": call.arguments,
    })
}

/// Renders `view` as the body of an Anthropic Messages API request
/// (`POST /v1/messages`): `{"model"?, "max_tokens", "system"?, "messages"}`.
///
/// Consecutive events of the same role form one message; blank text blocks
/// are left out; reasoning is sent as a `thinking` block only when its
/// event's metadata holds a `signature` string (at any depth), and is left
/// out otherwise. Fails when a payload cannot be read or text is not UTF-8
/// ([`Error::Render`], naming the blob).
pub fn anthropic_request(
    view: &[Entry<Payload>],
    options: &RequestOptions,
    content: &mut ContentReader<'_>,
) -> Result<Value, Error> {
    let mut reader = Reader { content };
    let mut messages: Vec<(Role, Vec<Value>)> = Vec::new();
    for entry in view {
        let Some(event) = entry.event() else { continue };
        let (role, blocks) = match &event.kind {
            EventKind::ChatRequest(r) => (Role::User, anthropic_request_blocks(r, &mut reader)?),
            EventKind::ChatResponse(ChatResponse::Message(text)) => (
                Role::Assistant,
                anthropic_text(text.clone()).into_iter().collect(),
            ),
            EventKind::ChatResponse(ChatResponse::Data(data)) => (
                Role::Assistant,
                anthropic_text(data_text(data)).into_iter().collect(),
            ),
            EventKind::ChatResponse(ChatResponse::Reasoning(text)) => {
                match find_signature(&event.metadata) {
                    Some(signature) => (
                        Role::Assistant,
                        vec![json!({"type": "thinking", "thinking": text, "signature": signature})],
                    ),
                    None => continue,
                }
            }
            EventKind::ToolCallRequest(call) => (Role::Assistant, vec![anthropic_tool_use(call)]),
            EventKind::ToolCallResponse(r) => {
                (Role::User, vec![anthropic_tool_result(r, &mut reader)?])
            }
            // Not part of what a model is sent (a view holds none of them;
            // listed so that a new kind must be decided on here).
            EventKind::TurnStart
            | EventKind::InquiryRequest(_)
            | EventKind::InquiryResponse(_)
            | EventKind::ConfigDelta(_)
            | EventKind::Compaction(_)
            | EventKind::CompactionUndo(_) => continue,
        };
        if blocks.is_empty() {
            continue;
        }
        match messages.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => messages.push((role, blocks)),
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == Role::User {
                // Stable: tool results first, each group in its order.
                blocks.sort_by_key(|b| b["type"] != "tool_result");
            }
            json!({"role": role.as_str(), "content": blocks})
        })
        .collect();
    let mut body = Map::new();
    if let Some(model) = &options.model {
        body.insert("model".into(), Value::String(model.clone()));
    }
    body.insert("max_tokens".into(), options.max_tokens.into());
    if let Some(system) = options.system() {
        body.insert("system".into(), Value::String(system.to_owned()));
    }
    body.insert("messages".into(), Value::Array(messages));
    Ok(Value::Object(body))
}

// ----- OpenAI --------------------------------------------------------------------

/// Escapes text for an XML attribute value.
fn xml_attribute(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            _ => out.push(c),
        }
    }
    out
}

/// A text resource as a text part: `<resource uri=".." name=".." ...>`,
/// the text, `</resource>`.
fn xml_resource(resource: &Resource<Payload>, text: &str) -> String {
    let mut open = format!("<resource uri=\"{}\"", xml_attribute(&resource.uri));
    let attributes = [
        ("name", &resource.name),
        ("title", &resource.title),
        ("description", &resource.description),
        ("mimeType", &resource.mime_type),
    ];
    for (key, value) in attributes {
        if let Some(value) = value {
            open.push_str(&format!(" {key}=\"{}\"", xml_attribute(value)));
        }
    }
    let newline = if text.is_empty() || text.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    format!("{open}>\n{text}{newline}</resource>")
}

/// The file name of a PDF part.
fn file_name(resource: &Resource<Payload>) -> String {
    match &resource.name {
        Some(name) => name.clone(),
        None => resource
            .uri
            .rsplit('/')
            .find(|s| !s.is_empty())
            .unwrap_or("document.pdf")
            .to_owned(),
    }
}

fn openai_part(part: Part<'_>) -> Value {
    match part {
        Part::Text(text) => json!({"type": "text", "text": text}),
        Part::Document { resource, text } => {
            json!({"type": "text", "text": xml_resource(resource, &text)})
        }
        Part::Pdf { resource, data } => json!({
            "type": "file",
            "file": {
                "filename": file_name(resource),
                "file_data": format!("data:application/pdf;base64,{data}"),
            },
        }),
        Part::Image {
            media_type, data, ..
        } => json!({
            "type": "image_url",
            "image_url": {"url": format!("data:{media_type};base64,{data}")},
        }),
    }
}

/// A part of a tool message, which holds text only.
fn openai_tool_text(part: Part<'_>) -> String {
    match part {
        Part::Text(text) => text,
        Part::Document { resource, text } => xml_resource(resource, &text),
        Part::Pdf { resource, .. } | Part::Image { resource, .. } => binary_note(resource),
    }
}

/// A message being built.
enum OpenAiMessage {
    /// Complete.
    Done(Value),
    /// An assistant message, to which tool calls may still be added.
    Assistant {
        content: Option<String>,
        tool_calls: Vec<Value>,
    },
}

impl OpenAiMessage {
    fn into_json(self) -> Value {
        match self {
            OpenAiMessage::Done(v) => v,
            OpenAiMessage::Assistant {
                content,
                tool_calls,
            } => {
                let mut m = json!({"role": "assistant", "content": content});
                if !tool_calls.is_empty() {
                    m["tool_calls"] = Value::Array(tool_calls);
                }
                m
            }
        }
    }
}

fn openai_user(
    request: &ChatRequest<Payload>,
    reader: &mut Reader<'_, '_>,
) -> Result<Value, Error> {
    if request.resources.is_empty() {
        return Ok(json!({"role": "user", "content": request.content}));
    }
    let mut parts = Vec::with_capacity(request.resources.len() + 1);
    for resource in &request.resources {
        parts.push(openai_part(request_resource(resource, reader)?));
    }
    if !request.content.is_empty() {
        parts.push(json!({"type": "text", "text": request.content}));
    }
    Ok(json!({"role": "user", "content": parts}))
}

fn openai_tool(
    response: &ToolCallResponse<Payload>,
    reader: &mut Reader<'_, '_>,
) -> Result<Value, Error> {
    let mut texts = Vec::with_capacity(response.content.len());
    for block in &response.content {
        texts.push(openai_tool_text(tool_block(block, reader, false)?));
    }
    Ok(json!({
        "role": "tool",
        "tool_call_id": response.id,
        "content": texts.join("\n\n"),
    }))
}

/// Renders `view` as the body of an OpenAI Chat Completions request
/// (`POST /v1/chat/completions`): `{"model"?, "max_completion_tokens",
/// "messages"}`, the system prompt (if any) as the first message.
///
/// Tool calls join the assistant message right before them when it is of
/// the same turn and no tool result or user message came between (so
/// consecutive calls form one message); otherwise they open an assistant
/// message with `content: null`. Reasoning is not sent. A tool message is
/// the text of its blocks joined by blank lines. Fails when a payload cannot
/// be read or text is not UTF-8 ([`Error::Render`], naming the blob).
pub fn openai_request(
    view: &[Entry<Payload>],
    options: &RequestOptions,
    content: &mut ContentReader<'_>,
) -> Result<Value, Error> {
    let mut reader = Reader { content };
    let mut messages: Vec<OpenAiMessage> = Vec::new();
    if let Some(system) = options.system() {
        messages.push(OpenAiMessage::Done(
            json!({"role": "system", "content": system}),
        ));
    }
    // Whether the last message is an assistant message tool calls may join.
    let mut open = false;
    for entry in view {
        let Some(event) = entry.event() else { continue };
        match &event.kind {
            EventKind::TurnStart => open = false,
            EventKind::ChatRequest(r) => {
                messages.push(OpenAiMessage::Done(openai_user(r, &mut reader)?));
                open = false;
            }
            EventKind::ChatResponse(ChatResponse::Message(text)) => {
                messages.push(OpenAiMessage::Assistant {
                    content: Some(text.clone()),
                    tool_calls: Vec::new(),
                });
                open = true;
            }
            EventKind::ChatResponse(ChatResponse::Data(data)) => {
                messages.push(OpenAiMessage::Assistant {
                    content: Some(data_text(data)),
                    tool_calls: Vec::new(),
                });
                open = true;
            }
            EventKind::ChatResponse(ChatResponse::Reasoning(_)) => {}
            EventKind::ToolCallRequest(call) => {
                let call = json!({
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        "arguments": Value::Object(call.arguments.clone()).to_string(),
                    },
                });
                match messages.last_mut() {
                    Some(OpenAiMessage::Assistant { tool_calls, .. }) if open => {
                        tool_calls.push(call)
                    }
                    _ => messages.push(OpenAiMessage::Assistant {
                        content: None,
                        tool_calls: vec![call],
                    }),
                }
                open = true;
            }
            EventKind::ToolCallResponse(r) => {
                messages.push(OpenAiMessage::Done(openai_tool(r, &mut reader)?));
                open = false;
            }
            EventKind::InquiryRequest(_)
            | EventKind::InquiryResponse(_)
            | EventKind::ConfigDelta(_)
            | EventKind::Compaction(_)
            | EventKind::CompactionUndo(_) => {}
        }
    }
    let mut body = Map::new();
    if let Some(model) = &options.model {
        body.insert("model".into(), Value::String(model.clone()));
    }
    body.insert("max_completion_tokens".into(), options.max_tokens.into());
    body.insert(
        "messages".into(),
        Value::Array(messages.into_iter().map(OpenAiMessage::into_json).collect()),
    );
    Ok(Value::Object(body))
}

#[cfg(test)]
mod tests;
