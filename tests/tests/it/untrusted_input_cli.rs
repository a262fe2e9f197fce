//! Stored strings an adversary wrote, through the binary: NDJSON streams
//! crafted to name directories outside the one `export --format jp`
//! writes into, or to record a layout that makes JP's files something
//! other than JSON, refused at import naming the line and the field; and
//! a store holding such a field anyway (stored by an earlier build, which
//! took a stream's `jp` field as it came), refused at export with nothing
//! of the conversation written.

use std::path::{Path, PathBuf};

use jpstore_tests::{run_jp_store, tree_snapshot};
use serde_json::{json, Value};

const SAMPLE_ID: &str = "17738399468";
const SAMPLE_DIR: &str = "17738399468-fix-the-flaky-test";

fn sample_workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cli/samples/jp-workspace")
}

/// The NDJSON line of the shipped sample (a JP import, with its `jp`
/// field), from a store `dir/source`.
fn sample_line(dir: &Path) -> Value {
    let source = dir.join("source");
    run_jp_store(&source, &["init"], b"").ok("init");
    let sample = sample_workspace();
    run_jp_store(&source, &["import", sample.to_str().expect("utf-8")], b"").ok("import");
    let line = run_jp_store(&source, &["export", SAMPLE_ID, "--format", "ndjson"], b"")
        .ok("export ndjson")
        .to_string();
    serde_json::from_str(&line).expect("a line")
}

/// `line` with `metadata.jp.<field>` set to `value`.
fn with_jp(line: &Value, field: &str, value: Value) -> String {
    let mut line = line.clone();
    line["metadata"]["jp"][field] = value;
    line.to_string()
}

/// Directory names that are not one component of the conversation's own
/// (`absolute`: an absolute path, in the test's directory).
fn bad_dirs(absolute: &Path) -> Vec<String> {
    vec![
        "../escaped-dir".into(),
        absolute.to_str().expect("utf-8").into(),
        "..".into(),
        ".".into(),
        String::new(),
        format!("{SAMPLE_ID}-a/b"),
        format!("{SAMPLE_ID}-a\\b"),
        format!("{SAMPLE_ID}-nul\0"),
        format!("{SAMPLE_ID}-\u{1b}[2J"),
        format!("{SAMPLE_ID}-{}", "x".repeat(250)),
        "17738399401-another-conversation".into(),
    ]
}

#[test]
fn directory_names_from_a_stream_are_refused_at_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let line = sample_line(dir.path());
    let bad = bad_dirs(&dir.path().join("absolute"));
    let mut lines: Vec<String> = bad
        .iter()
        .map(|d| with_jp(&line, "dir", Value::from(d.as_str())))
        .collect();
    lines.push(line.to_string());
    let file = dir.path().join("crafted.ndjson");
    std::fs::write(&file, lines.join("\n")).expect("write");
    let target = dir.path().join("target");
    run_jp_store(&target, &["init"], b"").ok("init");
    let run = run_jp_store(
        &target,
        &["import", file.to_str().expect("utf-8"), "--json"],
        b"",
    );
    run.expect_code(1, "a stream with bad directory names");
    let report: Value = serde_json::from_str(&run.stdout).expect("JSON report");
    assert_eq!(report["imported"], 1, "the good line: {report}");
    let failed = report["failed"].as_array().expect("failed");
    assert_eq!(failed.len(), bad.len(), "{report}");
    for (i, f) in failed.iter().enumerate() {
        let path = f["path"].as_str().expect("path");
        assert!(path.ends_with(&format!("crafted.ndjson:{}", i + 1)), "{f}");
        let reason = f["reason"].as_str().expect("reason");
        assert!(
            reason.starts_with("field `metadata.jp.dir`: directory name"),
            "{:?}: {reason}",
            bad[i]
        );
    }
    // What was imported exports into the directory asked for, and nowhere
    // else.
    let out = dir.path().join("ws");
    let before = tree_snapshot(dir.path());
    run_jp_store(
        &target,
        &[
            "export",
            "--format",
            "jp",
            "--out",
            out.to_str().expect("utf-8"),
        ],
        b"",
    )
    .ok("export");
    let mut after = tree_snapshot(dir.path());
    after.retain(|p, _| !p.starts_with("ws") && !p.starts_with("target"));
    let mut before = before;
    before.retain(|p, _| !p.starts_with("target"));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    assert!(out.join(SAMPLE_DIR).join("events.json").is_file());
}

/// A store holding the names anyway (imported through the library, as an
/// earlier build stored a stream's field): `export --format jp --replace`
/// of every conversation refuses each, naming it and the field, writes
/// nothing outside the conversations directory, and leaves another
/// workspace's files and another conversation's directory as they were.
/// Before, `../escaped-dir` was written beside the directory, and with
/// `--replace` another workspace's `events.json` was overwritten.
#[test]
fn directory_names_stored_anyway_are_refused_at_export() {
    let dir = tempfile::tempdir().expect("tempdir");
    let line = sample_line(dir.path());
    // Another workspace, holding the sample's directory with other bytes,
    // and a conversation directory of another id in the one exported into.
    let victim = dir.path().join("victim/.jp/conversations");
    let victim_events = victim.join(SAMPLE_DIR).join("events.json");
    std::fs::create_dir_all(victim_events.parent().expect("parent")).expect("mkdir");
    std::fs::write(&victim_events, "[]\n").expect("write");
    let ws = dir.path().join("ws/.jp/conversations");
    let other = ws.join("17738399401-another-conversation");
    std::fs::create_dir_all(&other).expect("mkdir");
    std::fs::write(other.join("events.json"), "[]\n").expect("write");
    std::fs::write(other.join("metadata.json"), "{}\n").expect("write");

    let mut dirs = bad_dirs(&dir.path().join("absolute"));
    dirs.push(format!("../../../victim/.jp/conversations/{SAMPLE_DIR}"));
    let store_dir = dir.path().join("store");
    let store =
        jpstore_engine::Store::init_dir(&store_dir, jpstore_engine::StoreOptions::default())
            .expect("init");
    let mut ids = Vec::new();
    for (i, d) in dirs.iter().enumerate() {
        let id = format!("{SAMPLE_ID}{i:02}");
        let mut crafted: Value =
            serde_json::from_str(&with_jp(&line, "dir", Value::from(d.as_str()))).expect("json");
        crafted["id"] = Value::from(id.as_str());
        let text = crafted.to_string();
        let prepared =
            jpstore_engine::internal::stream::parse_conversation_line(text.as_bytes(), 1)
                .expect("parse");
        jpstore_engine::import::run(&store, vec![prepared], false, &mut |_| {}).expect("import");
        ids.push(id);
    }
    drop(store);

    let before = tree_snapshot(dir.path());
    let ws_arg = ws.to_str().expect("utf-8");
    let run = run_jp_store(
        &store_dir,
        &["export", "--format", "jp", "--out", ws_arg, "--replace"],
        b"",
    );
    run.expect_code(1, "export of stored bad names");
    assert_eq!(run.stdout, "", "no file written");
    for id in &ids {
        assert!(
            run.stderr
                .contains(&format!("error: {id}: conversation {id}")),
            "{id}: {}",
            run.stderr
        );
    }
    assert_eq!(
        run.stderr.matches("field `dir`: directory name").count(),
        ids.len(),
        "{}",
        run.stderr
    );
    let mut after = tree_snapshot(dir.path());
    let mut before = before;
    for t in [&mut before, &mut after] {
        t.retain(|p, _| !p.starts_with("store"));
    }
    assert_eq!(
        before, after,
        "nothing written or changed outside the store"
    );
    assert_eq!(std::fs::read(&victim_events).expect("victim"), b"[]\n");
    assert!(!dir.path().join("ws/.jp/escaped-dir").exists());
    assert!(!dir.path().join("absolute").exists());

    // One conversation named: the same refusal, as the command's error.
    let run = run_jp_store(
        &store_dir,
        &["export", &ids[0], "--format", "jp", "--out", ws_arg],
        b"",
    );
    run.expect_code(1, "export of one stored bad name");
    assert!(
        run.stderr
            .contains("field `dir`: directory name \"../escaped-dir\""),
        "{}",
        run.stderr
    );
}

/// A JP directory whose name holds a control character (JP names
/// directories by slugs of letters, digits and `-`; this one was renamed)
/// is refused at import, named, and the other conversations imported.
#[test]
fn a_jp_directory_named_with_a_control_character_is_refused_at_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ws = dir.path().join("conversations");
    let sample = sample_workspace()
        .join(".jp/conversations")
        .join(SAMPLE_DIR);
    jpstore_tests::copy_tree(&sample, &ws.join(SAMPLE_DIR));
    let odd = ws.join("17738399469-\u{1b}[2J");
    jpstore_tests::copy_tree(&sample, &odd);
    let store = dir.path().join("store");
    run_jp_store(&store, &["init"], b"").ok("init");
    let run = run_jp_store(
        &store,
        &["import", ws.to_str().expect("utf-8"), "--json"],
        b"",
    );
    run.expect_code(1, "a directory named with an escape");
    let report: Value = serde_json::from_str(&run.stdout).expect("JSON report");
    assert_eq!(report["imported"], 1, "{report}");
    let failed = report["failed"].as_array().expect("failed");
    assert_eq!(failed.len(), 1, "{report}");
    assert_eq!(failed[0]["path"], odd.to_str().expect("utf-8"));
    assert!(
        failed[0]["reason"]
            .as_str()
            .expect("reason")
            .contains("control character"),
        "{report}"
    );
}

/// The text of item `index` of the sample's `events.json` as export
/// renders it (JP's layout: serde_json's pretty printer at depth 1), and
/// the CRC-32 a fix of it names.
fn rendered_entry(dir: &Path, index: usize) -> (String, u32) {
    let out = dir.join("rendered");
    let source = dir.join("source");
    run_jp_store(
        &source,
        &[
            "export",
            SAMPLE_ID,
            "--format",
            "jp",
            "--out",
            out.to_str().expect("utf-8"),
        ],
        b"",
    )
    .ok("export");
    let events = std::fs::read_to_string(out.join(SAMPLE_DIR).join("events.json")).expect("read");
    let items: Vec<Value> = serde_json::from_str(&events).expect("events.json");
    let text = serde_json::to_string_pretty(&items[index])
        .expect("json")
        .replace('\n', "\n  ");
    assert!(events.contains(&text), "the rendering of entry {index}");
    let crc = crc32fast::hash(text.as_bytes());
    (text, crc)
}

/// Layouts that give files that are not JSON (or not those values),
/// each as (the `jp` field's key, its value, the field named).
fn bad_layouts(dir: &Path) -> Vec<(&'static str, Value, &'static str)> {
    // Item 2 of the file is stored entry 1 (the first item is the legacy
    // layout's first config delta, the base config).
    let (text, crc) = rendered_entry(dir, 2);
    let end = text.len();
    vec![
        ("events_text", json!({"indent": "x"}), "events_text.indent"),
        (
            "events_text",
            json!({"indent": " \n"}),
            "events_text.indent",
        ),
        (
            "events_text",
            json!({"indent": " ".repeat(65)}),
            "events_text.indent",
        ),
        (
            "events_text",
            json!({"gaps": {"start": "garbage["}}),
            "events_text.gaps.start",
        ),
        (
            "events_text",
            json!({"gaps": {"end": "]]\n"}}),
            "events_text.gaps.end",
        ),
        (
            "events_text",
            json!({"gaps": {"end": "\n"}}),
            "events_text.gaps.end",
        ),
        (
            "events_text",
            json!({"gaps": {"1": "\n  "}}),
            "events_text.gaps.1",
        ),
        (
            "events_text",
            json!({"gaps": {"value": ","}}),
            "events_text.gaps.value",
        ),
        (
            "metadata_text",
            json!({"gaps": {"end": "\n}\n"}}),
            "metadata_text.gaps.end",
        ),
        (
            "metadata_text",
            json!({"gaps": {"start": "\u{feff}"}}),
            "metadata_text.gaps.start",
        ),
        (
            "metadata_text",
            json!({"indent": "\u{b}"}),
            "metadata_text.indent",
        ),
        (
            "base_config_text",
            json!({"fixes": {"1": [0, []]}}),
            "base_config_text.fixes.1",
        ),
        // Fixes whose edits apply (their CRC is the rendering's): one that
        // breaks the entry, one that makes two of it.
        (
            "events_text",
            json!({"fixes": {"1": [crc, [[0, 1, "["]]]}}),
            "events.json would not be JSON",
        ),
        (
            "events_text",
            json!({"fixes": {"1": [crc, [[end, 0, ",{\"type\":\"turn_start\"}"]]]}}),
            "events.json would hold",
        ),
        (
            "events_text",
            json!({"fixes": {"1": [crc, [[1, 0, "\"type\":\"x\","]]]}}),
            "duplicate key",
        ),
    ]
}

#[test]
fn layouts_from_a_stream_that_are_not_json_are_refused_at_import() {
    let dir = tempfile::tempdir().expect("tempdir");
    let line = sample_line(dir.path());
    let bad = bad_layouts(dir.path());
    let mut lines: Vec<String> = bad
        .iter()
        .map(|(key, value, _)| with_jp(&line, key, value.clone()))
        .collect();
    lines.push(line.to_string());
    let file = dir.path().join("crafted.ndjson");
    std::fs::write(&file, lines.join("\n")).expect("write");
    let target = dir.path().join("target");
    run_jp_store(&target, &["init"], b"").ok("init");
    let run = run_jp_store(
        &target,
        &["import", file.to_str().expect("utf-8"), "--json"],
        b"",
    );
    run.expect_code(1, "a stream with bad layouts");
    let report: Value = serde_json::from_str(&run.stdout).expect("JSON report");
    assert_eq!(report["imported"], 1, "the good line: {report}");
    let failed = report["failed"].as_array().expect("failed");
    assert_eq!(failed.len(), bad.len(), "{report}");
    for (f, (_, value, named)) in failed.iter().zip(&bad) {
        let reason = f["reason"].as_str().expect("reason");
        assert!(
            reason.starts_with("field `metadata.jp") && reason.contains(named),
            "{value}: {reason}"
        );
    }
}

/// The same layouts stored anyway (through the library): export refuses
/// each conversation naming what is wrong, writes none of its files, and
/// the others are exported. Before, it wrote `events.json` and
/// `metadata.json` that were not JSON, and exited 0.
#[test]
fn layouts_stored_anyway_that_are_not_json_are_refused_at_export() {
    let dir = tempfile::tempdir().expect("tempdir");
    let line = sample_line(dir.path());
    let bad = bad_layouts(dir.path());
    let store_dir = dir.path().join("store");
    let store =
        jpstore_engine::Store::init_dir(&store_dir, jpstore_engine::StoreOptions::default())
            .expect("init");
    let mut ids = Vec::new();
    for (i, (key, value, _)) in bad.iter().enumerate() {
        let id = format!("{SAMPLE_ID}{i:02}");
        let mut crafted: Value =
            serde_json::from_str(&with_jp(&line, key, value.clone())).expect("json");
        crafted["id"] = Value::from(id.as_str());
        crafted["metadata"]["jp"]["dir"] = Value::from(format!("{id}-crafted"));
        let text = crafted.to_string();
        let prepared =
            jpstore_engine::internal::stream::parse_conversation_line(text.as_bytes(), 1)
                .expect("parse");
        jpstore_engine::import::run(&store, vec![prepared], false, &mut |_| {}).expect("import");
        ids.push(id);
    }
    let good =
        jpstore_engine::internal::stream::parse_conversation_line(line.to_string().as_bytes(), 1)
            .expect("parse");
    jpstore_engine::import::run(&store, vec![good], false, &mut |_| {}).expect("import");
    drop(store);
    let ws = dir.path().join("ws");
    let run = run_jp_store(
        &store_dir,
        &[
            "export",
            "--format",
            "jp",
            "--out",
            ws.to_str().expect("utf-8"),
        ],
        b"",
    );
    run.expect_code(1, "export of stored bad layouts");
    for (id, (_, value, named)) in ids.iter().zip(&bad) {
        let said = run
            .stderr
            .lines()
            .find(|l| l.contains(&format!("error: {id}: ")))
            .unwrap_or_else(|| panic!("{id} ({value}) not named: {}", run.stderr));
        assert!(said.contains(named), "{value}: {said}");
        assert!(
            !ws.join(format!("{id}-crafted")).exists(),
            "{value}: written"
        );
    }
    let written: Vec<PathBuf> = tree_snapshot(&ws).into_keys().collect();
    assert_eq!(
        written,
        [
            PathBuf::from(SAMPLE_DIR),
            Path::new(SAMPLE_DIR).join("events.json"),
            Path::new(SAMPLE_DIR).join("metadata.json"),
        ],
        "the good conversation alone"
    );
}

/// The characters a terminal acts on, or that reorder or break the text
/// around them, anywhere in `text` but line breaks: what human output must
/// not write raw.
fn raw_controls(text: &str) -> Vec<char> {
    text.chars()
        .filter(|c| {
            (c.is_control() && *c != '\n')
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
        })
        .collect()
}

/// A title, messages, a tool name, an entry type and a field name with
/// escape sequences (clear the screen, set the window title, a CSI in C1),
/// a bell, line breaks, a carriage return and a right-to-left override:
/// `ls`, `print`, `stats` and the messages of `import` write them escaped,
/// one table row per conversation; `--json`, `export` and `view` give them
/// back exactly. Before, they were written raw: the title cleared the
/// screen and its line break added a row to the table.
#[test]
fn stored_text_is_escaped_in_human_output_and_exact_in_json() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    run_jp_store(&store, &["init"], b"").ok("init");
    let title = "evil\u{1b}[2J\u{1b}]0;owned\u{7}\r\nsecond row\u{202e}\u{9b}31m";
    run_jp_store(&store, &["new", "--id", "c1", "--title", title], b"").ok("new");
    run_jp_store(&store, &["new", "--id", "c2", "--title", "plain"], b"").ok("new");
    let batch = [
        json!({"type": "turn_start"}),
        json!({"type": "chat_request", "content": "hi \u{1b}[2J there", "author": "me\u{1b}[31m"}),
        json!({"type": "chat_response", "message": "answer\u{7}\u{1b}[1A"}),
        json!({"type": "tool_call_request", "id": "call\u{1b}[5m", "name": "tool\u{7}", "arguments": {"k\u{1b}": "v"}}),
        json!({"type": "tool_call_response", "id": "call\u{1b}[5m", "content": "out"}),
        json!({"type": "kind\u{1b}[2J", "x": 1}),
    ]
    .iter()
    .map(Value::to_string)
    .collect::<Vec<_>>()
    .join("\n");
    run_jp_store(&store, &["append", "c1"], batch.as_bytes()).ok("append");

    let ls = run_jp_store(&store, &["ls"], b"");
    let out = ls.ok("ls");
    assert_eq!(raw_controls(out), Vec::<char>::new(), "{out:?}");
    assert_eq!(out.lines().count(), 3, "a header and one row each: {out:?}");
    assert!(
        out.contains("evil\\x1b[2J\\x1b]0;owned\\x07\\r\\nsecond row\\u{202e}\\u{9b}31m"),
        "{out}"
    );
    for args in [
        vec!["print", "c1"],
        vec!["print", "c1", "--compacted"],
        vec!["stats"],
    ] {
        let run = run_jp_store(&store, &args, b"");
        let out = run.ok("human output");
        assert_eq!(raw_controls(out), Vec::<char>::new(), "{args:?}: {out:?}");
        assert!(out.contains("\\x1b["), "{args:?}: {out}");
    }
    let print = run_jp_store(&store, &["print", "c1"], b"")
        .ok("print")
        .to_string();
    for shown in [
        "hi \\x1b[2J there",
        "me\\x1b[31m",
        "tool\\x07",
        "call\\x1b[5m",
        "kind\\x1b[2J",
    ] {
        assert!(print.contains(shown), "{shown}: {print}");
    }

    // Exact where a program reads it.
    let list = run_jp_store(&store, &["ls", "--json"], b"").json("ls --json");
    assert_eq!(list[0]["title"], title);
    let export = run_jp_store(&store, &["export", "c1"], b"").json("export");
    assert_eq!(export["metadata"]["title"], title);
    assert_eq!(export["events"][1]["content"], "hi \u{1b}[2J there");
    assert_eq!(export["events"][5]["type"], "kind\u{1b}[2J");

    // Messages on standard error: a stream's line naming a field of its own.
    let stream = format!("{}\n", json!({"id": "c3", "colour\u{1b}[2J": 1}));
    let target = dir.path().join("target");
    run_jp_store(&target, &["init"], b"").ok("init");
    let run = run_jp_store(&target, &["import", "-"], stream.as_bytes());
    run.expect_code(1, "a bad line");
    assert_eq!(
        raw_controls(&run.stderr),
        Vec::<char>::new(),
        "{:?}",
        run.stderr
    );
    assert!(run.stderr.contains("colour\\x1b[2J"), "{}", run.stderr);
}
