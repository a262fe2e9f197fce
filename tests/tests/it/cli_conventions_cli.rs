//! What people expect of a command line, through the binary: shell
//! completions and manual pages generated from the argument parser,
//! `-q`/`-v`, `NO_COLOR`, a reader that goes away (`| head`), store URLs
//! this build cannot open refused instead of taken for a directory name,
//! and `compact --summary` under any profile.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use jpstore_tests::{jp_store_bin, run_jp_store, run_jp_store_in};

fn jp_store(args: &[&str]) -> std::process::Output {
    Command::new(jp_store_bin())
        .args(args)
        .env_remove("JP_STORE_DIR")
        .output()
        .expect("run jp-store")
}

#[test]
fn completions_are_generated_for_the_common_shells_and_know_every_command() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef jp-store"),
        ("fish", "complete -c jp-store"),
    ] {
        let out = jp_store(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {out:?}");
        let text = String::from_utf8(out.stdout).expect("UTF-8");
        assert!(text.contains(marker), "{shell}: no `{marker}` in\n{text}");
        for command in ["append", "compact", "fsck", "export", "completions"] {
            assert!(text.contains(command), "{shell}: `{command}` not completed");
        }
        assert!(text.contains("store"), "{shell}: the global --store");
    }
    let out = jp_store(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "an unknown shell is bad usage");
}

#[test]
fn manual_pages_come_from_the_help_text() {
    let out = jp_store(&["man"]);
    assert!(out.status.success(), "{out:?}");
    let page = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(page.contains(".TH jp-store 1"), "{page}");
    assert!(page.contains("fsck"), "subcommands listed");
    let dir = tempfile::tempdir().expect("tempdir");
    let pages = dir.path().join("man1");
    let out = jp_store(&["man", "--dir", pages.to_str().expect("UTF-8 path")]);
    assert!(out.status.success(), "{out:?}");
    for name in ["jp-store.1", "jp-store-append.1", "jp-store-blob-verify.1"] {
        let text =
            std::fs::read_to_string(pages.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(text.contains(".TH"), "{name}");
    }
    let append = std::fs::read_to_string(pages.join("jp-store-append.1")).expect("page");
    assert!(
        append.contains("durable"),
        "the page holds the command's help text"
    );
}

#[test]
fn a_store_url_this_build_cannot_open_is_refused_not_made_a_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    // s3:// stores are opened (tests/tests/it/s3_cli.rs); other URLs are
    // refused.
    for url in [
        "gs://bucket/prefix",
        "https://example.com/store",
        "AZ://b/p",
    ] {
        let out = Command::new(jp_store_bin())
            .current_dir(dir.path())
            .args(["--store", url, "init"])
            .env_remove("JP_STORE_DIR")
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "{url}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not supported"), "{url}: {err}");
        let out = Command::new(jp_store_bin())
            .current_dir(dir.path())
            .arg("ls")
            .env("JP_STORE_DIR", url)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(2), "JP_STORE_DIR={url}: {out:?}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).expect("list").collect();
    assert!(left.is_empty(), "nothing was created: {left:?}");
    // A file:// URL is a directory.
    let store = dir.path().join("local");
    let url = format!("file://{}", store.display());
    let out = jp_store(&["--store", &url, "init"]);
    assert!(out.status.success(), "{out:?}");
    assert!(store.join("conversations").is_dir());
}

#[test]
fn quiet_silences_notes_and_verbose_says_what_is_done() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("s");
    run_jp_store(&store, &["init"], b"").ok("init");
    let again = run_jp_store(&store, &["init"], b"");
    again.ok("init again");
    assert!(
        again.stderr.contains("already a jp-store store"),
        "{again:?}"
    );
    let quiet = run_jp_store(&store, &["-q", "init"], b"");
    quiet.ok("init -q");
    assert_eq!(quiet.stderr, "", "-q prints no note");
    assert!(
        quiet.stdout.contains(&*store.to_string_lossy()),
        "the result stays"
    );
    let verbose = run_jp_store(&store, &["-v", "ls"], b"");
    verbose.ok("ls -v");
    assert!(
        verbose
            .stderr
            .contains(&format!("store {}", store.display())),
        "{verbose:?}"
    );
    let both = run_jp_store(&store, &["-q", "-v", "ls"], b"");
    both.expect_code(2, "-q and -v together");
    // -v without a terminal: progress as lines, never a bar.
    let id = run_jp_store(&store, &["new"], b"")
        .ok("new")
        .trim()
        .to_string();
    let payload = (0..40)
        .map(|i| format!("{{\"type\":\"chat_request\",\"content\":\"{i}\"}}\n"))
        .collect::<String>();
    run_jp_store(&store, &["append", &id], payload.as_bytes()).ok("append");
    let fsck = run_jp_store(&store, &["-v", "fsck", "--read-data"], b"");
    fsck.ok("fsck -v");
    assert!(
        fsck.stderr.contains("reading blobs: 100%"),
        "progress lines with -v: {}",
        fsck.stderr
    );
    assert!(!fsck.stderr.contains('\r'), "no bar drawn into a pipe");
    let json = run_jp_store(&store, &["-v", "fsck", "--json"], b"");
    json.ok("fsck --json");
    assert!(
        !json.stderr.contains("checking:"),
        "no progress with --json: {}",
        json.stderr
    );
}

#[test]
fn no_color_is_honoured_even_where_color_is_forced() {
    let colored = Command::new(jp_store_bin())
        .arg("--help")
        .env("CLICOLOR_FORCE", "1")
        .env_remove("NO_COLOR")
        .output()
        .expect("run");
    assert!(
        colored.stdout.contains(&0x1b),
        "forced colour shows escape codes"
    );
    let plain = Command::new(jp_store_bin())
        .arg("--help")
        .env("CLICOLOR_FORCE", "1")
        .env("NO_COLOR", "1")
        .output()
        .expect("run");
    assert!(plain.status.success());
    assert!(!plain.stdout.contains(&0x1b), "NO_COLOR: no escape code");
    let usage = Command::new(jp_store_bin())
        .arg("no-such-command")
        .env("CLICOLOR_FORCE", "1")
        .env("NO_COLOR", "1")
        .output()
        .expect("run");
    assert_eq!(usage.status.code(), Some(2));
    assert!(
        !usage.stderr.contains(&0x1b),
        "NO_COLOR in usage errors too"
    );
}

/// Runs `jp-store ARGS` with its output read for a few bytes only, then
/// closed, as `| head -c 10` does.
fn with_reader_gone(store: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(jp_store_bin())
        .arg("--store")
        .arg(store)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 10];
    stdout.read_exact(&mut first).expect("some output");
    drop(stdout);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr");
    let status = child.wait().expect("wait");
    (status.code(), stderr)
}

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("s");
    run_jp_store(&store, &["init"], b"").ok("init");
    for _ in 0..3 {
        let id = run_jp_store(&store, &["new"], b"")
            .ok("new")
            .trim()
            .to_string();
        let big = "x".repeat(200_000);
        let line = format!(
            "{{\"type\":\"chat_request\",\"content\":\"{big}\"}}\n{{\"type\":\"tool_call_request\",\"id\":\"c\",\"name\":\"t\"}}\n{{\"type\":\"tool_call_response\",\"id\":\"c\",\"content\":\"{big}\"}}"
        );
        run_jp_store(&store, &["append", &id], line.as_bytes()).ok("append");
    }
    let id = run_jp_store(&store, &["ls", "--json"], b"").json("ls")[0]["id"]
        .as_str()
        .expect("an id")
        .to_string();
    for args in [
        vec!["view", id.as_str()],
        vec!["export", "--format", "ndjson"],
        vec!["print", id.as_str()],
        vec!["stats", "--json"],
    ] {
        let (code, stderr) = with_reader_gone(&store, &args);
        assert_eq!(code, Some(0), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("error"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
fn a_summary_given_to_compact_replaces_the_range_under_any_profile() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("s");
    run_jp_store(&store, &["init"], b"").ok("init");
    let id = run_jp_store(&store, &["new"], b"")
        .ok("new")
        .trim()
        .to_string();
    for i in 0..4 {
        let turn = format!(
            "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"q{i}\"}}\n{{\"type\":\"chat_response\",\"message\":\"a{i}\"}}"
        );
        run_jp_store(&store, &["append", &id], turn.as_bytes()).ok("append");
    }
    // The default profile only strips; the summary is what the user said.
    let summary_file = dir.path().join("summary.txt");
    std::fs::write(&summary_file, "the first turns, summed up").expect("write");
    let out = run_jp_store_in(
        &store,
        Some(dir.path()),
        &[
            "compact",
            &id,
            "--summary-file",
            "summary.txt",
            "--keep-last",
            "1",
            "--json",
        ],
        b"",
    )
    .json("compact --summary-file");
    assert_eq!(out["summary"], "the first turns, summed up", "{out}");
    let view = run_jp_store(&store, &["view", &id], b"").json("view");
    let text = view.to_string();
    assert!(text.contains("the first turns, summed up"), "{text}");
    assert!(!text.contains("\"q0\""), "the range is replaced: {text}");
    assert!(text.contains("a3"), "the kept turn stays: {text}");
}
