//! Reading objects of an S3 store: an object is one or more *pieces* (an
//! object; a log's first object and its segments) laid end to end. The
//! first MiB of the first piece comes with the request that learns its
//! size; small pieces are fetched whole on first use (with the next ones,
//! concurrently), large ones by ranges.

use std::io;
use std::ops::Range;
use std::sync::{Arc, Mutex, RwLock};

use bytes::Bytes;
use futures::StreamExt;
use jpstore_blobstore::backend::ObjectReader;
use object_store::{GetOptions, GetRange, ObjectStoreExt};

use crate::{Req, S3Backend, SEGMENTS_SUFFIX};

/// Bytes fetched with the request that opens an object.
const FIRST_CHUNK: u64 = 1 << 20;
/// Pieces up to this size are fetched whole.
const WHOLE_PIECE: u64 = 4 << 20;
/// Bytes fetched by one ranged read of a large piece (at least); a large
/// immutable object is read, and cached, by chunks of this size at
/// multiples of it.
pub(crate) const RANGE_CHUNK: u64 = 1 << 20;
/// Small pieces fetched together, at most (count and bytes).
const PREFETCH_PIECES: usize = 64;
const PREFETCH_BYTES: u64 = 16 << 20;
/// Requests in flight at once when pieces are fetched together.
const CONCURRENCY: usize = 16;

/// One piece of an object: the bytes `[skip, skip + len)` of the object
/// `key` (relative), which are the bytes `[start, start + len)` of the
/// whole.
#[derive(Debug)]
pub(crate) struct Piece {
    pub(crate) key: String,
    pub(crate) start: u64,
    pub(crate) len: u64,
    /// Where the piece's bytes start in the object.
    pub(crate) skip: u64,
    /// The size of the object.
    pub(crate) obj_len: u64,
    /// The object's ETag, when known (listed, or returned by its PUT).
    pub(crate) etag: Option<String>,
    /// Bytes of the piece held in memory: (offset in the piece, bytes).
    window: Mutex<Option<(u64, Bytes)>>,
}

impl Piece {
    pub(crate) fn new(
        key: String,
        start: u64,
        len: u64,
        skip: u64,
        obj_len: u64,
        etag: Option<String>,
    ) -> Self {
        Piece {
            key,
            start,
            len,
            skip,
            obj_len,
            etag,
            window: Mutex::new(None),
        }
    }

    pub(crate) fn with_data(key: String, start: u64, data: Bytes, etag: Option<String>) -> Self {
        Piece {
            key,
            start,
            len: data.len() as u64,
            skip: 0,
            obj_len: data.len() as u64,
            etag,
            window: Mutex::new(Some((0, data))),
        }
    }

    /// The first [`RANGE_CHUNK`] bytes of the object (or all of a shorter
    /// one), if the piece is all of it and they are in memory.
    pub(crate) fn first_chunk(&self) -> Option<Bytes> {
        if self.skip != 0 || self.len != self.obj_len {
            return None;
        }
        let want = self.len.min(RANGE_CHUNK) as usize;
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        match window.as_ref() {
            Some((0, b)) if b.len() >= want => Some(b.slice(..want)),
            _ => None,
        }
    }

    /// The bytes of the whole object, if the piece is all of it and they
    /// are in memory.
    pub(crate) fn whole_bytes(&self) -> Option<Bytes> {
        if self.skip != 0 || self.len != self.obj_len {
            return None;
        }
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        match window.as_ref() {
            Some((0, b)) if b.len() as u64 == self.len => Some(b.clone()),
            _ => None,
        }
    }

    /// The bytes of the piece, fetched if they are not in memory.
    pub(crate) fn bytes(&self, backend: &S3Backend) -> io::Result<Bytes> {
        {
            let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((0, b)) = window.as_ref() {
                if b.len() as u64 == self.len {
                    return Ok(b.clone());
                }
            }
        }
        let reader = PieceReader::new(backend.clone(), Vec::new());
        reader.fetch_pieces(&[self])?;
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        match window.as_ref() {
            Some((0, b)) if b.len() as u64 == self.len => Ok(b.clone()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("{}: not read whole", backend.display_rel(&self.key)),
            )),
        }
    }

    pub(crate) fn end(&self) -> u64 {
        self.start + self.len
    }

    fn whole(&self) -> bool {
        self.window
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|(at, b)| *at == 0 && b.len() as u64 == self.len)
    }

    /// Copies what the window holds at `offset` (in the piece) into `buf`.
    fn read_window(&self, buf: &mut [u8], offset: u64) -> Option<usize> {
        let window = self.window.lock().unwrap_or_else(|e| e.into_inner());
        let (at, bytes) = window.as_ref()?;
        let end = *at + bytes.len() as u64;
        if offset < *at || offset >= end {
            return None;
        }
        let from = usize::try_from(offset - at).ok()?;
        let n = buf.len().min(bytes.len() - from);
        buf[..n].copy_from_slice(&bytes[from..from + n]);
        Some(n)
    }

    fn set_window(&self, at: u64, bytes: Bytes) {
        *self.window.lock().unwrap_or_else(|e| e.into_inner()) = Some((at, bytes));
    }
}

/// Opens the first piece of the object `rel`: one GET of its first MiB,
/// which tells its size.
pub(crate) fn open_first(backend: &S3Backend, rel: &str) -> io::Result<Piece> {
    let path = backend.object_path(rel)?;
    backend.bump(Req::Get, rel);
    let got = backend.block_on(async {
        let result = backend
            .store()
            .get_opts(
                &path,
                GetOptions {
                    range: Some(GetRange::Bounded(0..FIRST_CHUNK)),
                    ..GetOptions::default()
                },
            )
            .await?;
        let size = result.meta.size;
        let etag = result.meta.e_tag.clone();
        Ok::<_, object_store::Error>((size, etag, result.bytes().await?))
    });
    match got {
        Ok((size, etag, bytes)) => {
            let piece = Piece::new(rel.to_string(), 0, size, 0, size, etag);
            piece.set_window(0, bytes);
            Ok(piece)
        }
        Err(e @ object_store::Error::NotFound { .. }) => Err(backend.io_error(rel, e)),
        Err(e) => {
            // A range of an empty object is not satisfiable (416): the size
            // tells.
            match backend.head_raw(rel) {
                Ok(m) if m.size == 0 => {
                    Ok(Piece::with_data(rel.to_string(), 0, Bytes::new(), None))
                }
                _ => Err(backend.io_error(rel, e)),
            }
        }
    }
}

/// An object read by pieces.
#[derive(Debug)]
pub(crate) struct PieceReader {
    backend: S3Backend,
    pieces: RwLock<Vec<Arc<Piece>>>,
    /// The log read, if it is one: listed again when a merged object it
    /// was reading by is gone (superseded by a larger one meanwhile).
    log: Option<String>,
}

impl PieceReader {
    pub(crate) fn new(backend: S3Backend, pieces: Vec<Piece>) -> Self {
        PieceReader {
            backend,
            pieces: RwLock::new(pieces.into_iter().map(Arc::new).collect()),
            log: None,
        }
    }

    /// A reader of the log `rel` by `pieces`.
    pub(crate) fn of_log(backend: S3Backend, rel: &str, pieces: Vec<Piece>) -> Self {
        PieceReader {
            log: Some(rel.to_string()),
            ..PieceReader::new(backend, pieces)
        }
    }

    /// Replaces the pieces from `piece.start` on by `piece` (a merged
    /// object holding their bytes).
    pub(crate) fn replace_from(&self, piece: Piece) {
        let mut pieces = self.pieces.write().unwrap_or_else(|e| e.into_inner());
        if pieces.last().map(|p| p.end()) != Some(piece.end()) {
            return;
        }
        pieces.retain(|p| p.start < piece.start);
        if pieces.last().map(|p| p.end()) == Some(piece.start) {
            pieces.push(Arc::new(piece));
        }
    }

    /// Lists the log again after a merged object it read by went away: the
    /// bytes are the same, in the objects that replaced it.
    fn relist(&self) -> io::Result<bool> {
        let Some(rel) = &self.log else {
            return Ok(false);
        };
        let (_, fresh) = self.backend.cover_log(rel)?;
        let mut pieces = self.pieces.write().unwrap_or_else(|e| e.into_inner());
        let end = pieces.last().map_or(0, |p| p.end());
        if fresh.last().map_or(0, |p| p.end()) < end {
            return Ok(false);
        }
        // Only the bytes this reader knew: a reader's length does not move.
        let mut kept = Vec::new();
        for p in fresh {
            if p.start >= end {
                break;
            }
            let len = p.len.min(end - p.start);
            kept.push(Arc::new(Piece::new(
                p.key, p.start, len, p.skip, p.obj_len, p.etag,
            )));
        }
        *pieces = kept;
        Ok(true)
    }

    pub(crate) fn backend(&self) -> &S3Backend {
        &self.backend
    }

    pub(crate) fn pieces(&self) -> Vec<Arc<Piece>> {
        self.pieces
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The end of the last piece.
    pub(crate) fn end(&self) -> u64 {
        self.pieces().last().map_or(0, |p| p.end())
    }

    /// Adds a piece at the end (a segment just appended).
    pub(crate) fn push(&self, piece: Piece) {
        self.pieces
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(Arc::new(piece));
    }

    /// Drops the pieces after `len`, which must be the end of a piece
    /// other than the first; returns their keys.
    pub(crate) fn cut_after(&self, len: u64) -> io::Result<Vec<String>> {
        let mut pieces = self.pieces.write().unwrap_or_else(|e| e.into_inner());
        let keep = pieces.iter().take_while(|p| p.end() <= len).count();
        let boundary = keep > 0 && pieces[keep - 1].end() == len;
        if !boundary {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "offset {len} is not the end of a segment: an object store cuts whole \
                     segments only"
                ),
            ));
        }
        if pieces[keep..]
            .iter()
            .any(|p| p.key.contains(&format!("{}/", crate::MERGED_SUFFIX)))
        {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("offset {len} is inside merged segments: they are never cut"),
            ));
        }
        Ok(pieces.drain(keep..).map(|p| p.key.clone()).collect())
    }

    /// Fetches `piece` whole, with the small pieces after it not yet
    /// fetched (concurrently).
    fn fetch_whole(&self, index: usize, all: &[Arc<Piece>]) -> io::Result<()> {
        let mut batch: Vec<&Piece> = vec![&all[index]];
        let mut bytes = all[index].len;
        for p in &all[index + 1..] {
            if batch.len() >= PREFETCH_PIECES || bytes + p.len > PREFETCH_BYTES {
                break;
            }
            if p.len > WHOLE_PIECE {
                break;
            }
            if p.whole() {
                continue;
            }
            bytes += p.len;
            batch.push(p);
        }
        self.fetch_pieces(&batch)
    }

    /// Fetches the pieces whole: from the cache of immutable objects when
    /// it has them, else concurrently from the server.
    pub(crate) fn fetch_pieces(&self, batch: &[&Piece]) -> io::Result<()> {
        let backend = &self.backend;
        let mut requests = Vec::with_capacity(batch.len());
        for p in batch {
            if let Some(bytes) = backend.cached(&p.key, p.etag.as_deref(), p.obj_len) {
                if let Some(b) = slice(&bytes, p.skip, p.len) {
                    p.set_window(0, b);
                    continue;
                }
            }
            requests.push((*p, backend.object_path(&p.key)?));
        }
        if requests.is_empty() {
            return Ok(());
        }
        let store = backend.inner.store.clone();
        for (p, _) in &requests {
            backend.bump(Req::Get, &p.key);
        }
        let results: Vec<(&Piece, object_store::Result<Bytes>)> = backend.block_on(
            futures::stream::iter(requests.into_iter().map(|(p, path)| {
                let store = Arc::clone(&store);
                async move {
                    let got = async { store.get(&path).await?.bytes().await }.await;
                    (p, got)
                }
            }))
            .buffered(CONCURRENCY)
            .collect(),
        );
        for (p, got) in results {
            let bytes = got.map_err(|e| backend.io_error(&p.key, e))?;
            let piece = (bytes.len() as u64 == p.obj_len)
                .then(|| slice(&bytes, p.skip, p.len))
                .flatten();
            let Some(piece) = piece else {
                let message = format!(
                    "{}: {} bytes where the listing said {}: changed while read",
                    backend.display_rel(&p.key),
                    bytes.len(),
                    p.obj_len
                );
                // A segment emptied since the listing: a merger made it a
                // tombstone, its bytes now in a merged object.
                if bytes.is_empty() && p.key.contains(&format!("{SEGMENTS_SUFFIX}/")) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        Tombstoned(message),
                    ));
                }
                return Err(io::Error::new(io::ErrorKind::InvalidData, message));
            };
            backend.keep(&p.key, p.etag.as_deref(), &bytes);
            p.set_window(0, piece);
        }
        Ok(())
    }

    fn fetch_range(&self, piece: &Piece, range: Range<u64>) -> io::Result<()> {
        let backend = &self.backend;
        if S3Backend::immutable(&piece.key) || piece.etag.is_some() {
            return self.fetch_chunks(piece, range);
        }
        let path = backend.object_path(&piece.key)?;
        backend.bump(Req::Get, &piece.key);
        let at = piece.skip + range.start..piece.skip + range.end;
        let bytes = backend
            .block_on(backend.store().get_range(&path, at))
            .map_err(|e| backend.io_error(&piece.key, e))?;
        piece.set_window(range.start, bytes);
        Ok(())
    }
}

impl PieceReader {
    /// Reads `range` of `piece` (an immutable object, or one of known ETag:
    /// a log's) by whole chunks of its object, [`RANGE_CHUNK`] bytes at
    /// multiples of it: from the cache if it holds them all, else with one
    /// ranged GET, the chunks then cached.
    fn fetch_chunks(&self, piece: &Piece, range: Range<u64>) -> io::Result<()> {
        let backend = &self.backend;
        let etag = piece.etag.as_deref();
        // In the object: the bytes wanted, then the chunks holding them.
        let (start, end) = (
            piece.skip + range.start,
            piece.skip + range.end.max(range.start + 1),
        );
        let (first, last) = (start / RANGE_CHUNK, (end - 1) / RANGE_CHUNK);
        let from = first * RANGE_CHUNK;
        let to = ((last + 1) * RANGE_CHUNK).min(piece.obj_len);
        let cached: Option<Vec<Bytes>> = (first..=last)
            .map(|n| backend.cached_chunk(&piece.key, etag, n))
            .collect();
        let cached = cached
            .map(|chunks| match chunks.len() {
                1 => chunks.into_iter().next().unwrap_or_default(),
                _ => Bytes::from(chunks.concat()),
            })
            .filter(|b| b.len() as u64 == to.saturating_sub(from));
        let bytes = match cached {
            Some(bytes) => bytes,
            None => {
                let path = backend.object_path(&piece.key)?;
                backend.bump(Req::Get, &piece.key);
                let bytes = backend
                    .block_on(backend.store().get_range(&path, from..to))
                    .map_err(|e| backend.io_error(&piece.key, e))?;
                if bytes.len() as u64 != to.saturating_sub(from) {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{}: {} bytes at offset {from} where {} were expected: changed while read",
                            backend.display_rel(&piece.key),
                            bytes.len(),
                            to.saturating_sub(from)
                        ),
                    ));
                }
                for (i, n) in (first..=last).enumerate() {
                    let at = i as u64 * RANGE_CHUNK;
                    if let Some(chunk) = slice(&bytes, at, RANGE_CHUNK.min(to - from - at)) {
                        backend.keep_chunk(&piece.key, etag, n, &chunk);
                    }
                }
                bytes
            }
        };
        // The window: the part of those bytes inside the piece.
        let (lo, hi) = (from.max(piece.skip), to.min(piece.skip + piece.len));
        let window = slice(&bytes, lo - from, hi.saturating_sub(lo)).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: no bytes at offset {lo}",
                    backend.display_rel(&piece.key)
                ),
            )
        })?;
        piece.set_window(lo - piece.skip, window);
        Ok(())
    }

    fn read_at_once(&self, buf: &mut [u8], offset: u64, may_relist: bool) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let all = self.pieces();
        let Some(index) = all.iter().position(|p| offset < p.end()) else {
            return Ok(0);
        };
        let piece = &all[index];
        let at = offset - piece.start;
        if let Some(n) = piece.read_window(buf, at) {
            return Ok(n);
        }
        let fetched = if piece.len <= WHOLE_PIECE {
            self.fetch_whole(index, &all)
        } else {
            let want = (buf.len() as u64).max(RANGE_CHUNK);
            self.fetch_range(piece, at..(at + want).min(piece.len))
        };
        match fetched {
            Ok(()) => {}
            // A merged object gone since the listing (a merger superseded
            // it by a larger one), or a segment emptied since (a merger
            // made it a tombstone): the bytes are in what a new listing
            // shows (format-spec.md 5.3, "Reading").
            Err(e)
                if may_relist
                    && (superseded_merge(&e)
                        || e.get_ref().is_some_and(|e| e.is::<Tombstoned>()))
                    && self.relist()? =>
            {
                return self.read_at_once(buf, offset, false);
            }
            Err(e) => return Err(e),
        }
        piece.read_window(buf, at).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: no bytes at offset {at}",
                    self.backend.display_rel(&piece.key)
                ),
            )
        })
    }
}

impl ObjectReader for PieceReader {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.read_at_once(buf, offset, true)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.end())
    }
}

/// A log's segment read empty where the listing gave it bytes.
#[derive(Debug)]
struct Tombstoned(String);

impl std::fmt::Display for Tombstoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Tombstoned {}

/// Whether `e` is a merged object of a log not found.
fn superseded_merge(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound
        && e.to_string()
            .contains(&format!("{}/", crate::MERGED_SUFFIX))
}

/// `bytes[skip..skip + len]`, if it is there.
fn slice(bytes: &Bytes, skip: u64, len: u64) -> Option<Bytes> {
    let from = usize::try_from(skip).ok()?;
    let to = usize::try_from(skip.checked_add(len)?).ok()?;
    (to <= bytes.len()).then(|| bytes.slice(from..to))
}
