//! Generated conversations in a store, as an agent writes them, and the
//! same conversation as JP keeps it (the baseline).

use jpstore_engine::internal::{ConversationIdInterior as _, StoreInterior as _};
use std::collections::HashSet;
use std::fs::File;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use jpstore_engine::compaction::no_summarizer;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{ChatResponse, Entry, EventKind, Object, Payload};
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::conversation::CONVERSATIONS_DIR;
use jpstore_engine::internal::event::json::{parse_entry, ParseMode};
use jpstore_engine::internal::export::{into_view, render_view};
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{ConversationHandle, NewConversation, Store, StoreOptions};
use serde_json::{json, Value};
use tempfile::TempDir;

use super::unsynced::{open_unsynced, sync_tree, sync_tree_entry};
use crate::floor::{append_file, fdatasync_write};
use crate::timing::{interleaved, Timings};
use crate::workload::conversation::{jp_decode_entry, jp_events_json, START_UNIX};

/// Strict parsing, with "now" at the generated conversations' start.
pub fn parse_mode() -> ParseMode {
    ParseMode::Strict {
        now: Timestamp::from_unix(START_UNIX, 0).expect("a valid time"),
    }
}

/// A generated JSON entry as the engine's entry.
pub fn parse(v: &Value) -> Entry<Payload> {
    parse_entry(v, parse_mode()).expect("generated entries parse")
}

/// The entries grouped into the records an agent writes: a record ends with
/// each user message, tool call, tool response and answer.
pub fn steps(entries: &[Value]) -> Vec<Vec<Entry<Payload>>> {
    let mut out = Vec::new();
    let mut batch = Vec::new();
    for v in entries {
        let e = parse(v);
        let ends = match e.event().map(|e| &e.kind) {
            Some(EventKind::ChatRequest(_))
            | Some(EventKind::ToolCallRequest(_))
            | Some(EventKind::ToolCallResponse(_)) => true,
            Some(EventKind::ChatResponse(r)) => {
                matches!(r, ChatResponse::Message(_))
            }
            _ => false,
        };
        batch.push(e);
        if ends {
            out.push(std::mem::take(&mut batch));
        }
    }
    if !batch.is_empty() {
        out.push(batch);
    }
    out
}

/// Puts the content of every tool response of `entries` as one pack.
pub fn put_contents(store: &Store, entries: &[Value]) {
    let mut seen = HashSet::new();
    let contents: Vec<&str> = entries
        .iter()
        .filter(|e| e["type"] == "tool_call_response")
        .filter_map(|e| e["content"].as_str())
        .filter(|c| seen.insert(*c))
        .collect();
    store
        .blobs()
        .put_batch(
            contents.len(),
            |i| Ok(contents[i].as_bytes().to_vec()),
            &mut |_| {},
        )
        .expect("put the contents");
}

/// Creates conversation `id` holding `entries` (whose content is already in
/// the store, see [`put_contents`]), one record per agent step, and returns
/// its handle.
pub fn build<'s>(store: &'s Store, id: &str, entries: &[Value]) -> ConversationHandle<'s> {
    let mut w = store
        .create(NewConversation {
            id: Some(ConversationId::parse(id).expect("a valid id")),
            title: Some("Fix the flaky test".into()),
            base_config: Some(Object::new()),
            created: Some(Timestamp::from_unix(START_UNIX, 0).expect("a valid time")),
            ..NewConversation::default()
        })
        .expect("create the conversation");
    for batch in steps(entries) {
        let out = w.append(batch).expect("append");
        assert_eq!(out.new_blobs, 0, "content was put beforehand");
    }
    w
}

/// A fresh store below `root` (see [`super::fresh_store`]) holding the
/// conversations `(id, entries)`, each built by [`build`] (content put
/// first, one record per agent step), written without syncs and synced
/// once at the end ([`super::unsynced`]): the same bytes in seconds
/// instead of minutes. Returns the store opened as usual.
pub fn store_with(root: &Path, conversations: &[(&str, &[Value])]) -> (TempDir, Store) {
    let (dir, store) = super::fresh_store(root);
    drop(store);
    let unsynced = open_unsynced(dir.path());
    for (id, entries) in conversations {
        put_contents(&unsynced, entries);
        build(&unsynced, id, entries).close();
    }
    drop(unsynced);
    sync_tree(dir.path());
    let store = Store::open_dir(dir.path(), StoreOptions::default()).expect("open the store");
    (dir, store)
}

/// A chat_response message of about 100 bytes of text: the small event of
/// the append benches.
pub fn small_event() -> Entry<Payload> {
    parse(&json!({
        "type": "chat_response",
        "timestamp": "2026-06-01 10:00:00.5",
        "message": "Done: the test no longer depends on the order of the map; \
                    `cargo test` passes 50 times in a row.",
    }))
}

/// Appends to a short [`Rolling`] conversation before a fresh one replaces
/// it.
pub const ROLL_EVERY: u64 = 100;

/// A short conversation that is replaced by a fresh one (outside the
/// timing) every `reset_every` appends, so it stays short however many
/// appends are measured.
pub struct Rolling<'s> {
    store: &'s Store,
    entries: Vec<Value>,
    name: String,
    reset_every: u64,
    made: u64,
    appended: u64,
    writer: Option<ConversationHandle<'s>>,
    unsynced: Option<PathBuf>,
}

impl<'s> Rolling<'s> {
    /// Conversations `{name}-00001`, ... holding `entries` (content already
    /// in the store).
    pub fn new(
        store: &'s Store,
        name: impl Into<String>,
        entries: Vec<Value>,
        reset_every: u64,
    ) -> Self {
        Rolling {
            store,
            entries,
            name: name.into(),
            reset_every,
            made: 0,
            appended: 0,
            writer: None,
            unsynced: None,
        }
    }

    /// Builds each fresh conversation without syncs (see
    /// [`super::unsynced`]) through another handle on the store, whose
    /// directory is `dir`, then syncs it: for long conversations, whose
    /// build with a sync per record would take minutes.
    pub fn unsynced(mut self, dir: &Path) -> Self {
        self.unsynced = Some(dir.to_path_buf());
        self
    }

    /// The writer to append to next (counts one append).
    pub fn writer(&mut self) -> &mut ConversationHandle<'s> {
        if self.writer.is_none() || self.appended >= self.reset_every {
            if let Some(w) = self.writer.take() {
                w.close();
            }
            self.made += 1;
            self.appended = 0;
            let id = format!("{}-{:05}", self.name, self.made);
            self.writer = Some(match &self.unsynced {
                None => build(self.store, &id, &self.entries),
                Some(dir) => {
                    let unsynced = open_unsynced(dir);
                    build(&unsynced, &id, &self.entries).close();
                    drop(unsynced);
                    let id = ConversationId::parse(&id).expect("a valid id");
                    sync_tree(&dir.join(id.dir()));
                    sync_tree_entry(&dir.join(CONVERSATIONS_DIR));
                    self.store.conversation(&id).expect("open the conversation")
                }
            });
        }
        self.appended += 1;
        self.writer.as_mut().expect("a writer")
    }
}

/// One durable append of `batch` to `writer`: its time.
pub fn timed_append(writer: &mut ConversationHandle<'_>, batch: Vec<Entry<Payload>>) -> Duration {
    let t = Instant::now();
    black_box(writer.append(batch).expect("append"));
    t.elapsed()
}

/// The append comparison: one small event appended durably to a short
/// conversation (a [`Rolling`] one) and to a long one, and the floor, one
/// `fdatasync` of a 150-byte write to a file in the store's directory.
pub struct AppendBench<'s> {
    /// The short conversations.
    pub short: Rolling<'s>,
    /// The long conversation's writer (it grows by every append).
    pub long: ConversationHandle<'s>,
    floor: File,
    event: Entry<Payload>,
}

impl<'s> AppendBench<'s> {
    /// Short conversations of `short` entries (content already in `store`),
    /// `long` the long one's writer, the floor's file in `dir`.
    pub fn new(
        store: &'s Store,
        dir: &Path,
        short: Vec<Value>,
        long: ConversationHandle<'s>,
    ) -> Self {
        AppendBench {
            short: Rolling::new(store, "short", short, ROLL_EVERY),
            long,
            floor: append_file(dir, "fdatasync-floor").expect("the floor's file"),
            event: small_event(),
        }
    }

    /// One append to the short conversation.
    pub fn append_short(&mut self) -> Duration {
        timed_append(self.short.writer(), vec![self.event.clone()])
    }

    /// One append to the long conversation.
    pub fn append_long(&mut self) -> Duration {
        timed_append(&mut self.long, vec![self.event.clone()])
    }

    /// One append to the long conversation of the same event as a turn
    /// (it completes one: the assistant's message), with the automatic
    /// compaction it may call for decided (off: the default), as
    /// `jp-store append` and an agent append a turn.
    pub fn append_long_turn(&mut self) -> Duration {
        let t = Instant::now();
        let report = self
            .long
            .append_turn(vec![self.event.clone()], &mut no_summarizer)
            .expect("append");
        black_box(report);
        t.elapsed()
    }

    /// One floor: a 150-byte write and `fdatasync`.
    pub fn fdatasync(&mut self) -> Duration {
        let t = Instant::now();
        fdatasync_write(&mut self.floor, &[b'x'; 150]).expect("fdatasync");
        t.elapsed()
    }

    /// The four interleaved (see [`interleaved`]): short, long, floor, and
    /// long as a turn.
    pub fn interleaved(
        &mut self,
        min_rounds: usize,
        max_rounds: usize,
        budget: Duration,
    ) -> Timings {
        let short = format!("{} events", self.short.entries.len());
        let long = format!("{} events", self.long.state().entries);
        let this = std::cell::RefCell::new(self);
        interleaved(
            min_rounds,
            max_rounds,
            budget,
            &mut [
                (&short, &mut || this.borrow_mut().append_short()),
                (&long, &mut || this.borrow_mut().append_long()),
                ("fdatasync", &mut || this.borrow_mut().fdatasync()),
                ("turn-ending, long", &mut || {
                    this.borrow_mut().append_long_turn()
                }),
            ],
        )
    }
}

/// Open + `view --refs`, as `jp-store view ID --refs` runs it:
/// `Store::open_view` and `ConversationView::render` in refs mode, as
/// pretty JSON (into memory, where the command writes to stdout). No blob
/// content is read. Returns the JSON, for the caller to drop outside the
/// timing.
pub fn open_and_view_refs(store: &Store, id: &ConversationId) -> Vec<u8> {
    store
        .open_view(id)
        .expect("open the view")
        .render(ContentMode::Refs)
        .expect("render the view")
}

/// Open + `view --format anthropic` as the command runs it: the view
/// opened and the Anthropic request body written as pretty JSON into
/// memory while it is walked (content read from the blob store).
pub fn open_and_view_anthropic(store: &Store, id: &ConversationId) -> Vec<u8> {
    let view = store.open_view(id).expect("open the view");
    let mut json = Vec::new();
    jpstore_integrations::provider::write_provider_request_view(
        store,
        view,
        jpstore_integrations::provider::Provider::Anthropic,
        &mut json,
    )
    .expect("the request body");
    json
}

/// [`open_and_view_refs`] with content as `mode` says (`Inline` reads every
/// content blob, as `jp-store view ID` does).
pub fn open_and_view(
    store: &Store,
    id: &ConversationId,
    mode: ContentMode,
) -> (Vec<Entry<Payload>>, Vec<u8>) {
    let conv = store.read(id).expect("read the conversation");
    let view = into_view(store, conv).expect("the view");
    let mut out = Vec::new();
    {
        let rendered = render_view(store, &view, mode);
        serde_json::to_writer_pretty(&mut out, &rendered).expect("serialize the view");
        if let Some(e) = rendered.take_error() {
            panic!("rendering the view: {e}");
        }
    }
    (view, out)
}

/// Writes `entries` as JP's `events.json` at `path` and syncs it (so no
/// dirty pages are left whose writeback would land on sync figures).
/// Returns its bytes.
pub fn write_jp_events(path: &Path, entries: &[Value]) -> usize {
    let text = jp_events_json(entries);
    std::fs::write(path, &text).expect("write events.json");
    File::open(path)
        .and_then(|f| f.sync_all())
        .expect("sync events.json");
    text.len()
}

/// JP's open: read `events.json`, parse it with serde_json and undo JP's
/// base64 on every entry, as JP does when it loads a conversation
/// ([`jp_decode_entry`]).
pub fn jp_parse(path: &Path) -> Vec<Value> {
    let bytes = std::fs::read(path).expect("read events.json");
    let mut entries: Vec<Value> = serde_json::from_slice(&bytes).expect("parse events.json");
    entries.iter_mut().for_each(jp_decode_entry);
    entries
}
