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
//! - [`export`]: the plain JSON form of a conversation; [`import`]: whole
//!   conversations stored in bulk (one pack, then each log published whole).
//! - [`projection`], [`compaction`], [`dedup`]: the view an LLM is sent.
//! - [`fsck`], [`gc`]: checking and repairing a store; removing unreferenced
//!   blobs safely while others write.
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

pub mod append;
pub mod compaction;
pub mod config;
pub mod conversation;
pub mod dedup;
pub mod error;
pub mod event;
pub mod export;
mod fast_hash;
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
pub mod stats;
pub mod store;
pub mod timestamp;
pub mod upgrade;

pub use append::{AppendReport, AutoCompaction};
pub use log::{CutTail, LogOptions};
pub use store::{NewConversation, Store, StoreOptions};
