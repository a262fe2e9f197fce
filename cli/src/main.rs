//! The `jp-store` command: argument parsing and rendering only. All logic is
//! in the `jpstore-engine` and `jpstore-blobstore` libraries.

// The doc comments of the commands are their `--help` text, shown as
// written (`<sha256>` is a placeholder there, not an HTML tag).
#![allow(rustdoc::invalid_html_tags)]

mod commands;
mod demo;
mod interrupt;
mod output;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use commands::{AttachArgs, CompactArgs, ExportArgs, ForkArgs, ImportArgs, NewArgs};

/// An embedded, event-sourced store for the conversations of LLM agent tools,
/// with a SHA-256 content-addressable blob store.
///
/// Exit status: 0 on success, 1 when the work failed, 2 on bad usage.
#[derive(Parser, Debug)]
#[command(name = "jp-store", version, about, long_about)]
struct Cli {
    /// The store directory.
    #[arg(long, global = true, env = "JP_STORE_DIR", default_value = ".jp-store")]
    store: PathBuf,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a store in a new or empty directory and print its location.
    /// A directory that is already a store is left as it is (exit 0, with a
    /// note); any other non-empty directory is refused (exit 1), naming
    /// some of what it holds. Every other command refuses a directory that
    /// is not a store.
    Init,
    /// Import JP conversations (events.json, metadata.json, base_config.json),
    /// undoing JP's base64; content and base configs go into the blob store.
    /// Each file must be a regular file of at most 2 GiB (not a FIFO, a
    /// device or a symbolic link). Exit 1 if any directory was not valid JP
    /// data (the others are imported).
    Import(ImportArgs),
    /// Create a conversation and print its id.
    New(NewArgs),
    /// Append events, read from standard input as JSON (one array, or one
    /// object per line), as one durable batch: all or nothing.
    ///
    /// Events are JP's entries without base64. Content given inline (tool
    /// response text, resource text or base64 `blob`) is moved into the blob
    /// store; {"$blob": "<sha256>", "size": N} refers to content already
    /// there. A missing `timestamp` is set to now. The batch is acknowledged
    /// (exit 0) only once it is durable; on any error nothing is appended.
    /// Standard input is read up to 1 GiB; more is refused.
    Append {
        /// The conversation id.
        id: String,
        /// Print the outcome as JSON.
        #[arg(long)]
        json: bool,
    },
    /// List conversations (id, turns, events, last activity, title).
    Ls {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show a conversation for a person: turns, roles, tool calls, sizes.
    Print {
        /// The conversation id.
        id: String,
        /// Show what the model sees: compactions applied, interrupted tool
        /// calls answered.
        #[arg(long)]
        compacted: bool,
    },
    /// Print the view an LLM is sent: the conversation events with
    /// compactions applied and orphaned tool calls repaired (config deltas,
    /// inquiries and compactions are not part of it).
    View {
        /// The conversation id.
        id: String,
        /// The output format.
        #[arg(long, value_enum, default_value_t = commands::ViewFormat::Json)]
        format: commands::ViewFormat,
        /// Leave content as {"$blob", "size"} references: no blob is read
        /// (json only).
        #[arg(long)]
        refs: bool,
    },
    /// Compact a conversation without losing anything: append a compaction
    /// that changes what the model sees (strip reasoning and tool calls, or
    /// replace turns with a summary), or revoke one with --undo.
    Compact(CompactArgs),
    /// Create a new conversation from another's whole history or its last N
    /// turns (content is shared, not copied), optionally compacted. Prints
    /// the new id.
    Fork(ForkArgs),
    /// Export a conversation.
    Export(ExportArgs),
    /// Counts and sizes of the whole store, or of one conversation, with
    /// the bytes and estimated tokens the view saves by compaction and by
    /// deduplication. Of the whole store, a conversation that cannot be read
    /// or whose config holds a bad setting is named and left out, and the
    /// exit status is 1.
    Stats {
        /// Only this conversation.
        id: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Write an SVG plot of the estimated tokens per turn of the raw
        /// conversation and of its view (needs an id).
        #[arg(long, value_name = "FILE.svg", requires = "id")]
        plot: Option<std::path::PathBuf>,
    },
    /// Remove a conversation (its blobs stay until gc).
    Rm {
        /// The conversation id.
        id: String,
    },
    /// Remove blobs no conversation references (marked from the logs, no
    /// blob read): loose objects are deleted, mostly dead packs rewritten.
    /// Safe while others write: appends wait while gc runs.
    Gc(commands::GcArgs),
    /// Check every conversation log and blob reference (--read-data: every
    /// blob's bytes too); --repair cuts torn tails and moves damage into
    /// quarantine/. Exit 1 when damage was found.
    Fsck(commands::FsckArgs),
    /// Run the built-in demonstration on the embedded sample conversation:
    /// create a store, append the conversation, print it, export it and
    /// check the export against the input.
    Demo {
        /// Where to create the demonstration store (default: a new temp dir,
        /// removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Attach files and directories to a conversation: one request whose
    /// resources are snapshots of the files (RFD 065), their content stored
    /// as one pack, appended as one durable record. Directories are walked
    /// recursively, honouring .gitignore and skipping hidden files; a path
    /// named here is always taken (a named link is followed). A symbolic
    /// link found in a directory is attached only if its target is inside
    /// that directory (--follow-links: wherever it is); links to
    /// directories found there are not followed. Unreadable files and links
    /// leaving the directory are skipped with a warning (exit 0), or with
    /// --strict abort the attach (exit 1, nothing appended). If every file
    /// is skipped, each is named and the attach fails (exit 1): nothing is
    /// appended or stored.
    Attach(AttachArgs),
    /// Print the current content of a file:// resource as a Resource JSON
    /// object (uri canonicalised, mimeType, text or base64 blob, name
    /// relative to the current directory). Symbolic links in the path are
    /// followed (the uri printed is the target's): the URI names the file,
    /// as a path would.
    Resolve {
        /// The file:// URI.
        uri: String,
    },
    /// Low-level access to the blob store (plumbing).
    #[command(subcommand)]
    Blob(commands::blob::BlobCommand),
    /// Serve a read-only web view of the store: the conversations (sorted,
    /// searched by title), each one as logged or as the model is sent it,
    /// statistics with their plots, and blob contents. Listens on a
    /// loopback address (port 7420 unless --addr says otherwise), prints
    /// its URL, writes nothing to the store, and stops on Ctrl-C.
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let dir = &cli.store;
    let result = match cli.command {
        Command::Init => commands::init(dir),
        Command::Import(args) => commands::import(dir, args),
        Command::New(args) => commands::new(dir, args),
        Command::Append { id, json } => commands::append(dir, &id, json),
        Command::Ls { json } => commands::ls(dir, json),
        Command::Print { id, compacted } => commands::print(dir, &id, compacted),
        Command::View { id, format, refs } => commands::view(dir, &id, format, refs),
        Command::Compact(args) => commands::compact(dir, args),
        Command::Fork(args) => commands::fork(dir, args),
        Command::Export(args) => commands::export(dir, args),
        Command::Stats { id, json, plot } => {
            commands::stats(dir, id.as_deref(), json, plot.as_deref())
        }
        Command::Rm { id } => commands::rm(dir, &id),
        Command::Gc(args) => commands::gc(dir, args),
        Command::Fsck(args) => commands::fsck(dir, args),
        Command::Demo { dir } => demo::run(dir),
        Command::Attach(args) => commands::attach(dir, args),
        Command::Resolve { uri } => commands::resolve(&uri),
        Command::Blob(cmd) => commands::blob::run(dir, cmd),
        Command::Serve(args) => serve::run(dir, args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("jp-store: error: {}", message(&e));
            ExitCode::from(1)
        }
    }
}

/// The error and its causes, joined by `: `. The library errors already
/// show their source in their own message, so a cause whose text ends the
/// message so far is not repeated.
fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
