//! The content-addressable blob store of jp-store.
//!
//! Every content payload of a conversation (attached files, tool output, base
//! configs) is stored here once, keyed by the SHA-256 of its raw bytes
//! ([`BlobId`]), zstd-compressed behind a small header. Single writes become
//! *loose objects*; batches become one immutable *pack* plus a memory-mapped
//! *index*. Every read is verified against the id, so damage is an error naming
//! the file (and offset), never wrong bytes.
//!
//! All I/O goes through the storage seam, [`backend::Backend`]: objects
//! created if absent, read whole or by range, listed, deleted, replaced,
//! appended to. [`backend::FileBackend`] implements it over the [`storage`]
//! layer (the local file system, or the simulated one that crashes the
//! store at any sync point and injects faults). The byte layout and the write
//! protocol are specified in `format-spec.md` at the root of the repository.

#![warn(missing_docs, unreachable_pub)]

pub mod backend;
mod batch;
mod cache;
mod content;
pub mod error;
pub mod fast_hash;
pub mod group;
pub mod id;
mod listing;
pub mod merge;
mod mmap;
pub mod object;
pub mod pack;
mod parallel;
pub mod storage;
mod store;
mod stream;
mod trash;
mod trash_run;
pub mod user_file;
mod verify;

#[cfg(test)]
mod v2_tests;

pub use batch::skip_item;
pub use cache::GroupCacheStats;
pub use content::Content;
pub use error::{Error, FormatKind, Result};
pub use group::{Compression, GroupSettings};
pub use id::BlobId;
pub use id::IdError;
pub use listing::IdListing;
pub use merge::{MergeOutcome, UpgradeOutcome, UpgradeProgress};
pub use store::{
    BatchOutcome, BatchProgress, BlobStore, Location, LooseObject, Options, PackInfo, PutOutcome,
    RewriteOutcome, SweepOutcome, OBJECTS_DIR, OPEN_PACK_FILES, PACKS_DIR, TMP_DIR,
};
pub use stream::BlobStream;
pub use trash::Restored;
pub use trash_run::{MayMove, Moved, MovedPack};
pub use verify::{Problem, VerifyProgress, VerifyReport};
