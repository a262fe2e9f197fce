//! `jp-store export`: plain JSON or JP's files.

use super::{open_store, parse_id, write_file_atomically};
use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use jpstore_engine::export::{conversation_json, ContentMode};
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
    /// out, with --format ndjson only).
    id: Option<String>,
    /// The output format.
    #[arg(long, value_enum, default_value_t = ExportFormat::Json)]
    format: ExportFormat,
    /// For `json` and `ndjson`: write to this file instead of standard
    /// output (replaced atomically). For `jp`: the conversations directory (a workspace's
    /// `.jp/conversations`; default: the current directory) in which the
    /// conversation's directory is written as JP keeps it: its imported name
    /// (else `<id>-<title slug>`), under `.archive/` if it was archived; its
    /// files must not exist.
    #[arg(long)]
    out: Option<PathBuf>,
    /// For `json`: leave content as {"$blob", "size"} references instead of
    /// inlining it (no blob is read).
    #[arg(long)]
    refs: bool,
}

pub fn export(dir: &super::StoreLocation, args: ExportArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    if args.format == ExportFormat::Ndjson {
        return export_ndjson(&store, args);
    }
    let Some(id) = &args.id else {
        bail!("export needs a conversation id (only --format ndjson exports every conversation)");
    };
    let conv = store.read(&parse_id(id)?)?;
    let mode = if args.refs {
        ContentMode::Refs
    } else {
        ContentMode::Inline
    };
    let doc = match args.format {
        // (ndjson returned above)
        ExportFormat::Json | ExportFormat::Ndjson => conversation_json(&store, &conv, mode)?,
        ExportFormat::Jp => {
            if args.refs {
                bail!("--refs applies to --format json only: JP files hold their content");
            }
            let files = jpstore_integrations::jp::export::jp_files(&store, &conv)?;
            let conversations = args.out.unwrap_or_else(|| PathBuf::from("."));
            let out = files.dir_in(&conversations);
            let written = jpstore_integrations::jp::export::write_jp_dir(&out, &files)?;
            for w in &written {
                crate::outln!("{}", w.display());
            }
            if !files.lossy.is_empty() {
                eprintln!(
                    "jp-store: the export is lossy: JP's format cannot express {} item(s):",
                    files.lossy.len()
                );
                for l in &files.lossy {
                    eprintln!("  - {l}");
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
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

/// `export --format ndjson [ID]`: one line per conversation, written as
/// each is read (memory holds one conversation at a time).
fn export_ndjson(store: &jpstore_engine::Store, args: ExportArgs) -> Result<ExitCode> {
    use jpstore_engine::stream::write_conversation_line;
    if args.refs {
        bail!("--refs applies to --format json only: a stream holds its content, to be imported elsewhere");
    }
    let ids = match &args.id {
        Some(id) => vec![parse_id(id)?],
        None => store.ids()?,
    };
    let progress = crate::output::Progress::new("exporting");
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
