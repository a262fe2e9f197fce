//! `jp-store import`: JP conversations into the store, in batches.

use super::{open_store, size};
use anyhow::Result;
use clap::Args;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// JP conversation directories, or directories holding them (a
    /// workspace's `.jp/conversations`, including `.archive/`, or the
    /// workspace itself).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Replace conversations that are already in the store (default: skip
    /// them with a message).
    #[arg(long)]
    force: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// Conversations imported per blob batch (one pack each), bounded by the
/// bytes of their files too.
const IMPORT_CHUNK_BYTES: u64 = 256 << 20;

pub fn import(dir: &Path, args: ImportArgs) -> Result<ExitCode> {
    use jpstore_engine::jp::import::{find_sources, prepare, read_source, Imported};
    let store = open_store(dir)?;
    let mut failures: Vec<(PathBuf, String)> = Vec::new();
    let mut sources = Vec::new();
    for p in &args.paths {
        match find_sources(p) {
            Ok(found) if found.is_empty() => failures.push((
                p.clone(),
                "no JP conversation directories (with an events.json) found".into(),
            )),
            Ok(found) => sources.extend(found),
            Err(e) => failures.push((p.clone(), e.to_string())),
        }
    }
    let total_bytes: u64 = sources
        .iter()
        .map(|d| {
            ["events.json", "metadata.json", "base_config.json"]
                .iter()
                .map(|f| std::fs::metadata(d.join(f)).map_or(0, |m| m.len()))
                .sum::<u64>()
        })
        .sum();
    let mut progress = crate::output::Progress::new("importing");
    let (mut imported, mut skipped, mut entries, mut read, mut log_bytes) =
        (0usize, 0usize, 0usize, 0u64, 0u64);
    let (mut blob_bytes, mut new_blobs) = (0u64, 0usize);
    let mut chunk = Vec::new();
    let mut chunk_bytes = 0u64;
    let mut done_bytes = 0u64;
    let mut flush = |chunk: &mut Vec<jpstore_engine::jp::import::Prepared>,
                     progress: &mut crate::output::Progress,
                     done_bytes: &mut u64|
     -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        let (results, totals) = store.import(std::mem::take(chunk), args.force, &mut |_| {})?;
        blob_bytes += totals.stored_bytes;
        new_blobs += totals.new_blobs;
        for r in results {
            match r {
                Imported::Stored {
                    id,
                    entries: n,
                    source_bytes,
                    log_bytes: l,
                    replaced,
                } => {
                    imported += 1;
                    entries += n;
                    read += source_bytes;
                    log_bytes += l;
                    *done_bytes += source_bytes;
                    if replaced {
                        progress.println(&format!("replaced {id}"));
                    }
                }
                Imported::Skipped { id } => {
                    skipped += 1;
                    progress.println(&format!(
                        "skipped {id}: already in the store (--force replaces it)"
                    ));
                }
            }
        }
        progress.update(*done_bytes, total_bytes);
        Ok(())
    };
    for src in sources {
        match read_source(&src) {
            Ok(s) => {
                chunk_bytes += s.bytes;
                chunk.push(prepare(s));
                if chunk_bytes >= IMPORT_CHUNK_BYTES {
                    flush(&mut chunk, &mut progress, &mut done_bytes)?;
                    chunk_bytes = 0;
                }
            }
            Err(e) => {
                progress.println(&format!("failed: {e}"));
                failures.push((src, e.to_string()));
            }
        }
    }
    flush(&mut chunk, &mut progress, &mut done_bytes)?;
    progress.finish();
    if args.json {
        let failed: Vec<_> = failures
            .iter()
            .map(|(p, r)| json!({"path": p, "reason": r}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "imported": imported,
                "skipped": skipped,
                "failed": failed,
                "events": entries,
                "bytes_read": read,
                "bytes_stored": blob_bytes + log_bytes,
                "blob_bytes_stored": blob_bytes,
                "new_blobs": new_blobs,
                "log_bytes": log_bytes,
            }))?
        );
    } else {
        for (p, r) in &failures {
            eprintln!("jp-store: {}: {r}", p.display());
        }
        println!(
            "imported {imported} conversations ({entries} events), skipped {skipped}, failed {}; \
             read {}, stored {} ({} in {new_blobs} new blobs, {} of logs)",
            failures.len(),
            size(read),
            size(blob_bytes + log_bytes),
            size(blob_bytes),
            size(log_bytes)
        );
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
