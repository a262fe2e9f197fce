//! `jp-store compact`: add (or undo) a compaction.

use super::{open_store, parse_id};
use anyhow::{bail, Result};
use clap::Args;
use jpstore_engine::compaction::{Bound, CompactRequest, UndoReport};
use jpstore_engine::internal::compaction::CompactReport;
use jpstore_integrations::summarizer::profile_summarizer_for;
use jpstore_integrations::user_file::{self, LastLink};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct CompactArgs {
    /// The conversation id.
    #[arg(value_parser = crate::commands::conversation_id)]
    id: String,
    /// The profile (`conversation.compaction.profiles.<name>`; default: the
    /// config's `default_profile`, or the built-in one that strips reasoning
    /// and tool calls).
    #[arg(long)]
    profile: Option<String>,
    /// First turn: a 0-based turn, -N (N turns before the last), a duration
    /// (`5h`: the first turn after the one active 5 hours ago), or `last`
    /// (after the last compaction). Default: 0. Before the first turn it is
    /// turn 0 (`-99`); after the last turn it is refused (`99`: the range
    /// would cover no turn).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_bound)]
    from: Option<Bound>,
    /// Last turn, in the same forms. Default: --keep-last turns before the
    /// last. After the last turn it is the last turn (`99`); before the
    /// first turn it is refused (`-99`: the range would cover no turn). So a
    /// bound beyond the end the range extends toward is clamped, and one
    /// beyond the other end is refused, for --from and --to alike (JP's
    /// rule).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_bound)]
    to: Option<Bound>,
    /// Turns at the end left untouched when --to is not given (default:
    /// `conversation.compaction.keep_last`, else 0). Keeping every turn
    /// is refused: there is nothing to compact.
    #[arg(long)]
    keep_last: Option<u64>,
    /// Show per turn what would change and the estimated tokens of the view
    /// before and after; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Replace the range with this summary text, whatever the profile does
    /// (a profile's own summarizer, command or endpoint, is then not run;
    /// the range grows over summaries it intersects, as for any summary).
    /// An empty summary (`--summary "$UNSET"`) is refused.
    #[arg(long, conflicts_with = "summary_file")]
    summary: Option<String>,
    /// Read the summary text (UTF-8) from a file: a regular file no larger
    /// than a log record (64 MiB); a FIFO or a device is refused, and so
    /// is a file that is empty or holds only white space.
    #[arg(long)]
    summary_file: Option<PathBuf>,
    /// Revoke the last compaction in effect, or the N-th (1-based), by
    /// appending an entry; nothing is deleted.
    #[arg(long, num_args = 0..=1, default_missing_value = "0", conflicts_with_all = ["profile", "from", "to", "keep_last", "dry_run", "summary", "summary_file"])]
    undo: Option<u64>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

fn parse_bound(s: &str) -> std::result::Result<Bound, String> {
    s.parse::<Bound>().map_err(|e| e.to_string())
}

pub fn compact(dir: &super::StoreLocation, args: CompactArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = parse_id(&args.id)?;
    if let Some(n) = args.undo {
        let n = (n > 0).then_some(n);
        let mut conversation = store.conversation(&id)?;
        let undone = conversation.undo_compaction(n)?;
        conversation.close();
        if args.json {
            crate::jsonln!("{}", serde_json::to_string(&UndoReport { id, undone })?);
        } else {
            crate::outln!("undid compaction {undone} of {id}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let summary = match (&args.summary, &args.summary_file) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(f)) => {
            // A summary is stored in the compaction's record: no larger
            // than a record.
            let max = u64::from(store.options().log.max_record_size);
            let bytes = user_file::read_file(f, max, LastLink::Follow)?;
            Some(String::from_utf8(bytes).map_err(|e| {
                anyhow::anyhow!(
                    "{}: not UTF-8 text (byte {})",
                    f.display(),
                    e.utf8_error().valid_up_to()
                )
            })?)
        }
        (None, None) => None,
    };
    if let Some(s) = &summary {
        if s.trim().is_empty() {
            let why = "a summary replaces the turns of the range, so an empty one \
                 would leave the model nothing of them; nothing was compacted \
                 (give the summary text, or leave --summary out to compact with the profile)";
            match &args.summary_file {
                Some(f) if args.summary.is_none() => bail!("{} holds empty: {why}", f.display()),
                // The command line's own value: bad usage.
                _ => return Err(super::usage(format!("--summary is empty: {why}"))),
            }
        }
    }
    let request = CompactRequest {
        profile: args.profile.clone(),
        from: args.from,
        to: args.to,
        keep_last: args.keep_last,
        summary,
        dry_run: args.dry_run,
        source: None,
    };
    let mut summarize = profile_summarizer_for(&store, args.profile.as_deref());
    // The conversation held from before the range is resolved until the
    // compaction is appended: the turns it names are those it appends to.
    let mut conversation = store.conversation(&id)?;
    let out = conversation.compact(&request, &mut summarize)?;
    conversation.close();
    let report = CompactReport::new(id, out);
    if args.json {
        crate::jsonln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if report.dry_run {
        "would compact"
    } else {
        "compacted"
    };
    let grown = if report.grown() {
        format!(
            " (asked {}..={}, grown over overlapping summaries)",
            report.requested.0, report.requested.1
        )
    } else {
        String::new()
    };
    crate::outln!(
        "{verb} turns {}..={} of {} with profile {}{grown}",
        report.from_turn,
        report.to_turn,
        report.id,
        report.profile
    );
    for t in &report.turns {
        let what = if t.summarized {
            "replaced by the summary".to_string()
        } else {
            let mut parts = Vec::new();
            if t.reasoning > 0 {
                parts.push(format!("{} reasoning dropped", t.reasoning));
            }
            if t.requests > 0 {
                parts.push(format!("{} tool call requests stripped", t.requests));
            }
            if t.responses > 0 {
                parts.push(format!("{} tool responses stripped", t.responses));
            }
            if parts.is_empty() {
                "unchanged".to_string()
            } else {
                parts.join(", ")
            }
        };
        crate::outln!("  turn {:>4}: {:>3} events, {what}", t.turn, t.events);
    }
    if report.dry_run && report.summary.as_deref() == Some("") {
        crate::outln!("  (the summary is generated only when the compaction is made)");
    }
    let (before, after) = (
        report.estimated_tokens_before,
        report.estimated_tokens_after,
    );
    let pct = if before > 0 {
        100.0 * (before as f64 - after as f64) / before as f64
    } else {
        0.0
    };
    crate::outln!(
        "estimated tokens of the view (characters / 4): {before} -> {after} ({pct:.0}% less)"
    );
    Ok(ExitCode::SUCCESS)
}
