//! A conversation read for a part of it (a page of `jp-store serve`): the
//! heads of all its entries, each entry decoded only when asked for.

use super::*;

/// A conversation read for a part of it (`Store::open_entries`): the
/// heads of all its entries, each entry decoded only when asked for, the
/// settings computed only when asked for.
#[derive(Debug)]
pub struct ConversationEntries<'s> {
    store: &'s Store,
    source: ViewSource,
    /// The head cache's settings, if it holds some for this log.
    cached: Option<head::SettingsCache>,
}

impl Store {
    /// Reads conversation `id` for a part of it (a page of `jp-store
    /// serve`): its log as [`Store::open_view`] reads it (a version 2 log
    /// into memory with nothing decoded; a version 1 log decoded), without
    /// computing its settings ([`ConversationEntries::settings`] does, so
    /// that a conversation whose config cannot be read still reads as
    /// logged). Nothing is written, not even the head cache.
    pub(crate) fn open_entries(&self, id: &ConversationId) -> Result<ConversationEntries<'_>> {
        let (source, cached) = self.read_view_source(id)?;
        Ok(ConversationEntries {
            store: self,
            source,
            cached,
        })
    }
}

impl ConversationEntries<'_> {
    /// The number of entries (events and entries of unknown types).
    pub fn len(&self) -> usize {
        match &self.source {
            ViewSource::Decoded(conv) => conv.entries.len(),
            ViewSource::Image(image) => image.len(),
        }
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The heads of every entry, in order (of a version 2 log, read from
    /// the records' heads: nothing is decoded but config deltas).
    pub fn heads(&self) -> Result<Vec<EntryHead<'_>>> {
        match &self.source {
            ViewSource::Decoded(conv) => Ok(conv.entries.iter().map(EntryHead::of).collect()),
            ViewSource::Image(image) => image.heads(),
        }
    }

    /// Entry `i`, decoded.
    pub fn entry(&self, i: usize) -> Result<Entry> {
        match &self.source {
            ViewSource::Decoded(conv) => {
                conv.entries.get(i).cloned().ok_or_else(|| Error::Corrupt {
                    path: self.store.display(&conv.id.log_path()),
                    offset: conv.log_end,
                    expected: format!("entry {i}"),
                    found: format!("{} entries", conv.entries.len()),
                })
            }
            ViewSource::Image(image) => image.entry(i),
        }
    }

    /// The state the log folds to (metadata, counts, turns), from `heads`
    /// ([`Self::heads`] of this conversation).
    pub fn state(&self, heads: &[EntryHead<'_>]) -> Result<ConversationState> {
        match &self.source {
            ViewSource::Decoded(conv) => Ok(conv.state.clone()),
            ViewSource::Image(image) => image.state(heads),
        }
    }

    /// The settings in effect ([`Store::settings_cached`]: from the head
    /// cache when they are current), the config deltas read from `heads`
    /// ([`Self::heads`] of this conversation). Not written back.
    pub fn settings(&self, heads: &[EntryHead<'_>]) -> Result<ConversationSettings> {
        let base_config = match &self.source {
            ViewSource::Decoded(conv) => conv.state.metadata.base_config,
            ViewSource::Image(image) => image.base_config()?,
        };
        let deltas = heads.iter().filter_map(|h| match &h.kind {
            HeadKind::ConfigDelta(d) => Some(&**d),
            _ => None,
        });
        Ok(self
            .store
            .settings_cached(base_config, deltas, self.cached.as_ref())?
            .0)
    }

    /// Where the records read end.
    pub fn log_end(&self) -> u64 {
        match &self.source {
            ViewSource::Decoded(conv) => conv.log_end,
            ViewSource::Image(image) => image.log_end(),
        }
    }

    /// What the read of the log left out after its last whole record.
    pub fn torn_tail(&self) -> Option<TornTail> {
        match &self.source {
            ViewSource::Decoded(conv) => conv.torn_tail,
            ViewSource::Image(image) => image.torn_tail(),
        }
    }
}
