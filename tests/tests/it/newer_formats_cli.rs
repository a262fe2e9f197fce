//! Files written by a newer jp-store are not damage: a loose object of
//! format version 2, a pack and its index of version 3 and a log of version
//! 3, each with its checksums right where every version keeps them
//! (format-spec.md 2.10). Every reader says so ("written by a newer
//! jp-store (version N ...); upgrade jp-store"), fsck reports them apart
//! from damage (`unsupported`), and `fsck --repair` moves none of them, nor
//! the conversations that reference them. A version byte changed without
//! its checksum is damage, as before.

use std::fs;
use std::path::{Path, PathBuf};

use jpstore_tests::{log_path, run_jp_store, tree_snapshot, ts, Run};
use serde_json::{json, Value};
use sha2::Digest as _;

/// A store with four conversations: `loose` references a loose object,
/// `packed` a file attached (in a pack), `log` has a log of its own and
/// `plain` is left as it is.
struct Store {
    _dir: tempfile::TempDir,
    root: PathBuf,
    loose: String,
    packed: String,
    log: String,
    plain: String,
    /// The content of the loose object and of the attached file.
    loose_content: String,
    packed_content: String,
}

fn new_conversation(root: &Path, events: Value) -> String {
    let id = run_jp_store(root, &["new"], b"")
        .ok("new")
        .trim()
        .to_string();
    run_jp_store(root, &["append", &id], events.to_string().as_bytes()).ok("append");
    id
}

fn turn(question: &str, answer: Option<&str>) -> Value {
    let mut events = vec![
        json!({"type": "turn_start", "timestamp": ts(1)}),
        json!({"type": "chat_request", "timestamp": ts(2), "content": question}),
    ];
    if let Some(content) = answer {
        events.push(
            json!({"type": "tool_call_request", "timestamp": ts(3), "id": "c1",
            "name": "fs_read_file", "arguments": {"path": "a.txt"}}),
        );
        events.push(
            json!({"type": "tool_call_response", "timestamp": ts(4), "id": "c1",
            "content": content, "is_error": false}),
        );
    }
    Value::Array(events)
}

impl Store {
    fn new() -> Store {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        run_jp_store(&root, &["init"], b"").ok("init");
        let loose_content = "the content of a loose object, of a newer format".to_string();
        let loose = new_conversation(&root, turn("read a.txt", Some(&loose_content)));
        let packed_content = "the content of an attached file, in a pack\n".to_string();
        let packed = new_conversation(&root, turn("attach", None));
        let file = dir.path().join("attached.txt");
        fs::write(&file, &packed_content).expect("write");
        run_jp_store(
            &root,
            &["attach", &packed, &file.display().to_string()],
            b"",
        )
        .ok("attach");
        let log = new_conversation(&root, turn("a log of a newer format", None));
        let plain = new_conversation(&root, turn("left as it is", None));
        Store {
            _dir: dir,
            root,
            loose,
            packed,
            log,
            plain,
            loose_content,
            packed_content,
        }
    }

    fn run(&self, args: &[&str]) -> Run {
        run_jp_store(&self.root, args, b"")
    }

    fn loose_object(&self) -> PathBuf {
        let id = blob_id(&self.loose_content);
        self.root
            .join("blobs/objects")
            .join(&id[..2])
            .join(&id[2..])
    }

    /// The pack and index files (the only pack: the attached file's).
    fn pack(&self) -> (PathBuf, PathBuf) {
        let dir = self.root.join("blobs/packs");
        let mut names: Vec<PathBuf> = fs::read_dir(&dir)
            .expect("list packs")
            .map(|e| e.expect("entry").path())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "one pack and its index: {names:?}");
        let index = names[0].with_extension("idx");
        let pack = names[0].with_extension("pack");
        (pack, index)
    }
}

fn blob_id(content: &str) -> String {
    hex::encode(sha2::Sha256::digest(content.as_bytes()))
}

/// Rewrites the file at `path` with `f`, keeping its mode.
fn rewrite(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = fs::read(path).expect("read");
    f(&mut bytes);
    fs::write(path, bytes).expect("write");
}

/// A loose object's version byte set to `version`, its CRC-32 (bytes
/// 0..16 and the payload, at 16..20) made right again if `checksum`.
fn object_of_version(path: &Path, version: u8, checksum: bool) {
    rewrite(path, |b| {
        b[4] = version;
        if checksum {
            let mut crc = crc32fast::Hasher::new();
            crc.update(&b[..16]);
            crc.update(&b[20..]);
            let crc = crc.finalize().to_le_bytes();
            b[16..20].copy_from_slice(&crc);
        }
    });
}

/// A pack or index's version byte set to `version`, its BLAKE3 of all the
/// bytes before its last 32 made right again if `checksum`.
fn pack_file_of_version(path: &Path, version: u8, checksum: bool) {
    rewrite(path, |b| {
        b[4] = version;
        if checksum {
            let body = b.len() - 32;
            let sum = *blake3::hash(&b[..body]).as_bytes();
            b[body..].copy_from_slice(&sum);
        }
    });
}

/// A log's version (file header bytes 8..10) set to `version`, its header
/// crc made right again if `checksum`.
fn log_of_version(path: &Path, version: u16, checksum: bool) {
    rewrite(path, |b| {
        b[8..10].copy_from_slice(&version.to_le_bytes());
        if checksum {
            let crc = crc32fast::hash(&b[..12]).to_le_bytes();
            b[12..16].copy_from_slice(&crc);
        }
    });
}

fn findings<'a>(report: &'a Value, severity: &str) -> Vec<&'a Value> {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["severity"] == severity)
        .collect()
}

/// Whether `finding` is about `conversation` (or, `None`, no conversation)
/// and says what `says` says.
fn about(finding: &Value, conversation: Option<&str>, says: &str) -> bool {
    finding["conversation"].as_str() == conversation
        && finding["message"]
            .as_str()
            .is_some_and(|m| m.contains(says) && m.contains("upgrade jp-store"))
}

const OBJECT_V2: &str = "written by a newer jp-store (version 2 of the object format";
const INDEX_V3: &str = "written by a newer jp-store (version 3 of the pack index format";
const LOG_V3: &str = "written by a newer jp-store (version 3 of the log format";

#[test]
fn files_of_newer_formats_are_reported_apart_and_never_moved() {
    let s = Store::new();
    object_of_version(&s.loose_object(), 2, true);
    let (pack, index) = s.pack();
    pack_file_of_version(&pack, 3, true);
    pack_file_of_version(&index, 3, true);
    log_of_version(&log_path(&s.root, &s.log), 3, true);
    let before = tree_snapshot(&s.root);

    for args in [
        vec!["fsck", "--json"],
        vec!["fsck", "--read-data", "--json"],
    ] {
        let what = args.join(" ");
        let out = s.run(&args);
        out.expect_code(1, &what);
        let report: Value = serde_json::from_str(&out.stdout).expect("JSON");
        assert_eq!(report["clean"], false, "{what}");
        assert!(findings(&report, "damage").is_empty(), "{what}: {report:#}");
        let newer = findings(&report, "unsupported");
        assert!(
            newer.iter().all(|f| f["kind"] == "unsupported-version"),
            "{what}: {report:#}"
        );
        for (conversation, says) in [
            (Some(s.loose.as_str()), OBJECT_V2),
            (Some(s.packed.as_str()), INDEX_V3),
            (Some(s.log.as_str()), LOG_V3),
            (None, INDEX_V3),
        ] {
            assert!(
                newer.iter().any(|f| about(f, conversation, says)),
                "{what}: nothing about {conversation:?} saying {says:?}: {report:#}"
            );
        }
        if args.contains(&"--read-data") {
            // The loose object itself, read.
            assert!(
                newer.iter().any(|f| about(f, None, OBJECT_V2)),
                "{what}: {report:#}"
            );
        }
    }
    let text = s.run(&["fsck"]);
    text.expect_code(1, "fsck");
    assert!(
        text.stdout.contains("unsupported: unsupported-version")
            && text.stdout.contains("upgrade jp-store to check them")
            && !text.stdout.contains("damage"),
        "{}",
        text.stdout
    );

    // Nothing moved: not the files, not the conversations.
    let repair = s.run(&["fsck", "--repair", "--json"]);
    repair.expect_code(1, "fsck --repair");
    let report: Value = serde_json::from_str(&repair.stdout).expect("JSON");
    assert_eq!(report["repairs"], json!([]), "{report:#}");
    assert_eq!(
        tree_snapshot(&s.root),
        before,
        "fsck --repair changed the store"
    );
    // The log of a newer format is named, not listed; the others are.
    let ls = s.run(&["ls", "--json"]);
    ls.expect_code(1, "ls");
    assert!(
        ls.stderr.contains(&s.log) && ls.stderr.contains(LOG_V3),
        "{}",
        ls.stderr
    );
    let listed: Value = serde_json::from_str(&ls.stdout).expect("JSON");
    let ids: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    for id in [&s.loose, &s.packed, &s.plain] {
        assert!(ids.contains(&id.as_str()), "{id} not listed: {listed}");
    }

    // Every reader says what it is.
    for (args, says) in [
        (vec!["view", s.loose.as_str()], OBJECT_V2),
        (vec!["view", s.packed.as_str()], INDEX_V3),
        (vec!["view", s.log.as_str()], LOG_V3),
        (vec!["print", s.log.as_str()], LOG_V3),
    ] {
        let out = s.run(&args);
        out.expect_code(1, &args.join(" "));
        assert!(
            out.stderr.contains(says) && out.stderr.contains("upgrade jp-store"),
            "{}: {}",
            args.join(" "),
            out.stderr
        );
    }
    let loose_id = blob_id(&s.loose_content);
    let packed_id = blob_id(&s.packed_content);
    for (id, says) in [(&loose_id, OBJECT_V2), (&packed_id, INDEX_V3)] {
        let out = s.run(&["blob", "cat", id]);
        out.expect_code(1, "blob cat");
        assert!(
            out.stderr.contains(says) && out.stderr.contains("upgrade jp-store"),
            "blob cat {id}: {}",
            out.stderr
        );
    }
    s.run(&["view", &s.plain])
        .ok("view of the conversation left as it is");
    // Readers rewrite head caches (their settings), and nothing else.
    let without_heads = |tree: std::collections::BTreeMap<PathBuf, Option<Vec<u8>>>| {
        tree.into_iter()
            .filter(|(path, _)| !path.ends_with("head"))
            .collect::<Vec<_>>()
    };
    assert!(
        without_heads(tree_snapshot(&s.root)) == without_heads(before),
        "a reader changed the store"
    );
}

#[test]
fn a_version_changed_without_its_checksum_is_damage() {
    let s = Store::new();
    object_of_version(&s.loose_object(), 2, false);
    let (_, index) = s.pack();
    pack_file_of_version(&index, 3, false);
    log_of_version(&log_path(&s.root, &s.log), 3, false);
    let out = s.run(&["fsck", "--read-data", "--json"]);
    out.expect_code(1, "fsck");
    let report: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert!(findings(&report, "unsupported").is_empty(), "{report:#}");
    let damage = findings(&report, "damage");
    for (conversation, kind) in [
        (Some(s.loose.as_str()), "damaged-blob"),
        (Some(s.packed.as_str()), "missing-blob"),
        (Some(s.log.as_str()), "damaged-header"),
        (None, "damaged-pack"),
    ] {
        assert!(
            damage
                .iter()
                .any(|f| f["conversation"].as_str() == conversation && f["kind"] == kind),
            "no {kind} about {conversation:?}: {report:#}"
        );
    }
}
