//! The conversation handle: what an embedder holds while it works on one
//! conversation ([`Store::conversation`] opens one, [`Store::create`] and
//! [`ConversationHandle::fork`] make one).
//!
//! A [`ConversationHandle`] holds, while it lives, the conversation's
//! writer lock (other writers wait; readers never do), its folded state
//! (metadata, counts, turns: kept current by every append) and, once they
//! are first needed, its settings (the workspace config with the base
//! config and every config delta merged over it: kept current by the
//! config deltas it appends). So an append through it is checked against
//! the state in memory, and the automatic compaction a completed turn may
//! call for (D17) is decided from the state and settings in memory: when
//! it is off, or the conversation has too few turns, nothing of the log is
//! read. The settings come from the head cache when they are current
//! (format-spec.md 4.6) and the config deltas from the records the writer
//! found holding them as it opened the log: no other read.
//!
//! Everything it reads goes through its writer's own handle of the log (on
//! S3, the one listing taken when it opened). [`ConversationHandle::close`]
//! writes the head cache and releases the lock; a handle dropped without
//! being closed only releases the lock (no I/O in `Drop`).
//!
//! The `Store` methods of this file ([`Store::append_turn`],
//! [`Store::compact`], [`Store::undo_compaction`], [`Store::fork_compacted`])
//! do one thing in a handle of their own, opened and closed around it: they
//! wait for the lock like any writer, so a caller that holds a handle of the
//! conversation does that thing through the handle instead.

use crate::append::{retry_on_conflict, AppendReport, AutoCompaction};
use crate::compaction::{
    compaction_entry, completes_turn, plan, undo_entry, undo_ordinal, AutoSettings, CompactOutcome,
    CompactRequest, CompactionError, Summarizer,
};
use crate::conversation::read::{read_conversation_from, Conversation};
use crate::conversation::state::ConversationState;
use crate::conversation::writer::{AppendOutcome, ConversationWriter};
use crate::conversation::ConversationId;
use crate::error::Result;
use crate::event::{Entry, EventKind, Object, Payload};
use crate::export::ConversationView;
use crate::log::CutTail;
use crate::store::{ConversationSettings, NewConversation, Store};
use crate::timestamp::Timestamp;

/// An open conversation: its lock, its state and its settings, held while
/// the handle lives (see the module). Made by [`Store::conversation`]
/// (an existing conversation), [`Store::create`] and
/// [`fork`](Self::fork) (a new one); [`close`](Self::close) it when done.
#[derive(Debug)]
pub struct ConversationHandle<'s> {
    store: &'s Store,
    writer: ConversationWriter<'s>,
    /// The settings in effect, once first needed: current with every
    /// config delta appended through the handle since.
    settings: Option<ConversationSettings>,
}

impl Store {
    /// Opens conversation `id` for working on it: waits for its writer lock
    /// (another writer of it, in this process or another, holds it until it
    /// closes), checks the framing of its whole log (damage anywhere is an
    /// error; a torn tail left by a crash is cut, after a copy:
    /// `ConversationHandle::cut_tail`) and folds its state from the head
    /// cache on. An unknown id is [`Error::NotFound`](crate::error::Error::NotFound).
    pub fn conversation(&self, id: &ConversationId) -> Result<ConversationHandle<'_>> {
        Ok(ConversationHandle::new(self, self.writer(id)?))
    }

    /// Creates a conversation and returns its handle (the lock held). Its
    /// log is published whole with its metadata (the base config: `new`'s,
    /// else the workspace config), and its head caches the settings at its
    /// start.
    pub fn create(&self, new: NewConversation) -> Result<ConversationHandle<'_>> {
        Ok(ConversationHandle::new(self, self.create_writer(new)?))
    }

    /// Creates a new conversation from `id`'s whole history, or from its
    /// last `last` turns, and returns its handle. Entries (and their blobs)
    /// are shared, not copied; the new log is published whole. With `last`,
    /// the base config of the fork is the config in effect where it starts,
    /// and compactions (whose turn numbers would no longer fit) are left
    /// out. The metadata records `forked_from: {id, turns}`. Reads `id`
    /// without its lock: a handle of it may be open.
    pub(crate) fn fork(
        &self,
        id: &ConversationId,
        last: Option<u64>,
        new_id: Option<ConversationId>,
        now: Timestamp,
    ) -> Result<ConversationHandle<'_>> {
        let draft = self.draft_fork(id, last)?;
        Ok(ConversationHandle::new(
            self,
            self.publish_fork(draft, new_id, now)?,
        ))
    }

    /// [`Store::fork`], the fork compacted as `compact` asks: the compaction
    /// is planned ([`plan`]) on the fork's entries under the settings in
    /// effect at their end (the source's at its end), its summary made, and
    /// its entry published with the fork's other entries in the one new
    /// log. So the fork appears compacted or not at all: an unknown profile,
    /// a bad range or a failed summary leaves nothing behind. (A dry-run
    /// request plans and reports the compaction without adding it.) Returns
    /// the new conversation's handle and the compaction made.
    pub(crate) fn fork_compacted(
        &self,
        id: &ConversationId,
        last: Option<u64>,
        new_id: Option<ConversationId>,
        now: Timestamp,
        compact: Option<(&CompactRequest, &mut Summarizer<'_>)>,
    ) -> std::result::Result<(ConversationHandle<'_>, Option<CompactOutcome>), CompactionError>
    {
        let mut draft = self.draft_fork(id, last)?;
        let compacted = match compact {
            None => None,
            Some((request, summarize)) => {
                let outcome = plan(&draft.entries, &draft.settings, request, now, summarize)?;
                if !request.dry_run {
                    draft
                        .entries
                        .push(compaction_entry(&outcome.compaction, now));
                }
                Some(outcome)
            }
        };
        let writer = self.publish_fork(draft, new_id, now)?;
        Ok((ConversationHandle::new(self, writer), compacted))
    }

    /// `jp-store append`: [`ConversationHandle::append_turn`] of `entries`
    /// in a handle of its own ([`Store::conversation`], closed after), the
    /// automatic compaction's entry made at `now`. `on_cut` hears, before
    /// the append, of an incomplete record the handle found at the end of
    /// the log and cut (after copying it into `quarantine/`): that happens
    /// even when the batch is then refused.
    ///
    /// A batch that another writer's append beat to the end of the log
    /// (two writers of a store on S3) is appended again in a handle opened
    /// again, checked against the conversation as it is then
    /// ([`retry_on_conflict`]).
    ///
    /// An error means nothing was appended, except
    /// [`Error::SyncFailed`](crate::error::Error::SyncFailed) and
    /// [`Error::Poisoned`](crate::error::Error::Poisoned): the outcome of
    /// the write is then unknown (the batch may be in the log, whole, or
    /// not). Once the append is durable, what happens to the compaction is
    /// in the report.
    pub(crate) fn append_turn(
        &self,
        id: &ConversationId,
        entries: Vec<Entry<Payload>>,
        now: Timestamp,
        on_cut: &mut dyn FnMut(&CutTail),
        summarize: &mut Summarizer<'_>,
    ) -> Result<AppendReport> {
        let mut once = |entries: Vec<Entry<Payload>>, summarize: &mut Summarizer<'_>| {
            let mut conversation = self.conversation(id)?;
            if let Some(cut) = conversation.cut_tail() {
                on_cut(cut);
            }
            let report = conversation.append_turn_at(entries, now, summarize)?;
            conversation.close();
            Ok(report)
        };
        // Where locks span the writers (a local store) no other writer can
        // append first: the batch is not kept for another attempt.
        if self.backend().locks_span_writers() {
            return once(entries, summarize);
        }
        let mut attempts = 1;
        let mut report = retry_on_conflict(|n| {
            attempts = n;
            once(entries.clone(), &mut *summarize)
        })?;
        report.attempts = attempts;
        Ok(report)
    }

    /// [`ConversationHandle::compact`] of conversation `id` in a handle of
    /// its own, the compaction's entry made at `now`.
    pub(crate) fn compact(
        &self,
        id: &ConversationId,
        request: &CompactRequest,
        now: Timestamp,
        summarize: &mut Summarizer<'_>,
    ) -> std::result::Result<CompactOutcome, CompactionError> {
        let mut conversation = self.conversation(id)?;
        let outcome = conversation.compact_at(request, now, summarize)?;
        conversation.close();
        Ok(outcome)
    }

    /// [`ConversationHandle::undo_compaction`] of conversation `id` in a
    /// handle of its own, the undo made at `now`.
    pub(crate) fn undo_compaction(
        &self,
        id: &ConversationId,
        n: Option<u64>,
        now: Timestamp,
    ) -> std::result::Result<u64, CompactionError> {
        let mut conversation = self.conversation(id)?;
        let undone = conversation.undo_compaction_at(n, now)?;
        conversation.close();
        Ok(undone)
    }
}

impl<'s> ConversationHandle<'s> {
    fn new(store: &'s Store, writer: ConversationWriter<'s>) -> Self {
        ConversationHandle {
            store,
            writer,
            settings: None,
        }
    }

    /// The conversation's id.
    pub fn id(&self) -> &ConversationId {
        self.writer.id()
    }

    /// Its state after every acknowledged append: metadata, counts, turns.
    pub fn state(&self) -> &ConversationState {
        self.writer.state()
    }

    /// The length of its log: where the next record goes.
    pub(crate) fn log_end(&self) -> u64 {
        self.writer.log_end()
    }

    /// The torn tail (a record a crash left incomplete) cut when the log
    /// was opened, if any: its bytes were copied into `quarantine/` first.
    pub(crate) fn cut_tail(&self) -> Option<&CutTail> {
        self.writer.cut_tail()
    }

    /// The settings in effect: at the start of the conversation (the
    /// workspace config with its base config merged over it: what the
    /// view's deduplication starts from) and at its end (with every config
    /// delta merged over them: what compactions and provider requests
    /// read). Computed the first time they are needed (from the head cache
    /// when it is current, and the config deltas of the records that hold
    /// them), then kept.
    pub(crate) fn settings(&mut self) -> Result<&ConversationSettings> {
        let settings = match self.settings.take() {
            Some(settings) => settings,
            None => self.compute_settings()?,
        };
        Ok(self.settings.insert(settings))
    }

    /// The settings as [`Self::settings`] computes them; settings computed
    /// anew (the head's were made from another config) are given to the
    /// writer, which caches them in the head when it closes.
    fn compute_settings(&mut self) -> Result<ConversationSettings> {
        let base_config = self.writer.state().metadata.base_config;
        let deltas = self.writer.config_deltas()?;
        let (settings, fresh) =
            self.store
                .settings_cached(base_config, deltas.iter(), self.writer.settings_cache())?;
        if let Some(fresh) = fresh {
            self.writer.set_settings_cache(fresh);
        }
        Ok(settings)
    }

    /// Appends `entries` (one entry: `[entry]`, or a batch) as one durable
    /// record: checked whole against the conversation first (structure,
    /// blob references, size), content given inline stored in the blob
    /// store before the record, one `fdatasync`. All or nothing: on error
    /// nothing is appended (except
    /// [`Error::SyncFailed`](crate::error::Error::SyncFailed) and
    /// [`Error::Poisoned`](crate::error::Error::Poisoned): the outcome is
    /// then unknown). No automatic compaction: [`Self::append_turn`].
    ///
    /// On a store whose locks do not span the writers (S3), another writer
    /// that appended first makes it fail with
    /// [`Error::AppendConflict`](crate::error::Error::AppendConflict),
    /// nothing written: the conversation changed, open it again.
    pub fn append(
        &mut self,
        entries: impl IntoIterator<Item = Entry<Payload>>,
    ) -> Result<AppendOutcome> {
        let batch: Vec<Entry<Payload>> = entries.into_iter().collect();
        let deltas: Vec<Object> = batch
            .iter()
            .filter_map(|e| match e.event().map(|e| &e.kind) {
                Some(EventKind::ConfigDelta(d)) => Some(d.delta.clone()),
                _ => None,
            })
            .collect();
        let outcome = self.writer.append(batch)?;
        if let Some(settings) = &mut self.settings {
            for delta in &deltas {
                settings.end.merge_layer_lenient(delta);
            }
        }
        Ok(outcome)
    }

    /// Appends `entries` as [`Self::append`] does, then, if the batch
    /// completes a turn (its last conversation event is the assistant's
    /// message), runs the automatic compaction the settings ask for (D17:
    /// `conversation.compaction.auto`), with summaries from `summarize`
    /// (`jpstore_integrations::summarizer::profile_summarizer` runs the
    /// profile's summary table; [`crate::compaction::no_summarizer`] makes
    /// automatic compactions that need a summary fail, as a warning in the
    /// report). Whether one is due is decided from the state and settings
    /// in memory: when automatic compaction is off (the default), the
    /// context window unknown or the conversation has too few turns,
    /// nothing of the log is read.
    ///
    /// An error means nothing was appended, as for [`Self::append`]; once
    /// the append is durable, what happens to the compaction is in the
    /// report.
    pub fn append_turn(
        &mut self,
        entries: impl IntoIterator<Item = Entry<Payload>>,
        summarize: &mut Summarizer<'_>,
    ) -> Result<AppendReport> {
        self.append_turn_at(entries.into_iter().collect(), Timestamp::now(), summarize)
    }

    /// [`Self::append_turn`], the automatic compaction's entry made at
    /// `now`.
    pub(crate) fn append_turn_at(
        &mut self,
        entries: Vec<Entry<Payload>>,
        now: Timestamp,
        summarize: &mut Summarizer<'_>,
    ) -> Result<AppendReport> {
        let completes = completes_turn(&entries);
        let append = self.append(entries)?;
        let auto_compaction = if completes {
            match self.auto_compact(now, summarize) {
                Ok(Some(out)) => AutoCompaction::Made(out),
                Ok(None) => AutoCompaction::NotDue,
                Err(e) => AutoCompaction::Failed(e),
            }
        } else {
            AutoCompaction::NotDue
        };
        Ok(AppendReport {
            id: self.id().clone(),
            auto_compaction,
            attempts: 1,
            append,
        })
    }

    /// Automatic compaction (D17), after an append that completed a turn:
    /// when enabled, the context window is known, the conversation has more
    /// than `min_turns` turns (all three from memory) and the estimated
    /// tokens of the view exceed `trigger_ratio` x the context window (the
    /// log read for them), appends a compaction with the auto profile from
    /// after the last compaction to `keep_last` turns before the last, with
    /// `source: auto`. Returns what it did, or `None`.
    pub(crate) fn auto_compact(
        &mut self,
        now: Timestamp,
        summarize: &mut Summarizer<'_>,
    ) -> std::result::Result<Option<CompactOutcome>, CompactionError> {
        let auto = AutoSettings::from_settings(&self.settings()?.end);
        let Some(window) = auto.may_be_due(self.state().turns.turns()) else {
            return Ok(None);
        };
        let conversation = self.read()?;
        if !auto.over_trigger(window, &conversation.entries) {
            return Ok(None);
        }
        match self.compact_entries(&conversation.entries, &auto.request(), now, summarize) {
            Ok(out) => Ok(Some(out)),
            // Nothing left to compact (everything up to keep_last is
            // compacted already, or the range is empty): not an error here.
            Err(CompactionError::OutOfRange { .. } | CompactionError::EmptyRange { .. }) => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// The view an LLM is sent of the conversation as it is now (what this
    /// handle appended included), read through the handle and made with
    /// the settings it holds: one plan ([`crate::projection::plan_view`]),
    /// rendered by [`ConversationView::render`] with content as references
    /// ([`ContentMode::Refs`](crate::export::ContentMode::Refs): no blob
    /// read) or inline, or taken by `jpstore_integrations::provider` for a
    /// provider's request body. The same view as [`Store::open_view`]'s,
    /// which reads without a lock.
    pub fn view(&mut self) -> Result<ConversationView<'s>> {
        let settings = self.settings()?.clone();
        crate::export::view_of(
            self.store,
            self.writer.reader()?,
            self.writer.id(),
            settings,
        )
    }

    /// Creates a compaction (`plan`: the profile, the range, the summary
    /// made by `summarize` when the profile has a summary table) of the
    /// conversation as it is, under the settings in effect at its end, and
    /// appends it (unless `request.dry_run`). Nothing is written unless the
    /// whole compaction could be made.
    pub fn compact(
        &mut self,
        request: &CompactRequest,
        summarize: &mut Summarizer<'_>,
    ) -> std::result::Result<CompactOutcome, CompactionError> {
        self.compact_at(request, Timestamp::now(), summarize)
    }

    /// [`Self::compact`], the compaction's entry made at `now`.
    pub(crate) fn compact_at(
        &mut self,
        request: &CompactRequest,
        now: Timestamp,
        summarize: &mut Summarizer<'_>,
    ) -> std::result::Result<CompactOutcome, CompactionError> {
        let conversation = self.read()?;
        self.compact_entries(&conversation.entries, request, now, summarize)
    }

    /// The compaction `request` asks for of `entries` (the conversation's),
    /// planned and appended.
    fn compact_entries(
        &mut self,
        entries: &[Entry],
        request: &CompactRequest,
        now: Timestamp,
        summarize: &mut Summarizer<'_>,
    ) -> std::result::Result<CompactOutcome, CompactionError> {
        let mut outcome = plan(entries, &self.settings()?.end, request, now, summarize)?;
        if !request.dry_run {
            let entry = compaction_entry(&outcome.compaction, now);
            outcome.offset = Some(self.writer.append_stored(&[entry])?);
        }
        Ok(outcome)
    }

    /// Revokes a compaction by appending a `compaction_undo` entry: the
    /// `n`-th compaction (1-based, in stream order), or the last one in
    /// effect. Returns the 1-based number of the compaction undone.
    pub fn undo_compaction(&mut self, n: Option<u64>) -> std::result::Result<u64, CompactionError> {
        self.undo_compaction_at(n, Timestamp::now())
    }

    /// [`Self::undo_compaction`], the undo made at `now`.
    pub(crate) fn undo_compaction_at(
        &mut self,
        n: Option<u64>,
        now: Timestamp,
    ) -> std::result::Result<u64, CompactionError> {
        let ordinal = undo_ordinal(&self.read()?.entries, n)?;
        self.writer.append_stored(&[undo_entry(ordinal, now)])?;
        Ok(ordinal + 1)
    }

    /// A new conversation from this one's whole history, or from its last
    /// `last` turns (`id`, or a fresh id), and its handle. This one is left as it is.
    pub fn fork(
        &self,
        last: Option<u64>,
        id: Option<ConversationId>,
    ) -> Result<ConversationHandle<'s>> {
        self.store.fork(self.id(), last, id, Timestamp::now())
    }

    /// Closes the conversation: writes its head cache (the state, and the
    /// settings if they were computed anew), so that the next open, listing
    /// or view reads nothing of the log it covers, then releases the lock.
    /// The head is a cache, written best effort: a failure to write it only
    /// leaves the next reader more of the log to fold. A handle dropped
    /// without being closed releases the lock and writes nothing.
    pub fn close(self) {
        self.writer.close();
    }

    /// The whole conversation, decoded, read through the handle.
    fn read(&self) -> Result<Conversation> {
        read_conversation_from(self.writer.reader()?, self.writer.id())
    }
}

#[cfg(test)]
mod tests;
