//! The binary on JP interop, views, compaction and forks: `import`,
//! `export --format jp`, `view` (json with and without `--refs`, anthropic,
//! openai), `print --compacted`, `compact` (dry run, profiles, summaries from
//! a command, undo), automatic compaction on `append`, and `fork`.

use std::path::{Path, PathBuf};

use jpstore_tests::{run_jp_store, Run};
use serde_json::{json, Value};

struct S {
    _dir: tempfile::TempDir,
    root: PathBuf,
    work: PathBuf,
}

impl S {
    fn new() -> S {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path().join("store");
        let work = dir.path().to_path_buf();
        let s = S {
            _dir: dir,
            root,
            work,
        };
        s.run(&["init"], b"").ok("init");
        s
    }
    fn run(&self, args: &[&str], stdin: &[u8]) -> Run {
        run_jp_store(&self.root, args, stdin)
    }
}

fn b64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// A JP conversation directory with `turns` turns of tool use.
fn jp_conversation(dir: &Path, turns: usize) -> Value {
    let mut events = vec![
        json!({"type": "config_delta", "timestamp": "2026-05-29 10:00:00.0",
        "delta": {"assistant": {"model": {"id": "anthropic/claude-sonnet-4"}}}}),
    ];
    for i in 0..turns {
        let t = |s: usize| format!("2026-05-29 10:{:02}:{:02}.0", i, s);
        events.extend([
            json!({"type": "turn_start", "timestamp": t(0)}),
            json!({"type": "chat_request", "timestamp": t(1), "content": format!("question {i}")}),
            json!({"type": "chat_response", "timestamp": t(2), "reasoning": format!("thinking {i}"),
                   "metadata": {"anthropic": {"signature": b64(&format!("sig{i}"))}}}),
            json!({"type": "tool_call_request", "timestamp": t(3), "id": format!("call{i}"),
                   "name": "fs_read_file", "arguments": {"path": b64(&format!("src/f{i}.rs"))}}),
            json!({"type": "tool_call_response", "timestamp": t(4), "id": format!("call{i}"),
                   "content": b64(&format!("fn f{i}() {{}}\n").repeat(40)), "is_error": false}),
            json!({"type": "chat_response", "timestamp": t(5), "message": format!("answer {i}")}),
        ]);
    }
    let events = Value::Array(events);
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(
        dir.join("events.json"),
        serde_json::to_string_pretty(&events).expect("json"),
    )
    .expect("write");
    std::fs::write(
        dir.join("metadata.json"),
        r#"{"title": "T", "last_activated_at": "2026-05-29 10:05:05.0"}"#,
    )
    .expect("write");
    events
}

#[test]
fn import_view_compact_undo_and_export_back() {
    let s = S::new();
    let src = s.work.join("ws/.jp/conversations/17738399468-t");
    let original = jp_conversation(&src, 4);
    let out = s.run(&["import", s.work.join("ws").to_str().expect("utf-8")], b"");
    assert!(
        out.ok("import").contains("imported 1 conversation ("),
        "{}",
        out.stdout
    );
    let again = s.run(
        &[
            "import",
            "--json",
            s.work.join("ws").to_str().expect("utf-8"),
        ],
        b"",
    );
    assert_eq!(again.json("import again")["skipped"], 1);
    let id = "17738399468";

    // The view: 4 turns x 6 events, content as references with --refs.
    let refs = s.run(&["view", id, "--refs"], b"").json("view --refs");
    let events = refs.as_array().expect("array");
    assert_eq!(events.len(), 24);
    let resp = events
        .iter()
        .find(|e| e["type"] == "tool_call_response")
        .expect("response");
    assert!(resp["content"][0]["text"]["$blob"].is_string(), "{resp}");
    let inline = s.run(&["view", id], b"").json("view");
    assert_eq!(inline[4]["content"][0]["text"], "fn f0() {}\n".repeat(40));

    // A dry run writes nothing; the compaction changes the view.
    let log = s.root.join("conversations").join(id).join("events.log");
    let before = std::fs::read(&log).expect("log");
    let dry = s
        .run(&["compact", id, "--to", "-1", "--dry-run", "--json"], b"")
        .json("dry run");
    assert_eq!(dry["turns"].as_array().map(Vec::len), Some(3));
    assert!(
        dry["estimated_tokens_after"].as_u64() < dry["estimated_tokens_before"].as_u64(),
        "{dry}"
    );
    assert_eq!(
        std::fs::read(&log).expect("log"),
        before,
        "a dry run writes nothing"
    );
    s.run(&["compact", id, "--to", "-1"], b"").ok("compact");
    let view = s.run(&["view", id], b"").json("view after");
    let texts: Vec<&Value> = view
        .as_array()
        .expect("array")
        .iter()
        .filter(|e| e["type"] == "tool_call_response")
        .map(|e| &e["content"][0]["text"])
        .collect();
    assert_eq!(texts[0], "[compacted] fs_read_file: success");
    assert_eq!(
        texts[3],
        &json!("fn f3() {}\n".repeat(40)),
        "the last turn is kept"
    );
    let printed = s
        .run(&["print", id, "--compacted"], b"")
        .ok("print")
        .to_string();
    assert!(
        printed.contains("as the model sees it") && printed.contains("── turn 3 ──"),
        "{printed}"
    );

    // Provider bodies.
    let anthropic = s
        .run(&["view", id, "--format", "anthropic"], b"")
        .json("anthropic");
    assert_eq!(anthropic["model"], "claude-sonnet-4");
    assert_eq!(anthropic["messages"][0]["role"], "user");
    let openai = s
        .run(&["view", id, "--format", "openai"], b"")
        .json("openai");
    assert!(openai["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .any(|m| m["role"] == "tool"));
    s.run(&["view", id, "--format", "openai", "--refs"], b"")
        .expect_code(2, "refs with a provider (bad usage)");

    // Export to JP: the compaction is in the events; undo it, and the export
    // is the original files again.
    let out1 = s.work.join("out1");
    let o = s.run(
        &[
            "export",
            id,
            "--format",
            "jp",
            "--out",
            out1.to_str().expect("utf-8"),
        ],
        b"",
    );
    o.ok("export jp");
    let exported: Value = serde_json::from_slice(
        &std::fs::read(out1.join("17738399468-t/events.json")).expect("read"),
    )
    .expect("json");
    assert_eq!(exported.as_array().map(Vec::len), Some(26));
    s.run(&["compact", id, "--undo"], b"").ok("undo");
    let out2 = s.work.join("out2");
    let o = s.run(
        &[
            "export",
            id,
            "--format",
            "jp",
            "--out",
            out2.to_str().expect("utf-8"),
        ],
        b"",
    );
    assert!(
        o.stderr.contains("lossy"),
        "undone compactions are reported: {}",
        o.stderr
    );
    let exported = std::fs::read(out2.join("17738399468-t/events.json")).expect("read");
    let exported_value: Value = serde_json::from_slice(&exported).expect("json");
    assert_eq!(exported_value, original);
    // Byte for byte: the file as it was written (without a final line
    // break, as `to_string_pretty` wrote it).
    assert_eq!(
        exported,
        std::fs::read(src.join("events.json")).expect("read")
    );
    s.run(&["compact", id, "--undo"], b"")
        .expect_code(1, "nothing left to undo");
}

#[test]
fn summaries_from_a_command_and_automatic_compaction() {
    let s = S::new();
    std::fs::write(
        s.root.join("config.toml"),
        "[conversation.compaction]\nkeep_last = 1\n\n\
         [conversation.compaction.profiles.short.summary]\n\
         command = \"printf 'summary of %s bytes' $(wc -c)\"\n\n\
         [conversation.compaction.auto]\nenabled = true\ncontext_window = 300\nmin_turns = 2\n",
    )
    .expect("config");
    let id = s
        .run(&["new", "--id", "c"], b"")
        .ok("new")
        .trim()
        .to_string();
    let turn = |i: usize| {
        format!(
            "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"q{i}\"}}\n\
             {{\"type\":\"chat_response\",\"message\":\"{}\"}}\n",
            "answer ".repeat(60)
        )
    };
    // Turns 1 and 2: under min_turns; turn 3 crosses the threshold.
    for i in 0..2 {
        let out = s.run(&["append", &id], turn(i).as_bytes());
        assert!(
            !out.ok("append").is_empty() && !out.stderr.contains("automatic"),
            "{}",
            out.stderr
        );
    }
    let out = s.run(&["append", &id, "--json"], turn(2).as_bytes());
    let j = out.json("append 3");
    assert_eq!(j["auto_compaction"]["to_turn"], 1, "{j}");
    assert!(
        out.stderr.contains("automatic compaction of turns 0..=1"),
        "{}",
        out.stderr
    );
    // A summary from the profile's command, over raw events.
    let out = s.run(
        &[
            "compact",
            &id,
            "--profile",
            "short",
            "--from",
            "0",
            "--to",
            "1",
            "--json",
        ],
        b"",
    );
    let j = out.json("compact short");
    assert!(
        j["summary"]
            .as_str()
            .expect("summary")
            .starts_with("summary of "),
        "{j}"
    );
    let view = s.run(&["view", &id, "--refs"], b"").json("view");
    assert_eq!(view[1]["content"], "[Summary of previous conversation]");
    // Errors: a profile that does not exist, and a bad bound, are refused.
    let out = s.run(&["compact", &id, "--profile", "nope"], b"");
    assert!(out
        .expect_code(1, "unknown profile")
        .stderr
        .contains("no compaction profile \"nope\""));
    s.run(&["compact", &id, "--from", "yesterday-ish"], b"")
        .expect_code(2, "bad bound");
    s.run(&["compact", &id, "--from", "9"], b"")
        .expect_code(1, "out of range");
}

#[test]
fn forks_print_their_id_and_can_be_compacted() {
    let s = S::new();
    let src = s.work.join("ws/17738399470-x");
    jp_conversation(&src, 3);
    s.run(&["import", src.to_str().expect("utf-8")], b"")
        .ok("import");
    let out = s.run(
        &[
            "fork",
            "17738399470",
            "--last",
            "2",
            "--compact",
            "--id",
            "f",
            "--json",
        ],
        b"",
    );
    let j = out.json("fork");
    assert_eq!(j["id"], "f");
    assert_eq!(j["compacted"]["profile"], "default");
    let ls = s.run(&["ls", "--json"], b"").json("ls");
    let fork = ls
        .as_array()
        .expect("list")
        .iter()
        .find(|c| c["id"] == "f")
        .expect("fork listed")
        .clone();
    assert_eq!(fork["turns"], 2);
    s.run(&["fork", "17738399470", "--id", "f"], b"")
        .expect_code(1, "id taken");
    s.run(&["fork", "nope"], b"")
        .expect_code(1, "unknown source");
    // The fork and its compaction appear together: the compaction is in the
    // fork's one log.
    let export = s.run(&["export", "f"], b"").json("export of the fork");
    let kinds: Vec<&str> = export["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter_map(|e| e["type"].as_str())
        .collect();
    assert_eq!(kinds.last(), Some(&"compaction"), "{kinds:?}");
}

#[test]
fn a_fork_whose_compaction_cannot_be_made_is_not_created() {
    let s = S::new();
    let src = s.work.join("ws/17738399470-x");
    jp_conversation(&src, 3);
    s.run(&["import", src.to_str().expect("utf-8")], b"")
        .ok("import");
    // A summarizing profile whose summary command fails.
    std::fs::write(
        s.root.join("config.toml"),
        "[conversation.compaction.profiles.heavy.summary]\npolicy = \"summarize\"\ncommand = \"exit 3\"\n",
    )
    .expect("config");
    let before = jpstore_tests::tree_snapshot(&s.root);
    for (args, says) in [
        (
            vec!["fork", "17738399470", "--compact=nosuch", "--id", "g"],
            "no compaction profile \"nosuch\"",
        ),
        (
            vec!["fork", "17738399470", "--compact=heavy", "--id", "g"],
            "exit 3",
        ),
        (
            vec!["fork", "17738399470", "--last", "9", "--compact=nosuch"],
            "nosuch",
        ),
    ] {
        let out = s.run(&args, b"");
        out.expect_code(1, &format!("{args:?}"));
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
        assert_eq!(
            jpstore_tests::tree_snapshot(&s.root),
            before,
            "{args:?} left something in the store"
        );
    }
    let ls = s.run(&["ls", "--json"], b"").json("ls");
    assert_eq!(ls.as_array().expect("list").len(), 1, "{ls}");
}

#[test]
fn an_export_to_a_directory_holding_one_of_its_files_writes_none() {
    let s = S::new();
    let src = s.work.join("ws/17738399470-x");
    jp_conversation(&src, 1);
    s.run(&["import", src.to_str().expect("utf-8")], b"")
        .ok("import");
    // `--out` is the conversations directory; the conversation's own is
    // made in it, under its imported name.
    let conversations = s.work.join("out");
    let out_dir = conversations.join("17738399470-x");
    std::fs::create_dir_all(&out_dir).expect("mkdir");
    std::fs::write(out_dir.join("metadata.json"), "{}").expect("write");
    let out = s.run(
        &[
            "export",
            "17738399470",
            "--format",
            "jp",
            "--out",
            conversations.to_str().expect("utf-8"),
        ],
        b"",
    );
    out.expect_code(1, "export over an existing file");
    assert!(out.stderr.contains("metadata.json"), "{}", out.stderr);
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec!["metadata.json"],
        "the export wrote part of its files"
    );
    assert_eq!(
        std::fs::read(out_dir.join("metadata.json")).expect("read"),
        b"{}"
    );
}

/// Bounds outside the conversation (jp-format.md section 5): one beyond the
/// end the range extends toward is clamped (`--to 99`, `--from -99`), one
/// beyond the other end is refused for --from and --to alike (`--from 99`,
/// `--to -99`), saying the range would cover no turn.
#[test]
fn bounds_outside_the_conversation_clamp_toward_the_range_and_are_refused_past_its_far_end() {
    let s = S::new();
    s.run(&["new", "--id", "b"], b"").ok("new");
    for i in 0..4 {
        let turn = json!([{"type": "turn_start"}, {"type": "chat_request", "content": format!("q{i}")},
                          {"type": "chat_response", "message": "a"}]);
        s.run(&["append", "b"], turn.to_string().as_bytes())
            .ok("append");
    }
    for bound in [["--to", "99"], ["--from", "-99"]] {
        let out = s
            .run(
                &["compact", "b", bound[0], bound[1], "--dry-run", "--json"],
                b"",
            )
            .json("a clamped bound");
        assert_eq!(
            (&out["from_turn"], &out["to_turn"]),
            (&json!(0), &json!(3)),
            "{bound:?}: {out}"
        );
    }
    for (bound, says) in [
        (["--from", "99"], "--from is out of range: 99 is after the last turn, so the range covers no turn"),
        (["--to", "-99"], "--to is out of range: -99 is before the first turn (turn 0 is 3 before the last), so the range covers no turn"),
        // Every turn kept: said as what was asked, not as the --to it
        // stands for.
        (["--keep-last", "4"], "--keep-last is out of range: keeping the last 4 turns leaves none to compact: the conversation has 4"),
    ] {
        let out = s.run(&["compact", "b", bound[0], bound[1], "--dry-run"], b"");
        out.expect_code(1, &format!("{bound:?}"));
        assert!(out.stderr.contains(says), "{bound:?}: {}", out.stderr);
    }
    // The same from the config: the setting is named.
    std::fs::write(
        s.root.join("config.toml"),
        "[conversation.compaction]\nkeep_last = 6\n",
    )
    .expect("config");
    let out = s.run(&["compact", "b", "--dry-run"], b"");
    out.expect_code(1, "every turn kept by the config");
    assert!(
        out.stderr.contains("conversation.compaction.keep_last is out of range: keeping the last 6 turns leaves none to compact: the conversation has 4"),
        "{}",
        out.stderr
    );
}
