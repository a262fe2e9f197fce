//! Import of JP conversations: time, and bytes of the store against the
//! bytes of JP's files (brief target: at most a fifth).
//!
//! The workspace: 24 JP-shaped conversations of 1,000 events each
//! ([`ConversationShape`]: tool outputs of a few hundred bytes to ~100 KB,
//! reasoning with long base64 signatures, files read more than once), each
//! with the same large base config (about 40 KB, as JP snapshots the whole
//! config): half as `base_config.json`, half in the legacy layout (the first
//! `config_delta`). The files are written as JP writes them (pretty JSON,
//! base64 where JP applies it).
//!
//! - `import/24x1000`: read, convert and store all of them into a fresh store
//!   (one pack for the content, one log per conversation), beside
//!   `read_and_parse_jp_files`: reading and parsing the same files with
//!   serde_json, which any import has to do.
//! - The setup prints the sizes: JP's files, the store (blobs and logs), and
//!   the ratio.
//!
//! Run: `cargo bench -p jpstore-benches --bench import -- --warm-up-time 1 --measurement-time 5`

use std::path::{Path, PathBuf};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode};
use jpstore_benches::bench_dir::bench_dir;
use jpstore_benches::setup::du;
use jpstore_benches::setup::import::{import_all, read_and_parse_jp_files, write_workspace};
use jpstore_engine::{Store, StoreOptions};

const CONVERSATIONS: usize = 24;
const EVENTS: usize = 1_000;

fn benches(c: &mut Criterion) {
    let root = bench_dir(Path::new(env!("CARGO_TARGET_TMPDIR"))).join("import");
    let _ = std::fs::remove_dir_all(&root);
    let workspace = root.join("workspace");
    let jp_bytes = write_workspace(&workspace, CONVERSATIONS, EVENTS);
    // One import to measure sizes.
    let store_dir = root.join("sized");
    let store = Store::init_dir(&store_dir, StoreOptions::default()).expect("init");
    let started = std::time::Instant::now();
    assert_eq!(import_all(&store, &workspace), CONVERSATIONS);
    let once = started.elapsed();
    let blobs = du(&store_dir.join("blobs"));
    let logs = du(&store_dir.join("conversations"));
    eprintln!(
        "import: {CONVERSATIONS} conversations x {EVENTS} events; JP files {:.2} MB; store {:.2} MB \
         (blobs {:.2} MB, logs {:.2} MB): {:.3} of JP's bytes ({:.1}x smaller); one import {:.0} ms",
        jp_bytes as f64 / 1e6,
        (blobs + logs) as f64 / 1e6,
        blobs as f64 / 1e6,
        logs as f64 / 1e6,
        (blobs + logs) as f64 / jp_bytes as f64,
        jp_bytes as f64 / (blobs + logs) as f64,
        once.as_secs_f64() * 1e3
    );
    let mut g = c.benchmark_group("import");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    let mut n = 0u64;
    g.bench_function(format!("{CONVERSATIONS}x{EVENTS}"), |b| {
        b.iter_batched(
            || {
                n += 1;
                let dir: PathBuf = root.join(format!("store-{n}"));
                let _ = std::fs::remove_dir_all(&dir);
                (
                    Store::init_dir(&dir, StoreOptions::default()).expect("init"),
                    dir,
                )
            },
            |(store, dir)| {
                assert_eq!(import_all(&store, &workspace), CONVERSATIONS);
                (store, dir)
            },
            BatchSize::PerIteration,
        );
    });
    g.bench_function("read_and_parse_jp_files", |b| {
        b.iter(|| assert_eq!(read_and_parse_jp_files(&workspace), CONVERSATIONS));
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&root);
}

criterion_group!(import, benches);
criterion_main!(import);
