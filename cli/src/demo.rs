//! `jp-store demo`: the main job on an embedded sample conversation: create
//! a store, append the conversation turn by turn, print it, export it and
//! check that the export equals what was appended.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{ensure, Context, Result};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::input::parse_input;
use jpstore_engine::event::json::ParseMode;
use jpstore_engine::event::EventKind;
use jpstore_engine::export::{conversation_json, ContentMode};
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{NewConversation, Store, StoreOptions};

use crate::conversation_commands::print_conversation;

/// The sample conversation (plain JSON events, written for jp-store after
/// the JP workspace in `samples/jp-workspace`), embedded in the binary.
pub const SAMPLE_EVENTS: &str = include_str!("../samples/fix-the-flaky-test.events.json");

pub fn run(dir: Option<PathBuf>) -> Result<ExitCode> {
    let (dir, _guard) = match dir {
        Some(d) => (d, None),
        None => {
            let t = tempfile::tempdir().context("creating a temp dir for the demo store")?;
            (t.path().join("store"), Some(t))
        }
    };
    let store = Store::init_dir(&dir, StoreOptions::default())?;
    println!("store: {}\n", dir.display());
    let parsed = parse_input(
        SAMPLE_EVENTS,
        ParseMode::Strict {
            now: Timestamp::now(),
        },
    )
    .map_err(|e| anyhow::anyhow!("the embedded sample: {e}"))?;
    let id = ConversationId::parse("17738399468")?;
    let mut writer = store.create(NewConversation {
        id: Some(id.clone()),
        title: Some("Fix the flaky test".into()),
        labels: vec![("project".into(), "jp-store".into())],
        ..Default::default()
    })?;
    // One durable batch per turn, as an agent would append them.
    let mut batch = Vec::new();
    let mut batches = 0;
    for entry in parsed.entries {
        let opens_turn = matches!(entry.event().map(|e| &e.kind), Some(EventKind::TurnStart));
        if opens_turn && !batch.is_empty() {
            writer.append(std::mem::take(&mut batch))?;
            batches += 1;
        }
        batch.push(entry);
    }
    writer.append(batch)?;
    batches += 1;
    drop(writer);

    let conv = store.read(&id)?;
    print_conversation(&mut std::io::stdout().lock(), &conv)?;

    let exported = conversation_json(&store, &conv, ContentMode::Inline)?;
    let original: serde_json::Value = serde_json::from_str(SAMPLE_EVENTS)?;
    ensure!(
        exported["events"] == original,
        "the export differs from the appended events"
    );
    let stats = store.blobs().loose_objects()?;
    println!(
        "\nappended {} events in {batches} batches; {} blobs in the store; \
         export --format json gives back exactly the appended events",
        conv.state.entries,
        stats.len()
    );
    Ok(ExitCode::SUCCESS)
}
