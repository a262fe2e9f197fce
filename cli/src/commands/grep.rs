//! `jp-store grep`: a regular expression over the text of conversations.

use super::{open_store_with, parse_id, warn_torn_tail};
use anyhow::Result;
use clap::{Args, ValueEnum};
use jpstore_engine::internal::SearcherInterior as _;
use jpstore_engine::internal::StoreInterior as _;
use jpstore_engine::search::{Hit, Role, SearchOptions, Searcher};
use std::process::ExitCode;

/// Who an entry is from (`--role`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RoleArg {
    /// chat_request, inquiry_response.
    User,
    /// chat_response (messages, reasoning), tool_call_request.
    Assistant,
    /// tool_call_response.
    Tool,
    /// compaction summaries, entries of other types.
    Other,
}

impl RoleArg {
    fn role(self) -> Role {
        match self {
            RoleArg::User => Role::User,
            RoleArg::Assistant => Role::Assistant,
            RoleArg::Tool => Role::Tool,
            RoleArg::Other => Role::Other,
        }
    }
}

/// The arguments of `jp-store grep`.
#[derive(Args, Debug)]
pub struct GrepArgs {
    /// A regular expression (the syntax of Rust's `regex` crate: `\bfn
    /// main\b`, `(?i)error`, `^use `), or with -F a fixed string. `^` and
    /// `$` match at the start and end of each line.
    pub pattern: String,
    /// Search only these conversations (default: every conversation).
    #[arg(value_name = "ID")]
    pub ids: Vec<String>,
    /// Take PATTERN as a fixed string, not a regular expression.
    #[arg(short = 'F', long)]
    pub fixed_strings: bool,
    /// Ignore case (Unicode-aware).
    #[arg(short = 'i', long)]
    pub ignore_case: bool,
    /// Print only the ids of the conversations with a hit, one a line.
    #[arg(short = 'l', long = "files-with-matches", visible_alias = "list")]
    pub list: bool,
    /// Only entries from ROLE (repeat it, or separate with commas).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "ROLE")]
    pub role: Vec<RoleArg>,
    /// Only entries of TYPE (chat_request, chat_response,
    /// tool_call_request, tool_call_response, inquiry_request,
    /// inquiry_response, compaction, another entry's type) or parts named
    /// TYPE (message, reasoning, data, arguments, result, resource,
    /// question, answer, summary, entry); repeat it, or separate with
    /// commas.
    #[arg(long = "type", value_delimiter = ',', value_name = "TYPE")]
    pub types: Vec<String>,
    /// Print one JSON object a line: per hit {"conversation", "turn",
    /// "entry", "type", "role", "part", "line", "text", "match": [start,
    /// end] (byte offsets in text), and "blob", "uri", "tool" where they
    /// apply}; with -l, {"conversation", "title"} per conversation.
    #[arg(long)]
    pub json: bool,
}

/// `jp-store grep`. Exit status as grep's: 0 when something matched, 1
/// when nothing did, 2 on an error (reported; the rest is searched).
pub fn grep(dir: &super::StoreLocation, args: GrepArgs) -> Result<ExitCode> {
    match run(dir, &args) {
        Ok(code) => Ok(code),
        Err(e) => {
            crate::errln!("jp-store: error: {}", crate::message(&e));
            Ok(ExitCode::from(2))
        }
    }
}

fn run(dir: &super::StoreLocation, args: &GrepArgs) -> Result<ExitCode> {
    let options = SearchOptions {
        fixed: args.fixed_strings,
        ignore_case: args.ignore_case,
        roles: args.role.iter().map(|r| r.role()).collect(),
        types: args.types.clone(),
        first_only: args.list,
        max_hits: None,
    };
    // Blobs are read a pack's group at a time, one group per core. The
    // group cache keeps no group larger than a quarter of its bound, and
    // the groups of imports (`max`) are 8 MiB: with the default bound (32
    // MiB) none would be kept, and each blob read would decompress its
    // whole group again. So: a quarter well above 8 MiB, and room for
    // several such groups per core.
    let mut store_options = jpstore_engine::StoreOptions::default();
    store_options.blobs.group_cache_bytes = store_options
        .blobs
        .group_cache_bytes
        .max(jpstore_engine::internal::cores() as u64 * (32 << 20))
        .max(64 << 20);
    let store = open_store_with(dir, store_options)?;
    let searcher = Searcher::new(&store, &args.pattern, options)?;
    let mut failed = false;
    let ids = if args.ids.is_empty() {
        store.ids()?
    } else {
        let mut ids = Vec::new();
        for text in &args.ids {
            match parse_id(text) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    crate::errln!("jp-store: error: {}", crate::message(&e));
                    failed = true;
                }
            }
        }
        ids
    };
    let (mut conversations, mut hits) = (0u64, 0u64);
    searcher.each(&ids, |id, outcome| {
        let found = match outcome {
            Ok(found) => found,
            // Removed since it was listed: as if listed a moment later.
            Err(e) if args.ids.is_empty() && store.gone_since_listed(id, &e) => return true,
            Err(e) => {
                crate::errln!("jp-store: error: conversation {id} cannot be searched: {e}");
                failed = true;
                return true;
            }
        };
        warn_torn_tail(id, found.torn_tail);
        for p in &found.problems {
            crate::errln!(
                "jp-store: error: conversation {id}, turn {}, entry {}: blob {} cannot be read, not searched: {}",
                p.turn,
                p.entry,
                p.blob,
                p.error
            );
            failed = true;
        }
        if found.hits.is_empty() {
            return true;
        }
        conversations += 1;
        hits += found.hits.len() as u64;
        if args.list {
            if args.json {
                let line = serde_json::json!({"conversation": id.as_str(), "title": found.title});
                crate::jsonln!("{line}");
            } else {
                crate::outln!("{id}");
            }
            return true;
        }
        for hit in &found.hits {
            if args.json {
                crate::jsonln!("{}", hit_json(id.as_str(), hit));
            } else {
                crate::outln!("{}", hit_line(id.as_str(), hit));
            }
        }
        true
    });
    let groups = store.blobs().group_cache_stats();
    crate::output::detail(&format!(
        "{hits} hits in {conversations} of {} conversations; {} blobs read, {} pack groups decompressed",
        ids.len(),
        searcher.blobs_read(),
        groups.decompressed
    ));
    Ok(if failed {
        ExitCode::from(2)
    } else if hits > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The JSON object of a hit.
pub(crate) fn hit_json(id: &str, hit: &Hit) -> serde_json::Value {
    let mut o = serde_json::json!({
        "conversation": id,
        "turn": hit.turn,
        "entry": hit.entry,
        "type": hit.entry_type,
        "role": hit.role.to_string(),
        "part": hit.part,
        "line": hit.line,
        "text": hit.text,
        "match": [hit.span.0, hit.span.1],
    });
    if let Some(map) = o.as_object_mut() {
        if let Some(b) = &hit.blob {
            map.insert("blob".into(), b.to_string().into());
        }
        if let Some(u) = &hit.uri {
            map.insert("uri".into(), u.clone().into());
        }
        if let Some(t) = &hit.tool {
            map.insert("tool".into(), t.clone().into());
        }
    }
    o
}

/// The most of a line a person is shown (a tool's output may be one line
/// of megabytes): this many characters around the match.
const SHOWN_CHARS: usize = 200;

/// `ID turn T entry E PART:LINE: TEXT` (the text through `outln!`, which
/// escapes control characters).
fn hit_line(id: &str, hit: &Hit) -> String {
    let part = match (&hit.uri, &hit.tool) {
        (Some(uri), _) => format!("{} {uri}", hit.part),
        (None, Some(tool)) => format!("{} of {tool}", hit.part),
        _ => hit.part.to_owned(),
    };
    format!(
        "{id} turn {} entry {} {part}:{}: {}",
        hit.turn,
        hit.entry,
        hit.line,
        window(&hit.text, hit.span.0)
    )
}

/// `text` cut to [`SHOWN_CHARS`] characters around byte offset `at`, with
/// `…` where it was cut.
pub(crate) fn window(text: &str, at: usize) -> std::borrow::Cow<'_, str> {
    if text.chars().count() <= SHOWN_CHARS {
        return text.into();
    }
    let at = (0..=at.min(text.len()))
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(0);
    let before = text[..at].chars().count();
    let skip = before.saturating_sub(SHOWN_CHARS / 4);
    let mut out = String::new();
    if skip > 0 {
        out.push('…');
    }
    let mut chars = text.chars().skip(skip);
    out.extend(chars.by_ref().take(SHOWN_CHARS));
    if chars.next().is_some() {
        out.push('…');
    }
    out.into()
}

#[cfg(test)]
mod tests {
    use super::window;

    #[test]
    fn long_lines_are_cut_around_the_match() {
        assert_eq!(window("short", 2), "short");
        let long = format!("{}MATCH{}", "a".repeat(1000), "b".repeat(1000));
        let shown = window(&long, 1000);
        assert!(shown.starts_with('…') && shown.ends_with('…'));
        assert!(shown.contains("MATCH"));
        assert_eq!(shown.chars().count(), super::SHOWN_CHARS + 2);
    }
}
