//! Turn numbering (jp-format.md section 3).
//!
//! A `turn_start` opens a new turn only if the current turn already holds a
//! conversation event. Events before the first `turn_start` form turn 0.
//! `config_delta`, `compaction` and unknown entries belong to the current
//! turn and never open one. An empty stream has no turns.

use super::kind::TurnRole;
use super::model::Entry;

/// Assigns turn indices to entries one at a time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TurnCounter {
    /// Index of the current turn, once one exists.
    current: Option<u64>,
    /// Whether the current turn holds a conversation event.
    has_event: bool,
}

/// What one entry did to the turn structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The turn the entry belongs to.
    pub turn: u64,
    /// Whether the entry opened this turn.
    pub opened: bool,
}

impl TurnCounter {
    /// A counter at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// The counter as stored in a head cache: the current turn, and
    /// whether it holds a conversation event.
    pub fn parts(&self) -> (Option<u64>, bool) {
        (self.current, self.has_event)
    }

    /// A counter from its [`parts`](Self::parts).
    pub fn from_parts(current: Option<u64>, has_event: bool) -> Self {
        TurnCounter { current, has_event }
    }

    /// Counts one entry and returns the turn it belongs to.
    pub fn step<C>(&mut self, entry: &Entry<C>) -> Step {
        self.step_role(role_of(entry))
    }

    /// Counts one entry of `role` (an entry head's
    /// [`turn_role`](super::head::EntryHead::turn_role)) and returns the turn
    /// it belongs to.
    pub fn step_role(&mut self, role: TurnRole) -> Step {
        match role {
            TurnRole::TurnStart => match self.current {
                None => self.open(0),
                Some(t) if self.has_event => self.open(t + 1),
                Some(t) => Step {
                    turn: t,
                    opened: false,
                },
            },
            TurnRole::Event => {
                let step = match self.current {
                    None => self.open(0),
                    Some(t) => Step {
                        turn: t,
                        opened: false,
                    },
                };
                self.has_event = true;
                step
            }
            // Config deltas, compactions and unknown entries never open a turn.
            TurnRole::Other => Step {
                turn: self.current.unwrap_or(0),
                opened: false,
            },
        }
    }

    fn open(&mut self, turn: u64) -> Step {
        self.current = Some(turn);
        self.has_event = false;
        Step { turn, opened: true }
    }

    /// Number of turns so far.
    pub fn turns(&self) -> u64 {
        self.current.map_or(0, |t| t + 1)
    }

    /// Index of the current (last) turn, if any.
    pub fn current(&self) -> Option<u64> {
        self.current
    }
}

/// How an entry counts for turn numbering.
pub fn role_of<C>(entry: &Entry<C>) -> TurnRole {
    entry.kind().turn_role()
}

/// The turn index of every entry of `entries`, in order.
pub fn turn_indices<C>(entries: &[Entry<C>]) -> Vec<u64> {
    let mut c = TurnCounter::new();
    entries.iter().map(|e| c.step(e).turn).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::model::{ChatRequest, ConfigDelta, Event, EventKind};
    use crate::timestamp::Timestamp;

    fn ev(kind: EventKind) -> Entry {
        Entry::Event(Event {
            timestamp: Timestamp::from_unix(0, 0).expect("epoch"),
            kind,
            metadata: Default::default(),
            extra: Default::default(),
        })
    }

    fn ts() -> Entry {
        ev(EventKind::TurnStart)
    }

    fn q() -> Entry {
        ev(EventKind::ChatRequest(ChatRequest {
            content: "q".into(),
            schema: None,
            author: None,
            resources: vec![],
        }))
    }

    fn delta() -> Entry {
        ev(EventKind::ConfigDelta(ConfigDelta {
            delta: Default::default(),
        }))
    }

    #[test]
    fn examples_of_the_format_description() {
        assert_eq!(
            turn_indices(&[ts(), q(), ts(), q(), ts(), q()]),
            [0, 0, 1, 1, 2, 2]
        );
        assert_eq!(turn_indices(&[q(), ts(), q()]), [0, 1, 1]);
        assert_eq!(
            turn_indices::<crate::event::BlobRef>(&[]),
            Vec::<u64>::new()
        );
    }

    #[test]
    fn empty_turn_does_not_open_another() {
        let entries = [ts(), ts(), q()];
        assert_eq!(turn_indices(&entries), [0, 0, 0]);
        let mut c = TurnCounter::new();
        entries.iter().for_each(|e| {
            c.step(e);
        });
        assert_eq!(c.turns(), 1);
    }

    #[test]
    fn deltas_and_unknown_entries_never_open_a_turn() {
        let unknown = Entry::Unknown(Default::default());
        assert_eq!(
            turn_indices(&[delta(), q(), unknown.clone(), ts(), delta(), ts(), q()]),
            [0, 0, 0, 1, 1, 1, 1]
        );
        let mut c = TurnCounter::new();
        c.step(&delta());
        c.step(&unknown);
        assert_eq!(c.turns(), 0, "a stream of deltas has no turns");
    }
}
