//! How often an operation reads the workspace config and a base config:
//! every open of the storage counted by path.

use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use jpstore_blobstore::backend::FileBackend;
use jpstore_blobstore::storage::{
    DirEntry, FileId, Mapping, Metadata, OpenMode, SimStorage, Storage, StorageFile,
};
use serde_json::json;

use crate::compaction::{no_summarizer, Bound, CompactRequest};
use crate::conversation::ConversationId;
use crate::event::input::parse_input;
use crate::event::json::ParseMode;
use crate::event::Object;
use crate::timestamp::Timestamp;
use crate::{NewConversation, Store, StoreOptions};

/// A storage that counts the opens of every path, and names every change
/// made through it (an open for writing, a link, a rename, a removal, a
/// directory made).
#[derive(Debug)]
struct CountingStorage {
    inner: Arc<dyn Storage>,
    opens: Mutex<HashMap<PathBuf, u64>>,
    writes: Mutex<Vec<String>>,
}

impl CountingStorage {
    fn opens_of(&self, pred: impl Fn(&Path) -> bool) -> u64 {
        self.opens
            .lock()
            .expect("lock")
            .iter()
            .filter(|(p, _)| pred(p))
            .map(|(_, n)| n)
            .sum()
    }
    fn reset(&self) {
        self.opens.lock().expect("lock").clear();
        self.writes.lock().expect("lock").clear();
    }
    fn wrote(&self, what: &str, path: &Path) {
        self.writes
            .lock()
            .expect("lock")
            .push(format!("{what} {}", path.display()));
    }
    /// The changes made since the last [`Self::reset`].
    fn writes(&self) -> Vec<String> {
        self.writes.lock().expect("lock").clone()
    }
}

impl Storage for CountingStorage {
    fn display_path(&self, path: &Path) -> PathBuf {
        self.inner.display_path(path)
    }
    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        self.wrote("mkdir", path);
        self.inner.create_dir_all(path)
    }
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<Box<dyn StorageFile>> {
        if mode.writable() {
            self.wrote("open to write", path);
        }
        *self
            .opens
            .lock()
            .expect("lock")
            .entry(path.to_path_buf())
            .or_default() += 1;
        self.inner.open(path, mode)
    }
    fn metadata(&self, path: &Path) -> io::Result<Metadata> {
        self.inner.metadata(path)
    }
    fn file_id(&self, path: &Path) -> io::Result<FileId> {
        self.inner.file_id(path)
    }
    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner.read_dir(path)
    }
    fn link_noreplace(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.wrote("link", to);
        self.inner.link_noreplace(from, to)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.wrote("rename", to);
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.wrote("remove", path);
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> io::Result<()> {
        self.wrote("rmdir", path);
        self.inner.remove_dir(path)
    }
    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }
    fn map(&self, path: &Path) -> io::Result<Mapping> {
        self.inner.map(path)
    }
}

fn object(v: serde_json::Value) -> Object {
    match v {
        serde_json::Value::Object(o) => o,
        other => panic!("not an object: {other}"),
    }
}

fn turns(n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"q{i} {}\"}}\n\
                 {{\"type\":\"chat_response\",\"message\":\"a{i}\"}}\n",
                "x".repeat(400)
            )
        })
        .collect()
}

/// A store on a [`CountingStorage`] over a [`SimStorage`], with three
/// conversations of four turns whose base config asks for automatic
/// compaction.
fn counted_store() -> (Arc<CountingStorage>, Store, Vec<ConversationId>) {
    let counting = Arc::new(CountingStorage {
        inner: Arc::new(SimStorage::new()),
        opens: Mutex::new(HashMap::new()),
        writes: Mutex::new(Vec::new()),
    });
    let store = Store::init(
        FileBackend::shared(counting.clone()),
        StoreOptions::default(),
    )
    .expect("init");
    let base = object(json!({"conversation": {"compaction": {"keep_last": 1,
        "auto": {"enabled": true, "context_window": 100, "min_turns": 1}}}}));
    let mut ids = Vec::new();
    for name in ["a", "b", "c"] {
        let id = ConversationId::parse(name).expect("id");
        let mut w = store
            .create(NewConversation {
                id: Some(id.clone()),
                base_config: Some(base.clone()),
                ..Default::default()
            })
            .expect("create");
        let batch = parse_input(&turns(4), ParseMode::Strict { now: now() }).expect("input");
        w.append(batch.entries).expect("append");
        ids.push(id);
    }
    (counting, store, ids)
}

/// Another open of the store on `counting` (its own memory).
fn reopen(counting: &Arc<CountingStorage>) -> Store {
    Store::open(
        FileBackend::shared(counting.clone()),
        StoreOptions::default(),
    )
    .expect("open")
}

fn now() -> Timestamp {
    Timestamp::from_unix(1_780_000_000, 0).expect("time")
}

fn is_config_toml(path: &Path) -> bool {
    path == Path::new("config.toml")
}

/// Writes `text` as the store's `config.toml`.
fn write_config_toml(storage: &dyn Storage, text: &str) {
    let file = storage
        .open(Path::new("config.toml"), OpenMode::CreateOrOpen)
        .expect("open config.toml");
    file.set_len(0).expect("truncate");
    jpstore_blobstore::storage::write_all_at(&*file, text.as_bytes(), 0).expect("write");
}

/// An append whose entries hold no content does not look at the blob
/// store, so it takes no gc lock (format-spec.md 4.7); one with content
/// takes it once.
#[test]
fn only_an_append_with_content_takes_the_gc_lock() {
    let (counting, store, ids) = counted_store();
    let is_gc_lock = |p: &Path| p == Path::new("gc.lock");
    let mut w = store.writer(&ids[0]).expect("writer");
    counting.reset();
    let text = "{\"type\":\"turn_start\"}\n{\"type\":\"chat_request\",\"content\":\"q\"}\n\
                {\"type\":\"chat_response\",\"message\":\"a\"}\n\
                {\"type\":\"tool_call_request\",\"id\":\"c\",\"name\":\"t\",\"arguments\":{}}";
    let plain = parse_input(text, ParseMode::Strict { now: now() }).expect("input");
    w.append(plain.entries).expect("append");
    assert_eq!(counting.opens_of(is_gc_lock), 0, "no content, no gc lock");
    let response = "{\"type\":\"tool_call_response\",\"id\":\"c\",\"content\":\"out\"}";
    let with_content = parse_input(response, ParseMode::Strict { now: now() }).expect("input");
    w.append(with_content.entries).expect("append");
    assert_eq!(counting.opens_of(is_gc_lock), 1, "content: the lock, once");
    drop(w);
    // Both read back.
    let conv = store.read(&ids[0]).expect("read");
    assert_eq!(conv.entries.len(), 12 + 4 + 1);
}

#[test]
fn the_workspace_config_is_read_once_per_open_and_a_base_config_once_per_operation() {
    let (counting, _, ids) = counted_store();
    let store = reopen(&counting);
    let base_blob = store
        .read(&ids[0])
        .expect("read")
        .state
        .metadata
        .base_config
        .expect("a base config")
        .id
        .to_string();
    // Loose objects are named by their id's hex split after two digits.
    let is_base_blob = |p: &Path| {
        p.starts_with("blobs") && p.to_string_lossy().replace('/', "").ends_with(&base_blob)
    };
    let opens = |f: &mut dyn FnMut()| {
        counting.reset();
        f();
        (
            counting.opens_of(is_config_toml),
            counting.opens_of(is_base_blob),
        )
    };
    let mut toml_reads = 0;
    // (what, config.toml opens, base config opens)
    let mut seen = Vec::new();
    let mut step = |what: &'static str, f: &mut dyn FnMut()| {
        let (toml, base) = opens(f);
        toml_reads += toml;
        seen.push((what, base));
    };
    step("view", &mut || {
        let conv = store.read(&ids[0]).expect("read");
        crate::export::into_view(&store, conv).expect("view");
    });
    step("compact", &mut || {
        let req = CompactRequest {
            to: Some(Bound::FromEnd(1)),
            dry_run: true,
            ..Default::default()
        };
        store
            .compact(&ids[0], &req, now(), &mut no_summarizer)
            .expect("compact");
    });
    step("fork --compact", &mut || {
        let req = CompactRequest::default();
        store
            .fork_compacted(&ids[0], None, None, now(), Some((&req, &mut no_summarizer)))
            .expect("fork");
    });
    step("stats of three conversations", &mut || {
        store.stats(&ids).expect("stats");
    });
    step("append with an automatic compaction", &mut || {
        let batch = parse_input(&turns(1), ParseMode::Strict { now: now() }).expect("input");
        let report = store
            .append_turn(
                &ids[1],
                batch.entries,
                now(),
                &mut |_| {},
                &mut no_summarizer,
            )
            .expect("append");
        assert!(
            matches!(report.auto_compaction, crate::AutoCompaction::Made(_)),
            "{:?}",
            report.auto_compaction
        );
    });
    step("new", &mut || {
        store.create(NewConversation::default()).expect("new");
    });
    assert_eq!(toml_reads, 1, "config.toml is read once per open store");
    assert_eq!(
        seen,
        [
            // A decoded conversation's settings, computed from its configs.
            ("view", 1),
            // A conversation handle's settings: from the head cache, made
            // when the conversation was (no config parsed).
            ("compact", 0),
            ("fork --compact", 1),
            // One read for each conversation's view; the size of the one
            // blob they share is looked up once more for the totals.
            ("stats of three conversations", 4),
            // Decided and made in one handle, from the head cache (it read
            // the base config twice, before the handle: to decide, then
            // under the writer lock to make it).
            ("append with an automatic compaction", 0),
            ("new", 0),
        ]
    );

    // The store opened next reads the file again, as it is then.
    write_config_toml(
        &*counting.inner,
        "[conversation.deduplication]\nmin_bytes = 7\n",
    );
    let (toml, _) = opens(&mut || {
        let settings = store.workspace_config().expect("config").settings.clone();
        assert_eq!(settings.conversation.deduplication.min_bytes, None);
    });
    assert_eq!(toml, 0, "an open store keeps what it read");
    let reopened = reopen(&counting);
    let (toml, _) = opens(&mut || {
        for _ in 0..3 {
            let config = reopened.workspace_config().expect("config");
            assert_eq!(
                config.settings.conversation.deduplication.min_bytes,
                Some(7)
            );
        }
    });
    assert_eq!(toml, 1);
}

#[test]
fn a_workspace_config_that_fails_to_read_is_read_again() {
    let (counting, _, ids) = counted_store();
    write_config_toml(
        &*counting.inner,
        "[conversation.deduplication]\nmin_bytes = \"big\"\n",
    );
    let store = reopen(&counting);
    let conv = store.read(&ids[0]).expect("read");
    let err = crate::export::view(&store, &conv).expect_err("a bad setting");
    assert_eq!(
        err.to_string(),
        format!(
            "{}:2: setting `conversation.deduplication.min_bytes` must be an integer >= 0, found a string (\"big\")",
            counting.display_path(Path::new("config.toml")).display()
        )
    );
    write_config_toml(
        &*counting.inner,
        "[conversation.deduplication]\nmin_bytes = 5\n",
    );
    assert_eq!(
        store
            .workspace_config()
            .expect("fixed")
            .settings
            .conversation
            .deduplication
            .min_bytes,
        Some(5)
    );
}

#[test]
fn a_view_uses_the_cached_settings_until_config_toml_the_base_config_or_the_version_changes() {
    let (counting, store, ids) = counted_store();
    let id = &ids[0];
    let base_blob = |store: &Store| {
        store
            .read(id)
            .expect("read")
            .state
            .metadata
            .base_config
            .expect("a base config")
            .id
            .to_string()
    };
    let blob = base_blob(&store);
    let is_base = move |p: &Path| {
        p.starts_with("blobs") && p.to_string_lossy().replace('/', "").ends_with(&blob)
    };
    // (config.toml opens, base config opens) of a view by a fresh store.
    let view = |settle: &dyn Fn(&Store)| {
        let store = reopen(&counting);
        counting.reset();
        let v = store.open_view(id).expect("view");
        let settings = v.settings().clone();
        v.render(crate::export::ContentMode::Refs).expect("render");
        let opens = (
            counting.opens_of(is_config_toml),
            counting.opens_of(&is_base),
        );
        settle(&store);
        // What is cached is what is computed.
        let conv = store.read(id).expect("read");
        assert_eq!(
            settings,
            store.conversation_settings(&conv).expect("settings"),
            "cached settings"
        );
        opens
    };
    // The creation cached the settings at the start in the head: a view
    // parses neither config.toml nor the base config (the file is read
    // once, for its hash).
    assert!(crate::conversation::head::load(&**store.backend(), id)
        .and_then(|h| h.settings)
        .is_some());
    assert_eq!(view(&|_| {}), (1, 0));
    assert_eq!(view(&|_| {}), (1, 0));

    // A config delta is merged from the log: the cache stays valid.
    let mut w = store.writer(id).expect("writer");
    let delta = parse_input(
        r#"{"type":"config_delta","delta":{"assistant":{"system_prompt":"be brief"}}}"#,
        ParseMode::Strict { now: now() },
    )
    .expect("input");
    w.append(delta.entries).expect("append a delta");
    w.close();
    assert_eq!(
        view(&|s| {
            let v = s.open_view(id).expect("view");
            assert_eq!(
                v.settings().end.assistant.system_prompt.as_deref(),
                Some("be brief")
            );
        }),
        (1, 0)
    );

    // config.toml changes: the cache is not used, and a view, which
    // writes nothing, computes the settings each time.
    let cached = crate::conversation::head::load(&**store.backend(), id).expect("head");
    write_config_toml(
        &*counting.inner,
        "[conversation.deduplication]\nmin_bytes = 7\n",
    );
    assert_eq!(view(&|_| {}), (1, 1));
    assert_eq!(view(&|_| {}), (1, 1));
    assert_eq!(
        crate::conversation::head::load(&**store.backend(), id),
        Some(cached),
        "the head as it was"
    );

    // A new base config: its settings computed (the new blob read).
    let new_base = store
        .put_config(&object(
            json!({"conversation": {"deduplication": {"enabled": false}}}),
        ))
        .expect("put");
    let mut w = store.writer(id).expect("writer");
    w.set_metadata(crate::conversation::meta::MetaPatch {
        base_config: Some(new_base),
        fields: Object::new(),
    })
    .expect("new base config");
    w.close();
    let is_new = move |p: &Path| {
        p.starts_with("blobs")
            && p.to_string_lossy()
                .replace('/', "")
                .ends_with(&new_base.id.to_string())
    };
    // A view by `store`: the new base config's settings, and the reads of
    // its blob.
    let view = |store: &Store| {
        counting.reset();
        let v = store.open_view(id).expect("view");
        assert_eq!(
            v.settings().base.conversation.deduplication.enabled,
            Some(false)
        );
        (v.settings().base.clone(), counting.opens_of(is_new))
    };
    let fresh = reopen(&counting);
    assert_eq!(view(&fresh).1, 1);
    // The store that computed them remembers them.
    assert_eq!(view(&fresh).1, 0, "remembered by the store");
    assert_eq!(view(&reopen(&counting)).1, 1, "another store computes them");

    // A cache of another settings version is not used (its settings are
    // not the ones computed).
    let mut head = crate::conversation::head::load(&**store.backend(), id).expect("head");
    let workspace = reopen(&counting).workspace_digest().expect("digest");
    head.settings = Some(crate::conversation::head::SettingsCache {
        workspace,
        base_config: Some(new_base.id),
        version: crate::config::SETTINGS_VERSION + 1,
        settings: crate::config::Settings::default(),
    });
    crate::conversation::head::store(&**store.backend(), id, &head);
    let other = reopen(&counting);
    assert_eq!(view(&other).1, 1, "another version is computed again");
}

#[test]
fn an_open_store_takes_the_settings_it_computed_for_a_base_config_from_memory() {
    let (counting, store, ids) = counted_store();
    // The three conversations share one base config, and their heads cache
    // settings made from another config.toml: the first view computes the
    // settings, the others take them from memory, and so does a head cache
    // of the same key (not parsed: its settings replaced by other ones are
    // not seen).
    drop(store);
    write_config_toml(&*counting.inner, "[assistant]\nsystem_prompt = \"hi\"\n");
    let store = reopen(&counting);
    let reference = store
        .conversation_settings(&store.read(&ids[0]).expect("read"))
        .expect("settings");
    let fresh = reopen(&counting);
    counting.reset();
    for id in &ids {
        let v = fresh.open_view(id).expect("view");
        assert_eq!(v.settings().base, reference.base);
    }
    let blob_opens = counting.opens_of(|p| p.starts_with("blobs/objects"));
    assert_eq!(blob_opens, 1, "the base config is read once");
    let mut head = crate::conversation::head::load(&**store.backend(), &ids[1]).expect("head");
    let mut settings = reference.base.clone();
    settings.assistant.system_prompt = Some("not what the store computed".into());
    head.settings = Some(crate::conversation::head::SettingsCache {
        workspace: store.workspace_digest().expect("digest"),
        base_config: head.state.metadata.base_config.map(|b| b.id),
        version: crate::config::SETTINGS_VERSION,
        settings,
    });
    crate::conversation::head::store(&**store.backend(), &ids[1], &head);
    let v = fresh.open_view(&ids[1]).expect("view");
    assert_eq!(v.settings().base, reference.base, "from memory");
    // Another open store has not computed them: it reads the head's.
    let other = reopen(&counting);
    let v = other.open_view(&ids[1]).expect("view");
    assert_eq!(
        v.settings().base.assistant.system_prompt.as_deref(),
        Some("not what the store computed"),
        "from the head cache"
    );
    // Which it then remembers for another conversation of that base config
    // (a head cache is trusted for its key: format-spec.md 4.6).
    let v = other.open_view(&ids[2]).expect("view");
    assert_eq!(
        v.settings().base.assistant.system_prompt.as_deref(),
        Some("not what the store computed")
    );
}

/// A directory that is no store is said to be none, without naming a
/// command: how to make one is the caller's to say (the command line adds
/// `jp-store init`; a library calls `Store::init_dir`).
#[test]
fn a_directory_that_is_no_store_is_refused_without_naming_a_command() {
    let dir = tempfile::tempdir().expect("tempdir");
    for root in [dir.path().join("missing"), dir.path().to_path_buf()] {
        let err = Store::open_dir(&root, StoreOptions::default()).expect_err("no store");
        assert!(
            matches!(err, crate::error::Error::NotAStore { .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("is not a jp-store store"), "{text}");
        assert!(!text.contains("jp-store init"), "{text}");
    }
}

/// Reads write nothing (format-spec.md 4.6): a view whose settings are not
/// in the head cache (`config.toml` changed since it was written) computes
/// them and leaves the head as it is (it wrote it back: on S3 a PUT), and
/// a listing that folds records past the head (a writer that never
/// closed) leaves it behind (it synced the log and wrote a head).
#[test]
fn a_view_and_a_listing_write_nothing() {
    let (counting, store, ids) = counted_store();
    drop(store);
    write_config_toml(
        &*counting.inner,
        "[assistant]\nsystem_prompt = \"answer in haiku\"\n",
    );
    let store = reopen(&counting);
    // A writer that appends and never closes: the head stays behind.
    append_turn(&store, &ids[1], false);
    for round in 0..2 {
        counting.reset();
        let store = reopen(&counting);
        let view = store.open_view(&ids[0]).expect("view");
        assert_eq!(
            view.settings().end.assistant.system_prompt.as_deref(),
            Some("answer in haiku")
        );
        view.render(crate::export::ContentMode::Refs)
            .expect("render");
        let listed = store.list().expect("list");
        assert_eq!(listed[1].state.turns.turns(), 5, "the tail is folded");
        assert_eq!(counting.writes(), Vec::<String>::new(), "round {round}");
    }
}

/// Appends a turn to `id`; the writer closed (the head made current) or
/// dropped (the head left behind the log).
fn append_turn(store: &Store, id: &ConversationId, close: bool) {
    let mut w = store.writer(id).expect("writer");
    w.append(
        parse_input(&turns(1), ParseMode::Strict { now: now() })
            .expect("input")
            .entries,
    )
    .expect("append");
    if close {
        w.close();
    }
}

/// A listing reads each conversation's head once and its log once (the
/// head judged against the log as evidence and as the cache from one read;
/// a short log's framing checked and its tail folded from one read of it),
/// whether the head covers the log or a writer appended past it. It opened
/// the head twice, and the log twice when the head was behind.
#[test]
fn a_listing_opens_each_head_and_each_log_once() {
    let (counting, store, ids) = counted_store();
    // A writer that appends and never closes: the head stays behind.
    append_turn(&store, &ids[1], false);
    append_turn(&store, &ids[2], true);
    counting.reset();
    let listed = store.list().expect("list");
    let turns: Vec<u64> = listed.iter().map(|l| l.state.turns.turns()).collect();
    assert_eq!(turns, [4, 5, 5]);
    for id in &ids {
        assert_eq!(counting.opens_of(|p| p == id.log_path()), 1, "{id}: log");
        assert_eq!(
            counting.opens_of(|p| p == crate::conversation::head::head_path(id)),
            1,
            "{id}: head"
        );
    }
}

/// A turn-ending append decides on the automatic compaction from the state
/// and settings in memory: with it off (the default), the log is opened
/// once (the writer's own open) and no config parsed (the head caches the
/// settings at the start; the config delta comes from its record, read
/// through that open). It opened and decoded the whole log again, and
/// parsed the base config, to learn that automatic compaction was off.
#[test]
fn a_turn_ending_append_opens_the_log_once_and_parses_no_config() {
    let (counting, store, _) = counted_store();
    let id = ConversationId::parse("plain").expect("id");
    let mut conversation = store
        .create(NewConversation {
            id: Some(id.clone()),
            ..Default::default()
        })
        .expect("create");
    let text = format!(
        "{}{{\"type\":\"config_delta\",\"delta\":{{\"assistant\":{{\"system_prompt\":\"hi\"}}}}}}\n{}",
        turns(3),
        turns(2)
    );
    conversation
        .append(
            parse_input(&text, ParseMode::Strict { now: now() })
                .expect("input")
                .entries,
        )
        .expect("append");
    conversation.close();
    let is_log = |p: &Path| p == id.log_path();
    let base = store
        .read(&id)
        .expect("read")
        .state
        .metadata
        .base_config
        .expect("a base config")
        .id
        .to_string();
    let is_base =
        |p: &Path| p.starts_with("blobs") && p.to_string_lossy().replace('/', "").ends_with(&base);
    for round in 0..2 {
        let store = reopen(&counting);
        counting.reset();
        let batch = parse_input(&turns(1), ParseMode::Strict { now: now() }).expect("input");
        let report = store
            .append_turn(&id, batch.entries, now(), &mut |_| {}, &mut no_summarizer)
            .expect("append");
        assert!(
            matches!(report.auto_compaction, crate::AutoCompaction::NotDue),
            "{:?}",
            report.auto_compaction
        );
        assert_eq!(
            counting.opens_of(is_log),
            1,
            "round {round}: the writer's open"
        );
        assert_eq!(counting.opens_of(is_base), 0, "round {round}");
    }
    // The settings it decided from: the delta's, from its record.
    let store = reopen(&counting);
    let mut conversation = store.conversation(&id).expect("open");
    let settings = conversation.settings().expect("settings");
    assert_eq!(settings.end.assistant.system_prompt.as_deref(), Some("hi"));
}
