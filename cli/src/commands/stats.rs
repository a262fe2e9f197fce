//! `jp-store stats`: counts, sizes and the per-turn plot.

use super::{open_store, parse_id, size, write_file_atomically};
use anyhow::Result;
use jpstore_engine::stats::tokens;
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
    let mut stats = match id {
        // A conversation named by the user that cannot be counted is the
        // command's error.
        Some(id) => store.conversation_stats(&parse_id(id)?)?,
        None => store.stats(&store.ids()?)?,
    };
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
    for (id, e) in &stats.failed {
        eprintln!("jp-store: error: conversation {id} is not counted: {e}");
    }
    let code = if stats.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if id.is_none() {
        stats.blob_store = Some(store.blob_store_stats()?);
    }
    if json_out {
        println!("{}", serde_json::to_string_pretty(&stats)?);
        return Ok(code);
    }
    let context = &stats.context;
    println!("conversations: {}", stats.conversations.len());
    println!("turns:         {}", stats.turns);
    println!(
        "entries:       {} in {} records, log {}",
        stats.entries,
        stats.records,
        size(stats.log_bytes)
    );
    for (t, n) in &stats.entries_by_type {
        println!("  {t:<26} {n}");
    }
    println!(
        "content:       {} references to {} ({} distinct blobs, {})",
        stats.content_references,
        size(stats.content_bytes_referenced),
        stats.distinct_blobs_referenced,
        size(stats.distinct_blob_bytes_referenced)
    );
    println!(
        "context:       raw {} B (~{} tokens), view {} B (~{} tokens), estimated as characters / 4",
        context.raw,
        tokens(context.raw),
        context.view,
        tokens(context.view)
    );
    let compaction = context.saved_by_compaction();
    println!(
        "  saved by compaction:    {} B (~{} tokens)",
        compaction.bytes, compaction.tokens
    );
    let dedup = context.saved_by_deduplication();
    println!(
        "  saved by deduplication: {} B (~{} tokens), {} resources replaced by references",
        dedup.bytes, dedup.tokens, context.replaced
    );
    if let Some(path) = plot {
        println!("plot:          {}", path.display());
    }
    if let Some(b) = &stats.blob_store {
        println!(
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
