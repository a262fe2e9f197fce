//! One flipped bit in the last record of a log is damage to a record that
//! was whole, not a torn tail, when something proves it was whole: records
//! published with the log (import, fork, new) and records a head cache
//! covers. Such damage is reported by readers, refused by `append`, and
//! quarantined (never cut) by `fsck --repair`. A tail nothing proves whole
//! may be cut, but only after a synced copy of its bytes is in quarantine.

use std::fs;
use std::path::{Path, PathBuf};

use jpstore_tests::{log_path, run_jp_store, ts};
use serde_json::json;

const ID: &str = "17738399468";

fn jp_conversation(parent: &Path) -> PathBuf {
    let dir = parent.join(format!("{ID}-imported"));
    fs::create_dir_all(&dir).expect("mkdir");
    let mut events = Vec::new();
    for i in 0..20u64 {
        events.push(
            json!({"type": "turn_start", "timestamp": format!("2026-05-29 10:{:02}:00.0", i)}),
        );
        events.push(json!({"type": "chat_request", "timestamp": format!("2026-05-29 10:{:02}:01.0", i), "content": format!("question {i}")}));
        events.push(json!({"type": "chat_response", "timestamp": format!("2026-05-29 10:{:02}:02.0", i), "message": format!("answer {i}")}));
    }
    fs::write(
        dir.join("events.json"),
        serde_json::to_vec(&events).expect("json"),
    )
    .expect("write");
    fs::write(dir.join("metadata.json"), r#"{"title": "T"}"#).expect("write");
    dir
}

fn append(root: &Path, id: &str, n: u64) -> jpstore_tests::Run {
    let batch = json!([
        {"type": "turn_start", "timestamp": ts(2 * n)},
        {"type": "chat_request", "timestamp": ts(2 * n + 1), "content": format!("appended {n}")}
    ]);
    run_jp_store(root, &["append", id], batch.to_string().as_bytes())
}

/// Flips one bit in the middle of the last record's content.
fn flip_in_last_record(log: &Path, last_record: u64) {
    let mut bytes = fs::read(log).expect("read log");
    let header = jpstore_tests::record_spans(&bytes)
        .last()
        .expect("a record")
        .header_len;
    let at = (last_record as usize + header + bytes.len()) / 2;
    bytes[at] ^= 0x10;
    fs::write(log, bytes).expect("write log");
}

/// The offset of the last record (walking the framing's length fields).
fn last_record(log: &Path) -> u64 {
    let bytes = fs::read(log).expect("read log");
    jpstore_tests::record_spans(&bytes)
        .last()
        .expect("a record")
        .offset as u64
}

fn quarantined(root: &Path) -> Vec<PathBuf> {
    let dir = root.join("quarantine/conversations");
    let mut out: Vec<PathBuf> = fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.sort();
    out
}

fn check_proven_damage(root: &Path, id: &str, what: &str) {
    // What was in quarantine before (an upgrade keeps old logs there).
    let before = quarantined(root);
    let log = log_path(root, id);
    let last = last_record(&log);
    flip_in_last_record(&log, last);
    let damaged = fs::read(&log).expect("read");

    let out = append(root, id, 99);
    out.expect_code(1, &format!("{what}: append over a damaged last record"));
    assert!(
        out.stderr.contains(&format!("offset {last}"))
            && out.stderr.contains("events.log")
            && out.stderr.contains("fsck --repair"),
        "{what}: the error names file, offset and the repair: {}",
        out.stderr
    );
    assert_eq!(
        fs::read(&log).expect("read"),
        damaged,
        "{what}: the log is unchanged"
    );
    assert_eq!(quarantined(root), before, "{what}: nothing cut");

    // Readers agree: print refuses the damaged record; ls does not count
    // events print would not show.
    let print = run_jp_store(root, &["print", id], b"");
    print.expect_code(1, &format!("{what}: print"));
    assert!(
        print.stderr.contains(&format!("offset {last}")),
        "{what}: {}",
        print.stderr
    );
    let ls = run_jp_store(root, &["ls"], b"");
    assert!(
        ls.code != Some(0) || !ls.stdout.contains(id),
        "{what}: ls lists the damaged conversation as if whole: {}",
        ls.stdout
    );

    let fsck = run_jp_store(root, &["fsck"], b"");
    assert_eq!(fsck.code, Some(1), "{what}: fsck reports damage: {fsck:?}");
    run_jp_store(root, &["fsck", "--repair"], b"");
    let q: Vec<PathBuf> = quarantined(root)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(q.len(), 1, "{what}: the conversation quarantined: {q:?}");
    assert_eq!(
        fs::read(q[0].join("events.log")).expect("quarantined log"),
        damaged,
        "{what}: the quarantined copy holds every byte"
    );
    // What was whole stays in the store: the records before the bad one.
    assert_eq!(
        fs::read(&log).expect("the log is back"),
        damaged[..last as usize],
        "{what}: the valid prefix kept"
    );
    run_jp_store(root, &["print", id], b"").ok("print after the repair");
    run_jp_store(root, &["fsck"], b"").ok("fsck after the repair");
    append(root, id, 100).ok("append after the repair");
}

/// A conversation imported whole: its records were published with the log,
/// so the last one was never a record in flight.
#[test]
fn a_flipped_bit_in_the_last_record_of_an_import_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    let jp = jp_conversation(dir.path()).display().to_string();
    run_jp_store(&root, &["import", &jp], b"").ok("import");
    // No head cache: the evidence must survive its loss? It is the head
    // written at creation; here it is left as the import wrote it.
    check_proven_damage(&root, ID, "import");
}

/// Appends acknowledged: the head cache written after them covers them.
#[test]
fn a_flipped_bit_in_an_acknowledged_last_record_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    run_jp_store(&root, &["new", "--id", "c1"], b"").ok("new");
    for n in 0..5 {
        append(&root, "c1", n).ok("append");
    }
    check_proven_damage(&root, "c1", "appends");
}

/// A conversation `copy` created at the destination, and one it extended
/// there: the records it published with the log, and those it appended,
/// are proven whole by the head it writes with them, as an import's are.
#[test]
fn a_flipped_bit_in_the_last_record_of_a_copy_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src");
    run_jp_store(&src, &["init"], b"").ok("init");
    let jp = jp_conversation(dir.path()).display().to_string();
    run_jp_store(&src, &["import", &jp], b"").ok("import");
    run_jp_store(&src, &["new", "--id", "c1"], b"").ok("new");
    append(&src, "c1", 0).ok("append");
    let path = |p: &Path| p.to_str().expect("utf-8").to_owned();

    // Created by the copy, whole.
    let created = dir.path().join("created");
    run_jp_store(&src, &["copy", &path(&src), &path(&created)], b"").ok("copy");
    check_proven_damage(&created, ID, "copy: created");
    check_proven_damage(&created, "c1", "copy: created, appended");

    // Extended by a second copy.
    let extended = dir.path().join("extended");
    run_jp_store(&src, &["copy", &path(&src), &path(&extended)], b"").ok("copy");
    for n in 1..3 {
        append(&src, "c1", n).ok("append");
    }
    let out = run_jp_store(
        &src,
        &["copy", &path(&src), &path(&extended), "--json"],
        b"",
    );
    assert_eq!(out.json("copy")["extended"], 1, "{}", out.stdout);
    check_proven_damage(&extended, "c1", "copy: extended");
}

/// `upgrade` publishes each log of format 1 rewritten whole, with the head
/// that proves its records whole.
#[test]
fn a_flipped_bit_in_the_last_record_of_an_upgraded_log_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    jpstore_tests::copy_tree(&jpstore_tests::fixture("store-v1").join("store"), &root);
    run_jp_store(&root, &["upgrade"], b"").ok("upgrade");
    check_proven_damage(&root, "native", "upgrade");
}

/// `fsck --repair` puts back the whole records before a damaged one: it
/// publishes them with the head that proves them whole, so damage to the
/// last of them later is still damage, not a torn tail.
#[test]
fn a_flipped_bit_in_the_last_record_a_repair_kept_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    run_jp_store(&root, &["new", "--id", "c1"], b"").ok("new");
    for n in 0..5 {
        append(&root, "c1", n).ok("append");
    }
    let log = log_path(&root, "c1");
    let offsets: Vec<u64> = jpstore_tests::record_spans(&fs::read(&log).expect("read log"))
        .iter()
        .map(|r| r.offset as u64)
        .collect();
    // Damage in the middle: the repair keeps the records before it.
    let mut bytes = fs::read(&log).expect("read");
    bytes[offsets[4] as usize - 2] ^= 0x10;
    fs::write(&log, bytes).expect("write");
    run_jp_store(&root, &["fsck", "--repair"], b"");
    assert_eq!(
        fs::metadata(&log).expect("the kept records").len(),
        offsets[3],
        "the records before the damaged one are back"
    );
    run_jp_store(&root, &["fsck"], b"").ok("fsck after the repair");
    check_proven_damage(&root, "c1", "repair");
}

/// Bytes after the last acknowledged record that nothing proves whole are
/// cut, but only after a synced copy of them (and a note) is in quarantine.
/// Until then, every command that shows the conversation without them says
/// so on standard error.
#[test]
fn a_tail_not_proven_whole_is_copied_before_it_is_cut() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    run_jp_store(&root, &["new", "--id", "c1"], b"").ok("new");
    append(&root, "c1", 0).ok("append");
    let log = log_path(&root, "c1");
    let end = fs::metadata(&log).expect("stat").len();
    let tail: Vec<u8> = (0..57u8).map(|b| b.wrapping_mul(37)).collect();
    let mut bytes = fs::read(&log).expect("read");
    bytes.extend_from_slice(&tail);
    fs::write(&log, bytes).expect("write");

    let out_dir = dir.path().join("jp");
    let out_dir = out_dir.to_str().expect("utf-8");
    for args in [
        &["print", "c1"][..],
        &["print", "c1", "--compacted"],
        &["view", "c1"],
        &["view", "c1", "--refs"],
        &["view", "c1", "--format", "openai"],
        &["export", "c1"],
        &["export", "--format", "ndjson"],
        &["export", "c1", "--format", "ndjson"],
        &["export", "--format", "jp", "--out", out_dir],
        &["-q", "print", "c1"],
    ] {
        let out = run_jp_store(&root, args, b"");
        out.ok(&format!("{args:?}"));
        assert!(
            out.stderr.contains(&format!(
                "warning: conversation c1: 57 bytes after its last whole record (offset {end}) are left out"
            )),
            "{args:?} says what it leaves out: {}",
            out.stderr
        );
    }

    let out = append(&root, "c1", 1);
    out.ok("append after a torn tail");
    assert!(out.stderr.contains("did not complete"), "{}", out.stderr);
    assert!(
        !out.stderr.contains("interrupted by a crash"),
        "{}",
        out.stderr
    );
    let q = quarantined(&root);
    let copy = q
        .iter()
        .find(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            name.starts_with(&format!("c1.tail-{end}.")) && !name.ends_with(".note")
        })
        .unwrap_or_else(|| panic!("no copy of the cut tail in quarantine: {q:?}"));
    assert_eq!(
        fs::read(copy).expect("copy"),
        tail,
        "the copy holds the cut bytes"
    );
    let note = PathBuf::from(format!("{}.note", copy.display()));
    assert!(fs::read_to_string(&note)
        .expect("note")
        .contains(&format!("offset {end}")));
    assert!(
        out.stderr.contains(&copy.display().to_string()),
        "{}",
        out.stderr
    );
}

/// A fork publishes the whole history with its log, like an import: a
/// flipped bit in its last record is damage, never cut.
#[test]
fn a_flipped_bit_in_the_last_record_of_a_fork_is_damage_not_a_torn_tail() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    let jp = jp_conversation(dir.path()).display().to_string();
    run_jp_store(&root, &["import", &jp], b"").ok("import");
    let before: Vec<String> = fs::read_dir(root.join("conversations"))
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    run_jp_store(&root, &["fork", ID], b"").ok("fork");
    let fork = fs::read_dir(root.join("conversations"))
        .expect("list")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| !before.contains(n))
        .expect("the fork's directory");
    check_proven_damage(&root, &fork, "fork");
}

/// The number of events `ls --json` gives for `id`, if it lists it.
fn listed_events(root: &Path, id: &str) -> Option<u64> {
    let ls = run_jp_store(root, &["ls", "--json"], b"");
    let list: serde_json::Value = serde_json::from_str(&ls.stdout).ok()?;
    list.as_array()?
        .iter()
        .find(|c| c["id"] == id)
        .and_then(|c| c["events"].as_u64())
}

/// The number of events `print`/`export` show for `id`, if they read it.
fn read_events(root: &Path, id: &str) -> Option<u64> {
    let export = run_jp_store(root, &["export", id], b"");
    let print = run_jp_store(root, &["print", id], b"");
    assert_eq!(
        export.code, print.code,
        "print and export agree on whether {id} reads: {export:?} {print:?}"
    );
    let value: serde_json::Value = serde_json::from_str(&export.stdout).ok()?;
    Some(value["events"].as_array()?.len() as u64)
}

/// `ls` never counts events that `print` and `export` do not show, whatever
/// record is damaged and whether a head cache covers it.
#[test]
fn ls_and_print_agree_about_the_events_of_a_damaged_log() {
    for middle in [false, true] {
        for head in [true, false] {
            let what = format!("damaged middle record: {middle}, head kept: {head}");
            let dir = tempfile::tempdir().expect("tempdir");
            let root = dir.path().join("store");
            run_jp_store(&root, &["init"], b"").ok("init");
            run_jp_store(&root, &["new", "--id", "c1"], b"").ok("new");
            for n in 0..5 {
                append(&root, "c1", n).ok("append");
            }
            let log = log_path(&root, "c1");
            let offsets: Vec<u64> = jpstore_tests::record_spans(&fs::read(&log).expect("read log"))
                .iter()
                .map(|r| r.offset as u64)
                .collect();
            // The listing writes the head now, so it covers every record.
            assert_eq!(listed_events(&root, "c1"), Some(10), "{what}");
            let at = if middle {
                offsets[3]
            } else {
                offsets[offsets.len() - 1]
            };
            let mut bytes = fs::read(&log).expect("read");
            let next = offsets
                .iter()
                .find(|&&o| o > at)
                .map_or(bytes.len(), |&o| o as usize);
            bytes[next - 2] ^= 0x10;
            fs::write(&log, bytes).expect("write");
            if !head {
                fs::remove_file(root.join("conversations/c1/head")).expect("remove head");
            }
            let listed = listed_events(&root, "c1");
            let read = read_events(&root, "c1");
            assert_eq!(
                listed, read,
                "{what}: ls lists {listed:?} events, print/export read {read:?}"
            );
        }
    }
}
