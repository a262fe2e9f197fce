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
//! - [`attach`]: attaching files as resources (one blob batch, one
//!   request), and resolving `file://` resources.
//! - [`export`]: the plain JSON form of a conversation.
//! - [`projection`], [`compaction`], [`dedup`]: the view an LLM is sent.
//! - [`provider`]: the view as Anthropic's or OpenAI's request body;
//!   [`summarizer`]: summaries for compactions (a command or an endpoint).
//! - [`jp`]: import and export of JP's conversation files.
//! - [`fsck`], [`gc`]: checking and repairing a store; removing unreferenced
//!   blobs safely while others write.
//! - [`stats`]: counts and context sizes of conversations (`jp-store
//!   stats`).
//! - [`log`]: the framing layer of logs (checksummed records of batches).
//! - [`config`], [`timestamp`]: config objects and JP's timestamps.
//! - [`user_file`]: reading the files and streams a user names, bounded and
//!   type-checked.
//!
//! Every byte on disk is specified in `format-spec.md`. All file I/O inside
//! a store goes through `jpstore_blobstore::storage`, so tests can inject
//! faults; reading the user's own files (attach, JP import, a summary file)
//! goes through [`user_file`].

pub mod append;
pub mod attach;
pub mod compaction;
pub mod config;
pub mod conversation;
pub mod dedup;
pub mod error;
pub mod event;
pub mod export;
pub mod fsck;
pub mod gc;
pub mod jp;
pub mod json_text;
pub mod log;
pub mod parallel;
pub mod projection;
pub mod provider;
pub mod stats;
pub mod store;
pub mod summarizer;
pub mod timestamp;
pub mod user_file;

pub use append::{AppendReport, AutoCompaction};
pub use store::{NewConversation, Store, StoreOptions};
