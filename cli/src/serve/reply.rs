//! What a handler answers: a status, a content type from a fixed set, a
//! body, and the few things that decide the headers. The headers
//! themselves are written in one place (`http::respond`), so no handler
//! can leave one out.

use std::io::Read;

/// The type of a response's body. Pages and files of this server have
/// their own; a blob's is one of a closed set (see `blob`), never a string
/// from a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContentType {
    /// `text/html; charset=utf-8`.
    Html,
    /// `text/css; charset=utf-8`.
    Css,
    /// `text/javascript; charset=utf-8`.
    JavaScript,
    /// `image/svg+xml` (the plots this server draws).
    Svg,
    /// `text/plain; charset=utf-8`.
    Text,
    /// `application/octet-stream`.
    Binary,
    /// A blob's own type, one a browser shows without running anything
    /// (`blob::INLINE_TYPES`).
    Inline(&'static str),
    /// A blob's own type, sent only as a download (`blob::is_plain_type`
    /// has checked it is a plain `type/subtype`).
    Download(MimeType),
}

impl ContentType {
    /// The header value.
    pub fn header_value(&self) -> &str {
        match self {
            ContentType::Html => "text/html; charset=utf-8",
            ContentType::Css => "text/css; charset=utf-8",
            ContentType::JavaScript => "text/javascript; charset=utf-8",
            ContentType::Svg => "image/svg+xml",
            ContentType::Text => "text/plain; charset=utf-8",
            ContentType::Binary => "application/octet-stream",
            ContentType::Inline(t) => t,
            ContentType::Download(t) => t.as_str(),
        }
    }
}

/// A MIME type checked to be `type/subtype` of token characters only (no
/// parameters, spaces, quotes or line breaks), lowercase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MimeType(String);

impl MimeType {
    /// `s` lowercased, if it is a plain `type/subtype`.
    pub fn parse(s: &str) -> Option<MimeType> {
        let s = s.trim().to_ascii_lowercase();
        let (kind, sub) = s.split_once('/')?;
        let token = |t: &str| {
            !t.is_empty()
                && t.len() <= 127
                && t.bytes().all(|b| {
                    b.is_ascii_alphanumeric()
                        || matches!(
                            b,
                            b'!' | b'#' | b'$' | b'&' | b'^' | b'_' | b'.' | b'+' | b'-'
                        )
                })
        };
        (token(kind) && token(sub)).then_some(MimeType(s))
    }

    /// The type.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Which `Content-Security-Policy` a response carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// A page of the server: its own script and stylesheet, nothing inline.
    Page,
    /// Content from a conversation, or an SVG: nothing runs, loads or
    /// styles (and a `sandbox` puts it in an origin of its own).
    Content,
}

/// How long a browser may keep a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Caching {
    /// Pages change as the store does.
    NoStore,
    /// A blob's content never changes (its id is its SHA-256).
    Immutable,
}

/// The body of a response.
pub enum Body {
    /// Bytes in memory.
    Bytes(Vec<u8>),
    /// A stream of `len` bytes (a large blob), sent as it is read.
    Stream {
        /// The content.
        reader: Box<dyn Read + Send>,
        /// Its length.
        len: u64,
    },
}

impl std::fmt::Debug for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            Body::Stream { len, .. } => write!(f, "Stream({len} bytes)"),
        }
    }
}

/// A response.
#[derive(Debug)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The body's type.
    pub content_type: ContentType,
    /// The body.
    pub body: Body,
    /// The security policy.
    pub policy: Policy,
    /// Caching.
    pub caching: Caching,
    /// `Content-Disposition: attachment; filename="<name>"`, the name made
    /// of a blob id (hex digits only).
    pub attachment: Option<String>,
}

impl Reply {
    /// A page (`200` unless `status` says otherwise).
    pub fn page(status: u16, html: String) -> Reply {
        Reply {
            status,
            content_type: ContentType::Html,
            body: Body::Bytes(html.into_bytes()),
            policy: Policy::Page,
            caching: Caching::NoStore,
            attachment: None,
        }
    }

    /// A file of the server (stylesheet, script, plot).
    pub fn file(content_type: ContentType, bytes: Vec<u8>) -> Reply {
        let policy = match content_type {
            ContentType::Svg => Policy::Content,
            _ => Policy::Page,
        };
        Reply {
            status: 200,
            content_type,
            body: Body::Bytes(bytes),
            policy,
            caching: Caching::NoStore,
            attachment: None,
        }
    }
}
