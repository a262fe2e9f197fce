//! `jp-store upgrade`: rewrite packs and conversation logs of older
//! formats in the formats this build writes.

use super::{open_store, size};
use crate::output::{Progress, Unit};
use anyhow::Result;
use clap::Args;
use jpstore_engine::internal::StoreInterior as _;
use jpstore_engine::upgrade::UpgradeStep;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct UpgradeArgs {
    /// Report what would be rewritten; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

pub fn upgrade(dir: &super::StoreLocation, args: UpgradeArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let mut bar = Progress::new("upgrading packs", Unit::Bytes);
    let would = if args.dry_run {
        "would rewrite"
    } else {
        "rewrote"
    };
    let report = jpstore_engine::upgrade::run(&store, args.dry_run, &mut |step| match step {
        UpgradeStep::Pack(p) => bar.update(p.bytes_done, p.bytes_total),
        UpgradeStep::Log {
            done,
            total,
            report,
        } => {
            if report.upgraded && !args.json {
                bar.println(&format!(
                    "[{done}/{total}] {would} conversation {} as log format {}: {} records, {} -> {}",
                    report.id,
                    jpstore_engine::internal::log::VERSION_2,
                    report.records,
                    size(report.old_bytes),
                    size(report.new_bytes),
                ));
            }
        }
    })?;
    bar.finish();
    if args.json {
        crate::jsonln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let packs = &report.packs;
    crate::outln!(
        "{would} {} packs of format 1 ({} objects, {} -> {}) and {} conversation logs of format 1 ({} -> {}); {} logs were current",
        packs.packs,
        packs.objects,
        size(packs.old_bytes),
        if report.dry_run { "?".to_string() } else { size(packs.new_bytes) },
        report.logs_upgraded,
        size(report.conversations.iter().filter(|c| c.upgraded).map(|c| c.old_bytes).sum()),
        size(report.conversations.iter().filter(|c| c.upgraded).map(|c| c.new_bytes).sum()),
        report.logs_current,
    );
    for c in report.conversations.iter().filter(|c| c.kept.is_some()) {
        if let Some(kept) = &c.kept {
            crate::outln!(
                "conversation {}: its format 1 log kept in {}",
                c.id,
                store.display(kept).display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
