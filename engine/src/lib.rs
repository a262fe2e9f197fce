//! The jp-store engine: event model, conversation logs, config, projection,
//! compaction, deduplication and fsck/gc marking.
//!
//! Built so far: the framing layer of the per-conversation append-only log
//! ([`log`]), specified in `format-spec.md` section 3. All file I/O goes
//! through `jpstore_blobstore::storage`.

pub mod config;
pub mod error;
pub mod log;
pub mod timestamp;
