//! Events: the model ([`model`]), its JSON form (parsed by [`json`],
//! written by [`render`]) and turn numbering ([`turns`]).
//!
//! The MessagePack form stored in logs is defined by the serde derives of
//! the model and framed by `conversation::codec` (format-spec.md section 4).

pub mod input;
pub mod json;
pub mod model;
pub mod render;
pub mod turns;

pub use model::*;

#[cfg(test)]
mod proptests;
