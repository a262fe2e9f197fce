//! The `jp-store` command: argument parsing and rendering only. All logic is
//! in the `jpstore-engine` and `jpstore-blobstore` libraries.

mod blob_commands;
mod demo;
mod output;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// An embedded, event-sourced store for the conversations of LLM agent tools,
/// with a SHA-256 content-addressable blob store.
#[derive(Parser, Debug)]
#[command(name = "jp-store", version, about, long_about = None)]
struct Cli {
    /// The store directory.
    #[arg(long, global = true, env = "JP_STORE_DIR", default_value = ".jp-store")]
    store: PathBuf,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create an empty store (if none exists) and print its location.
    Init,
    /// Run the built-in demonstration on the embedded sample workspace: store
    /// its files in a fresh store, read them back and verify the store.
    Demo {
        /// Where to create the demonstration store (default: a new temp dir,
        /// removed afterwards).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Low-level access to the blob store (plumbing).
    #[command(subcommand)]
    Blob(blob_commands::BlobCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Init => blob_commands::init(&cli.store),
        Command::Demo { dir } => demo::run(dir),
        Command::Blob(cmd) => blob_commands::run(&cli.store, cmd),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("jp-store: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
