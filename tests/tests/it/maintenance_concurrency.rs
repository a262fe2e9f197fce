//! Everything at once, as real processes: `append` to one conversation
//! from two processes and to two others from one each, `attach` to the
//! shared conversation, `compact` and `compact --undo`, conversations
//! created and removed (garbage), and `gc --grace 0s` again and again. All
//! share blobs. Afterwards every acknowledged batch is there once, whole
//! and in its writer's order, every attach and compaction too, all content
//! reads back, and `fsck --read-data` is clean. Rounds are bounded.

use std::path::Path;

use jpstore_tests::{events_of, run_jp_store, while_gc_runs};
use serde_json::Value;

/// Writers: `(conversation, writer number)`.
const WRITERS: [(&str, usize); 4] = [("shared", 0), ("shared", 1), ("w2", 2), ("w3", 3)];
const BATCHES: usize = 10;
const ATTACHES: usize = 3;
const COMPACTIONS: usize = 3;
const REMOVED: usize = 3;
/// Content every writer, attach and removed conversation stores again.
const COMMON: &str = "the same file content everybody reads again and again\n";

fn batch(w: usize, b: usize) -> String {
    format!(
        "{{\"type\":\"turn_start\"}}\n\
         {{\"type\":\"tool_call_request\",\"id\":\"a{w}_{b}\",\"name\":\"fs_read_file\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"a{w}_{b}\",\"content\":{}}}\n\
         {{\"type\":\"tool_call_request\",\"id\":\"b{w}_{b}\",\"name\":\"fs_read_file\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"b{w}_{b}\",\"content\":\"writer {w} batch {b}\"}}\n",
        Value::from(COMMON)
    )
}

/// Runs `jp-store` and panics unless it succeeds.
fn ok(root: &Path, args: &[&str], stdin: &[u8]) {
    run_jp_store(root, args, stdin).ok(&args.join(" "));
}

fn contents(events: &[Value], prefix: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| e["content"].as_str())
        .filter(|c| c.starts_with(prefix))
        .map(str::to_owned)
        .collect()
}

fn count(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["type"] == kind).count()
}

#[test]
fn appends_attach_compact_and_gc_at_the_same_time() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    let files = dir.path().join("files");
    std::fs::create_dir(&files).expect("mkdir");
    std::fs::write(files.join("common.txt"), COMMON).expect("write");
    std::fs::write(files.join("own.txt"), "attached only\n").expect("write");
    ok(&root, &["init"], b"");
    for conv in ["shared", "w2", "w3"] {
        ok(&root, &["new", "--id", conv], b"");
        // A first turn, so that a compaction has a range from the start.
        ok(&root, &["append", conv], batch(9, 0).as_bytes());
    }

    let (root_ref, files) = (&root, &files);
    let mut work: Vec<Box<dyn FnOnce() + Send>> = Vec::new();
    for (conv, w) in WRITERS {
        work.push(Box::new(move || {
            for b in 0..BATCHES {
                ok(root_ref, &["append", conv], batch(w, b).as_bytes());
            }
        }));
    }
    work.push(Box::new(move || {
        let files = files.display().to_string();
        for i in 0..ATTACHES {
            let message = format!("attach {i}");
            ok(root_ref, &["attach", "shared", &files, "-m", &message], b"");
        }
    }));
    work.push(Box::new(move || {
        for _ in 0..COMPACTIONS {
            ok(root_ref, &["compact", "w2"], b"");
            ok(root_ref, &["compact", "shared"], b"");
            ok(root_ref, &["compact", "shared", "--undo"], b"");
        }
    }));
    work.push(Box::new(move || {
        for i in 0..REMOVED {
            let id = format!("gone{i}");
            ok(root_ref, &["new", "--id", &id], b"");
            ok(root_ref, &["append", &id], batch(10 + i, 0).as_bytes());
            ok(root_ref, &["rm", &id], b"");
        }
    }));
    let gc_runs = while_gc_runs(&root, work);
    assert!(gc_runs > 0);
    ok(&root, &["gc", "--grace", "0s"], b"");

    let fsck = run_jp_store(&root, &["fsck", "--read-data", "--json"], b"").json("fsck");
    assert_eq!(fsck["clean"], true, "{fsck}");
    let export =
        |conv: &str| events_of(&run_jp_store(&root, &["export", conv], b"").json("export"));
    for (conv, w) in WRITERS {
        let events = export(conv);
        let want: Vec<String> = (0..BATCHES)
            .map(|b| format!("writer {w} batch {b}"))
            .collect();
        assert_eq!(
            contents(&events, &format!("writer {w} ")),
            want,
            "{conv}: writer {w}'s batches"
        );
        assert_eq!(
            contents(&events, COMMON).len(),
            events.iter().filter(|e| e["type"] == "turn_start").count() - attaches(&events),
            "{conv}: every batch has the common content"
        );
    }
    let shared = export("shared");
    assert_eq!(attaches(&shared), ATTACHES, "attach requests");
    for e in shared.iter().filter(|e| !e["resources"].is_null()) {
        let resources = e["resources"].as_array().expect("resources");
        assert_eq!(resources.len(), 2, "{e}");
        assert!(resources.iter().any(|r| r["text"] == COMMON), "{e}");
    }
    assert_eq!(count(&shared, "compaction"), COMPACTIONS);
    assert_eq!(count(&shared, "compaction_undo"), COMPACTIONS);
    assert_eq!(count(&export("w2"), "compaction"), COMPACTIONS);
    let ls = run_jp_store(&root, &["ls", "--json"], b"").json("ls");
    assert_eq!(ls.as_array().map(Vec::len), Some(3), "{ls}");
}

/// The turns started by `attach` (a request with resources).
fn attaches(events: &[Value]) -> usize {
    events.iter().filter(|e| !e["resources"].is_null()).count()
}
