//! Creating compactions (RFD 064, D17, jp-format.md section 5): profiles and
//! per-tool hints from config, range bounds resolved to absolute turns, the
//! summary range grown over overlapping summaries, and the dry-run estimate.
//!
//! What a compaction does to the view is the projection's business
//! (`projection.rs`); this module only decides which compaction entry to
//! append.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

pub use crate::config::settings::SummaryTable;
use crate::config::settings::{
    CompactionSettings, ReasoningPolicy, ToolCallsPolicy, ToolCallsPreset, ToolCallsSetting,
    ToolFieldHint,
};
use crate::config::Settings;
use crate::event::turns::TurnCounter;
use crate::event::{
    BlobRef, Compaction, CompactionSource, Entry, EventKind, FieldMode, Payload, ToolCallPolicy,
    ToolOverride,
};
use crate::projection::revoked_compactions;
use crate::timestamp::Timestamp;

/// Why a compaction cannot be made as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompactionError {
    /// The conversation has no turns.
    #[error("the conversation has no turns to compact")]
    NoTurns,
    /// A bound could not be parsed.
    #[error("invalid bound {input:?}: expected a turn index (0-based), -N (N turns before the last), a duration such as 5h or 30m, or `last` (after the last compaction)")]
    BadBound {
        /// What was given.
        input: String,
    },
    /// A bound is outside the conversation.
    #[error("{what} is out of range: {why} (the last turn is {last})")]
    OutOfRange {
        /// Which bound.
        what: &'static str,
        /// Why.
        why: String,
        /// Index of the last turn.
        last: u64,
    },
    /// The resolved range is empty.
    #[error("the range is empty: from turn {from} to turn {to}")]
    EmptyRange {
        /// Resolved start.
        from: u64,
        /// Resolved end.
        to: u64,
    },
    /// The config names a profile that does not exist, or one whose
    /// `tool_calls` table has no `policy`.
    #[error("config: {0}")]
    Config(String),
    /// Nothing to undo.
    #[error("{0}")]
    Undo(String),
    /// The summary could not be made: the [`Summarizer`]'s own error.
    #[error(transparent)]
    Summary(SummaryFailure),
    /// The store could not be read or written.
    #[error(transparent)]
    Store(#[from] crate::error::Error),
}

/// A range bound as given (RFD 064).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bound {
    /// A 0-based turn index.
    Absolute(u64),
    /// `-N`: N turns before the last.
    FromEnd(u64),
    /// A duration before now.
    Ago(Duration),
    /// `last`: the turn after the last compaction.
    AfterLastCompaction,
}

impl std::str::FromStr for Bound {
    type Err = CompactionError;

    /// Parses `3`, `-2`, `5h`/`30m`/`2d 4h`, or `last`.
    fn from_str(s: &str) -> Result<Bound, CompactionError> {
        Bound::parse(s)
    }
}

impl Bound {
    /// Parses `3`, `-2`, `5h`/`30m`/`2d 4h`, or `last`.
    pub(crate) fn parse(s: &str) -> Result<Bound, CompactionError> {
        let bad = || CompactionError::BadBound { input: s.into() };
        let t = s.trim();
        if t == "last" {
            return Ok(Bound::AfterLastCompaction);
        }
        if let Some(n) = t.strip_prefix('-') {
            return n.parse().map(Bound::FromEnd).map_err(|_| bad());
        }
        if let Ok(n) = t.parse() {
            return Ok(Bound::Absolute(n));
        }
        humantime::parse_duration(t)
            .map(Bound::Ago)
            .map_err(|_| bad())
    }
}

/// What a profile does to the turns it covers.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Profile {
    /// Its name.
    pub name: String,
    /// Strip reasoning.
    pub strip_reasoning: bool,
    /// The tool call policy.
    pub tool_calls: Option<ToolCallPolicy>,
    /// The profile's `summary` table, if it summarizes.
    pub summary: Option<SummaryTable>,
}

impl Profile {
    /// The built-in profile used when the config defines none: strips
    /// reasoning and tool calls (requests and responses).
    pub(crate) fn builtin_default() -> Profile {
        Profile {
            name: "default".into(),
            strip_reasoning: true,
            tool_calls: Some(ToolCallPolicy::Strip {
                request: true,
                response: true,
            }),
            summary: None,
        }
    }
}

fn config_err(msg: impl Into<String>) -> CompactionError {
    CompactionError::Config(msg.into())
}

impl Profile {
    /// The profile named `name` in `settings`, or without a name the
    /// default one (`default_profile`, else `default`). A profile named
    /// `default` that the config does not define is
    /// [`Profile::builtin_default`]; any other name it does not define is an
    /// error listing those it does.
    pub(crate) fn from_settings(
        settings: &CompactionSettings,
        name: Option<&str>,
    ) -> Result<Profile, CompactionError> {
        let name = name
            .or(settings.default_profile.as_deref())
            .unwrap_or("default");
        let Some(p) = settings.profiles.get(name) else {
            if name == "default" {
                return Ok(Profile::builtin_default());
            }
            let mut known: Vec<&str> = settings.profiles.keys().map(String::as_str).collect();
            known.sort_unstable();
            return Err(config_err(format!(
                "no compaction profile {name:?} (configured: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        };
        let strip_reasoning = match p.reasoning {
            None | Some(ReasoningPolicy::Keep) => false,
            Some(ReasoningPolicy::Strip) => true,
        };
        let tool_calls = match &p.tool_calls {
            None | Some(ToolCallsSetting::Preset(ToolCallsPreset::Keep)) => None,
            Some(ToolCallsSetting::Preset(ToolCallsPreset::Strip)) => Some(ToolCallPolicy::Strip {
                request: true,
                response: true,
            }),
            Some(ToolCallsSetting::Preset(ToolCallsPreset::Omit)) => Some(ToolCallPolicy::Omit),
            Some(ToolCallsSetting::Table(table)) => match table.policy {
                Some(ToolCallsPolicy::Omit) => Some(ToolCallPolicy::Omit),
                Some(ToolCallsPolicy::Strip) => Some(ToolCallPolicy::Strip {
                    request: table.request.unwrap_or(true),
                    response: table.response.unwrap_or(true),
                }),
                None => {
                    return Err(config_err(format!(
                        "conversation.compaction.profiles.{name}.tool_calls.policy must be \"strip\" or \"omit\""
                    )))
                }
            },
        };
        Ok(Profile {
            name: name.to_string(),
            strip_reasoning,
            tool_calls,
            summary: p.summary.clone(),
        })
    }
}

/// The per-tool hints of `settings` (`conversation.tools.<name>.compaction`),
/// of the tools that set one.
pub(crate) fn tool_hints(settings: &Settings) -> BTreeMap<String, ToolOverride> {
    let mode = |hint: ToolFieldHint| match hint {
        ToolFieldHint::Keep => FieldMode::Keep,
        ToolFieldHint::Strip => FieldMode::Strip,
    };
    settings
        .conversation
        .tools
        .iter()
        .filter_map(|(name, tool)| {
            let hints = ToolOverride {
                request: tool.compaction.request.map(mode),
                response: tool.compaction.response.map(mode),
            };
            (hints.request.is_some() || hints.response.is_some()).then(|| (name.clone(), hints))
        })
        .collect()
}

/// Start timestamps of every turn, and the turn of every entry.
fn turn_starts<C>(entries: &[Entry<C>]) -> (Vec<Timestamp>, Vec<u64>) {
    let mut counter = TurnCounter::new();
    let mut starts: Vec<Timestamp> = Vec::new();
    let mut turn_of = Vec::with_capacity(entries.len());
    for e in entries {
        let step = counter.step(e);
        turn_of.push(step.turn);
        if step.opened {
            let ts = e
                .event()
                .map(|e| e.timestamp)
                .or_else(|| starts.last().copied());
            starts.push(
                ts.unwrap_or_else(|| Timestamp::from_unix(0, 0).unwrap_or_else(Timestamp::now)),
            );
        }
    }
    (starts, turn_of)
}

/// The compactions of a conversation that are in effect (not undone):
/// `(ordinal, compaction)`.
pub(crate) fn active_compactions<C>(entries: &[Entry<C>]) -> Vec<(u64, &Compaction)> {
    let revoked = revoked_compactions(entries);
    let mut out = Vec::new();
    let mut ordinal = 0;
    for e in entries {
        if let Some(EventKind::Compaction(c)) = e.event().map(|e| &e.kind) {
            if !revoked.contains(&ordinal) {
                out.push((ordinal, c));
            }
            ordinal += 1;
        }
    }
    out
}

/// The name [`resolve_range`] gives `keep_last` in an out-of-range error
/// ([`plan`] names the setting instead when the request did not give it).
const KEEP_LAST: &str = "--keep-last";

/// Resolves `from` and `to` (jp-format.md section 5) to absolute turns.
/// `to` defaults to `keep_last` turns before the last (`FromEnd(keep_last)`);
/// `from` defaults to turn 0.
pub(crate) fn resolve_range<C>(
    entries: &[Entry<C>],
    from: Option<Bound>,
    to: Option<Bound>,
    keep_last: u64,
    now: Timestamp,
) -> Result<(u64, u64), CompactionError> {
    let (starts, _) = turn_starts(entries);
    let Some(last) = (starts.len() as u64).checked_sub(1) else {
        return Err(CompactionError::NoTurns);
    };
    let after_last = || -> Result<u64, CompactionError> {
        let next = active_compactions(entries)
            .iter()
            .map(|(_, c)| c.to_turn + 1)
            .max()
            .unwrap_or(0);
        if next > last {
            Err(CompactionError::OutOfRange {
                what: "`last`",
                why: format!("every turn up to {} is compacted already", next - 1),
                last,
            })
        } else {
            Ok(next)
        }
    };
    // The turn active at `t`: the last turn that started at or before it.
    let active_at = |d: Duration| -> Option<u64> {
        let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
        let t = Timestamp::from_unix(now.unix_secs().saturating_sub(secs), now.subsec_nanos())
            .unwrap_or(now);
        starts.iter().rposition(|s| *s <= t).map(|i| i as u64)
    };
    let from = match from.unwrap_or(Bound::Absolute(0)) {
        // A bound beyond the end of the conversation that the range
        // extends toward is clamped (`--from -99` is turn 0, `--to 99` the
        // last turn); one beyond the other end leaves the range no turn and
        // is refused (`--from 99`, `--to -99`), as JP resolves them
        // (jp-format.md section 5).
        Bound::Absolute(n) if n > last => {
            return Err(CompactionError::OutOfRange {
                what: "--from",
                why: format!("{n} is after the last turn, so the range covers no turn"),
                last,
            })
        }
        Bound::Absolute(n) => n,
        Bound::FromEnd(n) => last.saturating_sub(n),
        Bound::AfterLastCompaction => after_last()?,
        Bound::Ago(d) => match active_at(d) {
            None => 0,
            Some(t) if t >= last => {
                return Err(CompactionError::OutOfRange {
                    what: "--from",
                    why: format!(
                        "no turn started after the turn active {} ago",
                        humantime::format_duration(d)
                    ),
                    last,
                })
            }
            Some(t) => t + 1,
        },
    };
    // Every turn kept by `keep_last` (`to` not given): nothing to compact,
    // said in the user's terms rather than as the bound it stands for.
    if to.is_none() && keep_last > last {
        return Err(CompactionError::OutOfRange {
            what: KEEP_LAST,
            why: format!(
                "keeping the last {keep_last} turns leaves none to compact: the conversation has {}",
                last + 1
            ),
            last,
        });
    }
    let to = match to.unwrap_or(Bound::FromEnd(keep_last)) {
        Bound::Absolute(n) => n.min(last),
        Bound::FromEnd(n) if n > last => {
            return Err(CompactionError::OutOfRange {
                what: "--to",
                why: format!(
                    "-{n} is before the first turn (turn 0 is {last} before the last), so the range covers no turn"
                ),
                last,
            })
        }
        Bound::FromEnd(n) => last - n,
        Bound::AfterLastCompaction => after_last()?,
        Bound::Ago(d) => active_at(d).ok_or_else(|| CompactionError::OutOfRange {
            what: "--to",
            why: format!("no turn was active {} ago", humantime::format_duration(d)),
            last,
        })?,
    };
    if from > to {
        return Err(CompactionError::EmptyRange { from, to });
    }
    Ok((from, to))
}

/// Grows `[from, to]` to the union with every summary compaction in effect
/// that it intersects, until stable (jp-format.md section 5).
pub(crate) fn extend_over_summaries<C>(
    entries: &[Entry<C>],
    mut from: u64,
    mut to: u64,
) -> (u64, u64) {
    let summaries: Vec<(u64, u64)> = active_compactions(entries)
        .iter()
        .filter(|(_, c)| c.summary.is_some())
        .map(|(_, c)| (c.from_turn, c.to_turn))
        .collect();
    loop {
        let mut changed = false;
        for &(a, b) in &summaries {
            if a <= to && from <= b && (a < from || b > to) {
                from = from.min(a);
                to = to.max(b);
                changed = true;
            }
        }
        if !changed {
            return (from, to);
        }
    }
}

/// The raw entries of turns `from..=to` (for a summarizer: never a view).
pub(crate) fn raw_range<C: Clone>(entries: &[Entry<C>], from: u64, to: u64) -> Vec<Entry<C>> {
    let (_, turn_of) = turn_starts(entries);
    entries
        .iter()
        .zip(turn_of)
        .filter(|(e, t)| {
            *t >= from
                && *t <= to
                && !matches!(
                    e.event().map(|e| &e.kind),
                    Some(EventKind::Compaction(_) | EventKind::CompactionUndo(_))
                )
        })
        .map(|(e, _)| e.clone())
        .collect()
}

/// The compaction entry for `profile` over `[from, to]`, with the per-tool
/// hints frozen into it.
pub(crate) fn build(
    profile: &Profile,
    from: u64,
    to: u64,
    summary: Option<String>,
    tool_hints: &BTreeMap<String, ToolOverride>,
    source: CompactionSource,
) -> Compaction {
    let summarized = summary.is_some();
    Compaction {
        from_turn: from,
        to_turn: to,
        summary,
        strip_reasoning: !summarized && profile.strip_reasoning,
        tool_calls: if summarized { None } else { profile.tool_calls },
        tool_overrides: if !summarized
            && matches!(profile.tool_calls, Some(ToolCallPolicy::Strip { .. }))
        {
            tool_hints.clone()
        } else {
            BTreeMap::new()
        },
        source: Some(source),
    }
}

/// Characters an entry puts into a request (approximately: text lengths,
/// content sizes, JSON of arguments and data).
pub(crate) fn entry_chars(e: &Entry<Payload>) -> u64 {
    let Some(ev) = e.event() else { return 0 };
    let mut n = 0u64;
    e.for_each_content(&mut |p| n += p.len());
    n + match &ev.kind {
        EventKind::ChatRequest(r) => r.content.chars().count() as u64,
        EventKind::ChatResponse(crate::event::ChatResponse::Message(s))
        | EventKind::ChatResponse(crate::event::ChatResponse::Reasoning(s)) => {
            s.chars().count() as u64
        }
        EventKind::ChatResponse(crate::event::ChatResponse::Data(v)) => v.to_string().len() as u64,
        EventKind::ToolCallRequest(r) => {
            (r.name.len() + Value::Object(r.arguments.clone()).to_string().len()) as u64
        }
        _ => 0,
    }
}

/// What a compaction changes in one turn (for `--dry-run`). Serialized
/// with the counts named for what happens to them (`reasoning_dropped`,
/// `requests_stripped`, `responses_stripped`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct TurnChange {
    /// The turn.
    pub turn: u64,
    /// Conversation events in the turn.
    pub events: u64,
    /// Whether the turn is replaced by the summary.
    pub summarized: bool,
    /// Reasoning responses dropped.
    #[serde(rename = "reasoning_dropped")]
    pub reasoning: u64,
    /// Tool call requests emptied (strip) or dropped (omit).
    #[serde(rename = "requests_stripped")]
    pub requests: u64,
    /// Tool call responses replaced (strip) or dropped (omit).
    #[serde(rename = "responses_stripped")]
    pub responses: u64,
}

/// Per turn of the compaction's range, what it changes; and the estimated
/// tokens (characters / 4, content counted by size, no blob read) of the
/// whole view before and after appending it.
pub(crate) fn dry_run(
    entries: &[Entry<BlobRef>],
    compaction: &Compaction,
    now: Timestamp,
) -> (Vec<TurnChange>, u64, u64) {
    let tokens = |v: &[Entry<Payload>]| v.iter().map(entry_chars).sum::<u64>().div_ceil(4);
    let before = tokens(&crate::projection::view(entries));
    let mut with = entries.to_vec();
    with.push(Entry::Event(crate::event::Event {
        timestamp: now,
        kind: EventKind::Compaction(compaction.clone()),
        metadata: Default::default(),
        extra: Default::default(),
    }));
    let after = tokens(&crate::projection::view(&with));
    let (_, turn_of) = turn_starts(entries);
    let mut names: std::collections::HashMap<&str, &str> = Default::default();
    let mut changes: BTreeMap<u64, TurnChange> = BTreeMap::new();
    let keeps = |tool: &str, request: bool| {
        compaction.tool_overrides.get(tool).is_some_and(|o| {
            (if request { o.request } else { o.response }) == Some(FieldMode::Keep)
        })
    };
    for (e, &turn) in entries.iter().zip(&turn_of) {
        if turn < compaction.from_turn || turn > compaction.to_turn {
            continue;
        }
        let Some(ev) = e.event() else { continue };
        if !ev.kind.is_conversation_event() {
            continue;
        }
        let c = changes.entry(turn).or_insert(TurnChange {
            turn,
            ..Default::default()
        });
        c.events += 1;
        if compaction.summary.is_some() {
            c.summarized = true;
            continue;
        }
        match &ev.kind {
            EventKind::ChatResponse(crate::event::ChatResponse::Reasoning(_))
                if compaction.strip_reasoning =>
            {
                c.reasoning += 1
            }
            EventKind::ToolCallRequest(r) => {
                names.insert(&r.id, &r.name);
                match compaction.tool_calls {
                    Some(ToolCallPolicy::Omit) => c.requests += 1,
                    Some(ToolCallPolicy::Strip { request: true, .. }) if !keeps(&r.name, true) => {
                        c.requests += 1
                    }
                    _ => {}
                }
            }
            EventKind::ToolCallResponse(r) => {
                let name = names.get(r.id.as_str()).copied().unwrap_or("unknown");
                match compaction.tool_calls {
                    Some(ToolCallPolicy::Omit) => c.responses += 1,
                    Some(ToolCallPolicy::Strip { response: true, .. }) if !keeps(name, false) => {
                        c.responses += 1
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
    (changes.into_values().collect(), before, after)
}

pub(crate) mod report;
#[cfg(test)]
mod tests;

pub use report::{CompactionMade, UndoReport};

/// What to compact, as asked on the command line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CompactRequest {
    /// The profile (default: the config's `default_profile`).
    pub profile: Option<String>,
    /// Start bound (default: turn 0).
    pub from: Option<Bound>,
    /// End bound (default: `keep_last` turns before the last).
    pub to: Option<Bound>,
    /// Overrides the config's `keep_last`.
    pub keep_last: Option<u64>,
    /// The summary text, when given.
    pub summary: Option<String>,
    /// Only report; write nothing.
    pub dry_run: bool,
    /// Who asks (manual or auto).
    pub source: Option<CompactionSource>,
}

/// What a compaction did (or would do, for a dry run).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CompactOutcome {
    /// The profile used.
    pub profile: String,
    /// The compaction entry (appended unless a dry run).
    pub compaction: Compaction,
    /// The range asked for, before it grew over overlapping summaries.
    pub requested: (u64, u64),
    /// Per turn of the range, what changes.
    pub changes: Vec<TurnChange>,
    /// Estimated tokens of the view before.
    pub tokens_before: u64,
    /// Estimated tokens of the view after.
    pub tokens_after: u64,
    /// Offset of the appended record (`None` for a dry run).
    pub offset: Option<u64>,
    /// Whether it was a dry run (nothing written).
    pub dry_run: bool,
}

/// Why a [`Summarizer`] made no summary: its own error, kept whole so that
/// the caller who supplied it can look inside (`downcast_ref`).
pub type SummaryFailure = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Produces a summary of raw entries, from a profile's summary table.
/// `jpstore_integrations::summarizer::profile_summarizer` is the one that
/// runs the table's `command` or calls its `endpoint`;
/// [`no_summarizer`] makes none.
pub type Summarizer<'a> =
    dyn FnMut(&SummaryTable, &[Entry<BlobRef>]) -> Result<String, SummaryFailure> + 'a;

/// Why [`no_summarizer`] made no summary.
#[derive(Debug, thiserror::Error)]
#[error("this compaction needs a summary, and no summarizer was given (the profile's summary table is not run by the core engine; see jpstore_integrations::summarizer)")]
pub struct NoSummarizer;

/// A [`Summarizer`] that makes no summary: a compaction with a summarizing
/// profile fails with [`NoSummarizer`] (inside
/// [`CompactionError::Summary`]); one that strips reasoning or tool calls
/// needs no summary and is made.
pub fn no_summarizer(
    _table: &SummaryTable,
    _raw: &[Entry<BlobRef>],
) -> Result<String, SummaryFailure> {
    Err(Box::new(NoSummarizer))
}

/// The compaction `request` asks for on `entries` under `settings` (those
/// in effect at their end): the profile, the range (jp-format.md
/// section 5), for a summarizing profile the range grown over overlapping
/// summaries and the text (`request.summary`, else `summarize` with the
/// raw entries of the range), and what changes. Writes nothing; the
/// outcome's `offset` is `None`.
pub(crate) fn plan(
    entries: &[Entry<BlobRef>],
    settings: &Settings,
    request: &CompactRequest,
    now: Timestamp,
    summarize: &mut Summarizer<'_>,
) -> Result<CompactOutcome, CompactionError> {
    let compaction = &settings.conversation.compaction;
    let profile = Profile::from_settings(compaction, request.profile.as_deref())?;
    let keep_last = request.keep_last.or(compaction.keep_last).unwrap_or(0);
    let requested =
        resolve_range(entries, request.from, request.to, keep_last, now).map_err(|e| match e {
            CompactionError::OutOfRange { what, why, last }
                if what == KEEP_LAST && request.keep_last.is_none() =>
            {
                CompactionError::OutOfRange {
                    what: "conversation.compaction.keep_last",
                    why,
                    last,
                }
            }
            e => e,
        })?;
    // A summary text given with the request replaces the range whatever the
    // profile does: the caller said what it wants. Otherwise a profile with
    // a summary table has its summary made; any other strips.
    let (from, to, summary) = match (&request.summary, &profile.summary) {
        (Some(text), _) => {
            let (from, to) = extend_over_summaries(entries, requested.0, requested.1);
            (from, to, Some(text.clone()))
        }
        (None, None) => (requested.0, requested.1, None),
        (None, Some(table)) => {
            let (from, to) = extend_over_summaries(entries, requested.0, requested.1);
            let text = if request.dry_run {
                String::new()
            } else {
                summarize(table, &raw_range(entries, from, to)).map_err(CompactionError::Summary)?
            };
            (from, to, Some(text))
        }
    };
    let compaction = build(
        &profile,
        from,
        to,
        summary,
        &tool_hints(settings),
        request.source.unwrap_or(CompactionSource::Manual),
    );
    let (changes, tokens_before, tokens_after) = dry_run(entries, &compaction, now);
    Ok(CompactOutcome {
        profile: profile.name,
        compaction,
        requested,
        changes,
        tokens_before,
        tokens_after,
        offset: None,
        dry_run: request.dry_run,
    })
}

/// The log entry of `compaction`, made at `now`.
pub(crate) fn compaction_entry(compaction: &Compaction, now: Timestamp) -> Entry {
    Entry::Event(crate::event::Event {
        timestamp: now,
        kind: EventKind::Compaction(compaction.clone()),
        metadata: Default::default(),
        extra: Default::default(),
    })
}

/// The 0-based ordinal of the compaction that an undo of the `n`-th one
/// (1-based, in stream order), or of the last one in effect, revokes in
/// `entries`; an error if there is none such (numbered from 1, not made,
/// or undone already).
pub(crate) fn undo_ordinal<C>(
    entries: &[Entry<C>],
    n: Option<u64>,
) -> Result<u64, CompactionError> {
    let active = active_compactions(entries);
    match n {
        None => active
            .last()
            .map(|(o, _)| *o)
            .ok_or_else(|| CompactionError::Undo("no compaction in effect to undo".into())),
        Some(0) => Err(CompactionError::Undo(
            "compactions are numbered from 1".into(),
        )),
        Some(n) => {
            let o = n - 1;
            if active.iter().any(|(a, _)| *a == o) {
                return Ok(o);
            }
            let total = entries
                .iter()
                .filter(|e| matches!(e.event().map(|e| &e.kind), Some(EventKind::Compaction(_))))
                .count();
            Err(CompactionError::Undo(if o < total as u64 {
                format!("compaction {n} is undone already")
            } else {
                format!("there is no compaction {n} (the conversation has {total})")
            }))
        }
    }
}

/// The log entry that revokes compaction `ordinal` (0-based), made at `now`.
pub(crate) fn undo_entry(ordinal: u64, now: Timestamp) -> Entry {
    Entry::Event(crate::event::Event {
        timestamp: now,
        kind: EventKind::CompactionUndo(crate::event::CompactionUndo { undoes: ordinal }),
        metadata: Default::default(),
        extra: Default::default(),
    })
}

/// Automatic compaction settings (D17), `conversation.compaction.auto`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct AutoSettings {
    /// `enabled` (default false).
    pub enabled: bool,
    /// `trigger_ratio` (default 0.75).
    pub trigger_ratio: f64,
    /// `profile` (default: the default profile).
    pub profile: Option<String>,
    /// `min_turns` (default 5).
    pub min_turns: u64,
    /// The model's context window in tokens: `conversation.compaction.auto.context_window`,
    /// else `assistant.model.context_window`. Without it automatic
    /// compaction is skipped.
    pub context_window: Option<u64>,
}

impl AutoSettings {
    /// The automatic compaction settings of `settings`, defaults filled in.
    pub(crate) fn from_settings(settings: &Settings) -> AutoSettings {
        let auto = &settings.conversation.compaction.auto;
        AutoSettings {
            enabled: auto.enabled.unwrap_or(false),
            trigger_ratio: auto.trigger_ratio.unwrap_or(0.75),
            profile: auto.profile.clone(),
            min_turns: auto.min_turns.unwrap_or(5),
            context_window: auto
                .context_window
                .or(settings.assistant.model.context_window),
        }
    }
}

/// Whether a batch completes a turn: its last conversation event is the
/// assistant's message.
pub(crate) fn completes_turn<C>(batch: &[Entry<C>]) -> bool {
    batch
        .iter()
        .rev()
        .filter_map(|e| e.event())
        .find(|e| e.kind.is_conversation_event())
        .is_some_and(|e| {
            matches!(
                e.kind,
                EventKind::ChatResponse(crate::event::ChatResponse::Message(_))
            )
        })
}

impl AutoSettings {
    /// The context window when an automatic compaction may be due after a
    /// completed turn, from the settings and the number of `turns` alone
    /// (nothing of the conversation read): enabled, the context window
    /// known, and more than `min_turns` turns. `None`: not due.
    pub(crate) fn may_be_due(&self, turns: u64) -> Option<u64> {
        self.context_window
            .filter(|_| self.enabled && turns > self.min_turns)
    }

    /// Whether the estimated tokens of the view of `entries` exceed
    /// `trigger_ratio` x `window`.
    pub(crate) fn over_trigger(&self, window: u64, entries: &[Entry<BlobRef>]) -> bool {
        let view = crate::projection::view(entries);
        let tokens = view.iter().map(entry_chars).sum::<u64>().div_ceil(4);
        (tokens as f64) > self.trigger_ratio * window as f64
    }

    /// The compaction an automatic compaction asks for: the auto profile,
    /// from after the last compaction to `keep_last` turns before the last,
    /// with `source: auto`.
    pub(crate) fn request(&self) -> CompactRequest {
        CompactRequest {
            profile: self.profile.clone(),
            from: Some(Bound::AfterLastCompaction),
            source: Some(CompactionSource::Auto),
            ..Default::default()
        }
    }
}
