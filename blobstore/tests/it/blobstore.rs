//! Behaviour of the blob store on the real file system.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jpstore_blobstore::storage::{LocalStorage, Storage};
use jpstore_blobstore::{BlobId, BlobStore, Error, Location, Options};

fn open(dir: &Path) -> BlobStore {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir).expect("storage"));
    BlobStore::open(
        jpstore_blobstore::backend::FileBackend::shared(storage.clone()),
        "blobs",
        Options::default(),
    )
    .expect("open store")
}

/// The full name of the test `name` of this module in its test binary
/// (`blobstore::NAME`), as `--exact` takes it: for the tests that start
/// this binary again on one of its tests.
fn test_path(name: &str) -> String {
    let module = module_path!()
        .split_once("::")
        .map_or("", |(_crate, module)| module);
    format!("{module}::{name}")
}

fn source_like(seed: u64, len: usize) -> Vec<u8> {
    // Deterministic text that compresses roughly like source code.
    let words = [
        "fn ",
        "let ",
        "mut ",
        "self",
        "impl ",
        "pub ",
        "struct ",
        "Result<",
        ">",
        "(",
        ")",
        "{\n",
        "}\n",
        "    ",
        "match ",
        "=> ",
        "Some(",
        "None",
        "return ",
        ";\n",
        "// ",
        "value",
        "index",
        "buffer",
        "error",
        "io::Error",
        "&mut ",
        "Vec<u8>",
        "usize",
        "0x",
        "if ",
        "else ",
    ];
    let mut out = Vec::with_capacity(len);
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(words[(x % words.len() as u64) as usize].as_bytes());
        if x % 11 == 0 {
            out.extend_from_slice(format!("{}", x % 1000).as_bytes());
        }
    }
    out.truncate(len);
    out
}

fn random_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn loose_file(dir: &Path, id: &BlobId) -> PathBuf {
    let hex = id.to_hex();
    dir.join("blobs/objects").join(&hex[..2]).join(&hex[2..])
}

fn only_pack_files(dir: &Path) -> (PathBuf, PathBuf) {
    let mut pack = None;
    let mut idx = None;
    for e in std::fs::read_dir(dir.join("blobs/packs")).expect("list packs") {
        let p = e.expect("entry").path();
        match p.extension().and_then(|e| e.to_str()) {
            Some("pack") => pack = Some(p),
            Some("idx") => idx = Some(p),
            _ => {}
        }
    }
    (pack.expect("a pack"), idx.expect("an index"))
}

#[test]
fn round_trips_empty_tiny_large_and_incompressible_content() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let cases: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"x".to_vec(),
        b"check succeeded".to_vec(),
        source_like(1, 24 << 20),
        random_bytes(2, 3 << 20),
    ];
    for data in &cases {
        let out = store.put(data).expect("put");
        assert!(out.stored);
        assert_eq!(out.id, BlobId::of(data));
        assert_eq!(store.get(&out.id).expect("get"), *data);
        assert_eq!(store.size(&out.id).expect("size"), data.len() as u64);
    }
    // Reopen: everything is still there.
    let store = open(dir.path());
    for data in &cases {
        assert_eq!(
            store.get(&BlobId::of(data)).expect("get after reopen"),
            *data
        );
    }
    let on_disk = std::fs::metadata(loose_file(dir.path(), &BlobId::of(&cases[3])))
        .expect("stat")
        .len();
    assert!(
        on_disk < (cases[3].len() / 3) as u64,
        "source-like content stored in {on_disk} bytes"
    );
    let raw = std::fs::metadata(loose_file(dir.path(), &BlobId::of(&cases[4])))
        .expect("stat")
        .len();
    assert_eq!(
        raw,
        cases[4].len() as u64 + 20,
        "incompressible content is stored raw"
    );
}

#[test]
fn the_same_content_twice_is_one_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let a = store.put(b"same bytes").expect("put");
    let b = store.put(b"same bytes").expect("put again");
    assert!(a.stored);
    assert!(!b.stored);
    assert_eq!(a.id, b.id);
    assert_eq!(store.ids().expect("ids"), vec![a.id]);
    let batch = store
        .put_batch(3, |_| Ok(b"same bytes".to_vec()), &mut |_| {})
        .expect("batch");
    assert_eq!(batch.ids, vec![a.id; 3]);
    assert_eq!(batch.new_objects, 0);
    assert!(
        batch.pack.is_none(),
        "a batch of known content writes no pack"
    );
}

#[test]
fn a_batch_of_large_and_repeated_items_read_into_buffers_is_one_pack() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    // From empty to 3 MiB (more than a worker's segment and the pack
    // writer's buffer); items i and i + 20 are the same.
    let items: Vec<Vec<u8>> = (0..40u64)
        .map(|i| {
            let len = [3 << 20, 0, 100, 70_000][(i % 4) as usize];
            random_bytes(2 * (i % 20) + 1, len)
        })
        .collect();
    let unique: std::collections::HashSet<BlobId> = items.iter().map(|d| BlobId::of(d)).collect();
    let mut last = None;
    let batch = store
        .put_batch_buffered(
            items.len(),
            |i, buf| {
                assert!(buf.is_empty(), "the buffer is given empty");
                buf.extend_from_slice(&items[i]);
                Ok(())
            },
            &mut |p| last = Some(p),
        )
        .expect("batch");
    assert_eq!(batch.new_objects, unique.len());
    let (pack, _) = only_pack_files(dir.path());
    assert_eq!(
        batch.pack_bytes,
        std::fs::metadata(&pack).expect("pack").len()
    );
    let total: u64 = items.iter().map(|d| d.len() as u64).sum();
    let last = last.expect("progress was reported");
    assert_eq!((last.items_done, last.items_total), (40, 40));
    assert_eq!((last.bytes_done, batch.raw_bytes), (total, total));
    for (i, data) in items.iter().enumerate() {
        assert_eq!(batch.ids[i], BlobId::of(data));
        assert_eq!(batch.sizes[i], data.len() as u64);
        assert_eq!(&store.get(&batch.ids[i]).expect("get"), data);
    }
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.packed_objects, unique.len());
}

#[test]
fn meanwhile_sees_every_id_and_the_pack_is_published_when_the_batch_returns() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let items: Vec<Vec<u8>> = (0..30u64).map(|i| source_like(i % 25, 5_000)).collect();
    // Captures only a shared reference: `Copy`, so each batch takes its own.
    let read = |i: usize, buf: &mut Vec<u8>| {
        buf.extend_from_slice(&items[i]);
        Ok(())
    };
    let (batch, seen) = store
        .put_batch_buffered_then(items.len(), read, &mut |_| {}, |ids, sizes| {
            (ids.to_vec(), sizes.to_vec())
        })
        .expect("batch");
    assert_eq!(seen, (batch.ids.clone(), batch.sizes.clone()));
    assert_eq!(batch.new_objects, 25);
    only_pack_files(dir.path());
    for (id, data) in batch.ids.iter().zip(&items) {
        assert_eq!(*id, BlobId::of(data));
        assert_eq!(&store.get(id).expect("packed when the batch returns"), data);
    }
    // Nothing new: no pack, `meanwhile` still runs.
    let (again, ran) = store
        .put_batch_buffered_then(items.len(), read, &mut |_| {}, |ids, _| ids.len())
        .expect("batch again");
    assert_eq!((again.pack, again.new_objects, ran), (None, 0, 30));
    // A failed read: `meanwhile` does not run.
    let mut ran = false;
    let err = store.put_batch_buffered_then(
        2,
        |i, buf| match i {
            0 => Err(std::io::Error::other("unreadable")),
            _ => {
                buf.extend_from_slice(b"fine");
                Ok(())
            }
        },
        &mut |_| {},
        |_, _| ran = true,
    );
    assert!(err.is_err());
    assert!(!ran, "meanwhile ran for a failed batch");
}

/// A read that skips its item (`skip_item`): the others are stored, nothing
/// for it (not even the empty blob), and the outcome names it.
#[test]
fn an_item_its_read_skips_is_stored_as_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let (batch, seen) = store
        .put_batch_buffered_then(
            3,
            |i, buf| match i {
                1 => Err(jpstore_blobstore::skip_item()),
                _ => {
                    buf.extend_from_slice(format!("item {i}").as_bytes());
                    Ok(())
                }
            },
            &mut |_| {},
            |ids, sizes| (ids.to_vec(), sizes.to_vec()),
        )
        .expect("batch");
    assert_eq!(batch.skipped, vec![1]);
    assert_eq!(batch.new_objects, 2);
    assert_eq!(seen.0[0], BlobId::of(b"item 0"));
    assert_eq!(seen.0[2], BlobId::of(b"item 2"));
    assert_eq!(seen.1[1], 0);
    let mut stored = store.ids().expect("ids");
    stored.sort();
    let mut expected = vec![BlobId::of(b"item 0"), BlobId::of(b"item 2")];
    expected.sort();
    assert_eq!(stored, expected, "nothing stored for the skipped item");
}

#[test]
fn loose_and_packed_lookups_return_the_same_bytes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let items: Vec<Vec<u8>> = (0..500u64)
        .map(|i| source_like(i, (i as usize * 37) % 5000))
        .collect();
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    assert!(batch.pack.is_some());
    // Duplicates inside the batch (i = 0 is empty... and any repeats) are stored once.
    let unique: std::collections::HashSet<_> = items.iter().map(|d| BlobId::of(d)).collect();
    assert_eq!(batch.new_objects, unique.len());

    let other = tempfile::tempdir().expect("tempdir");
    let loose = open(other.path());
    for (i, data) in items.iter().enumerate() {
        assert_eq!(batch.ids[i], BlobId::of(data));
        let id = loose.put(data).expect("loose put").id;
        assert!(matches!(
            store.locate(&id).expect("locate"),
            Some(Location::Packed { .. })
        ));
        assert!(matches!(
            loose.locate(&id).expect("locate"),
            Some(Location::Loose(_))
        ));
        assert_eq!(
            store.get(&id).expect("packed get"),
            loose.get(&id).expect("loose get")
        );
        assert_eq!(store.size(&id).expect("size"), data.len() as u64);
    }
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.packed_objects, unique.len());
}

#[test]
fn a_flipped_bit_in_a_loose_object_is_detected_and_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let data = source_like(7, 10_000);
    let id = store.put(&data).expect("put").id;
    let path = loose_file(dir.path(), &id);
    let mut bytes = std::fs::read(&path).expect("read");
    for at in [3usize, 9, 20, bytes.len() - 1] {
        let orig = bytes[at];
        bytes[at] ^= 0x10;
        std::fs::write(&path, &bytes).expect("write");
        let err = store.get(&id).expect_err("damage undetected");
        assert!(err.is_corruption(), "{err}");
        assert!(
            err.to_string().contains(&id.to_hex()[2..]),
            "error does not name the file: {err}"
        );
        bytes[at] = orig;
    }
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("truncate");
    let err = store.get(&id).expect_err("truncation undetected");
    assert!(err.is_corruption(), "{err}");
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert_eq!(report.problems.len(), 1);
    assert_eq!(report.problems[0].blob, Some(id));
}

/// The offset of the group holding `id` (a pack of version 2).
fn group_of(store: &BlobStore, id: &BlobId) -> u64 {
    match store.locate(id).expect("locate") {
        Some(Location::Packed { offset, .. }) => offset,
        other => panic!("{id} is not packed: {other:?}"),
    }
}

#[test]
fn a_flipped_bit_in_a_pack_is_detected_with_its_offset() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let items: Vec<Vec<u8>> = (0..500u64).map(|i| source_like(i + 100, 2000)).collect();
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    let (pack, _) = only_pack_files(dir.path());
    let mut bytes = std::fs::read(&pack).expect("read pack");
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    // Packs are published read-only in spirit; replace the file for the test.
    std::fs::write(&pack, &bytes).expect("write pack");
    let store = open(dir.path());
    let mut damaged = Vec::new();
    for id in &batch.ids {
        if let Err(e) = store.get(id) {
            assert!(e.is_corruption(), "{e}");
            let msg = e.to_string();
            assert!(msg.contains(".pack") && msg.contains("at offset"), "{msg}");
            damaged.push(*id);
        }
    }
    // Exactly the objects of the group holding the byte: a group is
    // decompressed whole, and its CRC covers every byte of it.
    let group = group_of(&store, &damaged[0]);
    let mut in_group: Vec<BlobId> = batch
        .ids
        .iter()
        .filter(|id| group_of(&store, id) == group)
        .copied()
        .collect();
    assert!(group <= at as u64, "the group at {group} holds byte {at}");
    damaged.sort();
    in_group.sort();
    assert_eq!(
        damaged, in_group,
        "the objects of the group holding byte {at}"
    );
    assert!(
        in_group.len() < batch.ids.len(),
        "the batch has several groups"
    );
    let report = store.verify_all(&mut |_| {}).expect("verify");
    // The damaged objects and the pack checksum.
    let mut reported: Vec<BlobId> = report.problems.iter().filter_map(|p| p.blob).collect();
    reported.sort();
    assert_eq!(reported, damaged, "{:?}", report.problems);
    assert_eq!(
        report.problems.len(),
        damaged.len() + 1,
        "{:?}",
        report.problems
    );
    assert!(report
        .problems
        .iter()
        .any(|p| p.blob.is_none() && p.error.to_string().contains("pack checksum")));
}

#[test]
fn verify_names_each_damaged_object_of_a_pack_read_in_several_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    // One worker: the objects fill groups in order.
    let store = open_with(dir.path(), 32 << 20);
    // 40 incompressible objects of 100 KiB: a 4 MB pack of groups of two
    // objects (the groups of 256 KiB of `Compression::Fast`), verified in
    // runs of about 256 KiB.
    let items: Vec<Vec<u8>> = (0..40u64)
        .map(|i| random_bytes(2 * i + 1, 100 << 10))
        .collect();
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    let mut by_group: Vec<(u64, BlobId)> = batch
        .ids
        .iter()
        .map(|id| (group_of(&store, id), *id))
        .collect();
    by_group.sort();
    // The first and the last group of the pack: different runs.
    let (first, last) = (by_group[0].0, by_group[by_group.len() - 1].0);
    let (pack, _) = only_pack_files(dir.path());
    let mut bytes = std::fs::read(&pack).expect("read pack");
    for offset in [first, last] {
        // A payload byte (after the 20-byte group header).
        bytes[offset as usize + 100] ^= 0x10;
    }
    std::fs::write(&pack, &bytes).expect("write pack");
    let store = open_with(dir.path(), 32 << 20);
    let mut last_progress = None;
    let report = store
        .verify_all(&mut |p| last_progress = Some(p))
        .expect("verify");
    assert_eq!(report.packed_objects, 40);
    let mut damaged: Vec<BlobId> = report.problems.iter().filter_map(|p| p.blob).collect();
    damaged.sort();
    let mut expected: Vec<BlobId> = by_group
        .iter()
        .filter(|(g, _)| *g == first || *g == last)
        .map(|(_, id)| *id)
        .collect();
    expected.sort();
    assert_eq!(expected.len(), 4, "two groups of two objects");
    assert_eq!(damaged, expected, "{:?}", report.problems);
    for p in report.problems.iter().filter(|p| p.blob.is_some()) {
        let msg = p.error.to_string();
        assert!(msg.contains(".pack") && msg.contains("at offset"), "{msg}");
    }
    // And the pack checksum, nothing else.
    assert_eq!(report.problems.len(), 5, "{:?}", report.problems);
    let last_progress = last_progress.expect("progress was reported");
    assert_eq!(last_progress.total, 40 + 1, "40 objects and one pack file");
    assert_eq!(last_progress.done, last_progress.total);
    assert_eq!(last_progress.bytes_done, last_progress.bytes_total);
}

#[test]
fn a_damaged_or_truncated_pack_index_is_named_by_verify_and_leaves_the_store_usable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let items: Vec<Vec<u8>> = (0..20u64).map(|i| source_like(i + 200, 500)).collect();
    store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    drop(store);
    let (_, idx) = only_pack_files(dir.path());
    let good = std::fs::read(&idx).expect("read idx");
    for damage in [0usize, 1] {
        let mut bytes = good.clone();
        if damage == 0 {
            bytes[1100] ^= 0x80;
        } else {
            bytes.truncate(bytes.len() - 10);
        }
        std::fs::remove_file(&idx).expect("rm");
        std::fs::write(&idx, &bytes).expect("write idx");
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir.path()).expect("storage"));
        // The store still opens (one damaged pack must not make every
        // command fail); the pack's objects are unreachable, and verify
        // names the index.
        let store = BlobStore::open(
            jpstore_blobstore::backend::FileBackend::shared(storage.clone()),
            "blobs",
            Options::default(),
        )
        .expect("a damaged index does not stop the store from opening");
        let id = BlobId::of(&items[0]);
        let err = store
            .get(&id)
            .expect_err("an object behind a damaged index read");
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
        assert!(
            err.to_string().contains(".idx"),
            "the damaged index is not named: {err}"
        );
        let report = store.verify_all(&mut |_| {}).expect("verify");
        assert!(!report.is_clean());
        let err = &report.problems[0].error;
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains(".idx"), "{err}");
        // New content can still be stored.
        store.put(b"after the damage").expect("put");
    }
}

#[test]
fn a_forged_header_claiming_a_huge_size_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir.path()).expect("storage"));
    let store = BlobStore::open(
        jpstore_blobstore::backend::FileBackend::shared(storage.clone()),
        "blobs",
        Options {
            max_blob_len: 1 << 20,
            ..Options::default()
        },
    )
    .expect("open");
    let data = vec![b'a'; 4096];
    let id = store.put(&data).expect("put").id;
    let path = loose_file(dir.path(), &id);
    let mut bytes = std::fs::read(&path).expect("read");
    // A hostile writer forges the length and fixes the CRC.
    let header = jpstore_blobstore::object::Header::decode(&bytes).expect("header");
    let forged = jpstore_blobstore::object::Header {
        raw_len: 40 << 30,
        ..header
    }
    .encode_with_payload(&bytes[jpstore_blobstore::object::HEADER_LEN..]);
    bytes[..jpstore_blobstore::object::HEADER_LEN].copy_from_slice(&forged);
    std::fs::write(&path, &bytes).expect("write");
    let err = store.get(&id).expect_err("forged size accepted");
    assert!(err.to_string().contains("at most"), "{err}");
    let err = store
        .put(&vec![0u8; (1 << 20) + 1])
        .expect_err("oversized put accepted");
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
}

#[test]
fn rewrite_pack_keeps_only_listed_ids_and_delete_loose_removes_objects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let items: Vec<Vec<u8>> = (0..100u64).map(|i| source_like(i + 300, 1000)).collect();
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    let name = batch.pack.clone().expect("pack");
    let keep: std::collections::HashSet<BlobId> = batch.ids.iter().step_by(3).copied().collect();
    let out = store
        .rewrite_pack(&name, &|id| keep.contains(id))
        .expect("rewrite");
    assert_eq!(out.kept_objects, keep.len());
    assert_eq!(out.removed_objects, 100 - keep.len());
    assert!(out.new_bytes < out.old_bytes);
    for id in &batch.ids {
        assert_eq!(store.exists(id).expect("exists"), keep.contains(id), "{id}");
    }
    let packs = store.packs().expect("packs");
    assert_eq!(packs.len(), 1);
    assert_ne!(packs[0].name, name);

    let a = store.put(b"loose a").expect("put").id;
    let b = store.put(b"loose b").expect("put").id;
    let swept = store.delete_loose(&[a]).expect("sweep");
    assert_eq!(swept.objects, 1);
    assert!(!store.exists(&a).expect("exists"));
    assert!(store.exists(&b).expect("exists"));
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);

    let out = store
        .rewrite_pack(&packs[0].name, &|_| false)
        .expect("rewrite to nothing");
    assert_eq!(out.new_pack, None);
    assert!(store.packs().expect("packs").is_empty());
}

/// A store with `alpha` loose and `beta`, `gamma!` in a pack.
fn loose_and_packed(dir: &Path) -> (BlobStore, BlobId, Vec<BlobId>) {
    let store = open(dir);
    let loose = store.put(b"alpha").expect("put").id;
    let items = [b"beta".to_vec(), b"gamma!".to_vec()];
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    (store, loose, batch.ids)
}

#[test]
fn ids_lists_loose_and_packed_objects_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, a, packed) = loose_and_packed(dir.path());
    let mut expected = vec![a, packed[0], packed[1]];
    expected.sort();
    assert_eq!(store.ids().expect("ids"), expected);
}

#[test]
fn id_sizes_lists_every_place_packed_first_with_index_sizes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, loose, packed) = loose_and_packed(dir.path());
    // The same content loose as well as packed (as after a concurrent
    // writer): listed once per place.
    let both = packed[0];
    let file = loose_file(dir.path(), &both);
    std::fs::create_dir_all(file.parent().expect("fanout")).expect("fanout dir");
    std::fs::write(
        &file,
        jpstore_blobstore::object::encode(b"beta", 3).expect("encode"),
    )
    .expect("write a loose copy");
    let listed = store.id_sizes().expect("id sizes");
    let sorted = |mut v: Vec<(BlobId, Option<u64>)>| {
        v.sort();
        v
    };
    let in_packs = listed.iter().take_while(|(_, s)| s.is_some()).count();
    assert_eq!(
        sorted(listed[..in_packs].to_vec()),
        sorted(vec![(both, Some(4)), (packed[1], Some(6))])
    );
    assert_eq!(
        sorted(listed[in_packs..].to_vec()),
        sorted(vec![(loose, None), (both, None)])
    );
}

#[test]
fn the_listing_in_id_order_merges_packs_and_loose_objects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    // Three packs of 300 and one of 1 (their ids interleave), 40 loose
    // objects, and one id both loose and packed (as after a concurrent
    // writer): listed once per place, the packed place first.
    let mut all = Vec::new();
    for p in 0..3u32 {
        let items: Vec<Vec<u8>> = (0..300u32)
            .map(|i| format!("pack {p} item {i}").into_bytes())
            .collect();
        let batch = store
            .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
            .expect("batch");
        all.extend(
            batch
                .ids
                .iter()
                .zip(&items)
                .map(|(id, b)| (*id, Some(b.len() as u64))),
        );
    }
    let one = store
        .put_batch(1, |_| Ok(b"alone".to_vec()), &mut |_| {})
        .expect("batch");
    all.push((one.ids[0], Some(5)));
    for i in 0..40u32 {
        let id = store.put(format!("loose {i}").as_bytes()).expect("put").id;
        all.push((id, None));
    }
    let both = all[17].0;
    let file = loose_file(dir.path(), &both);
    std::fs::create_dir_all(file.parent().expect("fanout")).expect("fanout dir");
    let bytes = b"pack 0 item 17";
    std::fs::write(
        &file,
        jpstore_blobstore::object::encode(bytes, 3).expect("encode"),
    )
    .expect("write a loose copy");
    all.push((both, None));
    // Sorted by id, a packed place before a loose one.
    all.sort_by_key(|(id, size)| (*id, size.is_none()));
    let listing = store.listing_beside(None).expect("listing");
    assert_eq!(listing.len(), all.len());
    assert_eq!(listing.in_id_order().collect::<Vec<_>>(), all);
    // The loose objects as the caller listed them, in any order.
    let mut loose: Vec<BlobId> = all
        .iter()
        .filter(|(_, s)| s.is_none())
        .map(|(id, _)| *id)
        .collect();
    loose.reverse();
    let listing = store.listing_beside(Some(loose)).expect("listing");
    assert_eq!(listing.in_id_order().collect::<Vec<_>>(), all);
    assert!(
        store.packs().expect("packs").len() >= 2,
        "several runs merged"
    );
}

#[test]
fn a_failing_batch_source_publishes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let err = store
        .put_batch(
            100,
            |i| {
                if i == 57 {
                    Err(std::io::Error::other("unreadable"))
                } else {
                    Ok(source_like(i as u64, 100))
                }
            },
            &mut |_| {},
        )
        .expect_err("batch with a failing source succeeded");
    assert!(matches!(err, Error::Source { .. }), "{err}");
    assert!(store.ids().expect("ids").is_empty());
    assert!(store.packs().expect("packs").is_empty());
    let tmp: Vec<_> = std::fs::read_dir(dir.path().join("blobs/tmp"))
        .expect("tmp")
        .collect();
    assert!(tmp.is_empty(), "temp files left: {tmp:?}");
}

/// Child side of the multi-process test: writes an overlapping set of blobs.
fn child_writer(dir: &Path, seed: u64) {
    let store = open(dir);
    for round in 0..20u64 {
        // Half of each round is shared by all writers, half is our own.
        let items: Vec<Vec<u8>> = (0..20u64)
            .map(|i| {
                if i % 2 == 0 {
                    source_like(round * 100 + i, 3000)
                } else {
                    source_like(seed * 10_000 + round * 100 + i, 3000)
                }
            })
            .collect();
        if round % 2 == 0 {
            store
                .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
                .expect("batch");
        } else {
            for d in &items {
                store.put(d).expect("put");
            }
        }
    }
}

#[test]
#[ignore = "entry point of the child processes of several_processes_writing_overlapping_blobs_leave_a_clean_store"]
fn concurrent_writer_process() {
    if let (Ok(dir), Ok(seed)) = (
        std::env::var("JPSTORE_TEST_DIR"),
        std::env::var("JPSTORE_TEST_SEED"),
    ) {
        child_writer(Path::new(&dir), seed.parse().expect("seed"));
    }
}

#[test]
fn several_processes_writing_overlapping_blobs_leave_a_clean_store() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (1..=4u64)
        .map(|seed| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    &test_path("concurrent_writer_process"),
                    "--ignored",
                    "--test-threads=1",
                ])
                .stdout(std::process::Stdio::null())
                .env("JPSTORE_TEST_DIR", dir.path())
                .env("JPSTORE_TEST_SEED", seed.to_string())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().expect("wait").success(), "a writer process failed");
    }
    let store = open(dir.path());
    for seed in 1..=4u64 {
        for round in 0..20u64 {
            for i in 0..20u64 {
                let data = if i % 2 == 0 {
                    source_like(round * 100 + i, 3000)
                } else {
                    source_like(seed * 10_000 + round * 100 + i, 3000)
                };
                assert_eq!(
                    store
                        .get(&BlobId::of(&data))
                        .expect("blob written by a child"),
                    data
                );
            }
        }
    }
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(store.ids().expect("ids").len(), 10 * 20 + 4 * 10 * 20);
}

/// Child side of the merging test: batches (each merged with the small
/// packs as it is published), gc's merge every other round, and every blob
/// acknowledged so far read back after each round while the other process
/// merges the packs it is in.
fn child_merger(dir: &Path, seed: u64) {
    let store = open(dir);
    let mut acked: Vec<Vec<u8>> = Vec::new();
    for round in 0..16u64 {
        let items: Vec<Vec<u8>> = (0..6u64)
            .map(|i| {
                if i % 2 == 0 {
                    source_like(round * 100 + i, 2000)
                } else {
                    source_like(seed * 10_000 + round * 100 + i, 2000)
                }
            })
            .collect();
        store
            .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
            .expect("batch");
        acked.extend(items);
        if round % 2 == 1 {
            store.merge_packs(false).expect("merge");
        }
        for data in &acked {
            let got = store.get(&BlobId::of(data)).expect("acknowledged blob");
            assert_eq!(&got, data);
        }
    }
}

#[test]
#[ignore = "entry point of the child processes of two_processes_writing_and_merging_lose_nothing"]
fn concurrent_merger_process() {
    if let (Ok(dir), Ok(seed)) = (
        std::env::var("JPSTORE_TEST_DIR"),
        std::env::var("JPSTORE_TEST_SEED"),
    ) {
        child_merger(Path::new(&dir), seed.parse().expect("seed"));
    }
}

#[test]
fn two_processes_writing_and_merging_lose_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let children: Vec<_> = (1..=2u64)
        .map(|seed| {
            std::process::Command::new(&exe)
                .args([
                    "--exact",
                    &test_path("concurrent_merger_process"),
                    "--ignored",
                    "--test-threads=1",
                ])
                .stdout(std::process::Stdio::null())
                .env("JPSTORE_TEST_DIR", dir.path())
                .env("JPSTORE_TEST_SEED", seed.to_string())
                .spawn()
                .expect("spawn child")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().expect("wait").success(), "a merging writer failed");
    }
    let store = open(dir.path());
    for seed in 1..=2u64 {
        for round in 0..16u64 {
            for i in 0..6u64 {
                let data = if i % 2 == 0 {
                    source_like(round * 100 + i, 2000)
                } else {
                    source_like(seed * 10_000 + round * 100 + i, 2000)
                };
                assert_eq!(store.get(&BlobId::of(&data)).expect("blob"), data);
            }
        }
    }
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(store.ids().expect("ids").len(), 16 * 3 + 2 * 16 * 3);
    store.merge_packs(false).expect("final merge");
    let sizes: Vec<u64> = store
        .packs()
        .expect("packs")
        .iter()
        .map(|p| p.pack_bytes)
        .collect();
    let (total, min) = (sizes.iter().sum::<u64>(), sizes.iter().min().copied());
    let bound = min.map_or(0.0, |m| (total as f64 / m as f64).log2() + 1.0);
    assert!(sizes.len() as f64 <= bound, "{sizes:?}");
}

#[test]
fn the_pack_count_stays_logarithmic_and_descriptors_bounded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let mut written = Vec::new();
    for i in 0..200u64 {
        let data = source_like(50_000 + i, 500 + (i as usize % 7) * 300);
        store
            .put_batch(1, |_| Ok(data.clone()), &mut |_| {})
            .expect("batch");
        written.push(data);
        let sizes: Vec<u64> = store
            .packs()
            .expect("packs")
            .iter()
            .map(|p| p.pack_bytes)
            .collect();
        let (total, min) = (sizes.iter().sum::<u64>(), sizes.iter().min().copied());
        let bound = min.map_or(0.0, |m| (total as f64 / m as f64).log2() + 1.0);
        assert!(
            sizes.len() as f64 <= bound,
            "after {} batches: {} packs, sizes {sizes:?}",
            i + 1,
            sizes.len()
        );
    }
    let reader = open(dir.path());
    for data in &written {
        assert_eq!(&reader.get(&BlobId::of(data)).expect("blob"), data);
        assert!(reader.open_pack_files() <= jpstore_blobstore::OPEN_PACK_FILES);
    }
    let report = reader.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    assert!(report.unindexed_packs.is_empty());
}

#[test]
fn verify_reports_progress_up_to_the_total() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    for i in 0..10u64 {
        store.put(&source_like(i, 100)).expect("put");
    }
    let mut last = None;
    let report = store.verify_all(&mut |p| last = Some(p)).expect("verify");
    let last = last.expect("progress was reported");
    assert_eq!(last.done, last.total);
    assert_eq!(last.total, 10);
    assert_eq!(last.bytes_done, last.bytes_total);
    assert!(report.is_clean());
}

#[test]
fn an_index_whose_pack_is_missing_is_damage_and_a_pack_without_index_is_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(dir.path());
    let items: Vec<Vec<u8>> = (0..5u64).map(|i| source_like(i + 400, 800)).collect();
    store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    let (pack, idx) = only_pack_files(dir.path());
    let saved_idx = std::fs::read(&idx).expect("read idx");
    std::fs::remove_file(&idx).expect("rm idx");
    let store = open(dir.path());
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.unindexed_packs.len(), 1);

    std::fs::write(&idx, &saved_idx).expect("restore idx");
    std::fs::remove_file(&pack).expect("rm pack");
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    let msg = report.problems[0].error.to_string();
    assert!(
        msg.contains(".idx") && msg.contains("no such file"),
        "{msg}"
    );
}

/// A store of one worker thread (groups filled in item order) and a group
/// cache of `cache` bytes.
fn open_with(dir: &Path, cache: u64) -> BlobStore {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir).expect("storage"));
    BlobStore::open(
        jpstore_blobstore::backend::FileBackend::shared(storage),
        "blobs",
        Options {
            threads: 1,
            group_cache_bytes: cache,
            ..Options::default()
        },
    )
    .expect("open store")
}

#[test]
fn objects_round_trip_across_group_boundaries_of_every_size() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_with(dir.path(), 32 << 20);
    let target = jpstore_blobstore::Compression::Fast.settings().group_bytes as usize;
    // Empty, tiny, just under, exactly and just over a group, larger than
    // a group; objects that fill a group exactly; runs that cross group
    // boundaries.
    let mut items: Vec<Vec<u8>> = vec![
        Vec::new(),
        b"x".to_vec(),
        source_like(1, target - 1),
        source_like(2, target),
        source_like(3, target + 1),
        random_bytes(4, target),
        source_like(5, 3 * target + 17),
    ];
    items.extend((0..4u64).map(|i| source_like(10 + i, target / 4)));
    items.extend((0..300u64).map(|i| source_like(100 + i, 1000 + (i as usize * 13) % 3000)));
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    let reader = open_with(dir.path(), 32 << 20);
    for (id, data) in batch.ids.iter().zip(&items) {
        assert_eq!(&reader.get(id).expect("get"), data);
        assert_eq!(reader.size(id).expect("size"), data.len() as u64);
    }
    // Objects of a group's size or more are alone in theirs; the four
    // quarters share one.
    let group = |i: usize| group_of(&reader, &batch.ids[i]);
    for (i, item) in items.iter().enumerate().take(7).skip(3) {
        let alone = batch
            .ids
            .iter()
            .filter(|id| group_of(&reader, id) == group(i))
            .count();
        assert_eq!(alone, 1, "item {i} of {} bytes", item.len());
    }
    // Empty, tiny and one byte under a group fill one exactly, and so do
    // the four quarters.
    assert!(group(1) == group(0) && group(2) == group(0));
    assert!(
        (8..11).all(|i| group(i) == group(7)),
        "four quarters of a group"
    );
    assert_ne!(group(7), group(0));
    let packs = reader.packs().expect("packs");
    assert_eq!((packs.len(), packs[0].version), (1, 2));
    // Four objects alone, two full groups, and the 300 small ones (750 KB)
    // in groups of 256 KiB.
    assert!(
        (9..=10).contains(&packs[0].groups),
        "{} groups",
        packs[0].groups
    );
    let report = reader.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
}

#[test]
fn a_cold_read_decompresses_one_group_and_the_cache_stays_within_its_bound() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bound = 1u64 << 20;
    let store = open_with(dir.path(), bound);
    // 4 MB of small objects: sixteen groups or so, four times the cache.
    let items: Vec<Vec<u8>> = (0..2000u64).map(|i| source_like(i + 7, 2000)).collect();
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    let reader = open_with(dir.path(), bound);
    assert_eq!(reader.get(&batch.ids[0]).expect("get"), items[0]);
    let stats = reader.group_cache_stats();
    assert_eq!((stats.decompressed, stats.groups), (1, 1), "{stats:?}");
    // Another object of the same group: no decompression.
    let same = (1..items.len())
        .find(|&i| group_of(&reader, &batch.ids[i]) == group_of(&reader, &batch.ids[0]))
        .expect("a neighbour in the group");
    assert_eq!(reader.get(&batch.ids[same]).expect("get"), items[same]);
    let stats = reader.group_cache_stats();
    assert_eq!((stats.decompressed, stats.hits), (1, 1), "{stats:?}");
    // Everything, twice: the bound holds throughout.
    for _ in 0..2 {
        for (id, data) in batch.ids.iter().zip(&items) {
            assert_eq!(&reader.get(id).expect("get"), data);
            let stats = reader.group_cache_stats();
            assert!(stats.bytes <= bound, "{stats:?}");
        }
    }
    let stats = reader.group_cache_stats();
    assert!(stats.groups >= 2, "the cache holds groups: {stats:?}");
    // No cache: every read decompresses its group, and still reads right.
    let uncached = open_with(dir.path(), 0);
    for (id, data) in batch.ids.iter().zip(&items).take(50) {
        assert_eq!(&uncached.get(id).expect("get"), data);
    }
    let stats = uncached.group_cache_stats();
    assert_eq!((stats.decompressed, stats.groups, stats.hits), (50, 0, 0));
}

#[test]
fn gc_rewrites_copy_mostly_live_groups_and_recompress_the_rest() {
    let dir = tempfile::tempdir().expect("tempdir");
    // gc re-encodes with the batches' settings here, so that full groups
    // of the batch are large enough to copy.
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir.path()).expect("storage"));
    let store = BlobStore::open(
        jpstore_blobstore::backend::FileBackend::shared(storage),
        "blobs",
        Options {
            threads: 1,
            repack_compression: jpstore_blobstore::Compression::Fast,
            ..Options::default()
        },
    )
    .expect("open store");
    let items: Vec<Vec<u8>> = (0..600u64).map(|i| source_like(i + 900, 1500)).collect();
    let batch = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    // The first half of the objects all kept (their groups copied), every
    // fourth of the second half (their groups compressed anew).
    let keep: std::collections::HashSet<BlobId> = batch
        .ids
        .iter()
        .enumerate()
        .filter(|(i, _)| *i < 300 || i % 4 == 0)
        .map(|(_, id)| *id)
        .collect();
    let name = batch.pack.clone().expect("pack");
    let out = store
        .rewrite_pack(&name, &|id| keep.contains(id))
        .expect("rewrite");
    assert_eq!(out.kept_objects, keep.len());
    assert!(
        out.groups_copied > 0 && out.groups_encoded > 0,
        "copied {} groups, encoded {}",
        out.groups_copied,
        out.groups_encoded
    );
    assert!(out.new_bytes < out.old_bytes);
    let reader = open_with(dir.path(), 32 << 20);
    for (id, data) in batch.ids.iter().zip(&items) {
        match reader.get(id) {
            Ok(got) => {
                assert!(keep.contains(id), "{id} was dropped");
                assert_eq!(&got, data);
            }
            Err(Error::NotFound { .. }) => assert!(!keep.contains(id), "{id} was kept"),
            Err(e) => panic!("{id}: {e}"),
        }
    }
    let report = reader.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    // A second rewrite keeping everything left changes nothing.
    let packs = reader.packs().expect("packs");
    let again = reader
        .rewrite_pack(&packs[0].name, &|_| true)
        .expect("rewrite");
    assert_eq!(again.new_pack.as_deref(), Some(packs[0].name.as_str()));
    // With the default repack settings (groups of 1 MiB), the groups of
    // 256 KiB are too small to copy: all are compressed anew, bigger.
    let out = reader
        .rewrite_pack(&packs[0].name, &|id| *id != batch.ids[0])
        .expect("rewrite");
    assert_eq!(out.groups_copied, 0);
    assert!(out.groups_encoded > 0);
    let report = reader.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
}

#[test]
fn a_layout_directory_that_is_not_one_is_named_with_what_is_there() {
    for link in [true, false] {
        let dir = tempfile::tempdir().expect("tempdir");
        drop(open(dir.path()));
        let objects = dir.path().join("blobs/objects");
        std::fs::remove_dir(&objects).expect("rm");
        let what = if link {
            let real = dir.path().join("elsewhere");
            std::fs::create_dir(&real).expect("mkdir");
            std::os::unix::fs::symlink(&real, &objects).expect("link");
            "a symbolic link"
        } else {
            std::fs::write(&objects, b"x").expect("write");
            "a regular file"
        };
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir.path()).expect("storage"));
        let err = BlobStore::open(
            jpstore_blobstore::backend::FileBackend::shared(storage),
            "blobs",
            Options::default(),
        )
        .expect_err("refused");
        let msg = err.to_string();
        assert!(matches!(err, Error::Corrupt { .. }), "{msg}");
        assert!(
            msg.contains("objects") && msg.contains(&format!("expected a directory, found {what}")),
            "{msg}"
        );
    }
}
