//! `jp-store attach` and `jp-store resolve`: files as resources.

use super::{open_store, parse_id, size};
use anyhow::{bail, Context, Result};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// The conversation id.
    #[arg(value_parser = crate::commands::conversation_id)]
    id: String,
    /// Files and directories to attach (directories are walked, honouring
    /// .gitignore and skipping hidden files; a path named here is always
    /// taken).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// The message of the request (default: empty).
    #[arg(short = 'm', long)]
    message: Option<String>,
    /// Abort, appending nothing, if any file cannot be read (default: skip
    /// it with a warning).
    #[arg(long)]
    strict: bool,
    /// Skip a path named here that does not exist, with a warning
    /// (default: it is an error, as for `cp`: nothing is attached).
    #[arg(long)]
    skip_missing: bool,
    /// Attach the target of every symbolic link found in a directory, even
    /// one outside it (default: a link whose target is outside the
    /// directory named here is skipped with a warning; a link that stays
    /// inside is attached, by its target's URI).
    #[arg(long)]
    follow_links: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `attach`: one request whose resources are snapshots of the files. Files
/// that cannot be read are reported on stderr and skipped (exit 0), or with
/// `--strict` abort the attach (exit 1, nothing appended).
pub fn attach(dir: &super::StoreLocation, args: AttachArgs) -> Result<ExitCode> {
    use jpstore_integrations::attach::{self, AttachError, AttachRequest, Links};
    let store = open_store(dir)?;
    let id = parse_id(&args.id)?;
    let cwd = std::env::current_dir().context("finding the current directory")?;
    let request = AttachRequest {
        paths: &args.paths,
        cwd: &cwd,
        links: if args.follow_links {
            Links::Follow
        } else {
            Links::StayInside
        },
        message: args.message,
        strict: args.strict,
        skip_missing: args.skip_missing,
    };
    let mut bar = crate::output::Progress::new("attaching", crate::output::Unit::Bytes);
    let result = attach::attach_paths(
        &store,
        &id,
        request,
        // Every reason is a warning, also when no file could be attached:
        // the error then only says what came of it.
        &mut |path, e| {
            bar.eprintln(&format!(
                "jp-store: warning: skipped {}: {e}",
                path.display()
            ))
        },
        &mut |p| {
            // Files are not sized before they are read (that would cost a
            // stat each): the total is estimated from the bytes per file so
            // far.
            let per_file = p.bytes_done / p.items_done.max(1) as u64;
            let total = per_file.saturating_mul(p.items_total as u64);
            bar.update(p.bytes_done, total.max(p.bytes_done));
        },
    );
    bar.finish();
    let outcome = match result {
        Ok(outcome) => outcome,
        Err(AttachError::NothingToAttach { skipped }) => bail!(
            "no file could be attached ({} skipped); nothing was appended",
            skipped.len()
        ),
        Err(e @ AttachError::Missing { .. }) => {
            bail!("{e} (--skip-missing attaches the others)")
        }
        Err(AttachError::Store(e @ jpstore_engine::error::Error::AppendConflict { .. })) => {
            return Err(anyhow::Error::new(e).context(format!(
                "nothing was appended: another writer appended first at each of {} attempts",
                jpstore_engine::internal::append::CONFLICT_ATTEMPTS
            )))
        }
        Err(e) => return Err(e.into()),
    };
    if args.json {
        crate::jsonln!("{}", serde_json::to_string(&outcome)?);
    } else {
        crate::outln!(
            "attached {} ({}, {} text) to {id} at turn {}: {}, pack {}{}",
            crate::output::count_of(outcome.files, "file"),
            size(outcome.bytes),
            outcome.text_files,
            outcome.turn,
            crate::output::count_of(outcome.new_blobs, "new blob"),
            size(outcome.pack_bytes),
            if outcome.skipped.is_empty() {
                String::new()
            } else {
                format!("; {} skipped", outcome.skipped.len())
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `resolve`: the current content of a `file://` resource as a Resource
/// JSON object.
pub fn resolve(uri: &str) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("finding the current directory")?;
    let resource = jpstore_integrations::attach::resolve(uri, &cwd).map_err(|e| match e {
        // The argument is not of the form asked for: bad usage.
        e @ jpstore_integrations::attach::AttachError::NotFileUri { .. } => {
            super::usage(e.to_string())
        }
        e => e.into(),
    })?;
    crate::jsonln!("{}", serde_json::to_string_pretty(&resource)?);
    Ok(ExitCode::SUCCESS)
}
