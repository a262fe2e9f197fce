//! `assistant.system_prompt` as JP writes it: a string, which replaces the
//! prompt before it, or a table that says how it merges with it (JP's
//! `MergeableString` in `jp_config`):
//!
//! ```json
//! {"value": "Be brief.", "strategy": "append", "separator": "paragraph",
//!  "discard_when_merged": false}
//! ```
//!
//! Every key of the table may be missing (or `null`); no other key may be
//! there. `strategy` is `"append"`, `"prepend"` or `"replace"`; `separator`
//! `"none"`, `"space"`, `"line"` or `"paragraph"` (no text, a space, a line
//! break, two line breaks); a prompt `discard_when_merged` is dropped by
//! whatever is merged over it. Merging follows JP's `string_with_strategy`
//! step for step, its corners included: a table without a `strategy` over
//! an earlier prompt leaves no prompt at all.

use serde_json::{Map, Value};

/// What a table's `strategy` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    Append,
    Prepend,
    Replace,
}

/// One config layer's `assistant.system_prompt`, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PromptLayer {
    /// The text (a string's, or the table's `value`).
    value: Option<String>,
    /// `None` for a table without one; a string replaces.
    strategy: Option<Strategy>,
    /// The text between the earlier prompt and this one.
    separator: &'static str,
    /// The table's `discard_when_merged`.
    discard_when_merged: bool,
}

/// The system prompt as merged so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct MergedPrompt {
    /// The text, if any.
    pub(crate) value: Option<String>,
    /// Whether the next layer that sets a prompt drops this one.
    pub(crate) discard_when_merged: bool,
    /// Whether a layer set it (a table may leave no text).
    pub(crate) given: bool,
}

/// What a system prompt must be, for errors.
pub(crate) const EXPECTED: &str = "a string, or a table of `value` (a string), `strategy` \
     (\"append\", \"prepend\" or \"replace\"), `separator` (\"none\", \"space\", \"line\" \
     or \"paragraph\") and `discard_when_merged` (true or false)";

impl PromptLayer {
    /// Reads a layer's value: `None` if it is neither a string nor a table
    /// JP would read as one.
    pub(crate) fn read(v: &Value) -> Option<PromptLayer> {
        match v {
            Value::String(s) => Some(PromptLayer {
                value: Some(s.clone()),
                strategy: Some(Strategy::Replace),
                separator: "",
                discard_when_merged: false,
            }),
            Value::Object(table) => read_table(table),
            _ => None,
        }
    }

    /// Whether the layer is a plain string (JP's `String` form).
    fn replaces(&self) -> bool {
        self.strategy == Some(Strategy::Replace) && !self.discard_when_merged
    }
}

fn read_table(table: &Map<String, Value>) -> Option<PromptLayer> {
    let mut layer = PromptLayer {
        value: None,
        strategy: None,
        separator: "",
        discard_when_merged: false,
    };
    for (key, v) in table {
        if v.is_null() {
            continue;
        }
        match key.as_str() {
            "value" => layer.value = Some(v.as_str()?.to_owned()),
            "strategy" => {
                layer.strategy = Some(match v.as_str()? {
                    "append" => Strategy::Append,
                    "prepend" => Strategy::Prepend,
                    "replace" => Strategy::Replace,
                    _ => return None,
                })
            }
            "separator" => {
                layer.separator = match v.as_str()? {
                    "none" => "",
                    "space" => " ",
                    "line" => "\n",
                    "paragraph" => "\n\n",
                    _ => return None,
                }
            }
            "discard_when_merged" => layer.discard_when_merged = v.as_bool()?,
            _ => return None,
        }
    }
    Some(layer)
}

impl MergedPrompt {
    /// Merges `next` over this prompt as JP does.
    pub(crate) fn merge(&mut self, next: PromptLayer) {
        if self.discard_when_merged || self.value.is_none() {
            // Nothing to merge with (JP keeps the layer as it is), or the
            // prompt before is a default that any other drops.
            *self = MergedPrompt {
                value: next.value,
                discard_when_merged: next.discard_when_merged,
                given: true,
            };
            return;
        }
        let prev = self.value.take();
        let sep = next.separator;
        let value = match (prev, next.value, next.strategy) {
            (_, n, Some(Strategy::Replace)) => n,
            (Some(p), Some(n), Some(Strategy::Append)) => Some(format!("{p}{sep}{n}")),
            (Some(p), Some(n), Some(Strategy::Prepend)) => Some(format!("{n}{sep}{p}")),
            (Some(p), None, _) => Some(p),
            (None, Some(n), _) => Some(n),
            _ => None,
        };
        *self = MergedPrompt {
            value,
            discard_when_merged: next.discard_when_merged,
            given: true,
        };
    }

    /// The prompt as a config value that reads back as this one: a string,
    /// or a table when it is dropped by whatever is merged over it or holds
    /// no text.
    pub(crate) fn to_value(&self) -> Option<Value> {
        match (&self.value, self.discard_when_merged) {
            (Some(v), false) => Some(Value::String(v.clone())),
            (None, false) if self.given => Some(Value::Object(Map::new())),
            (None, false) => None,
            (value, true) => {
                let mut table = Map::new();
                if let Some(v) = value {
                    table.insert("value".into(), Value::String(v.clone()));
                }
                table.insert("discard_when_merged".into(), Value::Bool(true));
                Some(Value::Object(table))
            }
        }
    }
}

/// `next` (a layer's `assistant.system_prompt`) merged over `prev` (the
/// config's so far, if any) as a config value, for [`crate::config::merge`]:
/// a string replaces; a table merges as JP merges it, and the result is the
/// table with its `value` the merged text. `None` when either is not a
/// prompt JP would read (the plain JSON merge applies then).
pub(crate) fn merge_values(prev: Option<&Value>, next: &Value) -> Option<Value> {
    let layer = PromptLayer::read(next)?;
    if layer.replaces() {
        return Some(next.clone());
    }
    let mut merged = match prev {
        None | Some(Value::Null) => MergedPrompt::default(),
        Some(p) => {
            let p = PromptLayer::read(p)?;
            let mut m = MergedPrompt::default();
            m.merge(p);
            m
        }
    };
    merged.merge(layer);
    let Value::Object(mut table) = next.clone() else {
        return Some(next.clone());
    };
    table.remove("value");
    let mut out = Map::new();
    if let Some(v) = merged.value {
        out.insert("value".into(), Value::String(v));
    }
    out.extend(table);
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn merged(layers: &[Value]) -> MergedPrompt {
        let mut m = MergedPrompt::default();
        for l in layers {
            m.merge(PromptLayer::read(l).expect("a prompt"));
        }
        m
    }

    #[test]
    fn strategies_and_separators_merge_as_jp_merges_them() {
        let cases = [
            (vec![json!("foo"), json!("bar")], Some("bar")),
            (
                vec![
                    json!("foo"),
                    json!({"value": "bar", "strategy": "append", "separator": "none"}),
                ],
                Some("foobar"),
            ),
            (
                vec![
                    json!("foo"),
                    json!({"value": "bar", "strategy": "append", "separator": "paragraph"}),
                ],
                Some("foo\n\nbar"),
            ),
            (
                vec![
                    json!("foo"),
                    json!({"value": "bar", "strategy": "prepend", "separator": "space"}),
                ],
                Some("bar foo"),
            ),
            (
                vec![json!("foo"), json!({"value": "bar", "strategy": "replace"})],
                Some("bar"),
            ),
            (vec![json!("foo"), json!({"strategy": "replace"})], None),
            (
                vec![json!("foo"), json!({"strategy": "append"})],
                Some("foo"),
            ),
            // No strategy over an earlier prompt: JP's merge leaves none.
            (vec![json!("foo"), json!({"value": "bar"})], None),
            // Nothing before: the layer as it is, whatever its strategy.
            (
                vec![json!({"value": "bar", "strategy": "prepend", "separator": "line"})],
                Some("bar"),
            ),
            (
                vec![
                    json!({"value": "default", "discard_when_merged": true}),
                    json!({"value": "mine", "strategy": "append"}),
                ],
                Some("mine"),
            ),
            (
                vec![
                    json!({"value": "default", "discard_when_merged": true}),
                    json!({"value": "mine", "strategy": "append"}),
                    json!({"value": "+", "strategy": "append", "separator": "line"}),
                ],
                Some("mine\n+"),
            ),
            (
                vec![json!({"value": "x", "strategy": null, "separator": null})],
                Some("x"),
            ),
        ];
        for (layers, want) in cases {
            assert_eq!(
                merged(&layers).value.as_deref(),
                want,
                "{}",
                Value::Array(layers.clone())
            );
        }
    }

    #[test]
    fn what_jp_would_not_read_is_no_prompt() {
        for v in [
            json!(1),
            json!(["a"]),
            json!(true),
            json!({"value": 1}),
            json!({"value": "x", "strategy": "merge"}),
            json!({"value": "x", "separator": "tab"}),
            json!({"value": "x", "discard_when_merged": "yes"}),
            json!({"value": "x", "extra": 1}),
        ] {
            assert_eq!(PromptLayer::read(&v), None, "{v}");
        }
    }

    #[test]
    fn a_merged_prompt_written_as_a_value_reads_back_the_same() {
        for m in [
            MergedPrompt::default(),
            MergedPrompt {
                value: Some("x".into()),
                discard_when_merged: false,
                given: true,
            },
            MergedPrompt {
                value: Some("x".into()),
                discard_when_merged: true,
                given: true,
            },
            MergedPrompt {
                value: None,
                discard_when_merged: true,
                given: true,
            },
            MergedPrompt {
                value: None,
                discard_when_merged: false,
                given: true,
            },
        ] {
            let back = match m.to_value() {
                None => MergedPrompt::default(),
                Some(v) => merged(&[v]),
            };
            assert_eq!(back, m);
        }
    }

    #[test]
    fn values_merge_to_a_table_holding_the_merged_text() {
        assert_eq!(
            merge_values(
                Some(&json!("foo")),
                &json!({"strategy": "append", "value": "bar", "separator": "space"})
            ),
            Some(json!({"value": "foo bar", "strategy": "append", "separator": "space"}))
        );
        assert_eq!(
            merge_values(Some(&json!("foo")), &json!("bar")),
            Some(json!("bar"))
        );
        assert_eq!(
            merge_values(None, &json!({"value": "bar", "strategy": "append"})),
            Some(json!({"value": "bar", "strategy": "append"}))
        );
        assert_eq!(merge_values(Some(&json!(5)), &json!({"value": "x"})), None);
        assert_eq!(merge_values(Some(&json!("x")), &json!(5)), None);
    }
}
