//! The projection: the view an LLM is sent, computed from a conversation's
//! entries with compaction overlays applied (jp-format.md sections 3-6, RFD
//! 064, D17). It reads no blob content: payloads stay references, and the
//! only text it creates (summaries, stripped responses, interrupted calls) is
//! inline.
//!
//! Rules, in the order they are applied:
//! 1. For every turn and separately for each policy kind (summary, reasoning,
//!    tool calls), the covering compaction with that kind set and the latest
//!    timestamp wins; on equal timestamps the later one in the stream. Ranges
//!    past the last turn are clamped. A winning summary overrides the other
//!    two kinds for that turn.
//! 2. Config deltas and unknown entries pass through at their place, also
//!    inside summarized turns; compaction entries are dropped.
//! 3. A summarized turn's events are dropped; at the start of each contiguous
//!    run of turns won by the same summary, `turn_start`, a `chat_request`
//!    `[Summary of previous conversation]` and a `chat_response` with the
//!    summary are injected, with the timestamp of the run's first event.
//! 4. Reasoning `strip` drops reasoning responses.
//! 5. Tool calls `omit` drops requests and responses.
//! 6. `strip` with `request` empties arguments; 7. with `response` replaces
//!    the content by `[compacted] <name>: success|error`. Per-tool overrides
//!    frozen in the compaction (D17) keep a tool's request or response.
//! 8. Orphans (section 6, [`repair_orphans`]): a request without a response
//!    gets a synthetic error response right after it; a response without a
//!    request is dropped.
//! 9. With the config ([`view_with_config`]): resources already delivered
//!    earlier in the view are replaced by references ([`crate::dedup`]).

use std::collections::HashMap;

use crate::config::Settings;
use crate::dedup::{deduplicate, DedupError, Report};
pub use crate::event::in_view;
use crate::event::turns::turn_indices;
use crate::event::{
    BlobRef, Block, ChatRequest, ChatResponse, Compaction, Entry, Event, EventKind, FieldMode,
    Payload, TextBlock, ToolCallPolicy, ToolCallResponse,
};
use crate::timestamp::Timestamp;

/// Content of the request injected before a summary.
pub const SUMMARY_REQUEST: &str = "[Summary of previous conversation]";
/// Content of the synthetic response of an interrupted tool call.
pub const INTERRUPTED: &str = "Tool call was interrupted.";

/// The winning compaction of one policy kind for one turn: its position in
/// the stream.
type Winner = Option<usize>;

/// Which compaction governs each policy kind of one turn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct TurnPolicy {
    summary: Winner,
    reasoning: Winner,
    tool_calls: Winner,
}

/// Compactions by stream position, and the policy of every turn.
struct Plan<'a> {
    compactions: HashMap<usize, &'a Compaction>,
    turns: Vec<TurnPolicy>,
}

fn plan<'a, C>(entries: &'a [Entry<C>], turn_of: &[u64]) -> Plan<'a> {
    let turn_count = turn_of
        .iter()
        .zip(entries)
        .filter(|(_, e)| {
            e.event().is_some_and(|e| {
                e.kind.is_conversation_event() || matches!(e.kind, EventKind::TurnStart)
            })
        })
        .map(|(t, _)| t + 1)
        .max()
        .unwrap_or(0) as usize;
    let mut compactions = HashMap::new();
    let mut found: Vec<(usize, &Compaction, Timestamp)> = Vec::new();
    let revoked = revoked_compactions(entries);
    let mut ordinal = 0u64;
    for (i, e) in entries.iter().enumerate() {
        if let Some(Event {
            kind: EventKind::Compaction(c),
            timestamp,
            ..
        }) = e.event()
        {
            if !revoked.contains(&ordinal) {
                compactions.insert(i, c);
                found.push((i, c, *timestamp));
            }
            ordinal += 1;
        }
    }
    let mut turns = vec![TurnPolicy::default(); turn_count];
    if turn_count > 0 {
        let last = (turn_count - 1) as u64;
        // Later wins: sort by (timestamp, position) and let each overwrite.
        found.sort_by_key(|(i, _, ts)| (*ts, *i));
        for (i, c, _) in found {
            if c.from_turn > last {
                continue;
            }
            for t in c.from_turn..=c.to_turn.min(last) {
                let p = &mut turns[t as usize];
                if c.summary.is_some() {
                    p.summary = Some(i);
                }
                if c.strip_reasoning {
                    p.reasoning = Some(i);
                }
                if c.tool_calls.is_some() {
                    p.tool_calls = Some(i);
                }
            }
        }
        for p in &mut turns {
            if p.summary.is_some() {
                p.reasoning = None;
                p.tool_calls = None;
            }
        }
    }
    Plan { compactions, turns }
}

/// Ordinals (0-based, among compaction entries in stream order) of the
/// compactions revoked by `compaction_undo` entries.
pub fn revoked_compactions<C>(entries: &[Entry<C>]) -> std::collections::HashSet<u64> {
    entries
        .iter()
        .filter_map(|e| match e.event().map(|e| &e.kind) {
            Some(EventKind::CompactionUndo(u)) => Some(u.undoes),
            _ => None,
        })
        .collect()
}

fn inline(text: &str) -> Payload {
    Payload::Inline(text.as_bytes().to_vec())
}

fn synthetic(timestamp: Timestamp, kind: EventKind<Payload>) -> Entry<Payload> {
    Entry::Event(Event {
        timestamp,
        kind,
        metadata: Default::default(),
        extra: Default::default(),
    })
}

fn summary_events(timestamp: Timestamp, summary: &str) -> [Entry<Payload>; 3] {
    [
        synthetic(timestamp, EventKind::TurnStart),
        synthetic(
            timestamp,
            EventKind::ChatRequest(ChatRequest {
                content: SUMMARY_REQUEST.into(),
                schema: None,
                author: None,
                resources: Vec::new(),
            }),
        ),
        synthetic(
            timestamp,
            EventKind::ChatResponse(ChatResponse::Message(summary.into())),
        ),
    ]
}

fn compacted_response(id: &str, name: &str, is_error: bool) -> ToolCallResponse<Payload> {
    let outcome = if is_error { "error" } else { "success" };
    ToolCallResponse {
        id: id.to_owned(),
        content: vec![Block::Text(TextBlock {
            text: inline(&format!("[compacted] {name}: {outcome}")),
            mime_type: None,
            annotations: None,
            extra: Default::default(),
        })],
        plain: true,
        is_error,
    }
}

/// Applies the compactions of `entries` (rules 1-7). The result holds no
/// compaction entries; content stays references except the text the rules
/// create. Orphans are not repaired here ([`repair_orphans`] does that, for
/// what is sent to a provider).
pub fn project(entries: &[Entry<BlobRef>]) -> Vec<Entry<Payload>> {
    project_traced(entries).0
}

/// [`project`], with the index in `entries` each output entry comes from
/// (an injected summary comes from the first event of its run).
fn project_traced(entries: &[Entry<BlobRef>]) -> (Vec<Entry<Payload>>, Vec<usize>) {
    let actions = decide(entries);
    apply(entries.iter().cloned(), actions)
}

/// [`project_traced`] of entries the caller gives up: kept entries are
/// moved into the view, not copied.
fn project_traced_owned(entries: Vec<Entry<BlobRef>>) -> (Vec<Entry<Payload>>, Vec<usize>) {
    let actions = decide(&entries);
    apply(entries, actions)
}

/// What the projection does with one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Action {
    /// Left out (compactions, and what the rules drop).
    Drop,
    /// Passed through unchanged.
    Keep,
    /// Passed through with its arguments emptied (rule 6).
    StripArguments,
    /// Replaced by `[compacted] <name>: success|error` (rule 7).
    CompactResponse { name: String },
    /// Replaced by the summary of its run (rule 3): the first event of a run.
    Summary { text: String },
}

/// Rules 1-7, decided from the entries without changing them.
fn decide(entries: &[Entry<BlobRef>]) -> Vec<Action> {
    let turn_of = turn_indices(entries);
    let plan = plan(entries, &turn_of);
    let policy = |i: usize| -> TurnPolicy {
        plan.turns
            .get(turn_of[i] as usize)
            .copied()
            .unwrap_or_default()
    };
    // Tool names by call id, as the requests name them (for stripped
    // responses; a reused id takes the latest request before the response).
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut actions = Vec::with_capacity(entries.len());
    // The summary whose run is open, and the turn the run is at.
    let mut open_run: Option<(usize, u64)> = None;
    for (i, entry) in entries.iter().enumerate() {
        let event = match entry {
            Entry::Unknown(_) => {
                actions.push(Action::Keep);
                continue;
            }
            Entry::Event(e) => e,
        };
        actions.push(decide_event(
            event,
            policy(i),
            turn_of[i],
            &plan,
            &mut names,
            &mut open_run,
        ));
    }
    actions
}

/// The action for one event, given its turn's policy; keeps the tool names
/// seen so far and the summary run that is open.
fn decide_event<'e>(
    event: &'e Event<BlobRef>,
    p: TurnPolicy,
    turn: u64,
    plan: &Plan<'_>,
    names: &mut HashMap<&'e str, &'e str>,
    open_run: &mut Option<(usize, u64)>,
) -> Action {
    if let EventKind::ToolCallRequest(r) = &event.kind {
        names.insert(&r.id, &r.name);
    }
    match &event.kind {
        EventKind::Compaction(_) | EventKind::CompactionUndo(_) => return Action::Drop,
        EventKind::ConfigDelta(_) => return Action::Keep,
        _ => {}
    }
    // Rule 3: summaries.
    if let Some(s) = p.summary {
        let continues =
            matches!(*open_run, Some((run, t)) if run == s && (t == turn || t + 1 == turn));
        *open_run = Some((s, turn));
        if continues {
            return Action::Drop;
        }
        let text = plan
            .compactions
            .get(&s)
            .and_then(|c| c.summary.as_deref())
            .unwrap_or("");
        return Action::Summary {
            text: text.to_owned(),
        };
    }
    *open_run = None;
    let compaction = |w: Winner| w.and_then(|i| plan.compactions.get(&i).copied());
    match &event.kind {
        // Rule 4.
        EventKind::ChatResponse(ChatResponse::Reasoning(_))
            if compaction(p.reasoning).is_some() =>
        {
            Action::Drop
        }
        EventKind::ToolCallRequest(r) => {
            match compaction(p.tool_calls).map(|c| (c, c.tool_calls)) {
                Some((_, Some(ToolCallPolicy::Omit))) => Action::Drop,
                Some((c, Some(ToolCallPolicy::Strip { request: true, .. })))
                    if !keeps(c, &r.name, true) =>
                {
                    Action::StripArguments
                }
                _ => Action::Keep,
            }
        }
        EventKind::ToolCallResponse(r) => {
            let name = names.get(r.id.as_str()).copied().unwrap_or("unknown");
            match compaction(p.tool_calls).map(|c| (c, c.tool_calls)) {
                Some((_, Some(ToolCallPolicy::Omit))) => Action::Drop,
                Some((c, Some(ToolCallPolicy::Strip { response: true, .. })))
                    if !keeps(c, name, false) =>
                {
                    Action::CompactResponse {
                        name: name.to_owned(),
                    }
                }
                _ => Action::Keep,
            }
        }
        // Kept as they are: no policy applies to them (listed so that a new
        // kind must be decided on here).
        EventKind::ChatRequest(_)
        | EventKind::ChatResponse(_)
        | EventKind::TurnStart
        | EventKind::InquiryRequest(_)
        | EventKind::InquiryResponse(_)
        | EventKind::ConfigDelta(_)
        | EventKind::Compaction(_)
        | EventKind::CompactionUndo(_) => Action::Keep,
    }
}

/// Builds the projection from the entries and their [`decide`]d actions.
fn apply(
    entries: impl IntoIterator<Item = Entry<BlobRef>>,
    actions: Vec<Action>,
) -> (Vec<Entry<Payload>>, Vec<usize>) {
    let mut out = Vec::with_capacity(actions.len());
    let mut origin = Vec::with_capacity(actions.len());
    for (i, (entry, action)) in entries.into_iter().zip(actions).enumerate() {
        // `decide` gives unknown entries `Keep` or `Drop` only; the other
        // actions are for events of the kind they name.
        match (action, entry) {
            (Action::Drop, _) => {}
            (Action::Keep, entry) => {
                out.push(to_payload(entry));
                origin.push(i);
            }
            (Action::Summary { text }, Entry::Event(e)) => {
                out.extend(summary_events(e.timestamp, &text));
                origin.extend([i; 3]);
            }
            (Action::StripArguments, Entry::Event(e)) => {
                let mut e = to_payload_event(e);
                if let EventKind::ToolCallRequest(r) = &mut e.kind {
                    r.arguments = Default::default();
                }
                out.push(Entry::Event(e));
                origin.push(i);
            }
            (Action::CompactResponse { name }, Entry::Event(e)) => {
                if let EventKind::ToolCallResponse(r) = &e.kind {
                    out.push(Entry::Event(Event {
                        timestamp: e.timestamp,
                        kind: EventKind::ToolCallResponse(compacted_response(
                            &r.id, &name, r.is_error,
                        )),
                        metadata: e.metadata,
                        extra: e.extra,
                    }));
                    origin.push(i);
                }
            }
            (_, Entry::Unknown(_)) => {}
        }
    }
    (out, origin)
}

/// Whether the per-tool override of `c` keeps the tool's request (or
/// response).
fn keeps(c: &Compaction, tool: &str, request: bool) -> bool {
    c.tool_overrides.get(tool).is_some_and(|o| {
        let mode = if request { o.request } else { o.response };
        mode == Some(FieldMode::Keep)
    })
}

fn to_payload(entry: Entry<BlobRef>) -> Entry<Payload> {
    entry.into_payload_refs()
}

fn to_payload_event(event: Event<BlobRef>) -> Event<Payload> {
    match to_payload(Entry::Event(event)) {
        Entry::Event(e) => e,
        Entry::Unknown(_) => unreachable!("an event maps to an event"),
    }
}

/// Section 6: every tool call request without a response gets a synthetic
/// error response (`Tool call was interrupted.`) right after it; responses
/// without a request are dropped. A response answers the latest earlier
/// request with its id that has no response yet, so reused ids pair up in
/// order. Idempotent.
pub fn repair_orphans(entries: Vec<Entry<Payload>>) -> Vec<Entry<Payload>> {
    let tags = vec![(); entries.len()];
    repair_orphans_tagged(entries, tags).0
}

/// [`repair_orphans`], carrying a tag per entry (a synthetic response takes
/// the tag of its request).
fn repair_orphans_tagged<T: Copy>(
    entries: Vec<Entry<Payload>>,
    tags: Vec<T>,
) -> (Vec<Entry<Payload>>, Vec<T>) {
    // First pass: which requests are answered, which responses answer one.
    let mut answered = vec![false; entries.len()];
    let mut orphan_response = vec![false; entries.len()];
    let mut requests = 0;
    {
        let mut open: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            match e.event().map(|e| &e.kind) {
                Some(EventKind::ToolCallRequest(r)) => {
                    requests += 1;
                    open.entry(&r.id).or_default().push(i);
                }
                Some(EventKind::ToolCallResponse(r)) => {
                    match open.get_mut(r.id.as_str()).and_then(Vec::pop) {
                        Some(req) => answered[req] = true,
                        None => orphan_response[i] = true,
                    }
                }
                _ => {}
            }
        }
    }
    // Nothing to repair (the usual case): the entries stay where they are.
    let repaired = answered.iter().filter(|a| **a).count();
    if repaired == requests && !orphan_response.contains(&true) {
        return (entries, tags);
    }
    let mut out = Vec::with_capacity(entries.len());
    let mut out_tags = Vec::with_capacity(entries.len());
    for (i, (e, tag)) in entries.into_iter().zip(tags).enumerate() {
        if orphan_response[i] {
            continue;
        }
        let interrupted = match e.event().map(|ev| (&ev.kind, ev.timestamp)) {
            Some((EventKind::ToolCallRequest(r), ts)) if !answered[i] => Some((r.id.clone(), ts)),
            _ => None,
        };
        out.push(e);
        out_tags.push(tag);
        if let Some((id, ts)) = interrupted {
            out_tags.push(tag);
            out.push(synthetic(
                ts,
                EventKind::ToolCallResponse(ToolCallResponse {
                    id,
                    content: vec![Block::Text(TextBlock {
                        text: inline(INTERRUPTED),
                        mime_type: None,
                        annotations: None,
                        extra: Default::default(),
                    })],
                    plain: true,
                    is_error: true,
                }),
            ));
        }
    }
    (out, out_tags)
}

/// The view: compactions applied, orphans repaired, and only the events a
/// view shows. No deduplication: that needs the config
/// ([`view_with_config`]); this is the view for callers that have none
/// (token estimates of compactions, `print --compacted`).
pub fn view(entries: &[Entry<BlobRef>]) -> Vec<Entry<Payload>> {
    repair_orphans(project(entries))
        .into_iter()
        .filter(in_view)
        .collect()
}

/// The view that is sent: [`view`] with resource deduplication
/// ([`crate::dedup`]) applied, under `base` (the settings at the start of
/// the conversation: `Store::conversation_settings`'s `base`) with the
/// conversation's config deltas merged over them as they come.
pub fn view_with_config(
    entries: &[Entry<BlobRef>],
    base: &Settings,
) -> Result<Vec<Entry<Payload>>, DedupError> {
    Ok(view_traced(entries, base)?.entries)
}

/// A view with where its entries come from and what deduplication replaced.
#[derive(Debug, Clone)]
pub struct TracedView {
    /// The view's entries (as [`view_with_config`] returns them).
    pub entries: Vec<Entry<Payload>>,
    /// For each entry, the index in the conversation's entries it comes from
    /// (an injected summary: the first event of its run; a synthetic
    /// response of an interrupted call: the request).
    pub origin: Vec<usize>,
    /// What deduplication replaced (its `index` fields are positions in the
    /// unfiltered projection, not in `entries`).
    pub dedup: Report,
}

/// [`view_with_config`], traced: see [`TracedView`].
pub fn view_traced(entries: &[Entry<BlobRef>], base: &Settings) -> Result<TracedView, DedupError> {
    finish_view(project_traced(entries), base)
}

/// [`view_traced`] of entries the caller gives up (the entries of the view
/// are moved out of them, not copied).
pub fn view_traced_owned(
    entries: Vec<Entry<BlobRef>>,
    base: &Settings,
) -> Result<TracedView, DedupError> {
    finish_view(project_traced_owned(entries), base)
}

/// Orphans repaired, resources deduplicated, and only what a view shows.
fn finish_view(
    (projected, origin): (Vec<Entry<Payload>>, Vec<usize>),
    base: &Settings,
) -> Result<TracedView, DedupError> {
    let (mut entries, mut origin) = repair_orphans_tagged(projected, origin);
    let dedup = deduplicate(&mut entries, base)?;
    // Filtered in place: the entries are not moved into a new vector.
    let keep: Vec<bool> = entries.iter().map(in_view).collect();
    let mut kept = keep.iter();
    origin.retain(|_| kept.next().copied().unwrap_or(false));
    entries.retain(in_view);
    Ok(TracedView {
        entries,
        origin,
        dedup,
    })
}

#[cfg(test)]
mod tests;
