//! Crash and fault behaviour of the blob store, through the simulated storage.
//!
//! For each workload, the test first counts the syncs it performs, then for
//! every sync point `n` and every crash mode replays it on a fresh simulated
//! disk that crashes at the `n`-th sync. After the restart it checks:
//! - every acknowledged put reads back with its content;
//! - every object that is visible at all reads back correctly (a published
//!   name never refers to wrong or partial bytes);
//! - `verify_all` finds no damage.
//!
//! A failure names the workload, the sync point and the crash mode.

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use jpstore_blobstore::storage::sim::{CrashMode, SimStorage};
use jpstore_blobstore::storage::Storage;
use jpstore_blobstore::{BlobId, BlobStore, Compression, Error, Options};

fn options() -> Options {
    Options {
        threads: 2,
        ..Options::default()
    }
}

fn open(sim: &SimStorage) -> Result<BlobStore, Error> {
    open_with(sim, options())
}

fn open_with(sim: &SimStorage, options: Options) -> Result<BlobStore, Error> {
    let storage: Arc<dyn Storage> = Arc::new(sim.clone());
    BlobStore::open(
        jpstore_blobstore::backend::FileBackend::shared(storage.clone()),
        "blobs",
        options,
    )
}

fn content(i: u64, len: usize) -> Vec<u8> {
    let line = format!("line {i}: let value_{i} = compute(index, buffer)?;\n");
    line.as_bytes().iter().copied().cycle().take(len).collect()
}

/// A workload: performs writes on `store`, recording acknowledged content.
type Workload = fn(&BlobStore, &mut HashMap<BlobId, Vec<u8>>);

fn loose_puts(store: &BlobStore, acked: &mut HashMap<BlobId, Vec<u8>>) {
    for i in 0..4u64 {
        let data = content(i, 100 + 300 * i as usize);
        if let Ok(out) = store.put(&data) {
            acked.insert(out.id, data);
        }
    }
    // The same content again: acknowledged without a write.
    let data = content(0, 100);
    if let Ok(out) = store.put(&data) {
        acked.insert(out.id, data);
    }
}

fn batch_puts(store: &BlobStore, acked: &mut HashMap<BlobId, Vec<u8>>) {
    for round in 0..2u64 {
        let items: Vec<Vec<u8>> = (0..6u64).map(|i| content(round * 3 + i, 500)).collect();
        if let Ok(out) = store.put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {}) {
            for (id, data) in out.ids.into_iter().zip(items) {
                acked.insert(id, data);
            }
        }
    }
}

/// `len` bytes that zstd cannot shrink (so they are stored as they are).
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

/// A batch whose pack is large enough (3 MiB) for the writer to sync its
/// temp file early, several times, before the syncs that publish it.
fn large_batch(store: &BlobStore, acked: &mut HashMap<BlobId, Vec<u8>>) {
    let items: Vec<Vec<u8>> = (0..12u64).map(|i| noise(i, 256 << 10)).collect();
    if let Ok(out) = store.put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {}) {
        for (id, data) in out.ids.into_iter().zip(items) {
            acked.insert(id, data);
        }
    }
}

fn sweeps(store: &BlobStore, acked: &mut HashMap<BlobId, Vec<u8>>) {
    // Set-up writes are acknowledged before the sweeps start.
    let items: Vec<Vec<u8>> = (0..8u64).map(|i| content(100 + i, 400)).collect();
    let Ok(batch) = store.put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {}) else {
        return;
    };
    let loose: Vec<(BlobId, Vec<u8>)> = (0..3u64)
        .filter_map(|i| {
            let d = content(200 + i, 300);
            store.put(&d).ok().map(|o| (o.id, d))
        })
        .collect();
    // Keep every other packed object and the last loose one; the rest may go.
    for (i, (id, data)) in batch.ids.iter().zip(&items).enumerate() {
        if i % 2 == 0 {
            acked.insert(*id, data.clone());
        }
    }
    if let Some((id, data)) = loose.last() {
        acked.insert(*id, data.clone());
    }
    let keep: Vec<BlobId> = acked.keys().copied().collect();
    let Some(pack) = batch.pack else { return };
    if store.rewrite_pack(&pack, &|id| keep.contains(id)).is_err() {
        return;
    }
    let doomed: Vec<BlobId> = loose.iter().take(2).map(|(id, _)| *id).collect();
    let _ = store.delete_loose(&doomed);
}

/// Batches of like sizes, each merged with the packs before it as the
/// writer publishes it (format-spec.md 2.11), then gc's merge of what is
/// left.
fn merges(store: &BlobStore, acked: &mut HashMap<BlobId, Vec<u8>>) {
    for round in 0..4u64 {
        let items: Vec<Vec<u8>> = (0..3u64)
            .map(|i| content(300 + round * 10 + i, 400 + 50 * round as usize))
            .collect();
        let Ok(out) = store.put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {}) else {
            return;
        };
        for (id, data) in out.ids.into_iter().zip(items) {
            acked.insert(id, data);
        }
    }
    let _ = store.merge_packs(false);
}

/// Packs of version 2 repacked: a batch of groups large enough to copy
/// (the store re-encodes with the batches' settings), gc's rewrite keeping
/// all of some groups (copied) and a few objects of others (compressed
/// anew), then a second batch and gc's merge of the two packs.
fn repacks(store: &BlobStore, acked: &mut HashMap<BlobId, Vec<u8>>) {
    let items: Vec<Vec<u8>> = (0..600u64).map(|i| content(500 + i, 1500)).collect();
    let Ok(batch) = store.put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {}) else {
        return;
    };
    let keep: HashMap<BlobId, Vec<u8>> = batch
        .ids
        .iter()
        .zip(&items)
        .enumerate()
        .filter(|(i, _)| *i < 300 || i % 5 == 0)
        .map(|(_, (id, data))| (*id, data.clone()))
        .collect();
    acked.extend(keep.iter().map(|(id, data)| (*id, data.clone())));
    let Some(pack) = batch.pack else { return };
    match store.rewrite_pack(&pack, &|id| keep.contains_key(id)) {
        // The first groups of each worker mostly kept, the last ones not.
        Ok(out) => assert!(
            out.groups_copied > 0 && out.groups_encoded > 0,
            "copied {}, encoded {}",
            out.groups_copied,
            out.groups_encoded
        ),
        Err(_) => return,
    }
    let more: Vec<Vec<u8>> = (0..40u64).map(|i| content(900 + i, 700)).collect();
    let Ok(out) = store.put_batch(more.len(), |i| Ok(more[i].clone()), &mut |_| {}) else {
        return;
    };
    acked.extend(out.ids.into_iter().zip(more));
    let _ = store.merge_packs(false);
}

/// The committed pack of version 1 (`tests/fixtures/v1-pack`), published
/// in the store, then upgraded to version 2.
fn upgrade(store: &BlobStore, acked: &mut HashMap<BlobId, Vec<u8>>) {
    let fixture =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-pack/blobs/packs");
    let mut files: Vec<_> = std::fs::read_dir(&fixture)
        .expect("the fixture")
        .map(|e| e.expect("entry").path())
        .collect();
    // The pack before its index, as a writer publishes them.
    files.sort_by_key(|p| p.extension().is_some_and(|x| x == "idx"));
    for (n, file) in files.iter().enumerate() {
        let bytes = std::fs::read(file).expect("read the fixture");
        let name = file.file_name().expect("a name");
        let key = std::path::Path::new("blobs/packs").join(name);
        let scratch = std::path::PathBuf::from(format!("blobs/tmp/fixture-{n}"));
        if store
            .backend()
            .put_if_absent(&key, &bytes, &scratch)
            .is_err()
        {
            return;
        }
    }
    // Published: its objects are the store's.
    if store.refresh_packs().is_err() {
        return;
    }
    for id in store.ids().unwrap_or_default() {
        if let Ok(data) = store.get(&id) {
            acked.insert(id, data);
        }
    }
    assert_eq!(acked.len(), 5, "the fixture's objects");
    let _ = store.upgrade_packs(false, Compression::Fast, &mut |_| {});
}

fn modes() -> Vec<CrashMode> {
    let mut m = vec![CrashMode::DropUnsynced];
    for seed in 0..6 {
        m.push(CrashMode::TearUnsynced { seed });
        m.push(CrashMode::KeepUnsyncedEntries { seed });
    }
    m
}

fn check_after_restart(sim: &SimStorage, acked: &HashMap<BlobId, Vec<u8>>, what: &str) {
    sim.restart();
    let store = open(sim).unwrap_or_else(|e| panic!("{what}: reopen failed: {e}"));
    check_store(&store, acked, what);
}

fn check_store(store: &BlobStore, acked: &HashMap<BlobId, Vec<u8>>, what: &str) {
    for (id, data) in acked {
        let got = store
            .get(id)
            .unwrap_or_else(|e| panic!("{what}: acknowledged blob {id} lost: {e}"));
        assert_eq!(
            &got, data,
            "{what}: acknowledged blob {id} reads back wrong"
        );
    }
    for id in store
        .ids()
        .unwrap_or_else(|e| panic!("{what}: listing failed: {e}"))
    {
        if let Err(e) = store.get(&id) {
            panic!("{what}: visible object {id} does not read back: {e}");
        }
    }
    let report = store
        .verify_all(&mut |_| {})
        .unwrap_or_else(|e| panic!("{what}: verify failed: {e}"));
    assert!(
        report.is_clean(),
        "{what}: damage after recovery: {:?}",
        report.problems
    );
}

fn crash_at_every_sync(name: &str, workload: Workload) {
    crash_at_every_sync_with(name, options(), workload);
}

fn crash_at_every_sync_with(name: &str, options: Options, workload: Workload) {
    // Count the syncs of one clean run.
    let sim = SimStorage::new();
    let store = open_with(&sim, options.clone()).expect("open");
    let before = sim.sync_count();
    let mut acked = HashMap::new();
    workload(&store, &mut acked);
    let syncs = sim.sync_count() - before;
    assert!(syncs > 0, "{name}: the workload performs no sync");

    for n in 1..=syncs {
        for mode in modes() {
            let what = format!("{name}: crash at sync {n} of {syncs}, {mode:?}");
            let sim = SimStorage::new();
            let store = open_with(&sim, options.clone()).expect("open");
            sim.crash_at_sync(n, mode);
            let mut acked = HashMap::new();
            workload(&store, &mut acked);
            drop(store);
            assert!(sim.is_down(), "{what}: the crash did not happen");
            check_after_restart(&sim, &acked, &what);
        }
    }
}

#[test]
fn crash_at_every_sync_of_loose_puts() {
    crash_at_every_sync("loose puts", loose_puts);
}

#[test]
fn crash_at_every_sync_of_batch_puts() {
    crash_at_every_sync("batch puts", batch_puts);
}

#[test]
fn crash_at_every_sync_of_a_large_batch() {
    // The early syncs of the temp pack come first: count them.
    let sim = SimStorage::new();
    let store = open(&sim).expect("open");
    let before = sim.sync_count();
    large_batch(&store, &mut HashMap::new());
    // Two early syncs (after 1 and 2 MiB), then the four of a pack.
    assert!(
        sim.sync_count() - before >= 6,
        "{} syncs",
        sim.sync_count() - before
    );
    crash_at_every_sync("large batch", large_batch);
}

#[test]
fn a_failed_early_sync_of_a_large_batch_is_never_acknowledged() {
    let sim = SimStorage::new();
    let store = open(&sim).expect("open");
    sim.fail_next_sync(io::ErrorKind::Other);
    let mut acked = HashMap::new();
    large_batch(&store, &mut acked);
    assert!(
        acked.is_empty(),
        "a batch was acknowledged despite a failed sync"
    );
    let err = store
        .put(b"after the failure")
        .expect_err("poisoned store accepted a put");
    assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    drop(store);
    sim.crash(CrashMode::DropUnsynced);
    check_after_restart(&sim, &HashMap::new(), "failed early sync");
}

#[test]
fn crash_at_every_sync_of_pack_rewrite_and_loose_delete() {
    crash_at_every_sync("sweeps", sweeps);
}

#[test]
fn crash_at_every_sync_of_merges() {
    // A clean run merges: every batch but the first breaks the rule.
    let sim = SimStorage::new();
    let store = open(&sim).expect("open");
    let mut acked = HashMap::new();
    merges(&store, &mut acked);
    assert_eq!(acked.len(), 12);
    let packs = store.packs().expect("packs").len();
    assert!(packs <= 2, "four batches merged into {packs} packs");
    crash_at_every_sync("merges", merges);
}

#[test]
fn crash_at_every_sync_of_repacks_of_groups() {
    let options = Options {
        repack_compression: Compression::Fast,
        ..options()
    };
    // A clean run copies groups and compresses others anew.
    let sim = SimStorage::new();
    let store = open_with(&sim, options.clone()).expect("open");
    let mut acked = HashMap::new();
    repacks(&store, &mut acked);
    check_store(&store, &acked, "repacks, no crash");
    assert!(store.packs().expect("packs").iter().all(|p| p.version == 2));
    crash_at_every_sync_with("repacks", options, repacks);
}

#[test]
fn crash_at_every_sync_of_an_upgrade_of_a_version_1_pack() {
    let sim = SimStorage::new();
    let store = open(&sim).expect("open");
    let mut acked = HashMap::new();
    upgrade(&store, &mut acked);
    let packs = store.packs().expect("packs");
    assert_eq!(packs.len(), 1);
    assert_eq!(packs[0].version, 2, "upgraded");
    check_store(&store, &acked, "upgrade, no crash");
    crash_at_every_sync("upgrade", upgrade);
}

#[test]
fn a_failed_fsync_poisons_the_store_and_is_never_acknowledged() {
    let sim = SimStorage::new();
    let store = open(&sim).expect("open");
    let kept = store.put(b"before the failure").expect("put").id;
    sim.fail_next_sync(io::ErrorKind::Other);
    let err = store
        .put(b"during the failure")
        .expect_err("put acknowledged despite failed fsync");
    assert!(matches!(err, Error::SyncFailed { .. }), "{err}");
    // Every later write is refused, even one that would not need a sync.
    let err = store
        .put(b"after the failure")
        .expect_err("poisoned store accepted a put");
    assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    let err = store
        .put_batch(1, |_| Ok(b"batch after".to_vec()), &mut |_| {})
        .expect_err("poisoned store accepted a batch");
    assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    // Reads still work; a fresh handle after a crash recovers.
    assert_eq!(store.get(&kept).expect("read"), b"before the failure");
    drop(store);
    sim.crash(CrashMode::DropUnsynced);
    check_after_restart(
        &sim,
        &HashMap::from([(kept, b"before the failure".to_vec())]),
        "after a failed fsync",
    );
}

#[test]
fn a_full_disk_fails_the_put_and_leaves_a_clean_store() {
    let sim = SimStorage::new();
    let store = open(&sim).expect("open");
    let kept = store.put(b"small").expect("put").id;
    sim.fail_writes_after(1000);
    let big = content(1, 200_000);
    let items: Vec<Vec<u8>> = (0..20u64).map(|i| content(i + 50, 5000)).collect();
    let err = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect_err("batch on a full disk succeeded");
    assert!(err.to_string().contains("write"), "{err}");
    let err = store.put(&big).expect_err("put on a full disk succeeded");
    assert!(matches!(err, Error::Io { .. }), "{err}");
    sim.clear_faults();
    // The failed writes left nothing visible; the store takes new writes.
    assert_eq!(store.ids().expect("ids"), vec![kept]);
    let id = store.put(&big).expect("put after space was freed").id;
    assert_eq!(store.get(&id).expect("get"), big);
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
}

#[test]
fn short_writes_are_completed() {
    let sim = SimStorage::new();
    sim.short_writes(true);
    let store = open(&sim).expect("open");
    let data = content(9, 50_000);
    let id = store.put(&data).expect("put").id;
    let items: Vec<Vec<u8>> = (0..10u64).map(|i| content(i, 3000)).collect();
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    sim.crash(CrashMode::DropUnsynced);
    let mut acked: HashMap<BlobId, Vec<u8>> = batch.ids.into_iter().zip(items).collect();
    acked.insert(id, data);
    check_after_restart(&sim, &acked, "short writes");
}

#[test]
fn a_read_error_is_reported_not_hidden() {
    let sim = SimStorage::new();
    let store = open(&sim).expect("open");
    let id = store.put(b"unreadable later").expect("put").id;
    let hex = id.to_hex();
    let path = std::path::PathBuf::from(format!("blobs/objects/{}/{}", &hex[..2], &hex[2..]));
    sim.fail_reads_of(&path).expect("arm read fault");
    let err = store.get(&id).expect_err("read error hidden");
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(err.to_string().contains(&hex[2..]), "{err}");
}
