//! Crashes during fork, compaction and gc, on the simulated storage.
//!
//! Each workload is a list of steps, each one acknowledged operation
//! (a fork, an append, a compaction, an undo, a gc run), after a setup that
//! is not crashed. A clean run records what the store shows after each step
//! and counts the syncs of the steps; then, for every sync point `n` and
//! every crash mode, the workload is replayed on a fresh simulated disk
//! that crashes at the `n`-th sync. After the restart:
//!
//! - the store shows exactly the state after the acknowledged steps, or
//!   that with the step in flight done whole: every acknowledged operation
//!   is there and reads back with its content, nothing else is half-visible;
//! - opening a writer on every conversation (the automatic tail repair)
//!   changes nothing visible, and fsck with `read_data` is then clean;
//! - the store takes a new append, and gc with zero grace (which, for the gc
//!   workload, removes all the garbage the crashed run may have left) keeps
//!   everything readable, fsck still clean.
//!
//! A failure names the workload, the step, the sync point and the crash
//! mode with its seed.

use jpstore_engine::internal::StoreInterior as _;
use std::collections::BTreeMap;
use std::time::Duration;

use jpstore_blobstore::storage::sim::SimStorage;
use jpstore_blobstore::BlobId;
use jpstore_engine::compaction::{Bound, CompactRequest};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Error;
use jpstore_engine::event::Object;
use jpstore_engine::export::ContentMode;
use jpstore_engine::gc::GcOptions;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{NewConversation, Store};
use jpstore_tests::crash::{modes, options, parse, storage};
use jpstore_tests::{assert_fsck_clean, events_of, ts};
use serde_json::{json, Value};

const SRC: &str = "src";

fn id(name: &str) -> ConversationId {
    ConversationId::parse(name).expect("id")
}

/// The time every step is done at, so that replays are identical.
fn now() -> Timestamp {
    Timestamp::parse("2026-05-29 12:00:00.0").expect("timestamp")
}

/// What a step does (each operation has its own error type).
type Operation = Box<dyn Fn(&Store) -> Result<(), Box<dyn std::error::Error>>>;

/// One acknowledged operation of a workload.
struct Step {
    name: &'static str,
    run: Operation,
}

fn step<E: std::error::Error + 'static>(
    name: &'static str,
    run: impl Fn(&Store) -> Result<(), E> + 'static,
) -> Step {
    Step {
        name,
        run: Box::new(move |store| run(store).map_err(Into::into)),
    }
}

struct Workload {
    name: &'static str,
    /// Builds the store the steps start from (not crashed).
    setup: fn(&Store),
    steps: Vec<Step>,
    /// Blobs that must be gone after a final gc with zero grace, unless a
    /// conversation still references them.
    garbage: Vec<BlobId>,
}

/// What the store shows: each conversation's title and events (content
/// inline, so every blob is read).
type State = BTreeMap<String, (Option<String>, Vec<Value>)>;

fn state(store: &Store, what: &str) -> State {
    let ids = store
        .ids()
        .unwrap_or_else(|e| panic!("{what}: listing failed: {e}"));
    ids.into_iter()
        .map(|id| {
            let conv = store
                .read(&id)
                .unwrap_or_else(|e| panic!("{what}: reading {id} failed: {e}"));
            let doc = conversation_json(store, &conv, ContentMode::Inline)
                .unwrap_or_else(|e| panic!("{what}: content of {id} unreadable: {e}"));
            let title = conv.state.metadata.title().map(str::to_owned);
            (id.to_string(), (title, events_of(&doc)))
        })
        .collect()
}

fn create(store: &Store, name: &str, batches: &[Vec<Value>]) {
    let mut config = Object::new();
    config.insert("assistant".into(), json!({"model": {"id": "m"}}));
    config.insert(
        "conversation".into(),
        json!({"compaction": {"profiles": {"heavy": {"summary": {"policy": "summarize"}}}}}),
    );
    let mut w = store
        .create(NewConversation {
            id: Some(id(name)),
            title: Some(format!("conversation {name}")),
            base_config: Some(config),
            ..Default::default()
        })
        .expect("create");
    for batch in batches {
        w.append(parse(batch)).expect("append");
    }
}

fn text_blocks(prefix: &str, n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| json!({"type": "text", "text": format!("{prefix} {i}\n")}))
        .collect()
}

fn tool_call(call: &str, t: u64, content: Value) -> Vec<Value> {
    vec![
        json!({"type": "tool_call_request", "timestamp": ts(t), "id": call, "name": "read", "arguments": {}}),
        json!({"type": "tool_call_response", "timestamp": ts(t + 1), "id": call, "content": content, "is_error": false}),
    ]
}

/// The source conversation: three turns, a loose blob, a pack of seven
/// blobs, reasoning, and a config delta (so that a fork of the last turn
/// starts from another base config).
fn source(store: &Store) {
    let mut turn0 = vec![
        json!({"type": "turn_start", "timestamp": ts(1)}),
        json!({"type": "chat_request", "timestamp": ts(2), "content": "first question"}),
    ];
    turn0.extend(tool_call("c1", 3, json!("file one\n")));
    turn0.push(json!({"type": "chat_response", "timestamp": ts(5), "message": "answer one"}));
    let mut turn1 = vec![
        json!({"type": "turn_start", "timestamp": ts(6)}),
        json!({"type": "config_delta", "timestamp": ts(7), "delta": {"assistant": {"model": {"id": "m2"}}}}),
        json!({"type": "chat_request", "timestamp": ts(8), "content": "second question"}),
        json!({"type": "chat_response", "timestamp": ts(9), "reasoning": "thinking two"}),
    ];
    turn1.extend(tool_call(
        "c2",
        10,
        Value::Array(text_blocks("packed block", 7)),
    ));
    turn1.push(json!({"type": "chat_response", "timestamp": ts(12), "message": "answer two"}));
    let turn2 = vec![
        json!({"type": "turn_start", "timestamp": ts(13)}),
        json!({"type": "chat_request", "timestamp": ts(14), "content": "third question"}),
        json!({"type": "chat_response", "timestamp": ts(15), "message": "answer three"}),
    ];
    create(store, SRC, &[turn0, turn1, turn2]);
}

fn append(store: &Store, name: &str, batch: &[Value]) -> Result<(), Error> {
    store.writer(&id(name))?.append(parse(batch)).map(|_| ())
}

fn fork_workload() -> Workload {
    Workload {
        name: "fork",
        setup: source,
        steps: vec![
            step("fork the whole conversation", |s| {
                s.fork(&id(SRC), None, Some(id("f1")), now()).map(drop)
            }),
            step("append to the fork", |s| {
                let mut batch = vec![json!({"type": "turn_start", "timestamp": ts(20)})];
                batch.extend(tool_call("f", 21, json!("written to the fork")));
                append(s, "f1", &batch)
            }),
            step("fork the last turn", |s| {
                s.fork(&id(SRC), Some(1), Some(id("f2")), now()).map(drop)
            }),
            step("fork the fork under a generated id", |s| {
                s.fork(&id("f1"), None, None, now()).map(drop)
            }),
        ],
        garbage: Vec::new(),
    }
}

fn compaction_workload() -> Workload {
    let compact = |s: &Store, request: CompactRequest| {
        let mut summarize = |_: &jpstore_engine::internal::config::SummaryTable,
                             raw: &[jpstore_engine::event::Entry]| {
            Ok(format!("a summary of {} raw entries", raw.len()))
        };
        s.compact(&id(SRC), &request, now(), &mut summarize)
            .map(drop)
    };
    Workload {
        name: "compaction",
        setup: source,
        steps: vec![
            step("compact turns 0 to 1", move |s| {
                compact(
                    s,
                    CompactRequest {
                        from: Some(Bound::Absolute(0)),
                        to: Some(Bound::Absolute(1)),
                        ..Default::default()
                    },
                )
            }),
            step("summarize all but the last turn", move |s| {
                compact(
                    s,
                    CompactRequest {
                        profile: Some("heavy".into()),
                        keep_last: Some(1),
                        ..Default::default()
                    },
                )
            }),
            step("undo the last compaction", |s| {
                s.undo_compaction(&id(SRC), None, now()).map(drop)
            }),
            step("undo the first compaction", |s| {
                s.undo_compaction(&id(SRC), Some(1), now()).map(drop)
            }),
        ],
        garbage: Vec::new(),
    }
}

/// The source, and garbage of every kind: a loose orphan, the loose blob
/// and the pack of a removed conversation, and a pack of which a removed
/// conversation referenced five blobs of seven (gc rewrites it).
fn garbage_setup(store: &Store) {
    source(store);
    let mut doomed = vec![json!({"type": "turn_start", "timestamp": ts(1)})];
    doomed.extend(tool_call("d1", 2, json!("doomed loose content")));
    let packed = tool_call("d2", 4, Value::Array(text_blocks("doomed pack block", 7)));
    create(store, "doomed1", &[doomed, packed]);
    let mut shared = vec![json!({"type": "turn_start", "timestamp": ts(1)})];
    shared.extend(tool_call(
        "s1",
        2,
        Value::Array(text_blocks("shared block", 7)),
    ));
    create(store, "doomed2", &[shared]);
    let mut keeper = vec![json!({"type": "turn_start", "timestamp": ts(1)})];
    keeper.extend(tool_call(
        "k1",
        2,
        Value::Array(text_blocks("shared block", 2)),
    ));
    create(store, "keeper", &[keeper]);
    store.blobs().put(b"an orphan").expect("put");
    store.remove(&id("doomed1")).expect("rm");
    store.remove(&id("doomed2")).expect("rm");
    let packs = store.blobs().packs().expect("packs");
    assert_eq!(packs.len(), 3, "the setup makes three packs");
    for blob in garbage_ids() {
        assert!(store.blobs().exists(&blob).expect("exists"), "{blob}");
    }
}

fn garbage_ids() -> Vec<BlobId> {
    let mut texts: Vec<String> = vec!["doomed loose content".into(), "an orphan".into()];
    texts.extend((0..7).map(|i| format!("doomed pack block {i}\n")));
    texts.extend((2..7).map(|i| format!("shared block {i}\n")));
    texts.iter().map(|t| BlobId::of(t.as_bytes())).collect()
}

/// gc with no grace period that rewrites every pack holding garbage,
/// whatever its live share: gc's merge (2.11) may put the garbage of a
/// rewritten pack beside live objects in one pack (as it does when packs
/// of version 2 are small enough to break the geometric rule), and the
/// default share would keep it there for a later gc.
fn zero_grace() -> GcOptions {
    GcOptions {
        grace: Duration::ZERO,
        rewrite_below: 1.0,
        ..Default::default()
    }
}

fn gc_workload() -> Workload {
    Workload {
        name: "gc",
        setup: garbage_setup,
        steps: vec![
            step("gc with zero grace", |s| {
                jpstore_engine::gc::run(s, zero_grace(), &mut |_| {}).map(drop)
            }),
            step("append content that was garbage", |s| {
                let mut batch = vec![json!({"type": "turn_start", "timestamp": ts(20)})];
                batch.extend(tool_call("k2", 21, json!("shared block 3\n")));
                append(s, "keeper", &batch)
            }),
            step("remove a conversation", |s| s.remove(&id("keeper"))),
            step("gc again", |s| {
                jpstore_engine::gc::run(s, zero_grace(), &mut |_| {}).map(drop)
            }),
        ],
        garbage: {
            let mut ids = garbage_ids();
            ids.extend((0..2).map(|i| BlobId::of(format!("shared block {i}\n").as_bytes())));
            ids
        },
    }
}

fn fresh(w: &Workload) -> (SimStorage, Store) {
    let sim = SimStorage::new();
    let store = Store::init(storage(&sim), options()).expect("init");
    (w.setup)(&store);
    (sim, store)
}

/// Runs the steps until one fails; returns how many were acknowledged.
fn run_steps(w: &Workload, store: &Store) -> usize {
    w.steps
        .iter()
        .take_while(|s| (s.run)(store).is_ok())
        .count()
}

/// A batch appended after recovery, with content new to the store.
fn after_batch() -> Vec<Value> {
    let mut batch = vec![json!({"type": "turn_start", "timestamp": ts(30)})];
    batch.extend(tool_call("z", 31, json!("written after recovery")));
    batch
}

/// The checks after a crash during step `acked` (0-based) and a restart.
fn check_recovered(sim: &SimStorage, w: &Workload, states: &[State], acked: usize, what: &str) {
    let store = Store::open(storage(sim), options())
        .unwrap_or_else(|e| panic!("{what}: the store does not open: {e}"));
    let seen = state(&store, what);
    let in_flight = states.get(acked + 1);
    assert!(
        seen == states[acked] || Some(&seen) == in_flight,
        "{what}: the store shows neither the state after the {acked} acknowledged steps nor \
         that with step {:?} done whole.\nseen: {seen:#?}\nacknowledged: {:#?}",
        w.steps.get(acked).map(|s| s.name),
        states[acked]
    );
    // The automatic tail repair: every writer cuts what its log has torn.
    for conv in store.ids().unwrap_or_else(|e| panic!("{what}: ls: {e}")) {
        drop(
            store
                .writer(&conv)
                .unwrap_or_else(|e| panic!("{what}: writer of {conv} after recovery: {e}")),
        );
    }
    assert_eq!(
        state(&store, what),
        seen,
        "{what}: the tail repair changed what is seen"
    );
    assert_fsck_clean(&store, what);

    // The store goes on: a new append, then gc with zero grace.
    append(&store, SRC, &after_batch())
        .unwrap_or_else(|e| panic!("{what}: append after recovery failed: {e}"));
    jpstore_engine::gc::run(&store, zero_grace(), &mut |_| {})
        .unwrap_or_else(|e| panic!("{what}: gc after recovery failed: {e}"));
    let mut want = seen;
    if let Some((_, events)) = want.get_mut(SRC) {
        events.extend(after_batch());
    }
    assert_eq!(
        state(&store, what),
        want,
        "{what}: after a new append and gc"
    );
    let (live, _) = store
        .referenced_blobs(&mut |_| {})
        .unwrap_or_else(|e| panic!("{what}: marking failed: {e}"));
    for blob in w.garbage.iter().filter(|b| !live.contains(b)) {
        assert!(
            !store.blobs().exists(blob).expect("exists"),
            "{what}: garbage {blob} left after gc"
        );
    }
    assert_fsck_clean(&store, what);
}

fn crash_at_every_sync(w: &Workload) {
    // A clean run: the state after each step, and the syncs of the steps
    // (counted in a run of their own, with no reads in between).
    let (_sim, store) = fresh(w);
    let mut states = vec![state(&store, w.name)];
    for s in &w.steps {
        (s.run)(&store).unwrap_or_else(|e| panic!("{}: {}: {e}", w.name, s.name));
        states.push(state(&store, w.name));
    }
    drop(store);
    let (sim, store) = fresh(w);
    let start = sim.sync_count();
    assert_eq!(run_steps(w, &store), w.steps.len());
    let syncs = sim.sync_count() - start;
    drop(store);
    check_recovered(
        &sim,
        w,
        &states,
        w.steps.len(),
        &format!("{}: no crash", w.name),
    );
    assert!(
        syncs >= w.steps.len() as u64,
        "{}: only {syncs} syncs",
        w.name
    );

    let mut runs = 0;
    let mut outcomes = BTreeMap::new();
    for n in 1..=syncs {
        for mode in modes() {
            let (sim, store) = fresh(w);
            sim.crash_at_sync(n, mode);
            let acked = run_steps(w, &store);
            drop(store);
            let what = format!(
                "{}: crash at sync {n} of {syncs} (during step {:?}), {mode:?}",
                w.name,
                w.steps.get(acked).map(|s| s.name)
            );
            assert!(sim.is_down(), "{what}: the crash did not happen");
            sim.restart();
            check_recovered(&sim, w, &states, acked, &what);
            *outcomes.entry(acked).or_insert(0) += 1;
            runs += 1;
        }
    }
    assert_eq!(runs, syncs as usize * modes().len());
    // Every step has sync points, and crashes hit each of them.
    assert_eq!(
        outcomes.keys().copied().collect::<Vec<_>>(),
        (0..w.steps.len()).collect::<Vec<_>>(),
        "{}: steps crashed into (step: runs): {outcomes:?}",
        w.name
    );
}

#[test]
fn crash_at_every_sync_of_forks() {
    crash_at_every_sync(&fork_workload());
}

#[test]
fn crash_at_every_sync_of_compactions_and_undos() {
    crash_at_every_sync(&compaction_workload());
}

#[test]
fn crash_at_every_sync_of_gc() {
    crash_at_every_sync(&gc_workload());
}
