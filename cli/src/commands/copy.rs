//! `jp-store copy SRC DST [ID...]`: conversations and their blobs from one
//! store to another (the work is `jpstore_engine::copy`).

use super::{open_store, parse_id, size, StoreLocation};
use crate::output::{Progress, Unit};
use anyhow::{Context, Result};
use clap::Args;
use jpstore_blobstore::backend::{Backend, FileBackend};
use jpstore_blobstore::storage::LocalStorage;
use jpstore_engine::copy::{CopyOutcome, CopyProgress};
use jpstore_engine::StoreOptions;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct CopyArgs {
    /// The store to copy from: a directory, a file:// URL of one, or
    /// s3://BUCKET/PREFIX.
    #[arg(value_parser = crate::parse_store_location)]
    src: StoreLocation,
    /// The store to copy to (made a store if it is new or empty).
    #[arg(value_parser = crate::parse_store_location)]
    dst: StoreLocation,
    /// The conversations to copy (default: every one).
    #[arg(value_parser = crate::commands::conversation_id)]
    ids: Vec<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// What to do about a conflict: each conversation in conflict is left as
/// it is at DST, and it is for the user to say which history goes on.
fn conflict_advice(src: &StoreLocation, dst: &StoreLocation, id: &str) -> String {
    let quote = |l: &StoreLocation| shell_word(&l.to_string());
    let (src, dst) = (quote(src), quote(dst));
    format!(
        "a conflict is left as it is at the destination; to keep both histories, fork it at the \
         source and copy the fork (jp-store --store {src} fork {id}, then jp-store copy {src} {dst} NEW_ID); \
         to replace the destination's with the source's, remove it there and copy again \
         (jp-store --store {dst} rm {id}, then jp-store copy {src} {dst} {id})"
    )
}

/// `word` as one shell word (quoted when it holds anything but plain
/// characters).
fn shell_word(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-:+=@,".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', "'\\''"))
    }
}

pub fn copy(args: CopyArgs) -> Result<ExitCode> {
    let ids = args
        .ids
        .iter()
        .map(|s| parse_id(s))
        .collect::<Result<Vec<_>>>()?;
    let src = open_store(&args.src)?;
    // A directory made here is removed again if it is not made a store.
    let (backend, made_dir): (Arc<dyn Backend>, _) = match &args.dst {
        StoreLocation::Dir(path) => {
            let (storage, made) = LocalStorage::create_new(path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            let storage = Arc::new(storage);
            let made_dir = made.then(|| storage.clone());
            (FileBackend::shared(storage), made_dir)
        }
        StoreLocation::S3(location) => (super::s3_backend(location)?, None),
    };
    let (dst, made) = jpstore_engine::internal::copy::open_or_init_like(
        &src,
        backend,
        PathBuf::from(args.dst.to_string()),
        StoreOptions::default(),
    )
    .inspect_err(|_| {
        if let Some(dir) = &made_dir {
            let _ = dir.remove_root_if_empty();
        }
    })?;
    if made {
        crate::output::note(&format!(
            "made {} a store, with the config.toml of {}",
            args.dst, args.src
        ));
    }
    let mut bar = Progress::new("copying blobs", Unit::Items("blob"));
    let json = args.json;
    let report = jpstore_engine::copy::run(&src, &dst, &ids, &mut |p| match p {
        CopyProgress::Planned {
            conversations,
            to_send,
            blobs,
        } => bar.println(&format!(
            "{conversations} conversations: {to_send} to create or extend, {blobs} blobs to send"
        )),
        CopyProgress::Blobs { done, total } => bar.update(done as u64, total as u64),
        CopyProgress::Conversation(c) if !json => {
            let line = match c.outcome {
                CopyOutcome::Created | CopyOutcome::Extended => format!(
                    "{} {}: {} records, {}",
                    match c.outcome {
                        CopyOutcome::Created => "created",
                        _ => "extended",
                    },
                    c.id,
                    c.records_sent,
                    size(c.log_bytes_sent)
                ),
                CopyOutcome::Unchanged => return,
                CopyOutcome::Conflict | CopyOutcome::Failed => return,
            };
            bar.println(&line);
        }
        CopyProgress::Conversation(_) => {}
    })?;
    bar.finish();
    if report.workspace_config_differs && !json {
        crate::output::note(&format!(
            "note: the config.toml of {} differs from that of {}: the settings of the copied conversations may differ there",
            args.dst, args.src
        ));
    }
    if json {
        crate::jsonln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        if report.sent_nothing && report.complete {
            crate::outln!(
                "nothing to send: {} conversations already at {} as at {}",
                report.unchanged,
                args.dst,
                args.src
            );
        } else {
            crate::outln!(
                "copied to {}: {} created, {} extended, {} unchanged; sent {} records ({}) and {} blobs ({}, {} stored); {} blobs were there",
                args.dst,
                report.created,
                report.extended,
                report.unchanged,
                report.records_sent,
                size(report.log_bytes_sent),
                report.blobs_sent,
                size(report.blob_bytes_sent),
                size(report.blob_stored_bytes),
                report.blobs_present,
            );
        }
        for c in &report.conversations {
            let what = match c.outcome {
                CopyOutcome::Conflict => "conflict",
                CopyOutcome::Failed => "not copied",
                _ => continue,
            };
            crate::outln!("{what}: {}: {}", c.id, c.reason.as_deref().unwrap_or(""));
        }
        if let Some(c) = report
            .conversations
            .iter()
            .find(|c| c.outcome == CopyOutcome::Conflict)
        {
            crate::outln!("{}", conflict_advice(&args.src, &args.dst, c.id.as_str()));
        }
    }
    Ok(if report.complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
