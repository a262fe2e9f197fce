//! What each pack compression setting costs (format-spec.md 2.12):
//! `cargo bench --bench pack_settings`.
//!
//! For `fast`, `balanced` and `max` (`Options::import_compression`), on the
//! quick bench's import (24 JP conversations of 1,000 events):
//!
//! - the store's bytes (blobs + logs) over JP's bytes, and over the
//!   plain-JSON floor (every conversation's `export --format json` as one
//!   zstd -19 stream);
//! - the bytes of the blob store alone;
//! - the import's time over `fast`'s, interleaved (one import of each
//!   setting per round, into fresh stores);
//! - a cold read of one small blob (under 4 KiB): a new handle on the store
//!   each time, so its group is decompressed (the files are in the page
//!   cache), and a warm read (the same blob again, from the group cache);
//!   medians over blobs spread through the store.
//!
//! Not criterion: interleaved loops, as the quick bench. Output: one line
//! per setting, then one JSON object as the last line of stdout.

use jpstore_engine::internal::StoreInterior as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jpstore_benches::bench_dir::{describe, fresh_run_dir};
use jpstore_benches::setup::du;
use jpstore_benches::setup::import::{import_all, plain_json_zstd19, write_workspace};
use jpstore_benches::timing::{human, interleaved_by, median, three_digits};
use jpstore_blobstore::{BlobId, BlobStore, Compression};
use jpstore_engine::{Store, StoreOptions};
use serde_json::{json, Map, Value};

const CONVERSATIONS: usize = 24;
const EVENTS: usize = 1_000;

fn options(compression: Compression) -> StoreOptions {
    let mut options = StoreOptions::default();
    options.blobs.import_compression = compression;
    options
}

/// Medians of a cold and a warm read of small blobs of the store at `dir`.
fn reads(dir: &Path) -> (Duration, Duration) {
    let store = Store::open_dir(dir, StoreOptions::default()).expect("open");
    let small: Vec<BlobId> = store
        .blobs()
        .id_sizes()
        .expect("ids")
        .into_iter()
        .filter(|(_, size)| size.is_some_and(|s| s < 4096))
        .map(|(id, _)| id)
        .collect();
    let picks: Vec<BlobId> = small
        .iter()
        .step_by((small.len() / 60).max(1))
        .copied()
        .collect();
    let backend = Arc::clone(store.backend());
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    for id in &picks {
        let blobs = BlobStore::open(
            Arc::clone(&backend),
            "blobs",
            jpstore_blobstore::Options::default(),
        )
        .expect("a new handle");
        let t = Instant::now();
        let bytes = blobs.get(id).expect("cold read");
        cold.push(t.elapsed());
        let t = Instant::now();
        let again = blobs.get(id).expect("warm read");
        warm.push(t.elapsed());
        assert_eq!(bytes, again);
    }
    (median(cold), median(warm))
}

fn main() {
    let run = fresh_run_dir(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("pack-settings"));
    println!("pack_settings: {}", describe(&run));
    let workspace = run.join("jp-workspace");
    let jp_bytes = write_workspace(&workspace, CONVERSATIONS, EVENTS);
    let settings = Compression::ALL;
    let mut n = 0;
    let mut kept: Vec<Option<std::path::PathBuf>> = vec![None; settings.len()];
    let names: Vec<String> = settings.iter().map(|c| format!("import, {c}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let t = interleaved_by(&names, 2, 2, Duration::ZERO, &mut |i| {
        n += 1;
        let dir = run.join(format!("import-{n}"));
        let store = Store::init_dir(&dir, options(settings[i])).expect("init");
        let t = Instant::now();
        assert_eq!(import_all(&store, &workspace), CONVERSATIONS);
        let spent = t.elapsed();
        drop(store);
        match &kept[i] {
            None => kept[i] = Some(dir),
            Some(_) => std::fs::remove_dir_all(&dir).expect("remove an import store"),
        }
        spent
    });
    let floor = {
        let dir = kept[0].as_ref().expect("a fast store");
        let store = Store::open_dir(dir, StoreOptions::default()).expect("open");
        plain_json_zstd19(&store)
    };
    println!(
        "JP files {:.2} MB; export --format json of all {:.2} MB, zstd -19 as one stream {:.3} MB = {:.4} of JP's",
        jp_bytes as f64 / 1e6,
        floor.0 as f64 / 1e6,
        floor.1 as f64 / 1e6,
        floor.1 as f64 / jp_bytes as f64
    );
    let mut figures = Map::new();
    figures.insert(
        "plain_json_zstd19_vs_jp_bytes".into(),
        json!(three_digits(floor.1 as f64 / jp_bytes as f64)),
    );
    for (i, c) in settings.iter().enumerate() {
        let dir = kept[i].as_ref().expect("a store per setting");
        let (blobs, logs) = (du(&dir.join("blobs")), du(&dir.join("conversations")));
        let (cold, warm) = reads(dir);
        let store_vs_jp = (blobs + logs) as f64 / jp_bytes as f64;
        let store_vs_floor = (blobs + logs) as f64 / floor.1 as f64;
        let time_vs_fast = t.ratio(i, 0);
        println!(
            "{c}: store {:.3} MB (blobs {:.3} MB, logs {:.3} MB) = {:.4} of JP's, {:.3}x the floor; import {} ({:.2}x fast's); read of a small blob: cold {}, warm {}",
            (blobs + logs) as f64 / 1e6,
            blobs as f64 / 1e6,
            logs as f64 / 1e6,
            store_vs_jp,
            store_vs_floor,
            human(t.median(i)),
            time_vs_fast,
            human(cold),
            human(warm),
        );
        figures.insert(
            c.name().into(),
            json!({
                "store_bytes_vs_jp_bytes": three_digits(store_vs_jp),
                "store_bytes_vs_zstd19_floor": three_digits(store_vs_floor),
                "blob_bytes": blobs,
                "import_time_vs_fast": three_digits(time_vs_fast),
                "cold_read_us": three_digits(cold.as_secs_f64() * 1e6),
                "warm_read_us": three_digits(warm.as_secs_f64() * 1e6),
            }),
        );
    }
    let _ = std::fs::remove_dir_all(&run);
    println!("{}", Value::Object(figures));
}
