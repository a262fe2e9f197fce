//! JP's conversations in a jp-store store, through JP's own types
//! (`jp_conversation`, `jp_storage`, at the commit of `Cargo.toml`).
//!
//! [`JpStoreBackend`] implements JP's four storage traits
//! (`PersistBackend`, `LoadBackend`, `LockBackend`, `SessionBackend`) over
//! a store, a directory or `s3://`: JP's `Workspace::with_backend` takes
//! it, and JP's conversations are then durable, deduplicated, compactable,
//! checked by `jp-store fsck`, and shared across machines through a store
//! on S3.
//!
//! ```no_run
//! use std::sync::Arc;
//! use jpstore_jp::JpStoreBackend;
//!
//! let backend = JpStoreBackend::open("/home/me/.local/share/jp-store")?
//!     .with_workspace("/home/me/project");
//! // JP: `Workspace::new(root).with_backend(Arc::new(backend))`.
//! # let _ = Arc::new(backend);
//! # Ok::<(), jpstore_jp::BackendError>(())
//! ```
//!
//! [`load`] reads a conversation of a store as JP's loader reads its files:
//! the stream ([`load::stream`]) and the metadata ([`load::metadata`]) that
//! JP's `FsStorageBackend` loads from the files `jp-store export --format
//! jp` writes for it, equal by JP's own `PartialEq`, without writing them.

mod backend;
mod error;
pub mod load;
mod location;
mod lock;
mod names;
mod projection;
mod sanitize;
mod session;
mod write;

pub use backend::{JpStoreBackend, DEFAULT_LEASE};
pub use error::BackendError;
