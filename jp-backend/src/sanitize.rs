//! `sanitize`: jp-store's fsck in JP's terms. Damaged conversations are
//! moved aside whole by fsck's repair (into the store's quarantine: nothing
//! is deleted), as JP's file backend trashes a damaged conversation whole,
//! and come back in JP's `SanitizeReport`, each with what fsck found.
//! (`fsck --repair` itself keeps the records before a log's damage in the
//! store when it can: JP would then list the conversation without the rest
//! and never hear of the repair.)

use std::collections::BTreeMap;

use jp_storage::backend::{SanitizeReport, TrashedConversation};
use jp_storage::validate::ValidationError;
use jpstore_engine::fsck::{FsckOptions, Severity};

use crate::backend::JpStoreBackend;
use crate::error::BackendError;

/// Runs fsck with repair; reports the damaged conversations it moved aside.
pub(crate) fn sanitize(b: &JpStoreBackend) -> Result<SanitizeReport, BackendError> {
    let report = jpstore_engine::internal::fsck::run_moving_damaged_whole(
        &b.store,
        FsckOptions {
            read_data: false,
            repair: true,
        },
        &mut |_| {},
    )?;
    let mut damaged: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for f in &report.findings {
        if f.severity < Severity::Damage {
            continue;
        }
        if let Some(c) = &f.conversation {
            damaged
                .entry(c.clone())
                .or_default()
                .push(f.message.clone());
        }
    }
    let mut out = SanitizeReport::default();
    for (id, messages) in damaged {
        // Moved aside only when it left the conversations.
        let gone = jpstore_engine::conversation::ConversationId::parse(&id)
            .ok()
            .is_some_and(|sid| matches!(b.store.exists(&sid), Ok(false)));
        if !gone {
            continue;
        }
        out.trashed.push(TrashedConversation {
            dirname: id,
            error: ValidationError::CorruptEvents {
                source: messages.join("; ").into(),
            },
        });
    }
    Ok(out)
}
