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
//!   conversation (pretty-printed, base64 as JP writes it) and parse it with
//!   serde_json into `Vec<Value>` (without even decoding the base64). Both
//!   results are dropped outside the timing. The setup prints how the log's
//!   bytes split by event type.
//! - `open_writer`: `Store::writer` on the same conversation (writer lock,
//!   recovery walk of the log, state fold; dropping it, which releases the
//!   lock, is timed too).
//!
//! After each append group, the same operations run again interleaved
//! (round-robin, one of each per round) and the medians and their ratios
//! are printed: criterion measures one benchmark after the other, so a
//! burst of disk traffic from another process skews the ratio of its
//! figures; interleaved, every operation sees the same conditions. (They
//! run whatever criterion filter is given.)
//!
//! Stores live below `JPSTORE_BENCH_DIR` if set, else below cargo's
//! `CARGO_TARGET_TMPDIR` (not `/tmp`, often a tmpfs where fsync is free).
//!
//! Run: `cargo bench -p jpstore-benches --bench conversation -- --warm-up-time 1 --measurement-time 3`

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::hint::black_box;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use jpstore_benches::bench_dir::{bench_dir, file_system_of};
use jpstore_benches::workload::code;
use jpstore_benches::workload::conversation::{tool_response_sizes, START_UNIX};
use jpstore_benches::{jp_events_json, ConversationShape, Rng};
use jpstore_engine::conversation::codec;
use jpstore_engine::conversation::read::Conversation;
use jpstore_engine::conversation::writer::ConversationWriter;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::json::{parse_entry, ParseMode};
use jpstore_engine::event::{ChatResponse, Entry, EventKind, Object, Payload};
use jpstore_engine::export::{view_json, ContentMode};
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use serde_json::{json, Value};
use tempfile::TempDir;

/// Seed of every generated workload.
const SEED: u64 = 0x6a70_2d63_6f6e_7665;
/// Events of the long conversation.
const LONG: usize = 10_000;
/// Events of the short conversation.
const SHORT: usize = 10;
/// Appends to a short conversation before a fresh one replaces it.
const RESET_EVERY: u64 = 100;
/// Size of the new tool response content.
const TOOL_CONTENT: usize = 1024;

fn bench_root() -> PathBuf {
    bench_dir(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("conversation-bench"))
}

fn now() -> ParseMode {
    ParseMode::Strict {
        now: Timestamp::from_unix(START_UNIX, 0).expect("a valid time"),
    }
}

fn parse(v: &Value) -> Entry<Payload> {
    parse_entry(v, now()).expect("generated entries parse")
}

/// A store in a fresh directory below `root`, with every blob fan-out
/// directory already present (as in a store used for a while), so a loose
/// put costs its steady-state syncs.
fn fresh_store(root: &Path) -> (TempDir, Store) {
    let dir = tempfile::Builder::new()
        .prefix("store-")
        .tempdir_in(root)
        .expect("create a store directory");
    let store = Store::init_dir(dir.path(), StoreOptions::default()).expect("init the store");
    let storage = store.storage();
    for i in 0..=255u8 {
        let d = PathBuf::from(format!("blobs/objects/{i:02x}"));
        storage.create_dir_all(&d).expect("create a fan-out dir");
    }
    storage
        .sync_dir(Path::new("blobs/objects"))
        .expect("sync objects/");
    (dir, store)
}

/// The entries grouped into the records an agent writes: a record ends with
/// each user message, tool call, tool response and answer.
fn steps(entries: &[Value]) -> Vec<Vec<Entry<Payload>>> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    for v in entries {
        let e = parse(v);
        let ends = match e.event().map(|e| &e.kind) {
            Some(EventKind::ChatRequest(_))
            | Some(EventKind::ToolCallRequest(_))
            | Some(EventKind::ToolCallResponse(_)) => true,
            Some(EventKind::ChatResponse(r)) => {
                matches!(r, ChatResponse::Message(_))
            }
            _ => false,
        };
        batch.push(e);
        if ends {
            out.push(std::mem::take(&mut batch));
        }
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}

/// Puts the content of every tool response of `entries` as one pack.
fn put_contents(store: &Store, entries: &[Value]) {
    let mut seen = HashSet::new();
    let contents: Vec<&str> = entries
        .iter()
        .filter(|e| e["type"] == "tool_call_response")
        .filter_map(|e| e["content"].as_str())
        .filter(|c| seen.insert(*c))
        .collect();
    store
        .blobs()
        .put_batch(
            contents.len(),
            |i| Ok(contents[i].as_bytes().to_vec()),
            &mut |_| {},
        )
        .expect("put the contents");
}

/// Creates conversation `id` holding `entries` (whose content is already in
/// the store) and returns its writer.
fn build<'s>(store: &'s Store, id: &str, entries: &[Value]) -> ConversationWriter<'s> {
    let mut w = store
        .create(NewConversation {
            id: Some(ConversationId::parse(id).expect("a valid id")),
            title: Some("Fix the flaky test".into()),
            base_config: Some(Object::new()),
            created: Some(Timestamp::from_unix(START_UNIX, 0).expect("a valid time")),
            ..NewConversation::default()
        })
        .expect("create the conversation");
    for batch in steps(entries) {
        let out = w.append(batch).expect("append");
        assert_eq!(out.new_blobs, 0, "content was put beforehand");
    }
    w
}

/// A short conversation that is replaced by a fresh one (outside the
/// timing) every [`RESET_EVERY`] appends, so it stays short however many
/// iterations criterion runs.
struct Rolling<'s> {
    store: &'s Store,
    entries: Vec<Value>,
    name: &'static str,
    made: u64,
    appended: u64,
    writer: Option<ConversationWriter<'s>>,
}

impl<'s> Rolling<'s> {
    fn new(store: &'s Store, name: &'static str, entries: Vec<Value>) -> Self {
        Rolling {
            store,
            entries,
            name,
            made: 0,
            appended: 0,
            writer: None,
        }
    }

    /// The writer to append to next (counts one append).
    fn writer(&mut self) -> &mut ConversationWriter<'s> {
        if self.writer.is_none() || self.appended >= RESET_EVERY {
            self.writer = None;
            self.made += 1;
            self.appended = 0;
            let id = format!("{}-{:05}", self.name, self.made);
            self.writer = Some(build(self.store, &id, &self.entries));
        }
        self.appended += 1;
        self.writer.as_mut().expect("a writer")
    }
}

/// A file in `dir` that grows by appends, its creation already durable.
fn append_file(dir: &Path, name: &str) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))?;
    file.sync_all()?;
    File::open(dir)?.sync_all()?;
    Ok(file)
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

/// A chat_response message of about 100 bytes of text.
fn small_event() -> Entry<Payload> {
    parse(&json!({
        "type": "chat_response",
        "timestamp": "2026-06-01 10:00:00.5",
        "message": "Done: the test no longer depends on the order of the map; \
                    `cargo test` passes 50 times in a row.",
    }))
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

/// One operation of an interleaved comparison: its name, and a closure
/// that runs it once and returns the time of the part to measure.
type Op<'a> = (&'a str, &'a mut dyn FnMut() -> Duration);

/// Runs `ops` round-robin (rotating which goes first) for `rounds` rounds
/// or until `budget` is spent, then prints each one's median and 90th
/// percentile and the ratio of medians for every `(a, b)` in `ratios`.
/// Criterion measures one benchmark after another, so a burst of disk
/// traffic from another process lands on one of them only; interleaved,
/// every operation sees the same conditions and the ratios hold.
fn interleaved(
    title: &str,
    rounds: usize,
    budget: Duration,
    ops: &mut [Op<'_>],
    ratios: &[(usize, usize)],
) {
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(rounds); ops.len()];
    let started = Instant::now();
    let mut done = 0;
    while done < rounds && started.elapsed() < budget {
        for k in 0..ops.len() {
            let i = (done + k) % ops.len();
            times[i].push((ops[i].1)());
        }
        done += 1;
    }
    let pick = |v: &mut Vec<Duration>, q: f64| {
        v.sort_unstable();
        v[((v.len() - 1) as f64 * q) as usize]
    };
    let mut medians = Vec::new();
    let mut parts = Vec::new();
    for (i, t) in times.iter_mut().enumerate() {
        let (m, p90) = (pick(t, 0.5), pick(t, 0.9));
        medians.push(m.as_secs_f64());
        parts.push(format!(
            "{} {:.0} us (p90 {:.0} us)",
            ops[i].0,
            m.as_secs_f64() * 1e6,
            p90.as_secs_f64() * 1e6
        ));
    }
    let ratios: Vec<String> = ratios
        .iter()
        .map(|&(a, b)| {
            format!(
                "{} / {} = {:.2}",
                ops[a].0,
                ops[b].0,
                medians[a] / medians[b]
            )
        })
        .collect();
    eprintln!(
        "  {title}, interleaved ({done} rounds, medians): {}\n    ratios: {}",
        parts.join(", "),
        ratios.join(", ")
    );
}

fn median(mut v: Vec<usize>) -> usize {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}

fn benches(c: &mut Criterion) {
    let root = bench_root();
    let started = Instant::now();
    let long = ConversationShape::generate(SEED, LONG);
    let short = ConversationShape::generate(SEED, SHORT);
    let (dir, store) = fresh_store(&root);
    put_contents(&store, &long);
    let mut long_writer = build(&store, "long-append", &long);
    drop(build(&store, "long-read", &long));
    let read_id = ConversationId::parse("long-read").expect("id");
    let conv = store.read(&read_id).expect("read");
    let jp_path = dir.path().join("events.json");
    let jp_text = jp_events_json(&long);
    std::fs::write(&jp_path, &jp_text).expect("write events.json");
    // Leave no dirty pages behind whose writeback would land on the sync
    // figures.
    File::open(&jp_path)
        .and_then(|f| f.sync_all())
        .expect("sync events.json");
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
        jp_text.len() as f64 / 1e6,
        started.elapsed().as_secs_f64(),
        log_composition(&conv),
    );
    drop((jp_text, conv));

    // ----- append_small_event ------------------------------------------------
    let event = small_event();
    let mut g = c.benchmark_group("append_small_event");
    g.sample_size(20);
    let mut rolling = Rolling::new(&store, "short", short.clone());
    g.bench_function(BenchmarkId::from_parameter(SHORT), |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let w = rolling.writer();
                let batch = vec![event.clone()];
                let t = Instant::now();
                black_box(w.append(batch).expect("append"));
                spent += t.elapsed();
            }
            spent
        });
    });
    g.bench_function(BenchmarkId::from_parameter(LONG), |b| {
        b.iter_custom(|iters| {
            let mut spent = Duration::ZERO;
            for _ in 0..iters {
                let batch = vec![event.clone()];
                let t = Instant::now();
                black_box(long_writer.append(batch).expect("append"));
                spent += t.elapsed();
            }
            spent
        });
    });
    let mut floor = append_file(dir.path(), "fdatasync-floor").expect("floor file");
    let small = [b'x'; 150];
    g.bench_function("fdatasync_small_write", |b| {
        b.iter(|| {
            floor.write_all(&small).expect("append");
            floor.sync_data().expect("fdatasync");
        });
    });
    g.finish();
    {
        let mut short_op = || {
            let w = rolling.writer();
            let batch = vec![event.clone()];
            let t = Instant::now();
            w.append(batch).expect("append");
            t.elapsed()
        };
        let mut long_op = || {
            let batch = vec![event.clone()];
            let t = Instant::now();
            long_writer.append(batch).expect("append");
            t.elapsed()
        };
        let mut floor_op = || {
            let t = Instant::now();
            floor.write_all(&small).expect("append");
            floor.sync_data().expect("fdatasync");
            t.elapsed()
        };
        interleaved(
            "append_small_event",
            2_000,
            Duration::from_secs(3),
            &mut [
                ("10", &mut short_op),
                ("10000", &mut long_op),
                ("fdatasync_small_write", &mut floor_op),
            ],
            &[(1, 0), (0, 2), (1, 2)],
        );
    }
    eprintln!(
        "  append_small_event: the long conversation now holds {} events",
        long_writer.state().entries
    );
    drop(long_writer);

    // ----- append_tool_response ----------------------------------------------
    let mut g = c.benchmark_group("append_tool_response");
    g.sample_size(20);
    let mut rolling = Rolling::new(&store, "tools", short.clone());
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
        b.iter(|| {
            floor.write_all(&small).expect("append");
            floor.sync_data().expect("fdatasync");
        });
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
                by_hand_log.write_all(&record).expect("append");
                by_hand_log.sync_data().expect("fdatasync");
                spent += t.elapsed();
            }
            spent
        });
    });
    g.finish();
    {
        let mut blob_op = || {
            n += 1;
            let batch = tool_pair(n);
            let w = rolling.writer();
            let t = Instant::now();
            w.append(batch).expect("append");
            t.elapsed()
        };
        let mut floor_op = || {
            let t = Instant::now();
            floor.write_all(&small).expect("append");
            floor.sync_data().expect("fdatasync");
            t.elapsed()
        };
        let mut by_hand_op = || {
            m += 1;
            let blob = unique_code(1 << 40 | m, TOOL_CONTENT);
            let t = Instant::now();
            publish_by_hand(&by_hand, m, &blob).expect("publish by hand");
            by_hand_log.write_all(&record).expect("append");
            by_hand_log.sync_data().expect("fdatasync");
            t.elapsed()
        };
        interleaved(
            "append_tool_response",
            1_000,
            Duration::from_secs(3),
            &mut [
                ("new_blob", &mut blob_op),
                ("fdatasync_small_write", &mut floor_op),
                ("floor_publish_1KiB_then_fdatasync", &mut by_hand_op),
            ],
            &[(0, 1), (0, 2)],
        );
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
            let bytes = std::fs::read(&jp_path).expect("read events.json");
            let v: Vec<Value> = serde_json::from_slice(&bytes).expect("parse events.json");
            assert_eq!(v.len(), LONG);
            v
        });
    });
    g.finish();

    // The view of the same conversation: open, decode, project, render as
    // JSON; with --refs no blob is read, without it every content is.
    let mut g = c.benchmark_group("view");
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    for (name, mode) in [("refs", ContentMode::Refs), ("inline", ContentMode::Inline)] {
        g.bench_function(BenchmarkId::new(name, LONG), |b| {
            b.iter_with_large_drop(|| {
                let conv = store.read(&read_id).expect("read");
                view_json(&store, &conv, mode).expect("view")
            });
        });
    }
    g.bench_function(BenchmarkId::new("jp_parse_events_json", LONG), |b| {
        b.iter_with_large_drop(|| {
            let bytes = std::fs::read(&jp_path).expect("read events.json");
            let v: Vec<Value> = serde_json::from_slice(&bytes).expect("parse events.json");
            v
        });
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
    drop(build(&store, "long-dedup-on", &with_resources));
    drop(build(&store, "long-dedup-off", &off));
    let on_id = ConversationId::parse("long-dedup-on").expect("id");
    let off_id = ConversationId::parse("long-dedup-off").expect("id");
    {
        let conv = store.read(&on_id).expect("read");
        let base = store.base_config(&conv).expect("base config");
        let traced =
            jpstore_engine::projection::view_traced(&conv.entries, &base).expect("the view");
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
            b.iter_with_large_drop(|| {
                let conv = store.read(id).expect("read");
                view_json(&store, &conv, ContentMode::Refs).expect("view")
            });
        });
    }
    // The projection alone, on decoded entries: without the pass, and with it.
    let conv = store.read(&on_id).expect("read");
    let base = store.base_config(&conv).expect("base config");
    g.bench_function(BenchmarkId::new("projection_only", LONG), |b| {
        b.iter_with_large_drop(|| jpstore_engine::projection::view(&conv.entries));
    });
    g.bench_function(BenchmarkId::new("projection_and_dedup", LONG), |b| {
        b.iter_with_large_drop(|| {
            jpstore_engine::projection::view_with_config(&conv.entries, &base).expect("view")
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
