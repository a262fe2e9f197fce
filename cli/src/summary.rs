//! Getting a summary for a compaction from the profile's summary table: a
//! command or an OpenAI-compatible endpoint named there reads the raw events
//! of the range (content inline, never a view).

use jpstore_engine::compaction::CompactionError;
use jpstore_engine::event::{BlobRef, Entry, Object};
use jpstore_engine::export::{entry_json, ContentMode};
use jpstore_engine::summarizer::{summarize as run, SummarySource};
use jpstore_engine::Store;
use serde_json::Value;

/// The summary of `raw` as the profile's summary table says.
pub fn summarize(
    store: &Store,
    table: &Object,
    raw: &[Entry<BlobRef>],
    profile: Option<&str>,
) -> jpstore_engine::error::Result<String> {
    let Some(source) = SummarySource::from_profile(table)? else {
        return Err(CompactionError::SummaryNeeded {
            profile: profile.unwrap_or("default").to_string(),
        }
        .into());
    };
    let events = raw
        .iter()
        .map(|e| entry_json(store, e, ContentMode::Inline))
        .collect::<jpstore_engine::error::Result<Vec<_>>>()?;
    Ok(run(&source, &Value::Array(events))?)
}
