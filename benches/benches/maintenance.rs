//! gc and fsck on a store of ~100,000 blobs and 1,000 conversations, beside
//! the time to hash every blob once (SHA-256 of the raw content, from
//! memory, on all cores), measured in the same run.
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
//!
//! Run: `cargo bench -p jpstore-benches --bench maintenance -- --warm-up-time 1 --measurement-time 5`

use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode};
use jpstore_benches::bench_dir::bench_dir;
use jpstore_benches::workload::code;
use jpstore_benches::Rng;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::input::parse_input;
use jpstore_engine::event::json::ParseMode;
use jpstore_engine::fsck::FsckOptions;
use jpstore_engine::gc::GcOptions;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use serde_json::json;
use sha2::{Digest, Sha256};

const CONVERSATIONS: usize = 1_000;
const TURNS: usize = 10;
const BLOCKS: usize = 10;
const ORPHANS: usize = 5_000;

fn content(c: usize, t: usize, b: usize) -> String {
    let mut rng = Rng::new((c * 1_000 + t * 10 + b) as u64 + 7);
    let mut out = format!("// conversation {c} turn {t} block {b}\n").into_bytes();
    code::generate(&mut rng, 500, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn build(root: &Path) -> (Store, Vec<Vec<u8>>) {
    let store = Store::init_dir(root, StoreOptions::default()).expect("init");
    // All content first, as packs of 10,000 (what an import or attach does).
    let mut all = Vec::with_capacity(CONVERSATIONS * TURNS * BLOCKS);
    for c in 0..CONVERSATIONS {
        for t in 0..TURNS {
            for b in 0..BLOCKS {
                all.push(content(c, t, b).into_bytes());
            }
        }
    }
    for chunk in all.chunks(10_000) {
        store
            .blobs()
            .put_batch(chunk.len(), |i| Ok(chunk[i].clone()), &mut |_| {})
            .expect("batch");
    }
    let now = Timestamp::now();
    for c in 0..CONVERSATIONS {
        let mut w = store
            .create(NewConversation {
                id: Some(ConversationId::parse(&format!("c{c:04}")).expect("id")),
                ..Default::default()
            })
            .expect("create");
        let mut lines = Vec::new();
        for t in 0..TURNS {
            lines.push(json!({"type": "turn_start"}).to_string());
            lines.push(json!({"type": "tool_call_request", "id": format!("t{t}"), "name": "fs_read_file", "arguments": {}}).to_string());
            let blocks: Vec<_> = (0..BLOCKS)
                .map(|b| {
                    let text = content(c, t, b);
                    let id = jpstore_blobstore::BlobId::of(text.as_bytes());
                    json!({"type": "text", "text": {"$blob": id.to_hex(), "size": text.len()}})
                })
                .collect();
            lines.push(
                json!({"type": "tool_call_response", "id": format!("t{t}"), "content": blocks})
                    .to_string(),
            );
        }
        let entries = parse_input(&lines.join("\n"), ParseMode::Strict { now })
            .expect("input")
            .entries;
        w.append(entries).expect("append");
    }
    for o in 0..ORPHANS {
        store
            .blobs()
            .put(format!("unreferenced object {o}").as_bytes())
            .expect("put");
    }
    (store, all)
}

fn benches(c: &mut Criterion) {
    let root = bench_dir(Path::new(env!("CARGO_TARGET_TMPDIR"))).join("maintenance");
    let _ = std::fs::remove_dir_all(&root);
    let started = std::time::Instant::now();
    let (store, all) = build(&root);
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
        b.iter(|| {
            let r = store
                .gc(
                    GcOptions {
                        grace: Duration::ZERO,
                        dry_run: true,
                        ..GcOptions::default()
                    },
                    &mut |_| {},
                )
                .expect("gc");
            assert_eq!(r.loose_removed, ORPHANS);
        });
    });
    g.bench_function("fsck", |b| {
        b.iter(|| {
            let r = store
                .fsck(FsckOptions::default(), &mut |_| {})
                .expect("fsck");
            assert!(r.is_clean());
        });
    });
    g.bench_function("fsck_read_data", |b| {
        b.iter(|| {
            let r = store
                .fsck(
                    FsckOptions {
                        read_data: true,
                        repair: false,
                    },
                    &mut |_| {},
                )
                .expect("fsck");
            assert!(r.is_clean());
        });
    });
    g.bench_function("floor_sha256_all_blobs", |b| {
        b.iter(|| {
            let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
            let per = all.len().div_ceil(threads);
            std::thread::scope(|s| {
                for chunk in all.chunks(per) {
                    s.spawn(move || {
                        let mut x = 0u8;
                        for blob in chunk {
                            x ^= Sha256::digest(blob)[0];
                        }
                        x
                    });
                }
            });
        });
    });
    g.finish();
    // One real gc at the end: it removes the unreferenced objects.
    let r = store
        .gc(
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
