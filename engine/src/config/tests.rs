use super::*;
use proptest::prelude::*;
use serde_json::json;

/// The object in a `json!` literal.
fn obj(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

/// The value at a dotted path like `conversation.compaction.keep_last`
/// (each segment an object key); `None` when a step is missing or not an
/// object.
fn lookup<'a>(config: &'a Map<String, Value>, dotted: &str) -> Option<&'a Value> {
    let mut segments = dotted.split('.');
    let first = segments.next()?;
    let mut value = config.get(first)?;
    for segment in segments {
        value = value.as_object()?.get(segment)?;
    }
    Some(value)
}

fn toml(text: &str) -> Result<Map<String, Value>, ConfigError> {
    parse_workspace_toml(text, Path::new("ws/config.toml"))
}

#[test]
fn merge_recurses_into_objects_and_keeps_other_keys() {
    let mut base = obj(json!({
        "conversation": {"compaction": {"keep_last": 3, "default_profile": "default"}},
        "unknown": {"x": 1},
    }));
    let delta = obj(json!({
        "conversation": {"compaction": {"keep_last": 5}, "title": "t"},
        "other": true,
    }));
    merge(&mut base, &delta);
    assert_eq!(
        Value::Object(base),
        json!({
            "conversation": {
                "compaction": {"keep_last": 5, "default_profile": "default"},
                "title": "t",
            },
            "unknown": {"x": 1},
            "other": true,
        })
    );
}

#[test]
fn merge_replaces_everything_that_is_not_object_over_object() {
    let mut base = obj(json!({
        "list": [1, 2, 3],
        "gone": {"a": 1},
        "scalar_over_object": {"a": 1},
        "object_over_scalar": 7,
        "object_over_array": [1],
        "string": "old",
    }));
    let delta = obj(json!({
        "list": [4],
        "gone": null,
        "scalar_over_object": false,
        "object_over_scalar": {"b": 2},
        "object_over_array": {"c": 3},
        "string": "new",
    }));
    merge(&mut base, &delta);
    assert_eq!(Value::Object(base), Value::Object(delta));
}

#[test]
fn merge_keeps_key_order_and_appends_new_keys() {
    let mut base = obj(json!({"b": 1, "a": 2}));
    merge(&mut base, &obj(json!({"c": 3, "a": 4})));
    assert_eq!(base.keys().collect::<Vec<_>>(), ["b", "a", "c"]);
}

#[test]
fn config_after_applies_deltas_in_order() {
    let base = obj(json!({"a": {"x": 1, "y": 1}, "keep": "me"}));
    let deltas = [
        obj(json!({"a": {"x": 2}})),
        obj(json!({"a": {"y": 3}, "b": [1]})),
        obj(json!({"a": {"x": 4}, "b": [2]})),
    ];
    let config = config_after(&base, &deltas);
    assert_eq!(
        Value::Object(config),
        json!({"a": {"x": 4, "y": 3}, "keep": "me", "b": [2]})
    );
    assert_eq!(config_after(&base, &deltas[..0]), base);
    // The order matters: the last delta wins.
    let reversed = config_after(&base, deltas.iter().rev());
    assert_eq!(lookup(&reversed, "a.x"), Some(&json!(2)));
    assert_eq!(lookup(&reversed, "b"), Some(&json!([1])));
}

#[test]
fn lookup_follows_dotted_paths() {
    let config = obj(json!({
        "conversation": {"compaction": {"keep_last": 3, "profiles": {}}},
        "list": [{"a": 1}],
        "null": null,
    }));
    assert_eq!(
        lookup(&config, "conversation.compaction.keep_last"),
        Some(&json!(3))
    );
    assert_eq!(
        lookup(&config, "conversation.compaction.profiles"),
        Some(&json!({}))
    );
    assert_eq!(lookup(&config, "null"), Some(&Value::Null));
    assert_eq!(lookup(&config, "conversation.compaction.missing"), None);
    assert_eq!(lookup(&config, "conversation.compaction.keep_last.x"), None);
    assert_eq!(lookup(&config, "list.0"), None);
    assert_eq!(lookup(&config, "null.x"), None);
    assert_eq!(lookup(&config, "missing.x"), None);
    assert_eq!(lookup(&config, ""), None);
}

#[test]
fn toml_nested_tables_and_arrays_of_tables() {
    let config = toml(
        r#"
top = "level"
[conversation.compaction]
keep_last = 3
ratio = 0.75
whole_float = 2.0
[conversation.compaction.profiles.default]
reasoning = "strip"
tool_calls = { policy = "strip", request = true, response = false }
[[servers]]
name = "a"
ports = [1, 2]
[[servers]]
name = "b"
[servers.extra]
deep = { deeper = [] }
"#,
    )
    .expect("valid TOML");
    assert_eq!(
        Value::Object(config.clone()),
        json!({
            "top": "level",
            "conversation": {"compaction": {
                "keep_last": 3,
                "ratio": 0.75,
                "whole_float": 2.0,
                "profiles": {"default": {
                    "reasoning": "strip",
                    "tool_calls": {"policy": "strip", "request": true, "response": false},
                }},
            }},
            "servers": [
                {"name": "a", "ports": [1, 2]},
                {"name": "b", "extra": {"deep": {"deeper": []}}},
            ],
        })
    );
    let keep_last = lookup(&config, "conversation.compaction.keep_last").expect("present");
    assert!(keep_last.is_i64(), "{keep_last}");
    let whole = lookup(&config, "conversation.compaction.whole_float").expect("present");
    assert!(whole.is_f64(), "{whole}");
    // Keys keep the order of the file.
    assert_eq!(
        config.keys().collect::<Vec<_>>(),
        ["top", "conversation", "servers"]
    );
}

#[test]
fn toml_datetimes_become_rfc3339_strings() {
    let config = toml(
        "offset = 2026-05-29T19:42:36.467Z\n\
         shifted = 2026-05-29T21:42:36+02:00\n\
         local = 2026-05-29T19:42:36\n\
         date = 2026-05-29\n\
         time = 19:42:36.5\n",
    )
    .expect("valid TOML");
    assert_eq!(
        Value::Object(config),
        json!({
            "offset": "2026-05-29T19:42:36.467Z",
            "shifted": "2026-05-29T21:42:36+02:00",
            "local": "2026-05-29T19:42:36",
            "date": "2026-05-29",
            "time": "19:42:36.5",
        })
    );
}

#[test]
fn toml_syntax_errors_give_path_line_and_column() {
    let err = toml("[a]\nx = 1\ny = = 2\n").expect_err("invalid");
    match &err {
        ConfigError::TomlSyntax {
            path,
            line,
            column,
            message,
        } => {
            assert_eq!(path, Path::new("ws/config.toml"));
            assert_eq!((*line, *column), (3, 5));
            assert!(!message.is_empty());
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("ws/config.toml:3:5: invalid TOML: "),
        "{err}"
    );

    // Columns count characters, not bytes.
    let err = toml("x = \"é\" é\n").expect_err("invalid");
    assert!(
        matches!(
            err,
            ConfigError::TomlSyntax {
                line: 1,
                column: 9,
                ..
            }
        ),
        "{err:?}"
    );
    let err = toml("a = 1\na = 2\n").expect_err("duplicate key");
    assert!(
        matches!(
            err,
            ConfigError::TomlSyntax {
                line: 2,
                column: 1,
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn toml_non_finite_floats_are_rejected() {
    let err = toml("[a]\nlist = [1.0, nan]\n").expect_err("NaN");
    match err {
        ConfigError::NonFiniteFloat { key, found, .. } => {
            assert_eq!(key, "a.list[1]");
            assert!(found.is_nan());
        }
        other => panic!("unexpected error {other:?}"),
    }
    let err = toml("x = -inf\n").expect_err("infinity");
    assert!(
        matches!(&err, ConfigError::NonFiniteFloat { key, found, .. } if key == "x" && *found == f64::NEG_INFINITY),
        "{err:?}"
    );
}

#[test]
fn line_column_counts_from_one() {
    assert_eq!(line_column("", 0), (1, 1));
    assert_eq!(line_column("ab\ncd", 0), (1, 1));
    assert_eq!(line_column("ab\ncd", 2), (1, 3));
    assert_eq!(line_column("ab\ncd", 3), (2, 1));
    assert_eq!(line_column("ab\ncd", 5), (2, 3));
    assert_eq!(line_column("ab\ncd", 99), (2, 3));
    // An offset inside a character counts from that character.
    assert_eq!(line_column("é", 1), (1, 1));
}

#[test]
fn canonical_bytes_ignore_key_order() {
    let a = obj(json!({
        "z": 1,
        "a": {"y": [{"q": 1, "p": 2}], "b": null},
        "m": "s",
    }));
    let b = obj(json!({
        "m": "s",
        "a": {"b": null, "y": [{"p": 2, "q": 1}]},
        "z": 1,
    }));
    assert_ne!(
        serde_json::to_vec(&a).expect("json"),
        serde_json::to_vec(&b).expect("json")
    );
    assert_eq!(canonical_bytes(&a), canonical_bytes(&b));
    assert_eq!(
        String::from_utf8(canonical_bytes(&a)).expect("utf-8"),
        r#"{"a":{"b":null,"y":[{"p":2,"q":1}]},"m":"s","z":1}"#
    );
    // Array order is content, not key order.
    let c = obj(json!({"a": [2, 1]}));
    let d = obj(json!({"a": [1, 2]}));
    assert_ne!(canonical_bytes(&c), canonical_bytes(&d));
    assert_eq!(canonical_bytes(&Map::new()), b"{}");
}

#[test]
fn canonical_bytes_parse_back() {
    let config = obj(json!({"b": {"d": 1.5, "c": "x"}, "a": [true, null]}));
    let parsed = parse_config_json(&canonical_bytes(&config), "config blob").expect("object");
    assert_eq!(parsed, config);
    assert_eq!(canonical_bytes(&parsed), canonical_bytes(&config));
}

#[test]
fn parse_config_json_reports_what_it_found() {
    let err = parse_config_json(b"[1, 2]", "base_config.json").expect_err("array");
    assert!(
        matches!(&err, ConfigError::NotAnObject { what, found: "an array" } if what == "base_config.json"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "base_config.json: expected a JSON object, found an array"
    );
    let err = parse_config_json(b"null", "x").expect_err("null");
    assert!(
        matches!(err, ConfigError::NotAnObject { found: "null", .. }),
        "{err:?}"
    );

    let err =
        parse_config_json(b"{\n  \"a\": 1,\n  \"b\" 2\n}", "config blob ab12").expect_err("syntax");
    match &err {
        ConfigError::Json {
            what,
            line,
            column,
            message,
        } => {
            assert_eq!(what, "config blob ab12");
            assert_eq!((*line, *column), (3, 7));
            assert!(!message.contains("line"), "{message}");
        }
        other => panic!("unexpected error {other:?}"),
    }
    assert!(
        err.to_string()
            .starts_with("config blob ab12: invalid JSON at line 3, column 7: "),
        "{err}"
    );
    assert!(matches!(
        parse_config_json(b"", "empty"),
        Err(ConfigError::Json {
            line: 1,
            column: 0,
            ..
        })
    ));
}

#[test]
fn template_documents_the_keys_and_has_no_effect() {
    let config = toml(WORKSPACE_CONFIG_TEMPLATE).expect("template is valid TOML");
    assert!(config.is_empty(), "{config:?}");
    for key in [
        "[conversation.compaction]",
        "default_profile",
        "keep_last",
        "[conversation.compaction.profiles.",
        "reasoning = \"strip\"",
        "tool_calls = { policy = \"strip\", request = true, response = true }",
        "summary",
        "[conversation.tools.",
        ".compaction]",
        "request = \"keep\"",
        "response = \"strip\"",
        "[conversation.deduplication]",
        "enabled",
        "min_bytes = 300",
        "lookback_turns = 30",
        "deduplicate = false",
    ] {
        assert!(
            WORKSPACE_CONFIG_TEMPLATE.contains(key),
            "template lacks {key}"
        );
    }
    // Uncommenting every setting gives valid TOML with the documented keys.
    let uncommented: String = WORKSPACE_CONFIG_TEMPLATE
        .lines()
        .filter_map(|line| line.strip_prefix("# "))
        .filter(|line| line.starts_with('[') || line.contains(" = "))
        .map(|line| format!("{line}\n"))
        .collect();
    let config = toml(&uncommented).expect("uncommented template is valid TOML");
    for path in [
        "conversation.compaction.default_profile",
        "conversation.compaction.keep_last",
        "conversation.compaction.profiles.default.reasoning",
        "conversation.compaction.profiles.default.tool_calls.policy",
        "conversation.compaction.profiles.heavy.summary",
        "conversation.tools.fs_read_file.compaction.request",
        "conversation.tools.fs_read_file.compaction.response",
        "conversation.deduplication.enabled",
        "conversation.deduplication.min_bytes",
        "conversation.deduplication.lookback_turns",
        "conversation.tools.web_fetch.deduplicate",
    ] {
        assert!(
            lookup(&config, path).is_some(),
            "uncommented template lacks {path}"
        );
    }
    // Every setting of the template is of the type jp-store reads.
    let settings = Settings::parse(&config).expect("the template's settings");
    assert_eq!(
        settings.conversation.deduplication.min_bytes,
        Some(300),
        "{settings:?}"
    );
    assert!(settings.conversation.compaction.profiles["heavy"]
        .summary
        .is_some());
}

/// Any JSON value that is not an object (a leaf for merging).
fn leaf() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|i| json!(i)),
        "[a-z]{0,4}".prop_map(Value::String),
    ];
    prop_oneof![
        3 => scalar.clone(),
        1 => prop::collection::vec(scalar, 0..3).prop_map(Value::Array),
    ]
}

/// Nested objects over a small key set, so that generated configs overlap.
fn config() -> impl Strategy<Value = Map<String, Value>> {
    let value = leaf().prop_recursive(4, 32, 4, |inner| {
        prop::collection::vec(("[a-d]", inner), 0..4)
            .prop_map(|entries| Value::Object(entries.into_iter().collect()))
    });
    prop::collection::vec(("[a-d]", value), 0..5).prop_map(|entries| entries.into_iter().collect())
}

/// Dotted paths and values of every non-object value in `object`.
fn leaves(object: &Map<String, Value>, prefix: &str, out: &mut Vec<(String, Value)>) {
    for (key, value) in object {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match value {
            Value::Object(inner) => leaves(inner, &path, out),
            other => out.push((path, other.clone())),
        }
    }
}

proptest! {
    #[test]
    fn merged_config_holds_every_leaf_of_the_delta(base in config(), delta in config()) {
        let mut merged = base.clone();
        merge(&mut merged, &delta);
        let mut delta_leaves = Vec::new();
        leaves(&delta, "", &mut delta_leaves);
        for (path, value) in &delta_leaves {
            prop_assert_eq!(lookup(&merged, path), Some(value), "path {}", path);
        }
        // Leaves of the base are kept unless the delta has the key, or replaces an
        // object on the way to it.
        let mut base_leaves = Vec::new();
        leaves(&base, "", &mut base_leaves);
        for (path, value) in &base_leaves {
            let segments: Vec<&str> = path.split('.').collect();
            let touched = (1..=segments.len()).any(|n| {
                let prefix = segments[..n].join(".");
                lookup(&delta, &prefix).is_some_and(|v| n == segments.len() || !v.is_object())
            });
            if !touched {
                prop_assert_eq!(lookup(&merged, path), Some(value), "path {}", path);
            }
        }
        prop_assert_eq!(config_after(&base, [&delta]), merged);
    }

    #[test]
    fn merging_an_empty_delta_changes_nothing(base in config()) {
        let mut merged = base.clone();
        merge(&mut merged, &Map::new());
        prop_assert_eq!(&merged, &base);
        prop_assert_eq!(canonical_bytes(&merged), canonical_bytes(&base));
    }

    #[test]
    fn canonical_bytes_round_trip(config in config()) {
        let bytes = canonical_bytes(&config);
        let parsed = parse_config_json(&bytes, "blob").expect("canonical bytes are an object");
        prop_assert_eq!(&parsed, &config);
        prop_assert_eq!(canonical_bytes(&parsed), bytes);
    }
}

#[test]
fn config_json_with_a_key_twice_is_refused_naming_it() {
    let e = parse_config_json(
        br#"{"assistant": {"model": {"id": "a", "id": "b"}}}"#,
        "the base config",
    )
    .expect_err("a duplicate key")
    .to_string();
    assert!(
        e.contains("duplicate key `id`") && e.contains("assistant.model.id"),
        "{e}"
    );
}
