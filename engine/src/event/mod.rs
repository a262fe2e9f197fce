//! Events: the model (`model`) and its constructors (`build.rs`:
//! [`Entry::at`], [`ChatRequest::text`], ...), its JSON form (parsed by
//! `json`, written by `render`) and turn numbering (`turns`).
//!
//! The MessagePack form stored in version 1 logs is defined by the serde
//! derives of the model and framed by `conversation::codec`; the binary form
//! of version 2 logs by `binary` (format-spec.md section 4). What the
//! projection and deduplication decide from is an entry's `head`, taken of
//! either.
//!
//! # Building entries
//!
//! What an embedder appends is built with the constructors of the model's
//! types, not written as JSON text:
//!
//! ```
//! use jpstore_engine::event::{ChatRequest, ChatResponse, Entry, EventKind, Payload, Resource};
//! use jpstore_engine::event::{ToolCallRequest, ToolCallResponse};
//! use jpstore_engine::timestamp::Timestamp;
//! use serde_json::json;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let now = Timestamp::now();
//! let notes = Resource::text("file:///project/notes.md", "Ship on Friday.")
//!     .with_mime_type("text/markdown")
//!     .with_name("notes.md");
//! let turn: Vec<Entry<Payload>> = vec![
//!     Entry::at(now, EventKind::TurnStart),
//!     Entry::at(now, ChatRequest::text("When do we ship?").with_resources([notes])),
//!     Entry::at(now, ToolCallRequest::new("c1", "calendar", json!({"day": "Friday"}))?),
//!     Entry::at(now, ToolCallResponse::text("c1", "Friday: release")),
//!     Entry::at(now, ChatResponse::message("On Friday.")),
//! ];
//! assert_eq!(turn[3].event().map(|e| e.kind.type_name()), Some("tool_call_response"));
//! # Ok(())
//! # }
//! ```

pub(crate) mod binary;
mod build;
pub(crate) mod head;
pub(crate) mod input;
pub(crate) mod json;
pub(crate) mod kind;
mod model;
pub(crate) mod render;
pub(crate) mod turns;

pub use json::FieldError;
pub use model::*;

#[cfg(test)]
mod proptests;
