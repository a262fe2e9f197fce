//! `jp-store grep` through the binary, on real stores: every part of an
//! entry that holds text is searched (messages, reasoning, tool arguments
//! and results, text resources, inquiries, summaries, entries of other
//! types), binary content is not; `-F`, `-i`, `-l`, `--json`, `--role`,
//! `--type` and ids given; turns a compaction covers are searched; a torn
//! tail is a warning, a damaged blob or an unknown id an error reported
//! while the rest is searched (exit 2); stored text is escaped for a
//! person and exact in JSON.

use std::path::{Path, PathBuf};

use jpstore_tests::run_jp_store;
use serde_json::{json, Value};

fn store(dir: &Path) -> PathBuf {
    let store = dir.join("store");
    run_jp_store(&store, &["init"], b"").ok("init");
    store
}

fn new(store: &Path, title: &str) -> String {
    run_jp_store(store, &["new", "--title", title], b"")
        .ok("new")
        .trim()
        .to_owned()
}

fn append(store: &Path, id: &str, events: &[Value]) {
    let input: String = events.iter().map(|e| format!("{e}\n")).collect();
    run_jp_store(store, &["append", id], input.as_bytes()).ok("append");
}

/// A turn with the word `needle` in every part that holds text, and in a
/// binary resource (not searched).
fn every_part() -> Vec<Value> {
    vec![
        json!({"type": "turn_start"}),
        json!({"type": "chat_request", "content": "first line\nthe needle in a message",
        "resources": [
            {"uri": "file:///src/lib.rs", "text": "fn a() {}\n// needle in a text resource\n"},
            {"uri": "file:///image.bin", "blob": "bmVlZGxlIGluIGEgYmluYXJ5IGJsb2I="}
        ]}),
        json!({"type": "chat_response", "reasoning": "a needle in the reasoning"}),
        json!({"type": "tool_call_request", "id": "c1", "name": "fs_grep_files",
               "arguments": {"pattern": "needle", "paths": ["src"]}}),
        json!({"type": "tool_call_response", "id": "c1",
               "content": "src/lib.rs:2: needle\nsrc/main.rs:9: haystack"}),
        json!({"type": "inquiry_request", "id": "q1", "source": {"source": "tool", "name": "run"},
               "question": {"text": "Keep the needle?", "answer_type": "text"}}),
        json!({"type": "inquiry_response", "id": "q1", "answer": "yes, the needle"}),
        json!({"type": "chat_response", "message": "Done: the Needle is found."}),
        json!({"type": "custom_note", "note": "needle in an entry of another type"}),
    ]
}

fn json_lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[test]
fn every_text_part_is_searched_and_binary_content_is_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store(dir.path());
    let id = new(&store, "parts");
    append(&store, &id, &every_part());

    let run = run_jp_store(&store, &["grep", "--json", "needle"], b"");
    let hits = json_lines(run.ok("grep --json"));
    let places: Vec<(u64, &str, &str, u64)> = hits
        .iter()
        .map(|h| {
            (
                h["entry"].as_u64().expect("entry"),
                h["type"].as_str().expect("type"),
                h["part"].as_str().expect("part"),
                h["line"].as_u64().expect("line"),
            )
        })
        .collect();
    assert_eq!(
        places,
        vec![
            (1, "chat_request", "message", 2),
            (1, "chat_request", "resource", 2),
            (2, "chat_response", "reasoning", 1),
            (3, "tool_call_request", "arguments", 1),
            (4, "tool_call_response", "result", 1),
            (5, "inquiry_request", "question", 1),
            (6, "inquiry_response", "answer", 1),
            (8, "custom_note", "entry", 1),
        ],
        "{}",
        run.stdout
    );
    // Where each hit is, and what it says.
    assert_eq!(hits[0]["conversation"], id.as_str());
    assert_eq!(hits[0]["turn"], 0);
    assert_eq!(hits[0]["role"], "user");
    assert_eq!(hits[0]["text"], "the needle in a message");
    assert_eq!(hits[0]["match"], json!([4, 10]));
    assert_eq!(hits[1]["uri"], "file:///src/lib.rs");
    assert_eq!(hits[1]["text"], "// needle in a text resource");
    assert!(hits[1]["blob"].as_str().is_some_and(|b| b.len() == 64));
    assert_eq!(hits[3]["tool"], "fs_grep_files");
    assert_eq!(hits[3]["text"], "pattern: needle");
    assert_eq!(hits[4]["role"], "tool");
    assert_eq!(hits[4]["tool"], "fs_grep_files");
    assert_eq!(hits[5]["role"], "tool");
    // The binary resource holds "needle" too: it is not searched.
    assert!(!run.stdout.contains("binary"), "{}", run.stdout);

    // For a person: one line per hit, addressed by id, turn, entry, part
    // and line.
    let run = run_jp_store(&store, &["grep", "needle"], b"");
    let out = run.ok("grep");
    assert_eq!(out.lines().count(), 8, "{out}");
    assert!(
        out.lines()
            .any(|l| l == format!("{id} turn 0 entry 1 message:2: the needle in a message")),
        "{out}"
    );
    assert!(
        out.lines().any(|l| l
            == format!(
                "{id} turn 0 entry 1 resource file:///src/lib.rs:2: // needle in a text resource"
            )),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l
                == format!("{id} turn 0 entry 3 arguments of fs_grep_files:1: pattern: needle")),
        "{out}"
    );

    // Nothing found: exit 1, nothing printed.
    let run = run_jp_store(&store, &["grep", "haystacks"], b"");
    run.expect_code(1, "grep without a hit");
    assert_eq!(run.stdout, "");
    // A pattern that is not a regular expression: exit 2, said.
    let run = run_jp_store(&store, &["grep", "needle("], b"");
    run.expect_code(2, "a bad pattern");
    assert!(run.stderr.contains("invalid pattern"), "{}", run.stderr);
}

#[test]
fn fixed_strings_case_roles_types_ids_and_lists() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store(dir.path());
    let a = new(&store, "a");
    append(&store, &a, &every_part());
    let b = new(&store, "b");
    append(
        &store,
        &b,
        &[
            json!({"type": "turn_start"}),
            json!({"type": "chat_request", "content": "what does a.b(c) do?"}),
            json!({"type": "chat_response", "message": "It calls b: NEEDLE."}),
        ],
    );
    let count = |args: &[&str]| -> usize {
        let run = run_jp_store(&store, args, b"");
        assert!(
            matches!(run.code, Some(0 | 1)),
            "{args:?}: {:?} {}",
            run.code,
            run.stderr
        );
        run.stdout.lines().count()
    };
    // -F: the pattern's metacharacters are literal.
    assert_eq!(count(&["grep", "-F", "a.b(c)"]), 1);
    assert_eq!(count(&["grep", "a.b\\(c\\)"]), 1);
    assert_eq!(count(&["grep", "-F", "a*b"]), 0);
    // -i: case folded; without it, not.
    assert_eq!(count(&["grep", "NEEDLE"]), 1);
    assert_eq!(count(&["grep", "-i", "NEEDLE"]), 10);
    // -l: each conversation once, in id order.
    let run = run_jp_store(&store, &["grep", "-l", "-i", "needle"], b"");
    assert_eq!(run.ok("grep -l"), format!("{a}\n{b}\n"));
    let run = run_jp_store(&store, &["grep", "-l", "--json", "-i", "needle"], b"");
    let listed = json_lines(run.ok("grep -l --json"));
    assert_eq!(
        listed,
        vec![
            json!({"conversation": a, "title": "a"}),
            json!({"conversation": b, "title": "b"})
        ]
    );
    // Ids given: only those.
    let run = run_jp_store(&store, &["grep", "-i", "needle", &b], b"");
    assert_eq!(run.ok("grep ID").lines().count(), 1);
    // --role and --type.
    assert_eq!(count(&["grep", "-i", "needle", "--role", "user"]), 3);
    assert_eq!(count(&["grep", "-i", "needle", "--role", "tool"]), 2);
    assert_eq!(count(&["grep", "-i", "needle", "--role", "user,tool"]), 5);
    assert_eq!(count(&["grep", "-i", "needle", "--role", "other"]), 1);
    assert_eq!(count(&["grep", "-i", "needle", "--type", "reasoning"]), 1);
    assert_eq!(
        count(&["grep", "-i", "needle", "--type", "chat_response"]),
        3
    );
    assert_eq!(
        count(&[
            "grep",
            "-i",
            "needle",
            "--type",
            "tool_call_request",
            "--type",
            "resource"
        ]),
        2
    );
    let run = run_jp_store(&store, &["grep", "needle", "--role", "robot"], b"");
    run.expect_code(2, "an unknown role");

    // An unknown id is an error (exit 2); the others are searched.
    let run = run_jp_store(&store, &["grep", "-i", "needle", "17000000001", &b], b"");
    run.expect_code(2, "an unknown id");
    assert_eq!(run.stdout.lines().count(), 1, "{}", run.stdout);
    assert!(run.stderr.contains("17000000001"), "{}", run.stderr);
}

#[test]
fn turns_a_compaction_covers_are_searched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store(dir.path());
    let id = new(&store, "compacted");
    append(&store, &id, &every_part());
    append(
        &store,
        &id,
        &[
            json!({"type": "turn_start"}),
            json!({"type": "chat_request", "content": "next"}),
            json!({"type": "chat_response", "message": "ok"}),
        ],
    );
    run_jp_store(
        &store,
        &[
            "compact",
            &id,
            "--to",
            "0",
            "--summary",
            "Summary: the haystack was searched.",
        ],
        b"",
    )
    .ok("compact");
    // The view no longer holds turn 0; the log does, and grep searches it.
    let view = run_jp_store(&store, &["view", &id], b"");
    assert!(!view.ok("view").contains("needle"));
    let run = run_jp_store(&store, &["grep", "needle"], b"");
    assert_eq!(run.ok("grep").lines().count(), 8, "{}", run.stdout);
    // The summary is searched too, as a compaction's.
    let run = run_jp_store(&store, &["grep", "--json", "haystack"], b"");
    let hits = json_lines(run.ok("grep summary"));
    let summary: Vec<&Value> = hits.iter().filter(|h| h["part"] == "summary").collect();
    assert_eq!(summary.len(), 1, "{}", run.stdout);
    assert_eq!(summary[0]["type"], "compaction");
    assert_eq!(summary[0]["turn"], 1);
}

/// Every file below `dir`, recursively.
fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let path = e.expect("entry").path();
        if path.is_dir() {
            out.extend(files_below(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_torn_tail_is_a_warning_and_a_damaged_blob_an_error_the_rest_searched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store(dir.path());
    let a = new(&store, "torn");
    append(&store, &a, &every_part());
    let b = new(&store, "damaged");
    append(
        &store,
        &b,
        &[
            json!({"type": "turn_start"}),
            json!({"type": "chat_request", "content": "read it: needle"}),
            json!({"type": "tool_call_request", "id": "c9", "name": "fs_read_file", "arguments": {"path": "x"}}),
            json!({"type": "tool_call_response", "id": "c9", "content": "only this conversation holds this needle line"}),
        ],
    );
    let c = new(&store, "fine");
    append(
        &store,
        &c,
        &[json!({"type": "chat_request", "content": "a needle here"})],
    );
    // The damaged blob: the tool result only b references.
    let run = run_jp_store(&store, &["grep", "--json", "this needle line"], b"");
    let hits = json_lines(run.ok("grep before the damage"));
    let blob = hits[0]["blob"].as_str().expect("a blob").to_owned();
    let object = files_below(&store.join("blobs"))
        .into_iter()
        .find(|p| {
            p.file_name()
                .is_some_and(|n| blob.ends_with(&*n.to_string_lossy()))
        })
        .expect("the blob's loose object");
    let mut bytes = std::fs::read(&object).expect("read the object");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&object, &bytes).expect("damage the object");
    // A torn tail on a: bytes after its last whole record.
    let log = store.join("conversations").join(&a).join("events.log");
    let mut log_bytes = std::fs::read(&log).expect("read the log");
    log_bytes.extend_from_slice(b"\x01\x02torn");
    std::fs::write(&log, &log_bytes).expect("tear the log");

    let run = run_jp_store(&store, &["grep", "needle"], b"");
    run.expect_code(2, "grep over damage");
    // a: searched whole (a warning for its tail); b: its message found,
    // its blob reported; c: searched.
    assert_eq!(
        run.stdout
            .lines()
            .map(|l| l.split(' ').next().unwrap_or(""))
            .collect::<Vec<_>>(),
        [vec![a.as_str(); 8], vec![b.as_str()], vec![c.as_str()]].concat(),
        "{}",
        run.stdout
    );
    assert!(
        run.stderr.contains("warning") && run.stderr.contains(&a),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .lines()
            .any(|l| l.contains("error") && l.contains(&b) && l.contains(&blob)),
        "{}",
        run.stderr
    );
    // Without the damaged conversation: no error.
    run_jp_store(&store, &["grep", "needle", &a, &c], b"").ok("grep a and c");
}

#[test]
fn stored_text_is_escaped_for_a_person_and_exact_in_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = store(dir.path());
    let id = new(&store, "escapes");
    append(
        &store,
        &id,
        &[
            json!({"type": "chat_request", "content": "needle \u{1b}[2J\u{202e}gnp.exe\r"}),
            json!({"type": "chat_response", "message": format!("{}needle{}", "x".repeat(500), "y".repeat(500))}),
        ],
    );
    let run = run_jp_store(&store, &["grep", "needle"], b"");
    let out = run.ok("grep");
    assert!(!out.contains('\u{1b}') && !out.contains('\u{202e}') && !out.contains('\r'));
    assert!(out.contains("needle \\x1b[2J\\u{202e}gnp.exe\\r"), "{out}");
    // A long line is shown around its match.
    let long = out.lines().nth(1).expect("a second hit");
    assert!(
        long.contains("needle") && long.ends_with('…') && long.len() < 400,
        "{long}"
    );
    let run = run_jp_store(&store, &["grep", "--json", "needle"], b"");
    let hits = json_lines(run.ok("grep --json"));
    assert_eq!(hits[0]["text"], "needle \u{1b}[2J\u{202e}gnp.exe\r");
    assert_eq!(hits[1]["text"].as_str().map(str::len), Some(1006));
}
