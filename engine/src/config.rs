//! Configuration objects: merging, parsing and canonical bytes; the typed
//! settings jp-store reads from them ([`settings`]).
//!
//! A config is a JSON object (`serde_json::Map<String, Value>`), usually
//! sparse. A conversation's config is its base config with every
//! `config_delta` merged over it in order ([`merge`], [`config_after`]).
//! Keys the engine does not know are always kept. The workspace config file
//! is TOML ([`parse_workspace_toml`], [`WORKSPACE_CONFIG_TEMPLATE`]); configs
//! stored as blobs use [`canonical_bytes`] so that equal configs share one
//! blob, and are read back with [`parse_config_json`]. What jp-store reads
//! of a config is its [`Settings`], parsed (and checked) from the JSON
//! object, which stays what is stored.

use std::path::{Path, PathBuf};

use serde_json::{Map, Number, Value};

pub(crate) mod settings;

pub(crate) use settings::SETTINGS_VERSION;
pub use settings::{BadSetting, SettingPlace, Settings};

/// Why a config could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A TOML file is not valid TOML.
    #[error("{}:{line}:{column}: invalid TOML: {message}", path.display())]
    TomlSyntax {
        /// The file.
        path: PathBuf,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error, in characters.
        column: usize,
        /// What the TOML parser expected and found there.
        message: String,
    },
    /// A TOML file was rejected at no particular position.
    #[error("{}: invalid TOML: {message}", path.display())]
    Toml {
        /// The file.
        path: PathBuf,
        /// What the TOML parser reports.
        message: String,
    },
    /// A TOML float has no JSON equivalent.
    #[error("{}: key `{key}`: expected a finite number (JSON has no NaN or infinity), found {found}", path.display())]
    NonFiniteFloat {
        /// The file.
        path: PathBuf,
        /// The dotted key path of the value (array items as `[index]`).
        key: String,
        /// The value found.
        found: f64,
    },
    /// Bytes are not valid JSON.
    #[error("{what}: invalid JSON at line {line}, column {column}: {message}")]
    Json {
        /// What was being read (a file name, `config blob <hash>`, ...).
        what: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// serde_json's description of the error.
        message: String,
    },
    /// Valid JSON, but not an object.
    #[error("{what}: expected a JSON object, found {found}")]
    NotAnObject {
        /// What was being read.
        what: String,
        /// The kind of JSON value found ("array", "string", "null", ...).
        found: &'static str,
    },
}

/// Merges `delta` over `base`: where both hold an object the merge recurses
/// key by key; any other value in `delta` (including null, arrays, scalars)
/// replaces the one in `base`; keys only in `base` stay. The one exception
/// is `assistant.system_prompt`, one value for JP (its mergeable string):
/// given as a table it is merged with the prompt before it by its strategy,
/// and the result is that table with its `value` the merged text; any other
/// value replaces (format-spec.md 4.5).
///
/// Keys new to `base` are appended after its existing keys.
pub(crate) fn merge(base: &mut Map<String, Value>, delta: &Map<String, Value>) {
    merge_in(base, delta, Table::Top);
}

/// Which table of a config [`merge_in`] merges.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Table {
    Top,
    Assistant,
    Other,
}

fn merge_in(base: &mut Map<String, Value>, delta: &Map<String, Value>, table: Table) {
    for (key, value) in delta {
        if table == Table::Assistant && key == "system_prompt" {
            // One value for JP, never merged key by key: what is not a
            // prompt replaces like any other value.
            let merged = settings::prompt::merge_values(base.get(key), value);
            base.insert(key.clone(), merged.unwrap_or_else(|| value.clone()));
            continue;
        }
        if let (Some(Value::Object(inner)), Value::Object(inner_delta)) = (base.get_mut(key), value)
        {
            let next = match (table, key.as_str()) {
                (Table::Top, "assistant") => Table::Assistant,
                _ => Table::Other,
            };
            merge_in(inner, inner_delta, next);
            continue;
        }
        base.insert(key.clone(), value.clone());
    }
}

/// The config in effect after `deltas`, applied in order over `base` (a
/// copy).
pub(crate) fn config_after<'a>(
    base: &Map<String, Value>,
    deltas: impl IntoIterator<Item = &'a Map<String, Value>>,
) -> Map<String, Value> {
    let mut config = base.clone();
    for delta in deltas {
        merge(&mut config, delta);
    }
    config
}

/// Parses a workspace config file (TOML) into a JSON object. TOML datetimes
/// become their RFC 3339 string; integers stay integers, floats floats.
/// `path` is only used in errors.
///
/// Key order follows the file. A NaN or infinite float is an error, since
/// JSON cannot hold it.
pub(crate) fn parse_workspace_toml(
    text: &str,
    path: &Path,
) -> Result<Map<String, Value>, ConfigError> {
    let table: toml::Table = text.parse().map_err(|err: toml::de::Error| {
        let message = err.message().to_string();
        match err.span() {
            Some(span) => {
                let (line, column) = line_column(text, span.start);
                ConfigError::TomlSyntax {
                    path: path.to_path_buf(),
                    line,
                    column,
                    message,
                }
            }
            None => ConfigError::Toml {
                path: path.to_path_buf(),
                message,
            },
        }
    })?;
    let mut key = String::new();
    toml_table_to_json(table, &mut key, path)
}

/// Canonical bytes of a config stored as a blob: compact JSON
/// (`serde_json::to_vec`) of the object with keys sorted recursively at
/// every level, so two equal configs give identical bytes (and so one blob).
///
/// Keys sort by their UTF-8 bytes; array order is kept.
pub(crate) fn canonical_bytes(config: &Map<String, Value>) -> Vec<u8> {
    // `Value`'s `Display` is the same compact JSON as `serde_json::to_vec`,
    // without a `Result` that cannot fail.
    Value::Object(sorted_object(config))
        .to_string()
        .into_bytes()
}

/// Parses bytes written by [`canonical_bytes`] (or any JSON object). Errors
/// say what was found when it is not a JSON object. `what` names the bytes
/// in errors.
pub(crate) fn parse_config_json(
    bytes: &[u8],
    what: &str,
) -> Result<Map<String, Value>, ConfigError> {
    // A key given twice is refused (which value was meant is unknown), as
    // TOML refuses it in config.toml.
    let value = crate::json_text::parse(bytes).map_err(|err| ConfigError::Json {
        what: what.to_string(),
        line: err.line,
        column: err.column,
        message: match &err.duplicate {
            Some(path) => format!(
                "{} (at `{}`)",
                err.message,
                crate::json_text::path_string(path)
            ),
            None => err.message,
        },
    })?;
    match value {
        Value::Object(map) => Ok(map),
        other => Err(ConfigError::NotAnObject {
            what: what.to_string(),
            found: json_kind(&other),
        }),
    }
}

/// The text `jp-store init` writes as the store's `config.toml`: a short
/// commented template documenting the keys the engine reads. Every setting
/// is commented out, so the effective config is empty.
pub(crate) const WORKSPACE_CONFIG_TEMPLATE: &str = r#"# jp-store workspace configuration.
#
# Every setting below is commented out, so none is in effect. Uncomment a
# line to set it. Keys jp-store does not know are kept as they are.

# [conversation.compaction]
# # Profile used when a compaction names none.
# default_profile = "default"
# # Number of most recent turns a compaction leaves untouched.
# keep_last = 3

# # A named compaction profile: the policies it applies to the covered turns.
# [conversation.compaction.profiles.default]
# # Drop the assistant's reasoning.
# reasoning = "strip"
# # Empty tool call arguments (request) and/or replace tool results with a
# # status line (response).
# tool_calls = { policy = "strip", request = true, response = true }

# # A profile that replaces the covered turns with a summary.
# [conversation.compaction.profiles.heavy.summary]
# policy = "summarize"
# model = "anthropic/claude-haiku"
# instructions = "Preserve file paths, key decisions and the current task state."

# # Per-tool compaction hints, overriding a profile's tool call policy:
# # "keep" or "strip" for the request arguments and for the response.
# [conversation.tools.fs_read_file.compaction]
# request = "keep"
# response = "strip"

# [conversation.deduplication]
# # Replace a resource the model was already given, unchanged (same URI and
# # SHA-256), with a reference to that earlier delivery.
# enabled = true
# # Only content larger than this many bytes is deduplicated.
# min_bytes = 300
# # Only deliveries within this many recent turns are referenced.
# lookback_turns = 30

# # Per-tool switch: this tool's results are always delivered in full.
# [conversation.tools.web_fetch]
# deduplicate = false
"#;

/// The 1-based line of `text` (valid TOML) where the key `path` (one
/// segment per table) is written, for errors about its value. `None` when
/// the text does not parse or holds no such key.
pub(crate) fn toml_key_line(text: &str, path: &[String]) -> Option<usize> {
    let table = toml::de::DeTable::parse(text).ok()?;
    let mut table = table.get_ref();
    let mut span = None;
    for (i, segment) in path.iter().enumerate() {
        let (key, value) = table.iter().find(|(k, _)| k.get_ref() == segment)?;
        span = Some(key.span());
        if i + 1 < path.len() {
            table = value.get_ref().as_table()?;
        }
    }
    span.map(|s| line_column(text, s.start).0)
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count() + 1;
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

/// Converts a TOML table; `key` is the dotted path of the table, used in
/// errors and restored before returning.
fn toml_table_to_json(
    table: toml::Table,
    key: &mut String,
    path: &Path,
) -> Result<Map<String, Value>, ConfigError> {
    let mut map = Map::with_capacity(table.len());
    for (name, value) in table {
        let parent_len = key.len();
        if !key.is_empty() {
            key.push('.');
        }
        key.push_str(&name);
        let value = toml_to_json(value, key, path)?;
        key.truncate(parent_len);
        map.insert(name, value);
    }
    Ok(map)
}

/// Converts one TOML value; `key` is its dotted path, used in errors.
fn toml_to_json(value: toml::Value, key: &mut String, path: &Path) -> Result<Value, ConfigError> {
    Ok(match value {
        toml::Value::String(s) => Value::String(s),
        toml::Value::Integer(i) => Value::Number(i.into()),
        toml::Value::Float(f) => match Number::from_f64(f) {
            Some(n) => Value::Number(n),
            None => {
                return Err(ConfigError::NonFiniteFloat {
                    path: path.to_path_buf(),
                    key: key.clone(),
                    found: f,
                })
            }
        },
        toml::Value::Boolean(b) => Value::Bool(b),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
        toml::Value::Array(items) => {
            let mut array = Vec::with_capacity(items.len());
            for (index, item) in items.into_iter().enumerate() {
                let parent_len = key.len();
                key.push_str(&format!("[{index}]"));
                array.push(toml_to_json(item, key, path)?);
                key.truncate(parent_len);
            }
            Value::Array(array)
        }
        toml::Value::Table(table) => Value::Object(toml_table_to_json(table, key, path)?),
    })
}

/// A copy of `object` with keys sorted at every level.
fn sorted_object(object: &Map<String, Value>) -> Map<String, Value> {
    let mut entries: Vec<(&String, &Value)> = object.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
    entries
        .into_iter()
        .map(|(key, value)| (key.clone(), sorted_value(value)))
        .collect()
}

/// A copy of `value` with the keys of every object in it sorted.
fn sorted_value(value: &Value) -> Value {
    match value {
        Value::Object(object) => Value::Object(sorted_object(object)),
        Value::Array(items) => Value::Array(items.iter().map(sorted_value).collect()),
        other => other.clone(),
    }
}

/// The kind of a JSON value with its article ("an object"), for errors.
pub(crate) fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
