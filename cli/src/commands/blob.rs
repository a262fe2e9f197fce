//! `jp-store blob ...`: direct access to the blob store (plumbing).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use jpstore_blobstore::{BlobId, BlobStore};
use jpstore_integrations::user_file::{self, LastLink};

use super::open_store;
use crate::output::Progress;

#[derive(Subcommand, Debug)]
pub enum BlobCommand {
    /// Store files as blobs and print their ids. Several files are written as
    /// one pack (one sync for the batch); a single file as a loose object.
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
        id: String,
    },
    /// List blob ids (loose and packed).
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Read, decompress and hash every blob; check every pack against its index.
    /// Exits 1 if damage is found.
    Verify {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(dir: &Path, cmd: BlobCommand) -> Result<ExitCode> {
    match cmd {
        BlobCommand::Put { files, json } => {
            let store = open_store(dir)?;
            let store = store.blobs();
            let ids = put_files(store, &files)?;
            if json {
                let list: Vec<_> = files
                    .iter()
                    .zip(&ids)
                    .map(|(f, (id, size))| {
                        serde_json::json!({"path": f, "id": id.to_hex(), "size": size})
                    })
                    .collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                for (f, (id, _)) in files.iter().zip(&ids) {
                    println!("{id}  {}", f.display());
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
                let list: Vec<String> = ids.iter().map(BlobId::to_hex).collect();
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else {
                for id in ids {
                    println!("{id}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        BlobCommand::Verify { json } => {
            let store = open_store(dir)?;
            let store = store.blobs();
            let interrupt = crate::interrupt::flag()?;
            let mut progress = Progress::new("verifying");
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
                let problems: Vec<_> = report
                    .problems
                    .iter()
                    .map(|p| {
                        serde_json::json!({
                            "blob": p.blob.map(|b| b.to_hex()),
                            "error": p.error.to_string(),
                        })
                    })
                    .collect();
                let out = serde_json::json!({
                    "clean": report.is_clean(),
                    "loose_objects": report.loose_objects,
                    "packs": report.packs,
                    "packed_objects": report.packed_objects,
                    "bytes": report.bytes,
                    "problems": problems,
                    "unindexed_packs": report.unindexed_packs,
                });
                println!("{}", serde_json::to_string_pretty(&out)?);
            } else {
                println!(
                    "checked {} loose objects, {} packs with {} objects, {} bytes",
                    report.loose_objects, report.packs, report.packed_objects, report.bytes
                );
                for p in &report.unindexed_packs {
                    println!(
                        "note: {} has no index (left by an interrupted write; gc removes it)",
                        p.display()
                    );
                }
                for p in &report.problems {
                    println!("damage: {}", p.error);
                }
                if report.is_clean() {
                    println!("clean");
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

/// Stores files: one loose object for a single file, a pack for several.
/// Each must be a regular file within the store's maximum blob size
/// (refused before it is read, by `user_file`).
pub fn put_files(store: &BlobStore, files: &[PathBuf]) -> Result<Vec<(BlobId, u64)>> {
    let max = store.options().max_blob_len;
    if let [file] = files {
        let data = user_file::read_file(file, max, LastLink::Follow)?;
        let out = store.put(&data)?;
        return Ok(vec![(out.id, data.len() as u64)]);
    }
    let mut progress = Progress::new("storing");
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map(|m| m.len()).unwrap_or(0))
        .sum();
    let outcome = store
        .put_batch(
            files.len(),
            |i| {
                user_file::read(&files[i], max, LastLink::Follow).map_err(|e| {
                    std::io::Error::new(e.kind(), format!("{}: {e}", files[i].display()))
                })
            },
            &mut |p| progress.update(p.bytes_done, total),
        )
        .context("storing the batch")?;
    progress.finish();
    if outcome.ids.len() != files.len() {
        bail!(
            "the store returned {} ids for {} files",
            outcome.ids.len(),
            files.len()
        );
    }
    Ok(outcome.ids.into_iter().zip(outcome.sizes).collect())
}
