//! `attach` of a generated source tree (~5,000 files) beside its floor,
//! measured in the same run (the machine is shared and noisy: compare
//! ratios, not absolute figures).
//!
//! - `attach/store_collect_and_attach`: `attach::collect` of the tree's
//!   directory plus `attach::attach` into a fresh store (one pack, one
//!   durable append), as `jp-store attach ID DIR` does.
//! - `attach/collect_only`: the directory walk alone.
//! - `attach/floor_sha256_zstd3_all_cores`: SHA-256 of every file and zstd
//!   level 3 of every distinct content in the groups of 256 KiB of packs of
//!   version 2 (`floor::hash_and_compress_grouped`), from memory, on all
//!   cores: the CPU work an attach cannot avoid.
//! - `attach/floor_read_sha256_zstd3_all_cores`: the same, reading each file
//!   from the (page-cached) tree first.
//!
//! After the criterion group, a few alternating rounds of attach and the
//! in-memory floor print the ratio of their medians.
//!
//! Measured (2 cores shared with other builds; 5,000 files, 68.9 MB, 4,724
//! distinct): attach over the in-memory floor 1.79-2.06 in alternating
//! rounds, 1.45-1.62 over the floor that reads the files (2.6-2.9 before
//! the walk ran on several threads and the pack writer took 1 MiB segments
//! of encoded objects). Both cores are busy throughout; the rest is the
//! walk with a stat per file, opening and reading each file, and the fixed
//! cost of the syncs and the append. Current figures: `BENCHMARKS.md`.
//!
//! The tree is written once per run below `JPSTORE_BENCH_DIR` if set, else
//! below `CARGO_TARGET_TMPDIR` (not a tmpfs `/tmp`: the syncs must be real).
//!
//! Run: `cargo bench -p jpstore-benches --bench attach`
//! (quick: append `-- --warm-up-time 1 --measurement-time 3`).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use jpstore_benches::bench_dir::{bench_dir, file_system_of};
use jpstore_benches::floor::{batch_settings, cores, hash_and_compress_grouped};
use jpstore_benches::setup::attach::{
    collect_and_attach, paths, store_with_conversation, write_tree,
};
use jpstore_benches::timing::median;
use jpstore_benches::workload::source_tree::total_bytes;
use jpstore_integrations::attach;

/// Seed of the generated tree.
const SEED: u64 = 0x6a70_2d61_7474_6163;
/// Files in the tree.
const FILES: usize = 5_000;
/// Alternating rounds for the printed ratio.
const RATIO_ROUNDS: usize = 5;

fn bench_root() -> PathBuf {
    bench_dir(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("attach-bench"))
}

fn benches(c: &mut Criterion) {
    let root = bench_root();
    let dir = root.join("tree");
    let files = write_tree(SEED, FILES, &dir);
    let raw = total_bytes(&files);
    let cores = cores();
    eprintln!(
        "attach bench: {} files, {:.1} MB, tree and stores in {} ({}); {cores} cores",
        files.len(),
        raw as f64 / 1e6,
        root.display(),
        file_system_of(&root),
    );
    let from_memory = |i: usize| files[i].bytes.clone();
    let paths = paths(&files, &dir);
    let from_disk = |i: usize| std::fs::read(&paths[i]).expect("read a tree file");

    let mut g = c.benchmark_group("attach");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(raw));
    g.bench_function("store_collect_and_attach", |b| {
        b.iter_batched(
            || store_with_conversation(&root),
            |(tmp, store, id)| {
                let out = collect_and_attach(&dir, &store, &id, FILES);
                (tmp, out)
            },
            BatchSize::PerIteration,
        );
    });
    g.bench_function("collect_only", |b| {
        b.iter(|| {
            black_box(attach::collect(
                std::slice::from_ref(&dir),
                &dir,
                attach::Links::StayInside,
            ))
        });
    });
    g.bench_function("floor_sha256_zstd3_all_cores", |b| {
        b.iter(|| {
            black_box(hash_and_compress_grouped(
                files.len(),
                cores,
                batch_settings(),
                &from_memory,
            ))
        });
    });
    g.bench_function("floor_read_sha256_zstd3_all_cores", |b| {
        b.iter(|| {
            black_box(hash_and_compress_grouped(
                files.len(),
                cores,
                batch_settings(),
                &from_disk,
            ))
        });
    });
    g.finish();

    // The ratio, from alternating rounds in this run.
    let (mut attach_t, mut floor_t): (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
    let mut last = None;
    for _ in 0..RATIO_ROUNDS {
        let (tmp, store, id) = store_with_conversation(&root);
        let t = Instant::now();
        let out = collect_and_attach(&dir, &store, &id, FILES);
        attach_t.push(t.elapsed());
        drop((store, tmp));
        let t = Instant::now();
        black_box(hash_and_compress_grouped(
            files.len(),
            cores,
            batch_settings(),
            &from_memory,
        ));
        floor_t.push(t.elapsed());
        last = Some(out);
    }
    let (a, f) = (median(attach_t), median(floor_t));
    if let Some(out) = last {
        eprintln!(
            "attach: {} files, {:.1} MB raw, {} new blobs, pack {:.1} MB",
            out.files,
            out.bytes as f64 / 1e6,
            out.new_blobs,
            out.pack_bytes as f64 / 1e6
        );
    }
    eprintln!(
        "attach ratio over {RATIO_ROUNDS} alternating rounds: attach {:.3} s, floor (SHA-256 + zstd-3, all cores, from memory) {:.3} s, ratio {:.2}x",
        a.as_secs_f64(),
        f.as_secs_f64(),
        a.as_secs_f64() / f.as_secs_f64()
    );
}

criterion_group!(attach_group, benches);
criterion_main!(attach_group);
