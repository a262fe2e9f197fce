//! JP on jp-store against JP's own file backend, through JP's storage
//! traits (`jp_storage`), as JP calls them:
//!
//! - `persist`: one more turn persisted (`PersistBackend::write` of the
//!   whole stream, as JP's `ConversationMut::flush` calls it) on a
//!   realistic conversation of about 700 events (1.7 MB of JP's files) and
//!   on a synthetic one of 10,000 events (7.7 MB): `JpStoreBackend` (every write
//!   made durable) against `FsStorageBackend` (every file written again,
//!   nothing synced).
//! - `load`: `load_conversation_stream` of the same conversations by a
//!   backend made for it, as JP's first load after it starts.
//! - `list`: 1,000 conversations listed as JP's `Workspace` lists them at
//!   start: `load_conversation_index`, then `load_conversation_metadata_batch`
//!   of every id, by a backend made for it.
//!
//! Criterion measures each; the last line of stdout is one JSON object of
//! the ratios of this run's medians (`fs_vs_jpstore`: JP's time over the
//! store's, above 1 when the store is faster) and, under
//! `"targets"`, each target with its figure and whether it is met.
//! Stores and files are written below `$JPSTORE_BENCH_DIR`, else below the
//! cargo target directory (never a tmpfs, where a sync is free), and removed
//! at the end unless `$JPSTORE_BENCH_KEEP` is set.

mod workload;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, SamplingMode};
use jp_conversation::{ConversationId, ConversationStream};
use jp_storage::backend::{
    ConversationFilter, FsStorageBackend, LoadBackend, PersistBackend, Projection,
};
use jpstore_jp::JpStoreBackend;
use serde_json::{json, Value};

/// One conversation compared.
struct Case {
    /// `700` or `10k`.
    name: &'static str,
    /// The conversation before the measured turns.
    base: ConversationStream,
    /// Its turns (the next turn's number).
    turns: usize,
    /// Divides the sizes of texts (1: the realistic shape).
    scale: usize,
    /// Measured turns before the conversation is set back to `base`
    /// (untimed), so that it stays about the size it is named by.
    reset_every: usize,
}

fn bench_root() -> PathBuf {
    let root = match std::env::var_os("JPSTORE_BENCH_DIR") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("jp-bench"),
    };
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).expect("the bench directory");
    root
}

/// The file system holding `path` (from `/proc/mounts`: the longest mount
/// point that is a prefix of it).
fn file_system_of(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best: Option<(usize, String)> = None;
    for line in mounts.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        if f.len() < 3 || !path.starts_with(f[1]) {
            continue;
        }
        if best.as_ref().is_none_or(|(n, _)| f[1].len() > *n) {
            best = Some((
                f[1].len(),
                format!("{} on {} (mounted at {})", f[2], f[0], f[1]),
            ));
        }
    }
    best.map_or_else(|| "unknown".into(), |(_, s)| s)
}

fn fs_backend(root: &Path) -> FsStorageBackend {
    let root = camino::Utf8PathBuf::from_path_buf(root.to_path_buf()).expect("a UTF-8 path");
    FsStorageBackend::new(&root).expect("JP's backend")
}

fn store(dir: &Path) -> JpStoreBackend {
    JpStoreBackend::open(dir.to_str().expect("UTF-8")).expect("a store")
}

/// Bytes of JP's files of conversation `id` below `root`.
fn jp_bytes(root: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if let Ok(m) = p.metadata() {
                total += m.len();
            }
        }
    }
    total
}

/// Measures `write` of one more turn per iteration on `backend`, the
/// conversation set back to the case's base every `reset_every` turns by
/// `reset` (untimed).
fn persist_one(
    c: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    label: &str,
    case: &Case,
    backend: &dyn PersistBackend,
    reset: &dyn Fn(&ConversationStream),
) {
    let id = workload::id(1);
    let meta = workload::metadata("A long conversation");
    reset(&case.base);
    let mut stream = case.base.clone();
    let mut rng = workload::Rng::new(99);
    let mut k = 0;
    c.bench_function(BenchmarkId::new(label, case.name), |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                if k == case.reset_every {
                    reset(&case.base);
                    stream = case.base.clone();
                    rng = workload::Rng::new(99);
                    k = 0;
                }
                workload::add_turn(&mut stream, &mut rng, case.turns + k, case.scale);
                k += 1;
                let t = Instant::now();
                backend
                    .write(&id, &meta, &stream, Projection::Projected)
                    .expect("a write");
                total += t.elapsed();
            }
            total
        })
    });
}

fn persist(c: &mut Criterion, root: &Path, cases: &[Case]) {
    let mut g = c.benchmark_group("persist");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for case in cases {
        let id = workload::id(1);
        let meta = workload::metadata("A long conversation");
        let dir = root.join(format!("persist-fs-{}", case.name));
        let fs = fs_backend(&dir);
        persist_one(&mut g, "fs", case, &fs, &|base| {
            fs.write(&id, &meta, base, Projection::Projected)
                .expect("a write")
        });
        let dir = root.join(format!("persist-jpstore-{}", case.name));
        let js = store(&dir);
        persist_one(&mut g, "jpstore", case, &js, &|base| {
            let _ = js.remove(&id);
            js.write(&id, &meta, base, Projection::Projected)
                .expect("a write");
        });
    }
    g.finish();
}

/// The conversations of `load`, written by each backend: JP's files once
/// (they are the same whatever came before), the store turn by turn as JP
/// persists them.
fn load(c: &mut Criterion, root: &Path, cases: &[Case]) {
    let mut g = c.benchmark_group("load");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    for case in cases {
        let id = workload::id(2);
        let meta = workload::metadata("A long conversation");
        let fs_dir = root.join(format!("load-fs-{}", case.name));
        fs_backend(&fs_dir)
            .write(&id, &meta, &case.base, Projection::Projected)
            .expect("a write");
        let js_dir = root.join(format!("load-jpstore-{}", case.name));
        {
            // Turn by turn, as JP persists it: one record a turn.
            let js = store(&js_dir);
            for s in workload::prefixes(&case.base) {
                js.write(&id, &meta, &s, Projection::Projected)
                    .expect("a write");
            }
        }
        // Every write appended: nothing replaced was kept aside.
        let replaced =
            std::fs::read_dir(js_dir.join("quarantine/conversations")).map_or(0, |d| d.count());
        assert_eq!(
            replaced, 0,
            "the store's conversation was written turn by turn"
        );
        let a = fs_backend(&fs_dir)
            .load_conversation_stream(&id)
            .expect("JP loads");
        let b = store(&js_dir).load_conversation_stream(&id).expect("loads");
        assert!(a == b, "the store loads what JP's files hold");
        eprintln!(
            "load {}: {} events, JP's files {} bytes",
            case.name,
            a.len(),
            jp_bytes(&fs_dir)
        );
        g.bench_function(BenchmarkId::new("fs", case.name), |b| {
            b.iter(|| {
                fs_backend(&fs_dir)
                    .load_conversation_stream(&id)
                    .expect("JP loads")
            })
        });
        g.bench_function(BenchmarkId::new("jpstore", case.name), |b| {
            b.iter(|| store(&js_dir).load_conversation_stream(&id).expect("loads"))
        });
    }
    g.finish();
}

/// What JP's `Workspace` does at start to list its conversations.
fn list_all(backend: &dyn LoadBackend) -> usize {
    let ids: Vec<ConversationId> = backend.load_conversation_ids(ConversationFilter::default());
    let metas = backend.load_conversation_metadata_batch(&ids);
    metas.iter().filter(|(_, m)| m.is_ok()).count()
}

/// 1,000 conversations of 2 to 200 events (texts a fourth of the
/// realistic size), titled, some pinned or labelled; each persisted twice
/// (its first turn, then the rest), as JP persists turn by turn.
fn list(c: &mut Criterion, root: &Path) {
    const N: i64 = 1_000;
    let fs_dir = root.join("list-fs");
    let js_dir = root.join("list-jpstore");
    let fs = fs_backend(&fs_dir);
    let js = store(&js_dir);
    let mut rng = workload::Rng::new(5);
    let mut events = 0;
    for n in 0..N {
        let id = workload::id(1_000 + n * 37);
        let mut meta = workload::metadata(&format!(
            "Conversation {n}: {}",
            workload::prose(&mut rng, 30).trim()
        ));
        if n % 7 == 1 {
            meta.pinned_at = Some(chrono::Utc::now());
        }
        if n % 5 == 2 {
            meta.labels.insert("project".into(), "jp-store".into());
        }
        let target = rng.range(2, 200);
        let mut s = workload::empty();
        let mut t = 0;
        workload::add_turn(&mut s, &mut rng, t, 4);
        js.write(&id, &meta, &s, Projection::Projected)
            .expect("a write");
        while s.len() < target {
            t += 1;
            workload::add_turn(&mut s, &mut rng, t, 4);
        }
        events += s.len();
        js.write(&id, &meta, &s, Projection::Projected)
            .expect("a write");
        fs.write(&id, &meta, &s, Projection::Projected)
            .expect("a write");
    }
    drop(js);
    assert_eq!(list_all(&fs_backend(&fs_dir)), N as usize);
    assert_eq!(list_all(&store(&js_dir)), N as usize);
    eprintln!(
        "list: {N} conversations, {events} events, JP's files {} bytes",
        jp_bytes(&fs_dir)
    );
    let mut g = c.benchmark_group("list");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4));
    g.bench_function(BenchmarkId::new("fs", "1000"), |b| {
        b.iter(|| list_all(&fs_backend(&fs_dir)))
    });
    g.bench_function(BenchmarkId::new("jpstore", "1000"), |b| {
        b.iter(|| list_all(&store(&js_dir)))
    });
    g.finish();
}

/// The median of criterion's estimate for `group/function/param`.
fn median(out: &Path, group: &str, function: &str, param: &str) -> Option<f64> {
    let path = out
        .join(group)
        .join(function)
        .join(param)
        .join("new/estimates.json");
    let v: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    v["median"]["point_estimate"].as_f64()
}

fn main() {
    let root = bench_root();
    let out = match std::env::var_os("CARGO_TARGET_DIR") {
        Some(d) => PathBuf::from(d).join("criterion"),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/criterion"),
    };
    eprintln!("stores below {}: {}", root.display(), file_system_of(&root));
    let (realistic, turns) = workload::stream(1, 700, 1);
    let (synthetic, turns_10k) = workload::stream(2, 10_000, 4);
    let cases = [
        Case {
            name: "700",
            base: realistic,
            turns,
            scale: 1,
            reset_every: 20,
        },
        Case {
            name: "10k",
            base: synthetic,
            turns: turns_10k,
            scale: 4,
            reset_every: 100,
        },
    ];
    for case in &cases {
        let dir = root.join(format!("size-{}", case.name));
        fs_backend(&dir)
            .write(
                &workload::id(0),
                &workload::metadata("size"),
                &case.base,
                Projection::Projected,
            )
            .expect("a write");
        eprintln!(
            "case {}: {} events in {} turns, JP's files {} bytes",
            case.name,
            case.base.len(),
            case.turns,
            jp_bytes(&dir)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
    let mut c = Criterion::default()
        .output_directory(&out)
        .configure_from_args();
    persist(&mut c, &root, &cases);
    load(&mut c, &root, &cases);
    list(&mut c, &root);
    c.final_summary();
    if std::env::var_os("JPSTORE_BENCH_KEEP").is_none() {
        let _ = std::fs::remove_dir_all(&root);
    }

    let ratio = |group: &str, param: &str| -> Option<f64> {
        Some(median(&out, group, "fs", param)? / median(&out, group, "jpstore", param)?)
    };
    let p700 = ratio("persist", "700");
    let p10k = ratio("persist", "10k");
    let l700 = ratio("load", "700");
    let l10k = ratio("load", "10k");
    let list = ratio("list", "1000");
    let met = |v: Option<f64>, limit: f64| v.is_some_and(|v| v >= limit);
    println!(
        "{}",
        json!({
            "persist_700_fs_vs_jpstore": p700,
            "persist_10k_fs_vs_jpstore": p10k,
            "load_700_fs_vs_jpstore": l700,
            "load_10k_fs_vs_jpstore": l10k,
            "list_1000_fs_vs_jpstore": list,
            "targets": {
                "persist_5x_faster_700": {"figure": p700, "limit": 5.0, "met": met(p700, 5.0)},
                "persist_5x_faster_10k": {"figure": p10k, "limit": 5.0, "met": met(p10k, 5.0)},
                "persist_ratio_grows_with_length": {
                    "figure": p10k.zip(p700).map(|(a, b)| a / b), "limit": 1.0,
                    "met": p10k.zip(p700).is_some_and(|(a, b)| a > b)
                },
                "load_no_slower_700": {"figure": l700, "limit": 1.0, "met": met(l700, 1.0)},
                "load_no_slower_10k": {"figure": l10k, "limit": 1.0, "met": met(l10k, 1.0)},
                "list_2x_faster": {"figure": list, "limit": 2.0, "met": met(list, 2.0)},
            }
        })
    );
}
