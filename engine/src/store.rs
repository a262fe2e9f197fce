//! A jp-store store: the directory holding the blob store, the
//! conversations and the workspace config (format-spec.md section 1).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use jpstore_blobstore::backend::{Backend, FileBackend, FileKind, ListedEntry, LockGuard};
use jpstore_blobstore::storage::LocalStorage;
use jpstore_blobstore::{BlobStore, Options as BlobOptions};
use serde_json::Value;

use crate::config;
use crate::config::{SettingPlace, Settings};
use crate::conversation::meta::MetaPatch;
use crate::conversation::read::{read_conversation, read_state, Conversation};
use crate::conversation::state::ConversationState;
use crate::conversation::writer::ConversationWriter;
use crate::conversation::{ConversationId, CONVERSATIONS_DIR};
use crate::error::{Error, Result};
use crate::event::{BlobRef, EventKind, Object};
use crate::log::{Framing, LogOptions};
use crate::timestamp::Timestamp;

/// The blob store's directory inside the store.
pub const BLOBS_DIR: &str = "blobs";
/// Where gc on a shared store keeps each run's trash (`gc/trash/<run>/`,
/// format-spec.md 5.5), which reads also look in.
pub const GC_TRASH_DIR: &str = "gc/trash";
/// The workspace config file.
pub const CONFIG_FILE: &str = "config.toml";
/// Largest workspace config file read.
pub const MAX_CONFIG_FILE: u64 = 16 << 20;

/// Settings of a [`Store`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Settings of the logs.
    pub log: LogOptions,
    /// Settings of the blob store.
    pub blobs: BlobOptions,
    /// The framing of the logs of new conversations (created, imported,
    /// forked): version 2, the default. Version 1 is for tests of reading,
    /// appending to and upgrading older logs.
    pub new_log_framing: Framing,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            log: LogOptions::default(),
            blobs: BlobOptions::default(),
            new_log_framing: Framing::V2,
        }
    }
}

/// What a new conversation starts with.
#[derive(Debug, Clone, Default)]
pub struct NewConversation {
    /// Its id; `None` picks JP's kind of id (UTC deciseconds of now, the
    /// next free one if taken).
    pub id: Option<ConversationId>,
    /// A title.
    pub title: Option<String>,
    /// Labels.
    pub labels: Vec<(String, String)>,
    /// The base config; `None` uses the workspace config.
    pub base_config: Option<Object>,
    /// The creation time; `None` is now.
    pub created: Option<Timestamp>,
    /// Further metadata fields, kept as they are.
    pub extra: Object,
}

/// A conversation created: what `jp-store new --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CreateReport {
    /// The new conversation's id.
    pub id: ConversationId,
}

/// One line of a listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// The conversation's id.
    pub id: ConversationId,
    /// Its state (metadata and counts).
    pub state: ConversationState,
    /// Bytes of its log.
    pub log_bytes: u64,
}

/// The workspace config as a `Store` reads it (`Store::workspace_config`).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkspaceConfig {
    /// The config as a JSON object (empty when there is no `config.toml`):
    /// what a new conversation stores as its base config.
    pub json: Object,
    /// Its settings, checked.
    pub settings: Settings,
}

/// What jp-store reads of a conversation's config (format-spec.md 4.5),
/// every layer checked (`Store::conversation_settings`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationSettings {
    /// At its start: the workspace config with the conversation's base
    /// config merged over it. The view's deduplication starts here and
    /// follows the config deltas along the projected stream.
    pub base: Settings,
    /// At its end: `base` with every config delta merged over it in order
    /// (what compactions and provider requests read).
    pub end: Settings,
}

impl serde::Serialize for Listing {
    /// Serializes as `jp-store ls --json` prints a conversation: `id`,
    /// `title`, `created` and `last_activity` (JP's timestamps, or `null`),
    /// `labels` (by key), `turns`, `events` and `log_bytes`.
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Shape<'a> {
            id: &'a ConversationId,
            title: Option<&'a str>,
            created: Option<String>,
            last_activity: Option<String>,
            labels: std::collections::BTreeMap<String, String>,
            turns: u64,
            events: u64,
            log_bytes: u64,
        }
        let meta = &self.state.metadata;
        Shape {
            id: &self.id,
            title: meta.title(),
            created: meta.created().map(|t| t.to_string()),
            last_activity: self.state.last_activity().map(|t| t.to_string()),
            labels: meta.labels().into_iter().collect(),
            turns: self.state.turns.turns(),
            events: self.state.entries,
            log_bytes: self.log_bytes,
        }
        .serialize(serializer)
    }
}

/// An open store.
#[derive(Debug)]
pub struct Store {
    backend: Arc<dyn Backend>,
    blobs: BlobStore,
    options: StoreOptions,
    /// `config.toml`, read the first time it is needed (dropped again if
    /// it does not parse, so that the next need reads the file again).
    workspace_file: std::sync::Mutex<Option<Arc<WorkspaceFile>>>,
    /// `config.toml` parsed, the first time it is needed.
    workspace: OnceLock<WorkspaceConfig>,
    /// The settings computed so far, by base config.
    settings_memo: settings_memo::SettingsMemo,
}

/// `config.toml` as a [`Store`] read it.
#[derive(Debug)]
struct WorkspaceFile {
    /// Its text (`None`: there is no such file).
    text: Option<String>,
    /// SHA-256 of its bytes (of no bytes when there is none): what settings
    /// cached from it are keyed by.
    digest: jpstore_blobstore::BlobId,
}

/// A fork read and cut but not published yet ([`Store::draft_fork`]).
/// Holds the shared gc lock while it lives.
pub(crate) struct ForkDraft {
    _gc: Box<dyn LockGuard>,
    id: ConversationId,
    /// The conversation forked.
    pub(crate) source: Conversation,
    /// The entries the fork will hold, in order; a caller may add some
    /// (a compaction) before [`Store::publish_fork`].
    pub(crate) entries: Vec<crate::event::Entry>,
    /// The settings in effect at the end of the source, which are those at
    /// the end of the fork too (its base config is the source's config where
    /// it starts, and it keeps every later delta).
    pub(crate) settings: Settings,
    base: Object,
    first_turn: u64,
    turns: u64,
}

impl Store {
    /// Creates a store in `root` (the directory is created if needed) or
    /// completes one that exists; an existing config file is kept.
    pub fn init_dir(root: &Path, options: StoreOptions) -> Result<Store> {
        let storage = LocalStorage::create(root).map_err(|source| Error::Io {
            op: "create",
            path: root.to_path_buf(),
            source,
        })?;
        Self::init(FileBackend::shared(Arc::new(storage)), options)
    }

    /// `jp-store init`: makes a store in `root` if it is new or empty
    /// (created if needed), and opens it if it is a store already
    /// (`conversations/` in it; nothing is written, as `git init` leaves an
    /// existing repository). Anything else is [`Error::NotEmpty`], naming
    /// some of what is there: a store is never made over other files.
    /// Returns the store and whether it was made.
    pub fn init_new_dir(root: &Path, options: StoreOptions) -> Result<(Store, bool)> {
        let (storage, made) = LocalStorage::create_new(root).map_err(|source| Error::Io {
            op: "create",
            path: root.to_path_buf(),
            source,
        })?;
        let storage = Arc::new(storage);
        let result = Self::init_new(
            FileBackend::shared(storage.clone()),
            root.to_path_buf(),
            options,
        );
        if result.is_err() && made {
            // Left as it was found: not there. (Not empty: someone else
            // put something in it meanwhile, which stays.)
            let _ = storage.remove_root_if_empty();
        }
        result
    }

    /// `jp-store init` in `backend` (a directory, a prefix of a bucket):
    /// as [`Store::init_new_dir`], with `root` the store's location as a
    /// person should see it in messages.
    pub(crate) fn init_new(
        backend: Arc<dyn Backend>,
        root: PathBuf,
        options: StoreOptions,
    ) -> Result<(Store, bool)> {
        let names = root_names(&*backend, &root)?;
        if names.iter().any(|n| n == CONVERSATIONS_DIR) {
            return Ok((Self::open(backend, options)?, false));
        }
        // Empty, or holding only the config an init stopped before put
        // there (it writes the config first, `conversations/` last).
        let ours = match names.as_slice() {
            [] => true,
            [name] if name == CONFIG_FILE => {
                Self::read_config_of(&*backend)?.as_deref()
                    == Some(config::WORKSPACE_CONFIG_TEMPLATE.as_bytes())
            }
            _ => false,
        };
        if !ours {
            return Err(not_empty(root, names));
        }
        Ok((Self::init_or_undo(backend, options)?, true))
    }

    /// Opens the store in `root`, which must have been created by `init`.
    pub fn open_dir(root: &Path, options: StoreOptions) -> Result<Store> {
        let storage = match LocalStorage::open(root) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotAStore {
                    path: root.to_path_buf(),
                    reason: "the directory does not exist".into(),
                })
            }
            Err(source) => {
                return Err(Error::Io {
                    op: "open",
                    path: root.to_path_buf(),
                    source,
                })
            }
        };
        Self::open(FileBackend::shared(Arc::new(storage)), options)
    }

    /// Creates (or completes) a store inside `backend`: the commented
    /// workspace config unless there is one, then the `conversations/`
    /// prefix, each durable.
    pub fn init(backend: Arc<dyn Backend>, options: StoreOptions) -> Result<Store> {
        // The config first, `conversations/` (what makes a directory a
        // store) last: a crash in between leaves a directory that is not a
        // store yet, with the config the next init takes as its own.
        let cfg = Path::new(CONFIG_FILE);
        backend
            .put_if_absent(
                cfg,
                config::WORKSPACE_CONFIG_TEMPLATE.as_bytes(),
                &config_temp(),
            )
            .map_err(|e| Error::from_backend(&*backend, e))?;
        backend
            .create_prefix(Path::new(CONVERSATIONS_DIR))
            .map_err(|e| Error::from_backend(&*backend, e))?;
        Self::open(backend, options)
    }

    /// [`Store::init`] of a root that holds no store (nothing, or only a
    /// `config.toml` that the caller put there for it): if it fails, what
    /// it made is removed again ([`undo_init`]), so that the root is left
    /// as it was found and the command can be run again once the cause (a
    /// full disk, say) is gone.
    pub(crate) fn init_or_undo(backend: Arc<dyn Backend>, options: StoreOptions) -> Result<Store> {
        Self::init(backend.clone(), options).inspect_err(|_| undo_init(&*backend))
    }

    /// Opens a store inside `backend`.
    pub fn open(backend: Arc<dyn Backend>, options: StoreOptions) -> Result<Store> {
        match backend.head(Path::new(CONVERSATIONS_DIR)) {
            Ok(m) if m.kind == FileKind::Directory => {}
            Ok(_) => {
                return Err(Error::NotAStore {
                    path: backend.display(Path::new(".")),
                    reason: format!("{CONVERSATIONS_DIR} is not a directory"),
                })
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotAStore {
                    path: backend.display(Path::new(".")),
                    reason: format!("it has no {CONVERSATIONS_DIR}/ directory"),
                })
            }
            Err(source) => {
                return Err(Error::Io {
                    op: "stat",
                    path: backend.display(Path::new(CONVERSATIONS_DIR)),
                    source,
                })
            }
        }
        let blobs = BlobStore::open(backend.clone(), BLOBS_DIR, options.blobs.clone())?;
        // Where gc on a shared store moves what it sweeps until it has
        // waited out the writers that may need it (format-spec.md 5.5):
        // reads look there for an object found nowhere else.
        if !backend.locks_span_writers() {
            blobs.look_in_trash_below(PathBuf::from(GC_TRASH_DIR));
        }
        Ok(Store {
            backend,
            blobs,
            options,
            workspace_file: std::sync::Mutex::new(None),
            workspace: OnceLock::new(),
            settings_memo: settings_memo::SettingsMemo::default(),
        })
    }

    /// The blob store.
    pub(crate) fn blobs(&self) -> &BlobStore {
        &self.blobs
    }

    /// The backend everything is read and written through (the storage
    /// seam: `jpstore_blobstore::backend`).
    pub(crate) fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The name of `key` (a path relative to the store) as a person should
    /// see it in messages.
    pub(crate) fn display(&self, key: &Path) -> PathBuf {
        self.backend.display(key)
    }

    /// The options in effect.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// The workspace config (`config.toml`; empty if the file does not
    /// exist) and its settings, checked: a bad setting is
    /// [`Error::BadSetting`] naming the file and the line of the key.
    ///
    /// The file is read and parsed once per open store, the first time a
    /// command needs it (a store that never needs it, for `ls` or `gc`,
    /// never reads it; `fsck` reads it to report it if it is refused); an
    /// edit of the file is seen by the stores
    /// opened after it. A failed read is not kept: the next call reads the
    /// file again.
    pub(crate) fn workspace_config(&self) -> Result<&WorkspaceConfig> {
        if let Some(parsed) = self.workspace.get() {
            return Ok(parsed);
        }
        let file = self.workspace_file()?;
        let parsed = match self.parse_workspace_config(&file) {
            Ok(parsed) => parsed,
            Err(e) => {
                // Not kept: the next need reads the file again (a digest
                // handed out meanwhile was of a file that does not parse,
                // so no settings were cached under it).
                if let Ok(mut cached) = self.workspace_file.lock() {
                    if cached.as_ref().is_some_and(|c| Arc::ptr_eq(c, &file)) {
                        *cached = None;
                    }
                }
                return Err(e);
            }
        };
        // Threads parsing it at once parse the same text; one result is kept.
        Ok(self.workspace.get_or_init(|| parsed))
    }

    /// SHA-256 of the bytes of `config.toml` (of no bytes when there is
    /// none), as this open store read it (once, like
    /// [`Store::workspace_config`], without parsing it): what settings
    /// cached in a conversation's head are keyed by (format-spec.md 4.6).
    pub(crate) fn workspace_digest(&self) -> Result<jpstore_blobstore::BlobId> {
        Ok(self.workspace_file()?.digest)
    }

    /// `config.toml` as read once per open store (a failed read, or a text
    /// that does not parse, is not kept).
    fn workspace_file(&self) -> Result<Arc<WorkspaceFile>> {
        if let Some(read) = self.workspace_file.lock().ok().and_then(|c| c.clone()) {
            return Ok(read);
        }
        let read = Arc::new(self.read_workspace_file()?);
        // Threads reading it at once read the same file; one is kept.
        match self.workspace_file.lock() {
            Ok(mut cached) => Ok(cached.get_or_insert(read).clone()),
            Err(_) => Ok(read),
        }
    }

    /// Reads `config.toml` (see [`Store::workspace_config`]).
    fn read_workspace_file(&self) -> Result<WorkspaceFile> {
        let path = Path::new(CONFIG_FILE);
        let display = self.backend.display(path);
        let file = match self.backend.open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(WorkspaceFile {
                    text: None,
                    digest: jpstore_blobstore::BlobId::of(b""),
                })
            }
            Err(source) => {
                return Err(Error::Io {
                    op: "open",
                    path: display,
                    source,
                })
            }
        };
        let bytes =
            jpstore_blobstore::backend::read_all(&*file, MAX_CONFIG_FILE).map_err(|source| {
                Error::Io {
                    op: "read",
                    path: display.clone(),
                    source,
                }
            })?;
        let digest = jpstore_blobstore::BlobId::of(&bytes);
        let text = String::from_utf8(bytes).map_err(|e| Error::Corrupt {
            path: display.clone(),
            offset: e.utf8_error().valid_up_to() as u64,
            expected: "UTF-8 text (TOML)".into(),
            found: "a byte that is not UTF-8".into(),
        })?;
        Ok(WorkspaceFile {
            text: Some(text),
            digest,
        })
    }

    /// Parses `config.toml` as read (see [`Store::workspace_config`]).
    fn parse_workspace_config(&self, file: &WorkspaceFile) -> Result<WorkspaceConfig> {
        let Some(text) = &file.text else {
            return Ok(WorkspaceConfig {
                json: Object::new(),
                settings: Settings::default(),
            });
        };
        let display = self.backend.display(Path::new(CONFIG_FILE));
        let json = config::parse_workspace_toml(text, &display)?;
        let settings = Settings::parse(&json).map_err(|setting| Error::BadSetting {
            place: Box::new(SettingPlace::WorkspaceFile {
                line: config::toml_key_line(text, &setting.path),
                path: display,
            }),
            setting: Box::new(setting),
        })?;
        Ok(WorkspaceConfig { json, settings })
    }

    /// Creates a conversation and returns its writer (`Store::create`
    /// returns its handle).
    pub(crate) fn create_writer(&self, new: NewConversation) -> Result<ConversationWriter<'_>> {
        // The base config blob must not be swept before the log that
        // references it is published (format-spec.md 4.7).
        let _gc = self.gc_shared()?;
        let created = new.created.unwrap_or_else(Timestamp::now);
        let given;
        let base = match new.base_config {
            Some(b) => {
                Settings::parse(&b).map_err(|setting| Error::BadSetting {
                    place: Box::new(SettingPlace::GivenBaseConfig),
                    setting: Box::new(setting),
                })?;
                given = b;
                &given
            }
            None => &self.workspace_config()?.json,
        };
        let base_ref = self.put_config(base)?;
        let mut fields = Object::new();
        if let Some(t) = new.title {
            fields.insert("title".into(), Value::String(t));
        }
        fields.insert("created".into(), Value::String(created.to_string()));
        if !new.labels.is_empty() {
            let labels: Object = new
                .labels
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            fields.insert("labels".into(), Value::Object(labels));
        }
        for (k, v) in new.extra {
            fields.entry(k).or_insert(v);
        }
        let settings = self.start_settings_cache(base_ref, base);
        let patch = MetaPatch {
            base_config: Some(base_ref),
            fields,
        };
        self.create_log(new.id, created, patch, &[], settings)
    }

    /// The settings at the start of a new conversation whose base config
    /// is `base` (stored as `base_ref`), as [`Store::settings_cached`]
    /// computes them, keyed for its head (format-spec.md 4.6): so that its
    /// first view neither parses the configs nor writes a head. `None` when
    /// they cannot be made (a `config.toml` that does not parse: the
    /// conversation is made all the same, and a reader reports the config).
    fn start_settings_cache(
        &self,
        base_ref: BlobRef,
        base: &Object,
    ) -> Option<crate::conversation::head::SettingsCache> {
        let workspace = self.workspace_digest().ok()?;
        let key = Some(base_ref.id);
        let settings = match self.settings_memo.get(key.as_ref()) {
            Some(remembered) => (*remembered).clone(),
            None => {
                let mut settings = self.workspace_config().ok()?.settings.clone();
                settings.merge_layer_lenient(base);
                settings.finish_base();
                self.settings_memo.put(key, Arc::new(settings.clone()));
                settings
            }
        };
        Some(crate::conversation::head::SettingsCache {
            workspace,
            base_config: key,
            version: config::SETTINGS_VERSION,
            settings,
        })
    }

    /// The first half of a fork: reads `id` and cuts its last `last` turns
    /// (see [`Store::fork`]), holding the shared gc lock until the draft is
    /// published or dropped, so the blobs the fork shares cannot be swept
    /// in between.
    pub(crate) fn draft_fork(&self, id: &ConversationId, last: Option<u64>) -> Result<ForkDraft> {
        let gc = self.gc_shared()?;
        let conv = self.read(id)?;
        let workspace = &self.workspace_config()?.settings;
        let source_base = self.base_config(&conv)?;
        let settings = settings_over(workspace, &conv, &source_base).end;
        let turns = conv.state.turns.turns();
        let first_turn = match last {
            Some(0) => {
                return Err(Error::EmptyFork {
                    from: turns,
                    to: turns.saturating_sub(1),
                })
            }
            Some(n) => turns.saturating_sub(n),
            None => 0,
        };
        let turn_of = crate::event::turns::turn_indices(&conv.entries);
        let start = turn_of
            .iter()
            .position(|t| *t >= first_turn)
            .unwrap_or(conv.entries.len());
        let start = if first_turn == 0 { 0 } else { start };
        let base = config::config_after(&source_base, deltas_before(&conv, start));
        let entries: Vec<crate::event::Entry> = conv.entries[start..]
            .iter()
            .filter(|e| {
                first_turn == 0
                    || !matches!(
                        e.event().map(|e| &e.kind),
                        Some(EventKind::Compaction(_) | EventKind::CompactionUndo(_))
                    )
            })
            .cloned()
            .collect();
        Ok(ForkDraft {
            _gc: gc,
            id: id.clone(),
            source: conv,
            entries,
            settings,
            base,
            first_turn,
            turns,
        })
    }

    /// The second half of a fork: publishes `draft` (with whatever entries
    /// were added to it) as a new conversation, `new_id` or a fresh id.
    pub(crate) fn publish_fork(
        &self,
        draft: ForkDraft,
        new_id: Option<ConversationId>,
        now: Timestamp,
    ) -> Result<ConversationWriter<'_>> {
        let base_ref = self.put_config(&draft.base)?;
        let mut fields = draft.source.state.metadata.fields.clone();
        fields.remove(crate::conversation::meta::JP_FIELD);
        fields.insert("created".into(), Value::String(now.to_string()));
        fields.insert(
            "forked_from".into(),
            serde_json::json!({"id": draft.id.as_str(), "turns": draft.turns - draft.first_turn, "from_turn": draft.first_turn}),
        );
        let settings = self.start_settings_cache(base_ref, &draft.base);
        let patch = MetaPatch {
            base_config: Some(base_ref),
            fields,
        };
        self.create_log(new_id, now, patch, &draft.entries, settings)
    }

    /// Publishes a new conversation's log: with `id`, or else JP's kind of
    /// id for `created` (UTC deciseconds), taking the next free number when
    /// two conversations are created in the same decisecond, as JP does.
    fn create_log(
        &self,
        id: Option<ConversationId>,
        created: Timestamp,
        patch: MetaPatch,
        entries: &[crate::event::Entry],
        settings: Option<crate::conversation::head::SettingsCache>,
    ) -> Result<ConversationWriter<'_>> {
        let create = |id: ConversationId| {
            ConversationWriter::create(
                &self.blobs,
                id,
                patch.clone(),
                entries,
                self.options.log,
                self.options.new_log_framing,
                crate::conversation::sections::LOG_LEVEL,
                settings.clone(),
            )
        };
        if let Some(id) = id {
            return create(id);
        }
        let mut id = ConversationId::from_time(created);
        for _ in 0..1000 {
            match create(id.clone()) {
                Err(Error::ConversationExists { .. }) => {}
                other => return other,
            }
            id = match id.next_numeric() {
                Some(next) => next,
                None => break,
            };
        }
        Err(Error::ConversationExists { id: id.to_string() })
    }

    /// Holds the gc lock shared (writers; format-spec.md 4.7) until the
    /// returned handle is dropped.
    pub(crate) fn gc_shared(&self) -> Result<Box<dyn LockGuard>> {
        crate::conversation::gc_lock(&*self.backend, jpstore_blobstore::backend::LockKind::Shared)
    }

    /// Stores a config object as a blob (canonical bytes, so equal configs
    /// are one blob).
    pub(crate) fn put_config(&self, config: &Object) -> Result<BlobRef> {
        let bytes = config::canonical_bytes(config);
        // What is stored must read back (serde_json refuses nesting deeper
        // than 128 levels).
        config::parse_config_json(&bytes, "the base config")?;
        let out = self.blobs.put(&bytes)?;
        Ok(BlobRef {
            id: out.id,
            size: bytes.len() as u64,
        })
    }

    /// Opens a conversation for appending (waits for its writer lock).
    pub(crate) fn writer(&self, id: &ConversationId) -> Result<ConversationWriter<'_>> {
        ConversationWriter::open(&self.blobs, id.clone(), self.options.log)
    }

    /// Reads a whole conversation (no lock).
    pub(crate) fn read(&self, id: &ConversationId) -> Result<Conversation> {
        read_conversation(&*self.backend, id, self.options.log)
    }

    /// The ids of all conversations, sorted. Directories whose name is not a
    /// valid id, or that hold no log (a creation interrupted before its log
    /// was published), are not conversations.
    pub fn ids(&self) -> Result<Vec<ConversationId>> {
        let dir = Path::new(CONVERSATIONS_DIR);
        let entries = self.backend.list(dir).map_err(|source| Error::Io {
            op: "list",
            path: self.backend.display(dir),
            source,
        })?;
        let mut ids = Vec::new();
        for e in entries {
            let Ok(id) = ConversationId::parse(&e.name) else {
                continue;
            };
            match self.backend.head(&id.log_path()) {
                Err(e) if is_absent(&e) => {}
                // Anything at the log's name is listed, a directory there
                // too, and so is a conversation directory that cannot be
                // looked into (a symbolic link, no permission): reading it
                // then reports the error (`ls` and `stats` name it, fsck
                // reports it, gc refuses to sweep without its references)
                // instead of the conversation silently missing.
                Ok(_) | Err(_) => ids.push(id),
            }
        }
        ids.sort();
        Ok(ids)
    }

    /// Whether `e`, an error reading conversation `id` that a command
    /// reading every conversation listed, says that the conversation went
    /// away since the listing: it is not there
    /// ([`Error::is_no_conversation`]), or a removal of it is under way
    /// where moving it aside is not one step (an object store copies it to
    /// `conversations/.removed-<id>-*` and then deletes its objects, so
    /// meanwhile its log may not read). Such a conversation is left out, as
    /// a listing taken a moment later would leave it out.
    pub(crate) fn gone_since_listed(&self, id: &ConversationId, e: &Error) -> bool {
        e.is_no_conversation() || self.removal_under_way(id)
    }

    /// Whether a removal of conversation `id` is under way (or stopped) on
    /// a backend whose moves are not one step: a copy of it at
    /// `conversations/.removed-<id>-*`. Always false on a file system,
    /// where the conversation leaves its name in one rename.
    pub(crate) fn removal_under_way(&self, id: &ConversationId) -> bool {
        !self.backend.renames_in_one_step() && !self.removal_copies(id).is_empty()
    }

    /// Where removals of conversation `id` under way (or stopped) moved it
    /// aside: `conversations/.removed-<id>-*` (4.1). None where the store
    /// cannot be listed.
    pub(crate) fn removal_copies(&self, id: &ConversationId) -> Vec<PathBuf> {
        let dir = Path::new(CONVERSATIONS_DIR);
        let prefix = format!("{}{id}-", crate::conversation::REMOVED_PREFIX);
        self.backend.list(dir).map_or_else(
            |_| Vec::new(),
            |names| {
                names
                    .into_iter()
                    .filter(|e| e.name.starts_with(&prefix))
                    .map(|e| dir.join(e.name))
                    .collect()
            },
        )
    }

    /// Whether a conversation exists.
    pub fn exists(&self, id: &ConversationId) -> Result<bool> {
        match self.backend.head(&id.log_path()) {
            Ok(_) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(Error::Io {
                op: "stat",
                path: self.backend.display(&id.log_path()),
                source,
            }),
        }
    }

    /// Removes a conversation: waits for its writer lock, moves its
    /// directory aside under a name that is not an id (so it is no longer
    /// listed, at once and atomically), syncs, then deletes it. Blobs stay
    /// until gc. An unknown id is [`Error::NotFound`].
    pub fn remove(&self, id: &ConversationId) -> Result<()> {
        if !self.exists(id)? {
            return Err(Error::NotFound { id: id.to_string() });
        }
        let _lock = crate::conversation::writer_lock(&*self.backend, id)?;
        let aside = PathBuf::from(CONVERSATIONS_DIR).join(format!(
            "{}{id}-{}-{}",
            crate::conversation::REMOVED_PREFIX,
            std::process::id(),
            Timestamp::now().subsec_nanos()
        ));
        let io = |op, path: &Path, source| Error::Io {
            op,
            path: self.backend.display(path),
            source,
        };
        // Moved aside first (durably): from then on it is not listed, so a
        // crash during the deletions below leaves no half conversation (gc
        // removes what is left, and may be removing it now).
        self.backend
            .rename(&id.dir(), &aside)
            .map_err(|e| Error::from_backend(&*self.backend, e))?;
        if crate::conversation::clear_locked_dir(
            &*self.backend,
            &aside,
            &aside.join(crate::conversation::LOG_FILE),
        )? {
            return Ok(());
        }
        Err(io(
            "remove",
            &aside,
            std::io::Error::new(
                std::io::ErrorKind::DirectoryNotEmpty,
                "something was created in it while it was removed",
            ),
        ))
    }

    /// Like [`Store::list`], but a conversation that cannot be read does not
    /// hide the others: it is returned with its error.
    pub(crate) fn list_each(
        &self,
    ) -> Result<Vec<std::result::Result<Listing, (ConversationId, Error)>>> {
        Ok(self
            .ids()?
            .into_iter()
            .filter_map(
                |id| match read_state(&*self.backend, &id, self.options.log) {
                    Ok((state, log_bytes)) => Some(Ok(Listing {
                        id,
                        state,
                        log_bytes,
                    })),
                    Err(e) if self.gone_since_listed(&id, &e) => None,
                    Err(e) => Some(Err((id, e))),
                },
            )
            .collect())
    }

    /// Metadata and counts of every conversation.
    pub fn list(&self) -> Result<Vec<Listing>> {
        self.list_each()?
            .into_iter()
            .map(|item| item.map_err(|(_, e)| e))
            .collect()
    }

    /// What jp-store reads of a conversation's config, as commands acting
    /// by config (compaction, deduplication, provider options) read it: the
    /// workspace config as it is now ([`Store::workspace_config`], read once
    /// per open store), with the conversation's own base config merged over
    /// it (format-spec.md 4.5), at its start and after every config delta.
    /// So settings added to `config.toml` later apply to existing
    /// conversations, and a conversation's own settings win.
    ///
    /// Reads and parses the base config once. A setting of the wrong type in
    /// the base config or in a config delta (a config another tool wrote,
    /// imported as it is) is not applied: the settings keep what they held
    /// before it (format-spec.md 4.5).
    pub(crate) fn conversation_settings(
        &self,
        conversation: &Conversation,
    ) -> Result<ConversationSettings> {
        let workspace = &self.workspace_config()?.settings;
        let base = self.base_config(conversation)?;
        Ok(settings_over(workspace, conversation, &base))
    }

    /// What jp-store reads of the config of a conversation
    /// ([`Store::conversation_settings`]), from its base config blob
    /// `base_config` and its config deltas `deltas`, in order. The settings at its start come
    /// from `cache` (a head cache's) when it was made from this
    /// `config.toml` and this base config, or from what this open store
    /// computed before for the same base config
    /// ([`Store::remembered_settings`]): then neither is parsed. Otherwise
    /// they are computed as `conversation_settings` does. When
    /// they did not come from `cache`, the cache to keep for them is
    /// returned too.
    pub(crate) fn settings_cached<'d>(
        &self,
        base_config: Option<BlobRef>,
        deltas: impl IntoIterator<Item = &'d Object>,
        cache: Option<&crate::conversation::head::SettingsCache>,
    ) -> Result<(
        ConversationSettings,
        Option<crate::conversation::head::SettingsCache>,
    )> {
        let digest = self.workspace_digest()?;
        let base_id = base_config.map(|b| b.id);
        let (at_start, fresh) = match cache {
            Some(c) if c.matches(&digest, base_id.as_ref()) => {
                if self.settings_memo.get(base_id.as_ref()).is_none() {
                    self.settings_memo
                        .put(base_id, Arc::new(c.settings.clone()));
                }
                (c.settings.clone(), None)
            }
            _ => {
                let settings = match self.settings_memo.get(base_id.as_ref()) {
                    Some(remembered) => (*remembered).clone(),
                    None => {
                        let mut settings = self.workspace_config()?.settings.clone();
                        let base = self.base_config_blob(base_config)?;
                        // Settings not applied were named when the config
                        // was stored (format-spec.md 4.5).
                        settings.merge_layer_lenient(&base);
                        settings.finish_base();
                        self.settings_memo.put(base_id, Arc::new(settings.clone()));
                        settings
                    }
                };
                let fresh = crate::conversation::head::SettingsCache {
                    workspace: digest,
                    base_config: base_id,
                    version: config::SETTINGS_VERSION,
                    settings: settings.clone(),
                };
                (settings, Some(fresh))
            }
        };
        let end = merge_deltas(at_start.clone(), deltas);
        Ok((
            ConversationSettings {
                base: at_start,
                end,
            },
            fresh,
        ))
    }

    /// The settings this open store computed (or read from a head cache)
    /// for a settings cache's `key`, if it has them: a key of this
    /// `config.toml` and of this build's settings version. A head cache of
    /// that key need not be parsed (format-spec.md 4.6).
    pub(crate) fn remembered_settings(
        &self,
        key: crate::conversation::head::SettingsKey<'_>,
    ) -> Option<Settings> {
        if key.version != config::SETTINGS_VERSION
            || *key.workspace != self.workspace_digest().ok()?
        {
            return None;
        }
        self.settings_memo
            .get(key.base_config)
            .map(|settings| (*settings).clone())
    }

    /// The base config of a conversation (empty if it has none).
    pub(crate) fn base_config(&self, conversation: &Conversation) -> Result<Object> {
        self.base_config_blob(conversation.state.metadata.base_config)
    }

    /// The config in the base config blob `base` (empty if none).
    fn base_config_blob(&self, base: Option<BlobRef>) -> Result<Object> {
        match base {
            None => Ok(Object::new()),
            Some(r) => {
                let bytes = self.blobs.get(&r.id)?;
                Ok(config::parse_config_json(
                    &bytes,
                    &format!("base config blob {}", r.id),
                )?)
            }
        }
    }

    /// The config in effect at entry `index` of `conversation`: its base
    /// with every config delta before `index` merged over it.
    pub(crate) fn config_at(&self, conversation: &Conversation, index: usize) -> Result<Object> {
        let base = self.base_config(conversation)?;
        Ok(config::config_after(
            &base,
            deltas_before(conversation, index),
        ))
    }
}

/// [`Store::conversation_settings`] of a conversation whose base config
/// (`base`) is read already, over the settings of the workspace config.
fn settings_over(
    workspace: &Settings,
    conversation: &Conversation,
    base: &Object,
) -> ConversationSettings {
    let mut settings = workspace.clone();
    settings.merge_layer_lenient(base);
    settings.finish_base();
    let at_start = settings.clone();
    let deltas =
        conversation
            .entries
            .iter()
            .filter_map(|entry| match entry.event().map(|e| &e.kind) {
                Some(EventKind::ConfigDelta(d)) => Some(&d.delta),
                _ => None,
            });
    let end = merge_deltas(settings, deltas);
    ConversationSettings {
        base: at_start,
        end,
    }
}

/// `settings` with the config deltas `deltas` merged over them in order;
/// a setting of the wrong type is not applied (format-spec.md 4.5).
fn merge_deltas<'d>(
    mut settings: Settings,
    deltas: impl IntoIterator<Item = &'d Object>,
) -> Settings {
    for delta in deltas {
        settings.merge_layer_lenient(delta);
    }
    settings
}

/// The config deltas among the first `index` entries of a conversation, in
/// order.
pub fn deltas_before(conversation: &Conversation, index: usize) -> impl Iterator<Item = &Object> {
    conversation.entries[..index.min(conversation.entries.len())]
        .iter()
        .filter_map(|e| match e.event().map(|e| &e.kind) {
            Some(EventKind::ConfigDelta(d)) => Some(&d.delta),
            _ => None,
        })
}

/// Whether a lookup failed because the name is not there: missing, or a
/// plain file where a directory was looked through (a name in
/// `conversations/` that is not a conversation).
fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// The temp name this process publishes `config.toml` from
/// (`config.toml.tmp.<pid>`).
pub(crate) fn config_temp() -> PathBuf {
    // The time too: a process of a later boot (or of another pid
    // namespace) can have the pid of one that left its temp behind.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    PathBuf::from(format!("{CONFIG_FILE}.tmp.{}.{nanos}", std::process::id()))
}

/// Whether `name`, at the store root, is a temp name of `config.toml`
/// ([`config_temp`] of any process: `.tmp.<pid>.<nanos>`, or `.tmp.<pid>`
/// as builds before wrote them).
pub(crate) fn is_config_temp(name: &str) -> bool {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    name.strip_prefix(CONFIG_FILE)
        .and_then(|rest| rest.strip_prefix(".tmp."))
        .is_some_and(|rest| match rest.split_once('.') {
            Some((pid, nanos)) => digits(pid) && digits(nanos),
            None => digits(rest),
        })
}

/// Removes, best effort, what a failed `init` of a root that held no store
/// made there ([`Store::init_or_undo`]): the empty directories of the blob
/// store and `conversations/`, then `config.toml`, only once
/// `conversations/` is gone (a store someone else made meanwhile, with a
/// conversation in it, keeps its config). What cannot be removed stays,
/// and is what a second `init` completes.
pub(crate) fn undo_init(backend: &dyn Backend) {
    use jpstore_blobstore::{OBJECTS_DIR, PACKS_DIR, TMP_DIR};
    let blobs = Path::new(BLOBS_DIR);
    for dir in [TMP_DIR, PACKS_DIR, OBJECTS_DIR] {
        let _ = backend.remove_prefix(&blobs.join(dir));
    }
    let _ = backend.remove_prefix(blobs);
    match backend.remove_prefix(Path::new(CONVERSATIONS_DIR)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return,
    }
    let _ = backend.delete(&[PathBuf::from(CONFIG_FILE)]);
}

/// [`Error::NotEmpty`] for `root`, naming some of `names`, what it holds.
pub(crate) fn not_empty(root: PathBuf, mut names: Vec<String>) -> Error {
    names.sort();
    let shown: Vec<String> = names.iter().take(5).map(|n| format!("{n:?}")).collect();
    let more = match names.len() {
        n if n > 5 => format!(" and {} more", n - 5),
        _ => String::new(),
    };
    Error::NotEmpty {
        path: root,
        found: format!("{}{more}", shown.join(", ")),
    }
}

/// The names at the root of the store in `backend` (shown as `root` in
/// errors), but the temp files of `config.toml` that an `init` or a `copy`
/// stopped before it published the config leaves: a directory holding only
/// those is still new to `init` and `copy` (they are left where they are:
/// the writer of one may still be running).
pub(crate) fn root_names(backend: &dyn Backend, root: &Path) -> Result<Vec<String>> {
    Ok(backend
        .list(Path::new("."))
        .map_err(|source| Error::Io {
            op: "list",
            path: root.to_path_buf(),
            source,
        })?
        .into_iter()
        .filter(|e| !(is_config_temp(&e.name) && matches!(e.entry, ListedEntry::Object(_))))
        .map(|e| e.name)
        .collect())
}

mod settings_memo;

#[cfg(test)]
mod tests;
