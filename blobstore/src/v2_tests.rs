//! Packs of version 2 with small groups (format-spec.md 2.12), written with
//! group targets the named settings do not offer so that a pack of a few
//! KiB holds several groups: every flipped byte of the pack and of its
//! index found by verify and named with its file and offset; hostile
//! lengths in a checksummed index and in a group header refused before
//! anything is allocated; the grouping rule and the group codec under
//! proptest.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;

use crate::backend::{read_all, Backend, Expect, MemoryBackend};
use crate::batch::{put_batch, Encode, Groups, OpenGroup};
use crate::group::{check_group, group_content, GroupSettings, GROUP_HEADER_LEN};
use crate::pack::{self, PACK_HEADER_LEN};
use crate::{BlobId, BlobStore, Error, Options};

/// Groups of 4 KiB at level 3.
const SMALL: GroupSettings = GroupSettings {
    level: 3,
    group_bytes: 4096,
};

fn open(backend: &MemoryBackend, options: Options) -> BlobStore {
    let shared: Arc<dyn Backend> = Arc::new(backend.clone());
    BlobStore::open(shared, "blobs", options).expect("open")
}

fn one_thread() -> Options {
    Options {
        threads: 1,
        ..Options::default()
    }
}

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

/// The contents of the small pack: compressible objects two to a group,
/// an incompressible one alone in a raw group, an empty and a tiny one.
fn contents() -> Vec<Vec<u8>> {
    let mut items: Vec<Vec<u8>> = (0..6u8)
        .map(|i| {
            format!("object {i}: let value = compute(index, buffer)?;\n")
                .repeat(30)
                .into_bytes()
        })
        .collect();
    items.push(noise(7, 5000));
    items.push(Vec::new());
    items.push(b"x".to_vec());
    items
}

/// A store on `backend` with one pack of [`contents`] in groups of 4 KiB;
/// the pack's and index's keys.
fn small_pack(backend: &MemoryBackend) -> (Vec<BlobId>, PathBuf, PathBuf) {
    let store = open(backend, one_thread());
    let items = contents();
    let (out, ()) = put_batch(
        &store,
        SMALL,
        items.len(),
        &|i, buf| {
            buf.extend_from_slice(&items[i]);
            Ok(())
        },
        &mut |_| {},
        |_, _| (),
    )
    .expect("batch");
    let name = out.pack.expect("a pack");
    let (p, i) = pack::pack_file_names(Path::new("blobs/packs"), &name);
    (out.ids, p, i)
}

fn read(backend: &MemoryBackend, key: &Path) -> Vec<u8> {
    let object = backend.open(key).expect("open");
    read_all(&*object, u64::MAX).expect("read")
}

fn write(backend: &MemoryBackend, key: &Path, data: &[u8]) {
    backend
        .replace(key, data, Path::new("blobs/tmp/x"), Expect::Any, true)
        .expect("replace");
}

/// Every problem verify reports on a fresh handle, as (blob, error).
fn problems(backend: &MemoryBackend) -> Vec<(Option<BlobId>, Error)> {
    let store = open(backend, Options::default());
    let report = store.verify_all(&mut |_| {}).expect("verify runs");
    report
        .problems
        .into_iter()
        .map(|p| (p.blob, p.error))
        .collect()
}

fn named(e: &Error, file: &Path) -> bool {
    let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("?");
    match e {
        Error::Corrupt { path, offset, .. } => {
            offset.is_some() && path.to_string_lossy().ends_with(name)
        }
        _ => false,
    }
}

#[test]
fn the_small_pack_holds_several_groups_of_both_codecs() {
    let backend = MemoryBackend::new();
    let (ids, _, _) = small_pack(&backend);
    let store = open(&backend, Options::default());
    let packs = store.packs().expect("packs");
    assert_eq!(packs.len(), 1);
    assert_eq!(packs[0].version, 2);
    assert!(packs[0].groups >= 4, "{:?}", packs[0]);
    for (id, data) in ids.iter().zip(contents()) {
        assert_eq!(store.get(id).expect("get"), data);
    }
    assert!(problems(&backend).is_empty());
}

#[test]
fn every_flipped_byte_of_a_small_pack_is_found_by_verify_and_named() {
    let backend = MemoryBackend::new();
    let (ids, pack_key, _) = small_pack(&backend);
    let good = read(&backend, &pack_key);
    let trailer = good.len() - 32;
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x20;
        write(&backend, &pack_key, &bad);
        let found = problems(&backend);
        assert!(!found.is_empty(), "flip at {at} of the pack undetected");
        for (_, e) in &found {
            assert!(named(e, &pack_key), "flip at {at}: {e}");
        }
        // Inside a group: the objects of that group, by id.
        if (PACK_HEADER_LEN as usize..trailer).contains(&at) {
            assert!(
                found
                    .iter()
                    .any(|(b, _)| b.is_some_and(|b| ids.contains(&b))),
                "flip at {at}: no object named: {found:?}"
            );
        }
        // And every read of a damaged object fails, naming the pack.
        let store = open(&backend, Options::default());
        for (blob, _) in found.iter().filter(|(b, _)| b.is_some()) {
            let blob = blob.expect("filtered");
            let e = store.get(&blob).expect_err("a damaged object read");
            assert!(named(&e, &pack_key), "flip at {at}: {e}");
        }
    }
    write(&backend, &pack_key, &good);
    assert!(problems(&backend).is_empty());
}

#[test]
fn every_flipped_byte_of_a_small_index_is_found_by_verify_and_named() {
    let backend = MemoryBackend::new();
    let (ids, _, index_key) = small_pack(&backend);
    let good = read(&backend, &index_key);
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x01;
        write(&backend, &index_key, &bad);
        let found = problems(&backend);
        assert!(!found.is_empty(), "flip at {at} of the index undetected");
        for (_, e) in &found {
            assert!(named(e, &index_key), "flip at {at}: {e}");
        }
        // The store still works: the pack is skipped, new writes go on,
        // and a read of one of its objects names the damaged index.
        let store = open(&backend, Options::default());
        let e = store
            .get(&ids[0])
            .expect_err("an object behind a damaged index read");
        let index_name = index_key
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a name");
        assert!(
            matches!(&e, Error::NotFound { damaged_index: Some(p), .. }
                if p.to_string_lossy().ends_with(index_name)),
            "flip at {at}: {e}"
        );
    }
    write(&backend, &index_key, &good);
    assert!(problems(&backend).is_empty());
}

/// The index at `key` changed by `change` (given the index, N and G), its
/// checksum fixed, as a hostile writer would make it.
fn forge(backend: &MemoryBackend, key: &Path, change: impl Fn(&mut Vec<u8>, usize, usize)) {
    let mut idx = read(backend, key);
    let n = u32::from_le_bytes([idx[8], idx[9], idx[10], idx[11]]) as usize;
    let g = u32::from_le_bytes([idx[12], idx[13], idx[14], idx[15]]) as usize;
    change(&mut idx, n, g);
    let body = idx.len() - 32;
    let sum = blake3::hash(&idx[..body]);
    idx[body..].copy_from_slice(sum.as_bytes());
    write(backend, key, &idx);
}

/// Offset of object entry `i` / group entry `g` in an index of N objects.
fn object_at(n: usize, i: usize) -> usize {
    1040 + 32 * n + 12 * i
}
fn group_at(n: usize, g: usize) -> usize {
    1040 + 44 * n + 16 * g
}

#[test]
fn hostile_lengths_in_a_checksummed_index_are_errors_not_allocations() {
    type Change = fn(&mut Vec<u8>, usize, usize);
    let cases: [(&str, Change); 7] = [
        ("a group of 4 GiB", |idx, n, _| {
            let at = group_at(n, 0) + 12;
            idx[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        }),
        ("a payload longer than the pack", |idx, n, _| {
            let at = group_at(n, 0) + 8;
            idx[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        }),
        (
            "a group offset at the end of the address space",
            |idx, n, _| {
                let at = group_at(n, 0);
                idx[at..at + 8].copy_from_slice(&(u64::MAX - 5).to_le_bytes());
            },
        ),
        ("an object of 4 GiB", |idx, n, _| {
            for i in 0..n {
                let at = object_at(n, i) + 8;
                idx[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
        }),
        ("an object far beyond its group", |idx, n, _| {
            for i in 0..n {
                let at = object_at(n, i) + 4;
                idx[at..at + 4].copy_from_slice(&(u32::MAX - 1).to_le_bytes());
            }
        }),
        ("a group beyond the table", |idx, n, _| {
            for i in 0..n {
                let at = object_at(n, i);
                idx[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
        }),
        ("groups out of order", |idx, n, g| {
            let (a, b) = (group_at(n, 0), group_at(n, g - 1));
            let first: Vec<u8> = idx[a..a + 16].to_vec();
            let last: Vec<u8> = idx[b..b + 16].to_vec();
            idx[a..a + 16].copy_from_slice(&last);
            idx[b..b + 16].copy_from_slice(&first);
        }),
    ];
    for (what, change) in cases {
        let backend = MemoryBackend::new();
        let (ids, _, index_key) = small_pack(&backend);
        forge(&backend, &index_key, change);
        let store = open(
            &backend,
            Options {
                max_blob_len: 1 << 20,
                ..Options::default()
            },
        );
        let mut refused = 0;
        for (id, data) in ids.iter().zip(contents()) {
            match store.get(id) {
                Ok(got) => assert_eq!(got, data, "{what}: wrong bytes"),
                Err(e) => {
                    assert!(
                        matches!(e, Error::Corrupt { .. } | Error::TooLarge { .. }),
                        "{what}: {e}"
                    );
                    refused += 1;
                }
            }
        }
        assert!(refused > 0, "{what}: every read succeeded");
        let report = store.verify_all(&mut |_| {}).expect("verify runs");
        assert!(!report.is_clean(), "{what}: verify found nothing");
    }
}

#[test]
fn objects_overlapping_in_their_group_are_named_as_damage_of_the_index() {
    let backend = MemoryBackend::new();
    let (_, _, index_key) = small_pack(&backend);
    // The second object of group 0 (in offset order) made to start inside
    // the first.
    forge(&backend, &index_key, |idx, n, _| {
        let field = |idx: &Vec<u8>, i: usize, k: usize| {
            let at = object_at(n, i) + 4 * k;
            u32::from_le_bytes([idx[at], idx[at + 1], idx[at + 2], idx[at + 3]])
        };
        let mut first: Vec<usize> = (0..n).filter(|&i| field(idx, i, 0) == 0).collect();
        first.sort_by_key(|&i| (field(idx, i, 1), field(idx, i, 2)));
        let (a, b) = (first[0], first[1]);
        assert!(
            field(idx, a, 2) >= 2,
            "the first object of group 0 is long enough"
        );
        let at = object_at(n, b) + 4;
        let inside = field(idx, a, 1) + 1;
        idx[at..at + 4].copy_from_slice(&inside.to_le_bytes());
    });
    let found = problems(&backend);
    let overlap: Vec<_> = found
        .iter()
        .filter(|(blob, e)| blob.is_none() && e.to_string().contains("after the object before it"))
        .collect();
    assert_eq!(overlap.len(), 1, "{found:?}");
    assert!(named(&overlap[0].1, &index_key), "{:?}", overlap[0].1);
}

#[test]
fn a_forged_group_header_is_refused_before_a_large_allocation() {
    let backend = MemoryBackend::new();
    let (ids, pack_key, index_key) = small_pack(&backend);
    let store = open(&backend, Options::default());
    store.refresh_packs().expect("list the packs");
    let loaded = store.loaded_packs().pop().expect("the pack");
    let first = (0..ids.len())
        .map(|i| loaded.grouped(i))
        .find(|e| e.group == 0)
        .expect("an object in group 0");
    drop(store);
    // Claim more in the group's header (CRC fixed) and in the index.
    let claim = |claim: u32| {
        let mut p = read(&backend, &pack_key);
        let at = PACK_HEADER_LEN as usize;
        p[at + 8..at + 12].copy_from_slice(&claim.to_le_bytes());
        let payload_len = u32::from_le_bytes([p[at + 12], p[at + 13], p[at + 14], p[at + 15]]);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&p[at..at + 16]);
        crc.update(&p[at + GROUP_HEADER_LEN..at + GROUP_HEADER_LEN + payload_len as usize]);
        p[at + 16..at + 20].copy_from_slice(&crc.finalize().to_le_bytes());
        write(&backend, &pack_key, &p);
        forge(&backend, &index_key, |idx, n, _| {
            let at = group_at(n, 0) + 12;
            idx[at..at + 4].copy_from_slice(&claim.to_le_bytes());
        });
    };
    // 60 MiB, within the limits: allocated (lazily zeroed), and the frame
    // decodes to far fewer bytes, which is damage.
    claim(60 << 20);
    let store = open(&backend, Options::default());
    let e = store.get(&first.id).expect_err("a bomb read");
    assert!(e.is_corruption(), "{e}");
    // 100 MiB, above the group limit of a store whose blobs are at most
    // 1 MiB (64 MiB): refused before anything is read.
    claim(100 << 20);
    let store = open(
        &backend,
        Options {
            max_blob_len: 1 << 20,
            ..Options::default()
        },
    );
    let e = store.get(&first.id).expect_err("an oversized group read");
    assert!(e.to_string().contains("limit"), "{e}");
    let report = store.verify_all(&mut |_| {}).expect("verify runs");
    assert!(report
        .problems
        .iter()
        .any(|p| p.blob == Some(first.id) && p.error.to_string().contains("limit")));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Every object lands in exactly one group, at the place its member
    /// entry says; a group of several objects is at most the target; an
    /// object of the target or more is alone.
    #[test]
    fn the_grouping_rule_places_every_object_once(
        sizes in proptest::collection::vec(0usize..9000, 0..40),
        log2 in 12u32..14,
        level in 1i32..6,
    ) {
        let settings = GroupSettings { level, group_bytes: 1 << log2 };
        let objects: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| format!("{i} ").repeat(n / 2 + 1).into_bytes()[..n].to_vec())
            .collect();
        let (mut open, mut out, mut scratch) = (OpenGroup::default(), Groups::default(), Vec::new());
        let mut sink = Encode { out: &mut out, level: settings.level, scratch: &mut scratch };
        for o in &objects {
            open.add(BlobId::of(o), o, settings.group_bytes, &mut sink).expect("add");
        }
        open.seal(&mut sink).expect("seal");
        let mut seen = Vec::new();
        for (at, len, members) in &out.groups {
            let stored = &out.bytes[*at..*at + *len];
            let header = check_group(stored).expect("a valid group");
            let mut buf = Vec::new();
            let raw = group_content(stored, &header, 1 << 30, &mut buf).expect("content");
            prop_assert!(!members.is_empty());
            if members.len() > 1 {
                prop_assert!(raw.len() <= settings.group_bytes as usize);
            }
            for m in members {
                let bytes = &raw[m.offset as usize..(m.offset + m.raw_len) as usize];
                prop_assert_eq!(BlobId::of(bytes), m.id);
                if m.raw_len >= settings.group_bytes {
                    prop_assert_eq!(members.len(), 1);
                }
                seen.push(m.id);
            }
        }
        let mut expected: Vec<BlobId> = objects.iter().map(|o| BlobId::of(o)).collect();
        expected.sort();
        seen.sort();
        prop_assert_eq!(seen, expected);
    }

    /// Any content round-trips through the group codec at any level.
    #[test]
    fn the_group_codec_round_trips(
        raw in proptest::collection::vec(any::<u8>(), 0..5000),
        repeat in 1usize..4,
        level in -3i32..12,
    ) {
        let raw = raw.repeat(repeat);
        let mut stored = Vec::new();
        crate::group::encode_group(&raw, level, &mut stored, &mut Vec::new()).expect("encode");
        let header = check_group(&stored).expect("check");
        prop_assert!(header.payload_len <= header.raw_len);
        let mut buf = Vec::new();
        let content = group_content(&stored, &header, raw.len() as u64, &mut buf).expect("decode");
        prop_assert_eq!(content, &raw[..]);
    }

    /// Arbitrary bytes, and valid groups with a byte changed, never panic
    /// the decoders.
    #[test]
    fn the_group_decoders_never_panic(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
        flip in any::<usize>(),
        value in any::<u8>(),
    ) {
        let mut buf = Vec::new();
        if let Ok(h) = check_group(&bytes) {
            let _ = group_content(&bytes, &h, 1 << 20, &mut buf);
        }
        let mut stored = Vec::new();
        crate::group::encode_group(b"abcabcabcabcabcabcabc", 3, &mut stored, &mut Vec::new())
            .expect("encode");
        let at = flip % stored.len();
        stored[at] = value;
        if let Ok(h) = check_group(&stored) {
            let _ = group_content(&stored, &h, 1 << 20, &mut buf);
        }
        let _ = crate::pack::check_index(&bytes);
    }
}

#[test]
fn two_merges_of_the_same_packs_publish_the_same_pack_whatever_the_threads() {
    let a = MemoryBackend::new();
    let no_merge = |threads| Options {
        threads,
        small_pack_bytes: 0,
        ..Options::default()
    };
    let store = open(&a, no_merge(2));
    for round in 0..5u64 {
        let items: Vec<Vec<u8>> = (0..30u64)
            .map(|i| {
                format!("round {round} object {i}: ")
                    .repeat(40)
                    .into_bytes()
            })
            .collect();
        put_batch(
            &store,
            SMALL,
            items.len(),
            &|i, buf| {
                buf.extend_from_slice(&items[i]);
                Ok(())
            },
            &mut |_| {},
            |_, _| (),
        )
        .expect("batch");
    }
    // The same packs in another store.
    let b = MemoryBackend::new();
    for key in a.keys().iter().filter(|k| k.starts_with("blobs/packs/")) {
        let key = Path::new(key);
        b.put_if_absent(key, &read(&a, key), Path::new("blobs/tmp/copy"))
            .expect("copy");
    }
    let merged = |backend: &MemoryBackend, threads| {
        let store = open(backend, no_merge(threads));
        let out = store.merge_packs(false).expect("merge");
        assert_eq!(out.merged_packs, 5);
        assert!(out.groups_encoded > 0);
        out.new_pack.expect("a new pack")
    };
    assert_eq!(merged(&a, 2), merged(&b, 1));
}

/// A batch large enough to list the fanout directories by their names
/// (`LIST_LOOSE_ON_FILES_FROM`) on a real directory: what is loose already
/// is found and not stored again; a FIFO at an item's name is not an
/// object, and its content goes into the pack, readable.
#[test]
fn a_large_batch_on_a_file_system_finds_loose_objects_by_listing_names() {
    use crate::backend::FileBackend;
    use crate::storage::{LocalStorage, Storage};
    let dir = tempfile::tempdir().expect("tempdir");
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir.path()).expect("storage"));
    let store =
        BlobStore::open(FileBackend::shared(storage), "blobs", Options::default()).expect("open");
    let count = crate::store::LIST_LOOSE_ON_FILES_FROM + 100;
    let items: Vec<Vec<u8>> = (0..count)
        .map(|i| format!("item {i} of the batch").into_bytes())
        .collect();
    let loose = [3, 250, 511];
    for i in loose {
        store.put(&items[i]).expect("put");
    }
    let hex = BlobId::of(&items[7]).to_hex();
    let fanout = dir.path().join("blobs/objects").join(&hex[..2]);
    std::fs::create_dir_all(&fanout).expect("mkdir");
    crate::storage::mkfifo(&fanout.join(&hex[2..]));
    assert!(matches!(
        store.loose_listing_for(count).expect("listing"),
        Some(crate::store::LooseListing::ByFanout(_))
    ));
    // Smaller batches look each name up.
    let smaller = crate::store::LIST_LOOSE_ON_FILES_FROM - 1;
    assert!(store.loose_listing_for(smaller).expect("small").is_none());
    let out = store
        .put_batch(count, |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    assert_eq!(out.new_objects, count - loose.len());
    assert!(out.pack.is_some());
    for (i, item) in items.iter().enumerate() {
        assert_eq!(
            &store.get(&BlobId::of(item)).expect("get"),
            item,
            "item {i}"
        );
    }
}

#[test]
fn a_batch_on_an_object_store_sees_loose_objects_through_one_listing() {
    let backend = MemoryBackend::new();
    let store = open(&backend, Options::default());
    let items: Vec<Vec<u8>> = (0..20u32)
        .map(|i| format!("item {i} {}", "x".repeat(i as usize)).into_bytes())
        .collect();
    // Three of them loose already, one in a fanout directory of its own.
    for i in [2, 9, 17] {
        store.put(&items[i]).expect("put");
    }
    let listed = match store
        .loose_listing_for(items.len())
        .expect("list")
        .expect("an object store lists")
    {
        crate::store::LooseListing::All(ids) => ids,
        crate::store::LooseListing::ByFanout(_) => panic!("an object store lists at once"),
    };
    assert_eq!(listed.len(), 3);
    for i in [2, 9, 17] {
        assert!(listed.contains(&BlobId::of(&items[i])));
    }
    // The listing of the loose objects (gc's, stats') comes from the same
    // one request.
    let loose: Vec<BlobId> = store
        .loose_objects()
        .expect("loose objects")
        .iter()
        .map(|o| o.id)
        .collect();
    let mut expected: Vec<BlobId> = [2, 9, 17].iter().map(|&i| BlobId::of(&items[i])).collect();
    expected.sort();
    assert_eq!(loose, expected);
    // Small batches ask per item.
    assert!(store.loose_listing_for(3).expect("list").is_none());
    let out = store
        .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
        .expect("batch");
    assert_eq!(out.new_objects, items.len() - 3);
    for (i, data) in items.iter().enumerate() {
        assert_eq!(
            &store.get(&BlobId::of(data)).expect("get"),
            data,
            "item {i}"
        );
    }
    assert!(problems(&backend).is_empty());
}

#[test]
fn verify_on_an_object_store_checks_loose_objects_listed_once_in_jobs() {
    let backend = MemoryBackend::new();
    let store = open(&backend, Options::default());
    // More than one job's worth.
    let ids: Vec<BlobId> = (0..150u32)
        .map(|i| {
            store
                .put(format!("loose object {i}").as_bytes())
                .expect("put")
                .id
        })
        .collect();
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.loose_objects, ids.len());
    // A damaged one is found and named, the others still counted.
    let damaged = ids[77];
    let key = store.loose_path(&damaged);
    let mut bytes = read(&backend, &key);
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    write(&backend, &key, &bytes);
    let mut last_progress = None;
    let report = store
        .verify_all(&mut |p| last_progress = Some(p))
        .expect("verify");
    assert_eq!(report.loose_objects, ids.len());
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].blob, Some(damaged));
    let p = last_progress.expect("progress");
    assert_eq!(p.done, p.total);
}

/// The pack writer stops, by a panic before anything is published, at a
/// group that would break the layout of a pack (format-spec.md 2.12): one
/// of no object, one longer than its header says, one with an object
/// beyond its raw content.
#[test]
fn a_group_that_breaks_the_layout_of_a_pack_stops_the_pack_writer() {
    use crate::batch::{Member, PackWriter};

    let backend = MemoryBackend::new();
    let store = open(&backend, one_thread());
    let raw = noise(1, 100);
    let member = Member {
        id: BlobId::of(&raw),
        offset: 0,
        raw_len: 100,
    };
    let mut good = Groups::default();
    good.encode(&raw, vec![member], 3, &mut Vec::new())
        .expect("encode");
    let len = good.bytes.len();
    let longer = [&good.bytes[..], &[0]].concat();
    let bad = [
        (good.bytes.clone(), len, vec![]),
        (longer, len + 1, vec![member]),
        (
            good.bytes.clone(),
            len,
            vec![Member {
                raw_len: 101,
                ..member
            }],
        ),
    ];
    for (bytes, len, members) in bad {
        let groups = Groups {
            bytes,
            groups: vec![(0, len, members)],
        };
        let mut writer = PackWriter::create(&store, SMALL).expect("writer");
        let added = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            groups.write_to(&mut writer)
        }));
        assert!(added.is_err(), "{:?}", groups.groups);
    }
    let mut writer = PackWriter::create(&store, SMALL).expect("writer");
    good.write_to(&mut writer).expect("add");
    writer.finish().expect("publish");
    assert_eq!(store.get(&member.id).expect("get"), raw);
}
