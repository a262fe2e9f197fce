//! Helpers of the crash tests on the simulated storage
//! (`jpstore_blobstore::storage::sim`): store options, batches as entries,
//! and the crash modes every sync point is replayed in.

use std::sync::Arc;

use jpstore_blobstore::storage::sim::{CrashMode, SimStorage};
use jpstore_engine::event::{Entry, Payload};
use jpstore_engine::internal::event::input::parse_input;
use jpstore_engine::internal::event::json::ParseMode;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::StoreOptions;
use serde_json::Value;

/// Store options of the crash tests: two worker threads for batches, and
/// writers that do not merge packs, so that the setups keep the packs they
/// build for gc to sweep (gc's own merge runs in the gc workload; writers'
/// merges are crashed in `blobstore/tests/it/crash.rs`).
pub fn options() -> StoreOptions {
    StoreOptions {
        blobs: jpstore_blobstore::Options {
            threads: 2,
            small_pack_bytes: 0,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The simulated storage as a store's backend (another handle on the same
/// simulated disk).
pub fn storage(sim: &SimStorage) -> Arc<dyn jpstore_blobstore::backend::Backend> {
    jpstore_blobstore::backend::FileBackend::shared(Arc::new(sim.clone()))
}

/// A batch of JSON events (as `append` takes them) as entries.
pub fn parse(batch: &[Value]) -> Vec<Entry<Payload>> {
    let text = serde_json::to_string(batch).expect("serialize batch");
    parse_input(
        &text,
        ParseMode::Strict {
            now: Timestamp::now(),
        },
    )
    .unwrap_or_else(|e| panic!("batch does not parse: {e}"))
    .entries
}

/// Every crash mode, with six seeds for each random one.
pub fn modes() -> Vec<CrashMode> {
    let mut m = vec![CrashMode::DropUnsynced];
    for seed in 0..6 {
        m.push(CrashMode::TearUnsynced { seed });
        m.push(CrashMode::KeepUnsyncedEntries { seed });
    }
    m
}
