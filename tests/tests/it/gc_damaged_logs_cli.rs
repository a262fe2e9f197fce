//! gc marks from everything that could still be recovered (format-spec.md
//! 4.7): the records of a log before and after damage, what can be decoded
//! of a damaged record, quarantined logs (even with a damaged file header)
//! and quarantined tail copies. A log it cannot read at all makes it refuse
//! to sweep, naming the file, with nothing deleted.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use jpstore_tests::{log_path, run_jp_store, run_jp_store_as, ts};
use serde_json::json;

const ID: &str = "c1";
/// Appended batches, each one record referencing a blob of its own.
const RECORDS: u64 = 7;

fn blobs(root: &Path) -> BTreeSet<String> {
    run_jp_store(root, &["blob", "ls"], b"")
        .ok("blob ls")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A store with conversation `c1` of [`RECORDS`] appended records (each
/// referencing a distinct blob) and one blob nothing references. Returns
/// the blobs the conversation references and the unreferenced one.
fn store_with_conversation(root: &Path) -> (BTreeSet<String>, String) {
    run_jp_store(root, &["init"], b"").ok("init");
    run_jp_store(root, &["new", "--id", ID], b"").ok("new");
    for n in 0..RECORDS {
        let batch = json!([
            {"type": "turn_start", "timestamp": ts(4 * n)},
            {"type": "chat_request", "timestamp": ts(4 * n + 1), "content": "read it"},
            {"type": "tool_call_request", "timestamp": ts(4 * n + 2), "id": format!("call_{n}"),
             "name": "read_file", "arguments": {"path": format!("f{n}")}},
            {"type": "tool_call_response", "timestamp": ts(4 * n + 3), "id": format!("call_{n}"),
             "content": format!("content of record {n}, found nowhere else"), "is_error": false}
        ]);
        run_jp_store(root, &["append", ID], batch.to_string().as_bytes()).ok("append");
    }
    let referenced = blobs(root);
    assert!(
        referenced.len() as u64 > RECORDS,
        "every record references a blob of its own, and the base config one: {referenced:?}"
    );
    let garbage = root.join("..").join("garbage.txt");
    fs::write(&garbage, "referenced by nothing").expect("write");
    let orphan = run_jp_store(root, &["blob", "put", &garbage.display().to_string()], b"")
        .ok("blob put")
        .split_whitespace()
        .next()
        .expect("blob put prints the id")
        .to_owned();
    assert!(blobs(root).contains(&orphan), "the orphan is stored");
    (referenced, orphan)
}

/// Offsets, lengths and header lengths of the records of a whole log
/// (walking the length fields, which are intact here).
fn records(log: &Path) -> Vec<(usize, usize, usize)> {
    jpstore_tests::record_spans(&fs::read(log).expect("read log"))
        .iter()
        .map(|r| (r.offset, r.len, r.header_len))
        .collect()
}

fn flip(path: &Path, at: usize, mask: u8) {
    let mut bytes = fs::read(path).expect("read");
    bytes[at] ^= mask;
    fs::write(path, bytes).expect("write");
}

/// Runs `gc --grace 0s` and checks that it swept (the orphan is gone) and
/// kept every blob in `kept`.
fn gc_keeps(root: &Path, kept: &BTreeSet<String>, orphan: &str, what: &str) {
    run_jp_store(root, &["gc", "--grace", "0s"], b"").ok(&format!("{what}: gc"));
    let after = blobs(root);
    assert!(
        !after.contains(orphan),
        "{what}: gc swept the unreferenced blob"
    );
    let lost: Vec<&String> = kept.difference(&after).collect();
    assert!(
        lost.is_empty(),
        "{what}: gc deleted referenced blobs {lost:?}"
    );
}

fn quarantined(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(root.join("quarantine/conversations"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

/// One flipped bit in the log's file header: `fsck --repair` quarantines
/// the whole conversation (no prefix can be kept), and every record after
/// the header is intact, so gc keeps every blob they reference.
#[test]
fn gc_keeps_the_blobs_of_a_log_quarantined_for_a_damaged_file_header() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let (referenced, orphan) = store_with_conversation(&root);
    flip(&log_path(&root, ID), 9, 0x01);
    run_jp_store(&root, &["fsck", "--repair"], b"");
    assert!(
        !log_path(&root, ID).exists(),
        "the conversation was moved aside"
    );
    assert_eq!(quarantined(&root).len(), 1, "{:?}", quarantined(&root));
    gc_keeps(&root, &referenced, &orphan, "damaged file header");
}

/// Where a record in the middle is damaged.
#[derive(Debug, Clone, Copy)]
enum Damage {
    /// A bit of its payload (the length of its first entry): the strict
    /// reader stops there.
    Payload,
    /// A bit of its header's length field: the header checksum fails, so
    /// the next record is found only by scanning forward.
    Header,
}

fn damage_middle_record(root: &Path, damage: Damage) {
    let log = log_path(root, ID);
    let recs = records(&log);
    assert_eq!(recs.len() as u64, RECORDS + 1, "{recs:?}");
    let (off, _, header) = recs[3];
    match damage {
        // Byte 4 of the content: the low byte of its first entry's length
        // (version 1), of its aux length (version 2).
        Damage::Payload => flip(&log, off + header + 4, 0x04),
        Damage::Header => flip(&log, off + 1, 0x02),
    }
}

fn check_middle_damage(damage: Damage, repair: bool) {
    let what = format!("{damage:?} damage, repair first: {repair}");
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let (referenced, orphan) = store_with_conversation(&root);
    damage_middle_record(&root, damage);
    if repair {
        run_jp_store(&root, &["fsck", "--repair"], b"");
        assert_eq!(quarantined(&root).len(), 1, "{what}");
        // The records before the damage are back in the store.
        assert!(log_path(&root, ID).exists(), "{what}: prefix kept");
    }
    gc_keeps(&root, &referenced, &orphan, &what);
}

#[test]
fn gc_keeps_the_blobs_of_records_after_a_damaged_payload() {
    check_middle_damage(Damage::Payload, false);
}

#[test]
fn gc_keeps_the_blobs_of_records_after_a_damaged_payload_quarantined() {
    check_middle_damage(Damage::Payload, true);
}

#[test]
fn gc_keeps_the_blobs_of_records_after_a_damaged_record_header() {
    check_middle_damage(Damage::Header, false);
}

#[test]
fn gc_keeps_the_blobs_of_records_after_a_damaged_record_header_quarantined() {
    check_middle_damage(Damage::Header, true);
}

/// A last record cut by a writer (nothing proved it whole) lives on only as
/// its copy in quarantine: gc keeps what it references.
#[test]
fn gc_keeps_the_blobs_of_a_cut_tail_copied_to_quarantine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let (referenced, orphan) = store_with_conversation(&root);
    let log = log_path(&root, ID);
    // Without a head nothing proves the last record whole; a flipped bit
    // then makes it look like an append that did not complete.
    fs::remove_file(root.join("conversations").join(ID).join("head")).expect("remove head");
    let (last, len, _) = *records(&log).last().expect("records");
    flip(&log, last + len - 1, 0x01);
    let batch = json!([{"type": "turn_start", "timestamp": ts(1000)}]);
    let out = run_jp_store(&root, &["append", ID], batch.to_string().as_bytes());
    out.ok("append cuts the tail");
    assert!(
        quarantined(&root)
            .iter()
            .any(|p| p.file_name().is_some_and(|n| n
                .to_string_lossy()
                .starts_with(&format!("{ID}.tail-{last}.")))),
        "the tail copied: {:?}",
        quarantined(&root)
    );
    gc_keeps(&root, &referenced, &orphan, "cut tail");
}

/// gc refuses to sweep when a log cannot be read at all: the error names
/// the file and nothing is deleted.
fn check_refused(root: &Path, unreadable: &Path, orphan: &str, what: &str) {
    check_refused_as(root, None, unreadable, orphan, what);
}

/// [`check_refused`], gc run as the user and group `user` when given.
fn check_refused_as(
    root: &Path,
    user: Option<(u32, u32)>,
    unreadable: &Path,
    orphan: &str,
    what: &str,
) {
    let before = blobs(root);
    let out = run_jp_store_as(root, user, &["gc", "--grace", "0s"], b"");
    assert_ne!(out.code, Some(0), "{what}: gc succeeded: {out:?}");
    assert!(
        out.stderr.contains(&unreadable.display().to_string()),
        "{what}: the error names {}: {}",
        unreadable.display(),
        out.stderr
    );
    assert_eq!(blobs(root), before, "{what}: nothing deleted");
    assert!(before.contains(orphan), "{what}");
}

#[test]
fn gc_refuses_to_sweep_when_a_log_is_a_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let (_, orphan) = store_with_conversation(&root);
    let log = log_path(&root, ID);
    fs::remove_file(&log).expect("remove log");
    fs::create_dir(&log).expect("a directory in its place");
    check_refused(&root, &log, &orphan, "directory");
}

/// A log of mode 000. Root reads any file: as root, gc runs as a user whom
/// permissions bind (`jpstore_test_env::unprivileged_user`), owning the
/// store.
#[test]
fn gc_refuses_to_sweep_when_a_log_cannot_be_opened() {
    use std::os::unix::fs::PermissionsExt as _;
    let test = "gc_refuses_to_sweep_when_a_log_cannot_be_opened";
    let Some(user) = jpstore_test_env::unprivileged_user_or_skip(test) else {
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let (_, orphan) = store_with_conversation(&root);
    if let Some(ids) = user {
        jpstore_tests::chown_tree(dir.path(), ids).expect("chown");
    }
    let log = log_path(&root, ID);
    fs::set_permissions(&log, fs::Permissions::from_mode(0o000)).expect("chmod");
    check_refused_as(&root, user, &log, &orphan, "mode 000");
    fs::set_permissions(&log, fs::Permissions::from_mode(0o600)).expect("chmod back");
}

/// A quarantined log that cannot be read may reference any blob.
#[test]
fn gc_refuses_to_sweep_when_a_quarantined_log_cannot_be_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let (_, orphan) = store_with_conversation(&root);
    flip(&log_path(&root, ID), 9, 0x01);
    run_jp_store(&root, &["fsck", "--repair"], b"");
    let q = quarantined(&root);
    assert_eq!(q.len(), 1, "{q:?}");
    let log = q[0].join("events.log");
    fs::remove_file(&log).expect("remove");
    fs::create_dir(&log).expect("a directory in its place");
    check_refused(&root, &log, &orphan, "quarantined");
}

/// fsck tells the blobs gc keeps only because a damaged or quarantined log
/// may reference them from the orphans gc removes.
#[test]
fn fsck_reports_blobs_kept_for_damaged_and_quarantined_logs_apart_from_orphans() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let (referenced, _) = store_with_conversation(&root);
    flip(&log_path(&root, ID), 9, 0x01);
    run_jp_store(&root, &["fsck", "--repair"], b"");
    let report = run_jp_store(&root, &["fsck", "--json"], b"").json("fsck");
    let finding = |kind: &str| -> Option<String> {
        report["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .find(|f| f["kind"] == kind)
            .map(|f| f["message"].as_str().expect("message").to_owned())
    };
    let orphans = finding("orphan-blobs").expect("the unreferenced blob is an orphan");
    assert!(orphans.starts_with("1 blobs "), "{orphans}");
    let kept = finding("kept-for-recovery").expect("a finding for the kept blobs");
    assert!(
        kept.starts_with(&format!("{} blobs ", referenced.len())),
        "{kept}"
    );
    assert_eq!(report["clean"], true, "information, not damage: {report}");
}
