//! Verifying every object of a store: decompress, hash, and check pack files
//! against their indexes. Runs on [`Options::threads`](crate::Options) threads.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::object::{self, HEADER_LEN};
use crate::pack::{self, Pack, PackEntry, ReadError, PACK_HEADER_LEN, PACK_TRAILER_LEN};
use crate::parallel;
use crate::storage::read_exact_at;
use crate::store::{BlobStore, PACKS_DIR};

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

/// One damaged object or file found by [`BlobStore::verify_all`].
#[derive(Debug)]
pub struct Problem {
    /// The object concerned, when the problem is about one object.
    pub blob: Option<BlobId>,
    /// What is wrong, naming the file and offset.
    pub error: Error,
}

/// What [`BlobStore::verify_all`] found.
#[derive(Debug, Default)]
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

/// Stored bytes of a pack read with one read and verified by one job.
const PACK_RUN_BYTES: u64 = 1 << 20;
/// A unit of verification work, done by one worker.
enum Job {
    /// A pack file against its index: header, trailer checksum, ids order,
    /// entry bounds.
    PackFile(Arc<Pack>),
    /// Entries of one pack lying close together (at most
    /// [`PACK_RUN_BYTES`] from the first one's start to the last one's
    /// end, unless it is a single entry), in offset order: read with one
    /// read, then each decompressed and hashed.
    Packed(Arc<Pack>, Vec<PackEntry>),
    /// The loose objects of one fanout directory: listed by the worker,
    /// then each read, decompressed and hashed.
    LooseDir(String),
}

impl Job {
    /// Checks and stored bytes known before the job runs (a fanout
    /// directory's are known once it is listed).
    fn planned(&self) -> (usize, u64) {
        match self {
            Job::PackFile(p) => (1, p.pack_len),
            Job::Packed(_, entries) => (entries.len(), entries.iter().map(|e| e.stored_len).sum()),
            Job::LooseDir(_) => (0, 0),
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

/// `Ok(Some)` for damage, `Ok(None)` for none; other errors (e.g. a read
/// error) are operational failures that stop verification.
fn as_problem(blob: Option<BlobId>, r: Result<()>) -> Result<Option<Problem>> {
    match r {
        Ok(()) => Ok(None),
        Err(e @ (Error::Corrupt { .. } | Error::TooLarge { .. })) => {
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
    /// fanout directory at a time).
    ///
    /// Work is split in jobs for [`Options::threads`](crate::Options)
    /// workers: each pack file's checksum, runs of neighbouring objects of a
    /// pack (read with one read, verified in offset order), and each fanout
    /// directory of loose objects (listed by the worker, so listing is done
    /// in parallel too); each worker reuses its buffers.
    pub fn verify_all(&self, progress: &mut dyn FnMut(VerifyProgress)) -> Result<VerifyReport> {
        self.refresh_packs()?;
        let mut report = VerifyReport::default();
        let packs = self.loaded_packs();
        // Pack files first: a large pack's checksum is the longest job. Then
        // the fanout directories, which complete the totals once listed.
        let mut jobs: Vec<Job> = packs.iter().map(|p| Job::PackFile(Arc::clone(p))).collect();
        jobs.extend(self.fanout_dirs()?.into_iter().map(Job::LooseDir));
        // Entries that cannot be read at all are found while planning.
        let mut unreadable = 0;
        for p in &packs {
            report.packs += 1;
            report.packed_objects += p.len();
            unreadable += self.plan_pack(p, &mut jobs, &mut report.problems);
        }
        let (unindexed, packless) = self.pack_dir_anomalies(&packs)?;
        report.unindexed_packs = unindexed;
        report.problems.extend(packless);
        for (_, error) in self.broken_packs() {
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
        parallel::run(
            jobs.len(),
            self.options().threads,
            4,
            Buffers::default,
            |buffers, i| self.verify_job(&jobs[i], buffers),
            |done| {
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
        )?;
        report.bytes = p.bytes_total;
        Ok(report)
    }

    /// Splits a pack's entries into [`Job::Packed`] runs; entries that lie
    /// outside the pack or exceed the size limit are problems at once.
    /// Returns how many entries those were.
    fn plan_pack(&self, p: &Arc<Pack>, jobs: &mut Vec<Job>, problems: &mut Vec<Problem>) -> usize {
        let max = self
            .options()
            .max_blob_len
            .saturating_add(HEADER_LEN as u64);
        let mut entries: Vec<PackEntry> = p.entries().collect();
        entries.sort_unstable_by_key(|e| e.offset);
        let mut unreadable = 0;
        let mut run: Vec<PackEntry> = Vec::new();
        let mut run_end = 0;
        for e in entries {
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
                    jobs.push(Job::Packed(Arc::clone(p), std::mem::take(&mut run)));
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
            jobs.push(Job::Packed(Arc::clone(p), run));
        }
        unreadable
    }

    /// Does one job. `Err` is an operational failure (e.g. a read error)
    /// that stops verification.
    fn verify_job(&self, job: &Job, buffers: &mut Buffers) -> Result<Done> {
        let (checks, bytes) = job.planned();
        let planned = |problems| Done {
            checks,
            bytes,
            loose: None,
            problems,
        };
        match job {
            Job::PackFile(p) => {
                let checked = self.verify_pack_file(p, &mut buffers.stored);
                Ok(planned(as_problem(None, checked)?.into_iter().collect()))
            }
            Job::Packed(p, entries) => Ok(planned(self.verify_packed_run(p, entries, buffers)?)),
            Job::LooseDir(dir) => {
                let objects = self.loose_objects_in(dir)?;
                let max = self.options().max_blob_len;
                let mut problems = Vec::new();
                for o in &objects {
                    let checked = match self.read_loose_stored(&o.id, &mut buffers.stored) {
                        // Removed by a concurrent sweep after listing:
                        // nothing to verify.
                        Ok(false) => continue,
                        Ok(true) => object::check_stored(&buffers.stored)
                            .and_then(|h| {
                                object::check_content(
                                    &buffers.stored,
                                    &h,
                                    &o.id,
                                    max,
                                    &mut buffers.content,
                                )
                            })
                            .map(|_| ())
                            .map_err(|d| self.loose_decode_error(&o.id, d)),
                        Err(e) => Err(e),
                    };
                    problems.extend(as_problem(Some(o.id), checked)?);
                }
                Ok(Done {
                    checks: objects.len(),
                    bytes: objects.iter().map(|o| o.stored_len).sum(),
                    loose: Some(objects.len()),
                    problems,
                })
            }
        }
    }

    /// Verifies a run of a pack's entries (sorted by offset, inside the
    /// pack, none over the size limit) read with one read.
    fn verify_packed_run(
        &self,
        p: &Pack,
        entries: &[PackEntry],
        buffers: &mut Buffers,
    ) -> Result<Vec<Problem>> {
        let (Some(start), Some(end)) = (
            entries.first().map(|e| e.offset),
            entries.iter().map(|e| e.offset + e.stored_len).max(),
        ) else {
            return Ok(Vec::new());
        };
        // Planned: at most PACK_RUN_BYTES, or one entry within the size
        // limit, which the caller chose to fit in memory.
        object::set_len(&mut buffers.stored, (end - start) as usize);
        match read_exact_at(p.file(), &mut buffers.stored, start) {
            Ok(()) => {}
            // The pack is shorter than when it was opened: read each entry
            // alone, so the ones cut off are named.
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
        let max = self.options().max_blob_len;
        let mut problems = Vec::new();
        for e in entries {
            let at = (e.offset - start) as usize;
            let stored = &buffers.stored[at..at + e.stored_len as usize];
            let checked = pack::check_stored_entry(e, stored)
                .map_err(|err| self.pack_read_error(p, e, err))
                .and_then(|h| {
                    object::check_content(stored, &h, &e.id, max, &mut buffers.content)
                        .map(|_| ())
                        .map_err(|d| self.packed_decode_error(p, e, d))
                });
            problems.extend(as_problem(Some(e.id), checked)?);
        }
        Ok(problems)
    }

    fn verify_pack_file(&self, p: &Pack, buf: &mut Vec<u8>) -> Result<()> {
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
        let file = p.file();
        let read = |buf: &mut [u8], at: u64| {
            read_exact_at(file, buf, at).map_err(|e| self.io_error("read", &p.pack_path, e))
        };
        let mut header = [0u8; PACK_HEADER_LEN as usize];
        read(&mut header, 0)?;
        pack::check_pack_header(&header).map_err(|(o, e, f)| corrupt(Some(o), e, f))?;
        let body_len = p.pack_len - PACK_TRAILER_LEN;
        let mut hasher = blake3::Hasher::new();
        object::set_len(buf, 1 << 20);
        let mut at = 0u64;
        while at < body_len {
            let n = (body_len - at).min(buf.len() as u64) as usize;
            read(&mut buf[..n], at)?;
            hasher.update(&buf[..n]);
            at += n as u64;
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
        // Entries are sorted by id (strictly: no duplicates) and lie inside the pack.
        let mut prev: Option<BlobId> = None;
        for i in 0..p.len() {
            let e = p.entry(i);
            if prev.is_some_and(|prev| prev >= e.id) {
                return Err(Error::Corrupt {
                    path: self.display(&p.index_path),
                    offset: Some(p.entry_offset_in_index(i)),
                    expected: "ids in strictly increasing order".into(),
                    found: format!(
                        "{} after {}",
                        e.id,
                        prev.map(|p| p.to_string()).unwrap_or_default()
                    ),
                });
            }
            prev = Some(e.id);
            p.check_entry_bounds(&e).map_err(|msg| Error::Corrupt {
                path: self.display(&p.index_path),
                offset: Some(p.entry_offset_in_index(i)),
                expected: format!("entry for {} inside the pack", e.id),
                found: msg,
            })?;
        }
        Ok(())
    }

    /// Pack files without an index (not damage) and indexes whose pack file is
    /// missing (damage: the index promises objects that cannot be read).
    fn pack_dir_anomalies(&self, packs: &[Arc<Pack>]) -> Result<(Vec<PathBuf>, Vec<Problem>)> {
        let dir = self.base().join(PACKS_DIR);
        let entries = self
            .storage()
            .read_dir(&dir)
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
