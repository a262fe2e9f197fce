//! What is known about a conversation after reading its log: metadata,
//! counts, turn state, and what an append must be checked against.
//!
//! The state is folded entry by entry, so a writer keeps it current in
//! constant time per appended entry.

use std::collections::BTreeMap;

use super::codec::LogEntry;
use super::meta::Metadata;
use crate::event::head::{EntryHead, HeadKind};
use crate::event::turns::TurnCounter;
use crate::event::{Entry, EventKind};
use crate::timestamp::Timestamp;

/// The folded state of a conversation's log, as the head cache stores it
/// (format-spec.md 4.6, `conversation/head.rs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConversationState {
    /// Metadata after every patch.
    pub metadata: Metadata,
    /// Number of entries (events and unknown entries; not metadata patches).
    pub entries: u64,
    /// Of those, entries of unknown type.
    pub unknown_entries: u64,
    /// Number of records (batches).
    pub records: u64,
    /// Turn numbering state.
    pub(crate) turns: TurnCounter,
    /// Tool call requests of the current turn, by id (the tool's name).
    pub open_requests: BTreeMap<String, String>,
    /// Timestamp of the latest event.
    pub last_event: Option<Timestamp>,
    /// Number of content payloads referenced (with repetitions).
    pub blob_refs: u64,
    /// Sum of the raw sizes of referenced payloads (with repetitions).
    pub content_bytes: u64,
    /// Number of `compaction` events: the ordinals a `compaction_undo` may
    /// name are those below it (format-spec.md 4.2). A head cache written
    /// before this field existed lacks it and is refused (4.6).
    pub compactions: u64,
}

/// Why an entry cannot be appended to the conversation as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The field at fault (a path inside the entry; empty for the entry).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl ConversationState {
    /// The number of turns so far.
    pub fn turns(&self) -> u64 {
        self.turns.turns()
    }

    /// Folds one log entry in.
    pub(crate) fn apply(&mut self, entry: &LogEntry) {
        match entry {
            LogEntry::Meta(p) => self.metadata.apply(p),
            LogEntry::Event(e) => self.apply_entry(e),
        }
    }

    /// Folds one event entry in.
    pub(crate) fn apply_entry(&mut self, entry: &Entry) {
        self.apply_head(&EntryHead::of(entry));
    }

    /// Folds one entry in from its head (all the fold reads).
    pub(crate) fn apply_head(&mut self, head: &EntryHead<'_>) {
        self.entries += 1;
        let step = self.turns.step_role(head.turn_role());
        if step.opened {
            self.open_requests.clear();
        }
        head.for_each_content(&mut |r| {
            self.blob_refs += 1;
            self.content_bytes = self.content_bytes.saturating_add(r.size);
        });
        if !head.is_event() {
            self.unknown_entries += 1;
            return;
        }
        self.last_event = Some(match self.last_event {
            Some(t) => t.max(head.timestamp),
            None => head.timestamp,
        });
        match head.kind {
            HeadKind::ToolCallRequest { id, name } => {
                self.open_requests.insert(id.to_owned(), name.to_owned());
            }
            HeadKind::Compaction(_) => self.compactions += 1,
            _ => {}
        }
    }

    /// Checks that `entry` may follow the entries folded so far: a tool
    /// call response must answer a request of the current turn (JP refuses
    /// the same on write), and a `compaction_undo` must name a compaction
    /// before it (one named later would revoke a compaction not made yet).
    pub(crate) fn check<C>(&self, entry: &Entry<C>) -> Result<(), Refusal> {
        let Some(event) = entry.event() else {
            return Ok(());
        };
        if let EventKind::CompactionUndo(u) = &event.kind {
            if u.undoes >= self.compactions {
                return Err(Refusal {
                    field: "undoes".into(),
                    message: undo_refusal(u.undoes, self.compactions),
                });
            }
        }
        if let EventKind::ToolCallResponse(r) = &event.kind {
            // A turn_start just before would have opened a new turn and so
            // cleared the requests; the caller folds entries of a batch in
            // order, so `open_requests` is the current turn's.
            if !self.open_requests.contains_key(&r.id) {
                let known = if self.open_requests.is_empty() {
                    "the current turn has no tool call requests".to_string()
                } else {
                    format!(
                        "the current turn's requests are {}",
                        self.open_requests
                            .keys()
                            .map(|k| format!("`{k}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                };
                return Err(Refusal {
                    field: "id".into(),
                    message: format!(
                        "tool_call_response `{}` answers no tool_call_request of the current turn ({known})",
                        r.id
                    ),
                });
            }
        }
        Ok(())
    }

    /// Like [`check`](Self::check) followed by folding the entry's turn
    /// structure in, for checking a batch entry by entry on a copy.
    pub(crate) fn check_and_step<C>(&mut self, entry: &Entry<C>) -> Result<(), Refusal> {
        self.check(entry)?;
        let step = self.turns.step(entry);
        if step.opened {
            self.open_requests.clear();
        }
        match entry.event().map(|e| &e.kind) {
            Some(EventKind::ToolCallRequest(r)) => {
                self.open_requests.insert(r.id.clone(), r.name.clone());
            }
            Some(EventKind::Compaction(_)) => self.compactions += 1,
            _ => {}
        }
        Ok(())
    }

    /// When the conversation was last active: its latest event, or its
    /// creation time.
    pub fn last_activity(&self) -> Option<Timestamp> {
        match (self.last_event, self.metadata.created()) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }
}

/// Why a `compaction_undo` naming compaction `undoes` (0-based) cannot
/// follow `compactions` compactions.
pub fn undo_refusal(undoes: u64, compactions: u64) -> String {
    let before = match compactions {
        0 => "there is no compaction before it".to_string(),
        1 => "the only compaction before it is 0".to_string(),
        n => format!("the compactions before it are 0 to {}", n - 1),
    };
    format!("compaction_undo names compaction {undoes}, but {before}; an undo revokes a compaction made before it")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::input::entries_now as entries;

    const COMPACTION: &str =
        r#"{"type":"compaction","from_turn":0,"to_turn":0,"strip_reasoning":true}"#;

    #[test]
    fn an_undo_must_name_a_compaction_before_it() {
        let mut state = ConversationState::default();
        let undo = |n: u64| entries(&format!(r#"{{"type":"compaction_undo","undoes":{n}}}"#));
        let refused = state
            .check_and_step(&undo(0)[0])
            .expect_err("no compaction yet");
        assert_eq!(refused.field, "undoes");
        assert!(
            refused.message.contains("no compaction before it"),
            "{}",
            refused.message
        );
        // A compaction earlier in the same batch counts.
        let batch = entries(&format!("{{\"type\":\"turn_start\"}}\n{COMPACTION}"));
        for e in &batch {
            state.check_and_step(e).expect("compaction");
        }
        state
            .check_and_step(&undo(0)[0])
            .expect("undo of compaction 0");
        let refused = state
            .check_and_step(&undo(1)[0])
            .expect_err("compaction 1 is not made yet");
        assert!(
            refused.message.contains("compaction 1"),
            "{}",
            refused.message
        );
        // The fold counts what the check counted.
        let mut folded = ConversationState::default();
        for e in &batch {
            let stored = e
                .clone()
                .try_map_content(&mut |_| Err::<crate::event::BlobRef, ()>(()))
                .expect("no content");
            folded.apply_entry(&stored);
        }
        assert_eq!(folded.compactions, 1);
    }
}
