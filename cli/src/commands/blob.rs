//! `jp-store blob ...`: direct access to the blob store (plumbing).

use jpstore_engine::internal::StoreInterior as _;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::Subcommand;
use jpstore_blobstore::BlobId;
use jpstore_integrations::blob_files::put_files;

use super::open_store;
use crate::output::{Progress, Unit};

#[derive(Subcommand, Debug)]
pub enum BlobCommand {
    /// Store files as blobs and print their ids.
    ///
    /// Several files are written as one pack (one sync for the batch); a single file as a loose object.
    /// Each must be a regular file of at most the maximum blob size (1 GiB):
    /// a FIFO, a device or a larger file is refused before it is read, and
    /// nothing is stored.
    Put {
        /// Files to store.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Write the content of a blob to standard output.
    Cat {
        /// The blob id (64 hex digits).
        #[arg(value_parser = blob_id)]
        id: String,
    },
    /// List blob ids (loose and packed).
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read, decompress and hash every blob; check every pack against its index.
    ///
    /// Exits 1 if damage is found.
    Verify {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The value parser of a blob id: one that cannot be one is bad usage.
fn blob_id(s: &str) -> std::result::Result<String, String> {
    BlobId::parse(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

impl BlobCommand {
    /// Whether the command prints its result as JSON.
    pub fn json(&self) -> bool {
        match self {
            BlobCommand::Put { json, .. }
            | BlobCommand::Ls { json }
            | BlobCommand::Verify { json } => *json,
            BlobCommand::Cat { .. } => false,
        }
    }
}

pub fn run(dir: &super::StoreLocation, cmd: BlobCommand) -> Result<ExitCode> {
    match cmd {
        BlobCommand::Put { files, json } => {
            let store = open_store(dir)?;
            // A bar only for a batch (one file is stored without progress).
            let mut bar: Option<Progress> = None;
            let stored = put_files(&store, &files, &mut |p| {
                bar.get_or_insert_with(|| Progress::new("storing", Unit::Bytes))
                    .update(p.bytes_done, p.bytes_total)
            });
            if let Some(bar) = &mut bar {
                bar.finish();
            }
            let stored = stored?;
            if json {
                crate::jsonln!("{}", serde_json::to_string_pretty(&stored)?);
            } else {
                for f in &stored {
                    crate::outln!("{}  {}", f.id, f.path.display());
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        BlobCommand::Cat { id } => {
            let store = open_store(dir)?;
            let store = store.blobs();
            let id = BlobId::parse(&id)?;
            let data = store.get(&id)?;
            std::io::stdout()
                .lock()
                .write_all(&data)
                .context("writing to standard output")?;
            Ok(ExitCode::SUCCESS)
        }
        BlobCommand::Ls { json } => {
            let store = open_store(dir)?;
            let store = store.blobs();
            let ids = store.ids()?;
            if json {
                crate::jsonln!("{}", serde_json::to_string_pretty(&ids)?);
            } else {
                for id in ids {
                    crate::outln!("{id}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        BlobCommand::Verify { json } => {
            let store = open_store(dir)?;
            let store = store.blobs();
            let interrupt = crate::interrupt::flag()?;
            let mut progress = Progress::new("verifying", Unit::Bytes);
            let report = store.verify_all_interruptible(
                &mut |p| progress.update(p.bytes_done, p.bytes_total),
                &interrupt,
            );
            progress.finish();
            let report = match report {
                Err(jpstore_blobstore::Error::Interrupted) => {
                    return Ok(crate::interrupt::stopped("blob verify"))
                }
                other => other?,
            };
            if json {
                crate::jsonln!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                crate::outln!(
                    "checked {} loose objects, {} packs with {} objects, {} bytes",
                    report.loose_objects,
                    report.packs,
                    report.packed_objects,
                    report.bytes
                );
                for p in &report.unindexed_packs {
                    crate::outln!(
                        "note: {} has no index (left by an interrupted write; gc removes it)",
                        p.display()
                    );
                }
                for p in &report.problems {
                    crate::outln!("damage: {}", p.error);
                }
                if report.is_clean() {
                    crate::outln!("clean");
                }
            }
            Ok(if report.is_clean() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}
