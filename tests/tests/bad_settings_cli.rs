//! Settings jp-store reads (format-spec.md 4.5) with a value of the wrong
//! type: refused before they are stored (`new`, `fork`, `import`, `append`
//! of a config delta), naming where the value is; and, once stored (by an
//! older build, or by hand), confined to their conversation and named by
//! place.

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

#[test]
fn a_jp_conversation_with_a_bad_setting_is_refused_naming_the_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = init(tmp.path());
    let jp = tmp.path().join("conversations");
    let events = |delta: Option<Value>| {
        let mut e = vec![
            json!({"type": "chat_request", "timestamp": "2026-05-29 10:00:00.1", "content": "hi"}),
        ];
        if let Some(d) = delta {
            e.push(
                json!({"type": "config_delta", "timestamp": "2026-05-29 10:00:01.1", "delta": d}),
            );
        }
        serde_json::to_string_pretty(&Value::Array(e)).expect("json")
    };
    let meta = json!({"last_activated_at": "2026-05-29 10:00:00.1"}).to_string();
    let write = |name: &str, base: Option<Value>, delta: Option<Value>| {
        let dir = jp.join(name);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("events.json"), events(delta)).expect("events");
        std::fs::write(dir.join("metadata.json"), &meta).expect("metadata");
        if let Some(b) = base {
            std::fs::write(dir.join("base_config.json"), b.to_string()).expect("base");
        }
    };
    write(
        "17738399461-bad-base",
        Some(json!({"assistant": {"model": {"id": {"name": 7}}}})),
        None,
    );
    write(
        "17738399462-bad-delta",
        None,
        Some(json!({"conversation": {"tools": {"fs": {"deduplicate": "no"}}}})),
    );
    write(
        "17738399463-good",
        Some(json!({"assistant": {"system_prompt": "hi"}})),
        None,
    );

    let run = run_jp_store(&store, &["import", jp.to_str().expect("utf-8")], b"");
    run.expect_code(1, "import with bad settings");
    assert!(
        run.stderr.contains("17738399461-bad-base/base_config.json: setting `assistant.model.id.name` must be a string"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("17738399462-bad-delta/events.json: entry 2 (config_delta), `delta`: setting `conversation.tools.fs.deduplicate` must be true or false"),
        "{}",
        run.stderr
    );
    let ls = run_jp_store(&store, &["ls", "--json"], b"").json("ls");
    let ids: Vec<&str> = ls
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|c| c["id"].as_str())
        .collect();
    assert_eq!(
        ids,
        ["17738399463"],
        "only the good conversation was imported"
    );
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
    store
        .import(
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
fn a_bad_stored_setting_fails_only_its_conversation_naming_where_it_is() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let store = store_with_bad_settings(tmp.path());

    let run = run_jp_store(&store, &["view", "bad_base"], b"");
    run.expect_code(1, "view of a bad base config");
    assert!(
        run.stderr
            .contains("conversation bad_base: its base config")
            && run
                .stderr
                .contains("`conversation.deduplication.lookback_turns` must be an integer >= 0"),
        "{}",
        run.stderr
    );
    let run = run_jp_store(&store, &["view", "bad_delta"], b"");
    run.expect_code(1, "view of a bad config delta");
    assert!(
        run.stderr
            .contains("conversation bad_delta: the config_delta at entry 3")
            && run
                .stderr
                .contains("`conversation.deduplication.enabled` must be true or false"),
        "{}",
        run.stderr
    );
    run_jp_store(&store, &["view", "good"], b"").ok("view of the good one");

    // The whole store: every other conversation counted, the bad ones named.
    let run = run_jp_store(&store, &["stats", "--json"], b"");
    run.expect_code(1, "stats of a store with bad settings");
    let stats: Value = serde_json::from_str(&run.stdout).expect("stats JSON");
    assert_eq!(stats["conversations"], 1, "{stats}");
    assert_eq!(stats["turns"], 1, "{stats}");
    for id in ["bad_base", "bad_delta"] {
        assert!(
            run.stderr
                .contains(&format!("conversation {id} is not counted")),
            "{}",
            run.stderr
        );
    }
    let ls = run_jp_store(&store, &["ls", "--json"], b"").json("ls");
    assert_eq!(ls.as_array().map(Vec::len), Some(3), "{ls}");

    // A fork would copy the bad value: refused, naming it.
    let run = run_jp_store(&store, &["fork", "bad_base", "--id", "f"], b"");
    run.expect_code(1, "fork of a bad base config");
    assert!(run.stderr.contains("its base config"), "{}", run.stderr);
}
