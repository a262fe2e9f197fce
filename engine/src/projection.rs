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
//!
//! Every rule is decided from entry heads ([`EntryHead`]): kinds, turns,
//! timestamps, call ids, tool names, compactions and resource references.
//! [`plan_view`] gives the view as a [`ViewPlan`], items that name the entry
//! each comes from and what becomes of it, which renderers of a version 2
//! log walk without decoding an entry; [`ViewPlan::entries`] builds the
//! owned entries of the view from a conversation's entries (what the
//! functions below return).

use std::collections::HashMap;

use crate::config::Settings;
use crate::dedup::{deduplicate, Replaced, Report, Streamed};
use crate::event::head::{EntryHead, HeadKind, Resources, TurnRole};
use crate::event::turns::TurnCounter;
use crate::event::{
    BlobRef, Block, ChatRequest, ChatResponse, Compaction, Entry, Event, EventKind, FieldMode,
    Payload, Resource, ResourceContent, TextBlock, ToolCallPolicy, ToolCallResponse,
};
use crate::timestamp::Timestamp;
use jpstore_blobstore::fast_hash::FastMap;

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
struct Plan<'h> {
    compactions: HashMap<usize, &'h Compaction>,
    turns: Vec<TurnPolicy>,
}

fn plan<'h>(heads: &'h [EntryHead<'_>], turn_of: &[u64]) -> Plan<'h> {
    let turn_count = turn_of
        .iter()
        .zip(heads)
        .filter(|(_, h)| h.turn_role() != TurnRole::Other)
        .map(|(t, _)| t + 1)
        .max()
        .unwrap_or(0) as usize;
    let mut compactions = HashMap::new();
    let mut found: Vec<(usize, &Compaction, Timestamp)> = Vec::new();
    let revoked = revoked_in(heads);
    let mut ordinal = 0u64;
    for (i, h) in heads.iter().enumerate() {
        if let HeadKind::Compaction(c) = &h.kind {
            if !revoked.contains(&ordinal) {
                compactions.insert(i, &**c);
                found.push((i, &**c, h.timestamp));
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

fn revoked_in(heads: &[EntryHead<'_>]) -> std::collections::HashSet<u64> {
    heads
        .iter()
        .filter_map(|h| match h.kind {
            HeadKind::CompactionUndo(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// What the projection does with one entry (rules 1-7).
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

/// Rules 1-7, decided from the heads.
fn decide(heads: &[EntryHead<'_>]) -> Vec<Action> {
    // Without a compaction no policy applies: every entry is kept as it
    // is, undos dropped (the turns and the tool names are not needed).
    if !heads
        .iter()
        .any(|h| matches!(h.kind, HeadKind::Compaction(_)))
    {
        return heads
            .iter()
            .map(|h| match h.kind {
                HeadKind::CompactionUndo(_) => Action::Drop,
                _ => Action::Keep,
            })
            .collect();
    }
    let mut counter = TurnCounter::new();
    let turn_of: Vec<u64> = heads
        .iter()
        .map(|h| counter.step_role(h.turn_role()).turn)
        .collect();
    let plan = plan(heads, &turn_of);
    let policy = |i: usize| -> TurnPolicy {
        plan.turns
            .get(turn_of[i] as usize)
            .copied()
            .unwrap_or_default()
    };
    // Tool names by call id, as the requests name them (for stripped
    // responses; a reused id takes the latest request before the response).
    let mut names: FastMap<&str, &str> = FastMap::default();
    let mut actions = Vec::with_capacity(heads.len());
    // The summary whose run is open, and the turn the run is at.
    let mut open_run: Option<(usize, u64)> = None;
    for (i, head) in heads.iter().enumerate() {
        if let HeadKind::Unknown = head.kind {
            actions.push(Action::Keep);
            continue;
        }
        actions.push(decide_event(
            head,
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
    head: &EntryHead<'e>,
    p: TurnPolicy,
    turn: u64,
    plan: &Plan<'_>,
    names: &mut FastMap<&'e str, &'e str>,
    open_run: &mut Option<(usize, u64)>,
) -> Action {
    if let HeadKind::ToolCallRequest { id, name } = head.kind {
        names.insert(id, name);
    }
    match head.kind {
        HeadKind::Compaction(_) | HeadKind::CompactionUndo(_) => return Action::Drop,
        HeadKind::ConfigDelta(_) => return Action::Keep,
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
    match head.kind {
        // Rule 4.
        HeadKind::Reasoning if compaction(p.reasoning).is_some() => Action::Drop,
        HeadKind::ToolCallRequest { name, .. } => {
            match compaction(p.tool_calls).map(|c| (c, c.tool_calls)) {
                Some((_, Some(ToolCallPolicy::Omit))) => Action::Drop,
                Some((c, Some(ToolCallPolicy::Strip { request: true, .. })))
                    if !keeps(c, name, true) =>
                {
                    Action::StripArguments
                }
                _ => Action::Keep,
            }
        }
        HeadKind::ToolCallResponse { id, .. } => {
            let name = names.get(id).copied().unwrap_or("unknown");
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
        HeadKind::ChatRequest { .. }
        | HeadKind::Message
        | HeadKind::Reasoning
        | HeadKind::Data
        | HeadKind::TurnStart
        | HeadKind::InquiryRequest
        | HeadKind::InquiryResponse
        | HeadKind::ConfigDelta(_)
        | HeadKind::Compaction(_)
        | HeadKind::CompactionUndo(_)
        | HeadKind::Unknown => Action::Keep,
    }
}

/// Whether the per-tool override of `c` keeps the tool's request (or
/// response).
fn keeps(c: &Compaction, tool: &str, request: bool) -> bool {
    c.tool_overrides.get(tool).is_some_and(|o| {
        let mode = if request { o.request } else { o.response };
        mode == Some(FieldMode::Keep)
    })
}

/// One entry of a view, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewItem {
    /// The index, in the conversation's entries, of the entry it comes from
    /// (an injected summary: the first event of its run; a synthetic
    /// response of an interrupted call: the request).
    pub origin: usize,
    /// What it is.
    pub kind: ItemKind,
}

/// What an item of a view is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemKind {
    /// The entry `origin` as it is (deduplication may replace resources:
    /// [`ViewPlan::replaced`]).
    Entry,
    /// The tool call request `origin` with its arguments emptied (rule 6).
    StripArguments,
    /// The tool call response `origin` with its content replaced by
    /// `[compacted] <name>: success|error` (rule 7); its id, `is_error`,
    /// metadata and unknown fields kept.
    CompactedResponse {
        /// The tool's name, as its request named it (`unknown` if none).
        name: String,
    },
    /// The `turn_start` injected at the start of a summarized run (rule 3).
    SummaryStart {
        /// The timestamp of the run's first event.
        timestamp: Timestamp,
    },
    /// The `chat_request` [`SUMMARY_REQUEST`] injected after it.
    SummaryRequest {
        /// The timestamp of the run's first event.
        timestamp: Timestamp,
    },
    /// The `chat_response` message holding the summary.
    Summary {
        /// The timestamp of the run's first event.
        timestamp: Timestamp,
        /// The summary.
        text: String,
    },
    /// The synthetic error response ([`INTERRUPTED`]) of the tool call
    /// request `origin`, which has none (section 6).
    Interrupted {
        /// The request's timestamp.
        timestamp: Timestamp,
        /// The request's call id.
        id: String,
    },
}

/// The view as decided from entry heads: its items in order, and what
/// deduplication replaced.
#[derive(Debug, Clone, Default)]
pub struct ViewPlan {
    /// The items.
    pub items: Vec<ViewItem>,
    /// What deduplication replaced (its `index` fields are positions in the
    /// stream before the filter to the view, as [`TracedView::dedup`]).
    pub dedup: Report,
    /// The replacements, by item of [`ViewPlan::items`], in order.
    replaced: Vec<Replaced>,
}

impl ViewPlan {
    /// The resources of item `item` that deduplication replaced, in order:
    /// their positions (among a request's resources, or a response's
    /// blocks) and the reference messages.
    pub fn replaced(&self, item: usize) -> &[Replaced] {
        let from = self.replaced.partition_point(|r| r.index < item);
        let to = self.replaced.partition_point(|r| r.index <= item);
        &self.replaced[from..to]
    }

    /// The entries of the view, built from the conversation's `entries`
    /// (those the plan was made from), cloned.
    pub fn entries(&self, entries: &[Entry]) -> Vec<Entry<Payload>> {
        self.build(&mut |i| entries.get(i).cloned())
    }

    /// [`ViewPlan::entries`] of entries the caller gives up: the entries of
    /// the view are moved out of them, not copied.
    pub fn into_entries(&self, entries: Vec<Entry>) -> Vec<Entry<Payload>> {
        let mut slots: Vec<Option<Entry>> = entries.into_iter().map(Some).collect();
        self.build(&mut |i| slots.get_mut(i).and_then(Option::take))
    }

    fn build(&self, take: &mut dyn FnMut(usize) -> Option<Entry>) -> Vec<Entry<Payload>> {
        let mut out = Vec::with_capacity(self.items.len());
        for index in 0..self.items.len() {
            out.extend(self.item_entry(index, take));
        }
        out
    }

    /// Item `index` of the view as an entry: built for an injected item,
    /// else from its origin entry, which `take` gives (`None`, as an origin
    /// that is not the entry the plan says: no item).
    pub fn item_entry(
        &self,
        index: usize,
        take: &mut dyn FnMut(usize) -> Option<Entry>,
    ) -> Option<Entry<Payload>> {
        let item = self.items.get(index)?;
        Some(match &item.kind {
            ItemKind::SummaryStart { timestamp } => synthetic(*timestamp, EventKind::TurnStart),
            ItemKind::SummaryRequest { timestamp } => synthetic(
                *timestamp,
                EventKind::ChatRequest(ChatRequest {
                    content: SUMMARY_REQUEST.into(),
                    schema: None,
                    author: None,
                    resources: Vec::new(),
                }),
            ),
            ItemKind::Summary { timestamp, text } => synthetic(
                *timestamp,
                EventKind::ChatResponse(ChatResponse::Message(text.clone())),
            ),
            ItemKind::Interrupted { timestamp, id } => synthetic(
                *timestamp,
                EventKind::ToolCallResponse(ToolCallResponse {
                    id: id.clone(),
                    content: vec![text_block(INTERRUPTED)],
                    plain: true,
                    is_error: true,
                }),
            ),
            ItemKind::Entry => {
                let mut entry = to_payload(take(item.origin)?);
                apply_replacements(&mut entry, self.replaced(index));
                entry
            }
            ItemKind::StripArguments => {
                let mut entry = to_payload(take(item.origin)?);
                if let Entry::Event(Event {
                    kind: EventKind::ToolCallRequest(r),
                    ..
                }) = &mut entry
                {
                    r.arguments = Default::default();
                }
                entry
            }
            ItemKind::CompactedResponse { name } => {
                let Entry::Event(e) = take(item.origin)? else {
                    return None;
                };
                let EventKind::ToolCallResponse(r) = &e.kind else {
                    return None;
                };
                Entry::Event(Event {
                    timestamp: e.timestamp,
                    kind: EventKind::ToolCallResponse(compacted_response(&r.id, name, r.is_error)),
                    metadata: e.metadata,
                    extra: e.extra,
                })
            }
        })
    }
}

fn inline(text: &str) -> Payload {
    Payload::Inline(text.as_bytes().to_vec())
}

fn text_block(text: &str) -> Block<Payload> {
    Block::Text(TextBlock {
        text: inline(text),
        mime_type: None,
        annotations: None,
        extra: Default::default(),
    })
}

fn synthetic(timestamp: Timestamp, kind: EventKind<Payload>) -> Entry<Payload> {
    Entry::Event(Event {
        timestamp,
        kind,
        metadata: Default::default(),
        extra: Default::default(),
    })
}

/// The text of a tool response whose content rule 7 replaced.
pub fn compacted_text(name: &str, is_error: bool) -> String {
    let outcome = if is_error { "error" } else { "success" };
    format!("[compacted] {name}: {outcome}")
}

fn compacted_response(id: &str, name: &str, is_error: bool) -> ToolCallResponse<Payload> {
    ToolCallResponse {
        id: id.to_owned(),
        content: vec![text_block(&compacted_text(name, is_error))],
        plain: true,
        is_error,
    }
}

/// Replaces, in an entry of the view, the resources deduplication replaced:
/// a resource block of a tool response becomes a text block holding the
/// reference message; a resource attached to a request keeps its URI,
/// name, title, description and annotations, its content becomes the
/// message as `text/plain` and `formatted` goes (crate::dedup).
fn apply_replacements(entry: &mut Entry<Payload>, replaced: &[Replaced]) {
    if replaced.is_empty() {
        return;
    }
    let Entry::Event(event) = entry else { return };
    match &mut event.kind {
        EventKind::ChatRequest(r) => {
            for rep in replaced {
                let Some(res) = r.resources.get_mut(rep.position) else {
                    continue;
                };
                *res = Resource {
                    uri: std::mem::take(&mut res.uri),
                    content: ResourceContent::Text(inline(&rep.message)),
                    mime_type: Some("text/plain".into()),
                    annotations: res.annotations.take(),
                    name: res.name.take(),
                    title: res.title.take(),
                    description: res.description.take(),
                    formatted: None,
                    extra: std::mem::take(&mut res.extra),
                };
            }
        }
        EventKind::ToolCallResponse(r) => {
            for rep in replaced {
                if let Some(block) = r.content.get_mut(rep.position) {
                    *block = text_block(&rep.message);
                }
            }
        }
        _ => {}
    }
}

fn to_payload(entry: Entry<BlobRef>) -> Entry<Payload> {
    entry.into_payload_refs()
}

/// Rules 1-7 as items (compactions applied; orphans not repaired, nothing
/// filtered).
fn project_items(heads: &[EntryHead<'_>]) -> Vec<ViewItem> {
    let actions = decide(heads);
    let mut items = Vec::with_capacity(actions.len());
    for (origin, (action, head)) in actions.into_iter().zip(heads).enumerate() {
        let timestamp = head.timestamp;
        let kind = match action {
            Action::Drop => continue,
            Action::Keep => ItemKind::Entry,
            Action::StripArguments => ItemKind::StripArguments,
            Action::CompactResponse { name } => ItemKind::CompactedResponse { name },
            Action::Summary { text } => {
                items.push(ViewItem {
                    origin,
                    kind: ItemKind::SummaryStart { timestamp },
                });
                items.push(ViewItem {
                    origin,
                    kind: ItemKind::SummaryRequest { timestamp },
                });
                ItemKind::Summary { timestamp, text }
            }
        };
        items.push(ViewItem { origin, kind });
    }
    items
}

/// The call id an item requests (`Ok`) or answers (`Err`), if it is a tool
/// call.
fn call_of<'a>(item: &ViewItem, heads: &[EntryHead<'a>]) -> Option<Result<&'a str, &'a str>> {
    match (&item.kind, heads.get(item.origin).map(|h| &h.kind)) {
        (
            ItemKind::Entry | ItemKind::StripArguments,
            Some(HeadKind::ToolCallRequest { id, .. }),
        ) => Some(Ok(id)),
        (
            ItemKind::Entry | ItemKind::CompactedResponse { .. },
            Some(HeadKind::ToolCallResponse { id, .. }),
        ) => Some(Err(id)),
        _ => None,
    }
}

/// Section 6: every tool call request without a response gets a synthetic
/// error response right after it; responses without a request are dropped.
/// A response answers the latest earlier request with its id that has no
/// response yet, so reused ids pair up in order.
fn repair_items(items: Vec<ViewItem>, heads: &[EntryHead<'_>]) -> Vec<ViewItem> {
    const NONE: u32 = u32::MAX;
    /// What pairing found of an item: one vector of these, not three (a
    /// short view is made of a few dozen allocations, each a few cache
    /// misses when caches are cold; `vec![false; n]` is a `calloc`, which
    /// glibc serves without its per-thread cache).
    #[derive(Clone, Copy)]
    struct Pairing {
        /// The open request of the same call id under this one.
        below: u32,
        answered: bool,
        orphan_response: bool,
    }
    let mut pairing = vec![
        Pairing {
            below: NONE,
            answered: false,
            orphan_response: false,
        };
        items.len()
    ];
    let requests = items
        .iter()
        .filter(|item| matches!(call_of(item, heads), Some(Ok(_))))
        .count();
    let mut repaired = 0usize;
    let mut orphans = false;
    {
        // The open requests of each call id, as a stack threaded through
        // `below` (the request under each one): no list per id. Sized for
        // every request at once (no growth by rehashing).
        let mut top: FastMap<&str, u32> =
            FastMap::with_capacity_and_hasher(requests, Default::default());
        for (i, item) in items.iter().enumerate() {
            match call_of(item, heads) {
                Some(Ok(id)) => pairing[i].below = top.insert(id, i as u32).unwrap_or(NONE),
                Some(Err(id)) => match top.get_mut(id) {
                    Some(t) if *t != NONE => {
                        let req = *t as usize;
                        pairing[req].answered = true;
                        repaired += 1;
                        *t = pairing[req].below;
                    }
                    _ => {
                        pairing[i].orphan_response = true;
                        orphans = true;
                    }
                },
                None => {}
            }
        }
    }
    if repaired == requests && !orphans {
        return items;
    }
    let mut out = Vec::with_capacity(items.len() + requests - repaired);
    for (i, item) in items.into_iter().enumerate() {
        if pairing[i].orphan_response {
            continue;
        }
        let interrupted = match call_of(&item, heads) {
            Some(Ok(id)) if !pairing[i].answered => Some((item.origin, id)),
            _ => None,
        };
        out.push(item);
        if let Some((origin, id)) = interrupted {
            out.push(ViewItem {
                origin,
                kind: ItemKind::Interrupted {
                    timestamp: heads[origin].timestamp,
                    id: id.to_owned(),
                },
            });
        }
    }
    out
}

/// Whether an item is part of what `view` prints.
fn item_in_view(item: &ViewItem, heads: &[EntryHead<'_>]) -> bool {
    match item.kind {
        ItemKind::Entry | ItemKind::StripArguments | ItemKind::CompactedResponse { .. } => {
            heads.get(item.origin).is_some_and(EntryHead::in_view)
        }
        ItemKind::SummaryStart { .. }
        | ItemKind::SummaryRequest { .. }
        | ItemKind::Summary { .. }
        | ItemKind::Interrupted { .. } => true,
    }
}

/// What deduplication reads of an item.
fn streamed<'h>(item: &ViewItem, heads: &'h [EntryHead<'_>]) -> Streamed<'h> {
    let head = heads.get(item.origin).map(|h| &h.kind);
    match (&item.kind, head) {
        (ItemKind::SummaryStart { .. }, _) => Streamed::TurnStart,
        (ItemKind::SummaryRequest { .. }, _) => Streamed::Request(Resources::empty()),
        (ItemKind::Summary { .. }, _) => Streamed::Other,
        (ItemKind::Interrupted { id: _, .. }, Some(HeadKind::ToolCallRequest { id, .. })) => {
            Streamed::ToolResponse { id, blocks: None }
        }
        (ItemKind::Interrupted { .. }, _) => Streamed::Other,
        (_, Some(HeadKind::ConfigDelta(delta))) => Streamed::Delta(delta),
        (kind, Some(h)) => {
            if !item_in_view(item, heads) {
                return Streamed::Hidden;
            }
            match h {
                HeadKind::TurnStart => Streamed::TurnStart,
                HeadKind::ChatRequest { resources } => Streamed::Request(*resources),
                HeadKind::ToolCallRequest { id, name } => Streamed::ToolRequest { id, name },
                HeadKind::ToolCallResponse { id, blocks, .. } => Streamed::ToolResponse {
                    id,
                    blocks: matches!(kind, ItemKind::Entry).then_some(*blocks),
                },
                _ => Streamed::Other,
            }
        }
        (_, None) => Streamed::Hidden,
    }
}

/// The view of the entries whose heads are `heads`: compactions applied
/// (rules 1-7), orphans repaired (section 6), with `base` resources
/// deduplicated (rule 9: `base` is the settings at the start of the
/// conversation, config deltas merged over them as they come), and only the
/// items a view shows.
pub fn plan_view(heads: &[EntryHead<'_>], base: Option<&Settings>) -> ViewPlan {
    let items = repair_items(project_items(heads), heads);
    // Deduplication replaces resources, and config deltas steer it: a
    // stream with neither has nothing for it to do.
    let steered = heads
        .iter()
        .any(|h| h.has_resources() || matches!(h.kind, HeadKind::ConfigDelta(_)));
    let (dedup, replaced) = match base {
        Some(base) if steered => {
            let stream: Vec<Streamed<'_>> =
                items.iter().map(|item| streamed(item, heads)).collect();
            deduplicate(&stream, base)
        }
        _ => (Report::default(), Vec::new()),
    };
    // Filtered to the view; replacements follow their items.
    let mut kept = Vec::with_capacity(items.len());
    let mut moved = Vec::with_capacity(replaced.len());
    let mut replaced = replaced.into_iter().peekable();
    for (index, item) in items.into_iter().enumerate() {
        let show = item_in_view(&item, heads);
        while let Some(r) = replaced.next_if(|r| r.index == index) {
            if show {
                moved.push(Replaced {
                    index: kept.len(),
                    ..r
                });
            }
        }
        if show {
            kept.push(item);
        }
    }
    ViewPlan {
        items: kept,
        dedup,
        replaced: moved,
    }
}

/// The heads of owned entries.
fn heads_of(entries: &[Entry]) -> Vec<EntryHead<'_>> {
    entries.iter().map(EntryHead::of).collect()
}

/// Applies the compactions of `entries` (rules 1-7). The result holds no
/// compaction entries; content stays references except the text the rules
/// create. Orphans are not repaired here ([`repair_orphans`] does that, for
/// what is sent to a provider).
pub fn project(entries: &[Entry<BlobRef>]) -> Vec<Entry<Payload>> {
    let heads = heads_of(entries);
    let plan = ViewPlan {
        items: project_items(&heads),
        ..ViewPlan::default()
    };
    plan.entries(entries)
}

/// Section 6: every tool call request without a response gets a synthetic
/// error response (`Tool call was interrupted.`) right after it; responses
/// without a request are dropped. A response answers the latest earlier
/// request with its id that has no response yet, so reused ids pair up in
/// order. Idempotent.
pub fn repair_orphans(entries: Vec<Entry<Payload>>) -> Vec<Entry<Payload>> {
    let mut answered = vec![false; entries.len()];
    let mut orphan_response = vec![false; entries.len()];
    {
        let mut open: HashMap<&str, Vec<usize>> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            match e.event().map(|e| &e.kind) {
                Some(EventKind::ToolCallRequest(r)) => open.entry(&r.id).or_default().push(i),
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
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.into_iter().enumerate() {
        if orphan_response[i] {
            continue;
        }
        let interrupted = match e.event().map(|ev| (&ev.kind, ev.timestamp)) {
            Some((EventKind::ToolCallRequest(r), ts)) if !answered[i] => Some((r.id.clone(), ts)),
            _ => None,
        };
        out.push(e);
        if let Some((id, ts)) = interrupted {
            out.push(synthetic(
                ts,
                EventKind::ToolCallResponse(ToolCallResponse {
                    id,
                    content: vec![text_block(INTERRUPTED)],
                    plain: true,
                    is_error: true,
                }),
            ));
        }
    }
    out
}

/// The view: compactions applied, orphans repaired, and only the events a
/// view shows. No deduplication: that needs the config
/// ([`view_with_config`]); this is the view for callers that have none
/// (token estimates of compactions, `print --compacted`).
pub fn view(entries: &[Entry<BlobRef>]) -> Vec<Entry<Payload>> {
    let heads = heads_of(entries);
    plan_view(&heads, None).entries(entries)
}

/// The view that is sent: [`view`] with resource deduplication
/// (`crate::dedup`) applied, under `base` (the settings at the start of
/// the conversation: `Store::conversation_settings`'s `base`) with the
/// conversation's config deltas merged over them as they come.
pub fn view_with_config(entries: &[Entry<BlobRef>], base: &Settings) -> Vec<Entry<Payload>> {
    view_traced(entries, base).entries
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
pub fn view_traced(entries: &[Entry<BlobRef>], base: &Settings) -> TracedView {
    let heads = heads_of(entries);
    let plan = plan_view(&heads, Some(base));
    TracedView {
        entries: plan.entries(entries),
        origin: plan.items.iter().map(|i| i.origin).collect(),
        dedup: plan.dedup,
    }
}

/// [`view_traced`] of entries the caller gives up (the entries of the view
/// are moved out of them, not copied).
pub fn view_traced_owned(entries: Vec<Entry<BlobRef>>, base: &Settings) -> TracedView {
    let plan = {
        let heads = heads_of(&entries);
        plan_view(&heads, Some(base))
    };
    TracedView {
        origin: plan.items.iter().map(|i| i.origin).collect(),
        entries: plan.into_entries(entries),
        dedup: plan.dedup,
    }
}

#[cfg(test)]
mod tests;
