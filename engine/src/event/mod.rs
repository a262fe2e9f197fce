//! Events: the model ([`model`]), its JSON form (parsed by [`json`],
//! written by [`render`]) and turn numbering ([`turns`]).
//!
//! The MessagePack form stored in version 1 logs is defined by the serde
//! derives of the model and framed by `conversation::codec`; the binary form
//! of version 2 logs by [`binary`] (format-spec.md section 4). What the
//! projection and deduplication decide from is an entry's [`head`], taken of
//! either.

pub mod binary;
pub mod head;
pub mod input;
pub mod json;
pub mod model;
pub mod render;
pub mod turns;

pub use model::*;

#[cfg(test)]
mod proptests;
