//! Blob store benchmarks, each group next to its floor measured in the same run
//! (the machine is shared and noisy: compare ratios, not absolute figures).
//!
//! - `put_batch`: a source-tree-shaped attachment set (3,000 files, ~40 MB) put
//!   with `put_batch` into a fresh store, vs the floor: SHA-256 of every file
//!   plus zstd-3 of every distinct file, on one thread and on all cores.
//! - `put_small_1KiB`: durable put of one new 1 KiB blob as a loose object and
//!   as a one-item pack, vs one 1 KiB append + `fdatasync` (the physical
//!   floor), vs the loose publish protocol done by hand, and the CPU part
//!   (SHA-256 + zstd-3) with a new and with a reused zstd context.
//! - `get`: reading a blob back, loose vs packed, vs decompress + SHA-256 alone.
//!
//! Stores live below `JPSTORE_BENCH_DIR` if set, else below cargo's
//! `CARGO_TARGET_TMPDIR` (inside the target directory): `/tmp` is a tmpfs on
//! many systems, where fsync costs nothing and the sync figures would be
//! meaningless. The directory's file system is printed at start.
//!
//! Run: `cargo bench -p jpstore-benches --bench blobstore`
//! (quick: append `-- --warm-up-time 1 --measurement-time 3`).

use std::cell::Cell;
use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use jpstore_benches::bench_dir::{bench_dir, file_system_of};
use jpstore_benches::workload::code;
use jpstore_benches::{GeneratedFile, Rng, SourceTree};
use jpstore_blobstore::storage::LocalStorage;
use jpstore_blobstore::{BlobId, BlobStore, Options};
use sha2::{Digest, Sha256};
use tempfile::TempDir;

/// Seed of every generated workload.
const SEED: u64 = 0x6a70_2d73_746f_7265;
/// Files in the batch-put attachment set.
const BATCH_FILES: usize = 3_000;
/// zstd level of the floors (the store's default).
const LEVEL: i32 = 3;
/// Size of the small blob of `put_small`.
const SMALL: usize = 1024;
/// One-item packs written into one store before moving to a fresh one, so the
/// figure is not dominated by a store holding thousands of tiny packs.
const PACKS_PER_STORE: u64 = 64;

/// The directory that holds the benchmark stores.
fn bench_root() -> PathBuf {
    bench_dir(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("blobstore-bench"))
}

fn announce(root: &Path) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        eprintln!(
            "blob store benches: stores in {} ({}); {} cores",
            root.display(),
            file_system_of(root),
            Options::default().threads
        );
    });
}

fn fresh_store(root: &Path, options: Options) -> (TempDir, BlobStore) {
    let dir = tempfile::Builder::new()
        .prefix("store-")
        .tempdir_in(root)
        .expect("create a store directory");
    let storage = Arc::new(LocalStorage::open(dir.path()).expect("open local storage"));
    let store = BlobStore::open(
        jpstore_blobstore::backend::FileBackend::shared(storage),
        "blobs",
        options,
    )
    .expect("open the blob store");
    (dir, store)
}

fn one_thread() -> Options {
    Options {
        threads: 1,
        ..Options::default()
    }
}

/// A source-like blob of `size` bytes, different for every `n`.
fn small_blob(n: u64, size: usize) -> Vec<u8> {
    let mut rng = Rng::new(SEED ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut out = Vec::new();
    code::generate(&mut rng, size, &mut out);
    // Make it unique even if two seeds ever produced the same text.
    let tag = format!("// {n:016x}\n");
    out.truncate(size.saturating_sub(tag.len()));
    out.extend_from_slice(tag.as_bytes());
    out
}

// ----- floors ------------------------------------------------------------------

/// The minimal work of a batch put: SHA-256 of every file, zstd-3 of every
/// distinct content (the store skips compressing repeats too). Returns the
/// compressed bytes so nothing is optimised away.
fn hash_and_compress(files: &[GeneratedFile], threads: usize) -> u64 {
    let next = AtomicUsize::new(0);
    let seen = Mutex::new(std::collections::HashSet::<BlobId>::new());
    let total = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                let mut zstd = zstd::bulk::Compressor::new(LEVEL).expect("zstd compressor");
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(f) = files.get(i) else { break };
                    let id = BlobId::from_bytes(Sha256::digest(&f.bytes).into());
                    if seen.lock().expect("set lock").insert(id) {
                        let c = zstd.compress(&f.bytes).expect("compress");
                        total.fetch_add(c.len(), Ordering::Relaxed);
                    }
                }
            });
        }
    });
    total.into_inner() as u64
}

/// The same on one thread with a new zstd context per file, as
/// `zstd::bulk::compress` (which the store's object encoder uses) does.
fn hash_and_compress_fresh_context(files: &[GeneratedFile]) -> u64 {
    let mut seen = std::collections::HashSet::<BlobId>::new();
    let mut total = 0u64;
    for f in files {
        let id = BlobId::from_bytes(Sha256::digest(&f.bytes).into());
        if seen.insert(id) {
            total += zstd::bulk::compress(&f.bytes, LEVEL)
                .expect("compress")
                .len() as u64;
        }
    }
    total
}

// ----- groups -------------------------------------------------------------------

fn put_batch(c: &mut Criterion) {
    let root = bench_root();
    announce(&root);
    let files = SourceTree::generate(SEED, BATCH_FILES);
    let raw: u64 = files.iter().map(|f| f.bytes.len() as u64).sum();
    let cores = Options::default().threads;

    let mut g = c.benchmark_group("put_batch");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(raw));
    let run = |store: &BlobStore| {
        store
            .put_batch(files.len(), |i| Ok(files[i].bytes.clone()), &mut |_| {})
            .expect("put_batch")
    };
    g.bench_function("store_all_cores", |b| {
        b.iter_batched(
            || fresh_store(&root, Options::default()),
            |(dir, store)| {
                let out = run(&store);
                (dir, store, out)
            },
            BatchSize::PerIteration,
        );
    });
    g.bench_function("floor_sha256_zstd3_all_cores", |b| {
        b.iter(|| black_box(hash_and_compress(&files, cores)));
    });
    g.bench_function("store_1_thread", |b| {
        b.iter_batched(
            || fresh_store(&root, one_thread()),
            |(dir, store)| {
                let out = run(&store);
                (dir, store, out)
            },
            BatchSize::PerIteration,
        );
    });
    g.bench_function("floor_sha256_zstd3_1_thread", |b| {
        b.iter(|| black_box(hash_and_compress(&files, 1)));
    });
    g.bench_function("floor_sha256_zstd3_1_thread_fresh_zstd_context", |b| {
        b.iter(|| black_box(hash_and_compress_fresh_context(&files)));
    });
    g.finish();
}

fn put_small(c: &mut Criterion) {
    let root = bench_root();
    announce(&root);
    let mut g = c.benchmark_group("put_small_1KiB");
    g.sample_size(20);
    let counter = Cell::new(1u64 << 40);
    let fresh = || {
        let n = counter.get();
        counter.set(n + 1);
        small_blob(n, SMALL)
    };

    // Loose: one store, every fan-out directory already present (steady state).
    let (_loose_dir, loose) = fresh_store(&root, Options::default());
    for n in 0..1024 {
        loose.put(&small_blob(n, SMALL)).expect("populate");
    }
    g.bench_function("loose_put", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let blob = fresh();
                let t = Instant::now();
                let out = loose.put(&blob).expect("put");
                spent += t.elapsed();
                assert!(out.stored);
            }
            spent
        });
    });
    g.bench_function("loose_put_already_present", |b| {
        let blob = small_blob(7, SMALL);
        b.iter(|| black_box(loose.put(&blob).expect("put")));
    });

    g.bench_function("pack_put_batch_of_1", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            let mut store = None;
            for i in 0..iters {
                if i % PACKS_PER_STORE == 0 {
                    store = Some(fresh_store(&root, Options::default()));
                }
                let Some((_, s)) = &store else { unreachable!() };
                let blob = fresh();
                let t = Instant::now();
                let out = s
                    .put_batch(1, |_| Ok(blob.clone()), &mut |_| {})
                    .expect("put_batch");
                spent += t.elapsed();
                assert_eq!(out.new_objects, 1);
            }
            spent
        });
    });

    // The loose-object publish protocol by hand (create a temp file, write,
    // fsync, hard-link into a fan-out directory, fsync that directory, unlink
    // the temp name): what `loose_put` costs without the store's own work.
    let (proto_dir, proto_n) = (
        protocol_dirs(&root).expect("protocol dirs"),
        Cell::new(0u64),
    );
    g.bench_function("floor_publish_protocol_by_hand", |b| {
        let blob = small_blob(5, SMALL);
        b.iter(|| {
            let n = proto_n.get();
            proto_n.set(n + 1);
            publish_by_hand(proto_dir.path(), n, &blob).expect("publish by hand");
        });
    });

    // CPU part of a put: SHA-256 + zstd-3 of the 1 KiB blob, with a new zstd
    // context per call (as the store's encoder does) and with a reused one.
    let blob = small_blob(9, SMALL);
    g.bench_function("cpu_sha256_zstd3_new_context", |b| {
        b.iter(|| {
            black_box(Sha256::digest(&blob));
            black_box(zstd::bulk::compress(&blob, LEVEL).expect("compress"))
        });
    });
    g.bench_function("cpu_sha256_zstd3_reused_context", |b| {
        let mut z = zstd::bulk::Compressor::new(LEVEL).expect("zstd compressor");
        b.iter(|| {
            black_box(Sha256::digest(&blob));
            black_box(z.compress(&blob).expect("compress"))
        });
    });

    let (_floor_dir, floor_file) = append_file(&root).expect("floor file");
    let mut floor_file = floor_file;
    g.bench_function("floor_append_fdatasync", |b| {
        let blob = small_blob(3, SMALL);
        b.iter(|| {
            floor_file.write_all(&blob).expect("append");
            floor_file.sync_data().expect("fdatasync");
        });
    });
    g.finish();
}

/// A scratch directory with `tmp/` and `objects/00/`, all durable.
fn protocol_dirs(root: &Path) -> io::Result<TempDir> {
    let dir = tempfile::Builder::new()
        .prefix("protocol-")
        .tempdir_in(root)?;
    std::fs::create_dir_all(dir.path().join("tmp"))?;
    std::fs::create_dir_all(dir.path().join("objects/00"))?;
    for d in ["", "objects", "objects/00", "tmp"] {
        File::open(dir.path().join(d))?.sync_all()?;
    }
    Ok(dir)
}

fn publish_by_hand(dir: &Path, n: u64, data: &[u8]) -> io::Result<()> {
    let tmp = dir.join("tmp").join(format!("{n}.obj"));
    let to = dir.join("objects/00").join(format!("{n:062x}"));
    let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    std::fs::hard_link(&tmp, &to)?;
    File::open(dir.join("objects/00"))?.sync_all()?;
    std::fs::remove_file(&tmp)
}

fn append_file(root: &Path) -> io::Result<(TempDir, File)> {
    let dir = tempfile::Builder::new().prefix("floor-").tempdir_in(root)?;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.path().join("log"))?;
    // Make the file's own creation durable first, so every sample syncs only
    // the appended data and the size change.
    file.sync_all()?;
    File::open(dir.path())?.sync_all()?;
    Ok((dir, file))
}

fn get(c: &mut Criterion) {
    let root = bench_root();
    announce(&root);
    let blobs = [
        ("1KiB", small_blob(11, 1 << 10)),
        ("16KiB", small_blob(12, 16 << 10)),
    ];

    // The same bytes, loose in one store and packed (next to a 3,000-file
    // attachment set, so the index has realistic size) in another.
    let (_loose_dir, loose) = fresh_store(&root, Options::default());
    for (_, b) in &blobs {
        loose.put(b).expect("put loose");
    }
    let mut files = SourceTree::generate(SEED, BATCH_FILES);
    for (name, b) in &blobs {
        files.push(GeneratedFile {
            path: format!("extra/{name}.rs"),
            bytes: b.clone(),
            kind: jpstore_benches::FileKind::Source,
        });
    }
    let (_packed_dir, packed) = fresh_store(&root, Options::default());
    packed
        .put_batch(files.len(), |i| Ok(files[i].bytes.clone()), &mut |_| {})
        .expect("put_batch");
    drop(files);

    let mut g = c.benchmark_group("get");
    g.sample_size(50);
    for (name, bytes) in &blobs {
        let id = BlobId::of(bytes);
        assert!(matches!(
            loose.locate(&id),
            Ok(Some(jpstore_blobstore::Location::Loose(_)))
        ));
        assert!(matches!(
            packed.locate(&id),
            Ok(Some(jpstore_blobstore::Location::Packed { .. }))
        ));
        g.throughput(Throughput::Bytes(bytes.len() as u64));
        g.bench_function(format!("loose_{name}"), |b| {
            b.iter(|| black_box(loose.get(&id).expect("get")));
        });
        g.bench_function(format!("packed_{name}"), |b| {
            b.iter(|| black_box(packed.get(&id).expect("get")));
        });
        let compressed = zstd::bulk::compress(bytes, LEVEL).expect("compress");
        g.bench_function(format!("floor_unzstd_sha256_{name}"), |b| {
            let mut d = zstd::bulk::Decompressor::new().expect("zstd decompressor");
            b.iter(|| {
                let raw = d.decompress(&compressed, bytes.len()).expect("decompress");
                black_box(Sha256::digest(&raw))
            });
        });
    }
    g.finish();
}

criterion_group!(benches, put_batch, put_small, get);
criterion_main!(benches);
