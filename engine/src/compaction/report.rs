//! What compactions, undos and forks report, as the `Serialize` of these
//! types: the `--json` output of `jp-store compact` and `jp-store fork`,
//! and the compaction named by `jp-store append --json`.

use serde::Serialize;

use super::{CompactOutcome, TurnChange};
use crate::conversation::state::ConversationState;
use crate::conversation::ConversationId;

/// A compaction that was made, as the reports of other operations name it:
/// its range and profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CompactionMade {
    /// First turn compacted.
    pub from_turn: u64,
    /// Last turn compacted.
    pub to_turn: u64,
    /// The profile used.
    pub profile: String,
}

impl CompactOutcome {
    /// The compaction's range and profile.
    pub(crate) fn made(&self) -> CompactionMade {
        CompactionMade {
            from_turn: self.compaction.from_turn,
            to_turn: self.compaction.to_turn,
            profile: self.profile.clone(),
        }
    }
}

/// A compaction of one conversation, appended or (dry run) only planned:
/// what `jp-store compact --json` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct CompactReport {
    /// The conversation.
    pub id: ConversationId,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// The profile used.
    pub profile: String,
    /// First turn compacted.
    pub from_turn: u64,
    /// Last turn compacted.
    pub to_turn: u64,
    /// The range asked for, before it grew over overlapping summaries.
    pub requested: (u64, u64),
    /// The summary, for a profile that summarizes (empty in a dry run that
    /// was given none: it is made only when the compaction is).
    pub summary: Option<String>,
    /// Per turn of the range, what changes.
    pub turns: Vec<TurnChange>,
    /// Estimated tokens of the view before (characters / 4).
    pub estimated_tokens_before: u64,
    /// Estimated tokens of the view after.
    pub estimated_tokens_after: u64,
    /// Offset of the appended record (`None` for a dry run).
    pub offset: Option<u64>,
}

impl CompactReport {
    /// The report of `outcome`, a compaction of conversation `id`.
    pub fn new(id: ConversationId, outcome: CompactOutcome) -> CompactReport {
        CompactReport {
            id,
            dry_run: outcome.dry_run,
            profile: outcome.profile,
            from_turn: outcome.compaction.from_turn,
            to_turn: outcome.compaction.to_turn,
            requested: outcome.requested,
            summary: outcome.compaction.summary,
            turns: outcome.changes,
            estimated_tokens_before: outcome.tokens_before,
            estimated_tokens_after: outcome.tokens_after,
            offset: outcome.offset,
        }
    }

    /// Whether the range compacted is larger than the one asked for (grown
    /// over overlapping summaries).
    pub fn grown(&self) -> bool {
        self.requested != (self.from_turn, self.to_turn)
    }
}

/// A compaction revoked ([`ConversationHandle::undo_compaction`](crate::ConversationHandle::undo_compaction)):
/// what `jp-store compact --undo --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UndoReport {
    /// The conversation.
    pub id: ConversationId,
    /// The 1-based number of the compaction undone.
    pub undone: u64,
}

/// A fork made ([`ConversationHandle::fork`](crate::ConversationHandle::fork)):
/// what `jp-store fork --json` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ForkReport {
    /// The new conversation.
    pub id: ConversationId,
    /// The conversation it was forked from.
    pub forked_from: ConversationId,
    /// Entries of the new conversation.
    pub entries: u64,
    /// The compaction published with it, if one was.
    pub compacted: Option<CompactionMade>,
}

impl ForkReport {
    /// The report of the fork `fork` of `forked_from`, whose state is
    /// `state`, with the compaction `compacted` (as `Store::fork_compacted`
    /// returns them: `ConversationHandle::id` and `state` of the fork).
    pub fn new(
        forked_from: &ConversationId,
        fork: &ConversationId,
        state: &ConversationState,
        compacted: Option<&CompactOutcome>,
    ) -> ForkReport {
        ForkReport {
            id: fork.clone(),
            forked_from: forked_from.clone(),
            entries: state.entries,
            compacted: compacted.map(CompactOutcome::made),
        }
    }
}
