//! The jp-store engine: event model, conversation logs, config, projection,
//! compaction, deduplication and fsck/gc marking.
//!
//! - [`store`]: a store directory (blob store, conversations, workspace
//!   config) and the operations on it.
//! - [`append`]: an append as the command line does it, with the automatic
//!   compaction a completed turn may call for ([`Store::append_turn`]).
//! - [`conversation`]: one conversation's log of entries, its metadata, and
//!   the single writer with the append protocol.
//! - [`event`]: the event model, its JSON form and turn numbering.
//! - [`copy`]: conversations and their blobs from a store to another.
//! - [`export`]: the plain JSON form of a conversation; [`import`]: whole
//!   conversations stored in bulk (one pack, then each log published whole);
//!   [`stream`]: a store as one NDJSON stream, a conversation a line.
//! - [`projection`], [`compaction`], [`dedup`]: the view an LLM is sent.
//! - [`fsck`], [`gc`]: checking and repairing a store; removing unreferenced
//!   blobs safely while others write.
//! - [`search`]: a regular expression over the text of conversations
//!   (`jp-store grep`).
//! - [`stats`]: counts and context sizes of conversations (`jp-store
//!   stats`).
//! - [`upgrade`]: a conversation's version 1 log rewritten as version 2
//!   ([`Store::upgrade_log`]).
//! - [`config`], [`timestamp`]: config objects and the typed settings
//!   jp-store reads from them; JP's timestamps.
//!
//! Every byte on disk is specified in `format-spec.md`. All I/O inside a
//! store goes through the storage seam, `jpstore_blobstore::backend::Backend`:
//! the local file system (`FileBackend`), the simulated one that crashes
//! and injects faults in tests, or an object store (`MemoryBackend` in
//! tests). [`Store::open`] takes any of them; [`Store::open_dir`] is the
//! local directory.
//!
//! What needs the world outside the store (walking directories to attach
//! files, MIME types, summaries by a command or an HTTP endpoint, provider
//! request bodies, JP's files) is in the `jpstore-integrations` crate: this
//! one links no HTTP client, spawns no process and walks no directory.
//!
//! # Example
//!
//! A store, a conversation, a turn appended, and the view an LLM is sent:
//!
//! ```rust
//! use jpstore_engine::compaction::no_summarizer;
//! use jpstore_engine::event::{ChatRequest, ChatResponse, Entry, EventKind};
//! use jpstore_engine::event::{ToolCallRequest, ToolCallResponse};
//! use jpstore_engine::export::{render_view, view, ContentMode};
//! use jpstore_engine::timestamp::Timestamp;
//! use jpstore_engine::{NewConversation, Store, StoreOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let temporary = tempfile::tempdir()?;
//! let dir = temporary.path().join("store");
//! // Made if the directory is new or empty, opened if it is a store.
//! let (store, _made) = Store::init_new_dir(&dir, StoreOptions::default())?;
//!
//! // `create` returns the new conversation's writer, which holds its lock
//! // until it is dropped.
//! let writer = store.create(NewConversation {
//!     title: Some("first".into()),
//!     ..Default::default()
//! })?;
//! let id = writer.id().clone();
//! drop(writer);
//!
//! // A turn, built with the entries' constructors. Content (the tool's
//! // output) goes into the blob store; the log holds a reference to it.
//! let now = Timestamp::now();
//! let turn = vec![
//!     Entry::at(now, EventKind::TurnStart),
//!     Entry::at(now, ChatRequest::text("What is in Cargo.toml?")),
//!     Entry::at(now, ToolCallRequest::new("c1", "fs_read_file", serde_json::json!({"path": "Cargo.toml"}))?),
//!     Entry::at(now, ToolCallResponse::text("c1", "[package]\nname = \"demo\"")),
//!     Entry::at(now, ChatResponse::message("A package named demo.")),
//! ];
//! // One durable record; then the automatic compaction the conversation's
//! // settings may call for (none here).
//! let mut on_cut = |_: &jpstore_engine::CutTail| {}; // a crash's torn tail, cut first
//! let report = store.append_turn(&id, turn, now, &mut on_cut, &mut no_summarizer)?;
//! assert_eq!(report.append.entries, 5);
//!
//! // Read back (no lock needed), projected, and rendered with content inline.
//! let conversation = store.read(&id)?;
//! assert_eq!(conversation.state.turns.turns(), 1);
//! let view = view(&store, &conversation)?;
//! let json = render_view(&store, &view, ContentMode::Inline).to_value()?;
//! // The tool's output, read back from the blob store, as a list of blocks.
//! assert_eq!(json[3]["type"], "tool_call_response");
//! assert_eq!(json[3]["content"][0]["text"], "[package]\nname = \"demo\"");
//! # Ok(())
//! # }
//! ```
//!
//! The crate's `examples/check_store.rs` checks and repairs a store with
//! fsck; the `jpstore-integrations` crate's examples run an agent's loop
//! (compacting when a request goes over a token budget) and attach a
//! directory.

#![warn(missing_docs, unreachable_pub)]

pub mod append;
pub mod compaction;
pub mod config;
pub mod conversation;
pub mod copy;
pub mod dedup;
pub mod error;
pub mod event;
pub mod export;
pub mod fsck;
pub mod gc;
pub mod import;
pub mod json_text;
// The framing layer: public for the fuzz targets, the crash tests and the
// benches, which reach below the store; not part of the API.
#[doc(hidden)]
pub mod log;
mod parallel;
pub mod projection;
pub mod search;
pub mod stats;
pub mod store;
pub mod stream;
pub mod timestamp;
pub mod upgrade;

pub use append::{AppendReport, AutoCompaction};
pub use log::{CutTail, LogOptions};
pub use parallel::cores;
pub use store::{NewConversation, Store, StoreOptions};
