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
//! - [`stream`]: importing NDJSON streams of conversations (the lines
//!   `export --format ndjson` writes), with the same report as a JP import.
//! - [`user_file`]: reading the files and streams a user names, bounded and
//!   type-checked (never blocking on a FIFO, never reading a device).
//!
//! # Example
//!
//! A directory attached to a conversation, and the view as the body of a
//! request to Anthropic's Messages API:
//!
//! ```rust
//! use jpstore_engine::{NewConversation, Store, StoreOptions};
//! use jpstore_integrations::attach::{attach, collect, Links};
//! use jpstore_integrations::provider::{provider_request_view, Provider};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let temporary = tempfile::tempdir()?;
//! let project = temporary.path().join("project");
//! std::fs::create_dir(&project)?;
//! std::fs::write(project.join("notes.md"), "# Notes\n\nShip on Friday.\n")?;
//!
//! let dir = temporary.path().join("store");
//! let (store, _made) = Store::init_new_dir(&dir, StoreOptions::default())?;
//! // The conversation's config: the model its requests name.
//! let config = serde_json::json!({"assistant": {"model": {"id": "anthropic/claude-sonnet-4-5"}}});
//! let conversation = store.create(NewConversation {
//!     base_config: config.as_object().cloned(),
//!     ..Default::default()
//! })?;
//! let id = conversation.id().clone();
//! conversation.close(); // it holds the conversation's lock, which `attach` takes
//!
//! // The files of the directory (walked honouring `.gitignore`, names
//! // relative to the second argument), stored as one pack and appended as
//! // the resources of one request.
//! let (files, skipped) = collect(&[project.clone()], &project, Links::StayInside);
//! assert!(skipped.is_empty());
//! let message = Some("When do we ship?".to_string());
//! let attached = attach(&store, &id, &files, message, false, &mut |_progress| {})?;
//! assert_eq!(attached.files, 1);
//!
//! let body = provider_request_view(&store, store.open_view(&id)?, Provider::Anthropic)?;
//! assert_eq!(body["model"], "claude-sonnet-4-5");
//! // One user message: the file as a document, then the question.
//! let content = &body["messages"][0]["content"];
//! assert_eq!(content[0]["type"], "document");
//! assert_eq!(content[0]["title"], "notes.md");
//! assert_eq!(content[1]["text"], "When do we ship?");
//! # Ok(())
//! # }
//! ```
//!
//! The crate's `examples/` hold an agent's loop (`agent_loop.rs`: a tool
//! call per turn, the request measured and compacted when over a token
//! budget) and `attach_directory.rs`.

#![warn(missing_docs, unreachable_pub)]

pub mod attach;
pub mod blob_files;
pub mod jp;
pub mod provider;
pub mod stream;
pub mod summarizer;
pub mod user_file;
