//! `jp-store attach` and `jp-store resolve` as real processes: a directory
//! attached as one request (gitignore and hidden files honoured), its text
//! in the export, warnings for skipped files, `--strict` leaving the store
//! unchanged, and `resolve` printing a resource.

use std::path::{Path, PathBuf};

use jpstore_tests::{events_of, run_jp_store_in, tree_snapshot, Run};
use serde_json::{json, Value};

struct Setup {
    _dir: tempfile::TempDir,
    /// The working directory of the commands (canonical).
    work: PathBuf,
    store: PathBuf,
    id: String,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("tempdir");
        let work = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
        let store = work.join("store");
        let mut s = Setup {
            _dir: dir,
            work,
            store,
            id: String::new(),
        };
        s.run(&["init"]).ok("init");
        s.id = s.run(&["new", "--id", "c1"]).ok("new").trim().to_owned();
        s
    }

    fn run(&self, args: &[&str]) -> Run {
        run_jp_store_in(&self.store, Some(&self.work), args, b"")
    }

    fn write(&self, rel: &str, bytes: &[u8]) -> PathBuf {
        let path = self.work.join(rel);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        std::fs::write(&path, bytes).expect("write");
        path
    }

    fn events(&self) -> Vec<Value> {
        events_of(
            &self
                .run(&["export", &self.id, "--format", "json"])
                .json("export"),
        )
    }
}

fn file_uri(path: &Path) -> String {
    let mut uri = String::from("file://");
    for c in path.to_string_lossy().chars() {
        match c {
            ' ' => uri.push_str("%20"),
            c => uri.push(c),
        }
    }
    uri
}

#[test]
fn attach_a_directory_then_export_shows_the_resources() {
    let s = Setup::new();
    s.write("proj/.gitignore", b"target/\n");
    s.write("proj/src/main.rs", b"fn main() {}\n");
    s.write("proj/my notes.md", b"# Notes\n");
    s.write("proj/target/debug.rs", b"ignored");
    s.write("proj/.env", b"SECRET=1");
    s.write("proj/logo.png", b"\x89PNG\r\n\x1a\n\0\0");
    let out = s.run(&["attach", &s.id, "proj", "-m", "review this", "--json"]);
    let summary = out.json("attach");
    assert_eq!(summary["files"], 3);
    assert_eq!(summary["text_files"], 2);
    assert_eq!(summary["new_blobs"], 3);
    assert_eq!(summary["skipped"], json!([]));
    assert!(summary["pack_bytes"].as_u64().expect("pack bytes") > 0);
    assert!(out.stderr.is_empty(), "{}", out.stderr);

    let events = s.events();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["type"], "turn_start");
    let request = &events[1];
    assert_eq!(request["type"], "chat_request");
    assert_eq!(request["content"], "review this");
    let resources = request["resources"].as_array().expect("resources");
    let names: Vec<&str> = resources
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        names,
        vec!["proj/logo.png", "proj/my notes.md", "proj/src/main.rs"]
    );
    assert_eq!(
        resources[1],
        json!({
            "uri": file_uri(&s.work.join("proj/my notes.md")),
            "mimeType": "text/markdown",
            "text": "# Notes\n",
            "name": "proj/my notes.md",
        })
    );
    assert_eq!(resources[2]["text"], "fn main() {}\n");
    assert_eq!(resources[2]["mimeType"], "text/x-rust");
    assert_eq!(resources[0]["mimeType"], "image/png");
    assert_eq!(resources[0]["blob"], "iVBORw0KGgoAAA==");

    // The human summary.
    let out = s.run(&["attach", &s.id, "proj/.env"]);
    let text = out.ok("attach .env");
    assert!(
        text.starts_with("attached 1 file (") && text.contains("at turn 1"),
        "{text}"
    );
}

#[test]
fn skipped_files_warn_and_strict_aborts_with_the_store_unchanged() {
    let s = Setup::new();
    s.write("a.txt", b"a");
    // A missing path, with --skip-missing, is reported and skipped.
    let out = s.run(&["attach", &s.id, "a.txt", "missing.txt", "--skip-missing"]);
    out.expect_code(0, "attach with a missing path");
    assert!(
        out.stderr.contains("warning: skipped missing.txt"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.contains("1 skipped"), "{}", out.stdout);

    let before = tree_snapshot(&s.store);
    let out = s.run(&[
        "attach",
        &s.id,
        "a.txt",
        "missing.txt",
        "--strict",
        "--skip-missing",
    ]);
    out.expect_code(1, "strict attach with a missing path");
    assert!(
        out.stderr.contains("missing.txt") && out.stderr.contains("nothing was appended"),
        "{}",
        out.stderr
    );
    assert_eq!(tree_snapshot(&s.store), before, "store unchanged");

    // Nothing attachable at all.
    let out = s.run(&["attach", &s.id, "missing.txt", "--skip-missing"]);
    out.expect_code(1, "attach of nothing");
    assert!(
        out.stderr.contains("no file could be attached"),
        "{}",
        out.stderr
    );
    // Usage: no path.
    s.run(&["attach", &s.id])
        .expect_code(2, "attach without a path");
    // A missing conversation.
    let out = s.run(&["attach", "nope", "a.txt"]);
    out.expect_code(1, "attach to a missing conversation");
    assert!(
        out.stderr.contains("no conversation with id nope"),
        "{}",
        out.stderr
    );
}

/// A file of mode 000. Root reads any file: as root, attach runs as a user
/// whom permissions bind (`jpstore_test_env::unprivileged_user`), owning
/// the store and the files.
#[test]
fn strict_attach_of_an_unreadable_file_leaves_the_log_unchanged() {
    use std::os::unix::fs::PermissionsExt;
    let test = "strict_attach_of_an_unreadable_file_leaves_the_log_unchanged";
    let Some(user) = jpstore_test_env::unprivileged_user_or_skip(test) else {
        return;
    };
    let s = Setup::new();
    let a = s.write("a.txt", b"a").display().to_string();
    let locked = s.write("locked.txt", b"secret");
    if let Some(ids) = user {
        jpstore_tests::chown_tree(&s.work, ids).expect("chown");
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let locked_arg = locked.display().to_string();
    let run = |args: &[&str]| jpstore_tests::run_jp_store_as(&s.store, user, args, b"");
    let log = jpstore_tests::log_path(&s.store, &s.id);
    let before = std::fs::read(&log).expect("log");
    let out = run(&["attach", &s.id, &a, &locked_arg, "--strict"]);
    out.expect_code(1, "strict attach of an unreadable file");
    assert!(out.stderr.contains("locked.txt"), "{}", out.stderr);
    assert_eq!(std::fs::read(&log).expect("log"), before);
    let out = run(&["attach", &s.id, &a, &locked_arg, "--json"]);
    let summary = out.json("lenient attach");
    assert_eq!(summary["files"], 1);
    assert_eq!(
        summary["skipped"][0]["path"],
        locked.to_string_lossy().as_ref()
    );
    assert!(out.stderr.contains("warning: skipped"), "{}", out.stderr);
}

/// A file found unreadable only when it is read (here a sparse file over
/// the blob size limit, which fails as root too), beside one that reads:
/// the one is attached, the other skipped, and nothing at all is stored for
/// it (it was stored as the empty blob, an orphan, before).
#[test]
fn a_mixed_attach_stores_nothing_for_the_file_it_skips() {
    let s = Setup::new();
    s.write("a.txt", b"attached");
    let big = std::fs::File::create(s.work.join("big.bin")).expect("create");
    big.set_len(3 << 30).expect("a sparse 3 GiB file");
    let blobs = |s: &Setup| -> Vec<String> {
        let mut ids: Vec<String> = s
            .run(&["blob", "ls", "--json"])
            .json("blob ls")
            .as_array()
            .expect("a list")
            .iter()
            .map(|b| b.as_str().expect("an id").to_owned())
            .collect();
        ids.sort();
        ids
    };
    let before = blobs(&s);
    let out = s.run(&["attach", &s.id, "a.txt", "big.bin", "--json"]);
    let summary = out.json("mixed attach");
    assert_eq!(summary["files"], 1, "{summary}");
    assert_eq!(summary["skipped"].as_array().map(Vec::len), Some(1));
    assert!(out.stderr.contains("warning: skipped"), "{}", out.stderr);
    let mut expected = before;
    expected.push(jpstore_blobstore::BlobId::of(b"attached").to_hex());
    expected.sort();
    assert_eq!(
        blobs(&s),
        expected,
        "only the attached file's blob is new (the empty blob is {})",
        jpstore_blobstore::BlobId::of(b"").to_hex()
    );
}

#[test]
fn resolve_prints_the_current_content() {
    let s = Setup::new();
    s.write("src/lib.rs", b"pub fn a() {}\n");
    let uri = file_uri(&s.work.join("src/lib.rs"));
    let loose = format!("file://{}/src/../src/./lib.rs", s.work.to_string_lossy());
    let v = s.run(&["resolve", &loose]).json("resolve");
    assert_eq!(
        v,
        json!({"uri": uri, "mimeType": "text/x-rust", "text": "pub fn a() {}\n", "name": "src/lib.rs"})
    );
    // A URI of another scheme is bad usage (2); a file that cannot be
    // read, a failure (1).
    for (bad, says, code) in [
        ("https://example.com/x", "only file://", 2),
        (&*file_uri(&s.work.join("missing.rs")), "missing.rs", 1),
        (&*file_uri(&s.work.join("src")), "not a regular file", 1),
    ] {
        let out = s.run(&["resolve", bad]);
        out.expect_code(code, bad);
        assert!(out.stderr.contains(says), "{bad}: {}", out.stderr);
    }
}

#[test]
fn links_leaving_the_attached_directory_are_skipped_unless_followed() {
    use std::os::unix::fs::symlink;
    let s = Setup::new();
    let outside = s.write("outside/secret.txt", b"SECRET CONTENT");
    s.write("proj/a.txt", b"a");
    s.write("proj/sub/b.txt", b"b");
    symlink(&outside, s.work.join("proj/absolute")).expect("symlink");
    symlink("../outside/secret.txt", s.work.join("proj/relative")).expect("symlink");
    symlink("sub/b.txt", s.work.join("proj/inner")).expect("symlink");
    symlink(s.work.join("outside"), s.work.join("proj/dirlink")).expect("symlink");
    let has_secret = |events: &[Value]| {
        serde_json::to_string(events)
            .expect("json")
            .contains("SECRET")
    };

    let before = tree_snapshot(&s.store);
    let out = s.run(&["attach", &s.id, "proj", "--strict"]);
    out.expect_code(1, "strict attach with links leaving the directory");
    assert!(
        out.stderr.contains("absolute") && out.stderr.contains("outside"),
        "{}",
        out.stderr
    );
    assert_eq!(tree_snapshot(&s.store), before, "store unchanged");

    let out = s.run(&["attach", &s.id, "proj", "--json"]);
    let summary = out.json("attach of a tree with links");
    // The link inside the tree leads to sub/b.txt, attached once.
    assert_eq!(summary["files"], 2, "{summary}");
    let skipped: Vec<String> = summary["skipped"]
        .as_array()
        .expect("skipped")
        .iter()
        .map(|s| format!("{} {}", s["path"], s["error"]))
        .collect();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    for (link, line) in ["proj/absolute", "proj/relative"].iter().zip(&skipped) {
        assert!(line.contains(link), "{skipped:?}");
        assert!(
            line.contains("outside the attached directory"),
            "{skipped:?}"
        );
    }
    assert!(out.stderr.contains("warning: skipped"), "{}", out.stderr);
    assert!(
        !has_secret(&s.events()),
        "a link leaked a file outside the tree"
    );

    // Opting in attaches the targets.
    let out = s.run(&["attach", &s.id, "proj", "--follow-links", "--json"]);
    let summary = out.json("attach --follow-links");
    assert_eq!(summary["files"], 3, "{summary}");
    assert_eq!(summary["skipped"], json!([]));
    assert!(has_secret(&s.events()));

    // A path named on the command line that is itself a link is the user's
    // choice: followed, for a file and for a directory (walked as the root).
    let s = Setup::new();
    let outside = s.write("outside/secret.txt", b"SECRET CONTENT");
    s.write("proj/a.txt", b"a");
    symlink(&outside, s.work.join("named")).expect("symlink");
    symlink(s.work.join("proj"), s.work.join("projlink")).expect("symlink");
    let summary = s
        .run(&["attach", &s.id, "named", "projlink", "--json"])
        .json("attach of named links");
    assert_eq!(summary["files"], 2, "{summary}");
    assert_eq!(summary["skipped"], json!([]));
    assert!(has_secret(&s.events()));
}

/// Every file of an attach skipped, whether found so by the walk (a missing
/// path) or only when read (a sparse file over the blob size limit): each
/// reason is printed once, with and without `--strict`, and the store is
/// byte-identical (no pack, no loose object, no log change).
#[test]
fn an_attach_where_every_file_is_skipped_names_each_reason_once_and_writes_nothing() {
    let s = Setup::new();
    std::fs::create_dir_all(s.work.join("big")).expect("mkdir");
    for name in ["big/one.bin", "big/two.bin"] {
        let file = std::fs::File::create(s.work.join(name)).expect("create");
        file.set_len(3 << 30).expect("a sparse 3 GiB file");
    }
    let before = tree_snapshot(&s.store);
    for strict in [false, true] {
        for paths in [&["big"][..], &["missing.txt", "--skip-missing"][..]] {
            let mut args = vec!["attach", s.id.as_str()];
            args.extend_from_slice(paths);
            if strict {
                args.push("--strict");
            }
            let out = s.run(&args);
            out.expect_code(1, &format!("{args:?}"));
            let reasons: &[&str] = if paths == ["big"] {
                if strict {
                    // The first failure aborts the batch; which file that
                    // is depends on the reading threads.
                    &["more than the limit"]
                } else {
                    &[
                        "one.bin: 3221225472 bytes, more than the limit",
                        "two.bin: 3221225472 bytes, more than the limit",
                    ]
                }
            } else {
                &["missing.txt: No such file or directory"]
            };
            for reason in reasons {
                assert_eq!(
                    out.stderr.matches(reason).count(),
                    1,
                    "{args:?}: {reason:?} once\n{}",
                    out.stderr
                );
            }
            if paths == ["big"] && strict {
                assert_eq!(
                    out.stderr.matches("more than the limit").count(),
                    1,
                    "{args:?}\n{}",
                    out.stderr
                );
            }
            assert!(
                out.stderr.contains("nothing was appended"),
                "{}",
                out.stderr
            );
            assert_eq!(
                tree_snapshot(&s.store),
                before,
                "{args:?}: the store is byte-identical"
            );
        }
    }
}

/// A path named that does not exist (a typo) is an error, as for `cp`:
/// exit 1, naming it, nothing stored or appended, however many others
/// exist (it was a warning, exit 0, the others attached).
/// `--skip-missing` skips it with a warning and attaches the others.
#[test]
fn a_path_named_that_does_not_exist_fails_the_attach_unless_skip_missing() {
    let s = Setup::new();
    s.write("proj/Cargo.toml", b"[package]\nname = \"p\"\n");
    s.write("proj/src/main.rs", b"fn main() {}\n");
    let before = tree_snapshot(&s.store);
    for args in [
        &["proj/Cargo.tmol"][..],
        &["proj/src", "proj/Cargo.tmol"][..],
        &["proj/src", "proj/Cargo.tmol", "--strict"][..],
    ] {
        let mut all = vec!["attach", s.id.as_str()];
        all.extend_from_slice(args);
        let out = s.run(&all);
        out.expect_code(1, &format!("{all:?}"));
        assert!(
            out.stderr
                .contains("no such file or directory: proj/Cargo.tmol; nothing was appended")
                && out.stderr.contains("--skip-missing"),
            "{all:?}: {}",
            out.stderr
        );
        assert_eq!(tree_snapshot(&s.store), before, "{all:?}: nothing stored");
    }
    let out = s.run(&[
        "attach",
        &s.id,
        "proj/src",
        "proj/Cargo.tmol",
        "--skip-missing",
        "--json",
    ]);
    assert!(
        out.stderr.contains("warning: skipped proj/Cargo.tmol"),
        "{}",
        out.stderr
    );
    let summary = out.json("attach --skip-missing");
    assert_eq!(summary["files"], 1, "{summary}");
}
