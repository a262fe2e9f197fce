//! Tests of fsck: each kind of damage is found and named, and `repair`
//! leaves a clean store in which everything undamaged still reads.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;
use crate::event::input::entries_now as input;
use crate::event::Entry;
use crate::export::{conversation_json, ContentMode};
use crate::{NewConversation, StoreOptions};

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    store: Store,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("s");
    let store = Store::init_dir(&root, StoreOptions::default()).expect("init");
    Fixture {
        _dir: dir,
        root,
        store,
    }
}

/// A conversation `name` with `turns` batches, each with a tool response
/// whose content is `content(i)`; returns the record offsets.
fn conv(f: &Fixture, name: &str, turns: usize, content: &dyn Fn(usize) -> String) -> Vec<u64> {
    let id = ConversationId::parse(name).expect("id");
    let mut w = f
        .store
        .create(NewConversation {
            id: Some(id),
            ..Default::default()
        })
        .expect("create");
    let offsets = (0..turns)
        .map(|i| {
            let text = format!(
                "{{\"type\":\"turn_start\"}}\n{{\"type\":\"tool_call_request\",\"id\":\"c{i}\",\"name\":\"t\",\"arguments\":{{}}}}\n\
                 {{\"type\":\"tool_call_response\",\"id\":\"c{i}\",\"content\":\"{}\"}}",
                content(i)
            );
            w.append(input(&text)).expect("append").offset
        })
        .collect();
    // The head covers every record: they are proven whole.
    w.close();
    offsets
}

fn run(f: &Fixture, read_data: bool, repair: bool) -> FsckReport {
    f.store
        .fsck(FsckOptions { read_data, repair }, &mut |_| {})
        .expect("fsck runs")
}

/// Plain fsck of the store opened anew, as every command opens one (after
/// the test changed its files: nothing of them read before).
fn run_anew(f: &Fixture) -> FsckReport {
    Store::open_dir(&f.root, StoreOptions::default())
        .expect("open")
        .fsck(FsckOptions::default(), &mut |_| {})
        .expect("fsck runs")
}

fn damage(r: &FsckReport) -> Vec<&Finding> {
    r.findings
        .iter()
        .filter(|f| f.severity == Severity::Damage)
        .collect()
}

fn of_kind<'a>(r: &'a FsckReport, kind: &str) -> Vec<&'a Finding> {
    r.findings.iter().filter(|f| f.kind == kind).collect()
}

fn readable(f: &Fixture, name: &str) {
    let conv = f
        .store
        .read(&ConversationId::parse(name).expect("id"))
        .expect("read");
    conversation_json(&f.store, &conv, ContentMode::Inline).expect("every content reads");
}

fn flip(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[at as usize] ^= 0x20;
    std::fs::write(path, bytes).expect("write");
}

fn blob_file(f: &Fixture, content: &str) -> PathBuf {
    let hex = jpstore_blobstore::BlobId::of(content.as_bytes()).to_hex();
    f.root.join("blobs/objects").join(&hex[..2]).join(&hex[2..])
}

fn assert_repaired_clean(f: &Fixture, survivor: &str) {
    let after = run(f, true, false);
    assert!(
        after.is_clean(),
        "not clean after repair: {:?}",
        damage(&after)
    );
    readable(f, survivor);
    assert!(f.root.join("quarantine").exists());
}

#[test]
fn a_clean_store_is_clean_and_orphans_are_information() {
    let f = fixture();
    conv(&f, "a", 3, &|i| format!("content {i}"));
    f.store.blobs().put(b"orphan").expect("put");
    let r = run(&f, true, false);
    assert!(r.is_clean(), "{:?}", r.findings);
    assert_eq!((r.conversations, r.records, r.entries), (1, 4, 9));
    assert!(r.blobs_read >= 4);
    let orphans = of_kind(&r, "orphan-blobs");
    assert_eq!(orphans.len(), 1);
    assert_eq!(orphans[0].severity, Severity::Info);
}

#[test]
fn a_base_config_that_does_not_parse_is_named_for_every_conversation_of_it() {
    // Two conversations are given one base config blob that is JSON but
    // not an object (read and parsed once), a third a good one.
    let f = fixture();
    let put = |bytes: &[u8]| crate::event::BlobRef {
        id: f.store.blobs().put(bytes).expect("put").id,
        size: bytes.len() as u64,
    };
    let (bad, good) = (put(b"[1]"), put(b"{\"a\":1}"));
    for (name, base) in [("a", bad), ("b", good), ("c", bad)] {
        conv(&f, name, 1, &|i| format!("content {i}"));
        let mut w = f
            .store
            .writer(&ConversationId::parse(name).expect("id"))
            .expect("writer");
        w.set_metadata(MetaPatch {
            base_config: Some(base),
            fields: Default::default(),
        })
        .expect("metadata");
    }
    for read_data in [false, true] {
        let r = run(&f, read_data, false);
        let found: Vec<_> = of_kind(&r, "base-config")
            .into_iter()
            .map(|f| (f.conversation.clone(), f.severity))
            .collect();
        assert_eq!(
            found,
            [
                (Some("a".to_string()), Severity::Damage),
                (Some("c".to_string()), Severity::Damage)
            ]
        );
        let messages: Vec<_> = of_kind(&r, "base-config")
            .into_iter()
            .map(|f| f.message.clone())
            .collect();
        assert_eq!(messages[0], messages[1]);
        assert!(messages[0].contains("an array"), "{}", messages[0]);
        assert!(of_kind(&r, "missing-blob").is_empty());
    }
}

#[test]
fn a_flipped_byte_in_a_record_is_named_and_the_conversation_moved_aside() {
    let f = fixture();
    let offsets = conv(&f, "bad", 3, &|i| format!("bad {i}"));
    conv(&f, "good", 2, &|i| format!("good {i}"));
    let log = f.root.join("conversations/bad/events.log");
    flip(&log, offsets[1] + 20);
    let r = run(&f, false, false);
    let d = damage(&r);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(
        (d[0].kind, d[0].offset),
        ("damaged-record", Some(offsets[1]))
    );
    assert!(d[0]
        .path
        .as_ref()
        .is_some_and(|p| p.ends_with("conversations/bad/events.log")));
    let r = run(&f, false, true);
    assert!(
        r.repairs
            .iter()
            .any(|l| l.contains("moved conversation bad")),
        "{:?}",
        r.repairs
    );
    assert_repaired_clean(&f, "good");
    // Moved, not deleted: the log is in quarantine with a note.
    let q = std::fs::read_dir(f.root.join("quarantine/conversations"))
        .expect("list")
        .flatten()
        .next()
        .expect("one")
        .path();
    assert!(q.join("events.log").exists() && q.join("NOTE").exists());
    // gc keeps what the quarantined conversation references.
    f.store
        .gc(
            crate::gc::GcOptions {
                grace: std::time::Duration::ZERO,
                ..Default::default()
            },
            &mut |_| {},
        )
        .expect("gc");
    assert!(blob_file(&f, "bad 0").exists());
}

#[test]
fn a_torn_tail_is_named_and_cut() {
    let f = fixture();
    conv(&f, "torn", 2, &|i| format!("torn {i}"));
    let log = f.root.join("conversations/torn/events.log");
    let len = std::fs::metadata(&log).expect("stat").len();
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut fh| {
            use std::io::Write;
            fh.write_all(&[7u8; 30])
        })
        .expect("append junk");
    let r = run(&f, false, false);
    // What an append that did not complete leaves (a crash, a full disk)
    // is not damage: a warning, and fsck is clean.
    assert!(damage(&r).is_empty(), "{:?}", r.findings);
    let t = of_kind(&r, "torn-tail");
    assert_eq!(
        (t.len(), t[0].severity, t[0].offset),
        (1, Severity::Warning, Some(len))
    );
    assert!(t[0].message.contains("full disk"), "{}", t[0].message);
    assert!(r.is_clean());
    let r = run(&f, false, true);
    assert!(
        r.repairs
            .iter()
            .any(|l| l.contains("cut a torn tail of 30 bytes")),
        "{:?}",
        r.repairs
    );
    assert_eq!(std::fs::metadata(&log).expect("stat").len(), len);
    // Never cut without a copy.
    let copies: Vec<_> = std::fs::read_dir(f.root.join("quarantine/conversations"))
        .expect("quarantine")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("torn.tail-{len}."))
        })
        .map(|e| e.path())
        .collect();
    assert_eq!(copies.len(), 2, "the copy and its note: {copies:?}");
    assert!(copies
        .iter()
        .any(|p| std::fs::read(p).ok() == Some(vec![7u8; 30])));
    let after = run(&f, true, false);
    assert!(after.is_clean());
    readable(&f, "torn");
}

#[test]
fn a_missing_blob_is_named_with_its_reference() {
    let f = fixture();
    let offsets = conv(&f, "m", 2, &|i| format!("missing {i}"));
    conv(&f, "ok", 1, &|_| "fine".into());
    std::fs::remove_file(blob_file(&f, "missing 1")).expect("remove");
    let r = run(&f, false, false);
    let d = damage(&r);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].kind, "missing-blob");
    assert_eq!(d[0].offset, Some(offsets[1]));
    assert_eq!(d[0].blob, Some(jpstore_blobstore::BlobId::of(b"missing 1")));
    run(&f, false, true);
    assert_repaired_clean(&f, "ok");
}

#[test]
fn a_corrupted_blob_is_found_by_reading_data() {
    let f = fixture();
    conv(&f, "c", 2, &|i| {
        format!("corrupt me {i} {}", "x".repeat(50))
    });
    conv(&f, "ok", 1, &|_| "fine".into());
    let file = blob_file(&f, &format!("corrupt me 0 {}", "x".repeat(50)));
    let len = std::fs::metadata(&file).expect("stat").len();
    flip(&file, len - 2);
    let r = run(&f, true, false);
    let d = damage(&r);
    assert!(
        d.iter().any(|x| x.kind == "damaged-blob"
            && x.blob
                == Some(jpstore_blobstore::BlobId::of(
                    format!("corrupt me 0 {}", "x".repeat(50)).as_bytes()
                ))),
        "{d:?}"
    );
    let r = run(&f, true, true);
    assert!(
        r.repairs.iter().any(|l| l.contains("quarantine/blobs")),
        "{:?}",
        r.repairs
    );
    assert_repaired_clean(&f, "ok");
}

#[test]
fn a_corrupted_pack_index_is_named_and_moved_aside() {
    let f = fixture();
    // Many new blobs in one append: a pack.
    let id = ConversationId::parse("p").expect("id");
    let mut w = f
        .store
        .create(NewConversation {
            id: Some(id),
            ..Default::default()
        })
        .expect("create");
    let mut text = String::from("{\"type\":\"turn_start\"}\n");
    for i in 0..8 {
        text.push_str(&format!(
            "{{\"type\":\"tool_call_request\",\"id\":\"c{i}\",\"name\":\"t\",\"arguments\":{{}}}}\n\
             {{\"type\":\"tool_call_response\",\"id\":\"c{i}\",\"content\":\"packed {i}\"}}\n"
        ));
    }
    w.append(input(&text)).expect("append");
    drop(w);
    conv(&f, "ok", 1, &|_| "fine".into());
    let idx = std::fs::read_dir(f.root.join("blobs/packs"))
        .expect("list")
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "idx"))
        .expect("an index");
    flip(&idx, 40);
    // A new process: the damaged index is found when packs are loaded, and
    // does not make the store unusable.
    let mut f = f;
    f.store = Store::open_dir(&f.root, StoreOptions::default())
        .expect("a damaged index does not stop the store from opening");
    // Named with and without reading data.
    for read_data in [false, true] {
        let r = run(&f, read_data, false);
        let d = damage(&r);
        let named: Vec<_> = d
            .iter()
            .filter(|x| {
                x.kind == "damaged-pack"
                    && x.path
                        .as_ref()
                        .is_some_and(|p| p.ends_with(idx.file_name().expect("name")))
            })
            .collect();
        assert_eq!(named.len(), 1, "read_data {read_data}: {d:?}");
    }
    let r = run(&f, true, true);
    assert!(
        r.repairs.iter().any(|l| l.contains(".idx")),
        "{:?}",
        r.repairs
    );
    // In quarantine under its own name (not run together with `packs`).
    let name = idx.file_name().expect("name").to_string_lossy().to_string();
    let quarantined: Vec<String> = std::fs::read_dir(f.root.join("quarantine/blobs"))
        .expect("list the quarantine")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    assert!(
        quarantined
            .iter()
            .any(|q| q.starts_with(&format!("{name}."))),
        "{name} in {quarantined:?}"
    );
    assert_repaired_clean(&f, "ok");
}

#[test]
fn an_open_writer_does_not_make_fsck_wait_or_report_its_record_in_flight() {
    let f = fixture();
    conv(&f, "busy", 1, &|_| "busy".into());
    let writer = f
        .store
        .writer(&ConversationId::parse("busy").expect("id"))
        .expect("writer");
    // Bytes after the last record while the writer holds the lock: what a
    // record being written looks like.
    let log = f.root.join("conversations/busy/events.log");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&log)
        .and_then(|mut fh| {
            use std::io::Write;
            fh.write_all(&[1u8; 9])
        })
        .expect("append");
    let r = run(&f, false, false);
    assert!(r.is_clean(), "{:?}", r.findings);
    assert!(r.findings.iter().any(|x| x.kind == "writer-active"));
    drop(writer);
    let r = run(&f, false, false);
    assert!(
        r.findings
            .iter()
            .any(|x| x.kind == "torn-tail" && x.severity == Severity::Warning),
        "once the writer is gone it is a torn tail: {:?}",
        r.findings
    );
}

#[test]
fn references_and_orphans_are_counted_alike_with_and_without_reading_data() {
    let f = fixture();
    conv(&f, "a", 3, &|i| format!("shared {i}"));
    // The same contents again, and one missing.
    conv(&f, "b", 4, &|i| format!("shared {i}"));
    std::fs::remove_file(blob_file(&f, "shared 3")).expect("remove");
    f.store.blobs().put(b"orphan one").expect("put");
    f.store.blobs().put(b"orphan two").expect("put");
    let quick = run(&f, false, false);
    let full = run(&f, true, false);
    assert_eq!(quick.references, full.references);
    assert_eq!(
        quick.findings, full.findings,
        "the same findings in the same order"
    );
    let before = quick.references;
    // One more distinct reference, none new orphaned.
    conv(&f, "c", 1, &|_| "new content".into());
    assert_eq!(run(&f, true, false).references, before + 1);
    let orphans = of_kind(&full, "orphan-blobs");
    assert_eq!(orphans.len(), 1);
    assert!(
        orphans[0].message.starts_with("2 blobs"),
        "{}",
        orphans[0].message
    );
    let d = damage(&full);
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].kind, "missing-blob");
    assert_eq!(d[0].conversation.as_deref(), Some("b"));
}

#[test]
fn an_undo_naming_a_compaction_not_made_yet_is_damage() {
    let f = fixture();
    conv(&f, "u", 2, &|i| format!("content {i}"));
    let id = ConversationId::parse("u").expect("id");
    // Written as an older build accepted it: the undo first, then the
    // compaction it revokes as soon as it is made.
    let text = "{\"type\":\"compaction_undo\",\"undoes\":0}\n\
                {\"type\":\"compaction\",\"from_turn\":0,\"to_turn\":0,\"strip_reasoning\":true}";
    let entries: Vec<Entry> = input(text)
        .into_iter()
        .map(|e| {
            e.try_map_content(&mut |_| Err::<crate::event::BlobRef, ()>(()))
                .expect("no content")
        })
        .collect();
    let offset = f
        .store
        .writer(&id)
        .expect("writer")
        .append_stored(&entries)
        .expect("appended without the append checks");
    let r = run(&f, false, false);
    let found = of_kind(&r, "undo-target");
    assert_eq!(found.len(), 1, "{:?}", r.findings);
    assert_eq!(found[0].severity, Severity::Damage);
    assert_eq!(found[0].offset, Some(offset));
    assert!(
        found[0].message.contains("compaction 0")
            && found[0].message.contains("no compaction before it"),
        "{}",
        found[0].message
    );
    assert!(!r.is_clean());
    let repaired = run(&f, false, true);
    assert!(
        repaired
            .repairs
            .iter()
            .any(|r| r.contains("conversation u")),
        "{:?}",
        repaired.repairs
    );
    assert!(run(&f, false, false).is_clean());
}

fn is_interrupted(e: &FsckError) -> bool {
    matches!(
        e,
        FsckError::Store(Error::Interrupted | Error::Blob(jpstore_blobstore::Error::Interrupted))
    )
}

#[test]
fn an_interrupt_stops_fsck_between_conversations_and_blob_checks() {
    let f = fixture();
    for name in ["a", "b", "c", "d", "e"] {
        conv(&f, name, 2, &|i| format!("{name} content {i}"));
    }
    // Set before the run: nothing is looked at, nothing repaired.
    let log = f.root.join("conversations/c/events.log");
    flip(&log, 20);
    let damaged = std::fs::read(&log).expect("log");
    let set = AtomicBool::new(true);
    let options = FsckOptions {
        read_data: true,
        repair: true,
    };
    let e = f
        .store
        .fsck_interruptible(options, &mut |_| {}, &set)
        .expect_err("interrupted before it starts");
    assert!(is_interrupted(&e), "{e}");
    assert_eq!(
        std::fs::read(&log).expect("log"),
        damaged,
        "nothing repaired"
    );

    // Set by the first conversation's progress: the walk stops before the
    // last conversation.
    let flag = AtomicBool::new(false);
    let mut checked = 0;
    let e = f
        .store
        .fsck_interruptible(
            FsckOptions::default(),
            &mut |p| {
                if let FsckProgress::Conversations(done, _) = p {
                    checked = done;
                    flag.store(true, Ordering::Relaxed);
                }
            },
            &flag,
        )
        .expect_err("interrupted after one conversation");
    assert!(is_interrupted(&e), "{e}");
    assert_eq!(checked, 1, "no conversation checked after the interrupt");

    // Set by the first blob progress of a read of all data.
    let flag = AtomicBool::new(false);
    let e = f
        .store
        .fsck_interruptible(
            FsckOptions {
                read_data: true,
                repair: false,
            },
            &mut |p| {
                if matches!(p, FsckProgress::Blobs(..)) {
                    flag.store(true, Ordering::Relaxed);
                }
            },
            &flag,
        )
        .expect_err("interrupted while reading blobs");
    assert!(is_interrupted(&e), "{e}");

    // Never set: the run ends as `fsck` does.
    let r = f
        .store
        .fsck_interruptible(FsckOptions::default(), &mut |_| {}, &AtomicBool::new(false))
        .expect("a run never interrupted");
    assert_eq!(r.conversations, 5);
}

/// A log of a newer format version (a valid header this build does not
/// know) is reported as unsupported, not as damage: fsck fails, and repair
/// leaves it where it is, byte for byte; the other conversations are
/// checked as usual.
#[test]
fn a_log_of_a_newer_version_is_unsupported_not_damage_and_repair_leaves_it() {
    let f = fixture();
    conv(&f, "newer", 2, &|i| format!("n{i}"));
    conv(&f, "current", 1, &|i| format!("c{i}"));
    let log = f.root.join("conversations/newer/events.log");
    let mut bytes = std::fs::read(&log).expect("read");
    bytes[8..10].copy_from_slice(&3u16.to_le_bytes());
    let crc = crc32fast::hash(&bytes[..12]);
    bytes[12..16].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(&log, &bytes).expect("write");

    for repair in [false, true] {
        let r = run(&f, true, repair);
        assert!(damage(&r).is_empty(), "{:?}", r.findings);
        let found = of_kind(&r, "unsupported-version");
        assert_eq!(found.len(), 1, "{:?}", r.findings);
        assert_eq!(found[0].severity, Severity::Unsupported);
        assert_eq!(found[0].conversation.as_deref(), Some("newer"));
        assert!(
            found[0].message.contains("version 3"),
            "{}",
            found[0].message
        );
        assert!(!r.is_clean() && r.has_unsupported());
        assert!(r.repairs.is_empty(), "{:?}", r.repairs);
        assert_eq!(std::fs::read(&log).expect("read"), bytes, "repair {repair}");
    }
    assert!(
        !f.root.join("quarantine/conversations").exists()
            || std::fs::read_dir(f.root.join("quarantine/conversations"))
                .expect("list")
                .next()
                .is_none()
    );
    readable(&f, "current");
}

/// A repair that cannot write what it must (a full disk: the note of the
/// quarantine, or the whole records it keeps) puts the damaged conversation
/// back as it was, with an error that says so, at every amount of room; a
/// later repair with room completes. (It used to leave the conversation in
/// quarantine alone, and the next fsck called the store clean.)
#[test]
fn a_repair_on_a_full_disk_leaves_the_conversation_in_the_store() {
    use std::sync::Arc;

    use jpstore_blobstore::backend::FileBackend;
    use jpstore_blobstore::storage::{OpenMode, SimStorage, Storage};

    let id = ConversationId::parse("c").expect("id");
    let build = || {
        let sim = SimStorage::new();
        let store = Store::init(
            FileBackend::shared(Arc::new(sim.clone())),
            StoreOptions::default(),
        )
        .expect("init");
        let mut w = store
            .create(NewConversation {
                id: Some(id.clone()),
                ..Default::default()
            })
            .expect("create");
        let offsets: Vec<u64> = (0..3)
            .map(|i| {
                let text = format!("{{\"type\":\"chat_request\",\"content\":\"question {i}\"}}");
                w.append(input(&text)).expect("append").offset
            })
            .collect();
        drop(w);
        // A byte inside the second record: damage before the last record.
        let file = sim.open(&id.log_path(), OpenMode::ReadWrite).expect("open");
        let at = offsets[1] + 24;
        let mut byte = [0u8];
        file.read_at(&mut byte, at).expect("read");
        byte[0] ^= 0x20;
        file.write_at(&byte, at).expect("write");
        (sim, store)
    };
    let repair = FsckOptions {
        read_data: false,
        repair: true,
    };
    let requests = |store: &Store| store.read(&id).expect("read").entries.len();
    let mut refused = 0;
    for budget in [0, 16, 64, 128, 192, 256, 384, 1 << 20] {
        let (sim, store) = build();
        let before = sim.read_file(&id.log_path()).expect("the log");
        sim.fail_writes_after(budget);
        let outcome = store.fsck(repair, &mut |_| {});
        sim.clear_faults();
        if let Err(e) = outcome {
            refused += 1;
            let text = e.to_string();
            assert!(
                matches!(e, FsckError::RepairNotDone { .. })
                    && text.contains("left in the store as it was"),
                "{budget} bytes of room: {text}"
            );
            assert_eq!(
                sim.read_file(&id.log_path()).as_ref(),
                Some(&before),
                "{budget} bytes of room: the log is back as it was"
            );
            let found = store
                .fsck(FsckOptions::default(), &mut |_| {})
                .expect("fsck");
            assert!(
                !found.is_clean() && found.findings.iter().any(|f| f.kind == "damaged-record"),
                "{budget} bytes of room: the damage is still found: {:?}",
                found.findings
            );
            assert!(
                !found.findings.iter().any(|f| f.kind == "leftover"),
                "{budget} bytes of room: the refused repair left {:?}",
                found.findings
            );
            store.fsck(repair, &mut |_| {}).expect("a repair with room");
        }
        // Repaired: the record before the damage is the conversation.
        assert_eq!(requests(&store), 1, "{budget} bytes of room");
        let after = store
            .fsck(FsckOptions::default(), &mut |_| {})
            .expect("fsck");
        assert!(
            after.is_clean(),
            "{budget} bytes of room: {:?}",
            after.findings
        );
    }
    assert!(
        refused >= 2,
        "the note and the kept records both failed to fit at some room"
    );
}

#[test]
fn a_config_toml_that_commands_refuse_is_a_warning_naming_it() {
    let f = fixture();
    conv(&f, "c1", 1, &|_| "x".into());
    let config = f.root.join(crate::store::CONFIG_FILE);
    // Each text, or (`None`) a file one byte over the limit.
    let cases: [(&str, Option<&[u8]>); 4] = [
        ("not UTF-8", Some(b"a = \"\xff\"\n")),
        ("TOML", Some(b"[conversation\n")),
        (
            "keep_last",
            Some(b"[conversation.compaction]\nkeep_last = \"three\"\n"),
        ),
        ("limit", None),
    ];
    for (what, text) in cases {
        match text {
            Some(text) => fs::write(&config, text).expect("write"),
            None => fs::File::create(&config)
                .and_then(|file| file.set_len(crate::store::MAX_CONFIG_FILE + 1))
                .expect("grow"),
        }
        let found = run_anew(&f);
        let warned = of_kind(&found, "workspace-config");
        assert_eq!(warned.len(), 1, "{what}: {:?}", found.findings);
        assert_eq!(warned[0].severity, Severity::Warning);
        assert_eq!(warned[0].path.as_deref(), Some(config.as_path()), "{what}");
        assert!(
            warned[0].message.contains(what),
            "{what}: {}",
            warned[0].message
        );
        assert!(found.is_clean(), "{what}: the data is intact");
    }
    fs::write(&config, b"[conversation.compaction]\nkeep_last = 2\n").expect("write");
    let found = run_anew(&f);
    assert!(
        of_kind(&found, "workspace-config").is_empty(),
        "{:?}",
        found.findings
    );
}

/// The states a repair keeping records can be stopped in (a crash between
/// its steps), each completed by the next repair: the conversation is back
/// with its records before the damage, and its quarantined log keeps the
/// name of a repair done.
#[test]
fn a_repair_stopped_between_its_steps_is_found_and_completed() {
    // Stopped after the move; after the note and the new directory's lock
    // file; after the records were put back, before the last rename.
    for stopped in ["moved", "locked", "restored"] {
        let f = fixture();
        let offsets = conv(&f, "c1", 4, &|i| format!("content {i}"));
        let id = ConversationId::parse("c1").expect("id");
        let log = f.root.join(id.log_path());
        let end = offsets[3];
        let whole = fs::read(&log).expect("read");
        flip(&log, end + 20);
        let q = f.root.join("quarantine/conversations");
        fs::create_dir_all(&q).expect("mkdir");
        let moved = q.join(format!("c1.1795000000-5{}{end}", super::REPAIRING));
        fs::rename(f.root.join(id.dir()), &moved).expect("move");
        if stopped != "moved" {
            fs::write(moved.join("NOTE"), "why: its log is damaged\n").expect("note");
            fs::create_dir(f.root.join(id.dir())).expect("mkdir");
            fs::write(f.root.join(id.dir()).join("events.log.lock"), b"").expect("lock");
        }
        if stopped == "restored" {
            fs::write(&log, &whole[..end as usize]).expect("put back");
        }
        let found = run(&f, false, false);
        let interrupted = of_kind(&found, "interrupted-repair");
        if stopped == "restored" {
            assert!(interrupted.is_empty(), "{stopped}: {:?}", found.findings);
        } else {
            assert_eq!(interrupted.len(), 1, "{stopped}: {:?}", found.findings);
            assert_eq!(interrupted[0].severity, Severity::Damage);
            assert_eq!(interrupted[0].offset, Some(end));
            assert!(!found.is_clean(), "{stopped}");
        }
        let repaired = run(&f, false, true);
        assert_eq!(
            repaired
                .repairs
                .iter()
                .filter(|r| r.starts_with("completed an interrupted repair"))
                .count(),
            usize::from(stopped != "restored"),
            "{stopped}: {:?}",
            repaired.repairs
        );
        assert_eq!(
            fs::read(&log).expect("put back"),
            whole[..end as usize],
            "{stopped}"
        );
        readable(&f, "c1");
        let done = q.join("c1.1795000000-5");
        assert!(
            done.join("events.log").is_file(),
            "{stopped}: renamed as done"
        );
        assert!(done.join("NOTE").is_file(), "{stopped}: with a note");
        assert!(!moved.exists(), "{stopped}");
        let after = run(&f, false, false);
        assert!(after.is_clean(), "{stopped}: {:?}", damage(&after));
    }
}

#[test]
fn a_repair_keeping_records_leaves_the_name_of_a_repair_done() {
    let f = fixture();
    let offsets = conv(&f, "c1", 3, &|i| format!("content {i}"));
    let log = f
        .root
        .join(ConversationId::parse("c1").expect("id").log_path());
    flip(&log, offsets[2] + 20);
    let repaired = run(&f, false, true);
    assert!(!repaired.repairs.is_empty());
    let names: Vec<String> = fs::read_dir(f.root.join("quarantine/conversations"))
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(!names[0].contains(super::REPAIRING), "{names:?}");
    assert!(super::interrupted_repair(&names[0]).is_none());
    assert_repaired_clean(&f, "c1");
    // A name with nothing below it (what a move leaves listed on some
    // object stores) is nothing to put back: no finding, no error.
    let empty = f
        .root
        .join("quarantine/conversations")
        .join(format!("c2.1795000000-7{}16", super::REPAIRING));
    fs::create_dir(&empty).expect("mkdir");
    let found = run(&f, false, false);
    assert!(
        of_kind(&found, "interrupted-repair").is_empty(),
        "{:?}",
        found.findings
    );
    assert!(run(&f, false, true).repairs.is_empty());
    assert!(empty.exists(), "left as it is");
}

#[test]
fn a_pack_with_bytes_appended_is_named_without_reading_data() {
    let f = fixture();
    let items: Vec<Vec<u8>> = (0..20)
        .map(|i| format!("packed object {i}").into_bytes())
        .collect();
    f.store
        .blobs()
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    let pack = fs::read_dir(f.root.join("blobs/packs"))
        .expect("list")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "pack"))
        .expect("a pack");
    assert!(run(&f, false, false).is_clean());
    let len = fs::metadata(&pack).expect("stat").len();
    fs::OpenOptions::new()
        .write(true)
        .open(&pack)
        .and_then(|file| file.set_len(len + (1 << 30)))
        .expect("a sparse tail");
    let found = run_anew(&f);
    let packs = of_kind(&found, "damaged-pack");
    assert_eq!(packs.len(), 1, "{:?}", found.findings);
    assert_eq!(packs[0].path.as_deref(), Some(pack.as_path()));
    assert!(
        packs[0]
            .message
            .contains(&format!("expected a pack of {len} bytes")),
        "{}",
        packs[0].message
    );
    assert!(!found.is_clean());
}
