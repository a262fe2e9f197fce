//! `jp-store fork`: a new conversation from another's history.

use super::{open_store, parse_id};
use anyhow::Result;
use clap::Args;
use jpstore_engine::compaction::CompactRequest;
use jpstore_engine::event::Entry;
use jpstore_engine::timestamp::Timestamp;
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ForkArgs {
    /// The conversation to fork.
    id: String,
    /// Only its last N turns (the config in effect where they start becomes
    /// the fork's base config; compactions are left out).
    #[arg(long)]
    last: Option<u64>,
    /// Compact the fork, with the given profile or the default one. The
    /// compaction is made before anything is written and published in the
    /// fork's log: an unknown profile or a failed summary creates no fork.
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    compact: Option<String>,
    /// The new conversation's id (default: JP's kind, from the time).
    #[arg(long = "id", value_name = "NEW")]
    id_new: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn fork(dir: &Path, args: ForkArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = parse_id(&args.id)?;
    let new_id = args.id_new.as_deref().map(parse_id).transpose()?;
    // The fork and its compaction are one log, published whole: a profile
    // that does not exist (or a failed summary) leaves no fork behind.
    let profile = args.compact.map(|p| (!p.is_empty()).then_some(p));
    let request = profile.as_ref().map(|profile| CompactRequest {
        profile: profile.clone(),
        ..Default::default()
    });
    let mut summarize = |table: &jpstore_engine::config::settings::SummaryTable,
                         raw: &[Entry]|
     -> Result<String, jpstore_engine::compaction::SummaryFailure> {
        jpstore_integrations::summarizer::summarize_from_profile(
            &store,
            table,
            raw,
            profile.as_ref().and_then(|p| p.as_deref()),
        )
        .map_err(Into::into)
    };
    let compact = request.as_ref().map(|r| {
        (
            r,
            &mut summarize as &mut jpstore_engine::compaction::Summarizer<'_>,
        )
    });
    let (writer, compacted) =
        store.fork_compacted(&id, args.last, new_id, Timestamp::now(), compact)?;
    let forked = writer.id().clone();
    let entries = writer.state().entries;
    drop(writer);
    if args.json {
        println!(
            "{}",
            json!({
                "id": forked.as_str(),
                "forked_from": id.as_str(),
                "entries": entries,
                "compacted": compacted.map(|o| json!({"from_turn": o.compaction.from_turn, "to_turn": o.compaction.to_turn, "profile": o.profile})),
            })
        );
    } else {
        println!("{forked}");
    }
    Ok(ExitCode::SUCCESS)
}
