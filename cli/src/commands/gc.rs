//! `jp-store gc`: remove unreferenced blobs.

use super::open_store;
use crate::output::{Progress, Unit};
use anyhow::Result;
use clap::Args;
use jpstore_engine::gc::{GcOptions, GcPhase};
use std::process::ExitCode;
use std::time::Duration;

#[derive(Args, Debug)]
pub struct GcArgs {
    /// Report what would go; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Spare unreferenced objects younger than this (e.g. `1h`, `30m`, `0s`).
    #[arg(long, default_value = "1h", value_parser = parse_grace)]
    grace: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The value of `--grace`: a duration as humantime reads it, refused with
/// examples rather than the parser's own words (`expected number at 0`).
fn parse_grace(text: &str) -> std::result::Result<Duration, String> {
    humantime::parse_duration(text).map_err(|_| {
        format!("{text:?} is not a duration: write it as a number and a unit, such as `1h`, `30m`, `2h30m`, `7days` or `0s`")
    })
}

pub fn gc(dir: &super::StoreLocation, args: GcArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let mut progress = Progress::new("marking", Unit::Items("conversation"));
    let mut phase = GcPhase::Marking;
    let report = jpstore_engine::gc::run(
        &store,
        GcOptions {
            grace: args.grace,
            dry_run: args.dry_run,
            ..GcOptions::default()
        },
        &mut |p| {
            if p.phase != phase {
                phase = p.phase;
                progress.finish();
                progress = match phase {
                    GcPhase::Marking => Progress::new("marking", Unit::Items("conversation")),
                    // format-spec.md 5.5: a store on S3.
                    GcPhase::Waiting => {
                        Progress::new("waiting for writers on other machines", Unit::Countdown)
                    }
                    GcPhase::Remarking => {
                        Progress::new("marking again", Unit::Items("conversation"))
                    }
                };
            }
            progress.update(p.marked as u64, p.total as u64)
        },
    )?;
    progress.finish();
    if args.json {
        crate::jsonln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let verb = if report.dry_run {
            "would free"
        } else {
            "freed"
        };
        crate::outln!(
            "{verb} {} objects, {} bytes ({} loose; {} from packs: {} rewritten, {} removed); \
             {} blobs referenced by {} conversations; {} unreferenced kept (younger than {} or in mostly live packs); \
             {} packs {}{}{}",
            report.objects_freed(),
            report.bytes_freed(),
            report.loose_removed,
            report.packed_removed,
            report.packs_rewritten,
            report.packs_removed,
            report.referenced,
            report.conversations,
            report.kept_unreferenced,
            humantime::format_duration(args.grace),
            report.packs_merged,
            if report.dry_run { "would be merged" } else { "merged" },
            if report.waited_secs > 0 || report.restored > 0 {
                format!(
                    "; waited {} s for writers elsewhere, {} objects put back from the trash",
                    report.waited_secs, report.restored
                )
            } else {
                String::new()
            },
            if report.leftovers_removed > 0 {
                format!(
                    "; {} {} leftovers of stopped or failed writers ({} bytes: directories without a log, temp files)",
                    if report.dry_run { "would remove" } else { "removed" },
                    report.leftovers_removed,
                    report.leftover_bytes
                )
            } else {
                String::new()
            },
        );
        for note in &report.notes {
            crate::output::note(note);
        }
    }
    Ok(ExitCode::SUCCESS)
}
