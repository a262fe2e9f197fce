//! gc and fsck on a store of ~100,000 blobs and 1,000 conversations, beside
//! the time to hash every blob once (SHA-256 of the raw content, from
//! memory, on all cores) and to decompress and hash every blob, measured in
//! the same run. The store is built by `setup::maintenance`.
//!
//! The store: 1,000 conversations of 10 turns, each turn a tool call whose
//! response is 10 content blocks of its own (about 500 bytes of code-like
//! text each): 100,000 referenced blobs, stored as packs, plus 5,000
//! unreferenced loose objects for gc to find.
//!
//! - `maintenance/gc_dry_run`: mark every log, decide for every object
//!   (nothing removed, so every iteration does the same work).
//! - `maintenance/fsck`: framing, decoding and references of every log.
//! - `maintenance/fsck_read_data`: the same plus decompressing and hashing
//!   every blob.
//! - `maintenance/floor_sha256_all_blobs`: SHA-256 of every blob's raw bytes.
//! - `maintenance/floor_decompress_groups_sha256_all_blobs`: zstd
//!   decompression of the blobs in groups of 256 KiB at level 3 (as batch
//!   puts store them in packs of version 2), each group once, from memory,
//!   and SHA-256 of every blob, on all cores: the work `--read-data` cannot
//!   avoid (brief: fsck `--read-data` within 1.2x of it).
//! - `maintenance/floor_decompress_sha256_all_blobs`: the same with every
//!   blob a zstd-3 frame of its own (the floor of packs of version 1).
//!
//! Run: `cargo bench -p jpstore-benches --bench maintenance -- --warm-up-time 1 --measurement-time 5`

use jpstore_engine::internal::StoreInterior as _;
use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use jpstore_benches::bench_dir::bench_dir;
use jpstore_benches::floor::{
    batch_settings, compress_all, compress_grouped, cores, decompress_and_hash,
    decompress_and_hash_groups, sha256_all,
};
use jpstore_benches::setup::maintenance::{build, fsck, gc_dry_run, MaintenanceShape};
use jpstore_engine::gc::GcOptions;

const SHAPE: MaintenanceShape = MaintenanceShape {
    conversations: 1_000,
    turns: 10,
    blocks: 10,
    orphans: 5_000,
};
const ORPHANS: usize = SHAPE.orphans;
const CONVERSATIONS: usize = SHAPE.conversations;

fn benches(c: &mut Criterion) {
    let root = bench_dir(Path::new(env!("CARGO_TARGET_TMPDIR"))).join("maintenance");
    let _ = std::fs::remove_dir_all(&root);
    let started = std::time::Instant::now();
    let (store, all) = build(&root, SHAPE);
    let blobs = store.blobs().ids().expect("ids").len();
    eprintln!(
        "maintenance: {CONVERSATIONS} conversations, {blobs} blobs ({} referenced, {ORPHANS} unreferenced); built in {:.1} s",
        all.len(),
        started.elapsed().as_secs_f64()
    );
    let mut g = c.benchmark_group("maintenance");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function("gc_dry_run", |b| {
        b.iter(|| assert_eq!(gc_dry_run(&store).loose_removed, ORPHANS));
    });
    g.bench_function("fsck", |b| b.iter(|| fsck(&store, false)));
    g.bench_function("fsck_read_data", |b| b.iter(|| fsck(&store, true)));
    g.bench_function("floor_sha256_all_blobs", |b| {
        b.iter(|| sha256_all(&all, cores()));
    });
    let grouped = compress_grouped(&all, batch_settings(), cores());
    g.bench_function("floor_decompress_groups_sha256_all_blobs", |b| {
        b.iter(|| decompress_and_hash_groups(&grouped, cores()));
    });
    let compressed = compress_all(&all, cores());
    g.bench_function("floor_decompress_sha256_all_blobs", |b| {
        b.iter(|| decompress_and_hash(&compressed, cores()));
    });
    g.finish();
    // One real gc at the end: it removes the unreferenced objects.
    let r = jpstore_engine::gc::run(
        &store,
        GcOptions {
            grace: Duration::ZERO,
            ..GcOptions::default()
        },
        &mut |_| {},
    )
    .expect("gc");
    eprintln!(
        "maintenance: gc removed {} objects, {} bytes",
        r.objects_freed(),
        r.bytes_freed()
    );
    let _ = std::fs::remove_dir_all(&root);
}

criterion_group!(maintenance, benches);
criterion_main!(maintenance);
