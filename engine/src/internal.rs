//! Below the face: what this workspace's other crates, fuzz targets,
//! benches and tests reach that an embedder does not (the framing layer,
//! the codecs, the projection's plan, the writer). Hidden from the
//! documentation and outside the API's promise: it changes with the
//! format and the implementation, without notice.
//!
//! The paths mirror the crate's own (`internal::log` is the crate's `log`,
//! `internal::event::binary` its `event::binary`), so a module's `//!`
//! documentation is where to read about any of them.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use jpstore_blobstore::backend::{Backend, LockGuard};
use jpstore_blobstore::{BlobId, BlobStore};

use crate::compaction::{CompactOutcome, CompactRequest, CompactionError, Summarizer};
use crate::conversation::read::Conversation;
use crate::conversation::writer::ConversationWriter;
use crate::event::{BlobRef, Entry, Object, Payload};
use crate::export::ConversationEntries;
use crate::export::ConversationView;
use crate::import::Prepared;
use crate::log::CutTail;
use crate::search::{ConversationHits, Searcher};
use crate::stats::ContextSizes;
use crate::store::ConversationSettings;
use crate::timestamp::Timestamp;
use crate::{
    AppendReport, ConversationHandle, ConversationId, Error, Listing, Result, Store, StoreOptions,
};

/// The framing layer (format-spec.md section 3).
pub mod log {
    pub use crate::log::*;
}

/// Reference replacement of resources already delivered.
pub mod dedup {
    pub use crate::dedup::*;
}

/// The plan of the view an LLM is sent.
pub mod projection {
    pub use crate::projection::*;
}

/// A JSON parser that keeps the text of each value.
pub mod json_text {
    pub use crate::json_text::*;
}

/// Appends beaten by another writer, tried again.
pub mod append {
    pub use crate::append::*;
}

/// The store's operations below the face.
pub mod store {
    pub use crate::store::*;
}

/// The cores work is spread over.
pub use crate::parallel::cores;

/// The event model's codecs and helpers.
pub mod event {
    /// The binary codec of entries (format-spec.md section 4).
    pub mod binary {
        pub use crate::event::binary::*;
    }
    /// The heads of entries, read without their content.
    pub mod head {
        pub use crate::event::head::*;
    }
    /// Entries given by a user (`jp-store append`).
    pub mod input {
        pub use crate::event::input::*;
    }
    /// The JSON form of entries.
    pub mod json {
        pub use crate::event::json::*;
    }
    /// The vocabulary of event kinds.
    pub mod kind {
        pub use crate::event::kind::*;
    }
    /// Rendering of entries as JSON text.
    pub mod render {
        pub use crate::event::render::*;
    }
    /// Turn numbering.
    pub mod turns {
        pub use crate::event::turns::*;
    }
    /// Whether an entry of a view is part of what `view` prints.
    pub fn in_view<C>(entry: &crate::event::Entry<C>) -> bool {
        crate::event::in_view(entry)
    }
}

/// The NDJSON stream of a store, a conversation a line.
pub mod stream {
    pub use crate::stream::*;
}

/// Compaction below the face.
pub mod compaction {
    use crate::event::{Compaction, Entry};

    pub use crate::compaction::report::{CompactReport, ForkReport};

    /// The compactions of `entries` in force (not undone), with ordinals.
    pub fn active_compactions<C>(entries: &[Entry<C>]) -> Vec<(u64, &Compaction)> {
        crate::compaction::active_compactions(entries)
    }
}

/// The texts `grep` searches, walked in order.
pub mod search {
    pub use crate::search::walk::{arguments_text, walk, Step, Text};
}

/// Copying below the face.
pub mod copy {
    use std::path::PathBuf;
    use std::sync::Arc;

    use jpstore_blobstore::backend::Backend;

    use crate::{Result, Store, StoreOptions};

    /// Opens the store at `root` of `backend`, or makes one like `src`
    /// (its workspace config); says whether it made it.
    pub fn open_or_init_like(
        src: &Store,
        backend: Arc<dyn Backend>,
        root: PathBuf,
        options: StoreOptions,
    ) -> Result<(Store, bool)> {
        crate::copy::open_or_init_like(src, backend, root, options)
    }
}

/// fsck as JP's `sanitize` runs it.
pub mod fsck {
    use std::sync::atomic::AtomicBool;

    use crate::fsck::{FsckError, FsckOptions, FsckProgress, FsckReport, KeepPrefix};
    use crate::Store;

    /// [`crate::fsck::run`] whose repair moves a conversation with a
    /// damaged log aside whole, never putting the records before the
    /// damage back in the store (JP's file backend trashes a damaged
    /// conversation whole).
    pub fn run_moving_damaged_whole(
        store: &Store,
        options: FsckOptions,
        progress: &mut dyn FnMut(FsckProgress),
    ) -> Result<FsckReport, FsckError> {
        store.fsck_keeping(options, KeepPrefix::No, progress, &AtomicBool::new(false))
    }
}

/// Config objects below the face: parsing, merging, canonical bytes.
pub mod config {
    use serde_json::{Map, Value};

    pub use crate::config::settings::*;
    pub use crate::config::{BadSetting, ConfigError, SettingPlace, Settings};

    /// The template `jp-store init` writes as `config.toml`.
    pub const WORKSPACE_CONFIG_TEMPLATE: &str = crate::config::WORKSPACE_CONFIG_TEMPLATE;

    /// `delta` merged over `base` as JP merges config layers.
    pub fn merge(base: &mut Map<String, Value>, delta: &Map<String, Value>) {
        crate::config::merge(base, delta)
    }
    /// A workspace `config.toml` as a config object.
    pub fn parse_workspace_toml(
        text: &str,
        path: &std::path::Path,
    ) -> Result<Map<String, Value>, ConfigError> {
        crate::config::parse_workspace_toml(text, path)
    }
    /// The canonical bytes of a config object (format-spec.md 4.5).
    pub fn canonical_bytes(config: &Map<String, Value>) -> Vec<u8> {
        crate::config::canonical_bytes(config)
    }
    /// A config object from JSON bytes; `what` names them in errors.
    pub fn parse_config_json(bytes: &[u8], what: &str) -> Result<Map<String, Value>, ConfigError> {
        crate::config::parse_config_json(bytes, what)
    }
    /// "a string", "a number", ...: what a JSON value is, for messages.
    pub fn json_kind(value: &Value) -> &'static str {
        crate::config::json_kind(value)
    }
    /// The settings of `layers` that jp-store cannot read: each with the
    /// index of its layer.
    pub fn settings_not_applied<'a>(
        layers: impl IntoIterator<Item = &'a crate::event::Object>,
    ) -> Vec<(usize, BadSetting)> {
        crate::config::settings::settings_not_applied(layers)
    }
}

/// The view below the face: its events, the plain JSON form.
pub mod export {
    use serde_json::Value;

    use crate::conversation::read::Conversation;
    use crate::event::{Entry, Payload};
    use crate::export::{ContentMode, ConversationView};
    use crate::{Result, Store};

    pub use crate::export::entries::ConversationEntries;
    pub use crate::export::events::*;

    /// One entry's JSON, content as references or inline.
    pub fn entry_json(store: &Store, entry: &Entry, mode: ContentMode) -> Result<Value> {
        crate::export::entry_json(store, entry, mode)
    }
    /// A conversation's plain JSON form (`jp-store export --format json`).
    pub fn conversation_json(
        store: &Store,
        conversation: &Conversation,
        mode: ContentMode,
    ) -> Result<Value> {
        crate::export::conversation_json(store, conversation, mode)
    }
    /// The view of a conversation read whole.
    pub fn view(store: &Store, conversation: &Conversation) -> Result<Vec<Entry<Payload>>> {
        crate::export::view(store, conversation)
    }
    /// [`view`], taking the conversation.
    pub fn into_view(store: &Store, conversation: Conversation) -> Result<Vec<Entry<Payload>>> {
        crate::export::into_view(store, conversation)
    }
    /// The entries of a view as a JSON array, written as it is serialized.
    pub fn render_view<'a>(
        store: &'a Store,
        view: &'a [Entry<Payload>],
        mode: ContentMode,
    ) -> crate::event::render::Rendered<'a, 'a, Payload, crate::Error> {
        crate::export::render_view(store, view, mode)
    }
    /// A view's events, one at a time (the provider bodies' input).
    pub fn view_events(view: ConversationView<'_>) -> Result<ViewEvents> {
        view.into_events()
    }
}

/// gc below the face: leftovers, the shared protocol, marking a log.
pub mod gc {
    pub use crate::gc::*;
    /// Leftovers of interrupted writes.
    pub mod leftovers {
        pub use crate::gc::leftovers::*;
    }
    /// gc on storage without cross-machine locks.
    pub mod shared {
        pub use crate::gc::shared::*;
    }
    /// Marking a log's blobs.
    pub mod mark {
        pub use crate::gc::mark::*;
    }
}

/// Counting below the face.
pub mod stats {
    pub use crate::stats::*;
    /// SVG plots.
    pub mod plot {
        pub use crate::stats::plot::*;
    }
}

/// A conversation's log: codecs, head cache, reading and writing.
pub mod conversation {
    /// Directory of conversations inside the store.
    pub const CONVERSATIONS_DIR: &str = crate::conversation::CONVERSATIONS_DIR;
    /// Directory of quarantined damage, at the store root.
    pub const QUARANTINE_DIR: &str = crate::conversation::QUARANTINE_DIR;
    /// Name of the log inside a conversation's directory.
    pub const LOG_FILE: &str = crate::conversation::LOG_FILE;
    /// Entries of version 1 logs.
    pub mod codec {
        pub use crate::conversation::codec::*;
    }
    /// The head cache.
    pub mod head {
        pub use crate::conversation::head::*;
    }
    /// A log read whole, with its records.
    pub mod image {
        pub use crate::conversation::image::*;
    }
    /// Metadata patches.
    pub mod meta {
        pub use crate::conversation::meta::*;
    }
    /// Reading a conversation.
    pub mod read {
        pub use crate::conversation::read::*;
    }
    /// The records of version 2 logs.
    pub mod sections {
        pub use crate::conversation::sections::*;
    }
    /// The folded state.
    pub mod state {
        pub use crate::conversation::state::*;
    }
    /// The single writer of a conversation.
    pub mod writer {
        pub use crate::conversation::writer::*;
    }
}

/// What this workspace's other crates do with a [`Store`] below the face:
/// its blob store and storage, the writer and reader of a log, settings
/// from a log's config deltas, the store-level appends that open a
/// conversation handle of their own. Import the trait
/// (`use jpstore_engine::internal::StoreInterior as _;`) to call them as
/// methods; each forwards to the engine's own.
pub trait StoreInterior {
    /// [`Store::init_new_dir`] in `backend`, `root` the store's location as
    /// messages name it.
    fn init_new(
        backend: Arc<dyn Backend>,
        root: PathBuf,
        options: StoreOptions,
    ) -> Result<(Store, bool)>;
    /// The blob store.
    fn blobs(&self) -> &BlobStore;
    /// The storage every byte of the store goes through.
    fn backend(&self) -> &Arc<dyn Backend>;
    /// A key of the store as a user reads it (a path, or an `s3://` URL).
    fn display(&self, key: &Path) -> PathBuf;
    /// gc's lock, held shared.
    fn gc_shared(&self) -> Result<Box<dyn LockGuard>>;
    /// The single writer of a conversation.
    fn writer(&self, id: &ConversationId) -> Result<ConversationWriter<'_>>;
    /// A conversation read whole.
    fn read(&self, id: &ConversationId) -> Result<Conversation>;
    /// Whether `e`, met reading `id`, means it was removed since listed.
    fn gone_since_listed(&self, id: &ConversationId, e: &Error) -> bool;
    /// Every conversation's listing, or the error reading it.
    fn list_each(&self) -> Result<Vec<std::result::Result<Listing, (ConversationId, Error)>>>;
    /// The settings of a conversation read whole.
    fn conversation_settings(&self, conversation: &Conversation) -> Result<ConversationSettings>;
    /// The config a conversation starts from.
    fn base_config(&self, conversation: &Conversation) -> Result<Object>;
    /// The config in force at entry `index`.
    fn config_at(&self, conversation: &Conversation, index: usize) -> Result<Object>;
    /// The entries of a conversation, heads and content.
    fn open_entries(&self, id: &ConversationId) -> Result<ConversationEntries<'_>>;
    /// A conversation's log replaced whole by `prepared`, the log it
    /// replaces kept in quarantine with a `NOTE` saying `why`; returns where
    /// (relative to the store's root).
    fn rewrite(&self, prepared: Prepared, why: &str) -> Result<Option<PathBuf>>;
    /// The blobs the store's logs reference or may reference (gc's marks),
    /// and the number of conversations marked.
    fn referenced_blobs(
        &self,
        progress: &mut dyn FnMut(crate::gc::GcProgress),
    ) -> std::result::Result<(std::collections::HashSet<BlobId>, usize), crate::gc::GcError>;
    /// The context sizes of a conversation read whole.
    fn context_sizes(&self, conversation: &Conversation) -> Result<ContextSizes>;
    /// A turn appended through a handle opened for it.
    fn append_turn(
        &self,
        id: &ConversationId,
        entries: Vec<Entry<Payload>>,
        now: Timestamp,
        on_cut: &mut dyn FnMut(&CutTail),
        summarize: &mut Summarizer<'_>,
    ) -> Result<AppendReport>;
    /// A compaction through a handle opened for it.
    fn compact(
        &self,
        id: &ConversationId,
        request: &CompactRequest,
        now: Timestamp,
        summarize: &mut Summarizer<'_>,
    ) -> std::result::Result<CompactOutcome, CompactionError>;
    /// An undo through a handle opened for it.
    fn undo_compaction(
        &self,
        id: &ConversationId,
        n: Option<u64>,
        now: Timestamp,
    ) -> std::result::Result<u64, CompactionError>;
    /// A fork of `id`.
    fn fork(
        &self,
        id: &ConversationId,
        last: Option<u64>,
        new_id: Option<ConversationId>,
        now: Timestamp,
    ) -> Result<ConversationHandle<'_>>;
    /// A fork of `id`, compacted as it is made.
    #[allow(clippy::type_complexity)]
    fn fork_compacted(
        &self,
        id: &ConversationId,
        last: Option<u64>,
        new_id: Option<ConversationId>,
        now: Timestamp,
        compact: Option<(&CompactRequest, &mut Summarizer<'_>)>,
    ) -> std::result::Result<(ConversationHandle<'_>, Option<CompactOutcome>), CompactionError>;
}

impl StoreInterior for Store {
    fn init_new(
        backend: Arc<dyn Backend>,
        root: PathBuf,
        options: StoreOptions,
    ) -> Result<(Store, bool)> {
        Store::init_new(backend, root, options)
    }
    fn blobs(&self) -> &BlobStore {
        Store::blobs(self)
    }
    fn backend(&self) -> &Arc<dyn Backend> {
        Store::backend(self)
    }
    fn display(&self, key: &Path) -> PathBuf {
        Store::display(self, key)
    }
    fn gc_shared(&self) -> Result<Box<dyn LockGuard>> {
        Store::gc_shared(self)
    }
    fn writer(&self, id: &ConversationId) -> Result<ConversationWriter<'_>> {
        Store::writer(self, id)
    }
    fn read(&self, id: &ConversationId) -> Result<Conversation> {
        Store::read(self, id)
    }
    fn gone_since_listed(&self, id: &ConversationId, e: &Error) -> bool {
        Store::gone_since_listed(self, id, e)
    }
    fn list_each(&self) -> Result<Vec<std::result::Result<Listing, (ConversationId, Error)>>> {
        Store::list_each(self)
    }
    fn conversation_settings(&self, conversation: &Conversation) -> Result<ConversationSettings> {
        Store::conversation_settings(self, conversation)
    }
    fn base_config(&self, conversation: &Conversation) -> Result<Object> {
        Store::base_config(self, conversation)
    }
    fn config_at(&self, conversation: &Conversation, index: usize) -> Result<Object> {
        Store::config_at(self, conversation, index)
    }
    fn open_entries(&self, id: &ConversationId) -> Result<ConversationEntries<'_>> {
        Store::open_entries(self, id)
    }
    fn rewrite(&self, prepared: Prepared, why: &str) -> Result<Option<PathBuf>> {
        Store::rewrite(self, prepared, why).map(|r| r.kept)
    }
    fn referenced_blobs(
        &self,
        progress: &mut dyn FnMut(crate::gc::GcProgress),
    ) -> std::result::Result<(std::collections::HashSet<BlobId>, usize), crate::gc::GcError> {
        Store::referenced_blobs(self, progress)
    }
    fn context_sizes(&self, conversation: &Conversation) -> Result<ContextSizes> {
        Store::context_sizes(self, conversation)
    }
    fn append_turn(
        &self,
        id: &ConversationId,
        entries: Vec<Entry<Payload>>,
        now: Timestamp,
        on_cut: &mut dyn FnMut(&CutTail),
        summarize: &mut Summarizer<'_>,
    ) -> Result<AppendReport> {
        Store::append_turn(self, id, entries, now, on_cut, summarize)
    }
    fn compact(
        &self,
        id: &ConversationId,
        request: &CompactRequest,
        now: Timestamp,
        summarize: &mut Summarizer<'_>,
    ) -> std::result::Result<CompactOutcome, CompactionError> {
        Store::compact(self, id, request, now, summarize)
    }
    fn undo_compaction(
        &self,
        id: &ConversationId,
        n: Option<u64>,
        now: Timestamp,
    ) -> std::result::Result<u64, CompactionError> {
        Store::undo_compaction(self, id, n, now)
    }
    fn fork(
        &self,
        id: &ConversationId,
        last: Option<u64>,
        new_id: Option<ConversationId>,
        now: Timestamp,
    ) -> Result<ConversationHandle<'_>> {
        Store::fork(self, id, last, new_id, now)
    }
    fn fork_compacted(
        &self,
        id: &ConversationId,
        last: Option<u64>,
        new_id: Option<ConversationId>,
        now: Timestamp,
        compact: Option<(&CompactRequest, &mut Summarizer<'_>)>,
    ) -> std::result::Result<(ConversationHandle<'_>, Option<CompactOutcome>), CompactionError>
    {
        Store::fork_compacted(self, id, last, new_id, now, compact)
    }
}

/// An engine error from a failure `backend` reported.
pub fn error_from_backend(
    backend: &dyn Backend,
    e: jpstore_blobstore::backend::BackendError,
) -> Error {
    Error::from_backend(backend, e)
}

/// Where a conversation's files are, below the face.
pub trait ConversationIdInterior {
    /// The conversation's directory in the store.
    fn dir(&self) -> PathBuf;
    /// A file of the conversation's directory.
    fn file(&self, name: &str) -> PathBuf;
    /// The conversation's log.
    fn log_path(&self) -> PathBuf;
}

impl ConversationIdInterior for ConversationId {
    fn dir(&self) -> PathBuf {
        ConversationId::dir(self)
    }
    fn file(&self, name: &str) -> PathBuf {
        ConversationId::file(self, name)
    }
    fn log_path(&self) -> PathBuf {
        ConversationId::log_path(self)
    }
}

/// A conversation handle below the face.
pub trait HandleInterior {
    /// The length of its log: where the next record goes.
    fn log_end(&self) -> u64;
    /// The torn tail cut when the log was opened, if any (its bytes were
    /// copied into `quarantine/` first).
    fn cut_tail(&self) -> Option<&CutTail>;
    /// The settings in effect at the start and at the end, computed the
    /// first time they are asked for.
    fn settings(&mut self) -> Result<&ConversationSettings>;
}

impl HandleInterior for ConversationHandle<'_> {
    fn log_end(&self) -> u64 {
        ConversationHandle::log_end(self)
    }
    fn cut_tail(&self) -> Option<&CutTail> {
        ConversationHandle::cut_tail(self)
    }
    fn settings(&mut self) -> Result<&ConversationSettings> {
        ConversationHandle::settings(self)
    }
}

/// A view below the face.
pub trait ViewInterior {
    /// The settings in effect at the start (what the view's deduplication
    /// starts from) and at the end (what a request for it is sent with).
    fn settings(&self) -> &ConversationSettings;
    /// The framing version of the conversation's log.
    fn log_version(&self) -> u16;
}

impl ViewInterior for ConversationView<'_> {
    fn settings(&self) -> &ConversationSettings {
        ConversationView::settings(self)
    }
    fn log_version(&self) -> u16 {
        ConversationView::log_version(self)
    }
}

/// A searcher below the face.
pub trait SearcherInterior {
    /// Blobs read (and searched) so far.
    fn blobs_read(&self) -> usize;
    /// [`Searcher::each`], with `map` of each conversation read handed over
    /// beside its hits.
    fn each_mapped<T: Send>(
        &self,
        ids: &[ConversationId],
        map: &(dyn Fn(&Conversation) -> T + Sync),
        sink: impl FnMut(&ConversationId, Result<(ConversationHits, T)>) -> bool,
    );
}

impl SearcherInterior for Searcher<'_> {
    fn blobs_read(&self) -> usize {
        Searcher::blobs_read(self)
    }
    fn each_mapped<T: Send>(
        &self,
        ids: &[ConversationId],
        map: &(dyn Fn(&Conversation) -> T + Sync),
        sink: impl FnMut(&ConversationId, Result<(ConversationHits, T)>) -> bool,
    ) {
        Searcher::each_mapped(self, ids, map, sink)
    }
}

/// Walking and mapping the content of an entry, below the face.
pub trait EntryInterior<C> {
    /// The entry with each content reference mapped by `f`, or `f`'s first
    /// error.
    fn try_map_content<D, E>(
        self,
        f: &mut impl FnMut(C) -> std::result::Result<D, E>,
    ) -> std::result::Result<Entry<D>, E>;
    /// Calls `f` on each content reference of the entry, in order.
    fn for_each_content(&self, f: &mut impl FnMut(&C));
}

impl<C> EntryInterior<C> for Entry<C> {
    fn try_map_content<D, E>(
        self,
        f: &mut impl FnMut(C) -> std::result::Result<D, E>,
    ) -> std::result::Result<Entry<D>, E> {
        Entry::try_map_content(self, f)
    }
    fn for_each_content(&self, f: &mut impl FnMut(&C)) {
        Entry::for_each_content(self, f)
    }
}

/// An entry of blob references as an entry of payloads, below the face.
pub trait IntoPayloadRefs {
    /// Each reference as [`Payload::Ref`].
    fn into_payload_refs(self) -> Entry<Payload>;
}

impl IntoPayloadRefs for Entry<BlobRef> {
    fn into_payload_refs(self) -> Entry<Payload> {
        Entry::into_payload_refs(self)
    }
}
