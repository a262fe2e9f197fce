//! The plot of a conversation's context per turn (`jp-store stats
//! --plot`): estimated tokens of each turn as logged and as the view sends
//! them, as an SVG document with no script and no external reference, for
//! a file or a web page.

use super::{tokens, ContextSizes};
use crate::conversation::ConversationId;

/// [`plot_svg`] of `sizes`, the context sizes of conversation `id`, titled
/// `<id>: estimated tokens per turn`.
pub fn tokens_per_turn_svg(id: &ConversationId, sizes: &ContextSizes) -> String {
    plot_svg(
        &format!("{id}: estimated tokens per turn"),
        &sizes.raw_per_turn,
        &sizes.view_per_turn,
    )
}

/// An SVG line plot (900 x 460) of estimated tokens per turn: `raw`, the
/// characters of each turn as logged, and `view`, as the view sends them
/// (both converted by [`tokens`]), under `title` (escaped here). The y axis
/// goes up to a round value (1, 2 or 5 times a power of ten, in at most
/// five steps); the x axis has a tick every tenth of the turns; each turn
/// is a dot as well when there are at most 60.
pub fn plot_svg(title: &str, raw: &[u64], view: &[u64]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_series_on_a_round_axis_with_a_dot_per_turn() {
        // Tokens 1, 250, 1,500 (raw) and 1, 100, 300 (view): the axis
        // goes to 1,500 in steps of 500.
        let svg = plot_svg("a <b> & c", &[4, 1000, 6000], &[4, 400, 1200]);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"900\""));
        assert!(svg.ends_with("</svg>\n"));
        assert!(svg.contains(">a &lt;b&gt; &amp; c</text>"), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 6);
        for v in ["0", "500", "1000", "1500"] {
            assert!(
                svg.contains(&format!("text-anchor=\"end\">{v}</text>")),
                "{v}"
            );
        }
        assert!(!svg.contains(">2000</text>"));
        // Turn 0 at the left edge, the last turn at the right one, the top
        // value at the top.
        assert!(
            svg.contains("points=\"80.0,399.8 475.0,346.7 870.0,80.0\""),
            "{svg}"
        );
        assert!(svg.contains("raw conversation"));
        assert!(svg.contains("view (compaction and deduplication applied)"));
    }

    #[test]
    fn one_turn_is_centred_and_many_turns_have_no_dots() {
        let one = plot_svg("t", &[40], &[40]);
        assert!(one.contains("points=\"475.0,80.0\""), "{one}");
        let many: Vec<u64> = (0..100).map(|i| i * 4).collect();
        let svg = plot_svg("t", &many, &many);
        assert_eq!(svg.matches("<circle").count(), 0);
        // A tick label every tenth of the turns, and the axis label.
        assert_eq!(svg.matches("text-anchor=\"middle\">").count(), 10 + 1);
    }

    #[test]
    fn the_plot_of_a_conversation_is_titled_with_its_id() {
        let id = ConversationId::parse("c1").expect("id");
        let sizes = ContextSizes {
            raw_per_turn: vec![8, 16],
            view_per_turn: vec![8, 8],
            ..Default::default()
        };
        let svg = tokens_per_turn_svg(&id, &sizes);
        assert_eq!(
            svg,
            plot_svg("c1: estimated tokens per turn", &[8, 16], &[8, 8])
        );
    }
}
