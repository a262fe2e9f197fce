//! Getting a summary for a compaction from the profile's summary table.

use jpstore_engine::compaction::CompactionError;
use jpstore_engine::event::{BlobRef, Entry, Object};
use jpstore_engine::Store;

/// The summary of `raw` as the profile's summary table says.
pub fn summarize(
    _store: &Store,
    _table: &Object,
    _raw: &[Entry<BlobRef>],
    profile: Option<&str>,
) -> jpstore_engine::error::Result<String> {
    Err(CompactionError::SummaryNeeded {
        profile: profile.unwrap_or("default").to_string(),
    }
    .into())
}
