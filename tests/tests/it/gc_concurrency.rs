//! gc while other processes write: several `jp-store append` processes
//! append conversations that share blobs while `jp-store gc --grace 0s`
//! runs again and again. Afterwards `fsck --read-data` is clean and every
//! appended event reads back with its content.

use jpstore_tests::{run_jp_store, while_gc_runs};
use serde_json::Value;

const WRITERS: usize = 3;
const BATCHES: usize = 12;

fn batch(w: usize, b: usize) -> String {
    // Shared content (every writer, every batch) and content shared by two
    // writers, both found present and not written again by most appends.
    let shared = "the same file content every writer reads again and again";
    let pair = format!(
        "content shared by writers {} and {}",
        w / 2 * 2,
        w / 2 * 2 + 1
    );
    format!(
        "{{\"type\":\"turn_start\"}}\n\
         {{\"type\":\"tool_call_request\",\"id\":\"a{b}\",\"name\":\"fs_read_file\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"a{b}\",\"content\":\"{shared}\"}}\n\
         {{\"type\":\"tool_call_request\",\"id\":\"b{b}\",\"name\":\"fs_read_file\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"b{b}\",\"content\":\"{pair}\"}}\n\
         {{\"type\":\"tool_call_request\",\"id\":\"c{b}\",\"name\":\"fs_read_file\",\"arguments\":{{}}}}\n\
         {{\"type\":\"tool_call_response\",\"id\":\"c{b}\",\"content\":\"writer {w} batch {b}\"}}\n"
    )
}

#[test]
fn gc_with_no_grace_never_takes_what_concurrent_appends_reference() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("store");
    run_jp_store(&root, &["init"], b"").ok("init");
    for w in 0..WRITERS {
        run_jp_store(&root, &["new", "--id", &format!("w{w}")], b"").ok("new");
    }
    let work = (0..WRITERS)
        .map(|w| {
            let root = &root;
            Box::new(move || {
                for b in 0..BATCHES {
                    run_jp_store(root, &["append", &format!("w{w}")], batch(w, b).as_bytes())
                        .ok("append");
                }
            }) as Box<dyn FnOnce() + Send>
        })
        .collect();
    let gc_runs = while_gc_runs(&root, work);
    assert!(gc_runs > 0);
    run_jp_store(&root, &["gc", "--grace", "0s"], b"").ok("final gc");
    let fsck = run_jp_store(&root, &["fsck", "--read-data", "--json"], b"").json("fsck");
    assert_eq!(fsck["clean"], true, "{fsck}");
    for w in 0..WRITERS {
        let doc = run_jp_store(&root, &["export", &format!("w{w}")], b"").json("export");
        let events = doc["events"].as_array().expect("events");
        assert_eq!(events.len(), BATCHES * 7);
        for b in 0..BATCHES {
            let e: &Value = &events[b * 7 + 6];
            assert_eq!(e["content"], format!("writer {w} batch {b}"));
        }
    }
}
