//! The jp-store engine's links to the world outside a store: what needs a
//! file walker, MIME types, an HTTP client, child processes or another
//! tool's file format. The core (`jpstore-engine`) builds without any of
//! them, so an agent that embeds the log and the view pays for none of this
//! crate unless it asks for it.
//!
//! - [`attach`]: files and directories as resources of one request (walk
//!   honouring `.gitignore`, MIME types, `file://` URIs; one blob batch and
//!   one append), and [`attach::resolve`] of a `file://` resource.
//! - [`blob_files`]: files a user names stored as blobs (one loose object,
//!   or one pack for several).
//! - [`summarizer`]: the summary of a compaction's range from a profile's
//!   summary table: a command (raw events on stdin) or an OpenAI-compatible
//!   endpoint; [`summarizer::profile_summarizer`] is the callback the
//!   engine's compaction takes.
//! - [`provider`]: the view as the request body of Anthropic's Messages API
//!   or OpenAI's Chat Completions API.
//! - [`jp`]: JP's conversation files: finding, reading and importing them
//!   (the whole pipeline: batches of one pack each, with progress and a
//!   report), and writing them back.
//! - [`user_file`]: reading the files and streams a user names, bounded and
//!   type-checked (never blocking on a FIFO, never reading a device).

pub mod attach;
pub mod blob_files;
pub mod jp;
pub mod provider;
pub mod summarizer;
pub mod user_file;
