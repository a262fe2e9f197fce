//! The `--json` output of every command that has one, pinned byte for byte:
//! keys, their order, value forms and values, compact or pretty, as the
//! binary prints them. The output is the `Serialize` of the library's report
//! types, so a change to one of them shows here.
//!
//! Each run's output must be exactly what `serde_json` prints for the value
//! it holds (pretty or compact, one newline after it); the value is then
//! compared, as printed, with the pinned text. The temp directory is shown
//! as `<dir>`. Values that depend on the clock (a timestamp written as
//! now, a log length after a record holding one, the names of quarantined
//! files) or on the order of worker threads (a pack's name; the bytes of a
//! pack of a batch put, whose workers each fill groups of their own) are replaced
//! by a placeholder of their kind (`"<number>"`, `"<string>"`): their keys
//! are still pinned. The stores are built so that
//! few need it: the sample JP conversation of `jp-store demo` (whose times
//! are in its files) and events with their timestamps given.

use std::path::{Path, PathBuf};

use jpstore_tests::{run_jp_store_in, Run};
use serde_json::Value;

/// A store in a temp directory, commands run in that directory.
struct S {
    _dir: tempfile::TempDir,
    /// The working directory (canonical): shown as `<dir>`.
    work: PathBuf,
    store: PathBuf,
}

/// The conversation of the sample JP workspace.
const SAMPLE_ID: &str = "17738399468";

/// A turn with a tool call and its response, every timestamp given.
const TURN: &str = concat!(
    r#"{"type":"turn_start","timestamp":"2026-05-29 20:00:00.0"}"#,
    "\n",
    r#"{"type":"chat_request","timestamp":"2026-05-29 20:00:01.0","content":"more"}"#,
    "\n",
    r#"{"type":"tool_call_request","timestamp":"2026-05-29 20:00:02.0","id":"c9","name":"fs_read_file","arguments":{"path":"a.rs"}}"#,
    "\n",
    r#"{"type":"tool_call_response","timestamp":"2026-05-29 20:00:03.0","id":"c9","content":"fn main() {}"}"#,
    "\n",
    r#"{"type":"chat_response","timestamp":"2026-05-29 20:00:04.0","message":"done"}"#,
    "\n",
);

impl S {
    fn new() -> S {
        let dir = tempfile::tempdir().expect("tempdir");
        let work = std::fs::canonicalize(dir.path()).expect("canonical tempdir");
        let store = work.join("store");
        let s = S {
            _dir: dir,
            work,
            store,
        };
        s.run(&["init"], b"").ok("init");
        s
    }

    /// A store holding the sample JP conversation.
    fn with_sample() -> S {
        let s = S::new();
        s.run(&["import", &sample()], b"").ok("import");
        s
    }

    fn run(&self, args: &[&str], stdin: &[u8]) -> Run {
        run_jp_store_in(&self.store, Some(&self.work), args, stdin)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.work.join(rel)
    }

    /// The output of `run` (which must exit with `code`) as pinned: see the
    /// module docs. `volatile` names the keys whose values are masked.
    fn pinned(&self, run: &Run, code: i32, what: &str, volatile: &[&str]) -> String {
        run.expect_code(code, what);
        let work = self.work.to_str().expect("a UTF-8 temp dir");
        let text = run.stdout.replace(work, "<dir>");
        let mut value: Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON: {e}\n{text}"));
        let pretty = serde_json::to_string_pretty(&value).expect("json");
        let compact = serde_json::to_string(&value).expect("json");
        let as_pretty = if text == format!("{pretty}\n") {
            true
        } else if text == format!("{compact}\n") {
            false
        } else {
            panic!("{what}: the output is not serde_json's own form of its value:\n{text}");
        };
        mask(&mut value, volatile);
        if as_pretty {
            serde_json::to_string_pretty(&value).expect("json")
        } else {
            serde_json::to_string(&value).expect("json")
        }
    }
}

/// The sample JP workspace of `jp-store demo`.
fn sample() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../cli/samples/jp-workspace")
        .to_str()
        .expect("a UTF-8 path")
        .to_owned()
}

/// Replaces the values of `keys`, anywhere in `value`, by a placeholder of
/// their kind.
fn mask(value: &mut Value, keys: &[&str]) {
    match value {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if keys.contains(&k.as_str()) {
                    match v {
                        Value::Number(_) => *v = Value::from("<number>"),
                        Value::String(_) => *v = Value::from("<string>"),
                        _ => mask(v, keys),
                    }
                } else {
                    mask(v, keys);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| mask(v, keys)),
        _ => {}
    }
}

/// `<name>.<secs>-<nanos>` (a file moved into quarantine) as
/// `<name>.<time>`.
fn mask_quarantine_times(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(at) = rest.find('.') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let secs = rest.bytes().take_while(u8::is_ascii_digit).count();
        let tail = &rest[secs..];
        if secs > 0 && tail.starts_with('-') {
            let nanos = tail[1..].bytes().take_while(u8::is_ascii_digit).count();
            if nanos > 0 {
                out.push_str("<time>");
                rest = &tail[1 + nanos..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[track_caller]
fn check(actual: &str, expected: &str) {
    assert_eq!(actual, expected.trim_start_matches('\n'));
}

/// `import`, `append`, `ls`, `stats` (whole store and one conversation),
/// `compact --dry-run` and `attach`, on a store whose every byte is known
/// until the attach.
#[test]
fn import_append_ls_stats_dry_run_and_attach() {
    let s = S::new();
    let out = s.run(&["import", &sample(), "--json"], b"");
    check(
        &s.pinned(&out, 0, "import", &[]),
        r#"
{
  "imported": 1,
  "skipped": 0,
  "failed": [],
  "not_byte_identical": [],
  "not_in_view": [],
  "settings_not_applied": [],
  "events": 11,
  "bytes_read": 2886,
  "bytes_stored": 1977,
  "blob_bytes_stored": 422,
  "new_blobs": 3,
  "log_bytes": 1555
}"#,
    );
    let out = s.run(&["import", &sample(), "--json"], b"");
    check(
        &s.pinned(&out, 0, "import again", &[]),
        r#"
{
  "imported": 0,
  "skipped": 1,
  "failed": [],
  "not_byte_identical": [],
  "not_in_view": [],
  "settings_not_applied": [],
  "events": 0,
  "bytes_read": 0,
  "bytes_stored": 0,
  "blob_bytes_stored": 0,
  "new_blobs": 0,
  "log_bytes": 0
}"#,
    );
    let missing = s.path("missing");
    let out = s.run(&["import", missing.to_str().expect("utf-8"), "--json"], b"");
    check(
        &s.pinned(&out, 1, "import of nothing", &[]),
        r#"
{
  "imported": 0,
  "skipped": 0,
  "failed": [
    {
      "path": "<dir>/missing",
      "reason": "cannot open <dir>/missing: No such file or directory (os error 2)"
    }
  ],
  "not_byte_identical": [],
  "not_in_view": [],
  "settings_not_applied": [],
  "events": 0,
  "bytes_read": 0,
  "bytes_stored": 0,
  "blob_bytes_stored": 0,
  "new_blobs": 0,
  "log_bytes": 0
}"#,
    );
    // Without --json, each failure is named once on standard error, as it
    // is found (a conversation that is not JP data was named a second time
    // at the end).
    let bad = s.path("bad/17738399999-bad");
    std::fs::create_dir_all(&bad).expect("mkdir");
    std::fs::write(bad.join("events.json"), "not json").expect("write");
    let out = s.run(
        &[
            "import",
            missing.to_str().expect("utf-8"),
            bad.to_str().expect("utf-8"),
        ],
        b"",
    );
    assert_eq!(out.code, Some(1), "{out:?}");
    for named in ["No such file or directory", "not valid JP data"] {
        assert_eq!(out.stderr.matches(named).count(), 1, "{}", out.stderr);
    }

    let out = s.run(&["append", SAMPLE_ID, "--json"], TURN.as_bytes());
    check(
        &s.pinned(&out, 0, "append", &[]),
        r#"
{"id":"17738399468","auto_compaction":null,"offset":1555,"entries":5,"payloads":1,"new_blobs":1,"new_blob_bytes":12}"#,
    );

    let out = s.run(&["ls", "--json"], b"");
    check(
        &s.pinned(&out, 0, "ls", &[]),
        r#"
[
  {
    "id": "17738399468",
    "title": "Fix the flaky test",
    "created": "2026-03-18 13:19:06.8",
    "last_activity": "2026-05-29 20:00:04.0",
    "labels": {
      "project": "jp-store"
    },
    "turns": 3,
    "events": 16,
    "log_bytes": 1842
  }
]"#,
    );

    let out = s.run(&["stats", "--json"], b"");
    check(&s.pinned(&out, 0, "stats", &[]), STATS_STORE);
    let out = s.run(&["stats", SAMPLE_ID, "--json"], b"");
    check(&s.pinned(&out, 0, "stats of one", &[]), STATS_ONE);

    let out = s.run(
        &["compact", SAMPLE_ID, "--to", "-1", "--dry-run", "--json"],
        b"",
    );
    check(
        &s.pinned(&out, 0, "compact --dry-run", &[]),
        COMPACT_DRY_RUN,
    );

    // A file, a file in a directory, a binary file, and a link leaving the
    // directory (skipped).
    std::fs::create_dir_all(s.path("files/sub")).expect("mkdir");
    std::fs::write(s.path("files/a.txt"), "hello\n").expect("write");
    std::fs::write(s.path("files/sub/b.rs"), "fn x() {}\n").expect("write");
    std::fs::write(s.path("files/c.bin"), b"\x00\x01\x02").expect("write");
    std::fs::write(s.path("outside.txt"), "not attached\n").expect("write");
    std::os::unix::fs::symlink(s.path("outside.txt"), s.path("files/out")).expect("symlink");
    let out = s.run(&["attach", SAMPLE_ID, "files", "-m", "look", "--json"], b"");
    // The pack's name and size depend on the order the workers stored the
    // files (its group compresses them in that order).
    check(
        &s.pinned(&out, 0, "attach", &["pack", "pack_bytes"]),
        r#"
{"id":"17738399468","offset":1842,"turn":3,"files":3,"text_files":2,"bytes":19,"new_blobs":3,"pack_bytes":"<number>","pack":"<string>","skipped":[{"path":"<dir>/files/out","error":"a symbolic link to <dir>/outside.txt, outside the attached directory <dir>/files: not followed"}]}"#,
    );

    let resolve_uri = format!("file://{}", s.path("files/a.txt").display());
    let out = s.run(&["resolve", &resolve_uri], b"");
    check(
        &s.pinned(&out, 0, "resolve", &[]),
        r#"
{
  "uri": "file://<dir>/files/a.txt",
  "mimeType": "text/plain",
  "text": "hello\n",
  "name": "files/a.txt"
}"#,
    );
}

const STATS_STORE: &str = r#"
{
  "conversations": 1,
  "turns": 3,
  "entries": 16,
  "entries_by_type": {
    "chat_request": 3,
    "chat_response": 4,
    "tool_call_request": 3,
    "tool_call_response": 3,
    "turn_start": 3
  },
  "records": 3,
  "log_bytes": 1842,
  "content_references": 3,
  "content_bytes_referenced": 335,
  "distinct_blobs_referenced": 4,
  "distinct_blob_bytes_referenced": 492,
  "context": {
    "raw_bytes": 990,
    "raw_tokens": 248,
    "compacted_bytes": 990,
    "compacted_tokens": 248,
    "view_bytes": 990,
    "view_tokens": 248,
    "saved_by_compaction": {
      "bytes": 0,
      "tokens": 0
    },
    "saved_by_deduplication": {
      "bytes": 0,
      "tokens": 0,
      "resources_replaced": 0
    }
  },
  "blob_store": {
    "loose_objects": 4,
    "loose_bytes": 454,
    "packs": 0,
    "packed_objects": 0,
    "pack_bytes": 0
  }
}"#;

const STATS_ONE: &str = r#"
{
  "conversations": 1,
  "turns": 3,
  "entries": 16,
  "entries_by_type": {
    "chat_request": 3,
    "chat_response": 4,
    "tool_call_request": 3,
    "tool_call_response": 3,
    "turn_start": 3
  },
  "records": 3,
  "log_bytes": 1842,
  "content_references": 3,
  "content_bytes_referenced": 335,
  "distinct_blobs_referenced": 4,
  "distinct_blob_bytes_referenced": 492,
  "context": {
    "raw_bytes": 990,
    "raw_tokens": 248,
    "compacted_bytes": 990,
    "compacted_tokens": 248,
    "view_bytes": 990,
    "view_tokens": 248,
    "saved_by_compaction": {
      "bytes": 0,
      "tokens": 0
    },
    "saved_by_deduplication": {
      "bytes": 0,
      "tokens": 0,
      "resources_replaced": 0
    }
  }
}"#;

const COMPACT_DRY_RUN: &str = r#"
{
  "id": "17738399468",
  "dry_run": true,
  "profile": "default",
  "from_turn": 0,
  "to_turn": 1,
  "requested": [
    0,
    1
  ],
  "summary": null,
  "turns": [
    {
      "turn": 0,
      "events": 5,
      "summarized": false,
      "reasoning_dropped": 1,
      "requests_stripped": 1,
      "responses_stripped": 1
    },
    {
      "turn": 1,
      "events": 4,
      "summarized": false,
      "reasoning_dropped": 0,
      "requests_stripped": 1,
      "responses_stripped": 1
    }
  ],
  "estimated_tokens_before": 248,
  "estimated_tokens_after": 142,
  "offset": null
}"#;

/// `new`, `compact` (with a summary, without, undone), and `fork` (whole,
/// its last turn, compacted): every output is known, though the records
/// they write hold the time.
#[test]
fn new_compact_undo_and_fork() {
    let s = S::with_sample();
    std::fs::write(
        s.store.join("config.toml"),
        "[conversation.compaction.profiles.short.summary]\ncommand = \"cat >/dev/null\"\n",
    )
    .expect("config");
    let out = s.run(
        &[
            "new", "--id", "n1", "--title", "T", "--label", "a=b", "--json",
        ],
        b"",
    );
    check(
        &s.pinned(&out, 0, "new", &[]),
        r#"
{"id":"n1"}"#,
    );
    s.run(&["append", SAMPLE_ID], TURN.as_bytes()).ok("append");

    let out = s.run(&["compact", SAMPLE_ID, "--to", "-1", "--json"], b"");
    check(
        &s.pinned(&out, 0, "compact", &[]),
        r#"
{
  "id": "17738399468",
  "dry_run": false,
  "profile": "default",
  "from_turn": 0,
  "to_turn": 1,
  "requested": [
    0,
    1
  ],
  "summary": null,
  "turns": [
    {
      "turn": 0,
      "events": 5,
      "summarized": false,
      "reasoning_dropped": 1,
      "requests_stripped": 1,
      "responses_stripped": 1
    },
    {
      "turn": 1,
      "events": 4,
      "summarized": false,
      "reasoning_dropped": 0,
      "requests_stripped": 1,
      "responses_stripped": 1
    }
  ],
  "estimated_tokens_before": 248,
  "estimated_tokens_after": 142,
  "offset": 1842
}"#,
    );
    let out = s.run(
        &[
            "compact",
            SAMPLE_ID,
            "--profile",
            "short",
            "--from",
            "0",
            "--to",
            "0",
            "--summary",
            "what happened",
            "--json",
        ],
        b"",
    );
    check(
        &s.pinned(&out, 0, "compact with a summary", &[]),
        r#"
{
  "id": "17738399468",
  "dry_run": false,
  "profile": "short",
  "from_turn": 0,
  "to_turn": 0,
  "requested": [
    0,
    0
  ],
  "summary": "what happened",
  "turns": [
    {
      "turn": 0,
      "events": 5,
      "summarized": true,
      "reasoning_dropped": 0,
      "requests_stripped": 0,
      "responses_stripped": 0
    }
  ],
  "estimated_tokens_before": 142,
  "estimated_tokens_after": 60,
  "offset": 1918
}"#,
    );
    let out = s.run(&["compact", SAMPLE_ID, "--undo", "--json"], b"");
    check(
        &s.pinned(&out, 0, "undo", &[]),
        r#"
{"id":"17738399468","undone":2}"#,
    );
    let out = s.run(&["compact", SAMPLE_ID, "--undo", "1", "--json"], b"");
    check(
        &s.pinned(&out, 0, "undo 1", &[]),
        r#"
{"id":"17738399468","undone":1}"#,
    );

    let out = s.run(&["fork", SAMPLE_ID, "--id", "f1", "--json"], b"");
    check(
        &s.pinned(&out, 0, "fork", &[]),
        r#"
{"id":"f1","forked_from":"17738399468","entries":20,"compacted":null}"#,
    );
    let out = s.run(
        &["fork", SAMPLE_ID, "--last", "1", "--id", "f2", "--json"],
        b"",
    );
    check(
        &s.pinned(&out, 0, "fork --last", &[]),
        r#"
{"id":"f2","forked_from":"17738399468","entries":5,"compacted":null}"#,
    );
    let out = s.run(
        &["fork", SAMPLE_ID, "--compact", "--id", "f3", "--json"],
        b"",
    );
    check(
        &s.pinned(&out, 0, "fork --compact", &[]),
        r#"
{"id":"f3","forked_from":"17738399468","entries":21,"compacted":{"from_turn":0,"to_turn":2,"profile":"default"}}"#,
    );

    // Listed after records written at the time of the run.
    let out = s.run(&["ls", "--json"], b"");
    check(
        &s.pinned(
            &out,
            0,
            "ls after forks",
            &["created", "last_activity", "log_bytes"],
        ),
        r#"
[
  {
    "id": "17738399468",
    "title": "Fix the flaky test",
    "created": "<string>",
    "last_activity": "<string>",
    "labels": {
      "project": "jp-store"
    },
    "turns": 3,
    "events": 20,
    "log_bytes": "<number>"
  },
  {
    "id": "f1",
    "title": "Fix the flaky test",
    "created": "<string>",
    "last_activity": "<string>",
    "labels": {
      "project": "jp-store"
    },
    "turns": 3,
    "events": 20,
    "log_bytes": "<number>"
  },
  {
    "id": "f2",
    "title": "Fix the flaky test",
    "created": "<string>",
    "last_activity": "<string>",
    "labels": {
      "project": "jp-store"
    },
    "turns": 1,
    "events": 5,
    "log_bytes": "<number>"
  },
  {
    "id": "f3",
    "title": "Fix the flaky test",
    "created": "<string>",
    "last_activity": "<string>",
    "labels": {
      "project": "jp-store"
    },
    "turns": 3,
    "events": 21,
    "log_bytes": "<number>"
  },
  {
    "id": "n1",
    "title": "T",
    "created": "<string>",
    "last_activity": "<string>",
    "labels": {
      "a": "b"
    },
    "turns": 0,
    "events": 0,
    "log_bytes": "<number>"
  }
]"#,
    );
}

/// `append` whose completed turn calls for an automatic compaction.
#[test]
fn append_with_an_automatic_compaction() {
    let s = S::with_sample();
    std::fs::write(
        s.store.join("config.toml"),
        "[conversation.compaction.auto]\nenabled = true\ncontext_window = 300\nmin_turns = 2\n",
    )
    .expect("config");
    let out = s.run(&["append", SAMPLE_ID, "--json"], TURN.as_bytes());
    check(
        &s.pinned(&out, 0, "append", &[]),
        r#"
{"id":"17738399468","auto_compaction":{"from_turn":0,"to_turn":2,"profile":"default"},"offset":1555,"entries":5,"payloads":1,"new_blobs":1,"new_blob_bytes":12}"#,
    );
}

/// `blob put` (one file, several), `blob ls`, `blob verify`, `gc` (dry and
/// not) and `fsck` (with and without `--read-data`) on a clean store.
#[test]
fn blobs_gc_and_fsck_of_a_clean_store() {
    let s = S::with_sample();
    for (name, text) in [
        ("one.txt", "one\n"),
        ("two.txt", "two\n"),
        ("three.txt", "three\n"),
    ] {
        std::fs::write(s.path(name), text).expect("write");
    }
    let path = |n: &str| s.path(n).to_str().expect("utf-8").to_owned();
    let out = s.run(&["blob", "put", &path("one.txt"), "--json"], b"");
    check(
        &s.pinned(&out, 0, "blob put", &[]),
        r#"
[
  {
    "path": "<dir>/one.txt",
    "id": "2c8b08da5ce60398e1f19af0e5dccc744df274b826abe585eaba68c525434806",
    "size": 4
  }
]"#,
    );
    let out = s.run(
        &[
            "blob",
            "put",
            &path("two.txt"),
            &path("three.txt"),
            "--json",
        ],
        b"",
    );
    check(
        &s.pinned(&out, 0, "blob put of two", &[]),
        r#"
[
  {
    "path": "<dir>/two.txt",
    "id": "27dd8ed44a83ff94d557f9fd0412ed5a8cbca69ea04922d88c01184a07300a5a",
    "size": 4
  },
  {
    "path": "<dir>/three.txt",
    "id": "f6936912184481f5edd4c304ce27c5a1a827804fc7f329f43d273b8621870776",
    "size": 6
  }
]"#,
    );
    let out = s.run(&["blob", "ls", "--json"], b"");
    check(
        &s.pinned(&out, 0, "blob ls", &[]),
        r#"
[
  "27dd8ed44a83ff94d557f9fd0412ed5a8cbca69ea04922d88c01184a07300a5a",
  "2c8b08da5ce60398e1f19af0e5dccc744df274b826abe585eaba68c525434806",
  "5c6d17c3bb7ce948c7274c14d4ecc6fec68eed5cf446824def106881e48e29fd",
  "a33e9f904e1426bd967fae14d71cbd81d3248c6b461c7a661987f0ec51c0d089",
  "ec28d3df07afbfe83c3f33c421608752a3a10977f7759270a3ba105a92c95c72",
  "f6936912184481f5edd4c304ce27c5a1a827804fc7f329f43d273b8621870776"
]"#,
    );
    let out = s.run(&["blob", "verify", "--json"], b"");
    check(
        &s.pinned(&out, 0, "blob verify", &["bytes"]),
        r#"
{
  "clean": true,
  "loose_objects": 4,
  "packs": 1,
  "packed_objects": 2,
  "bytes": "<number>",
  "problems": [],
  "unindexed_packs": []
}"#,
    );
    let out = s.run(&["fsck", "--json"], b"");
    check(
        &s.pinned(&out, 0, "fsck", &[]),
        r#"
{
  "clean": true,
  "conversations": 1,
  "records": 2,
  "entries": 11,
  "references": 3,
  "blobs_read": 0,
  "bytes_read": 0,
  "findings": [
    {
      "severity": "info",
      "kind": "orphan-blobs",
      "conversation": null,
      "path": null,
      "offset": null,
      "blob": null,
      "message": "3 blobs are referenced by no conversation (gc removes them)"
    }
  ],
  "repairs": []
}"#,
    );
    let out = s.run(&["fsck", "--read-data", "--json"], b"");
    check(
        &s.pinned(&out, 0, "fsck --read-data", &["bytes_read"]),
        r#"
{
  "clean": true,
  "conversations": 1,
  "records": 2,
  "entries": 11,
  "references": 3,
  "blobs_read": 6,
  "bytes_read": "<number>",
  "findings": [
    {
      "severity": "info",
      "kind": "orphan-blobs",
      "conversation": null,
      "path": null,
      "offset": null,
      "blob": null,
      "message": "3 blobs are referenced by no conversation (gc removes them)"
    }
  ],
  "repairs": []
}"#,
    );
    let out = s.run(&["gc", "--dry-run", "--grace", "0s", "--json"], b"");
    check(
        &s.pinned(&out, 0, "gc --dry-run", &["bytes_freed", "pack_bytes"]),
        r#"
{
  "dry_run": true,
  "conversations": 1,
  "referenced_blobs": 3,
  "objects_freed": 3,
  "bytes_freed": "<number>",
  "loose_removed": 1,
  "loose_bytes": 24,
  "packs_rewritten": 0,
  "packs_removed": 1,
  "packed_removed": 2,
  "pack_bytes": "<number>",
  "kept_unreferenced": 0,
  "temp_removed": 0,
  "leftovers_removed": 0,
  "leftover_bytes": 0,
  "packs_merged": 0,
  "restored": 0,
  "waited_secs": 0
}"#,
    );
    let out = s.run(&["gc", "--grace", "0s", "--json"], b"");
    check(
        &s.pinned(&out, 0, "gc", &["bytes_freed", "pack_bytes"]),
        r#"
{
  "dry_run": false,
  "conversations": 1,
  "referenced_blobs": 3,
  "objects_freed": 3,
  "bytes_freed": "<number>",
  "loose_removed": 1,
  "loose_bytes": 24,
  "packs_rewritten": 0,
  "packs_removed": 1,
  "packed_removed": 2,
  "pack_bytes": "<number>",
  "kept_unreferenced": 0,
  "temp_removed": 0,
  "leftovers_removed": 0,
  "leftover_bytes": 0,
  "packs_merged": 0,
  "restored": 0,
  "waited_secs": 0
}"#,
    );
    let out = s.run(&["gc", "--json"], b"");
    check(
        &s.pinned(&out, 0, "gc again", &[]),
        r#"
{
  "dry_run": false,
  "conversations": 1,
  "referenced_blobs": 3,
  "objects_freed": 0,
  "bytes_freed": 0,
  "loose_removed": 0,
  "loose_bytes": 0,
  "packs_rewritten": 0,
  "packs_removed": 0,
  "packed_removed": 0,
  "pack_bytes": 0,
  "kept_unreferenced": 0,
  "temp_removed": 0,
  "leftovers_removed": 0,
  "leftover_bytes": 0,
  "packs_merged": 0,
  "restored": 0,
  "waited_secs": 0
}"#,
    );
}

/// `fsck` and `blob verify` finding damage (every field of a finding
/// filled), `stats` naming a conversation it cannot count, and `fsck
/// --repair`.
#[test]
fn fsck_blob_verify_and_stats_of_a_damaged_store() {
    let s = S::with_sample();
    let short = "{\"type\":\"turn_start\",\"timestamp\":\"2026-05-29 20:00:00.0\"}\n";
    s.run(&["append", SAMPLE_ID], short.as_bytes()).ok("append");
    let objects = s.store.join("blobs/objects");
    let object = |id: &str| objects.join(&id[..2]).join(&id[2..]);
    // A blob a tool response references, gone.
    std::fs::remove_file(object(
        "ec28d3df07afbfe83c3f33c421608752a3a10977f7759270a3ba105a92c95c72",
    ))
    .expect("remove");
    let out = s.run(&["fsck", "--json"], b"");
    check(
        &s.pinned(&out, 1, "fsck of a missing blob", &[]),
        r#"
{
  "clean": false,
  "conversations": 1,
  "records": 3,
  "entries": 12,
  "references": 3,
  "blobs_read": 0,
  "bytes_read": 0,
  "findings": [
    {
      "severity": "damage",
      "kind": "missing-blob",
      "conversation": "17738399468",
      "path": "<dir>/store/conversations/17738399468/events.log",
      "offset": 409,
      "blob": "ec28d3df07afbfe83c3f33c421608752a3a10977f7759270a3ba105a92c95c72",
      "message": "blob ec28d3df07afbfe83c3f33c421608752a3a10977f7759270a3ba105a92c95c72 (64 bytes), referenced by the record at offset 409, is not in the store"
    }
  ],
  "repairs": []
}"#,
    );
    // stats names the blob whose size it cannot read, instead of counting
    // it as 0 bytes with exit status 0.
    let missing = "ec28d3df07afbfe83c3f33c421608752a3a10977f7759270a3ba105a92c95c72";
    let out = s.run(&["stats", SAMPLE_ID, "--json"], b"");
    out.expect_code(1, "stats with a missing blob");
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("stats --json");
    assert_eq!(json["unsized_blobs"][0]["blob"], missing, "{json}");
    assert_eq!(
        json["unsized_blobs"].as_array().map(Vec::len),
        Some(1),
        "{json}"
    );
    assert!(
        out.stderr.contains(missing) && out.stderr.contains("its size cannot be read"),
        "{}",
        out.stderr
    );

    // A byte of the first record's heads (its entry head's timestamp: the
    // blob ids in its aux stay readable for gc's search of the damage), and
    // the last byte of a blob.
    let log = s
        .store
        .join("conversations")
        .join(SAMPLE_ID)
        .join("events.log");
    flip(&log, 70);
    let damaged = object("a33e9f904e1426bd967fae14d71cbd81d3248c6b461c7a661987f0ec51c0d089");
    let len = std::fs::metadata(&damaged).expect("stat").len();
    flip(&damaged, len - 1);
    let out = s.run(&["fsck", "--read-data", "--json"], b"");
    check(
        &s.pinned(&out, 1, "fsck --read-data of damage", &[]),
        r#"
{
  "clean": false,
  "conversations": 1,
  "records": 0,
  "entries": 0,
  "references": 0,
  "blobs_read": 2,
  "bytes_read": 338,
  "findings": [
    {
      "severity": "damage",
      "kind": "damaged-record",
      "conversation": "17738399468",
      "path": "<dir>/store/conversations/17738399468/events.log",
      "offset": 16,
      "blob": null,
      "message": "corrupt <dir>/store/conversations/17738399468/events.log at offset 16: expected a heads section with checksum 0x15483ca3, found checksum 0x0bd5cac1, and more records after it"
    },
    {
      "severity": "damage",
      "kind": "damaged-blob",
      "conversation": null,
      "path": "<dir>/store/blobs/objects/a3/3e9f904e1426bd967fae14d71cbd81d3248c6b461c7a661987f0ec51c0d089",
      "offset": null,
      "blob": "a33e9f904e1426bd967fae14d71cbd81d3248c6b461c7a661987f0ec51c0d089",
      "message": "corrupt <dir>/store/blobs/objects/a3/3e9f904e1426bd967fae14d71cbd81d3248c6b461c7a661987f0ec51c0d089 at offset 16: expected object CRC-32 cbc178b3, found bytes with CRC-32 e6c3973e"
    },
    {
      "severity": "info",
      "kind": "kept-for-recovery",
      "conversation": null,
      "path": null,
      "offset": null,
      "blob": null,
      "message": "2 blobs are referenced only by what a damaged or quarantined log may still hold (records after damage, damaged records, quarantined conversations, cut tails in quarantine/conversations/); gc keeps them"
    }
  ],
  "repairs": []
}"#,
    );
    let out = s.run(&["blob", "verify", "--json"], b"");
    check(
        &s.pinned(&out, 1, "blob verify of damage", &[]),
        r#"
{
  "clean": false,
  "loose_objects": 2,
  "packs": 0,
  "packed_objects": 0,
  "bytes": 338,
  "problems": [
    {
      "blob": "a33e9f904e1426bd967fae14d71cbd81d3248c6b461c7a661987f0ec51c0d089",
      "error": "corrupt <dir>/store/blobs/objects/a3/3e9f904e1426bd967fae14d71cbd81d3248c6b461c7a661987f0ec51c0d089 at offset 16: expected object CRC-32 cbc178b3, found bytes with CRC-32 e6c3973e"
    }
  ],
  "unindexed_packs": []
}"#,
    );
    let out = s.run(&["stats", "--json"], b"");
    check(
        &s.pinned(&out, 1, "stats of damage", &[]),
        r#"
{
  "conversations": 0,
  "turns": 0,
  "entries": 0,
  "entries_by_type": {},
  "records": 0,
  "log_bytes": 0,
  "content_references": 0,
  "content_bytes_referenced": 0,
  "distinct_blobs_referenced": 0,
  "distinct_blob_bytes_referenced": 0,
  "context": {
    "raw_bytes": 0,
    "raw_tokens": 0,
    "compacted_bytes": 0,
    "compacted_tokens": 0,
    "view_bytes": 0,
    "view_tokens": 0,
    "saved_by_compaction": {
      "bytes": 0,
      "tokens": 0
    },
    "saved_by_deduplication": {
      "bytes": 0,
      "tokens": 0,
      "resources_replaced": 0
    }
  },
  "blob_store": {
    "loose_objects": 2,
    "loose_bytes": 338,
    "packs": 0,
    "packed_objects": 0,
    "pack_bytes": 0
  }
}"#,
    );
    let out = s.run(&["fsck", "--repair", "--json"], b"");
    check(
        &mask_quarantine_times(&s.pinned(&out, 1, "fsck --repair", &[])),
        r#"
{
  "clean": false,
  "conversations": 1,
  "records": 0,
  "entries": 0,
  "references": 0,
  "blobs_read": 0,
  "bytes_read": 0,
  "findings": [
    {
      "severity": "damage",
      "kind": "damaged-record",
      "conversation": "17738399468",
      "path": "<dir>/store/conversations/17738399468/events.log",
      "offset": 16,
      "blob": null,
      "message": "corrupt <dir>/store/conversations/17738399468/events.log at offset 16: expected a heads section with checksum 0x15483ca3, found checksum 0x0bd5cac1, and more records after it"
    },
    {
      "severity": "info",
      "kind": "kept-for-recovery",
      "conversation": null,
      "path": null,
      "offset": null,
      "blob": null,
      "message": "1 blobs are referenced only by what a damaged or quarantined log may still hold (records after damage, damaged records, quarantined conversations, cut tails in quarantine/conversations/); gc keeps them"
    }
  ],
  "repairs": [
    "moved blobs/objects/a3/3e9f904e1426bd967fae14d71cbd81d3248c6b461c7a661987f0ec51c0d089 to quarantine/blobs/a33e9f904e1426bd967fae14d71cbd81d3248c6b461c7a661987f0ec51c0d089.<time> (corrupt <dir>/store/blobs/objects/a3/3e9f904e1426bd967fae14d71cbd81d3248c6b461c7a661987f0ec51c0d089 at offset 16: expected object CRC-32 cbc178b3, found bytes with CRC-32 e6c3973e)",
    "moved conversation 17738399468 to quarantine/conversations/17738399468.<time> because its log is damaged"
  ]
}"#,
    );
}

/// Flips every bit of the byte at `offset` of `path`.
fn flip(path: &Path, offset: u64) {
    use std::os::unix::fs::PermissionsExt;
    let mut bytes = std::fs::read(path).expect("read");
    let at = usize::try_from(offset).expect("offset");
    bytes[at] ^= 0xff;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(path, bytes).expect("write");
}
