//! `jp-store grep` on a store of 10,000 conversations beside `rg` over the
//! same text exported as plain files, in one interleaved loop
//! (`timing::interleaved`: one of each per round, shuffled, medians of
//! per-round ratios).
//!
//! The store: 10,000 generated coding-agent conversations
//! (`ConversationShape::generate`, 40 events each: a few turns of
//! messages, reasoning, tool calls and their output, re-read files among
//! them), imported as `jp-store import` stores them (`Store::import`, the
//! default `max` compression: packs of version 2, 8 MiB groups at zstd
//! 19), 500 conversations a batch. The plain files: one file per
//! conversation holding every text `grep` searches (`search::walk`: each
//! part's text, a line break after each that does not end with one), so
//! both sides search the same lines and find the same number of hits (the
//! bench checks it before it times anything). `rg` reads each re-read
//! file's content as many times as it was read; `grep` reads each blob
//! once.
//!
//! Both run as processes, their output read through a pipe (neither may
//! take a discarded output as leave to stop early), on all cores:
//!
//! - `grep PATTERN`: `jp-store --store S grep [FLAGS] PATTERN`;
//! - `rg PATTERN`: `rg --no-config -N [FLAGS] PATTERN DIR`.
//!
//! Patterns: a fixed string found nowhere (every byte read, nothing
//! printed), a word found in a few percent of the lines, and a
//! case-insensitive regular expression.
//!
//! Output: one line per comparison on stderr and, as the last line of
//! stdout, one JSON object of medians (nanoseconds), ratios, hits and
//! sizes.
//!
//! Run: `cargo bench --bench grep` (builds the release `jp-store` first if
//! needed; needs `rg` on the PATH). `JPSTORE_GREP_CONVERSATIONS` and
//! `JPSTORE_GREP_EVENTS` change the store's size.

use jpstore_engine::internal::StoreInterior as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jpstore_benches::bench_dir::{bench_dir, describe, fresh_run_dir};
use jpstore_benches::setup::conversation::parse;
use jpstore_benches::timing::{human, interleaved, three_digits, Op};
use jpstore_benches::workload::conversation::ConversationShape;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::import::Prepared;
use jpstore_engine::internal::search::{walk, Text};
use jpstore_engine::{Store, StoreOptions};
use serde_json::{json, Map, Value};

const SEED: u64 = 41;
const FIRST_ID: u64 = 17_000_000_000;
const BATCH: usize = 500;

/// The patterns: (name, flags, pattern).
const PATTERNS: [(&str, &[&str], &str); 3] = [
    ("absent", &["-F"], "no such text anywhere"),
    ("word", &[], "lifetime"),
    ("regex -i", &["-i"], r"panics\b|unsafe\s+\w+\("),
];

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let conversations = env_or("JPSTORE_GREP_CONVERSATIONS", 10_000);
    let events = env_or("JPSTORE_GREP_EVENTS", 40);
    let bin = jp_store_release();
    let default_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("grep-bench");
    // JPSTORE_GREP_REUSE=1: time the store and files an earlier run of the
    // same size left (a build of the store takes minutes).
    let reused = bench_dir(&default_dir).join("run");
    let reuse = std::env::var_os("JPSTORE_GREP_REUSE").is_some()
        && std::fs::read_to_string(reused.join("size")).ok()
            == Some(format!("{conversations} {events}"));
    let run = if reuse {
        reused
    } else {
        fresh_run_dir(&default_dir)
    };
    println!("{}", describe(&run));
    let rg_version = Command::new("rg")
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_owned()
        })
        .expect("rg on the PATH (`cargo install ripgrep`)");
    eprintln!("{rg_version}");
    let store_dir = run.join("store");
    let plain = run.join("plain");
    if !reuse {
        build(&run, conversations, events);
    }
    let store_bytes = jpstore_benches::setup::du(&store_dir);
    let plain_bytes = jpstore_benches::setup::du(&plain);
    let grep_command = |flags: &[&str], pattern: &str| {
        let mut c = Command::new(&bin);
        c.arg("--store")
            .arg(&store_dir)
            .arg("grep")
            .args(flags)
            .arg("--")
            .arg(pattern);
        c
    };
    let rg_command = |flags: &[&str], pattern: &str| {
        let mut c = Command::new("rg");
        c.args(["--no-config", "--no-ignore", "-N"])
            .args(flags)
            .arg("--")
            .arg(pattern)
            .arg(&plain);
        c
    };

    // What one search reads: blobs, and pack groups decompressed beside
    // the groups there are (each at most once).
    let store = Store::open_dir(&store_dir, StoreOptions::default()).expect("the store");
    let packs = store.blobs().packs().expect("the packs");
    let groups: usize = packs.iter().map(|p| p.groups).sum();
    drop(store);
    let verbose = Command::new(&bin)
        .arg("--store")
        .arg(&store_dir)
        .args(["-v", "grep", "-F", "--", "no such text anywhere"])
        .output()
        .expect("grep -v");
    let read = String::from_utf8_lossy(&verbose.stderr)
        .lines()
        .find(|l| l.contains("pack groups decompressed"))
        .unwrap_or("")
        .trim_start_matches("jp-store: ")
        .to_owned();
    eprintln!("one search: {read}; the packs hold {groups} groups");

    let mut results = Map::new();
    for (name, flags, pattern) in PATTERNS {
        // The same hits on both sides, before anything is timed.
        let grep_lines = lines_of(&mut grep_command(flags, pattern));
        let rg_lines = lines_of(&mut rg_command(flags, pattern));
        assert_eq!(
            grep_lines, rg_lines,
            "{name}: grep and rg find as many lines"
        );
        let mut grep_op = || run_piped(&mut grep_command(flags, pattern));
        let mut rg_op = || run_piped(&mut rg_command(flags, pattern));
        let mut ops: [Op<'_>; 2] = [("grep", &mut grep_op), ("rg", &mut rg_op)];
        let t = interleaved(10, 40, Duration::from_secs(60), &mut ops);
        let ratio = t.ratio(0, 1);
        eprintln!(
            "{name} ({pattern:?}, {grep_lines} lines): grep {} rg {} grep/rg {:.2} ({} rounds)",
            human(t.median(0)),
            human(t.median(1)),
            ratio,
            t.rounds
        );
        results.insert(
            (*name).to_owned(),
            json!({
                "pattern": pattern,
                "flags": flags,
                "lines": grep_lines,
                "grep_ns": t.median(0).as_nanos() as u64,
                "rg_ns": t.median(1).as_nanos() as u64,
                "grep_vs_rg": three_digits(ratio),
                "rounds": t.rounds,
            }),
        );
    }
    let mut out = Map::new();
    out.insert("conversations".into(), json!(conversations));
    out.insert("events".into(), json!(events));
    out.insert("store_bytes".into(), json!(store_bytes));
    out.insert("plain_bytes".into(), json!(plain_bytes));
    out.insert("rg".into(), json!(rg_version));
    out.insert("one_search".into(), json!(read));
    out.insert("pack_groups".into(), json!(groups));
    out.insert("patterns".into(), Value::Object(results));
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", Value::Object(out)).expect("stdout");
}

/// Builds the store (`run/store`) and the plain files (`run/plain`).
fn build(run: &Path, conversations: usize, events: usize) {
    let store_dir = run.join("store");
    let started = Instant::now();
    let store = Store::init_dir(&store_dir, StoreOptions::default()).expect("a store");
    let ids: Vec<u64> = (0..conversations as u64).collect();
    for chunk in ids.chunks(BATCH) {
        let batch: Vec<Prepared> = chunk
            .iter()
            .map(|i| {
                let entries = ConversationShape::generate(SEED + i, events);
                let mut fields = Map::new();
                fields.insert("title".into(), json!(format!("conversation {i}")));
                Prepared {
                    id: ConversationId::parse(&(FIRST_ID + i).to_string()).expect("an id"),
                    fields,
                    base_config: None,
                    base_config_text: None,
                    entries: entries.iter().map(parse).collect(),
                    source_bytes: 0,
                }
            })
            .collect();
        jpstore_engine::import::run(&store, batch, false, &mut |_| {}).expect("the import");
    }
    eprintln!(
        "store: {conversations} conversations of {events} events, {} MB, built in {}",
        jpstore_benches::setup::du(&store_dir) / 1_000_000,
        human(started.elapsed())
    );

    // The same text as plain files, one per conversation.
    let plain = run.join("plain");
    std::fs::create_dir_all(&plain).expect("the plain directory");
    let mut plain_bytes = 0u64;
    for id in store.ids().expect("the ids") {
        let conversation = store.read(&id).expect("a conversation");
        let mut text: Vec<u8> = Vec::new();
        walk(&conversation, &mut |step| {
            let bytes: Vec<u8> = match step.text {
                Text::Inline(t) => t.to_vec(),
                Text::Blob(r) => store.blobs().get(&r.id).expect("a blob"),
            };
            if memchr_zero(&bytes) {
                return true;
            }
            text.extend_from_slice(&bytes);
            if !bytes.ends_with(b"\n") {
                text.push(b'\n');
            }
            true
        });
        plain_bytes += text.len() as u64;
        std::fs::write(plain.join(format!("{id}.txt")), &text).expect("a plain file");
    }
    eprintln!(
        "plain files: {conversations} files, {} MB",
        plain_bytes / 1_000_000
    );
    std::fs::write(run.join("size"), format!("{conversations} {events}")).expect("size");
}

fn memchr_zero(bytes: &[u8]) -> bool {
    bytes.contains(&0)
}

/// The lines a command prints (it must exit 0: something was found, or 1:
/// nothing was).
fn lines_of(command: &mut Command) -> usize {
    let out = command.stderr(Stdio::inherit()).output().expect("running");
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{command:?}: {}",
        out.status
    );
    out.stdout.iter().filter(|b| **b == b'\n').count()
}

/// Runs `command` with its output read through a pipe; returns the time
/// from its start to its exit.
fn run_piped(command: &mut Command) -> Duration {
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawning");
    let mut sink = Vec::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_end(&mut sink).expect("reading its output");
    }
    let status = child.wait().expect("waiting");
    let elapsed = started.elapsed();
    assert!(
        matches!(status.code(), Some(0 | 1)),
        "{command:?}: {status}"
    );
    elapsed
}

/// The release `jp-store`, built if needed.
fn jp_store_release() -> PathBuf {
    let exe = std::env::current_exe().expect("the bench's path");
    let mut dir = exe.parent().expect("its directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let target = dir.parent().expect("the target directory").to_path_buf();
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml");
    let status = Command::new(env!("CARGO"))
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "jp-store",
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target)
        .status()
        .expect("running cargo build");
    assert!(
        status.success(),
        "cargo build --release -p jp-store: {status}"
    );
    target
        .join("release")
        .join(format!("jp-store{}", std::env::consts::EXE_SUFFIX))
}
