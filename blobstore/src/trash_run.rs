//! The state of a gc run's trash while the blob store has it open
//! (format-spec.md 5.5; the moves themselves are in `trash.rs`): apart, so
//! that the store can hold it without depending on the module that moves.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::id::BlobId;

/// Asked before every move: an error stops the run's moves (gc lost its
/// lock, say). What was moved before stays recorded.
pub type MayMove = Arc<dyn Fn() -> io::Result<()> + Send + Sync>;

/// A run's trash, while it is the blob store's.
pub(crate) struct TrashRun {
    pub(crate) prefix: PathBuf,
    pub(crate) may_move: MayMove,
    pub(crate) moved: Moved,
}

impl std::fmt::Debug for TrashRun {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrashRun")
            .field("prefix", &self.prefix)
            .field("moved", &self.moved)
            .finish_non_exhaustive()
    }
}

/// What a run moved to its trash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    /// Loose objects, with their stored sizes.
    pub loose: Vec<(BlobId, u64)>,
    /// Packs (each with its index), with the ids they hold and the bytes of
    /// the pack file.
    pub packs: Vec<MovedPack>,
}

/// A pack moved to the trash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MovedPack {
    /// Its name.
    pub name: String,
    /// The ids its index lists.
    pub ids: Vec<BlobId>,
    /// Bytes of the pack file.
    pub bytes: u64,
}
