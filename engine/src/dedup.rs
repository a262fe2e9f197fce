//! Resource deduplication in the view (RFD 067): a resource the model has
//! already been given, unchanged, is replaced by a short reference to that
//! earlier delivery.
//!
//! The pass runs over the projected stream (compactions applied, orphans
//! repaired, config deltas still in place) before it is filtered to the view
//! and rendered ([`crate::projection::view_with_config`]). Since it works on
//! what the model is sent, a delivery that compaction stripped, omitted or
//! summarized is simply not there: a later copy is then delivered in full.
//!
//! Identity is the pair (URI as given, SHA-256 of the raw content, i.e. the
//! [`BlobRef`] id of `content`; never `formatted`). Only URIs, checksums and
//! sizes are read: no blob content, and of a version 2 log no body but a
//! config delta's (the pass reads entry heads, [`crate::event::head`]).
//!
//! A resource is replaced when, under the config in effect at its event:
//! - `conversation.deduplication.enabled` is not `false`, and for a tool
//!   response `conversation.tools.<name>.deduplicate` is not `false` (an
//!   attachment has no tool; only the conversation switch applies);
//! - its raw size is more than `conversation.deduplication.min_bytes`
//!   (default [`DEFAULT_MIN_BYTES`]);
//! - a resource with the same URI and checksum was delivered in full earlier
//!   in the view, at most `lookback_turns` (default
//!   [`DEFAULT_LOOKBACK_TURNS`]) turns before (the same turn counts as 0).
//!
//! The reference always names a full delivery (the latest one), never another
//! reference: a third copy points at the first. Every full delivery counts,
//! including one that was not eligible itself (a small-threshold or a switch
//! that was off at that point only decides whether *that* copy is replaced).
//!
//! Turn numbers are the view's (0-based, as `print --compacted` shows them):
//! the turns the model is sent, where a summarized run is one turn.
//!
//! The replacement keeps the position:
//! - a `resource` block of a tool response becomes a `text` block holding
//!   the reference message;
//! - a resource attached to a request stays a resource with the same URI
//!   (and name, title, description, annotations), but its content becomes
//!   the reference message as text (`text/plain`) and `formatted` is dropped,
//!   so it is sent as a short document that names where the content is.

use std::collections::HashSet;

use jpstore_blobstore::BlobId;

use crate::event::head::{BlockHead, Blocks, ResourceHead, Resources, TurnRole};
use crate::event::turns::TurnCounter;
use crate::event::Object;
use jpstore_blobstore::fast_hash::FastMap;

#[cfg(doc)]
use crate::event::BlobRef;

/// Default of `conversation.deduplication.min_bytes`.
pub const DEFAULT_MIN_BYTES: u64 = 300;
/// Default of `conversation.deduplication.lookback_turns`.
pub const DEFAULT_LOOKBACK_TURNS: u64 = 30;

/// Deduplication settings of a config, defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `conversation.deduplication.enabled` (default true).
    pub enabled: bool,
    /// `conversation.deduplication.min_bytes`: only larger resources are
    /// replaced.
    pub min_bytes: u64,
    /// `conversation.deduplication.lookback_turns`: how many turns back an
    /// earlier delivery may be.
    pub lookback_turns: u64,
    /// Tools with `conversation.tools.<name>.deduplicate = false`.
    pub tools_off: HashSet<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings::from(&crate::config::Settings::default())
    }
}

impl From<&crate::config::Settings> for Settings {
    /// The deduplication settings of `config`, absent keys taking their
    /// defaults.
    fn from(config: &crate::config::Settings) -> Settings {
        let d = &config.conversation.deduplication;
        Settings {
            enabled: d.enabled.unwrap_or(true),
            min_bytes: d.min_bytes.unwrap_or(DEFAULT_MIN_BYTES),
            lookback_turns: d.lookback_turns.unwrap_or(DEFAULT_LOOKBACK_TURNS),
            tools_off: config
                .conversation
                .tools
                .iter()
                .filter(|(_, tool)| tool.deduplicate == Some(false))
                .map(|(name, _)| name.clone())
                .collect(),
        }
    }
}

/// Where a full delivery was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// Attached to a `chat_request`.
    Attachment,
    /// In the response of the tool call with this id.
    ToolCall(String),
}

/// One resource replaced by a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replacement {
    /// Index of the event in the stream given to [`deduplicate`].
    pub index: usize,
    /// The view turn of the replaced copy.
    pub turn: u64,
    /// The resource's URI.
    pub uri: String,
    /// Its checksum.
    pub checksum: BlobId,
    /// Bytes no longer sent: raw content and `formatted` of the resource.
    pub bytes: u64,
    /// Length of the reference message that replaced them.
    pub reference_bytes: u64,
    /// The view turn of the full delivery it points at.
    pub original_turn: u64,
    /// Where that delivery is.
    pub original: Origin,
}

/// What [`deduplicate`] replaced, in stream order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Every replacement.
    pub replacements: Vec<Replacement>,
}

impl Report {
    /// Bytes saved: the replaced content less the reference messages.
    pub fn bytes_saved(&self) -> u64 {
        self.replacements
            .iter()
            .map(|r| r.bytes.saturating_sub(r.reference_bytes))
            .sum()
    }
}

/// The reference message for a resource identical to an earlier delivery
/// (RFD 067's wording; "file" for `file:` URIs, "resource" otherwise).
pub fn reference_message(uri: &str, checksum: &BlobId, turn: u64, original: &Origin) -> String {
    let what = if uri.starts_with("file:") {
        "file"
    } else {
        "resource"
    };
    match original {
        Origin::Attachment => format!(
            "The content of {uri} is identical to the attachment at turn {turn} \
             (checksum: sha256:{checksum}). The {what} has not changed. Refer to the \
             attached content."
        ),
        Origin::ToolCall(id) => format!(
            "The content of {uri} is identical to the result of tool call `{id}` in turn \
             {turn} (checksum: sha256:{checksum}). The {what} has not changed. Refer to \
             that earlier result for the full contents."
        ),
    }
}

/// What deduplication reads of one item of the projected stream
/// (compactions applied, orphans repaired, config deltas in place).
#[derive(Debug, Clone, Copy)]
pub enum Streamed<'a> {
    /// A config delta: merged over the settings as it comes.
    Delta(&'a Object),
    /// An item that is not part of the view (an inquiry, an unknown entry).
    Hidden,
    /// A `turn_start` of the view.
    TurnStart,
    /// A `chat_request` of the view, with its resources.
    Request(Resources<'a>),
    /// A `tool_call_request` of the view.
    ToolRequest {
        /// The call id.
        id: &'a str,
        /// The tool's name.
        name: &'a str,
    },
    /// A `tool_call_response` of the view, with its blocks (`None` when the
    /// projection replaced its content: it holds no resource).
    ToolResponse {
        /// The call id.
        id: &'a str,
        /// The blocks, if they are the entry's.
        blocks: Option<Blocks<'a>>,
    },
    /// Any other event of the view (a `chat_response`).
    Other,
}

/// One resource of the stream that deduplication replaces.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    /// Index of the item in the stream given to [`deduplicate`].
    pub index: usize,
    /// The resource's place in its item: its index among a request's
    /// resources, or among a tool response's blocks.
    pub position: usize,
    /// The reference message that replaces it.
    pub message: String,
}

/// A full delivery the model still sees.
#[derive(Debug, Clone)]
struct Delivery {
    turn: u64,
    origin: Origin,
}

/// The pass state: config settings and deduplication settings as of the
/// current event, view turns, tool names, and the full deliveries by
/// checksum and URI.
struct Pass<'a> {
    config: crate::config::Settings,
    settings: Settings,
    turns: TurnCounter,
    names: FastMap<&'a str, &'a str>,
    seen: FastMap<BlobId, FastMap<&'a str, Delivery>>,
    report: Report,
}

impl<'a> Pass<'a> {
    /// Decides for one resource: `Some(message)` to replace it, else it is a
    /// full delivery and is remembered. `tool`: the tool that returned it
    /// (none for an attachment).
    fn resource(
        &mut self,
        index: usize,
        turn: u64,
        resource: &ResourceHead<'a>,
        origin: &Origin,
        tool: Option<&str>,
    ) -> Option<String> {
        let content = resource.content;
        let s = &self.settings;
        let eligible = s.enabled
            && content.size > s.min_bytes
            && tool.is_none_or(|t| !s.tools_off.contains(t));
        if eligible {
            if let Some(d) = self
                .seen
                .get(&content.id)
                .and_then(|by_uri| by_uri.get(resource.uri))
            {
                if turn - d.turn <= s.lookback_turns {
                    let msg = reference_message(resource.uri, &content.id, d.turn, &d.origin);
                    self.report.replacements.push(Replacement {
                        index,
                        turn,
                        uri: resource.uri.to_owned(),
                        checksum: content.id,
                        bytes: content.size + resource.formatted.map_or(0, |f| f.size),
                        reference_bytes: msg.len() as u64,
                        original_turn: d.turn,
                        original: d.origin.clone(),
                    });
                    return Some(msg);
                }
            }
        }
        self.seen.entry(content.id).or_default().insert(
            resource.uri,
            Delivery {
                turn,
                origin: origin.clone(),
            },
        );
        None
    }
}

/// Decides, for every resource of `stream` (see [`Streamed`] and the module
/// docs), whether it repeats an earlier full delivery; returns what is
/// replaced, in stream order, and the report. Config deltas are merged over
/// the settings from `base` on as they come (a setting of the wrong type is
/// not applied); items not in the view are skipped. Nothing is changed: the
/// caller applies the replacements.
pub fn deduplicate<'a>(
    stream: &[Streamed<'a>],
    base: &crate::config::Settings,
) -> (Report, Vec<Replaced>) {
    let mut pass = Pass {
        config: base.clone(),
        settings: Settings::from(base),
        turns: TurnCounter::new(),
        names: FastMap::default(),
        seen: FastMap::default(),
        report: Report::default(),
    };
    let mut replaced = Vec::new();
    for (index, item) in stream.iter().enumerate() {
        let role = match item {
            Streamed::Delta(delta) => {
                pass.config.merge_layer_lenient(delta);
                pass.settings = Settings::from(&pass.config);
                continue;
            }
            Streamed::Hidden => continue,
            Streamed::TurnStart => TurnRole::TurnStart,
            _ => TurnRole::Event,
        };
        let turn = pass.turns.step_role(role).turn;
        match *item {
            Streamed::ToolRequest { id, name } => {
                pass.names.insert(id, name);
            }
            Streamed::Request(resources) => {
                for (position, res) in resources.iter().enumerate() {
                    if let Some(message) =
                        pass.resource(index, turn, &res, &Origin::Attachment, None)
                    {
                        replaced.push(Replaced {
                            index,
                            position,
                            message,
                        });
                    }
                }
            }
            Streamed::ToolResponse {
                id,
                blocks: Some(blocks),
            } => {
                let origin = Origin::ToolCall(id.to_owned());
                let tool = pass.names.get(id).copied();
                for (position, block) in blocks.iter().enumerate() {
                    let BlockHead::Resource(res) = block else {
                        continue;
                    };
                    if let Some(message) = pass.resource(index, turn, &res, &origin, tool) {
                        replaced.push(Replaced {
                            index,
                            position,
                            message,
                        });
                    }
                }
            }
            Streamed::ToolResponse { blocks: None, .. }
            | Streamed::TurnStart
            | Streamed::Other
            | Streamed::Delta(_)
            | Streamed::Hidden => {}
        }
    }
    (pass.report, replaced)
}

#[cfg(test)]
mod tests;
