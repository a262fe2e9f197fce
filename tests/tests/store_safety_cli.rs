//! The `jp-store` binary in a hostile store: symbolic links planted inside
//! it (as an object file, as an intermediate directory).
//!
//! Every refusal exits 1 with a message naming the path; nothing outside
//! the store is read or written, and the store is left as it was.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use jpstore_tests::{log_path, run_jp_store, tree_snapshot, Run};
use sha2::{Digest, Sha256};

const CONV: &str = "c";
const SECRET: &str = "content stored as a loose object";

/// A store with conversation `c` holding one tool response (a loose
/// object), and a directory outside the store.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).expect("mkdir outside");
        let f = Fixture {
            _dir: dir,
            root,
            outside,
        };
        f.run(&["init"], b"").ok("init");
        f.run(&["new", "--id", CONV], b"").ok("new");
        f.run(&["append", CONV], response("r1", SECRET).as_bytes())
            .ok("append");
        f
    }

    fn run(&self, args: &[&str], stdin: &[u8]) -> Run {
        run_jp_store(&self.root, args, stdin)
    }

    /// The loose object of `content`.
    fn object(&self, content: &str) -> PathBuf {
        let id = blob_id(content);
        self.root
            .join("blobs/objects")
            .join(&id[..2])
            .join(&id[2..])
    }
}

fn blob_id(content: &str) -> String {
    hex::encode(Sha256::digest(content.as_bytes()))
}

/// A tool call and its response with `content`, as `append` input.
fn response(call: &str, content: &str) -> String {
    format!(
        "{{\"type\":\"turn_start\"}}\n\
         {{\"type\":\"tool_call_request\",\"id\":\"{call}\",\"name\":\"fs_read_file\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"{call}\",\"content\":\"{content}\"}}\n"
    )
}

/// Every name below `dir` with its content and modification time.
fn state(dir: &Path) -> BTreeMap<PathBuf, (Option<Vec<u8>>, SystemTime)> {
    tree_snapshot(dir)
        .into_iter()
        .map(|(rel, content)| {
            let modified = fs::symlink_metadata(dir.join(&rel))
                .and_then(|m| m.modified())
                .unwrap_or_else(|e| panic!("stat {}: {e}", rel.display()));
            (rel, (content, modified))
        })
        .collect()
}

/// Exit status 1 and a message naming `path`.
fn refused(run: &Run, what: &str, path: &Path) {
    run.expect_code(1, what);
    let text = format!("{}{}", run.stdout, run.stderr);
    assert!(
        text.contains(&path.display().to_string()),
        "{what}: the message does not name {}:\n{text}",
        path.display()
    );
}

/// Moves `name` (inside the store) to `to` (outside) and leaves a symbolic
/// link to it in its place.
fn replace_by_link(name: &Path, to: &Path) {
    fs::rename(name, to).expect("move out of the store");
    symlink(to, name).expect("symlink");
}

/// The outside and the conversation's log, to check that neither changed.
struct Untouched {
    outside: BTreeMap<PathBuf, (Option<Vec<u8>>, SystemTime)>,
    log: Vec<u8>,
}

impl Untouched {
    fn now(f: &Fixture) -> Untouched {
        Untouched {
            outside: state(&f.outside),
            log: fs::read(log_path(&f.root, CONV)).expect("log"),
        }
    }

    fn check(&self, f: &Fixture) {
        assert_eq!(state(&f.outside), self.outside, "the outside changed");
        assert_eq!(
            fs::read(log_path(&f.root, CONV)).expect("log"),
            self.log,
            "the log changed"
        );
    }
}

/// Reading the blob of [`SECRET`] (directly, by export, by fsck), and
/// appending it again, all fail naming `link`; `print` (which reads only
/// the log) and gc work.
fn secret_behind_link_is_refused(f: &Fixture, link: &Path) {
    let id = blob_id(SECRET);
    for args in [
        vec!["blob", "cat", &id],
        vec!["export", CONV],
        vec!["fsck", "--read-data"],
    ] {
        refused(&f.run(&args, b""), &args.join(" "), link);
    }
    // The same content again finds the link, not an object: refused.
    refused(
        &f.run(&["append", CONV], response("r2", SECRET).as_bytes()),
        "append of the linked content",
        link,
    );
    f.run(&["print", CONV], b"").ok("print");
    f.run(&["gc", "--grace", "0s"], b"").ok("gc");
}

#[test]
fn an_object_file_linked_outside_is_neither_read_nor_written() {
    let f = Fixture::new();
    let object = f.object(SECRET);
    // The target holds the real object: following the link would "work".
    replace_by_link(&object, &f.outside.join("object"));
    let untouched = Untouched::now(&f);
    secret_behind_link_is_refused(&f, &object);
    untouched.check(&f);
    assert!(fs::symlink_metadata(&object)
        .expect("the link")
        .file_type()
        .is_symlink());
}

#[test]
fn an_object_directory_linked_outside_is_neither_read_nor_written() {
    let f = Fixture::new();
    let object = f.object(SECRET);
    let fanout = object.parent().expect("fanout directory").to_path_buf();
    replace_by_link(&fanout, &f.outside.join("fanout"));
    let untouched = Untouched::now(&f);
    secret_behind_link_is_refused(&f, &fanout);
    // New content whose object would be written into the linked directory.
    let prefix = &blob_id(SECRET)[..2];
    let new = (0u32..)
        .map(|i| format!("new content {i}"))
        .find(|c| blob_id(c).starts_with(prefix))
        .expect("content with the same fanout");
    refused(
        &f.run(&["append", CONV], response("r3", &new).as_bytes()),
        "append of new content into the linked directory",
        &fanout,
    );
    let file = f.root.with_file_name("new.txt");
    fs::write(&file, &new).expect("write");
    refused(
        &f.run(&["blob", "put", &file.display().to_string()], b""),
        "blob put into the linked directory",
        &fanout,
    );
    untouched.check(&f);
}

#[test]
fn a_conversation_directory_linked_outside_is_neither_read_nor_written() {
    let f = Fixture::new();
    let dir = f.root.join("conversations").join(CONV);
    replace_by_link(&dir, &f.outside.join(CONV));
    let outside = state(&f.outside);

    for args in [
        vec!["print", CONV],
        vec!["export", CONV],
        vec!["ls"],
        vec!["fsck"],
        vec!["compact", CONV],
        vec!["fork", CONV],
        vec!["new", "--id", CONV],
        // gc cannot mark what the linked conversation references: it
        // refuses rather than sweeping its blobs.
        vec!["gc", "--grace", "0s"],
    ] {
        refused(&f.run(&args, b""), &args.join(" "), &dir);
    }
    refused(
        &f.run(
            &["append", CONV],
            br#"{"type": "chat_response", "message": "through the link"}"#,
        ),
        "append",
        &dir,
    );
    assert_eq!(state(&f.outside), outside, "the outside changed");
    assert!(f.object(SECRET).is_file(), "gc swept a blob");
}
