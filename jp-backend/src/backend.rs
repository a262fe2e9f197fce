//! [`JpStoreBackend`]: JP's four storage traits over a jp-store store.
//!
//! A JP conversation is a jp-store conversation of the same id (JP's
//! deciseconds), created as an import of the files JP's `FsStorageBackend`
//! would write for it, so that `jp-store export --format jp` gives those
//! files back and every jp-store command (view, compact, fsck, gc, copy,
//! serve) works on it. JP's metadata is the conversation's metadata fields;
//! the archive partition is the `archived` flag of its JP information.
//!
//! A write costs what changed ([`crate::write`]): the events JP hands over
//! that the store does not hold yet are appended as one durable record
//! (and a changed metadata as a second), found by comparing with the
//! stream last loaded or written; a history changed in place is stored
//! whole, the log it replaces kept in the store's quarantine.

use jpstore_engine::internal::{ConversationIdInterior as _, StoreInterior as _};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use jp_conversation::{Conversation, ConversationId, ConversationStream};
use jp_storage::backend::{
    ConversationFilter, ConversationIndexEntry, ConversationLockGuard, LoadBackend, LockBackend,
    PersistBackend, Projection, SanitizeReport, SessionBackend, StoragePresence,
};
use jp_storage::lock::LockInfo;
use jp_storage::LoadError as JpLoadError;
use jpstore_blobstore::backend::ObjectMeta;
use jpstore_engine::conversation::ConversationId as StoreId;
use jpstore_engine::internal::conversation::state::ConversationState;
use jpstore_engine::Store;
use jpstore_integrations::jp::JpInfo;
use serde_json::Value;

use crate::error::{jp_error, jp_load_error, BackendError};
use crate::load::{jp_id, store_id};

/// JP's storage backend over a jp-store store (a directory or `s3://`).
pub struct JpStoreBackend {
    pub(crate) store: Store,
    /// The location it was opened at, for messages.
    location: String,
    /// The workspace whose `.jp/conversations` receives the files of
    /// conversations written [`Projection::Projected`].
    pub(crate) workspace: Option<PathBuf>,
    /// The stream of each conversation as last loaded or written, with the
    /// end of its log then: what the next write is compared with.
    pub(crate) known: Mutex<HashMap<ConversationId, crate::write::Known>>,
    /// On an object store: how long a conversation lock's lease lives
    /// without renewal.
    pub(crate) lease: std::time::Duration,
    /// On an object store: the leases seen held, and since when unchanged.
    pub(crate) watched: crate::lock::Watched,
    /// The state of each conversation as last listed, with its log's
    /// metadata taken before it was read.
    listed: Mutex<HashMap<ConversationId, (ObjectMeta, Arc<Listed>)>>,
}

/// How long a conversation lock's lease on an object store lives without
/// renewal, unless [`JpStoreBackend::with_lease`] says otherwise.
pub const DEFAULT_LEASE: std::time::Duration = std::time::Duration::from_secs(60);

impl std::fmt::Debug for JpStoreBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JpStoreBackend")
            .field("location", &self.location)
            .field("workspace", &self.workspace)
            .finish_non_exhaustive()
    }
}

impl JpStoreBackend {
    /// Opens the store at `location` (a directory, a `file://` URL of one,
    /// or `s3://BUCKET/PREFIX`, as `jp-store --store` takes it), creating
    /// it when the location holds none.
    pub fn open(location: &str) -> Result<JpStoreBackend, BackendError> {
        let store = crate::location::open_or_create(location)?;
        Ok(JpStoreBackend::with_store(store, location))
    }

    /// The backend over an open store.
    pub fn with_store(store: Store, location: &str) -> JpStoreBackend {
        JpStoreBackend {
            store,
            location: location.to_owned(),
            workspace: None,
            known: Mutex::new(HashMap::new()),
            lease: DEFAULT_LEASE,
            watched: Mutex::new(HashMap::new()),
            listed: Mutex::new(HashMap::new()),
        }
    }

    /// On an object store, where a conversation lock is a lease renewed by
    /// its holder (a sixth of `lease` apart): how long a lease lives
    /// without renewal before another writer may take it over (a holder
    /// that died, or lost the store for that long). Every writer of a
    /// store should use the same. No effect on a file system, where the
    /// kernel releases the lock of a holder that dies.
    pub fn with_lease(mut self, lease: std::time::Duration) -> JpStoreBackend {
        self.lease = lease;
        self
    }

    /// Adds JP's workspace projection: the files of every conversation
    /// written [`Projection::Projected`] are written under
    /// `root/.jp/conversations/` byte for byte as JP's `FsStorageBackend`
    /// writes them, from what the store holds (never read back).
    pub fn with_workspace(mut self, root: impl Into<PathBuf>) -> JpStoreBackend {
        self.workspace = Some(root.into());
        self
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// `root/.jp/conversations` of the workspace projection.
    pub(crate) fn projection_dir(&self) -> Option<PathBuf> {
        self.workspace
            .as_ref()
            .map(|root| root.join(".jp").join("conversations"))
    }

    /// Every conversation of the store that is JP's (its id JP's), with
    /// its state, in id order; one that cannot be read is left out.
    ///
    /// As `Store::list_each` lists them (each log's state: its head cache
    /// and the records after it, the framing of the rest checked), but a
    /// conversation whose log has the metadata it had when this backend
    /// last listed it (taken before its state was read: a log written
    /// since has other metadata; on a file system the file's identity,
    /// length and time, so a log replaced by a rewrite is read again even
    /// at the same length and time) keeps the state read then, and the logs
    /// are read on the machine's cores. So JP's listing, the index then the
    /// metadata batch ([`JpStoreBackend::jp_conversations_of`]), reads each
    /// log once.
    fn jp_conversations(&self) -> Vec<(ConversationId, Arc<Listed>)> {
        let mut ids: Vec<(ConversationId, StoreId)> = self
            .conversation_names()
            .into_iter()
            .filter_map(|name| {
                let sid = StoreId::parse(&name).ok()?;
                Some((jp_id(&sid).ok()?, sid))
            })
            .collect();
        ids.sort_by_key(|(id, _)| *id);
        self.list_ids(&ids, Kept::Replace)
    }

    /// [`JpStoreBackend::jp_conversations`] of the conversations `ids`
    /// only (those that are conversations of the store): what a metadata
    /// batch needs, without listing the store again.
    fn jp_conversations_of(&self, ids: &[ConversationId]) -> Vec<(ConversationId, Arc<Listed>)> {
        let ids: Vec<(ConversationId, StoreId)> = ids
            .iter()
            .filter_map(|id| Some((*id, store_id(id).ok()?)))
            .collect();
        self.list_ids(&ids, Kept::Update)
    }

    /// The names in the store's `conversations` directory: on a file
    /// system as the directory lists them (no entry looked up: a name that
    /// is no conversation has no log, which its read finds), elsewhere as
    /// the backend lists them.
    fn conversation_names(&self) -> Vec<String> {
        let backend = &**self.store.backend();
        let dir = std::path::Path::new(jpstore_engine::internal::conversation::CONVERSATIONS_DIR);
        if let Some(files) = backend.files() {
            return files
                .read_dir_kinds(dir)
                .map(|names| names.into_iter().map(|(name, _)| name).collect())
                .unwrap_or_default();
        }
        backend
            .list(dir)
            .map(|names| names.into_iter().map(|e| e.name).collect())
            .unwrap_or_default()
    }

    /// The conversations `ids` as listed ([`JpStoreBackend::list_one`]),
    /// on the machine's cores, in the order of `ids`, those that are no
    /// conversation (or cannot be read) left out; what is kept for the
    /// next listing is replaced by them, or updated for them.
    fn list_ids(
        &self,
        ids: &[(ConversationId, StoreId)],
        kept: Kept,
    ) -> Vec<(ConversationId, Arc<Listed>)> {
        let before = self
            .listed
            .lock()
            .map(|mut l| std::mem::take(&mut *l))
            .unwrap_or_default();
        let list = |ids: &[(ConversationId, StoreId)]| -> Vec<(ConversationId, Option<ListedNow>)> {
            ids.iter()
                .map(|(id, sid)| (*id, self.list_one(sid, before.get(id))))
                .collect()
        };
        let threads = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .clamp(1, 8)
            .min(ids.len().div_ceil(LISTED_RUN))
            .max(1);
        let listed = if threads == 1 {
            list(ids)
        } else {
            let run = ids.len().div_ceil(threads);
            std::thread::scope(|s| {
                let list = &list;
                let mut runs = ids.chunks(run);
                let first = runs.next().unwrap_or(&[]);
                let others: Vec<_> = runs.map(|run| s.spawn(move || list(run))).collect();
                let mut out = list(first);
                for handle in others {
                    out.extend(
                        handle
                            .join()
                            .unwrap_or_else(|e| std::panic::resume_unwind(e)),
                    );
                }
                out
            })
        };
        let mut kept_now = match kept {
            Kept::Replace => HashMap::with_capacity(listed.len()),
            Kept::Update => before,
        };
        let mut out = Vec::with_capacity(listed.len());
        for (id, now) in listed {
            kept_now.remove(&id);
            let Some((log, listed)) = now else {
                continue;
            };
            if let Some(log) = log {
                kept_now.insert(id, (log, Arc::clone(&listed)));
            }
            out.push((id, listed));
        }
        if let Ok(mut l) = self.listed.lock() {
            *l = kept_now;
        }
        out
    }

    /// Conversation `sid` as listed and its log's metadata (taken before
    /// its state was read: on a file system, as the read opened the log,
    /// elsewhere first; `None` when it could not be taken): what `before`
    /// kept when the log's metadata is what it was; `None` when there is no
    /// conversation (no log, or gone since listed) or it cannot be read.
    fn list_one(
        &self,
        sid: &StoreId,
        before: Option<&(ObjectMeta, Arc<Listed>)>,
    ) -> Option<(Option<ObjectMeta>, Arc<Listed>)> {
        let backend = &**self.store.backend();
        // A file's metadata comes with its open (`fstat`): a log not seen
        // before needs no look of its own.
        let opens_with_meta = backend.files().is_some();
        let log = if before.is_some() || !opens_with_meta {
            match backend.head(&sid.log_path()) {
                Ok(meta) => Some(meta),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                    ) =>
                {
                    return None
                }
                // Read: reading it says what is wrong.
                Err(_) => None,
            }
        } else {
            None
        };
        if let (Some(log), Some((seen, listed))) = (&log, before) {
            if log == seen {
                return Some((Some(log.clone()), Arc::clone(listed)));
            }
        }
        let options = self.store.options().log;
        match jpstore_engine::internal::conversation::read::read_state_seen(backend, sid, options) {
            Ok((state, _, opened)) => {
                let log = match opens_with_meta {
                    true => opened.or(log),
                    false => log,
                };
                Some((log, Arc::new(Listed::of(&state))))
            }
            Err(_) => None,
        }
    }
}

/// A conversation as JP's listing reads it, from its state (made once per
/// state read).
#[derive(Debug)]
pub(crate) struct Listed {
    /// In JP's archive partition.
    archived: bool,
    /// Where JP finds it.
    presence: StoragePresence,
    /// When it expires.
    expires: Option<DateTime<Utc>>,
    /// Its metadata, where the state alone says it ([`metadata_of_state`]).
    metadata: Option<Conversation>,
}

impl Listed {
    fn of(state: &ConversationState) -> Listed {
        let info = jp_info(state);
        Listed {
            archived: info.as_ref().is_some_and(|i| i.archived),
            // Without a second root, from the projection of its last write
            // (as JP's in-memory backend does).
            presence: match info.as_ref().is_some_and(|i| i.local) {
                true => StoragePresence::UserLocalOnly,
                false => StoragePresence::Projected,
            },
            expires: state
                .metadata
                .fields
                .get("expires_at")
                .and_then(Value::as_str)
                .and_then(crate::load::parse_time),
            metadata: info.and_then(|info| metadata_of_state(state, info)),
        }
    }
}

/// A conversation listed now: its log's metadata, and it.
type ListedNow = (Option<ObjectMeta>, Arc<Listed>);

/// What a listing does with the conversations kept from the last one.
#[derive(Clone, Copy)]
enum Kept {
    /// Replaced by those it listed (it listed every conversation).
    Replace,
    /// Updated for those it listed (a batch of some).
    Update,
}

/// The fewest conversations a listing gives a thread of its own.
const LISTED_RUN: usize = 64;

/// The JP information of a conversation's metadata (`None` for one not
/// written as JP's).
pub(crate) fn jp_info(state: &ConversationState) -> Option<JpInfo> {
    JpInfo::from_metadata(&state.metadata.fields).ok().flatten()
}

/// A merge patch (RFC 7396) that turns the object `before` into `after`
/// (both JSON objects): `after` with `null` for every key it lost.
pub(crate) fn replacing(before: &Value, after: Value) -> Value {
    let (Value::Object(before), Value::Object(mut after)) = (before, after.clone()) else {
        return after;
    };
    for k in before.keys() {
        if !after.contains_key(k) {
            after.insert(k.clone(), Value::Null);
        }
    }
    Value::Object(after)
}

/// A jp-store timestamp as JP's.
fn jp_time(t: jpstore_engine::timestamp::Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.unix_secs(), t.subsec_nanos())
}

/// A conversation's metadata from its state alone (no entry read), as JP's
/// `FsStorageBackend` reads it from its files: where that is exact (JP's
/// current layout, no entry of a type the store keeps verbatim, whose time
/// it does not track); `None` elsewhere.
fn metadata_of_state(state: &ConversationState, info: JpInfo) -> Option<Conversation> {
    if info.layout != jpstore_integrations::jp::ConfigLayout::BaseConfigFile
        || state.unknown_entries > 0
    {
        return None;
    }
    let fields = jpstore_integrations::jp::export::imported_metadata(&state.metadata.fields, &info);
    let mut conversation: Conversation = serde_json::from_value(Value::Object(fields)).ok()?;
    conversation.events_count = usize::try_from(state.entries).ok()?;
    conversation.last_event_at = match state.last_event {
        Some(t) => Some(jp_time(t)?),
        None => None,
    };
    Some(conversation)
}

impl PersistBackend for JpStoreBackend {
    fn write(
        &self,
        id: &ConversationId,
        metadata: &Conversation,
        events: &ConversationStream,
        projection: Projection,
    ) -> Result<(), jp_storage::Error> {
        self.persist(id, metadata, events, projection)
            .map_err(jp_error)?;
        crate::projection::write(self, id, metadata, events, projection).map_err(jp_error)
    }

    fn remove(&self, id: &ConversationId) -> Result<(), jp_storage::Error> {
        let sid = store_id(id).map_err(|e| jp_error(e.into()))?;
        if let Ok(mut known) = self.known.lock() {
            known.remove(id);
        }
        match self.store.remove(&sid) {
            Ok(()) => {}
            Err(e) if e.is_no_conversation() => {}
            Err(e) => return Err(jp_error(e.into())),
        }
        crate::projection::remove(self, id).map_err(jp_error)
    }

    fn archive(&self, id: &ConversationId) -> Result<(), jp_storage::Error> {
        self.set_archived(id, true)
    }

    fn unarchive(&self, id: &ConversationId) -> Result<(), jp_storage::Error> {
        self.set_archived(id, false)
    }
}

impl JpStoreBackend {
    /// Moves a conversation into the archive partition or out of it: its
    /// JP information's `archived` flag, one metadata record. A
    /// conversation not in the partition it leaves is not found, as in
    /// JP's backends.
    fn set_archived(&self, id: &ConversationId, to: bool) -> Result<(), jp_storage::Error> {
        let not_found = || jp_storage::Error::ConversationNotFound(*id);
        let sid = store_id(id).map_err(|e| jp_error(e.into()))?;
        let mut writer = match self.store.writer(&sid) {
            Ok(w) => w,
            Err(e) if e.is_no_conversation() => return Err(not_found()),
            Err(e) => return Err(jp_error(e.into())),
        };
        let Some(mut info) = jp_info(writer.state()) else {
            return Err(not_found());
        };
        if info.archived == to {
            return Err(not_found());
        }
        let before = info.to_value();
        info.archived = to;
        let mut fields = jpstore_engine::event::Object::new();
        fields.insert(
            jpstore_integrations::jp::JP_FIELD.into(),
            replacing(&before, info.to_value()),
        );
        writer
            .set_metadata(jpstore_engine::internal::conversation::meta::MetaPatch {
                base_config: None,
                fields,
            })
            .map_err(|e| jp_error(e.into()))?;
        let version = crate::write::LogVersion::of(writer.state(), writer.log_end());
        // The head cache left current (a writer dropped writes nothing).
        writer.close();
        if let Ok(mut known) = self.known.lock() {
            if let Some(k) = known.get_mut(id) {
                k.version = version;
            }
        }
        crate::projection::set_archived(self, id, to).map_err(jp_error)
    }
}

impl LoadBackend for JpStoreBackend {
    fn load_conversation_index(&self, filter: ConversationFilter) -> Vec<ConversationIndexEntry> {
        self.jp_conversations()
            .into_iter()
            .filter(|(_, listed)| listed.archived == filter.archived)
            .map(|(id, listed)| ConversationIndexEntry {
                id,
                presence: listed.presence,
            })
            .collect()
    }

    fn load_conversation_metadata(&self, id: &ConversationId) -> Result<Conversation, JpLoadError> {
        crate::load::metadata(&self.store, id).map_err(|e| jp_load_error(id, e, true))
    }

    fn load_conversation_metadata_batch(
        &self,
        ids: &[ConversationId],
    ) -> Vec<(ConversationId, Result<Conversation, JpLoadError>)> {
        let listed: HashMap<ConversationId, Arc<Listed>> =
            self.jp_conversations_of(ids).into_iter().collect();
        ids.iter()
            .map(|id| {
                let fast = listed.get(id).and_then(|l| l.metadata.clone());
                (
                    *id,
                    match fast {
                        Some(m) => Ok(m),
                        None => self.load_conversation_metadata(id),
                    },
                )
            })
            .collect()
    }

    fn load_conversation_stream(
        &self,
        id: &ConversationId,
    ) -> Result<ConversationStream, JpLoadError> {
        let (known, version, archived) =
            crate::write::load_known(&self.store, id).map_err(|e| jp_load_error(id, e, false))?;
        // JP's file backend finds streams in the live partition only.
        if archived {
            return Err(JpLoadError::new(
                format!("jp-store/{id}"),
                jp_storage::load::LoadErrorInner::MissingConversationStream(*id),
            ));
        }
        let stream = known.stream.clone();
        if let Ok(mut all) = self.known.lock() {
            all.insert(
                *id,
                crate::write::Known {
                    version,
                    stream: Some(known),
                },
            );
        }
        Ok(stream)
    }

    fn load_expired_conversation_ids(&self, now: DateTime<Utc>) -> Vec<ConversationId> {
        self.jp_conversations()
            .into_iter()
            .filter(|(_, listed)| !listed.archived)
            .filter_map(|(id, listed)| (listed.expires? <= now).then_some(id))
            .collect()
    }

    fn sanitize(&self) -> Result<SanitizeReport, jp_storage::Error> {
        crate::sanitize::sanitize(self).map_err(jp_error)
    }
}

impl LockBackend for JpStoreBackend {
    fn try_lock(
        &self,
        conversation_id: &str,
        session: Option<&str>,
    ) -> Result<Option<Box<dyn ConversationLockGuard>>, jp_storage::Error> {
        crate::lock::try_lock(self, conversation_id, session).map_err(jp_error)
    }

    fn lock_info(&self, conversation_id: &str) -> Option<LockInfo> {
        crate::lock::lock_info(self, conversation_id)
    }

    fn list_orphaned_locks(&self) -> Vec<ConversationId> {
        crate::lock::orphaned(self)
    }
}

impl SessionBackend for JpStoreBackend {
    fn load_session(&self, session_key: &str) -> Result<Option<Value>, jp_storage::Error> {
        crate::session::load(&self.store, session_key).map_err(jp_error)
    }

    fn save_session(&self, session_key: &str, data: &Value) -> Result<(), jp_storage::Error> {
        crate::session::save(&self.store, session_key, data).map_err(jp_error)
    }

    fn list_session_keys(&self) -> Vec<String> {
        crate::session::keys(&self.store)
    }
}
