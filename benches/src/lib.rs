//! Workload generators shared by the benchmarks.
//!
//! Everything here is deterministic: the same seed gives the same bytes on
//! every machine, so figures from different runs measure the same work.

pub mod bench_dir;
pub mod workload;

pub use workload::conversation::{jp_events_json, ConversationShape};
pub use workload::rng::Rng;
pub use workload::source_tree::{write_to_dir, FileKind, GeneratedFile, SourceTree};
