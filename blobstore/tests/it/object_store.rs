//! The blob store on an object store's semantics (`MemoryBackend`: objects
//! created if absent, read by range, listed by prefix, deleted; no
//! directories, links or file modes): every write and read path works, so
//! the blob store needs nothing that a remote object store lacks.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use jpstore_blobstore::backend::{Backend, MemoryBackend};
use jpstore_blobstore::{BlobId, BlobStore, Compression, Location, Options};

fn open(backend: &MemoryBackend) -> BlobStore {
    let shared: Arc<dyn Backend> = Arc::new(backend.clone());
    BlobStore::open(shared, "blobs", Options::default()).expect("open store")
}

/// Deterministic bytes that compress like text.
fn text(seed: u64, len: usize) -> Vec<u8> {
    let words = [
        "fn ", "let ", "match ", "Some(", "value", ";\n", "{\n", "}\n",
    ];
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % words.len() as u64) as usize].as_bytes());
    }
    out.truncate(len);
    out
}

#[test]
fn loose_and_packed_objects_round_trip_and_deduplicate() {
    let backend = MemoryBackend::new();
    let store = open(&backend);
    let cases = [Vec::new(), b"x".to_vec(), text(1, 3 << 20)];
    for data in &cases {
        let out = store.put(data).expect("put");
        assert!(out.stored);
        assert!(!store.put(data).expect("again").stored, "a dedup hit");
        assert_eq!(store.get(&out.id).expect("get"), *data);
        assert_eq!(store.size(&out.id).expect("size"), data.len() as u64);
        assert!(matches!(
            store.locate(&out.id).expect("locate"),
            Some(Location::Loose(_))
        ));
    }
    let items: Vec<Vec<u8>> = (0..300u64).map(|i| text(i % 250, 2_000)).collect();
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    assert_eq!(batch.new_objects, 250);
    let pack = batch.pack.clone().expect("a pack");
    assert!(backend
        .keys()
        .iter()
        .any(|k| k == &format!("blobs/packs/pack-{pack}.pack")));
    assert!(
        !backend.keys().iter().any(|k| k.contains("/tmp/")),
        "no scratch object is left: {:?}",
        backend.keys()
    );
    // A second handle sees the pack and reads every object.
    let reader = open(&backend);
    for (id, data) in batch.ids.iter().zip(&items) {
        assert_eq!(&reader.get(id).expect("packed get"), data);
        assert!(matches!(
            reader.locate(id).expect("locate"),
            Some(Location::Packed { .. })
        ));
    }
    let report = reader.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.packed_objects, 250);
    assert_eq!(report.loose_objects, 3);
}

#[test]
fn sweeps_merges_and_rewrites_work_on_objects() {
    let backend = MemoryBackend::new();
    let store = open(&backend);
    let mut written = Vec::new();
    for i in 0..40u64 {
        let data = text(10_000 + i, 700);
        store
            .put_batch(1, |_| Ok(data.clone()), &mut |_| {})
            .expect("batch");
        written.push(data);
    }
    assert!(
        store.packs().expect("packs").len() <= 6,
        "small packs are merged: {:?}",
        store.packs()
    );
    store.merge_packs(false).expect("merge");
    let packs = store.packs().expect("packs");
    let largest = packs
        .iter()
        .max_by_key(|p| p.objects)
        .expect("a pack")
        .name
        .clone();
    let in_it: HashSet<BlobId> = store.pack_ids(&largest).expect("ids").into_iter().collect();
    assert!(in_it.len() > 1);
    let keep: HashSet<BlobId> = in_it.iter().step_by(2).copied().collect();
    let out = store
        .rewrite_pack(&largest, &|id| keep.contains(id))
        .expect("rewrite");
    assert_eq!(out.kept_objects, keep.len());
    for data in &written {
        let id = BlobId::of(data);
        let expected = !in_it.contains(&id) || keep.contains(&id);
        assert_eq!(store.exists(&id).expect("exists"), expected);
    }
    let a = store.put(b"loose a").expect("put").id;
    let swept = store.delete_loose(&[a]).expect("sweep");
    assert_eq!((swept.objects, swept.bytes > 0), (1, true));
    assert!(!store.exists(&a).expect("exists"));
    // Old scratch and unindexed pack objects go; young ones stay.
    assert_eq!(store.cleanup_temp(Duration::ZERO).expect("temp").objects, 0);
    backend.set_all_modified(SystemTime::now() - Duration::from_secs(7200));
    assert_eq!(
        store
            .remove_unindexed_packs(Duration::from_secs(3600))
            .expect("unindexed")
            .objects,
        0,
        "every pack has its index"
    );
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
}

#[test]
fn freshen_moves_an_objects_time_forward() {
    let backend = MemoryBackend::new();
    let store = open(&backend);
    let id = store.put(b"kept by a writer").expect("put").id;
    let old = SystemTime::now() - Duration::from_secs(7200);
    backend.set_all_modified(old);
    assert!(store.freshen(&id).expect("freshen"));
    let loose = store.loose_objects().expect("listing");
    assert_eq!(loose.len(), 1);
    assert!(loose[0].modified > old);
    assert!(!store
        .freshen(&BlobId::of(b"never stored"))
        .expect("freshen"));
}

/// Publishes the committed pack of version 1 (`tests/fixtures/v1-pack`)
/// in `backend`, pack first; returns its objects' ids.
fn publish_v1_fixture(backend: &MemoryBackend) {
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-pack/blobs/packs");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the fixture")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort_by_key(|p| p.extension().is_some_and(|x| x == "idx"));
    for (n, file) in files.iter().enumerate() {
        let key = std::path::Path::new("blobs/packs").join(file.file_name().expect("name"));
        let scratch = std::path::PathBuf::from(format!("blobs/tmp/fixture-{n}"));
        backend
            .put_if_absent(&key, &std::fs::read(file).expect("read"), &scratch)
            .expect("publish");
    }
}

#[test]
fn groups_repacks_and_upgrades_work_on_objects() {
    let backend = MemoryBackend::new();
    let shared: Arc<dyn Backend> = Arc::new(backend.clone());
    let options = Options {
        threads: 1,
        group_cache_bytes: 1 << 20,
        repack_compression: Compression::Fast,
        ..Options::default()
    };
    let store = BlobStore::open(Arc::clone(&shared), "blobs", options.clone()).expect("open");
    // 1.5 MB of small objects: several groups of 256 KiB.
    let items: Vec<Vec<u8>> = (0..1500u64).map(|i| text(20_000 + i, 1000)).collect();
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    let packs = store.packs().expect("packs");
    assert_eq!(packs[0].version, 2);
    assert!(packs[0].groups >= 5, "{:?}", packs[0]);
    // A cold read decompresses one group; everything reads within the
    // cache's bound.
    let reader = BlobStore::open(Arc::clone(&shared), "blobs", options.clone()).expect("open");
    assert_eq!(reader.get(&batch.ids[0]).expect("get"), items[0]);
    assert_eq!(reader.group_cache_stats().decompressed, 1);
    for (id, data) in batch.ids.iter().zip(&items) {
        assert_eq!(&reader.get(id).expect("get"), data);
        assert!(reader.group_cache_stats().bytes <= 1 << 20);
    }
    // gc's rewrite: groups of kept objects copied, the rest compressed anew.
    let keep: HashSet<BlobId> = batch
        .ids
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < 750 || i % 4 == 0)
        .map(|(_, id)| *id)
        .collect();
    let out = store
        .rewrite_pack(&packs[0].name, &|id| keep.contains(id))
        .expect("rewrite");
    assert!(out.groups_copied > 0 && out.groups_encoded > 0, "{out:?}");
    // A pack of version 1 beside them, read, then upgraded.
    publish_v1_fixture(&backend);
    store.refresh_packs().expect("refresh");
    let versions = |s: &BlobStore| {
        let mut v: Vec<u8> = s
            .packs()
            .expect("packs")
            .iter()
            .map(|p| p.version)
            .collect();
        v.sort_unstable();
        v
    };
    assert_eq!(versions(&store), vec![1, 2]);
    let v1_ids = store
        .pack_ids(
            &store
                .packs()
                .expect("packs")
                .iter()
                .find(|p| p.version == 1)
                .expect("the pack of version 1")
                .name,
        )
        .expect("ids");
    let v1_data: Vec<Vec<u8>> = v1_ids
        .iter()
        .map(|id| store.get(id).expect("get"))
        .collect();
    let upgraded = store
        .upgrade_packs(false, Compression::Balanced, &mut |_| {})
        .expect("upgrade");
    assert_eq!((upgraded.packs, upgraded.objects), (1, 5));
    assert_eq!(versions(&store), vec![2, 2]);
    // Merges of many small batches, then gc's merge.
    for i in 0..12u64 {
        let data = text(30_000 + i, 800);
        store
            .put_batch(1, |_| Ok(data.clone()), &mut |_| {})
            .expect("batch");
    }
    store.merge_packs(false).expect("merge");
    let after = BlobStore::open(Arc::clone(&shared), "blobs", options).expect("open");
    for (id, data) in batch.ids.iter().zip(&items) {
        if keep.contains(id) {
            assert_eq!(&after.get(id).expect("kept"), data);
        } else {
            assert!(!after.exists(id).expect("exists"));
        }
    }
    for (id, data) in v1_ids.iter().zip(&v1_data) {
        assert_eq!(&after.get(id).expect("upgraded"), data);
    }
    let report = after.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
}

/// A loose object gc moved to its trash on a shared store is read from
/// there by a store that looks in the trash (as the engine opens one on
/// such a backend), until the run puts it back or deletes it; a store that
/// does not look there does not find it.
#[test]
fn a_loose_object_in_a_gc_trash_is_read_from_there() {
    let backend = MemoryBackend::new();
    let gc = open(&backend);
    let kept = gc.put(b"kept in the trash").expect("put").id;
    let other = gc.put(b"never moved").expect("put").id;
    let run = std::path::PathBuf::from("gc/trash/run-1");
    gc.start_trash(run.clone(), Arc::new(|| Ok(())));
    let swept = gc.delete_loose(&[kept]).expect("move to the trash");
    assert_eq!(swept.objects, 1);
    drop(gc.end_trash());

    let plain = open(&backend);
    assert!(matches!(
        plain.get(&kept),
        Err(jpstore_blobstore::Error::NotFound { .. })
    ));
    let reader = open(&backend);
    reader.look_in_trash_below("gc/trash".into());
    assert_eq!(
        reader.get(&kept).expect("from the trash"),
        b"kept in the trash"
    );
    assert_eq!(reader.size(&kept).expect("size"), 17);
    let mut streamed = Vec::new();
    std::io::Read::read_to_end(
        &mut reader.open_stream(&kept).expect("a stream from the trash"),
        &mut streamed,
    )
    .expect("read the stream");
    assert_eq!(streamed, b"kept in the trash");
    assert_eq!(reader.get(&other).expect("in its place"), b"never moved");
    // Not in any trash: not found, as before.
    let missing = BlobId::of(b"nowhere");
    assert!(matches!(
        reader.get(&missing),
        Err(jpstore_blobstore::Error::NotFound { .. })
    ));
    assert!(matches!(
        reader.open_stream(&missing),
        Err(jpstore_blobstore::Error::NotFound { .. })
    ));
    // Damaged in the trash: damage, not another copy.
    let key = run
        .join("blobs/objects")
        .join(&kept.to_hex()[..2])
        .join(&kept.to_hex()[2..]);
    let mut bytes = jpstore_blobstore::backend::read_all(
        &*backend.open(&key).expect("the trash copy"),
        u64::MAX,
    )
    .expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    backend
        .delete(std::slice::from_ref(&key))
        .expect("delete the copy");
    backend
        .put_if_absent(&key, &bytes, std::path::Path::new("blobs/tmp/damage"))
        .expect("damage the copy");
    assert!(matches!(
        open_looking_in_trash(&backend).get(&kept),
        Err(jpstore_blobstore::Error::Corrupt { .. })
    ));
    // Put back (or deleted) by the run: the trash is not looked at.
    gc.empty_trash(&run).expect("empty");
    assert!(matches!(
        open_looking_in_trash(&backend).get(&kept),
        Err(jpstore_blobstore::Error::NotFound { .. })
    ));
}

fn open_looking_in_trash(backend: &MemoryBackend) -> BlobStore {
    let store = open(backend);
    store.look_in_trash_below("gc/trash".into());
    store
}
