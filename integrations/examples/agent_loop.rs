//! An agent's loop over a jp-store conversation: the user asks, the model
//! calls a tool (reading a file), the tool's output goes into the log, the
//! model answers; before every request to the model, the request body is
//! built from the conversation's view and measured, and when it is over the
//! agent's token budget the older turns are compacted and the request is
//! built again, smaller.
//!
//! ```sh
//! cargo run -p jpstore-integrations --example agent_loop            # a temporary store
//! cargo run -p jpstore-integrations --example agent_loop -- DIR     # a store in DIR (made if new or empty)
//! ```
//!
//! No model is called: the model's answers are canned, and the request
//! body is measured instead of sent. `cargo test` runs this program's
//! [`run`] (see the test at the end).

use std::error::Error;
use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use jpstore_engine::compaction::{no_summarizer, Bound, CompactRequest, CompactionError};
use jpstore_engine::conversation::ConversationId;
use jpstore_engine::event::{
    ChatRequest, ChatResponse, Entry, EventKind, Payload, ToolCallRequest, ToolCallResponse,
};
use jpstore_engine::stats::tokens;
use jpstore_engine::{AutoCompaction, ConversationHandle, NewConversation, Store, StoreOptions};
use jpstore_integrations::provider::{provider_request_view, Provider};
use serde_json::json;

/// Turns the loop runs.
const TURNS: usize = 6;
/// The most tokens the agent lets a request body have.
const BUDGET_TOKENS: u64 = 5_000;
/// Turns a compaction leaves as they are, at the end of the conversation.
const KEEP_LAST_TURNS: u64 = 1;
/// Characters of each file the tool "reads": about 2,000 tokens, so that
/// the budget holds about two turns.
const FILE_CHARS: usize = 8_000;

/// What the loop did, for whoever ran it (`main` prints it; the test checks
/// it).
#[derive(Debug)]
pub struct Summary {
    /// Whether the store was made by this run (else it was opened).
    pub created_store: bool,
    /// The conversation the loop wrote.
    pub conversation: ConversationId,
    /// Turns in it at the end.
    pub turns: u64,
    /// Every compaction the budget called for, in order.
    pub compactions: Vec<Compacted>,
    /// Tokens of the last request body.
    pub last_request_tokens: u64,
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let store = if self.created_store {
            "a new store"
        } else {
            "the store"
        };
        write!(
            f,
            "conversation {} of {store}: {} turns",
            self.conversation, self.turns
        )?;
        for c in &self.compactions {
            let ((from, to), (before, after)) = (c.turns, c.request_tokens);
            write!(
                f,
                "; turns {from}..={to} compacted ({before} -> {after} tokens)"
            )?;
        }
        write!(
            f,
            "; the last request had about {} tokens (budget {BUDGET_TOKENS})",
            self.last_request_tokens
        )
    }
}

/// One compaction made because a request was over the budget.
#[derive(Debug)]
pub struct Compacted {
    /// The turns compacted.
    pub turns: (u64, u64),
    /// Estimated tokens of the request body before and after.
    pub request_tokens: (u64, u64),
}

/// The agent's loop, on the store in `dir` (made if `dir` is new or empty,
/// opened if it is a store). Writes what it does to `out`.
pub fn run(dir: &Path, out: &mut dyn Write) -> Result<Summary, Box<dyn Error>> {
    // `init_new_dir` makes a store in a new or empty directory, opens one
    // that is a store already, and refuses anything else: a store is never
    // made over other files.
    let (store, created_store) = Store::init_new_dir(dir, StoreOptions::default())?;
    let verb = if created_store { "created" } else { "opened" };
    writeln!(out, "{verb} the store in {}", dir.display())?;

    // A conversation, with the config its requests are sent with. The
    // config is a JSON object with JP's keys; settings jp-store reads are
    // checked here, so a wrong type is refused now rather than later.
    let config = json!({
        "assistant": {
            "model": {"id": "anthropic/claude-sonnet-4-5", "parameters": {"max_tokens": 1024}},
            "system_prompt": "You are a coding agent. Read files before explaining them.",
        }
    });
    // `create` returns the conversation's handle, which the agent holds
    // for the whole loop: its lock (another writer waits; readers never
    // do), its state and its settings. (`Store::conversation` opens an
    // existing one, and says through `cut_tail` whether it cut an
    // incomplete record a crash left at the end of the log.)
    let mut conversation = store.create(NewConversation {
        title: Some("explain the modules".into()),
        base_config: config.as_object().cloned(),
        ..Default::default()
    })?;
    let id = conversation.id().clone();
    writeln!(out, "created conversation {id}")?;

    let mut compactions = Vec::new();
    let mut last_request_tokens = 0;
    for turn in 0..TURNS {
        let path = format!("src/module_{turn}.rs");

        // 1. The user asks: a new turn.
        append(
            &mut conversation,
            vec![
                Entry::now(EventKind::TurnStart),
                Entry::now(ChatRequest::text(format!("What does {path} do?"))),
            ],
            out,
        )?;

        // 2. The model is asked, and answers with a tool call (canned).
        request_within_budget(&store, &mut conversation, &mut compactions, out)?;
        let call_id = format!("call_{turn}");
        append(
            &mut conversation,
            vec![Entry::now(ToolCallRequest::new(
                &call_id,
                "fs_read_file",
                json!({"path": path}),
            )?)],
            out,
        )?;

        // 3. The agent runs the tool; its output goes into the log. Content
        //    (tool output, attached files) is stored once in the blob store
        //    and the log keeps a reference, however often it is sent.
        append(
            &mut conversation,
            vec![Entry::now(ToolCallResponse::text(
                &call_id,
                read_file(&path),
            ))],
            out,
        )?;

        // 4. The model is asked again, with the tool's output, and answers
        //    in text: this completes the turn.
        last_request_tokens =
            request_within_budget(&store, &mut conversation, &mut compactions, out)?;
        append(
            &mut conversation,
            vec![Entry::now(ChatResponse::message(format!(
                "{path} defines `step_{turn}`, which adds its argument to a counter."
            )))],
            out,
        )?;
        writeln!(
            out,
            "turn {turn}: request of about {last_request_tokens} tokens"
        )?;
    }

    let turns = conversation.state().turns();
    // The head cache written, the lock released (dropping the handle only
    // releases the lock).
    conversation.close();
    Ok(Summary {
        created_store,
        conversation: id,
        turns,
        compactions,
        last_request_tokens,
    })
}

/// Appends `entries` as one durable record, as `jp-store append` does.
fn append(
    conversation: &mut ConversationHandle<'_>,
    entries: Vec<Entry<Payload>>,
    out: &mut dyn Write,
) -> Result<(), Box<dyn Error>> {
    let report = conversation.append_turn(
        entries,
        // A compaction whose profile summarizes needs a summarizer;
        // `jpstore_integrations::summarizer::profile_summarizer(store)`
        // runs the profile's command or endpoint. This loop's compactions
        // strip tool calls and need none.
        &mut no_summarizer,
    )?;
    // After a batch that completes a turn, `append_turn` runs the automatic
    // compaction the conversation's settings ask for
    // (`conversation.compaction.auto`: `enabled`, `context_window`,
    // `trigger_ratio`, `min_turns`), decided from the state and settings
    // the handle holds. It is off here, as this loop compacts by its own
    // budget; the append is durable whatever happens to it.
    match report.auto_compaction {
        AutoCompaction::NotDue => {}
        AutoCompaction::Made(made) => writeln!(
            out,
            "automatic compaction of turns {}..={}",
            made.compaction.from_turn, made.compaction.to_turn
        )?,
        AutoCompaction::Failed(e) => writeln!(out, "warning: automatic compaction failed: {e}")?,
    }
    Ok(())
}

/// The request body the model would be sent now, measured; compacted first
/// if it is over the budget. Returns its estimated tokens.
fn request_within_budget(
    store: &Store,
    conversation: &mut ConversationHandle<'_>,
    compactions: &mut Vec<Compacted>,
    out: &mut dyn Write,
) -> Result<u64, Box<dyn Error>> {
    let before = request_tokens(store, conversation)?;
    if before <= BUDGET_TOKENS {
        return Ok(before);
    }
    // Over the budget: compact the turns not compacted yet, up to
    // `KEEP_LAST_TURNS` before the last. The conversation's default
    // profile (none is configured here: the built-in one) strips tool calls
    // and reasoning; nothing is deleted, the compaction is an entry of the
    // log that the view applies (and `undo_compaction` revokes).
    let request = CompactRequest {
        from: Some(Bound::AfterLastCompaction),
        keep_last: Some(KEEP_LAST_TURNS),
        ..Default::default()
    };
    let made = match conversation.compact(&request, &mut no_summarizer) {
        Ok(made) => made,
        // Every turn but the kept ones is compacted already: the request
        // stays over the budget (a summarizing profile, or fewer kept
        // turns, would shrink it further).
        Err(CompactionError::OutOfRange { .. } | CompactionError::EmptyRange { .. }) => {
            writeln!(
                out,
                "request of {before} tokens is over the budget, and nothing is left to compact"
            )?;
            return Ok(before);
        }
        Err(e) => return Err(e.into()),
    };
    let after = request_tokens(store, conversation)?;
    let turns = (made.compaction.from_turn, made.compaction.to_turn);
    writeln!(
        out,
        "request of {before} tokens over the budget of {BUDGET_TOKENS}: compacted turns {}..={}, now {after} tokens",
        turns.0, turns.1
    )?;
    compactions.push(Compacted {
        turns,
        request_tokens: (before, after),
    });
    Ok(after)
}

/// Estimated tokens of the Anthropic Messages request body for the
/// conversation as it is now (characters / 4, the estimate the engine's
/// compaction uses).
fn request_tokens(
    store: &Store,
    conversation: &mut ConversationHandle<'_>,
) -> Result<u64, Box<dyn Error>> {
    // The view (compactions applied, repeated resources deduplicated), as
    // Anthropic's request body: model, max_tokens and system prompt from
    // the conversation's settings, content read from the blob store. This
    // is what an agent would POST to https://api.anthropic.com/v1/messages.
    let body = provider_request_view(store, conversation.view()?, Provider::Anthropic)?;
    let chars = serde_json::to_string(&body)?.chars().count();
    Ok(tokens(chars as u64))
}

/// The tool's output: a made-up source file of about [`FILE_CHARS`]
/// characters.
fn read_file(path: &str) -> String {
    let mut text = format!("// {path}\n");
    let mut line = 0;
    while text.len() < FILE_CHARS {
        text.push_str(&format!(
            "pub fn step_{line}(counter: &mut u64, by: u64) {{ *counter += by; }}\n"
        ));
        line += 1;
    }
    text
}

fn main() -> ExitCode {
    // The store's directory: the first argument, else a temporary one
    // (removed when the program ends).
    let temporary;
    let dir = match std::env::args_os().nth(1) {
        Some(dir) => dir.into(),
        None => match tempfile::tempdir() {
            Ok(t) => {
                temporary = t;
                temporary.path().join("store")
            }
            Err(e) => return fail(&e),
        },
    };
    match run(&dir, &mut std::io::stdout().lock()) {
        Ok(summary) => {
            println!("{summary}");
            ExitCode::SUCCESS
        }
        Err(e) => fail(&*e),
    }
}

/// Prints `e` and what caused it; the exit status of a failure.
fn fail(e: &dyn Error) -> ExitCode {
    eprintln!("agent_loop: {e}");
    let mut cause = e.source();
    while let Some(c) = cause {
        eprintln!("  caused by: {c}");
        cause = c.source();
    }
    ExitCode::FAILURE
}

// `cargo test` builds this example with the test harness (`test = true` in
// Cargo.toml) and runs this test, which runs the same `run` as `main`.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loop_compacts_when_a_request_is_over_the_budget() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut printed = Vec::new();
        let summary = run(&dir.path().join("store"), &mut printed).expect("run");
        let printed = String::from_utf8(printed).expect("UTF-8");

        assert!(summary.created_store);
        assert_eq!(summary.turns, TURNS as u64);
        assert!(!summary.compactions.is_empty(), "{printed}");
        let mut next_turn = 0;
        for c in &summary.compactions {
            // Each compaction takes up where the last one ended, keeps the
            // last turn, and shrinks the request to within the budget.
            assert_eq!(c.turns.0, next_turn, "{summary:?}");
            next_turn = c.turns.1 + 1;
            let (before, after) = c.request_tokens;
            assert!(before > BUDGET_TOKENS && after <= BUDGET_TOKENS, "{c:?}");
        }
        assert!(summary.last_request_tokens <= BUDGET_TOKENS);
        assert!(printed.contains("compacted turns 0..="), "{printed}");
        assert!(
            summary.to_string().contains("turns 0..=1 compacted"),
            "{summary}"
        );

        // The compactions are entries of the log: every event is still
        // there, and the view the model is sent is smaller than the log.
        let store =
            Store::open_dir(&dir.path().join("store"), StoreOptions::default()).expect("open");
        let sizes = jpstore_engine::stats::of_conversation(&store, &summary.conversation)
            .expect("stats")
            .context;
        assert!(sizes.view < sizes.raw, "{sizes:?}");

        // A second run opens the store and adds a conversation beside the
        // first.
        let again = run(&dir.path().join("store"), &mut Vec::new()).expect("run again");
        assert!(!again.created_store);
        assert_ne!(again.conversation, summary.conversation);
        assert_eq!(store.ids().expect("ids").len(), 2);
    }
}
