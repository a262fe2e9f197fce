//! Statistics of conversations and of the store: what `jp-store stats`
//! prints, computed from the logs alone (no blob content is read), and
//! their plot (`plot`).
//!
//! Context sizes are in characters of the JSON text an entry carries
//! (`entry_chars`), tokens estimated as characters / 4 (`tokens`).

pub(crate) mod plot;

use std::collections::{BTreeMap, HashSet};

use jpstore_blobstore::BlobId;
use serde::{Serialize, Serializer};

use crate::compaction::entry_chars;
use crate::conversation::read::Conversation;
use crate::conversation::ConversationId;
use crate::error::{Error, Result};
use crate::event::turns::turn_indices;
use crate::event::{in_view, Entry};
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

impl ContextSizes {
    /// What compaction saves: from the view before compaction to the view
    /// with compactions applied.
    pub fn saved_by_compaction(&self) -> Saved {
        Saved::between(self.raw, self.compacted)
    }

    /// What deduplication saves: from the compacted view to the view sent.
    pub fn saved_by_deduplication(&self) -> Saved {
        Saved::between(self.compacted, self.view)
    }
}

/// What a step of the view (compaction, deduplication) saves: characters
/// (`bytes`) and estimated tokens, negative when it adds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Saved {
    /// Characters saved.
    pub bytes: i64,
    /// Estimated tokens saved ([`tokens`] before less [`tokens`] after).
    pub tokens: i64,
}

impl Saved {
    /// From `before` to `after` characters.
    pub(crate) fn between(before: u64, after: u64) -> Saved {
        Saved {
            bytes: before as i64 - after as i64,
            tokens: tokens(before) as i64 - tokens(after) as i64,
        }
    }
}

/// The blob store's objects as `jp-store stats` counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct BlobStoreStats {
    /// Loose objects.
    pub loose_objects: usize,
    /// Bytes of the loose objects on disk.
    pub loose_bytes: u64,
    /// Packs.
    pub packs: usize,
    /// Objects in the packs.
    pub packed_objects: usize,
    /// Bytes of the pack files.
    pub pack_bytes: u64,
}

/// Counts of some conversations and, for the whole store, of its blob
/// store. Its `Serialize` is what `jp-store stats --json` prints: the
/// number of conversations counted, the totals, `context` (the summed
/// sizes in characters and estimated tokens, with what compaction and
/// deduplication save) and, when filled, `blob_store`.
#[derive(Debug, Default)]
#[non_exhaustive]
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
    /// Raw bytes of those blobs (those in `unsized_blobs` left out).
    pub distinct_blob_bytes_referenced: u64,
    /// Referenced blobs whose size could not be read (missing, or damaged
    /// where its size is kept), in id order, with why: named, and left out
    /// of `distinct_blob_bytes_referenced`.
    pub unsized_blobs: Vec<(BlobId, String)>,
    /// The sums of every counted conversation's context sizes (per-turn
    /// lists left empty).
    pub context: ContextSizes,
    /// The blob store's objects: for stats of the whole store, filled from
    /// [`of_blob_store`] (`None` from [`of_conversations`]).
    pub blob_store: Option<BlobStoreStats>,
}

impl Serialize for StoreStats {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Deduplication {
            #[serde(flatten)]
            saved: Saved,
            resources_replaced: u64,
        }
        #[derive(Serialize)]
        struct Context {
            raw_bytes: u64,
            raw_tokens: u64,
            compacted_bytes: u64,
            compacted_tokens: u64,
            view_bytes: u64,
            view_tokens: u64,
            saved_by_compaction: Saved,
            saved_by_deduplication: Deduplication,
        }
        #[derive(Serialize)]
        struct Unsized<'a> {
            blob: String,
            error: &'a str,
        }
        #[derive(Serialize)]
        struct Shape<'a> {
            conversations: usize,
            turns: u64,
            entries: u64,
            entries_by_type: &'a BTreeMap<String, u64>,
            records: u64,
            log_bytes: u64,
            content_references: u64,
            content_bytes_referenced: u64,
            distinct_blobs_referenced: usize,
            distinct_blob_bytes_referenced: u64,
            #[serde(skip_serializing_if = "Vec::is_empty")]
            unsized_blobs: Vec<Unsized<'a>>,
            context: Context,
            #[serde(skip_serializing_if = "Option::is_none")]
            blob_store: Option<BlobStoreStats>,
        }
        let c = &self.context;
        Shape {
            conversations: self.conversations.len(),
            turns: self.turns,
            entries: self.entries,
            entries_by_type: &self.entries_by_type,
            records: self.records,
            log_bytes: self.log_bytes,
            content_references: self.content_references,
            content_bytes_referenced: self.content_bytes_referenced,
            distinct_blobs_referenced: self.distinct_blobs_referenced,
            distinct_blob_bytes_referenced: self.distinct_blob_bytes_referenced,
            unsized_blobs: self
                .unsized_blobs
                .iter()
                .map(|(blob, error)| Unsized {
                    blob: blob.to_hex(),
                    error,
                })
                .collect(),
            context: Context {
                raw_bytes: c.raw,
                raw_tokens: tokens(c.raw),
                compacted_bytes: c.compacted,
                compacted_tokens: tokens(c.compacted),
                view_bytes: c.view,
                view_tokens: tokens(c.view),
                saved_by_compaction: c.saved_by_compaction(),
                saved_by_deduplication: Deduplication {
                    saved: c.saved_by_deduplication(),
                    resources_replaced: c.replaced,
                },
            },
            blob_store: self.blob_store,
        }
        .serialize(serializer)
    }
}

/// Counts the conversations `ids` of `store` (as [`Store::ids`] lists
/// them), as `jp-store stats` does. One that cannot be read (or whose
/// config holds a bad setting) is put in [`StoreStats::failed`] and the
/// others are counted; one removed since it was listed is left out.
pub fn of_conversations(store: &Store, ids: &[ConversationId]) -> Result<StoreStats> {
    store.stats(ids)
}

/// [`of_conversations`] of conversation `id` alone, as `jp-store stats ID`
/// counts it: [`Error::NotFound`] if there is no such conversation, and the
/// error that kept it from being counted if one did.
pub fn of_conversation(store: &Store, id: &ConversationId) -> Result<StoreStats> {
    store.conversation_stats(id)
}

/// The objects of `store`'s blob store, loose and packed, and their bytes
/// on disk.
pub fn of_blob_store(store: &Store) -> Result<BlobStoreStats> {
    store.blob_store_stats()
}

impl Store {
    /// [`ContextSizes`] of one conversation (reads its base config, no
    /// content).
    pub(crate) fn context_sizes(&self, conv: &Conversation) -> Result<ContextSizes> {
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
            let n = entry_chars(&e.clone().into_payload_refs());
            s.raw += n;
            if let Some(slot) = s.raw_per_turn.get_mut(t as usize) {
                *slot += n;
            }
        }
        s.compacted = view(&conv.entries).iter().map(entry_chars).sum();
        let traced = view_traced(&conv.entries, &self.conversation_settings(conv)?.base);
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

    /// Counts the conversations `ids` (as [`Store::ids`] listed them). One
    /// that cannot be read (or whose config holds a bad setting) is put in
    /// [`StoreStats::failed`] and the others are counted; one that is not
    /// there (removed since it was listed) is left out.
    pub(crate) fn stats(&self, ids: &[ConversationId]) -> Result<StoreStats> {
        let mut out = StoreStats::default();
        let mut distinct = HashSet::new();
        for id in ids {
            let read = self
                .read(id)
                .and_then(|conv| self.context_sizes(&conv).map(|c| (conv, c)));
            let (conv, c) = match read {
                Ok(read) => read,
                // Removed since the ids were listed: not counted, and not
                // a failure.
                Err(e) if self.gone_since_listed(id, &e) => continue,
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
        // A blob whose size cannot be read is named, not counted as 0 bytes
        // in silence (its size comes from its header or its pack's index,
        // unchecked: fsck --read-data checks the bytes).
        let mut distinct: Vec<BlobId> = distinct.into_iter().collect();
        distinct.sort_unstable();
        for blob in distinct {
            match self.blobs().size(&blob) {
                Ok(size) => out.distinct_blob_bytes_referenced += size,
                Err(e) => out.unsized_blobs.push((blob, e.to_string())),
            }
        }
        Ok(out)
    }

    /// [`Store::stats`] of conversation `id` alone, as `jp-store stats ID`
    /// counts it: [`Error::NotFound`] if there is no such conversation, and
    /// the error that kept it from being counted if one did.
    pub(crate) fn conversation_stats(&self, id: &ConversationId) -> Result<StoreStats> {
        if !self.exists(id)? {
            return Err(Error::NotFound { id: id.to_string() });
        }
        let mut stats = self.stats(std::slice::from_ref(id))?;
        match stats.failed.pop() {
            Some((_, e)) => Err(e),
            None => Ok(stats),
        }
    }

    /// The objects of the blob store, loose and packed, and their bytes on
    /// disk.
    pub(crate) fn blob_store_stats(&self) -> Result<BlobStoreStats> {
        let loose = self.blobs().loose_objects()?;
        let packs = self.blobs().packs()?;
        Ok(BlobStoreStats {
            loose_objects: loose.len(),
            loose_bytes: loose.iter().map(|o| o.stored_len).sum(),
            packs: packs.len(),
            packed_objects: packs.iter().map(|p| p.objects).sum(),
            pack_bytes: packs.iter().map(|p| p.pack_bytes).sum(),
        })
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

        // One whose log cannot be read is named; one that is not there
        // (removed since the ids were listed) is left out.
        let log = dir.path().join("s").join(ids[1].log_path());
        std::fs::write(&log, b"not a log").expect("damage the log");
        let missing = ConversationId::parse("gone").expect("id");
        let s = store
            .stats(&[ids[0].clone(), ids[1].clone(), missing])
            .expect("stats");
        assert_eq!(s.conversations.len(), 1);
        assert_eq!(s.failed.len(), 1, "{:?}", s.failed);
        assert_eq!(s.failed[0].0, ids[1]);
        assert!(s.failed[0].1.is_corruption(), "{}", s.failed[0].1);
    }
}
