//! What an append the way `jp-store append` does it reports (the write,
//! then the automatic compaction (D17) that a completed turn may call for:
//! [`ConversationHandle::append_turn`](crate::ConversationHandle::append_turn),
//! [`Store::append_turn`](crate::Store::append_turn)), and how a batch that
//! another writer beat to the end of the log is tried again
//! ([`retry_on_conflict`]).

use serde::{Serialize, Serializer};

use crate::compaction::{CompactOutcome, CompactionError, CompactionMade};
use crate::conversation::writer::AppendOutcome;
use crate::conversation::ConversationId;
use crate::error::{Error, Result};

/// What an append of a turn did
/// ([`ConversationHandle::append_turn`](crate::ConversationHandle::append_turn),
/// `Store::append_turn`). Its `Serialize` is what `jp-store
/// append --json` prints: the id, the automatic compaction (or `null`) and
/// the fields of the append.
#[derive(Debug, Serialize)]
pub struct AppendReport {
    /// The conversation appended to.
    pub id: ConversationId,
    /// The automatic compaction after the append.
    pub auto_compaction: AutoCompaction,
    /// The attempts the append took: more than 1 when another writer
    /// appended first ([`retry_on_conflict`]).
    #[serde(skip)]
    pub attempts: u32,
    /// The append itself: durable when this report exists.
    #[serde(flatten)]
    pub append: AppendOutcome,
}

/// The automatic compaction after an append.
#[derive(Debug)]
pub enum AutoCompaction {
    /// The batch does not complete a turn, or the settings did not call for
    /// one (disabled, too few turns, under the token trigger).
    NotDue,
    /// A compaction was appended.
    Made(CompactOutcome),
    /// It was due and failed (a summarizer error, for example). The append
    /// is durable all the same: this is a warning, not a failure of the
    /// append.
    Failed(CompactionError),
}

impl AutoCompaction {
    /// The compaction made, if one was.
    pub(crate) fn made(&self) -> Option<CompactionMade> {
        match self {
            AutoCompaction::Made(outcome) => Some(outcome.made()),
            AutoCompaction::NotDue | AutoCompaction::Failed(_) => None,
        }
    }
}

impl Serialize for AutoCompaction {
    /// Serializes as `AutoCompaction::made`: the range and profile of the
    /// compaction made, else `null` (a failure is a warning, told apart).
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        self.made().serialize(serializer)
    }
}

/// How many times [`retry_on_conflict`] tries a batch in all. Four
/// processes appending to one conversation without pause, on a machine
/// under load, lost 12 attempts in a row once in about a thousand appends (an
/// attempt reads the log again, 10 requests, so the window to lose in is
/// wide); 24 makes that about one in a million, in at most about 20 s of
/// waits.
pub const CONFLICT_ATTEMPTS: u32 = 24;

/// Runs `attempt` (given the number of the attempt, from 1) again while it
/// fails with [`Error::AppendConflict`]: another writer appended first
/// (two processes, or two machines, appending to one conversation on an
/// object store, where appends are ordered by conditional creates and not
/// by a lock). Each attempt must open the log again and check its batch
/// against what is there then, as `Store::append_turn` does: the retry is
/// only right for a batch that does not depend on what its caller read
/// (a batch of new events, an attach), not for one computed from the
/// conversation (a compaction of its turns), whose caller must read again.
///
/// The waits between attempts grow from 10 ms to at most 1 s, each a
/// random fraction of its bound ("full jitter"), so that writers that
/// collided do not collide again in step; after [`CONFLICT_ATTEMPTS`]
/// attempts the last conflict is returned. Any other error is returned at
/// once.
pub fn retry_on_conflict<T>(mut attempt: impl FnMut(u32) -> Result<T>) -> Result<T> {
    let mut n = 1;
    loop {
        match attempt(n) {
            Err(Error::AppendConflict { .. }) if n < CONFLICT_ATTEMPTS => {
                std::thread::sleep(conflict_wait(n));
                n += 1;
            }
            other => return other,
        }
    }
}

/// The wait after the `n`th attempt lost (from 1): a random duration below
/// 10 ms times 2^(n-1), at most 1 s.
fn conflict_wait(n: u32) -> std::time::Duration {
    use std::hash::{BuildHasher, Hasher};
    let bound_ms = 10u64.saturating_mul(1 << (n - 1).min(16)).min(1000);
    // A random number: the standard library seeds each `RandomState` with
    // fresh keys.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(n);
    let micros = hasher.finish() % (bound_ms * 1000);
    std::time::Duration::from_micros(micros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compaction::no_summarizer;
    use crate::conversation::ConversationId;
    use crate::event::input::entries_now as entries;
    use crate::log::CutTail;
    use crate::timestamp::Timestamp;
    use crate::{NewConversation, Store, StoreOptions};

    fn conflict() -> Error {
        Error::AppendConflict {
            path: "events.log".into(),
            offset: 7,
            source: std::io::Error::new(std::io::ErrorKind::AlreadyExists, "beaten"),
        }
    }

    #[test]
    fn conflicts_are_tried_again_a_bounded_number_of_times_and_nothing_else_is() {
        let mut calls = Vec::new();
        let r: Result<()> = retry_on_conflict(|n| {
            calls.push(n);
            Err(conflict())
        });
        assert!(matches!(r, Err(Error::AppendConflict { .. })));
        assert_eq!(calls, (1..=CONFLICT_ATTEMPTS).collect::<Vec<_>>());
        let mut calls = 0;
        let r = retry_on_conflict(|n| {
            calls += 1;
            if n < 3 {
                Err(conflict())
            } else {
                Ok(n)
            }
        });
        assert_eq!(r.expect("third attempt"), 3);
        assert_eq!(calls, 3);
        let mut calls = 0;
        let r: Result<()> = retry_on_conflict(|_| {
            calls += 1;
            Err(Error::EmptyBatch {
                path: "events.log".into(),
            })
        });
        assert!(matches!(r, Err(Error::EmptyBatch { .. })));
        assert_eq!(calls, 1);
        // The waits stay below their bounds, and are not all alike.
        for n in 1..=CONFLICT_ATTEMPTS {
            let bound = (10u128 << (n - 1)).min(1000);
            assert!(conflict_wait(n).as_millis() < bound);
        }
        let waits: std::collections::BTreeSet<_> = (0..20).map(|_| conflict_wait(8)).collect();
        assert!(waits.len() > 1, "{waits:?}");
    }

    fn turn(i: usize) -> String {
        let long = "words of the question ".repeat(40);
        format!(
            "{{\"type\":\"turn_start\"}}\n{{\"type\":\"chat_request\",\"content\":\"{i}: {long}\"}}\n\
             {{\"type\":\"chat_response\",\"message\":\"answer {i}\"}}"
        )
    }

    #[test]
    fn a_completed_turn_over_the_budget_is_compacted_as_the_command_line_does() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::init_dir(&dir.path().join("s"), StoreOptions::default()).expect("init");
        let id = ConversationId::parse("agent").expect("id");
        drop(
            store
                .create(NewConversation {
                    id: Some(id.clone()),
                    ..Default::default()
                })
                .expect("create"),
        );
        let mut cut = |_: &CutTail| panic!("no tail to cut");
        let settings = r#"{"type":"config_delta","delta":{"conversation":{"compaction":{"keep_last":1,"auto":{"enabled":true,"context_window":200,"min_turns":2}}}}}"#;
        let r = store
            .append_turn(
                &id,
                entries(settings),
                Timestamp::now(),
                &mut cut,
                &mut no_summarizer,
            )
            .expect("settings");
        assert!(matches!(r.auto_compaction, AutoCompaction::NotDue));
        let mut made = Vec::new();
        for i in 0..4 {
            let r = store
                .append_turn(
                    &id,
                    entries(&turn(i)),
                    Timestamp::now(),
                    &mut cut,
                    &mut no_summarizer,
                )
                .expect("append");
            assert_eq!(r.append.entries, 3);
            if let AutoCompaction::Made(out) = r.auto_compaction {
                made.push((i, out.compaction.from_turn, out.compaction.to_turn));
            }
        }
        // Over the trigger once more than two turns exist: the turns from
        // after the last compaction to the one before the last.
        assert_eq!(made, vec![(2, 0, 1), (3, 2, 2)]);
        // A batch that does not complete a turn never compacts.
        let r = store
            .append_turn(
                &id,
                entries(r#"{"type":"chat_request","content":"still asking"}"#),
                Timestamp::now(),
                &mut cut,
                &mut no_summarizer,
            )
            .expect("append");
        assert!(matches!(r.auto_compaction, AutoCompaction::NotDue));
        let compactions = store
            .read(&id)
            .expect("read")
            .entries
            .iter()
            .filter(|e| {
                matches!(
                    e.event().map(|e| &e.kind),
                    Some(crate::event::EventKind::Compaction(_))
                )
            })
            .count();
        assert_eq!(compactions, 2);
    }
}
