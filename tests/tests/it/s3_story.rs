//! A store moved to a bucket and back, against a real S3 server (SeaweedFS,
//! see `jpstore_remote::testing`): a user imports JP conversations into a
//! local store, copies it into a bucket, works on it from two machines (two
//! processes with two caches) while gc runs from a third, checks it with
//! fsck, and copies it back. Nothing acknowledged is lost, nothing is
//! interleaved, and the copy back shows what the bucket shows. fsck on S3
//! finds a damaged object, and `--repair` moves it under `quarantine/`
//! without deleting anything. Without a server the tests say they were
//! skipped and why.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use jpstore_remote::testing::{server_or_skip, TestServer};
use jpstore_tests::{jp_store_bin, keys_below, output_of, stdout_of_success};
use serde_json::Value;

/// `B` of format-spec.md 5.5 for every process here, in seconds.
const BOUND_SECS: u64 = 8;
/// Request and retry timeouts (`T` is their sum), in seconds.
const TIMEOUT_SECS: u64 = 2;

/// One machine: the server's environment, the same bound for all, its own
/// cache directory.
fn machine(server: &TestServer, cache: &Path, store: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(jp_store_bin());
    cmd.arg("--store").arg(store).args(args);
    for (k, v) in server.env() {
        cmd.env(k, v);
    }
    cmd.env("JP_STORE_S3_WRITE_BOUND", BOUND_SECS.to_string())
        .env("JP_STORE_S3_REQUEST_TIMEOUT", TIMEOUT_SECS.to_string())
        .env("JP_STORE_S3_RETRY_TIMEOUT", TIMEOUT_SECS.to_string())
        .env("JP_STORE_CACHE_DIR", cache)
        .env_remove("JP_STORE_DIR");
    cmd
}

fn run(cmd: &mut Command, stdin: &[u8]) -> Output {
    output_of(cmd, stdin)
}

fn ok(cmd: &mut Command, stdin: &[u8]) -> String {
    let what = format!("{cmd:?}");
    stdout_of_success(run(cmd, stdin), what)
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/jp-workspace/.jp/conversations")
}

/// A tool call whose result is `content` (moved into the blob store).
fn tool_call(call: &str, content: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!([
        {"type": "tool_call_request", "id": call, "name": "fs_read_file", "arguments": {"path": call}},
        {"type": "tool_call_response", "id": call, "content": content},
    ]))
    .expect("json")
}

fn ids(server: &TestServer, cache: &Path, store: &str) -> Vec<String> {
    let listed: Value = serde_json::from_str(&ok(
        &mut machine(server, cache, store, &["ls", "--json"]),
        b"",
    ))
    .expect("ls json");
    let mut ids: Vec<String> = listed
        .as_array()
        .expect("array")
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_string())
        .collect();
    ids.sort();
    ids
}

#[test]
fn a_store_moved_to_a_bucket_worked_on_from_two_machines_with_gc_and_copied_back() {
    let Some(server) = server_or_skip(
        "a_store_moved_to_a_bucket_worked_on_from_two_machines_with_gc_and_copied_back",
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let local = tmp.path().join("local");
    let local = local.to_str().expect("utf-8").to_string();
    let back = tmp.path().join("back");
    let back = back.to_str().expect("utf-8").to_string();
    let bucket = server.fresh("story").to_string();
    let caches: Vec<PathBuf> = ["a", "b", "gc"]
        .iter()
        .map(|m| tmp.path().join(format!("cache-{m}")))
        .collect();
    let (a, b, c) = (&caches[0], &caches[1], &caches[2]);

    // A local store of JP's conversations, copied into the bucket.
    ok(&mut machine(server, a, &local, &["init"]), b"");
    ok(
        &mut machine(
            server,
            a,
            &local,
            &["import", workspace().to_str().expect("utf-8")],
        ),
        b"",
    );
    let local_ids = ids(server, a, &local);
    assert!(local_ids.len() >= 5, "{local_ids:?}");
    let copied = ok(
        &mut machine(server, a, &local, &["copy", &local, &bucket, "--json"]),
        b"",
    );
    let copied: Value = serde_json::from_str(&copied).expect("copy json");
    assert_eq!(copied["created"], local_ids.len(), "{copied}");
    assert_eq!(ids(server, b, &bucket), local_ids);

    // Garbage for gc, whose content the writers will also send (dedup
    // hits on an object gc is about to take).
    let shared = "content both machines and the garbage share ".repeat(300);
    let garbage = tmp.path().join("garbage.txt");
    std::fs::write(&garbage, &shared).expect("write");
    let unused = tmp.path().join("unused.txt");
    std::fs::write(&unused, "content nothing will reference ".repeat(300)).expect("write");
    ok(
        &mut machine(
            server,
            c,
            &bucket,
            &[
                "blob",
                "put",
                garbage.to_str().expect("utf-8"),
                unused.to_str().expect("utf-8"),
            ],
        ),
        b"",
    );
    let id = ok(
        &mut machine(server, a, &bucket, &["new", "--title", "shared"]),
        b"",
    )
    .trim()
    .to_string();

    // Two machines append to one conversation while gc runs twice.
    let rounds = 8;
    let writers: Vec<_> = [("a", a.clone()), ("b", b.clone())]
        .into_iter()
        .map(|(who, cache)| {
            let (bucket, id, shared) = (bucket.clone(), id.clone(), shared.clone());
            std::thread::spawn(move || {
                (0..rounds)
                    .map(|i| {
                        let call = format!("{who}-{i}");
                        let content = if i == 3 || i == 6 {
                            shared.clone()
                        } else {
                            format!("{call}: {}", "unique output ".repeat(200))
                        };
                        let out = run(
                            &mut machine(server, &cache, &bucket, &["append", &id]),
                            &tool_call(&call, &content),
                        );
                        std::thread::sleep(Duration::from_millis(300));
                        (
                            call,
                            content,
                            out.status.success(),
                            String::from_utf8_lossy(&out.stderr).into_owned(),
                        )
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let collector = {
        let (bucket, c) = (bucket.clone(), c.clone());
        std::thread::spawn(move || {
            (0..2)
                .map(|_| {
                    let out = ok(
                        &mut machine(server, &c, &bucket, &["gc", "--grace", "0s", "--json"]),
                        b"",
                    );
                    serde_json::from_str::<Value>(&out).expect("gc json")
                })
                .collect::<Vec<_>>()
        })
    };
    let mut results = Vec::new();
    for w in writers {
        results.extend(w.join().expect("writer"));
    }
    let gcs = collector.join().expect("gc");
    eprintln!(
        "acknowledged {} of {} appends; gc: {}",
        results.iter().filter(|r| r.2).count(),
        results.len(),
        gcs.iter()
            .map(|r| format!(
                "{} freed, {} restored, waited {} s",
                r["objects_freed"], r["restored"], r["waited_secs"]
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    assert!(
        gcs.iter().all(|r| r["dry_run"] == false),
        "gc ran for real: {gcs:?}"
    );
    let freed: u64 = gcs
        .iter()
        .map(|r| r["objects_freed"].as_u64().expect("n"))
        .sum();
    assert!(freed >= 1, "the unreferenced blob went: {gcs:?}");

    // Every acknowledged batch once, each machine's in its order, every
    // result readable; refused ones absent and saying why.
    let view: Value =
        serde_json::from_str(&ok(&mut machine(server, b, &bucket, &["view", &id]), b""))
            .expect("view json");
    let responses: Vec<(String, String)> = view
        .as_array()
        .expect("array")
        .iter()
        .filter(|e| e["type"] == "tool_call_response")
        .map(|e| {
            (
                e["id"].as_str().expect("id").to_string(),
                e["content"]
                    .as_str()
                    .map_or_else(|| e["content"].to_string(), str::to_string),
            )
        })
        .collect();
    for (call, content, acked, stderr) in &results {
        let found: Vec<&(String, String)> = responses.iter().filter(|r| &r.0 == call).collect();
        if *acked {
            assert_eq!(
                found.len(),
                1,
                "{call} acknowledged, found {} times",
                found.len()
            );
            assert!(
                found[0].1.contains(content.as_str()),
                "{call}: its result reads back whole"
            );
        } else {
            assert!(found.is_empty(), "{call} refused, yet found: {stderr}");
        }
    }
    for who in ["a", "b"] {
        let mine: Vec<usize> = responses
            .iter()
            .filter_map(|(call, _)| call.strip_prefix(&format!("{who}-")))
            .map(|n| n.parse().expect("number"))
            .collect();
        assert!(mine.windows(2).all(|w| w[0] < w[1]), "{who}: {mine:?}");
    }
    assert!(
        results.iter().filter(|r| r.2).count() >= rounds,
        "{results:?}"
    );
    let fsck: Value = serde_json::from_str(&ok(
        &mut machine(server, c, &bucket, &["fsck", "--read-data", "--json"]),
        b"",
    ))
    .expect("fsck json");
    assert_eq!(fsck["clean"], true, "{fsck}");

    // Copied back: the same conversations, each viewed alike.
    ok(
        &mut machine(server, c, &local, &["copy", &bucket, &back]),
        b"",
    );
    let all = ids(server, c, &bucket);
    assert_eq!(ids(server, c, &back), all);
    for id in &all {
        let there = ok(&mut machine(server, c, &bucket, &["view", id]), b"");
        let here = ok(&mut machine(server, c, &back, &["view", id]), b"");
        assert_eq!(there, here, "conversation {id}");
    }
    let fsck: Value = serde_json::from_str(&ok(
        &mut machine(server, c, &back, &["fsck", "--read-data", "--json"]),
        b"",
    ))
    .expect("fsck json");
    assert_eq!(fsck["clean"], true, "{fsck}");
}

#[test]
fn fsck_on_s3_finds_a_damaged_object_and_repair_moves_it_to_quarantine() {
    let Some(server) =
        server_or_skip("fsck_on_s3_finds_a_damaged_object_and_repair_moves_it_to_quarantine")
    else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let location = server.fresh("fsck");
    let url = location.to_string();
    ok(&mut machine(server, &cache, &url, &["init"]), b"");
    let id = ok(&mut machine(server, &cache, &url, &["new"]), b"")
        .trim()
        .to_string();
    let content = "a tool's output, to be damaged on the server ".repeat(100);
    ok(
        &mut machine(server, &cache, &url, &["append", &id]),
        &tool_call("c1", &content),
    );
    // The blob's object, damaged in place (a bit flipped by a disk of the
    // server, say): same length, other bytes.
    let backend = server.backend(location.clone());
    use jpstore_blobstore::backend::{Backend, Expect};
    let keys = keys_below(&backend, Path::new("blobs/objects"));
    // The loose blobs (the content, the base config), each damaged in
    // place (a bit flipped by a disk of the server, say): same length,
    // other bytes.
    assert!(!keys.is_empty(), "loose blobs: {keys:?}");
    let mut damaged = Vec::new();
    for key in &keys {
        let mut bytes =
            jpstore_blobstore::backend::read_all(&*backend.open(key).expect("open"), u64::MAX)
                .expect("read");
        let last = bytes.len() - 1;
        bytes[last] ^= 0x55;
        backend
            .replace(key, &bytes, Path::new("tmp/x"), Expect::Any, true)
            .expect("damage");
        damaged.push(bytes);
    }

    let found = run(
        &mut machine(server, &cache, &url, &["fsck", "--read-data", "--json"]),
        b"",
    );
    assert_eq!(found.status.code(), Some(1), "fsck reports the damage");
    let report: Value = serde_json::from_slice(&found.stdout).expect("fsck json");
    assert_eq!(report["clean"], false, "{report}");
    for key in &keys {
        let named = key.file_name().expect("name").to_str().expect("utf-8");
        assert!(
            report.to_string().contains(named),
            "names {named}: {report}"
        );
    }

    let repaired = run(
        &mut machine(
            server,
            &cache,
            &url,
            &["fsck", "--read-data", "--repair", "--json"],
        ),
        b"",
    );
    let report: Value = serde_json::from_slice(&repaired.stdout).expect("fsck json");
    assert!(
        !report["repairs"].as_array().expect("repairs").is_empty(),
        "{report}"
    );
    // Moved, not deleted: the damaged bytes are under quarantine/.
    for key in &keys {
        assert!(
            backend.head(key).is_err(),
            "{} gone from its key",
            key.display()
        );
    }
    let quarantined = keys_below(&backend, Path::new("quarantine"));
    let held: Vec<Vec<u8>> = quarantined
        .iter()
        .map(|q| {
            jpstore_blobstore::backend::read_all(&*backend.open(q).expect("open"), u64::MAX)
                .expect("read")
        })
        .collect();
    for bytes in &damaged {
        assert!(
            held.contains(bytes),
            "every damaged object is kept in quarantine: {quarantined:?}"
        );
    }
}

/// What a command printed as JSON, or a failure showing what it said.
fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A repair that keeps a conversation's whole records, on S3, where moving
/// a directory copies its objects: done, it leaves the name of a repair
/// done in quarantine; stopped between its steps (the move made, the
/// records not put back), the next fsck reports it and the next repair
/// completes it.
#[test]
fn a_repair_keeping_records_on_s3_is_completed_even_when_stopped() {
    let Some(server) =
        server_or_skip("a_repair_keeping_records_on_s3_is_completed_even_when_stopped")
    else {
        return;
    };
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("cache");
    let location = server.fresh("repair");
    let url = location.to_string();
    let backend = server.backend(location.clone());
    use jpstore_blobstore::backend::{Backend, Expect};
    ok(&mut machine(server, &cache, &url, &["init"]), b"");
    let mut ends = Vec::new();
    for stopped in [false, true] {
        let id = ok(&mut machine(server, &cache, &url, &["new"]), b"")
            .trim()
            .to_string();
        let mut offsets = Vec::new();
        for call in ["c1", "c2", "c3"] {
            let out = ok(
                &mut machine(server, &cache, &url, &["append", &id, "--json"]),
                &tool_call(call, &format!("the output of {call}")),
            );
            let out: Value = serde_json::from_str(&out).expect("append json");
            offsets.push(out["offset"].as_u64().expect("offset"));
        }
        // The last record damaged in place on the server.
        let log = PathBuf::from(format!("conversations/{id}/events.log"));
        let mut bytes =
            jpstore_blobstore::backend::read_all(&*backend.open(&log).expect("open"), u64::MAX)
                .expect("read");
        let kept = bytes[..offsets[2] as usize].to_vec();
        let at = offsets[2] as usize + 30;
        bytes[at] ^= 0x55;
        backend
            .replace(&log, &bytes, Path::new("tmp/x"), Expect::Any, true)
            .expect("damage");
        let stamp = format!("{id}.1795000000-5");
        if stopped {
            // As a repair stopped after its move leaves it.
            let moving = PathBuf::from(format!(
                "quarantine/conversations/{stamp}.repairing-{}",
                offsets[2]
            ));
            backend
                .rename(Path::new(&format!("conversations/{id}")), &moving)
                .expect("move");
            let found = run(&mut machine(server, &cache, &url, &["fsck", "--json"]), b"");
            assert_eq!(found.status.code(), Some(1), "the stopped repair is damage");
            let report: Value = json_of(&found);
            assert!(
                report["findings"]
                    .as_array()
                    .expect("findings")
                    .iter()
                    .any(|f| f["kind"] == "interrupted-repair" && f["conversation"] == id.as_str()),
                "{report}"
            );
        }
        let repaired = run(
            &mut machine(server, &cache, &url, &["fsck", "--repair", "--json"]),
            b"",
        );
        let report: Value = json_of(&repaired);
        assert!(
            !report["repairs"].as_array().expect("repairs").is_empty(),
            "{report}"
        );
        let back =
            jpstore_blobstore::backend::read_all(&*backend.open(&log).expect("open"), u64::MAX)
                .expect("read");
        assert_eq!(back, kept, "the whole records before the damage are back");
        ends.push((id, stamp, stopped));
    }
    let quarantined = keys_below(&backend, Path::new("quarantine/conversations"));
    assert!(
        quarantined
            .iter()
            .all(|k| !k.to_string_lossy().contains(".repairing-")),
        "{quarantined:?}"
    );
    for (id, stamp, stopped) in &ends {
        let done = quarantined
            .iter()
            .filter(|k| k.to_string_lossy().contains(&format!("/{id}.")))
            .any(|k| k.ends_with("events.log"));
        assert!(
            done,
            "{id}: its whole log is in quarantine: {quarantined:?}"
        );
        if *stopped {
            assert!(
                quarantined
                    .iter()
                    .any(|k| k.starts_with(format!("quarantine/conversations/{stamp}"))),
                "{quarantined:?}"
            );
        }
        ok(&mut machine(server, &cache, &url, &["view", id]), b"");
    }
    let after = run(&mut machine(server, &cache, &url, &["fsck", "--json"]), b"");
    let report: Value = json_of(&after);
    assert_eq!(report["clean"], true, "{report}");
}
