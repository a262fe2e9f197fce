//! Stores written by earlier versions of the format, committed under
//! `tests/fixtures/`, open and read the same with this build, pass fsck, and
//! take new appends (format-spec.md 2.10).
//!
//! `store-v1`: log framing version 1 with header flags 0 (every entry plain,
//! kinds `01`/`02`), written before packed entries (kind `03`) existed. It
//! holds an imported JP conversation, a native one with a loose and a packed
//! batch of blobs and a compaction, and a fork of its last turn. The
//! `expected/` files are `export --format json` and `view` of each
//! conversation as the build that wrote the store printed them.

use std::path::Path;

use jpstore_tests::{copy_tree, fixture, run_jp_store};
use serde_json::Value;

const IDS: [&str; 3] = ["17738399468", "native", "forked"];

fn expected(version: &str, name: &str) -> Value {
    let path = fixture(version).join("expected").join(name);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_version_1_store_reads_the_same_passes_fsck_and_takes_appends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    copy_tree(&fixture("store-v1").join("store"), &store);

    let listed = run_jp_store(&store, &["ls", "--json"], b"").json("ls");
    let ids: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    for id in IDS {
        assert!(ids.contains(&id), "{id} missing from {ids:?}");
        let export = run_jp_store(&store, &["export", id, "--format", "json"], b"").json("export");
        assert_eq!(
            export,
            expected("store-v1", &format!("{id}.export.json")),
            "export of {id}"
        );
        let view = run_jp_store(&store, &["view", id], b"").json("view");
        assert_eq!(
            view,
            expected("store-v1", &format!("{id}.view.json")),
            "view of {id}"
        );
    }
    let fsck = run_jp_store(&store, &["fsck", "--read-data"], b"");
    fsck.ok("fsck of the old store");

    // Its JP conversation exports to JP's files: equal to the imported
    // sample as JSON, metadata.json byte for byte, but the base config's
    // keys sorted (such a store kept only its canonical bytes:
    // format-spec.md 4.5; `import --force` of the files keeps them).
    let out = dir.path().join("jp");
    run_jp_store(
        &store,
        &[
            "export",
            IDS[0],
            "--format",
            "jp",
            "--out",
            out.to_str().expect("utf-8"),
        ],
        b"",
    )
    .ok("export of the JP conversation to JP's files");
    let sample = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/samples/jp-workspace/.jp/conversations/17738399468-fix-the-flaky-test");
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let exported = out.join("17738399468-fix-the-flaky-test");
    assert_eq!(
        read(&exported.join("metadata.json")),
        read(&sample.join("metadata.json"))
    );
    let as_json = |b: Vec<u8>| serde_json::from_slice::<Value>(&b).expect("json");
    assert_eq!(
        as_json(read(&exported.join("events.json"))),
        as_json(read(&sample.join("events.json")))
    );

    // An append to an old log: it reads back after the old entries, and the
    // log stays readable by the build that wrote it (plain entries only: the
    // header still has no flags).
    let log = store.join("conversations/native/events.log");
    let header_before = std::fs::read(&log).expect("read the log")[..16].to_vec();
    let long = "a long answer that would be worth compressing ".repeat(400);
    let batch = format!(
        "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"And now?\"}}\n\
         {{\"type\":\"chat_response\",\"message\":\"{long}\"}}\n"
    );
    run_jp_store(&store, &["append", "native"], batch.as_bytes()).ok("append");
    let bytes = std::fs::read(&log).expect("read the log");
    assert_eq!(bytes[..16], header_before[..], "the header changed");
    assert!(
        bytes.windows(long.len()).any(|w| w == long.as_bytes()),
        "the new entry of a flag-0 log must be stored plain"
    );
    let export =
        run_jp_store(&store, &["export", "native", "--format", "json"], b"").json("export");
    let events = export["events"].as_array().expect("events");
    let old = expected("store-v1", "native.export.json");
    let old_events = old["events"].as_array().expect("events");
    assert_eq!(events[..old_events.len()], old_events[..]);
    assert_eq!(events.len(), old_events.len() + 3);
    assert_eq!(events[events.len() - 1]["message"], long.as_str());
    run_jp_store(&store, &["fsck", "--read-data"], b"").ok("fsck after the append");
}
