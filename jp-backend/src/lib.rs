//! JP's conversations in a jp-store store, through JP's own types
//! (`jp_conversation`, `jp_storage`, at the commit of `Cargo.toml`).
//!
//! [`load`] reads a conversation of a store as JP's loader reads its files:
//! the stream ([`load::stream`]) and the metadata ([`load::metadata`]) that
//! JP's `FsStorageBackend` loads from the files `jp-store export --format
//! jp` writes for it, equal by JP's own `PartialEq`, without writing them.

pub mod load;
