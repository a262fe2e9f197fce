use std::os::unix::fs::PermissionsExt;

use tempfile::TempDir;

use super::*;
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::{NewConversation, StoreOptions};

fn write(dir: &Path, rel: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(rel);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("create parent");
    }
    std::fs::write(&path, bytes).expect("write file");
    path
}

fn names(files: &[FileToAttach]) -> Vec<&str> {
    files.iter().map(|f| f.name.as_str()).collect()
}

fn collect_ok(paths: &[&str], cwd: &Path) -> Vec<FileToAttach> {
    let paths: Vec<PathBuf> = paths.iter().map(PathBuf::from).collect();
    let (files, errors) = collect(&paths, cwd, Links::StayInside);
    assert!(errors.is_empty(), "unexpected errors: {errors:?}");
    files
}

/// A temp dir with its canonical path (the temp root may be a link).
fn tempdir() -> (TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("tempdir");
    let canonical = std::fs::canonicalize(dir.path()).expect("canonicalize tempdir");
    (dir, canonical)
}

fn store_with_conversation(root: &Path) -> (Store, ConversationId) {
    let store = Store::init_dir(&root.join("store"), StoreOptions::default()).expect("init store");
    let id = store
        .create(NewConversation::default())
        .expect("create conversation")
        .id()
        .clone();
    (store, id)
}

#[test]
fn uris_are_percent_encoded_and_decode_to_the_canonical_path() {
    let (_t, dir) = tempdir();
    for name in ["a b.txt", "100%.txt", "ünï €.rs", "q?#.md"] {
        write(&dir, name, b"x");
    }
    let files = collect_ok(&["a b.txt", "100%.txt", "ünï €.rs", "q?#.md"], &dir);
    let uris: Vec<&str> = files.iter().map(|f| f.uri.as_str()).collect();
    let base = Url::from_directory_path(&dir).expect("dir url").to_string();
    assert_eq!(
        uris,
        vec![
            format!("{base}100%25.txt"),
            format!("{base}a%20b.txt"),
            format!("{base}q%3F%23.md"),
            format!("{base}%C3%BCn%C3%AF%20%E2%82%AC.rs"),
        ]
    );
    for f in &files {
        assert!(f.uri.starts_with("file:///"), "{}", f.uri);
        let back = Url::parse(&f.uri)
            .expect("parse uri")
            .to_file_path()
            .expect("file path");
        assert_eq!(back, f.path);
        assert_eq!(back, dir.join(&f.name));
    }
}

#[test]
fn dot_segments_are_resolved_and_names_are_relative() {
    let (_t, dir) = tempdir();
    write(&dir, "a.txt", b"a");
    write(&dir, "sub/b.txt", b"b");
    let files = collect_ok(&["./sub/../a.txt", "sub/./b.txt"], &dir);
    assert_eq!(names(&files), vec!["a.txt", "sub/b.txt"]);
    let a = Url::from_file_path(dir.join("a.txt"))
        .expect("url")
        .to_string();
    assert_eq!(files[0].uri, a);
    assert!(!files[0].uri.contains(".."));
    // From a sub directory, a file above is named with its absolute path.
    let files = collect_ok(&["../a.txt"], &dir.join("sub"));
    assert_eq!(files[0].uri, a);
    assert_eq!(files[0].name, dir.join("a.txt").to_string_lossy());
    // The same file named twice is attached once.
    let files = collect_ok(&["a.txt", "./a.txt", "sub/../a.txt"], &dir);
    assert_eq!(files.len(), 1);
}

#[test]
fn walked_links_leaving_the_directory_are_refused_unless_followed() {
    let (_t, dir) = tempdir();
    write(&dir, "proj/a.txt", b"a");
    // A sibling whose name begins with the walked directory's name: outside.
    write(&dir, "proj2/secret.txt", b"secret");
    std::os::unix::fs::symlink("../proj2/secret.txt", dir.join("proj/sibling")).expect("link");
    // A chain that leaves the directory and comes back: inside.
    std::os::unix::fs::symlink(dir.join("proj/a.txt"), dir.join("proj2/back")).expect("link");
    std::os::unix::fs::symlink("../proj2/back", dir.join("proj/hop")).expect("link");
    let (files, errors) = collect(&[PathBuf::from("proj")], &dir, Links::StayInside);
    assert_eq!(names(&files), vec!["proj/a.txt"]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, dir.join("proj/sibling"));
    assert_eq!(errors[0].1.kind(), io::ErrorKind::PermissionDenied);
    assert!(
        errors[0]
            .1
            .to_string()
            .contains("outside the attached directory"),
        "{}",
        errors[0].1
    );
    let (files, errors) = collect(&[PathBuf::from("proj")], &dir, Links::Follow);
    assert!(errors.is_empty(), "{errors:?}");
    let paths: Vec<&Path> = files.iter().map(|f| f.path.as_path()).collect();
    assert_eq!(
        paths,
        vec![dir.join("proj/a.txt"), dir.join("proj2/secret.txt")]
    );
}

#[test]
fn symlinks_resolve_to_their_target() {
    let (_t, dir) = tempdir();
    write(&dir, "real/target.rs", b"fn main() {}\n");
    std::os::unix::fs::symlink(dir.join("real/target.rs"), dir.join("link.rs")).expect("link");
    std::os::unix::fs::symlink(dir.join("real"), dir.join("linkdir")).expect("dir link");
    let target = Url::from_file_path(dir.join("real/target.rs"))
        .expect("url")
        .to_string();
    let files = collect_ok(&["link.rs"], &dir);
    assert_eq!(files[0].uri, target);
    assert_eq!(files[0].name, "link.rs");
    assert_eq!(files[0].path, dir.join("real/target.rs"));
    // A path through a linked directory, with `..` after it.
    let files = collect_ok(&["linkdir/../real/target.rs"], &dir);
    assert_eq!(files[0].uri, target);
    // Walking: the link to a file is attached once (same URI as the target);
    // the link to a directory is not followed.
    let files = collect_ok(&["."], &dir);
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(files[0].uri, target);
    // Walking a directory named through a link: names keep the link, URIs
    // and paths are the target's.
    write(&dir, "real/deeper/more.rs", b"fn more() {}\n");
    let files = collect_ok(&["linkdir", "./linkdir/../linkdir/deeper"], &dir);
    assert_eq!(
        names(&files),
        vec!["linkdir/deeper/more.rs", "linkdir/target.rs"]
    );
    assert_eq!(files[1].uri, target);
    assert_eq!(files[0].path, dir.join("real/deeper/more.rs"));
}

#[test]
fn gitignore_and_hidden_files_are_honoured_in_walks_only() {
    let (_t, dir) = tempdir();
    write(&dir, "proj/.gitignore", b"*.log\nbuild/\n");
    write(&dir, "proj/a.rs", b"a");
    write(&dir, "proj/b.log", b"b");
    write(&dir, "proj/build/x.rs", b"x");
    write(&dir, "proj/.hidden", b"h");
    write(&dir, "proj/.hid/y.rs", b"y");
    write(&dir, "proj/sub/c.md", b"c");
    write(&dir, "proj/sub/.gitignore", b"d.txt\n");
    write(&dir, "proj/sub/d.txt", b"d");
    let files = collect_ok(&["proj"], &dir);
    assert_eq!(names(&files), vec!["proj/a.rs", "proj/sub/c.md"]);
    // Named explicitly, an ignored or hidden file is taken.
    let files = collect_ok(&["proj/b.log", "proj/.hidden", "proj"], &dir);
    assert_eq!(
        names(&files),
        vec!["proj/.hidden", "proj/a.rs", "proj/b.log", "proj/sub/c.md"]
    );
    // A hidden directory named explicitly is walked.
    let files = collect_ok(&["proj/.hid"], &dir);
    assert_eq!(names(&files), vec!["proj/.hid/y.rs"]);
}

#[test]
fn missing_paths_and_special_files_are_reported() {
    let (_t, dir) = tempdir();
    write(&dir, "a.txt", b"a");
    std::os::unix::fs::symlink(dir.join("nowhere"), dir.join("dangling")).expect("link");
    let (files, errors) = collect(
        &[PathBuf::from("a.txt"), PathBuf::from("missing")],
        &dir,
        Links::StayInside,
    );
    assert_eq!(names(&files), vec!["a.txt"]);
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].0, PathBuf::from("missing"));
    assert_eq!(errors[0].1.kind(), io::ErrorKind::NotFound);
    let (files, errors) = collect(std::slice::from_ref(&dir), &dir, Links::StayInside);
    assert_eq!(names(&files), vec!["a.txt"]);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(errors[0].0, dir.join("dangling"));
}

#[test]
fn text_and_binary_detection() {
    assert!(is_text(b""));
    assert!(is_text("plain ünicode\n".as_bytes()));
    assert!(!is_text(b"a\0b"));
    assert!(!is_text(b"\xff\xfe"));
    // A NUL beyond the first 8 KiB of valid UTF-8 is text.
    let mut late_nul = vec![b'a'; SNIFF_LEN];
    late_nul.push(0);
    assert!(is_text(&late_nul));
    // Invalid UTF-8 anywhere makes it binary.
    let mut late_bad = vec![b'a'; SNIFF_LEN * 2];
    late_bad.push(0xc3);
    assert!(!is_text(&late_bad));
    let p = Path::new;
    assert_eq!(mime_type(p("a.rs"), true), "text/x-rust");
    assert_eq!(mime_type(p("a.md"), true), "text/markdown");
    assert_eq!(mime_type(p("Makefile"), true), "text/plain");
    assert_eq!(mime_type(p("a.unknownext"), true), "text/plain");
    assert_eq!(mime_type(p("a.png"), false), "image/png");
    assert_eq!(mime_type(p("a.txt"), false), OCTET_STREAM);
    assert_eq!(mime_type(p("a.bin"), false), OCTET_STREAM);
    assert_eq!(mime_type(p("blob"), false), OCTET_STREAM);
}

#[test]
fn attach_stores_one_batch_and_appends_one_request() {
    let (_t, dir) = tempdir();
    let (store, id) = store_with_conversation(&dir);
    write(&dir, "tree/src/main.rs", b"fn main() {}\n");
    write(&dir, "tree/src/lib.rs", b"pub fn f() {}\n");
    write(&dir, "tree/copy.rs", b"fn main() {}\n");
    write(&dir, "tree/img.png", b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR");
    write(&dir, "tree/empty.txt", b"");
    let files = collect_ok(&["tree"], &dir);
    assert_eq!(files.len(), 5);
    let packs_before = store.blobs().packs().expect("packs").len();
    let mut last = None;
    let out = attach(&store, &id, &files, Some("look".into()), false, &mut |p| {
        last = Some(p)
    })
    .expect("attach");
    let last = last.expect("progress was reported");
    assert_eq!((last.items_done, last.items_total), (5, 5));
    assert_eq!(last.bytes_done, 13 + 14 + 13 + 16);
    assert_eq!(out.files, 5);
    assert_eq!(out.text_files, 4);
    assert!(out.skipped.is_empty());
    assert_eq!(out.new_blobs, 4, "the copy is stored once");
    assert_eq!(out.turn, 0);
    assert!(out.pack.is_some());
    assert_eq!(
        store.blobs().packs().expect("packs").len(),
        packs_before + 1
    );

    let conversation = store.read(&id).expect("read");
    let events = conversation_json(&store, &conversation, ContentMode::Inline).expect("json")
        ["events"]
        .as_array()
        .expect("events")
        .clone();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0]["type"], "turn_start");
    let request = &events[1];
    assert_eq!(request["type"], "chat_request");
    assert_eq!(request["content"], "look");
    let resources = request["resources"].as_array().expect("resources");
    let by_name = |n: &str| {
        resources
            .iter()
            .find(|r| r["name"] == n)
            .unwrap_or_else(|| panic!("no resource {n} in {resources:?}"))
    };
    let main = by_name("tree/src/main.rs");
    assert_eq!(main["text"], "fn main() {}\n");
    assert_eq!(main["mimeType"], "text/x-rust");
    assert_eq!(
        main["uri"],
        Url::from_file_path(dir.join("tree/src/main.rs"))
            .expect("url")
            .to_string()
    );
    let png = by_name("tree/img.png");
    assert_eq!(png["mimeType"], "image/png");
    assert!(png["blob"].is_string());
    assert!(png.get("text").is_none());
    assert_eq!(by_name("tree/empty.txt")["text"], "");
    let order: Vec<&str> = resources
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(
        order,
        vec![
            "tree/copy.rs",
            "tree/empty.txt",
            "tree/img.png",
            "tree/src/lib.rs",
            "tree/src/main.rs"
        ]
    );

    // A second attach starts a new turn; content already stored writes no
    // pack.
    let out = attach(&store, &id, &files[..1], None, false, &mut |_| {}).expect("attach again");
    assert_eq!(out.turn, 1);
    assert_eq!(out.new_blobs, 0);
    assert_eq!(out.pack, None);
}

#[test]
fn a_file_gone_before_it_is_read_is_skipped_or_aborts_when_strict() {
    let (_t, dir) = tempdir();
    let (store, id) = store_with_conversation(&dir);
    write(&dir, "a.txt", b"a");
    let gone = write(&dir, "gone.txt", b"gone");
    let files = collect_ok(&["a.txt", "gone.txt"], &dir);
    std::fs::remove_file(&gone).expect("remove");
    let log = dir.join("store").join(id.log_path());
    let before = std::fs::read(&log).expect("log");

    let err = attach(&store, &id, &files, None, true, &mut |_| {})
        .expect_err("strict attach of a vanished file");
    match err {
        AttachError::Unreadable { path, reason } => {
            assert_eq!(path, gone);
            assert_eq!(reason.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("unexpected error {other}"),
    }
    assert_eq!(std::fs::read(&log).expect("log"), before, "log unchanged");

    let out = attach(&store, &id, &files, None, false, &mut |_| {}).expect("lenient attach");
    assert_eq!(out.files, 1);
    assert_eq!(out.skipped.len(), 1);
    assert_eq!(out.skipped[0].0, gone);
    let conversation = store.read(&id).expect("read");
    let last = conversation.entries.last().expect("an entry");
    let Some(EventKind::ChatRequest(r)) = last.event().map(|e| &e.kind) else {
        panic!("not a request: {last:?}");
    };
    assert_eq!(r.resources.len(), 1);
    assert_eq!(r.resources[0].name.as_deref(), Some("a.txt"));

    // Nothing readable: nothing appended.
    let before = std::fs::read(&log).expect("log");
    let err =
        attach(&store, &id, &files[1..], None, false, &mut |_| {}).expect_err("nothing to attach");
    match &err {
        AttachError::NothingToAttach { skipped } => {
            assert_eq!(skipped.len(), 1, "{err}");
            assert_eq!(skipped[0].0, gone);
            assert_eq!(skipped[0].1.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("unexpected error {other}"),
    }
    assert_eq!(std::fs::read(&log).expect("log"), before);
}

/// A file of mode 000. Root reads any file: as root, the test runs again
/// in a process of a user whom permissions bind
/// (`jpstore_test_env::unprivileged_user`), and passes if it passes there.
#[test]
fn an_unreadable_file_is_skipped_or_aborts_when_strict() {
    let test = "attach::tests::an_unreadable_file_is_skipped_or_aborts_when_strict";
    match jpstore_test_env::unprivileged_user_or_skip(test) {
        None => return,
        Some(Some(ids)) => {
            let out = jpstore_test_env::rerun_as(test, ids).expect("the test binary runs");
            let said = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && said.contains("1 passed"),
                "as uid {}: {said}{}",
                ids.0,
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        Some(None) => {}
    }
    let (_t, dir) = tempdir();
    let (store, id) = store_with_conversation(&dir);
    write(&dir, "a.txt", b"a");
    let locked = write(&dir, "locked.txt", b"secret");
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    assert!(
        std::fs::read(&locked).is_err(),
        "a file of mode 000 read by a user that is not root"
    );
    let files = collect_ok(&["a.txt", "locked.txt"], &dir);
    let log = dir.join("store").join(id.log_path());
    let before = std::fs::read(&log).expect("log");
    let err = attach(&store, &id, &files, None, true, &mut |_| {}).expect_err("strict");
    assert!(
        matches!(&err, AttachError::Unreadable { path, .. } if *path == locked),
        "{err}"
    );
    assert_eq!(std::fs::read(&log).expect("log"), before);
    let out = attach(&store, &id, &files, None, false, &mut |_| {}).expect("lenient");
    assert_eq!(out.files, 1);
    assert_eq!(out.skipped[0].1.kind(), io::ErrorKind::PermissionDenied);
}

#[test]
fn attach_to_a_missing_conversation_reads_nothing() {
    let (_t, dir) = tempdir();
    let (store, _) = store_with_conversation(&dir);
    write(&dir, "a.txt", b"a");
    let files = collect_ok(&["a.txt"], &dir);
    let missing = ConversationId::parse("nope").expect("id");
    let mut calls = 0;
    let err =
        attach(&store, &missing, &files, None, false, &mut |_| calls += 1).expect_err("missing");
    assert!(
        matches!(err, AttachError::Store(Error::NotFound { .. })),
        "{err}"
    );
    assert_eq!(calls, 0);
}

#[test]
fn resolve_gives_the_current_content_as_a_resource() {
    let (_t, dir) = tempdir();
    write(&dir, "src/a b.rs", b"fn a() {}\n");
    write(&dir, "img.png", b"\x89PNG\0");
    let uri = Url::from_file_path(dir.join("src/a b.rs"))
        .expect("url")
        .to_string();
    let v = resolve(&uri, &dir).expect("resolve");
    assert_eq!(
        v,
        serde_json::json!({
            "uri": uri,
            "mimeType": "text/x-rust",
            "text": "fn a() {}\n",
            "name": "src/a b.rs",
        })
    );
    // The current content, and a non-canonical URI is canonicalised.
    write(&dir, "src/a b.rs", b"fn b() {}\n");
    let loose = format!(
        "file://{}/src/./../src/a%20b.rs",
        dir.to_string_lossy().replace(' ', "%20")
    );
    let v = resolve(&loose, &dir).expect("resolve");
    assert_eq!(v["uri"], uri.as_str());
    assert_eq!(v["text"], "fn b() {}\n");
    let png = Url::from_file_path(dir.join("img.png")).expect("url");
    let v = resolve(png.as_str(), &dir.join("src")).expect("resolve png");
    assert_eq!(v["blob"], "iVBORwA=");
    assert_eq!(v["mimeType"], "image/png");
    assert_eq!(v["name"], dir.join("img.png").to_string_lossy().as_ref());

    let err = |u: &str| resolve(u, &dir).expect_err(u).to_string();
    assert!(err("https://example.com/a").contains("only file://"));
    assert!(err("not a uri").contains("not a URI"));
    assert!(err(&format!("{uri}#L1-2")).contains("fragment"));
    let missing = Url::from_file_path(dir.join("missing.rs")).expect("url");
    assert!(err(missing.as_str()).contains("No such file"));
    let d = Url::from_file_path(dir.join("src")).expect("url");
    assert!(err(d.as_str()).contains("not a regular file"));
}
