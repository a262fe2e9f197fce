//! `jp-store fork`: a new conversation from another's history.

use super::{open_store, parse_id};
use anyhow::Result;
use clap::Args;
use jpstore_engine::compaction::{CompactRequest, Summarizer};
use jpstore_engine::internal::compaction::ForkReport;
use jpstore_engine::internal::StoreInterior as _;
use jpstore_engine::timestamp::Timestamp;
use jpstore_integrations::summarizer::profile_summarizer_for;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ForkArgs {
    /// The conversation to fork.
    #[arg(value_parser = crate::commands::conversation_id)]
    id: String,
    /// Only its last N turns, N at least 1 (the config in effect where they
    /// start becomes the fork's base config; compactions are left out).
    #[arg(long)]
    last: Option<u64>,
    /// Compact the fork, with the given profile or the default one. The
    /// compaction is made before anything is written and published in the
    /// fork's log: an unknown profile or a failed summary creates no fork.
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    compact: Option<String>,
    /// The new conversation's id (default: JP's kind, from the time).
    #[arg(long = "id", value_name = "NEW", value_parser = crate::commands::conversation_id)]
    id_new: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

pub fn fork(dir: &super::StoreLocation, args: ForkArgs) -> Result<ExitCode> {
    if args.last == Some(0) {
        return Err(super::usage(
            "--last 0 would fork no turn: give the number of last turns to keep (1 or more), \
             or leave --last out to fork the whole history",
        ));
    }
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
    let mut summarize = profile_summarizer_for(&store, profile.as_ref().and_then(|p| p.as_deref()));
    let compact = request
        .as_ref()
        .map(|r| (r, &mut summarize as &mut Summarizer<'_>));
    let (fork, compacted) =
        store.fork_compacted(&id, args.last, new_id, Timestamp::now(), compact)?;
    let report = ForkReport::new(&id, fork.id(), fork.state(), compacted.as_ref());
    fork.close();
    if args.json {
        crate::jsonln!("{}", serde_json::to_string(&report)?);
    } else {
        crate::outln!("{}", report.id);
    }
    Ok(ExitCode::SUCCESS)
}
