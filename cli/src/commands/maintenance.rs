//! Maintenance commands: `rm`, `gc`, `fsck`.

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::Args;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::gc::GcOptions;

use super::open_store;
use crate::output::Progress;

pub fn rm(dir: &Path, id: &str) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = ConversationId::parse(id)?;
    store.remove(&id)?;
    println!("removed {id} (its blobs stay until gc)");
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct GcArgs {
    /// Report what would go; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Spare unreferenced objects younger than this (e.g. `1h`, `30m`, `0s`).
    #[arg(long, default_value = "1h", value_parser = humantime::parse_duration)]
    grace: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn gc(dir: &Path, args: GcArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let mut progress = Progress::new("marking");
    let report = store.gc(
        GcOptions {
            grace: args.grace,
            dry_run: args.dry_run,
            ..GcOptions::default()
        },
        &mut |p| progress.update(p.marked as u64, p.total as u64),
    )?;
    progress.finish();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        let verb = if report.dry_run {
            "would free"
        } else {
            "freed"
        };
        println!(
            "{verb} {} objects, {} bytes ({} loose; {} from packs: {} rewritten, {} removed); \
             {} blobs referenced by {} conversations; {} unreferenced kept (younger than {} or in mostly live packs); \
             {} packs {}",
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
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// Also decompress and hash every blob and check packs against their
    /// indexes.
    #[arg(long)]
    read_data: bool,
    /// Cut torn tails and move damaged conversations and objects into
    /// quarantine/ (never deletes).
    #[arg(long)]
    repair: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn fsck(dir: &Path, args: FsckArgs) -> Result<ExitCode> {
    use jpstore_engine::fsck::{FsckOptions, FsckProgress};
    let store = open_store(dir)?;
    let interrupt = crate::interrupt::flag()?;
    let mut bar = Progress::new("checking");
    let report = store.fsck_interruptible(
        FsckOptions {
            read_data: args.read_data,
            repair: args.repair,
        },
        &mut |p| match p {
            FsckProgress::Conversations(done, total) => bar.update(done as u64, total as u64),
            FsckProgress::Blobs(done, total) => bar.update(done, total),
        },
        &interrupt,
    );
    bar.finish();
    let report = match report {
        Err(e) if crate::interrupt::is_interrupted(&e) => {
            return Ok(crate::interrupt::stopped("fsck"))
        }
        other => other?,
    };
    let clean = report.is_clean();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "checked {} conversations ({} records, {} entries, {} blob references){}",
            report.conversations,
            report.records,
            report.entries,
            report.references,
            if args.read_data {
                format!(
                    "; read {} blobs ({} bytes)",
                    report.blobs_read, report.bytes_read
                )
            } else {
                String::new()
            }
        );
        for f in &report.findings {
            let mut at = String::new();
            if let Some(p) = &f.path {
                at.push_str(&format!(" {}", p.display()));
            }
            if let Some(o) = f.offset {
                at.push_str(&format!(" at offset {o}"));
            }
            if let Some(b) = f.blob {
                at.push_str(&format!(" blob {b}"));
            }
            println!("{}: {}{at}: {}", f.severity.as_str(), f.kind, f.message);
        }
        for r in &report.repairs {
            println!("repaired: {r}");
        }
        if clean {
            println!("clean");
        } else if !args.repair {
            println!("damage found; `jp-store fsck --repair` moves it aside (never deletes)");
        }
    }
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
