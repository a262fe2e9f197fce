//! The one check of the settings jp-store reads from a config
//! (format-spec.md 4.5): compaction (default profile, `keep_last`,
//! profiles and their summary tables, automatic compaction), per-tool
//! compaction hints and deduplication switches, deduplication, and the
//! provider options (model, `max_tokens`, system prompt).
//!
//! Every path that stores a config or a config delta runs it first (`new`
//! and `fork` through the workspace config and [`crate::Store::create`],
//! `import` on JP's files, `append` on each `config_delta`), and readers run
//! it over the layers a conversation's config is made of, so a value of the
//! wrong type is reported with the place it lives in rather than as a bare
//! key when the setting is first used.
//!
//! Only types (and the ranges the readers need) are checked, key by key:
//! the check of a sparse config delta alone is the same as that of a whole
//! config. A `null` is of the wrong type except where a reader treats it as
//! unset (the keys of a summary table). Keys jp-store does not read are not
//! looked at.

use serde_json::Value;

use crate::config::json_kind;

/// A JSON object (the same type as `crate::event::Object`, named here so the
/// config layer does not import the event model above it).
type Object = serde_json::Map<String, serde_json::Value>;

pub use crate::config::settings::{BadSetting, SettingPlace, MAX_SUMMARY_TIMEOUT_SECS};

/// Checks every setting jp-store reads that `config` holds.
pub fn validate(config: &Object) -> Result<(), BadSetting> {
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
                                || v.as_u64()
                                    .is_some_and(|s| (1..=MAX_SUMMARY_TIMEOUT_SECS).contains(&s))
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
        c.leaf(assistant, "system_prompt", "a string", is_string)?;
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
pub fn validate_layers<'a>(
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
pub fn holds(config: &Object, path: &[String]) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Object {
        match v {
            Value::Object(o) => o,
            _ => panic!("not an object"),
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
            let err = validate(&obj(config.clone())).expect_err(&config.to_string());
            assert_eq!(err.key(), key, "{config}");
        }
    }

    #[test]
    fn good_and_unknown_settings_pass() {
        let good = json!({
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
        });
        assert_eq!(validate(&obj(good)), Ok(()));
    }

    #[test]
    fn layers_name_the_one_the_bad_value_comes_from() {
        let workspace = obj(json!({"conversation": {"deduplication": {"min_bytes": 5}}}));
        let base = obj(json!({"conversation": {"deduplication": {"enabled": "no"}}}));
        let delta = obj(json!({"conversation": {"deduplication": {"min_bytes": 9}}}));
        let (from, bad) = validate_layers([&workspace, &delta, &base]).expect_err("bad");
        assert_eq!(
            (from, bad.key().as_str()),
            (2, "conversation.deduplication.enabled")
        );
        let fix = obj(json!({"conversation": {"deduplication": {"enabled": true}}}));
        assert!(validate_layers([&workspace, &fix, &delta]).is_ok());
    }
}
