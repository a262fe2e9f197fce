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
use jpstore_benches::{jp_events_json, ConversationShape};
use jpstore_engine::jp::import::{find_sources, prepare, read_source};
use jpstore_engine::{Store, StoreOptions};
use serde_json::{json, Map, Value};

const CONVERSATIONS: usize = 24;
const EVENTS: usize = 1_000;

/// A config of about 40 KB: many tools with their settings, as JP's
/// snapshots are.
fn base_config() -> Value {
    let mut tools = Map::new();
    for i in 0..120 {
        tools.insert(
            format!("tool_{i:03}"),
            json!({"enable": i % 3 != 0, "run": "unattended", "source": format!("local.tool_{i}"),
                   "description": "Reads a file of the workspace and returns its content, with line numbers when asked.",
                   "parameters": {"path": {"type": "string", "required": true}, "lines": {"type": "array", "items": {"type": "integer"}}},
                   "compaction": {"request": "keep", "response": "strip"}}),
        );
    }
    json!({"assistant": {"name": "jp", "model": {"id": "anthropic/claude-sonnet-4", "parameters": {"max_tokens": 8192}},
           "system_prompt": "You are a careful coding assistant. ".repeat(40)},
           "conversation": {"tools": tools, "compaction": {"keep_last": 3}}})
}

fn write_workspace(root: &Path) -> u64 {
    let dir = root.join(".jp").join("conversations");
    let base = base_config();
    let mut bytes = 0u64;
    for c in 0..CONVERSATIONS {
        let id = 17_738_399_468u64 + c as u64 * 100;
        let conv = dir.join(format!("{id}-generated-session-{c}"));
        std::fs::create_dir_all(&conv).expect("mkdir");
        let mut entries = ConversationShape::generate(1000 + c as u64, EVENTS);
        if c % 2 == 1 {
            entries.insert(0, json!({"type": "config_delta", "timestamp": "2026-05-29 09:00:00.0", "delta": base}));
        } else {
            let text = serde_json::to_string_pretty(&base).expect("json");
            std::fs::write(conv.join("base_config.json"), &text).expect("write");
            bytes += text.len() as u64;
        }
        let events = jp_events_json(&entries);
        let meta = format!("{{\n  \"title\": \"Session {c}\",\n  \"last_activated_at\": \"2026-05-29 19:41:22.0\"\n}}\n");
        std::fs::write(conv.join("events.json"), &events).expect("write");
        std::fs::write(conv.join("metadata.json"), &meta).expect("write");
        bytes += (events.len() + meta.len()) as u64;
    }
    bytes
}

fn du(path: &Path) -> u64 {
    let mut total = 0;
    for e in std::fs::read_dir(path).expect("list").flatten() {
        let p = e.path();
        let m = std::fs::symlink_metadata(&p).expect("stat");
        total += if m.is_dir() { du(&p) } else { m.len() };
    }
    total
}

fn import_all(store: &Store, workspace: &Path) -> usize {
    let prepared: Vec<_> = find_sources(workspace)
        .expect("find")
        .iter()
        .map(|d| prepare(read_source(d).expect("read")))
        .collect();
    let (results, _) = store.import(prepared, false, &mut |_| {}).expect("import");
    results.len()
}

fn benches(c: &mut Criterion) {
    let root = bench_dir(Path::new(env!("CARGO_TARGET_TMPDIR"))).join("import");
    let _ = std::fs::remove_dir_all(&root);
    let workspace = root.join("workspace");
    let jp_bytes = write_workspace(&workspace);
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
        b.iter(|| {
            let mut count = 0;
            for d in find_sources(&workspace).expect("find") {
                for f in ["events.json", "metadata.json", "base_config.json"] {
                    if let Ok(bytes) = std::fs::read(d.join(f)) {
                        let v: Value = serde_json::from_slice(&bytes).expect("parse");
                        count += usize::from(v.is_array());
                    }
                }
            }
            assert_eq!(count, CONVERSATIONS);
        });
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&root);
}

criterion_group!(import, benches);
criterion_main!(import);
