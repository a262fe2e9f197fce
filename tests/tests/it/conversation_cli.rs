//! The `jp-store` binary on conversations, as real processes: the commands
//! work together, and bad input is refused with exit status 1, a message
//! naming the problem, and nothing written.

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};

use jpstore_tests::{assert_owner_only, events_of, log_path, run_jp_store, tree_snapshot, ts, Run};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// A store made by `jp-store init` in a temp dir.
struct CliStore {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

impl CliStore {
    fn new() -> CliStore {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        let s = CliStore { _dir: dir, root };
        let out = s.run(&["init"], b"");
        assert_eq!(out.ok("init").trim(), s.root.display().to_string());
        s
    }

    fn run(&self, args: &[&str], stdin: &[u8]) -> Run {
        run_jp_store(&self.root, args, stdin)
    }

    fn append(&self, id: &str, stdin: &str) -> Run {
        self.run(&["append", id], stdin.as_bytes())
    }

    fn export(&self, id: &str) -> Value {
        self.run(&["export", id, "--format", "json"], b"")
            .json("export")
    }

    fn root(&self) -> &Path {
        &self.root
    }
}

fn array(events: &[Value]) -> String {
    serde_json::to_string_pretty(events).expect("serialize")
}

fn lines(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| serde_json::to_string(e).expect("serialize") + "\n")
        .collect()
}

fn first_batch() -> Vec<Value> {
    vec![
        json!({"type": "turn_start", "timestamp": ts(1)}),
        json!({"type": "chat_request", "timestamp": ts(2), "content": "Fix the flaky test"}),
        json!({"type": "tool_call_request", "timestamp": ts(3), "id": "call_1", "name": "read_file",
               "arguments": {"path": "src/lib.rs"}}),
        json!({"type": "tool_call_response", "timestamp": ts(4), "id": "call_1",
               "content": "fn main() {}\n", "is_error": false}),
        json!({"type": "chat_response", "timestamp": ts(5), "message": "Fixed."}),
    ]
}

fn second_batch() -> Vec<Value> {
    vec![
        json!({"type": "turn_start", "timestamp": ts(6)}),
        json!({"type": "chat_request", "timestamp": ts(7), "content": "Run the tests",
               "resources": [{"uri": "file:///work/Cargo.toml", "mimeType": "text/x-toml", "text": "[package]\n"}]}),
        json!({"type": "tool_call_request", "timestamp": ts(8), "id": "call_2", "name": "run_tests",
               "arguments": {}}),
        json!({"type": "tool_call_response", "timestamp": ts(9), "id": "call_2",
               "content": [{"type": "text", "text": "3 passed"}], "is_error": false}),
        json!({"type": "chat_response", "timestamp": ts(10), "reasoning": "All green."}),
    ]
}

#[test]
fn new_append_ls_print_export_stats_work_together() {
    let s = CliStore::new();
    let out = s.run(&["new", "--title", "T", "--label", "k=v"], b"");
    let id = out.ok("new").trim().to_string();
    assert!(
        !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()),
        "new printed {id:?}, not a JP id"
    );

    // A JSON array, then JSON Lines.
    let out = s.run(&["append", &id, "--json"], array(&first_batch()).as_bytes());
    let report = out.json("append array");
    assert_eq!(report["entries"], json!(5), "{report}");
    assert_eq!(report["new_blobs"], json!(1), "{report}");
    s.append(&id, &lines(&second_batch()))
        .ok("append JSON Lines");

    let ls = s.run(&["ls", "--json"], b"").json("ls");
    let items = ls.as_array().expect("ls gives an array");
    assert_eq!(items.len(), 1, "{ls}");
    let item = &items[0];
    assert_eq!(item["id"], json!(id), "{item}");
    assert_eq!(item["title"], json!("T"), "{item}");
    assert_eq!(item["labels"], json!({"k": "v"}), "{item}");
    assert_eq!(item["turns"], json!(2), "{item}");
    assert_eq!(item["events"], json!(10), "{item}");
    assert_eq!(
        item["last_activity"].as_str().map(|t| t >= ts(10).as_str()),
        Some(true),
        "{item}"
    );

    let print = s.run(&["print", &id], b"");
    let text = print.ok("print");
    for want in [
        "conversation",
        ": T",
        "turn 0",
        "turn 1",
        "read_file",
        "run_tests",
        "[call_1]",
        "Fix the flaky test",
        "file:///work/Cargo.toml",
        "2 turns, 10 events",
    ] {
        assert!(text.contains(want), "print lacks {want:?}:\n{text}");
    }
    assert!(
        text.find("turn 0") < text.find("read_file")
            && text.find("read_file") < text.find("turn 1"),
        "read_file is in turn 0:\n{text}"
    );

    let export = s.export(&id);
    let mut want = first_batch();
    want.extend(second_batch());
    assert_eq!(events_of(&export), want, "export gives back the events");
    assert_eq!(export["id"], json!(id));
    assert_eq!(export["metadata"]["title"], json!("T"));
    let refs = s.run(&["export", &id, "--refs"], b"").json("export --refs");
    let content = &refs["events"][3]["content"];
    assert_eq!(
        content,
        &json!({"$blob": hex::encode(Sha256::digest(b"fn main() {}\n")), "size": 13}),
        "a reference"
    );

    for args in [vec!["stats", "--json"], vec!["stats", &id, "--json"]] {
        let stats = s.run(&args, b"").json("stats");
        assert_eq!(stats["conversations"], json!(1), "{stats}");
        assert_eq!(stats["turns"], json!(2), "{stats}");
        assert_eq!(stats["entries"], json!(10), "{stats}");
        assert_eq!(
            stats["records"],
            json!(3),
            "metadata and two batches: {stats}"
        );
        assert_eq!(
            stats["entries_by_type"],
            json!({"turn_start": 2, "chat_request": 2, "tool_call_request": 2,
                   "tool_call_response": 2, "chat_response": 2}),
            "{stats}"
        );
        assert_eq!(stats["content_references"], json!(3), "{stats}");
        assert_eq!(
            stats["content_bytes_referenced"],
            json!(13 + 10 + 8),
            "{stats}"
        );
        // Three contents and the base config.
        assert_eq!(stats["distinct_blobs_referenced"], json!(4), "{stats}");
    }
}

/// Runs `append` with `stdin` on `id` and checks it is refused: exit status
/// 1, every word of `words` in the message, and no file of the store changed.
fn refused(s: &CliStore, case: &str, id: &str, stdin: &[u8], words: &[&str]) {
    refused_with(s, case, id, stdin, words, 1)
}

/// [`refused`] with the exit status `code` (2: bad usage).
fn refused_with(s: &CliStore, case: &str, id: &str, stdin: &[u8], words: &[&str], code: i32) {
    let before = tree_snapshot(s.root());
    let out = s.run(&["append", id], stdin);
    out.expect_code(code, case);
    for w in words {
        assert!(
            out.stderr.contains(w),
            "{case}: the message lacks {w:?}: {}",
            out.stderr
        );
    }
    assert!(
        out.stderr.starts_with("jp-store: error: "),
        "{case}: {}",
        out.stderr
    );
    let after = tree_snapshot(s.root());
    if before != after {
        let changed: Vec<_> = after
            .iter()
            .filter(|(k, v)| before.get(*k) != Some(*v))
            .map(|(k, _)| k)
            .chain(before.keys().filter(|k| !after.contains_key(*k)))
            .collect();
        panic!("{case}: the store changed: {changed:?}");
    }
}

const CONV: &str = "conv";

/// A store with conversation `conv` whose turn 0 holds an unanswered tool
/// call request `call_a`.
fn store_with_open_request() -> CliStore {
    let s = CliStore::new();
    s.run(&["new", "--id", CONV], b"").ok("new --id");
    s.append(
        CONV,
        &lines(&[
            json!({"type": "turn_start", "timestamp": ts(1)}),
            json!({"type": "chat_request", "timestamp": ts(2), "content": "q"}),
            json!({"type": "tool_call_request", "timestamp": ts(3), "id": "call_a", "name": "slow_tool", "arguments": {}}),
        ]),
    )
    .ok("first append");
    s
}

#[test]
fn bad_json_is_refused_naming_the_line() {
    let s = store_with_open_request();
    let log = std::fs::read(log_path(s.root(), CONV)).expect("log");
    refused(
        &s,
        "malformed JSON array",
        CONV,
        br#"[{"type": "turn_start"},, {"type": "chat_request", "content": "x"}]"#,
        &["line 1, column", "invalid JSON", "nothing was appended"],
    );
    refused(
        &s,
        "malformed JSON Lines",
        CONV,
        b"{\"type\": \"turn_start\"}\n{\"type\": \"chat_request\" \"content\": \"x\"}\n",
        &["line 2, column", "invalid JSON"],
    );
    refused(
        &s,
        "truncated JSON array",
        CONV,
        b"[\n{\"type\": \"turn_start\"},\n{\"type\": \"chat_request\", \"content\": \"x",
        &["line 3", "invalid JSON", "EOF"],
    );
    refused(
        &s,
        "truncated JSON Lines",
        CONV,
        b"{\"type\": \"turn_start\"}\n{\"type\": \"chat_request\", \"content\"",
        &["line 2", "invalid JSON"],
    );
    refused(&s, "empty input", CONV, b"  \n", &["no events"]);
    refused(
        &s,
        "not an object",
        CONV,
        b"[\n{\"type\": \"turn_start\"},\n42\n]",
        &["line 3", "entry 2", "expected an event object"],
    );
    assert_eq!(
        std::fs::read(log_path(s.root(), CONV)).expect("log"),
        log,
        "the log changed"
    );
}

#[test]
fn entries_that_do_not_fit_the_model_are_refused_naming_entry_and_field() {
    let s = store_with_open_request();
    refused(
        &s,
        "content: 5",
        CONV,
        b"{\"type\": \"turn_start\"}\n{\"type\": \"chat_request\", \"content\": 5}\n",
        &[
            "line 2",
            "entry 2",
            "field `content`",
            "expected a string",
            "number 5",
        ],
    );
    refused(
        &s,
        "missing field",
        CONV,
        br#"[{"type": "tool_call_request", "name": "x"}]"#,
        &["entry 1", "field `id`", "missing"],
    );
    refused(
        &s,
        "two kinds of response",
        CONV,
        br#"[{"type": "chat_response", "message": "a", "reasoning": "b"}]"#,
        &["entry 1", "exactly one of"],
    );
    refused(
        &s,
        "bad timestamp",
        CONV,
        br#"[{"type": "turn_start", "timestamp": "yesterday"}]"#,
        &["entry 1", "field `timestamp`"],
    );
}

#[test]
fn tool_call_responses_must_answer_a_request_of_the_current_turn() {
    let s = store_with_open_request();
    refused(
        &s,
        "response to an unknown id",
        CONV,
        br#"{"type": "tool_call_response", "id": "nope", "content": "x"}"#,
        &[
            "line 1",
            "entry 1",
            "field `id`",
            "`nope`",
            "current turn",
            "`call_a`",
        ],
    );
    // Inside one batch: a turn_start after a conversation event opens a new
    // turn, so `call_a` of turn 0 is no longer answerable.
    refused(
        &s,
        "response after a new turn in the same batch",
        CONV,
        b"{\"type\": \"turn_start\"}\n{\"type\": \"chat_request\", \"content\": \"next\"}\n\
          {\"type\": \"tool_call_response\", \"id\": \"call_a\", \"content\": \"late\"}\n",
        &["line 3", "entry 3", "`call_a`", "current turn"],
    );
    // Across batches.
    s.append(
        CONV,
        &lines(&[
            json!({"type": "turn_start", "timestamp": ts(4)}),
            json!({"type": "chat_request", "timestamp": ts(5), "content": "next"}),
        ]),
    )
    .ok("a new turn");
    refused(
        &s,
        "response to a request of an earlier turn",
        CONV,
        br#"{"type": "tool_call_response", "id": "call_a", "content": "late"}"#,
        &[
            "entry 1",
            "`call_a`",
            "current turn has no tool call requests",
        ],
    );
    // The same response in the turn of its request is accepted.
    s.append(
        CONV,
        &lines(&[
            json!({"type": "tool_call_request", "timestamp": ts(6), "id": "call_a", "name": "slow_tool", "arguments": {}}),
            json!({"type": "tool_call_response", "timestamp": ts(7), "id": "call_a", "content": "in time", "is_error": false}),
        ]),
    )
    .ok("a response in its turn");
}

fn with_blob(reference: Value) -> Vec<u8> {
    serde_json::to_vec(&json!([{
        "type": "chat_request",
        "content": "see attachment",
        "resources": [{"uri": "file:///x", "text": reference}]
    }]))
    .expect("serialize")
}

#[test]
fn bad_blob_references_are_refused() {
    let s = store_with_open_request();
    let missing = hex::encode(Sha256::digest(b"abc"));
    refused(
        &s,
        "missing blob",
        CONV,
        &with_blob(json!({"$blob": missing, "size": 3})),
        &["entry 1", "$blob", &missing, "not in the store"],
    );
    refused(
        &s,
        "63 hex digits",
        CONV,
        &with_blob(json!({"$blob": &missing[..63], "size": 3})),
        &[
            "entry 1",
            "resources[0].text.$blob",
            "64 hexadecimal digits",
        ],
    );
    refused(
        &s,
        "uppercase hex",
        CONV,
        &with_blob(json!({"$blob": missing.to_uppercase(), "size": 3})),
        &["entry 1", "resources[0].text.$blob", "0-9 and a-f"],
    );
    refused(
        &s,
        "a path as blob id",
        CONV,
        &with_blob(json!({"$blob": "../etc/passwd", "size": 3})),
        &["entry 1", "resources[0].text.$blob", "../etc/passwd"],
    );
    // A blob that exists, with the wrong size.
    s.append(
        CONV,
        &lines(&[
            json!({"type": "chat_request", "timestamp": ts(8), "content": "store abc",
                        "resources": [{"uri": "file:///abc", "text": "abc"}]}),
        ]),
    )
    .ok("store abc");
    refused(
        &s,
        "wrong size",
        CONV,
        &with_blob(json!({"$blob": missing, "size": 4})),
        &["entry 1", "$blob", "3 bytes", "says 4"],
    );
    // The right size is accepted.
    s.run(
        &["append", CONV],
        &with_blob(json!({"$blob": missing, "size": 3})),
    )
    .ok("a valid reference");
}

#[test]
fn a_batch_over_the_record_size_limit_is_refused() {
    let s = store_with_open_request();
    // 65 MiB of chat_request content: chat_request content lives in the log,
    // so the record would exceed the 64 MiB default limit.
    let big = "x".repeat(65 << 20);
    let mut stdin = Vec::with_capacity(big.len() + 100);
    stdin.extend_from_slice(br#"[{"type": "chat_request", "content": ""#);
    stdin.extend_from_slice(big.as_bytes());
    stdin.extend_from_slice(br#""}]"#);
    drop(big);
    refused(
        &s,
        "65 MiB batch",
        CONV,
        &stdin,
        &["nothing was appended", "more than the limit", "67108864"],
    );
    // The writer is usable afterwards (another process, same log).
    s.append(CONV, r#"{"type": "chat_response", "message": "small"}"#)
        .ok("append after the refusal");
}

#[test]
fn bad_conversation_ids_are_refused() {
    let s = store_with_open_request();
    let ok = br#"{"type": "chat_response", "message": "hi"}"#;
    refused(
        &s,
        "unknown id",
        "nosuch",
        ok,
        &["no conversation with id nosuch"],
    );
    // An id that cannot be one is bad usage.
    for bad in ["a/b", "..", "../conv", "conv/..", "."] {
        refused_with(
            &s,
            &format!("id {bad:?}"),
            bad,
            ok,
            &["invalid conversation id"],
            2,
        );
    }
    // The same refusals from the read commands.
    for args in [
        ["export", "nosuch"],
        ["print", "nosuch"],
        ["stats", "nosuch"],
    ] {
        let out = s.run(&args, b"");
        out.expect_code(1, &args.join(" "));
        assert!(out.stderr.contains("nosuch"), "{}", out.stderr);
    }
    let out = s.run(&["export", "../conv"], b"");
    out.expect_code(2, "export ../conv");
    assert!(
        out.stderr.contains("invalid conversation id"),
        "{}",
        out.stderr
    );
}

#[test]
fn unknown_entry_types_are_accepted_and_exported_verbatim() {
    let s = store_with_open_request();
    let unknown = json!({"type": "future_kind", "timestamp": "whenever",
                         "payload": {"a": [1, 2.5, null, {"b": "c"}]}, "flag": true});
    let out = s.append(CONV, &lines(std::slice::from_ref(&unknown)));
    out.ok("append unknown");
    let export = s.export(CONV);
    let events = events_of(&export);
    assert_eq!(events.len(), 4);
    assert_eq!(events[3], unknown);
    // print and stats show it as unknown.
    let print = s.run(&["print", CONV], b"");
    assert!(
        print.ok("print").contains("unknown entry `future_kind`"),
        "{}",
        print.stdout
    );
    let stats = s.run(&["stats", CONV, "--json"], b"").json("stats");
    assert_eq!(
        stats["entries_by_type"]["future_kind (unknown)"],
        json!(1),
        "{stats}"
    );
}

#[test]
fn bad_usage_exits_with_status_2() {
    let s = CliStore::new();
    for args in [
        vec!["append"],
        vec!["new", "--label"],
        vec!["export", "x", "--format", "xml"],
        vec!["no-such-command"],
        vec!["ls", "--no-such-flag"],
    ] {
        let out = s.run(&args, b"");
        out.expect_code(2, &args.join(" "));
        assert!(!out.stderr.is_empty(), "{args:?}: no message");
    }
    // Work that fails is 1, not 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_jp_store(&dir.path().join("none"), &["ls"], b"");
    out.expect_code(1, "ls without a store");
    assert!(
        out.stderr.contains("not a jp-store store"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_text_reference_to_binary_content_is_refused_or_exports() {
    let s = store_with_open_request();
    // Binary content, stored through a `blob` resource (base64 of ff fe fd).
    s.append(
        CONV,
        r#"{"type": "chat_request", "content": "binary", "resources": [{"uri": "file:///b", "blob": "//79"}]}"#,
    )
    .ok("append binary content");
    let binary = hex::encode(Sha256::digest([0xff, 0xfe, 0xfd]));
    // The same blob referenced where text is expected.
    let stdin = with_blob(json!({"$blob": binary, "size": 3}));
    let before = tree_snapshot(s.root());
    let out = s.run(&["append", CONV], &stdin);
    match out.code {
        Some(1) => {
            // Refused: it must say why, and write nothing.
            assert!(out.stderr.contains("UTF-8"), "{}", out.stderr);
            assert!(
                before == tree_snapshot(s.root()),
                "a refused append changed the store"
            );
        }
        Some(0) => {
            // Accepted: then the conversation must still export.
            let export = s.run(&["export", CONV], b"");
            export.expect_code(0, "export after a text reference to binary content");
        }
        other => panic!("append exited with {other:?}: {}", out.stderr),
    }
}

#[test]
fn a_tool_call_request_can_be_answered_by_a_later_process() {
    let s = store_with_open_request();
    // `call_a` was appended by another process, in the current turn.
    s.append(
        CONV,
        r#"{"type": "tool_call_response", "id": "call_a", "content": "answered later", "is_error": true}"#,
    )
    .ok("answer from a later process");
    let events = events_of(&s.export(CONV));
    assert_eq!(events.len(), 4);
    assert_eq!(events[3]["content"], json!("answered later"));
    assert_eq!(events[3]["is_error"], json!(true));
    // Input that is not UTF-8 is refused before anything is done.
    refused(
        &s,
        "not UTF-8",
        CONV,
        b"\xff\xfe{}",
        &["UTF-8", "standard input"],
    );
}

#[test]
fn torn_and_damaged_logs_through_the_commands() {
    let s = store_with_open_request();
    let log = log_path(s.root(), CONV);
    let whole = std::fs::read(&log).expect("log");
    let head = log.with_file_name("head");
    let head_before = std::fs::read(&head).expect("head");
    s.append(
        CONV,
        r#"{"type": "chat_response", "message": "to be torn"}"#,
    )
    .ok("append");
    let with_last = std::fs::read(&log).expect("log");
    // A crash in the middle of the last append: 7 bytes of its record, and
    // the head as it was (the writer rewrites it only after its sync).
    let torn_len = whole.len() + 7;
    std::fs::write(&log, &with_last[..torn_len]).expect("tear the log");
    std::fs::write(&head, &head_before).expect("the head before the append");

    // Readers show the whole batches and leave the file alone.
    assert_eq!(events_of(&s.export(CONV)).len(), 3);
    let ls = s.run(&["ls", "--json"], b"").json("ls");
    assert_eq!(ls[0]["events"], json!(3), "{ls}");
    assert_eq!(std::fs::read(&log).expect("log").len(), torn_len);

    // The next append cuts the tail, says so, and appends.
    let out = s.append(
        CONV,
        r#"{"type": "chat_response", "message": "after the cut"}"#,
    );
    out.ok("append after a crash");
    assert!(
        out.stderr.contains(&format!(
            "cut an incomplete record of 7 bytes at offset {}",
            whole.len()
        )),
        "{}",
        out.stderr
    );
    let events = events_of(&s.export(CONV));
    assert_eq!(events.len(), 4);
    assert_eq!(events[3]["message"], json!("after the cut"));

    // Damage before the last record: every command that reads the log
    // fails, naming the file and the offset, and nothing is cut.
    let mut damaged = std::fs::read(&log).expect("log");
    damaged[whole.len() - 3] ^= 0x20;
    std::fs::write(&log, &damaged).expect("damage the log");
    // The damaged record is the one holding the first batch.
    let offset = {
        let store =
            jpstore_engine::Store::open_dir(s.root(), jpstore_engine::StoreOptions::default())
                .expect("open");
        let err = store
            .read(&jpstore_engine::conversation::ConversationId::parse(CONV).expect("id"))
            .expect_err("read of a damaged log");
        match err {
            jpstore_engine::error::Error::Corrupt { offset, .. } => offset,
            other => panic!("expected Corrupt, got {other}"),
        }
    };
    assert!(offset < whole.len() as u64);
    // `ls` is not in the list: it lists from each conversation's head cache
    // and decodes only records appended since (format-spec.md 4.6), so it
    // does not re-check old records; reading the conversation does.
    for args in [
        vec!["export", CONV],
        vec!["print", CONV],
        vec!["stats", CONV],
    ] {
        let out = s.run(&args, b"");
        out.expect_code(1, &args.join(" "));
        assert!(
            out.stderr.contains(&log.display().to_string())
                && out.stderr.contains(&format!("offset {offset}")),
            "{args:?}: {}",
            out.stderr
        );
    }
    refused(
        &s,
        "append to a damaged log",
        CONV,
        br#"{"type": "chat_response", "message": "x"}"#,
        &["corrupt", &format!("offset {offset}")],
    );
    assert_eq!(std::fs::read(&log).expect("log"), damaged);
}

#[test]
fn export_out_writes_the_same_document_to_a_file() {
    let s = store_with_open_request();
    let stdout = s.run(&["export", CONV], b"");
    let path = s.root().join("..").join("export.json");
    let path_arg = path.display().to_string();
    let out = s.run(&["export", CONV, "--out", &path_arg], b"");
    assert_eq!(out.ok("export --out"), "", "nothing on standard output");
    assert_eq!(
        std::fs::read_to_string(&path).expect("exported file"),
        stdout.ok("export")
    );
}

#[test]
fn store_layout_modes_links_and_foreign_directories() {
    let s = store_with_open_request();
    s.append(
        CONV,
        r#"{"type": "tool_call_response", "id": "call_a", "content": "stored as a blob", "is_error": false}"#,
    )
    .ok("append content");

    // Files 0600, directories 0700, everywhere below the store.
    let checked = assert_owner_only(s.root()).len();
    assert!(checked > 5, "only {checked} names in the store");

    // Directories that are not conversations are ignored by listings.
    let conversations = s.root().join("conversations");
    std::fs::create_dir(conversations.join("not.an.id")).expect("mkdir");
    std::fs::create_dir(conversations.join("empty")).expect("mkdir");
    let ls = s.run(&["ls", "--json"], b"").json("ls");
    let ids: Vec<&str> = ls
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|i| i["id"].as_str())
        .collect();
    assert_eq!(ids, [CONV], "{ls}");
    // An empty directory left by an interrupted creation is reused.
    s.run(&["new", "--id", "empty"], b"")
        .ok("new in an empty directory");

    // A log that is a symbolic link is never followed.
    s.run(&["new", "--id", "linked"], b"").ok("new");
    let linked = log_path(s.root(), "linked");
    std::fs::remove_file(&linked).expect("remove log");
    std::os::unix::fs::symlink(log_path(s.root(), CONV), &linked).expect("symlink");
    let target_before = std::fs::read(log_path(s.root(), CONV)).expect("log");
    for args in [vec!["export", "linked"], vec!["print", "linked"]] {
        let out = s.run(&args, b"");
        out.expect_code(1, &args.join(" "));
        assert!(
            out.stderr.contains("linked/events.log"),
            "{args:?}: {}",
            out.stderr
        );
    }
    let out = s.append(
        "linked",
        r#"{"type": "chat_response", "message": "through a link"}"#,
    );
    out.expect_code(1, "append through a link");
    assert!(out.stderr.contains("linked/events.log"), "{}", out.stderr);
    assert_eq!(
        std::fs::read(log_path(s.root(), CONV)).expect("log"),
        target_before,
        "the link's target changed"
    );
}

/// `init` makes a store only in a new or empty directory; it refuses a
/// directory holding anything else, naming what is there, and leaves an
/// existing store as it is (exit 0, saying so). Other commands refuse a
/// directory that is not a store and create nothing in it.
#[test]
fn init_refuses_a_non_empty_directory_and_leaves_an_existing_store_as_it_is() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let busy = tmp.path().join("busy");
    std::fs::create_dir_all(busy.join("src")).expect("mkdir");
    std::fs::write(busy.join("notes.txt"), b"mine").expect("write");
    let before = jpstore_tests::tree_snapshot(&busy);
    let out = run_jp_store(&busy, &["init"], b"");
    out.expect_code(1, "init of a non-empty directory");
    assert!(
        out.stderr.contains("not empty")
            && out.stderr.contains("notes.txt")
            && out.stderr.contains("src"),
        "{}",
        out.stderr
    );
    assert_eq!(
        jpstore_tests::tree_snapshot(&busy),
        before,
        "nothing written"
    );
    for args in [
        &["ls"][..],
        &["new"][..],
        &["stats"][..],
        &["blob", "ls"][..],
    ] {
        let out = run_jp_store(&busy, args, b"");
        out.expect_code(1, &format!("{args:?} in a directory that is not a store"));
        assert!(
            out.stderr.contains("not a jp-store store"),
            "{}",
            out.stderr
        );
    }
    assert_eq!(
        jpstore_tests::tree_snapshot(&busy),
        before,
        "nothing written"
    );

    // New and empty directories become stores.
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("mkdir");
    for dir in [tmp.path().join("new/store"), empty] {
        run_jp_store(&dir, &["init"], b"").ok("init of a new or empty directory");
        assert!(dir.join("conversations").is_dir() && dir.join("config.toml").is_file());
    }

    // An existing store is left as it is.
    let store = tmp.path().join("new/store");
    run_jp_store(&store, &["new", "--id", "a"], b"").ok("new");
    std::fs::write(store.join("config.toml"), b"# mine\n").expect("write");
    let before = jpstore_tests::tree_snapshot(&store);
    let out = run_jp_store(&store, &["init"], b"");
    out.expect_code(0, "init of an existing store");
    assert!(
        out.stderr.contains("already a jp-store store"),
        "{}",
        out.stderr
    );
    assert_eq!(
        jpstore_tests::tree_snapshot(&store),
        before,
        "the store unchanged"
    );
}
