//! The backend's errors, and how they reach JP through its own error types
//! (`jp_storage::Error`, `jp_storage::LoadError`), which carry a foreign
//! error only as an I/O error's source: the message and the typed error
//! both travel.

use std::path::PathBuf;

use jp_conversation::ConversationId;

use crate::load::LoadError;

/// Why the backend could not do what JP asked.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] jpstore_engine::error::Error),
    /// fsck of the store (`sanitize`) stopped.
    #[error(transparent)]
    Fsck(#[from] jpstore_engine::fsck::FsckError),
    /// Storing a new conversation failed.
    #[error(transparent)]
    Import(#[from] jpstore_engine::import::ImportError),
    /// JP's files of a conversation could not be read as JP data.
    #[error(transparent)]
    JpFiles(#[from] jpstore_integrations::jp::import::JpImportError),
    /// A conversation could not be read as JP reads it.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// JP's types could not be written or read as JSON.
    #[error("conversation {id}: {what}: {source}")]
    Json {
        /// The conversation.
        id: String,
        /// What was being done.
        what: &'static str,
        /// What serde_json says.
        source: serde_json::Error,
    },
    /// JP refuses a stream it was handed (it would refuse its files).
    #[error("conversation {id}: {source}")]
    Stream {
        /// The conversation.
        id: String,
        /// What JP says.
        source: jp_conversation::StreamError,
    },
    /// A store location that cannot be opened.
    #[error("{location}: {reason}")]
    Location {
        /// The location given.
        location: String,
        /// Why it cannot be opened.
        reason: String,
    },
    /// A name JP gives (a lock's conversation, a session key) that cannot
    /// name an object of the store.
    #[error("{what} {name:?}: {reason}")]
    Name {
        /// What the name is of.
        what: &'static str,
        /// The name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A file of the workspace projection could not be written.
    #[error("cannot {op} {}: {source}", path.display())]
    Projection {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A write that would take another writer's events out of a
    /// conversation: the conversation changed since this backend loaded or
    /// wrote it, and the stream JP handed over does not follow what is
    /// there now. Nothing was written.
    #[error(
        "conversation {id} was written by another writer since it was loaded here (its log \
         went from {before} to {now} entries), and this write does not follow what that \
         writer wrote: nothing was written; load the conversation again and repeat the change"
    )]
    Conflict {
        /// The conversation.
        id: String,
        /// Its entries when this backend last loaded or wrote it.
        before: u64,
        /// Its entries now.
        now: u64,
    },
    /// Another writer holds the conversation's lock on the store (on an
    /// object store, another machine's lease).
    #[error("conversation {id} is locked by {holder}")]
    Locked {
        /// The conversation.
        id: String,
        /// Who holds it, as its lock says.
        holder: String,
    },
}

/// `e` as JP's storage error (an I/O error whose source is `e`).
pub(crate) fn jp_error(e: BackendError) -> jp_storage::Error {
    jp_storage::Error::Io(std::io::Error::other(e))
}

/// `e`, met loading conversation `id`, as JP's load error: a missing
/// conversation as JP's backends say it (`metadata`: of its metadata, else
/// of its stream), anything else an I/O error whose source is `e`.
pub(crate) fn jp_load_error(
    id: &ConversationId,
    e: LoadError,
    metadata: bool,
) -> jp_storage::LoadError {
    use jp_storage::load::LoadErrorInner;
    let path = format!("jp-store/{id}");
    let missing = matches!(&e, LoadError::Store(s) if s.is_no_conversation());
    let inner = match (missing, metadata) {
        (true, true) => LoadErrorInner::MissingConversationMetadata(*id),
        (true, false) => LoadErrorInner::MissingConversationStream(*id),
        (false, _) => LoadErrorInner::IO(std::io::Error::other(e)),
    };
    jp_storage::LoadError::new(path, inner)
}
