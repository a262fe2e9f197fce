//! `jp-store stats`: counts, sizes and the per-turn plot.

use super::{open_store, parse_id, size, write_file_atomically};
use anyhow::Result;
use jpstore_engine::internal::stats::plot::tokens_per_turn_svg;
use jpstore_engine::stats::tokens;
use std::path::Path;
use std::process::ExitCode;

pub fn stats(
    dir: &super::StoreLocation,
    id: Option<&str>,
    json_out: bool,
    plot: Option<&Path>,
) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let mut stats = match id {
        // A conversation named by the user that cannot be counted is the
        // command's error.
        Some(id) => jpstore_engine::stats::of_conversation(&store, &parse_id(id)?)?,
        None => jpstore_engine::stats::of_conversations(&store, &store.ids()?)?,
    };
    if let Some(path) = plot {
        // The plot is of the last conversation counted (the one named).
        if let Some((id, sizes)) = stats.conversations.last() {
            write_file_atomically(path, tokens_per_turn_svg(id, sizes).as_bytes())?;
        }
    }
    for (id, e) in &stats.failed {
        crate::errln!("jp-store: error: conversation {id} is not counted: {e}");
    }
    for (blob, e) in &stats.unsized_blobs {
        crate::errln!("jp-store: error: blob {blob} is referenced but its size cannot be read, so it is not counted (`jp-store fsck` says more): {e}");
    }
    let code = if stats.failed.is_empty() && stats.unsized_blobs.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if id.is_none() {
        stats.blob_store = Some(jpstore_engine::stats::of_blob_store(&store)?);
    }
    if json_out {
        crate::jsonln!("{}", serde_json::to_string_pretty(&stats)?);
        return Ok(code);
    }
    let context = &stats.context;
    crate::outln!("conversations: {}", stats.conversations.len());
    crate::outln!("turns:         {}", stats.turns);
    crate::outln!(
        "entries:       {} in {} records, log {}",
        stats.entries,
        stats.records,
        size(stats.log_bytes)
    );
    for (t, n) in &stats.entries_by_type {
        crate::outln!("  {t:<26} {n}");
    }
    crate::outln!(
        "content:       {} references to {} ({} distinct blobs, {})",
        stats.content_references,
        size(stats.content_bytes_referenced),
        stats.distinct_blobs_referenced,
        size(stats.distinct_blob_bytes_referenced)
    );
    crate::outln!(
        "context:       raw {} B (~{} tokens), view {} B (~{} tokens), estimated as characters / 4",
        context.raw,
        tokens(context.raw),
        context.view,
        tokens(context.view)
    );
    let compaction = context.saved_by_compaction();
    crate::outln!(
        "  saved by compaction:    {} B (~{} tokens)",
        compaction.bytes,
        compaction.tokens
    );
    let dedup = context.saved_by_deduplication();
    crate::outln!(
        "  saved by deduplication: {} B (~{} tokens), {} resources replaced by references",
        dedup.bytes,
        dedup.tokens,
        context.replaced
    );
    if let Some(path) = plot {
        crate::outln!("plot:          {}", path.display());
    }
    if let Some(b) = &stats.blob_store {
        crate::outln!(
            "blob store:    {} loose objects ({}), {} packs with {} objects ({})",
            b.loose_objects,
            size(b.loose_bytes),
            b.packs,
            b.packed_objects,
            size(b.pack_bytes)
        );
    }
    Ok(code)
}
