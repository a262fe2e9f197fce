//! Statistics of conversations and of the store: what `jp-store stats`
//! prints, computed from the logs alone (no blob content is read).
//!
//! Context sizes are in characters of the JSON text an entry carries
//! ([`entry_chars`]), tokens estimated as characters / 4 ([`tokens`]).

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;

use crate::compaction::entry_chars;
use crate::conversation::read::Conversation;
use crate::conversation::ConversationId;
use crate::error::{Error, Result};
use crate::event::turns::turn_indices;
use crate::event::{in_view, Entry, Payload};
use crate::projection::{view, view_traced};
use crate::store::Store;

/// Estimated tokens of `chars` characters (4 characters a token, rounded
/// up): the estimate compaction budgets use too.
pub fn tokens(chars: u64) -> u64 {
    chars.div_ceil(4)
}

/// Characters per turn of a conversation as it is logged and as its view
/// sends it, and the totals of the view without and with deduplication.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ContextSizes {
    /// Characters of each turn's events as logged.
    pub raw_per_turn: Vec<u64>,
    /// Characters of each turn's events in the view sent.
    pub view_per_turn: Vec<u64>,
    /// Characters of the events a view could hold, before compaction.
    pub raw: u64,
    /// Characters of the view with compactions applied.
    pub compacted: u64,
    /// Characters of the view sent (compacted and deduplicated).
    pub view: u64,
    /// Resources deduplication replaced by references.
    pub replaced: u64,
}

/// Counts of some conversations and, for the whole store, of its blob store.
#[derive(Debug, Default)]
pub struct StoreStats {
    /// The conversations counted, each with its context sizes.
    pub conversations: Vec<(ConversationId, ContextSizes)>,
    /// Conversations that could not be read, or whose config holds a bad
    /// setting: named and left out of every count.
    pub failed: Vec<(ConversationId, Error)>,
    /// Turns of the counted conversations.
    pub turns: u64,
    /// Entries (events and unknown entries).
    pub entries: u64,
    /// Entries by their `type` (an unknown one as `"<type> (unknown)"`).
    pub entries_by_type: BTreeMap<String, u64>,
    /// Log records.
    pub records: u64,
    /// Bytes of the logs.
    pub log_bytes: u64,
    /// Content references (with repetitions).
    pub content_references: u64,
    /// Bytes those references name.
    pub content_bytes_referenced: u64,
    /// Distinct blobs referenced (base configs included).
    pub distinct_blobs_referenced: usize,
    /// Raw bytes of those blobs.
    pub distinct_blob_bytes_referenced: u64,
    /// The sums of every counted conversation's context sizes (per-turn
    /// lists left empty).
    pub context: ContextSizes,
}

impl Store {
    /// [`ContextSizes`] of one conversation (reads its base config, no
    /// content).
    pub fn context_sizes(&self, conv: &Conversation) -> Result<ContextSizes> {
        let turns = conv.state.turns.turns() as usize;
        let turn_of = turn_indices(&conv.entries);
        let mut s = ContextSizes {
            raw_per_turn: vec![0; turns],
            view_per_turn: vec![0; turns],
            ..Default::default()
        };
        for (e, &t) in conv.entries.iter().zip(&turn_of) {
            if !in_view(e) {
                continue;
            }
            let e = e
                .clone()
                .try_map_content(&mut |r| Ok::<_, std::convert::Infallible>(Payload::Ref(r)))
                .unwrap_or_else(|never| match never {});
            let n = entry_chars(&e);
            s.raw += n;
            if let Some(slot) = s.raw_per_turn.get_mut(t as usize) {
                *slot += n;
            }
        }
        s.compacted = view(&conv.entries).iter().map(entry_chars).sum();
        let traced = view_traced(&conv.entries, &self.conversation_settings(conv)?.base)?;
        for (e, &i) in traced.entries.iter().zip(&traced.origin) {
            let n = entry_chars(e);
            s.view += n;
            if let Some(slot) = turn_of
                .get(i)
                .and_then(|&t| s.view_per_turn.get_mut(t as usize))
            {
                *slot += n;
            }
        }
        s.replaced = traced.dedup.replacements.len() as u64;
        Ok(s)
    }

    /// Counts the conversations `ids`. One that cannot be read (or whose
    /// config holds a bad setting) is put in [`StoreStats::failed`] and the
    /// others are counted.
    pub fn stats(&self, ids: &[ConversationId]) -> Result<StoreStats> {
        let mut out = StoreStats::default();
        let mut distinct = HashSet::new();
        for id in ids {
            let read = self
                .read(id)
                .and_then(|conv| self.context_sizes(&conv).map(|c| (conv, c)));
            let (conv, c) = match read {
                Ok(read) => read,
                Err(e) => {
                    out.failed.push((id.clone(), e));
                    continue;
                }
            };
            out.turns += conv.state.turns.turns();
            out.entries += conv.state.entries;
            out.records += conv.state.records;
            out.log_bytes += conv.log_end;
            out.content_references += conv.state.blob_refs;
            out.content_bytes_referenced += conv.state.content_bytes;
            for e in &conv.entries {
                let t = match e {
                    Entry::Event(ev) => ev.kind.type_name().to_owned(),
                    Entry::Unknown(o) => o
                        .get("type")
                        .and_then(|t| t.as_str())
                        .map_or_else(|| "(no type)".to_owned(), |t| format!("{t} (unknown)")),
                };
                *out.entries_by_type.entry(t).or_default() += 1;
                e.for_each_content(&mut |r| {
                    distinct.insert(r.id);
                });
            }
            if let Some(b) = &conv.state.metadata.base_config {
                distinct.insert(b.id);
            }
            out.context.raw += c.raw;
            out.context.compacted += c.compacted;
            out.context.view += c.view;
            out.context.replaced += c.replaced;
            out.conversations.push((id.clone(), c));
        }
        out.distinct_blobs_referenced = distinct.len();
        // A blob missing from the store counts as 0 bytes: stats describes,
        // fsck reports.
        out.distinct_blob_bytes_referenced = distinct
            .iter()
            .map(|blob| self.blobs().size(blob).unwrap_or(0))
            .sum();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::input::parse_input;
    use crate::event::json::ParseMode;
    use crate::timestamp::Timestamp;
    use crate::{NewConversation, StoreOptions};

    #[test]
    fn stats_count_every_conversation_and_name_one_that_cannot_be_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::init_dir(&dir.path().join("s"), StoreOptions::default()).expect("init");
        let text =
            "{\"type\":\"turn_start\"}\n{\"type\":\"chat_request\",\"content\":\"12345678\"}\n\
                    {\"type\":\"chat_response\",\"message\":\"abcd\"}";
        let ids: Vec<ConversationId> = ["a", "b"]
            .iter()
            .map(|n| ConversationId::parse(n).expect("id"))
            .collect();
        for id in &ids {
            let mut w = store
                .create(NewConversation {
                    id: Some(id.clone()),
                    ..Default::default()
                })
                .expect("create");
            let entries = parse_input(
                text,
                ParseMode::Strict {
                    now: Timestamp::now(),
                },
            )
            .expect("input")
            .entries;
            w.append(entries).expect("append");
        }
        let s = store.stats(&ids).expect("stats");
        assert!(s.failed.is_empty());
        assert_eq!((s.conversations.len(), s.turns, s.entries), (2, 2, 6));
        assert_eq!(s.entries_by_type.get("chat_request"), Some(&2));
        let one = &s.conversations[0].1;
        assert_eq!(one.raw_per_turn.len(), 1);
        assert_eq!(one.raw_per_turn[0], one.raw);
        assert!(one.raw > 0 && one.view == one.raw, "{one:?}");
        assert_eq!(s.context.raw, 2 * one.raw);
        assert_eq!(tokens(one.raw), one.raw.div_ceil(4));

        let missing = ConversationId::parse("gone").expect("id");
        let s = store
            .stats(&[ids[0].clone(), missing.clone()])
            .expect("stats");
        assert_eq!(s.conversations.len(), 1);
        assert_eq!(s.failed.len(), 1);
        assert_eq!(s.failed[0].0, missing);
        assert!(matches!(s.failed[0].1, Error::NotFound { .. }));
    }
}
