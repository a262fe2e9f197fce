//! Many packs against a low descriptor limit: every command of a store with
//! about a thousand packs runs in a process allowed 64 open descriptors
//! (format-spec.md 2.6: readers hold a bounded number of descriptors,
//! whatever the number of packs).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use jpstore_blobstore::storage::{LocalStorage, Storage};
use jpstore_blobstore::{BlobId, BlobStore, Options};
use jpstore_tests::{run_command, run_jp_store_in, Run};

/// Packs made for the test: about the number that made every command fail
/// with "Too many open files" under a limit of 1,024 descriptors.
const PACKS: usize = 1000;

/// Runs `jp-store` with at most 64 open descriptors (`ulimit -n 64` in the
/// shell that execs it), in `cwd`.
fn run_limited(store: &Path, cwd: &Path, args: &[&str], stdin: &[u8]) -> Run {
    let mut command = Command::new("sh");
    command
        .current_dir(cwd)
        .arg("-c")
        .arg("ulimit -n 64 && exec \"$0\" \"$@\"")
        .arg(jpstore_tests::jp_store_bin());
    run_command(command, store, args, stdin)
}

/// Publishes `count` packs of one object each through the batch writer,
/// with merging off (as in a store written before writers merged), so that
/// they stay separate; returns the ids.
fn make_packs(store_root: &Path, count: usize) -> Vec<BlobId> {
    let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(store_root).expect("storage"));
    let blobs = BlobStore::open(
        jpstore_blobstore::backend::FileBackend::shared(storage),
        "blobs",
        Options {
            threads: 1,
            small_pack_bytes: 0,
            ..Options::default()
        },
    )
    .expect("blob store");
    (0..count)
        .map(|i| {
            let content = format!("pack {i}: content of its own\n")
                .repeat(4)
                .into_bytes();
            let out = blobs
                .put_batch(1, |_| Ok(content.clone()), &mut |_| {})
                .expect("batch");
            assert!(out.pack.is_some(), "pack {i} was published");
            out.ids[0]
        })
        .collect()
}

fn pack_count(store_root: &Path) -> usize {
    std::fs::read_dir(store_root.join("blobs/packs"))
        .expect("list packs")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .ends_with(".idx")
        })
        .count()
}

#[test]
fn every_command_runs_with_a_thousand_packs_and_64_descriptors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
    let store = work.join("store");
    let run = |args: &[&str], stdin: &[u8]| run_jp_store_in(&store, Some(&work), args, stdin);
    run(&["init"], b"").ok("init");
    run(&["new", "--id", "c1"], b"").ok("new");
    std::fs::write(work.join("notes.txt"), b"attached before the packs\n").expect("write");
    run(&["attach", "c1", "notes.txt"], b"").ok("first attach");
    let ids = make_packs(&store, PACKS);
    assert!(pack_count(&store) > PACKS, "{} packs", pack_count(&store));

    let limited = |args: &[&str], stdin: &[u8], what: &str| {
        let out = run_limited(&store, &work, args, stdin);
        out.expect_code(0, what);
        assert!(
            !out.stderr.contains("Too many open files"),
            "{what}: {}",
            out.stderr
        );
        out
    };
    let listed = limited(&["ls", "--json"], b"", "ls");
    assert!(listed.stdout.contains("c1"), "ls: {}", listed.stdout);
    let view = limited(&["view", "c1"], b"", "view");
    assert!(
        view.stdout.contains("attached before the packs"),
        "the view reads the attached file from its pack: {}",
        view.stdout
    );
    let first = ids[0].to_string();
    let cat = limited(&["blob", "cat", &first], b"", "blob cat");
    assert_eq!(cat.stdout, "pack 0: content of its own\n".repeat(4));
    let batch = format!(
        "{{\"type\":\"turn_start\"}}\n\
         {{\"type\":\"tool_call_request\",\"id\":\"t1\",\"name\":\"fs_read_file\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"t1\",\"content\":\"{}\"}}\n",
        "a response long enough to be its own blob ".repeat(3)
    );
    limited(&["append", "c1"], batch.as_bytes(), "append");
    std::fs::write(work.join("more.txt"), b"attached among a thousand packs\n").expect("write");
    limited(&["attach", "c1", "more.txt"], b"", "attach");
    let fsck = limited(&["fsck", "--read-data", "--json"], b"", "fsck --read-data");
    let report: serde_json::Value = serde_json::from_str(&fsck.stdout).expect("fsck JSON");
    assert_eq!(report["clean"], true, "fsck: {}", fsck.stdout);
    limited(&["gc", "--grace", "0s"], b"", "gc");
    let view = limited(&["view", "c1"], b"", "view after gc");
    assert!(view.stdout.contains("attached among a thousand packs"));
}

#[test]
fn the_pack_count_stays_logarithmic_over_many_attaches() {
    let dir = tempfile::tempdir().expect("tempdir");
    let work = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
    let store = work.join("store");
    let run = |args: &[&str]| run_jp_store_in(&store, Some(&work), args, b"");
    run(&["init"]).ok("init");
    run(&["new", "--id", "c1"]).ok("new");
    let attaches = 64;
    for i in 0..attaches {
        let name = format!("file{i}.txt");
        let text = format!("attachment {i};").repeat(1 + i % 5 * 40);
        std::fs::write(work.join(&name), text).expect("write");
        run(&["attach", "c1", &name]).ok("attach");
    }
    let sizes: Vec<u64> = std::fs::read_dir(store.join("blobs/packs"))
        .expect("list packs")
        .map(|e| e.expect("entry"))
        .filter(|e| e.file_name().to_string_lossy().ends_with(".pack"))
        .map(|e| e.metadata().expect("metadata").len())
        .collect();
    assert_eq!(sizes.len(), pack_count(&store), "every pack has its index");
    let (total, min) = (sizes.iter().sum::<u64>(), sizes.iter().min().copied());
    let bound = min.map_or(0.0, |m| (total as f64 / m as f64).log2() + 1.0);
    assert!(
        (sizes.len() as f64) <= bound,
        "{} packs after {attaches} attaches: {sizes:?}",
        sizes.len()
    );
    let view = run(&["view", "c1"]);
    for i in 0..attaches {
        assert!(view.ok("view").contains(&format!("attachment {i};")));
    }
    let fsck = run(&["fsck", "--read-data", "--json"]);
    let report: serde_json::Value = serde_json::from_str(fsck.ok("fsck")).expect("fsck JSON");
    assert_eq!(report["clean"], true, "fsck: {}", fsck.stdout);
}
