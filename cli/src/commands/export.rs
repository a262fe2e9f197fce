//! `jp-store export`: plain JSON or JP's files.

use super::{open_store, parse_id, write_file_atomically};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use jpstore_engine::export::ContentMode;
use jpstore_engine::internal::export::conversation_json;
use jpstore_engine::internal::StoreInterior as _;
use jpstore_integrations::jp::export_dir::FileWritten;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// One JSON document: id, metadata, base config and the events (plain,
    /// without JP's base64).
    Json,
    /// A JP conversation directory (events.json, metadata.json and, in that
    /// layout, base_config.json) that JP can open.
    Jp,
    /// NDJSON: one conversation a line (the `json` form, compact, content
    /// inline), of the conversation named or, without an id, of every
    /// conversation of the store: a stream that `import` reads back (`-`
    /// for standard input), to move or back up a store as one file.
    Ndjson,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The conversation id (every conversation of the store when it is left
    /// out, with --format ndjson or jp).
    #[arg(value_parser = crate::commands::conversation_id)]
    id: Option<String>,
    /// The output format.
    #[arg(long, value_enum, default_value_t = ExportFormat::Json)]
    format: ExportFormat,
    /// For `json` and `ndjson`: write to this file instead of standard
    /// output (replaced atomically). For `jp`: the conversations directory (a
    /// workspace's `.jp/conversations`; default: the current directory) in
    /// which each conversation's directory is written as JP keeps it: its
    /// imported name (else `<id>-<title slug>`), under `.archive/` if it was
    /// archived. Files that already hold the export's bytes are left
    /// untouched (their times too), so exporting into the workspace the
    /// conversations came from changes only what changed (the files written
    /// are printed; when none is, a note says nothing changed); a file that
    /// holds other bytes is refused (see --replace), and so is a
    /// conversation that has another directory there (JP would find it
    /// twice).
    #[arg(long)]
    out: Option<PathBuf>,
    /// For `jp`: replace the conversation's files that hold other bytes than
    /// the export (each replaced whole: written beside it, synced, renamed
    /// over it, keeping its mode), and remove a `base_config.json` the
    /// export has none of. New files get the modes the umask gives.
    /// Without it, such a conversation is refused, nothing of it written.
    #[arg(long)]
    replace: bool,
    /// For `json`: leave content as {"$blob", "size"} references instead of
    /// inlining it (no blob is read).
    #[arg(long)]
    refs: bool,
}

pub fn export(dir: &super::StoreLocation, args: ExportArgs) -> Result<ExitCode> {
    if args.replace && args.format != ExportFormat::Jp {
        return Err(super::usage("--replace applies to --format jp only"));
    }
    let store = open_store(dir)?;
    match args.format {
        ExportFormat::Ndjson => return export_ndjson(&store, args),
        ExportFormat::Jp => return export_jp(&store, args),
        ExportFormat::Json => {}
    }
    let Some(id) = &args.id else {
        return Err(super::usage(
            "export needs a conversation id (--format ndjson and jp export every conversation)",
        ));
    };
    let conv = store.read(&parse_id(id)?)?;
    super::warn_torn_tail(&conv.id, conv.torn_tail);
    let mode = if args.refs {
        ContentMode::Refs
    } else {
        ContentMode::Inline
    };
    let doc = conversation_json(&store, &conv, mode)?;
    let mut bytes = serde_json::to_vec_pretty(&doc)?;
    bytes.push(b'\n');
    match args.out {
        None => std::io::stdout()
            .lock()
            .write_all(&bytes)
            .context("writing to standard output")?,
        Some(path) => write_file_atomically(&path, &bytes)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `export --format jp [ID]`: the conversation's directory, or every
/// conversation's, written into the conversations directory; a
/// conversation that cannot be written is named and the others are
/// (exit 1).
fn export_jp(store: &jpstore_engine::Store, args: ExportArgs) -> Result<ExitCode> {
    use jpstore_integrations::jp::export_dir::{jp_dirs, other_dirs_of};
    if args.refs {
        return Err(super::usage(
            "--refs applies to --format json only: JP files hold their content",
        ));
    }
    let conversations = args.out.clone().unwrap_or_else(|| PathBuf::from("."));
    let ids = match &args.id {
        Some(id) => vec![parse_id(id)?],
        None => store.ids()?,
    };
    let found = jp_dirs(&conversations)?;
    let mut progress =
        crate::output::Progress::new("exporting", crate::output::Unit::Items("conversation"));
    let (mut exported, mut written, mut unchanged, mut failed) = (0usize, 0usize, 0usize, 0usize);
    for (i, id) in ids.iter().enumerate() {
        let result = store.read(id).map_err(anyhow::Error::from).and_then(|conv| {
            if let Some(w) = super::torn_tail_warning(id, conv.torn_tail) {
                progress.eprintln(&w);
            }
            let files = jpstore_integrations::jp::export::jp_files(store, &conv)?;
            let dir = files.dir_in(&conversations);
            let others = other_dirs_of(&found, id, &dir);
            if !others.is_empty() {
                let others: Vec<String> = others.iter().map(|d| d.display().to_string()).collect();
                bail!(
                    "conversation {id} is also in {}, which JP would find beside {}: move or remove it first",
                    others.join(", "),
                    dir.display()
                );
            }
            let done = write_jp_dir(&dir, &files, args.replace)?;
            Ok((files, done))
        });
        let (files, done) = match result {
            Ok(r) => r,
            // Of every conversation, one removed since they were listed is
            // left out, and one that cannot be exported is named and the
            // others go on; one named is the command's error, and so is a
            // failed sync (the disk's, which no later write should trust).
            Err(e) if args.id.is_none() && !is_sync_failure(&e) => {
                let gone = e
                    .downcast_ref::<jpstore_engine::error::Error>()
                    .is_some_and(|e| store.gone_since_listed(id, e));
                if !gone {
                    // Printed whatever the verbosity, as an error is.
                    progress.eprintln(&format!("jp-store: error: {id}: {}", crate::message(&e)));
                    failed += 1;
                }
                continue;
            }
            Err(e) => return Err(e),
        };
        exported += 1;
        for (path, w) in &done {
            match w {
                FileWritten::Unchanged => unchanged += 1,
                FileWritten::Removed => {
                    written += 1;
                    progress.println(&format!("removed {}", path.display()));
                }
                FileWritten::Created | FileWritten::Replaced => {
                    written += 1;
                    crate::outln!("{}", path.display());
                }
            }
        }
        if !files.lossy.is_empty() {
            progress.eprintln(&format!(
                "jp-store: warning: {id}: the export is lossy: JP's format cannot express {}:\n{}",
                crate::output::count_of(files.lossy.len(), "item"),
                files
                    .lossy
                    .iter()
                    .map(|l| format!("  - {l}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
        progress.update(i as u64 + 1, ids.len() as u64);
    }
    progress.finish();
    let summary = format!(
        "exported {}: {} written, {unchanged} unchanged{}",
        crate::output::count_of(exported, "conversation"),
        crate::output::count_of(written, "file"),
        match failed {
            0 => String::new(),
            n => format!(", {n} not exported"),
        }
    );
    if written == 0 && exported > 0 {
        // Nothing is printed on standard output then: say why.
        crate::output::note(&format!(
            "nothing changed: the files in {} already hold the export ({summary})",
            conversations.display()
        ));
    } else {
        crate::output::detail(&summary);
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn is_sync_failure(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<jpstore_engine::error::Error>(),
        Some(jpstore_engine::error::Error::SyncFailed { .. })
    )
}

/// [`write_jp_dir`](jpstore_integrations::jp::export_dir::write_jp_dir),
/// a file refused for its bytes named with the way to replace it.
fn write_jp_dir(
    dir: &std::path::Path,
    files: &jpstore_integrations::jp::export::JpFiles,
    replace: bool,
) -> Result<Vec<(PathBuf, FileWritten)>> {
    use jpstore_engine::error::Error;
    jpstore_integrations::jp::export_dir::write_jp_dir(dir, files, replace).map_err(|e| match e {
        Error::AlreadyExists { path } => anyhow::anyhow!(
            "{} holds other bytes than the export (--replace replaces the conversation's files; nothing of it was written)",
            path.display()
        ),
        e => e.into(),
    })
}

/// `export --format ndjson [ID]`: one line per conversation, written as
/// each is read (memory holds one conversation at a time).
fn export_ndjson(store: &jpstore_engine::Store, args: ExportArgs) -> Result<ExitCode> {
    use jpstore_engine::internal::stream::write_conversation_line;
    if args.refs {
        return Err(super::usage(
            "--refs applies to --format json only: a stream holds its content, to be imported elsewhere",
        ));
    }
    let ids = match &args.id {
        Some(id) => vec![parse_id(id)?],
        None => store.ids()?,
    };
    let progress =
        crate::output::Progress::new("exporting", crate::output::Unit::Items("conversation"));
    let mut exported = 0;
    let mut write_all = |out: &mut dyn Write| -> Result<()> {
        for (i, id) in ids.iter().enumerate() {
            let conv = match store.read(id) {
                Ok(conv) => conv,
                // Of every conversation, one removed since they were listed
                // is left out; one named is the command's error.
                Err(e) if args.id.is_none() && store.gone_since_listed(id, &e) => continue,
                Err(e) => return Err(e.into()),
            };
            if let Some(w) = super::torn_tail_warning(id, conv.torn_tail) {
                progress.eprintln(&w);
            }
            write_conversation_line(store, &conv, out)?;
            exported += 1;
            progress.update(i as u64 + 1, ids.len() as u64);
        }
        Ok(())
    };
    match &args.out {
        None => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            write_all(&mut out)?;
            out.flush().context("writing to standard output")?;
        }
        Some(path) => super::write_file_atomically_with(path, &mut write_all)?,
    }
    crate::output::detail(&format!("exported {exported} conversations"));
    Ok(ExitCode::SUCCESS)
}
