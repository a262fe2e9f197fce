//! `jp-store append`: append events read from standard input.

use super::{open_store, parse_id};
use crate::output::{count, count_of};
use anyhow::{bail, Context, Result};
use jpstore_engine::error::Error as EngineError;
use jpstore_engine::event::Entry;
use jpstore_engine::internal::event::input::{parse_input, ParsedInput};
use jpstore_engine::internal::event::json::{ParseMode, EVENT_TYPES};
use jpstore_engine::internal::StoreInterior as _;
use jpstore_engine::timestamp::Timestamp;
use jpstore_engine::AutoCompaction;
use jpstore_integrations::user_file::{self};
use std::process::ExitCode;

/// Largest input `append` reads from standard input.
const MAX_INPUT: u64 = 1 << 30;

/// The known entry type nearest to `unknown` by edit distance, if it is
/// near enough to be a misspelling of it (at most a third of its letters
/// differ).
pub(crate) fn nearest_type(unknown: &str) -> Option<&'static str> {
    let (distance, nearest) = EVENT_TYPES
        .iter()
        .map(|t| (edit_distance(unknown, t), *t))
        .min()?;
    (distance > 0 && distance <= nearest.len().max(unknown.len()) / 3).then_some(nearest)
}

/// The Levenshtein distance of `a` and `b`, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// What is said of an entry of an unknown type: the nearest known type, or
/// the known types.
pub(crate) fn unknown_type_message(type_name: &str) -> String {
    let hint = match nearest_type(type_name) {
        Some(t) => format!("did you mean `{t}`?"),
        None => format!("the known types are {}", EVENT_TYPES.join(", ")),
    };
    format!(
        "unknown entry type `{type_name}` ({hint}): it would be stored as written, \
         but as no event (the view and a model never see it)"
    )
}

pub fn append(
    dir: &super::StoreLocation,
    id: &str,
    strict: bool,
    json_out: bool,
) -> Result<ExitCode> {
    let store = open_store(dir)?;
    let id = parse_id(id)?;
    if std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        // A person typing: say what is read and how it ends.
        crate::output::note(&format!(
            "reading events for {id} from standard input (JSON: one object per line, or an array) \
             until end of file (Ctrl-D), then appending them as one batch"
        ));
    }
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
    // Entries of a type this build does not know are kept verbatim (a
    // newer JP's), but a misspelt type is kept for good as well: say so.
    let unknown: Vec<String> = entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e {
            Entry::Unknown(obj) => {
                let type_name = obj.get("type").and_then(|t| t.as_str()).unwrap_or("");
                let line = lines.get(i).copied().unwrap_or(0);
                Some(format!(
                    "stdin line {line} (entry {}): {}",
                    i + 1,
                    unknown_type_message(type_name)
                ))
            }
            Entry::Event(_) => None,
        })
        .collect();
    if strict && !unknown.is_empty() {
        bail!("{}; nothing was appended (--strict)", unknown.join("; "));
    }
    for w in &unknown {
        crate::errln!("jp-store: warning: {w}; appended all the same (--strict refuses it)");
    }
    let mut on_cut = |cut: &jpstore_engine::internal::log::CutTail| {
        crate::output::note(&format!(
            "note: cut an incomplete record of {} bytes at offset {}, left by an append that did not complete (a crash, or a write that failed, such as on a full disk); its bytes were copied to {}",
            cut.len,
            cut.offset,
            store.display(&cut.copy).display()
        ));
    };
    let mut summarize = jpstore_integrations::summarizer::profile_summarizer(&store);
    let report =
        match store.append_turn(&id, entries, Timestamp::now(), &mut on_cut, &mut summarize) {
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
            // A write of unknown outcome: the batch may be in the log (whole)
            // or not, and saying either would be a guess.
            Err(e @ (EngineError::SyncFailed { .. } | EngineError::Poisoned { .. })) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "the outcome of this append is unknown: the batch may be in the log (whole) \
                     or not at all; read the conversation (jp-store view {id}) before appending it again"
                )))
            }
            Err(e @ EngineError::AppendConflict { .. }) => {
                return Err(anyhow::Error::new(e).context(format!(
                    "nothing was appended: another writer appended first at each of {} attempts",
                    jpstore_engine::internal::append::CONFLICT_ATTEMPTS
                )))
            }
            Err(e) => return Err(anyhow::Error::new(e).context("nothing was appended")),
        };
    if report.attempts > 1 {
        crate::output::detail(&format!(
            "appended at attempt {}: another writer appended first",
            report.attempts
        ));
    }
    // Automatic compaction (D17) after a completed turn; the append itself
    // is durable already, so a failure there is reported, not fatal.
    match &report.auto_compaction {
        AutoCompaction::Made(out) => crate::output::note(&format!(
            "automatic compaction of turns {}..={} with profile {} (estimated tokens {} -> {})",
            out.compaction.from_turn,
            out.compaction.to_turn,
            out.profile,
            out.tokens_before,
            out.tokens_after
        )),
        AutoCompaction::NotDue => {}
        AutoCompaction::Failed(e) => {
            crate::errln!("jp-store: warning: automatic compaction failed: {e}")
        }
    }
    if json_out {
        crate::jsonln!("{}", serde_json::to_string(&report)?);
    } else {
        let outcome = &report.append;
        crate::outln!(
            "appended {} to {id} ({}, {} of {})",
            count_of(outcome.entries, "entry"),
            count_of(outcome.payloads, "payload"),
            count_of(outcome.new_blobs, "new blob"),
            count(outcome.new_blob_bytes, "byte")
        );
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_misspelt_type_is_named_with_the_nearest_known_one() {
        assert_eq!(nearest_type("chat_respons"), Some("chat_response"));
        assert_eq!(nearest_type("chat_reqest"), Some("chat_request"));
        assert_eq!(
            nearest_type("tool_call_respones"),
            Some("tool_call_response")
        );
        assert_eq!(nearest_type("turnstart"), Some("turn_start"));
        assert_eq!(nearest_type("Turn_Start"), Some("turn_start"));
        assert_eq!(nearest_type("chat_response"), None, "known");
        assert_eq!(nearest_type("x_custom_note"), None, "not a misspelling");
        assert_eq!(nearest_type(""), None);
        assert!(unknown_type_message("chat_respons").contains("did you mean `chat_response`?"));
        assert!(unknown_type_message("note").contains("the known types are turn_start, "));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
