//! The contract of [`Backend`] ([`super::contract`]), checked on every
//! implementation of this crate: the local file system, the simulated one
//! and the in-memory object store.

use std::sync::Arc;

use super::contract;
use super::*;
use crate::storage::{LocalStorage, SimStorage, Storage};

/// Runs `check` on a fresh backend of each kind.
fn on_each(check: contract::Check) {
    let dir = tempfile::tempdir().expect("tempdir");
    let local: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir.path()).expect("local"));
    let sim: Arc<dyn Storage> = Arc::new(SimStorage::new());
    check("local", &*FileBackend::shared(local));
    check("sim", &*FileBackend::shared(sim));
    check("memory", &*MemoryBackend::shared());
}

#[test]
fn every_check_is_run_here() {
    assert_eq!(contract::ALL.len(), 10);
}

#[test]
fn put_if_absent_creates_once_and_never_replaces() {
    on_each(contract::put_if_absent_creates_once_and_never_replaces);
}

#[test]
fn an_upload_is_invisible_until_published_and_discarded_if_dropped() {
    on_each(contract::an_upload_is_invisible_until_published_and_discarded_if_dropped);
}

#[test]
fn list_shows_objects_and_prefixes_one_level_down() {
    on_each(contract::list_shows_objects_and_prefixes_one_level_down);
}

#[test]
fn delete_counts_what_it_removed() {
    on_each(contract::delete_counts_what_it_removed);
}

#[test]
fn a_conditional_replace_fails_on_a_version_written_since() {
    on_each(contract::a_conditional_replace_fails_on_a_version_written_since);
}

#[test]
fn a_log_grows_by_appends_and_loses_only_a_cut_tail() {
    on_each(contract::a_log_grows_by_appends_and_loses_only_a_cut_tail);
}

#[test]
fn locks_exclude_as_their_kind_says_and_know_when_their_name_was_replaced() {
    on_each(contract::locks_exclude_as_their_kind_says_and_know_when_their_name_was_replaced);
}

#[test]
fn rename_moves_a_prefix_whole() {
    on_each(contract::rename_moves_a_prefix_whole);
}

#[test]
fn touch_freshens_an_object_and_reports_a_missing_one() {
    on_each(contract::touch_freshens_an_object_and_reports_a_missing_one);
}

#[test]
fn keys_that_leave_the_store_are_refused() {
    on_each(contract::keys_that_leave_the_store_are_refused);
}

#[test]
fn a_durable_replace_survives_a_crash_that_drops_what_was_not_synced() {
    use crate::storage::sim::CrashMode;
    let sim = SimStorage::new();
    let backend = FileBackend::shared(Arc::new(sim.clone()) as Arc<dyn Storage>);
    let key = Path::new("d/head");
    backend.create_prefix(Path::new("d")).expect("prefix");
    backend
        .replace(key, b"old", Path::new("d/head.tmp.1"), Expect::Any, true)
        .expect("first");
    backend
        .replace(key, b"new", Path::new("d/head.tmp.2"), Expect::Any, true)
        .expect("second");
    sim.crash(CrashMode::DropUnsynced);
    sim.restart();
    assert_eq!(
        sim.read_file(key).as_deref(),
        Some(&b"new"[..]),
        "a replace said durable was lost by a crash"
    );
}

/// A file opened for reading on the local file system says its metadata as
/// its open found it: what `head` said of it then, and unlike what `head`
/// says once it was written again. A listing keeps what it read of a file
/// by that metadata without a look of its own.
#[test]
fn a_local_file_opened_for_reading_has_the_metadata_head_gives() {
    let dir = tempfile::tempdir().expect("tempdir");
    let local: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir.path()).expect("local"));
    let backend = FileBackend::shared(local);
    let key = Path::new("d/log");
    backend.create_prefix(Path::new("d")).expect("prefix");
    backend
        .replace(key, b"first", Path::new("d/log.tmp.1"), Expect::Any, false)
        .expect("written");
    let opened = backend.open(key).expect("open");
    let meta = opened.opened_meta().expect("the metadata of the open");
    assert_eq!(meta, backend.head(key).expect("head"));
    let log = backend.open_log(key).expect("open to append");
    log.append(5, b" and more").expect("appended");
    assert_ne!(backend.head(key).expect("head"), meta);
    assert_eq!(opened.opened_meta(), Some(meta), "as its open found it");
    assert_eq!(
        log.as_reader().opened_meta(),
        None,
        "not opened for reading only"
    );
}
