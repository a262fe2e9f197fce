//! A conversation (`/conversations/<id>`): its entries a page at a time
//! (whole turns, at most [`TURNS_PER_PAGE`] of them and at most
//! [`ENTRIES_PER_PAGE`] entries; a longer turn over several pages), either
//! as logged (`view=raw`) or as the model is sent them (`view=model`), with
//! what compaction and deduplication changed marked.
//!
//! The log is read and the heads of its entries (kinds, turns, call ids,
//! compactions, resource references) decide everything that spans the
//! conversation: the pages, the view (planned as `jp-store view --refs`
//! plans it: no blob content is read for it), tool names, compactions.
//! Only the page's entries are decoded and rendered, so what a request
//! holds beyond the log and its heads is bounded by the page, whatever the
//! length of a turn. Content in the blob store is read for a page only when
//! it is small text (up to [`INLINE_TEXT_MAX`] bytes, at most
//! [`INLINE_READS_MAX`] blobs a page); anything larger is a folded
//! `<details>` whose first part the page's script fetches from the blob
//! endpoint when it is unfolded, with links to the whole content.

use jpstore_engine::internal::IntoPayloadRefs as _;
use jpstore_engine::internal::StoreInterior as _;
use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ops::Range;

use jpstore_engine::conversation::ConversationId;
use jpstore_engine::conversation::ConversationState;
use jpstore_engine::error::Error;
use jpstore_engine::event::{
    Block, ChatResponse, Compaction, CompactionSource, Entry, EventKind, Payload, Resource,
    ResourceContent, ToolCallPolicy,
};
use jpstore_engine::internal::event::head::{EntryHead, HeadKind};
use jpstore_engine::internal::event::in_view;
use jpstore_engine::internal::event::turns::TurnCounter;
use jpstore_engine::internal::projection::{plan_view, ViewPlan, SUMMARY_REQUEST};
use jpstore_engine::Store;
use serde_json::Value;

use super::html::{Attr, Html, Tag};
use super::layout::{count, counted, page, pager, size, time, Section};
use super::url::{ConversationQuery, Link, ViewMode};

/// Turns a page shows at most.
pub const TURNS_PER_PAGE: u64 = 10;
/// Logged entries a page shows at most: a turn of more is shown over
/// several pages, so the page (its HTML, the entries decoded for it) is
/// bounded whatever the length of a turn.
pub const ENTRIES_PER_PAGE: usize = 200;
/// Text content up to this size is read from the blob store and shown in
/// the page; larger content is fetched when it is unfolded.
pub const INLINE_TEXT_MAX: u64 = 2048;
/// Blobs read for one page at most; further content is folded whatever its
/// size.
pub const INLINE_READS_MAX: usize = 200;
/// Arguments and structured data larger than this (as JSON text) are
/// folded.
const FOLD_JSON_OVER: usize = 4096;

/// The pages of a conversation: ranges of its logged entries. Whole turns
/// go on a page until it holds [`TURNS_PER_PAGE`] turns or the next turn
/// would take it past [`ENTRIES_PER_PAGE`] entries; a turn longer than a
/// page fills the page it starts on, then pages of its own, its last part
/// beginning the next page. A page's range depends only on the entries
/// before its end, so appended entries never move an earlier page.
struct Pages {
    /// The first entry of each page (the first page's is 0).
    starts: Vec<usize>,
    /// Entries in all.
    len: usize,
}

impl Pages {
    fn new(turn_of: &[u64]) -> Pages {
        let len = turn_of.len();
        let mut starts = vec![0];
        // Turns and entries on the page being filled.
        let (mut turns, mut entries) = (0u64, 0usize);
        let mut i = 0;
        while i < len {
            let turn = turn_of[i];
            let end = i + turn_of[i..].partition_point(|&t| t <= turn);
            let n = end - i;
            let full = turns == TURNS_PER_PAGE;
            if n <= ENTRIES_PER_PAGE {
                if entries > 0 && (full || entries + n > ENTRIES_PER_PAGE) {
                    starts.push(i);
                    entries = 0;
                    turns = 0;
                }
                turns += 1;
                entries += n;
            } else {
                if entries > 0 && full {
                    starts.push(i);
                    entries = 0;
                }
                let mut at = i;
                while entries + (end - at) > ENTRIES_PER_PAGE {
                    at += ENTRIES_PER_PAGE - entries;
                    starts.push(at);
                    entries = 0;
                }
                turns = 1;
                entries = end - at;
            }
            i = end;
        }
        Pages { starts, len }
    }

    /// The number of pages (one at least).
    fn count(&self) -> usize {
        self.starts.len()
    }

    /// The entries of page `page` (from 1).
    fn range(&self, page: usize) -> Range<usize> {
        let at = page.clamp(1, self.count()) - 1;
        self.starts[at]..self.starts.get(at + 1).copied().unwrap_or(self.len)
    }

    /// The page (from 1) that shows entry `i`.
    fn of_entry(&self, i: usize) -> usize {
        self.starts.partition_point(|&s| s <= i).max(1)
    }
}

/// The page (from 1) of a conversation whose entries are in turns
/// `turn_of` that shows entry `entry`.
pub fn page_of_entry(turn_of: &[u64], entry: usize) -> usize {
    Pages::new(turn_of).of_entry(entry)
}

/// The turn of every entry, from their heads.
fn turns_of(heads: &[EntryHead<'_>]) -> Vec<u64> {
    let mut counter = TurnCounter::new();
    heads
        .iter()
        .map(|h| counter.step_role(h.turn_role()).turn)
        .collect()
}

/// The view of a conversation as planned from its entries' heads, with the
/// entries of the view that come from the logged entries of one page built
/// (and no others).
struct Traced {
    /// Entries of the whole view.
    len: usize,
    replaced: usize,
    bytes_saved: u64,
    /// The page's first logged entry.
    first: usize,
    /// The view entries of the page, grouped by the logged entry they come
    /// from: `entries[starts[k]..starts[k + 1]]` come from entry
    /// `first + k`.
    entries: Vec<Entry<Payload>>,
    starts: Vec<usize>,
}

impl Traced {
    /// The view `plan` of a conversation, built for the logged entries
    /// `logged`, which are its entries `first..`.
    fn new(plan: &ViewPlan, first: usize, logged: &[Entry]) -> Traced {
        let n = logged.len();
        let of_page: Vec<(usize, usize)> = plan
            .items
            .iter()
            .enumerate()
            .filter(|(_, item)| (first..first + n).contains(&item.origin))
            .map(|(index, item)| (item.origin - first, index))
            .collect();
        // A counting sort by origin: linear, and right whatever order the
        // origins come in (the items of one origin keep theirs).
        let mut starts = vec![0usize; n + 1];
        for &(k, _) in &of_page {
            starts[k + 1] += 1;
        }
        for k in 0..n {
            starts[k + 1] += starts[k];
        }
        let mut next = starts.clone();
        let mut slots: Vec<Option<Entry<Payload>>> = (0..of_page.len()).map(|_| None).collect();
        for &(k, index) in &of_page {
            let built = plan.item_entry(index, &mut |origin| logged.get(origin - first).cloned());
            slots[next[k]] = built;
            next[k] += 1;
        }
        // An item the plan could not build (its origin is not the entry it
        // says) is left out, as the view leaves it out.
        let mut entries = Vec::with_capacity(slots.len());
        let mut kept_starts = vec![0usize; n + 1];
        for k in 0..n {
            for slot in &mut slots[starts[k]..starts[k + 1]] {
                if let Some(e) = slot.take() {
                    entries.push(e);
                }
            }
            kept_starts[k + 1] = entries.len();
        }
        Traced {
            len: plan.items.len(),
            replaced: plan.dedup.replacements.len(),
            bytes_saved: plan.dedup.bytes_saved(),
            first,
            entries,
            starts: kept_starts,
        }
    }

    /// The view entries that come from logged entry `i` (of the page).
    fn of(&self, i: usize) -> impl Iterator<Item = &Entry<Payload>> {
        let k = i - self.first;
        self.entries[self.starts[k]..self.starts[k + 1]].iter()
    }

    fn count_of(&self, i: usize) -> usize {
        let k = i - self.first;
        self.starts[k + 1] - self.starts[k]
    }
}

/// What the view did to a logged entry, or what an entry of the view is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// (raw) Not in the view: compaction dropped it.
    NotSent,
    /// (raw) The view has a summary in its place.
    Summarized,
    /// Its arguments are not sent.
    ArgumentsStripped,
    /// Its result is replaced by `[compacted] ...`.
    ResultCompacted,
    /// A resource in it is sent as a reference to an earlier copy.
    Deduplicated,
    /// (raw) A call without a result: the view adds an error result.
    Interrupted,
    /// (model) A summary a compaction put in place of turns.
    Summary,
    /// (model) The error result added for an interrupted call.
    Synthetic,
}

impl Mark {
    fn text(self, mode: ViewMode) -> &'static str {
        match (self, mode) {
            (Mark::NotSent, _) => "compacted: not sent",
            (Mark::Summarized, _) => "compacted: a summary is sent instead",
            (Mark::ArgumentsStripped, ViewMode::Raw) => "compacted: arguments not sent",
            (Mark::ArgumentsStripped, ViewMode::Model) => "compacted: arguments stripped",
            (Mark::ResultCompacted, ViewMode::Raw) => "compacted: result not sent",
            (Mark::ResultCompacted, ViewMode::Model) => "compacted: result replaced",
            (Mark::Deduplicated, ViewMode::Raw) => "deduplicated: sent as a reference",
            (Mark::Deduplicated, ViewMode::Model) => "deduplicated: a reference to an earlier copy",
            (Mark::Interrupted, _) => "interrupted: the model is sent an error result",
            (Mark::Summary, _) => "compacted: summary",
            (Mark::Synthetic, _) => "added: the call was interrupted",
        }
    }

    fn class(self) -> &'static str {
        match self {
            Mark::Deduplicated => "mark deduplicated",
            Mark::Interrupted | Mark::Synthetic => "mark repaired",
            Mark::NotSent
            | Mark::Summarized
            | Mark::ArgumentsStripped
            | Mark::ResultCompacted
            | Mark::Summary => "mark compacted",
        }
    }
}

/// Whether `entry` is the request a summary is injected with.
fn is_summary_request(entry: &Entry<Payload>) -> bool {
    matches!(entry.event().map(|e| &e.kind),
        Some(EventKind::ChatRequest(r)) if r.content == SUMMARY_REQUEST)
}

/// What the view did to logged entry `raw`, whose view entries are `view`.
fn raw_mark(raw: &Entry, view: &[&Entry<Payload>]) -> Option<Mark> {
    if !in_view(raw) {
        return None;
    }
    let turn_start = matches!(raw.event().map(|e| &e.kind), Some(EventKind::TurnStart));
    let Some(first) = view.first() else {
        // A turn start not sent is no news: its turn's heading says why.
        if turn_start {
            return None;
        }
        return Some(Mark::NotSent);
    };
    if view.iter().any(|v| is_summary_request(v))
        && !is_summary_request(&raw.clone().into_payload_refs())
    {
        return Some(Mark::Summarized);
    }
    if turn_start {
        return None;
    }
    let changed = model_mark(raw, first);
    match (changed, view.get(1)) {
        (None, Some(second)) if model_mark(raw, second) == Some(Mark::Synthetic) => {
            Some(Mark::Interrupted)
        }
        (changed, _) => changed,
    }
}

/// What entry `view` of the view is, given the logged entry it comes from.
fn model_mark(raw: &Entry, view: &Entry<Payload>) -> Option<Mark> {
    let (Some(r), Some(v)) = (raw.event(), view.event()) else {
        return None;
    };
    match (&r.kind, &v.kind) {
        (EventKind::ToolCallRequest(_), EventKind::ToolCallResponse(_)) => {
            return Some(Mark::Synthetic)
        }
        (EventKind::ChatRequest(rr), EventKind::ChatRequest(vr))
            if vr.content == SUMMARY_REQUEST && rr.content != SUMMARY_REQUEST =>
        {
            return Some(Mark::Summary)
        }
        _ => {}
    }
    if raw.clone().into_payload_refs() == *view {
        return None;
    }
    Some(match (&r.kind, &v.kind) {
        (EventKind::ToolCallRequest(_), EventKind::ToolCallRequest(_)) => Mark::ArgumentsStripped,
        // Deduplication replaces resource blocks one by one; compaction
        // replaces the whole content by one text block.
        (EventKind::ToolCallResponse(rr), EventKind::ToolCallResponse(vr))
            if rr.content.len() == vr.content.len()
                && rr.content.iter().any(|b| matches!(b, Block::Resource(_))) =>
        {
            Mark::Deduplicated
        }
        (EventKind::ToolCallResponse(_), EventKind::ToolCallResponse(_)) => Mark::ResultCompacted,
        (EventKind::ChatRequest(_), EventKind::ChatRequest(_)) => Mark::Deduplicated,
        // A summary's response (or its turn start) in place of the first
        // event of the run.
        _ => Mark::Summary,
    })
}

/// The compactions of a conversation, with their ordinals, and which are
/// revoked.
struct Compactions<'a> {
    all: Vec<(u64, &'a Compaction)>,
    revoked: HashSet<u64>,
}

impl<'a> Compactions<'a> {
    fn new(heads: &'a [EntryHead<'_>]) -> Compactions<'a> {
        let all = heads
            .iter()
            .filter_map(|h| match &h.kind {
                HeadKind::Compaction(c) => Some(&**c),
                _ => None,
            })
            .enumerate()
            .map(|(k, c)| (k as u64, c))
            .collect();
        let revoked = heads
            .iter()
            .filter_map(|h| match h.kind {
                HeadKind::CompactionUndo(n) => Some(n),
                _ => None,
            })
            .collect();
        Compactions { all, revoked }
    }

    /// The compactions in effect over `turn` (not revoked).
    fn covering(&self, turn: u64) -> impl Iterator<Item = &(u64, &'a Compaction)> {
        self.all.iter().filter(move |(k, c)| {
            c.from_turn <= turn && turn <= c.to_turn && !self.revoked.contains(k)
        })
    }
}

/// What a compaction does, in words.
fn compaction_words(c: &Compaction) -> String {
    let mut parts = Vec::new();
    if c.summary.is_some() {
        parts.push("summarized".to_owned());
    }
    if c.strip_reasoning {
        parts.push("reasoning stripped".to_owned());
    }
    match c.tool_calls {
        Some(ToolCallPolicy::Omit) => parts.push("tool calls omitted".to_owned()),
        Some(ToolCallPolicy::Strip { request, response }) => {
            let what = match (request, response) {
                (true, true) => "tool arguments and results stripped",
                (true, false) => "tool arguments stripped",
                (false, true) => "tool results stripped",
                (false, false) => "tool calls kept",
            };
            parts.push(what.to_owned());
        }
        None => {}
    }
    if parts.is_empty() {
        parts.push("no change".to_owned());
    }
    parts.join(", ")
}

/// What rendering a page keeps track of.
struct Render<'a> {
    store: &'a Store,
    mode: ViewMode,
    /// Tool names by call id, as the requests so far name them.
    names: HashMap<String, String>,
    /// Blobs read for this page so far.
    inline_reads: Cell<usize>,
}

/// The page of conversation `id` that `query` asks for.
pub fn conversation_page(
    store: &Store,
    id: &ConversationId,
    query: &ConversationQuery,
) -> Result<String, Error> {
    let conv = store.open_entries(id)?;
    let heads = conv.heads()?;
    let state = conv.state(&heads)?;
    let turn_of = turns_of(&heads);
    let pages = Pages::new(&turn_of);
    let current = query.page.clamp(1, pages.count());
    let range = pages.range(current);
    // The page's entries, decoded: the only ones.
    let logged: Vec<Entry> = range
        .clone()
        .map(|i| conv.entry(i))
        .collect::<Result<_, Error>>()?;
    let traced = conv.settings(&heads).map(|settings| {
        Traced::new(
            &plan_view(&heads, Some(&settings.base)),
            range.start,
            &logged,
        )
    });
    let compactions = Compactions::new(&heads);
    // The model view needs the traced view; without one, the raw history
    // is shown with the reason.
    let mode = match (&traced, query.view) {
        (Ok(_), mode) => mode,
        (Err(_), _) => ViewMode::Raw,
    };
    let mut render = Render {
        store,
        mode,
        names: tool_names(&heads[..range.start], &logged),
        inline_reads: Cell::new(0),
    };
    let meta = &state.metadata;
    let title = meta.title().unwrap_or("(untitled)").to_owned();
    let page_query = |view: ViewMode, page: usize| ConversationQuery { view, page };
    let facts = Facts {
        id,
        state: &state,
        log_end: conv.log_end(),
        sent: traced.as_ref().ok().map(|t| t.len),
    };
    Ok(page(&title, Section::Conversations, |h| {
        h.el(Tag::Header, &[Attr::Class("conversation")], |h| {
            h.el_text(Tag::H1, &[], &title);
            summary(h, &facts);
            view_toggle(h, id, query.view, current);
        });
        if let Some(tail) = conv.torn_tail() {
            h.el_text(Tag::P, &[Attr::Class("error")], &tail.warning(id));
        }
        if let Err(e) = &traced {
            h.el_text(
                Tag::P,
                &[Attr::Class("error")],
                &format!("What the model is sent cannot be computed, so the history is shown as logged, unmarked: {e}"),
            );
        }
        if let (Ok(t), ViewMode::Model) = (&traced, mode) {
            h.el_text(
                Tag::P,
                &[Attr::Class("summary")],
                &format!(
                    "The model is sent {} of the {} logged entries (config changes, compactions and inquiries are not part of what it is sent); deduplication replaced {} by references, {} fewer.",
                    count(t.len as u64),
                    count(heads.len() as u64),
                    counted(t.replaced as u64, "resource", "resources"),
                    size(t.bytes_saved)
                ),
            );
        }
        let page_link = |n: usize| Link::conversation(id, &page_query(query.view, n));
        pager(h, current, pages.count(), page_link);
        if heads.is_empty() {
            h.el_text(Tag::P, &[Attr::Class("none")], "No events yet.");
        }
        let mut i = range.start;
        while i < range.end {
            let turn = turn_of[i];
            let turn_start = turn_of.partition_point(|&t| t < turn);
            let turn_end = turn_of.partition_point(|&t| t <= turn);
            let part = i..turn_end.min(range.end);
            let whole = turn_start..turn_end;
            let starts_here = turn_start >= range.start;
            let id_attr = format!("turn-{turn}");
            let mut attrs = vec![Attr::Class(if starts_here {
                "turn"
            } else {
                "turn continued"
            })];
            if starts_here {
                attrs.push(Attr::Id(&id_attr));
            }
            h.el(Tag::Section, &attrs, |h| {
                let heading = TurnHeading {
                    id,
                    query: &page_query(query.view, pages.of_entry(turn_start)),
                    turn,
                    heads: &heads[whole.clone()],
                    part: (part.start - whole.start)..(part.end - whole.start),
                    compactions: &compactions,
                };
                turn_heading(h, &heading);
                if part.start > whole.start {
                    h.el_text(
                        Tag::P,
                        &[Attr::Class("continued")],
                        &format!(
                            "Continued from page {}: entries {}–{} of the turn's {}.",
                            current - 1,
                            count((part.start - whole.start + 1) as u64),
                            count((part.end - whole.start) as u64),
                            count(whole.len() as u64)
                        ),
                    );
                }
                let page_entries = &logged[part.start - range.start..part.end - range.start];
                match (&traced, mode) {
                    (Ok(t), ViewMode::Model) => render.model_turn(
                        h,
                        &ModelTurn {
                            entries: page_entries,
                            first: part.start,
                            traced: t,
                            id,
                            turn,
                            pages: &pages,
                            turn_start,
                        },
                    ),
                    (t, _) => render.raw_turn(
                        h,
                        page_entries,
                        part.start,
                        t.as_ref().ok(),
                        compactions_before(&heads[..part.start]),
                        &compactions,
                    ),
                }
                if part.end < whole.end {
                    h.el(Tag::P, &[Attr::Class("continued")], |h| {
                        h.text(&format!(
                            "The turn goes on: {} more entries on the ",
                            count((whole.end - part.end) as u64)
                        ));
                        h.el_text(Tag::A, &[Attr::Href(&page_link(current + 1))], "next page");
                        h.text(".");
                    });
                }
            });
            i = part.end;
        }
        pager(h, current, pages.count(), page_link);
    }))
}

/// The tool names the responses among `logged` need, from the requests
/// among `before` (the heads of the entries before them) and `logged`
/// itself as it is rendered: only those, so that a page holds no more
/// names than it shows.
fn tool_names(before: &[EntryHead<'_>], logged: &[Entry]) -> HashMap<String, String> {
    let needed: HashSet<&str> = logged
        .iter()
        .filter_map(|e| match e.event().map(|e| &e.kind) {
            Some(EventKind::ToolCallResponse(r)) => Some(r.id.as_str()),
            _ => None,
        })
        .collect();
    let mut names = HashMap::new();
    for h in before {
        if let HeadKind::ToolCallRequest { id, name } = h.kind {
            if needed.contains(id) {
                names.insert(id.to_owned(), name.to_owned());
            }
        }
    }
    names
}

/// The number of compaction entries among `heads`.
fn compactions_before(heads: &[EntryHead<'_>]) -> u64 {
    heads
        .iter()
        .filter(|h| matches!(h.kind, HeadKind::Compaction(_)))
        .count() as u64
}

/// What the facts under a conversation's title are made from.
struct Facts<'a> {
    id: &'a ConversationId,
    state: &'a ConversationState,
    log_end: u64,
    /// Entries sent to the model, if the view could be computed.
    sent: Option<usize>,
}

/// The conversation's facts under its title.
fn summary(h: &mut Html, facts: &Facts<'_>) {
    let state = facts.state;
    let meta = &state.metadata;
    h.el(Tag::Dl, &[Attr::Class("facts")], |h| {
        let fact = |h: &mut Html, name: &str, value: &str| {
            h.el_text(Tag::Dt, &[], name);
            h.el_text(Tag::Dd, &[], value);
        };
        h.el_text(Tag::Dt, &[], "id");
        h.el(Tag::Dd, &[], |h| {
            h.el_text(Tag::Code, &[], facts.id.as_str());
            h.text(" · ");
            h.el_text(
                Tag::A,
                &[Attr::Href(&Link::conversation_stats(facts.id))],
                "statistics and plot",
            );
        });
        if let Some(t) = meta.created() {
            h.el_text(Tag::Dt, &[], "created");
            h.el(Tag::Dd, &[], |h| time(h, &t));
        }
        if let Some(t) = state.last_activity() {
            h.el_text(Tag::Dt, &[], "last activity");
            h.el(Tag::Dd, &[], |h| time(h, &t));
        }
        fact(h, "turns", &count(state.turns()));
        fact(h, "events", &count(state.entries));
        fact(
            h,
            "content",
            &format!(
                "{} in {} references; log {}",
                size(state.content_bytes),
                count(state.blob_refs),
                size(facts.log_end)
            ),
        );
        if let Some(sent) = facts.sent {
            fact(
                h,
                "sent to the model",
                &format!("{} events", count(sent as u64)),
            );
        }
        let labels = meta.labels();
        if !labels.is_empty() {
            h.el_text(Tag::Dt, &[], "labels");
            h.el(Tag::Dd, &[], |h| {
                for (k, v) in &labels {
                    h.el_text(Tag::Span, &[Attr::Class("label")], &format!("{k}={v}"));
                    h.text(" ");
                }
            });
        }
    });
}

/// The toggle between the raw history and what the model is sent.
fn view_toggle(h: &mut Html, id: &ConversationId, mode: ViewMode, page: usize) {
    h.el(
        Tag::Nav,
        &[Attr::Class("toggle"), Attr::AriaLabel("history")],
        |h| {
            for (m, text) in [
                (ViewMode::Raw, "History as logged"),
                (ViewMode::Model, "What the model is sent"),
            ] {
                let link = Link::conversation(id, &ConversationQuery { view: m, page });
                if m == mode {
                    h.el_text(
                        Tag::A,
                        &[Attr::Href(&link), Attr::AriaCurrent("page")],
                        text,
                    );
                } else {
                    h.el_text(Tag::A, &[Attr::Href(&link)], text);
                }
            }
        },
    );
}

/// A turn's heading on a page.
struct TurnHeading<'a> {
    id: &'a ConversationId,
    /// The query of the page the turn starts on.
    query: &'a ConversationQuery,
    turn: u64,
    /// The heads of the whole turn.
    heads: &'a [EntryHead<'a>],
    /// The part of the turn on this page (indices into `heads`).
    part: Range<usize>,
    compactions: &'a Compactions<'a>,
}

fn turn_heading(h: &mut Html, t: &TurnHeading<'_>) {
    h.el(Tag::H2, &[], |h| {
        h.el_text(
            Tag::A,
            &[Attr::Href(&Link::conversation_turn(t.id, t.query, t.turn))],
            &format!("Turn {}", t.turn),
        );
        if let Some(at) = t.heads.iter().find(|h| h.is_event()).map(|h| h.timestamp) {
            h.text(" ");
            h.el(Tag::Small, &[], |h| time(h, &at));
        }
        if t.part.len() < t.heads.len() {
            h.text(" ");
            h.el_text(
                Tag::Small,
                &[Attr::Class("part")],
                &format!(
                    "entries {}–{} of {}",
                    count(t.part.start as u64 + 1),
                    count(t.part.end as u64),
                    count(t.heads.len() as u64)
                ),
            );
        }
        for (k, c) in t.compactions.covering(t.turn) {
            h.text(" ");
            h.el_text(
                Tag::Span,
                &[
                    Attr::Class("mark compacted"),
                    Attr::Title(&format!(
                        "compaction #{} of turns {}–{}{}",
                        k + 1,
                        c.from_turn,
                        c.to_turn,
                        c.source.map(|s| format!(" ({s})")).unwrap_or_default()
                    )),
                ],
                &format!("compaction #{}: {}", k + 1, compaction_words(c)),
            );
        }
    });
}

/// What the model is sent of the part of one turn on a page.
struct ModelTurn<'a> {
    /// The logged entries of the part.
    entries: &'a [Entry],
    /// The index of the first of them.
    first: usize,
    traced: &'a Traced,
    id: &'a ConversationId,
    turn: u64,
    pages: &'a Pages,
    /// The turn's first entry.
    turn_start: usize,
}

impl Render<'_> {
    fn note_names(&mut self, entry: &Entry) {
        if let Some(EventKind::ToolCallRequest(r)) = entry.event().map(|e| &e.kind) {
            self.names.insert(r.id.clone(), r.name.clone());
        }
    }

    /// The logged entries `entries` (from entry `first` on) of one turn,
    /// with what the view did to each; `compaction_ordinal`: the
    /// compaction entries before them.
    fn raw_turn(
        &mut self,
        h: &mut Html,
        entries: &[Entry],
        first: usize,
        traced: Option<&Traced>,
        mut compaction_ordinal: u64,
        compactions: &Compactions<'_>,
    ) {
        for (k, raw) in entries.iter().enumerate() {
            let i = first + k;
            self.note_names(raw);
            let mark = traced.and_then(|t| {
                let view: Vec<&Entry<Payload>> = t.of(i).collect();
                raw_mark(raw, &view)
            });
            if matches!(raw.event().map(|e| &e.kind), Some(EventKind::TurnStart)) && mark.is_none()
            {
                continue;
            }
            let ordinal = match raw.event().map(|e| &e.kind) {
                Some(EventKind::Compaction(_)) => {
                    compaction_ordinal += 1;
                    Some(compaction_ordinal - 1)
                }
                _ => None,
            };
            let entry = raw.clone().into_payload_refs();
            self.entry(
                h,
                &entry,
                mark,
                ordinal.map(|k| (k, compactions.revoked.contains(&k))),
            );
        }
    }

    /// What the model is sent of the logged entries of `part`; entries it
    /// is not sent are counted where they were.
    fn model_turn(&mut self, h: &mut Html, part: &ModelTurn<'_>) {
        let mut hidden: Option<(usize, u64)> = None;
        let flush = |h: &mut Html, hidden: &mut Option<(usize, u64)>| {
            let Some((at, n)) = hidden.take() else {
                return;
            };
            // Where they are shown as logged: the same page of the raw
            // history, at the turn's heading if it starts there.
            let page = part.pages.of_entry(at);
            let query = ConversationQuery {
                view: ViewMode::Raw,
                page,
            };
            let raw = if part.pages.of_entry(part.turn_start) == page {
                Link::conversation_turn(part.id, &query, part.turn)
            } else {
                Link::conversation(part.id, &query)
            };
            h.el(Tag::P, &[Attr::Class("hidden-events")], |h| {
                h.el_text(
                    Tag::Span,
                    &[Attr::Class("mark compacted")],
                    &format!(
                        "{} logged {} not sent (compacted)",
                        count(n),
                        if n == 1 { "event" } else { "events" }
                    ),
                );
                h.text(" ");
                h.el_text(Tag::A, &[Attr::Href(&raw)], "see them as logged");
            });
        };
        for (k, raw) in part.entries.iter().enumerate() {
            let i = part.first + k;
            self.note_names(raw);
            if part.traced.count_of(i) == 0 {
                if in_view(raw)
                    && !matches!(raw.event().map(|e| &e.kind), Some(EventKind::TurnStart))
                {
                    let (_, n) = hidden.get_or_insert((i, 0));
                    *n += 1;
                }
                continue;
            }
            flush(h, &mut hidden);
            for v in part.traced.of(i) {
                if matches!(v.event().map(|e| &e.kind), Some(EventKind::TurnStart)) {
                    continue;
                }
                let mark = model_mark(raw, v);
                self.entry(h, v, mark, None);
            }
        }
        flush(h, &mut hidden);
    }

    /// One entry, with its mark. `compaction`: a compaction's ordinal and
    /// whether it is revoked.
    fn entry(
        &self,
        h: &mut Html,
        entry: &Entry<Payload>,
        mark: Option<Mark>,
        compaction: Option<(u64, bool)>,
    ) {
        let Entry::Event(event) = entry else {
            if let Entry::Unknown(object) = entry {
                let kind = object.get("type").and_then(Value::as_str).unwrap_or("?");
                let title = match jpstore_engine::internal::event::json::misfit(object) {
                    Some(why) => format!(
                        "“{kind}” entry that does not read as one ({why}), kept as it is; not in the view"
                    ),
                    None => format!("unknown entry “{kind}”, kept as it is"),
                };
                self.event_box(h, "kind-unknown", &title, None, mark, |h, r| {
                    r.json(h, "entry", &Value::Object(object.clone()), false);
                });
            }
            return;
        };
        let at = Some(event.timestamp);
        match &event.kind {
            EventKind::TurnStart => {
                self.event_box(h, "kind-turn", "turn start", at, mark, |_, _| {});
            }
            EventKind::ChatRequest(r) => {
                let who = r.author.as_deref().unwrap_or("user");
                self.event_box(h, "kind-user", who, at, mark, |h, rd| {
                    h.el_text(Tag::Div, &[Attr::Class("text")], &r.content);
                    if let Some(schema) = &r.schema {
                        rd.json(h, "answer schema", &Value::Object(schema.clone()), true);
                    }
                    for res in &r.resources {
                        rd.resource(h, res);
                    }
                });
            }
            EventKind::ChatResponse(ChatResponse::Message(m)) => {
                self.event_box(h, "kind-assistant", "assistant", at, mark, |h, _| {
                    h.el_text(Tag::Div, &[Attr::Class("text")], m);
                });
            }
            EventKind::ChatResponse(ChatResponse::Reasoning(m)) => {
                self.event_box(
                    h,
                    "kind-reasoning",
                    "assistant · reasoning",
                    at,
                    mark,
                    |h, _| {
                        h.el(Tag::Details, &[Attr::Class("reasoning")], |h| {
                            h.el_text(
                                Tag::Summary,
                                &[],
                                &format!("reasoning, {} — show", size(m.len() as u64)),
                            );
                            h.el_text(Tag::Div, &[Attr::Class("text")], m);
                        });
                    },
                );
            }
            EventKind::ChatResponse(ChatResponse::Data(d)) => {
                self.event_box(
                    h,
                    "kind-assistant",
                    "assistant · structured output",
                    at,
                    mark,
                    |h, rd| {
                        rd.json(h, "data", d, false);
                    },
                );
            }
            EventKind::ToolCallRequest(r) => {
                self.event_box(h, "kind-tool-call", "tool call", at, mark, |h, rd| {
                    h.el(Tag::P, &[Attr::Class("tool")], |h| {
                        h.el_text(Tag::Code, &[Attr::Class("tool-name")], &r.name);
                        h.text(" ");
                        h.el_text(
                            Tag::Small,
                            &[Attr::Class("call-id")],
                            &format!("[{}]", r.id),
                        );
                    });
                    rd.json(h, "arguments", &Value::Object(r.arguments.clone()), false);
                });
            }
            EventKind::ToolCallResponse(r) => {
                let label = if r.is_error {
                    "tool result · error"
                } else {
                    "tool result"
                };
                self.event_box(h, "kind-tool-result", label, at, mark, |h, rd| {
                    h.el(Tag::P, &[Attr::Class("tool")], |h| {
                        let name = rd.names.get(&r.id).map_or("unknown tool", String::as_str);
                        h.el_text(Tag::Code, &[Attr::Class("tool-name")], name);
                        h.text(" ");
                        h.el_text(
                            Tag::Small,
                            &[Attr::Class("call-id")],
                            &format!("[{}]", r.id),
                        );
                    });
                    for block in &r.content {
                        match block {
                            Block::Text(t) => {
                                rd.payload(h, &t.text, true, t.mime_type.as_deref(), "output");
                            }
                            Block::Resource(rb) => rd.resource(h, &rb.resource),
                            Block::Other(o) => {
                                let kind = o.get("type").and_then(Value::as_str).unwrap_or("?");
                                rd.json(
                                    h,
                                    &format!("“{kind}” block"),
                                    &Value::Object(o.clone()),
                                    true,
                                );
                            }
                        }
                    }
                });
            }
            EventKind::InquiryRequest(r) => {
                self.event_box(h, "kind-inquiry", "inquiry", at, mark, |h, rd| {
                    if let Some(text) = r.question.get("text").and_then(Value::as_str) {
                        h.el_text(Tag::Div, &[Attr::Class("text")], text);
                    }
                    rd.json(h, "question", &Value::Object(r.question.clone()), true);
                    rd.json(h, "asked by", &Value::Object(r.source.clone()), true);
                });
            }
            EventKind::InquiryResponse(r) => {
                self.event_box(h, "kind-inquiry", "inquiry answer", at, mark, |h, rd| {
                    rd.json(h, "answer", &r.answer, false);
                });
            }
            EventKind::ConfigDelta(d) => {
                let keys: Vec<&str> = d.delta.keys().map(String::as_str).collect();
                let label = format!("config change: {}", keys.join(", "));
                self.event_box(h, "kind-meta", &label, at, mark, |h, rd| {
                    rd.json(h, "change", &Value::Object(d.delta.clone()), true);
                });
            }
            EventKind::Compaction(c) => {
                let (ordinal, revoked) = compaction.unwrap_or((0, false));
                let label = format!(
                    "compaction #{} of turns {}–{}{}",
                    ordinal + 1,
                    c.from_turn,
                    c.to_turn,
                    if revoked { " (undone)" } else { "" }
                );
                self.event_box(h, "kind-meta", &label, at, mark, |h, _| {
                    h.el_text(
                        Tag::P,
                        &[],
                        &format!(
                            "{}{}",
                            compaction_words(c),
                            c.source
                                .map(|s| format!(
                                    "; made {}",
                                    match s {
                                        CompactionSource::Auto => "automatically",
                                        CompactionSource::Manual => "by hand",
                                    }
                                ))
                                .unwrap_or_default()
                        ),
                    );
                    if let Some(s) = &c.summary {
                        h.el(Tag::Details, &[], |h| {
                            h.el_text(
                                Tag::Summary,
                                &[],
                                &format!("summary, {}", size(s.len() as u64)),
                            );
                            h.el_text(Tag::Div, &[Attr::Class("text")], s);
                        });
                    }
                });
            }
            EventKind::CompactionUndo(u) => {
                let label = format!("compaction #{} undone", u.undoes + 1);
                self.event_box(h, "kind-meta", &label, at, mark, |_, _| {});
            }
        }
    }

    /// The frame of one entry: a heading with its role, time and mark, and
    /// `body`.
    fn event_box(
        &self,
        h: &mut Html,
        class: &'static str,
        role: &str,
        at: Option<jpstore_engine::timestamp::Timestamp>,
        mark: Option<Mark>,
        body: impl FnOnce(&mut Html, &Self),
    ) {
        h.el(Tag::Div, &[Attr::Class(event_class(class, mark))], |h| {
            h.el(Tag::Div, &[Attr::Class("event-head")], |h| {
                h.el_text(Tag::Span, &[Attr::Class("role")], role);
                if let Some(t) = at {
                    h.text(" ");
                    h.el(Tag::Small, &[], |h| time(h, &t));
                }
                if let Some(m) = mark {
                    h.text(" ");
                    h.el_text(Tag::Span, &[Attr::Class(m.class())], m.text(self.mode));
                }
            });
            body(h, self);
        });
    }

    /// A JSON value: in a `<pre>`, folded when it is long (or `folded`).
    fn json(&self, h: &mut Html, label: &str, value: &Value, folded: bool) {
        let text = serde_json::to_string_pretty(value).unwrap_or_else(|e| e.to_string());
        if folded || text.len() > FOLD_JSON_OVER {
            h.el(Tag::Details, &[Attr::Class("json")], |h| {
                h.el_text(
                    Tag::Summary,
                    &[],
                    &format!("{label}, {} — show", size(text.len() as u64)),
                );
                h.el_text(Tag::Pre, &[], &text);
            });
        } else {
            h.el_text(Tag::Pre, &[Attr::Class("json"), Attr::Title(label)], &text);
        }
    }

    /// A resource: URI, name, MIME type, size, and its content.
    fn resource(&self, h: &mut Html, res: &Resource<Payload>) {
        let (text, payload) = match &res.content {
            ResourceContent::Text(p) => (true, p),
            ResourceContent::Binary(p) => (false, p),
        };
        h.el(Tag::Div, &[Attr::Class("resource")], |h| {
            h.el(Tag::P, &[Attr::Class("resource-head")], |h| {
                h.el_text(Tag::Span, &[Attr::Class("badge")], "resource");
                h.text(" ");
                h.el_text(Tag::Code, &[Attr::Class("uri")], &res.uri);
                let mut facts = Vec::new();
                if let Some(name) = &res.name {
                    facts.push(name.clone());
                }
                facts.push(
                    res.mime_type
                        .clone()
                        .unwrap_or_else(|| if text { "text" } else { "binary" }.to_owned()),
                );
                facts.push(size(payload.len()));
                h.text(" ");
                h.el_text(Tag::Small, &[], &facts.join(" · "));
            });
            if let Some(title) = &res.title {
                h.el_text(Tag::P, &[Attr::Class("resource-title")], title);
            }
            if let Some(d) = &res.description {
                h.el_text(Tag::P, &[Attr::Class("resource-description")], d);
            }
            self.payload(h, payload, text, res.mime_type.as_deref(), "content");
            if let Some(f) = &res.formatted {
                self.payload(h, f, true, None, "formatted for the model");
            }
        });
    }

    /// Content: inline text in a `<pre>`, small text read from the blob
    /// store, anything else folded and fetched on demand or linked.
    fn payload(
        &self,
        h: &mut Html,
        payload: &Payload,
        text: bool,
        mime: Option<&str>,
        label: &str,
    ) {
        let r = match payload {
            Payload::Inline(bytes) => {
                h.el_text(
                    Tag::Pre,
                    &[Attr::Class("content")],
                    &String::from_utf8_lossy(bytes),
                );
                return;
            }
            Payload::Ref(r) => r,
        };
        if text && r.size <= INLINE_TEXT_MAX && self.inline_reads.get() < INLINE_READS_MAX {
            self.inline_reads.set(self.inline_reads.get() + 1);
            match self.store.blobs().get(&r.id) {
                Ok(bytes) => {
                    h.el_text(
                        Tag::Pre,
                        &[Attr::Class("content")],
                        &String::from_utf8_lossy(&bytes),
                    );
                }
                Err(e) => {
                    h.el_text(
                        Tag::P,
                        &[Attr::Class("error")],
                        &format!("{label}: blob {} cannot be read: {e}", r.id),
                    );
                }
            }
            return;
        }
        let whole = Link::blob(&r.id, mime, false);
        let download = Link::blob(&r.id, mime, true);
        let links = |h: &mut Html| {
            h.el(Tag::P, &[Attr::Class("blob-links")], |h| {
                h.el_text(
                    Tag::A,
                    &[Attr::Href(&whole)],
                    if text { "whole text" } else { "open" },
                );
                h.text(" · ");
                h.el_text(Tag::A, &[Attr::Href(&download)], "download");
                h.text(" · ");
                h.el_text(
                    Tag::Code,
                    &[Attr::Class("blob-id"), Attr::Title("SHA-256")],
                    &r.id.to_string(),
                );
            });
        };
        if !text {
            h.el(Tag::Div, &[Attr::Class("blob binary")], |h| {
                h.el_text(Tag::P, &[], &format!("{label}: binary, {}", size(r.size)));
                links(h);
            });
            return;
        }
        let preview = Link::blob_preview(&r.id);
        h.el(Tag::Details, &[Attr::Class("blob"), Attr::DataBlob(&preview)], |h| {
            h.el_text(
                Tag::Summary,
                &[],
                &format!("{label}, {} — show", size(r.size)),
            );
            h.el_text(
                Tag::Pre,
                &[Attr::Class("content lazy")],
                "(the first 64 KiB are fetched when this is unfolded, with the page's script; the links below need none)",
            );
            links(h);
        });
    }
}

fn event_class(kind: &'static str, mark: Option<Mark>) -> &'static str {
    // One class string per kind and mark state, fixed at compile time.
    macro_rules! classes {
        ($($k:literal),*) => {
            match (kind, mark.is_some()) {
                $(($k, false) => concat!("event ", $k),
                  ($k, true) => concat!("event marked ", $k),)*
                (_, false) => "event",
                (_, true) => "event marked",
            }
        };
    }
    classes!(
        "kind-unknown",
        "kind-turn",
        "kind-user",
        "kind-assistant",
        "kind-reasoning",
        "kind-tool-call",
        "kind-tool-result",
        "kind-inquiry",
        "kind-meta"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The turn of each entry of turns of `lens` entries.
    fn turns(lens: &[usize]) -> Vec<u64> {
        lens.iter()
            .enumerate()
            .flat_map(|(t, &n)| std::iter::repeat_n(t as u64, n))
            .collect()
    }

    #[test]
    fn pages_hold_whole_turns_and_split_only_longer_ones() {
        for lens in [
            vec![],
            vec![1],
            vec![3; 25],
            vec![150, 100, 60],
            vec![3, 1053, 2],
            vec![200, 200, 1],
            vec![199, 2, 401, 7, 1000],
            vec![100_000],
        ] {
            let turn_of = turns(&lens);
            let pages = Pages::new(&turn_of);
            let mut next = 0;
            for p in 1..=pages.count() {
                let r = pages.range(p);
                assert_eq!(r.start, next, "{lens:?}: pages are contiguous");
                assert!(r.len() <= ENTRIES_PER_PAGE, "{lens:?}: page {p}");
                assert!(!r.is_empty() || turn_of.is_empty(), "{lens:?}: page {p}");
                let mut on_page: Vec<u64> = turn_of[r.clone()].to_vec();
                on_page.dedup();
                assert!(on_page.len() as u64 <= TURNS_PER_PAGE, "{lens:?}: page {p}");
                for i in r.clone() {
                    assert_eq!(pages.of_entry(i), p);
                }
                next = r.end;
            }
            assert_eq!(next, turn_of.len(), "{lens:?}: every entry on a page");
            // A turn that fits on a page is on one page.
            let mut start = 0;
            for &n in &lens {
                if n <= ENTRIES_PER_PAGE && n > 0 {
                    assert_eq!(
                        pages.of_entry(start),
                        pages.of_entry(start + n - 1),
                        "{lens:?}: a turn of {n} split"
                    );
                }
                start += n;
            }
        }
        assert_eq!(Pages::new(&turns(&[100_000])).count(), 500);
        assert_eq!(Pages::new(&turns(&[3; 25])).count(), 3);
    }

    #[test]
    fn event_classes_are_fixed_strings() {
        assert_eq!(event_class("kind-user", None), "event kind-user");
        assert_eq!(
            event_class("kind-user", Some(Mark::NotSent)),
            "event marked kind-user"
        );
        assert_eq!(event_class("other", None), "event");
    }
}
