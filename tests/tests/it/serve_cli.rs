//! `jp-store serve` over HTTP: every page and its headers, the list's
//! sorting, search and pages, the list following what other processes
//! append, create and remove while it serves, the conversation page's content and marks,
//! escaping of hostile strings, 404 for bad ids, unknown paths and path
//! traversal, 405 for other methods, blobs served so that nothing in them
//! can run, large blobs streamed whole, damage a 500 and never wrong
//! bytes, requests for another host refused, loopback only unless
//! allowed, Ctrl-C, `-q` (the URL, no notes), and a store left byte for
//! byte as it was.

use jpstore_blobstore::BlobId;
use jpstore_tests::web::{
    attached_file, fixture, request, request_with_body, test_output, HttpResponse, Server,
    BIG_OUTPUT_LEN, EMPTY_ID, FILLER, HOSTILE_ID, HOSTILE_TEXT, HOSTILE_TITLE, HTML_CONTENT,
    MAIN_ID, PNG_BASE64, SVG_CONTENT,
};
use jpstore_tests::{run_jp_store, tree_snapshot};
use serde_json::json;

fn ok(r: &HttpResponse, what: &str) -> String {
    assert_eq!(r.status, 200, "{what}: {}", r.text());
    r.text()
}

/// The values of every `href` and `src` attribute of a page.
fn links(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["href=\"", "src=\"", "action=\"", "data-blob=\""] {
        for (at, _) in page.match_indices(attr) {
            let rest = &page[at + attr.len()..];
            out.push(rest[..rest.find('"').unwrap_or(rest.len())].to_owned());
        }
    }
    out
}

/// The attribute names of every tag of `page`, with their tag's name. The
/// server escapes `<`, `>` and `"` in text and values, so a `<` starts a
/// tag and a `"` a value.
fn attribute_names(page: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for piece in page.split('<').skip(1) {
        let tag = &piece[..piece.find('>').unwrap_or(piece.len())];
        if tag.starts_with('/') || tag.starts_with('!') {
            continue;
        }
        let mut rest = tag;
        let name_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let name = rest[..name_end].to_owned();
        rest = &rest[name_end..];
        loop {
            rest = rest.trim_start();
            if rest.is_empty() {
                break;
            }
            let end = rest
                .find(|c: char| c == '=' || c.is_whitespace())
                .unwrap_or(rest.len());
            out.push((name.clone(), rest[..end].to_ascii_lowercase()));
            rest = &rest[end..];
            if let Some(value) = rest.strip_prefix("=\"") {
                rest = &value[value.find('"').map_or(value.len(), |e| e + 1)..];
            }
        }
    }
    out
}

/// Checks a page of the server holds no markup but its own: one script
/// element (its own file), no event handler attribute, and every link to
/// the server itself.
fn assert_only_own_markup(page: &str, what: &str) {
    assert_eq!(
        page.matches("<script").count(),
        1,
        "{what}: a script element that is not the page's own"
    );
    assert!(
        page.contains(r#"<script src="/static/app.js" defer></script>"#),
        "{what}"
    );
    for (tag, attr) in attribute_names(page) {
        assert!(
            !attr.starts_with("on"),
            "{what}: <{tag} {attr}=...> in the markup"
        );
        assert!(attr != "style", "{what}: <{tag} style=...> in the markup");
    }
    for tag in ["iframe", "object", "embed", "style", "base", "svg"] {
        assert!(
            !page.contains(&format!("<{tag}")),
            "{what}: a <{tag}> element"
        );
    }
    for link in links(page) {
        assert!(
            link.starts_with('/') && !link.starts_with("//"),
            "{what}: a link off the server: {link:?}"
        );
    }
}

#[test]
fn every_page_answers_with_its_type_and_the_security_headers() {
    let f = fixture();
    let server = Server::start(&f.store);
    let pages = [
        ("/", "text/html; charset=utf-8"),
        ("/?page=2", "text/html; charset=utf-8"),
        (
            &format!("/conversations/{MAIN_ID}"),
            "text/html; charset=utf-8",
        ),
        (
            &format!("/conversations/{MAIN_ID}?view=model"),
            "text/html; charset=utf-8",
        ),
        (
            &format!("/conversations/{MAIN_ID}/stats"),
            "text/html; charset=utf-8",
        ),
        (
            &format!("/conversations/{EMPTY_ID}"),
            "text/html; charset=utf-8",
        ),
        ("/stats", "text/html; charset=utf-8"),
        (
            &format!("/conversations/{MAIN_ID}/plot.svg"),
            "image/svg+xml",
        ),
        ("/static/style.css", "text/css; charset=utf-8"),
        ("/static/app.js", "text/javascript; charset=utf-8"),
        ("/static/favicon.svg", "image/svg+xml"),
    ];
    for (target, content_type) in pages {
        let r = server.get(target);
        ok(&r, target);
        assert_eq!(r.header("content-type"), Some(content_type), "{target}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{target}"
        );
        let policy = r.header("content-security-policy").unwrap_or("");
        if content_type == "image/svg+xml" {
            assert!(
                policy.starts_with("default-src 'none'") && policy.contains("sandbox"),
                "{target}: {policy}"
            );
        } else {
            assert!(
                policy.starts_with("default-src 'self'"),
                "{target}: {policy}"
            );
            assert!(
                policy.contains("script-src 'self'") && !policy.contains("unsafe-inline"),
                "{policy}"
            );
            assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        }
        assert_eq!(r.header("x-frame-options"), Some("DENY"), "{target}");
        if content_type.starts_with("text/html") {
            assert_eq!(r.header("cache-control"), Some("no-store"), "{target}");
            assert_only_own_markup(&r.text(), target);
        }
    }
    let svg = server
        .get(&format!("/conversations/{MAIN_ID}/plot.svg"))
        .text();
    assert!(
        svg.starts_with("<svg") && svg.contains("estimated tokens per turn"),
        "{svg}"
    );
    assert!(!svg.contains("<script"));
}

/// The number of conversations a list page shows.
fn rows(page: &str) -> usize {
    page.matches("<td class=\"id\">").count()
}

/// The ids of a list page, in order.
fn row_ids(page: &str) -> Vec<String> {
    page.split("<td class=\"id\"><a href=\"/conversations/")
        .skip(1)
        .map(|s| s[..s.find('"').unwrap_or(0)].to_owned())
        .collect()
}

#[test]
fn the_list_is_sorted_searched_and_paginated() {
    let f = fixture();
    let server = Server::start(&f.store);
    let total = FILLER + 3;
    let first = ok(&server.get("/"), "list");
    assert!(first.contains(&format!("{total} conversations")), "{first}");
    assert_eq!(rows(&first), 50);
    assert!(first.contains("page 1 of 2"));
    // Latest activity first: the main conversation's compactions are the
    // latest events, then the filler conversations, newest first.
    let ids = row_ids(&first);
    assert_eq!(ids[0], MAIN_ID);
    assert_eq!(ids[1], format!("1751360500{:02}", FILLER - 1));
    let second = ok(&server.get("/?page=2"), "page 2");
    assert_eq!(rows(&second), total - 50);
    assert!(second.contains("page 2 of 2"));
    // Past the last page: the last page.
    assert_eq!(
        row_ids(&ok(&server.get("/?page=99"), "page 99")),
        row_ids(&second)
    );
    let all: Vec<String> = ids.into_iter().chain(row_ids(&second)).collect();
    let mut unique = all.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), total, "every conversation once");

    let by_turns = row_ids(&ok(&server.get("/?sort=turns"), "by turns"));
    assert_eq!(by_turns[0], MAIN_ID, "the most turns first");
    let by_turns_up = row_ids(&ok(
        &server.get("/?sort=turns&order=asc"),
        "by turns, ascending",
    ));
    assert_eq!(by_turns_up[0], EMPTY_ID, "no turns first");
    let by_size = row_ids(&ok(&server.get("/?sort=size"), "by size"));
    assert_eq!(by_size[0], MAIN_ID);
    let by_title = row_ids(&ok(&server.get("/?sort=title"), "by title"));
    // The untitled one sorts as the empty title; `<script>` before letters.
    assert_eq!(&by_title[..2], [EMPTY_ID, HOSTILE_ID]);
    let by_id = row_ids(&ok(&server.get("/?sort=id&page=2"), "by id, page 2"));
    assert_eq!(by_id.last().map(String::as_str), Some("175136050054"));

    let found = ok(&server.get("/?q=FLAKY"), "search");
    assert_eq!(row_ids(&found), [MAIN_ID]);
    assert!(
        found.contains("1 conversation with “FLAKY” in the title"),
        "{found}"
    );
    let found = ok(&server.get("/?q=tidy+module+3"), "search with spaces");
    // Tasks 6, 19, 32 and 45 (i * 7 % 13 == 3).
    assert_eq!(rows(&found), 4, "{found}");
    let hostile = ok(&server.get("/?q=%3Cscript%3E"), "search for markup");
    assert_eq!(row_ids(&hostile), [HOSTILE_ID]);
    assert!(
        hostile.contains("value=\"&lt;script&gt;\""),
        "the search box holds it escaped"
    );
    assert_only_own_markup(&hostile, "search for markup");
    let none = ok(&server.get("/?q=no+such+title"), "search without match");
    assert_eq!(rows(&none), 0);
    // A sort link keeps the search; the search form keeps the sort.
    let sorted_search = ok(&server.get("/?q=task&sort=events"), "search, sorted");
    assert!(
        sorted_search.contains("href=\"/?q=task&amp;sort=turns\""),
        "{sorted_search}"
    );
    assert!(sorted_search.contains("name=\"sort\" value=\"events\""));
}

#[test]
fn hostile_strings_are_text_on_every_page() {
    let f = fixture();
    let server = Server::start(&f.store);
    for target in [
        "/".to_owned(),
        "/?sort=title".to_owned(),
        format!("/conversations/{HOSTILE_ID}"),
        format!("/conversations/{HOSTILE_ID}?view=model"),
        format!("/conversations/{HOSTILE_ID}/stats"),
        "/stats".to_owned(),
    ] {
        let page = ok(&server.get(&target), &target);
        assert_only_own_markup(&page, &target);
        assert!(
            !page.contains(HOSTILE_TITLE),
            "{target}: the title as markup"
        );
        assert!(!page.contains("<img src=x"), "{target}");
        if target.contains(HOSTILE_ID) && !target.ends_with("stats") {
            assert!(
                page.contains("&lt;script&gt;document.title=&#39;pwned&#39;&lt;/script&gt;&quot;&gt;&lt;img src=x onerror=&quot;document.title=&#39;img&#39;&quot;&gt;"),
                "{target}: the title, escaped"
            );
            assert!(
                page.contains("&lt;/pre&gt;&lt;/div&gt;&lt;script&gt;alert(&#39;text&#39;)"),
                "{target}: text escaped"
            );
        }
    }
    let page = server.get(&format!("/conversations/{HOSTILE_ID}")).text();
    // The tool's name, the call id, the argument key and the resource URI
    // are all text.
    assert!(page.contains("&lt;b&gt;tool&lt;/b&gt;"));
    assert!(page.contains("[&quot;&gt;&lt;b&gt;id&lt;/b&gt;]"));
    assert!(page.contains("&quot;&lt;key attr=&#39;x&#39;&gt;&quot;"));
    assert!(page.contains("<code class=\"uri\">javascript:alert(&#39;uri&#39;)</code>"));
    assert!(!page.contains(HOSTILE_TEXT));
}

#[test]
fn bad_ids_unknown_paths_and_traversal_are_404_pages() {
    let f = fixture();
    let server = Server::start(&f.store);
    let missing_blob = "0".repeat(64);
    for target in [
        "/conversations/99999999999".to_owned(),
        "/conversations/..%2f..%2fetc%2fpasswd".to_owned(),
        "/conversations/../../etc/passwd".to_owned(),
        "/conversations/%2e%2e/%2e%2e/etc/passwd".to_owned(),
        "/../../../../etc/passwd".to_owned(),
        "/conversations/x/../../../config.toml".to_owned(),
        format!("/conversations/{MAIN_ID}/../../config.toml"),
        format!("/conversations/{MAIN_ID}/"),
        format!("/conversations/{MAIN_ID}/plot.svg/x"),
        "/conversations/-rf".to_owned(),
        format!("/blobs/{missing_blob}"),
        format!("/blobs/{missing_blob}/preview"),
        "/blobs/..%2f..%2fconfig.toml".to_owned(),
        "/blobs/ABC".to_owned(),
        "/static/../../Cargo.toml".to_owned(),
        "/static/%2e%2e%2fmain.rs".to_owned(),
        "/static/".to_owned(),
        "/config.toml".to_owned(),
        "/conversations".to_owned(),
        "/favicon.ico".to_owned(),
        "/%00".to_owned(),
    ] {
        let r = server.get(&target);
        assert_eq!(r.status, 404, "{target}: {}", r.text());
        assert_eq!(
            r.header("content-type"),
            Some("text/html; charset=utf-8"),
            "{target}"
        );
        assert!(r.header("content-security-policy").is_some(), "{target}");
        let page = r.text();
        assert!(page.contains("<h1>Not found</h1>"), "{target}: {page}");
        assert!(!page.contains("root:"), "{target}: a file's content");
        assert_only_own_markup(&page, &target);
    }
    let r = server.get("/conversations/99999999999");
    assert!(r
        .text()
        .contains("There is no conversation 99999999999 in this store."));
    // Still serving.
    ok(&server.get("/"), "the list after the 404s");
}

#[test]
fn other_methods_are_405_and_head_has_no_body() {
    let f = fixture();
    let server = Server::start(&f.store);
    for method in [
        "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "PROPFIND",
    ] {
        let r = request_with_body(server.addr, method, "/", &[], b"title=x");
        assert_eq!(r.status, 405, "{method}");
        assert_eq!(r.header("allow"), Some("GET, HEAD"), "{method}");
        assert!(r.text().contains("read-only"), "{method}");
    }
    let r = request(
        server.addr,
        "POST",
        &format!("/conversations/{MAIN_ID}"),
        &[],
    );
    assert_eq!(r.status, 405);
    let get = server.get("/");
    let head = request(server.addr, "HEAD", "/", &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header("content-length"),
        Some(get.body.len().to_string().as_str())
    );
    assert_eq!(
        head.header("content-security-policy"),
        get.header("content-security-policy")
    );
    assert_eq!(request(server.addr, "HEAD", "/nothing", &[]).status, 404);
}

#[test]
fn blobs_are_sent_so_that_nothing_in_them_runs() {
    use base64::Engine as _;
    let f = fixture();
    let server = Server::start(&f.store);
    let html = BlobId::of(HTML_CONTENT.as_bytes());
    let svg = BlobId::of(SVG_CONTENT.as_bytes());
    let png_bytes = base64::engine::general_purpose::STANDARD
        .decode(PNG_BASE64)
        .expect("base64");
    let png = BlobId::of(&png_bytes);
    let check = |target: String, content_type: &str, attachment: bool, body: &[u8]| {
        let r = server.get(&target);
        assert_eq!(r.status, 200, "{target}");
        assert_eq!(r.header("content-type"), Some(content_type), "{target}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{target}"
        );
        let policy = r.header("content-security-policy").unwrap_or("");
        assert!(
            policy.starts_with("default-src 'none'") && policy.contains("sandbox"),
            "{target}: {policy}"
        );
        match r.header("content-disposition") {
            Some(d) => {
                assert!(attachment, "{target}: {d}");
                assert!(d.starts_with("attachment; filename=\""), "{target}: {d}");
            }
            None => assert!(!attachment, "{target}: not an attachment"),
        }
        assert!(r.body == body, "{target}: the content");
    };
    // Text of any kind is shown as text; with its own type only as a
    // download.
    check(
        format!("/blobs/{html}?type=text/html"),
        "text/plain; charset=utf-8",
        false,
        HTML_CONTENT.as_bytes(),
    );
    check(
        format!("/blobs/{html}?type=text%2Fhtml&download=1"),
        "text/html",
        true,
        HTML_CONTENT.as_bytes(),
    );
    check(
        format!("/blobs/{svg}?type=image%2Fsvg%2Bxml"),
        "text/plain; charset=utf-8",
        false,
        SVG_CONTENT.as_bytes(),
    );
    check(
        format!("/blobs/{svg}?type=image%2Fsvg%2Bxml&download=1"),
        "image/svg+xml",
        true,
        SVG_CONTENT.as_bytes(),
    );
    check(
        format!("/blobs/{html}"),
        "text/plain; charset=utf-8",
        false,
        HTML_CONTENT.as_bytes(),
    );
    // Images as themselves; other types as bytes to download.
    check(
        format!("/blobs/{png}?type=image%2Fpng"),
        "image/png",
        false,
        &png_bytes,
    );
    check(
        format!("/blobs/{png}?type=application%2Fpdf"),
        "application/octet-stream",
        true,
        &png_bytes,
    );
    let injected = server.get(&format!(
        "/blobs/{png}?type=text/html%0d%0aSet-Cookie:%20a=b"
    ));
    assert_eq!(
        injected.header("content-type"),
        Some("application/octet-stream")
    );
    assert!(injected.header("set-cookie").is_none());
    let attached = attached_file();
    check(
        format!(
            "/blobs/{}?type=text%2Fx-rust",
            BlobId::of(attached.as_bytes())
        ),
        "text/plain; charset=utf-8",
        false,
        attached.as_bytes(),
    );
    // A blob larger than what is read into memory: streamed, whole.
    let big = test_output(BIG_OUTPUT_LEN);
    let big_id = BlobId::of(big.as_bytes());
    let r = server.get(&format!("/blobs/{big_id}"));
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-length"),
        Some(BIG_OUTPUT_LEN.to_string().as_str())
    );
    assert!(r.body == big.as_bytes(), "the streamed blob");
    let head = request(server.addr, "HEAD", &format!("/blobs/{big_id}"), &[]);
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    // Its preview: the first 64 KiB as text, and a note.
    let preview = ok(&server.get(&format!("/blobs/{big_id}/preview")), "preview");
    assert!(preview.starts_with(&big[..1000]));
    assert!(preview.len() < (64 << 10) + 200, "{} bytes", preview.len());
    assert!(
        preview.contains(&format!("[… the first 65536 of {BIG_OUTPUT_LEN} bytes")),
        "{}",
        &preview[preview.len() - 200..]
    );
    let small = ok(
        &server.get(&format!("/blobs/{html}/preview")),
        "small preview",
    );
    assert_eq!(small, HTML_CONTENT);
}

#[test]
fn a_damaged_blob_is_an_error_never_wrong_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    run_jp_store(&store, &["init"], b"").ok("init");
    let big = test_output(BIG_OUTPUT_LEN + 123);
    let small = "a small tool output\n".repeat(10);
    let mut ids = Vec::new();
    for content in [&big, &small] {
        let path = dir.path().join("content");
        std::fs::write(&path, content).expect("write");
        let out = run_jp_store(&store, &["blob", "put", path.to_str().expect("utf-8")], b"");
        ids.push(
            out.ok("blob put")
                .split_whitespace()
                .next()
                .expect("an id")
                .to_owned(),
        );
    }
    assert_eq!(ids[0], BlobId::of(big.as_bytes()).to_string());
    let server = Server::start(&store);
    for (id, content) in ids.iter().zip([&big, &small]) {
        assert!(
            server.get(&format!("/blobs/{id}")).body == content.as_bytes(),
            "{id} whole"
        );
        let object = store.join("blobs/objects").join(&id[..2]).join(&id[2..]);
        let mut bytes = std::fs::read(&object).expect("the loose object");
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x10;
        std::fs::write(&object, bytes).expect("damage it");
        for target in [format!("/blobs/{id}"), format!("/blobs/{id}/preview")] {
            let r = server.get(&target);
            assert_eq!(r.status, 500, "{target}");
            assert!(r.text().contains("Cannot be shown"), "{target}");
            assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        }
    }
    ok(&server.get("/"), "serving on after the damage");
}

#[test]
fn the_conversation_page_shows_each_kind_of_event_and_marks_what_the_view_changed() {
    let f = fixture();
    let server = Server::start(&f.store);
    let raw = ok(
        &server.get(&format!("/conversations/{MAIN_ID}")),
        "raw, page 1",
    );
    for turn in 0..10 {
        assert!(raw.contains(&format!("id=\"turn-{turn}\"")), "turn {turn}");
    }
    assert!(!raw.contains("id=\"turn-10\""));
    assert!(raw.contains("page 1 of 2"));
    for text in [
        "<h1>Fix the flaky reopen test</h1>",
        "project=jp-store",
        "fs_read_file",
        "[call_1]",
        "&quot;path&quot;: &quot;src/log/tests.rs&quot;",
        "<details class=\"reasoning\">",
        "It fails one run in twenty: a race.",
        "<code class=\"uri\">file:///work/src/log.rs</code>",
        "src/log.rs · text/x-rust · 4.1 KiB",
        "fn reopen_after_torn_tail()",
        "config change: conversation",
        "compaction #1 of turns 0–0",
        "compaction #2 of turns 3–4",
        "compaction #1: reasoning stripped, tool results stripped",
        "compaction #2: summarized",
        // The marks of the raw history.
        "compacted: not sent",
        "compacted: result not sent",
        "deduplicated: sent as a reference",
        "interrupted: the model is sent an error result",
        "compacted: a summary is sent instead",
    ] {
        assert!(raw.contains(text), "raw page: {text:?} missing");
    }
    // Large content is folded, fetched from the blob endpoint on demand.
    let output = BlobId::of(test_output(120 << 10).as_bytes());
    assert!(raw.contains(&format!("<details class=\"blob\" data-blob=\"/blobs/{output}/preview\"><summary>output, 120.0 KiB — show</summary>")), "the folded output");
    assert!(raw.contains(&format!("href=\"/blobs/{output}\">whole text</a>")));
    assert!(
        !raw.contains("run      7: FAILED"),
        "large content is not in the page"
    );
    // The image is a link, with its type.
    assert!(raw.contains("ci.png · image/png · 70 B"), "{raw}");
    let page2 = ok(
        &server.get(&format!("/conversations/{MAIN_ID}?page=2")),
        "raw, page 2",
    );
    for turn in 10..14 {
        assert!(
            page2.contains(&format!("id=\"turn-{turn}\"")),
            "turn {turn}"
        );
    }
    assert!(!page2.contains("id=\"turn-9\""));

    let model = ok(
        &server.get(&format!("/conversations/{MAIN_ID}?view=model")),
        "model, page 1",
    );
    for text in [
        "compacted: summary",
        "[Summary of previous conversation]",
        "The user asked for the fix instead of CI",
        "added: the call was interrupted",
        "Tool call was interrupted.",
        "deduplicated: a reference to an earlier copy",
        "is identical to the attachment at turn 0",
        "compacted: result replaced",
        "[compacted] fs_read_file: success",
        "logged event not sent (compacted)",
        "deduplication replaced 1 resource by references",
    ] {
        assert!(model.contains(text), "model page: {text:?} missing");
    }
    assert!(
        !model.contains("It fails one run in twenty"),
        "stripped reasoning is not sent"
    );
    assert!(
        !model.contains("Committed as"),
        "summarized turns are not sent"
    );
    assert!(model.contains("aria-current=\"page\">What the model is sent</a>"));
    let empty = ok(&server.get(&format!("/conversations/{EMPTY_ID}")), "empty");
    assert!(empty.contains("No events yet."));
    assert!(empty.contains("<h1>(untitled)</h1>"));
}

#[test]
fn requests_naming_another_host_are_refused() {
    let f = fixture();
    let server = Server::start(&f.store);
    let port = server.addr.port();
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "127.0.0.1.nip.io",
    ] {
        let r = request(server.addr, "GET", "/", &[("Host", host)]);
        assert_eq!(r.status, 421, "{host}");
        assert!(!r.text().contains("Fix the flaky"), "{host}: the list");
    }
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        format!("LOCALHOST:{port}"),
    ] {
        assert_eq!(
            request(server.addr, "GET", "/", &[("Host", &host)]).status,
            200,
            "{host}"
        );
    }
}

/// A browser keeps connections open between requests and opens several
/// at once; a connection left idle, or holding a request whose answer is
/// not read yet, must not hold back the next one. (The HTTP library used
/// before could queue a new connection behind idle kept-alive ones until
/// the browser closed them, 300 s later.)
#[test]
fn idle_and_unread_connections_do_not_hold_back_a_request() {
    use std::io::Write as _;
    let f = fixture();
    let server = Server::start(&f.store);
    let idle: Vec<std::net::TcpStream> = (0..8)
        .map(|_| std::net::TcpStream::connect(server.addr).expect("connect"))
        .collect();
    let unread: Vec<std::net::TcpStream> = (0..8)
        .map(|_| {
            let mut c = std::net::TcpStream::connect(server.addr).expect("connect");
            let head = format!("GET /stats HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
            c.write_all(head.as_bytes()).expect("send a request");
            c
        })
        .collect();
    for target in ["/", "/stats", "/static/style.css"] {
        let r = server.get(target);
        assert_eq!(r.status, 200, "{target} beside idle connections");
    }
    drop((idle, unread));
}

/// Clients that send their request head a few bytes at a time (never
/// idle long enough for a read to time out) are more than the requests
/// answered at once: a browser's request is still answered while they
/// send, and each of them is closed without a reply when its time for the
/// head is up, long before its head reaches the size limit. (Before, each
/// held one of the 64 places of the server for as long as it went on
/// sending: 64 of them stopped the server until their heads grew past
/// 16 KiB, 431, here after some 80 s, and one byte every few seconds held
/// a place for hours.)
#[test]
fn clients_that_trickle_their_heads_are_dropped_and_hold_back_no_request() {
    use std::io::{Read as _, Write as _};
    use std::net::TcpStream;
    use std::time::Duration;
    const SLOW: usize = 70;
    const STEP: &[u8] = &[b'a'; 50];
    let f = fixture();
    let server = Server::start(&f.store);
    let mut slow: Vec<Option<TcpStream>> = (0..SLOW)
        .map(|_| {
            let mut c = TcpStream::connect(server.addr).expect("connect");
            c.write_all(b"GET / HTTP/1.1\r\nX-Slow: ")
                .expect("start a request");
            Some(c)
        })
        .collect();
    let trickle = |slow: &mut Vec<Option<TcpStream>>, sent: &mut usize| -> Vec<String> {
        let mut replies = Vec::new();
        for place in slow.iter_mut() {
            let Some(c) = place else { continue };
            // What the server sent, if anything: a reply, or its close.
            c.set_nonblocking(true).expect("nonblocking");
            let mut got = [0u8; 64];
            let read = c.read(&mut got);
            c.set_nonblocking(false).expect("blocking");
            let closed = match read {
                Ok(0) => true,
                Ok(n) => {
                    replies.push(String::from_utf8_lossy(&got[..n]).into_owned());
                    true
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => c.write_all(STEP).is_err(),
                Err(_) => true,
            };
            if closed {
                *place = None;
            }
        }
        *sent += STEP.len();
        replies
    };
    let mut sent = 0;
    assert!(trickle(&mut slow, &mut sent).is_empty());
    // A request beside them is answered at once, while they still send.
    let r = server.get("/stats");
    assert_eq!(r.status, 200, "beside {SLOW} trickling clients");
    assert!(
        trickle(&mut slow, &mut sent).is_empty(),
        "no trickling client has had a reply yet"
    );
    assert_eq!(
        slow.iter().flatten().count(),
        SLOW,
        "the request was answered while they were all still sending"
    );
    // Each is closed without a reply once its time is up, not when its head
    // grows past the 16 KiB a head may have.
    while slow.iter().any(Option::is_some) {
        std::thread::sleep(Duration::from_millis(250));
        let replies = trickle(&mut slow, &mut sent);
        assert!(
            replies.is_empty(),
            "a trickling client was answered (after {sent} bytes of its head) instead of dropped: {replies:?}"
        );
        assert!(
            sent < 16 << 10,
            "{} trickling clients still open after {sent} bytes of their heads",
            slow.iter().flatten().count()
        );
    }
    assert_eq!(server.get("/").status, 200, "the server still answers");
}

#[test]
fn only_loopback_unless_allowed_and_ctrl_c_stops() {
    let f = fixture();
    let refused = run_jp_store(&f.store, &["serve", "--addr", "0.0.0.0:0"], b"");
    refused.expect_code(1, "serve on 0.0.0.0");
    assert!(
        refused.stderr.contains("not a loopback address"),
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("--allow-remote"),
        "{}",
        refused.stderr
    );
    let remote = Server::start_with(&f.store, &["--addr", "0.0.0.0:0", "--allow-remote"]);
    // Any Host is answered then.
    let r = request(remote.addr, "GET", "/", &[("Host", "box.example")]);
    assert_eq!(r.status, 200);
    let (status, stderr) = remote.interrupt();
    assert!(status.success(), "{status}: {stderr}");
    assert!(stderr.contains("warning: serving on 0.0.0.0:"), "{stderr}");
    assert!(stderr.contains("stopped serving"), "{stderr}");

    let server = Server::start(&f.store);
    ok(&server.get("/"), "list");
    let (status, stderr) = server.interrupt();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("Ctrl-C stops"), "{stderr}");
    assert!(stderr.contains("stopped serving"), "{stderr}");
}

#[test]
fn serving_writes_nothing_to_the_store() {
    let f = fixture();
    // A stale head cache (as a writer that died leaves it) is not
    // rewritten by a listing of the server, as `ls` would.
    let before = tree_snapshot(&f.store);
    let server = Server::start(&f.store);
    let big = BlobId::of(test_output(BIG_OUTPUT_LEN).as_bytes());
    for target in [
        "/".to_owned(),
        "/?sort=title&q=task".to_owned(),
        format!("/conversations/{MAIN_ID}"),
        format!("/conversations/{MAIN_ID}?view=model&page=2"),
        format!("/conversations/{MAIN_ID}/stats"),
        format!("/conversations/{MAIN_ID}/plot.svg"),
        "/stats".to_owned(),
        format!("/blobs/{big}"),
        format!("/blobs/{big}/preview"),
    ] {
        ok(&server.get(&target), &target);
    }
    drop(server);
    assert!(tree_snapshot(&f.store) == before, "the store changed");
}

/// The cells of the list row of `id` on `page`: its title and its
/// numbers (turns, events, size), as text.
fn row_of(page: &str, id: &str) -> Option<(String, Vec<String>)> {
    let start = page.find(&format!("<td class=\"id\"><a href=\"/conversations/{id}\""))?;
    let row = &page[start
        ..page[start..]
            .find("</tr>")
            .map_or(page.len(), |e| start + e)];
    let cell_texts = |class: &str| -> Vec<String> {
        row.split(&format!("<td class=\"{class}\">"))
            .skip(1)
            .map(|cell| {
                let cell = &cell[..cell.find("</td>").unwrap_or(cell.len())];
                // The text without the tags around it.
                let mut text = String::new();
                let mut in_tag = false;
                for c in cell.chars() {
                    match c {
                        '<' => in_tag = true,
                        '>' => in_tag = false,
                        c if !in_tag => text.push(c),
                        _ => {}
                    }
                }
                text
            })
            .collect()
    };
    let title = cell_texts("title").into_iter().next()?;
    Some((title, cell_texts("number")))
}

#[test]
fn the_list_follows_what_other_processes_write_while_it_serves() {
    let f = fixture();
    let server = Server::start(&f.store);
    let total = FILLER + 3;
    let filler = "175136050000";
    let first = ok(&server.get("/?sort=id"), "list");
    assert!(first.contains(&format!("{total} conversations")), "{first}");
    let (title, numbers) = row_of(&first, filler).expect("the row of the filler");
    assert_eq!(title, "Task 00: tidy module 0");
    assert_eq!(numbers[..2], ["1", "3"], "turns and events");

    // Appended to by another process: its counts and its last activity
    // (now the latest of the store) on the next request.
    let more = [
        json!({"type": "turn_start", "timestamp": "2025-07-02T08:00:00Z"}),
        json!({"type": "chat_request", "content": "And module 1.", "timestamp": "2025-07-02T08:00:01Z"}),
    ]
    .iter()
    .map(|e| format!("{e}\n"))
    .collect::<String>();
    run_jp_store(&f.store, &["append", filler], more.as_bytes()).ok("append");
    let page = ok(&server.get("/"), "list after the append");
    assert_eq!(row_ids(&page)[0], filler, "the latest activity first");
    let (_, numbers) = row_of(&page, filler).expect("the row of the filler");
    assert_eq!(
        numbers[..2],
        ["2", "5"],
        "turns and events after the append"
    );
    // Again without a change: the same.
    assert_eq!(
        row_of(&ok(&server.get("/"), "again"), filler),
        row_of(&page, filler)
    );

    // Created by another process: listed, found by its title.
    run_jp_store(
        &f.store,
        &["new", "--id", "17600000000", "--title", "A new arrival"],
        b"",
    )
    .ok("new");
    let page = ok(&server.get("/?q=new+arrival"), "search for the new one");
    assert_eq!(row_ids(&page), ["17600000000"]);
    let (title, numbers) = row_of(&page, "17600000000").expect("its row");
    assert_eq!(title, "A new arrival");
    assert_eq!(numbers[..2], ["0", "0"]);
    let page = ok(&server.get("/"), "list after new");
    assert!(
        page.contains(&format!("{} conversations", total + 1)),
        "{page}"
    );

    // Removed by another process: gone from the next page.
    run_jp_store(&f.store, &["rm", filler], b"").ok("rm");
    let page = ok(&server.get("/?sort=id"), "list after rm");
    assert!(page.contains(&format!("{total} conversations")), "{page}");
    assert!(row_of(&page, filler).is_none(), "{page}");
    assert!(!row_ids(&ok(&server.get("/?sort=id&page=2"), "page 2")).contains(&filler.to_owned()));
}

#[test]
fn quiet_serve_prints_its_url_and_no_notes() {
    let f = fixture();
    // `Server::start_with` reads the URL from standard output first, and
    // fails if it is not printed.
    let server = Server::start_with(&f.store, &["-q", "--addr", "127.0.0.1:0"]);
    assert!(
        server.url.starts_with("http://127.0.0.1:"),
        "{}",
        server.url
    );
    ok(&server.get("/"), "list");
    let (status, stderr) = server.interrupt();
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("serving"), "{stderr}");
    assert!(stderr.is_empty(), "nothing on standard error: {stderr}");
}

/// One turn of 1,053 entries between two short ones: the conversation page
/// shows at most 200 entries at a time, a long turn over several pages
/// (each saying which entries of the turn it holds), and following the
/// pages from the first to the last reaches every entry once, as logged and
/// as the model is sent them. (Before, the page of a turn held all of it:
/// 67 MiB of HTML for 100,000 events.)
#[test]
fn a_long_turn_is_paged_and_paging_reaches_every_entry() {
    const CALLS: usize = 525;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    run_jp_store(&store, &["init"], b"").ok("init");
    run_jp_store(&store, &["new", "--id", "long", "--title", "long"], b"").ok("new");
    let mut lines = vec![
        json!({"type": "turn_start"}),
        json!({"type": "chat_request", "content": "first question"}),
        json!({"type": "chat_response", "message": "first answer"}),
        json!({"type": "turn_start"}),
        json!({"type": "chat_request", "content": "the long task"}),
    ];
    for k in 0..CALLS {
        lines.push(json!({"type": "tool_call_request", "id": format!("call-{k:04}"), "name": "fs_read_file", "arguments": {"path": format!("f{k}.rs")}}));
        lines.push(json!({"type": "tool_call_response", "id": format!("call-{k:04}"), "content": format!("output-{k:04}")}));
    }
    lines.push(json!({"type": "chat_response", "message": "long task done"}));
    lines.extend([
        json!({"type": "turn_start"}),
        json!({"type": "chat_request", "content": "last question"}),
    ]);
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    run_jp_store(&store, &["append", "long"], input.as_bytes()).ok("append");
    let server = Server::start(&store);
    for view in ["raw", "model"] {
        let mut seen: Vec<String> = Vec::new();
        let mut pages = 0;
        let mut page = 1;
        loop {
            let text = ok(
                &server.get(&format!("/conversations/long?view={view}&page={page}")),
                &format!("{view}, page {page}"),
            );
            pages += 1;
            let events = text.matches("<div class=\"event ").count()
                + text.matches("<div class=\"event\"").count();
            assert!(
                (1..=200).contains(&events),
                "{view}, page {page}: {events} entries"
            );
            assert!(
                text.len() < 256 << 10,
                "{view}, page {page}: {} bytes",
                text.len()
            );
            for (at, _) in text.match_indices("[call-") {
                seen.push(text[at + 1..at + 10].to_owned());
            }
            for marker in ["first answer", "long task done", "last question"] {
                if text.contains(marker) {
                    seen.push(marker.to_owned());
                }
            }
            // The parts of the long turn say which entries they hold.
            if text.contains("id=\"turn-1\"") || text.contains("class=\"turn continued\"") {
                assert!(text.contains(" of 1,053</small>"), "{view}, page {page}");
            }
            let next = match view {
                "raw" => format!("/conversations/long?page={}\"", page + 1),
                _ => format!("/conversations/long?view={view}&amp;page={}\"", page + 1),
            };
            if !text.contains(&next) {
                break;
            }
            page += 1;
            assert!(page < 100, "{view}: the pages do not end");
        }
        // 3 + 1,053 + 2 entries, 200 a page at most: 6 pages.
        assert_eq!(pages, 6, "{view}");
        seen.sort();
        let mut expected: Vec<String> = (0..CALLS)
            .flat_map(|k| [format!("call-{k:04}"), format!("call-{k:04}")])
            .collect();
        expected.extend(["first answer", "long task done", "last question"].map(String::from));
        expected.sort();
        assert_eq!(
            seen, expected,
            "{view}: every entry once, request and result"
        );
    }
    // The turn's heading links to the page it starts on.
    let last = ok(&server.get("/conversations/long?page=6"), "page 6");
    assert!(
        last.contains("href=\"/conversations/long#turn-1\""),
        "{last}"
    );
    assert!(last.contains("id=\"turn-2\""));
}

#[test]
fn the_search_box_searches_content_and_links_each_line_to_its_turn() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    run_jp_store(&store, &["init"], b"").ok("init");
    // 12 turns: pages of 10 turns put turn 11 on page 2.
    run_jp_store(
        &store,
        &["new", "--id", "17000000001", "--title", "paged"],
        b"",
    )
    .ok("new");
    let mut lines = Vec::new();
    for turn in 0..12 {
        lines.extend([
            json!({"type": "turn_start"}),
            json!({"type": "chat_request", "content": format!("question {turn}")}),
            json!({"type": "tool_call_request", "id": format!("c{turn}"), "name": "fs_read_file", "arguments": {"path": "a.rs"}}),
            json!({"type": "tool_call_response", "id": format!("c{turn}"),
                   "content": if turn == 11 { "fn a() {}\nlet x = NeedleOfTurnEleven;\n<script>alert(1)</script> needle".to_owned() } else { format!("nothing in {turn}") }}),
        ]);
    }
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    run_jp_store(&store, &["append", "17000000001"], input.as_bytes()).ok("append");
    // A newer conversation with 150 lines holding the text: 10 are shown.
    run_jp_store(
        &store,
        &["new", "--id", "17000000002", "--title", "many"],
        b"",
    )
    .ok("new");
    let many: String = (0..150).map(|i| format!("needle line {i}\n")).collect();
    let input = format!("{}\n", json!({"type": "chat_request", "content": many}));
    run_jp_store(&store, &["append", "17000000002"], input.as_bytes()).ok("append");
    let server = Server::start(&store);

    let page = ok(&server.get("/?q=NEEDLE"), "content search");
    assert!(page.contains("In the content"), "{page}");
    assert!(page.contains("placeholder=\"search titles and content\""));
    assert_only_own_markup(&page, "content search");
    // No title holds it; the content does: 10 lines of the newer one
    // (first), then 2 of the older.
    assert!(
        page.contains("0 conversations with “NEEDLE” in the title"),
        "{page}"
    );
    assert!(
        page.contains("12 lines with “NEEDLE” in 2 conversations"),
        "{page}"
    );
    let newer = page.find("17000000002").expect("the newer conversation");
    let older = page.find("17000000001").expect("the older one");
    assert!(newer < older);
    assert_eq!(
        page.matches("<strong>needle</strong> line ").count(),
        10,
        "{page}"
    );
    assert!(page.contains("more in this conversation"));
    // Each line links to its turn, on the page that shows it; the match
    // is marked, the rest escaped.
    let link = "/conversations/17000000001?page=2#turn-11";
    assert!(page.contains(&format!("href=\"{link}\"")), "{page}");
    assert!(
        page.contains("let x = <strong>Needle</strong>OfTurnEleven;"),
        "{page}"
    );
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt; <strong>needle</strong>"),
        "{page}"
    );
    let turn_page = ok(
        &server.get(link.split('#').next().unwrap_or(link)),
        "the turn's page",
    );
    assert!(turn_page.contains("id=\"turn-11\""), "{turn_page}");

    // The title search goes on as before, and a text found nowhere says so.
    let page = ok(&server.get("/?q=paged"), "title search");
    assert_eq!(row_ids(&page), ["17000000001"]);
    assert!(
        page.contains("0 lines with “paged” in 0 conversations"),
        "{page}"
    );
    assert!(!page.contains("hit-conversation"));
    // Without a search, no content is searched.
    assert!(!ok(&server.get("/"), "list").contains("In the content"));
}

#[test]
fn the_content_search_stops_at_its_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    run_jp_store(&store, &["init"], b"").ok("init");
    for i in 0..12 {
        let id = format!("170000000{i:02}");
        run_jp_store(&store, &["new", "--id", &id], b"").ok("new");
        let many: String = (0..20).map(|k| format!("needle {k}\n")).collect();
        let input = format!("{}\n", json!({"type": "chat_request", "content": many}));
        run_jp_store(&store, &["append", &id], input.as_bytes()).ok("append");
    }
    let server = Server::start(&store);
    let page = ok(&server.get("/?q=needle"), "content search");
    // 10 conversations of 10 lines: 100, the bound; the 2 oldest are not
    // shown.
    assert_eq!(
        page.matches("<li><a href=\"/conversations/").count(),
        100,
        "{page}"
    );
    assert!(page.contains("the first 100 lines with “needle”"), "{page}");
    assert!(
        !page.contains("17000000001\"") && !page.contains(">17000000000<"),
        "{page}"
    );
}
