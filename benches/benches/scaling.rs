//! How cost grows with size, each size beside its baseline or floor in an
//! interleaved loop (`timing::interleaved`: one of each per round, shuffled, medians), not
//! criterion: criterion measures one benchmark after another, and on this
//! shared machine a sync's cost changes tenfold and a parse's threefold
//! from one minute to the next, which bent its curves.
//!
//! - append: durable append of one ~100-byte event to a conversation of
//!   10, 1,000, 10,000 and 100,000 events and one 150-byte write +
//!   `fdatasync`, all five in one loop. A fresh conversation of the same
//!   size replaces the one appended to every size / 10 appends (at least
//!   100), outside the timing, so each stays within a tenth (or 100 events)
//!   of its size.
//! - JP's flush at the same sizes: serialize the whole `events.json`
//!   (pretty, base64 already applied) and write it over the old one,
//!   without a sync, as JP does on every change (after the appends, so its
//!   writeback does not land on their syncs).
//! - view: open + `view --refs` of conversations of 10 to 100,000 events,
//!   beside JP's open of the same conversation (read + parse
//!   `events.json` + undo JP's base64).
//! - attach: collect + attach of generated source trees of 100, 1,000 and
//!   10,000 files into a fresh store, beside SHA-256 + zstd-3 of the same
//!   bytes from memory on all cores, in the groups of 256 KiB of packs of
//!   version 2.
//!
//! Flush, view and attach run one size after another (each size's pair
//! interleaved): after a large operation the allocator and the page cache
//! make the next small one pay milliseconds, which mixing sizes in one loop
//! charged to the small sizes.
//!
//! The conversations are built once per run, as an agent writes them (one
//! record per step) but without syncs (`setup::unsynced`, synced once
//! before measuring): a 100,000-event conversation takes seconds that way,
//! minutes with a sync per record.
//!
//! Output: one line per comparison on stderr and, as the last line of
//! stdout, one JSON object: for each series, the median (and 90th
//! percentile) nanoseconds by size; for each comparison, its ratio by size
//! (`append_vs_fdatasync`, `jp_parse_vs_view_refs`, `attach_vs_floor`: the
//! median over rounds of the ratio within a round, see `Timings::ratio`);
//! and the bytes of each workload.
//! `python3 benches/report.py scaling OUT` turns a saved output into the
//! tables and the plot of BENCHMARKS.md.
//!
//! Run: `cargo bench --bench scaling` (about two minutes of run time).

use jpstore_engine::internal::ConversationIdInterior as _;
use std::fs::File;
use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jpstore_benches::bench_dir::{describe, fresh_run_dir};
use jpstore_benches::floor::{
    append_file, batch_settings, cores, fdatasync_write, hash_and_compress_grouped,
};
use jpstore_benches::setup::attach::{collect_and_attach, store_with_conversation, write_tree};
use jpstore_benches::setup::conversation::{
    jp_parse, open_and_view_refs, small_event, store_with, timed_append, write_jp_events, Rolling,
    ROLL_EVERY,
};
use jpstore_benches::setup::du;
use jpstore_benches::timing::{interleaved_by, three_digits, timed, Timings};
use jpstore_benches::workload::conversation::jp_entries;
use jpstore_benches::ConversationShape;
use jpstore_engine::conversation::ConversationId;
use serde_json::{json, Map, Value};

/// Seed of the conversations (the conversation bench's).
const SEED: u64 = 0x6a70_2d63_6f6e_7665;
/// Seed of the trees (the attach bench's).
const TREE_SEED: u64 = 0x6a70_2d61_7474_6163;
/// Conversation lengths.
const EVENTS: [usize; 4] = [10, 1_000, 10_000, 100_000];
/// Tree sizes.
const FILES: [usize; 3] = [100, 1_000, 10_000];

fn main() {
    let started = Instant::now();
    let run = fresh_run_dir(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("scaling-bench"));
    println!("scaling: {}", describe(&run));
    let mut out = Map::new();
    conversations(&run, &mut out);
    attach(&run, &mut out);
    let _ = std::fs::remove_dir_all(&run);
    println!(
        "scaling: done in {:.1} s (setup included)",
        started.elapsed().as_secs_f64()
    );
    println!("{}", Value::Object(out));
}

/// Records the medians and 90th percentiles of `t`'s operations `ops`
/// under `series` (`{"<size>": ns}`), with the names `sizes`.
fn record(out: &mut Map<String, Value>, series: &str, t: &Timings, ops: &[usize], sizes: &[usize]) {
    let pick = |q: f64| -> Map<String, Value> {
        ops.iter()
            .zip(sizes)
            .map(|(&i, n)| (n.to_string(), json!(t.quantile(i, q).as_nanos() as u64)))
            .collect()
    };
    out.insert(format!("{series}_ns"), Value::Object(pick(0.5)));
    out.insert(format!("{series}_p90_ns"), Value::Object(pick(0.9)));
}

/// `{"<size>": ratio}`, three significant digits.
fn ratios(values: impl IntoIterator<Item = (usize, f64)>) -> Value {
    Value::Object(
        values
            .into_iter()
            .map(|(n, r)| (n.to_string(), json!(three_digits(r))))
            .collect(),
    )
}

fn by_size(values: impl IntoIterator<Item = (usize, u64)>) -> Value {
    Value::Object(
        values
            .into_iter()
            .map(|(n, v)| (n.to_string(), json!(v)))
            .collect(),
    )
}

fn conversations(run: &Path, out: &mut Map<String, Value>) {
    let started = Instant::now();
    let generated: Vec<Vec<Value>> = EVENTS
        .iter()
        .map(|&n| ConversationShape::generate(SEED, n))
        .collect();
    let names: Vec<String> = EVENTS.iter().map(|n| format!("view-{n}")).collect();
    let all: Vec<(&str, &[Value])> = names
        .iter()
        .zip(&generated)
        .map(|(name, entries)| (name.as_str(), entries.as_slice()))
        .collect();
    let (dir, store) = store_with(run, &all);
    let ids: Vec<ConversationId> = names
        .iter()
        .map(|n| ConversationId::parse(n).expect("an id"))
        .collect();
    let jp_paths: Vec<_> = EVENTS
        .iter()
        .zip(&generated)
        .map(|(n, entries)| {
            let path = dir.path().join(format!("events-{n}.json"));
            write_jp_events(&path, entries);
            path
        })
        .collect();
    let log_bytes: Vec<u64> = ids
        .iter()
        .map(|id| du(&dir.path().join(id.dir())))
        .collect();
    let jp_bytes: Vec<u64> = jp_paths
        .iter()
        .map(|p| std::fs::metadata(p).map_or(0, |m| m.len()))
        .collect();
    out.insert(
        "log_bytes".into(),
        by_size(EVENTS.into_iter().zip(log_bytes.iter().copied())),
    );
    out.insert(
        "jp_bytes".into(),
        by_size(EVENTS.into_iter().zip(jp_bytes.iter().copied())),
    );
    eprintln!(
        "  setup: conversations of {EVENTS:?} events in {:.1} s; logs {:?} bytes, JP's events.json {:?} bytes",
        started.elapsed().as_secs_f64(),
        log_bytes,
        jp_bytes
    );
    let sizes: Vec<String> = EVENTS.iter().map(|n| format!("{n} events")).collect();

    // Append: all sizes and the floor in one loop (they are all small, and
    // a sync's cost changes from one minute to the next).
    let event = small_event();
    let mut rollings: Vec<Rolling<'_>> = EVENTS
        .iter()
        .zip(&generated)
        .map(|(n, entries)| {
            let every = (*n as u64 / 10).max(ROLL_EVERY);
            Rolling::new(&store, format!("append-{n}"), entries.clone(), every).unsynced(dir.path())
        })
        .collect();
    let mut floor = append_file(dir.path(), "fdatasync-floor").expect("the floor's file");
    let names: Vec<&str> = sizes
        .iter()
        .map(String::as_str)
        .chain(["fdatasync"])
        .collect();
    let run = &mut |i: usize| match rollings.get_mut(i) {
        Some(r) => timed_append(r.writer(), vec![event.clone()]),
        None => timed(|| fdatasync_write(&mut floor, &[b'x'; 150]).expect("fdatasync")),
    };
    // A few rounds first: each size's first conversation is built there.
    interleaved_by(&names, 5, 5, Duration::ZERO, run);
    let t = interleaved_by(&names, 200, 3_000, Duration::from_secs(10), run);
    let floor_index = EVENTS.len();
    let all_sizes: Vec<usize> = (0..EVENTS.len()).collect();
    t.print(
        "append of one small event",
        &all_sizes
            .iter()
            .map(|&i| (i, floor_index))
            .collect::<Vec<_>>(),
    );
    record(out, "append", &t, &all_sizes, &EVENTS);
    out.insert(
        "append_vs_fdatasync".into(),
        ratios(
            EVENTS
                .iter()
                .enumerate()
                .map(|(i, &n)| (n, t.ratio(i, floor_index))),
        ),
    );
    out.insert(
        "fdatasync_ns".into(),
        json!(t.median(floor_index).as_nanos() as u64),
    );
    out.insert("append_rounds".into(), json!(t.rounds));

    // JP's flush, after the appends so its writeback does not land on their
    // syncs; each size rewrites its own file, as JP rewrites its own.
    let encoded: Vec<Vec<Value>> = generated.iter().map(|e| jp_entries(e)).collect();
    let flushed: Vec<PathBuf> = EVENTS
        .iter()
        .map(|n| dir.path().join(format!("flushed-{n}.json")))
        .collect();
    let flush = &mut |i: usize| {
        timed(|| {
            let file = File::create(&flushed[i]).expect("create events.json");
            let mut w = BufWriter::new(file);
            serde_json::to_writer_pretty(&mut w, &encoded[i]).expect("serialize");
            w.write_all(b"\n").expect("write");
            w.flush().expect("write");
        })
    };
    let t = per_size(
        "JP's flush, events",
        &EVENTS,
        5,
        Duration::from_secs(2),
        &mut [("JP flush", flush)],
    );
    series(out, "jp_flush", &t, 0, &EVENTS);
    drop(encoded);
    for f in &flushed {
        let _ = std::fs::remove_file(f);
    }

    // Open + view --refs vs JP's open.
    let view = &mut |i: usize| {
        let t = Instant::now();
        let view = open_and_view_refs(&store, &ids[i]);
        let spent = t.elapsed();
        drop(black_box(view));
        spent
    };
    let parse = &mut |i: usize| {
        let t = Instant::now();
        let v = jp_parse(&jp_paths[i]);
        let spent = t.elapsed();
        drop(black_box(v));
        spent
    };
    let t = per_size(
        "view, events",
        &EVENTS,
        7,
        Duration::from_secs(3),
        &mut [
            ("open + view --refs", view),
            ("JP read + parse + base64 decode", parse),
        ],
    );
    series(out, "view_refs", &t, 0, &EVENTS);
    series(out, "jp_read_parse", &t, 1, &EVENTS);
    out.insert(
        "jp_parse_vs_view_refs".into(),
        ratios(EVENTS.iter().zip(&t).map(|(&n, t)| (n, t.ratio(1, 0)))),
    );
}

/// For each size (by index `i` into `sizes`), the operations `ops(i)`
/// interleaved for at least `min_rounds` rounds, then until `budget` is
/// spent; sizes one after another (see the module documentation). Prints
/// each size's line.
fn per_size(
    title: &str,
    sizes: &[usize],
    min_rounds: usize,
    budget: Duration,
    ops: &mut [(&str, &mut dyn FnMut(usize) -> Duration)],
) -> Vec<Timings> {
    (0..sizes.len())
        .map(|i| {
            let names: Vec<&str> = ops.iter().map(|(n, _)| *n).collect();
            let t = interleaved_by(&names, min_rounds, 1_000, budget, &mut |k| (ops[k].1)(i));
            let ratios: Vec<(usize, usize)> = (1..t.names.len()).map(|b| (b, 0)).collect();
            t.print(&format!("{title} at {}", sizes[i]), &ratios);
            t
        })
        .collect()
}

/// Records operation `op`'s median and 90th percentile nanoseconds of every
/// size's `Timings` under `name` (`{"<size>": ns}`), and the rounds.
fn series(out: &mut Map<String, Value>, name: &str, t: &[Timings], op: usize, sizes: &[usize]) {
    let pick = |q: f64| -> Map<String, Value> {
        t.iter()
            .zip(sizes)
            .map(|(t, n)| (n.to_string(), json!(t.quantile(op, q).as_nanos() as u64)))
            .collect()
    };
    out.insert(format!("{name}_ns"), Value::Object(pick(0.5)));
    out.insert(format!("{name}_p90_ns"), Value::Object(pick(0.9)));
    let rounds: Map<String, Value> = t
        .iter()
        .zip(sizes)
        .map(|(t, n)| (n.to_string(), json!(t.rounds)))
        .collect();
    out.insert(format!("{name}_rounds"), Value::Object(rounds));
}

fn attach(run: &Path, out: &mut Map<String, Value>) {
    let started = Instant::now();
    let trees: Vec<_> = FILES
        .iter()
        .map(|&n| {
            let dir = run.join(format!("tree-{n}"));
            let files = write_tree(TREE_SEED, n, &dir);
            (n, dir, files)
        })
        .collect();
    let stores = run.join("attach-stores");
    std::fs::create_dir_all(&stores).expect("create the stores' dir");
    let bytes: Vec<u64> = trees
        .iter()
        .map(|(_, _, files)| files.iter().map(|f| f.bytes.len() as u64).sum())
        .collect();
    out.insert(
        "tree_bytes".into(),
        by_size(FILES.into_iter().zip(bytes.iter().copied())),
    );
    eprintln!(
        "  setup: trees of {FILES:?} files ({bytes:?} bytes) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let cores = cores();
    let attach = &mut |i: usize| {
        let (n, dir, _) = &trees[i];
        let (tmp, store, id) = store_with_conversation(&stores);
        let spent = timed(|| drop(collect_and_attach(dir, &store, &id, *n)));
        drop(store);
        drop(tmp);
        spent
    };
    let floor = &mut |i: usize| {
        let files = &trees[i].2;
        timed(|| {
            black_box(hash_and_compress_grouped(
                files.len(),
                cores,
                batch_settings(),
                &|k| files[k].bytes.clone(),
            ));
        })
    };
    let t = per_size(
        "attach, files",
        &FILES,
        5,
        Duration::from_secs(4),
        &mut [("attach", attach), ("SHA-256 + zstd-3 floor", floor)],
    );
    series(out, "attach", &t, 0, &FILES);
    series(out, "attach_floor", &t, 1, &FILES);
    out.insert(
        "attach_vs_floor".into(),
        ratios(FILES.iter().zip(&t).map(|(&n, t)| (n, t.ratio(0, 1)))),
    );
}
