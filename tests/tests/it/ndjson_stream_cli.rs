//! A store moved as one stream: `export --format ndjson` writes one
//! conversation a line, `import` reads the lines back (from a file or from
//! standard input) into another store, which then holds the same
//! conversations: the same export, byte for byte, and fsck clean.

use std::path::Path;

use jpstore_tests::{run_jp_store, ts};

/// A store with conversations of every shape: plain turns, a binary
/// resource, an unknown entry type, a config delta, a compaction, a fork,
/// and the imported sample JP workspace (with JP's metadata).
fn source_store(dir: &Path) -> std::path::PathBuf {
    let store = dir.join("source");
    run_jp_store(&store, &["init"], b"").ok("init");
    let a = run_jp_store(
        &store,
        &["new", "--title", "first \"one\"\nwith a newline"],
        b"",
    )
    .ok("new")
    .trim()
    .to_string();
    let batch = format!(
        "{}\n{}\n{}\n{}\n{}\n{}",
        serde_json::json!({"type": "turn_start", "timestamp": ts(1)}),
        serde_json::json!({"type": "chat_request", "timestamp": ts(2), "content": "look",
            "resources": [{"uri": "file:///logo.png", "mimeType": "image/png", "blob": "iVBORw0KGgoAAAA="}]}),
        serde_json::json!({"type": "tool_call_request", "timestamp": ts(3), "id": "c1",
            "name": "fs_read_file", "arguments": {"path": "src/lib.rs"}}),
        serde_json::json!({"type": "tool_call_response", "timestamp": ts(4), "id": "c1",
            "content": "fn main() {}\n".repeat(50)}),
        serde_json::json!({"type": "config_delta", "timestamp": ts(5),
            "delta": {"conversation": {"compaction": {"keep_last": 1}}}}),
        serde_json::json!({"type": "future_kind", "timestamp": ts(6), "x": [1, 2.5, "z"]}),
    );
    run_jp_store(&store, &["append", &a], batch.as_bytes()).ok("append");
    for i in 0..3 {
        let turn = format!(
            "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"q{i}\"}}\n{{\"type\":\"chat_response\",\"reasoning\":\"because {i}\"}}\n{{\"type\":\"chat_response\",\"message\":\"a{i}\"}}"
        );
        run_jp_store(&store, &["append", &a], turn.as_bytes()).ok("append");
    }
    run_jp_store(&store, &["compact", &a], b"").ok("compact");
    run_jp_store(&store, &["fork", &a, "--last", "2"], b"").ok("fork");
    let sample = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("cli")
        .join("samples")
        .join("jp-workspace");
    run_jp_store(
        &store,
        &["import", sample.to_str().expect("UTF-8 path")],
        b"",
    )
    .ok("import the sample");
    store
}

#[test]
fn a_store_moves_as_one_stream_and_comes_back_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = source_store(dir.path());
    let stream = run_jp_store(&source, &["export", "--format", "ndjson"], b"")
        .ok("export ndjson")
        .to_string();
    let ids = run_jp_store(&source, &["ls", "--json"], b"").json("ls");
    let ids: Vec<String> = ids
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_string())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(stream.lines().count(), 3, "one line per conversation");
    for (line, id) in stream.lines().zip(&ids) {
        let doc: serde_json::Value = serde_json::from_str(line).expect("each line is JSON");
        assert_eq!(doc["id"], id.as_str());
    }

    // From a file, and from standard input.
    let file = dir.path().join("store.ndjson");
    run_jp_store(
        &source,
        &[
            "export",
            "--format",
            "ndjson",
            "--out",
            file.to_str().expect("path"),
        ],
        b"",
    )
    .ok("export to a file");
    assert_eq!(std::fs::read_to_string(&file).expect("read"), stream);
    for (name, args, stdin) in [
        (
            "from-file",
            vec!["import", file.to_str().expect("path")],
            Vec::new(),
        ),
        (
            "from-stdin",
            vec!["import", "-"],
            stream.clone().into_bytes(),
        ),
    ] {
        let target = dir.path().join(name);
        run_jp_store(&target, &["init"], b"").ok("init");
        let report = run_jp_store(&target, &[&args[..], &["--json"]].concat(), &stdin)
            .json("import the stream");
        assert_eq!(report["imported"], 3, "{report}");
        assert_eq!(report["failed"], serde_json::json!([]), "{report}");
        let again = run_jp_store(&target, &["export", "--format", "ndjson"], b"")
            .ok("export again")
            .to_string();
        assert_eq!(again, stream, "{name}: byte for byte");
        for id in &ids {
            let view = |s: &Path| {
                run_jp_store(s, &["view", id, "--format", "anthropic"], b"")
                    .ok("view")
                    .to_string()
            };
            assert_eq!(view(&target), view(&source), "{name}: the view of {id}");
        }
        // The imported JP conversation exports to the same JP files, byte
        // for byte, from either store.
        let jp_files = |s: &Path, out: &str| {
            let out = dir.path().join(out);
            run_jp_store(
                s,
                &[
                    "export",
                    &ids[2],
                    "--format",
                    "jp",
                    "--out",
                    out.to_str().expect("path"),
                ],
                b"",
            )
            .ok("export jp");
            jpstore_tests::tree_snapshot(&out)
        };
        assert_eq!(
            jp_files(&target, &format!("{name}-jp")),
            jp_files(&source, &format!("{name}-source-jp")),
            "{name}: JP's files"
        );
        let fsck = run_jp_store(&target, &["fsck", "--read-data", "--json"], b"").json("fsck");
        assert_eq!(fsck["clean"], true, "{fsck}");
        // Once more: every conversation is there already.
        let report =
            run_jp_store(&target, &[&args[..], &["--json"]].concat(), &stdin).json("import twice");
        assert_eq!(
            (report["imported"].as_u64(), report["skipped"].as_u64()),
            (Some(0), Some(3))
        );
        let report = run_jp_store(
            &target,
            &[&args[..], &["--force", "--json"]].concat(),
            &stdin,
        )
        .json("import --force");
        assert_eq!(report["imported"], 3, "{report}");
    }
}

#[test]
fn bad_lines_are_named_and_the_good_ones_imported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = source_store(dir.path());
    let stream = run_jp_store(&source, &["export", "--format", "ndjson"], b"")
        .ok("export ndjson")
        .to_string();
    let mut lines: Vec<String> = stream.lines().map(str::to_string).collect();
    lines.insert(
        1,
        "{\"id\":\"ok\",\"events\":[{\"type\":\"chat_request\"}]}".into(),
    );
    lines.insert(2, "not json".into());
    lines.insert(3, String::new());
    let file = dir.path().join("mixed.ndjson");
    std::fs::write(&file, lines.join("\n")).expect("write");
    let target = dir.path().join("t");
    run_jp_store(&target, &["init"], b"").ok("init");
    let run = run_jp_store(
        &target,
        &["import", file.to_str().expect("path"), "--json"],
        b"",
    );
    run.expect_code(1, "a stream with bad lines");
    let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON report");
    assert_eq!(report["imported"], 3, "{report}");
    let failed = report["failed"].as_array().expect("failures");
    assert_eq!(failed.len(), 2, "{report}");
    assert!(failed[0]["path"]
        .as_str()
        .expect("path")
        .ends_with("mixed.ndjson:2"));
    assert!(
        failed[0]["reason"]
            .as_str()
            .expect("reason")
            .contains("events[0].content"),
        "{report}"
    );
    assert!(failed[1]["path"]
        .as_str()
        .expect("path")
        .ends_with("mixed.ndjson:3"));
    // A stream of references (an export with --refs) is refused: its blobs
    // are in another store.
    let refs = run_jp_store(&source, &["export", "--format", "ndjson", "--refs"], b"");
    refs.expect_code(2, "ndjson with --refs (bad usage)");
    assert!(refs.stderr.contains("--refs"), "{}", refs.stderr);
}

/// A stream of `c1, c2, c1, c3, c4`: the second `c1` is named by its line
/// and skipped, and `c3` and `c4` are imported all the same (exit 1: a line
/// was not imported); with `--force` the second `c1` is imported over the
/// first, named as it is. Before, the import stopped at the second `c1`
/// (`a conversation with id c1 exists already`), `c3` and `c4` never
/// imported.
#[test]
fn a_conversation_given_twice_is_named_and_the_rest_imported() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = dir.path().join("source");
    run_jp_store(&source, &["init"], b"").ok("init");
    for id in ["c1", "c2", "c3", "c4"] {
        run_jp_store(&source, &["new", "--id", id, "--title", id], b"").ok("new");
    }
    let turn = format!(
        "{}\n{}",
        serde_json::json!({"type": "turn_start", "timestamp": ts(1)}),
        serde_json::json!({"type": "chat_request", "timestamp": ts(2), "content": "the second c1"}),
    );
    let stream = run_jp_store(&source, &["export", "--format", "ndjson"], b"")
        .ok("export")
        .to_string();
    let lines: Vec<&str> = stream.lines().collect();
    assert_eq!(lines.len(), 4);
    run_jp_store(&source, &["append", "c1"], turn.as_bytes()).ok("append");
    let c1_again = run_jp_store(&source, &["export", "c1", "--format", "ndjson"], b"")
        .ok("export c1")
        .to_string();
    let crafted = format!(
        "{}\n{}\n{}{}\n{}\n",
        lines[0], lines[1], c1_again, lines[2], lines[3]
    );
    let file = dir.path().join("twice.ndjson");
    std::fs::write(&file, &crafted).expect("write");
    let path = file.to_str().expect("path");

    let target = dir.path().join("t");
    run_jp_store(&target, &["init"], b"").ok("init");
    let run = run_jp_store(&target, &["import", path, "--json"], b"");
    run.expect_code(1, "a stream giving c1 twice");
    let report: serde_json::Value = serde_json::from_str(&run.stdout).expect("JSON report");
    assert_eq!(report["imported"], 4, "{report}");
    let failed = report["failed"].as_array().expect("failures");
    assert_eq!(failed.len(), 1, "{report}");
    assert!(
        failed[0]["path"]
            .as_str()
            .expect("path")
            .ends_with("twice.ndjson:3"),
        "{report}"
    );
    let reason = failed[0]["reason"].as_str().expect("reason");
    assert!(
        reason.contains("c1") && reason.contains("twice.ndjson:1") && reason.contains("--force"),
        "{reason}"
    );
    let ls = run_jp_store(&target, &["ls", "--json"], b"").json("ls");
    let ids: Vec<&str> = ls
        .as_array()
        .expect("list")
        .iter()
        .map(|c| c["id"].as_str().expect("id"))
        .collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4"]);
    let events = |store: &Path| {
        run_jp_store(store, &["export", "c1"], b"").json("export c1")["events"]
            .as_array()
            .expect("events")
            .len()
    };
    assert_eq!(events(&target), 0, "the first c1 is kept");
    // Without --json: the line is named on standard error.
    let other = dir.path().join("o");
    run_jp_store(&other, &["init"], b"").ok("init");
    let run = run_jp_store(&other, &["import", path], b"");
    run.expect_code(1, "a stream giving c1 twice");
    assert!(
        run.stderr.contains("twice.ndjson:3: conversation c1"),
        "{}",
        run.stderr
    );

    // --force: the later line is imported over the earlier one, in one
    // chunk, and named.
    let forced = dir.path().join("f");
    run_jp_store(&forced, &["init"], b"").ok("init");
    let run = run_jp_store(&forced, &["import", "--force", "-"], crafted.as_bytes());
    run.ok("import --force");
    assert!(
        run.stderr
            .contains("-:3: conversation c1 was given already, at -:1"),
        "{}",
        run.stderr
    );
    assert_eq!(events(&forced), 2, "the second c1 wins");
    let ls = run_jp_store(&forced, &["ls", "--json"], b"").json("ls");
    assert_eq!(ls.as_array().expect("list").len(), 4);
}

/// `export ID > one.json; import one.json`: the plain `json` export is
/// read back as one conversation, which exports to the same bytes (from a
/// file and from standard input; it was 37 lines of "invalid JSON ...
/// trailing characters" and "failed 37"). The store's every kind of
/// conversation (a binary resource, an unknown entry, a compaction, a
/// fork, JP's metadata) goes through.
#[test]
fn a_conversation_exported_as_json_is_imported_back_the_same() {
    let dir = tempfile::tempdir().expect("tempdir");
    let source = source_store(dir.path());
    let ids = run_jp_store(&source, &["ls", "--json"], b"").json("ls");
    let ids: Vec<String> = ids
        .as_array()
        .expect("a list")
        .iter()
        .map(|c| c["id"].as_str().expect("id").to_string())
        .collect();
    for (n, id) in ids.iter().enumerate() {
        let json = run_jp_store(&source, &["export", id], b"")
            .ok("export json")
            .to_string();
        assert!(json.lines().count() > 3, "pretty JSON: {json}");
        let file = dir.path().join(format!("one-{n}.json"));
        std::fs::write(&file, &json).expect("write");
        for (name, args, stdin) in [
            (
                "file",
                vec!["import", file.to_str().expect("path")],
                Vec::new(),
            ),
            ("stdin", vec!["import", "-"], json.clone().into_bytes()),
        ] {
            let target = dir.path().join(format!("target-{n}-{name}"));
            run_jp_store(&target, &["init"], b"").ok("init");
            let out = run_jp_store(&target, &args, &stdin);
            let said = out.ok("import one.json").to_string();
            assert!(
                said.contains("imported 1 ") && said.contains("failed 0"),
                "{said}"
            );
            assert_eq!(out.stderr, "", "{id} {name}");
            let again = run_jp_store(&target, &["export", id], b"")
                .ok("export again")
                .to_string();
            assert_eq!(again, json, "{id} from {name}: byte for byte");
        }
    }
}

/// A file import cannot read is named once, saying what it is and what
/// import reads, and counts as one failure (a JP events.json given by
/// mistake was 91 lines of "invalid JSON", "failed 91").
#[test]
fn a_file_that_is_not_a_stream_is_named_once_saying_what_it_is() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    run_jp_store(&store, &["init"], b"").ok("init");
    let conversation =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/samples/jp-workspace/.jp/conversations");
    let conversation = std::fs::read_dir(&conversation)
        .expect("the sample's conversations")
        .map(|e| e.expect("entry").path())
        .find(|p| p.join("events.json").is_file())
        .expect("a conversation directory");
    let events = conversation.join("events.json");
    assert!(
        std::fs::read_to_string(&events)
            .expect("read")
            .lines()
            .count()
            > 20
    );
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "some notes\nover two lines\n").expect("write");
    let array = dir.path().join("list.json");
    std::fs::write(&array, "[\n  1,\n  2\n]\n").expect("write");
    let dir_text = conversation.display().to_string();
    for (file, says) in [
        (
            &events,
            vec![
                "the events.json of a JP conversation",
                dir_text.as_str(),
                "instead",
            ],
        ),
        (&text, vec!["not JSON"]),
        (&array, vec!["a JSON array of 2 items, not a conversation"]),
    ] {
        let out = run_jp_store(&store, &["import", file.to_str().expect("path")], b"");
        out.expect_code(1, &format!("import {}", file.display()));
        assert_eq!(out.stderr.lines().count(), 1, "once: {}", out.stderr);
        for s in says
            .iter()
            .chain(&["export --format ndjson", "export --format json"])
        {
            assert!(out.stderr.contains(s), "{s:?} in {}", out.stderr);
        }
        assert!(out.stdout.contains("failed 1;"), "{}", out.stdout);
    }
    // A stream whose first line is bad is still a stream: that line is
    // named, the others imported.
    let source = source_store(dir.path());
    let stream = run_jp_store(&source, &["export", "--format", "ndjson"], b"")
        .ok("export ndjson")
        .to_string();
    let bad_first = dir.path().join("bad-first.ndjson");
    std::fs::write(&bad_first, format!("{{not json\n{stream}")).expect("write");
    let out = run_jp_store(
        &store,
        &["import", bad_first.to_str().expect("path"), "--json"],
        b"",
    );
    out.expect_code(1, "a stream whose first line is bad");
    let report: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON report");
    assert_eq!(report["imported"], 3, "{report}");
    let failed = report["failed"].as_array().expect("failures");
    assert_eq!(failed.len(), 1, "{report}");
    assert!(failed[0]["path"]
        .as_str()
        .expect("path")
        .ends_with("bad-first.ndjson:1"));
}
