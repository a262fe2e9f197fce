//! `jp-store serve` in a real browser: headless Chromium loads each page
//! (its DOM after the page's script ran, under the server's
//! Content-Security-Policy), the rendered text is checked, hostile content
//! stays text, a folded blob is fetched when a user unfolds it, the plot
//! loads as an image, the console shows no refused script or style, and
//! screenshots are saved to `docs/screenshots/`.
//!
//! Without Chromium (Debian's `chromium`, and `chromium-driver` for the
//! tests that click), these tests say they are skipped and why, and pass;
//! `.ci/run` installs both so that in CI they run.

use std::path::{Path, PathBuf};

use jpstore_tests::web::{
    chromedriver, chromium, dump_dom, fixture, screenshot, test_output, Driver, Server, FILLER,
    HOSTILE_ID, HOSTILE_TITLE, MAIN_ID,
};

/// The browser, or `None` after saying why the test is skipped.
fn browser(test: &str) -> Option<PathBuf> {
    match chromium() {
        Ok(path) => Some(path),
        Err(why) => {
            eprintln!("{test}: skipped: {why}");
            None
        }
    }
}

/// The text of a dumped DOM without its tags (entities left as they are).
fn text_of(dom: &str) -> String {
    let mut out = String::with_capacity(dom.len());
    let mut in_tag = false;
    for c in dom.chars() {
        match c {
            '<' => in_tag = true,
            '>' => {
                in_tag = false;
                out.push(' ');
            }
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn each_page_renders_in_chromium_with_its_script_running() {
    let Some(chromium) = browser("each_page_renders_in_chromium") else {
        return;
    };
    let f = fixture();
    let server = Server::start(&f.store);
    let url = |path: &str| format!("{}{}", server.url, path.trim_start_matches('/'));
    let pages: [(String, &[&str]); 6] = [
        (
            url("/"),
            &[
                "Conversations",
                &format!("{} conversations", FILLER + 3),
                "Fix the flaky reopen test",
                "page 1 of 2",
                "last activity",
            ],
        ),
        (
            url(&format!("/conversations/{MAIN_ID}")),
            &[
                "Fix the flaky reopen test",
                "History as logged",
                "Turn 0",
                "fs_read_file",
                "compacted: not sent",
                "deduplicated: sent as a reference",
                "output, 120.0 KiB — show",
            ],
        ),
        (
            url(&format!("/conversations/{MAIN_ID}?view=model")),
            &[
                "What the model is sent",
                "[compacted] fs_read_file: success",
                "The user asked for the fix instead of CI",
                "Tool call was interrupted.",
            ],
        ),
        (
            url("/stats"),
            &[
                "Store statistics",
                "Largest conversations",
                "saved by deduplication",
            ],
        ),
        (
            url(&format!("/conversations/{MAIN_ID}/stats")),
            &["Statistics of 17513604000", "entries", "chat_request"],
        ),
        (
            url("/conversations/99"),
            &["Not found", "There is no conversation 99"],
        ),
    ];
    for (page, texts) in &pages {
        let dom = dump_dom(&chromium, page);
        assert!(
            dom.contains("<html lang=\"en\" data-script=\"on\">"),
            "{page}: the page's script did not run: {}",
            &dom[..dom.len().min(400)]
        );
        let text = text_of(&dom);
        for t in texts.iter() {
            assert!(text.contains(t), "{page}: {t:?} not rendered");
        }
    }
}

#[test]
fn hostile_content_is_shown_as_text_by_the_browser() {
    let Some(chromium) = browser("hostile_content_is_shown_as_text") else {
        return;
    };
    let f = fixture();
    let server = Server::start(&f.store);
    for path in [
        format!("conversations/{HOSTILE_ID}"),
        format!("conversations/{HOSTILE_ID}?view=model"),
        "?q=%3Cscript".to_owned(),
    ] {
        let page = format!("{}{path}", server.url);
        let dom = dump_dom(&chromium, &page);
        // The DOM holds the page's one script element and no image: every
        // `<script>` and `<img onerror>` of the content is text.
        assert_eq!(dom.matches("<script").count(), 1, "{page}");
        assert!(!dom.contains("<img"), "{page}");
        assert!(!dom.contains("<b>"), "{page}");
        let title = HOSTILE_TITLE
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;");
        assert!(text_of(&dom).contains(&title), "{page}: the title as text");
    }
    let dom = dump_dom(
        &chromium,
        &format!("{}conversations/{HOSTILE_ID}", server.url),
    );
    // The page's title is the hostile title, literally: no script set it.
    assert!(dom.contains(&format!(
        "<title>{} · jp-store</title>",
        HOSTILE_TITLE
            .replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    )));
}

#[test]
fn a_folded_blob_is_fetched_when_unfolded_and_the_plot_loads() {
    let Some(chromium) = browser("a_folded_blob_is_fetched_when_unfolded") else {
        return;
    };
    let driver = match chromedriver() {
        Ok(d) => d,
        Err(why) => {
            eprintln!("a_folded_blob_is_fetched_when_unfolded: skipped: {why}");
            return;
        }
    };
    let f = fixture();
    let server = Server::start(&f.store);
    let d = Driver::start(&driver, &chromium);
    d.open(&format!("{}conversations/{MAIN_ID}", server.url));
    assert_eq!(
        d.run("return document.title"),
        "Fix the flaky reopen test · jp-store"
    );
    let folded = "details[data-blob]:not([data-loaded])";
    let before = d.run(&format!(
        "return document.querySelector('{folded} pre.lazy').textContent"
    ));
    assert!(before
        .as_str()
        .is_some_and(|t| t.contains("fetched when this is unfolded")));
    // The first folded blob of the page is the attached file (4.1 KiB).
    d.click(&format!("{folded} > summary"));
    let shown = d.run_async(
        "const done = arguments[0];
         const details = document.querySelector('details[data-blob]');
         const check = () => {
           const state = details.dataset.loaded;
           if (state === 'yes' || state === 'failed') {
             done([state, details.querySelector('pre.lazy').textContent]);
           } else {
             setTimeout(check, 20);
           }
         };
         check();",
    );
    assert_eq!(shown[0], "yes", "{shown}");
    let text = shown[1].as_str().unwrap_or("");
    assert!(
        text.starts_with("//! The log: append-only records with checksums."),
        "{text}"
    );
    // The large output: its first 64 KiB, and the note.
    d.run(
        "for (const d of document.querySelectorAll('details[data-blob]')) {
           if (d.querySelector('summary').textContent.startsWith('output, 120.0 KiB')) { d.open = true; }
         }",
    );
    let big = d.run_async(
        "const done = arguments[0];
         const check = () => {
           const d = [...document.querySelectorAll('details[data-blob]')]
             .find((d) => d.querySelector('summary').textContent.startsWith('output, 120.0 KiB'));
           if (d.dataset.loaded === 'yes' || d.dataset.loaded === 'failed') {
             done(d.querySelector('pre.lazy').textContent);
           } else {
             setTimeout(check, 20);
           }
         };
         check();",
    );
    let big = big.as_str().unwrap_or("");
    assert!(
        big.starts_with(&test_output(1000)),
        "{}",
        &big[..big.len().min(200)]
    );
    assert!(
        big.contains("[… the first 65536 of 122880 bytes"),
        "the note"
    );

    // The plot is an image of the server: it loads under the policy.
    d.open(&format!("{}conversations/{MAIN_ID}/stats", server.url));
    let width = d.run_async(
        "const done = arguments[0];
         const img = document.querySelector('p.plot img');
         if (img.complete) { done(img.naturalWidth); }
         else { img.onload = () => done(img.naturalWidth); img.onerror = () => done(0); }",
    );
    assert_eq!(width, 900, "the plot's width");
    // Nothing was refused by the Content-Security-Policy, nothing failed.
    let console = d.console();
    let problems: Vec<_> = console
        .iter()
        .filter(|(level, message)| level == "SEVERE" || message.contains("Content Security Policy"))
        .collect();
    assert!(problems.is_empty(), "console: {problems:?}");
}

/// Writes the screenshots of the README and `docs/screenshots/`: the
/// list, a conversation as logged and as the model is sent it, and the
/// statistics. A file is replaced only when its bytes change (the fixture's
/// timestamps are fixed, so a run on the same browser writes nothing new).
#[test]
fn screenshots_of_the_pages() {
    let Some(chromium) = browser("screenshots_of_the_pages") else {
        return;
    };
    let f = fixture();
    let server = Server::start(&f.store);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/screenshots");
    std::fs::create_dir_all(&dir).expect("docs/screenshots");
    let scratch = tempfile::tempdir().expect("tempdir");
    for (name, path, height) in [
        ("list.png", String::new(), 900),
        ("conversation.png", format!("conversations/{MAIN_ID}"), 1400),
        (
            "conversation-model.png",
            format!("conversations/{MAIN_ID}?view=model"),
            1400,
        ),
        ("stats.png", "stats".to_owned(), 1100),
    ] {
        let shot = scratch.path().join(name);
        screenshot(
            &chromium,
            &format!("{}{path}", server.url),
            &shot,
            1100,
            height,
        );
        let bytes = std::fs::read(&shot).expect("the screenshot");
        assert!(bytes.starts_with(b"\x89PNG"), "{name} is a PNG");
        let target = dir.join(name);
        if std::fs::read(&target).ok().as_deref() != Some(&bytes[..]) {
            std::fs::write(&target, &bytes)
                .unwrap_or_else(|e| panic!("writing {}: {e}", target.display()));
        }
        eprintln!("{}: {} bytes", target.display(), bytes.len());
    }
}
