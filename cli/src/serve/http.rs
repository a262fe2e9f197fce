//! From a request to a response: the method and `Host` checks, routing,
//! the handlers, and the headers every response carries (written here and
//! nowhere else). A panic in a handler becomes a 500 page for that request
//! and the server goes on.

use std::io::{self, Write};
use std::panic::{catch_unwind, AssertUnwindSafe};

use jpstore_engine::error::Error;
use jpstore_engine::Store;

use super::connection::{sendable, write_reply, Asked, Method};
use super::index::Index;
use super::layout::error_page;
use super::reply::{Body, Caching, ContentType, Policy, Reply};
use super::url::{route, Route, StaticFile};
use super::{blob, conversation, list, stats};

/// The policy of the server's pages: their own script, stylesheet and
/// images, nothing inline, no frames, forms only to the server.
pub const PAGE_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";
/// The policy of content from a conversation and of plots: nothing runs
/// or loads but the image or media itself, and `sandbox` gives the
/// document an origin of its own.
pub const CONTENT_POLICY: &str =
    "default-src 'none'; img-src 'self'; media-src 'self'; frame-ancestors 'none'; sandbox";

/// What the handlers share: the store, the list's summaries, and the
/// `Host` header values the server answers to (`None`: any, with
/// `--allow-remote`).
pub struct Site {
    /// The store, opened once.
    pub store: Store,
    /// The summaries of the conversation list, kept between requests.
    pub index: Index,
    /// The `Host` values accepted (compared ignoring ASCII case).
    pub hosts: Option<Vec<String>>,
}

/// Answers `asked` on `stream`.
pub fn handle(site: &Site, asked: &Asked, stream: &mut impl Write) -> io::Result<()> {
    let reply = answer_catching(|| answer(site, asked));
    respond(stream, asked.method == Method::Head, &asked.target, reply)
}

/// A reply to a request that could not be read (400, 431): an error page.
pub fn refuse(status: u16, stream: &mut impl Write) -> io::Result<()> {
    let (heading, message) = match status {
        431 => (
            "Request too large",
            "The request's headers are longer than this server reads.",
        ),
        _ => (
            "Bad request",
            "This is not an HTTP/1.1 request this server reads.",
        ),
    };
    let reply = error_reply(status, heading, message);
    respond(stream, false, "(a request not read)", reply)
}

/// `answer()`, with a panic turned into a 500 page.
pub fn answer_catching(answer: impl FnOnce() -> Reply) -> Reply {
    catch_unwind(AssertUnwindSafe(answer)).unwrap_or_else(|_| {
        error_reply(
            500,
            "Internal error",
            "The server failed on this request (its error output says why); it goes on serving others.",
        )
    })
}

/// The reply to a request.
pub fn answer(site: &Site, asked: &Asked) -> Reply {
    if !matches!(asked.method, Method::Get | Method::Head) {
        return error_reply(
            405,
            "Method not allowed",
            "This server is read-only: it answers GET and HEAD only.",
        );
    }
    if let (Some(hosts), Some(host)) = (&site.hosts, &asked.host) {
        if !hosts.iter().any(|h| h.eq_ignore_ascii_case(host)) {
            return error_reply(
                421,
                "Misdirected request",
                "This server answers only requests for its own loopback address (the Host header names another), so that no other site can read it through a name of its own.",
            );
        }
    }
    let route = match route(&asked.target) {
        Ok(route) => route,
        Err(not_found) => return error_reply(404, "Not found", &not_found.reason),
    };
    let store = &site.store;
    let page = |result: Result<String, Error>| match result {
        Ok(html) => Reply::page(200, html),
        Err(e) => engine_error(&e),
    };
    match route {
        Route::List(query) => page(list::list_page(store, &site.index, &query)),
        Route::Conversation(id, query) => page(conversation::conversation_page(store, &id, &query)),
        Route::ConversationStats(id) => page(stats::conversation_page(store, &id)),
        Route::Stats => page(stats::store_page(store)),
        Route::Plot(id) => match stats::plot_svg(store, &id) {
            Ok(svg) => Reply::file(ContentType::Svg, svg.into_bytes()),
            Err(e) => engine_error(&e),
        },
        Route::Blob(id, query) => blob::blob(store, &id, &query).unwrap_or_else(|e| blob_error(&e)),
        Route::BlobPreview(id) => blob::preview(store, &id).unwrap_or_else(|e| blob_error(&e)),
        Route::Static(StaticFile::Stylesheet) => Reply::file(
            ContentType::Css,
            include_bytes!("static/style.css").to_vec(),
        ),
        Route::Static(StaticFile::Script) => Reply::file(
            ContentType::JavaScript,
            include_bytes!("static/app.js").to_vec(),
        ),
        Route::Static(StaticFile::Icon) => Reply::file(
            ContentType::Svg,
            include_bytes!("static/favicon.svg").to_vec(),
        ),
    }
}

/// An error page.
pub fn error_reply(status: u16, heading: &str, message: &str) -> Reply {
    Reply::page(status, error_page(heading, message))
}

fn engine_error(e: &Error) -> Reply {
    match e {
        Error::NotFound { id } => error_reply(
            404,
            "Not found",
            &format!("There is no conversation {id} in this store."),
        ),
        Error::Blob(b) => blob_error(b),
        other => {
            crate::errln!("jp-store: serve: {other}");
            error_reply(500, "Cannot be shown", &other.to_string())
        }
    }
}

fn blob_error(e: &jpstore_blobstore::Error) -> Reply {
    match e {
        jpstore_blobstore::Error::NotFound { id, .. } => error_reply(
            404,
            "Not found",
            &format!("There is no blob {id} in this store."),
        ),
        other => {
            crate::errln!("jp-store: serve: {other}");
            error_reply(500, "Cannot be shown", &other.to_string())
        }
    }
}

/// The headers of `reply`, every security header included.
pub fn headers(reply: &Reply) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("Content-Type", reply.content_type.header_value().to_owned()),
        (
            "Content-Security-Policy",
            match reply.policy {
                Policy::Page => PAGE_POLICY,
                Policy::Content => CONTENT_POLICY,
            }
            .to_owned(),
        ),
        ("X-Content-Type-Options", "nosniff".to_owned()),
        ("X-Frame-Options", "DENY".to_owned()),
        ("Referrer-Policy", "no-referrer".to_owned()),
        ("Cross-Origin-Opener-Policy", "same-origin".to_owned()),
        ("Cross-Origin-Resource-Policy", "same-origin".to_owned()),
        (
            "Cache-Control",
            match reply.caching {
                Caching::NoStore => "no-store",
                Caching::Immutable => "private, max-age=31536000, immutable",
            }
            .to_owned(),
        ),
        ("Server", "jp-store".to_owned()),
    ];
    if let Some(name) = &reply.attachment {
        headers.push((
            "Content-Disposition",
            format!("attachment; filename=\"{name}\""),
        ));
    }
    if reply.status == 405 {
        headers.push(("Allow", "GET, HEAD".to_owned()));
    }
    headers
}

/// Writes `reply` (its body unless `head_only`); `target` names the
/// request in errors.
fn respond(stream: &mut impl Write, head_only: bool, target: &str, reply: Reply) -> io::Result<()> {
    let headers = headers(&reply);
    if let Some((name, _)) = headers.iter().find(|(_, value)| !sendable(value)) {
        // Not reached: every value is fixed or checked. A response without
        // its headers is not sent.
        crate::errln!("jp-store: serve: {target}: header {name} not sendable");
        return write_reply(stream, 500, &[], 0, &mut io::empty(), head_only);
    }
    let result = match reply.body {
        Body::Bytes(bytes) => write_reply(
            stream,
            reply.status,
            &headers,
            bytes.len() as u64,
            &mut bytes.as_slice(),
            head_only,
        ),
        Body::Stream { mut reader, len } => {
            write_reply(stream, reply.status, &headers, len, &mut reader, head_only)
        }
    };
    if let Err(e) = &result {
        crate::errln!("jp-store: serve: {target}: {e}");
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_handler_gives_a_500_page() {
        // The panic's message goes to the test's error output.
        let reply = answer_catching(|| panic!("a handler's bug"));
        assert_eq!(reply.status, 500);
        assert_eq!(reply.content_type, ContentType::Html);
        let reply = answer_catching(|| error_reply(404, "Not found", "x"));
        assert_eq!(reply.status, 404);
    }

    #[test]
    fn every_reply_carries_the_security_headers() {
        for reply in [
            error_reply(404, "Not found", "x"),
            Reply::file(ContentType::Svg, Vec::new()),
        ] {
            let h = headers(&reply);
            let get = |n: &str| h.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_str());
            assert!(get("Content-Security-Policy").is_some());
            assert_eq!(get("X-Content-Type-Options"), Some("nosniff"));
        }
        let svg = headers(&Reply::file(ContentType::Svg, Vec::new()));
        assert!(svg
            .iter()
            .any(|(k, v)| *k == "Content-Security-Policy" && v.contains("sandbox")));
        let allowed = headers(&error_reply(405, "x", "y"));
        assert!(allowed
            .iter()
            .any(|(k, v)| *k == "Allow" && v == "GET, HEAD"));
    }
}
