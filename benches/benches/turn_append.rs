//! A turn-ending append beside any other append, on a conversation of
//! 12,554 events (the size issue 39 measured): `cargo bench -p
//! jpstore-benches --bench turn_append`.
//!
//! An append that completes a turn (its last conversation event is the
//! assistant's message) may call for an automatic compaction (D17); the
//! decision must cost nothing more than the append when automatic
//! compaction is off (the default). Two ways of appending are timed, each
//! with a one-event batch of the same size that completes a turn (a
//! message) or not (reasoning):
//!
//! - `command`: what `jp-store append` does, less the process and the JSON:
//!   the store opened, then [`Store::append_turn`] (the conversation opened,
//!   the batch appended, the decision, the head written);
//! - `held`: an append through a conversation handle held open, as an
//!   agent that embeds the engine keeps it.
//!
//! The operations run interleaved (`timing::interleaved`: one of each per
//! round, shuffled); the medians and the median of the per-round ratios are
//! printed. Stores live below `JPSTORE_BENCH_DIR` if set, else below
//! cargo's `CARGO_TARGET_TMPDIR`.

use jpstore_engine::internal::StoreInterior as _;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use jpstore_benches::bench_dir::{describe, fresh_run_dir};
use jpstore_benches::setup::conversation::{parse, store_with};
use jpstore_benches::timing::interleaved;
use jpstore_benches::ConversationShape;
use jpstore_engine::compaction::no_summarizer;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{Entry, Payload};
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::CutTail;
use jpstore_engine::{ConversationHandle, Store, StoreOptions};
use serde_json::json;

/// Seed of the conversation (the conversation bench's).
const SEED: u64 = 0x6a70_2d63_6f6e_7665;
/// Events of the conversation.
const EVENTS: usize = 12_554;

/// A one-event batch of about 100 bytes of text: the assistant's message
/// (completes a turn) or its reasoning (does not).
fn event(completes: bool) -> Vec<Entry<Payload>> {
    let text = "Done: the test no longer depends on the order of the map; \
                `cargo test` passes 50 times in a row.";
    let field = if completes { "message" } else { "reasoning" };
    vec![parse(&json!({
        "type": "chat_response",
        "timestamp": "2026-06-01 10:00:00.5",
        field: text,
    }))]
}

/// `jp-store append` without the process: the store opened, the batch
/// appended with the automatic compaction it may call for.
fn command(dir: &Path, id: &ConversationId, completes: bool) -> Duration {
    let t = Instant::now();
    let store = Store::open_dir(dir, StoreOptions::default()).expect("open the store");
    let mut on_cut = |_: &CutTail| {};
    let report = store
        .append_turn(
            id,
            event(completes),
            Timestamp::now(),
            &mut on_cut,
            &mut no_summarizer,
        )
        .expect("append");
    black_box(report);
    drop(store);
    t.elapsed()
}

/// One append through the held handle `conversation`.
fn held(conversation: &mut ConversationHandle<'_>, completes: bool) -> Duration {
    let t = Instant::now();
    if completes {
        let report = conversation
            .append_turn(event(true), &mut no_summarizer)
            .expect("append");
        black_box(report);
    } else {
        black_box(conversation.append(event(false)).expect("append"));
    }
    t.elapsed()
}

fn main() {
    let run = fresh_run_dir(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("turn-append-bench"));
    println!("turn_append: {}", describe(&run));
    let entries = ConversationShape::generate(SEED, EVENTS);
    let (dir, store) = store_with(&run, &[("long", &entries), ("held", &entries)]);
    let id = ConversationId::parse("long").expect("an id");
    let conversation = std::cell::RefCell::new(
        store
            .conversation(&ConversationId::parse("held").expect("an id"))
            .expect("open the held conversation"),
    );
    let t = interleaved(
        15,
        200,
        Duration::from_secs(20),
        &mut [
            ("command: append", &mut || command(dir.path(), &id, false)),
            ("command: turn-ending append", &mut || {
                command(dir.path(), &id, true)
            }),
            ("held: append", &mut || {
                held(&mut conversation.borrow_mut(), false)
            }),
            ("held: turn-ending append", &mut || {
                held(&mut conversation.borrow_mut(), true)
            }),
        ],
    );
    conversation.into_inner().close();
    drop(store);
    println!("{} events, {} rounds: {}", EVENTS, t.rounds, t.summary());
    println!(
        "ratios (median per round): {}",
        t.ratios(&[(1, 0), (3, 2), (3, 0)])
    );
    drop(dir);
    let _ = std::fs::remove_dir_all(&run);
}
