//! Garbage collection (format-spec.md 4.7): mark every blob a conversation
//! references, from the logs alone (never reading blob content), and sweep
//! the rest: unreferenced loose objects are deleted, packs whose live share
//! fell below [`GcOptions::rewrite_below`] are rewritten with only their live
//! objects.
//!
//! Safety against concurrent writers: gc holds the gc lock exclusive from
//! the first log it reads until its last deletion; writers hold it shared
//! from their first look at the blob store until the record referencing what
//! they found or stored is durable. So a writer that found a blob present and
//! did not write it has either made its record durable before gc marks (and
//! gc sees the reference) or waits until gc is done (and then finds the blob
//! gone and writes it again). The grace period spares objects written
//! outside that protocol (`jp-store blob put`) and is not needed for safety.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::{Duration, SystemTime};

use jpstore_blobstore::backend::LockKind;
use jpstore_blobstore::BlobId;

use crate::conversation::{gc_lock, ConversationId};
use crate::error::{Error, Result};
use crate::log::Holds;
use crate::store::Store;

/// Settings of a gc run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GcOptions {
    /// Objects (loose files, packs by their index's time) younger than this
    /// are kept even if unreferenced.
    pub grace: Duration,
    /// Only report what would go.
    pub dry_run: bool,
    /// A pack is rewritten when its live objects are fewer than this share of
    /// its objects (0.0-1.0); a pack with no live object is removed.
    pub rewrite_below: f64,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            grace: Duration::from_secs(3600),
            dry_run: false,
            rewrite_below: 0.5,
        }
    }
}

/// What a gc run did (or, dry, would do). Its `Serialize` is what `jp-store
/// gc --json` prints: these fields, `referenced` named `referenced_blobs`,
/// with [`GcReport::objects_freed`] and [`GcReport::bytes_freed`] after it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GcReport {
    /// Whether it was a dry run (nothing removed).
    pub dry_run: bool,
    /// Conversations marked.
    pub conversations: usize,
    /// Distinct blobs referenced.
    pub referenced: usize,
    /// Loose objects removed.
    pub loose_removed: usize,
    /// Bytes of the loose objects removed.
    pub loose_bytes: u64,
    /// Packs rewritten with only their live objects.
    pub packs_rewritten: usize,
    /// Packs removed (no live object).
    pub packs_removed: usize,
    /// Objects dropped from packs.
    pub packed_removed: usize,
    /// Pack bytes freed.
    pub pack_bytes: u64,
    /// Unreferenced objects kept because they are younger than the grace
    /// period, or in packs still mostly live.
    pub kept_unreferenced: usize,
    /// Temp files of crashed writers removed.
    pub temp_removed: usize,
    /// Leftovers of writers that failed or were stopped, outside the blob
    /// store, removed (dry: that would be): conversation directories
    /// without a log, stopped removals, temp files (`leftovers`).
    pub leftovers_removed: usize,
    /// Their bytes.
    pub leftover_bytes: u64,
    /// Packs merged into one, after the sweep, so that pack sizes form a
    /// geometric progression again (format-spec.md 2.11).
    pub packs_merged: usize,
    /// On a shared store (format-spec.md 5.5): objects copied back from the
    /// trash because a record written during the run references them (the
    /// counts above are of what went to the trash), or left in the trash of
    /// a run that did not finish.
    pub restored: usize,
    /// On a shared store: seconds waited for writers that may have seen
    /// what went to the trash.
    pub waited_secs: u64,
    /// What a person should know about how the run was done: a dry run
    /// that took no gc lock because none can be taken (a read-only file
    /// system, another user's store).
    pub notes: Vec<String>,
}

impl GcReport {
    /// Objects freed in all.
    pub fn objects_freed(&self) -> usize {
        self.loose_removed + self.packed_removed
    }

    /// Bytes freed in all.
    pub fn bytes_freed(&self) -> u64 {
        self.loose_bytes + self.pack_bytes
    }
}

impl serde::Serialize for GcReport {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Shape<'a> {
            dry_run: bool,
            conversations: usize,
            referenced_blobs: usize,
            objects_freed: usize,
            bytes_freed: u64,
            loose_removed: usize,
            loose_bytes: u64,
            packs_rewritten: usize,
            packs_removed: usize,
            packed_removed: usize,
            pack_bytes: u64,
            kept_unreferenced: usize,
            temp_removed: usize,
            leftovers_removed: usize,
            leftover_bytes: u64,
            packs_merged: usize,
            restored: usize,
            waited_secs: u64,
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            notes: &'a [String],
        }
        Shape {
            dry_run: self.dry_run,
            conversations: self.conversations,
            referenced_blobs: self.referenced,
            objects_freed: self.objects_freed(),
            bytes_freed: self.bytes_freed(),
            loose_removed: self.loose_removed,
            loose_bytes: self.loose_bytes,
            packs_rewritten: self.packs_rewritten,
            packs_removed: self.packs_removed,
            packed_removed: self.packed_removed,
            pack_bytes: self.pack_bytes,
            kept_unreferenced: self.kept_unreferenced,
            temp_removed: self.temp_removed,
            leftovers_removed: self.leftovers_removed,
            leftover_bytes: self.leftover_bytes,
            packs_merged: self.packs_merged,
            restored: self.restored,
            waited_secs: self.waited_secs,
            notes: &self.notes,
        }
        .serialize(serializer)
    }
}

/// Progress of a gc run: conversations marked of all, or, on a shared
/// store, seconds waited of the wait for writers (format-spec.md 5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcProgress {
    /// What the run is doing.
    pub phase: GcPhase,
    /// Conversations marked so far (seconds waited, when waiting).
    pub marked: usize,
    /// Conversations in all (seconds to wait, when waiting).
    pub total: usize,
}

/// The phases of a gc run that report progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GcPhase {
    /// Reading every log for the blobs it references.
    Marking,
    /// On a shared store: waiting out the writers that may have seen what
    /// went to the trash.
    Waiting,
    /// On a shared store: reading every log again, to restore from the
    /// trash what a record now references.
    Remarking,
}

/// Whether a lookup failed because the name is not there (or a plain file
/// is where a directory was looked through).
fn is_absent(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
    )
}

/// Whether `name` in `quarantine/conversations/` is the copy of a cut tail
/// (`<id>.tail-<offset>.<secs>-<nanos>`, format-spec.md 3), not its note or
/// a temp file of its publication.
pub(crate) fn is_tail_copy(name: &str) -> bool {
    name.contains(".tail-") && !name.ends_with(".note") && !leftovers::is_temp_name(name)
}

pub(crate) fn young(modified: SystemTime, now: SystemTime, grace: Duration) -> bool {
    now.duration_since(modified).map_or(true, |age| age < grace)
}

/// Why gc stopped without finishing ([`run`]). Nothing is lost when it
/// does: a sweep either did not start, or put back what it had moved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GcError {
    /// Reading or writing the store failed.
    #[error(transparent)]
    Store(#[from] Error),
    /// gc found a log it cannot read at all: what it references is unknown,
    /// so nothing is swept.
    #[error("gc swept nothing: it cannot read the log {}, which may reference any blob (make it a readable log file again; `jp-store fsck --repair` moves aside what is not a regular file): {source}", path.display())]
    UnreadableLog {
        /// The log (or quarantine directory) that cannot be read.
        path: PathBuf,
        /// Why.
        #[source]
        source: Box<Error>,
    },
    /// gc asked to delete on a store whose locks do not exclude writers on
    /// other machines and whose backend has no writers' clock
    /// (format-spec.md 5.5): a sweep could delete a blob that a writer
    /// elsewhere is about to reference.
    #[error("gc cannot delete in {}: its locks do not exclude writers on other machines and its storage has no writers' clock to bound them (format-spec.md 5.5); nothing was deleted (--dry-run reports what gc would delete)", store.display())]
    Unsafe {
        /// The store.
        store: PathBuf,
    },
    /// Another gc holds the lock of a shared store, and keeps it alive.
    #[error("another gc is running: {} is held by run {run} and was renewed {renewed} while this run watched it; nothing was deleted", lock.display())]
    Running {
        /// The lock object (its URL names the store).
        lock: PathBuf,
        /// The run that holds it (as its lock says).
        run: String,
        /// When it was seen renewed ("after 2 s", say).
        renewed: String,
    },
    /// gc lost the lock of a shared store during its run (it could not
    /// renew it, or another gc took it over): it stopped moving objects and
    /// put back what it had moved.
    #[error("gc lost its lock {}: {reason}; it stopped, and put back the {restored} objects it had moved to its trash", lock.display())]
    LockLost {
        /// The lock object (its URL names the store).
        lock: PathBuf,
        /// The run, and what happened.
        reason: String,
        /// Objects copied back from the run's trash.
        restored: usize,
    },
}

impl From<jpstore_blobstore::Error> for GcError {
    fn from(e: jpstore_blobstore::Error) -> GcError {
        GcError::Store(e.into())
    }
}

/// Removes from `store` the blobs no conversation references, and the
/// leftovers of interrupted writes, as `jp-store gc` does (see the module
/// documentation); with [`GcOptions::dry_run`], reports what it would
/// remove and removes nothing. On a store whose locks do not exclude
/// writers on other machines (S3), a run that deletes follows the protocol
/// of format-spec.md 5.5.
pub fn run(
    store: &Store,
    options: GcOptions,
    progress: &mut dyn FnMut(GcProgress),
) -> Result<GcReport, GcError> {
    store.gc(options, progress)
}

impl Store {
    /// Every blob any conversation references or may reference, from the
    /// logs alone (no blob content is read): format-spec.md 4.7, "Marking".
    /// Every log is walked tolerantly ([`crate::log::salvage_log`]): the
    /// records after damage count, and what a damaged record may reference
    /// is marked too; so are the logs and tail copies in
    /// `quarantine/conversations/`. A log that cannot be read at all (an I/O
    /// error, no permission, not a regular file, a format this build does
    /// not know) is an error ([`GcError::UnreadableLog`]): sweeping without
    /// its references could lose them. A conversation whose log is gone
    /// (removed after it was listed, or never published) is not live.
    /// Returns the marks and the number of conversations marked.
    pub(crate) fn referenced_blobs(
        &self,
        progress: &mut dyn FnMut(GcProgress),
    ) -> Result<(HashSet<BlobId>, usize), GcError> {
        let backend = &**self.backend();
        let options = self.options().log;
        let ids = self.conversation_dirs()?;
        let mut live = HashSet::new();
        let mut conversations = 0;
        // gc takes no flag: a signal ends it as a crash would, which its
        // protocol survives (format-spec.md 4.7).
        let never = AtomicBool::new(false);
        for (i, id) in ids.iter().enumerate() {
            let path = id.log_path();
            match mark::mark_log(backend, &path, Holds::Log, options, &never, &mut live) {
                Ok(_) => conversations += 1,
                // Removed since it was listed (`rm` does not wait for gc),
                // or a creation that never published its log: not live.
                Err(Error::Io { ref source, .. }) if is_absent(source) => {}
                Err(e) => return Err(self.unreadable(&path, e)),
            }
            progress(GcProgress {
                phase: GcPhase::Marking,
                marked: i + 1,
                total: ids.len(),
            });
        }
        self.mark_quarantined(&never, &mut live)?;
        Ok((live, conversations))
    }

    /// The ids of every directory in `conversations/` named by a valid id,
    /// whatever its log is: unlike [`Store::ids`], a directory or other node
    /// in place of the log is listed, so that gc refuses to sweep instead of
    /// taking the conversation as absent.
    fn conversation_dirs(&self) -> Result<Vec<ConversationId>> {
        let dir = Path::new(crate::conversation::CONVERSATIONS_DIR);
        let entries = self.backend().list(dir).map_err(|source| Error::Io {
            op: "list",
            path: self.backend().display(dir),
            source,
        })?;
        let mut ids: Vec<ConversationId> = entries
            .iter()
            .filter_map(|e| ConversationId::parse(&e.name).ok())
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// gc's refusal to sweep, naming the log it cannot read.
    fn unreadable(&self, path: &Path, source: Error) -> GcError {
        GcError::UnreadableLog {
            path: self.backend().display(path),
            source: Box::new(source),
        }
    }

    /// Marks what the conversations moved into quarantine by `fsck
    /// --repair` may reference, and the tails writers cut and copied there:
    /// quarantine never deletes, so gc must not take their content either.
    /// Stops with [`Error::Interrupted`] soon after `interrupt` is set.
    pub(crate) fn mark_quarantined(
        &self,
        interrupt: &AtomicBool,
        live: &mut HashSet<BlobId>,
    ) -> Result<(), GcError> {
        let backend = &**self.backend();
        let options = self.options().log;
        let dir = Path::new(crate::conversation::QUARANTINE_DIR).join("conversations");
        let entries = match backend.list(&dir) {
            Ok(entries) => entries,
            Err(e) if is_absent(&e) => return Ok(()),
            Err(source) => {
                let e = Error::Io {
                    op: "list",
                    path: backend.display(&dir),
                    source,
                };
                return Err(self.unreadable(&dir, e));
            }
        };
        for e in &entries {
            let path = dir.join(&e.name);
            if e.is_prefix() {
                let log = path.join(crate::conversation::LOG_FILE);
                match mark::mark_log(backend, &log, Holds::Log, options, interrupt, live) {
                    Ok(_) => {}
                    // A directory moved aside before its log was published.
                    Err(Error::Io { ref source, .. }) if is_absent(source) => {}
                    Err(Error::Interrupted) => return Err(Error::Interrupted.into()),
                    Err(e) => return Err(self.unreadable(&log, e)),
                }
            } else if is_tail_copy(&e.name) {
                match mark::mark_log(backend, &path, Holds::Part, options, interrupt, live) {
                    Ok(_) => {}
                    Err(Error::Interrupted) => return Err(Error::Interrupted.into()),
                    Err(e) => return Err(self.unreadable(&path, e)),
                }
            }
        }
        Ok(())
    }

    /// Runs gc (see the module documentation). On a store whose locks do
    /// not exclude writers on other machines (S3), a run that deletes
    /// follows the protocol of format-spec.md 5.5 ([`shared`]): it moves
    /// what it would delete to a trash, waits out the writers that may have
    /// seen it, reads the logs again and restores what they now reference.
    pub(crate) fn gc(
        &self,
        options: GcOptions,
        progress: &mut dyn FnMut(GcProgress),
    ) -> Result<GcReport, GcError> {
        if !options.dry_run && !self.backend().locks_span_writers() {
            return shared::gc_shared(self, options, progress);
        }
        let mut notes = Vec::new();
        let locked = if options.dry_run {
            crate::conversation::gc_lock_to_read(&**self.backend())
        } else {
            gc_lock(&**self.backend(), LockKind::Exclusive)
        };
        let _exclusive = match locked {
            Ok(lock) => Some(lock),
            // A dry run removes nothing: where no lock can be taken (its
            // file missing on a read-only file system, or in another
            // user's store), it counts without one, and says so.
            Err(e) if options.dry_run && e.is_read_only() => {
                notes.push(format!(
                    "counted without the gc lock, which cannot be taken here ({e}); nothing was written"
                ));
                None
            }
            Err(e) => return Err(e.into()),
        };
        let now = SystemTime::now();
        let (live, conversations) = self.referenced_blobs(progress)?;
        let mut report = GcReport {
            dry_run: options.dry_run,
            conversations,
            referenced: live.len(),
            notes,
            ..Default::default()
        };
        self.sweep(options, now, &live, &mut report)?;
        if !options.dry_run {
            report.temp_removed = self.blobs().cleanup_temp(options.grace)?.objects;
            report.packs_removed += self.blobs().remove_unindexed_packs(options.grace)?.objects;
        }
        self.remove_leftovers(options, now, &mut report)?;
        Ok(report)
    }

    /// Removes (dry: counts) the leftovers of writers that failed or were
    /// stopped ([`leftovers`]) older than the grace period.
    pub(crate) fn remove_leftovers(
        &self,
        options: GcOptions,
        now: SystemTime,
        report: &mut GcReport,
    ) -> Result<()> {
        let backend = &**self.backend();
        let found = leftovers::find(backend);
        if options.dry_run {
            for l in found.iter().filter(|l| !l.young(now, options.grace)) {
                report.leftovers_removed += 1;
                report.leftover_bytes += l.bytes;
            }
            return Ok(());
        }
        let removed = leftovers::remove(backend, &found, options.grace, now)?;
        report.leftovers_removed = removed.leftovers;
        report.leftover_bytes = removed.bytes;
        Ok(())
    }

    /// The sweep of a gc run, by the marks `live`: unreferenced loose
    /// objects older than the grace period removed, packs rewritten or
    /// removed by their live share, then merged by the geometric rule.
    /// Removal is deletion, or a move to the run's trash while the blob
    /// store has one open ([`shared`]).
    pub(crate) fn sweep(
        &self,
        options: GcOptions,
        now: SystemTime,
        live: &HashSet<BlobId>,
        report: &mut GcReport,
    ) -> Result<()> {
        // Loose objects.
        let mut doomed = Vec::new();
        for o in self.blobs().loose_objects()? {
            if live.contains(&o.id) {
                continue;
            }
            if young(o.modified, now, options.grace) {
                report.kept_unreferenced += 1;
                continue;
            }
            doomed.push(o.id);
            report.loose_removed += 1;
            report.loose_bytes += o.stored_len;
        }
        if !options.dry_run && !doomed.is_empty() {
            let out = self.blobs().delete_loose(&doomed)?;
            report.loose_removed = out.objects;
            report.loose_bytes = out.bytes;
        }
        // Packs. One removed since the listing (merged by a process that
        // does not take the gc lock, `blob put` say) is not ours to sweep:
        // its objects are in the pack it went into, swept by the next gc.
        let vanished = |e: &jpstore_blobstore::Error| {
            matches!(e, jpstore_blobstore::Error::Io { source, .. }
                if source.kind() == std::io::ErrorKind::NotFound)
        };
        for pack in self.blobs().packs()? {
            let ids = match self.blobs().pack_ids(&pack.name) {
                Ok(ids) => ids,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            let dead = ids.iter().filter(|id| !live.contains(id)).count();
            if dead == 0 {
                continue;
            }
            let live_share = (ids.len() - dead) as f64 / ids.len().max(1) as f64;
            if young(pack.modified, now, options.grace)
                || (dead < ids.len() && live_share >= options.rewrite_below)
            {
                report.kept_unreferenced += dead;
                continue;
            }
            if options.dry_run {
                report.packed_removed += dead;
                if dead == ids.len() {
                    report.packs_removed += 1;
                    report.pack_bytes += pack.pack_bytes;
                } else {
                    report.packs_rewritten += 1;
                }
                continue;
            }
            let out = match self
                .blobs()
                .rewrite_pack(&pack.name, &|id| live.contains(id))
            {
                Ok(out) => out,
                Err(e) if vanished(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            report.packed_removed += out.removed_objects;
            report.pack_bytes += out.old_bytes.saturating_sub(out.new_bytes);
            if out.new_pack.is_some() {
                report.packs_rewritten += 1;
            } else {
                report.packs_removed += 1;
            }
        }
        // What is left merged by the geometric rule over every pack, large
        // ones included (writers merge only small ones): the pack count is
        // logarithmic in the store's size after every gc.
        report.packs_merged = self.blobs().merge_packs(options.dry_run)?.merged_packs;
        Ok(())
    }
}

pub(crate) mod leftovers;
pub(crate) mod mark;
pub(crate) mod shared;

pub(crate) use mark::mark_log;

#[cfg(test)]
mod tests;
