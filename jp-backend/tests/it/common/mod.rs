//! JP conversations made by JP's own code: streams built with
//! `jp_conversation`'s API, written by `jp_storage`'s `FsStorageBackend`.

use jpstore_engine::internal::StoreInterior as _;
use std::path::Path;

use jp_config::PartialAppConfig;
use jp_conversation::event::{ChatRequest, ChatResponse, ToolCallRequest, ToolCallResponse};
use jp_conversation::{
    Compaction, Conversation, ConversationEvent, ConversationId, ConversationStream,
};
use jp_storage::backend::{FsStorageBackend, PersistBackend, Projection};
use serde_json::{json, Map, Value};

/// A JP config delta from its JSON.
pub fn delta(value: Value) -> PartialAppConfig {
    serde_json::from_value(value).expect("a partial config JP reads")
}

/// The id JP gives a conversation created `n` deciseconds after a fixed
/// time.
pub fn id(n: i64) -> ConversationId {
    ConversationId::try_from_deciseconds(17_738_400_000 + n).expect("an id")
}

/// Adds turn `t` (see [`stream`]) to `s`.
pub fn add_turn(s: &mut ConversationStream, t: usize, salt: &str) {
    s.start_turn(ChatRequest {
        content: format!(
            "{salt}: question {t}, with \"quotes\" and ünïcode {}",
            "words ".repeat(200)
        ),
        schema: None,
        author: (t % 2 == 0).then(|| "ana".to_owned()),
    });
    let mut args = Map::new();
    args.insert("path".into(), json!(format!("src/file{t}.rs")));
    args.insert("start_line".into(), json!(1));
    let call = format!("toolu_{salt}_{t}");
    s.current_turn_mut()
        .add_event(
            ConversationEvent::now(ChatResponse::reasoning(format!("thinking about {t}")))
                .with_metadata_field("anthropic_thinking_signature", "c2lnbmF0dXJl"),
        )
        .add_tool_call_request(ToolCallRequest::new(
            call.clone(),
            "fs_read_file".into(),
            args,
        ))
        .add_tool_call_response(ToolCallResponse {
            id: call,
            result: if t % 3 == 2 {
                Err("no such file".to_owned())
            } else {
                Ok(format!("fn main() {{\n    println!(\"{t}\");\n}}\n"))
            },
        })
        .add_chat_response(ChatResponse::message(format!("answer {t}")))
        .build()
        .expect("a turn");
}

/// A stream of `turns` turns, each a request, reasoning with a signature,
/// a tool call (an error every third turn) and an answer; a config delta
/// after the second turn and a compaction of the first when there are
/// three or more.
pub fn stream(turns: usize, salt: &str) -> ConversationStream {
    let mut s = ConversationStream::from_parts(base_config(), Vec::new()).expect("a stream");
    for t in 0..turns {
        add_turn(&mut s, t, salt);
        if t == 1 {
            s.add_config_delta(delta(json!({
                "assistant": {"system_prompt": {"value": "Be brief.", "strategy": "append",
                    "separator": "paragraph"}}
            })));
        }
    }
    if turns >= 3 {
        let mut c = Compaction::new(0, 0);
        c.reasoning = Some(jp_conversation::compaction::ReasoningPolicy::Strip);
        s.add_compaction(c);
    }
    s
}

/// A base config holding what JP requires (a model, a run mode for tools)
/// and a system prompt.
pub fn base_config() -> Value {
    json!({
        "conversation": {"tools": {"*": {"run": "ask"}}},
        "assistant": {
            "system_prompt": "You are a careful engineer.",
            "model": {"id": {"provider": "anthropic", "name": "claude-sonnet-4"}}
        }
    })
}

/// Metadata of a conversation titled `title`.
pub fn metadata(title: Option<&str>) -> Conversation {
    Conversation {
        title: title.map(str::to_owned),
        ..Default::default()
    }
}

/// JP's file backend over the workspace storage `workspace/.jp`.
pub fn fs_backend(workspace: &Path) -> FsStorageBackend {
    let root = camino::Utf8PathBuf::from_path_buf(workspace.join(".jp")).expect("a UTF-8 path");
    FsStorageBackend::new(&root).expect("JP's backend")
}

/// Writes `count` conversations of one to four turns into `workspace`
/// through JP's file backend (titled, untitled, pinned, labelled, one
/// archived); returns their ids.
pub fn jp_written(workspace: &Path, count: i64) -> Vec<ConversationId> {
    let backend = fs_backend(workspace);
    let mut ids = Vec::new();
    for n in 0..count {
        let id = id(n);
        let mut meta = metadata((n % 3 != 0).then_some("A title: with/odd *chars*"));
        if n % 4 == 1 {
            meta.pinned_at = Some(chrono::Utc::now());
        }
        if n % 5 == 2 {
            meta.labels.insert("project".into(), "jp-store".into());
        }
        backend
            .write(
                &id,
                &meta,
                &stream((n % 4 + 1) as usize, &n.to_string()),
                Projection::Projected,
            )
            .expect("JP writes");
        ids.push(id);
    }
    if let Some(last) = ids.last() {
        jp_storage::backend::PersistBackend::archive(&backend, last).expect("archive");
    }
    ids
}

/// A location on the test S3 server no other test uses, and a backend over
/// it through a client of its own, its cache in `cache` (two backends with
/// two caches are two machines sharing the store), its leases lasting
/// `lease`. `None` after saying why the test is skipped (outside CI; in CI
/// the test fails: `jpstore_remote::testing::server_or_skip`).
pub fn s3_location(test: &str) -> Option<jpstore_remote::S3Location> {
    let server = jpstore_remote::testing::server_or_skip(test)?;
    Some(server.fresh(test))
}

/// A backend over the store at `location` on the test S3 server (see
/// [`s3_location`]), created when there is none.
pub fn s3_backend(
    location: &jpstore_remote::S3Location,
    cache: &Path,
    lease: std::time::Duration,
) -> jpstore_jp::JpStoreBackend {
    let server = jpstore_remote::testing::server().expect("the server found before");
    s3_backend_via(location, cache, lease, &server.endpoint)
}

/// [`s3_backend`] reaching the server at `endpoint` (a fault proxy in
/// front of it).
pub fn s3_backend_via(
    location: &jpstore_remote::S3Location,
    cache: &Path,
    lease: std::time::Duration,
    endpoint: &str,
) -> jpstore_jp::JpStoreBackend {
    let server = jpstore_remote::testing::server().expect("the server found before");
    let cache =
        jpstore_remote::DiskCache::open(cache, jpstore_remote::DEFAULT_CACHE_BYTES).expect("cache");
    let backend = server
        .backend_via(endpoint, location.clone())
        .with_cache(cache);
    let url = location.to_string();
    let (store, _) = jpstore_engine::Store::init_new(
        backend.shared(),
        std::path::PathBuf::from(&url),
        jpstore_engine::StoreOptions::default(),
    )
    .expect("a store on S3");
    jpstore_jp::JpStoreBackend::with_store(store, &url).with_lease(lease)
}
