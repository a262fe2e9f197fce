//! The typed settings against the check they replace: the same error (key,
//! expected, found, layer) for every key and for generated configs and
//! layers; merging typed settings equals parsing the merged JSON;
//! serializing and parsing again gives the same settings.

use proptest::prelude::*;
use serde_json::{json, Value};

use super::*;
use crate::config::merge;

fn obj(v: Value) -> Object {
    match v {
        Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

/// The check of every setting as it was before the settings were typed
/// (`config/validate.rs`, untyped), kept as the oracle the typed parse must
/// agree with.
mod legacy {
    use serde_json::Value;

    use super::super::{BadSetting, Object, MAX_SUMMARY_TIMEOUT_SECS};
    use crate::config::json_kind;

    /// Checks every setting jp-store reads that `config` holds.
    pub(crate) fn validate(config: &Object) -> Result<(), BadSetting> {
        let mut c = Checker { path: Vec::new() };
        c.table(config, "conversation", |c, conversation| {
            c.table(conversation, "compaction", |c, compaction| {
                c.leaf(compaction, "default_profile", "a string", is_string)?;
                c.leaf(compaction, "keep_last", "an integer >= 0", is_u64)?;
                c.each(compaction, "profiles", |c, profile| {
                    c.leaf(profile, "reasoning", "\"strip\" or \"keep\"", |v| {
                        one_of(v, &["strip", "keep"])
                    })?;
                    c.any_of(
                        profile,
                        "tool_calls",
                        "\"strip\", \"omit\", \"keep\" or a table",
                        |v| one_of(v, &["strip", "omit", "keep"]),
                        |c, tool_calls| {
                            c.leaf(tool_calls, "policy", "\"strip\" or \"omit\"", |v| {
                                one_of(v, &["strip", "omit"])
                            })?;
                            c.leaf(tool_calls, "request", "true or false", Value::is_boolean)?;
                            c.leaf(tool_calls, "response", "true or false", Value::is_boolean)
                        },
                    )?;
                    c.table(profile, "summary", |c, summary| {
                        for key in [
                            "command",
                            "endpoint",
                            "model",
                            "api_key_env",
                            "instructions",
                        ] {
                            c.leaf(summary, key, "a non-empty string", |v| {
                                v.is_null() || v.as_str().is_some_and(|s| !s.trim().is_empty())
                            })?;
                        }
                        c.leaf(
                            summary,
                            "timeout_secs",
                            "a whole number of seconds from 1 to 86400",
                            |v| {
                                v.is_null()
                                    || v.as_u64().is_some_and(|s| {
                                        (1..=MAX_SUMMARY_TIMEOUT_SECS).contains(&s)
                                    })
                            },
                        )
                    })
                })?;
                c.table(compaction, "auto", |c, auto| {
                    c.leaf(auto, "enabled", "true or false", Value::is_boolean)?;
                    c.leaf(auto, "trigger_ratio", "a number > 0", |v| {
                        v.as_f64().is_some_and(|r| r > 0.0)
                    })?;
                    c.leaf(auto, "profile", "a string", is_string)?;
                    c.leaf(auto, "min_turns", "an integer >= 0", is_u64)?;
                    c.leaf(auto, "context_window", "an integer >= 0", is_u64)
                })
            })?;
            c.each(conversation, "tools", |c, tool| {
                c.table(tool, "compaction", |c, hints| {
                    for key in ["request", "response"] {
                        c.leaf(hints, key, "\"keep\" or \"strip\"", |v| {
                            one_of(v, &["keep", "strip"])
                        })?;
                    }
                    Ok(())
                })?;
                c.leaf(tool, "deduplicate", "true or false", Value::is_boolean)
            })?;
            c.table(conversation, "deduplication", |c, dedup| {
                c.leaf(dedup, "enabled", "true or false", Value::is_boolean)?;
                c.leaf(dedup, "min_bytes", "an integer >= 0", is_u64)?;
                c.leaf(dedup, "lookback_turns", "an integer >= 0", is_u64)
            })
        })?;
        c.table(config, "assistant", |c, assistant| {
            c.leaf(
                assistant,
                "system_prompt",
                super::super::prompt::EXPECTED,
                is_prompt,
            )?;
            c.table(assistant, "model", |c, model| {
                c.any_of(
                    model,
                    "id",
                    "a string (provider/model) or a table with a `name`",
                    is_string,
                    |c, id| {
                        c.leaf(id, "provider", "a string", is_string)?;
                        c.leaf(id, "name", "a string", is_string)
                    },
                )?;
                c.leaf(model, "context_window", "an integer >= 0", is_u64)?;
                c.table(model, "parameters", |c, parameters| {
                    c.leaf(
                        parameters,
                        "max_tokens",
                        "an integer from 1 to 4294967295",
                        |v| {
                            v.as_u64()
                                .is_some_and(|n| n >= 1 && n <= u64::from(u32::MAX))
                        },
                    )
                })
            })
        })
    }

    /// Checks `layers` as they are merged in order (`layers[0]`, then each
    /// later one merged over it, format-spec.md 4.5): on a bad setting, the
    /// index of the layer the bad value comes from (the last one, up to the
    /// layer being merged, that holds the key) and the setting. A value that a
    /// later layer replaces is still reported, since readers see the config
    /// after every layer (deduplication follows deltas event by event).
    pub(crate) fn validate_layers<'a>(
        layers: impl IntoIterator<Item = &'a Object>,
    ) -> Result<(), (usize, BadSetting)> {
        let mut merged = Object::new();
        let mut seen: Vec<&Object> = Vec::new();
        for layer in layers {
            crate::config::merge(&mut merged, layer);
            seen.push(layer);
            if let Err(bad) = validate(&merged) {
                let from = seen
                    .iter()
                    .rposition(|l| holds(l, &bad.path))
                    .unwrap_or(seen.len() - 1);
                return Err((from, bad));
            }
        }
        Ok(())
    }

    /// Whether `config` holds a value at `path`.
    fn holds(config: &Object, path: &[String]) -> bool {
        let Some((first, rest)) = path.split_first() else {
            return false;
        };
        let mut value = match config.get(first) {
            Some(v) => v,
            None => return false,
        };
        for segment in rest {
            value = match value.as_object().and_then(|o| o.get(segment)) {
                Some(v) => v,
                None => return false,
            };
        }
        true
    }

    fn is_string(v: &Value) -> bool {
        v.is_string()
    }

    fn is_u64(v: &Value) -> bool {
        v.is_u64()
    }

    /// A string, or a table of JP's mergeable string (format-spec.md 4.5).
    fn is_prompt(v: &Value) -> bool {
        let one_of = |v: &Value, allowed: &[&str]| v.is_null() || one_of(v, allowed);
        match v {
            Value::String(_) => true,
            Value::Object(table) => table.iter().all(|(key, v)| match key.as_str() {
                "value" => v.is_null() || v.is_string(),
                "strategy" => one_of(v, &["append", "prepend", "replace"]),
                "separator" => one_of(v, &["none", "space", "line", "paragraph"]),
                "discard_when_merged" => v.is_null() || v.is_boolean(),
                _ => false,
            }),
            _ => false,
        }
    }

    fn one_of(v: &Value, allowed: &[&str]) -> bool {
        v.as_str().is_some_and(|s| allowed.contains(&s))
    }

    /// Walks a config, keeping the path of the table it is in.
    struct Checker {
        path: Vec<String>,
    }

    type Checked = Result<(), BadSetting>;

    impl Checker {
        fn bad(&self, key: &str, expected: &'static str, found: &Value) -> BadSetting {
            let mut path = self.path.clone();
            path.push(key.to_owned());
            BadSetting {
                path,
                expected,
                found: describe(found),
            }
        }

        /// `key` of `parent`, when present, passes `ok`.
        fn leaf(
            &mut self,
            parent: &Object,
            key: &str,
            expected: &'static str,
            ok: impl Fn(&Value) -> bool,
        ) -> Checked {
            match parent.get(key) {
                Some(v) if !ok(v) => Err(self.bad(key, expected, v)),
                _ => Ok(()),
            }
        }

        /// `key` of `parent`, when present, is a table that passes `inner`.
        fn table(
            &mut self,
            parent: &Object,
            key: &str,
            inner: impl FnOnce(&mut Checker, &Object) -> Checked,
        ) -> Checked {
            match parent.get(key) {
                None => Ok(()),
                Some(Value::Object(table)) => self.within(key, |c| inner(c, table)),
                Some(v) => Err(self.bad(key, "a table", v)),
            }
        }

        /// `key` of `parent`, when present, passes `ok` or is a table that
        /// passes `inner`.
        fn any_of(
            &mut self,
            parent: &Object,
            key: &str,
            expected: &'static str,
            ok: impl Fn(&Value) -> bool,
            inner: impl FnOnce(&mut Checker, &Object) -> Checked,
        ) -> Checked {
            match parent.get(key) {
                None => Ok(()),
                Some(Value::Object(table)) => self.within(key, |c| inner(c, table)),
                Some(v) if ok(v) => Ok(()),
                Some(v) => Err(self.bad(key, expected, v)),
            }
        }

        /// `key` of `parent`, when present, is a table of tables (profiles,
        /// tools), each passing `inner`.
        fn each(
            &mut self,
            parent: &Object,
            key: &str,
            inner: impl Fn(&mut Checker, &Object) -> Checked,
        ) -> Checked {
            self.table(parent, key, |c, named| {
                for (name, item) in named {
                    match item {
                        Value::Object(table) => c.within(name, |c| inner(c, table))?,
                        v => return Err(c.bad(name, "a table", v)),
                    }
                }
                Ok(())
            })
        }

        fn within(&mut self, key: &str, f: impl FnOnce(&mut Checker) -> Checked) -> Checked {
            self.path.push(key.to_owned());
            let out = f(self);
            self.path.pop();
            out
        }
    }

    /// The kind of a value and an excerpt of it (at most 60 characters).
    fn describe(v: &Value) -> String {
        let text = v.to_string();
        let excerpt = match text.char_indices().nth(60) {
            Some((cut, _)) => format!("{}…", &text[..cut]),
            None => text,
        };
        format!("{} ({excerpt})", json_kind(v))
    }
}

#[test]
fn every_key_read_is_checked_by_type() {
    let bad = [
        (
            json!({"conversation": {"deduplication": {"min_bytes": "big"}}}),
            "conversation.deduplication.min_bytes",
        ),
        (
            json!({"conversation": {"deduplication": {"enabled": 1}}}),
            "conversation.deduplication.enabled",
        ),
        (
            json!({"conversation": {"deduplication": {"lookback_turns": -1}}}),
            "conversation.deduplication.lookback_turns",
        ),
        (
            json!({"conversation": {"deduplication": true}}),
            "conversation.deduplication",
        ),
        (
            json!({"conversation": {"compaction": {"keep_last": 1.5}}}),
            "conversation.compaction.keep_last",
        ),
        (
            json!({"conversation": {"compaction": {"default_profile": 3}}}),
            "conversation.compaction.default_profile",
        ),
        (
            json!({"conversation": {"compaction": {"profiles": {"p": "x"}}}}),
            "conversation.compaction.profiles.p",
        ),
        (
            json!({"conversation": {"compaction": {"profiles": {"p": {"reasoning": "drop"}}}}}),
            "conversation.compaction.profiles.p.reasoning",
        ),
        (
            json!({"conversation": {"compaction": {"profiles": {"p": {"tool_calls": {"request": "no"}}}}}}),
            "conversation.compaction.profiles.p.tool_calls.request",
        ),
        (
            json!({"conversation": {"compaction": {"profiles": {"p": {"tool_calls": 1}}}}}),
            "conversation.compaction.profiles.p.tool_calls",
        ),
        (
            json!({"conversation": {"compaction": {"profiles": {"a.b": {"summary": {"timeout_secs": 0}}}}}}),
            "conversation.compaction.profiles.\"a.b\".summary.timeout_secs",
        ),
        (
            json!({"conversation": {"compaction": {"profiles": {"p": {"summary": {"command": ""}}}}}}),
            "conversation.compaction.profiles.p.summary.command",
        ),
        (
            json!({"conversation": {"compaction": {"auto": {"enabled": "yes"}}}}),
            "conversation.compaction.auto.enabled",
        ),
        (
            json!({"conversation": {"compaction": {"auto": {"trigger_ratio": 0}}}}),
            "conversation.compaction.auto.trigger_ratio",
        ),
        (
            json!({"conversation": {"compaction": {"auto": {"context_window": "1M"}}}}),
            "conversation.compaction.auto.context_window",
        ),
        (
            json!({"conversation": {"tools": {"t": {"compaction": {"request": true}}}}}),
            "conversation.tools.t.compaction.request",
        ),
        (
            json!({"conversation": {"tools": {"t": {"deduplicate": "no"}}}}),
            "conversation.tools.t.deduplicate",
        ),
        (
            json!({"assistant": {"model": {"id": 7}}}),
            "assistant.model.id",
        ),
        (
            json!({"assistant": {"model": {"id": {"name": 7}}}}),
            "assistant.model.id.name",
        ),
        (
            json!({"assistant": {"model": {"parameters": {"max_tokens": 0}}}}),
            "assistant.model.parameters.max_tokens",
        ),
        (
            json!({"assistant": {"system_prompt": ["a"]}}),
            "assistant.system_prompt",
        ),
        (json!({"conversation": null}), "conversation"),
    ];
    for (config, key) in bad {
        let config = obj(config);
        let err = Settings::parse(&config).expect_err(&format!("{config:?}"));
        assert_eq!(err.key(), key, "{config:?}");
        assert_eq!(Err(err), legacy::validate(&config), "{config:?}");
    }
}

/// Every key of format-spec.md 4.5's table: its good values parse, its bad
/// ones give the error the untyped check gave, alone and as a delta over a
/// config that sets the key already.
#[test]
fn each_key_agrees_with_the_untyped_check() {
    let string = &["\"s\"", "\"\"", "\"anthropic/claude\""][..];
    let count = &["0", "3", "18446744073709551615"][..];
    let boolean = &["true", "false"][..];
    let table = &["{}", "{\"unknown\": 1}"][..];
    let named = &["{}", "{\"p\": {}}"][..];
    let keys: &[(&[&str], &[&str])] = &[
        (&["conversation"], table),
        (&["conversation", "compaction"], table),
        (&["conversation", "compaction", "default_profile"], string),
        (&["conversation", "compaction", "keep_last"], count),
        (&["conversation", "compaction", "profiles"], named),
        (&["conversation", "compaction", "profiles", "p"], table),
        (
            &["conversation", "compaction", "profiles", "p", "reasoning"],
            &["\"strip\"", "\"keep\""],
        ),
        (
            &["conversation", "compaction", "profiles", "p", "tool_calls"],
            &[
                "\"strip\"",
                "\"omit\"",
                "\"keep\"",
                "{}",
                "{\"policy\": \"omit\"}",
            ],
        ),
        (
            &[
                "conversation",
                "compaction",
                "profiles",
                "p",
                "tool_calls",
                "policy",
            ],
            &["\"strip\"", "\"omit\""],
        ),
        (
            &[
                "conversation",
                "compaction",
                "profiles",
                "p",
                "tool_calls",
                "request",
            ],
            boolean,
        ),
        (
            &[
                "conversation",
                "compaction",
                "profiles",
                "p",
                "tool_calls",
                "response",
            ],
            boolean,
        ),
        (
            &["conversation", "compaction", "profiles", "p", "summary"],
            table,
        ),
        (
            &[
                "conversation",
                "compaction",
                "profiles",
                "p",
                "summary",
                "command",
            ],
            &["\"cat\"", "null"],
        ),
        (
            &[
                "conversation",
                "compaction",
                "profiles",
                "p",
                "summary",
                "endpoint",
            ],
            &["\"http://h/v1\"", "null"],
        ),
        (
            &[
                "conversation",
                "compaction",
                "profiles",
                "p",
                "summary",
                "model",
            ],
            &["\"m\"", "null"],
        ),
        (
            &[
                "conversation",
                "compaction",
                "profiles",
                "p",
                "summary",
                "api_key_env",
            ],
            &["\"KEY\"", "null"],
        ),
        (
            &[
                "conversation",
                "compaction",
                "profiles",
                "p",
                "summary",
                "instructions",
            ],
            &["\"Keep paths.\"", "null"],
        ),
        (
            &[
                "conversation",
                "compaction",
                "profiles",
                "p",
                "summary",
                "timeout_secs",
            ],
            &["1", "86400", "null"],
        ),
        (&["conversation", "compaction", "auto"], table),
        (&["conversation", "compaction", "auto", "enabled"], boolean),
        (
            &["conversation", "compaction", "auto", "trigger_ratio"],
            &["0.5", "2", "1e-9"],
        ),
        (&["conversation", "compaction", "auto", "profile"], string),
        (&["conversation", "compaction", "auto", "min_turns"], count),
        (
            &["conversation", "compaction", "auto", "context_window"],
            count,
        ),
        (&["conversation", "tools"], named),
        (&["conversation", "tools", "fs"], table),
        (&["conversation", "tools", "fs", "compaction"], table),
        (
            &["conversation", "tools", "fs", "compaction", "request"],
            &["\"keep\"", "\"strip\""],
        ),
        (
            &["conversation", "tools", "fs", "compaction", "response"],
            &["\"keep\"", "\"strip\""],
        ),
        (&["conversation", "tools", "fs", "deduplicate"], boolean),
        (&["conversation", "deduplication"], table),
        (&["conversation", "deduplication", "enabled"], boolean),
        (&["conversation", "deduplication", "min_bytes"], count),
        (&["conversation", "deduplication", "lookback_turns"], count),
        (&["assistant"], table),
        (
            &["assistant", "system_prompt"],
            &[
                "\"s\"",
                "\"\"",
                "{}",
                "{\"value\": \"v\", \"strategy\": \"append\", \"separator\": \"paragraph\"}",
                "{\"value\": \"v\", \"strategy\": \"prepend\", \"separator\": \"space\"}",
                "{\"strategy\": \"replace\", \"separator\": \"line\", \"discard_when_merged\": true}",
                "{\"value\": null, \"strategy\": null, \"separator\": \"none\"}",
            ],
        ),
        (&["assistant", "model"], table),
        (
            &["assistant", "model", "id"],
            &[
                "\"anthropic/claude\"",
                "\"gpt\"",
                "{}",
                "{\"provider\": \"openai\", \"name\": \"o3\"}",
            ],
        ),
        (&["assistant", "model", "id", "provider"], string),
        (&["assistant", "model", "id", "name"], string),
        (&["assistant", "model", "context_window"], count),
        (&["assistant", "model", "parameters"], table),
        (
            &["assistant", "model", "parameters", "max_tokens"],
            &["1", "4096", "4294967295"],
        ),
    ];
    let at = |path: &[&str], value: Value| -> Object {
        let mut v = value;
        for key in path.iter().rev() {
            v = json!({ *key: v });
        }
        obj(v)
    };
    for (path, good) in keys {
        let key = path.join(".");
        for text in *good {
            let value: Value = serde_json::from_str(text).expect("a JSON value");
            let config = at(path, value);
            assert_eq!(Settings::parse(&config).err(), None, "{key} = {text}");
            assert_eq!(legacy::validate(&config), Ok(()), "{key} = {text}");
        }
        let mut bad_found = 0;
        for value in bad_values() {
            if good
                .iter()
                .any(|g| serde_json::from_str::<Value>(g).ok() == Some(value.clone()))
            {
                continue;
            }
            let config = at(path, value.clone());
            let typed = Settings::parse(&config).err();
            assert_eq!(typed, legacy::validate(&config).err(), "{key} = {value}");
            if let Some(bad) = &typed {
                bad_found += 1;
                if bad.path.len() == path.len() {
                    assert_eq!(bad.key(), key, "{key} = {value}");
                }
            }
            // As a delta over a config that sets the key: the delta's value
            // is reported, from the delta.
            let first = serde_json::from_str(good[0]).expect("a JSON value");
            let layers = [at(path, first), config.clone()];
            assert_eq!(
                parse_layers(&layers).err(),
                legacy::validate_layers(&layers).err(),
                "{key} = {value} over {}",
                good[0]
            );
        }
        assert!(bad_found > 0, "{key}: no bad value refused");
    }
}

/// Values of every JSON kind, and the edges of the ranges checked.
fn bad_values() -> Vec<Value> {
    [
        "null",
        "true",
        "0",
        "-1",
        "1.5",
        "86401",
        "4294967296",
        "\"\"",
        "\"  \"",
        "\"x\"",
        "\"strip\"",
        "\"keep\"",
        "\"omit\"",
        "[1]",
        "{}",
        "{\"a\": 1}",
        "{\"policy\": \"keep\"}",
        "{\"name\": 7}",
        "{\"request\": \"no\"}",
    ]
    .iter()
    .map(|t| serde_json::from_str(t).expect("a JSON value"))
    .collect()
}

#[test]
fn good_and_unknown_settings_give_their_values() {
    let good = obj(json!({
        "conversation": {
            "compaction": {
                "default_profile": "p", "keep_last": 3,
                "profiles": {"p": {"reasoning": "strip", "tool_calls": {"policy": "strip", "request": false},
                                   "summary": {"command": "cat", "model": null, "timeout_secs": 30}},
                             "q": {"tool_calls": "omit"}},
                "auto": {"enabled": true, "trigger_ratio": 0.5, "min_turns": 2, "context_window": 1000}
            },
            "tools": {"fs": {"compaction": {"request": "keep"}, "deduplicate": false, "run": "ask"}},
            "deduplication": {"enabled": false, "min_bytes": 0, "lookback_turns": 9},
            "title": {"generate": true}
        },
        "assistant": {"model": {"id": {"provider": "anthropic", "name": "c"},
                                "parameters": {"max_tokens": 4096, "temperature": 0.2}},
                      "system_prompt": "hi"},
        "style": {"anything": [1, 2]}
    }));
    let s = Settings::parse(&good).expect("good settings");
    let c = &s.conversation.compaction;
    assert_eq!(
        (c.default_profile.as_deref(), c.keep_last),
        (Some("p"), Some(3))
    );
    assert_eq!(c.profiles.keys().collect::<Vec<_>>(), ["p", "q"]);
    let p = &c.profiles["p"];
    assert_eq!(p.reasoning, Some(ReasoningPolicy::Strip));
    assert_eq!(
        p.tool_calls,
        Some(ToolCallsSetting::Table(ToolCallsTable {
            policy: Some(ToolCallsPolicy::Strip),
            request: Some(false),
            response: None,
        }))
    );
    assert_eq!(
        p.summary,
        Some(SummaryTable {
            command: Some("cat".into()),
            timeout_secs: Some(30),
            ..Default::default()
        })
    );
    assert_eq!(
        c.profiles["q"].tool_calls,
        Some(ToolCallsSetting::Preset(ToolCallsPreset::Omit))
    );
    assert_eq!(
        c.auto,
        AutoCompactionSettings {
            enabled: Some(true),
            trigger_ratio: Some(0.5),
            profile: None,
            min_turns: Some(2),
            context_window: Some(1000),
        }
    );
    assert_eq!(
        s.conversation.tools["fs"],
        ToolSettings {
            compaction: ToolCompactionHints {
                request: Some(ToolFieldHint::Keep),
                response: None,
            },
            deduplicate: Some(false),
        }
    );
    assert_eq!(
        s.conversation.deduplication,
        DeduplicationSettings {
            enabled: Some(false),
            min_bytes: Some(0),
            lookback_turns: Some(9),
        }
    );
    assert_eq!(
        s.assistant,
        AssistantSettings {
            system_prompt: Some("hi".into()),
            system_prompt_discarded_when_merged: false,
            system_prompt_without_text: false,
            model: ModelSettings {
                id: Some(ModelId::Parts(ModelIdParts {
                    provider: Some("anthropic".into()),
                    name: Some("c".into()),
                })),
                context_window: None,
                parameters: ModelParameters {
                    max_tokens: Some(4096),
                },
            },
        }
    );
    assert_eq!(Settings::parse(&Object::new()), Ok(Settings::default()));
}

#[test]
fn layers_name_the_one_the_bad_value_comes_from() {
    let workspace = obj(json!({"conversation": {"deduplication": {"min_bytes": 5}}}));
    let base = obj(json!({"conversation": {"deduplication": {"enabled": "no"}}}));
    let delta = obj(json!({"conversation": {"deduplication": {"min_bytes": 9}}}));
    let (from, bad) = parse_layers([&workspace, &delta, &base]).expect_err("bad");
    assert_eq!(
        (from, bad.key().as_str()),
        (2, "conversation.deduplication.enabled")
    );
    let fix = obj(json!({"conversation": {"deduplication": {"enabled": true}}}));
    let merged = parse_layers([&workspace, &fix, &delta]).expect("good");
    assert_eq!(
        merged.conversation.deduplication,
        DeduplicationSettings {
            enabled: Some(true),
            min_bytes: Some(9),
            lookback_turns: None,
        }
    );
}

#[test]
fn merging_replaces_words_and_merges_tables_as_json_does() {
    let layers = [
        obj(json!({"conversation": {"compaction": {"profiles": {
            "p": {"tool_calls": {"policy": "strip", "request": false}, "summary": {"command": "cat", "model": "m"}},
            "q": {"tool_calls": {"policy": "omit"}}}}},
            "assistant": {"model": {"id": "anthropic/claude"}}})),
        obj(json!({"conversation": {"compaction": {"profiles": {
            "p": {"tool_calls": {"response": false}, "summary": {"command": null}},
            "q": {"tool_calls": "keep"},
            "new": {}}}},
            "assistant": {"model": {"id": {"name": "o3"}}}})),
        obj(json!({"assistant": {"model": {"id": {"provider": "openai"}}}})),
    ];
    let typed = parse_layers(&layers).expect("good");
    let mut merged = Object::new();
    for layer in &layers {
        merge(&mut merged, layer);
    }
    assert_eq!(Settings::parse(&merged), Ok(typed.clone()));
    let profiles = &typed.conversation.compaction.profiles;
    assert_eq!(profiles.keys().collect::<Vec<_>>(), ["p", "q", "new"]);
    assert_eq!(
        profiles["p"].tool_calls,
        Some(ToolCallsSetting::Table(ToolCallsTable {
            policy: Some(ToolCallsPolicy::Strip),
            request: Some(false),
            response: Some(false),
        }))
    );
    assert_eq!(
        profiles["p"].summary,
        Some(SummaryTable {
            model: Some("m".into()),
            ..Default::default()
        }),
        "null unsets a summary key"
    );
    assert_eq!(
        profiles["q"].tool_calls,
        Some(ToolCallsSetting::Preset(ToolCallsPreset::Keep))
    );
    assert_eq!(profiles["new"], ProfileSettings::default());
    assert_eq!(
        typed.assistant.model.id,
        Some(ModelId::Parts(ModelIdParts {
            provider: Some("openai".into()),
            name: Some("o3".into()),
        }))
    );
}

#[test]
fn of_several_bad_names_in_a_layer_the_merged_order_decides() {
    // The base knows `b` before `a`: the merged config walks `b` first, so
    // its bad value is the one reported, as the untyped check did.
    let base = obj(json!({"conversation": {"tools": {"b": {}, "a": {}}}}));
    let delta = obj(json!({"conversation": {"tools": {
        "new": {"deduplicate": 0}, "a": {"deduplicate": 1}, "b": {"deduplicate": 2}}}}));
    let (layer, bad) = parse_layers([&base, &delta]).expect_err("bad");
    assert_eq!(
        (layer, bad.key().as_str()),
        (1, "conversation.tools.b.deduplicate")
    );
    assert_eq!(legacy::validate_layers([&base, &delta]), Err((layer, bad)));
    // Alone, the delta's own order decides.
    assert_eq!(
        Settings::parse(&delta).expect_err("bad").key(),
        "conversation.tools.new.deduplicate"
    );
}

#[test]
fn settings_serialize_with_jp_key_names_and_deserialize_through_the_check() {
    let config = obj(json!({
        "conversation": {"compaction": {"keep_last": 2, "profiles": {"p": {"tool_calls": "omit",
            "summary": {"endpoint": "http://h/v1", "model": "m"}}}},
            "tools": {"fs": {"compaction": {"response": "strip"}}}},
        "assistant": {"model": {"id": "anthropic/claude", "parameters": {"max_tokens": 10}}}
    }));
    let s = Settings::parse(&config).expect("good");
    let value = serde_json::to_value(&s).expect("serialize");
    assert_eq!(value["conversation"]["compaction"]["keep_last"], json!(2));
    assert_eq!(
        value["conversation"]["compaction"]["profiles"]["p"]["tool_calls"],
        json!("omit")
    );
    assert_eq!(value["assistant"]["model"]["id"], json!("anthropic/claude"));
    let back: Settings = serde_json::from_value(value).expect("deserialize");
    assert_eq!(back, s);
    let err = serde_json::from_value::<Settings>(json!({"assistant": {"system_prompt": 1}}))
        .expect_err("a bad setting");
    assert_eq!(
        err.to_string(),
        format!(
            "setting `assistant.system_prompt` must be {}, found a number (1)",
            super::prompt::EXPECTED
        )
    );
    // A prompt that the next one drops is written so that it reads back so.
    let mut s = Settings::default();
    s.merge_layer(&obj(
        json!({"assistant": {"system_prompt": {"value": "default", "discard_when_merged": true}}}),
    ))
    .expect("good");
    let value = serde_json::to_value(&s).expect("serialize");
    let back: Settings = serde_json::from_value(value).expect("deserialize");
    assert_eq!(back, s);
    assert!(back.assistant.system_prompt_discarded_when_merged);
}

#[test]
fn a_lenient_merge_applies_the_good_settings_and_returns_the_bad() {
    let mut s = Settings::parse(&obj(json!({
        "assistant": {"system_prompt": "before", "model": {"context_window": 5}}
    })))
    .expect("good");
    let bad = s.merge_layer_lenient(&obj(json!({
        "conversation": {"compaction": {"keep_last": "two", "default_profile": "p"}},
        "assistant": {"system_prompt": 7, "model": {"context_window": 9, "id": []}}
    })));
    let keys: Vec<String> = bad.iter().map(BadSetting::key).collect();
    assert_eq!(
        keys,
        [
            "conversation.compaction.keep_last",
            "assistant.system_prompt",
            "assistant.model.id"
        ]
    );
    assert_eq!(s.conversation.compaction.keep_last, None);
    assert_eq!(
        s.conversation.compaction.default_profile.as_deref(),
        Some("p")
    );
    assert_eq!(s.assistant.system_prompt.as_deref(), Some("before"));
    assert_eq!(s.assistant.model.context_window, Some(9));
    assert_eq!(s.assistant.model.id, None);
    // The strict merge reports the first of them.
    let mut strict = Settings::default();
    let first = strict
        .merge_layer(&obj(
            json!({"conversation": {"compaction": {"keep_last": "two"}}}),
        ))
        .expect_err("bad");
    assert_eq!(first, bad[0]);
}

#[test]
fn a_system_prompt_table_merges_by_its_strategy_and_the_base_ends_a_default() {
    let layers = [
        obj(
            json!({"assistant": {"system_prompt": {"value": "default", "discard_when_merged": true}}}),
        ),
        obj(json!({"assistant": {"system_prompt": {"value": "mine", "strategy": "append"}}})),
        obj(
            json!({"assistant": {"system_prompt": {"value": "more", "strategy": "append", "separator": "paragraph"}}}),
        ),
        obj(
            json!({"assistant": {"system_prompt": {"value": "first", "strategy": "prepend", "separator": "line"}}}),
        ),
    ];
    let s = parse_layers(&layers).expect("good");
    assert_eq!(
        s.assistant.system_prompt.as_deref(),
        Some("first\nmine\n\nmore")
    );
    // A base config is finished: a default there is text like any other.
    let mut s = Settings::default();
    s.merge_layer(&layers[0]).expect("good");
    s.finish_base();
    s.merge_layer(&layers[1]).expect("good");
    assert_eq!(s.assistant.system_prompt.as_deref(), Some("defaultmine"));
    // A table that left no text is the empty text once finished, as JP's
    // finished config holds it; before, it is no prompt.
    let mut s = Settings::default();
    s.merge_layer(&obj(
        json!({"assistant": {"system_prompt": {"strategy": "append"}}}),
    ))
    .expect("good");
    assert_eq!(s.assistant.system_prompt, None);
    s.finish_base();
    s.merge_layer(&layers[1]).expect("good");
    assert_eq!(s.assistant.system_prompt.as_deref(), Some("mine"));
    let mut s = Settings::default();
    s.merge_layer(&obj(
        json!({"assistant": {"system_prompt": {"strategy": "append"}}}),
    ))
    .expect("good");
    s.finish_base();
    s.merge_layer(&obj(json!({"assistant": {"system_prompt": {"value": "x", "strategy": "append", "separator": "space"}}})))
        .expect("good");
    assert_eq!(s.assistant.system_prompt.as_deref(), Some(" x"));
}

// ----- generated configs -------------------------------------------------------

/// The shape of the settings jp-store reads, to generate configs from.
enum Shape {
    /// A table of these keys.
    Table(&'static [(&'static str, Shape)]),
    /// A table of named tables of this shape (profiles, tools).
    Named(&'static [(&'static str, Shape)]),
    /// A value, one of these (JSON text) when it is good.
    Leaf(&'static [&'static str]),
    /// A good value of these, or a table of this shape.
    LeafOrTable(&'static [&'static str], &'static [(&'static str, Shape)]),
}

const STRING: Shape = Shape::Leaf(&["\"s\"", "\"p\"", "\"\""]);
/// A system prompt: strings, and tables of each strategy (format-spec.md
/// 4.5), so that merged layers exercise JP's merge of them.
const PROMPT: Shape = Shape::Leaf(&[
    "\"s\"",
    "\"\"",
    "{\"value\": \"a\", \"strategy\": \"append\", \"separator\": \"line\"}",
    "{\"value\": \"p\", \"strategy\": \"prepend\", \"separator\": \"space\"}",
    "{\"value\": \"r\", \"strategy\": \"replace\"}",
    "{\"value\": \"n\"}",
    "{\"value\": \"d\", \"discard_when_merged\": true}",
    "{\"strategy\": \"append\"}",
]);
const COUNT: Shape = Shape::Leaf(&["0", "7"]);
const BOOL: Shape = Shape::Leaf(&["true", "false"]);
const SUMMARY_TEXT: Shape = Shape::Leaf(&["\"cat\"", "null"]);
const HINT: Shape = Shape::Leaf(&["\"keep\"", "\"strip\""]);
const PROFILE: &[(&str, Shape)] = &[
    ("reasoning", Shape::Leaf(&["\"strip\"", "\"keep\""])),
    (
        "tool_calls",
        Shape::LeafOrTable(
            &["\"strip\"", "\"omit\"", "\"keep\""],
            &[
                ("policy", Shape::Leaf(&["\"strip\"", "\"omit\""])),
                ("request", BOOL),
                ("response", BOOL),
            ],
        ),
    ),
    (
        "summary",
        Shape::Table(&[
            ("command", SUMMARY_TEXT),
            ("endpoint", SUMMARY_TEXT),
            ("model", SUMMARY_TEXT),
            ("api_key_env", SUMMARY_TEXT),
            ("instructions", SUMMARY_TEXT),
            ("timeout_secs", Shape::Leaf(&["1", "86400", "null"])),
        ]),
    ),
];
const CONFIG: Shape = Shape::Table(&[
    (
        "conversation",
        Shape::Table(&[
            (
                "compaction",
                Shape::Table(&[
                    ("default_profile", STRING),
                    ("keep_last", COUNT),
                    ("profiles", Shape::Named(PROFILE)),
                    (
                        "auto",
                        Shape::Table(&[
                            ("enabled", BOOL),
                            ("trigger_ratio", Shape::Leaf(&["0.75", "1"])),
                            ("profile", STRING),
                            ("min_turns", COUNT),
                            ("context_window", COUNT),
                        ]),
                    ),
                ]),
            ),
            (
                "tools",
                Shape::Named(&[
                    (
                        "compaction",
                        Shape::Table(&[("request", HINT), ("response", HINT)]),
                    ),
                    ("deduplicate", BOOL),
                ]),
            ),
            (
                "deduplication",
                Shape::Table(&[
                    ("enabled", BOOL),
                    ("min_bytes", COUNT),
                    ("lookback_turns", COUNT),
                ]),
            ),
        ]),
    ),
    (
        "assistant",
        Shape::Table(&[
            ("system_prompt", PROMPT),
            (
                "model",
                Shape::Table(&[
                    (
                        "id",
                        Shape::LeafOrTable(
                            &["\"anthropic/claude\"", "\"gpt\""],
                            &[("provider", STRING), ("name", STRING)],
                        ),
                    ),
                    ("context_window", COUNT),
                    (
                        "parameters",
                        Shape::Table(&[("max_tokens", Shape::Leaf(&["1", "4096"]))]),
                    ),
                ]),
            ),
        ]),
    ),
]);

/// Names of profiles and tools: few, so that layers share them.
const NAMES: &[&str] = &["p", "q", "a.b", "fs"];

/// Builds configs from a list of choices (0 when it runs out, so shrinking
/// the list toward zeros shrinks the config toward empty).
struct Gen<'a> {
    choices: &'a [u32],
    next: usize,
    /// Whether values of the wrong type are made.
    bad: bool,
}

impl Gen<'_> {
    fn pick(&mut self, n: usize) -> usize {
        let c = self.choices.get(self.next).copied().unwrap_or(0);
        self.next += 1;
        c as usize % n
    }

    fn json(&mut self, texts: &[&str]) -> Value {
        serde_json::from_str(texts[self.pick(texts.len())]).expect("a JSON value")
    }

    fn wrong(&mut self) -> Value {
        let values = bad_values();
        values[self.pick(values.len())].clone()
    }

    fn table(&mut self, keys: &[(&str, Shape)]) -> Value {
        let mut out = Object::new();
        for (key, shape) in keys {
            // Absent half of the time, a value of the wrong kind a tenth of
            // the time (when bad values are made).
            match self.pick(10) {
                0..=4 => {}
                5 if self.bad => {
                    out.insert((*key).to_owned(), self.wrong());
                }
                _ => {
                    out.insert((*key).to_owned(), self.value(shape));
                }
            }
        }
        if self.pick(8) == 0 {
            out.insert("unknown".into(), json!([1, {"x": null}]));
        }
        Value::Object(out)
    }

    fn value(&mut self, shape: &Shape) -> Value {
        match shape {
            Shape::Table(keys) => self.table(keys),
            Shape::Leaf(good) => self.json(good),
            Shape::LeafOrTable(good, keys) => match self.pick(2) {
                0 => self.json(good),
                _ => self.table(keys),
            },
            Shape::Named(keys) => {
                let mut out = Object::new();
                for _ in 0..self.pick(4) {
                    let name = NAMES[self.pick(NAMES.len())];
                    let item = match self.pick(10) {
                        0 if self.bad => self.wrong(),
                        _ => self.table(keys),
                    };
                    out.insert(name.to_owned(), item);
                }
                Value::Object(out)
            }
        }
    }

    fn config(&mut self) -> Object {
        obj(self.value(&CONFIG))
    }
}

/// `count` configs; with `bad`, each may hold values of the wrong type or
/// not (so that bad layers come after good ones that share their names).
fn layers(choices: &[u32], count: usize, bad: bool) -> Vec<Object> {
    let mut g = Gen {
        choices,
        next: 0,
        bad: false,
    };
    (0..count)
        .map(|_| {
            g.bad = bad && g.pick(2) == 0;
            g.config()
        })
        .collect()
}

/// Layers that name profiles and tools in different orders, the last with
/// several bad values under different names: which one is reported depends
/// on the order of the names in the merged config.
fn named_layers(choices: &[u32]) -> Vec<Object> {
    let mut g = Gen {
        choices,
        next: 0,
        bad: false,
    };
    let names = |g: &mut Gen| {
        let mut pool = NAMES.to_vec();
        let mut out = Vec::new();
        while !pool.is_empty() && g.pick(5) != 0 {
            out.push(pool.remove(g.pick(pool.len())));
        }
        out
    };
    let layer = |g: &mut Gen, bad: bool| {
        let named = |g: &mut Gen, shape: &[(&str, Shape)]| {
            let mut out = Object::new();
            for name in names(g) {
                g.bad = bad;
                let item = match g.pick(3) {
                    0 if bad => g.wrong(),
                    _ => g.table(shape),
                };
                out.insert(name.to_owned(), item);
            }
            Value::Object(out)
        };
        let profiles = named(g, PROFILE);
        let tools = named(
            g,
            &[
                (
                    "compaction",
                    Shape::Table(&[("request", HINT), ("response", HINT)]),
                ),
                ("deduplicate", BOOL),
            ],
        );
        obj(json!({"conversation": {"compaction": {"profiles": profiles}, "tools": tools}}))
    };
    vec![
        layer(&mut g, false),
        layer(&mut g, false),
        layer(&mut g, true),
    ]
}

/// The names of the profiles and tools, in order.
fn name_orders(s: &Settings) -> (Vec<String>, Vec<String>) {
    (
        s.conversation.compaction.profiles.keys().cloned().collect(),
        s.conversation.tools.keys().cloned().collect(),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn a_config_parses_to_the_error_of_the_untyped_check(
        choices in prop::collection::vec(any::<u32>(), 0..200),
    ) {
        for config in layers(&choices, 1, true) {
            prop_assert_eq!(Settings::parse(&config).err(), legacy::validate(&config).err());
        }
    }

    #[test]
    fn layers_parse_to_the_error_and_layer_of_the_untyped_check(
        choices in prop::collection::vec(any::<u32>(), 0..400),
        count in 1usize..5,
    ) {
        let layers = layers(&choices, count, true);
        prop_assert_eq!(
            parse_layers(&layers).err(),
            legacy::validate_layers(&layers).err()
        );
    }

    #[test]
    fn of_several_bad_names_the_one_reported_is_the_untyped_checks(
        choices in prop::collection::vec(any::<u32>(), 0..300),
    ) {
        let layers = named_layers(&choices);
        prop_assert_eq!(
            parse_layers(&layers).err(),
            legacy::validate_layers(&layers).err()
        );
    }

    #[test]
    fn merged_settings_are_the_settings_of_the_merged_config(
        choices in prop::collection::vec(any::<u32>(), 0..400),
        count in 1usize..5,
    ) {
        let layers = layers(&choices, count, false);
        let mut merged = Object::new();
        for layer in &layers {
            merge(&mut merged, layer);
        }
        let typed = parse_layers(&layers);
        let whole = Settings::parse(&merged);
        prop_assert!(whole.is_ok() && typed.is_ok(), "{:?} / {:?}", whole, typed);
        let (typed, whole) = (typed.expect("checked"), whole.expect("checked"));
        prop_assert_eq!(name_orders(&typed), name_orders(&whole));
        prop_assert_eq!(&typed, &whole);
        // And back through their JSON.
        let value = serde_json::to_value(&typed).expect("serialize");
        let back = serde_json::from_value::<Settings>(value).expect("deserialize");
        prop_assert_eq!(name_orders(&back), name_orders(&typed));
        prop_assert_eq!(back, typed);
    }
}
