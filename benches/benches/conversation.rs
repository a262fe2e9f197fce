//! Conversation benchmarks, each group next to its floor or baseline measured
//! in the same run (the machine is shared and noisy: compare ratios, not
//! absolute figures).
//!
//! The conversations are [`ConversationShape`]s: coding-agent turns with
//! reasoning (long thinking signatures in metadata), tool calls whose
//! responses are code-like text (median under 1 KiB, up to 100 KB, some
//! files read twice). They are built through the engine's API once per run,
//! outside the measurements, one record per agent step (the user's message;
//! reasoning with the tool call it leads to; each tool response; the
//! answer), with all content put beforehand as one pack.
//!
//! - `append_small_event`: durable append of one ~100-byte `chat_response`
//!   message to an open writer, on a conversation of 10 and of 10,000
//!   events, beside `fdatasync_small_write` (append ~150 bytes to a file in
//!   the store directory and `sync_data` it: the physical floor). The
//!   10,000-event conversation grows by every appended event during the run
//!   (the count is printed at the end); the 10-event one is replaced by a
//!   fresh copy every 100 appends, outside the timing, so it stays short.
//! - `append_tool_response`: a `tool_call_request` + `tool_call_response`
//!   batch whose 1 KiB response is new content: a loose blob (file fsync,
//!   directory fsync), then the record's fdatasync. Beside it the same
//!   floor, and the same three syncs done by hand (publish 1 KiB as a loose
//!   file, then append and fdatasync ~250 bytes).
//! - `open_and_decode`: `Store::read` of a 10,000-event conversation (open,
//!   walk and check every record, decode every entry; no blob content is
//!   read), beside JP's open: read its `events.json` of the same
//!   conversation (pretty-printed, base64 as JP writes it), parse it with
//!   serde_json into `Vec<Value>` and undo the base64 as JP does. Both
//!   results are dropped outside the timing. The setup prints how the log's
//!   bytes split by event type.
//! - `open_writer`: `Store::writer` on the same conversation (writer lock,
//!   recovery walk of the log, state fold; dropping it, which releases the
//!   lock, is timed too).
//!
//! After each append group, the same operations run again interleaved
//! (one of each per round, in a shuffled order) and the medians and their ratios
//! are printed: criterion measures one benchmark after the other, so a
//! burst of disk traffic from another process skews the ratio of its
//! figures; interleaved, every operation sees the same conditions. (They
//! run whatever criterion filter is given.)
//!
//! Stores live below `JPSTORE_BENCH_DIR` if set, else below cargo's
//! `CARGO_TARGET_TMPDIR` (not `/tmp`, often a tmpfs where fsync is free).
//!
//! Run: `cargo bench -p jpstore-benches --bench conversation -- --warm-up-time 1 --measurement-time 3`

use jpstore_engine::internal::StoreInterior as _;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use jpstore_benches::bench_dir::{bench_dir, file_system_of};
use jpstore_benches::floor::{append_file, fdatasync_write};
use jpstore_benches::setup::conversation::{
    build, jp_parse, open_and_view, parse, store_with, timed_append, write_jp_events, AppendBench,
    Rolling, ROLL_EVERY,
};
use jpstore_benches::timing::{interleaved, median};
use jpstore_benches::workload::code;
use jpstore_benches::workload::conversation::tool_response_sizes;
use jpstore_benches::{ConversationShape, Rng};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{ChatResponse, Entry, EventKind, Payload};
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::conversation::codec;
use jpstore_engine::internal::conversation::read::Conversation;
use serde_json::{json, Value};

/// Seed of every generated workload.
const SEED: u64 = 0x6a70_2d63_6f6e_7665;
/// Events of the long conversation.
const LONG: usize = 10_000;
/// Events of the short conversation.
const SHORT: usize = 10;
/// Size of the new tool response content.
const TOOL_CONTENT: usize = 1024;

fn bench_root() -> PathBuf {
    bench_dir(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("conversation-bench"))
}

/// Source-like content of `size` bytes, different for every `n`.
fn unique_code(n: u64, size: usize) -> Vec<u8> {
    let mut rng = Rng::new(SEED ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut out = Vec::new();
    code::generate(&mut rng, size, &mut out);
    let tag = format!("// {n:016x}\n");
    out.truncate(size.saturating_sub(tag.len()));
    out.extend_from_slice(tag.as_bytes());
    out
}

/// A tool call and its response with new content `n`.
fn tool_pair(n: u64) -> Vec<Entry<Payload>> {
    let content = String::from_utf8(unique_code(n, TOOL_CONTENT)).expect("code is UTF-8");
    let id = format!("toolu_bench_{n:08}");
    vec![
        parse(&json!({
            "type": "tool_call_request",
            "timestamp": "2026-06-01 10:00:01.25",
            "id": id,
            "name": "fs_read_file",
            "arguments": {"path": format!("src/bench_{n}.rs")},
        })),
        parse(&json!({
            "type": "tool_call_response",
            "timestamp": "2026-06-01 10:00:01.5",
            "id": id,
            "content": content,
            "is_error": false,
        })),
    ]
}

/// The loose-object publish protocol by hand: temp file, write, fsync,
/// hard link into a fan-out directory, fsync that directory, unlink.
fn publish_by_hand(dir: &Path, n: u64, data: &[u8]) -> io::Result<()> {
    let tmp = dir.join("tmp").join(format!("{n}.obj"));
    let to = dir.join("objects").join(format!("{n:062x}"));
    let mut f = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
    f.write_all(data)?;
    f.sync_all()?;
    drop(f);
    std::fs::hard_link(&tmp, &to)?;
    File::open(dir.join("objects"))?.sync_all()?;
    std::fs::remove_file(&tmp)
}

/// Bytes of the log's entries by event type (MessagePack, as stored), and
/// of the thinking signatures among them: what a full decode has to read.
fn log_composition(conv: &Conversation) -> String {
    let mut by_kind: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut metadata = 0usize;
    for e in &conv.entries {
        let name = match e.event().map(|e| &e.kind) {
            Some(EventKind::ChatResponse(ChatResponse::Reasoning(_))) => "reasoning",
            Some(EventKind::ChatResponse(ChatResponse::Message(_))) => "message",
            Some(k) => k.type_name(),
            None => "unknown",
        };
        let slot = by_kind.entry(name).or_default();
        slot.0 += 1;
        slot.1 += codec::encode_event(e).len();
        if let Some(ev) = e.event() {
            metadata += ev
                .metadata
                .values()
                .filter_map(Value::as_str)
                .map(str::len)
                .sum::<usize>();
        }
    }
    let mut parts: Vec<String> = by_kind
        .iter()
        .map(|(k, (n, b))| {
            format!(
                "{k} {n} x {:.0} B = {:.2} MB",
                *b as f64 / *n as f64,
                *b as f64 / 1e6
            )
        })
        .collect();
    parts.push(format!(
        "(metadata strings: {:.2} MB)",
        metadata as f64 / 1e6
    ));
    parts.join(", ")
}

fn benches(c: &mut Criterion) {
    let root = bench_root();
    let started = Instant::now();
    let long = ConversationShape::generate(SEED, LONG);
    let short = ConversationShape::generate(SEED, SHORT);
    let (dir, store) = store_with(&root, &[("long-append", &long), ("long-read", &long)]);
    let long_writer = store
        .conversation(&ConversationId::parse("long-append").expect("id"))
        .expect("open the conversation");
    let read_id = ConversationId::parse("long-read").expect("id");
    let conv = store.read(&read_id).expect("read");
    let jp_path = dir.path().join("events.json");
    let jp_bytes = write_jp_events(&jp_path, &long);
    let sizes = tool_response_sizes(&long);
    let turns = long.iter().filter(|e| e["type"] == "turn_start").count();
    eprintln!(
        "conversation benches: store in {} ({})\n  workload: {} events, {} turns, {} records; \
         {} tool responses (median {} B, largest {} B, {:.1} MB in all); \
         log {:.2} MB, JP events.json {:.1} MB; built in {:.1} s\n  log entries: {}",
        dir.path().display(),
        file_system_of(dir.path()),
        conv.entries.len(),
        turns,
        conv.state.records,
        sizes.len(),
        median(sizes.clone()),
        sizes.iter().max().copied().unwrap_or(0),
        sizes.iter().sum::<usize>() as f64 / 1e6,
        conv.log_end as f64 / 1e6,
        jp_bytes as f64 / 1e6,
        started.elapsed().as_secs_f64(),
        log_composition(&conv),
    );
    drop(conv);

    // ----- append_small_event ------------------------------------------------
    let mut append = AppendBench::new(&store, dir.path(), short.clone(), long_writer);
    let mut g = c.benchmark_group("append_small_event");
    g.sample_size(20);
    g.bench_function(BenchmarkId::from_parameter(SHORT), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| append.append_short()).sum());
    });
    g.bench_function(BenchmarkId::from_parameter(LONG), |b| {
        b.iter_custom(|iters| (0..iters).map(|_| append.append_long()).sum());
    });
    g.bench_function("fdatasync_small_write", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| append.fdatasync()).sum());
    });
    g.finish();
    append
        .interleaved(1, 2_000, Duration::from_secs(3))
        .print("append_small_event", &[(1, 0), (0, 2), (1, 2)]);
    eprintln!(
        "  append_small_event: the long conversation now holds {} events",
        append.long.state().entries
    );

    // ----- append_tool_response ----------------------------------------------
    let mut g = c.benchmark_group("append_tool_response");
    g.sample_size(20);
    let mut rolling = Rolling::new(&store, "tools", short.clone(), ROLL_EVERY);
    let mut n = 0u64;
    g.bench_function("new_blob", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                n += 1;
                let batch = tool_pair(n);
                let w = rolling.writer();
                let t = Instant::now();
                let out = w.append(batch).expect("append");
                spent += t.elapsed();
                assert_eq!(out.new_blobs, 1);
            }
            spent
        });
    });
    g.bench_function("fdatasync_small_write", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| append.fdatasync()).sum());
    });
    let by_hand = dir.path().join("by-hand");
    for d in ["tmp", "objects"] {
        std::fs::create_dir_all(by_hand.join(d)).expect("create a dir");
    }
    for d in ["", "tmp", "objects"] {
        File::open(by_hand.join(d))
            .and_then(|f| f.sync_all())
            .expect("sync a dir");
    }
    let mut by_hand_log = append_file(&by_hand, "log").expect("by-hand log");
    let record = [b'r'; 250];
    let mut m = 0u64;
    g.bench_function("floor_publish_1KiB_then_fdatasync", |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                m += 1;
                let blob = unique_code(1 << 40 | m, TOOL_CONTENT);
                let t = Instant::now();
                publish_by_hand(&by_hand, m, &blob).expect("publish by hand");
                fdatasync_write(&mut by_hand_log, &record).expect("fdatasync");
                spent += t.elapsed();
            }
            spent
        });
    });
    g.finish();
    {
        let mut blob_op = || {
            n += 1;
            timed_append(rolling.writer(), tool_pair(n))
        };
        let mut floor_op = || append.fdatasync();
        let mut by_hand_op = || {
            m += 1;
            let blob = unique_code(1 << 40 | m, TOOL_CONTENT);
            let t = Instant::now();
            publish_by_hand(&by_hand, m, &blob).expect("publish by hand");
            fdatasync_write(&mut by_hand_log, &record).expect("fdatasync");
            t.elapsed()
        };
        interleaved(
            1,
            1_000,
            Duration::from_secs(3),
            &mut [
                ("new_blob", &mut blob_op),
                ("fdatasync_small_write", &mut floor_op),
                ("floor_publish_1KiB_then_fdatasync", &mut by_hand_op),
            ],
        )
        .print("append_tool_response", &[(0, 1), (0, 2)]);
    }

    // ----- open_and_decode / open_writer ---------------------------------------
    let mut g = c.benchmark_group("open_and_decode");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function(BenchmarkId::from_parameter(LONG), |b| {
        b.iter_with_large_drop(|| {
            let conv = store.read(&read_id).expect("read");
            assert_eq!(conv.entries.len(), LONG);
            conv
        });
    });
    g.bench_function(BenchmarkId::new("jp_parse_events_json", LONG), |b| {
        b.iter_with_large_drop(|| {
            let v = jp_parse(&jp_path);
            assert_eq!(v.len(), LONG);
            v
        });
    });
    g.finish();

    // The view of the same conversation as `jp-store view` makes it: open,
    // decode, project, and the JSON written as it is rendered; with --refs
    // no blob is read, without it every content is.
    let mut g = c.benchmark_group("view");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    for (name, mode) in [("refs", ContentMode::Refs), ("inline", ContentMode::Inline)] {
        g.bench_function(BenchmarkId::new(name, LONG), |b| {
            b.iter_with_large_drop(|| open_and_view(&store, &read_id, mode));
        });
    }
    g.bench_function(BenchmarkId::new("jp_parse_events_json", LONG), |b| {
        b.iter_with_large_drop(|| jp_parse(&jp_path));
    });
    g.finish();

    // The view with resource deduplication (RFD 067) on and off: the same
    // conversation with its fs_read_file results as resource blocks (URI
    // from the path), once with the default config, once with a config
    // delta at its start that turns deduplication off.
    let with_resources = as_resources(&long);
    let mut off = vec![
        json!({"type": "config_delta", "timestamp": with_resources[0]["timestamp"],
        "delta": {"conversation": {"deduplication": {"enabled": false}}}}),
    ];
    off.extend(with_resources.iter().cloned());
    build(&store, "long-dedup-on", &with_resources).close();
    build(&store, "long-dedup-off", &off).close();
    let on_id = ConversationId::parse("long-dedup-on").expect("id");
    let off_id = ConversationId::parse("long-dedup-off").expect("id");
    {
        let conv = store.read(&on_id).expect("read");
        let base = store.conversation_settings(&conv).expect("settings").base;
        let traced = jpstore_engine::internal::projection::view_traced(&conv.entries, &base);
        let resources = with_resources
            .iter()
            .filter(|e| e["type"] == "tool_call_response" && e["content"].is_array())
            .count();
        eprintln!(
            "view_dedup: {} events, {resources} resource blocks, {} replaced by references \
             ({:.2} MB not sent)",
            conv.entries.len(),
            traced.dedup.replacements.len(),
            traced.dedup.bytes_saved() as f64 / 1e6
        );
    }
    let mut g = c.benchmark_group("view_dedup");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    for (name, id) in [("refs_dedup_on", &on_id), ("refs_dedup_off", &off_id)] {
        g.bench_function(BenchmarkId::new(name, LONG), |b| {
            b.iter_with_large_drop(|| open_and_view(&store, id, ContentMode::Refs));
        });
    }
    // The projection alone, on decoded entries: without the pass, and with it.
    let conv = store.read(&on_id).expect("read");
    let base = store.conversation_settings(&conv).expect("settings").base;
    g.bench_function(BenchmarkId::new("projection_only", LONG), |b| {
        b.iter_with_large_drop(|| jpstore_engine::internal::projection::view(&conv.entries));
    });
    g.bench_function(BenchmarkId::new("projection_and_dedup", LONG), |b| {
        b.iter_with_large_drop(|| {
            jpstore_engine::internal::projection::view_with_config(&conv.entries, &base)
        });
    });
    g.finish();
    drop(conv);

    let mut g = c.benchmark_group("open_writer");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.bench_function(BenchmarkId::from_parameter(LONG), |b| {
        // The writer is dropped inside the timing: the next one waits for
        // its lock.
        b.iter(|| store.writer(&read_id).expect("open the writer"));
    });
    g.finish();
}

/// `entries` with every `fs_read_file` result as one resource block whose
/// URI comes from the call's path (the same content, so no new blob).
fn as_resources(entries: &[Value]) -> Vec<Value> {
    let mut paths: BTreeMap<String, String> = BTreeMap::new();
    entries
        .iter()
        .map(|e| {
            let mut e = e.clone();
            if e["type"] == "tool_call_request" && e["name"] == "fs_read_file" {
                if let (Some(id), Some(path)) = (e["id"].as_str(), e["arguments"]["path"].as_str())
                {
                    paths.insert(id.to_owned(), path.to_owned());
                }
            }
            if e["type"] == "tool_call_response" {
                if let Some(path) = e["id"].as_str().and_then(|id| paths.remove(id)) {
                    let text = e["content"].clone();
                    e["content"] = json!([{"type": "resource", "resource": {
                        "uri": format!("file:///workspace/{path}"),
                        "mimeType": "text/x-rust", "text": text}}]);
                }
            }
            e
        })
        .collect()
}

criterion_group!(conversation, benches);
criterion_main!(conversation);
