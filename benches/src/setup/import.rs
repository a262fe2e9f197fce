//! JP workspaces of generated conversations, as JP writes them, for import.
//!
//! Each conversation is a [`ConversationShape`] of a given length with the
//! same large base config (about 40 KB, as JP snapshots the whole config):
//! half as `base_config.json`, half in the legacy layout (the first
//! `config_delta`). The files are written as JP writes them (pretty JSON,
//! base64 where JP applies it).

use jpstore_engine::internal::StoreInterior as _;
use std::path::Path;

use jpstore_engine::Store;
use jpstore_integrations::jp::import::{find_sources, prepare, read_source};
use serde_json::{json, Map, Value};

use crate::workload::conversation::{jp_events_json, ConversationShape};

/// A config of about 40 KB: many tools with their settings, as JP's
/// snapshots are.
pub fn base_config() -> Value {
    let mut tools = Map::new();
    for i in 0..120 {
        tools.insert(
            format!("tool_{i:03}"),
            json!({"enable": i % 3 != 0, "run": "unattended", "source": format!("local.tool_{i}"),
                   "description": "Reads a file of the workspace and returns its content, with line numbers when asked.",
                   "parameters": {"path": {"type": "string", "required": true}, "lines": {"type": "array", "items": {"type": "integer"}}},
                   "compaction": {"request": "keep", "response": "strip"}}),
        );
    }
    json!({"assistant": {"name": "jp", "model": {"id": "anthropic/claude-sonnet-4", "parameters": {"max_tokens": 8192}},
           "system_prompt": "You are a careful coding assistant. ".repeat(40)},
           "conversation": {"tools": tools, "compaction": {"keep_last": 3}}})
}

/// Writes a JP workspace of `conversations` conversations of `events`
/// events each below `root` (`root/.jp/conversations/...`) and returns the
/// bytes of JP's files.
pub fn write_workspace(root: &Path, conversations: usize, events: usize) -> u64 {
    let dir = root.join(".jp").join("conversations");
    let base = base_config();
    let mut bytes = 0u64;
    for c in 0..conversations {
        let id = 17_738_399_468u64 + c as u64 * 100;
        let conv = dir.join(format!("{id}-generated-session-{c}"));
        std::fs::create_dir_all(&conv).expect("mkdir");
        let mut entries = ConversationShape::generate(1000 + c as u64, events);
        if c % 2 == 1 {
            entries.insert(
                0,
                json!({"type": "config_delta", "timestamp": "2026-05-29 09:00:00.0", "delta": base}),
            );
        } else {
            let text = serde_json::to_string_pretty(&base).expect("json");
            std::fs::write(conv.join("base_config.json"), &text).expect("write");
            bytes += text.len() as u64;
        }
        let events = jp_events_json(&entries);
        let meta = format!(
            "{{\n  \"title\": \"Session {c}\",\n  \"last_activated_at\": \"2026-05-29 19:41:22.0\"\n}}\n"
        );
        std::fs::write(conv.join("events.json"), &events).expect("write");
        std::fs::write(conv.join("metadata.json"), &meta).expect("write");
        bytes += (events.len() + meta.len()) as u64;
    }
    bytes
}

/// Imports every conversation of `workspace` into `store` (as
/// `jp-store import` does) and returns how many.
pub fn import_all(store: &Store, workspace: &Path) -> usize {
    let prepared: Vec<_> = find_sources(workspace)
        .expect("find")
        .iter()
        .map(|d| prepare(read_source(d).expect("read")))
        .collect();
    let (results, _) =
        jpstore_engine::import::run(store, prepared, false, &mut |_| {}).expect("import");
    results.len()
}

/// The floor of any import: read and parse (serde_json) every JP file of
/// `workspace`. Returns the number of `events.json` arrays.
pub fn read_and_parse_jp_files(workspace: &Path) -> usize {
    let mut count = 0;
    for d in find_sources(workspace).expect("find") {
        for f in ["events.json", "metadata.json", "base_config.json"] {
            if let Ok(bytes) = std::fs::read(d.join(f)) {
                let v: Value = serde_json::from_slice(&bytes).expect("parse");
                count += usize::from(v.is_array());
            }
        }
    }
    count
}

/// The plain-JSON floor of an import's size (format-v2 memo 1.1): every
/// conversation of `store` as `export --format json` prints it (content
/// inline, pretty, a newline after each), concatenated in id order, and
/// compressed as one stream with the bulk zstd API at level 19. Returns the
/// bytes of the JSON and of the stream.
pub fn plain_json_zstd19(store: &Store) -> (u64, u64) {
    use jpstore_engine::export::ContentMode;
    use jpstore_engine::internal::export::conversation_json;
    let mut all = Vec::new();
    let mut ids = store.ids().expect("list the conversations");
    ids.sort();
    for id in ids {
        let conversation = store.read(&id).expect("read a conversation");
        let doc = conversation_json(store, &conversation, ContentMode::Inline).expect("export");
        serde_json::to_writer_pretty(&mut all, &doc).expect("render");
        all.push(b'\n');
    }
    let compressed = zstd::bulk::compress(&all, 19).expect("zstd -19");
    (all.len() as u64, compressed.len() as u64)
}
