//! One blob's content (`/blobs/<sha256>`) and its first part as text
//! (`/blobs/<sha256>/preview`).
//!
//! Content from a conversation never runs in the server's origin: it is
//! sent as `text/plain` when it is text of any kind (HTML, SVG, scripts
//! included: shown as source), with its own type only for images, audio
//! and video a browser shows without running anything, and otherwise as
//! `application/octet-stream`, or with `?download=1` with its own type,
//! always as an attachment. Every such response also carries a
//! `Content-Security-Policy` with `sandbox` (see `http`).
//!
//! A blob of up to [`IN_MEMORY_MAX`] bytes is read whole and checked before
//! anything is sent. A larger one is streamed ([`BlobStore::open_stream`]):
//! read once to the end to check it, then again as it is sent, so its
//! status tells whether it is whole and memory stays bounded whatever its
//! size.
//!
//! [`BlobStore::open_stream`]: jpstore_blobstore::BlobStore::open_stream

use jpstore_engine::internal::StoreInterior as _;
use std::io::Read;

use jpstore_blobstore::{BlobId, Error};
use jpstore_engine::Store;

use super::reply::{Body, Caching, ContentType, MimeType, Policy, Reply};
use super::url::BlobQuery;

/// Blobs up to this size are read into memory whole; larger ones are
/// streamed.
pub const IN_MEMORY_MAX: u64 = 4 << 20;
/// Bytes a preview holds at most.
pub const PREVIEW_BYTES: usize = 64 << 10;

/// Types sent as they are, for the browser to show: images, audio and
/// video that run nothing. (SVG is an image that can hold scripts: it is
/// text here.)
pub const INLINE_TYPES: &[&str] = &[
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "image/avif",
    "image/bmp",
    "audio/mpeg",
    "audio/ogg",
    "audio/wav",
    "audio/webm",
    "audio/flac",
    "video/mp4",
    "video/webm",
    "video/ogg",
];

/// Whether a type is text of some kind (shown as `text/plain`).
fn is_text_type(mime: &MimeType) -> bool {
    let t = mime.as_str();
    let (kind, sub) = t.split_once('/').unwrap_or((t, ""));
    kind == "text"
        || sub.ends_with("+json")
        || sub.ends_with("+xml")
        || matches!(
            t,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/x-javascript"
                | "application/ecmascript"
                | "application/toml"
                | "application/yaml"
                | "application/x-yaml"
                | "application/x-sh"
                | "application/sql"
                | "application/graphql"
                | "application/x-httpd-php"
        )
}

/// The content type a blob is sent with, and whether it is an attachment,
/// for the MIME type the linking page knows (`None`: text content).
pub fn response_type(mime: Option<&str>, download: bool) -> (ContentType, bool) {
    // Parameters (`; charset=...`) are dropped: the body is sent as it is.
    let parsed = match mime {
        None => None,
        Some(m) => match MimeType::parse(m.split(';').next().unwrap_or("")) {
            Some(t) => Some(t),
            // A type that is not a plain `type/subtype`: bytes, downloaded.
            None => return (ContentType::Binary, true),
        },
    };
    if download {
        return match parsed {
            Some(t) => (ContentType::Download(t), true),
            None => (ContentType::Text, true),
        };
    }
    match parsed {
        None => (ContentType::Text, false),
        Some(t) => {
            if let Some(inline) = INLINE_TYPES.iter().find(|i| **i == t.as_str()) {
                (ContentType::Inline(inline), false)
            } else if is_text_type(&t) {
                (ContentType::Text, false)
            } else {
                (ContentType::Binary, true)
            }
        }
    }
}

/// The response of `/blobs/<id>`.
pub fn blob(store: &Store, id: &BlobId, query: &BlobQuery) -> Result<Reply, Error> {
    let (content_type, attachment) = response_type(query.mime_type.as_deref(), query.download);
    let blobs = store.blobs();
    let len = blobs.size(id)?;
    let body = if len <= IN_MEMORY_MAX {
        Body::Bytes(blobs.get(id)?)
    } else {
        blobs.open_stream(id)?.verify()?;
        let stream = blobs.open_stream(id)?;
        Body::Stream {
            len: stream.len(),
            reader: Box::new(stream),
        }
    };
    Ok(Reply {
        status: 200,
        content_type,
        body,
        policy: Policy::Content,
        caching: Caching::Immutable,
        attachment: attachment.then(|| id.to_string()),
    })
}

/// The response of `/blobs/<id>/preview`: at most [`PREVIEW_BYTES`] of
/// the content (cut at a character boundary when it is UTF-8) as
/// `text/plain`, with a note when there is more. The whole blob is checked
/// first.
pub fn preview(store: &Store, id: &BlobId) -> Result<Reply, Error> {
    let blobs = store.blobs();
    let len = blobs.size(id)?;
    let mut head = if len <= IN_MEMORY_MAX {
        let mut all = blobs.get(id)?;
        all.truncate(PREVIEW_BYTES);
        all
    } else {
        let mut stream = blobs.open_stream(id)?;
        let mut head = vec![0u8; PREVIEW_BYTES];
        let mut filled = 0;
        while filled < head.len() {
            match stream.read(&mut head[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        head.truncate(filled);
        // The rest read (and dropped) for its checks: what was kept is
        // sent only if the whole is whole.
        stream.verify()?;
        head
    };
    let shown = utf8_prefix_len(&head);
    head.truncate(shown);
    if (shown as u64) < len {
        head.extend_from_slice(
            format!(
                "\n\n[… the first {} of {} bytes; the whole content is linked below]\n",
                shown, len
            )
            .as_bytes(),
        );
    }
    Ok(Reply {
        status: 200,
        content_type: ContentType::Text,
        body: Body::Bytes(head),
        policy: Policy::Content,
        caching: Caching::Immutable,
        attachment: None,
    })
}

/// The length of `bytes` without a UTF-8 sequence cut at its end (all of
/// it when it is not UTF-8 anyway).
fn utf8_prefix_len(bytes: &[u8]) -> usize {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes.len(),
        Err(e) if e.error_len().is_none() => e.valid_up_to(),
        Err(_) => bytes.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_browser_would_run_is_never_sent_as_its_type_inline() {
        for t in [
            "text/html",
            "TEXT/HTML; charset=utf-8",
            "image/svg+xml",
            "application/javascript",
            "text/javascript",
            "application/xhtml+xml",
            "application/xml",
            "text/xml",
        ] {
            assert_eq!(
                response_type(Some(t), false),
                (ContentType::Text, false),
                "{t}"
            );
            let (ct, attachment) = response_type(Some(t), true);
            assert!(attachment, "{t}");
            assert!(matches!(ct, ContentType::Download(_)), "{t}");
        }
        for t in [
            "application/pdf",
            "application/x-shockwave-flash",
            "application/wasm",
        ] {
            assert_eq!(
                response_type(Some(t), false),
                (ContentType::Binary, true),
                "{t}"
            );
        }
        for t in [
            "text/html\r\nSet-Cookie: x=1",
            "a b/c",
            "text",
            "\"text/html\"",
        ] {
            assert_eq!(
                response_type(Some(t), false),
                (ContentType::Binary, true),
                "{t:?}"
            );
        }
        assert_eq!(
            response_type(Some("image/png"), false),
            (ContentType::Inline("image/png"), false)
        );
        assert_eq!(response_type(None, false), (ContentType::Text, false));
    }

    #[test]
    fn a_preview_is_not_cut_inside_a_character() {
        assert_eq!(utf8_prefix_len("aé".as_bytes()), 3);
        assert_eq!(utf8_prefix_len(&"aé".as_bytes()[..2]), 1);
        assert_eq!(utf8_prefix_len(&[0xff, 0xfe]), 2);
    }
}
