#!/usr/bin/env python3
"""Turns benchmark output into the figures of BENCHMARKS.md.

    python3 benches/report.py quick OUT [OUT...]   # saved stdout of `cargo bench --bench quick`
    python3 benches/report.py scaling OUT          # saved stdout of `cargo bench --bench scaling`

`quick` reads the saved stdout of one or more runs of the quick bench (the
first line names the machine and file system, the last is the JSON object of
figures) and writes the table of figures, one column per run, with the spread
(largest / smallest) and the brief's targets.

`scaling` reads the saved stdout of the scaling bench (its last line is the
JSON object of medians by size) and writes the tables of how cost grows with
size, and the plot `benches/plots/view_vs_events.svg`.

Each replaces its block of BENCHMARKS.md, between the markers
`<!-- begin NAME -->` and `<!-- end NAME -->` (`--print` writes the block to
stdout instead). Only the standard library is used.
"""

import argparse
import datetime
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "BENCHMARKS.md"
PLOT = ROOT / "benches" / "plots" / "view_vs_events.svg"


def replace_block(doc: Path, name: str, text: str) -> None:
    begin, end = f"<!-- begin {name} -->", f"<!-- end {name} -->"
    content = doc.read_text()
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), re.S)
    if not pattern.search(content):
        sys.exit(f"{doc} has no block {begin} ... {end}")
    content = pattern.sub(lambda _: f"{begin}\n{text.rstrip()}\n{end}", content)
    doc.write_text(content)


def fmt(x: float) -> str:
    """Three significant digits, no exponent."""
    if x == 0 or not math.isfinite(x):
        return str(x)
    digits = max(0, 2 - int(math.floor(math.log10(abs(x)))))
    return f"{x:,.{digits}f}"


def scaled(x: float, units: list) -> str:
    """`x` in the largest of `units` ([(factor, name)], ascending) it reaches."""
    factor, name = units[0]
    for f, n in units:
        if x >= f:
            factor, name = f, n
    return f"{fmt(x / factor)} {name}"


def duration(ns: float) -> str:
    return scaled(ns, [(1e3, "µs"), (1e6, "ms"), (1e9, "s")])


def size(b: float) -> str:
    return scaled(b, [(1, "B"), (1e3, "KB"), (1e6, "MB")])


# ----- quick ------------------------------------------------------------------


def quick(paths: list, print_only: bool) -> None:
    runs = []
    header = None
    for p in paths:
        h, r = last_json(p)
        header = h or header
        runs.append(r)
    targets = runs[-1].get("targets", {})
    by_figure = {t["figure"]: (name, t) for name, t in targets.items()}
    keys = [k for k in runs[0] if k != "targets"]
    out = [taken(header), ""]
    cols = " | ".join(f"run {i + 1}" for i in range(len(runs)))
    out.append(f"| figure | {cols} | spread | target | met |")
    out.append("|---|" + "---:|" * len(runs) + "---:|---|---|")
    for k in keys:
        values = [r.get(k) for r in runs]
        nums = [v for v in values if isinstance(v, (int, float))]
        spread = fmt(max(nums) / min(nums)) + "x" if nums and min(nums) > 0 else ""
        name, t = by_figure.get(k, ("", None))
        target = f"{t['limit']} ({name})" if t else ""
        met = ""
        if t:
            met = " / ".join("yes" if r["targets"][name]["met"] else "**no**" for r in runs)
        cells = " | ".join(fmt(v) if isinstance(v, (int, float)) else "" for v in values)
        out.append(f"| `{k}` | {cells} | {spread} | {target} | {met} |")
    text = "\n".join(out)
    if print_only:
        print(text)
    else:
        replace_block(DOC, "quick", text)
        print(f"updated the quick block of {DOC}")


# ----- scaling ----------------------------------------------------------------


def last_json(path: str):
    """(the header line after `NAME: `, the JSON object of the last line) of a saved output."""
    lines = [l for l in Path(path).read_text().splitlines() if l.strip()]
    if not lines or not lines[-1].startswith("{"):
        sys.exit(f"{path}: the last line is not a bench's JSON object")
    header = next((l.split(": ", 1)[1] for l in lines if "; stores in " in l), None)
    return header, json.loads(lines[-1])


def taken(header) -> str:
    machine, _, fs = (header or "unknown machine; stores in ? (unknown)").partition("; stores in ")
    fs = fs[fs.find("(") + 1 : -1] if "(" in fs else fs
    return f"Taken {datetime.date.today().isoformat()} on {machine}; stores on {fs}."


def scaling(path: str, print_only: bool) -> None:
    header, r = last_json(path)
    out = [taken(header), ""]
    ns = lambda series, n: r[f"{series}_ns"][str(n)]
    p90 = lambda series, n: r[f"{series}_p90_ns"][str(n)]
    events = sorted(int(n) for n in r["append_ns"])
    floor = r["fdatasync_ns"]

    out.append(
        f"Durable append of one small event (all sizes and the floor interleaved, "
        f"{r['append_rounds']} rounds), and JP's flush of the same conversation (after them):"
    )
    out.append("")
    out.append(
        "| events | jp-store append (p90) | / fdatasync | JP flush: rewrite events.json, no sync "
        "| JP flush / jp-store append |"
    )
    out.append("|---:|---:|---:|---:|---:|")
    for n in events:
        ours, jp = ns("append", n), ns("jp_flush", n)
        out.append(
            f"| {n:,} | {duration(ours)} ({duration(p90('append', n))}) | {fmt(r['append_vs_fdatasync'][str(n)])} "
            f"| {duration(jp)} | {fmt(jp / ours)} |"
        )
    out.append("")
    out.append(f"The floor, one `fdatasync` of a 150-byte write: {duration(floor)}.")
    out.append("")

    out.append("Open + `view --refs`, and JP's open (read + parse `events.json` + undo its base64), interleaved:")
    out.append("")
    out.append(
        "| events | log | JP events.json | jp-store open + view --refs | per event "
        "| JP open | JP / jp-store | rounds |"
    )
    out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
    points = []
    for n in events:
        ours, jp = ns("view_refs", n), ns("jp_read_parse", n)
        points.append((n, ours, jp))
        out.append(
            f"| {n:,} | {size(r['log_bytes'][str(n)])} | {size(r['jp_bytes'][str(n)])} "
            f"| {duration(ours)} | {duration(ours / n)} | {duration(jp)} | {fmt(r['jp_parse_vs_view_refs'][str(n)])} "
            f"| {r['view_refs_rounds'][str(n)]} |"
        )
    out.append("")

    out.append(
        "Collect + attach of a generated source tree, and the floor, SHA-256 + zstd-3 of the "
        "same bytes on all cores, interleaved:"
    )
    out.append("")
    out.append("| files | bytes | jp-store attach | per file | floor | attach / floor | rounds |")
    out.append("|---:|---:|---:|---:|---:|---:|---:|")
    for n in sorted(int(n) for n in r["attach_ns"]):
        ours, fl = ns("attach", n), ns("attach_floor", n)
        out.append(
            f"| {n:,} | {size(r['tree_bytes'][str(n)])} | {duration(ours)} | {duration(ours / n)} "
            f"| {duration(fl)} | {fmt(r['attach_vs_floor'][str(n)])} | {r['attach_rounds'][str(n)]} |"
        )
    out.append("")
    out.append(
        "Times are medians (in parentheses the 90th percentile); a ratio of two interleaved "
        "operations is the median over rounds of their ratio in the same round; JP flush / "
        "jp-store append, measured in separate loops, is the ratio of their medians."
    )
    text = "\n".join(out)
    svg = plot(points)
    if print_only:
        print(text)
    else:
        replace_block(DOC, "scaling", text)
        PLOT.parent.mkdir(parents=True, exist_ok=True)
        PLOT.write_text(svg)
        print(f"updated the scaling block of {DOC} and {PLOT.relative_to(ROOT)}")


def plot(points: list) -> str:
    """A log-log SVG of view time against events: jp-store, JP, and JP / 20 (the target)."""
    w, h = 640, 420
    left, right, top, bottom = 70, 20, 40, 55
    xs = [p[0] for p in points]
    ys = [v for p in points for v in (p[1], p[2], p[2] / 20)]
    x0, x1 = math.floor(math.log10(min(xs))), math.ceil(math.log10(max(xs)))
    y0, y1 = math.floor(math.log10(min(ys) / 1e6)), math.ceil(math.log10(max(ys) / 1e6))
    px = lambda n: left + (math.log10(n) - x0) / (x1 - x0) * (w - left - right)
    py = lambda ns: top + (y1 - math.log10(ns / 1e6)) / (y1 - y0) * (h - top - bottom)
    s = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'font-family="sans-serif" font-size="12">',
        f'<rect width="{w}" height="{h}" fill="white"/>',
        f'<text x="{w / 2}" y="22" text-anchor="middle" font-size="14">'
        "Open + view --refs vs JP's open (read + parse + base64) of events.json</text>",
    ]
    for d in range(x0, x1 + 1):
        x = px(10**d)
        s.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{h - bottom}" stroke="#ddd"/>')
        s.append(f'<text x="{x:.1f}" y="{h - bottom + 16}" text-anchor="middle">{10**d:,}</text>')
    for d in range(y0, y1 + 1):
        y = py(10**d * 1e6)
        label = f"{10**(d - 3):g} s" if d >= 3 else f"{10**d:g} ms" if d >= 0 else f"{10**d * 1000:g} µs"
        s.append(f'<line x1="{left}" y1="{y:.1f}" x2="{w - right}" y2="{y:.1f}" stroke="#ddd"/>')
        s.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{label}</text>')
    s.append(f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">events in the conversation (log)</text>')
    s.append(
        f'<text transform="translate(16 {(top + h - bottom) / 2}) rotate(-90)" text-anchor="middle">median time (log)</text>'
    )
    series = [
        ("jp-store open + view --refs", 1, "#1f77b4", ""),
        ("JP open: read + parse + base64", 2, "#d62728", ""),
        ("target: JP / 20", 3, "#2ca02c", ' stroke-dasharray="6 4"'),
    ]
    for i, (name, col, color, dash) in enumerate(series):
        pts = [(p[0], p[col] if col < 3 else p[2] / 20) for p in points]
        path = " ".join(f"{px(n):.1f},{py(t):.1f}" for n, t in pts)
        s.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
        if not dash:
            for n, t in pts:
                s.append(f'<circle cx="{px(n):.1f}" cy="{py(t):.1f}" r="3" fill="{color}"/>')
        ly = top + 14 + 18 * i
        s.append(f'<line x1="{left + 12}" y1="{ly - 4}" x2="{left + 40}" y2="{ly - 4}" stroke="{color}" stroke-width="2"{dash}/>')
        s.append(f'<text x="{left + 46}" y="{ly}">{name}</text>')
    s.append("</svg>")
    return "\n".join(s) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("quick", help="figures of saved quick bench outputs")
    q.add_argument("outputs", nargs="+")
    q.add_argument("--print", action="store_true")
    sc = sub.add_parser("scaling", help="tables and plot of a saved scaling bench output")
    sc.add_argument("output")
    sc.add_argument("--print", action="store_true")
    args = ap.parse_args()
    if args.cmd == "quick":
        quick(args.outputs, args.print)
    else:
        scaling(args.output, args.print)


if __name__ == "__main__":
    main()
