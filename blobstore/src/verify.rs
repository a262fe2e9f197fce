//! Verifying every object of a store: decompress, hash, and check pack files
//! against their indexes. Runs on [`Options::threads`](crate::Options) threads.
//!
//! Packs of version 2 are verified group by group: each group's CRC, then
//! its content decompressed once and every object in it hashed, as the best
//! possible reader of the format would (format-spec.md 2.12).

use std::io;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::backend::{read_exact_at, Mapping};
use crate::error::{Error, Result};
use crate::group::{self, GROUP_HEADER_LEN};
use crate::id::BlobId;
use crate::object::{self, HEADER_LEN};
use crate::pack::{
    self, GroupEntry, GroupMember, GroupMembers, GroupedEntry, Pack, PackEntry, ReadError,
    PACK_HEADER_LEN, PACK_TRAILER_LEN, PACK_VERSION_1,
};
use crate::parallel;
use crate::store::{BlobStore, LooseObject, PACKS_DIR};

/// Progress of [`BlobStore::verify_all`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyProgress {
    /// Checks done (objects, plus one per pack file).
    pub done: usize,
    /// Checks in all, as far as known: loose objects count from when their
    /// fanout directory has been listed, so the totals grow while packs are
    /// being checked and are exact at the end.
    pub total: usize,
    /// Stored bytes checked so far.
    pub bytes_done: u64,
    /// Stored bytes in all, as far as known (as `total`).
    pub bytes_total: u64,
}

/// One damaged object or file found by [`BlobStore::verify_all`], or one
/// of a newer format ([`Error::Unsupported`]: not damage, but nothing this
/// build can check) (serialized as `blob`, hex or `null`, and `error`, its
/// message).
#[derive(Debug)]
pub struct Problem {
    /// The object concerned, when the problem is about one object.
    pub blob: Option<BlobId>,
    /// What is wrong, naming the file and offset.
    pub error: Error,
}

#[cfg(feature = "serde")]
impl serde::Serialize for Problem {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Shape {
            blob: Option<BlobId>,
            error: String,
        }
        Shape {
            blob: self.blob,
            error: self.error.to_string(),
        }
        .serialize(serializer)
    }
}

/// What [`BlobStore::verify_all`] found. Serialized (`jp-store blob verify
/// --json`) as `clean` ([`VerifyReport::is_clean`]), then these fields,
/// paths as their lossy UTF-8 form.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Loose objects checked.
    pub loose_objects: usize,
    /// Packs checked.
    pub packs: usize,
    /// Packed objects checked.
    pub packed_objects: usize,
    /// Stored bytes read.
    pub bytes: u64,
    /// Damage found; empty when the store is clean.
    pub problems: Vec<Problem>,
    /// Pack files without an index (left by a crash before publication of the
    /// index, or by an interrupted rewrite); not damage, removable.
    pub unindexed_packs: Vec<PathBuf>,
}

impl VerifyReport {
    /// Whether no damage was found.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for VerifyReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Shape<'a> {
            clean: bool,
            loose_objects: usize,
            packs: usize,
            packed_objects: usize,
            bytes: u64,
            problems: &'a [Problem],
            unindexed_packs: Vec<String>,
        }
        Shape {
            clean: self.is_clean(),
            loose_objects: self.loose_objects,
            packs: self.packs,
            packed_objects: self.packed_objects,
            bytes: self.bytes,
            problems: &self.problems,
            unindexed_packs: self
                .unindexed_packs
                .iter()
                .map(|p| p.display().to_string())
                .collect(),
        }
        .serialize(serializer)
    }
}

/// Stored bytes of a pack verified by one job (read with one read where the
/// pack is not mapped). Small enough that the last jobs leave no core idle
/// for long, large enough that a job costs far more than handing it over.
const PACK_RUN_BYTES: u64 = 256 << 10;
/// A unit of verification work, done by one worker.
enum Job {
    /// A pack file against its index: header, trailer checksum, ids order,
    /// entry bounds.
    PackFile(Arc<Pack>, Option<Arc<Mapping>>),
    /// Entries of one pack lying close together (at most
    /// [`PACK_RUN_BYTES`] from the first one's start to the last one's
    /// end, unless it is a single entry), in offset order: read with one
    /// read (or taken from the pack's map), then each decompressed and
    /// hashed.
    Packed(Arc<Pack>, Option<Arc<Mapping>>, Vec<PackEntry>),
    /// Consecutive groups of a pack of version 2 (at most
    /// [`PACK_RUN_BYTES`] of stored bytes, unless it is a single group),
    /// each with its objects: read with one read (or taken from the map),
    /// then each group checked and decompressed once and its objects
    /// hashed.
    Groups(Arc<Pack>, Option<Arc<Mapping>>, Vec<GroupRun>),
    /// The loose objects of a few fanout directories
    /// ([`FANOUT_DIRS_PER_JOB`]): listed by the worker, then each read,
    /// decompressed and hashed.
    LooseDirs(Vec<String>),
    /// Loose objects listed while planning (on an object store, where one
    /// listing of them all is a request per 1,000 objects and a listing
    /// per fanout prefix is 256 requests): each read, decompressed and
    /// hashed.
    Loose(Vec<LooseObject>),
}

/// Loose objects per [`Job::Loose`].
const LOOSE_PER_JOB: usize = 64;

/// Fanout directories per [`Job::LooseDirs`]: most of a store's hold a few
/// loose objects or none, and a job of one cost more in handing it over and
/// its result back (two thread wake-ups) than in listing it.
const FANOUT_DIRS_PER_JOB: usize = 16;

/// A group of a pack of version 2 to verify: its number, its entry in the
/// index (inside the pack, checked while planning), and its objects (inside
/// it, likewise).
#[derive(Clone, Debug)]
struct GroupRun {
    number: u32,
    entry: GroupEntry,
    /// The pack's objects by group (this group's: those that end inside
    /// it are verified, the others were reported while planning).
    members: Arc<GroupMembers>,
    /// How many of this group's objects end inside it.
    inside: usize,
}

impl GroupRun {
    /// The objects to verify, in id order (their members and ids are read
    /// front to back).
    fn objects(&self) -> impl Iterator<Item = GroupedEntry> + '_ {
        let g = self.number as usize;
        let raw_len = u64::from(self.entry.raw_len);
        self.members
            .group(g)
            .iter()
            .filter(move |o| o.end() <= raw_len)
            .map(move |o| self.members.entry(g, o))
    }
}

impl Job {
    /// Checks and stored bytes known before the job runs (a fanout
    /// directory's are known once it is listed).
    fn planned(&self) -> (usize, u64) {
        match self {
            Job::PackFile(p, _) => (1, p.pack_len),
            Job::Packed(_, _, entries) => {
                (entries.len(), entries.iter().map(|e| e.stored_len).sum())
            }
            Job::Groups(_, _, groups) => (
                groups.iter().map(|g| g.inside).sum(),
                groups.iter().map(|g| g.entry.stored_len()).sum(),
            ),
            Job::LooseDirs(_) => (0, 0),
            Job::Loose(objects) => (objects.len(), objects.iter().map(|o| o.stored_len).sum()),
        }
    }
}

/// What a job did.
struct Done {
    /// Checks done (objects, or one for a pack file).
    checks: usize,
    /// Stored bytes checked.
    bytes: u64,
    /// Loose objects listed by the job (their checks and bytes were not
    /// planned).
    loose: Option<usize>,
    problems: Vec<Problem>,
}

/// Buffers a worker reuses from job to job.
#[derive(Default)]
struct Buffers {
    /// Stored bytes: a run of a pack, a loose object, a piece of a pack file.
    stored: Vec<u8>,
    /// Decompressed content.
    content: Vec<u8>,
}

/// A copy of a damage error (the same damage reported for each object of a
/// damaged group).
fn dup_error(e: &Error) -> Error {
    match e {
        Error::Corrupt {
            path,
            offset,
            expected,
            found,
        } => Error::Corrupt {
            path: path.clone(),
            offset: *offset,
            expected: expected.clone(),
            found: found.clone(),
        },
        Error::TooLarge {
            id,
            path,
            size,
            max,
        } => Error::TooLarge {
            id: *id,
            path: path.clone(),
            size: *size,
            max: *max,
        },
        other => Error::Corrupt {
            path: PathBuf::new(),
            offset: None,
            expected: "a readable group".into(),
            found: other.to_string(),
        },
    }
}

/// `Ok(Some)` for damage, `Ok(None)` for none; other errors (e.g. a read
/// error) are operational failures that stop verification.
fn as_problem(blob: Option<BlobId>, r: Result<()>) -> Result<Option<Problem>> {
    match r {
        Ok(()) => Ok(None),
        // A file of a newer format is a problem for this build, but not
        // damage (`Error::is_unsupported`).
        Err(e @ (Error::Corrupt { .. } | Error::TooLarge { .. } | Error::Unsupported { .. })) => {
            Ok(Some(Problem { blob, error: e }))
        }
        Err(e) => Err(e),
    }
}

impl BlobStore {
    /// Reads, decompresses and hashes every object, and checks every pack file
    /// against its index (header, trailer checksum, object bounds). Damage does
    /// not stop the run: every problem is collected in the report. `progress`
    /// is called on the calling thread as checks complete (a pack run or a
    /// few fanout directories at a time).
    ///
    /// Work is split in jobs for [`Options::threads`](crate::Options)
    /// workers: each pack file's checksum, runs of neighbouring objects of a
    /// pack (verified in offset order), and each fanout directory of loose
    /// objects, a few at a time (listed by the worker, so listing is done
    /// in parallel too);
    /// each worker reuses its buffers. A pack is mapped read-only once for
    /// all its jobs (its bytes are then neither copied nor read twice, for
    /// the checksum and for the objects); where it cannot be mapped, or its
    /// length is no longer the one it was opened with, each job reads what
    /// it needs.
    pub fn verify_all(&self, progress: &mut dyn FnMut(VerifyProgress)) -> Result<VerifyReport> {
        self.verify_all_interruptible(progress, &AtomicBool::new(false))
    }

    /// [`BlobStore::verify_all`] that stops with [`Error::Interrupted`] soon
    /// after `interrupt` is set (by a signal handler, or another thread):
    /// it is looked at before the run, as each job's result comes in and
    /// after the last, so a run stops within one job per worker (at most
    /// 256 KiB of a pack, or 16 fanout directories).
    pub fn verify_all_interruptible(
        &self,
        progress: &mut dyn FnMut(VerifyProgress),
        interrupt: &AtomicBool,
    ) -> Result<VerifyReport> {
        self.verify_all_beside(progress, interrupt, || ()).0
    }

    /// [`BlobStore::verify_all`] with other CPU work of the caller's,
    /// `beside`, run at the same time in the workers' place (fsck checks
    /// the conversation logs there): it starts at once, on a thread of its
    /// own, while the jobs are planned, and the first worker to start waits
    /// for it before it verifies anything, so that it shares the cores with
    /// the workers instead of competing with all of them (a third thread on
    /// two cores). Its result comes back whatever the verification's.
    /// `interrupt` stops the verification as in
    /// [`BlobStore::verify_all_interruptible`]; `beside` runs to its end.
    pub fn verify_all_beside<T: Send>(
        &self,
        progress: &mut dyn FnMut(VerifyProgress),
        interrupt: &AtomicBool,
        beside: impl FnOnce() -> T + Send,
    ) -> (Result<VerifyReport>, T) {
        std::thread::scope(|s| {
            let beside = s.spawn(beside);
            let joined = || {
                beside
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            };
            if interrupt.load(Ordering::Relaxed) {
                return (Err(Error::Interrupted), joined());
            }
            let (mut report, jobs, mut p) = match self.plan_verify() {
                Ok(planned) => planned,
                Err(e) => return (Err(e), joined()),
            };
            let (verified, done) = parallel::run(
                jobs.len(),
                self.options().threads,
                4,
                Buffers::default,
                |buffers, i| self.verify_job(&jobs[i], buffers, interrupt),
                |done| {
                    // The first error stops every worker (`parallel::run`).
                    if interrupt.load(Ordering::Relaxed) {
                        return Err(Error::Interrupted);
                    }
                    if let Some(loose) = done.loose {
                        report.loose_objects += loose;
                        p.total += done.checks;
                        p.bytes_total += done.bytes;
                    }
                    report.problems.extend(done.problems);
                    p.done += done.checks;
                    p.bytes_done += done.bytes;
                    progress(p);
                    Ok(())
                },
                joined,
            );
            report.bytes = p.bytes_total;
            // Set as the last result came in (after its look): stopped all
            // the same.
            let verified = verified.and_then(|()| {
                if interrupt.load(Ordering::Relaxed) {
                    Err(Error::Interrupted)
                } else {
                    Ok(report)
                }
            });
            (verified, done)
        })
    }

    /// The jobs of [`BlobStore::verify_all`], with the report of what
    /// planning found and the progress planned.
    fn plan_verify(&self) -> Result<(VerifyReport, Vec<Job>, VerifyProgress)> {
        self.refresh_packs()?;
        let mut report = VerifyReport::default();
        let packs = self.loaded_packs();
        // Each pack mapped once for all its jobs, so that its bytes are
        // neither copied nor read twice (once for the checksum, once for
        // the objects); read where it cannot be mapped, or no longer has
        // the length it was opened with.
        let maps: Vec<Option<Arc<Mapping>>> = packs
            .iter()
            .map(|p| {
                self.backend()
                    .map(&p.pack_path)
                    .ok()
                    .filter(|m| m.len() as u64 == p.pack_len)
                    .map(Arc::new)
            })
            .collect();
        // Pack files first: a large pack's checksum is the longest job. Then
        // the fanout directories, which complete the totals once listed.
        let mut jobs: Vec<Job> = packs
            .iter()
            .zip(&maps)
            .map(|(p, m)| Job::PackFile(Arc::clone(p), m.clone()))
            .collect();
        if self.backend().files().is_some() {
            jobs.extend(
                self.fanout_dirs()?
                    .chunks(FANOUT_DIRS_PER_JOB)
                    .map(|dirs| Job::LooseDirs(dirs.to_vec())),
            );
        } else {
            let loose = self.loose_objects()?;
            report.loose_objects += loose.len();
            jobs.extend(
                loose
                    .chunks(LOOSE_PER_JOB)
                    .map(|objects| Job::Loose(objects.to_vec())),
            );
        }
        // Entries that cannot be read at all are found while planning.
        let mut unreadable = 0;
        for (p, m) in packs.iter().zip(&maps) {
            report.packs += 1;
            report.packed_objects += p.len();
            unreadable += self.plan_pack(p, m, &mut jobs, &mut report.problems);
        }
        let (unindexed, packless) = self.pack_dir_anomalies(&packs)?;
        report.unindexed_packs = unindexed;
        report.problems.extend(packless);
        for (_, error) in self.broken_packs().into_iter().chain(self.newer_packs()) {
            report.problems.push(Problem { blob: None, error });
        }
        let mut p = VerifyProgress {
            done: unreadable,
            total: unreadable,
            ..VerifyProgress::default()
        };
        for (checks, bytes) in jobs.iter().map(Job::planned) {
            p.total += checks;
            p.bytes_total += bytes;
        }
        Ok((report, jobs, p))
    }

    /// Splits a pack's groups into [`Job::Groups`] runs; objects that lie
    /// outside their group, and groups that lie outside the pack or exceed
    /// the size limit (each of their objects), are problems at once.
    /// Returns how many objects those were.
    fn plan_grouped_pack(
        &self,
        p: &Arc<Pack>,
        map: &Option<Arc<Mapping>>,
        jobs: &mut Vec<Job>,
        problems: &mut Vec<Problem>,
    ) -> usize {
        let max = self.max_group_raw();
        let members = Arc::new(p.group_members());
        let mut unreadable = 0;
        for (_, e) in &members.stray {
            problems.push(Problem {
                blob: Some(e.id),
                error: self.grouped_bounds_error(
                    p,
                    e,
                    format!("group {} of a pack of {} groups", e.group, p.group_count()),
                ),
            });
            unreadable += 1;
        }
        // The index's objects in their groups: each group holds one, none
        // overlaps another (damage of the index, reported once per pack;
        // the objects are still read and hashed).
        let index_error = |offset: u64, expected: String, found: String| Problem {
            blob: None,
            error: Error::Corrupt {
                path: self.display(&p.index_path),
                offset: Some(offset),
                expected,
                found,
            },
        };
        let shape = members.groups().enumerate().find_map(|(g, objects)| {
            if objects.is_empty() {
                return Some(index_error(
                    p.group_offset_in_index(g),
                    format!("at least one object in group {g}"),
                    "none".into(),
                ));
            }
            members.overlap(g).map(|(end, b)| {
                index_error(
                    p.entry_offset_in_index(b.index()),
                    format!(
                        "{} in group {g} after the object before it, which ends at {end}",
                        members.id(&b),
                    ),
                    format!("bytes {}..{}", b.offset, b.end()),
                )
            })
        });
        problems.extend(shape);
        let mut run: Vec<GroupRun> = Vec::new();
        let mut run_bytes = 0u64;
        for (g, objects) in members.groups().enumerate() {
            if objects.is_empty() {
                continue;
            }
            let entry = match p.check_group_bounds(g, max) {
                Ok(entry) => entry,
                Err(msg) => {
                    for o in objects {
                        let o = members.entry(g, o);
                        problems.push(Problem {
                            blob: Some(o.id),
                            error: self.grouped_bounds_error(p, &o, msg.clone()),
                        });
                    }
                    unreadable += objects.len();
                    continue;
                }
            };
            let fits = |o: &GroupMember| o.end() <= u64::from(entry.raw_len);
            let inside = objects.iter().filter(|o| fits(o)).count();
            for o in objects.iter().filter(|o| !fits(o)) {
                let o = members.entry(g, o);
                problems.push(Problem {
                    blob: Some(o.id),
                    error: self.grouped_bounds_error(
                        p,
                        &o,
                        format!(
                            "object at {}+{} outside the {} raw bytes of group {g}",
                            o.offset, o.raw_len, entry.raw_len
                        ),
                    ),
                });
            }
            unreadable += objects.len() - inside;
            if inside == 0 {
                continue;
            }
            if !run.is_empty() && run_bytes + entry.stored_len() > PACK_RUN_BYTES {
                jobs.push(Job::Groups(
                    Arc::clone(p),
                    map.clone(),
                    std::mem::take(&mut run),
                ));
                run_bytes = 0;
            }
            run_bytes += entry.stored_len();
            run.push(GroupRun {
                number: g as u32,
                entry,
                members: Arc::clone(&members),
                inside,
            });
        }
        if !run.is_empty() {
            jobs.push(Job::Groups(Arc::clone(p), map.clone(), run));
        }
        unreadable
    }

    /// Splits a pack's entries into [`Job::Packed`] runs; entries that lie
    /// outside the pack or exceed the size limit are problems at once.
    /// Returns how many entries those were.
    fn plan_pack(
        &self,
        p: &Arc<Pack>,
        map: &Option<Arc<Mapping>>,
        jobs: &mut Vec<Job>,
        problems: &mut Vec<Problem>,
    ) -> usize {
        if p.version() != PACK_VERSION_1 {
            return self.plan_grouped_pack(p, map, jobs, problems);
        }
        let max = self
            .options()
            .max_blob_len
            .saturating_add(HEADER_LEN as u64);
        let entries: Vec<PackEntry> = p.entries().collect();
        // In offset order, sorting small keys rather than moving whole
        // entries (a pack of an import holds tens of thousands).
        let mut by_offset: Vec<(u64, usize)> = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.offset, i))
            .collect();
        by_offset.sort_unstable();
        let mut unreadable = 0;
        let mut run: Vec<PackEntry> = Vec::new();
        let mut run_end = 0;
        for e in by_offset.into_iter().map(|(_, i)| entries[i]) {
            let refused = match p.check_entry_bounds(&e) {
                Err(msg) => Some(ReadError::Bounds(msg)),
                Ok(()) if e.stored_len > max => Some(ReadError::TooLarge(e.stored_len)),
                Ok(()) => None,
            };
            if let Some(err) = refused {
                problems.push(Problem {
                    blob: Some(e.id),
                    error: self.pack_read_error(p, &e, err),
                });
                unreadable += 1;
                continue;
            }
            // Inside the pack (checked above): no overflow.
            let end = e.offset + e.stored_len;
            if let Some(first) = run.first() {
                if end.max(run_end) - first.offset > PACK_RUN_BYTES {
                    jobs.push(Job::Packed(
                        Arc::clone(p),
                        map.clone(),
                        std::mem::take(&mut run),
                    ));
                }
            }
            run_end = if run.is_empty() {
                end
            } else {
                run_end.max(end)
            };
            run.push(e);
        }
        if !run.is_empty() {
            jobs.push(Job::Packed(Arc::clone(p), map.clone(), run));
        }
        unreadable
    }

    /// Does one job. `Err` is an operational failure (e.g. a read error)
    /// that stops verification, or [`Error::Interrupted`]: `interrupt` is
    /// looked at inside the jobs that loop over many bytes (a pack's
    /// checksum, for every 16 MiB hashed; loose objects, for each).
    fn verify_job(&self, job: &Job, buffers: &mut Buffers, interrupt: &AtomicBool) -> Result<Done> {
        let (checks, bytes) = job.planned();
        let planned = |problems| Done {
            checks,
            bytes,
            loose: None,
            problems,
        };
        match job {
            Job::PackFile(p, map) => {
                let checked =
                    self.verify_pack_file(p, map.as_deref(), &mut buffers.stored, interrupt);
                Ok(planned(as_problem(None, checked)?.into_iter().collect()))
            }
            Job::Packed(p, map, entries) => Ok(planned(self.verify_packed_run(
                p,
                map.as_deref(),
                entries,
                buffers,
            )?)),
            Job::Groups(p, map, groups) => Ok(planned(self.verify_group_run(
                p,
                map.as_deref(),
                groups,
                buffers,
            )?)),
            Job::LooseDirs(dirs) => {
                let mut objects = Vec::new();
                for dir in dirs {
                    objects.extend(self.loose_objects_in(dir)?);
                }
                Ok(Done {
                    checks: objects.len(),
                    bytes: objects.iter().map(|o| o.stored_len).sum(),
                    loose: Some(objects.len()),
                    problems: self.verify_loose(&objects, buffers, interrupt)?,
                })
            }
            Job::Loose(objects) => Ok(planned(self.verify_loose(objects, buffers, interrupt)?)),
        }
    }

    /// Reads, decompresses and hashes each of the loose `objects`; the
    /// problems found (an object removed since it was listed is skipped).
    fn verify_loose(
        &self,
        objects: &[LooseObject],
        buffers: &mut Buffers,
        interrupt: &AtomicBool,
    ) -> Result<Vec<Problem>> {
        let max = self.options().max_blob_len;
        let mut problems = Vec::new();
        for o in objects {
            if interrupt.load(Ordering::Relaxed) {
                return Err(Error::Interrupted);
            }
            let checked = match self.read_loose_stored(&o.id, &mut buffers.stored) {
                // Removed by a concurrent sweep after listing: nothing to
                // verify.
                Ok(false) => continue,
                Ok(true) => object::check_stored(&buffers.stored)
                    .and_then(|h| {
                        object::check_content(&buffers.stored, &h, &o.id, max, &mut buffers.content)
                    })
                    .map(|_| ())
                    .map_err(|d| self.loose_error(&self.loose_path(&o.id), &buffers.stored, d)),
                Err(e) => Err(e),
            };
            problems.extend(as_problem(Some(o.id), checked)?);
        }
        Ok(problems)
    }

    /// Verifies a run of a pack's entries (sorted by offset, inside the
    /// pack, none over the size limit) read with one read.
    fn verify_packed_run(
        &self,
        p: &Pack,
        map: Option<&Mapping>,
        entries: &[PackEntry],
        buffers: &mut Buffers,
    ) -> Result<Vec<Problem>> {
        let (Some(start), Some(end)) = (
            entries.first().map(|e| e.offset),
            entries.iter().map(|e| e.offset + e.stored_len).max(),
        ) else {
            return Ok(Vec::new());
        };
        let Buffers { stored, content } = buffers;
        // Inside the pack (checked while planning), which the map holds
        // whole (its length was checked when it was made).
        let mapped =
            map.and_then(|m| m.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?));
        let run: &[u8] = match mapped {
            Some(run) => run,
            None => {
                // Planned: at most PACK_RUN_BYTES, or one entry within the
                // size limit, which the caller chose to fit in memory.
                object::set_len(stored, (end - start) as usize);
                let file = match self.pack_file(p) {
                    Ok(file) => file,
                    // Removed since the jobs were planned (merged or swept):
                    // no longer part of the store. An index left without its
                    // pack is found from the directory listing.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(e) => return Err(self.io_error("open", &p.pack_path, e)),
                };
                match read_exact_at(&*file, stored, start) {
                    Ok(()) => {}
                    // The pack is shorter than when it was opened: read
                    // each entry alone, so the ones cut off are named.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        let mut problems = Vec::new();
                        for e in entries {
                            let read = self.read_packed(p, e).map(|_| ());
                            problems.extend(as_problem(Some(e.id), read)?);
                        }
                        return Ok(problems);
                    }
                    Err(e) => return Err(self.io_error("read", &p.pack_path, e)),
                }
                stored
            }
        };
        let max = self.options().max_blob_len;
        let mut problems = Vec::new();
        for e in entries {
            let at = (e.offset - start) as usize;
            let stored = &run[at..at + e.stored_len as usize];
            let checked = pack::check_stored_entry(e, stored)
                .map_err(|err| self.pack_read_error(p, e, err))
                .and_then(|h| {
                    object::check_content(stored, &h, &e.id, max, content)
                        .map(|_| ())
                        .map_err(|d| self.packed_decode_error(p, e, d))
                });
            problems.extend(as_problem(Some(e.id), checked)?);
        }
        Ok(problems)
    }

    /// Verifies a run of consecutive groups of a pack of version 2 (inside
    /// the pack, none over the size limit, each object inside its group)
    /// read with one read: each group's header and CRC against the index,
    /// its content decompressed once, each object hashed. Damage of a group
    /// is a problem of each of its objects (none can be read).
    fn verify_group_run(
        &self,
        p: &Pack,
        map: Option<&Mapping>,
        groups: &[GroupRun],
        buffers: &mut Buffers,
    ) -> Result<Vec<Problem>> {
        let (Some(start), Some(end)) = (
            groups.iter().map(|g| g.entry.offset).min(),
            groups.iter().map(|g| g.entry.end()).max(),
        ) else {
            return Ok(Vec::new());
        };
        let Buffers { stored, content } = buffers;
        let mapped =
            map.and_then(|m| m.get(usize::try_from(start).ok()?..usize::try_from(end).ok()?));
        let run: &[u8] = match mapped {
            Some(run) => run,
            None => {
                // Planned: at most PACK_RUN_BYTES, or one group within the
                // size limit, which the caller chose to fit in memory.
                object::set_len(stored, (end - start) as usize);
                let file = match self.pack_file(p) {
                    Ok(file) => file,
                    // Removed since the jobs were planned (merged or swept).
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
                    Err(e) => return Err(self.io_error("open", &p.pack_path, e)),
                };
                match read_exact_at(&*file, stored, start) {
                    Ok(()) => {}
                    // The pack is shorter than when it was opened: every
                    // object of the run is unreadable, named by its group.
                    Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        let mut problems = Vec::new();
                        for g in groups {
                            for o in g.objects() {
                                problems.push(Problem {
                                    blob: Some(o.id),
                                    error: self.group_read_error(
                                        p,
                                        g.number,
                                        &g.entry,
                                        ReadError::Io(io::Error::from(
                                            io::ErrorKind::UnexpectedEof,
                                        )),
                                    ),
                                });
                            }
                        }
                        return Ok(problems);
                    }
                    Err(e) => return Err(self.io_error("read", &p.pack_path, e)),
                }
                stored
            }
        };
        let max = self.max_group_raw();
        let mut problems = Vec::new();
        for g in groups {
            let at = (g.entry.offset - start) as usize;
            let bytes = &run[at..at + g.entry.stored_len() as usize];
            let decoded = match pack::check_stored_group(&g.entry, bytes) {
                Ok(header) => group::group_content(bytes, &header, max, content)
                    .map_err(|d| self.group_decode_error(p, g.number, &g.entry, d)),
                Err(ReadError::Object(d)) => Err(self.group_decode_error(p, g.number, &g.entry, d)),
                Err(other) => Err(self.group_read_error(p, g.number, &g.entry, other)),
            };
            let raw = match decoded {
                Ok(raw) => raw,
                Err(e) => {
                    // The same damage for each object of the group.
                    problems.extend(g.objects().map(|o| Problem {
                        blob: Some(o.id),
                        error: dup_error(&e),
                    }));
                    continue;
                }
            };
            for o in g.objects() {
                // Inside the group (checked while planning), whose raw
                // length the header matched.
                let bytes = &raw[o.offset as usize..o.end() as usize];
                let actual = BlobId::of(bytes);
                if actual != o.id {
                    problems.push(Problem {
                        blob: Some(o.id),
                        error: Error::Corrupt {
                            path: self.display(&p.pack_path),
                            offset: Some(g.entry.offset + GROUP_HEADER_LEN as u64),
                            expected: format!(
                                "object {} (bytes {}..{} of group {}) with that SHA-256",
                                o.id,
                                o.offset,
                                o.end(),
                                g.number
                            ),
                            found: format!("content with SHA-256 {actual}"),
                        },
                    });
                }
            }
        }
        Ok(problems)
    }

    /// A pack of version 2 is damaged if its length is not where its index
    /// puts the trailer (bytes appended, a sparse tail, a cut): found from
    /// its length alone.
    pub(crate) fn check_pack_len(&self, p: &Pack) -> Result<()> {
        let Some(last) = p.group_count().checked_sub(1) else {
            return Ok(());
        };
        if p.version() == PACK_VERSION_1 {
            return Ok(());
        }
        let end = p.group(last).end();
        if end.checked_add(PACK_TRAILER_LEN) == Some(p.pack_len) {
            return Ok(());
        }
        Err(Error::Corrupt {
            path: self.display(&p.pack_path),
            offset: Some(end.min(p.pack_len)),
            expected: format!(
                "a pack of {} bytes (its groups, as its index records them, end at \
                 offset {end}, then the {PACK_TRAILER_LEN}-byte trailer)",
                end.saturating_add(PACK_TRAILER_LEN)
            ),
            found: format!("a pack of {} bytes", p.pack_len),
        })
    }

    fn verify_pack_file(
        &self,
        p: &Pack,
        map: Option<&Mapping>,
        buf: &mut Vec<u8>,
        interrupt: &AtomicBool,
    ) -> Result<()> {
        let look = || {
            if interrupt.load(Ordering::Relaxed) {
                Err(Error::Interrupted)
            } else {
                Ok(())
            }
        };
        let corrupt = |offset: Option<u64>, expected: String, found: String| Error::Corrupt {
            path: self.display(&p.pack_path),
            offset,
            expected,
            found,
        };
        if p.pack_len < PACK_HEADER_LEN + PACK_TRAILER_LEN {
            return Err(corrupt(
                Some(0),
                format!(
                    "a pack of at least {} bytes",
                    PACK_HEADER_LEN + PACK_TRAILER_LEN
                ),
                format!("{} bytes", p.pack_len),
            ));
        }
        // Opened only where the pack is not mapped, as in verify_packed_run.
        let file = match map {
            Some(_) => None,
            None => match self.pack_file(p) {
                Ok(file) => Some(file),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(self.io_error("open", &p.pack_path, e)),
            },
        };
        // From the map (which holds the whole pack) or read.
        let read = |buf: &mut [u8], at: u64| {
            let mapped = map.and_then(|m| {
                let at = usize::try_from(at).ok()?;
                m.get(at..at.checked_add(buf.len())?)
            });
            match mapped {
                Some(bytes) => {
                    buf.copy_from_slice(bytes);
                    Ok(())
                }
                None => {
                    let eof = || io::Error::from(io::ErrorKind::UnexpectedEof);
                    let read = match &file {
                        Some(file) => read_exact_at(&**file, buf, at),
                        // Mapped, but not this far: the pack is shorter
                        // than its length when it was loaded.
                        None => Err(eof()),
                    };
                    read.map_err(|e| self.io_error("read", &p.pack_path, e))
                }
            }
        };
        let mut header = [0u8; PACK_HEADER_LEN as usize];
        read(&mut header, 0)?;
        let header =
            pack::check_pack_header(&header).map_err(|(o, e, f)| corrupt(Some(o), e, f))?;
        if header.version != p.version() {
            return Err(corrupt(
                Some(4),
                format!("pack format version {}, as its index", p.version()),
                format!("version {}", header.version),
            ));
        }
        let body_len = p.pack_len - PACK_TRAILER_LEN;
        // Before its bytes are hashed, which would read all of them.
        self.check_pack_len(p)?;
        let mut hasher = blake3::Hasher::new();
        match map.and_then(|m| m.get(..usize::try_from(body_len).ok()?)) {
            Some(body) => {
                for part in body.chunks(16 << 20) {
                    look()?;
                    hasher.update(part);
                }
            }
            None => {
                object::set_len(buf, 1 << 20);
                let mut at = 0u64;
                while at < body_len {
                    if at % (16 << 20) == 0 {
                        look()?;
                    }
                    let n = (body_len - at).min(buf.len() as u64) as usize;
                    read(&mut buf[..n], at)?;
                    hasher.update(&buf[..n]);
                    at += n as u64;
                }
            }
        }
        let mut trailer = [0u8; 32];
        read(&mut trailer, body_len)?;
        let sum = hasher.finalize();
        if sum.as_bytes() != &trailer {
            return Err(corrupt(
                Some(body_len),
                format!("pack checksum {}", hex::encode(trailer)),
                format!("contents hashing to {}", sum.to_hex()),
            ));
        }
        if p.recorded_pack_checksum() != trailer || p.name != hex::encode(trailer) {
            return Err(Error::Corrupt {
                path: self.display(&p.index_path),
                offset: None,
                expected: format!("an index of pack {}", p.name),
                found: format!(
                    "an index recording pack {}",
                    hex::encode(p.recorded_pack_checksum())
                ),
            });
        }
        // Ids are sorted (strictly: no duplicates).
        let index_error = |offset: Option<u64>, expected: String, found: String| Error::Corrupt {
            path: self.display(&p.index_path),
            offset,
            expected,
            found,
        };
        let mut prev: Option<BlobId> = None;
        for i in 0..p.len() {
            let id = p.id(i);
            if prev.is_some_and(|prev| prev >= id) {
                return Err(index_error(
                    Some(p.entry_offset_in_index(i)),
                    "ids in strictly increasing order".into(),
                    format!(
                        "{} after {}",
                        id,
                        prev.map(|p| p.to_string()).unwrap_or_default()
                    ),
                ));
            }
            prev = Some(id);
        }
        if p.version() != PACK_VERSION_1 {
            return self.verify_group_table(p, &index_error);
        }
        // Entries lie inside the pack.
        for i in 0..p.len() {
            let e = p.entry(i);
            p.check_entry_bounds(&e).map_err(|msg| {
                index_error(
                    Some(p.entry_offset_in_index(i)),
                    format!("entry for {} inside the pack", e.id),
                    msg,
                )
            })?;
        }
        Ok(())
    }

    /// The group table of the index of a pack of version 2: groups back to
    /// back from the pack header to the trailer, each within the size
    /// limit and no longer stored than raw.
    fn verify_group_table(
        &self,
        p: &Pack,
        index_error: &dyn Fn(Option<u64>, String, String) -> Error,
    ) -> Result<()> {
        let max = self.max_group_raw();
        let mut expected = PACK_HEADER_LEN;
        for g in 0..p.group_count() {
            let e = p.group(g);
            let at = Some(p.group_offset_in_index(g));
            if e.offset != expected {
                return Err(index_error(
                    at,
                    format!("group {g} at offset {expected}, right after the one before"),
                    format!("offset {}", e.offset),
                ));
            }
            p.check_group_bounds(g, max)
                .map_err(|msg| index_error(at, format!("group {g} inside the pack"), msg))?;
            expected = e.end();
        }
        let trailer = p.pack_len - PACK_TRAILER_LEN;
        if expected != trailer {
            return Err(index_error(
                None,
                format!("groups up to the pack trailer at offset {trailer}"),
                format!("groups ending at offset {expected}"),
            ));
        }
        // The objects in their groups are checked while planning (their
        // membership is computed there once).
        Ok(())
    }

    /// Pack files without an index (not damage) and indexes whose pack file is
    /// missing (damage: the index promises objects that cannot be read).
    fn pack_dir_anomalies(&self, packs: &[Arc<Pack>]) -> Result<(Vec<PathBuf>, Vec<Problem>)> {
        let dir = self.base().join(PACKS_DIR);
        let entries = self
            .backend()
            .list(&dir)
            .map_err(|e| self.io_error("list", &dir, e))?;
        let has = |name: &str, pack_file: bool| {
            entries.iter().any(|e| {
                let n = if pack_file {
                    pack::name_of_pack_file(&e.name)
                } else {
                    pack::name_of_index_file(&e.name)
                };
                n == Some(name)
            })
        };
        let unindexed = entries
            .iter()
            .filter_map(|e| pack::name_of_pack_file(&e.name))
            .filter(|name| !packs.iter().any(|p| p.name == *name) && !has(name, false))
            .map(|name| self.display(&pack::pack_file_names(&dir, name).0))
            .collect();
        let packless = entries
            .iter()
            .filter_map(|e| pack::name_of_index_file(&e.name))
            .filter(|name| !has(name, true))
            .map(|name| {
                let (pack_path, index_path) = pack::pack_file_names(&dir, name);
                Problem {
                    blob: None,
                    error: Error::Corrupt {
                        path: self.display(&index_path),
                        offset: None,
                        expected: format!("its pack file {}", self.display(&pack_path).display()),
                        found: "no such file".into(),
                    },
                }
            })
            .collect();
        Ok((unindexed, packless))
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use crate::backend::FileBackend;
    use crate::storage::{LocalStorage, Storage};
    use crate::{BlobId, BlobStore, Options};

    fn open(dir: &Path) -> BlobStore {
        let storage: Arc<dyn Storage> = Arc::new(LocalStorage::open(dir).expect("storage"));
        BlobStore::open(FileBackend::shared(storage), "blobs", Options::default())
            .expect("open store")
    }

    /// A store with one pack of `n` objects of about 3 KiB (several runs of
    /// a pack job); the pack file's path.
    fn store_with_pack(dir: &Path, n: usize) -> (Vec<BlobId>, PathBuf) {
        let items: Vec<Vec<u8>> = (0..n)
            .map(|i| format!("object {i}: {}", "text that compresses ".repeat(150)).into_bytes())
            .collect();
        let batch = open(dir)
            .put_batch(items.len(), |i| Ok(items[i].clone()), &mut |_| {})
            .expect("batch");
        let pack = std::fs::read_dir(dir.join("blobs/packs"))
            .expect("list packs")
            .map(|e| e.expect("entry").path())
            .find(|p| p.extension().is_some_and(|x| x == "pack"))
            .expect("a pack");
        (batch.ids, pack)
    }

    /// Every job's problems, as (blob, message), done from the pack's map
    /// or (`mapped` false) from reads.
    fn problems(store: &BlobStore, mapped: bool) -> Vec<(Option<BlobId>, String)> {
        let (_, jobs, _) = store.plan_verify().expect("plan");
        let mut buffers = super::Buffers::default();
        let mut out = Vec::new();
        for job in &jobs {
            let job = match job {
                super::Job::PackFile(p, map) => {
                    assert!(map.is_some(), "a pack on the local file system is mapped");
                    super::Job::PackFile(Arc::clone(p), map.clone().filter(|_| mapped))
                }
                super::Job::Packed(p, map, entries) => super::Job::Packed(
                    Arc::clone(p),
                    map.clone().filter(|_| mapped),
                    entries.clone(),
                ),
                super::Job::Groups(p, map, groups) => super::Job::Groups(
                    Arc::clone(p),
                    map.clone().filter(|_| mapped),
                    groups.clone(),
                ),
                super::Job::LooseDirs(d) => super::Job::LooseDirs(d.clone()),
                super::Job::Loose(objects) => super::Job::Loose(objects.clone()),
            };
            let done = store
                .verify_job(
                    &job,
                    &mut buffers,
                    &std::sync::atomic::AtomicBool::new(false),
                )
                .expect("job");
            out.extend(done.problems.iter().map(|p| (p.blob, p.error.to_string())));
        }
        out.sort();
        out
    }

    #[test]
    fn damage_is_found_alike_in_a_mapped_pack_and_in_one_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ids, pack) = store_with_pack(dir.path(), 300);
        let clean = open(dir.path());
        assert_eq!(problems(&clean, true), vec![]);
        assert_eq!(problems(&clean, false), vec![]);
        let bytes = std::fs::read(&pack).expect("read pack");
        for at in [0, 5, bytes.len() / 3, bytes.len() - 40, bytes.len() - 1] {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x40;
            std::fs::write(&pack, &damaged).expect("write pack");
            let store = open(dir.path());
            let mapped = problems(&store, true);
            assert_eq!(mapped, problems(&store, false), "flip at {at}");
            // The pack checksum (or header) at least, and for a flip inside
            // an object, that object.
            assert!(
                mapped.iter().any(|(b, _)| b.is_none()),
                "flip at {at}: {mapped:?}"
            );
            if at == bytes.len() / 3 {
                assert!(mapped
                    .iter()
                    .any(|(b, _)| b.is_some_and(|b| ids.contains(&b))));
            }
        }
    }

    #[test]
    fn a_pack_longer_or_shorter_than_its_index_says_is_damaged_without_hashing_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (_, pack) = store_with_pack(dir.path(), 50);
        let len = std::fs::metadata(&pack).expect("stat").len();
        // A sparse tail of a GiB (hashing it would read all of it), and a
        // pack cut inside its last group.
        for new_len in [len + (1 << 30), len - 40] {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&pack)
                .expect("open");
            file.set_len(new_len).expect("set length");
            let store = open(dir.path());
            for mapped in [true, false] {
                let found = problems(&store, mapped);
                let want = format!("expected a pack of {len} bytes");
                assert!(
                    found.iter().any(|(b, m)| b.is_none()
                        && m.contains(&want)
                        && m.contains(&format!("found a pack of {new_len} bytes"))),
                    "{new_len} bytes: {found:?}"
                );
            }
            file.set_len(len).expect("set length");
        }
    }

    #[test]
    fn an_interrupt_stops_verification_at_the_next_result() {
        let dir = tempfile::tempdir().expect("tempdir");
        store_with_pack(dir.path(), 500);
        let store = open(dir.path());
        let flag = std::sync::atomic::AtomicBool::new(false);
        let mut calls = Vec::new();
        let e = store
            .verify_all_interruptible(
                &mut |p| {
                    calls.push(p);
                    flag.store(true, std::sync::atomic::Ordering::Relaxed);
                },
                &flag,
            )
            .expect_err("interrupted");
        assert!(matches!(e, crate::Error::Interrupted), "{e}");
        assert_eq!(calls.len(), 1, "no result taken after the interrupt");
        assert!(
            calls[0].done < calls[0].total,
            "the run stopped before its end: {:?}",
            calls[0]
        );
    }

    #[test]
    fn an_interrupt_stops_the_checksum_of_a_pack_and_a_run_of_loose_objects() {
        let dir = tempfile::tempdir().expect("tempdir");
        store_with_pack(dir.path(), 500);
        let store = open(dir.path());
        store.put(b"a loose object").expect("put");
        let set = std::sync::atomic::AtomicBool::new(true);
        let (_, jobs, _) = store.plan_verify().expect("plan");
        let mut buffers = super::Buffers::default();
        let mut stopped = 0;
        for job in &jobs {
            if matches!(job, super::Job::PackFile(..) | super::Job::LooseDirs(_)) {
                let e = store
                    .verify_job(job, &mut buffers, &set)
                    .err()
                    .expect("interrupted");
                assert!(matches!(e, crate::Error::Interrupted), "{e}");
                stopped += 1;
            }
        }
        assert_eq!(stopped, 2, "a pack file job and a loose objects job");
    }

    #[test]
    fn a_clean_mapped_pack_verifies_every_object() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (ids, _) = store_with_pack(dir.path(), 500);
        let store = open(dir.path());
        let mut last = super::VerifyProgress::default();
        let report = store.verify_all(&mut |p| last = p).expect("verify");
        assert!(report.is_clean(), "{:?}", report.problems);
        assert_eq!(report.packed_objects, ids.len());
        assert_eq!(last.done, last.total);
        assert_eq!(last.done, ids.len() + 1, "every object and the pack file");
    }
}
