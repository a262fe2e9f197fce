//! The jp-store engine: event model, conversation logs, config, projection,
//! compaction, deduplication and fsck/gc marking.
//!
//! An embedder opens a [`Store`] (a directory, or through the
//! `jpstore-remote` crate a bucket on S3) and works on a conversation
//! through a [`ConversationHandle`]: [`Store::create`] makes one,
//! [`Store::conversation`] opens one. The handle holds the conversation's
//! lock, its folded state and its settings while it lives; it appends
//! (an entry, a batch, a turn with the automatic compaction it may call
//! for, decided in memory), gives the view an LLM is sent, compacts and
//! undoes, forks, and [`ConversationHandle::close`] writes its head cache
//! (dropping it only releases the lock).
//!
//! ```rust
//! use jpstore_engine::compaction::no_summarizer;
//! use jpstore_engine::event::{ChatRequest, ChatResponse, Entry, EventKind};
//! use jpstore_engine::export::ContentMode;
//! use jpstore_engine::{NewConversation, Store, StoreOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let temporary = tempfile::tempdir()?;
//! # let dir = temporary.path().join("store");
//! let store = Store::init_dir(&dir, StoreOptions::default())?;
//! let mut conversation = store.create(NewConversation::default())?;
//! let turn = [
//!     Entry::now(EventKind::TurnStart),
//!     Entry::now(ChatRequest::text("What is in Cargo.toml?")),
//!     Entry::now(ChatResponse::message("A package named demo.")),
//! ];
//! conversation.append_turn(turn, &mut no_summarizer)?;
//! let view = conversation.view()?.render(ContentMode::Inline)?;
//! println!("{}", String::from_utf8(view)?);
//! conversation.close();
//! # Ok(())
//! # }
//! ```
//!
//! The face of the crate, all an embedder needs:
//!
//! - [`Store`] (open or create a store: a directory, or through the
//!   `jpstore-remote` crate a bucket on S3), and [`ConversationHandle`]:
//!   append, view, compact and undo, fork, close.
//! - [`event`]: the entries of a log and their typed constructors;
//!   [`conversation`]: a conversation's id, metadata and folded state;
//!   [`timestamp`]: JP's timestamps.
//! - [`export`]: the view an LLM is sent ([`export::ConversationView`]),
//!   rendered with content as references or inline; [`compaction`]: what
//!   to compact, the summarizer it may call, what it reports.
//! - The operations on a store, each a function with its own options,
//!   report and error: [`fsck::run`] (check and repair), [`gc::run`]
//!   (remove unreferenced blobs while others write), [`copy::run`]
//!   (conversations and their blobs to another store), [`upgrade::run`]
//!   (older formats rewritten), [`import::run`] (whole conversations in
//!   bulk), [`search`] (a regular expression over conversations' text) and
//!   [`stats`] (counts and context sizes).
//! - [`error`]: the store's error, which names no operation (the
//!   operations' own errors wrap it).
//!
//! Below the face, the `internal` module (hidden from this documentation,
//! outside the API's promise) is what the workspace's other crates, fuzz
//! targets, benches and tests reach: the framing layer, the codecs, the
//! projection's plan, the log writer.
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
//! # The conversation handle, use by use
//!
//! Each example below runs as it is (a doc test); they share this start:
//! a store in a new directory.
//!
//! **Create, and append a turn.** The turn is one durable record (one
//! `fdatasync`); content (the tool's output) goes into the blob store
//! first, the log holds a reference to it. The automatic compaction a
//! completed turn may call for is decided from the state and settings the
//! handle holds (off by default: nothing read).
//!
//! ```rust
//! use jpstore_engine::compaction::no_summarizer;
//! use jpstore_engine::event::{ChatRequest, ChatResponse, Entry, EventKind};
//! use jpstore_engine::event::{ToolCallRequest, ToolCallResponse};
//! use jpstore_engine::{AutoCompaction, NewConversation, Store, StoreOptions};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let temporary = tempfile::tempdir()?;
//! let store = Store::init_dir(&temporary.path().join("store"), StoreOptions::default())?;
//! let mut conversation = store.create(NewConversation {
//!     title: Some("first".into()),
//!     ..Default::default()
//! })?;
//! let args = serde_json::json!({"path": "Cargo.toml"});
//! let turn = vec![
//!     Entry::now(EventKind::TurnStart),
//!     Entry::now(ChatRequest::text("What is in Cargo.toml?")),
//!     Entry::now(ToolCallRequest::new("c1", "fs_read_file", args)?),
//!     Entry::now(ToolCallResponse::text("c1", "[package]\nname = \"demo\"")),
//!     Entry::now(ChatResponse::message("A package named demo.")),
//! ];
//! let report = conversation.append_turn(turn, &mut no_summarizer)?;
//! assert_eq!(report.append.entries, 5);
//! assert!(matches!(report.auto_compaction, AutoCompaction::NotDue));
//! // One entry alone, or a batch without the automatic compaction.
//! conversation.append([Entry::now(ChatRequest::text("And README.md?"))])?;
//! assert_eq!(conversation.state().turns(), 1);
//! conversation.close();
//! # Ok(())
//! # }
//! ```
//!
//! **Open it again, and view it** (one plan of the view, rendered with
//! content as references, no blob read, or inline; the
//! `jpstore-integrations` crate's provider bodies take the same
//! [`export::ConversationView`]).
//!
//! ```rust
//! # use jpstore_engine::compaction::no_summarizer;
//! # use jpstore_engine::event::{ChatRequest, ChatResponse, Entry, EventKind, ToolCallRequest, ToolCallResponse};
//! # use jpstore_engine::{NewConversation, Store, StoreOptions};
//! use jpstore_engine::export::ContentMode;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let temporary = tempfile::tempdir()?;
//! # let store = Store::init_dir(&temporary.path().join("store"), StoreOptions::default())?;
//! # let mut created = store.create(NewConversation::default())?;
//! # let args = serde_json::json!({"path": "Cargo.toml"});
//! # created.append_turn([
//! #     Entry::now(EventKind::TurnStart),
//! #     Entry::now(ChatRequest::text("What is in Cargo.toml?")),
//! #     Entry::now(ToolCallRequest::new("c1", "fs_read_file", args)?),
//! #     Entry::now(ToolCallResponse::text("c1", "[package]\nname = \"demo\"")),
//! #     Entry::now(ChatResponse::message("A package named demo.")),
//! # ], &mut no_summarizer)?;
//! # let id = created.id().clone();
//! # created.close();
//! let mut conversation = store.conversation(&id)?;
//! let refs: serde_json::Value =
//!     serde_json::from_slice(&conversation.view()?.render(ContentMode::Refs)?)?;
//! assert!(refs[3]["content"][0]["text"]["$blob"].is_string());
//! let inline: serde_json::Value =
//!     serde_json::from_slice(&conversation.view()?.render(ContentMode::Inline)?)?;
//! assert_eq!(inline[3]["content"][0]["text"], "[package]\nname = \"demo\"");
//! conversation.close();
//! // A view without a handle reads without the lock, and writes nothing.
//! let view = store.open_view(&id)?.render(ContentMode::Refs)?;
//! assert_eq!(serde_json::from_slice::<serde_json::Value>(&view)?, refs);
//! # Ok(())
//! # }
//! ```
//!
//! **Compact and undo, fork.** A compaction is an entry appended, never a
//! rewrite: undoing it appends another. A fork shares the entries (and
//! blobs) of its source; the source is left as it is.
//!
//! ```rust
//! # use jpstore_engine::compaction::no_summarizer;
//! # use jpstore_engine::event::{ChatRequest, ChatResponse, Entry, EventKind};
//! # use jpstore_engine::{NewConversation, Store, StoreOptions};
//! use jpstore_engine::compaction::{Bound, CompactRequest};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let temporary = tempfile::tempdir()?;
//! # let store = Store::init_dir(&temporary.path().join("store"), StoreOptions::default())?;
//! let mut conversation = store.create(NewConversation::default())?;
//! for question in ["first?", "second?", "third?"] {
//!     conversation.append_turn([
//!         Entry::now(EventKind::TurnStart),
//!         Entry::now(ChatRequest::text(question)),
//!         Entry::now(ChatResponse::message("an answer")),
//!     ], &mut no_summarizer)?;
//! }
//! // Turns 0 and 1 replaced by a summary given here (a profile's summary
//! // table is run by `jpstore_integrations::summarizer` instead).
//! let request = CompactRequest {
//!     to: Some(Bound::FromEnd(1)),
//!     summary: Some("Two questions, answered.".into()),
//!     ..Default::default()
//! };
//! let made = conversation.compact(&request, &mut no_summarizer)?;
//! assert_eq!((made.compaction.from_turn, made.compaction.to_turn), (0, 1));
//! assert_eq!(conversation.undo_compaction(None)?, 1);
//! // The last turn as a new conversation, with its own handle.
//! let fork = conversation.fork(Some(1), None)?;
//! assert_eq!(fork.state().turns(), 1);
//! fork.close();
//! conversation.close();
//! # Ok(())
//! # }
//! ```
//!
//! **Close, or drop.** [`ConversationHandle::close`] writes the head cache
//! (the folded state, so that the next open, listing or view reads nothing
//! of the log it covers) and releases the lock; a handle dropped without
//! being closed releases the lock and writes nothing. Appending through
//! the handle never waits on its own lock; another handle of the same
//! conversation (in this process or another) waits for it like any other
//! writer.
//!
//! The crate's `examples/check_store.rs` checks and repairs a store with
//! fsck; the `jpstore-integrations` crate's examples run an agent's loop
//! (compacting when a request goes over a token budget) and attach a
//! directory.

#![warn(missing_docs, unreachable_pub)]

mod append;
pub mod compaction;
mod config;
pub mod conversation;
pub mod copy;
mod dedup;
pub mod error;
pub mod event;
pub mod export;
pub mod fsck;
pub mod gc;
mod handle;
pub mod import;
#[doc(hidden)]
pub mod internal;
mod json_text;
mod log;
mod parallel;
mod projection;
pub mod search;
pub mod stats;
mod store;
mod stream;
pub mod timestamp;
pub mod upgrade;

pub use append::{AppendReport, AutoCompaction};
pub use conversation::AppendOutcome;
pub use conversation::ConversationId;
pub use error::{Error, Result};
pub use handle::ConversationHandle;
pub use log::{CutTail, Framing, LogOptions, TornTail};
pub use store::{Listing, NewConversation, Store, StoreOptions};
