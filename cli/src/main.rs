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

use clap::{CommandFactory, Parser, Subcommand};

use commands::{AttachArgs, CompactArgs, ExportArgs, ForkArgs, ImportArgs, NewArgs, StoreLocation};

/// An embedded, event-sourced store for the conversations of LLM agent tools,
/// with a SHA-256 content-addressable blob store.
///
/// Exit status: 0 on success, 1 when the work failed, 2 on bad usage.
/// `jp-store help COMMAND` (or `COMMAND --help`) explains a command.
#[derive(Parser, Debug)]
#[command(name = "jp-store", version, about, long_about)]
struct Cli {
    /// The store: a directory, a file:// URL of one, or s3://BUCKET/PREFIX.
    ///
    /// A store on S3 takes its endpoint, region and credentials from AWS_ENDPOINT_URL, AWS_REGION,
    /// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ALLOW_HTTP, over the `[s3]`
    /// table of the user configuration file: $JP_STORE_CONFIG, else
    /// $XDG_CONFIG_HOME/jp-store/config.toml or ~/.config/jp-store/config.toml.
    /// A URL of another kind is refused rather than taken for a directory name.
    #[arg(
        long,
        global = true,
        help_heading = GLOBAL,
        env = "JP_STORE_DIR",
        default_value = commands::DEFAULT_STORE,
        value_name = "DIR|URL",
        value_parser = parse_store_location
    )]
    store: StoreLocation,

    /// Where a store on S3 keeps a local cache of its immutable objects.
    ///
    /// The cache holds blobs, packs and log segments. Default: JP_STORE_CACHE_DIR, else
    /// cache_dir of the `[s3]` table of the user configuration file, else
    /// $XDG_CACHE_HOME/jp-store, or ~/.cache/jp-store; one subdirectory per
    /// endpoint, bucket and prefix.
    // The variable is read with the file (`S3Config::with_env`), not by
    // clap: `--no-cache` wins over it rather than conflicting with it.
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "DIR")]
    cache_dir: Option<std::path::PathBuf>,

    /// The bound of the cache of each store on S3 ("512 MiB", "2GiB", bytes).
    ///
    /// The least recently used entries are evicted past it.
    /// Default: JP_STORE_CACHE_SIZE, else cache_size of the `[s3]` table of
    /// the user configuration file, else 1 GiB.
    #[arg(long, global = true, help_heading = GLOBAL, value_name = "SIZE", value_parser = parse_cache_size)]
    cache_size: Option<u64>,

    /// Use no cache directory for a store on S3 (whatever JP_STORE_CACHE_DIR
    /// or the user configuration file says).
    #[arg(long, global = true, help_heading = GLOBAL, conflicts_with = "cache_dir")]
    no_cache: bool,

    /// Print no progress and no notes: only results, warnings and errors.
    #[arg(short, long, global = true, help_heading = GLOBAL, conflicts_with = "verbose")]
    quiet: bool,

    /// Print notes of what is being done, and progress as lines when
    /// standard error is not a terminal.
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    verbose: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create a store in a new or empty directory and print its location.
    ///
    /// A directory that is already a store is left as it is (exit 0, with a
    /// note); any other non-empty directory is refused (exit 1), naming
    /// some of what it holds. Every other command refuses a directory that
    /// is not a store.
    Init,
    /// Import JP conversations (workspaces, directories) or jp-store exports.
    ///
    /// Import JP conversations (events.json, metadata.json, base_config.json),
    /// undoing JP's base64; content and base configs go into the blob store.
    /// Each file must be a regular file of at most 2 GiB (not a FIFO, a
    /// device or a symbolic link). Exit 1 if any directory was not valid JP
    /// data (the others are imported).
    Import(ImportArgs),
    /// Create a conversation and print its id.
    New(NewArgs),
    /// Append events read from standard input, as one durable batch.
    ///
    /// The events are read as JSON (one array, or one object per line) and
    /// appended as one batch: all or nothing.
    ///
    /// Events are JP's entries without base64. Content given inline (tool
    /// response text, resource text or base64 `blob`) is moved into the blob
    /// store; {"$blob": "<sha256>", "size": N} refers to content already
    /// there. A missing `timestamp` is set to now. The batch is acknowledged
    /// (exit 0) only once it is durable; on any error nothing is appended.
    /// Standard input is read up to 1 GiB; more is refused. On a terminal,
    /// a line on standard error says so: type the events, then Ctrl-D.
    #[command(after_long_help = EVENT_FORMAT)]
    Append {
        /// The conversation id.
        #[arg(value_parser = crate::commands::conversation_id)]
        id: String,
        /// Refuse an entry of a type this build does not know (exit 1,
        /// nothing appended) instead of storing it with a warning.
        #[arg(long)]
        strict: bool,
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
        #[arg(value_parser = crate::commands::conversation_id)]
        id: String,
        /// Show what the model sees: compactions applied, interrupted tool
        /// calls answered.
        #[arg(long)]
        compacted: bool,
    },
    /// Print the view an LLM is sent, as JSON or a provider's request body.
    ///
    /// Print the view an LLM is sent: the conversation events with
    /// compactions applied and orphaned tool calls repaired (config deltas,
    /// inquiries and compactions are not part of it).
    View {
        /// The conversation id.
        #[arg(value_parser = crate::commands::conversation_id)]
        id: String,
        /// The output format.
        #[arg(long, value_enum, default_value_t = commands::ViewFormat::Json)]
        format: commands::ViewFormat,
        /// Show what is stored by reference, without reading it: content as
        /// {"$blob": "<sha256>", "size": N}, and the text of each entry
        /// (messages, reasoning, tool arguments and results) as
        /// {"$text": "<entry>/<field>", "size": N} (the entry's 0-based
        /// index and the field), in a log of format 2; the text compaction
        /// writes (summaries) stays inline. For a look at the shape and
        /// sizes of a conversation, not for a model (json only; `export
        /// --refs` keeps the text).
        #[arg(long)]
        refs: bool,
    },
    /// Search the text of conversations for a regular expression, as grep does.
    ///
    /// PATTERN is a regular expression (-F: a fixed string), searched as
    /// grep searches files: the stored log, every entry
    /// (turns a compaction covers too), and the text content its entries
    /// reference in the blob store. Prints each matching line as `ID turn T
    /// entry E PART:LINE: TEXT`.
    ///
    /// Searched: messages (chat_request, chat_response), reasoning,
    /// structured data, tool call arguments (one `key: value` line each),
    /// tool results, text resources (by their URI), inquiry questions and
    /// answers, compaction summaries, and entries of other types as JSON.
    /// Not searched: turn starts, config deltas, titles, and binary content
    /// (resources given as `blob`, content holding a NUL byte). Turns and
    /// entries are numbered from 0, as print and export number them; lines
    /// from 1 within each part. A long line is shown as 200 characters
    /// around its match (--json gives it whole).
    ///
    /// Conversations are searched on all cores and printed in id order
    /// once all are searched; each blob is read and decompressed once
    /// however many entries reference it, in the order of the blob store.
    /// A conversation or blob that cannot be read is
    /// reported and the rest searched. Exit status: 0 when a line matched,
    /// 1 when none did, 2 on an error (bad pattern, unknown id, damage
    /// found), as grep's.
    Grep(commands::GrepArgs),
    /// Compact a conversation without losing anything, or undo a compaction.
    ///
    /// Compact a conversation without losing anything: append a compaction
    /// that changes what the model sees (strip reasoning and tool calls, or
    /// replace turns with a summary), or revoke one with --undo.
    Compact(CompactArgs),
    /// Create a conversation from another's history or its last N turns.
    ///
    /// Create a new conversation from another's whole history or its last N
    /// turns (content is shared, not copied), optionally compacted. Prints
    /// the new id.
    Fork(ForkArgs),
    /// Copy conversations and their blobs from a store to another.
    ///
    /// Copy conversations, with every blob they reference, from the store
    /// SRC to the store DST (each a directory or s3://BUCKET/PREFIX; --store
    /// is not used). DST is made a store (with SRC's config.toml) if it is
    /// new or empty.
    ///
    /// A conversation absent at DST is created there with the same id and
    /// the same log bytes; one whose log at DST is a prefix of SRC's is
    /// extended with the records it lacks; one that is the same is left
    /// (a second copy sends nothing). One whose log at DST diverged from
    /// SRC's is a conflict: it is named and left as it is, never
    /// overwritten. Blobs DST has are not sent; the others are stored
    /// before the records that reference them. Quarantine is not copied.
    ///
    /// Exit status: 0 when every conversation is at DST as at SRC; 1 when
    /// any was a conflict or could not be copied (the others are copied;
    /// the list is printed, with what to do about a conflict: fork it at
    /// SRC and copy the fork, or remove it at DST and copy again).
    Copy(commands::CopyArgs),
    /// Export conversations: plain JSON, JP's files, or an NDJSON stream.
    Export(ExportArgs),
    /// Counts and sizes of the store, or of one conversation.
    ///
    /// Counts and sizes of the whole store, or of one conversation, with
    /// the bytes and estimated tokens the view saves by compaction and by
    /// deduplication. Of the whole store, a conversation that cannot be read
    /// or whose config holds a bad setting is named and left out, and the
    /// exit status is 1; so is a referenced blob whose size cannot be read
    /// (missing, or damaged where its size is kept).
    Stats {
        /// Only this conversation.
        #[arg(value_parser = crate::commands::conversation_id)]
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
        #[arg(value_parser = crate::commands::conversation_id)]
        id: String,
    },
    /// Remove blobs no conversation references; safe while others write.
    ///
    /// Remove blobs no conversation references (marked from the logs, no
    /// blob read): loose objects are deleted, mostly dead packs rewritten;
    /// so is what writers that failed or were stopped left (directories
    /// without a log, temp files). Safe while others write: appends wait
    /// while gc runs.
    Gc(commands::GcArgs),
    /// Check the store; --repair moves damage into quarantine/.
    ///
    /// Check every conversation log and blob reference (--read-data: every
    /// blob's bytes too); --repair cuts torn tails and moves damage into
    /// quarantine/. Exit 1 when damage was found.
    Fsck(commands::FsckArgs),
    /// Rewrite packs and logs of older formats in the current ones.
    ///
    /// Rewrite packs and conversation logs of older formats in the formats
    /// this build writes (each log's old bytes kept in quarantine/);
    /// --dry-run says what would be rewritten. Stores that are current are
    /// left as they are.
    Upgrade(commands::UpgradeArgs),
    /// Run the built-in demonstration on an embedded sample conversation.
    ///
    /// Run the built-in demonstration on the embedded sample conversation:
    /// create a store, append the conversation, print it, export it and
    /// check the export against the input.
    Demo {
        /// Where to create the demonstration store, kept afterwards: a new or
        /// empty directory (a used one is refused). Default: a temporary
        /// directory, removed when the demo ends.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Attach files and directories to a conversation, as one request.
    ///
    /// Attach files and directories to a conversation: one request whose
    /// resources are snapshots of the files (RFD 065), their content stored
    /// as one pack, appended as one durable record. Directories are walked
    /// recursively, honouring .gitignore and skipping hidden files; a path
    /// named here is always taken (a named link is followed). A symbolic
    /// link found in a directory is attached only if its target is inside
    /// that directory (--follow-links: wherever it is); links to
    /// directories found there are not followed. A path named that does
    /// not exist is an error (exit 1, nothing stored), as for `cp`, unless
    /// --skip-missing skips it with a warning. Unreadable files and links
    /// leaving the directory are skipped with a warning (exit 0), or with
    /// --strict abort the attach (exit 1, nothing appended). If every file
    /// is skipped, each is named and the attach fails (exit 1): nothing is
    /// appended or stored.
    Attach(AttachArgs),
    /// Print the current content of a file:// resource as a Resource object.
    ///
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
    /// Serve a read-only web view of the store on a loopback address.
    ///
    /// Serve a read-only web view of the store: the conversations (sorted,
    /// searched by title and content), each one as logged or as the model is sent it,
    /// statistics with their plots, and blob contents. Listens on a
    /// loopback address (port 7420 unless --addr says otherwise), prints
    /// its URL, writes nothing to the store, and stops on Ctrl-C.
    Serve(serve::ServeArgs),
    /// Print a shell completion script.
    ///
    /// For example, for bash:
    /// `jp-store completions bash > ~/.local/share/bash-completion/completions/jp-store`;
    /// for zsh, into a directory of `$fpath` as `_jp-store`; for fish:
    /// `jp-store completions fish > ~/.config/fish/completions/jp-store.fish`.
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page, or write one page per command into a directory.
    ///
    /// Print the manual page (roff) of jp-store, or with --dir write one
    /// page per command into a directory (jp-store.1, jp-store-append.1,
    /// ...). Read it with `jp-store man | man -l -`.
    Man {
        /// Write every page into this directory instead.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

impl Command {
    /// Whether the command prints its result as JSON (no progress then).
    fn json(&self) -> bool {
        match self {
            Command::Import(a) => a.json,
            Command::New(a) => a.json,
            Command::Append { json, .. } | Command::Ls { json } | Command::Stats { json, .. } => {
                *json
            }
            Command::Compact(a) => a.json,
            Command::Fork(a) => a.json,
            Command::Copy(a) => a.json,
            Command::Gc(a) => a.json,
            Command::Fsck(a) => a.json,
            Command::Upgrade(a) => a.json,
            Command::Grep(a) => a.json,
            Command::Attach(a) => a.json,
            Command::Blob(b) => b.json(),
            Command::Init
            | Command::Print { .. }
            | Command::View { .. }
            | Command::Export(_)
            | Command::Rm { .. }
            | Command::Demo { .. }
            | Command::Resolve { .. }
            | Command::Completions { .. }
            | Command::Man { .. }
            | Command::Serve(_) => false,
        }
    }
}

/// The events `append` reads: its `--help` and the manual pages show it.
/// The example is checked by a test (it is appended as it is).
pub(crate) const EVENT_FORMAT: &str = r#"Event format: one JSON object per entry, with its "type" and fields.
Every entry may have "timestamp" (UTC, "2026-05-29 19:42:36.5"; default:
now) and "metadata" (an object). TEXT is a JSON string; content given
inline is moved into the blob store.
  turn_start           -                         opens a turn
  chat_request         content: TEXT             the user's message
                       resources?: [RESOURCE]    attached files
                       author?, schema?
  chat_response        message: TEXT             the assistant's answer,
                       | reasoning: TEXT         or its reasoning,
                       | data: JSON              or structured output
  tool_call_request    id, name, arguments?: {}  a call of a tool
  tool_call_response   id, content: TEXT|[BLOCK] its result (answers a
                       is_error?: false          request of the same turn)
  inquiry_request      id, source: {}, question: {}
  inquiry_response     id, answer: JSON
  config_delta         delta: {}                 merged over the config so far
  compaction, compaction_undo                    written by `jp-store compact`
RESOURCE: {"uri", "text": TEXT | "blob": BASE64, "mimeType"?, "name"?}; a
BLOCK is {"type": "text", "text": TEXT} or another MCP content block.
Content stored already: {"$blob": "<sha256>", "size": N} for TEXT, BASE64.
Another type is stored as written, as no event (the view leaves it out):
append warns naming the nearest known type, and --strict refuses it.

Example, a turn with a tool call (jp-store append ID < turn.jsonl):
  {"type": "turn_start"}
  {"type": "chat_request", "content": "What is in this directory?"}
  {"type": "tool_call_request", "id": "c1", "name": "ls", "arguments": {}}
  {"type": "tool_call_response", "id": "c1", "content": "Cargo.toml\nsrc\n"}
  {"type": "chat_response", "message": "A Rust package: Cargo.toml and src/."}"#;

/// The heading of the options every command takes, shown after the
/// command's own.
const GLOBAL: &str = "Global options";

/// The store of the `--store` argument: a path, a `file://` URL of one, or
/// `s3://BUCKET/PREFIX`. Any other URL is refused, so that `gs://b/p` does
/// not become a directory named `gs:`.
fn parse_store_location(text: &str) -> Result<StoreLocation, String> {
    let Some((scheme, _)) = text.split_once("://") else {
        return Ok(StoreLocation::Dir(PathBuf::from(text)));
    };
    let is_scheme = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !is_scheme {
        return Ok(StoreLocation::Dir(PathBuf::from(text)));
    }
    if scheme.eq_ignore_ascii_case("file") {
        return url::Url::parse(text)
            .ok()
            .and_then(|u| u.to_file_path().ok())
            .map(StoreLocation::Dir)
            .ok_or_else(|| {
                format!(
                    "{text:?} is not a file:// URL of a local directory (file:///path/to/store)"
                )
            });
    }
    if scheme.eq_ignore_ascii_case("s3") {
        return jpstore_remote::S3Location::parse(text)
            .map(StoreLocation::S3)
            .map_err(|e| e.to_string());
    }
    Err(format!(
        "{scheme}:// stores are not supported by jp-store; \
         --store takes a directory, a file:// URL of one, or s3://BUCKET/PREFIX"
    ))
}

/// The value of `--cache-size`.
fn parse_cache_size(text: &str) -> Result<u64, String> {
    jpstore_remote::parse_size(text).ok_or_else(|| {
        format!("{text:?} is not a size: write it as \"512 MiB\", \"2GiB\", \"100MB\" or a number of bytes")
    })
}

/// The command line, or the exit of a command line clap refused: its help
/// and version as clap prints them, an error in the tool's one form,
/// `jp-store: error: ...` (exit 2).
fn parse_command_line() -> Cli {
    use clap::error::ErrorKind;
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => match e.kind() {
            ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
            _ => {
                let text = e.render().to_string();
                let text = text.strip_prefix("error: ").unwrap_or(&text);
                eprint!("jp-store: error: {text}");
                std::process::exit(e.exit_code());
            }
        },
    }
}

fn main() -> ExitCode {
    let cli = parse_command_line();
    let verbosity = match (cli.quiet, cli.verbose) {
        (true, _) => output::Verbosity::Quiet,
        (_, true) => output::Verbosity::Verbose,
        _ => output::Verbosity::Normal,
    };
    output::configure(verbosity, cli.command.json());
    commands::configure_cache(commands::CacheFlags {
        dir: cli.cache_dir,
        size: cli.cache_size,
        off: cli.no_cache,
    });
    let dir = &cli.store;
    let result = match cli.command {
        Command::Init => commands::init(dir),
        Command::Import(args) => commands::import(dir, args),
        Command::New(args) => commands::new(dir, args),
        Command::Append { id, strict, json } => commands::append(dir, &id, strict, json),
        Command::Ls { json } => commands::ls(dir, json),
        Command::Print { id, compacted } => commands::print(dir, &id, compacted),
        Command::View { id, format, refs } => commands::view(dir, &id, format, refs),
        Command::Grep(args) => commands::grep(dir, args),
        Command::Compact(args) => commands::compact(dir, args),
        Command::Fork(args) => commands::fork(dir, args),
        Command::Copy(args) => commands::copy(args),
        Command::Export(args) => commands::export(dir, args),
        Command::Stats { id, json, plot } => {
            commands::stats(dir, id.as_deref(), json, plot.as_deref())
        }
        Command::Rm { id } => commands::rm(dir, &id),
        Command::Gc(args) => commands::gc(dir, args),
        Command::Fsck(args) => commands::fsck(dir, args),
        Command::Upgrade(args) => commands::upgrade(dir, args),
        Command::Demo { dir } => demo::run(dir),
        Command::Attach(args) => commands::attach(dir, args),
        Command::Resolve { uri } => commands::resolve(&uri),
        Command::Blob(cmd) => commands::blob::run(dir, cmd),
        Command::Serve(args) => serve::run(dir, args),
        Command::Completions { shell } => completions(shell),
        Command::Man { dir } => man(dir.as_deref()),
    };
    let opened = commands::s3_requests();
    for (location, requests, hits) in &opened {
        let which = match opened.len() {
            1 => String::new(),
            _ => format!(" {location}"),
        };
        output::detail(&format!(
            "s3{which}: {requests}; {hits} objects from the cache"
        ));
    }
    match result {
        Ok(code) => code,
        Err(e) if broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let mut text = message(&e);
            // Another writer of a store on S3 appended first: the command,
            // run again, reads the conversation as it is now.
            if e.chain().any(append_conflict) {
                text.push_str(": run the command again");
            }
            crate::errln!("jp-store: error: {text}");
            // Bad usage found by the command, as clap's (exit 2).
            if e.downcast_ref::<commands::Usage>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}

/// Whether the command failed writing its output to a reader that went
/// away (`jp-store view ID | head`): not a failure of the command.
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        let kind = match cause.downcast_ref::<std::io::Error>() {
            Some(io) => Some(io.kind()),
            None => cause
                .downcast_ref::<serde_json::Error>()
                .and_then(serde_json::Error::io_error_kind),
        };
        kind == Some(std::io::ErrorKind::BrokenPipe)
    })
}

/// Whether `cause` is an append that another writer beat to the end of the
/// log (the engine's error, or one of the errors that wrap it whole).
fn append_conflict(cause: &(dyn std::error::Error + 'static)) -> bool {
    use jpstore_engine::compaction::CompactionError;
    use jpstore_engine::error::Error;
    use jpstore_engine::import::ImportError;
    use jpstore_integrations::attach::AttachError;
    use jpstore_integrations::jp::import::JpImportError;
    let engine =
        cause
            .downcast_ref::<Error>()
            .or_else(|| match cause.downcast_ref::<CompactionError>() {
                Some(CompactionError::Store(e)) => Some(e),
                _ => match cause.downcast_ref::<AttachError>() {
                    Some(AttachError::Store(e)) => Some(e),
                    _ => match cause.downcast_ref::<ImportError>() {
                        Some(ImportError::Store(e)) => Some(e),
                        _ => match cause.downcast_ref::<JpImportError>() {
                            Some(
                                JpImportError::Store(e)
                                | JpImportError::Import(ImportError::Store(e)),
                            ) => Some(e),
                            _ => None,
                        },
                    },
                },
            });
    matches!(engine, Some(Error::AppendConflict { .. }))
}

/// `jp-store completions SHELL`.
fn completions(shell: clap_complete::Shell) -> anyhow::Result<ExitCode> {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "jp-store", &mut out);
    std::io::Write::write_all(&mut std::io::stdout().lock(), &out)
        .unwrap_or_else(|e| output::exit_on_write_error(&e));
    Ok(ExitCode::SUCCESS)
}

/// `jp-store man [--dir DIR]`.
fn man(dir: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    use anyhow::Context;
    let command = Cli::command();
    let page = main_page(command.clone()).context("rendering the manual page")?;
    match dir {
        None => {
            std::io::Write::write_all(&mut std::io::stdout().lock(), &page)
                .unwrap_or_else(|e| output::exit_on_write_error(&e));
        }
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(command, dir)
                .with_context(|| format!("writing manual pages into {}", dir.display()))?;
            let main = dir.join("jp-store.1");
            std::fs::write(&main, &page).with_context(|| format!("writing {}", main.display()))?;
            output::detail(&format!("manual pages written into {}", dir.display()));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The page `jp-store.1`: clap's sections, and the event format `append`
/// reads (also in `jp-store-append.1`, which clap renders from `append
/// --help`), as written.
fn main_page(command: clap::Command) -> std::io::Result<Vec<u8>> {
    let man = clap_mangen::Man::new(command);
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    man.render_synopsis_section(&mut out)?;
    man.render_description_section(&mut out)?;
    man.render_options_section(&mut out)?;
    man.render_subcommands_section(&mut out)?;
    out.extend_from_slice(b".SH \"EVENT FORMAT\"\n.PP\n`jp-store append` reads:\n.nf\n");
    for line in EVENT_FORMAT.lines() {
        // roff: a backslash is written `\e`; a line beginning with a
        // control character is kept text by `\&`.
        let line = line.replace('\\', "\\e");
        if line.starts_with(['.', '\'']) {
            out.extend_from_slice(b"\\&");
        }
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.extend_from_slice(b".fi\n");
    man.render_version_section(&mut out)?;
    Ok(out)
}

/// The error and its causes, joined by `: `. The library errors already
/// show their source in their own message, so a cause whose text ends the
/// message so far is not repeated.
pub(crate) fn message(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        // A cause already said (an error names its source's message; a
        // backend's names the object's URL before it).
        let said = |t: &str| out.contains(t);
        if said(&text) || text.split_once(": ").is_some_and(|(_, rest)| said(rest)) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
