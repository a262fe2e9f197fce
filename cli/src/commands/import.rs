//! `jp-store import`: JP conversations, or NDJSON streams of conversations,
//! into the store, in batches.

use super::size;
use crate::output::count_of;
use anyhow::Result;
use clap::Args;
use jpstore_blobstore::Compression;
use jpstore_engine::StoreOptions;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// JP conversation directories, or directories holding them (a
    /// workspace's `.jp/conversations`, including `.archive/`, its `.jp`,
    /// or the workspace itself); or NDJSON files of conversations, one a
    /// line, as `export --format ndjson` writes them, or a file of one
    /// conversation as `export --format json` writes it (`-` reads standard
    /// input). Any other file is named once, saying what it is.
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Replace conversations that are already in the store (default: skip
    /// them with a message). Each one holds its old log or its new one at
    /// every point, whatever stops the import (on S3: it is removed, then
    /// created).
    #[arg(long)]
    force: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// How the imported content is compressed: `fast` (zstd 3 in groups
    /// of 256 KiB), `balanced` (zstd 9, 1 MiB) or `max` (zstd 19, 8 MiB:
    /// the smallest store, at about 1 MB/s per core). The logs' records
    /// are compressed at the same level. Default: max.
    #[arg(long, value_name = "fast|balanced|max")]
    compression: Option<Compression>,
}

pub fn import(dir: &super::StoreLocation, args: ImportArgs) -> Result<ExitCode> {
    use jpstore_integrations::jp::import::{import_paths, ImportProgress};
    use jpstore_integrations::stream::{import_streams, is_stream, merge_reports, StreamSource};
    let mut options = StoreOptions::default();
    if let Some(c) = args.compression {
        options.blobs.import_compression = c;
    }
    let store = super::open_store_with(dir, options)?;
    let (streams, dirs): (Vec<&PathBuf>, Vec<&PathBuf>) =
        args.paths.iter().partition(|p| is_stream(p));
    let sources: Vec<StreamSource> = streams
        .iter()
        .map(|p| match p.as_os_str() == "-" {
            true => StreamSource::Stdin,
            false => StreamSource::File((*p).clone()),
        })
        .collect();
    let dirs: Vec<PathBuf> = dirs.into_iter().cloned().collect();
    let mut progress = crate::output::Progress::new("importing", crate::output::Unit::Bytes);
    let mut on_progress = |p: ImportProgress<'_>| match p {
        ImportProgress::Bytes { done, total } => progress.update(done, total),
        ImportProgress::Replaced(id) => progress.println(&format!("replaced {id}")),
        ImportProgress::Skipped(id) => progress.println(&format!(
            "skipped {id}: already in the store (--force replaces it)"
        )),
        // Named once, as it is found, whatever the verbosity (the JSON
        // report lists them too).
        ImportProgress::Failed(f) => {
            progress.eprintln(&format!("jp-store: {}: {}", f.path.display(), f.reason))
        }
        ImportProgress::Again(f) => progress.eprintln(&format!(
            "jp-store: warning: {}: {}",
            f.path.display(),
            f.reason
        )),
    };
    let mut report = import_paths(&store, &dirs, args.force, &mut on_progress)?;
    if !sources.is_empty() {
        let streamed = import_streams(&store, &sources, args.force, &mut on_progress)?;
        report = merge_reports(report, streamed);
    }
    progress.finish();
    if args.json {
        crate::jsonln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for f in report
            .not_byte_identical
            .iter()
            .chain(&report.not_in_view)
            .chain(&report.settings_not_applied)
        {
            crate::errln!("jp-store: warning: {}: {}", f.path.display(), f.reason);
        }
        crate::outln!(
            "imported {} ({}), skipped {}, failed {}; \
             read {}, stored {} ({} in {}, {} of logs)",
            count_of(report.imported, "conversation"),
            count_of(report.events, "event"),
            report.skipped,
            report.failed.len(),
            size(report.bytes_read),
            size(report.bytes_stored),
            size(report.blob_bytes_stored),
            count_of(report.new_blobs, "new blob"),
            size(report.log_bytes)
        );
    }
    Ok(if report.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
