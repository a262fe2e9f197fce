//! What the benchmarks share: workload generators (`workload`), the stores
//! and files built from them (`setup`), the physical floors every figure is
//! compared with (`floor`), interleaved timing (`timing`) and where the
//! stores live (`bench_dir`).
//!
//! Every workload is deterministic: the same seed gives the same bytes on
//! every machine, so figures from different runs measure the same work.

pub mod bench_dir;
pub mod floor;
pub mod setup;
pub mod timing;
pub mod workload;

pub use workload::conversation::{jp_events_json, ConversationShape};
pub use workload::rng::Rng;
pub use workload::source_tree::{write_to_dir, FileKind, GeneratedFile, SourceTree};
