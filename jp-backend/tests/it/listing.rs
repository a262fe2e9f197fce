//! JP's listing (`load_conversation_index`, then
//! `load_conversation_metadata_batch`) reads each log once: a conversation
//! whose log has the metadata it had at the backend's last listing keeps
//! the state read then. Never what another writer changed since: each
//! listing sees what a new backend sees, on a directory and on S3.

use crate::common;

use std::path::{Path, PathBuf};

use jp_conversation::{Conversation, ConversationId};
use jp_storage::backend::{ConversationFilter, LoadBackend, PersistBackend, Projection};
use jpstore_jp::JpStoreBackend;

/// The ids of JP's index, and the metadata of a batch.
type Listing = (
    Vec<ConversationId>,
    Vec<(ConversationId, Option<Conversation>)>,
);

/// What JP's `Workspace` reads at start: the index, then the metadata of
/// every conversation of it (and of `more`, ids it may know otherwise).
fn listing(backend: &dyn LoadBackend, more: &[ConversationId]) -> Listing {
    let mut ids: Vec<ConversationId> = backend
        .load_conversation_index(ConversationFilter::default())
        .into_iter()
        .map(|e| e.id)
        .collect();
    let index = ids.clone();
    ids.extend(more.iter().filter(|id| !index.contains(id)));
    let metadata = backend
        .load_conversation_metadata_batch(&ids)
        .into_iter()
        .map(|(id, m)| (id, m.ok()))
        .collect();
    (index, metadata)
}

/// A listing by `a` after each change another backend `b` makes (turns,
/// a title, a new conversation, one removed, a history changed, archived)
/// is what a new backend lists.
fn sees_what_another_wrote(
    a: &JpStoreBackend,
    b: &JpStoreBackend,
    new: &dyn Fn() -> JpStoreBackend,
) {
    let ids: Vec<ConversationId> = (0..4).map(common::id).collect();
    let mut streams: Vec<_> = (0..3).map(|n| common::stream(n + 1, "l")).collect();
    for (n, s) in streams.iter().enumerate() {
        b.write(
            &ids[n],
            &common::metadata(Some("first")),
            s,
            Projection::Projected,
        )
        .expect("a write");
    }
    let (index, _) = listing(a, &ids);
    assert_eq!(index, ids[..3]);
    let check = |what: &str| {
        let ours = listing(a, &ids);
        assert_eq!(ours, listing(&new(), &ids), "after {what}");
        ours
    };
    common::add_turn(&mut streams[0], 1, "more");
    b.write(
        &ids[0],
        &common::metadata(Some("first")),
        &streams[0],
        Projection::Projected,
    )
    .expect("a write");
    let (_, metadata) = check("a turn");
    assert_eq!(
        metadata[0].1.as_ref().map(|m| m.events_count),
        Some(streams[0].len())
    );
    b.write(
        &ids[1],
        &common::metadata(Some("other")),
        &streams[1],
        Projection::Projected,
    )
    .expect("a write");
    let (_, metadata) = check("a title");
    assert_eq!(
        metadata[1]
            .1
            .as_ref()
            .and_then(|m| m.title.clone())
            .as_deref(),
        Some("other")
    );
    b.write(
        &ids[3],
        &common::metadata(None),
        &common::stream(1, "n"),
        Projection::Projected,
    )
    .expect("a write");
    assert_eq!(
        check("a new conversation").0,
        [ids[0], ids[1], ids[2], ids[3]]
    );
    b.remove(&ids[2]).expect("removed");
    let (index, metadata) = check("a removal");
    assert_eq!(index, [ids[0], ids[1], ids[3]]);
    assert_eq!(
        metadata
            .iter()
            .find(|(id, _)| *id == ids[2])
            .map(|(_, m)| m.is_some()),
        Some(false)
    );
    streams[0].retain_last_turns(1);
    b.write(
        &ids[0],
        &common::metadata(Some("first")),
        &streams[0],
        Projection::Projected,
    )
    .expect("a write");
    let (_, metadata) = check("a history changed");
    assert_eq!(
        metadata[0].1.as_ref().map(|m| m.events_count),
        Some(streams[0].len())
    );
    b.archive(&ids[1]).expect("archived");
    assert_eq!(check("an archive").0, [ids[0], ids[3]]);
}

/// Two conversations written to a store at `dir` and listed by its
/// backend: the backend, their ids and that listing.
fn two_listed(dir: &Path) -> (JpStoreBackend, Vec<ConversationId>, Listing) {
    let a = open(dir);
    let ids: Vec<ConversationId> = (0..2).map(common::id).collect();
    for id in &ids {
        a.write(
            id,
            &common::metadata(Some("t")),
            &common::stream(2, "u"),
            Projection::Projected,
        )
        .expect("a write");
    }
    let before = listing(&a, &ids);
    assert_eq!(before.0, ids);
    (a, ids, before)
}

/// The log of `id` in the store at `dir`, its time, and its bytes with
/// one in the middle flipped.
fn damaged_copy(dir: &Path, id: &ConversationId) -> (PathBuf, std::time::SystemTime, Vec<u8>) {
    let log = dir.join(format!("conversations/{}/events.log", id.as_deciseconds()));
    let modified = std::fs::metadata(&log)
        .expect("log")
        .modified()
        .expect("time");
    let mut bytes = std::fs::read(&log).expect("log");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    (log, modified, bytes)
}

fn open(dir: &Path) -> JpStoreBackend {
    JpStoreBackend::open(dir.to_str().expect("utf-8")).expect("a store")
}

#[test]
fn a_listing_sees_what_another_backend_wrote_since_the_last() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    sees_what_another_wrote(&open(&dir), &open(&dir), &|| open(&dir));
}

#[test]
fn a_listing_on_s3_sees_what_another_machine_wrote_since_the_last() {
    let Some(location) = common::s3_location("jp_listing") else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let lease = jpstore_jp::DEFAULT_LEASE;
    let machine =
        |n: usize| common::s3_backend(&location, &tmp.path().join(format!("cache-{n}")), lease);
    let next = std::cell::Cell::new(2);
    sees_what_another_wrote(&machine(0), &machine(1), &|| {
        next.set(next.get() + 1);
        machine(next.get())
    });
}

#[test]
fn a_log_unchanged_since_the_last_listing_is_not_read_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    let (a, ids, before) = two_listed(&dir);
    // The first log damaged in place, its length and time kept: its
    // metadata is what it was.
    let (log, modified, bytes) = damaged_copy(&dir, &ids[0]);
    std::fs::write(&log, &bytes).expect("damaged");
    let file = std::fs::File::options()
        .write(true)
        .open(&log)
        .expect("log");
    file.set_modified(modified).expect("time kept");
    drop(file);
    // Listed as before, not read again; a new backend reads it and leaves
    // it out.
    assert_eq!(listing(&a, &ids), before);
    assert_eq!(listing(&open(&dir), &ids).0, ids[1..]);
    // Once its metadata changes, read again.
    let file = std::fs::File::options()
        .write(true)
        .open(&log)
        .expect("log");
    file.set_modified(modified + std::time::Duration::from_secs(1))
        .expect("time");
    drop(file);
    assert_eq!(listing(&a, &ids).0, ids[1..]);
}

#[test]
fn a_log_replaced_by_another_file_of_its_length_and_time_is_read_again() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("store");
    let (a, ids, _) = two_listed(&dir);
    // The first log replaced, as a rewrite replaces it (a new file renamed
    // over the name), by one of the same length and time whose middle is
    // damaged: a file system's clock may give both the same time.
    let (log, modified, bytes) = damaged_copy(&dir, &ids[0]);
    let other = log.with_file_name("events.log.other");
    std::fs::write(&other, &bytes).expect("the other file");
    let file = std::fs::File::options()
        .write(true)
        .open(&other)
        .expect("the other file");
    file.set_modified(modified).expect("time kept");
    drop(file);
    std::fs::rename(&other, &log).expect("replaced");
    let now = std::fs::metadata(&log).expect("log");
    assert_eq!(
        (now.len(), now.modified().expect("time")),
        (bytes.len() as u64, modified),
        "the same length and time"
    );
    // Read again, as a new backend reads it: left out.
    assert_eq!(listing(&open(&dir), &ids).0, ids[1..]);
    assert_eq!(listing(&a, &ids).0, ids[1..]);
}
