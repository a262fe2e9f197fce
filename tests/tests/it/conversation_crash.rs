//! Crashes and faults while a conversation is created and appended to, on
//! the simulated storage.
//!
//! The workload is run once to count its syncs; then, for every sync point
//! `n` and every crash mode, it is replayed on a fresh simulated disk that
//! crashes at the `n`-th sync. After the restart: the store opens, every
//! acknowledged batch is there, in order, with readable content; the batch
//! that was in flight is there whole or not at all; and a new append works.
//! A failure names the sync point and the crash mode.

use jpstore_engine::internal::{ConversationIdInterior as _, StoreInterior as _};
use std::io;

use jpstore_blobstore::storage::sim::{CrashMode, SimStorage};
use jpstore_blobstore::storage::Storage;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Error;
use jpstore_engine::event::Object;
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::Framing;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use jpstore_tests::crash::{modes, options, parse, storage};
use jpstore_tests::{events_of, ts};
use serde_json::{json, Value};

const ID: &str = "crash";

fn id() -> ConversationId {
    ConversationId::parse(ID).expect("id")
}

fn new_conversation() -> NewConversation {
    let mut config = Object::new();
    config.insert("assistant".into(), json!({"model": {"id": "m"}}));
    NewConversation {
        id: Some(id()),
        title: Some("Crash".into()),
        base_config: Some(config),
        ..Default::default()
    }
}

/// The batches of the workload: without content, with one and two new
/// blobs (loose objects), with seven new blobs (a pack), and with content
/// already stored.
fn batches() -> Vec<Vec<Value>> {
    let blocks: Vec<Value> = (0..7)
        .map(|i| json!({"type": "text", "text": format!("block {i} of the packed response\n")}))
        .collect();
    vec![
        vec![
            json!({"type": "turn_start", "timestamp": ts(1)}),
            json!({"type": "chat_request", "timestamp": ts(2), "content": "first question"}),
        ],
        vec![
            json!({"type": "tool_call_request", "timestamp": ts(3), "id": "c1", "name": "read", "arguments": {}}),
            json!({"type": "tool_call_response", "timestamp": ts(4), "id": "c1", "content": "one new blob", "is_error": false}),
        ],
        vec![json!({
            "type": "chat_request", "timestamp": ts(5), "content": "two attachments",
            "resources": [
                {"uri": "file:///a.txt", "text": "attachment a"},
                {"uri": "file:///b.bin", "blob": "AAECA/7/"}
            ]
        })],
        vec![
            json!({"type": "tool_call_request", "timestamp": ts(6), "id": "c2", "name": "grep", "arguments": {"q": "x"}}),
            json!({"type": "tool_call_response", "timestamp": ts(7), "id": "c2", "content": blocks, "is_error": false}),
        ],
        vec![
            json!({"type": "turn_start", "timestamp": ts(8)}),
            json!({"type": "chat_request", "timestamp": ts(9), "content": "again"}),
            json!({"type": "tool_call_request", "timestamp": ts(10), "id": "c3", "name": "read", "arguments": {}}),
            json!({"type": "tool_call_response", "timestamp": ts(11), "id": "c3", "content": "one new blob", "is_error": false}),
        ],
        vec![json!({"type": "chat_response", "timestamp": ts(12), "message": "done"})],
    ]
}

/// A batch appended after recovery, with content new to the store.
fn after_batch() -> Vec<Value> {
    vec![
        json!({"type": "turn_start", "timestamp": ts(30)}),
        json!({"type": "tool_call_request", "timestamp": ts(31), "id": "z", "name": "read", "arguments": {}}),
        json!({"type": "tool_call_response", "timestamp": ts(32), "id": "z", "content": "written after recovery", "is_error": false}),
    ]
}

/// What the workload got acknowledged.
#[derive(Debug, Default)]
struct Acked {
    created: bool,
    batches: Vec<Vec<Value>>,
    /// The batch whose append failed (the workload stops there).
    in_flight: Option<Vec<Value>>,
}

fn workload(store: &Store) -> Acked {
    let mut acked = Acked::default();
    let Ok(mut w) = store.create(new_conversation()) else {
        return acked;
    };
    acked.created = true;
    for batch in batches() {
        match w.append(parse(&batch)) {
            Ok(_) => acked.batches.push(batch),
            Err(_) => {
                acked.in_flight = Some(batch);
                break;
            }
        }
    }
    acked
}

fn export_events(store: &Store, what: &str) -> Option<Vec<Value>> {
    let conv = match store.read(&id()) {
        Ok(c) => c,
        Err(Error::NotFound { .. }) => return None,
        Err(e) => panic!("{what}: read failed: {e}"),
    };
    assert_eq!(
        conv.state.metadata.title(),
        Some("Crash"),
        "{what}: a conversation is never visible without its metadata"
    );
    let doc = conversation_json(store, &conv, ContentMode::Inline)
        .unwrap_or_else(|e| panic!("{what}: content of the conversation unreadable: {e}"));
    Some(events_of(&doc))
}

/// Checks a store after a crash and restart; then appends and reads back.
fn check_recovered(sim: &SimStorage, acked: &Acked, what: &str) {
    let store = Store::open(storage(sim), options())
        .unwrap_or_else(|e| panic!("{what}: the store does not open: {e}"));
    let before: Vec<Value> = acked.batches.iter().flatten().cloned().collect();
    let events = export_events(&store, what);
    match &events {
        None => assert!(
            !acked.created,
            "{what}: the acknowledged conversation is gone"
        ),
        Some(events) => {
            let mut with_in_flight = before.clone();
            if let Some(b) = &acked.in_flight {
                with_in_flight.extend(b.iter().cloned());
            }
            assert!(
                *events == before || *events == with_in_flight,
                "{what}: after recovery the events are neither the {} acknowledged ones nor those \
                 and the whole batch in flight; found {} events:\n{events:#?}",
                before.len(),
                events.len()
            );
        }
    }
    let listed = store
        .ids()
        .unwrap_or_else(|e| panic!("{what}: listing failed: {e}"));
    assert_eq!(
        listed,
        if events.is_some() { vec![id()] } else { vec![] },
        "{what}: listed conversations"
    );

    // A new append after recovery (creating the conversation again if its
    // creation was lost).
    let mut w = match events {
        Some(_) => store
            .conversation(&id())
            .unwrap_or_else(|e| panic!("{what}: writer after recovery failed: {e}")),
        None => store
            .create(new_conversation())
            .unwrap_or_else(|e| panic!("{what}: creation after recovery failed: {e}")),
    };
    w.append(parse(&after_batch()))
        .unwrap_or_else(|e| panic!("{what}: append after recovery failed: {e}"));
    drop(w);
    let mut want = events.unwrap_or_default();
    want.extend(after_batch());
    assert_eq!(
        export_events(&store, what),
        Some(want),
        "{what}: events after the new append"
    );
    let report = store
        .blobs()
        .verify_all(&mut |_| {})
        .unwrap_or_else(|e| panic!("{what}: blob verify failed: {e}"));
    assert!(
        report.is_clean(),
        "{what}: blob damage: {:?}",
        report.problems
    );
}

/// The crash tests' options, creating logs of `framing`.
fn options_of(framing: Framing) -> StoreOptions {
    StoreOptions {
        new_log_framing: framing,
        ..options()
    }
}

#[test]
fn crash_at_every_sync_of_creating_and_appending() {
    crash_at_every_sync_of_creating_and_appending_in(Framing::V2);
}

#[test]
fn crash_at_every_sync_of_creating_and_appending_a_v1_log() {
    crash_at_every_sync_of_creating_and_appending_in(Framing::V1);
}

fn crash_at_every_sync_of_creating_and_appending_in(framing: Framing) {
    let options = || options_of(framing);
    // One clean run counts the syncs and checks the workload itself.
    let sim = SimStorage::new();
    let store = Store::init(storage(&sim), options()).expect("init");
    let start = sim.sync_count();
    let clean = workload(&store);
    let syncs = sim.sync_count() - start;
    assert!(clean.created && clean.in_flight.is_none(), "{clean:?}");
    assert_eq!(clean.batches.len(), batches().len());
    let packs = store.blobs().packs().expect("packs");
    assert_eq!(packs.len(), 1, "the 7-blob batch is stored as one pack");
    drop(store);
    // Creation, the config blob, six appends and at least 2 syncs per new
    // blob: the workload has many sync points.
    assert!(syncs >= 15, "only {syncs} syncs");

    let mut in_flight_whole = 0;
    let mut runs = 0;
    for n in 1..=syncs {
        for mode in modes() {
            let what = format!("{framing:?}: crash at sync {n} of {syncs}, {mode:?}");
            let sim = SimStorage::new();
            let store = Store::init(storage(&sim), options()).expect("init");
            sim.crash_at_sync(n, mode);
            let acked = workload(&store);
            drop(store);
            assert!(sim.is_down(), "{what}: the crash did not happen");
            sim.restart();
            let probe = Store::open(storage(&sim), options()).expect("open");
            if let (Some(events), Some(_)) = (export_events(&probe, &what), &acked.in_flight) {
                let acked_len: usize = acked.batches.iter().map(Vec::len).sum();
                if events.len() > acked_len {
                    in_flight_whole += 1;
                }
            }
            drop(probe);
            check_recovered(&sim, &acked, &what);
            runs += 1;
        }
    }
    assert_eq!(runs, syncs as usize * modes().len());
    // Some crashes hit the moment after a record's sync: the batch survives,
    // unacknowledged. Both outcomes were seen.
    assert!(in_flight_whole > 0, "no run kept an unacknowledged batch");
}

/// A store with the conversation and its first batch acknowledged.
fn started(sim: &SimStorage) -> (Store, Vec<Value>) {
    let store = Store::init(storage(sim), options()).expect("init");
    let first = batches()[0].clone();
    let mut w = store.create(new_conversation()).expect("create");
    w.append(parse(&first)).expect("first append");
    drop(w);
    (store, first)
}

#[test]
fn a_failed_log_fsync_poisons_the_writer_and_the_batch_is_whole_or_absent() {
    for mode in [
        CrashMode::DropUnsynced,
        CrashMode::TearUnsynced { seed: 1 },
        CrashMode::TearUnsynced { seed: 2 },
    ] {
        let what = format!("failed fsync, then crash {mode:?}");
        let sim = SimStorage::new();
        let (store, first) = started(&sim);
        let mut w = store.writer(&id()).expect("writer");
        // No new content: the only sync of this append is the log's.
        let failed =
            vec![json!({"type": "chat_response", "timestamp": ts(40), "message": "lost?"})];
        sim.fail_next_sync(io::ErrorKind::Other);
        let err = w
            .append(parse(&failed))
            .expect_err("append acknowledged despite a failed fsync");
        assert!(matches!(err, Error::SyncFailed { .. }), "{what}: {err}");
        let err = w
            .append(parse(&batches()[5]))
            .expect_err("a poisoned writer appended");
        assert!(matches!(err, Error::Poisoned { .. }), "{what}: {err}");
        drop(w);

        // Without a crash: the failed batch is whole or absent.
        let mut with_failed = first.clone();
        with_failed.extend(failed.iter().cloned());
        let events = export_events(&store, &what).expect("the conversation exists");
        assert!(
            events == first || events == with_failed,
            "{what}: before the crash: {events:#?}"
        );
        drop(store);

        // After a crash too, and the log takes appends again.
        sim.crash(mode);
        let acked = Acked {
            created: true,
            batches: vec![first],
            in_flight: Some(failed),
        };
        check_recovered(&sim, &acked, &what);
    }
}

#[test]
fn a_failed_blob_fsync_fails_the_append_and_appends_nothing() {
    let sim = SimStorage::new();
    let (store, first) = started(&sim);
    let mut w = store.writer(&id()).expect("writer");
    let log_before = sim.read_file(&id().log_path()).expect("the log exists");
    sim.fail_next_sync(io::ErrorKind::Other);
    let err = w
        .append(parse(&batches()[1]))
        .expect_err("append acknowledged despite a failed blob fsync");
    assert!(err.to_string().contains("sync"), "{err}");
    // The blob store refuses further writes; the record was never written.
    let err = w
        .append(parse(&batches()[2]))
        .expect_err("an append with new content after a failed blob fsync");
    assert!(err.to_string().contains("poisoned"), "{err}");
    assert_eq!(
        sim.read_file(&id().log_path()).as_deref(),
        Some(&log_before[..]),
        "the log changed"
    );
    drop(w);
    drop(store);
    sim.crash(CrashMode::DropUnsynced);
    let acked = Acked {
        created: true,
        batches: vec![first],
        in_flight: None,
    };
    check_recovered(&sim, &acked, "failed blob fsync");
}

#[test]
fn a_full_disk_during_the_record_write_leaves_a_torn_tail_that_is_cut() {
    let sim = SimStorage::new();
    let (store, first) = started(&sim);
    let mut w = store.writer(&id()).expect("writer");
    let end = sim.read_file(&id().log_path()).expect("log").len() as u64;
    sim.fail_writes_after(20);
    let failed =
        vec![json!({"type": "chat_response", "timestamp": ts(40), "message": "does not fit"})];
    let err = w
        .append(parse(&failed))
        .expect_err("append on a full disk acknowledged");
    assert!(matches!(err, Error::Io { .. }), "{err}");
    sim.clear_faults();
    let err = w
        .append(parse(&failed))
        .expect_err("a poisoned writer appended");
    assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    drop(w);
    assert_eq!(
        sim.read_file(&id().log_path()).expect("log").len() as u64,
        end + 20,
        "a short write left 20 bytes"
    );
    // Readers do not see the torn record; the next writer cuts it.
    assert_eq!(export_events(&store, "full disk"), Some(first.clone()));
    let mut w = store.writer(&id()).expect("writer after the full disk");
    assert_eq!(w.cut_tail().map(|c| (c.offset, c.len)), Some((end, 20)));
    // The leftover of the failed write is kept, with a note saying what it
    // is (not a crash).
    let copy = w.cut_tail().map(|c| c.copy.clone()).expect("cut");
    assert_eq!(sim.read_file(&copy).map(|b| b.len()), Some(20));
    let note = sim
        .read_file(&std::path::PathBuf::from(format!(
            "{}.note",
            copy.display()
        )))
        .expect("note");
    assert!(String::from_utf8_lossy(&note).contains("full disk"));
    w.append(parse(&failed))
        .expect("append after space was freed");
    drop(w);
    let mut want = first;
    want.extend(failed);
    assert_eq!(export_events(&store, "full disk"), Some(want));
}

/// A batch that is never acknowledged: only a prefix of its record is on
/// disk, as a crash in the middle of its append leaves it.
fn ghost_batch() -> Vec<Value> {
    vec![json!({"type": "chat_request", "timestamp": ts(50), "content": "ghost ".repeat(60)})]
}

/// A store whose conversation holds the first batch, followed by a durable
/// torn tail: all but the last byte of the ghost batch's record.
fn with_torn_tail() -> (SimStorage, Vec<Value>, (u64, u64)) {
    // The ghost's record bytes, from a scratch store (records do not depend
    // on their position).
    let ghost = {
        let sim = SimStorage::new();
        let (store, _) = started(&sim);
        let end = sim.read_file(&id().log_path()).expect("log").len();
        let mut w = store.writer(&id()).expect("writer");
        w.append(parse(&ghost_batch())).expect("ghost append");
        sim.read_file(&id().log_path()).expect("log")[end..].to_vec()
    };
    let sim = SimStorage::new();
    let (store, first) = started(&sim);
    drop(store);
    let end = sim.read_file(&id().log_path()).expect("log").len() as u64;
    let torn = &ghost[..ghost.len() - 1];
    let file = sim
        .open(
            &id().log_path(),
            jpstore_blobstore::storage::OpenMode::ReadWrite,
        )
        .expect("open the log");
    jpstore_blobstore::storage::write_all_at(&*file, torn, end).expect("write the torn tail");
    file.sync_data().expect("sync the torn tail");
    drop(file);
    (sim, first, (end, torn.len() as u64))
}

/// Opens the writer (which cuts the torn tail) and appends batches 1 to 3.
fn recover_and_append(store: &Store, first: &[Value], cut: (u64, u64)) -> Acked {
    let mut acked = Acked {
        created: true,
        batches: vec![first.to_vec()],
        in_flight: None,
    };
    let Ok(mut w) = store.writer(&id()) else {
        return acked;
    };
    assert_eq!(
        w.cut_tail().map(|c| (c.offset, c.len)),
        Some(cut),
        "the torn tail is cut and reported"
    );
    for batch in &batches()[1..4] {
        match w.append(parse(batch)) {
            Ok(_) => acked.batches.push(batch.clone()),
            Err(_) => {
                acked.in_flight = Some(batch.clone());
                break;
            }
        }
    }
    acked
}

#[test]
fn crash_at_every_sync_of_cutting_a_torn_tail_and_appending() {
    let (sim, first, cut) = with_torn_tail();
    let store = Store::open(storage(&sim), options()).expect("open");
    // Readers do not see the torn record.
    assert_eq!(export_events(&store, "torn"), Some(first.clone()));
    let start = sim.sync_count();
    let clean = recover_and_append(&store, &first, cut);
    let syncs = sim.sync_count() - start;
    assert_eq!(clean.batches.len(), 4, "{clean:?}");
    drop(store);
    assert!(syncs >= 8, "only {syncs} syncs");

    for n in 1..=syncs {
        for mode in modes() {
            let what = format!("torn tail recovery: crash at sync {n} of {syncs}, {mode:?}");
            let (sim, first, cut) = with_torn_tail();
            let store = Store::open(storage(&sim), options()).expect("open");
            sim.crash_at_sync(n, mode);
            let acked = recover_and_append(&store, &first, cut);
            drop(store);
            assert!(sim.is_down(), "{what}: the crash did not happen");
            sim.restart();
            // The ghost never comes back, whole or in part.
            let log = sim.read_file(&id().log_path()).expect("log");
            let ghost_text = "ghost ".repeat(60);
            let probe = Store::open(storage(&sim), options()).expect("open");
            if let Some(events) = export_events(&probe, &what) {
                assert!(
                    !events.iter().any(|e| e["content"] == json!(ghost_text)),
                    "{what}: the cut batch is visible again ({} log bytes)",
                    log.len()
                );
            }
            drop(probe);
            check_recovered(&sim, &acked, &what);
        }
    }
}

/// The log's framing version on the simulated disk (as written).
fn log_version(sim: &SimStorage) -> u16 {
    let log = sim.read_file(&id().log_path()).expect("the log exists");
    jpstore_tests::log_version(&log)
}

#[test]
fn crash_at_every_sync_of_an_upgrade() {
    // A version 1 conversation, every batch acknowledged.
    let setup = |sim: &SimStorage| {
        let store = Store::init(storage(sim), options_of(Framing::V1)).expect("init");
        let acked = workload(&store);
        assert!(acked.created && acked.in_flight.is_none(), "{acked:?}");
        acked
    };
    let sim = SimStorage::new();
    let acked = setup(&sim);
    let store = Store::open(storage(&sim), options()).expect("open");
    let start = sim.sync_count();
    let report = jpstore_engine::upgrade::conversation(&store, &id(), false).expect("upgrade");
    assert!(report.upgraded, "{report:?}");
    let syncs = sim.sync_count() - start;
    assert_eq!(log_version(&sim), 2);
    drop(store);
    // The copy of the old log, the new log, its head: several sync points.
    assert!(syncs >= 5, "only {syncs} syncs");
    let mut seen = [false; 2];
    for n in 1..=syncs {
        for mode in modes() {
            let what = format!("upgrade: crash at sync {n} of {syncs}, {mode:?}");
            let sim = SimStorage::new();
            setup(&sim);
            let store = Store::open(storage(&sim), options()).expect("open");
            sim.crash_at_sync(n, mode);
            assert!(
                jpstore_engine::upgrade::conversation(&store, &id(), false).is_err(),
                "{what}: the upgrade survived its crash"
            );
            drop(store);
            assert!(sim.is_down(), "{what}: the crash did not happen");
            sim.restart();
            // The name holds the old log or the new one, whole: the same
            // events, no damage, and appends work.
            let version = log_version(&sim);
            seen[usize::from(version == 2)] = true;
            let store = Store::open(storage(&sim), options()).expect("open");
            let report = jpstore_engine::fsck::run(&store, Default::default(), &mut |_| {})
                .unwrap_or_else(|e| panic!("{what}: fsck failed: {e}"));
            assert!(
                report
                    .findings
                    .iter()
                    .all(|f| f.severity != jpstore_engine::fsck::Severity::Damage),
                "{what}: {:?}",
                report.findings
            );
            drop(store);
            check_recovered(&sim, &acked, &what);
            // An upgrade after the crash completes (or finds it done).
            let store = Store::open(storage(&sim), options()).expect("open");
            jpstore_engine::upgrade::conversation(&store, &id(), false)
                .unwrap_or_else(|e| panic!("{what}: upgrade after the crash failed: {e}"));
            assert_eq!(log_version(&sim), 2, "{what}");
            let mut want: Vec<Value> = acked.batches.iter().flatten().cloned().collect();
            want.extend(after_batch());
            assert_eq!(export_events(&store, &what), Some(want), "{what}");
        }
    }
    assert_eq!(
        seen,
        [true, true],
        "crashes left both the old and the new log"
    );
}

#[test]
fn a_creation_that_fails_on_a_full_disk_leaves_no_directory() {
    // The head, written and synced before the log is published, and the
    // log itself: a full disk at either makes the creation fail.
    for allowed in [0, 40] {
        let sim = SimStorage::new();
        let (store, _) = started(&sim);
        let other = ConversationId::parse("other").expect("id");
        let dir = other.dir();
        sim.fail_writes_after(allowed);
        let err = store
            .create(NewConversation {
                id: Some(other.clone()),
                ..new_conversation()
            })
            .map(drop)
            .expect_err("a creation on a full disk succeeded");
        assert!(matches!(err, Error::Io { .. }), "{allowed}: {err}");
        assert!(
            !sim.exists(&dir),
            "{allowed}: the failed creation left {:?}",
            sim.snapshot()
                .keys()
                .filter(|p| p.starts_with(&dir))
                .collect::<Vec<_>>()
        );
        sim.clear_faults();
        // The id is free, and the conversation already there unharmed.
        store
            .create(NewConversation {
                id: Some(other.clone()),
                ..new_conversation()
            })
            .expect("create once there is room");
        assert!(store.read(&id()).is_ok(), "{allowed}");
    }
}

/// `import --force` of the conversation: a new log for it, held in memory.
fn import_replacing(store: &Store) -> Result<(), jpstore_engine::import::ImportError> {
    let mut fields = Object::new();
    fields.insert("title".into(), json!("Crash"));
    jpstore_engine::import::run(
        store,
        vec![jpstore_engine::import::Prepared {
            id: id(),
            fields,
            base_config: None,
            base_config_text: None,
            entries: parse(&replacement()),
            source_bytes: 0,
        }],
        true,
        &mut |_| {},
    )
    .map(drop)
}

fn replacement() -> Vec<Value> {
    vec![
        json!({"type": "turn_start", "timestamp": ts(60)}),
        json!({"type": "chat_request", "timestamp": ts(61), "content": "imported again"}),
        json!({"type": "tool_call_request", "timestamp": ts(62), "id": "r1", "name": "t", "arguments": {}}),
        json!({"type": "tool_call_response", "timestamp": ts(63), "id": "r1", "content": "a new blob ".repeat(40), "is_error": false}),
    ]
}

#[test]
fn an_import_replacing_a_conversation_stopped_at_any_sync_leaves_the_old_or_the_new_whole() {
    let sim = SimStorage::new();
    let (store, _) = started(&sim);
    let start = sim.sync_count();
    import_replacing(&store).expect("import --force");
    let syncs = sim.sync_count() - start;
    let new = export_events(&store, "clean run").expect("replaced");
    assert_eq!(new, replacement());
    drop(store);
    assert!(syncs >= 4, "only {syncs} syncs");
    let (mut old_seen, mut new_seen) = (0, 0);
    for n in 1..=syncs {
        for mode in modes() {
            let what = format!("import --force: crash at sync {n} of {syncs}, {mode:?}");
            let sim = SimStorage::new();
            let (store, first) = started(&sim);
            sim.crash_at_sync(n, mode);
            // Once the new log is durable the import succeeds, even where
            // its head could not be written.
            let acknowledged = import_replacing(&store).is_ok();
            assert!(sim.is_down(), "{what}: no crash");
            drop(store);
            sim.restart();
            let store = Store::open(storage(&sim), options()).expect("open");
            match export_events(&store, &what) {
                Some(events) if events == first && !acknowledged => old_seen += 1,
                Some(events) if events == replacement() => new_seen += 1,
                other => panic!("{what}: neither the old conversation nor the new: {other:?}"),
            }
            let report = jpstore_engine::fsck::run(
                &store,
                jpstore_engine::fsck::FsckOptions::default(),
                &mut |_| {},
            )
            .expect("fsck");
            assert!(report.is_clean(), "{what}: {:?}", report.findings);
        }
    }
    assert!(
        old_seen > 0 && new_seen > 0,
        "old {old_seen}, new {new_seen}"
    );
}
