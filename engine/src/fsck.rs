//! fsck: check every conversation log and every blob reference, optionally
//! every blob's bytes, and repair by moving damage aside (format-spec.md
//! 4.8).
//!
//! Checks, per conversation: the log's framing and checksums (a torn tail
//! and damage are named with file and offset), that every entry decodes, the
//! structure (compaction ranges, undo targets, tool responses that answer no
//! request), and that every blob reference resolves with the right size.
//! With `read_data`, every blob is decompressed and hashed and every pack
//! checked against its index. Blobs referenced by nothing are reported as
//! information, not damage.
//!
//! Repair never deletes: torn tails are cut (the only automatic repair, done
//! by opening a writer), damaged conversations, damaged loose objects and
//! damaged packs are moved into `quarantine/` with a note of why and when.
//! A conversation whose blobs are missing or damaged is moved aside too, so
//! that what stays is whole.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use jpstore_blobstore::{BlobId, Location};

use crate::conversation::codec::{self, LogEntry};
use crate::conversation::head::Head;
use crate::conversation::meta::MetaPatch;
use crate::conversation::sections::{decode_meta, OpenRecord};
use crate::conversation::ConversationId;
use crate::error::{Error, Result};
use crate::event::binary::decode::{check_entry, BodyParts};
use crate::event::binary::{Kind, Part};
use crate::event::head::{EntryHead, HeadKind};
use crate::event::turns::TurnCounter;
use crate::event::BlobRef;
use crate::gc::leftovers::{LeftoverKind, Listings};
use crate::log::{LogEnd, LogReader, RecordContent};
use crate::store::Store;
use crate::timestamp::Timestamp;

mod known;
mod layout;

use known::KnownBlobs;

pub(crate) use crate::conversation::QUARANTINE_DIR;

/// How bad a finding is (serialized as `Severity::as_str`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Information (orphan blobs, a head cache rewritten).
    Info,
    /// Not damage, but not what jp-store writes (e.g. a response to no
    /// request in an imported file).
    Warning,
    /// Damage: data cannot be read as written.
    Damage,
    /// A file of a format version (or with format flags) newer than this
    /// build knows (format-spec.md 2.10): not damage, and never moved by
    /// repair, but nothing in it could be checked, so the store is not
    /// clean for this build.
    Unsupported,
}

impl std::fmt::Display for Severity {
    /// The lowercase name.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Severity {
    /// The lowercase name.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Damage => "damage",
            Severity::Unsupported => "unsupported",
        }
    }
}

/// One thing fsck found (serialized as its fields; a path that is not
/// UTF-8 as its lossy form).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Finding {
    /// How bad.
    pub severity: Severity,
    /// A short kind: `torn-tail`, `damaged-record`, `undecodable-entry`,
    /// `missing-blob`, `blob-size`, `damaged-blob`, `damaged-pack`,
    /// `compaction-range`, `undo-target`, `unanswered-response`,
    /// `base-config`, `orphan-blobs`, `kept-for-recovery`,
    /// `not-a-regular-file`, `unsupported-version`, `workspace-config`,
    /// `interrupted-repair`, `leftover`, `no-lock`.
    pub kind: &'static str,
    /// The conversation concerned.
    pub conversation: Option<String>,
    /// The file (as the storage displays it).
    #[serde(serialize_with = "lossy_path")]
    pub path: Option<PathBuf>,
    /// The byte offset in that file.
    pub offset: Option<u64>,
    /// The blob concerned.
    pub blob: Option<BlobId>,
    /// What was expected and what was found.
    pub message: String,
}

/// What fsck found and did. Its `Serialize` is what `jp-store fsck --json`
/// prints: `clean` ([`FsckReport::is_clean`]), then these fields.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FsckReport {
    /// Conversations checked.
    pub conversations: usize,
    /// Records checked.
    pub records: u64,
    /// Entries decoded.
    pub entries: u64,
    /// Distinct blob references checked.
    pub references: usize,
    /// Blobs whose bytes were checked (`read_data`).
    pub blobs_read: usize,
    /// Bytes read for that.
    pub bytes_read: u64,
    /// Everything found.
    pub findings: Vec<Finding>,
    /// What `repair` did, one line each.
    pub repairs: Vec<String>,
}

impl FsckReport {
    /// Whether no damage, and nothing this build cannot read, was found.
    pub fn is_clean(&self) -> bool {
        self.findings.iter().all(|f| f.severity < Severity::Damage)
    }

    /// Whether a file of a newer format was found (left as it is).
    pub fn has_unsupported(&self) -> bool {
        self.findings
            .iter()
            .any(|f| f.severity == Severity::Unsupported)
    }
}

impl serde::Serialize for FsckReport {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Shape<'a> {
            clean: bool,
            conversations: usize,
            records: u64,
            entries: u64,
            references: usize,
            blobs_read: usize,
            bytes_read: u64,
            findings: &'a [Finding],
            repairs: &'a [String],
        }
        Shape {
            clean: self.is_clean(),
            conversations: self.conversations,
            records: self.records,
            entries: self.entries,
            references: self.references,
            blobs_read: self.blobs_read,
            bytes_read: self.bytes_read,
            findings: &self.findings,
            repairs: &self.repairs,
        }
        .serialize(serializer)
    }
}

/// A path as its lossy UTF-8 form, or `null`.
fn lossy_path<S: serde::Serializer>(
    path: &Option<PathBuf>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    match path {
        Some(p) => serializer.collect_str(&p.display()),
        None => serializer.serialize_none(),
    }
}

/// Whether a repair keeps, in the store, the whole records of a damaged log
/// before its damage (the whole log going to quarantine either way).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeepPrefix {
    /// Kept when the damage allows (format-spec.md 4.8): what `fsck
    /// --repair` does.
    Yes,
    /// Never: the conversation leaves the store whole (JP's `sanitize`,
    /// which trashes a damaged conversation whole).
    No,
}

/// Settings of an fsck run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsckOptions {
    /// Decompress and hash every blob, check packs against their indexes.
    pub read_data: bool,
    /// Cut torn tails and move damage aside.
    pub repair: bool,
}

/// Progress: conversations checked of all, then bytes of blobs read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsckProgress {
    /// Conversations checked so far, of all.
    Conversations(usize, usize),
    /// Blob bytes read so far, of all.
    Blobs(u64, u64),
}

fn blob_error_path(e: &jpstore_blobstore::Error) -> Option<PathBuf> {
    use jpstore_blobstore::Error as B;
    match e {
        B::Io { path, .. }
        | B::Corrupt { path, .. }
        | B::SyncFailed { path, .. }
        | B::Unsupported { path, .. } => Some(path.clone()),
        _ => None,
    }
}

/// What fsck adds to the message of a file of a newer format.
const LEFT_AS_IT_IS: &str = "this build cannot check it, and --repair leaves it as it is";

/// The finding for a file of the blob store of a newer format (`error`,
/// [`jpstore_blobstore::Error::Unsupported`]): not damage.
fn newer_blob_file(error: &jpstore_blobstore::Error) -> Finding {
    Finding {
        severity: Severity::Unsupported,
        kind: "unsupported-version",
        conversation: None,
        path: blob_error_path(error),
        offset: None,
        blob: None,
        message: format!("{error}; {LEFT_AS_IT_IS}"),
    }
}

/// What checking one conversation's log and its references found:
/// everything but what depends on reading blob data and what repair does.
#[derive(Default)]
struct ConvCheck {
    /// Removed since the conversations were listed: not checked, not
    /// counted.
    removed: bool,
    damaged: bool,
    /// Where the valid records end, when the only damage is a bad record
    /// there (what `--repair` keeps in the store).
    damaged_at: Option<u64>,
    /// A torn tail found (and re-checked under the writer lock).
    torn: bool,
    /// Blob references: id, size, offset of the record.
    refs: Vec<(BlobId, u64, u64)>,
    /// The first reference found wrong (wrong size, missing, unreadable):
    /// its index in `refs`, and why the conversation is to be moved aside.
    bad_ref: Option<(usize, String)>,
    /// Records and entries read.
    records: u64,
    entries: u64,
    /// Findings about the log, then about its references, in the order
    /// found.
    findings: Vec<Finding>,
}

/// Every conversation checked, and the blob references counted.
struct LogsChecked {
    /// In the order of the conversation ids.
    conversations: Vec<ConvCheck>,
    /// Distinct blobs referenced.
    references: usize,
    /// Blobs in the store referenced by no conversation.
    orphans: usize,
    /// Of those, blobs gc keeps because a damaged or quarantined log may
    /// reference them (format-spec.md 4.7, "Marking").
    kept_for_recovery: usize,
}

/// Why fsck stopped before the end ([`run`]). A check writes nothing; a
/// repair is made of whole steps, so what was repaired stays repaired.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsckError {
    /// Reading or writing the store failed, or the run was interrupted
    /// ([`Error::Interrupted`]).
    #[error(transparent)]
    Store(#[from] Error),
    /// `fsck --repair` could not finish moving a conversation into
    /// quarantine (its note, or the records it keeps, could not be written).
    #[error("fsck --repair could not quarantine conversation {id}: {failed}; {left}")]
    RepairNotDone {
        /// The conversation.
        id: String,
        /// What failed.
        failed: Box<Error>,
        /// Where the conversation is now.
        left: String,
    },
}

impl From<jpstore_blobstore::Error> for FsckError {
    fn from(e: jpstore_blobstore::Error) -> FsckError {
        FsckError::Store(e.into())
    }
}

/// Checks `store` (and with [`FsckOptions::repair`] repairs it), as
/// `jp-store fsck` does; see the module documentation for what is checked
/// and how damage is set aside. `progress` hears of each phase and
/// conversation.
pub fn run(
    store: &Store,
    options: FsckOptions,
    progress: &mut dyn FnMut(FsckProgress),
) -> Result<FsckReport, FsckError> {
    store.fsck(options, progress)
}

/// [`run`] that stops with [`Error::Interrupted`] soon after `interrupt`
/// is set (by a signal handler, or another thread): inside the check of
/// one log, between conversations, and inside blob checks. A check is
/// read-only, so stopping loses nothing; with `repair`, the flag is looked
/// at before each phase and each repair is a whole step (format-spec.md
/// 4.8), so what was repaired stays repaired and the next run goes on from
/// there.
pub fn run_interruptible(
    store: &Store,
    options: FsckOptions,
    progress: &mut dyn FnMut(FsckProgress),
    interrupt: &AtomicBool,
) -> Result<FsckReport, FsckError> {
    store.fsck_interruptible(options, progress, interrupt)
}

impl Store {
    /// Runs fsck (see the module documentation).
    pub(crate) fn fsck(
        &self,
        options: FsckOptions,
        progress: &mut dyn FnMut(FsckProgress),
    ) -> Result<FsckReport, FsckError> {
        self.fsck_interruptible(options, progress, &AtomicBool::new(false))
    }

    /// [`Store::fsck`] that stops with [`Error::Interrupted`] soon after
    /// `interrupt` is set (by a signal handler, or another thread): inside
    /// the check of one log (before each record, through the search after a
    /// bad header and gc's walk of a damaged log), between conversations,
    /// and inside blob checks. A check is read-only, so
    /// stopping loses nothing; with `repair`, the flag is looked at before
    /// each phase and each repair is a whole step (format-spec.md 4.8), so
    /// what was repaired stays repaired and the next run goes on from there.
    pub(crate) fn fsck_interruptible(
        &self,
        options: FsckOptions,
        progress: &mut dyn FnMut(FsckProgress),
        interrupt: &AtomicBool,
    ) -> Result<FsckReport, FsckError> {
        self.fsck_keeping(options, KeepPrefix::Yes, progress, interrupt)
    }

    /// [`Store::fsck_interruptible`] whose repair, with [`KeepPrefix::No`],
    /// moves a conversation with a damaged log aside whole instead of
    /// putting the records before the damage back in the store.
    pub(crate) fn fsck_keeping(
        &self,
        options: FsckOptions,
        keep_prefix: KeepPrefix,
        progress: &mut dyn FnMut(FsckProgress),
        interrupt: &AtomicBool,
    ) -> Result<FsckReport, FsckError> {
        let stop = || {
            if interrupt.load(Ordering::Relaxed) {
                Err(Error::Interrupted)
            } else {
                Ok(())
            }
        };
        stop()?;
        let mut report = FsckReport::default();
        // Before anything else opens them: a FIFO where the layout keeps a
        // file would be refused by every open, never reported by one.
        let (loose, listed) = self.check_layout(options, &mut report)?;
        self.check_interrupted_repairs(options, &mut report)?;
        self.check_workspace_config(&mut report);
        self.check_leftovers(&listed, &mut report);
        if options.repair {
            // Damaged objects first: the conversations referencing them are
            // then found with missing blobs and moved aside too.
            self.repair_blobs(&mut report, progress, interrupt)?;
            stop()?;
        }
        // The walk's listing of loose objects serves the references;
        // repairing moves damaged ones aside after it: listed again then.
        let loose = loose.filter(|_| !options.repair);
        self.check_all(
            options,
            keep_prefix,
            &mut report,
            progress,
            interrupt,
            loose,
        )?;
        Ok(report)
    }

    /// Reports a `config.toml` that every command needing it would refuse
    /// (it cannot be read, is too large, is not UTF-8, does not parse, or
    /// holds a bad setting) as a warning: not damage (the conversations
    /// and blobs are intact, and repair never touches the file), but the
    /// reason views fail. A node the layout walk reported already is not
    /// reported again.
    fn check_workspace_config(&self, report: &mut FsckReport) {
        let path = self.backend().display(Path::new(crate::store::CONFIG_FILE));
        if report
            .findings
            .iter()
            .any(|f| f.path.as_deref() == Some(path.as_path()))
        {
            return;
        }
        if let Err(e) = self.workspace_config() {
            report.findings.push(Finding {
                severity: Severity::Warning,
                kind: "workspace-config",
                conversation: None,
                path: Some(path),
                offset: None,
                blob: None,
                message: e.to_string(),
            });
        }
    }

    /// Reports the leftovers of writers that failed or were stopped
    /// ([`crate::gc::leftovers`]) as information: nothing reads them, and
    /// gc removes them once they are older than its grace period. `listed`:
    /// what the layout walk found in conversation directories.
    fn check_leftovers(&self, listed: &Listings, report: &mut FsckReport) {
        let backend = &**self.backend();
        for l in crate::gc::leftovers::find_listed(backend, listed) {
            let conversation = match l.kind {
                LeftoverKind::Unpublished => {
                    l.key.file_name().map(|n| n.to_string_lossy().into_owned())
                }
                LeftoverKind::StoppedRemoval | LeftoverKind::Temp => None,
            };
            report.findings.push(Finding {
                severity: Severity::Info,
                kind: "leftover",
                conversation,
                path: Some(backend.display(&l.key)),
                offset: None,
                blob: None,
                message: format!(
                    "{} ({} bytes); nothing reads it, and gc removes it once it is older than its grace period",
                    l.kind.describe(),
                    l.bytes
                ),
            });
        }
    }

    /// Checks the logs and (with `read_data`) the blobs; `loose` are the
    /// store's loose objects where the layout walk listed them.
    fn check_all(
        &self,
        options: FsckOptions,
        keep_prefix: KeepPrefix,
        report: &mut FsckReport,
        progress: &mut dyn FnMut(FsckProgress),
        interrupt: &AtomicBool,
        loose: Option<Vec<BlobId>>,
    ) -> Result<(), FsckError> {
        let ids = self.ids()?;
        report.conversations = ids.len();
        // Blob damage found by reading data, to tie conversations to it.
        let mut damaged_blobs: HashSet<BlobId> = HashSet::new();
        let mut verify_findings = Vec::new();
        let logs = if options.read_data {
            // The logs are checked while the blobs are read: both are CPU
            // work, and neither needs the other's result until both are
            // done. They are checked on one of verify's workers (before it
            // starts verifying), not on a thread of their own competing
            // with the workers for the cores.
            let (v, logs) = self.blobs().verify_all_beside(
                &mut |p| progress(FsckProgress::Blobs(p.bytes_done, p.bytes_total)),
                interrupt,
                || self.check_logs(&ids, &mut |_| {}, interrupt, loose),
            );
            let (v, logs) = (v?, logs?);
            progress(FsckProgress::Conversations(ids.len(), ids.len()));
            report.blobs_read = v.loose_objects + v.packed_objects;
            report.bytes_read = v.bytes;
            for p in v.problems {
                if p.error.is_unsupported() {
                    verify_findings.push(newer_blob_file(&p.error));
                    continue;
                }
                if let Some(b) = p.blob {
                    damaged_blobs.insert(b);
                }
                verify_findings.push(Finding {
                    severity: Severity::Damage,
                    kind: if p.blob.is_some() {
                        "damaged-blob"
                    } else {
                        "damaged-pack"
                    },
                    conversation: None,
                    path: blob_error_path(&p.error),
                    offset: None,
                    blob: p.blob,
                    message: p.error.to_string(),
                });
            }
            for u in v.unindexed_packs {
                verify_findings.push(Finding {
                    severity: Severity::Info,
                    kind: "unindexed-pack",
                    conversation: None,
                    path: Some(u),
                    offset: None,
                    blob: None,
                    message: "a pack without an index (an interrupted write); gc removes it".into(),
                });
            }
            logs
        } else {
            let logs = self.check_logs(
                &ids,
                &mut |done| progress(FsckProgress::Conversations(done, ids.len())),
                interrupt,
                loose,
            )?;
            // A pack whose index did not load, or whose length is not the
            // one its index gives, is named without reading data (the
            // objects of the first show as missing references):
            // `--read-data` reports both with the blobs.
            let wrong_length = self.blobs().packs_of_wrong_length()?;
            for (_, error) in self.blobs().broken_packs().into_iter().chain(wrong_length) {
                verify_findings.push(Finding {
                    severity: Severity::Damage,
                    kind: "damaged-pack",
                    conversation: None,
                    path: blob_error_path(&error),
                    offset: None,
                    blob: None,
                    message: error.to_string(),
                });
            }
            // A pack whose index is of a newer format: not damage.
            for (_, error) in self.blobs().newer_packs() {
                verify_findings.push(newer_blob_file(&error));
            }
            logs
        };
        let mut to_quarantine: Vec<(ConversationId, String, Option<u64>)> = Vec::new();
        for (id, check) in ids.iter().zip(logs.conversations) {
            if check.removed {
                report.conversations -= 1;
                continue;
            }
            report.records += check.records;
            report.entries += check.entries;
            // The valid prefix is kept in the store only when the bad record
            // is the only damage and every reference before it resolves.
            let only_damage = check
                .findings
                .iter()
                .filter(|f| f.severity == Severity::Damage)
                .count()
                == 1;
            let keep = check.damaged_at.filter(|&at| {
                keep_prefix == KeepPrefix::Yes
                    && only_damage
                    && at > crate::log::FIRST_RECORD
                    && check
                        .refs
                        .iter()
                        .all(|(blob, _, _)| !damaged_blobs.contains(blob))
            });
            report.findings.extend(check.findings);
            let mut reason = check.damaged.then(|| "its log is damaged".to_string());
            if check.torn && options.repair {
                // Opening a writer cuts it (the finding stays as found).
                match self.writer(id) {
                    Ok(w) => {
                        if let Some(cut) = w.cut_tail() {
                            report.repairs.push(format!(
                                "cut a torn tail of {} bytes at offset {} of conversation {id} (its bytes copied to {})",
                                cut.len,
                                cut.offset,
                                self.backend().display(&cut.copy).display()
                            ));
                        }
                        // The head then covers the log as cut.
                        w.close();
                    }
                    Err(e) => reason = Some(format!("its torn tail could not be cut: {e}")),
                }
            }
            if reason.is_none() {
                // The first reference that is wrong or whose blob is damaged
                // (all before the first wrong one have the right size).
                let wrong_at = check.bad_ref.as_ref().map_or(check.refs.len(), |(i, _)| *i);
                reason = check.refs[..wrong_at]
                    .iter()
                    .find(|(blob, _, _)| damaged_blobs.contains(blob))
                    .map(|(blob, _, _)| format!("blob {blob} it references is damaged"))
                    .or(check.bad_ref.map(|(_, why)| why));
            }
            if let Some(r) = reason {
                to_quarantine.push((id.clone(), r, keep));
            }
        }
        report.references = logs.references;
        report.findings.extend(verify_findings);
        // Orphans, as information.
        let orphans = logs.orphans;
        if orphans > 0 {
            report.findings.push(Finding {
                severity: Severity::Info,
                kind: "orphan-blobs",
                conversation: None,
                path: None,
                offset: None,
                blob: None,
                message: format!(
                    "{orphans} blobs are referenced by no conversation (gc removes them)"
                ),
            });
        }
        if logs.kept_for_recovery > 0 {
            report.findings.push(Finding {
                severity: Severity::Info,
                kind: "kept-for-recovery",
                conversation: None,
                path: None,
                offset: None,
                blob: None,
                message: format!(
                    "{} blobs are referenced only by what a damaged or quarantined log may still hold (records after damage, damaged records, quarantined conversations, cut tails in quarantine/conversations/); gc keeps them",
                    logs.kept_for_recovery
                ),
            });
        }
        if options.repair {
            for (id, why, keep) in to_quarantine {
                let to = match self.quarantine_conversation(&id, &why, keep) {
                    Ok(to) => to,
                    Err(FsckError::Store(e)) if e.is_no_conversation() => {
                        report.repairs.push(format!(
                            "left conversation {id} alone: it was removed since it was checked"
                        ));
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                report.repairs.push(format!(
                    "moved conversation {id} to {} because {why}",
                    to.display()
                ));
                if let Some(end) = keep {
                    report.repairs.push(format!(
                        "kept the whole records of conversation {id} before offset {end} in the store (the whole log stays in quarantine)"
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks every conversation's log and resolves its blob references
    /// against the store (its loose objects `loose` where they were listed
    /// already); `progress` gets the number checked so far.
    fn check_logs(
        &self,
        ids: &[ConversationId],
        progress: &mut dyn FnMut(usize),
        interrupt: &AtomicBool,
        loose: Option<Vec<BlobId>>,
    ) -> Result<LogsChecked> {
        // Every id in the store with its size where an index has it, and
        // whether a reference to it was seen; referenced ids that are not
        // listed (missing, or published since) are added as they are looked
        // up. Each size is looked up once however many references share it.
        let mut known = KnownBlobs::new(&self.blobs().listing_beside(loose)?);
        let mut conversations = Vec::with_capacity(ids.len());
        // Conversations of one workspace share their base config: each is
        // read and parsed once.
        let mut base_configs = HashMap::new();
        for (i, id) in ids.iter().enumerate() {
            if interrupt.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let mut check = self.check_conversation(id, &mut base_configs, interrupt)?;
            // Damage of a conversation removed since the listing is not
            // damage: where a move is not one step, part of it is still
            // there beside the copy moved aside; or its log is gone (`rm`
            // moves a conversation away in one rename; a log is replaced in
            // one too, so its name never lacks one while it exists). The
            // copy is looked for first: an object store's removal deletes
            // it last, so a removal that ends between the two looks leaves
            // no log at the second.
            if check.damaged {
                if let Some(copy) = self.being_removed(id, interrupt)? {
                    check = ConvCheck {
                        findings: vec![Finding {
                            severity: Severity::Warning,
                            kind: "being-removed",
                            conversation: Some(id.to_string()),
                            path: Some(self.backend().display(&id.log_path())),
                            offset: None,
                            blob: None,
                            message: format!(
                                "what is left of a conversation being removed, or whose removal stopped: it was copied aside to {} and is being deleted; `jp-store rm {id}` finishes a stopped removal",
                                self.backend().display(&copy).display()
                            ),
                        }],
                        ..ConvCheck::default()
                    };
                } else if matches!(self.exists(id), Ok(false)) {
                    check = ConvCheck {
                        removed: true,
                        ..ConvCheck::default()
                    };
                }
            }
            conversations.push(check);
            progress(i + 1);
        }
        // Every reference's listed size, found in one walk in id order.
        let sizes = known.listed_sizes(
            conversations
                .iter()
                .flat_map(|c| c.refs.iter().map(|(blob, _, _)| blob)),
        );
        let mut sizes = &sizes[..];
        for (id, check) in ids.iter().zip(&mut conversations) {
            let (these, rest) = sizes.split_at(check.refs.len());
            self.resolve_refs(id, check, these, &mut known);
            sizes = rest;
        }
        // What gc keeps beyond the valid references, looked for only where
        // there is damage or quarantine to look at.
        let mut recoverable = std::collections::HashSet::new();
        for (id, check) in ids.iter().zip(&conversations) {
            if check.damaged || check.torn {
                // Best effort: a log that cannot be read shows as damage.
                let marked = crate::gc::mark_log(
                    &**self.backend(),
                    &id.log_path(),
                    crate::log::Holds::Log,
                    self.options().log,
                    interrupt,
                    &mut recoverable,
                );
                if let Err(Error::Interrupted) = marked {
                    return Err(Error::Interrupted);
                }
            }
        }
        // A quarantined log that cannot be read makes gc refuse to sweep;
        // fsck only informs, so what it marked before that is counted.
        if let Err(crate::gc::GcError::Store(Error::Interrupted)) =
            self.mark_quarantined(interrupt, &mut recoverable)
        {
            return Err(Error::Interrupted);
        }
        let kept_for_recovery = if recoverable.is_empty() {
            0
        } else {
            known
                .orphan_ids()
                .filter(|id| recoverable.contains(*id))
                .count()
        };
        Ok(LogsChecked {
            conversations,
            references: known.referenced(),
            orphans: known.orphans() - kept_for_recovery,
            kept_for_recovery,
        })
    }

    /// Where a removal of conversation `id` moved it aside, if the log at
    /// its name is what that removal has not deleted yet: the start of the
    /// log moved aside, byte for byte. A removal moves a conversation in
    /// one rename on a file system, but on an object store it copies it
    /// aside and then deletes its objects (5.4), so meanwhile the log at
    /// its name is shorter than its head cache says (or, a segment deleted
    /// before a later one, does not read at all), which is damage in any
    /// other conversation. Looked for only
    /// where damage was found; on a file system, only a log that is the
    /// start of the one moved aside is taken for a removal (a conversation
    /// there leaves its name in one rename, so this is one whose removal
    /// stopped and whose name was not taken again).
    ///
    /// Nothing is read where no removal left a copy (a damaged log of
    /// gigabytes is not read again for nothing), and the logs are compared
    /// a MiB at a time, looking at `interrupt` for each.
    fn being_removed(
        &self,
        id: &ConversationId,
        interrupt: &AtomicBool,
    ) -> Result<Option<PathBuf>> {
        let backend = &**self.backend();
        let copies = self.removal_copies(id);
        if copies.is_empty() {
            return Ok(None);
        }
        let open = |path: &Path| {
            let file = backend.open(path).ok()?;
            let len = file.len().ok()?;
            Some((file, len))
        };
        // On an object store, what is left may not read at all (a segment
        // deleted before one after it): there, a copy aside is enough.
        let left = open(&id.log_path());
        let one_step = backend.renames_in_one_step();
        let Some((left, left_len)) = left else {
            return Ok(copies.into_iter().find(|_| !one_step));
        };
        for aside in copies.iter() {
            let Some((moved, moved_len)) = open(&aside.join(crate::conversation::LOG_FILE)) else {
                continue;
            };
            if moved_len < left_len {
                continue;
            }
            match starts_with(&*moved, &*left, left_len, interrupt)? {
                Some(true) => return Ok(Some(aside.clone())),
                Some(false) => {}
                // What is left does not read.
                None => return Ok(copies.into_iter().find(|_| !one_step)),
            }
        }
        Ok(None)
    }

    /// Checks that every reference of a conversation names a blob of the
    /// size it says; adds findings and the first wrong reference to `check`.
    fn resolve_refs(
        &self,
        id: &ConversationId,
        check: &mut ConvCheck,
        listed_sizes: &[Option<u64>],
        known: &mut KnownBlobs,
    ) {
        let log = self.backend().display(&id.log_path());
        for (i, (blob, size, offset)) in check.refs.iter().enumerate() {
            let finding = |message: String, kind| Finding {
                severity: Severity::Damage,
                kind,
                conversation: Some(id.to_string()),
                path: Some(log.clone()),
                offset: Some(*offset),
                blob: Some(*blob),
                message,
            };
            let found = match listed_sizes[i] {
                Some(s) => Ok(s),
                // Loose (the size is in its header), missing, or published
                // since the listing: looked up.
                None => known.resolve(blob, || self.blobs().size(blob)),
            };
            let (finding, why) = match found {
                Ok(s) if s == *size => continue,
                Ok(s) => (
                    finding(
                        format!("blob {blob} has {s} bytes, the reference says {size}"),
                        "blob-size",
                    ),
                    format!("blob {blob} has the wrong size"),
                ),
                Err(jpstore_blobstore::Error::NotFound { .. }) => (
                    finding(
                        format!("blob {blob} ({size} bytes), referenced by the record at offset {offset}, is not in the store"),
                        "missing-blob",
                    ),
                    format!("blob {blob} it references is missing"),
                ),
                // In a file of a newer format, or perhaps in one (a pack):
                // nothing this build can check, and no reason to move the
                // conversation.
                Err(e @ jpstore_blobstore::Error::Unsupported { .. }) => {
                    check.findings.push(Finding {
                        severity: Severity::Unsupported,
                        ..finding(format!("{e}; {LEFT_AS_IT_IS}"), "unsupported-version")
                    });
                    continue;
                }
                Err(e) => (
                    finding(e.to_string(), "damaged-blob"),
                    format!("blob {blob} it references is damaged"),
                ),
            };
            check.findings.push(finding);
            check.bad_ref.get_or_insert((i, why));
        }
    }

    /// Checks one conversation's log: its findings, and its blob
    /// references with the offset of the record holding each.
    /// `base_configs` holds what parsing each base config read so far
    /// found wrong with it (nothing where it parses, or cannot be read: its
    /// reference is checked as every other).
    fn check_conversation(
        &self,
        id: &ConversationId,
        base_configs: &mut HashMap<BlobId, Option<String>>,
        interrupt: &AtomicBool,
    ) -> Result<ConvCheck> {
        let backend = &**self.backend();
        let path = id.log_path();
        let display = backend.display(&path);
        let mut out = ConvCheck::default();
        let finding = |kind, offset: Option<u64>, message: String| Finding {
            severity: Severity::Damage,
            kind,
            conversation: Some(id.to_string()),
            path: Some(display.clone()),
            offset,
            blob: None,
            message,
        };
        // Records a head cache covers (or the log was published with) were
        // whole once: a bad one there is damage even at the end of the log.
        let proven_end = crate::conversation::head::proven_end(backend, id);
        let log_options = self.options().log;
        let scanned = match crate::log::scan_interruptible(
            backend,
            &path,
            log_options,
            proven_end,
            interrupt,
        ) {
            Ok(s) => s,
            Err(Error::Interrupted) => return Err(Error::Interrupted),
            // A newer build's log: not damage, and left as it is.
            Err(e @ Error::Unsupported { .. }) => {
                out.findings.push(Finding {
                    severity: Severity::Unsupported,
                    ..finding(
                        "unsupported-version",
                        Some(0),
                        format!("{e}; {LEFT_AS_IT_IS}"),
                    )
                });
                return Ok(out);
            }
            Err(e) => {
                let offset = match &e {
                    Error::Corrupt { offset, .. } => Some(*offset),
                    _ => None,
                };
                out.findings
                    .push(finding("damaged-header", offset, e.to_string()));
                out.damaged = true;
                return Ok(out);
            }
        };
        match scanned.end {
            LogEnd::Clean { .. } => {}
            LogEnd::TornTail { offset, len } => {
                // Maybe a record a writer is writing right now: look again
                // holding the writer's lock, if no writer holds it (a
                // long-lived writer must not make fsck wait).
                let torn_tail = |offset, len| Finding {
                    severity: Severity::Warning,
                    ..finding("torn-tail", Some(offset), torn_tail_message(len))
                };
                let locked = match crate::log::try_lock_to_read(backend, &path) {
                    // A lock whose file exists needs no write; one whose
                    // file cannot be made here (a read-only file system,
                    // another user's store) is not taken: no writer of
                    // this file system can be holding it, and the check
                    // reads only. What the walk without it found stands,
                    // and a note says so.
                    Err(e) if e.is_read_only() => {
                        out.findings.push(torn_tail(offset, len));
                        out.findings.push(Finding {
                            severity: Severity::Info,
                            ..finding(
                                "no-lock",
                                None,
                                format!("checked without the writer's lock, which cannot be taken here ({e}): the torn tail is reported as found"),
                            )
                        });
                        out.torn = true;
                        None
                    }
                    other => Some(other?),
                };
                match locked {
                    None => {}
                    Some(Some(_lock)) => {
                        let again = crate::log::scan_interruptible(
                            backend,
                            &path,
                            log_options,
                            proven_end,
                            interrupt,
                        )?;
                        if let LogEnd::TornTail { offset, len } = again.end {
                            // Not damage: what an append that did not
                            // complete leaves (a crash, or a write that
                            // failed, such as on a full disk).
                            out.findings.push(torn_tail(offset, len));
                            out.torn = true;
                        }
                    }
                    Some(None) => out.findings.push(Finding {
                        severity: Severity::Info,
                        ..finding(
                            "writer-active",
                            Some(offset),
                            format!("{len} bytes after the last whole record, while a writer holds the log: a record being written, or a torn tail its writer cut when it opened the log"),
                        )
                    }),
                }
            }
            LogEnd::Damaged { offset, ref damage } => {
                out.findings.push(finding(
                    "damaged-record",
                    Some(offset),
                    damage.to_error(&display, offset).to_string(),
                ));
                out.damaged = true;
                out.damaged_at = Some(offset);
            }
        }
        let mut turns = TurnCounter::new();
        let mut requests: HashSet<String> = HashSet::new();
        let mut compactions = 0u64;
        let mut base = None;
        for record in &scanned.records {
            if interrupt.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            out.records += 1;
            let max = self.options().log.max_record_size;
            let mut problems = Vec::new();
            // What does not decode is reported before what the entries that
            // do decode show (as it is found: first).
            let first_finding = out.findings.len();
            let mut content = |r: BlobRef| out.refs.push((r.id, r.size, record.offset));
            visit_record(record, max, &mut problems, &mut content, &mut |item| {
                let head = match item {
                    Visited::Meta(m) => {
                        if let Some(b) = &m.base_config {
                            base = Some((*b, record.offset));
                        }
                        return;
                    }
                    Visited::Entry(head) => head,
                };
                out.entries += 1;
                if turns.step_role(head.turn_role()).opened {
                    requests.clear();
                }
                match &head.kind {
                    HeadKind::ToolCallRequest { id, .. } => {
                        requests.insert((*id).to_owned());
                    }
                    HeadKind::ToolCallResponse { id, .. } if !requests.contains(*id) => {
                        out.findings.push(Finding {
                            severity: Severity::Warning,
                            ..finding(
                                "unanswered-response",
                                Some(record.offset),
                                format!("tool_call_response `{id}` answers no request of its turn (kept; the view drops it)"),
                            )
                        });
                    }
                    HeadKind::Compaction(c) => {
                        compactions += 1;
                        if c.from_turn > c.to_turn {
                            out.findings.push(finding(
                                "compaction-range",
                                Some(record.offset),
                                format!(
                                    "a compaction from turn {} to turn {}: an empty range",
                                    c.from_turn, c.to_turn
                                ),
                            ));
                            out.damaged = true;
                        }
                    }
                    // Checked against the compactions before it: an undo
                    // naming a later one would revoke it when it is made.
                    HeadKind::CompactionUndo(undoes) if *undoes >= compactions => {
                        out.findings.push(finding(
                            "undo-target",
                            Some(record.offset),
                            crate::conversation::state::undo_refusal(*undoes, compactions),
                        ));
                        out.damaged = true;
                    }
                    _ => {}
                }
            });
            out.damaged |= !problems.is_empty();
            out.findings.splice(
                first_finding..first_finding,
                problems
                    .into_iter()
                    .map(|found| finding("undecodable-entry", Some(record.offset), found)),
            );
        }
        if let Some((b, offset)) = base {
            out.refs.push((b.id, b.size, offset));
            let wrong = base_configs.entry(b.id).or_insert_with(|| {
                let bytes = self.blobs().get(&b.id).ok()?;
                crate::config::parse_config_json(&bytes, "the base config")
                    .err()
                    .map(|e| e.to_string())
            });
            if let Some(message) = wrong {
                out.findings
                    .push(finding("base-config", Some(offset), message.clone()));
                out.damaged = true;
            }
        }
        Ok(out)
    }

    /// Reports every node of the layout that is not what the store keeps
    /// there (`layout.rs`) and, repairing, moves each into
    /// `quarantine/nodes/` under its path in the store.
    /// Returns the loose objects the walk listed and what it found in the
    /// conversation directories (on a file system; not when repairing,
    /// which may move what it found).
    fn check_layout(
        &self,
        options: FsckOptions,
        report: &mut FsckReport,
    ) -> Result<(Option<Vec<BlobId>>, Listings)> {
        // Only a file system has nodes other than objects and directories.
        let Some(files) = self.backend().files() else {
            return Ok((None, Vec::new()));
        };
        let layout = layout::walk(files);
        for node in layout.misplaced {
            let shown = self.backend().display(&node.path);
            let message = format!(
                "{} is {} where the store keeps {}; nothing opens it",
                shown.display(),
                node.found.describe(),
                node.expected
            );
            report.findings.push(Finding {
                severity: Severity::Damage,
                kind: "not-a-regular-file",
                conversation: node.conversation.clone(),
                path: Some(shown),
                offset: None,
                blob: None,
                message: message.clone(),
            });
            if options.repair {
                let to = self.quarantine_node(&node.path, &message)?;
                report.repairs.push(format!(
                    "moved {} to {} ({message})",
                    node.path.display(),
                    to.display()
                ));
            }
        }
        let listed = if options.repair {
            Vec::new()
        } else {
            layout.conversations
        };
        Ok((layout.loose, listed))
    }

    fn repair_blobs(
        &self,
        report: &mut FsckReport,
        progress: &mut dyn FnMut(FsckProgress),
        interrupt: &AtomicBool,
    ) -> Result<()> {
        // Damaged objects are found by reading them; a repair always reads.
        let v = self.blobs().verify_all_interruptible(
            &mut |p| progress(FsckProgress::Blobs(p.bytes_done, p.bytes_total)),
            interrupt,
        )?;
        let mut moved: HashSet<PathBuf> = HashSet::new();
        let packs_dir = self.blobs().base().join(jpstore_blobstore::PACKS_DIR);
        let pack_files = |stem: &str| {
            vec![
                packs_dir.join(format!("{stem}.idx")),
                packs_dir.join(format!("{stem}.pack")),
            ]
        };
        for p in v.problems {
            // A file of a newer format is not damage: never moved.
            if p.error.is_unsupported() {
                continue;
            }
            // Paths relative to the store root, from the layout
            // (format-spec.md section 1), never from displayed paths.
            let located = p.blob.and_then(|b| self.blobs().locate(&b).ok().flatten());
            let files: Vec<PathBuf> = match located {
                Some(Location::Loose(path)) => vec![path],
                Some(Location::Packed { pack, .. }) => pack_files(&format!("pack-{pack}")),
                None => match blob_error_path(&p.error)
                    .as_deref()
                    .and_then(Path::file_stem)
                    .and_then(|s| s.to_str())
                {
                    Some(stem) if stem.starts_with("pack-") => pack_files(stem),
                    _ => continue,
                },
            };
            for rel in files {
                if !moved.insert(rel.clone()) || self.backend().head(&rel).is_err() {
                    continue;
                }
                let to = self.quarantine_file(&rel, &p.error.to_string())?;
                report.repairs.push(format!(
                    "moved {} to {} ({})",
                    rel.display(),
                    to.display(),
                    p.error
                ));
            }
        }
        self.blobs().refresh_packs()?;
        Ok(())
    }

    fn quarantine_dir(&self, kind: &str) -> Result<PathBuf> {
        let dir = Path::new(QUARANTINE_DIR).join(kind);
        self.backend()
            .create_prefix(&dir)
            .map_err(|e| Error::from_backend(&**self.backend(), e))?;
        Ok(dir)
    }

    fn write_note(&self, at: &Path, why: &str) -> Result<()> {
        let note = format!(
            "moved aside by jp-store fsck --repair at {} UTC\nwhy: {why}\n",
            Timestamp::now()
        );
        let tmp = PathBuf::from(format!("{}.tmp.{}", at.display(), std::process::id()));
        self.backend()
            .put_if_absent(at, note.as_bytes(), &tmp)
            .map_err(|e| Error::from_backend(&**self.backend(), e))?;
        Ok(())
    }

    fn move_aside(&self, from: &Path, to: &Path) -> Result<()> {
        self.backend()
            .rename(from, to)
            .map_err(|e| Error::from_backend(&**self.backend(), e))
    }

    fn stamp() -> String {
        let t = Timestamp::now();
        format!("{}-{}", t.unix_secs(), t.subsec_nanos())
    }

    /// Moves a file of the blob store into `quarantine/blobs/` with a note.
    fn quarantine_file(&self, rel: &Path, why: &str) -> Result<PathBuf> {
        let dir = self.quarantine_dir("blobs")?;
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_else(|| "object".into());
        // Loose objects are named by the rest of their id: keep the two
        // hex digits of their fanout directory (a pack's name is whole).
        let prefix = rel
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().to_string())
            .filter(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()))
            .unwrap_or_default();
        let to = dir.join(format!("{prefix}{name}.{}", Self::stamp()));
        self.move_aside(rel, &to)?;
        self.write_note(&PathBuf::from(format!("{}.note", to.display())), why)?;
        Ok(to)
    }

    /// Publishes, as the log of `id`, the first `end` bytes (its file header
    /// and whole records) of the log quarantined in `quarantined` (relative
    /// to the store root): the conversation as it was before its
    /// first bad record. Records are position-independent, so the prefix
    /// is copied byte for byte; it appears whole or not at all, with its
    /// head synced before it (the proof that its records are whole, as a
    /// created conversation has: format-spec.md 4.6, 4.8).
    fn restore_prefix(&self, id: &ConversationId, quarantined: &Path, end: u64) -> Result<()> {
        let backend = &**self.backend();
        let rel = quarantined.join(crate::conversation::LOG_FILE);
        let io = |op, path: &Path, source| Error::Io {
            op,
            path: backend.display(path),
            source,
        };
        let file = backend.open(&rel).map_err(|e| io("open", &rel, e))?;
        let len = usize::try_from(end).map_err(|_| {
            io(
                "read",
                &rel,
                std::io::Error::new(std::io::ErrorKind::OutOfMemory, "log prefix too large"),
            )
        })?;
        let mut bytes = vec![0u8; len];
        jpstore_blobstore::backend::read_exact_at(&*file, &mut bytes, 0)
            .map_err(|e| io("read", &rel, e))?;
        drop(file);
        let head = self.head_of_prefix(&rel, end)?;
        backend
            .create_prefix(&id.dir())
            .map_err(|e| Error::from_backend(backend, e))?;
        let _lock = crate::log::lock_new(backend, &id.log_path())?;
        let tmp = id.dir().join(format!(
            "{}.tmp.{}.restored",
            crate::conversation::LOG_FILE,
            std::process::id()
        ));
        let published = match head {
            Some(head) => crate::conversation::head::store_synced(backend, id, &head),
            None => Ok(()),
        }
        .and_then(|()| {
            backend
                .put_if_absent(&id.log_path(), &bytes, &tmp)
                .map_err(|e| Error::from_backend(backend, e))
        });
        match published {
            Ok(jpstore_blobstore::backend::Put::Created) => Ok(()),
            Ok(jpstore_blobstore::backend::Put::Existed) => {
                Err(Error::ConversationExists { id: id.to_string() })
            }
            // Nothing published: what was made for it goes (the next
            // repair puts the records back).
            Err(e) => {
                crate::conversation::abandon_creation(backend, id);
                Err(e)
            }
        }
    }

    /// The head covering the records of the log `rel` (relative to the
    /// store root) before `end`, a record boundary of it: their fold.
    fn head_of_prefix(&self, rel: &Path, end: u64) -> Result<Option<Head>> {
        let max = self.options().log.max_record_size;
        let reader = LogReader::open(&**self.backend(), rel, self.options().log)?;
        let mut walk = reader.records()?;
        let mut records = Vec::new();
        while walk.position() < end {
            match walk.next() {
                Some(record) => records.push(record?),
                None => break,
            }
        }
        let corrupt = |offset, found| Error::Corrupt {
            path: reader.path().to_path_buf(),
            offset,
            expected: format!("whole records that decode up to offset {end}"),
            found,
        };
        if walk.position() != end {
            return Err(corrupt(
                walk.position(),
                format!("records ending at {}", walk.position()),
            ));
        }
        crate::conversation::read::head_of_records(&records, max)
            .map_err(|(offset, found)| corrupt(offset, found))
    }

    /// Moves a node that is not what the layout keeps at `rel` into
    /// `quarantine/nodes/<seconds>-<nanos>/<rel>`, with a note beside it.
    fn quarantine_node(&self, rel: &Path, why: &str) -> Result<PathBuf> {
        let quarantine = Path::new(QUARANTINE_DIR);
        if rel == quarantine || rel.parent() == Some(quarantine) {
            // The quarantine or one of its directories (`nodes/` among
            // them): not movable into itself, so renamed beside it, a name
            // the store does not read (format-spec.md section 1); the
            // directory is made anew when something goes there.
            let to = PathBuf::from(format!("{}.node-{}", rel.display(), Self::stamp()));
            self.move_aside(rel, &to)?;
            self.write_note(&PathBuf::from(format!("{}.note", to.display())), why)?;
            return Ok(to);
        }
        let to = Path::new(QUARANTINE_DIR)
            .join("nodes")
            .join(Self::stamp())
            .join(rel);
        let parent = jpstore_blobstore::storage::parent_dir(&to);
        // The new directories' entries are made durable before a node is
        // moved into them (`move_aside` syncs the last one).
        let mut dir = PathBuf::new();
        for name in parent.iter() {
            dir.push(name);
            self.backend()
                .create_prefix(&dir)
                .map_err(|e| Error::from_backend(&**self.backend(), e))?;
        }
        self.move_aside(rel, &to)?;
        self.write_note(&PathBuf::from(format!("{}.note", to.display())), why)?;
        Ok(to)
    }

    /// Finds the repairs that stopped between moving a conversation into
    /// quarantine and putting its kept records back (a crash, a kill):
    /// directories `quarantine/conversations/<id>.<stamp>.repairing-<end>`
    /// (format-spec.md 4.8). Where the conversation has no log in the
    /// store, its records before `end` are only in quarantine: damage
    /// (`interrupted-repair`), which `repair` completes by putting them
    /// back. Where it has one (the records were put back, or a
    /// conversation of that id was created since), `repair` only gives the
    /// directory the name of a repair done.
    fn check_interrupted_repairs(
        &self,
        options: FsckOptions,
        report: &mut FsckReport,
    ) -> Result<()> {
        let backend = &**self.backend();
        let dir = Path::new(QUARANTINE_DIR).join("conversations");
        let entries = match backend.list(&dir) {
            Ok(entries) => entries,
            // None yet; an unreadable one is the layout walk's to report.
            Err(_) => return Ok(()),
        };
        for e in entries.iter().filter(|e| e.is_prefix()) {
            let Some((id, done_name, end)) = interrupted_repair(&e.name) else {
                continue;
            };
            let from = dir.join(&e.name);
            // A name with nothing below it is what a move leaves listed on
            // some object stores (an empty directory of SeaweedFS's filer,
            // say): there is nothing to put back.
            if backend
                .head(&from.join(crate::conversation::LOG_FILE))
                .is_err()
            {
                continue;
            }
            // Anything but a log there (none, or a path that cannot be
            // looked at) leaves the records in quarantine only: putting
            // them back is tried, and fails naming why where it cannot.
            let missing = backend.head(&id.log_path()).is_err();
            if !options.repair {
                if missing {
                    report.findings.push(Finding {
                        severity: Severity::Damage,
                        kind: "interrupted-repair",
                        conversation: Some(id.to_string()),
                        path: Some(backend.display(&from)),
                        offset: Some(end),
                        blob: None,
                        message: format!(
                            "a repair of conversation {id} stopped before it put back the whole records before offset {end}: they are only in quarantine; `jp-store fsck --repair` puts them back"
                        ),
                    });
                }
                continue;
            }
            if missing {
                // It takes the writer lock of the conversation's new
                // directory; a log published since is left as it is.
                match self.restore_prefix(&id, &from, end) {
                    Ok(()) => report.repairs.push(format!(
                        "completed an interrupted repair: put back the whole records of conversation {id} before offset {end} (the whole log stays in {})",
                        backend.display(&dir.join(&done_name)).display()
                    )),
                    // Created since it was looked at: that one stays.
                    Err(Error::ConversationExists { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            let note = from.join("NOTE");
            if matches!(backend.head(&note), Err(ref err) if err.kind() == std::io::ErrorKind::NotFound)
            {
                self.write_note(&note, "a repair that was interrupted; its records before the first bad one were put back")?;
            }
            self.move_aside(&from, &dir.join(done_name))?;
        }
        Ok(())
    }

    /// Moves a conversation's directory into `quarantine/conversations/`
    /// (holding its writer lock), with a note inside; with `keep`, then
    /// publishes the whole records before that offset as its log again
    /// ([`Store::restore_prefix`]). All or nothing where a step fails (a
    /// full disk, say): if the note or the kept records cannot be written,
    /// the conversation is moved back as it was, so that it stays in the
    /// store for a later repair, and the error says so.
    fn quarantine_conversation(
        &self,
        id: &ConversationId,
        why: &str,
        keep: Option<u64>,
    ) -> Result<PathBuf, FsckError> {
        let lock = crate::conversation::writer_lock(&**self.backend(), id)?;
        let dir = self.quarantine_dir("conversations")?;
        let done_name = format!("{id}.{}", Self::stamp());
        // Keeping records, the move names what is to be put back: a repair
        // stopped before it did (a crash) is found by every fsck and
        // completed by the next repair (`check_interrupted_repairs`).
        let to = match keep {
            Some(end) => dir.join(format!("{done_name}{REPAIRING}{end}")),
            None => dir.join(&done_name),
        };
        self.move_aside(&id.dir(), &to)?;
        // The lock guarded the directory just moved. The kept records are
        // published under the lock of the conversation's new directory
        // (`restore_prefix`), which is this same lock where locks are
        // named by their path (a store on S3): released first, or the
        // repair would wait for itself.
        drop(lock);
        let done = self
            .write_note(&to.join("NOTE"), why)
            .and_then(|()| match keep {
                Some(end) => self.restore_prefix(id, &to, end),
                None => Ok(()),
            });
        let failed = match done {
            // The name of a repair done; if it cannot be given now, the
            // next repair gives it.
            Ok(()) if keep.is_some() => {
                let done = dir.join(done_name);
                return Ok(match self.move_aside(&to, &done) {
                    Ok(()) => done,
                    Err(_) => to,
                });
            }
            Ok(()) => return Ok(to),
            // The id is another conversation's now (created since the
            // move): this one stays in quarantine, with its note.
            Err(e @ Error::ConversationExists { .. }) => return Err(e.into()),
            Err(e) => e,
        };
        // Undone in reverse: the new directory (a failed restore removed
        // what it made in it under its lock; a directory holding anything
        // else is left to whoever made it), the note, then the move.
        let backend = &**self.backend();
        let _ = backend.remove_prefix(&id.dir());
        let _ = backend.delete(&[to.join("NOTE")]);
        let undone = self.move_aside(&to, &id.dir());
        Err(FsckError::RepairNotDone {
            id: id.to_string(),
            failed: Box::new(failed),
            left: match undone {
                Ok(()) => "it is left in the store as it was".to_string(),
                Err(e) => format!(
                    "it could not be moved back ({e}) and is only in {}",
                    backend.display(&to).display()
                ),
            },
        })
    }
}

/// What ends the name of a conversation moved into quarantine by a repair
/// that keeps its records before an offset, until they are back in the
/// store: `<id>.<stamp>.repairing-<offset>` (format-spec.md 4.8).
const REPAIRING: &str = ".repairing-";

/// The conversation, the name of a repair done (`<id>.<stamp>`) and the
/// offset of a quarantined directory named by a repair that keeps records
/// ([`REPAIRING`]).
fn interrupted_repair(name: &str) -> Option<(ConversationId, String, u64)> {
    let (done, end) = name.rsplit_once(REPAIRING)?;
    let end = end.parse().ok()?;
    let (id, _stamp) = done.rsplit_once('.')?;
    Some((ConversationId::parse(id).ok()?, done.to_string(), end))
}

/// What fsck says of a torn tail of `len` bytes.
fn torn_tail_message(len: u64) -> String {
    format!(
        "{len} bytes of an incomplete record after the last whole one, left by an append that \
         did not complete (a crash, or a write that failed, such as on a full disk); nothing \
         proves it was ever whole; `fsck --repair` or the next append copies it into \
         quarantine/ and cuts it"
    )
}

/// Whether the file `long` begins with the `len` bytes of the file
/// `short`, compared a MiB at a time: `None` if `short` cannot be read; a
/// read error of `long` is a no. Stops with [`Error::Interrupted`] once
/// `interrupt` is set.
fn starts_with(
    long: &dyn jpstore_blobstore::backend::ObjectReader,
    short: &dyn jpstore_blobstore::backend::ObjectReader,
    len: u64,
    interrupt: &AtomicBool,
) -> Result<Option<bool>> {
    use jpstore_blobstore::backend::read_exact_at;
    const CHUNK: u64 = 1 << 20;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let mut at = 0;
    while at < len {
        if interrupt.load(Ordering::Relaxed) {
            return Err(Error::Interrupted);
        }
        let n = (len - at).min(CHUNK) as usize;
        a.resize(n, 0);
        b.resize(n, 0);
        if read_exact_at(short, &mut b, at).is_err() {
            return Ok(None);
        }
        if read_exact_at(long, &mut a, at).is_err() || a != b {
            return Ok(Some(false));
        }
        at += n as u64;
    }
    Ok(Some(true))
}

/// An item of a record, as fsck checks it.
enum Visited<'r> {
    /// A metadata patch.
    Meta(&'r MetaPatch),
    /// An entry, by its head (its body checked).
    Entry(EntryHead<'r>),
}

/// Visits the items of a record `scan` found valid (framing and checksums)
/// that decode, after adding to `problems` what does not decode in it (for
/// a version 1 batch, each entry that does not; for a version 2 record, the
/// record: then nothing is visited), and hands `content` the content
/// references of the entries visited, in order. A version 2 record's
/// entries are checked as decoding would check them ([`check_entry`]) but
/// not built: fsck decides from their heads, as the view does (and takes
/// the references as the check reads them, not from a second reading).
fn visit_record(
    record: &crate::log::Record,
    max: u32,
    problems: &mut Vec<String>,
    content: &mut dyn FnMut(BlobRef),
    visit: &mut dyn FnMut(Visited<'_>),
) {
    match &record.content {
        RecordContent::Batch(entries) => {
            if let Err(found) = codec::check_declared(entries.iter().map(Vec::as_slice), max) {
                problems.push(format!("the record does not decode: {found}"));
                return;
            }
            let mut decoded = Vec::new();
            for (i, bytes) in entries.iter().enumerate() {
                if let Err(found) = codec::decode_all(bytes, max, &mut decoded) {
                    problems.push(format!("entry {i} of the record does not decode: {found}"));
                }
            }
            for entry in &decoded {
                visit(match entry {
                    LogEntry::Meta(m) => Visited::Meta(m),
                    LogEntry::Event(e) => {
                        e.for_each_content(&mut |r| content(*r));
                        Visited::Entry(EntryHead::of(e))
                    }
                });
            }
        }
        RecordContent::Split { heads, body } => {
            let checked = (|| -> std::result::Result<(), String> {
                let open = OpenRecord::open(heads, body, max)?;
                let mut metas = Vec::new();
                let mut items = Vec::with_capacity(open.count());
                let mut refs = Vec::new();
                for i in 0..open.count() {
                    let (raw, bytes) = open.entry(i)?;
                    if raw.kind == Kind::MetaPatch {
                        metas.push((items.len(), decode_meta(&raw, bytes)?));
                        continue;
                    }
                    let head = check_entry(&raw, bytes, &mut |r| refs.push(r))
                        .and_then(|fields| {
                            EntryHead::from_fields(&raw, &fields, &mut |raw| {
                                BodyParts::new(raw, bytes)?.object(Part::Delta)
                            })
                        })
                        .map_err(|e| format!("entry {i} of the record: {e}"))?;
                    items.push(head);
                }
                // Every item checked: visited in record order.
                refs.into_iter().for_each(&mut *content);
                let mut metas = metas.iter().peekable();
                for (at, head) in items.into_iter().enumerate() {
                    while let Some((_, m)) = metas.next_if(|(before, _)| *before == at) {
                        visit(Visited::Meta(m));
                    }
                    visit(Visited::Entry(head));
                }
                for (_, m) in metas {
                    visit(Visited::Meta(m));
                }
                Ok(())
            })();
            if let Err(found) = checked {
                problems.push(format!("the record does not decode: {found}"));
            }
        }
    }
}

#[cfg(test)]
mod tests;
