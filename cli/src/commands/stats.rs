//! `jp-store stats`: counts, sizes and the per-turn plot.

use super::{open_store, parse_id, size, write_file_atomically};
use anyhow::Result;
use jpstore_engine::error::Error as EngineError;
use jpstore_engine::stats::tokens;
use serde_json::json;
use std::path::Path;
use std::process::ExitCode;

/// An SVG line plot of estimated tokens per turn: the raw conversation and
/// its view.
fn plot_svg(title: &str, raw: &[u64], view: &[u64]) -> String {
    use std::fmt::Write as _;
    let (w, h) = (900.0f64, 460.0f64);
    let (left, right, top, bottom) = (80.0, 30.0, 80.0, 60.0);
    let (pw, ph) = (w - left - right, h - top - bottom);
    let raw: Vec<u64> = raw.iter().map(|&c| tokens(c)).collect();
    let view: Vec<u64> = view.iter().map(|&c| tokens(c)).collect();
    let max = raw.iter().chain(&view).copied().max().unwrap_or(0).max(1);
    // A round step for the y axis (1, 2 or 5 times a power of ten), at most
    // five steps up to the top.
    let mut magnitude = 1u64;
    let step = loop {
        if let Some(s) = [1, 2, 5]
            .iter()
            .map(|m| m * magnitude)
            .find(|s| max.div_ceil(*s) <= 5)
        {
            break s;
        }
        magnitude *= 10;
    };
    let top_value = max.div_ceil(step) * step;
    let n = raw.len();
    let x = |i: usize| {
        if n <= 1 {
            left + pw / 2.0
        } else {
            left + pw * i as f64 / (n - 1) as f64
        }
    };
    let y = |v: u64| top + ph - ph * v as f64 / top_value as f64;
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(o, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15">{}</text>"#,
        w / 2.0,
        esc(title)
    );
    let mut v = 0;
    while v <= top_value {
        let yy = y(v);
        let _ = writeln!(
            o,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{}" y2="{yy:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{v}</text>"##,
            left + pw,
            left - 6.0,
            yy + 4.0
        );
        v += step;
    }
    // Axes (over the grid) and ticks.
    let _ = writeln!(
        o,
        r#"<g stroke="black"><line x1="{left}" y1="{}" x2="{}" y2="{}"/><line x1="{left}" y1="{top}" x2="{left}" y2="{}"/></g>"#,
        top + ph,
        left + pw,
        top + ph,
        top + ph
    );
    let x_step = (n / 10).max(1);
    for i in (0..n).step_by(x_step) {
        let xx = x(i);
        let _ = writeln!(
            o,
            r#"<line x1="{xx:.1}" y1="{}" x2="{xx:.1}" y2="{}" stroke="black"/><text x="{xx:.1}" y="{}" text-anchor="middle">{i}</text>"#,
            top + ph,
            top + ph + 5.0,
            top + ph + 18.0
        );
    }
    let _ = writeln!(
        o,
        r#"<text x="{}" y="{}" text-anchor="middle">turn</text>"#,
        left + pw / 2.0,
        h - 18.0
    );
    let _ = writeln!(
        o,
        r#"<text x="18" y="{}" text-anchor="middle" transform="rotate(-90 18 {})">estimated tokens (characters / 4)</text>"#,
        top + ph / 2.0,
        top + ph / 2.0
    );
    // The two series.
    for (series, color, label, row) in [
        (&raw, "#d62728", "raw conversation", 0.0),
        (
            &view,
            "#1f77b4",
            "view (compaction and deduplication applied)",
            1.0,
        ),
    ] {
        let points: Vec<String> = series
            .iter()
            .enumerate()
            .map(|(i, &v)| format!("{:.1},{:.1}", x(i), y(v)))
            .collect();
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#,
            points.join(" ")
        );
        if n <= 60 {
            for (i, &v) in series.iter().enumerate() {
                let _ = writeln!(
                    o,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{color}"/>"#,
                    x(i),
                    y(v)
                );
            }
        }
        // Legend.
        let ly = 44.0 + 18.0 * row;
        let lx = left + pw - 300.0;
        let _ = writeln!(
            o,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="2"/><text x="{}" y="{}">{label}</text>"#,
            lx + 24.0,
            lx + 30.0,
            ly + 4.0
        );
    }
    o.push_str("</svg>\n");
    o
}

pub fn stats(
    dir: &Path,
    id: Option<&str>,
    json_out: bool,
    plot: Option<&Path>,
) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let ids = match id {
        Some(id) => {
            let id = parse_id(id)?;
            if !store.exists(&id)? {
                return Err(EngineError::NotFound { id: id.to_string() }.into());
            }
            vec![id]
        }
        None => store.ids()?,
    };
    let stats = store.stats(&ids)?;
    let mut failed = stats.failed;
    if id.is_some() {
        // A conversation named by the user that cannot be counted is the
        // command's error.
        if let Some((_, e)) = failed.pop() {
            return Err(e.into());
        }
    }
    if let Some(path) = plot {
        // The plot is of the last conversation counted (the one named).
        if let Some((id, c)) = stats.conversations.last() {
            let svg = plot_svg(
                &format!("{id}: estimated tokens per turn"),
                &c.raw_per_turn,
                &c.view_per_turn,
            );
            write_file_atomically(path, svg.as_bytes())?;
        }
    }
    let context = stats.context;
    let (turns, entries, records, log_bytes, refs, content) = (
        stats.turns,
        stats.entries,
        stats.records,
        stats.log_bytes,
        stats.content_references,
        stats.content_bytes_referenced,
    );
    let by_type = stats.entries_by_type;
    let distinct_count = stats.distinct_blobs_referenced;
    let referenced_raw = stats.distinct_blob_bytes_referenced;
    let saved = |before: u64, after: u64| {
        (
            before as i64 - after as i64,
            tokens(before) as i64 - tokens(after) as i64,
        )
    };
    let (compaction_bytes, compaction_tokens) = saved(context.raw, context.compacted);
    let (dedup_bytes, dedup_tokens) = saved(context.compacted, context.view);
    for (id, e) in &failed {
        eprintln!("jp-store: error: conversation {id} is not counted: {e}");
    }
    let code = if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    let loose = store.blobs().loose_objects()?;
    let packs = store.blobs().packs()?;
    let loose_bytes: u64 = loose.iter().map(|o| o.stored_len).sum();
    let pack_bytes: u64 = packs.iter().map(|p| p.pack_bytes).sum();
    if json_out {
        let mut out = json!({
            "conversations": ids.len() - failed.len(),
            "turns": turns,
            "entries": entries,
            "entries_by_type": by_type,
            "records": records,
            "log_bytes": log_bytes,
            "content_references": refs,
            "content_bytes_referenced": content,
            "distinct_blobs_referenced": distinct_count,
            "distinct_blob_bytes_referenced": referenced_raw,
            "context": {
                "raw_bytes": context.raw,
                "raw_tokens": tokens(context.raw),
                "compacted_bytes": context.compacted,
                "compacted_tokens": tokens(context.compacted),
                "view_bytes": context.view,
                "view_tokens": tokens(context.view),
                "saved_by_compaction": {"bytes": compaction_bytes, "tokens": compaction_tokens},
                "saved_by_deduplication": {"bytes": dedup_bytes, "tokens": dedup_tokens,
                                           "resources_replaced": context.replaced},
            },
        });
        if id.is_none() {
            out["blob_store"] = json!({
                "loose_objects": loose.len(),
                "loose_bytes": loose_bytes,
                "packs": packs.len(),
                "packed_objects": packs.iter().map(|p| p.objects).sum::<usize>(),
                "pack_bytes": pack_bytes,
            });
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(code);
    }
    println!("conversations: {}", ids.len() - failed.len());
    println!("turns:         {turns}");
    println!(
        "entries:       {entries} in {records} records, log {}",
        size(log_bytes)
    );
    for (t, n) in &by_type {
        println!("  {t:<26} {n}");
    }
    println!(
        "content:       {refs} references to {} ({} distinct blobs, {})",
        size(content),
        distinct_count,
        size(referenced_raw)
    );
    println!(
        "context:       raw {} B (~{} tokens), view {} B (~{} tokens), estimated as characters / 4",
        context.raw,
        tokens(context.raw),
        context.view,
        tokens(context.view)
    );
    println!("  saved by compaction:    {compaction_bytes} B (~{compaction_tokens} tokens)");
    println!(
        "  saved by deduplication: {dedup_bytes} B (~{dedup_tokens} tokens), {} resources replaced by references",
        context.replaced
    );
    if let Some(path) = plot {
        println!("plot:          {}", path.display());
    }
    if id.is_none() {
        println!(
            "blob store:    {} loose objects ({}), {} packs with {} objects ({})",
            loose.len(),
            size(loose_bytes),
            packs.len(),
            packs.iter().map(|p| p.objects).sum::<usize>(),
            size(pack_bytes)
        );
    }
    Ok(code)
}
