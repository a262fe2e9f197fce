//! Real process crashes: a writer process appends batches as fast as it can
//! and is killed with SIGKILL at a random moment; the store is reopened and
//! checked. Every batch the writer saw acknowledged is present, whole and
//! once; no batch is partly visible; after the automatic tail repair fsck
//! (with `--read-data`) is clean. A bounded number of rounds, each on the
//! same store, so later rounds recover from earlier kills too.

use jpstore_engine::internal::StoreInterior as _;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use jpstore_tests::assert_fsck_clean;
use rand::{Rng, SeedableRng};

const EVENTS_PER_BATCH: usize = 3;

fn batch_text(round: u64, n: u64) -> String {
    // A large content (tears across pages) and a small one.
    let big = format!("round {round} batch {n} ").repeat(800);
    format!(
        "{{\"type\":\"tool_call_request\",\"id\":\"r{round}b{n}\",\"name\":\"fs_read_file\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"r{round}b{n}\",\"content\":\"{big}\"}}\n\
         {{\"type\":\"chat_response\",\"message\":\"done {round}/{n}\"}}"
    )
}

/// The child: appends batches until killed, recording each acknowledged one.
fn writer(dir: &Path, round: u64) {
    let store = Store::open_dir(dir, StoreOptions::default()).expect("open");
    let id = ConversationId::parse("k").expect("id");
    if !store.exists(&id).expect("exists") {
        let _ = store.create(NewConversation {
            id: Some(id.clone()),
            ..Default::default()
        });
    }
    let mut acks = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("acks"))
        .expect("acks file");
    let mut w = store.writer(&id).expect("writer");
    for n in 0.. {
        let text = if n == 0 {
            format!("{{\"type\":\"turn_start\"}}\n{}", batch_text(round, n))
        } else {
            batch_text(round, n)
        };
        let mut entries = parse_input(
            &text,
            ParseMode::Strict {
                now: Timestamp::now(),
            },
        )
        .expect("input")
        .entries;
        if n == 0 {
            // The turn_start is its own batch, so every later batch has
            // exactly EVENTS_PER_BATCH events.
            let rest = entries.split_off(1);
            w.append(entries).expect("append turn_start");
            entries = rest;
        }
        w.append(entries).expect("append");
        // Acknowledged: durable. Record it (one small O_APPEND write).
        acks.write_all(format!("{round} {n}\n").as_bytes())
            .expect("ack");
    }
}

/// The full name of the test `name` of this module in its test binary
/// (`kill_recovery::NAME`: the binary's modules are its crate's files), as
/// `--exact` takes it.
fn test_path(name: &str) -> String {
    let module = module_path!()
        .split_once("::")
        .map_or("", |(_crate, module)| module);
    format!("{module}::{name}")
}

#[test]
#[ignore = "entry point of the child process of the kill test"]
fn kill_recovery_writer_process() {
    if let (Ok(dir), Ok(round)) = (
        std::env::var("JPSTORE_KILL_DIR"),
        std::env::var("JPSTORE_KILL_ROUND"),
    ) {
        writer(Path::new(&dir), round.parse().expect("round"));
    }
}

#[test]
fn sigkill_at_random_moments_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    Store::init_dir(&root, StoreOptions::default()).expect("init");
    let exe = std::env::current_exe().expect("test binary");
    let seed: u64 = std::env::var("JPSTORE_KILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut checked_rounds = 0;
    for round in 0..6u64 {
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                &test_path("kill_recovery_writer_process"),
                "--ignored",
                "--test-threads=1",
            ])
            .env("JPSTORE_KILL_DIR", &root)
            .env("JPSTORE_KILL_ROUND", round.to_string())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn writer");
        std::thread::sleep(Duration::from_millis(rng.gen_range(80..400)));
        child.kill().expect("SIGKILL");
        child.wait().expect("wait");

        // Reopen: the writer's open cuts a torn tail; then check.
        let store = Store::open_dir(&root, StoreOptions::default()).expect("open");
        let id = ConversationId::parse("k").expect("id");
        if !store.exists(&id).expect("exists") {
            continue; // killed before the conversation was published
        }
        drop(
            store
                .writer(&id)
                .unwrap_or_else(|e| panic!("seed {seed} round {round}: reopen for writing: {e}")),
        );
        let conv = store.read(&id).expect("read");
        let doc = conversation_json(&store, &conv, ContentMode::Inline).unwrap_or_else(|e| {
            panic!("seed {seed} round {round}: a referenced blob is unreadable: {e}")
        });
        let events = doc["events"].as_array().expect("events");
        // Batches: (round, n) from each tool_call_request id, with the
        // response and message right after it.
        let mut seen = std::collections::HashSet::new();
        let mut i = 0;
        while i < events.len() {
            let e = &events[i];
            if e["type"] == "turn_start" {
                i += 1;
                continue;
            }
            let id = e["id"].as_str().unwrap_or_else(|| {
                panic!("seed {seed} round {round}: a batch does not start at event {i}: {e}")
            });
            let (r, n) = id[1..].split_once('b').expect("r<round>b<n>");
            let (r, n): (u64, u64) = (r.parse().expect("round"), n.parse().expect("n"));
            assert!(
                i + EVENTS_PER_BATCH <= events.len(),
                "seed {seed} round {round}: batch {id} is partly visible"
            );
            assert_eq!(
                events[i + 1]["content"],
                format!("round {r} batch {n} ").repeat(800),
                "seed {seed} round {round}: {id}"
            );
            assert_eq!(events[i + 2]["message"], format!("done {r}/{n}"));
            assert!(
                seen.insert((r, n)),
                "seed {seed} round {round}: batch {id} appears twice"
            );
            i += EVENTS_PER_BATCH;
        }
        let acks = std::fs::read_to_string(root.join("acks")).unwrap_or_default();
        for line in acks.lines() {
            let (r, n) = line.split_once(' ').expect("ack line");
            let key: (u64, u64) = (r.parse().expect("round"), n.parse().expect("n"));
            assert!(
                seen.contains(&key),
                "seed {seed} round {round}: acknowledged batch {key:?} is missing"
            );
        }
        assert_fsck_clean(&store, &format!("seed {seed} round {round}"));
        checked_rounds += 1;
    }
    // The test is only worth something if the writers got work done.
    let acks = std::fs::read_to_string(root.join("acks")).unwrap_or_default();
    assert!(
        checked_rounds >= 3 && acks.lines().count() >= 6,
        "seed {seed}: {checked_rounds} rounds checked, {} batches acknowledged",
        acks.lines().count()
    );
}
