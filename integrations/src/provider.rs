//! Rendering a view (see [`jpstore_engine::internal::projection::view`]) as the request body of
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

use jpstore_engine::internal::StoreInterior as _;
use jpstore_engine::internal::ViewInterior as _;
use std::borrow::Cow;

use serde_json::Value;

use jpstore_blobstore::Content;
use jpstore_engine::error::Error;
use jpstore_engine::event::{BlobRef, Block, Entry, Payload, Resource, ResourceContent};
use jpstore_engine::export::ConversationView;
use jpstore_engine::internal::config::ModelId;
use jpstore_engine::internal::config::Settings;
use jpstore_engine::internal::event::binary::value::JsonStyle;
use jpstore_engine::internal::export::{Arguments, ToolContent, ViewEvent, ViewEvents};
use jpstore_engine::Store;

mod pretty;
use pretty::Pretty;

/// A provider whose request body [`provider_request_view`] renders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// Anthropic's Messages API.
    Anthropic,
    /// OpenAI's Chat Completions API.
    OpenAi,
}

/// The request body of `provider`'s message API for the view of a
/// conversation opened for it ([`Store::open_view`]: the settings from the
/// head cache when they are current), which it consumes: model and system
/// prompt from the config in effect at its end, content read from the blob
/// store.
pub fn provider_request_view(
    store: &Store,
    view: ConversationView<'_>,
    provider: Provider,
) -> Result<Value, Error> {
    body_value(|out| write_provider_request_view(store, view, provider, out))
}

/// [`provider_request_view`] appended to `out` as pretty JSON, byte for
/// byte as `serde_json::to_writer_pretty` writes that `Value` (what
/// `jp-store view --format anthropic` prints), written while the view is
/// walked ([`write_anthropic_request`]).
pub fn write_provider_request_view(
    store: &Store,
    view: ConversationView<'_>,
    provider: Provider,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let options = RequestOptions::of_view(&view);
    let events = jpstore_engine::internal::export::view_events(view)?;
    write_provider_request_events(store, &events, &options, provider, out)
}

/// The events of a view's entries.
fn entry_events(view: &[Entry<Payload>]) -> impl Iterator<Item = Result<ViewEvent<'_>, Error>> {
    view.iter().map(|e| Ok(ViewEvent::of(e)))
}

/// [`write_provider_request_view`] of a view's events
/// ([`ConversationView::into_events`]): a long view planned in two halves
/// on two cores.
fn write_provider_request_events(
    store: &Store,
    events: &ViewEvents,
    options: &RequestOptions,
    provider: Provider,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    match provider {
        Provider::Anthropic => {
            plan_in_halves::<AnthropicPlan<'_>>(events, store)?.write(options, out)
        }
        Provider::OpenAi => plan_in_halves::<OpenAiPlan<'_>>(events, store)?.write(options, out),
    }
}

/// Reads the raw bytes of a referenced payload (the caller reads the blob
/// store).
pub type ContentReader<'a> = dyn FnMut(&BlobRef) -> Result<Content, Error> + 'a;

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
    /// The options of a request for `view`'s conversation (what
    /// [`provider_request_view`] sends), from its settings at its end
    /// (JP's keys):
    /// - `model` from `assistant.model.id`, a string `provider/model` whose
    ///   first segment is stripped (`anthropic/claude-sonnet-4` gives
    ///   `claude-sonnet-4`), or a table `{provider, name}` whose `name` is
    ///   taken;
    /// - `max_tokens` from `assistant.model.parameters.max_tokens`, else
    ///   [`DEFAULT_MAX_TOKENS`];
    /// - `system` from `assistant.system_prompt`.
    pub fn of_view(view: &ConversationView<'_>) -> Self {
        Self::from_settings(&view.settings().end)
    }

    /// [`RequestOptions::of_view`] from a conversation's settings.
    pub(crate) fn from_settings(settings: &Settings) -> Self {
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
            Payload::Ref(r) => Cow::Owned((self.content)(r)?.into_vec()),
        })
    }

    fn text<'p>(&mut self, payload: &'p Payload) -> Result<Cow<'p, str>, Error> {
        match payload {
            Payload::Inline(b) => match std::str::from_utf8(b) {
                Ok(s) => Ok(Cow::Borrowed(s)),
                Err(e) => Err(Error::Render {
                    what: format!("inline text is not UTF-8 ({e})"),
                }),
            },
            Payload::Ref(r) => String::from_utf8((self.content)(r)?.into_vec())
                .map(Cow::Owned)
                .map_err(|e| not_utf8(r, e.utf8_error())),
        }
    }

    /// The text of blob `r`, checked to be UTF-8.
    fn blob_text(&mut self, r: &BlobRef) -> Result<Content, Error> {
        let content = (self.content)(r)?;
        content.check_utf8().map_err(|e| not_utf8(r, e))?;
        Ok(content)
    }
}

fn not_utf8(r: &BlobRef, e: std::str::Utf8Error) -> Error {
    Error::Render {
        what: format!("blob {} is not UTF-8 text ({e})", r.id),
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

/// Text as a request sends it, kept in the pieces it is made of (written
/// into the body without being joined first).
enum Text<'v> {
    /// Text of the view or of a blob, as it is.
    Plain(Cow<'v, str>),
    /// The text of a blob, checked to be UTF-8 when it was read (shared with
    /// the group cache, not copied).
    Blob(Content),
    /// A text resource of a tool response (RFD 058): its URI, a line break,
    /// the fence and the language tag, a line break, the content, a line
    /// break unless the content ends with one, the fence.
    Fenced {
        uri: &'v str,
        fence: String,
        language: &'static str,
        content: Cow<'v, str>,
    },
}

impl Text<'_> {
    /// The pieces of the text, in order (unused ones empty), each UTF-8.
    fn pieces(&self) -> [&[u8]; 8] {
        match self {
            Text::Plain(s) => [s.as_bytes(), b"", b"", b"", b"", b"", b"", b""],
            Text::Blob(c) => [c, b"", b"", b"", b"", b"", b"", b""],
            Text::Fenced {
                uri,
                fence,
                language,
                content,
            } => {
                let newline = if content.is_empty() || content.ends_with('\n') {
                    ""
                } else {
                    "\n"
                };
                [uri, "\n", fence, language, "\n", content, newline, fence].map(str::as_bytes)
            }
        }
    }

    /// Its length in bytes.
    fn len(&self) -> usize {
        self.pieces().iter().map(|p| p.len()).sum()
    }

    /// Whether the text is empty or white space only.
    fn is_blank(&self) -> bool {
        self.pieces().iter().all(|p| blank(p))
    }

    fn write(&self, w: &mut Pretty<'_>) {
        w.str_pieces(self.pieces());
    }
}

/// Whether UTF-8 `bytes` are white space only (as `str::trim` sees it),
/// looking no further than the first byte that is not ASCII white space
/// when it is ASCII.
fn blank(bytes: &[u8]) -> bool {
    let ascii_white = |b: &u8| *b == b' ' || (b'\t'..=b'\r').contains(b);
    match bytes.iter().position(|b| !ascii_white(b)) {
        None => true,
        Some(i) if bytes[i].is_ascii() => false,
        Some(i) => std::str::from_utf8(&bytes[i..]).is_ok_and(|s| s.trim().is_empty()),
    }
}

/// A piece of user or tool content, before a provider's shape is applied.
enum Part<'v> {
    /// Plain text.
    Text(Text<'v>),
    /// A text resource attached to a request (`text` is its content, or its
    /// `formatted` text).
    Document {
        resource: &'v Resource<Payload>,
        text: Cow<'v, str>,
    },
    /// A PDF (sent in base64).
    Pdf {
        resource: &'v Resource<Payload>,
        data: Cow<'v, [u8]>,
    },
    /// An image of a type both providers accept (sent in base64).
    Image {
        resource: &'v Resource<Payload>,
        media_type: &'static str,
        data: Cow<'v, [u8]>,
    },
}

impl Part<'_> {
    /// About how many bytes the part takes written.
    fn weight(&self) -> usize {
        match self {
            Part::Text(text) => text.len(),
            Part::Document { text, .. } => text.len(),
            Part::Pdf { data, .. } | Part::Image { data, .. } => data.len() / 3 * 4,
        }
    }

    /// Whether Anthropic is sent the part: not a blank text.
    fn is_sent_to_anthropic(&self) -> bool {
        !matches!(self, Part::Text(t) if t.is_blank())
    }
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
    payload: &'v Payload,
    reader: &mut Reader<'_, '_>,
    inline: bool,
) -> Result<Part<'v>, Error> {
    let note = || Part::Text(Text::Plain(Cow::Owned(binary_note(resource))));
    if !inline {
        return Ok(note());
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
        return Ok(note());
    };
    let data = match bytes {
        Some(b) => b,
        None => reader.bytes(payload)?,
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
    for c in text.bytes() {
        if c == b'`' {
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
fn fenced<'v>(resource: &'v Resource<Payload>, content: Cow<'v, str>) -> Text<'v> {
    Text::Fenced {
        uri: &resource.uri,
        fence: fence(&content),
        language: fence_language(resource.mime_type.as_deref()),
        content,
    }
}

/// A block of a tool response. `inline_binary`: images and PDFs are sent as
/// such (else as notes).
fn tool_block<'v>(
    block: &'v Block<Payload>,
    reader: &mut Reader<'_, '_>,
    inline_binary: bool,
) -> Result<Part<'v>, Error> {
    match block {
        Block::Text(t) => Ok(Part::Text(Text::Plain(reader.text(&t.text)?))),
        Block::Resource(rb) => {
            let resource = &rb.resource;
            if let Some(formatted) = &resource.formatted {
                return Ok(Part::Text(Text::Plain(reader.text(formatted)?)));
            }
            match &resource.content {
                ResourceContent::Text(p) => Ok(Part::Text(fenced(resource, reader.text(p)?))),
                ResourceContent::Binary(p) => binary_part(resource, p, reader, inline_binary),
            }
        }
        Block::Other(o) => Ok(Part::Text(Text::Plain(Cow::Owned(
            Value::Object(o.clone()).to_string(),
        )))),
    }
}

/// The JSON of structured output, as text.
fn data_text(data: &Value) -> Text<'static> {
    Text::Plain(Cow::Owned(data.to_string()))
}

/// The request body: written as pretty JSON into `out`, or as a `Value`
/// read back from what was written.
fn body_value(write: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>) -> Result<Value, Error> {
    let mut out = Vec::new();
    write(&mut out)?;
    serde_json::from_slice(&out).map_err(|e| Error::Render {
        what: format!("the request body written is not JSON ({e})"),
    })
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

/// A content block of an Anthropic message, as planned before it is
/// written.
enum AnthropicBlock<'v> {
    /// Text, a document or an image.
    Part(Part<'v>),
    Thinking {
        thinking: &'v str,
        signature: Cow<'v, str>,
    },
    ToolUse {
        id: &'v str,
        name: &'v str,
        arguments: Arguments<'v>,
    },
    ToolResult {
        id: &'v str,
        is_error: bool,
        /// The blocks sent: blank texts left out.
        content: Vec<Part<'v>>,
    },
}

impl AnthropicBlock<'_> {
    /// About how many bytes the block takes written (to share the writing
    /// between cores).
    fn weight(&self) -> usize {
        match self {
            AnthropicBlock::Part(part) => part.weight(),
            AnthropicBlock::Thinking {
                thinking,
                signature,
            } => thinking.len() + signature.len(),
            AnthropicBlock::ToolUse { arguments, .. } => arguments.weight(),
            AnthropicBlock::ToolResult { content, .. } => content.iter().map(Part::weight).sum(),
        }
    }
}

fn anthropic_text(text: Text<'_>) -> Option<AnthropicBlock<'_>> {
    Some(Part::Text(text))
        .filter(Part::is_sent_to_anthropic)
        .map(AnthropicBlock::Part)
}

fn anthropic_request_blocks<'v>(
    content: &'v str,
    resources: &'v [Resource<Payload>],
    reader: &mut Reader<'_, '_>,
) -> Result<Vec<AnthropicBlock<'v>>, Error> {
    let mut blocks = Vec::with_capacity(resources.len() + 1);
    for resource in resources {
        let part = request_resource(resource, reader)?;
        if part.is_sent_to_anthropic() {
            blocks.push(AnthropicBlock::Part(part));
        }
    }
    blocks.extend(anthropic_text(Text::Plain(Cow::Borrowed(content))));
    Ok(blocks)
}

/// The parts of a tool response's content. `inline_binary`: images and
/// PDFs are sent as such (else as notes).
fn tool_parts<'v>(
    content: ToolContent<'v>,
    reader: &mut Reader<'_, '_>,
    inline_binary: bool,
) -> Result<Vec<Part<'v>>, Error> {
    match content {
        ToolContent::Blocks(blocks) => blocks
            .iter()
            .map(|block| tool_block(block, reader, inline_binary))
            .collect(),
        ToolContent::Texts(texts) => texts
            .iter()
            .map(|r| Ok(Part::Text(Text::Blob(reader.blob_text(&r)?))))
            .collect(),
    }
}

fn anthropic_tool_result<'v>(
    id: &'v str,
    is_error: bool,
    content: ToolContent<'v>,
    reader: &mut Reader<'_, '_>,
) -> Result<AnthropicBlock<'v>, Error> {
    let mut content = tool_parts(content, reader, true)?;
    content.retain(Part::is_sent_to_anthropic);
    Ok(AnthropicBlock::ToolResult {
        id,
        is_error,
        content,
    })
}

/// An Anthropic source object: `{"type", "media_type", "data"}`, the data
/// text or base64 of bytes.
fn write_anthropic_source(w: &mut Pretty<'_>, media_type: &str, data: Result<&str, &[u8]>) {
    w.key("source");
    w.begin_object();
    w.key("type");
    w.str(if data.is_ok() { "text" } else { "base64" });
    w.key("media_type");
    w.str(media_type);
    w.key("data");
    match data {
        Ok(text) => w.str(text),
        Err(bytes) => w.base64("", bytes),
    }
    w.end_object();
}

/// A document's `title` and (from the resource's description) `context`.
fn write_anthropic_document_names(w: &mut Pretty<'_>, resource: &Resource<Payload>) {
    w.key("title");
    w.str(title(resource));
    if let Some(d) = &resource.description {
        w.key("context");
        w.str(d);
    }
}

fn write_anthropic_part(w: &mut Pretty<'_>, part: &Part<'_>) {
    w.begin_object();
    w.key("type");
    match part {
        Part::Text(text) => {
            w.str("text");
            w.key("text");
            text.write(w);
        }
        Part::Document { resource, text } => {
            w.str("document");
            write_anthropic_source(w, "text/plain", Ok(text));
            write_anthropic_document_names(w, resource);
        }
        Part::Pdf { resource, data } => {
            w.str("document");
            write_anthropic_source(w, "application/pdf", Err(data));
            write_anthropic_document_names(w, resource);
        }
        Part::Image {
            media_type, data, ..
        } => {
            w.str("image");
            write_anthropic_source(w, media_type, Err(data));
        }
    }
    w.end_object();
}

fn write_anthropic_block(w: &mut Pretty<'_>, block: &AnthropicBlock<'_>) -> Result<(), Error> {
    let (thinking, signature) = match block {
        AnthropicBlock::Part(part) => {
            write_anthropic_part(w, part);
            return Ok(());
        }
        AnthropicBlock::Thinking {
            thinking,
            signature,
        } => (thinking, signature),
        AnthropicBlock::ToolUse {
            id,
            name,
            arguments,
        } => {
            w.begin_object();
            w.key("type");
            w.str("tool_use");
            w.key("id");
            w.str(id);
            w.key("name");
            w.str(name);
            w.key("input");
            w.arguments(arguments)?;
            w.end_object();
            return Ok(());
        }
        AnthropicBlock::ToolResult {
            id,
            is_error,
            content,
        } => {
            w.begin_object();
            w.key("type");
            w.str("tool_result");
            w.key("tool_use_id");
            w.str(id);
            if !content.is_empty() {
                w.key("content");
                w.begin_array();
                for part in content {
                    w.item();
                    write_anthropic_part(w, part);
                }
                w.end_array();
            }
            w.key("is_error");
            w.bool(*is_error);
            w.end_object();
            return Ok(());
        }
    };
    w.begin_object();
    w.key("type");
    w.str("thinking");
    w.key("thinking");
    w.str(thinking);
    w.key("signature");
    w.str(signature);
    w.end_object();
    Ok(())
}

/// Renders `view` as the body of an Anthropic Messages API request
/// (`POST /v1/messages`): `{"model"?, "max_tokens", "system"?, "messages"}`.
///
/// Consecutive events of the same role form one message; blank text blocks
/// are left out; reasoning is sent as a `thinking` block only when its
/// event's metadata holds a `signature` string (at any depth), and is left
/// out otherwise. Fails when a payload cannot be read or text is not UTF-8
/// ([`Error::Render`], naming the blob).
///
/// The body is [`write_anthropic_request`]'s JSON read back as a `Value`.
pub fn anthropic_request(
    view: &[Entry<Payload>],
    options: &RequestOptions,
    content: &mut ContentReader<'_>,
) -> Result<Value, Error> {
    body_value(|out| write_anthropic_request(view, options, content, out))
}

/// [`anthropic_request`] appended to `out` as pretty JSON (as
/// `serde_json::to_writer_pretty` writes that `Value`), written while the
/// view is walked: the content read from the blob store goes into `out`
/// without a tree of values being built and dropped.
pub fn write_anthropic_request(
    view: &[Entry<Payload>],
    options: &RequestOptions,
    content: &mut ContentReader<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    plan_events::<AnthropicPlan<'_>>(entry_events(view), content)?.write(options, out)
}

/// The messages of an Anthropic request, as planned from a view's events.
#[derive(Default)]
struct AnthropicPlan<'v> {
    messages: Vec<(Role, Vec<AnthropicBlock<'v>>)>,
}

impl<'v> Planner<'v> for AnthropicPlan<'v> {
    fn push(&mut self, event: ViewEvent<'v>, reader: &mut Reader<'_, '_>) -> Result<(), Error> {
        let (role, blocks) = match event {
            ViewEvent::Request { content, resources } => (
                Role::User,
                anthropic_request_blocks(content, resources, reader)?,
            ),
            ViewEvent::Message(text) => (
                Role::Assistant,
                anthropic_text(Text::Plain(Cow::Borrowed(text)))
                    .into_iter()
                    .collect(),
            ),
            ViewEvent::Data(data) => (
                Role::Assistant,
                anthropic_text(data_text(data)).into_iter().collect(),
            ),
            ViewEvent::Reasoning { text, signature } => match signature {
                Some(signature) => (
                    Role::Assistant,
                    vec![AnthropicBlock::Thinking {
                        thinking: text,
                        signature,
                    }],
                ),
                None => return Ok(()),
            },
            ViewEvent::ToolCall {
                id,
                name,
                arguments,
            } => (
                Role::Assistant,
                vec![AnthropicBlock::ToolUse {
                    id,
                    name,
                    arguments,
                }],
            ),
            ViewEvent::ToolResult {
                id,
                is_error,
                content,
            } => (
                Role::User,
                vec![anthropic_tool_result(id, is_error, content, reader)?],
            ),
            // Not part of what a model is sent.
            ViewEvent::TurnStart | ViewEvent::Other => return Ok(()),
        };
        if !blocks.is_empty() {
            self.join_message(role, blocks);
        }
        Ok(())
    }

    fn join(&mut self, later: Self) {
        for (role, blocks) in later.messages {
            self.join_message(role, blocks);
        }
    }
}

impl<'v> AnthropicPlan<'v> {
    /// A message of `role` after the others: merged into the last one when
    /// it is of the same role.
    fn join_message(&mut self, role: Role, blocks: Vec<AnthropicBlock<'v>>) {
        match self.messages.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => self.messages.push((role, blocks)),
        }
    }

    /// The request body, appended to `out`.
    fn write(self, options: &RequestOptions, out: &mut Vec<u8>) -> Result<(), Error> {
        let mut messages = self.messages;
        let mut w = Pretty::new(out);
        w.begin_object();
        if let Some(model) = &options.model {
            w.key("model");
            w.str(model);
        }
        w.key("max_tokens");
        w.u64(options.max_tokens.into());
        if let Some(system) = options.system() {
            w.key("system");
            w.str(system);
        }
        w.key("messages");
        w.begin_array();
        for (role, blocks) in &mut messages {
            if *role == Role::User {
                // Stable: tool results first, each group in its order.
                blocks.sort_by_key(|b| !matches!(b, AnthropicBlock::ToolResult { .. }));
            }
        }
        w.items(
            &messages,
            |(_, blocks)| blocks.iter().map(AnthropicBlock::weight).sum(),
            |w, (role, blocks)| {
                w.item();
                w.begin_object();
                w.key("role");
                w.str(role.as_str());
                w.key("content");
                w.begin_array();
                for block in blocks {
                    w.item();
                    write_anthropic_block(w, block)?;
                }
                w.end_array();
                w.end_object();
                Ok::<(), Error>(())
            },
        )?;
        w.end_array();
        w.end_object();
        Ok(())
    }
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
fn file_name(resource: &Resource<Payload>) -> &str {
    match &resource.name {
        Some(name) => name,
        None => resource
            .uri
            .rsplit('/')
            .find(|s| !s.is_empty())
            .unwrap_or("document.pdf"),
    }
}

fn write_openai_part(w: &mut Pretty<'_>, part: &Part<'_>) {
    w.begin_object();
    w.key("type");
    match part {
        Part::Text(text) => {
            w.str("text");
            w.key("text");
            text.write(w);
        }
        Part::Document { resource, text } => {
            w.str("text");
            w.key("text");
            w.str(&xml_resource(resource, text));
        }
        Part::Pdf { resource, data } => {
            w.str("file");
            w.key("file");
            w.begin_object();
            w.key("filename");
            w.str(file_name(resource));
            w.key("file_data");
            w.base64("data:application/pdf;base64,", data);
            w.end_object();
        }
        Part::Image {
            media_type, data, ..
        } => {
            w.str("image_url");
            w.key("image_url");
            w.begin_object();
            w.key("url");
            w.base64(&format!("data:{media_type};base64,"), data);
            w.end_object();
        }
    }
    w.end_object();
}

/// A part of a tool message, which holds text only.
fn openai_tool_text(part: Part<'_>) -> Text<'_> {
    match part {
        Part::Text(text) => text,
        Part::Document { resource, text } => Text::Plain(Cow::Owned(xml_resource(resource, &text))),
        Part::Pdf { resource, .. } | Part::Image { resource, .. } => {
            Text::Plain(Cow::Owned(binary_note(resource)))
        }
    }
}

/// A message of an OpenAI request, as planned before it is written.
enum OpenAiMessage<'v> {
    User {
        content: &'v str,
        /// The request's resources (none: the content is sent as a string).
        parts: Vec<Part<'v>>,
    },
    /// An assistant message, to which tool calls may still be added.
    Assistant {
        content: Option<Text<'v>>,
        /// Each call's id and name, with its arguments as compact JSON text.
        tool_calls: Vec<(&'v str, &'v str, String)>,
    },
    /// A tool message: its texts joined by blank lines.
    Tool { id: &'v str, texts: Vec<Text<'v>> },
}

impl OpenAiMessage<'_> {
    /// About how many bytes the message takes written.
    fn weight(&self) -> usize {
        match self {
            OpenAiMessage::User { content, parts } => {
                content.len() + parts.iter().map(Part::weight).sum::<usize>()
            }
            OpenAiMessage::Assistant {
                content,
                tool_calls,
            } => {
                content.as_ref().map_or(0, Text::len)
                    + tool_calls.iter().map(|(_, _, a)| a.len()).sum::<usize>()
            }
            OpenAiMessage::Tool { texts, .. } => texts.iter().map(Text::len).sum(),
        }
    }
}

fn write_openai_message(w: &mut Pretty<'_>, message: &OpenAiMessage<'_>) {
    w.begin_object();
    w.key("role");
    match message {
        OpenAiMessage::User { content, parts } => {
            w.str("user");
            w.key("content");
            if parts.is_empty() {
                w.str(content);
            } else {
                w.begin_array();
                for part in parts {
                    w.item();
                    write_openai_part(w, part);
                }
                if !content.is_empty() {
                    w.item();
                    write_openai_part(w, &Part::Text(Text::Plain(Cow::Borrowed(content))));
                }
                w.end_array();
            }
        }
        OpenAiMessage::Assistant {
            content,
            tool_calls,
        } => {
            w.str("assistant");
            w.key("content");
            match content {
                Some(text) => text.write(w),
                None => w.null(),
            }
            if !tool_calls.is_empty() {
                w.key("tool_calls");
                w.begin_array();
                for (id, name, arguments) in tool_calls {
                    w.item();
                    w.begin_object();
                    w.key("id");
                    w.str(id);
                    w.key("type");
                    w.str("function");
                    w.key("function");
                    w.begin_object();
                    w.key("name");
                    w.str(name);
                    w.key("arguments");
                    w.str(arguments);
                    w.end_object();
                    w.end_object();
                }
                w.end_array();
            }
        }
        OpenAiMessage::Tool { id, texts } => {
            w.str("tool");
            w.key("tool_call_id");
            w.str(id);
            w.key("content");
            let separators = std::iter::once(&b""[..]).chain(std::iter::repeat(&b"\n\n"[..]));
            w.str_pieces(
                texts
                    .iter()
                    .zip(separators)
                    .flat_map(|(text, separator)| std::iter::once(separator).chain(text.pieces())),
            );
        }
    }
    w.end_object();
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
///
/// The body is [`write_openai_request`]'s JSON read back as a `Value`.
pub fn openai_request(
    view: &[Entry<Payload>],
    options: &RequestOptions,
    content: &mut ContentReader<'_>,
) -> Result<Value, Error> {
    body_value(|out| write_openai_request(view, options, content, out))
}

/// [`openai_request`] appended to `out` as pretty JSON, written while the
/// view is walked (see [`write_anthropic_request`]).
pub fn write_openai_request(
    view: &[Entry<Payload>],
    options: &RequestOptions,
    content: &mut ContentReader<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    plan_events::<OpenAiPlan<'_>>(entry_events(view), content)?.write(options, out)
}

/// The messages of an OpenAI request, as planned from a view's events.
#[derive(Default)]
struct OpenAiPlan<'v> {
    messages: Vec<OpenAiMessage<'v>>,
    /// Whether the last message is an assistant message tool calls may join.
    open: bool,
}

impl<'v> Planner<'v> for OpenAiPlan<'v> {
    fn push(&mut self, event: ViewEvent<'v>, reader: &mut Reader<'_, '_>) -> Result<(), Error> {
        let messages = &mut self.messages;
        match event {
            ViewEvent::TurnStart => self.open = false,
            ViewEvent::Request { content, resources } => {
                let mut parts = Vec::with_capacity(resources.len());
                for resource in resources {
                    parts.push(request_resource(resource, reader)?);
                }
                messages.push(OpenAiMessage::User { content, parts });
                self.open = false;
            }
            ViewEvent::Message(text) => {
                messages.push(OpenAiMessage::Assistant {
                    content: Some(Text::Plain(Cow::Borrowed(text))),
                    tool_calls: Vec::new(),
                });
                self.open = true;
            }
            ViewEvent::Data(data) => {
                messages.push(OpenAiMessage::Assistant {
                    content: Some(data_text(data)),
                    tool_calls: Vec::new(),
                });
                self.open = true;
            }
            ViewEvent::Reasoning { .. } => {}
            ViewEvent::ToolCall {
                id,
                name,
                arguments,
            } => {
                let mut compact = Vec::new();
                arguments.write_json(&mut compact, JsonStyle::Compact)?;
                let compact = String::from_utf8(compact).map_err(|e| Error::Render {
                    what: format!("tool call arguments written as JSON that is not UTF-8 ({e})"),
                })?;
                let call = (id, name, compact);
                match messages.last_mut() {
                    Some(OpenAiMessage::Assistant { tool_calls, .. }) if self.open => {
                        tool_calls.push(call)
                    }
                    _ => messages.push(OpenAiMessage::Assistant {
                        content: None,
                        tool_calls: vec![call],
                    }),
                }
                self.open = true;
            }
            ViewEvent::ToolResult { id, content, .. } => {
                let texts = tool_parts(content, reader, false)?
                    .into_iter()
                    .map(openai_tool_text)
                    .collect();
                messages.push(OpenAiMessage::Tool { id, texts });
                self.open = false;
            }
            ViewEvent::Other => {}
        }
        Ok(())
    }

    /// `later` was planned from a `turn_start` on (where no tool call joins
    /// a message before it): its messages follow.
    fn join(&mut self, later: Self) {
        self.messages.extend(later.messages);
        self.open = later.open;
    }
}

impl OpenAiPlan<'_> {
    /// The request body, appended to `out`.
    fn write(self, options: &RequestOptions, out: &mut Vec<u8>) -> Result<(), Error> {
        let messages = self.messages;
        let mut w = Pretty::new(out);
        w.begin_object();
        if let Some(model) = &options.model {
            w.key("model");
            w.str(model);
        }
        w.key("max_completion_tokens");
        w.u64(options.max_tokens.into());
        w.key("messages");
        w.begin_array();
        if let Some(system) = options.system() {
            w.item();
            w.begin_object();
            w.key("role");
            w.str("system");
            w.key("content");
            w.str(system);
            w.end_object();
        }
        w.items(&messages, OpenAiMessage::weight, |w, message| {
            w.item();
            write_openai_message(w, message);
            Ok::<(), Error>(())
        })?;
        w.end_array();
        w.end_object();
        Ok(())
    }
}

// ----- planning --------------------------------------------------------------------

/// A provider's request, planned from a view's events one by one.
trait Planner<'v>: Default + Send {
    /// Plans `event`, after those pushed before.
    fn push(&mut self, event: ViewEvent<'v>, reader: &mut Reader<'_, '_>) -> Result<(), Error>;

    /// Appends what was planned from the events after those of `self`,
    /// from a `turn_start` on.
    fn join(&mut self, later: Self);
}

/// The plan of `events`, content read through `content`.
fn plan_events<'v, P: Planner<'v>>(
    events: impl Iterator<Item = Result<ViewEvent<'v>, Error>>,
    content: &mut ContentReader<'_>,
) -> Result<P, Error> {
    let mut reader = Reader { content };
    let mut plan = P::default();
    for event in events {
        plan.push(event?, &mut reader)?;
    }
    Ok(plan)
}

/// Views of at least this many events are planned in two halves on two
/// cores ([`plan_in_halves`]).
const PARALLEL_PLAN: usize = 2048;

/// The plan of a view's `events`, content read from `store`: a long view in
/// two halves on two cores, split at the first `turn_start` from the
/// middle on (no message of a provider's joins events on both sides of one
/// but Anthropic's, which [`Planner::join`] merges), the later half planned
/// by another thread and joined after the first.
fn plan_in_halves<'v, P: Planner<'v>>(events: &'v ViewEvents, store: &Store) -> Result<P, Error> {
    let plan = |range: std::ops::Range<usize>| -> Result<P, Error> {
        let mut read =
            |r: &BlobRef| -> Result<Content, Error> { Ok(store.blobs().get_content(&r.id)?) };
        plan_events(range.map(|i| events.event(i)), &mut read)
    };
    let n = events.len();
    let split = (n >= PARALLEL_PLAN && jpstore_engine::internal::cores() >= 2)
        .then(|| events.turn_start_from(n / 2))
        .flatten()
        .filter(|&k| k > 0);
    let Some(split) = split else {
        return plan(0..n);
    };
    std::thread::scope(|scope| {
        let later = scope.spawn(|| plan(split..n));
        let first = plan(0..split);
        let later = later
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let mut first = first?;
        first.join(later?);
        Ok(first)
    })
}

#[cfg(test)]
mod tests;
