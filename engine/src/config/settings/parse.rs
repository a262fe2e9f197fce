//! The walk of a config layer that builds [`Settings`] and checks them:
//! each table of format-spec.md 4.5 in the order of its table, each key read
//! into its typed field (merged over what earlier layers set). A value of the
//! wrong type is not applied: it is a [`BadSetting`] with its path, kept in
//! the order the walk meets them, and the walk goes on.

use indexmap::IndexMap;
use serde_json::Value;

use super::prompt::{self, PromptLayer};
use super::{
    AssistantSettings, AutoCompactionSettings, BadSetting, CompactionSettings,
    ConversationSettings, DeduplicationSettings, ModelId, ModelIdParts, ModelParameters,
    ModelSettings, Object, ProfileSettings, ReasoningPolicy, Settings, SummaryTable,
    ToolCallsPolicy, ToolCallsPreset, ToolCallsSetting, ToolCallsTable, ToolCompactionHints,
    ToolFieldHint, ToolSettings, MAX_SUMMARY_TIMEOUT_SECS,
};
use crate::config::json_kind;

/// Walks a config layer, keeping the path of the table it is in and the
/// settings it could not apply.
pub(super) struct Walk {
    path: Vec<String>,
    bad: Vec<BadSetting>,
}

impl Walk {
    pub(super) fn new() -> Walk {
        Walk {
            path: Vec::new(),
            bad: Vec::new(),
        }
    }

    /// The settings not applied, in the order the walk met them.
    pub(super) fn into_bad(self) -> Vec<BadSetting> {
        self.bad
    }

    /// Merges the top-level tables of `layer` into `settings`.
    pub(super) fn settings(&mut self, settings: &mut Settings, layer: &Object) {
        self.table(layer, "conversation", |w, t| {
            w.conversation(&mut settings.conversation, t)
        });
        self.table(layer, "assistant", |w, t| {
            w.assistant(&mut settings.assistant, t)
        });
    }

    fn conversation(&mut self, s: &mut ConversationSettings, t: &Object) {
        self.table(t, "compaction", |w, t| w.compaction(&mut s.compaction, t));
        self.each(t, "tools", &mut s.tools, Walk::tool);
        self.table(t, "deduplication", |w, t| {
            w.deduplication(&mut s.deduplication, t)
        })
    }

    fn compaction(&mut self, s: &mut CompactionSettings, t: &Object) {
        self.leaf(
            t,
            "default_profile",
            "a string",
            &mut s.default_profile,
            string,
        );
        self.leaf(
            t,
            "keep_last",
            "an integer >= 0",
            &mut s.keep_last,
            Value::as_u64,
        );
        self.each(t, "profiles", &mut s.profiles, Walk::profile);
        self.table(t, "auto", |w, t| w.auto(&mut s.auto, t))
    }

    fn profile(&mut self, s: &mut ProfileSettings, t: &Object) {
        self.leaf(
            t,
            "reasoning",
            "\"strip\" or \"keep\"",
            &mut s.reasoning,
            |v| match v.as_str()? {
                "strip" => Some(ReasoningPolicy::Strip),
                "keep" => Some(ReasoningPolicy::Keep),
                _ => None,
            },
        );
        match t.get("tool_calls") {
            None => {}
            Some(Value::Object(table)) => {
                // A table merges over a table, and replaces a word.
                if !matches!(s.tool_calls, Some(ToolCallsSetting::Table(_))) {
                    s.tool_calls = Some(ToolCallsSetting::Table(ToolCallsTable::default()));
                }
                if let Some(ToolCallsSetting::Table(merged)) = &mut s.tool_calls {
                    self.within("tool_calls", |w| w.tool_calls_table(merged, table));
                }
            }
            Some(v) => {
                let preset = match v.as_str() {
                    Some("strip") => Some(ToolCallsPreset::Strip),
                    Some("omit") => Some(ToolCallsPreset::Omit),
                    Some("keep") => Some(ToolCallsPreset::Keep),
                    _ => None,
                };
                match preset {
                    Some(preset) => s.tool_calls = Some(ToolCallsSetting::Preset(preset)),
                    None => self.bad("tool_calls", "\"strip\", \"omit\", \"keep\" or a table", v),
                }
            }
        }
        self.table(t, "summary", |w, t| {
            w.summary(s.summary.get_or_insert_with(SummaryTable::default), t)
        })
    }

    fn tool_calls_table(&mut self, s: &mut ToolCallsTable, t: &Object) {
        self.leaf(
            t,
            "policy",
            "\"strip\" or \"omit\"",
            &mut s.policy,
            |v| match v.as_str()? {
                "strip" => Some(ToolCallsPolicy::Strip),
                "omit" => Some(ToolCallsPolicy::Omit),
                _ => None,
            },
        );
        self.leaf(
            t,
            "request",
            "true or false",
            &mut s.request,
            Value::as_bool,
        );
        self.leaf(
            t,
            "response",
            "true or false",
            &mut s.response,
            Value::as_bool,
        )
    }

    fn summary(&mut self, s: &mut SummaryTable, t: &Object) {
        for (key, slot) in [
            ("command", &mut s.command),
            ("endpoint", &mut s.endpoint),
            ("model", &mut s.model),
            ("api_key_env", &mut s.api_key_env),
            ("instructions", &mut s.instructions),
        ] {
            self.nullable_leaf(t, key, "a non-empty string", slot, |v| {
                v.as_str()
                    .filter(|s| !s.trim().is_empty())
                    .map(str::to_owned)
            });
        }
        self.nullable_leaf(
            t,
            "timeout_secs",
            "a whole number of seconds from 1 to 86400",
            &mut s.timeout_secs,
            |v| {
                v.as_u64()
                    .filter(|s| (1..=MAX_SUMMARY_TIMEOUT_SECS).contains(s))
            },
        )
    }

    fn auto(&mut self, s: &mut AutoCompactionSettings, t: &Object) {
        self.leaf(
            t,
            "enabled",
            "true or false",
            &mut s.enabled,
            Value::as_bool,
        );
        self.leaf(
            t,
            "trigger_ratio",
            "a number > 0",
            &mut s.trigger_ratio,
            |v| v.as_f64().filter(|r| *r > 0.0),
        );
        self.leaf(t, "profile", "a string", &mut s.profile, string);
        self.leaf(
            t,
            "min_turns",
            "an integer >= 0",
            &mut s.min_turns,
            Value::as_u64,
        );
        self.leaf(
            t,
            "context_window",
            "an integer >= 0",
            &mut s.context_window,
            Value::as_u64,
        )
    }

    fn tool(&mut self, s: &mut ToolSettings, t: &Object) {
        self.table(t, "compaction", |w, t| w.tool_hints(&mut s.compaction, t));
        self.leaf(
            t,
            "deduplicate",
            "true or false",
            &mut s.deduplicate,
            Value::as_bool,
        )
    }

    fn tool_hints(&mut self, s: &mut ToolCompactionHints, t: &Object) {
        for (key, slot) in [("request", &mut s.request), ("response", &mut s.response)] {
            self.leaf(t, key, "\"keep\" or \"strip\"", slot, |v| {
                match v.as_str()? {
                    "keep" => Some(ToolFieldHint::Keep),
                    "strip" => Some(ToolFieldHint::Strip),
                    _ => None,
                }
            });
        }
    }

    fn deduplication(&mut self, s: &mut DeduplicationSettings, t: &Object) {
        self.leaf(
            t,
            "enabled",
            "true or false",
            &mut s.enabled,
            Value::as_bool,
        );
        self.leaf(
            t,
            "min_bytes",
            "an integer >= 0",
            &mut s.min_bytes,
            Value::as_u64,
        );
        self.leaf(
            t,
            "lookback_turns",
            "an integer >= 0",
            &mut s.lookback_turns,
            Value::as_u64,
        );
    }

    fn assistant(&mut self, s: &mut AssistantSettings, t: &Object) {
        if let Some(v) = t.get("system_prompt") {
            match PromptLayer::read(v) {
                Some(layer) => s.merge_system_prompt(layer),
                None => self.bad("system_prompt", prompt::EXPECTED, v),
            }
        }
        self.table(t, "model", |w, t| w.model(&mut s.model, t));
    }

    fn model(&mut self, s: &mut ModelSettings, t: &Object) {
        match t.get("id") {
            None => {}
            Some(Value::Object(table)) => {
                // A table merges over a table, and replaces a string.
                if !matches!(s.id, Some(ModelId::Parts(_))) {
                    s.id = Some(ModelId::Parts(ModelIdParts::default()));
                }
                if let Some(ModelId::Parts(merged)) = &mut s.id {
                    self.within("id", |w| {
                        w.leaf(table, "provider", "a string", &mut merged.provider, string);
                        w.leaf(table, "name", "a string", &mut merged.name, string);
                    });
                }
            }
            Some(Value::String(id)) => s.id = Some(ModelId::Joined(id.clone())),
            Some(v) => self.bad(
                "id",
                "a string (provider/model) or a table with a `name`",
                v,
            ),
        }
        self.leaf(
            t,
            "context_window",
            "an integer >= 0",
            &mut s.context_window,
            Value::as_u64,
        );
        self.table(t, "parameters", |w, t| w.parameters(&mut s.parameters, t));
    }

    fn parameters(&mut self, s: &mut ModelParameters, t: &Object) {
        self.leaf(
            t,
            "max_tokens",
            "an integer from 1 to 4294967295",
            &mut s.max_tokens,
            |v| {
                v.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|n| *n >= 1)
            },
        );
    }

    // ----- the steps of the walk ---------------------------------------------

    /// `key` (in the table the walk is in) holds `found`, which is not
    /// `expected`: not applied, and noted.
    fn bad(&mut self, key: &str, expected: &'static str, found: &Value) {
        let mut path = self.path.clone();
        path.push(key.to_owned());
        self.bad.push(BadSetting {
            path,
            expected,
            found: describe(found),
        });
    }

    /// `key` of `parent`, when present, into `slot` as `convert` reads it;
    /// a value it refuses is a bad setting, and `slot` keeps what it held.
    fn leaf<T>(
        &mut self,
        parent: &Object,
        key: &str,
        expected: &'static str,
        slot: &mut Option<T>,
        convert: impl FnOnce(&Value) -> Option<T>,
    ) {
        if let Some(v) = parent.get(key) {
            match convert(v) {
                Some(value) => *slot = Some(value),
                None => self.bad(key, expected, v),
            }
        }
    }

    /// [`Walk::leaf`] of a key that `null` unsets.
    fn nullable_leaf<T>(
        &mut self,
        parent: &Object,
        key: &str,
        expected: &'static str,
        slot: &mut Option<T>,
        convert: impl FnOnce(&Value) -> Option<T>,
    ) {
        match parent.get(key) {
            Some(Value::Null) => *slot = None,
            _ => self.leaf(parent, key, expected, slot, convert),
        }
    }

    /// `key` of `parent`, when present, is a table that `inner` reads.
    fn table(&mut self, parent: &Object, key: &str, inner: impl FnOnce(&mut Walk, &Object)) {
        match parent.get(key) {
            None => {}
            Some(Value::Object(table)) => self.within(key, |w| inner(w, table)),
            Some(v) => self.bad(key, "a table", v),
        }
    }

    /// `key` of `parent`, when present, is a table of named tables
    /// (profiles, tools), each read by `inner` into its entry of `named`
    /// (created at the end when new, as a JSON merge appends a new key).
    ///
    /// The names are walked in the order of the merged config: those
    /// `named` holds already in their order there, then the new ones in the
    /// order of `parent`. So when the layer holds bad settings under several
    /// names, the first noted is the one a walk of the merged config meets
    /// first.
    fn each<T: Default>(
        &mut self,
        parent: &Object,
        key: &str,
        named: &mut IndexMap<String, T>,
        inner: impl Fn(&mut Walk, &mut T, &Object),
    ) {
        self.table(parent, key, |w, layer| {
            let mut items: Vec<(&String, &Value)> = layer.iter().collect();
            // Stable: new names keep the layer's order, after the others.
            items.sort_by_key(|(name, _)| named.get_index_of(name.as_str()).unwrap_or(usize::MAX));
            for (name, item) in items {
                match item {
                    Value::Object(table) => w.within(name, |w| {
                        inner(w, named.entry(name.clone()).or_default(), table)
                    }),
                    v => w.bad(name, "a table", v),
                }
            }
        })
    }

    fn within(&mut self, key: &str, f: impl FnOnce(&mut Walk)) {
        self.path.push(key.to_owned());
        f(self);
        self.path.pop();
    }
}

fn string(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
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
