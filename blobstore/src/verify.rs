//! Verifying every object of a store: decompress, hash, and check pack files
//! against their indexes. Runs on [`Options::threads`](crate::Options) threads.

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::id::BlobId;
use crate::pack::{self, Pack, PACK_HEADER_LEN, PACK_TRAILER_LEN};
use crate::parallel;
use crate::storage::read_exact_at;
use crate::store::{BlobStore, PACKS_DIR};

/// Progress of [`BlobStore::verify_all`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyProgress {
    /// Checks done (objects, plus one per pack file).
    pub done: usize,
    /// Checks in all.
    pub total: usize,
    /// Stored bytes checked so far.
    pub bytes_done: u64,
    /// Stored bytes in all.
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

enum Job {
    Loose { id: BlobId, len: u64 },
    PackFile(Arc<Pack>),
    Packed(Arc<Pack>, usize),
}

impl Job {
    fn bytes(&self) -> u64 {
        match self {
            Job::Loose { len, .. } => *len,
            Job::PackFile(p) => p.pack_len,
            Job::Packed(p, i) => p.entry(*i).stored_len,
        }
    }
}

impl BlobStore {
    /// Reads, decompresses and hashes every object, and checks every pack file
    /// against its index (header, trailer checksum, object bounds). Damage does
    /// not stop the run: every problem is collected in the report. `progress`
    /// is called on the calling thread after each check.
    pub fn verify_all(&self, progress: &mut dyn FnMut(VerifyProgress)) -> Result<VerifyReport> {
        self.refresh_packs()?;
        let mut report = VerifyReport::default();
        let mut jobs = Vec::new();
        for o in self.loose_objects()? {
            jobs.push(Job::Loose {
                id: o.id,
                len: o.stored_len,
            });
            report.loose_objects += 1;
        }
        let packs = self.loaded_packs();
        for p in &packs {
            jobs.push(Job::PackFile(Arc::clone(p)));
            for i in 0..p.len() {
                jobs.push(Job::Packed(Arc::clone(p), i));
            }
            report.packs += 1;
            report.packed_objects += p.len();
        }
        let (unindexed, packless) = self.pack_dir_anomalies(&packs)?;
        report.unindexed_packs = unindexed;
        report.problems.extend(packless);
        for (_, error) in self.broken_packs() {
            report.problems.push(Problem { blob: None, error });
        }
        let total = jobs.len();
        let bytes_total: u64 = jobs.iter().map(Job::bytes).sum();
        let mut p = VerifyProgress {
            total,
            bytes_total,
            ..VerifyProgress::default()
        };
        parallel::run(
            total,
            self.options().threads,
            4,
            |i| {
                self.verify_job(&jobs[i])
                    .map(|problem| (jobs[i].bytes(), problem))
            },
            |(bytes, problem)| {
                report.problems.extend(problem);
                p.done += 1;
                p.bytes_done += bytes;
                progress(p);
                Ok(())
            },
        )?;
        report.bytes = bytes_total;
        Ok(report)
    }

    /// Checks one job. `Ok(Some)` is damage; `Err` is an operational failure
    /// (e.g. a read error) that stops verification.
    fn verify_job(&self, job: &Job) -> Result<Option<Problem>> {
        let as_problem = |blob: Option<BlobId>, r: Result<()>| match r {
            Ok(()) => Ok(None),
            Err(e @ (Error::Corrupt { .. } | Error::TooLarge { .. })) => {
                Ok(Some(Problem { blob, error: e }))
            }
            Err(e) => Err(e),
        };
        match job {
            Job::Loose { id, .. } => as_problem(Some(*id), self.get_loose_only(id)),
            Job::PackFile(p) => as_problem(None, self.verify_pack_file(p)),
            Job::Packed(p, i) => {
                let e = p.entry(*i);
                as_problem(Some(e.id), self.read_packed(p, &e).map(|_| ()))
            }
        }
    }

    fn get_loose_only(&self, id: &BlobId) -> Result<()> {
        match self.read_loose(id)? {
            Some(_) => Ok(()),
            // Removed by a concurrent sweep after listing: nothing to verify.
            None => Ok(()),
        }
    }

    fn verify_pack_file(&self, p: &Pack) -> Result<()> {
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
        let mut buf = vec![0u8; 1 << 20];
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
