//! jp-store's reading of JP's files against JP's own loader (`jp_storage`'s
//! `FsStorageBackend`, `jp_conversation`'s stream and `jp_config`'s merge):
//! what jp-store imports and exports back loads, in JP, equal to the
//! original; and the system prompt jp-store applies is the one JP applies.

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};

use crate::common;

use jp_conversation::{Conversation, ConversationId, ConversationStream};
use jp_storage::backend::{ConversationFilter, FsStorageBackend, LoadBackend};
use jpstore_engine::{Store, StoreOptions};
use serde_json::{json, Value};

/// The fixture workspace of the main workspace's tests.
fn fixture_workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/jp-workspace")
}

/// Every conversation JP finds under `workspace/.jp` (live and archived),
/// as JP loads it: its metadata and its stream, or why not.
type Loaded = Vec<(
    ConversationId,
    Result<Conversation, String>,
    Result<ConversationStream, String>,
)>;

fn jp_load(workspace: &Path) -> Loaded {
    let root = camino::Utf8PathBuf::from_path_buf(workspace.join(".jp")).expect("a UTF-8 path");
    let backend = FsStorageBackend::new(&root).expect("JP's backend");
    let mut out = Vec::new();
    for archived in [false, true] {
        for id in backend.load_conversation_ids(ConversationFilter { archived }) {
            out.push((
                id,
                backend
                    .load_conversation_metadata(&id)
                    .map_err(|e| format!("{e:?}")),
                backend
                    .load_conversation_stream(&id)
                    .map_err(|e| format!("{e:?}")),
            ));
        }
    }
    out.sort_by_key(|(id, ..)| *id);
    out
}

/// A new store holding the JP conversations of `workspace`, imported.
fn imported(dir: &Path, workspace: &Path) -> Store {
    let store = Store::init_dir(&dir.join("store"), StoreOptions::default()).expect("init");
    let report = jpstore_integrations::jp::import::import_paths(
        &store,
        &[workspace.to_path_buf()],
        false,
        &mut |_| {},
    )
    .expect("import");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    store
}

/// Every conversation of `store` written as JP's files into
/// `workspace/.jp/conversations`.
fn exported(store: &Store, workspace: &Path) {
    let conversations = workspace.join(".jp/conversations");
    for id in store.ids().expect("ids") {
        let conv = store.read(&id).expect("read");
        let files = jpstore_integrations::jp::export::jp_files(store, &conv).expect("jp files");
        let dir = files.dir_in(&conversations);
        std::fs::create_dir_all(&dir).expect("mkdir");
        std::fs::write(dir.join("events.json"), &files.events).expect("events");
        std::fs::write(dir.join("metadata.json"), &files.metadata).expect("metadata");
        if let Some(base) = &files.base_config {
            std::fs::write(dir.join("base_config.json"), base).expect("base config");
        }
    }
}

/// `workspace`'s conversations imported into a new store and exported back
/// as JP's files: JP loads each as it loaded the original, or refuses it
/// as it refused it. Returns how many JP loaded.
fn round_trip_loads_the_same(tmp: &Path, workspace: &Path) -> usize {
    let original = jp_load(workspace);
    let store = imported(tmp, workspace);
    let back = tmp.join("back");
    exported(&store, &back);
    let again = jp_load(&back);
    assert_eq!(again.len(), original.len());
    for (before, after) in original.iter().zip(&again) {
        assert_eq!(before.0, after.0);
        match (&before.1, &after.1) {
            (Ok(b), Ok(a)) => assert_eq!(b, a, "metadata of {}", before.0),
            (b, a) => assert_eq!(
                b.is_ok(),
                a.is_ok(),
                "metadata of {}: {b:?} {a:?}",
                before.0
            ),
        }
        match (&before.2, &after.2) {
            (Ok(b), Ok(a)) => assert_eq!(b, a, "stream of {}", before.0),
            (b, a) => assert_eq!(b.is_ok(), a.is_ok(), "stream of {}: {b:?} {a:?}", before.0),
        }
    }
    original.iter().filter(|(_, _, s)| s.is_ok()).count()
}

#[test]
fn conversations_jp_wrote_load_in_jp_equal_after_import_and_export() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let workspace = tmp.path().join("workspace");
    let ids = common::jp_written(&workspace, 12);
    let loaded = round_trip_loads_the_same(tmp.path(), &workspace);
    let failed: Vec<_> = jp_load(&workspace)
        .into_iter()
        .filter_map(|(id, m, s)| (m.is_err() || s.is_err()).then(|| (id, m.err(), s.err())))
        .collect();
    // JP's file backend loads the metadata of an archived conversation,
    // not its stream (it looks for streams in the live partition only).
    assert_eq!(loaded, ids.len() - 1, "JP loads what it wrote: {failed:?}");
}

#[test]
fn a_conversation_read_from_the_store_is_what_jp_loads_from_its_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let workspace = tmp.path().join("workspace");
    common::jp_written(&workspace, 12);
    let jp = jp_load(&workspace);
    let store = imported(tmp.path(), &workspace);
    let mut streams = 0;
    for (id, metadata, stream) in &jp {
        let ours = jpstore_jp::load::metadata(&store, id).map_err(|e| e.to_string());
        assert_eq!(ours, metadata.clone(), "metadata of {id}");
        if let Ok(stream) = stream {
            let ours = jpstore_jp::load::stream(&store, id).expect("the stream");
            assert_eq!(&ours, stream, "stream of {id}");
            streams += 1;
        }
    }
    assert_eq!(streams, jp.len() - 1, "every stream but the archived one's");
}

#[test]
fn fixture_conversations_load_in_jp_as_before_the_round_trip() {
    // Most fixtures are refused by this JP (their base configs lack what
    // it requires), and must stay refused, never become something else.
    let tmp = tempfile::tempdir().expect("tempdir");
    round_trip_loads_the_same(tmp.path(), &fixture_workspace());
}

/// `text` (a JP file) with a `source` given to the tools the fixtures
/// configure, which this JP requires: the same text otherwise, so that JP
/// loads the fixture conversations in their layouts and hand edits.
fn with_tool_sources(text: &str) -> String {
    let mut text = text.to_owned();
    for tool in ["\"fs_read_file\"", "\"cargo_check\""] {
        let mut out = String::new();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(tool) {
            let after = &rest[at + tool.len()..];
            let value = after
                .trim_start()
                .strip_prefix(':')
                .map(str::trim_start)
                .filter(|v| v.starts_with('{'));
            let end = match value {
                // Inside the tool's object: its source first.
                Some(v) => rest.len() - v.len() + 1,
                None => at + tool.len(),
            };
            out.push_str(&rest[..end]);
            if value.is_some() {
                out.push_str("\"source\": \"builtin\", ");
            }
            rest = &rest[end..];
        }
        out.push_str(rest);
        text = out;
    }
    text
}

/// A copy of directory `from` at `to`, its JP files [`with_tool_sources`].
fn copy_with_tool_sources(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("list") {
        let path = entry.expect("entry").path();
        let target = to.join(path.file_name().expect("a name"));
        if path.is_dir() {
            copy_with_tool_sources(&path, &target);
            continue;
        }
        let bytes = std::fs::read(&path).expect("read");
        let bytes = match path.file_name().and_then(|n| n.to_str()) {
            Some("events.json" | "base_config.json") => {
                with_tool_sources(std::str::from_utf8(&bytes).expect("UTF-8")).into_bytes()
            }
            _ => bytes,
        };
        std::fs::write(&target, bytes).expect("write");
    }
}

#[test]
fn odd_conversations_load_from_the_store_as_jp_loads_their_files_and_take_a_turn() {
    // The fixtures' layouts (the base config as the first config delta,
    // config deltas, unknown fields, raw leaves) and hand edits (number
    // forms, escapes, RFC 3339 times, indentation, CRLF, one line), made
    // loadable by this JP.
    let tmp = tempfile::tempdir().expect("tempdir");
    let workspace = tmp.path().join("workspace");
    copy_with_tool_sources(&fixture_workspace().join(".jp"), &workspace.join(".jp"));
    let jp = jp_load(&workspace);
    let loaded = jp.iter().filter(|(_, _, s)| s.is_ok()).count();
    assert!(
        loaded >= 20,
        "JP loads most of them: {loaded} of {}",
        jp.len()
    );
    let store = imported(tmp.path(), &workspace);
    let location = tmp.path().join("store");
    let location = location.to_str().expect("UTF-8");
    let backend = jpstore_jp::JpStoreBackend::with_store(store, location);
    for (id, metadata, stream) in &jp {
        let ours = backend.load_conversation_stream(id);
        match (stream, &ours) {
            (Ok(jp), Ok(ours)) => assert_eq!(ours, jp, "stream of {id}"),
            (jp, ours) => assert_eq!(
                jp.is_ok(),
                ours.is_ok(),
                "{id}: JP {jp:?}, the store {ours:?}"
            ),
        }
        // One more turn, persisted, comes back.
        let (Ok(mut stream), Ok(metadata)) = (stream.clone(), metadata.clone()) else {
            continue;
        };
        common::add_turn(&mut stream, 99, "more");
        jp_storage::backend::PersistBackend::write(
            &backend,
            id,
            &metadata,
            &stream,
            jp_storage::backend::Projection::LocalOnly,
        )
        .expect("a write");
        let again = jpstore_jp::JpStoreBackend::open(location)
            .expect("open")
            .load_conversation_stream(id)
            .expect("loads");
        assert_eq!(again, stream, "{id} with one more turn");
    }
}

// ----- the system prompt ---------------------------------------------------

/// What JP needs of a base config besides the prompt.
fn base_config(prompt: Option<&Value>) -> Value {
    let mut base = json!({
        "conversation": {"tools": {"*": {"run": "ask"}}},
        "assistant": {"model": {"id": {"provider": "anthropic", "name": "claude"}}}
    });
    if let Some(p) = prompt {
        base["assistant"]["system_prompt"] = p.clone();
    }
    base
}

/// The prompts layers are made of: strings and tables of every strategy,
/// separator and `discard_when_merged`, and a table without a strategy.
fn prompts() -> Vec<Value> {
    vec![
        json!("plain"),
        json!({"value": "app", "strategy": "append", "separator": "paragraph"}),
        json!({"value": "pre", "strategy": "prepend", "separator": "line"}),
        json!({"value": "rep", "strategy": "replace", "separator": "space"}),
        json!({"value": "sp", "strategy": "append", "separator": "space"}),
        json!({"value": "none", "strategy": "prepend", "separator": "none"}),
        json!({"value": "dflt", "discard_when_merged": true}),
        json!({"value": "bare"}),
        json!({"strategy": "append"}),
    ]
}

/// Writes a JP conversation of the legacy layout (the base config as the
/// first `config_delta`, as in the workspaces of older JP) or of the
/// current one, with `deltas` setting the prompt after its first turn.
fn write_conversation(
    conversations: &Path,
    id: u64,
    legacy: bool,
    base: Option<&Value>,
    deltas: &[Value],
) {
    let dir = conversations.join(format!("{id}-prompts"));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let mut events = Vec::new();
    if legacy {
        events.push(
            json!({"type": "config_delta", "timestamp": "2026-05-29 10:00:00.0",
            "delta": base_config(base)}),
        );
    } else {
        std::fs::write(dir.join("base_config.json"), base_config(base).to_string())
            .expect("base config");
    }
    events.push(json!({"type": "turn_start", "timestamp": "2026-05-29 10:00:00.1"}));
    events.push(
        json!({"type": "chat_request", "timestamp": "2026-05-29 10:00:00.2",
        "content": "hi"}),
    );
    for (i, d) in deltas.iter().enumerate() {
        events.push(json!({"type": "config_delta",
            "timestamp": format!("2026-05-29 10:00:0{}.5", i + 1),
            "delta": {"assistant": {"system_prompt": d}}}));
    }
    std::fs::write(
        dir.join("events.json"),
        serde_json::to_string_pretty(&Value::Array(events)).expect("json"),
    )
    .expect("events");
    std::fs::write(
        dir.join("metadata.json"),
        json!({"last_activated_at": "2026-05-29 10:00:00.2"}).to_string(),
    )
    .expect("metadata");
}

#[test]
fn the_system_prompt_is_the_one_jp_applies() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let workspace = tmp.path().join("workspace");
    let conversations = workspace.join(".jp/conversations");
    let prompts = prompts();
    let mut cases = Vec::new();
    let mut id = 17_738_400_000u64;
    for legacy in [true, false] {
        // A base config without a prompt gets JP's default prompt, which
        // is JP's, not the conversation's: jp-store's defaults are its own.
        for base in prompts.iter().map(Some) {
            let mut sequences: Vec<Vec<Value>> = vec![Vec::new()];
            for a in &prompts {
                sequences.push(vec![a.clone()]);
                for b in &prompts {
                    sequences.push(vec![a.clone(), b.clone()]);
                }
            }
            for deltas in sequences {
                write_conversation(&conversations, id, legacy, base, &deltas);
                cases.push((id, legacy, base.cloned(), deltas));
                id += 1;
            }
        }
    }
    let jp = jp_load(&workspace);
    assert_eq!(jp.len(), cases.len(), "JP finds every conversation");
    let store = imported(tmp.path(), &workspace);
    let mut compared = 0;
    for ((jp_id, _, stream), (id, legacy, base, deltas)) in jp.iter().zip(&cases) {
        assert_eq!(jp_id.to_string(), format!("jp-c{id}"));
        let stream = stream
            .as_ref()
            .unwrap_or_else(|e| panic!("JP loads {id}: {e}"));
        let jp_prompt = stream
            .config()
            .expect("JP's merged config")
            .assistant
            .system_prompt;
        let conv = store
            .read(
                &jpstore_engine::conversation::ConversationId::parse(&id.to_string()).expect("id"),
            )
            .expect("read");
        let ours = store
            .conversation_settings(&conv)
            .expect("settings")
            .end
            .assistant
            .system_prompt;
        // JP's finished config holds an empty text where the merge left
        // none; jp-store holds none.
        let blank = |p: &Option<String>| p.as_deref().filter(|s| !s.is_empty()).map(str::to_owned);
        assert_eq!(
            blank(&ours),
            blank(&jp_prompt),
            "conversation {id} (legacy: {legacy}): base {base:?}, deltas {}",
            Value::Array(deltas.clone())
        );
        compared += 1;
    }
    assert_eq!(compared, cases.len());
}
