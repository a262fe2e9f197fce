//! Settings jp-store reads (format-spec.md 4.5) with a value of the wrong
//! type: refused where jp-store's users write them (`config.toml` for `new`
//! and `fork`, `append` of a config delta), naming where the value is; taken
//! as they are, named once and not applied, where another tool wrote them
//! (a JP import: JP's own loader reads such a config) or where they are
//! stored already: they never stop a conversation.

use jpstore_engine::internal::StoreInterior as _;
use std::path::Path;

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{ConfigDelta, Entry, Event, EventKind, Object, Payload};
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{Store, StoreOptions};
use jpstore_integrations::jp::import::Prepared;
use jpstore_tests::{run_jp_store, tree_snapshot};
use serde_json::{json, Value};

const BAD_TOML: &str = "\n[conversation.deduplication]\nenabled = true\nmin_bytes = \"big\"\n";

fn init(root: &Path) -> std::path::PathBuf {
    let store = root.join("store");
    run_jp_store(&store, &["init"], b"").ok("init");
    store
}

fn object(v: Value) -> Object {
    match v {
        Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

fn append_config(store: &Path, text: &str) {
    let path = store.join("config.toml");
    let mut config = std::fs::read_to_string(&path).expect("reading config.toml");
    config.push_str(text);
    std::fs::write(&path, config).expect("writing config.toml");
}

#[test]
fn a_bad_setting_in_config_toml_is_refused_by_new_and_fork_naming_its_line() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = init(tmp.path());
    run_jp_store(&store, &["new", "--id", "a"], b"").ok("new a");
    let lines_before = std::fs::read_to_string(store.join("config.toml"))
        .expect("config.toml")
        .lines()
        .count();
    append_config(&store, BAD_TOML);
    let before = tree_snapshot(&store);

    let run = run_jp_store(&store, &["new", "--id", "b"], b"");
    run.expect_code(1, "new with a bad setting in config.toml");
    let line = lines_before + 4;
    assert!(
        run.stderr.contains(&format!("config.toml:{line}"))
            && run
                .stderr
                .contains("`conversation.deduplication.min_bytes` must be an integer >= 0")
            && run.stderr.contains("\"big\""),
        "{}",
        run.stderr
    );
    let run = run_jp_store(&store, &["fork", "a", "--id", "c"], b"");
    run.expect_code(1, "fork with a bad setting in config.toml");
    assert!(
        run.stderr.contains(&format!("config.toml:{line}")),
        "{}",
        run.stderr
    );
    assert_eq!(
        tree_snapshot(&store),
        before,
        "a refused new or fork wrote nothing"
    );

    // Fixed, everything works: nothing of the bad value was kept.
    let path = store.join("config.toml");
    let fixed = std::fs::read_to_string(&path)
        .expect("config.toml")
        .replace("\"big\"", "500");
    std::fs::write(&path, fixed).expect("writing config.toml");
    run_jp_store(&store, &["new", "--id", "b"], b"").ok("new after the fix");
    run_jp_store(&store, &["fork", "a", "--id", "c"], b"").ok("fork after the fix");
    for id in ["a", "b", "c"] {
        run_jp_store(&store, &["view", id], b"").ok("view after the fix");
    }
    run_jp_store(&store, &["stats"], b"").ok("stats after the fix");
}

#[test]
fn a_config_delta_with_a_bad_setting_is_refused_at_append() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = init(tmp.path());
    run_jp_store(&store, &["new", "--id", "a"], b"").ok("new");
    let before = tree_snapshot(&store);
    let input = format!(
        "{}\n{}\n",
        json!({"type": "chat_request", "timestamp": "2026-05-29 10:00:00.1", "content": "hi"}),
        json!({"type": "config_delta", "timestamp": "2026-05-29 10:00:01.1",
               "delta": {"conversation": {"compaction": {"keep_last": "three"}}}})
    );
    let run = run_jp_store(&store, &["append", "a"], input.as_bytes());
    run.expect_code(1, "append of a bad config delta");
    assert!(
        run.stderr.contains("line 2 (entry 2)")
            && run.stderr.contains(
                "field `delta.conversation.compaction.keep_last`: must be an integer >= 0"
            ),
        "{}",
        run.stderr
    );
    assert_eq!(tree_snapshot(&store), before, "nothing was appended");
}

/// JP's legacy system prompt: its first `config_delta` holds the base
/// config, with the prompt as a table (JP's mergeable string), and a later
/// delta appends to it.
const JP_PROMPT: &str = "You are Jean-Pierre, an assistant for programmers.";

#[test]
fn a_jp_conversation_whose_settings_jp_store_cannot_read_is_imported_naming_them() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = init(tmp.path());
    let jp = tmp.path().join("conversations");
    let request =
        json!({"type": "chat_request", "timestamp": "2026-05-29 10:00:00.1", "content": "hi"});
    let delta = |d: Value| json!({"type": "config_delta", "timestamp": "2026-05-29 10:00:01.1", "delta": d});
    let meta = json!({"last_activated_at": "2026-05-29 10:00:00.1"}).to_string();
    let write = |name: &str, base: Option<Value>, events: Vec<Value>| {
        let dir = jp.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        let text = serde_json::to_string_pretty(&Value::Array(events)).expect("json") + "\n";
        std::fs::write(dir.join("events.json"), text).expect("events");
        std::fs::write(dir.join("metadata.json"), &meta).expect("metadata");
        if let Some(b) = base {
            std::fs::write(dir.join("base_config.json"), b.to_string()).expect("base");
        }
    };
    write(
        "17738399461-bad-base",
        Some(json!({"assistant": {"model": {"id": {"name": 7}}}})),
        vec![request.clone()],
    );
    write(
        "17738399462-bad-delta",
        None,
        vec![
            request.clone(),
            delta(json!({"conversation": {"tools": {"fs": {"deduplicate": "no"}}}})),
        ],
    );
    write(
        "17738399463-good",
        Some(json!({"assistant": {"system_prompt": "hi"}})),
        vec![request.clone()],
    );
    write(
        "17738399464-legacy-prompt",
        None,
        vec![
            delta(json!({"assistant": {"system_prompt": {
                "value": JP_PROMPT, "strategy": "replace", "separator": "none",
                "discard_when_merged": false}}})),
            json!({"type": "turn_start", "timestamp": "2026-05-29 10:00:00.0"}),
            request.clone(),
            delta(json!({"assistant": {"system_prompt": {
                "value": "Be brief.", "strategy": "append", "separator": "paragraph"}}})),
        ],
    );
    let originals = jpstore_tests::tree_snapshot(&jp);

    let run = run_jp_store(&store, &["import", jp.to_str().expect("utf-8")], b"");
    run.expect_code(0, "import of settings jp-store cannot read");
    for (named, times) in [
        (
            "17738399461-bad-base: 1 setting of its config not applied",
            1,
        ),
        (
            "base_config.json: setting `assistant.model.id.name` must be a string, found a number (7)",
            1,
        ),
        (
            "events.json entry 2 (config_delta): setting `conversation.tools.fs.deduplicate` must be true or false",
            1,
        ),
        ("17738399463", 0),
        ("17738399464", 0),
    ] {
        assert_eq!(run.stderr.matches(named).count(), times, "{named}: {}", run.stderr);
    }
    assert!(
        run.stdout.contains("imported 4 conversations"),
        "{}",
        run.stdout
    );

    // The JSON report lists them, and a second store gets the same.
    let other = tmp.path().join("other");
    run_jp_store(&other, &["init"], b"").ok("init");
    let report = run_jp_store(
        &other,
        &["import", "--json", jp.to_str().expect("utf-8")],
        b"",
    )
    .json("import --json");
    let listed: Vec<&str> = report["settings_not_applied"]
        .as_array()
        .expect("settings_not_applied")
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(listed.len(), 2, "{report}");
    assert!(listed[0].ends_with("17738399461-bad-base"), "{report}");
    assert!(listed[1].ends_with("17738399462-bad-delta"), "{report}");

    // Every file comes back byte for byte.
    let out = tmp.path().join("out");
    run_jp_store(
        &store,
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
    assert_eq!(jpstore_tests::tree_snapshot(&out), originals);

    // Every view works; the legacy prompt is read as JP reads it.
    for id in ["17738399461", "17738399462", "17738399463", "17738399464"] {
        run_jp_store(&store, &["view", id], b"").ok("view");
    }
    let body = run_jp_store(
        &store,
        &["view", "17738399464", "--format", "anthropic"],
        b"",
    )
    .json("view --format anthropic");
    assert_eq!(
        body["system"],
        json!(format!("{JP_PROMPT}\n\nBe brief.")),
        "{body}"
    );
    run_jp_store(&store, &["stats"], b"").ok("stats");
}

/// A store holding bad settings, as an older build wrote them: one
/// conversation with a bad base config, one with a bad config delta at its
/// third entry, and a good one.
fn store_with_bad_settings(root: &Path) -> std::path::PathBuf {
    let path = init(root);
    let store = Store::open_dir(&path, StoreOptions::default()).expect("open");
    let ts = Timestamp::parse("2026-05-29 10:00:00.1").expect("timestamp");
    let event = |kind| {
        Entry::Event(Event {
            timestamp: ts,
            kind,
            metadata: Default::default(),
            extra: Default::default(),
        })
    };
    let request = || {
        event(EventKind::ChatRequest(
            jpstore_engine::event::ChatRequest::<Payload> {
                content: "hi".into(),
                schema: None,
                author: None,
                resources: Vec::new(),
            },
        ))
    };
    let prepared = |id: &str, base: Option<Value>| Prepared {
        id: ConversationId::parse(id).expect("id"),
        fields: Object::new(),
        base_config: base.map(object),
        base_config_text: None,
        entries: vec![request()],
        source_bytes: 0,
    };
    jpstore_engine::import::run(
        &store,
        vec![
            prepared(
                "bad_base",
                Some(json!({"conversation": {"deduplication": {"lookback_turns": "all"}}})),
            ),
            prepared("bad_delta", None),
            prepared("good", None),
        ],
        false,
        &mut |_| {},
    )
    .expect("import");
    let mut writer = store
        .writer(&ConversationId::parse("bad_delta").expect("id"))
        .expect("writer");
    writer
        .append(vec![
            request(),
            event(EventKind::ConfigDelta(ConfigDelta {
                delta: object(json!({"conversation": {"deduplication": {"enabled": "yes"}}})),
            })),
        ])
        .expect("append");
    path
}

#[test]
fn a_bad_stored_setting_is_not_applied_and_stops_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store_with_bad_settings(tmp.path());

    for id in ["bad_base", "bad_delta", "good"] {
        run_jp_store(&store, &["view", id], b"").ok("view");
        run_jp_store(&store, &["view", id, "--format", "anthropic"], b"").ok("view anthropic");
    }
    let stats = run_jp_store(&store, &["stats", "--json"], b"").json("stats");
    assert_eq!(stats["conversations"], 3, "{stats}");
    let ls = run_jp_store(&store, &["ls", "--json"], b"").json("ls");
    assert_eq!(ls.as_array().map(Vec::len), Some(3), "{ls}");

    // A fork keeps the config as written, and reads as its source.
    run_jp_store(&store, &["fork", "bad_base", "--id", "f"], b"").ok("fork");
    assert_eq!(
        run_jp_store(&store, &["view", "f"], b"").ok("view of the fork"),
        run_jp_store(&store, &["view", "bad_base"], b"").ok("view of the source")
    );
    run_jp_store(&store, &["fsck"], b"").ok("fsck");
}
