//! `sanitize`: jp-store's fsck in JP's terms. Damaged conversations are
//! moved aside by fsck's repair (into the store's quarantine: nothing is
//! deleted) and come back in JP's `SanitizeReport`, each with what fsck
//! found. As JP's file backend trashes a damaged conversation whole, one
//! whose repair kept the records before the damage in the store (the whole
//! log being in quarantine) leaves the store too: JP would otherwise list
//! it, shorter than it was, and never hear of the repair.

use std::collections::{BTreeMap, HashMap};

use jp_storage::backend::{SanitizeReport, TrashedConversation};
use jp_storage::validate::ValidationError;
use jpstore_blobstore::backend::Version;
use jpstore_engine::conversation::ConversationId as StoreId;
use jpstore_engine::fsck::{FsckOptions, Severity};
use jpstore_engine::internal::{ConversationIdInterior as _, StoreInterior as _};

use crate::backend::JpStoreBackend;
use crate::error::BackendError;

/// Runs fsck with repair; reports the damaged conversations it moved aside.
pub(crate) fn sanitize(b: &JpStoreBackend) -> Result<SanitizeReport, BackendError> {
    // Each log's version before the repair: a repair that keeps records
    // publishes them as a new log.
    let log_version = |sid: &StoreId| -> Option<Version> {
        b.store
            .backend()
            .head(&sid.log_path())
            .ok()
            .map(|m| m.version)
    };
    let before: HashMap<String, Option<Version>> = b
        .store
        .ids()?
        .iter()
        .map(|sid| (sid.to_string(), log_version(sid)))
        .collect();
    let report = jpstore_engine::fsck::run(
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
        let Ok(sid) = StoreId::parse(&id) else {
            continue;
        };
        // Moved aside whole, or moved aside with the records before the
        // damage put back as a new log: those leave the store too (the
        // whole log, which holds them, stays in quarantine).
        let gone = match b.store.exists(&sid) {
            Ok(false) => true,
            Ok(true) => {
                let replaced = before
                    .get(&id)
                    .is_some_and(|was| was.is_some() && *was != log_version(&sid));
                replaced && b.store.remove(&sid).is_ok()
            }
            Err(_) => false,
        };
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
