//! JP's workspace projection: the files of a conversation written
//! `Projection::Projected` under `<root>/.jp/conversations/`, by JP's own
//! `FsStorageBackend` over that directory (so byte for byte as JP writes
//! them, a title change renaming the directory as JP does), from what the
//! backend stores; a conversation written `LocalOnly`, removed, archived or
//! unarchived has its files removed or moved as JP's backend does. Nothing
//! is ever read back from them.

use jp_conversation::{Conversation, ConversationId, ConversationStream};
use jp_storage::backend::{FsStorageBackend, PersistBackend, Projection};

use crate::backend::JpStoreBackend;
use crate::error::BackendError;

/// JP's file backend over the workspace, if the backend has one.
fn files(b: &JpStoreBackend) -> Result<Option<FsStorageBackend>, BackendError> {
    let Some(root) = &b.workspace else {
        return Ok(None);
    };
    let dot_jp = root.join(".jp");
    let path = camino::Utf8PathBuf::from_path_buf(dot_jp.clone()).map_err(|_| {
        BackendError::Projection {
            op: "use",
            path: dot_jp.clone(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidInput, "the path is not UTF-8"),
        }
    })?;
    FsStorageBackend::new(&path)
        .map(Some)
        .map_err(|e| projection_error("create", &dot_jp, e))
}

fn projection_error(
    op: &'static str,
    path: &std::path::Path,
    e: jp_storage::Error,
) -> BackendError {
    BackendError::Projection {
        op,
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    }
}

fn dir(b: &JpStoreBackend) -> std::path::PathBuf {
    b.projection_dir().unwrap_or_default()
}

/// After a write: the files written (`Projected`) or removed (`LocalOnly`).
pub(crate) fn write(
    b: &JpStoreBackend,
    id: &ConversationId,
    metadata: &Conversation,
    events: &ConversationStream,
    projection: Projection,
) -> Result<(), BackendError> {
    let Some(fs) = files(b)? else {
        return Ok(());
    };
    match projection {
        Projection::Projected => fs
            .write(id, metadata, events, Projection::Projected)
            .map_err(|e| projection_error("write", &dir(b), e)),
        Projection::LocalOnly => fs
            .remove(id)
            .map_err(|e| projection_error("remove", &dir(b), e)),
    }
}

/// After a removal: the files removed, the archived ones too (JP's file
/// backend removes a conversation from its live directory only: an
/// archived copy is brought back there first).
pub(crate) fn remove(b: &JpStoreBackend, id: &ConversationId) -> Result<(), BackendError> {
    let Some(fs) = files(b)? else {
        return Ok(());
    };
    let remove = || {
        fs.remove(id)
            .map_err(|e| projection_error("remove", &dir(b), e))
    };
    remove()?;
    match fs.unarchive(id) {
        Ok(()) => remove(),
        Err(jp_storage::Error::ConversationNotFound(_)) => Ok(()),
        Err(e) => Err(projection_error("move", &dir(b), e)),
    }
}

/// After an archive or unarchive: the files moved, when there are any.
pub(crate) fn set_archived(
    b: &JpStoreBackend,
    id: &ConversationId,
    to: bool,
) -> Result<(), BackendError> {
    let Some(fs) = files(b)? else {
        return Ok(());
    };
    let moved = if to { fs.archive(id) } else { fs.unarchive(id) };
    match moved {
        Ok(()) | Err(jp_storage::Error::ConversationNotFound(_)) => Ok(()),
        Err(e) => Err(projection_error("move", &dir(b), e)),
    }
}
