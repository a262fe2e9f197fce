//! Conversation commands: `new`, `append`, `ls`, `print`, `export`, `stats`,
//! `attach`, `resolve`.
//! Parsing of arguments and rendering only; the work is in the engine.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use jpstore_engine::compaction::{Bound, CompactRequest};
use jpstore_engine::conversation::read::Conversation;
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::error::Error as EngineError;
use jpstore_engine::event::input::{parse_input, ParsedInput};
use jpstore_engine::event::json::ParseMode;
use jpstore_engine::event::turns::TurnCounter;
use jpstore_engine::event::{Block, ChatResponse, Entry, EventKind, Payload, ResourceContent};
use jpstore_engine::export::{conversation_json, render_view, ContentMode};
use jpstore_engine::stats::tokens;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::user_file::{self, LastLink};
use jpstore_engine::AutoCompaction;
use jpstore_engine::{NewConversation, Store, StoreOptions};
use serde_json::json;

/// Largest input `append` reads from standard input.
const MAX_INPUT: u64 = 1 << 30;

/// Opens the store at `dir`.
pub fn open_store(dir: &Path) -> Result<Store> {
    Ok(Store::open_dir(dir, StoreOptions::default())?)
}

fn parse_id(s: &str) -> Result<ConversationId> {
    Ok(ConversationId::parse(s)?)
}

pub fn init(dir: &Path) -> Result<ExitCode> {
    let (_, created) = Store::init_new_dir(dir, StoreOptions::default())?;
    if !created {
        eprintln!(
            "jp-store: {} is already a jp-store store; left as it is",
            dir.display()
        );
    }
    println!("{}", dir.display());
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct NewArgs {
    /// The id (default: JP's kind, the UTC time in deciseconds).
    #[arg(long)]
    id: Option<String>,
    /// A title.
    #[arg(long)]
    title: Option<String>,
    /// A label KEY=VALUE (repeatable).
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// A `--label` value: `KEY=VALUE` with a non-empty key (a usage error
/// otherwise, exit status 2).
fn parse_label(s: &str) -> std::result::Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
        _ => Err(format!("a label is KEY=VALUE, got {s:?}")),
    }
}

pub fn new(dir: &Path, args: NewArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = args.id.as_deref().map(parse_id).transpose()?;
    let writer = store.create(NewConversation {
        id,
        title: args.title,
        labels: args.labels,
        ..Default::default()
    })?;
    if args.json {
        println!("{}", json!({"id": writer.id().as_str()}));
    } else {
        println!("{}", writer.id());
    }
    Ok(ExitCode::SUCCESS)
}

pub fn append(dir: &Path, id: &str, json_out: bool) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = parse_id(id)?;
    let input = user_file::read_stream(std::io::stdin().lock(), MAX_INPUT)
        .context("reading events from standard input; nothing was appended")?;
    let text = String::from_utf8(input).map_err(|e| {
        anyhow::anyhow!(
            "standard input is not UTF-8 (byte {}); UTF-8 JSON expected; nothing was appended",
            e.utf8_error().valid_up_to()
        )
    })?;
    let ParsedInput { entries, lines } = parse_input(
        &text,
        ParseMode::Strict {
            now: Timestamp::now(),
        },
    )
    .map_err(|e| anyhow::anyhow!("stdin {e}; nothing was appended"))?;
    let report = match store.append_turn(&id, entries, Timestamp::now(), &mut |cut| {
        eprintln!(
            "jp-store: note: cut an incomplete record of {} bytes at offset {}, left by an append that did not complete (a crash, or a write that failed, such as on a full disk); its bytes were copied to {}",
            cut.len,
            cut.offset,
            store.storage().display_path(&cut.copy).display()
        );
    }) {
        Ok(report) => report,
        Err(EngineError::BadEntry {
            index,
            field,
            message,
        }) => {
            let line = lines.get(index).copied().unwrap_or(0);
            let field = if field.is_empty() {
                String::new()
            } else {
                format!("field `{field}`: ")
            };
            bail!(
                "stdin line {line} (entry {}): {field}{message}; nothing was appended",
                index + 1
            );
        }
        Err(e) => return Err(anyhow::Error::new(e).context("nothing was appended")),
    };
    let outcome = report.append;
    // Automatic compaction (D17) after a completed turn; the append itself
    // is durable already, so a failure there is reported, not fatal.
    let auto = match report.auto_compaction {
        AutoCompaction::Made(out) => {
            eprintln!(
                "jp-store: automatic compaction of turns {}..={} with profile {} (estimated tokens {} -> {})",
                out.compaction.from_turn,
                out.compaction.to_turn,
                out.profile,
                out.tokens_before,
                out.tokens_after
            );
            Some(out)
        }
        AutoCompaction::NotDue => None,
        AutoCompaction::Failed(e) => {
            eprintln!("jp-store: warning: automatic compaction failed: {e}");
            None
        }
    };
    if json_out {
        println!(
            "{}",
            json!({
                "id": id.as_str(),
                "auto_compaction": auto.map(|o| json!({"from_turn": o.compaction.from_turn, "to_turn": o.compaction.to_turn, "profile": o.profile})),
                "offset": outcome.offset,
                "entries": outcome.entries,
                "payloads": outcome.payloads,
                "new_blobs": outcome.new_blobs,
                "new_blob_bytes": outcome.new_blob_bytes,
            })
        );
    } else {
        println!(
            "appended {} entries to {id} ({} payloads, {} new blobs of {} bytes)",
            outcome.entries, outcome.payloads, outcome.new_blobs, outcome.new_blob_bytes
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn ls(dir: &Path, json_out: bool) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let mut list = Vec::new();
    let mut failed = Vec::new();
    for item in store.list_each()? {
        match item {
            Ok(l) => list.push(l),
            Err((id, e)) => failed.push((id, e)),
        }
    }
    for (id, e) in &failed {
        eprintln!("jp-store: error: conversation {id} cannot be listed: {e}");
    }
    let code = if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    if json_out {
        let items: Vec<_> = list
            .iter()
            .map(|l| {
                json!({
                    "id": l.id.as_str(),
                    "title": l.state.metadata.title(),
                    "created": l.state.metadata.created().map(|t| t.to_jp_string()),
                    "last_activity": l.state.last_activity().map(|t| t.to_jp_string()),
                    "labels": l.state.metadata.labels().into_iter().collect::<BTreeMap<_, _>>(),
                    "turns": l.state.turns.turns(),
                    "events": l.state.entries,
                    "log_bytes": l.log_bytes,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&items)?);
        return Ok(code);
    }
    if list.is_empty() {
        println!("no conversations");
        return Ok(code);
    }
    println!(
        "{:<20} {:>5} {:>7}  {:<21}  TITLE",
        "ID", "TURNS", "EVENTS", "LAST ACTIVITY"
    );
    for l in &list {
        let last = l
            .state
            .last_activity()
            .map(|t| short_time(&t))
            .unwrap_or_else(|| "-".into());
        println!(
            "{:<20} {:>5} {:>7}  {:<21}  {}",
            l.id,
            l.state.turns.turns(),
            l.state.entries,
            last,
            l.state.metadata.title().unwrap_or("")
        );
    }
    Ok(code)
}

fn short_time(t: &Timestamp) -> String {
    let s = t.to_jp_string();
    s.split('.').next().unwrap_or(&s).to_owned()
}

/// A human-readable size.
fn size(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// The first line of `s`, at most `max` characters, with an ellipsis when
/// cut.
fn excerpt(s: &str, max: usize) -> String {
    let line = s.lines().next().unwrap_or("");
    let cut: String = line.chars().take(max).collect();
    if cut.len() < s.trim_end().len() {
        format!("{cut}…")
    } else {
        cut
    }
}

pub fn print(dir: &Path, id: &str, compacted: bool) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let conv = store.read(&parse_id(id)?)?;
    let out = std::io::stdout();
    let mut out = out.lock();
    // What the model sees: compaction, orphan repair and deduplication
    // under the config in effect.
    let view = if compacted {
        Some(jpstore_engine::export::view(&store, &conv)?)
    } else {
        None
    };
    print_conversation(&mut out, &conv, view).context("writing to standard output")?;
    Ok(ExitCode::SUCCESS)
}

fn payload_size(p: &Payload) -> u64 {
    match p {
        Payload::Ref(r) => r.size,
        Payload::Inline(b) => b.len() as u64,
    }
}

/// Prints a conversation for a person; with `compacted`, what the model
/// sees (the view: compactions applied, orphans repaired).
pub fn print_conversation(
    out: &mut impl Write,
    conv: &Conversation,
    view: Option<Vec<Entry<Payload>>>,
) -> std::io::Result<()> {
    let compacted = view.is_some();
    let meta = &conv.state.metadata;
    writeln!(
        out,
        "conversation {}{}{}",
        conv.id,
        meta.title().map(|t| format!(": {t}")).unwrap_or_default(),
        if compacted {
            " (as the model sees it)"
        } else {
            ""
        }
    )?;
    let entries: Vec<Entry<Payload>> = if let Some(view) = view {
        view
    } else {
        conv.entries
            .iter()
            .map(|e| {
                e.clone()
                    .try_map_content(&mut |r| Ok::<_, std::convert::Infallible>(Payload::Ref(r)))
                    .unwrap_or_else(|never| match never {})
            })
            .collect()
    };
    let mut turns = TurnCounter::new();
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    for entry in &entries {
        let step = turns.step(entry);
        if step.opened {
            writeln!(out, "\n── turn {} ──", step.turn)?;
        }
        let Some(e) = entry.event() else {
            if let Entry::Unknown(o) = entry {
                let t = o.get("type").and_then(|t| t.as_str()).unwrap_or("?");
                writeln!(out, "  [unknown entry `{t}`, kept as is]")?;
            }
            continue;
        };
        match &e.kind {
            EventKind::TurnStart => {}
            EventKind::ChatRequest(r) => {
                let author = r.author.as_deref().unwrap_or("user");
                writeln!(out, "{author}: {}", excerpt(&r.content, 100))?;
                for res in &r.resources {
                    let (kind, p) = match &res.content {
                        ResourceContent::Text(p) => ("text", p),
                        ResourceContent::Binary(p) => ("binary", p),
                    };
                    writeln!(out, "  + {} ({kind}, {})", res.uri, size(payload_size(p)))?;
                }
            }
            EventKind::ChatResponse(ChatResponse::Message(m)) => {
                writeln!(out, "assistant: {}", excerpt(m, 100))?;
            }
            EventKind::ChatResponse(ChatResponse::Reasoning(m)) => {
                writeln!(
                    out,
                    "assistant (reasoning, {}): {}",
                    size(m.len() as u64),
                    excerpt(m, 80)
                )?;
            }
            EventKind::ChatResponse(ChatResponse::Data(d)) => {
                writeln!(out, "assistant (data): {}", excerpt(&d.to_string(), 100))?;
            }
            EventKind::ToolCallRequest(r) => {
                names.insert(&r.id, &r.name);
                let args = serde_json::Value::Object(r.arguments.clone()).to_string();
                writeln!(out, "  → {} [{}] {}", r.name, r.id, excerpt(&args, 80))?;
            }
            EventKind::ToolCallResponse(r) => {
                let name = names.get(r.id.as_str()).copied().unwrap_or("unknown");
                let mut total = 0;
                for b in &r.content {
                    match b {
                        Block::Text(t) => total += payload_size(&t.text),
                        Block::Resource(rb) => total += payload_size(rb.resource.content.payload()),
                        Block::Other(_) => {}
                    }
                }
                writeln!(
                    out,
                    "  ← {name} [{}] {}{} in {} block(s)",
                    r.id,
                    if r.is_error { "error, " } else { "" },
                    size(total),
                    r.content.len()
                )?;
            }
            EventKind::InquiryRequest(r) => {
                let q = r
                    .question
                    .get("text")
                    .and_then(|t| t.as_str())
                    .unwrap_or("");
                writeln!(out, "  ? inquiry [{}]: {}", r.id, excerpt(q, 80))?;
            }
            EventKind::InquiryResponse(r) => {
                writeln!(
                    out,
                    "  = answer [{}]: {}",
                    r.id,
                    excerpt(&r.answer.to_string(), 80)
                )?;
            }
            EventKind::ConfigDelta(d) => {
                let keys: Vec<&str> = d.delta.keys().map(String::as_str).collect();
                writeln!(out, "  [config change: {}]", keys.join(", "))?;
            }
            EventKind::CompactionUndo(u) => {
                writeln!(out, "  [compaction #{} undone]", u.undoes + 1)?;
            }
            EventKind::Compaction(c) => {
                writeln!(
                    out,
                    "  [compaction of turns {}..={}{}]",
                    c.from_turn,
                    c.to_turn,
                    if c.summary.is_some() {
                        ", summarized"
                    } else {
                        ""
                    }
                )?;
            }
        }
    }
    writeln!(out, "\n{} turns, {} events", turns.turns(), entries.len())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    /// One JSON document: id, metadata, base config and the events (plain,
    /// without JP's base64).
    Json,
    /// A JP conversation directory (events.json, metadata.json and, in that
    /// layout, base_config.json) that JP can open.
    Jp,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    /// The conversation id.
    id: String,
    /// The output format.
    #[arg(long, value_enum, default_value_t = ExportFormat::Json)]
    format: ExportFormat,
    /// For `json`: write to this file instead of standard output (replaced
    /// atomically). For `jp`: the conversation directory to write (default:
    /// `<id>-<title slug>` in the current directory); its files must not
    /// exist.
    #[arg(long)]
    out: Option<PathBuf>,
    /// For `json`: leave content as {"$blob", "size"} references instead of
    /// inlining it (no blob is read).
    #[arg(long)]
    refs: bool,
}

pub fn export(dir: &Path, args: ExportArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let conv = store.read(&parse_id(&args.id)?)?;
    let mode = if args.refs {
        ContentMode::Refs
    } else {
        ContentMode::Inline
    };
    let doc = match args.format {
        ExportFormat::Json => conversation_json(&store, &conv, mode)?,
        ExportFormat::Jp => {
            if args.refs {
                bail!("--refs applies to --format json only: JP files hold their content");
            }
            let files = jpstore_engine::jp::export::jp_files(&store, &conv)?;
            let out = args.out.unwrap_or_else(|| PathBuf::from(&files.dir_name));
            let written = jpstore_engine::jp::export::write_jp_dir(&out, &files)?;
            for w in &written {
                println!("{}", w.display());
            }
            if !files.lossy.is_empty() {
                eprintln!(
                    "jp-store: the export is lossy: JP's format cannot express {} item(s):",
                    files.lossy.len()
                );
                for l in &files.lossy {
                    eprintln!("  - {l}");
                }
            }
            return Ok(ExitCode::SUCCESS);
        }
    };
    let mut bytes = serde_json::to_vec_pretty(&doc)?;
    bytes.push(b'\n');
    match args.out {
        None => std::io::stdout()
            .lock()
            .write_all(&bytes)
            .context("writing to standard output")?,
        Some(path) => write_file_atomically(&path, &bytes)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn write_file_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .with_context(|| format!("creating a temp file in {}", dir.display()))?;
    tmp.write_all(bytes)
        .and_then(|()| tmp.as_file().sync_all())
        .with_context(|| format!("writing {}", path.display()))?;
    tmp.persist(path)
        .with_context(|| format!("replacing {}", path.display()))?;
    Ok(())
}

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

#[derive(Args, Debug)]
pub struct ImportArgs {
    /// JP conversation directories, or directories holding them (a
    /// workspace's `.jp/conversations`, including `.archive/`, or the
    /// workspace itself).
    #[arg(required = true)]
    paths: Vec<PathBuf>,
    /// Replace conversations that are already in the store (default: skip
    /// them with a message).
    #[arg(long)]
    force: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

/// Conversations imported per blob batch (one pack each), bounded by the
/// bytes of their files too.
const IMPORT_CHUNK_BYTES: u64 = 256 << 20;

pub fn import(dir: &Path, args: ImportArgs) -> Result<ExitCode> {
    use jpstore_engine::jp::import::{find_sources, prepare, read_source, Imported};
    let store = open_store(dir)?;
    let mut failures: Vec<(PathBuf, String)> = Vec::new();
    let mut sources = Vec::new();
    for p in &args.paths {
        match find_sources(p) {
            Ok(found) if found.is_empty() => failures.push((
                p.clone(),
                "no JP conversation directories (with an events.json) found".into(),
            )),
            Ok(found) => sources.extend(found),
            Err(e) => failures.push((p.clone(), e.to_string())),
        }
    }
    let total_bytes: u64 = sources
        .iter()
        .map(|d| {
            ["events.json", "metadata.json", "base_config.json"]
                .iter()
                .map(|f| std::fs::metadata(d.join(f)).map_or(0, |m| m.len()))
                .sum::<u64>()
        })
        .sum();
    let mut progress = crate::output::Progress::new("importing");
    let (mut imported, mut skipped, mut entries, mut read, mut log_bytes) =
        (0usize, 0usize, 0usize, 0u64, 0u64);
    let (mut blob_bytes, mut new_blobs) = (0u64, 0usize);
    let mut chunk = Vec::new();
    let mut chunk_bytes = 0u64;
    let mut done_bytes = 0u64;
    let mut flush = |chunk: &mut Vec<jpstore_engine::jp::import::Prepared>,
                     progress: &mut crate::output::Progress,
                     done_bytes: &mut u64|
     -> Result<()> {
        if chunk.is_empty() {
            return Ok(());
        }
        let (results, totals) = store.import(std::mem::take(chunk), args.force, &mut |_| {})?;
        blob_bytes += totals.stored_bytes;
        new_blobs += totals.new_blobs;
        for r in results {
            match r {
                Imported::Stored {
                    id,
                    entries: n,
                    source_bytes,
                    log_bytes: l,
                    replaced,
                } => {
                    imported += 1;
                    entries += n;
                    read += source_bytes;
                    log_bytes += l;
                    *done_bytes += source_bytes;
                    if replaced {
                        progress.println(&format!("replaced {id}"));
                    }
                }
                Imported::Skipped { id } => {
                    skipped += 1;
                    progress.println(&format!(
                        "skipped {id}: already in the store (--force replaces it)"
                    ));
                }
            }
        }
        progress.update(*done_bytes, total_bytes);
        Ok(())
    };
    for src in sources {
        match read_source(&src) {
            Ok(s) => {
                chunk_bytes += s.bytes;
                chunk.push(prepare(s));
                if chunk_bytes >= IMPORT_CHUNK_BYTES {
                    flush(&mut chunk, &mut progress, &mut done_bytes)?;
                    chunk_bytes = 0;
                }
            }
            Err(e) => {
                progress.println(&format!("failed: {e}"));
                failures.push((src, e.to_string()));
            }
        }
    }
    flush(&mut chunk, &mut progress, &mut done_bytes)?;
    progress.finish();
    if args.json {
        let failed: Vec<_> = failures
            .iter()
            .map(|(p, r)| json!({"path": p, "reason": r}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "imported": imported,
                "skipped": skipped,
                "failed": failed,
                "events": entries,
                "bytes_read": read,
                "bytes_stored": blob_bytes + log_bytes,
                "blob_bytes_stored": blob_bytes,
                "new_blobs": new_blobs,
                "log_bytes": log_bytes,
            }))?
        );
    } else {
        for (p, r) in &failures {
            eprintln!("jp-store: {}: {r}", p.display());
        }
        println!(
            "imported {imported} conversations ({entries} events), skipped {skipped}, failed {}; \
             read {}, stored {} ({} in {new_blobs} new blobs, {} of logs)",
            failures.len(),
            size(read),
            size(blob_bytes + log_bytes),
            size(blob_bytes),
            size(log_bytes)
        );
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ViewFormat {
    /// The projected events as a JSON array (jp-store's plain form; tool
    /// response content always a list of blocks).
    Json,
    /// The request body of Anthropic's Messages API.
    Anthropic,
    /// The request body of OpenAI's Chat Completions API.
    Openai,
}

pub fn view(dir: &Path, id: &str, format: ViewFormat, refs: bool) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let conv = store.read(&parse_id(id)?)?;
    let mode = if refs {
        ContentMode::Refs
    } else {
        ContentMode::Inline
    };
    let provider = match format {
        ViewFormat::Json => None,
        ViewFormat::Anthropic => Some(jpstore_engine::export::Provider::Anthropic),
        ViewFormat::Openai => Some(jpstore_engine::export::Provider::OpenAi),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    match provider {
        None => {
            let view = jpstore_engine::export::into_view(&store, conv)?;
            let rendered = render_view(&store, &view, mode);
            let written = serde_json::to_writer_pretty(&mut out, &rendered);
            if let Some(e) = rendered.take_error() {
                return Err(e.into());
            }
            written.context("writing to standard output")?;
        }
        Some(_) if refs => {
            bail!("--refs applies to --format json only: a provider request holds its content")
        }
        Some(p) => {
            let doc = jpstore_engine::export::provider_request(&store, &conv, p)?;
            serde_json::to_writer_pretty(&mut out, &doc).context("writing to standard output")?;
        }
    }
    out.write_all(b"\n")
        .and_then(|()| out.flush())
        .context("writing to standard output")?;
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct CompactArgs {
    /// The conversation id.
    id: String,
    /// The profile (`conversation.compaction.profiles.<name>`; default: the
    /// config's `default_profile`, or the built-in one that strips reasoning
    /// and tool calls).
    #[arg(long)]
    profile: Option<String>,
    /// First turn: a 0-based turn, -N (N turns before the last), a duration
    /// (`5h`: the first turn after the one active 5 hours ago), or `last`
    /// (after the last compaction). Default: 0. Before the first turn it is
    /// turn 0 (`-99`); after the last turn it is refused (`99`: the range
    /// would cover no turn).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_bound)]
    from: Option<Bound>,
    /// Last turn, in the same forms. Default: --keep-last turns before the
    /// last. After the last turn it is the last turn (`99`); before the
    /// first turn it is refused (`-99`: the range would cover no turn). So a
    /// bound beyond the end the range extends toward is clamped, and one
    /// beyond the other end is refused, for --from and --to alike (JP's
    /// rule).
    #[arg(long, allow_hyphen_values = true, value_parser = parse_bound)]
    to: Option<Bound>,
    /// Turns at the end left untouched when --to is not given (default:
    /// `conversation.compaction.keep_last`, else 0).
    #[arg(long)]
    keep_last: Option<u64>,
    /// Show per turn what would change and the estimated tokens of the view
    /// before and after; write nothing.
    #[arg(long)]
    dry_run: bool,
    /// The summary text, for a profile that summarizes.
    #[arg(long, conflicts_with = "summary_file")]
    summary: Option<String>,
    /// Read the summary text (UTF-8) from a file: a regular file no larger
    /// than a log record (64 MiB); a FIFO or a device is refused.
    #[arg(long)]
    summary_file: Option<PathBuf>,
    /// Revoke the last compaction in effect, or the N-th (1-based), by
    /// appending an entry; nothing is deleted.
    #[arg(long, num_args = 0..=1, default_missing_value = "0", conflicts_with_all = ["profile", "from", "to", "keep_last", "dry_run", "summary", "summary_file"])]
    undo: Option<u64>,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_bound(s: &str) -> std::result::Result<Bound, String> {
    Bound::parse(s).map_err(|e| e.to_string())
}

pub fn compact(dir: &Path, args: CompactArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = parse_id(&args.id)?;
    if let Some(n) = args.undo {
        let n = (n > 0).then_some(n);
        let undone = store.undo_compaction(&id, n, Timestamp::now())?;
        if args.json {
            println!("{}", json!({"id": id.as_str(), "undone": undone}));
        } else {
            println!("undid compaction {undone} of {id}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let summary = match (&args.summary, &args.summary_file) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(f)) => {
            // A summary is stored in the compaction's record: no larger
            // than a record.
            let max = u64::from(store.options().log.max_record_size);
            let bytes = user_file::read_file(f, max, LastLink::Follow)?;
            Some(String::from_utf8(bytes).map_err(|e| {
                anyhow::anyhow!(
                    "{}: not UTF-8 text (byte {})",
                    f.display(),
                    e.utf8_error().valid_up_to()
                )
            })?)
        }
        (None, None) => None,
    };
    let request = CompactRequest {
        profile: args.profile.clone(),
        from: args.from,
        to: args.to,
        keep_last: args.keep_last,
        summary,
        dry_run: args.dry_run,
        source: None,
    };
    let mut summarize = |table: &jpstore_engine::event::Object,
                         raw: &[Entry]|
     -> jpstore_engine::error::Result<String> {
        store.summarize_from_profile(table, raw, args.profile.as_deref())
    };
    let out = store.compact(&id, &request, Timestamp::now(), &mut summarize)?;
    let c = &out.compaction;
    if args.json {
        let changes: Vec<_> = out
            .changes
            .iter()
            .map(|t| {
                json!({"turn": t.turn, "events": t.events, "summarized": t.summarized,
                       "reasoning_dropped": t.reasoning, "requests_stripped": t.requests,
                       "responses_stripped": t.responses})
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({
                "id": id.as_str(),
                "dry_run": args.dry_run,
                "profile": out.profile,
                "from_turn": c.from_turn,
                "to_turn": c.to_turn,
                "requested": [out.requested.0, out.requested.1],
                "summary": c.summary,
                "turns": changes,
                "estimated_tokens_before": out.tokens_before,
                "estimated_tokens_after": out.tokens_after,
                "offset": out.offset,
            }))?
        );
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if args.dry_run {
        "would compact"
    } else {
        "compacted"
    };
    let grown = if out.requested != (c.from_turn, c.to_turn) {
        format!(
            " (asked {}..={}, grown over overlapping summaries)",
            out.requested.0, out.requested.1
        )
    } else {
        String::new()
    };
    println!(
        "{verb} turns {}..={} of {id} with profile {}{grown}",
        c.from_turn, c.to_turn, out.profile
    );
    for t in &out.changes {
        let what = if t.summarized {
            "replaced by the summary".to_string()
        } else {
            let mut parts = Vec::new();
            if t.reasoning > 0 {
                parts.push(format!("{} reasoning dropped", t.reasoning));
            }
            if t.requests > 0 {
                parts.push(format!("{} tool call requests stripped", t.requests));
            }
            if t.responses > 0 {
                parts.push(format!("{} tool responses stripped", t.responses));
            }
            if parts.is_empty() {
                "unchanged".to_string()
            } else {
                parts.join(", ")
            }
        };
        println!("  turn {:>4}: {:>3} events, {what}", t.turn, t.events);
    }
    if args.dry_run && c.summary.as_deref() == Some("") {
        println!("  (the summary is generated only when the compaction is made)");
    }
    let pct = if out.tokens_before > 0 {
        100.0 * (out.tokens_before as f64 - out.tokens_after as f64) / out.tokens_before as f64
    } else {
        0.0
    };
    println!(
        "estimated tokens of the view (characters / 4): {} -> {} ({pct:.0}% less)",
        out.tokens_before, out.tokens_after
    );
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct ForkArgs {
    /// The conversation to fork.
    id: String,
    /// Only its last N turns (the config in effect where they start becomes
    /// the fork's base config; compactions are left out).
    #[arg(long)]
    last: Option<u64>,
    /// Compact the fork, with the given profile or the default one. The
    /// compaction is made before anything is written and published in the
    /// fork's log: an unknown profile or a failed summary creates no fork.
    #[arg(long, num_args = 0..=1, default_missing_value = "")]
    compact: Option<String>,
    /// The new conversation's id (default: JP's kind, from the time).
    #[arg(long = "id", value_name = "NEW")]
    id_new: Option<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

pub fn fork(dir: &Path, args: ForkArgs) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = parse_id(&args.id)?;
    let new_id = args.id_new.as_deref().map(parse_id).transpose()?;
    // The fork and its compaction are one log, published whole: a profile
    // that does not exist (or a failed summary) leaves no fork behind.
    let profile = args.compact.map(|p| (!p.is_empty()).then_some(p));
    let request = profile.as_ref().map(|profile| CompactRequest {
        profile: profile.clone(),
        ..Default::default()
    });
    let mut summarize = |table: &jpstore_engine::event::Object,
                         raw: &[Entry]|
     -> jpstore_engine::error::Result<String> {
        store.summarize_from_profile(table, raw, profile.as_ref().and_then(|p| p.as_deref()))
    };
    let compact = request.as_ref().map(|r| {
        (
            r,
            &mut summarize as &mut jpstore_engine::compaction::Summarizer<'_>,
        )
    });
    let (writer, compacted) =
        store.fork_compacted(&id, args.last, new_id, Timestamp::now(), compact)?;
    let forked = writer.id().clone();
    let entries = writer.state().entries;
    drop(writer);
    if args.json {
        println!(
            "{}",
            json!({
                "id": forked.as_str(),
                "forked_from": id.as_str(),
                "entries": entries,
                "compacted": compacted.map(|o| json!({"from_turn": o.compaction.from_turn, "to_turn": o.compaction.to_turn, "profile": o.profile})),
            })
        );
    } else {
        println!("{forked}");
    }
    Ok(ExitCode::SUCCESS)
}

#[derive(Args, Debug)]
pub struct AttachArgs {
    /// The conversation id.
    id: String,
    /// Files and directories to attach (directories are walked, honouring
    /// .gitignore and skipping hidden files; a path named here is always
    /// taken).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// The message of the request (default: empty).
    #[arg(short = 'm', long)]
    message: Option<String>,
    /// Abort, appending nothing, if any file cannot be read (default: skip
    /// it with a warning).
    #[arg(long)]
    strict: bool,
    /// Attach the target of every symbolic link found in a directory, even
    /// one outside it (default: a link whose target is outside the
    /// directory named here is skipped with a warning; a link that stays
    /// inside is attached, by its target's URI).
    #[arg(long)]
    follow_links: bool,
    /// Print the outcome as JSON.
    #[arg(long)]
    json: bool,
}

/// `attach`: one request whose resources are snapshots of the files. Files
/// that cannot be read are reported on stderr and skipped (exit 0), or with
/// `--strict` abort the attach (exit 1, nothing appended).
pub fn attach(dir: &Path, args: AttachArgs) -> Result<ExitCode> {
    use jpstore_engine::attach;
    let store = open_store(dir)?;
    let id = parse_id(&args.id)?;
    let cwd = std::env::current_dir().context("finding the current directory")?;
    let links = if args.follow_links {
        attach::Links::Follow
    } else {
        attach::Links::StayInside
    };
    let (files, mut skipped) = attach::collect(&args.paths, &cwd, links);
    if args.strict {
        if let Some((path, e)) = skipped.first() {
            bail!("cannot use {}: {e}; nothing was appended", path.display());
        }
    }
    for (path, e) in &skipped {
        eprintln!("jp-store: warning: skipped {}: {e}", path.display());
    }
    let mut bar = crate::output::Progress::new("attach");
    let result = store.attach(&id, &files, args.message, args.strict, &mut |p| {
        // Files are not sized before they are read (that would cost a stat
        // each): the total is estimated from the bytes per file so far.
        let per_file = p.bytes_done / p.items_done.max(1) as u64;
        let total = per_file.saturating_mul(p.items_total as u64);
        bar.update(p.bytes_done, total.max(p.bytes_done));
    });
    bar.finish();
    let mut outcome = match result {
        Ok(outcome) => outcome,
        // Every reason is a warning, as for a partial attach; the error
        // only says what came of it.
        Err(EngineError::Attach(attach::AttachError::NothingToAttach { skipped: unread })) => {
            for (path, e) in &unread {
                eprintln!("jp-store: warning: skipped {}: {e}", path.display());
            }
            bail!(
                "no file could be attached ({} skipped); nothing was appended",
                skipped.len() + unread.len()
            );
        }
        Err(e) => return Err(e.into()),
    };
    for (path, e) in &outcome.skipped {
        eprintln!("jp-store: warning: skipped {}: {e}", path.display());
    }
    skipped.append(&mut outcome.skipped);
    if args.json {
        println!(
            "{}",
            json!({
                "id": id.as_str(),
                "offset": outcome.offset,
                "turn": outcome.turn,
                "files": outcome.files,
                "text_files": outcome.text_files,
                "bytes": outcome.bytes,
                "new_blobs": outcome.new_blobs,
                "pack_bytes": outcome.pack_bytes,
                "pack": outcome.pack,
                "skipped": skipped
                    .iter()
                    .map(|(p, e)| json!({"path": p.to_string_lossy(), "error": e.to_string()}))
                    .collect::<Vec<_>>(),
            })
        );
    } else {
        println!(
            "attached {} files ({}, {} text) to {id} at turn {}: {} new blobs, pack {}{}",
            outcome.files,
            size(outcome.bytes),
            outcome.text_files,
            outcome.turn,
            outcome.new_blobs,
            size(outcome.pack_bytes),
            if skipped.is_empty() {
                String::new()
            } else {
                format!("; {} skipped", skipped.len())
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `resolve`: the current content of a `file://` resource as a Resource
/// JSON object.
pub fn resolve(uri: &str) -> Result<ExitCode> {
    let cwd = std::env::current_dir().context("finding the current directory")?;
    let resource = jpstore_engine::attach::resolve(uri, &cwd)?;
    println!("{}", serde_json::to_string_pretty(&resource)?);
    Ok(ExitCode::SUCCESS)
}
