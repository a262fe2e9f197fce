//! The headline comparisons in under a minute: `cargo bench --bench quick`.
//!
//! Not criterion: every comparison is a hand-written interleaved loop
//! (`timing::interleaved`: the operations run one of each per round, in a
//! shuffled order and with the allocator settled between them, so a burst
//! of load from another process lands on all of them alike) with a few rounds
//! and a time budget, and the figure is the median over rounds of the
//! ratio of the two times in the same round (`Timings::ratio`). The
//! workloads and floors are the component benches' (`setup`, `floor`), at
//! sizes that fit the minute:
//!
//! - append: durable append of one ~100-byte event to a conversation of 10
//!   and of 10,000 events, beside one `fdatasync` of a 150-byte write; and
//!   the same event appended to the 10,000-event conversation as a turn
//!   (`ConversationHandle::append_turn`: the automatic compaction a turn may
//!   call for decided, from the handle's state and settings);
//! - view: open + `view --refs` of a 10,000-event conversation as the
//!   command runs it (`setup::conversation::open_and_view_refs`: read,
//!   project, render as pretty JSON into memory), and open + `view --format
//!   anthropic` of it (`open_and_view_anthropic`: content read from the
//!   blob store, the request body as pretty JSON in memory), beside JP's
//!   open of the same conversation (read its `events.json`, parse it with
//!   serde_json and undo JP's base64, as JP does on load); and open +
//!   `view --refs` of a 10-event conversation beside JP's open of it;
//! - import: 24 JP conversations of 1,000 events into a fresh store (with
//!   the default import compression, `max`), beside reading and parsing
//!   their files; store bytes beside JP's bytes, and beside the plain-JSON
//!   floor (every conversation's `export --format json` as one zstd -19
//!   stream, `setup::import::plain_json_zstd19`);
//! - attach: collect + attach of a 1,000-file generated source tree into a
//!   fresh store, beside SHA-256 + zstd-3 of the same bytes in the groups of
//!   256 KiB the store's packs use (from memory, on all cores), and beside
//!   the same with each file compressed alone (the floor of packs of
//!   version 1);
//! - maintenance, on 100,000 blobs in 100 conversations (+200 unreferenced
//!   loose objects): `fsck --read-data` beside zstd decompression of every
//!   group (the store's grouping) + SHA-256 of every blob (from memory, all
//!   cores), and beside decompressing every blob alone (version 1's floor);
//!   `gc --dry-run` in seconds (the brief's target) and beside reading every
//!   log and pack index and stat-ing every other file of the store (gc's
//!   metadata floor).
//!
//! Output: one human-readable line per comparison on stdout, then, as the
//! last line of stdout, one JSON object. Each key `A_vs_B` is A's time (or
//! bytes) over B's, so below 1 means A is cheaper; the one
//! absolute figure's key ends in `_seconds`. `"targets"` says, for every
//! target of the brief, the figure, the limit and whether it is met.
//! Setup and progress go to stderr.
//!
//! Stores live below `JPSTORE_BENCH_DIR` if set, else below cargo's
//! `CARGO_TARGET_TMPDIR` (not a tmpfs `/tmp`: the syncs must be real), and
//! are removed at the end; the import store is moved to
//! `JPSTORE_BENCH_KEEP_IMPORT` if that is set (a path on the same file
//! system), for `benches/store_parts.py`.
//!
//! Run: `cargo bench --bench quick` (from the workspace root).

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jpstore_benches::bench_dir::{describe, fresh_run_dir};
use jpstore_benches::floor::{
    batch_settings, compress_all, compress_grouped, cores, decompress_and_hash,
    decompress_and_hash_groups, escape_strings, hash_and_compress, hash_and_compress_grouped,
    read_files, strings_of,
};
use jpstore_benches::setup::attach::{
    collect_and_attach, paths, store_with_conversation, write_tree,
};
use jpstore_benches::setup::conversation::{
    jp_parse, open_and_view_anthropic, open_and_view_refs, store_with, write_jp_events, AppendBench,
};
use jpstore_benches::setup::import::{
    import_all, plain_json_zstd19, read_and_parse_jp_files, write_workspace,
};
use jpstore_benches::setup::maintenance::{self, read_metadata, MaintenanceShape};
use jpstore_benches::setup::{du, files_below};
use jpstore_benches::timing::{human, interleaved, three_digits, timed, Timings};
use jpstore_benches::ConversationShape;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::{Store, StoreOptions};
use serde_json::{json, Map, Value};

/// Seed of the conversations (the conversation bench's).
const SEED: u64 = 0x6a70_2d63_6f6e_7665;
/// Seed of the attached tree (the attach bench's).
const TREE_SEED: u64 = 0x6a70_2d61_7474_6163;
/// Events of the long conversation.
const LONG: usize = 10_000;
/// Events of the short conversation.
const SHORT: usize = 10;
/// JP conversations imported, and their events.
const IMPORTED: (usize, usize) = (24, 1_000);
/// Files of the attached tree.
const FILES: usize = 1_000;
/// The maintenance store: 100,000 referenced blobs.
const MAINTENANCE: MaintenanceShape = MaintenanceShape {
    conversations: 100,
    turns: 100,
    blocks: 10,
    orphans: 200,
};

/// A target of the brief, on one figure.
#[derive(Clone, Copy)]
struct Target {
    /// Its key in `"targets"`.
    name: &'static str,
    /// Whether the figure must be at most (else at least) `limit`.
    at_most: bool,
    limit: f64,
}

const fn at_most(name: &'static str, limit: f64) -> Option<Target> {
    Some(Target {
        name,
        at_most: true,
        limit,
    })
}

const fn at_least(name: &'static str, limit: f64) -> Option<Target> {
    Some(Target {
        name,
        at_most: false,
        limit,
    })
}

/// The figures, in the order measured, and the targets.
#[derive(Default)]
struct Report {
    figures: Map<String, Value>,
    targets: Map<String, Value>,
}

impl Report {
    /// Records figure `key` (rounded to three significant digits) and, with
    /// a target, whether it is met; returns `key = value [verdict]`.
    fn figure(&mut self, key: &str, value: f64, target: Option<Target>) -> String {
        let value = three_digits(value);
        self.figures.insert(key.into(), json!(value));
        let Some(t) = target else {
            return format!("{key} = {value}");
        };
        let met = if t.at_most {
            value <= t.limit
        } else {
            value >= t.limit
        };
        let op = if t.at_most { "<=" } else { ">=" };
        self.targets.insert(
            t.name.into(),
            json!({"figure": key, "limit": format!("{op} {}", t.limit), "met": met}),
        );
        let verdict = if met { "met" } else { "MISSED" };
        format!("{key} = {value} [target {op} {}: {verdict}]", t.limit)
    }

    /// Records `key` = median of operation `a` / median of `b` for every
    /// `(key, a, b, target)` and prints one line: `what`, the medians, the
    /// figures.
    fn timings(
        &mut self,
        what: &str,
        t: &Timings,
        figures: &[(&str, usize, usize, Option<Target>)],
    ) {
        let figures: Vec<String> = figures
            .iter()
            .map(|&(key, a, b, target)| self.figure(key, t.ratio(a, b), target))
            .collect();
        println!(
            "{what}: {} over {} rounds; {}",
            t.summary(),
            t.rounds,
            figures.join(", ")
        );
    }

    fn json(mut self) -> String {
        self.figures
            .insert("targets".into(), Value::Object(self.targets));
        Value::Object(self.figures).to_string()
    }
}

fn main() {
    let started = Instant::now();
    let run = fresh_run_dir(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("quick-bench"));
    println!("quick: {}", describe(&run));
    let mut report = Report::default();
    conversation(&run, &mut report);
    import(&run, &mut report);
    attach(&run, &mut report);
    maintenance(&run, &mut report);
    let _ = std::fs::remove_dir_all(&run);
    println!(
        "quick: done in {:.1} s (setup included)",
        started.elapsed().as_secs_f64()
    );
    println!("{}", report.json());
}

/// Prints how long a setup step took, to stderr.
fn setup<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    eprintln!("  setup: {what} in {}", human(t.elapsed()));
    out
}

/// Append and view on a 10,000-event conversation.
fn conversation(run: &Path, report: &mut Report) {
    let (long, short) = setup("generate the conversations", || {
        (
            ConversationShape::generate(SEED, LONG),
            ConversationShape::generate(SEED, SHORT),
        )
    });
    let (dir, store) = setup(
        "store the 10,000-event conversation twice and the 10-event one",
        || {
            store_with(
                run,
                &[
                    ("long-read", &long),
                    ("long-append", &long),
                    ("short-read", &short),
                ],
            )
        },
    );
    let jp_path = dir.path().join("events.json");
    let jp_bytes = setup("write JP's events.json", || {
        write_jp_events(&jp_path, &long)
    });
    let jp_short_path = dir.path().join("events-short.json");
    setup("write JP's events.json of 10 events", || {
        write_jp_events(&jp_short_path, &short)
    });

    let long_writer = store
        .conversation(&ConversationId::parse("long-append").expect("an id"))
        .expect("open the conversation");
    let t = AppendBench::new(&store, dir.path(), short, long_writer).interleaved(
        100,
        2_000,
        Duration::from_secs(3),
    );
    report.timings(
        "append of one small event",
        &t,
        &[
            (
                "append_10k_vs_fdatasync",
                1,
                2,
                at_most("append_about_one_fdatasync", 1.1),
            ),
            ("append_10_vs_fdatasync", 0, 2, None),
            (
                "append_10k_vs_append_10",
                1,
                0,
                at_most("append_independent_of_length", 1.25),
            ),
            (
                "turn_append_10k_vs_append_10k",
                3,
                1,
                at_most("turn_append_like_any_append", 1.2),
            ),
        ],
    );

    let id = ConversationId::parse("long-read").expect("an id");
    let short_id = ConversationId::parse("short-read").expect("an id");
    let mut view_op = || {
        let t = Instant::now();
        let view = open_and_view_refs(&store, &id);
        let spent = t.elapsed();
        drop(black_box(view));
        spent
    };
    let mut anthropic_op = || {
        let t = Instant::now();
        let body = open_and_view_anthropic(&store, &id);
        let spent = t.elapsed();
        drop(black_box(body));
        spent
    };
    let mut short_view_op = || {
        let t = Instant::now();
        let view = open_and_view_refs(&store, &short_id);
        let spent = t.elapsed();
        drop(black_box(view));
        spent
    };
    let mut jp_op = || {
        let t = Instant::now();
        let v = jp_parse(&jp_path);
        let spent = t.elapsed();
        assert_eq!(v.len(), LONG);
        drop(black_box(v));
        spent
    };
    let mut jp_short_op = || {
        let t = Instant::now();
        let v = jp_parse(&jp_short_path);
        let spent = t.elapsed();
        assert_eq!(v.len(), SHORT);
        drop(black_box(v));
        spent
    };
    // The least writing the `anthropic` body costs: escaping its strings
    // into memory already in use.
    let body: Value = serde_json::from_slice(&open_and_view_anthropic(&store, &id))
        .expect("the request body is JSON");
    let strings = strings_of(&body);
    drop(body);
    let mut escaped = Vec::new();
    let mut escape_op = || timed(|| escape_strings(&strings, &mut escaped));
    let t = interleaved(
        5,
        50,
        Duration::from_secs(4),
        &mut [
            ("open + view --refs", &mut view_op),
            ("JP read + parse + base64 decode", &mut jp_op),
            ("open + view --format anthropic", &mut anthropic_op),
            ("open + view --refs, 10 events", &mut short_view_op),
            (
                "JP read + parse + base64 decode, 10 events",
                &mut jp_short_op,
            ),
            ("escape the anthropic body's strings", &mut escape_op),
        ],
    );
    report.timings(
        &format!(
            "view of 10,000 events (log {:.1} MB, JP events.json {:.1} MB) and of 10",
            du(&dir.path().join("conversations/long-read")) as f64 / 1e6,
            jp_bytes as f64 / 1e6
        ),
        &t,
        &[
            (
                "jp_parse_vs_view_refs_10k",
                1,
                0,
                at_least("view_refs_20x_faster_than_jp_parse", 20.0),
            ),
            (
                "jp_parse_vs_view_anthropic_10k",
                1,
                2,
                at_least("view_anthropic_5x_faster_than_jp_parse", 5.0),
            ),
            (
                "jp_parse_10_vs_view_refs_10",
                4,
                3,
                at_least("view_refs_10_faster_than_jp_parse_10", 1.0),
            ),
            ("view_refs_10_vs_jp_parse_10k", 3, 1, None),
            ("jp_parse_vs_escape_anthropic_body", 1, 5, None),
        ],
    );
}

/// Import of JP conversations: bytes and time.
fn import(run: &Path, report: &mut Report) {
    let (conversations, events) = IMPORTED;
    let workspace = run.join("jp-workspace");
    let jp_bytes = setup("write the JP workspace", || {
        write_workspace(&workspace, conversations, events)
    });
    let mut n = 0;
    let mut sized = None;
    let mut import_op = || {
        n += 1;
        let dir = run.join(format!("import-{n}"));
        let store = Store::init_dir(&dir, StoreOptions::default()).expect("init");
        let spent = timed(|| assert_eq!(import_all(&store, &workspace), conversations));
        drop(store);
        match sized {
            None => sized = Some(dir),
            Some(_) => std::fs::remove_dir_all(&dir).expect("remove an import store"),
        }
        spent
    };
    let mut parse_op = || timed(|| assert_eq!(read_and_parse_jp_files(&workspace), conversations));
    // Two rounds at least: an import at level 19 takes seconds.
    let t = interleaved(
        2,
        5,
        Duration::from_secs(4),
        &mut [
            ("import", &mut import_op),
            ("read + parse JP files", &mut parse_op),
        ],
    );
    let dir = sized.expect("one import store kept");
    let (blobs, logs) = (du(&dir.join("blobs")), du(&dir.join("conversations")));
    let store_bytes = blobs + logs;
    let (json_bytes, floor_bytes) = setup("zstd -19 of the conversations' plain JSON", || {
        let store = Store::open_dir(&dir, StoreOptions::default()).expect("open");
        plain_json_zstd19(&store)
    });
    // Kept where `JPSTORE_BENCH_KEEP_IMPORT` says, for a look at its bytes
    // (`benches/store_parts.py`).
    match std::env::var_os("JPSTORE_BENCH_KEEP_IMPORT") {
        Some(keep) => {
            let keep = PathBuf::from(keep);
            let _ = std::fs::remove_dir_all(&keep);
            match std::fs::rename(&dir, &keep) {
                Ok(()) => eprintln!("import store kept at {}", keep.display()),
                Err(e) => eprintln!("import store not kept at {}: {e}", keep.display()),
            }
        }
        None => {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    let bytes = report.figure(
        "import_store_bytes_vs_jp_bytes",
        store_bytes as f64 / jp_bytes as f64,
        at_most("store_at_most_0_18_of_jp", 0.18),
    );
    let vs_floor = report.figure(
        "import_store_bytes_vs_zstd19_floor",
        store_bytes as f64 / floor_bytes as f64,
        at_most("store_at_most_zstd19_of_plain_json", 1.0),
    );
    let floor = report.figure(
        "zstd19_floor_bytes_vs_jp_bytes",
        floor_bytes as f64 / jp_bytes as f64,
        None,
    );
    println!(
        "import of {conversations} JP conversations x {events} events: store {:.2} MB (blobs {:.2} MB, logs {:.2} MB), JP files {:.1} MB, plain JSON {:.1} MB as one zstd -19 stream {:.2} MB; {bytes}, {vs_floor}, {floor}",
        store_bytes as f64 / 1e6,
        blobs as f64 / 1e6,
        logs as f64 / 1e6,
        jp_bytes as f64 / 1e6,
        json_bytes as f64 / 1e6,
        floor_bytes as f64 / 1e6,
    );
    report.timings(
        &format!("import of {conversations} JP conversations, time"),
        &t,
        &[("import_vs_read_parse_jp_files", 0, 1, None)],
    );
}

/// Attach of a generated tree vs SHA-256 + zstd-3 of its bytes.
fn attach(run: &Path, report: &mut Report) {
    let tree = run.join("tree");
    let files = setup("write the tree", || write_tree(TREE_SEED, FILES, &tree));
    let raw: u64 = files.iter().map(|f| f.bytes.len() as u64).sum();
    let stores = run.join("attach-stores");
    std::fs::create_dir_all(&stores).expect("create the stores' dir");
    let cores = cores();
    let mut attach_op = || {
        let (tmp, store, id) = store_with_conversation(&stores);
        let spent = timed(|| drop(collect_and_attach(&tree, &store, &id, FILES)));
        drop((store, tmp));
        spent
    };
    let settings = batch_settings();
    let mut floor_op = || {
        timed(|| {
            black_box(hash_and_compress_grouped(
                files.len(),
                cores,
                settings,
                &|i| files[i].bytes.clone(),
            ));
        })
    };
    let mut each_op = || {
        timed(|| {
            black_box(hash_and_compress(files.len(), cores, &|i| {
                files[i].bytes.clone()
            }));
        })
    };
    // What any attach does besides the floor: read the files, list the tree.
    let tree_files = paths(&files, &tree);
    let mut read_op = || {
        timed(|| {
            black_box(read_files(&tree_files, cores));
        })
    };
    let mut list_op = || {
        timed(|| {
            let links = jpstore_integrations::attach::Links::default();
            drop(black_box(jpstore_integrations::attach::collect(
                std::slice::from_ref(&tree),
                &tree,
                links,
            )));
        })
    };
    let t = interleaved(
        5,
        30,
        Duration::from_secs(3),
        &mut [
            ("attach", &mut attach_op),
            ("SHA-256 + zstd-3 in groups floor", &mut floor_op),
            ("SHA-256 + zstd-3 of each file", &mut each_op),
            ("read the files", &mut read_op),
            ("list the tree", &mut list_op),
        ],
    );
    report.timings(
        &format!(
            "attach of {FILES} files ({:.1} MB), floors on {cores} cores",
            raw as f64 / 1e6
        ),
        &t,
        &[
            (
                "attach_1k_files_vs_hash_zstd_floor",
                0,
                1,
                at_most("attach_within_1_3x_of_hash_zstd", 1.3),
            ),
            ("attach_1k_files_vs_hash_zstd_each_file", 0, 2, None),
            ("attach_read_files_vs_hash_zstd_floor", 3, 1, None),
            ("attach_list_tree_vs_hash_zstd_floor", 4, 1, None),
        ],
    );
}

/// fsck --read-data and gc --dry-run on 100,000 blobs.
fn maintenance(run: &Path, report: &mut Report) {
    let dir: PathBuf = run.join("maintenance");
    let (store, all) = setup("build the 100,000-blob store", || {
        maintenance::build(&dir, MAINTENANCE)
    });
    let (grouped, compressed) = setup("compress the floors' blobs", || {
        (
            compress_grouped(&all, batch_settings(), cores()),
            compress_all(&all, cores()),
        )
    });
    let raw: usize = all.iter().map(Vec::len).sum();
    drop(all);
    let cores = cores();
    let mut fsck_op = || timed(|| drop(maintenance::fsck(&store, true)));
    let mut floor_op = || timed(|| decompress_and_hash_groups(&grouped, cores));
    let mut each_op = || timed(|| decompress_and_hash(&compressed, cores));
    // What fsck does besides the floor: the log checks, reading the store.
    let mut log_checks_op = || timed(|| drop(maintenance::fsck(&store, false)));
    let store_files = files_below(&dir);
    let mut read_op = || {
        timed(|| {
            black_box(read_files(&store_files, cores));
        })
    };
    let t = interleaved(
        5,
        5,
        Duration::ZERO,
        &mut [
            ("fsck --read-data", &mut fsck_op),
            ("decompress groups + SHA-256 floor", &mut floor_op),
            ("decompress each blob + SHA-256", &mut each_op),
            ("fsck, log checks only", &mut log_checks_op),
            ("read every file of the store", &mut read_op),
        ],
    );
    report.timings(
        &format!(
            "fsck --read-data of {} blobs ({:.1} MB raw, {} groups)",
            compressed.len(),
            raw as f64 / 1e6,
            grouped.len()
        ),
        &t,
        &[
            (
                "fsck_read_data_vs_decompress_hash_floor",
                0,
                1,
                at_most("fsck_read_data_within_1_2x_of_decompress_hash", 1.2),
            ),
            ("fsck_read_data_vs_decompress_hash_each_blob", 0, 2, None),
            ("fsck_log_checks_vs_decompress_hash_floor", 3, 1, None),
            ("fsck_read_files_vs_decompress_hash_floor", 4, 1, None),
        ],
    );
    drop((grouped, compressed));

    let mut gc_op = || {
        timed(|| {
            let r = maintenance::gc_dry_run(&store);
            assert_eq!(r.loose_removed, MAINTENANCE.orphans);
        })
    };
    let mut files = 0;
    let mut meta_op = || timed(|| files = read_metadata(&dir).0);
    let t = interleaved(
        5,
        20,
        Duration::from_secs(2),
        &mut [
            ("gc --dry-run", &mut gc_op),
            ("read logs + indexes, stat all", &mut meta_op),
        ],
    );
    let seconds = report.figure(
        "gc_dry_run_100k_blobs_seconds",
        t.median(0).as_secs_f64(),
        at_most("gc_100k_blobs_in_seconds", 10.0),
    );
    let what = format!(
        "gc --dry-run of {} blobs in {} conversations ({files} files in the store)",
        MAINTENANCE.referenced() + MAINTENANCE.orphans,
        MAINTENANCE.conversations
    );
    println!("{what}: {seconds}");
    report.timings(
        &what,
        &t,
        &[("gc_dry_run_vs_read_metadata_floor", 0, 1, None)],
    );
}
