//! Logs on S3 (format-spec.md 5.3): a first object, immutable segments
//! `<log>.seg/<offset>` (one per append), and merged objects
//! `<log>.mrg/<start>.<end>` that hold the bytes `[start, end)` of the log
//! so that a reader fetches a few objects instead of one per append.
//!
//! A log is listed with one LIST of the prefix `<log>` (the first object,
//! the merged objects, which sort before the segments, then the segments);
//! when that page is truncated, a second LIST of `<log>.seg/` starts after
//! the end of the merged objects, so that the segments they replaced (empty
//! tombstones, never deleted) are not listed again. The log's bytes are
//! then covered greedily: from the end of the first object, the listed
//! object that reaches furthest at each offset.

use std::io;

use bytes::Bytes;
use object_store::{PutMode, UpdateVersion};

use crate::reader::Piece;
use crate::{S3Backend, MERGED_SUFFIX, SEGMENTS_SUFFIX};

/// A merge is made by the appender when this many segments follow the last
/// merged object.
pub const MERGE_SEGMENTS: usize = 16;

/// One object of a log, as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    /// Its key (relative to the store).
    pub(crate) rel: String,
    /// The offset in the log of its first byte.
    pub(crate) start: u64,
    /// Its size.
    pub(crate) size: u64,
    /// Its ETag, as listed.
    pub(crate) etag: Option<String>,
    /// A merged object (rather than the first object or a segment).
    pub(crate) merged: bool,
}

impl Part {
    pub(crate) fn end(&self) -> u64 {
        self.start + self.size
    }
}

/// What a listing of a log found.
#[derive(Clone, Debug, Default)]
pub(crate) struct Listing {
    /// The first object, if there is one.
    pub(crate) first: Option<Part>,
    /// The merged objects.
    pub(crate) merged: Vec<Part>,
    /// The segments listed (those before the end of the merged objects may
    /// be left out).
    pub(crate) segments: Vec<Part>,
    /// Objects below `<log>/`: a prefix at the log's name.
    pub(crate) below: bool,
    /// The first object as listed.
    pub(crate) first_meta: Option<object_store::ObjectMeta>,
}

impl Listing {
    /// The pieces that make the log, in order: the first object, then at
    /// each offset the listed object that reaches furthest. A gap (no
    /// object at an offset before the last end) is damage, named.
    pub(crate) fn cover(&self, backend: &S3Backend) -> io::Result<Vec<Piece>> {
        let Some(first) = &self.first else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                "the log has no first object",
            ));
        };
        let mut pieces = vec![Piece::new(
            first.rel.clone(),
            0,
            first.size,
            0,
            first.size,
            first.etag.clone(),
        )];
        let mut parts: Vec<&Part> = self
            .merged
            .iter()
            .chain(&self.segments)
            .filter(|p| p.size > 0)
            .collect();
        parts.sort_by_key(|p| (p.start, std::cmp::Reverse(p.end())));
        let mut at = first.size;
        let mut i = 0;
        loop {
            let mut best: Option<&Part> = None;
            while i < parts.len() && parts[i].start <= at {
                if parts[i].end() > at && best.is_none_or(|b| parts[i].end() > b.end()) {
                    best = Some(parts[i]);
                }
                i += 1;
            }
            match best {
                Some(p) => {
                    pieces.push(Piece::new(
                        p.rel.clone(),
                        at,
                        p.end() - at,
                        at - p.start,
                        p.size,
                        p.etag.clone(),
                    ));
                    at = p.end();
                }
                None => {
                    if let Some(next) = parts.get(i) {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{}: a segment at offset {} where the log ends at {at} \
                                 (segments must follow each other)",
                                backend.display_rel(&next.rel),
                                next.start
                            ),
                        ));
                    }
                    return Ok(pieces);
                }
            }
        }
    }

    /// Where the merged objects end (0 without any).
    fn merged_end(&self) -> u64 {
        self.merged.iter().map(Part::end).max().unwrap_or(0)
    }
}

/// The offsets of a merged object's name `<start>.<end>`.
pub(crate) fn merged_range(name: &str) -> Option<(u64, u64)> {
    let (s, e) = name.split_once('.')?;
    let s = crate::segment_offset(s)?;
    let e = crate::segment_offset(e)?;
    (e > s).then_some((s, e))
}

/// The name of the merged object of `[start, end)`.
pub(crate) fn merged_name(start: u64, end: u64) -> String {
    format!(
        "{}.{}",
        crate::segment_name(start),
        crate::segment_name(end)
    )
}

impl S3Backend {
    /// Lists the log `rel`: see the module documentation. With `all`, every
    /// segment is listed (tombstones too), for removal and moves.
    pub(crate) fn list_log(&self, rel: &str, all: bool) -> io::Result<Listing> {
        let full = self.full(rel);
        let seg_dir = format!("{rel}{SEGMENTS_SUFFIX}");
        let mrg_dir = format!("{rel}{MERGED_SUFFIX}");
        let mut listing = Listing::default();
        let mut token = None;
        let mut start_after = None;
        let mut prefix = full.clone();
        loop {
            let page = self.list_page(&prefix, false, start_after.clone(), token.take())?;
            for m in page.objects {
                let Some(r) = self.rel_of(&m.location) else {
                    continue;
                };
                let etag = m.e_tag.clone();
                if r == rel {
                    listing.first_meta = Some(m.clone());
                    listing.first = Some(Part {
                        rel: r,
                        start: 0,
                        size: m.size,
                        etag,
                        merged: false,
                    });
                } else if let Some(name) = r.strip_prefix(&format!("{seg_dir}/")) {
                    let start = crate::segment_offset(name).ok_or_else(|| {
                        io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{}: {name:?} is not the name of a log segment (20 decimal digits)",
                                self.display_rel(&seg_dir)
                            ),
                        )
                    })?;
                    listing.segments.push(Part {
                        rel: r,
                        start,
                        size: m.size,
                        etag,
                        merged: false,
                    });
                } else if let Some(name) = r.strip_prefix(&format!("{mrg_dir}/")) {
                    let range = merged_range(name).filter(|(s, e)| e - s == m.size);
                    let Some((start, _)) = range else {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            format!(
                                "{}: not a merged object of {} bytes named <start>.<end> \
                                 (20 decimal digits each)",
                                self.display_rel(&r),
                                m.size
                            ),
                        ));
                    };
                    listing.merged.push(Part {
                        rel: r,
                        start,
                        size: m.size,
                        etag,
                        merged: true,
                    });
                } else if r.starts_with(&format!("{rel}/")) {
                    listing.below = true;
                }
            }
            token = page.more;
            if token.is_none() {
                return Ok(listing);
            }
            // A long log: the segments that the merged objects replaced are
            // skipped by starting the listing of the segments after them.
            let end = listing.merged_end();
            if !all && start_after.is_none() && end > 0 && prefix == full {
                prefix = self.full(&format!("{seg_dir}/"));
                start_after =
                    Some(self.full(&format!("{seg_dir}/{}", crate::segment_name(end - 1))));
                listing.segments.retain(|s| s.start >= end);
                token = None;
            }
        }
    }

    /// The listing of the log `rel` and the pieces that cover it, listed
    /// again (up to 3 times) when a merger raced the listing and left a
    /// gap in what it saw (format-spec.md 5.3).
    pub(crate) fn cover_log(&self, rel: &str) -> io::Result<(Listing, Vec<Piece>)> {
        let mut tries = 0;
        loop {
            let listing = self.list_log(rel, false)?;
            if listing.first.is_none() {
                return Ok((listing, Vec::new()));
            }
            match listing.cover(self) {
                Ok(pieces) => {
                    self.note_log(rel, &pieces);
                    return Ok((listing, pieces));
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidData && tries < 3 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// Merges the segments that follow the last merged object of the log
    /// `rel`, given its pieces as its appender knows them (format-spec.md
    /// 5.3): the merged object is created if absent, then each merged
    /// segment is replaced by an empty tombstone with `If-Match` on its
    /// ETag (never deleted: a stale writer could otherwise create it again
    /// and its append would be hidden). Merged objects that the new one
    /// supersedes are deleted (only mergers create them, always with the
    /// same bytes). Returns the pieces to read the log by from now on.
    ///
    /// Best effort: the append that triggers it is acknowledged already;
    /// what a failure leaves is still a valid log.
    pub(crate) fn merge_tail(
        &self,
        rel: &str,
        pieces: &[std::sync::Arc<Piece>],
    ) -> io::Result<Option<Piece>> {
        // The pieces after the first object, from the last merged one on.
        let tail_from = pieces
            .iter()
            .rposition(|p| p.key.contains(&format!("{MERGED_SUFFIX}/")))
            .map_or(1, |i| i + 1);
        let small = &pieces[tail_from.min(pieces.len())..];
        if small.len() < MERGE_SEGMENTS {
            return Ok(None);
        }
        // Levels: the merged pieces just before the segments are merged
        // with them while the one before is at most twice as large as what
        // follows it, so that merged objects grow geometrically (a log of
        // N appends is O(log N) objects, each byte rewritten O(log N)
        // times).
        let mut from = tail_from;
        let mut bytes: u64 = small.iter().map(|p| p.len).sum();
        while from > 1 {
            let prev = &pieces[from - 1];
            if !prev.key.contains(&format!("{MERGED_SUFFIX}/")) || prev.len > 2 * bytes {
                break;
            }
            from -= 1;
            bytes += prev.len;
        }
        let chosen = &pieces[from..];
        let start = chosen[0].start;
        let end = chosen.last().map_or(start, |p| p.end());
        let mut data = Vec::with_capacity(usize::try_from(end - start).unwrap_or(0));
        for p in chosen {
            data.extend_from_slice(&p.bytes(self)?);
        }
        let merged = format!("{rel}{MERGED_SUFFIX}/{}", merged_name(start, end));
        let data = Bytes::from(data);
        let etag = match self.put(&merged, data.clone(), PutMode::Create) {
            Ok(tag) => {
                self.keep(&merged, tag.as_deref(), &data);
                tag
            }
            // Another merger's object, of the same bytes (its ETag unknown
            // here).
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => None,
            Err(e) => return Err(self.io_error(&merged, e)),
        };
        // The rest is tidying: the merged object reads the same bytes. The
        // first request that fails (after the client's retries) ends it, so
        // that a storm of 5xx costs one retry budget, not one per object,
        // to a command whose append is acknowledged already. A 412 on a
        // tombstone is a segment already emptied (by this merge's own
        // retried PUT, or by another merger): the merge goes on.
        for p in chosen {
            let done = if p.key.contains(&format!("{MERGED_SUFFIX}/")) {
                // Superseded: only mergers create merged objects, and with
                // the same bytes, so deleting one is safe.
                self.delete_raw(&p.key)
            } else if let Some(tag) = &p.etag {
                match self.put(
                    &p.key,
                    Bytes::new(),
                    PutMode::Update(UpdateVersion {
                        e_tag: Some(tag.clone()),
                        version: None,
                    }),
                ) {
                    Err(
                        object_store::Error::Precondition { .. }
                        | object_store::Error::AlreadyExists { .. },
                    ) => Ok(()),
                    other => other.map(|_| ()),
                }
            } else {
                Ok(())
            };
            if done.is_err() {
                break;
            }
        }
        Ok(Some(Piece::with_data(merged, start, data, etag)))
    }

    /// Every object of the log `rel` below its first object: segments,
    /// tombstones and merged objects (for removal and moves).
    pub(crate) fn log_objects(&self, rel: &str) -> io::Result<Listing> {
        self.list_log(rel, true)
    }
}
