//! `jp-store serve` in a real browser: headless Chromium loads each page
//! (its DOM after the page's script ran, under the server's
//! Content-Security-Policy), the rendered text is checked, hostile content
//! stays text, a folded blob is fetched when a user unfolds it, the plot
//! loads as an image, the console shows no refused script or style, and
//! each page is photographed. With `JP_STORE_UPDATE_SCREENSHOTS=1` the
//! pictures replace those of `docs/screenshots/` (shrunk with `pngquant`
//! and `optipng` when they are installed); otherwise they are only checked
//! to be pictures.
//!
//! One fixture store and one server serve every check (building the store
//! is the slow part). Without Chromium (Debian's `chromium`, and
//! `chromium-driver` for the checks that click), the test says it is
//! skipped and why, and passes, except in CI, where it fails
//! (`jpstore_test_env`); `.ci/run` installs both, and fails without them. A Chromium that hangs fails the test instead of stalling it: each
//! run of Chromium, and each ChromeDriver command, is given
//! `web::CHROMIUM_LIMIT` (minutes, a guard against a hang, not a measure of
//! speed), after which the browser is killed with its helper processes.

use std::path::{Path, PathBuf};

use jpstore_tests::web::{
    chromedriver, chromium, dump_dom, fixture, screenshot, test_output, Driver, Server, FILLER,
    HOSTILE_ID, HOSTILE_TITLE, MAIN_ID,
};

/// The browser, or `None` after saying why the test is skipped (in CI the
/// test fails instead: `jpstore_test_env::skip`).
fn browser(test: &str) -> Option<PathBuf> {
    match chromium() {
        Ok(path) => Some(path),
        Err(why) => {
            jpstore_test_env::skip(test, jpstore_test_env::Need::Chromium, &why);
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
fn the_web_view_in_chromium() {
    let Some(chromium) = browser("the_web_view_in_chromium") else {
        return;
    };
    let f = fixture();
    let server = Server::start(&f.store);
    each_page_renders_with_its_script_running(&chromium, &server);
    hostile_content_is_shown_as_text(&chromium, &server);
    match chromedriver() {
        Ok(driver) => {
            a_folded_blob_is_fetched_when_unfolded_and_the_plot_loads(&chromium, &driver, &server)
        }
        Err(why) => jpstore_test_env::skip(
            "a_folded_blob_is_fetched_when_unfolded",
            jpstore_test_env::Need::Chromium,
            &why,
        ),
    }
    screenshots_of_the_pages(&chromium, &server);
}

fn each_page_renders_with_its_script_running(chromium: &Path, server: &Server) {
    let url = |path: &str| format!("{}{}", server.url, path.trim_start_matches('/'));
    let pages: [(String, &[&str]); 9] = [
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
            url("/?q=module+3&sort=title&order=desc"),
            &[
                "4 conversations with “module 3” in the title",
                "title ▼",
                "Task 45: tidy module 3 1 3 347 B 2025-07-01 09:46:48 175136050032 Task 32",
                "Task 19: tidy module 3",
                "Task 06: tidy module 3",
            ],
        ),
        (
            // The search box searches content too: the line, linked to
            // its turn, below the (empty) list of titles.
            url("/?q=Joined+The+Thread"),
            &[
                "0 conversations with “Joined The Thread” in the title",
                "In the content",
                "1 line with “Joined The Thread” in 1 conversation",
                "Fix the flaky reopen test 17513604000",
                "turn 3, chat_response message I joined the thread before reopening; fifty runs pass.",
            ],
        ),
        (
            url("/?sort=events&order=asc&page=2"),
            &["page 2 of 2", "Fix the flaky reopen test"],
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
        let dom = dump_dom(chromium, page);
        assert!(
            dom.contains("<html lang=\"en\" data-script=\"on\">"),
            "{page}: the page's script did not run: {}",
            &dom[..dom.len().min(400)]
        );
        let text = text_of(&dom);
        for t in texts.iter() {
            assert!(text.contains(t), "{page}: {t:?} not rendered in {text:?}");
        }
    }
}

fn hostile_content_is_shown_as_text(chromium: &Path, server: &Server) {
    for path in [
        format!("conversations/{HOSTILE_ID}"),
        format!("conversations/{HOSTILE_ID}?view=model"),
        "?q=%3Cscript".to_owned(),
    ] {
        let page = format!("{}{path}", server.url);
        let dom = dump_dom(chromium, &page);
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
        chromium,
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

fn a_folded_blob_is_fetched_when_unfolded_and_the_plot_loads(
    chromium: &Path,
    driver: &Path,
    server: &Server,
) {
    let d = Driver::start(driver, chromium);
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

/// The screenshots of the README and `docs/screenshots/`: the list, a
/// conversation as logged and as the model is sent it, and its statistics
/// with the plot.
/// Written there only with `JP_STORE_UPDATE_SCREENSHOTS=1` (a picture
/// differs by a pixel from one Chromium to the next, so a normal run only
/// checks that each page could be photographed).
fn screenshots_of_the_pages(chromium: &Path, server: &Server) {
    let update = std::env::var_os("JP_STORE_UPDATE_SCREENSHOTS").is_some_and(|v| v == "1");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/screenshots");
    let scratch = tempfile::tempdir().expect("tempdir");
    // Each height ends the picture in a gap of the page (between rows of
    // the list, after the first turn of the conversation), not through the
    // middle of a line of text.
    for (name, path, height) in [
        ("list.png", String::new(), 760),
        ("conversation.png", format!("conversations/{MAIN_ID}"), 1114),
        (
            "conversation-model.png",
            format!("conversations/{MAIN_ID}?view=model"),
            1022,
        ),
        ("stats.png", format!("conversations/{MAIN_ID}/stats"), 1000),
    ] {
        let shot = scratch.path().join(name);
        screenshot(
            chromium,
            &format!("{}{path}", server.url),
            &shot,
            1100,
            height,
        );
        let bytes = std::fs::read(&shot).expect("the screenshot");
        assert!(bytes.starts_with(b"\x89PNG"), "{name} is a PNG");
        // The IHDR chunk: width and height, big-endian, at 16 and 20.
        let size = |at: usize| {
            bytes
                .get(at..at + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        assert_eq!((size(16), size(20)), (Some(1100), Some(height)), "{name}");
        if update {
            std::fs::create_dir_all(&dir).expect("docs/screenshots");
            let target = dir.join(name);
            shrink_png(&shot);
            std::fs::copy(&shot, &target)
                .unwrap_or_else(|e| panic!("writing {}: {e}", target.display()));
            eprintln!(
                "{name}: {} bytes",
                std::fs::metadata(&target).map(|m| m.len()).unwrap_or(0)
            );
        }
    }
}

/// Shrinks a PNG in place with `pngquant` (256 colours) and `optipng`,
/// each when it is installed.
fn shrink_png(path: &Path) {
    let run = |program: &str, args: &[&std::ffi::OsStr]| {
        match std::process::Command::new(program).args(args).status() {
            // pngquant's 98: the result would not be smaller; kept as is.
            Ok(status) if status.success() || status.code() == Some(98) => {}
            Ok(status) => panic!("{program} {}: {status}", path.display()),
            Err(e) => eprintln!("screenshots: {program} not run ({e}): the PNG is left as it is"),
        }
    };
    run(
        "pngquant",
        &[
            "--force".as_ref(),
            "--skip-if-larger".as_ref(),
            "--strip".as_ref(),
            "--ext".as_ref(),
            ".png".as_ref(),
            "256".as_ref(),
            path.as_os_str(),
        ],
    );
    run(
        "optipng",
        &["-quiet".as_ref(), "-o2".as_ref(), path.as_os_str()],
    );
}
