//! The settings jp-store reads from a config (format-spec.md 4.5), typed:
//! compaction (default profile, `keep_last`, profiles with their reasoning,
//! tool call and summary settings, automatic compaction), per-tool
//! compaction hints and deduplication switches, deduplication, and the
//! assistant's model, `max_tokens` and system prompt. Each key is defined
//! here and nowhere else; field names are JP's key names.
//!
//! A config stays a JSON object: that is what is stored, merged and
//! exported, and keys jp-store does not read are kept in it. [`Settings`]
//! is derived from it by one walk ([`Settings::parse`],
//! [`Settings::merge_layer`], in `settings/parse.rs`) that builds the typed
//! values and checks them at once: a value of the wrong type is a
//! [`BadSetting`] naming its key, what it must be and what was found.
//!
//! What jp-store's users write is checked before it is used or stored
//! (`config.toml` and a base config given to [`crate::Store::create`]:
//! [`Settings::parse`], naming the place ([`SettingPlace`]); `append`'s
//! config deltas, naming line, entry and field). What is stored already, or
//! comes from another tool's files (a JP import, an NDJSON stream), is read
//! leniently ([`Settings::merge_layer_lenient`]): a setting of the wrong
//! type is not applied and never stops a conversation; import names each
//! one once.
//!
//! `assistant.system_prompt` is JP's mergeable string: a string, or a table
//! that appends to, prepends to or replaces the prompt before it
//! (`settings/prompt.rs`), merged layer over layer as JP merges it.
//!
//! Only types (and the ranges the readers need) are checked, key by key: a
//! sparse config delta parses alone exactly as it would inside a whole
//! config. A `null` is of the wrong type except where a reader treats it as
//! unset (the keys of a summary table). Each field holds what the config
//! says, `None` (or an empty map) where it says nothing; the defaults are
//! the readers' (`compaction`, `dedup`, the provider requests of the
//! integrations crate).

use std::fmt;

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

mod parse;
pub(crate) mod prompt;

/// A JSON object (the same type as `crate::event::Object`, named here so the
/// config layer does not import the event model above it).
type Object = serde_json::Map<String, Value>;

/// The version of what [`Settings`] holds and of how a config is read into
/// it: bumped with every change of either, so that settings cached by a
/// build of another version (in a conversation's head cache,
/// format-spec.md 4.6) are computed again rather than used.
pub(crate) const SETTINGS_VERSION: u32 = 2;

/// Longest `timeout_secs` of a summary table (a day), as the summarizer
/// accepts.
pub(crate) const MAX_SUMMARY_TIMEOUT_SECS: u64 = 86_400;

/// Every setting jp-store reads from a config.
///
/// Serializes to the JSON of a config holding exactly these settings (JP's
/// key names); deserializes through [`Settings::parse`], so the same checks
/// apply and an error names the key.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Settings {
    /// `conversation`.
    pub conversation: ConversationSettings,
    /// `assistant`.
    pub assistant: AssistantSettings,
}

/// `conversation`: compaction, tools and deduplication.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ConversationSettings {
    /// `conversation.compaction`.
    pub compaction: CompactionSettings,
    /// `conversation.tools.<name>`, by tool name, in the order of the config
    /// (as merged).
    pub tools: IndexMap<String, ToolSettings>,
    /// `conversation.deduplication`.
    pub deduplication: DeduplicationSettings,
}

/// `conversation.compaction`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CompactionSettings {
    /// `default_profile`: the profile a compaction naming none uses.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_profile: Option<String>,
    /// `keep_last`: the most recent turns a compaction leaves untouched.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep_last: Option<u64>,
    /// `profiles.<name>`, by profile name, in the order of the config (as
    /// merged).
    pub profiles: IndexMap<String, ProfileSettings>,
    /// `auto`: automatic compaction (D17).
    pub auto: AutoCompactionSettings,
}

/// `conversation.compaction.profiles.<name>`: what a profile does to the
/// turns it covers.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ProfileSettings {
    /// `reasoning`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<ReasoningPolicy>,
    /// `tool_calls`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<ToolCallsSetting>,
    /// `summary`: present (even empty) when the profile replaces the turns
    /// with a summary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary: Option<SummaryTable>,
}

/// `reasoning` of a profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningPolicy {
    /// `"strip"`: the reasoning is dropped.
    Strip,
    /// `"keep"`: the reasoning stays.
    Keep,
}

/// `tool_calls` of a profile: a word, or a table.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ToolCallsSetting {
    /// `"strip"`, `"omit"` or `"keep"`.
    Preset(ToolCallsPreset),
    /// `{policy, request, response}`.
    Table(ToolCallsTable),
}

/// `tool_calls` of a profile given as a word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallsPreset {
    /// `"strip"`: arguments emptied and results replaced by a status line.
    Strip,
    /// `"omit"`: requests and responses dropped.
    Omit,
    /// `"keep"`: tool calls stay as they are.
    Keep,
}

/// `tool_calls` of a profile given as a table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolCallsTable {
    /// `policy`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<ToolCallsPolicy>,
    /// `request`: whether `strip` empties the arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<bool>,
    /// `response`: whether `strip` replaces the results.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<bool>,
}

/// `policy` of a `tool_calls` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolCallsPolicy {
    /// `"strip"`.
    Strip,
    /// `"omit"`.
    Omit,
}

/// `summary` of a profile: where its summary comes from (read by the
/// integrations crate's summarizer). A key given as `null` is unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SummaryTable {
    /// `command`: a shell command printing the summary (never empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// `endpoint`: the URL of an OpenAI-compatible chat completions endpoint
    /// (never empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// `model`: the model the endpoint is asked for (never empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `api_key_env`: the environment variable holding the endpoint's API
    /// key (never empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_env: Option<String>,
    /// `instructions`: the system prompt of the endpoint (never empty).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// `timeout_secs`: 1 to `MAX_SUMMARY_TIMEOUT_SECS`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
}

/// `conversation.compaction.auto`: automatic compaction (D17).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AutoCompactionSettings {
    /// `enabled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `trigger_ratio`: a number > 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger_ratio: Option<f64>,
    /// `profile`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// `min_turns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_turns: Option<u64>,
    /// `context_window`, in tokens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

/// `conversation.tools.<name>`: what jp-store reads of a tool's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolSettings {
    /// `compaction`: hints overriding a profile's tool call policy.
    pub compaction: ToolCompactionHints,
    /// `deduplicate`: `false` delivers this tool's results in full.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deduplicate: Option<bool>,
}

/// `conversation.tools.<name>.compaction`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolCompactionHints {
    /// `request`: the call's arguments.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<ToolFieldHint>,
    /// `response`: the call's result.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<ToolFieldHint>,
}

/// A per-tool compaction hint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolFieldHint {
    /// `"keep"`.
    Keep,
    /// `"strip"`.
    Strip,
}

/// `conversation.deduplication` (RFD 067).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeduplicationSettings {
    /// `enabled`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    /// `min_bytes`: only larger resources are replaced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_bytes: Option<u64>,
    /// `lookback_turns`: how many turns back an earlier delivery may be.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lookback_turns: Option<u64>,
}

/// `assistant`: what provider requests are sent with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AssistantSettings {
    /// `system_prompt`: the text, merged layer over layer as JP merges it
    /// (a string replaces; a table appends, prepends or replaces:
    /// format-spec.md 4.5).
    pub system_prompt: Option<String>,
    /// Whether the next layer that sets a system prompt drops this one,
    /// whatever its strategy (JP's `discard_when_merged`).
    pub system_prompt_discarded_when_merged: bool,
    /// Whether a layer set the system prompt with a table that left no
    /// text (`system_prompt` is then `None`).
    pub(crate) system_prompt_without_text: bool,
    /// `model`.
    pub model: ModelSettings,
}

impl AssistantSettings {
    /// The system prompt as merged so far.
    fn prompt(&self) -> prompt::MergedPrompt {
        prompt::MergedPrompt {
            value: self.system_prompt.clone(),
            discard_when_merged: self.system_prompt_discarded_when_merged,
            given: self.system_prompt.is_some() || self.system_prompt_without_text,
        }
    }

    /// Merges one layer's `system_prompt` over the prompt so far.
    fn merge_system_prompt(&mut self, layer: prompt::PromptLayer) {
        let mut merged = self.prompt();
        merged.merge(layer);
        self.system_prompt_without_text = merged.given && merged.value.is_none();
        self.system_prompt = merged.value;
        self.system_prompt_discarded_when_merged = merged.discard_when_merged;
    }
}

impl Serialize for AssistantSettings {
    /// `system_prompt` (a string; a table when it is discarded when merged)
    /// and `model`, as a config that parses back to these settings.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let prompt = self.prompt().to_value();
        let mut map = serializer.serialize_map(None)?;
        if let Some(prompt) = prompt {
            map.serialize_entry("system_prompt", &prompt)?;
        }
        map.serialize_entry("model", &self.model)?;
        map.end()
    }
}

/// `assistant.model`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ModelSettings {
    /// `id`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<ModelId>,
    /// `context_window`, in tokens (automatic compaction's fallback).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// `parameters`.
    pub parameters: ModelParameters,
}

/// `assistant.model.id`: JP writes either form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum ModelId {
    /// A string `provider/model` (`anthropic/claude-sonnet-4`), or a bare
    /// model name.
    Joined(String),
    /// A table `{provider, name}`.
    Parts(ModelIdParts),
}

/// `assistant.model.id` given as a table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ModelIdParts {
    /// `provider`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// `name`: the model as the provider knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `assistant.model.parameters`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ModelParameters {
    /// `max_tokens`: 1 to 2³² − 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
}

impl Settings {
    /// The settings a config holds (a whole config or a sparse delta),
    /// checked: a value of the wrong type is the first [`BadSetting`] in the
    /// order of format-spec.md 4.5's table. For what jp-store's users write
    /// (`config.toml`, a base config given to `new`, `append`'s config
    /// deltas).
    pub fn parse(config: &Object) -> Result<Settings, BadSetting> {
        let mut settings = Settings::default();
        settings.merge_layer(config)?;
        Ok(settings)
    }

    /// Merges the settings of `layer` over these, as
    /// [`crate::config::merge`] merges `layer` over the config these
    /// settings come from (tables merge key by key, any other value
    /// replaces; a `null` in a summary table unsets the key; a system
    /// prompt merges by its strategy), checking `layer` as
    /// [`Settings::parse`] does.
    ///
    /// A bad setting is reported as it would be in the merged config: when
    /// a layer holds several, the one reported is the first in the merged
    /// config's order (profiles and tools already known come in their
    /// earlier order). On error `self` holds `layer`'s other settings:
    /// discard it.
    pub(crate) fn merge_layer(&mut self, layer: &Object) -> Result<(), BadSetting> {
        match self.merge_layer_lenient(layer).into_iter().next() {
            None => Ok(()),
            Some(bad) => Err(bad),
        }
    }

    /// [`Settings::merge_layer`] for a config that is stored already, or
    /// that comes from another tool's files: every setting of `layer` of the
    /// right type is merged, and those of the wrong type are returned, in
    /// the order `merge_layer` would report them, and not applied (these
    /// settings keep the value they had).
    pub(crate) fn merge_layer_lenient(&mut self, layer: &Object) -> Vec<BadSetting> {
        let mut walk = parse::Walk::new();
        walk.settings(self, layer);
        walk.into_bad()
    }

    /// Ends the layers of a conversation's base config: JP holds a
    /// conversation's base config as a finished config, so a system prompt
    /// that the next one would drop whatever its strategy
    /// (`discard_when_merged`) is, from here on, text like any other, and
    /// one set by a table that left no text is the empty text.
    pub(crate) fn finish_base(&mut self) {
        let a = &mut self.assistant;
        a.system_prompt_discarded_when_merged = false;
        if a.system_prompt_without_text {
            a.system_prompt = Some(String::new());
            a.system_prompt_without_text = false;
        }
    }
}

/// The settings of `layers` merged in order (format-spec.md 4.5:
/// `layers[0]`, then each later one merged over it). On a bad setting, the
/// index of the layer it comes from and the setting. A value that a later
/// layer replaces is still reported, since readers see the config after
/// every layer (deduplication follows deltas event by event).
#[cfg(test)]
pub(crate) fn parse_layers<'a>(
    layers: impl IntoIterator<Item = &'a Object>,
) -> Result<Settings, (usize, BadSetting)> {
    let mut settings = Settings::default();
    for (index, layer) in layers.into_iter().enumerate() {
        settings.merge_layer(layer).map_err(|bad| (index, bad))?;
    }
    Ok(settings)
}

/// Every setting of `layers` (merged in order, as [`parse_layers`] merges
/// them) that is not applied, with the index of the layer that holds it:
/// what [`Settings::merge_layer_lenient`] leaves out of each.
pub(crate) fn settings_not_applied<'a>(
    layers: impl IntoIterator<Item = &'a Object>,
) -> Vec<(usize, BadSetting)> {
    let mut settings = Settings::default();
    let mut bad = Vec::new();
    for (index, layer) in layers.into_iter().enumerate() {
        bad.extend(
            settings
                .merge_layer_lenient(layer)
                .into_iter()
                .map(|b| (index, b)),
        );
    }
    bad
}

impl<'de> Deserialize<'de> for Settings {
    /// A JSON object read by [`Settings::parse`]: a bad setting is an error
    /// naming its key.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let config = Object::deserialize(deserializer)?;
        Settings::parse(&config).map_err(serde::de::Error::custom)
    }
}

/// A setting of the wrong type: its key, what it must be, what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadSetting {
    /// The key's path, one segment per table (a profile or tool name may
    /// hold a dot).
    pub path: Vec<String>,
    /// What the setting must be.
    pub expected: &'static str,
    /// What was found: the kind of JSON value and an excerpt of it.
    pub found: String,
}

impl BadSetting {
    /// The key as dotted TOML (segments that are not bare keys quoted).
    pub fn key(&self) -> String {
        let mut out = String::new();
        for (i, segment) in self.path.iter().enumerate() {
            if i > 0 {
                out.push('.');
            }
            let bare = !segment.is_empty()
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            if bare {
                out.push_str(segment);
            } else {
                out.push_str(&Value::String(segment.clone()).to_string());
            }
        }
        out
    }
}

impl fmt::Display for BadSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "setting `{}` must be {}, found {}",
            self.key(),
            self.expected,
            self.found
        )
    }
}

impl std::error::Error for BadSetting {}

/// Where a config with a bad setting lives: one that a user wrote for
/// jp-store, which checks it before it is used or stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettingPlace {
    /// The workspace config file, at the line of the key when it is known.
    WorkspaceFile {
        /// The file (`config.toml`).
        path: std::path::PathBuf,
        /// 1-based line of the key.
        line: Option<usize>,
    },
    /// A base config given to [`crate::Store::create`].
    GivenBaseConfig,
}

impl fmt::Display for SettingPlace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingPlace::WorkspaceFile {
                path,
                line: Some(line),
            } => {
                write!(f, "{}:{line}", path.display())
            }
            SettingPlace::WorkspaceFile { path, line: None } => write!(f, "{}", path.display()),
            SettingPlace::GivenBaseConfig => f.write_str("the base config given"),
        }
    }
}

#[cfg(test)]
mod tests;
