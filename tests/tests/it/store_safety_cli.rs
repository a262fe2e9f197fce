//! The `jp-store` binary in a hostile or unusual store: symbolic links
//! planted inside it (as an object file, as an intermediate directory),
//! a store directory that is not writable, a record header claiming 4 GiB,
//! and the permission bits of everything the store creates.
//!
//! Every refusal exits 1 with a message naming the path; nothing outside
//! the store is read or written, and the store is left as it was.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use jpstore_tests::{
    assert_owner_only, jp_store_bin, log_path, run_command, run_jp_store, run_jp_store_as,
    tree_snapshot, Run,
};
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

/// Sets every directory below `root` (and `root`) to `dir_mode` and every
/// file to `file_mode`.
fn chmod_tree(root: &Path, dir_mode: u32, file_mode: u32) {
    let set = |p: &Path, mode| {
        fs::set_permissions(p, fs::Permissions::from_mode(mode))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
    };
    set(root, dir_mode);
    for (rel, content) in tree_snapshot(root) {
        let mode = if content.is_some() {
            file_mode
        } else {
            dir_mode
        };
        set(&root.join(rel), mode);
    }
}

/// Makes a store writable again when dropped (even after a failed
/// assertion), so that the temp dir can be removed.
struct Writable<'a>(&'a Path);

impl Drop for Writable<'_> {
    fn drop(&mut self) {
        chmod_tree(self.0, 0o700, 0o600);
    }
}

/// A JP conversation directory with one turn, to import: two tool
/// responses (JP's base64) become blobs.
fn jp_conversation(dir: &Path) {
    fs::create_dir_all(dir).expect("mkdir");
    fs::write(
        dir.join("events.json"),
        r#"[{"type": "turn_start", "timestamp": "2026-05-29 10:00:00.0"},
            {"type": "chat_request", "timestamp": "2026-05-29 10:00:01.0", "content": "imported"},
            {"type": "tool_call_request", "timestamp": "2026-05-29 10:00:02.0", "id": "i1",
             "name": "fs_read_file", "arguments": {}},
            {"type": "tool_call_response", "timestamp": "2026-05-29 10:00:03.0", "id": "i1",
             "content": "Zmlyc3QgaW1wb3J0ZWQgZmlsZQo=", "is_error": false},
            {"type": "tool_call_request", "timestamp": "2026-05-29 10:00:04.0", "id": "i2",
             "name": "fs_read_file", "arguments": {}},
            {"type": "tool_call_response", "timestamp": "2026-05-29 10:00:05.0", "id": "i2",
             "content": "c2Vjb25kIGltcG9ydGVkIGZpbGUK", "is_error": false}]"#,
    )
    .expect("write");
    fs::write(dir.join("metadata.json"), r#"{"title": "T"}"#).expect("write");
}

#[test]
fn a_store_that_is_not_writable_refuses_writes_and_still_reads() {
    let f = Fixture::new();
    let work = f.outside.parent().expect("temp dir").to_path_buf();
    let jp = f.outside.join("17738399468-imported");
    jp_conversation(&jp);
    let export = f.run(&["export", CONV], b"").ok("export").to_owned();
    let before = tree_snapshot(&f.root);

    chmod_tree(&f.root, 0o555, 0o444);
    let _writable = Writable(&f.root);
    // Permissions do not bind root: then the commands run as an
    // unprivileged user owning the store (so that it can read it).
    let test = "a_store_that_is_not_writable_refuses_writes_and_still_reads";
    let Some(user) = jpstore_test_env::unprivileged_user_or_skip(test) else {
        return;
    };
    if let Some(ids) = user {
        let usable = jpstore_tests::chown_tree(&work, ids).is_ok()
            && fs::set_permissions(&work, fs::Permissions::from_mode(0o755)).is_ok()
            && run_jp_store_as(&f.root, Some(ids), &["ls"], b"").code == Some(0);
        if !usable {
            return jpstore_test_env::skip(
                test,
                jpstore_test_env::Need::UnprivilegedUser,
                &format!("jp-store cannot be run as uid {} here", ids.0),
            );
        }
    }
    let run = |args: &[&str], stdin: &[u8]| run_jp_store_as(&f.root, user, args, stdin);

    let jp_arg = jp.display().to_string();
    for (args, stdin) in [
        (vec!["append", CONV], response("r2", "new content")),
        (vec!["new", "--id", "d"], String::new()),
        (vec!["import", &jp_arg], String::new()),
        (vec!["gc", "--grace", "0s"], String::new()),
        (vec!["compact", CONV], String::new()),
        (vec!["fork", CONV], String::new()),
        (vec!["rm", CONV], String::new()),
    ] {
        let out = run(&args, stdin.as_bytes());
        refused(&out, &args.join(" "), &f.root);
        assert!(
            out.stderr.contains("Permission denied"),
            "{args:?}: {}",
            out.stderr
        );
    }

    // Reading needs no write.
    assert!(run(&["ls"], b"").ok("ls").contains(CONV));
    run(&["print", CONV], b"").ok("print");
    assert_eq!(run(&["export", CONV], b"").ok("export"), export);
    let fsck = run(&["fsck", "--read-data", "--json"], b"").json("fsck");
    assert_eq!(fsck["clean"], true, "{fsck}");
    assert_eq!(
        run(&["blob", "cat", &blob_id(SECRET)], b"").ok("blob cat"),
        SECRET
    );
    assert_eq!(tree_snapshot(&f.root), before, "the store changed");
}

/// Runs `jp-store` after the shell command `setup` (a `ulimit`, a `umask`).
fn run_after(setup: &str, root: &Path, args: &[&str], stdin: &[u8]) -> Run {
    let mut sh = std::process::Command::new("sh");
    sh.args(["-c", &format!("{setup} && exec \"$0\" \"$@\"")])
        .arg(jp_store_bin());
    run_command(sh, root, args, stdin)
}

/// Runs `jp-store` limited to 2 GiB of address space: an attempt to
/// allocate 4 GiB fails (and aborts it) instead of being overcommitted
/// unnoticed.
fn run_limited(root: &Path, args: &[&str], stdin: &[u8]) -> Run {
    run_after("ulimit -v 2097152", root, args, stdin)
}

#[test]
fn a_record_header_claiming_4_gib_is_refused_without_allocating_it() {
    let f = Fixture::new();
    let log = log_path(&f.root, CONV);
    let offset = fs::metadata(&log).expect("log").len();
    // A well-formed record header of the log's framing (format-spec.md 3):
    // a content length of 2^32 - 1, checksums, and a header crc that
    // matches; then a few bytes of the content it promises.
    let mut bytes = fs::read(&log).expect("log");
    let mut record =
        jpstore_tests::forged_record_header(jpstore_tests::log_version(&bytes), u32::MAX);
    record.extend(b"a few bytes of the promised payload");
    bytes.extend(&record);
    fs::write(&log, &bytes).expect("write the record");
    let before = tree_snapshot(&f.root);

    let names = |out: &Run, what: &str| {
        refused(out, what, &log);
        let text = format!("{}{}", out.stdout, out.stderr);
        assert!(
            text.contains(&format!("offset {offset}")) && text.contains("4294967295"),
            "{what}: the message names neither the offset {offset} nor the length:\n{text}"
        );
    };
    for args in [
        vec!["print", CONV],
        vec!["export", CONV],
        vec!["fsck"],
        vec!["fsck", "--read-data"],
    ] {
        names(&run_limited(&f.root, &args, b""), &args.join(" "));
    }
    names(
        &run_limited(
            &f.root,
            &["append", CONV],
            br#"{"type": "chat_response", "message": "after the forged record"}"#,
        ),
        "append",
    );
    assert_eq!(tree_snapshot(&f.root), before, "the store changed");
}

#[test]
fn everything_the_store_creates_is_for_its_owner_only_whatever_the_umask() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    // With umask 000, a file or directory created without an explicit
    // mode would be 0666 or 0777.
    let run = |args: &[&str], stdin: &[u8]| run_after("umask 000", &root, args, stdin);
    run(&["init"], b"").ok("init");
    let jp = dir.path().join("jp/17738399468-imported");
    jp_conversation(&jp);
    run(&["import", &jp.display().to_string()], b"").ok("import");
    run(&["new", "--id", CONV], b"").ok("new");
    run(&["append", CONV], response("r1", SECRET).as_bytes()).ok("append (a loose object)");
    // A pack of three files, of which only one stays referenced: gc
    // rewrites it into a new pack.
    let files = dir.path().join("files");
    fs::create_dir(&files).expect("mkdir");
    for name in ["a", "b", "c"] {
        fs::write(files.join(format!("{name}.txt")), format!("file {name}\n")).expect("write");
    }
    run(&["new", "--id", "t"], b"").ok("new");
    run(&["attach", "t", &files.display().to_string()], b"").ok("attach (a pack)");
    let a = files.join("a.txt").display().to_string();
    run(&["attach", CONV, &a], b"").ok("attach");
    run(&["compact", CONV], b"").ok("compact");
    let fork = run(&["fork", CONV], b"").ok("fork").trim().to_owned();
    run(&["rm", "t"], b"").ok("rm");
    let gc = run(&["gc", "--grace", "0s", "--json"], b"").json("gc");
    assert_eq!(gc["packs_rewritten"], 1, "{gc}");
    // Damage moved into quarantine/ by fsck --repair.
    let log = log_path(&root, &fork);
    let mut bytes = fs::read(&log).expect("log");
    bytes[20] ^= 0x01;
    fs::write(&log, &bytes).expect("damage the log");
    run(&["fsck", "--repair"], b"").expect_code(1, "fsck --repair");

    // Temp files are published by hard link (objects, packs, indexes,
    // config.toml) or renamed into place (head caches), so the final names
    // below carry the modes the temp files were created with.
    let root_mode = fs::metadata(&root).expect("stat").permissions().mode() & 0o777;
    assert_eq!(root_mode, 0o700, "the store directory: mode {root_mode:o}");
    let kinds: std::collections::BTreeSet<String> = assert_owner_only(&root)
        .iter()
        .filter_map(|rel| {
            let name = rel.file_name()?.to_str()?;
            Some(
                name.rsplit_once('.')
                    .map_or(name, |(_, ext)| ext)
                    .to_owned(),
            )
        })
        .collect();
    for kind in [
        "pack",
        "idx",
        "log",
        "lock",
        "head",
        "toml",
        "quarantine",
        "objects",
    ] {
        assert!(kinds.contains(kind), "no {kind} in the store: {kinds:?}");
    }
}
