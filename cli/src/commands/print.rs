//! `jp-store print`: a conversation for a person.

use super::{excerpt, open_store, parse_id, size};
use crate::output::shown;
use anyhow::{Context, Result};
use jpstore_engine::event::{Block, ChatResponse, Entry, EventKind, Payload, ResourceContent};
use jpstore_engine::internal::conversation::read::Conversation;
use jpstore_engine::internal::event::turns::TurnCounter;
use jpstore_engine::internal::IntoPayloadRefs as _;
use jpstore_engine::internal::StoreInterior as _;
use std::collections::BTreeMap;
use std::io::Write;
use std::process::ExitCode;

pub fn print(dir: &super::StoreLocation, id: &str, compacted: bool) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let conv = store.read(&parse_id(id)?)?;
    super::warn_torn_tail(&conv.id, conv.torn_tail);
    let out = std::io::stdout();
    let mut out = out.lock();
    // What the model sees: compaction, orphan repair and deduplication
    // under the config in effect.
    let view = if compacted {
        Some(jpstore_engine::internal::export::view(&store, &conv)?)
    } else {
        None
    };
    print_conversation(&mut out, &conv, view).context("writing to standard output")?;
    Ok(ExitCode::SUCCESS)
}

/// One line of [`print_conversation`], its control characters escaped
/// ([`shown`]: a title or a message is stored text).
fn put(out: &mut impl Write, line: &str) -> std::io::Result<()> {
    writeln!(out, "{}", shown(line))
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
    put(
        out,
        &format!(
            "conversation {}{}{}",
            conv.id,
            meta.title().map(|t| format!(": {t}")).unwrap_or_default(),
            if compacted {
                " (as the model sees it)"
            } else {
                ""
            }
        ),
    )?;
    let entries: Vec<Entry<Payload>> = if let Some(view) = view {
        view
    } else {
        conv.entries
            .iter()
            .map(|e| e.clone().into_payload_refs())
            .collect()
    };
    let mut turns = TurnCounter::new();
    let mut names: BTreeMap<&str, &str> = BTreeMap::new();
    for entry in &entries {
        let step = turns.step(entry);
        if step.opened {
            put(out, "")?;
            put(out, &format!("── turn {} ──", step.turn))?;
        }
        let Some(e) = entry.event() else {
            if let Entry::Unknown(o) = entry {
                let t = o.get("type").and_then(|t| t.as_str()).unwrap_or("?");
                match jpstore_engine::internal::event::json::misfit(o) {
                    Some(why) => put(out, &format!("  [`{t}` entry that does not read as one ({why}), kept as is; not in the view]"))?,
                    None => put(out, &format!("  [unknown entry `{t}`, kept as is]"))?,
                }
            }
            continue;
        };
        match &e.kind {
            EventKind::TurnStart => {}
            EventKind::ChatRequest(r) => {
                let author = r.author.as_deref().unwrap_or("user");
                put(out, &format!("{author}: {}", excerpt(&r.content, 100)))?;
                for res in &r.resources {
                    let (kind, p) = match &res.content {
                        ResourceContent::Text(p) => ("text", p),
                        ResourceContent::Binary(p) => ("binary", p),
                    };
                    put(out, &format!("  + {} ({kind}, {})", res.uri, size(p.len())))?;
                }
            }
            EventKind::ChatResponse(ChatResponse::Message(m)) => {
                put(out, &format!("assistant: {}", excerpt(m, 100)))?;
            }
            EventKind::ChatResponse(ChatResponse::Reasoning(m)) => {
                put(
                    out,
                    &format!(
                        "assistant (reasoning, {}): {}",
                        size(m.len() as u64),
                        excerpt(m, 80)
                    ),
                )?;
            }
            EventKind::ChatResponse(ChatResponse::Data(d)) => {
                put(
                    out,
                    &format!("assistant (data): {}", excerpt(&d.to_string(), 100)),
                )?;
            }
            EventKind::ToolCallRequest(r) => {
                names.insert(&r.id, &r.name);
                let args = serde_json::Value::Object(r.arguments.clone()).to_string();
                put(
                    out,
                    &format!("  → {} [{}] {}", r.name, r.id, excerpt(&args, 80)),
                )?;
            }
            EventKind::ToolCallResponse(r) => {
                let name = names.get(r.id.as_str()).copied().unwrap_or("unknown");
                let mut total = 0;
                for b in &r.content {
                    match b {
                        Block::Text(t) => total += t.text.len(),
                        Block::Resource(rb) => total += rb.resource.content.payload().len(),
                        Block::Other(_) => {}
                    }
                }
                put(
                    out,
                    &format!(
                        "  ← {name} [{}] {}{} in {} block(s)",
                        r.id,
                        if r.is_error { "error, " } else { "" },
                        size(total),
                        r.content.len()
                    ),
                )?;
            }
            EventKind::InquiryRequest(r) => {
                let q = r
                    .question
                    .get("text")
                    .and_then(|t| t.as_str())
                    .unwrap_or("");
                put(out, &format!("  ? inquiry [{}]: {}", r.id, excerpt(q, 80)))?;
            }
            EventKind::InquiryResponse(r) => {
                put(
                    out,
                    &format!(
                        "  = answer [{}]: {}",
                        r.id,
                        excerpt(&r.answer.to_string(), 80)
                    ),
                )?;
            }
            EventKind::ConfigDelta(d) => {
                let keys: Vec<&str> = d.delta.keys().map(String::as_str).collect();
                put(out, &format!("  [config change: {}]", keys.join(", ")))?;
            }
            EventKind::CompactionUndo(u) => {
                put(out, &format!("  [compaction #{} undone]", u.undoes + 1))?;
            }
            EventKind::Compaction(c) => {
                put(
                    out,
                    &format!(
                        "  [compaction of turns {}..={}{}]",
                        c.from_turn,
                        c.to_turn,
                        if c.summary.is_some() {
                            ", summarized"
                        } else {
                            ""
                        }
                    ),
                )?;
            }
        }
    }
    put(out, "")?;
    put(
        out,
        &format!("{} turns, {} events", turns.turns(), entries.len()),
    )
}
