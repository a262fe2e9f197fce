//! `jp-store upgrade` on the committed version 1 store
//! (`tests/fixtures/store-v1`): a dry run changes no byte; the upgrade
//! rewrites every log and pack of version 1 and the store then reads,
//! views, exports and checks exactly as before; a second upgrade writes
//! nothing. And the committed `tests/fixtures/store-v2` (the same store,
//! upgraded) reads as store-v1's expected files say.

use std::collections::BTreeMap;
use std::path::Path;

use jpstore_tests::{copy_tree, fixture, log_version, run_jp_store, tree_snapshot};
use serde_json::Value;

const IDS: [&str; 3] = ["17738399468", "native", "forked"];

/// What a user sees of the store: the listing, and per conversation its
/// export (JSON), views (plain and as a provider request), and its export
/// to JP's files; then what fsck --read-data finds.
fn outputs(store: &Path, work: &Path) -> BTreeMap<String, String> {
    fn run(out: &mut BTreeMap<String, String>, store: &Path, key: String, args: &[&str]) {
        let r = run_jp_store(store, args, b"");
        let text = r.ok(&key).to_owned();
        out.insert(key, text);
    }
    let mut out = BTreeMap::new();
    // The listing, but the log lengths (a log of version 2 is smaller).
    let mut ls = run_jp_store(store, &["ls", "--json"], b"").json("ls");
    for c in ls.as_array_mut().expect("a list") {
        c.as_object_mut().expect("an object").remove("log_bytes");
    }
    out.insert("ls".into(), ls.to_string());
    for id in IDS {
        run(
            &mut out,
            store,
            format!("{id} export"),
            &["export", id, "--format", "json"],
        );
        run(&mut out, store, format!("{id} view"), &["view", id]);
        run(
            &mut out,
            store,
            format!("{id} view anthropic"),
            &["view", id, "--format", "anthropic"],
        );
    }
    let jp = tempfile::tempdir_in(work).expect("a temp dir");
    let jp = jp.path().join("jp");
    run_jp_store(
        store,
        &[
            "export",
            IDS[0],
            "--format",
            "jp",
            "--out",
            jp.to_str().expect("utf-8"),
        ],
        b"",
    )
    .ok("export to JP's files");
    for (path, bytes) in tree_snapshot(&jp) {
        out.insert(
            format!("jp file {}", path.display()),
            String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned(),
        );
    }
    // fsck finds the same, in the same records, entries and references;
    // the bytes it read are those of the packs as stored (a pack of version
    // 2 compresses its objects in groups), so they are left out.
    let mut fsck = run_jp_store(store, &["fsck", "--read-data", "--json"], b"").json("fsck");
    if let Some(map) = fsck.as_object_mut() {
        map.remove("bytes_read");
    }
    out.insert("fsck".into(), fsck.to_string());
    out
}

/// Asserts that `after` holds the same outputs as `before`, naming the
/// first that differs.
#[track_caller]
fn same(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>, what: &str) {
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "{what}"
    );
    for (key, text) in before {
        assert_eq!(text, &after[key], "{what}: {key}");
    }
}

/// The framing version of every conversation's log.
fn log_versions(store: &Path) -> Vec<u16> {
    IDS.iter()
        .map(|id| {
            let log = std::fs::read(store.join("conversations").join(id).join("events.log"))
                .expect("read a log");
            log_version(&log)
        })
        .collect()
}

/// The format version of every pack (byte 4 of its header).
fn pack_versions(store: &Path) -> Vec<u8> {
    let packs = store.join("blobs/packs");
    let mut v = Vec::new();
    for e in std::fs::read_dir(&packs).expect("packs") {
        let path = e.expect("entry").path();
        if path.extension().is_some_and(|x| x == "pack") {
            v.push(std::fs::read(&path).expect("read a pack")[4]);
        }
    }
    v
}

#[test]
fn upgrade_dry_run_writes_nothing_then_upgrades_and_a_second_is_a_no_op() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    copy_tree(&fixture("store-v1").join("store"), &store);
    assert_eq!(log_versions(&store), [1, 1, 1]);
    assert_eq!(pack_versions(&store), [1]);
    let before = outputs(&store, dir.path());
    let before_bytes = tree_snapshot(&store);

    // A dry run: the report, and not one byte changed.
    let dry = run_jp_store(&store, &["upgrade", "--dry-run", "--json"], b"").json("dry run");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["logs_upgraded"], 3, "{dry}");
    assert_eq!(dry["packs"]["packs"], 1, "{dry}");
    assert_eq!(
        tree_snapshot(&store),
        before_bytes,
        "the dry run changed bytes"
    );

    // The upgrade.
    let done = run_jp_store(&store, &["upgrade", "--json"], b"").json("upgrade");
    assert_eq!(done["dry_run"], false);
    assert_eq!(done["logs_upgraded"], 3, "{done}");
    assert_eq!(done["logs_current"], 0, "{done}");
    assert_eq!(done["packs"]["packs"], 1, "{done}");
    for (c, d) in done["conversations"]
        .as_array()
        .expect("conversations")
        .iter()
        .zip(dry["conversations"].as_array().expect("conversations"))
    {
        assert_eq!(c["from_version"], 1);
        assert_eq!(c["upgraded"], true);
        // The dry run said what the upgrade wrote.
        for key in ["id", "records", "entries", "old_bytes", "new_bytes"] {
            assert_eq!(c[key], d[key], "{key} of {c}");
        }
        // The old log is kept whole.
        let kept = store
            .join(c["kept"].as_str().expect("kept"))
            .join("events.log");
        assert_eq!(
            std::fs::read(&kept).expect("the kept log").len() as u64,
            c["old_bytes"].as_u64().expect("old bytes")
        );
    }
    assert_eq!(log_versions(&store), [2, 2, 2]);
    assert_eq!(pack_versions(&store), [2]);
    same(&before, &outputs(&store, dir.path()), "after the upgrade");

    // A second upgrade: nothing to do, nothing written.
    let upgraded = tree_snapshot(&store);
    let again = run_jp_store(&store, &["upgrade", "--json"], b"").json("again");
    assert_eq!(again["logs_upgraded"], 0, "{again}");
    assert_eq!(again["logs_current"], 3, "{again}");
    assert_eq!(again["packs"]["packs"], 0, "{again}");
    assert_eq!(tree_snapshot(&store), upgraded, "a second upgrade wrote");

    // The human form names what was rewritten.
    let dir2 = tempfile::tempdir().expect("tempdir");
    let store2 = dir2.path().join("store");
    copy_tree(&fixture("store-v1").join("store"), &store2);
    let text = run_jp_store(&store2, &["upgrade"], b"");
    let stdout = text.ok("upgrade").to_owned();
    assert!(
        stdout.starts_with("rewrote 1 packs of format 1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("and 3 conversation logs of format 1"),
        "{stdout}"
    );
}

#[test]
fn the_committed_version_2_store_reads_as_the_version_1_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (v1, v2) = (dir.path().join("v1"), dir.path().join("v2"));
    copy_tree(&fixture("store-v1").join("store"), &v1);
    copy_tree(&fixture("store-v2").join("store"), &v2);
    assert_eq!(log_versions(&v2), [2, 2, 2]);
    assert_eq!(pack_versions(&v2), [2]);
    let expected = |name: &str| -> Value {
        let path = fixture("store-v1").join("expected").join(name);
        serde_json::from_str(&std::fs::read_to_string(&path).expect("expected file")).expect("json")
    };
    for id in IDS {
        let export = run_jp_store(&v2, &["export", id, "--format", "json"], b"").json("export");
        assert_eq!(
            export,
            expected(&format!("{id}.export.json")),
            "export of {id}"
        );
        let view = run_jp_store(&v2, &["view", id], b"").json("view");
        assert_eq!(view, expected(&format!("{id}.view.json")), "view of {id}");
    }
    same(
        &outputs(&v1, dir.path()),
        &outputs(&v2, dir.path()),
        "store-v2",
    );
    assert_eq!(
        run_jp_store(&v2, &["upgrade", "--json"], b"").json("upgrade")["logs_upgraded"],
        0
    );
}
