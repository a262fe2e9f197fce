//! Packs of format version 1 (format-spec.md 2.3, 2.4): a pack and index
//! committed under `tests/fixtures/v1-pack/` (written by `put_batch` of
//! the build before pack format 2, commit fd783c4) are still read and
//! verified; they live beside packs of version 2 in one store, keep their
//! version through gc's rewrite and merges, and become version 2 only by
//! [`BlobStore::upgrade_packs`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jpstore_blobstore::storage::{LocalStorage, Storage};
use jpstore_blobstore::{BlobId, BlobStore, Compression, Options};

/// The fixture's contents, generated as they were when it was written.
fn contents() -> Vec<Vec<u8>> {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let noise: Vec<u8> = (0..2048)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect();
    vec![
        Vec::new(),
        b"x".to_vec(),
        b"fn main() { println!(\"hello, v1\"); }\n".repeat(80),
        noise,
        (0..400u32)
            .map(|i| format!("line {i}: value {}\n", i * 7))
            .collect::<String>()
            .into_bytes(),
    ]
}

const FIXTURE_PACK: &str = "b8eb20fcda635b4b17470df4f1b2a23ee1ab5906a0644fbe4c8e669da5c4a652";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/v1-pack/blobs/packs")
}

fn open(dir: &Path) -> BlobStore {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir).expect("storage"));
    BlobStore::open(
        jpstore_blobstore::backend::FileBackend::shared(storage),
        "blobs",
        Options::default(),
    )
    .expect("open")
}

/// A store holding a copy of the committed pack.
fn store_with_fixture(dir: &Path) -> BlobStore {
    let packs = dir.join("blobs/packs");
    std::fs::create_dir_all(&packs).expect("mkdir");
    for e in std::fs::read_dir(fixture()).expect("the fixture") {
        let e = e.expect("entry");
        std::fs::copy(e.path(), packs.join(e.file_name())).expect("copy");
    }
    open(dir)
}

fn versions(store: &BlobStore) -> Vec<u8> {
    let mut v: Vec<u8> = store
        .packs()
        .expect("packs")
        .iter()
        .map(|p| p.version)
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn the_committed_pack_of_version_1_reads_and_verifies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store_with_fixture(dir.path());
    let packs = store.packs().expect("packs");
    assert_eq!(packs.len(), 1);
    assert_eq!(
        (packs[0].name.as_str(), packs[0].version),
        (FIXTURE_PACK, 1)
    );
    for data in contents() {
        let id = BlobId::of(&data);
        assert_eq!(store.get(&id).expect("get"), data);
        assert_eq!(store.size(&id).expect("size"), data.len() as u64);
    }
    let report = store.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.packed_objects, contents().len());
}

#[test]
fn packs_of_both_versions_live_side_by_side_and_version_1_changes_only_by_upgrade() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store_with_fixture(dir.path());
    // New batches write version 2; the writer's merges leave version 1 alone.
    let mut written = contents();
    for round in 0..6u64 {
        let items: Vec<Vec<u8>> = (0..20u64)
            .map(|i| format!("round {round} item {i}: ").repeat(30).into_bytes())
            .collect();
        store
            .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
            .expect("batch");
        written.extend(items);
    }
    let v = versions(&store);
    assert_eq!(v.iter().filter(|v| **v == 1).count(), 1, "{v:?}");
    assert!(v.iter().skip(1).all(|v| *v == 2), "{v:?}");
    // gc's merge too.
    store.merge_packs(false).expect("merge");
    assert_eq!(versions(&store)[0], 1);
    // gc's rewrite of the pack of version 1 keeps its version.
    let dropped = BlobId::of(b"x");
    let out = store
        .rewrite_pack(FIXTURE_PACK, &|id| *id != dropped)
        .expect("rewrite");
    assert_eq!(out.kept_objects, 4);
    assert_eq!(versions(&store)[0], 1);
    assert!(!store.exists(&dropped).expect("exists"));
    written.retain(|d| d != b"x");
    for data in &written {
        assert_eq!(&store.get(&BlobId::of(data)).expect("get"), data);
    }
    // A dry run changes nothing and says what would be done.
    let dry = store
        .upgrade_packs(true, Compression::Fast, &mut |_| {})
        .expect("dry run");
    assert_eq!((dry.packs, dry.objects, dry.new_packs.len()), (1, 4, 0));
    assert_eq!(versions(&store)[0], 1);
    // The upgrade: every pack of version 2, every object readable.
    let mut steps = Vec::new();
    let done = store
        .upgrade_packs(false, Compression::Max, &mut |p| steps.push(p))
        .expect("upgrade");
    assert_eq!((done.packs, done.objects, done.new_packs.len()), (1, 4, 1));
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].packs_done, steps[0].packs_total);
    assert!(versions(&store).iter().all(|v| *v == 2));
    let reopened = open(dir.path());
    for data in &written {
        assert_eq!(&reopened.get(&BlobId::of(data)).expect("get"), data);
    }
    let report = reopened.verify_all(&mut |_| {}).expect("verify");
    assert!(report.is_clean(), "{:?}", report.problems);
    // Nothing left to upgrade.
    let again = reopened
        .upgrade_packs(false, Compression::Fast, &mut |_| {})
        .expect("again");
    assert_eq!(again.packs, 0);
}
