//! Deduplication through the binary: `view --refs` reads no content blob
//! (it works with every content object removed), compaction that removes an
//! original brings the full content back, and `stats` reports the savings and
//! plots them.

use std::path::{Path, PathBuf};

use jpstore_tests::{run_jp_store, ts, Run};
use serde_json::{json, Value};

const ID: &str = "17738399468";
const FOO: &str = "file:///project/src/foo.rs";

struct S {
    _dir: tempfile::TempDir,
    root: PathBuf,
    work: PathBuf,
}

impl S {
    fn new() -> S {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = S {
            root: dir.path().join("store"),
            work: dir.path().to_path_buf(),
            _dir: dir,
        };
        s.run(&["init"], b"").ok("init");
        s.run(&["new", "--id", ID], b"").ok("new");
        s
    }
    fn run(&self, args: &[&str], stdin: &[u8]) -> Run {
        run_jp_store(&self.root, args, stdin)
    }
}

fn file(n: usize) -> String {
    (0..n).map(|i| format!("fn f{i}() {{}}\n")).collect()
}

/// Turn 0 attaches foo.rs, turns 1 and 2 read it with a tool, turn 3 reads
/// another file.
fn conversation() -> Value {
    let main_rs = file(60);
    let mut events = vec![
        json!({"type": "turn_start"}),
        json!({"type": "chat_request", "content": "look at this",
               "resources": [{"uri": FOO, "mimeType": "text/x-rust", "text": main_rs}]}),
        json!({"type": "chat_response", "message": "ok"}),
    ];
    for (t, (uri, text)) in [
        (FOO, main_rs.clone()),
        (FOO, main_rs),
        ("file:///b.rs", file(70)),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("call{}", t + 1);
        events.extend([
            json!({"type": "turn_start"}),
            json!({"type": "chat_request", "content": format!("question {t}")}),
            json!({"type": "tool_call_request", "id": id, "name": "fs_read_file",
                   "arguments": {"path": uri}}),
            json!({"type": "tool_call_response", "id": id, "is_error": false,
                   "content": [{"type": "resource", "resource": {"uri": uri, "text": text}}]}),
            json!({"type": "chat_response", "message": "done"}),
        ]);
    }
    for (i, e) in events.iter_mut().enumerate() {
        e["timestamp"] = ts(i as u64).into();
    }
    Value::Array(events)
}

/// The first block of every tool response of a view.
fn first_blocks(view: &Value) -> Vec<Value> {
    view.as_array()
        .expect("array")
        .iter()
        .filter(|e| e["type"] == "tool_call_response")
        .map(|e| e["content"][0].clone())
        .collect()
}

fn is_reference(block: &Value) -> Option<String> {
    (block["type"] == "text")
        .then(|| block["text"].as_str().map(str::to_owned))
        .flatten()
}

/// Every file below `dir`.
fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("list") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn view_refs_reads_no_content_blob() {
    let s = S::new();
    s.run(&["append", ID], conversation().to_string().as_bytes())
        .ok("append");
    let before = s.run(&["view", ID, "--refs"], b"").json("view --refs");
    let blocks = first_blocks(&before);
    assert_eq!(blocks.len(), 3);
    let msg = is_reference(&blocks[0]).expect("the first read is a reference");
    assert!(
        msg.starts_with(&format!(
            "The content of {FOO} is identical to the attachment at turn 0 (checksum: sha256:"
        )),
        "{msg}"
    );
    let msg = is_reference(&blocks[1]).expect("the second read is a reference");
    assert!(
        msg.contains("identical to the attachment at turn 0"),
        "a chain points at the full delivery: {msg}"
    );
    assert!(blocks[2]["resource"]["text"]["$blob"].is_string());

    // Remove every content object: only the base config (config, not
    // content) stays.
    let export = s.run(&["export", ID, "--refs"], b"").json("export --refs");
    let config = export["base_config"]["$blob"]
        .as_str()
        .expect("a base config")
        .to_owned();
    let objects = s.root.join("blobs").join("objects");
    let mut removed = 0;
    for f in files(&objects) {
        let hex = format!(
            "{}{}",
            f.parent()
                .and_then(|d| d.file_name())
                .and_then(|n| n.to_str())
                .expect("fan-out dir"),
            f.file_name().and_then(|n| n.to_str()).expect("name")
        );
        if hex != config {
            std::fs::remove_file(&f).expect("remove");
            removed += 1;
        }
    }
    assert_eq!(removed, 2, "foo.rs and b.rs");
    assert!(
        files(&s.root.join("blobs").join("packs")).is_empty(),
        "no packs hold content"
    );
    // The content is gone: the inline view fails...
    s.run(&["view", ID], b"")
        .expect_code(1, "view without content");
    // ...but the view with references is the same as before.
    let after = s
        .run(&["view", ID, "--refs"], b"")
        .json("view --refs without content");
    assert_eq!(after, before);
}

#[test]
fn compaction_of_the_original_brings_the_content_back() {
    let s = S::new();
    s.run(&["append", ID], conversation().to_string().as_bytes())
        .ok("append");
    // Summarize turn 0 (the attachment): the first read is the full
    // delivery, the second one points at it.
    let delta = json!([{"type": "config_delta", "timestamp": ts(100), "delta": {"conversation": {"compaction": {"profiles": {"sum": {"summary": {}}}}}}}]);
    s.run(&["append", ID], delta.to_string().as_bytes())
        .ok("append delta");
    s.run(
        &[
            "compact",
            ID,
            "--from",
            "0",
            "--to",
            "0",
            "--profile",
            "sum",
            "--summary",
            "they attached foo.rs",
        ],
        b"",
    )
    .ok("compact");
    let view = s.run(&["view", ID, "--refs"], b"").json("view");
    let blocks = first_blocks(&view);
    assert!(blocks[0]["resource"]["text"]["$blob"].is_string(), "{view}");
    let msg = is_reference(&blocks[1]).expect("a reference");
    assert!(
        msg.contains("identical to the result of tool call `call1` in turn 1"),
        "{msg}"
    );
    // The provider request carries the reference too.
    let anthropic = s
        .run(&["view", ID, "--format", "anthropic"], b"")
        .json("anthropic");
    assert!(
        anthropic.to_string().contains("The file has not changed."),
        "{anthropic}"
    );
}

#[test]
fn switched_off_by_a_config_delta() {
    let s = S::new();
    let delta = json!([{"type": "config_delta", "timestamp": ts(0),
        "delta": {"conversation": {"deduplication": {"enabled": false}}}}]);
    s.run(&["append", ID], delta.to_string().as_bytes())
        .ok("append delta");
    s.run(&["append", ID], conversation().to_string().as_bytes())
        .ok("append");
    let view = s.run(&["view", ID, "--refs"], b"").json("view");
    assert!(first_blocks(&view).iter().all(|b| b["type"] == "resource"));
    let stats = s.run(&["stats", ID, "--json"], b"").json("stats");
    assert_eq!(
        stats["context"]["saved_by_deduplication"]["resources_replaced"],
        0
    );
}

#[test]
fn stats_reports_savings_and_plots_them() {
    let s = S::new();
    s.run(&["append", ID], conversation().to_string().as_bytes())
        .ok("append");
    let stats = s.run(&["stats", ID, "--json"], b"").json("stats");
    let c = &stats["context"];
    let size = file(60).len() as i64;
    let dedup = c["saved_by_deduplication"]["bytes"]
        .as_i64()
        .expect("bytes");
    assert_eq!(c["saved_by_deduplication"]["resources_replaced"], 2);
    // Two copies of foo.rs less two reference messages of ~250 bytes.
    assert!(dedup > 2 * size - 600 && dedup < 2 * size, "{c}");
    assert_eq!(c["saved_by_compaction"]["bytes"], 0);
    assert_eq!(
        c["raw_bytes"].as_i64().expect("raw") - dedup,
        c["view_bytes"].as_i64().expect("view")
    );

    s.run(&["compact", ID, "--to", "-1"], b"").ok("compact");
    let stats = s.run(&["stats", ID, "--json"], b"").json("stats");
    let c = &stats["context"];
    assert!(c["saved_by_compaction"]["tokens"].as_i64() > Some(0), "{c}");
    let text = s.run(&["stats", ID], b"");
    assert!(
        text.ok("stats").contains("saved by deduplication:"),
        "{}",
        text.stdout
    );

    let plot = s.work.join("context.svg");
    let out = s.run(&["stats", ID, "--plot", plot.to_str().expect("utf-8")], b"");
    out.ok("stats --plot");
    let svg = std::fs::read_to_string(&plot).expect("the plot is written");
    assert!(svg.starts_with("<svg"), "{svg}");
    assert!(svg.trim_end().ends_with("</svg>"));
    assert_eq!(svg.matches("<polyline").count(), 2);
    // One point per turn and series (4 turns).
    assert_eq!(svg.matches("<circle").count(), 8);
    assert!(svg.contains("raw conversation"));
    assert!(svg.contains("view (compaction and deduplication applied)"));
    assert!(svg.contains(">turn<"));
    // Without an id there is nothing to plot.
    s.run(&["stats", "--plot", plot.to_str().expect("utf-8")], b"")
        .expect_code(2, "--plot needs an id");
}
