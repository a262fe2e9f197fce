//! `jp-store demo`: the main job on the embedded sample JP workspace: create
//! a store, import the workspace's conversation, print it, export it back to
//! JP's format, checking that the exported files are the originals byte for
//! byte, and append a turn.

use jpstore_engine::internal::StoreInterior as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, ensure, Context, Result};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::{Store, StoreOptions};
use jpstore_integrations::jp::export::jp_files;
use jpstore_integrations::jp::import::import_paths;

use crate::commands::print_conversation;

/// The sample JP workspace shipped with jp-store (written for it), embedded
/// in the binary: (path inside the workspace, content).
pub const SAMPLE_WORKSPACE: &[(&str, &str)] = &[
    (
        ".jp/conversations/17738399468-fix-the-flaky-test/events.json",
        include_str!("../samples/jp-workspace/.jp/conversations/17738399468-fix-the-flaky-test/events.json"),
    ),
    (
        ".jp/conversations/17738399468-fix-the-flaky-test/metadata.json",
        include_str!("../samples/jp-workspace/.jp/conversations/17738399468-fix-the-flaky-test/metadata.json"),
    ),
];

/// The conversation directory of the sample, inside the workspace.
const SAMPLE_CONVERSATION: &str = ".jp/conversations/17738399468-fix-the-flaky-test";

/// The turn the demo appends, as `jp-store append` reads it.
const NEXT_TURN: &str = r#"{"type": "turn_start"}
{"type": "chat_request", "content": "Thanks. Summarise the fix in one line."}
{"type": "chat_response", "message": "Join the writer thread before reopening the log."}
"#;

pub fn run(dir: Option<PathBuf>) -> Result<ExitCode> {
    if let Some(dir) = &dir {
        refuse_used(dir)?;
    }
    let tmp = tempfile::tempdir().context("creating a temp dir for the demo")?;
    let kept = dir.is_some();
    let store_dir = dir.unwrap_or_else(|| tmp.path().join("store"));
    let workspace = tmp.path().join("workspace");
    for (path, content) in SAMPLE_WORKSPACE {
        let p = workspace.join(path);
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&p, content).with_context(|| format!("writing {}", p.display()))?;
    }
    let store = Store::init_dir(&store_dir, StoreOptions::default())?;
    if kept {
        crate::outln!("store: {} (kept)", store_dir.display());
    } else {
        crate::outln!(
            "store: a temporary directory, removed when the demo ends (--dir DIR keeps it)"
        );
    }

    // 1. Import the JP workspace.
    let report = import_paths(&store, std::slice::from_ref(&workspace), false, &mut |_| {})?;
    if let Some(failed) = report.failed.first() {
        bail!("{}: {}", failed.path.display(), failed.reason);
    }
    crate::outln!(
        "imported {}: {} stored",
        crate::output::count_of(report.imported, "JP conversation"),
        crate::output::count_of(report.new_blobs, "blob")
    );
    crate::outln!();

    // 2. Print it.
    let id = ConversationId::parse("17738399468")?;
    let conv = store.read(&id)?;
    print_conversation(&mut std::io::stdout().lock(), &conv, None)?;

    // 3. Export it back: the original files, byte for byte.
    let files = jp_files(&store, &conv)?;
    let original_dir = workspace.join(SAMPLE_CONVERSATION);
    check_identical(&original_dir.join("events.json"), &files.events)?;
    check_identical(&original_dir.join("metadata.json"), &files.metadata)?;
    ensure!(
        files.base_config.is_none() && files.lossy.is_empty(),
        "the export of the sample is not the sample's files: {:?}",
        files.lossy
    );
    crate::outln!();
    crate::outln!("export --format jp gives back the imported files byte for byte");

    // 4. Append a turn, as an agent would: one durable batch.
    let parsed = parse_input(
        NEXT_TURN,
        ParseMode::Strict {
            now: Timestamp::now(),
        },
    )
    .map_err(|e| anyhow::anyhow!("the demo's turn: {e}"))?;
    let mut writer = store.writer(&id)?;
    let outcome = writer.append(parsed.entries)?;
    writer.close();
    let conv = store.read(&id)?;
    crate::outln!(
        "appended {} events as one record at offset {}; the conversation now has {} turns",
        outcome.entries,
        outcome.offset,
        conv.state.turns()
    );
    if kept {
        crate::outln!(
            "the store is kept in {0}: try jp-store --store {0} ls",
            store_dir.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses a `--dir` that holds anything: the demo shows what happens to a
/// new store, and a store it ran in before holds the turn it appended, so
/// the export would no longer be the sample's files.
fn refuse_used(dir: &Path) -> Result<()> {
    let mut entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    };
    if entries.next().is_none() {
        return Ok(());
    }
    let used = dir.join("config.toml").exists() || dir.join("conversations").exists();
    bail!(
        "{} is not empty{}: the demo creates a store of its own, in a new or empty \
         directory; give another --dir, remove this one, or run the demo without --dir \
         (in a temporary directory)",
        dir.display(),
        if used {
            " (a store, from an earlier run of the demo?)"
        } else {
            ""
        }
    )
}

fn check_identical(original: &Path, exported: &[u8]) -> Result<()> {
    let bytes =
        std::fs::read(original).with_context(|| format!("reading {}", original.display()))?;
    if bytes != exported {
        let at = bytes
            .iter()
            .zip(exported)
            .position(|(a, b)| a != b)
            .unwrap_or(bytes.len().min(exported.len()));
        anyhow::bail!(
            "the export of {} differs from the original at byte {at} ({} bytes exported, {} in the file)",
            original.display(),
            exported.len(),
            bytes.len()
        );
    }
    Ok(())
}
