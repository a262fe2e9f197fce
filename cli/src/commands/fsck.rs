//! `jp-store fsck`: check a store, and repair it by quarantine.

use super::open_store;
use crate::output::{Progress, Unit};
use anyhow::Result;
use clap::Args;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct FsckArgs {
    /// Also decompress and hash every blob and check packs against their
    /// indexes.
    #[arg(long)]
    read_data: bool,
    /// Cut torn tails and move damaged conversations and objects into
    /// quarantine/ (never deletes), keeping in the store the whole records
    /// before a conversation's bad one where that is its only damage;
    /// complete a repair a crash stopped.
    #[arg(long)]
    repair: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

pub fn fsck(dir: &super::StoreLocation, args: FsckArgs) -> Result<ExitCode> {
    use jpstore_engine::fsck::{FsckOptions, FsckProgress};
    let store = open_store(dir)?;
    let interrupt = crate::interrupt::flag()?;
    // Conversations checked; with --read-data, bytes of blobs read (the
    // logs are checked beside, and take far less).
    let mut bar = if args.read_data {
        Progress::new("reading blobs", Unit::Bytes)
    } else {
        Progress::new("checking conversations", Unit::Items("conversation"))
    };
    let report = jpstore_engine::fsck::run_interruptible(
        &store,
        FsckOptions {
            read_data: args.read_data,
            repair: args.repair,
        },
        &mut |p| match p {
            FsckProgress::Conversations(done, total) if !args.read_data => {
                bar.update(done as u64, total as u64)
            }
            FsckProgress::Conversations(..) => {}
            FsckProgress::Blobs(done, total) => bar.update(done, total),
        },
        &interrupt,
    );
    bar.finish();
    let report = match report {
        Err(jpstore_engine::fsck::FsckError::Store(ref e))
            if crate::interrupt::is_interrupted(e) =>
        {
            return Ok(crate::interrupt::stopped("fsck"))
        }
        other => other?,
    };
    let clean = report.is_clean();
    if args.json {
        crate::jsonln!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        crate::outln!(
            "checked {} ({}, {}, {}){}",
            crate::output::count_of(report.conversations, "conversation"),
            crate::output::count(report.records, "record"),
            crate::output::count(report.entries, "entry"),
            crate::output::count_of(report.references, "blob reference"),
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
            crate::outln!("{}: {}{at}: {}", f.severity, f.kind, f.message);
        }
        for r in &report.repairs {
            crate::outln!("repaired: {r}");
        }
        if report.has_unsupported() {
            crate::outln!(
                "files written by a newer jp-store were found and left as they are; upgrade jp-store to check them"
            );
        }
        if clean {
            crate::outln!("clean");
        } else if report
            .findings
            .iter()
            .any(|f| f.severity == jpstore_engine::fsck::Severity::Damage)
            && !args.repair
        {
            crate::outln!("damage found; `jp-store fsck --repair` moves it aside (never deletes)");
        }
    }
    Ok(if clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
