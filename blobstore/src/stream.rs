//! Reading one blob's content as a stream ([`BlobStore::open_stream`]): the
//! stored object is read a piece at a time and decompressed as it is read,
//! so a blob of any size is read in bounded memory (a web view handing out a
//! tool output of hundreds of MiB, for instance), where [`BlobStore::get`]
//! returns the whole content at once.
//!
//! The checks of [`BlobStore::get`] are made as the bytes go by: the raw
//! length against the configured maximum before anything is read, bounded
//! decompression, the CRC-32 of the stored object, the length and the
//! SHA-256 of the content. A stream cannot take back what it has handed
//! out, so a failed check is the error of the read that finds it, at the
//! latest of the read at the end of the content (which would otherwise
//! return 0). Bytes read are known to be the content only once a read has
//! returned 0: a caller that must not pass damaged bytes on reads the
//! stream to its end first ([`BlobStream::verify`]), then again.

use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};

use crate::backend::{read_exact_at, ObjectReader};
use crate::error::{Error, Result};
use crate::group::{GroupCodec, GroupHeader, GROUP_HEADER_LEN};
use crate::id::BlobId;
use crate::object::{Codec, Header, HEADER_LEN};
use crate::pack::{Found, GroupedEntry, Pack};
use crate::store::{BlobStore, Location};

/// Bytes read from the object file at a time.
const READ_CHUNK: usize = 128 << 10;

/// The content of one blob, read as a stream ([`BlobStore::open_stream`]).
/// Its `Read` hands out the raw content; a failed check is an error of
/// kind `InvalidData` wrapping an [`Error::Corrupt`] that names the file and
/// offset, at the latest from the read at the end.
pub struct BlobStream {
    id: BlobId,
    raw_len: u64,
    decoder: Decoder,
    /// Raw bytes handed out so far.
    produced: u64,
    hasher: Sha256,
    /// The CRC-32 the object's header records.
    expected_crc: u32,
    /// The object's file as shown in errors, and the object's offset in it.
    path: PathBuf,
    object_offset: u64,
    /// What the header at `object_offset` heads, in errors: an object, or
    /// the group of one object that holds it in a pack of version 2.
    unit: &'static str,
    state: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Reading,
    /// Every check passed at the end: reads return 0.
    Done,
    /// A read failed: every later read fails too.
    Failed,
}

/// How the payload becomes content.
enum Decoder {
    /// A raw payload is the content.
    Raw(Payload),
    /// One zstd frame, decompressed as it is read.
    Zstd(Box<zstd::stream::read::Decoder<'static, BufReader<Payload>>>),
    /// An object of a group of several in a pack of version 2: the group
    /// was read, checked and decompressed whole (at most the group target
    /// of the writer, 64 MiB), the object taken out and checked against its
    /// id, as [`BlobStore::get`] does.
    Memory(io::Cursor<Vec<u8>>),
}

/// The payload of the object: its bytes in the object file, read in order,
/// each byte added to the CRC-32 (which started with the header's first 16
/// bytes) as it is read.
struct Payload {
    file: Arc<dyn ObjectReader>,
    position: u64,
    end: u64,
    crc: crc32fast::Hasher,
}

impl Read for Payload {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.end - self.position;
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if want == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(&mut buf[..want], self.position)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the file ends at {} inside an object that ends at {}",
                    self.position, self.end
                ),
            ));
        }
        self.crc.update(&buf[..n]);
        self.position += n as u64;
        Ok(n)
    }
}

impl std::fmt::Debug for BlobStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlobStream")
            .field("id", &self.id)
            .field("raw_len", &self.raw_len)
            .field("produced", &self.produced)
            .field("path", &self.path)
            .field("object_offset", &self.object_offset)
            .finish_non_exhaustive()
    }
}

impl BlobStream {
    /// The blob's id.
    pub fn id(&self) -> &BlobId {
        &self.id
    }

    /// The length of the content, from the object's header (what a read to
    /// the end hands out when the object is whole).
    pub fn len(&self) -> u64 {
        self.raw_len
    }

    /// Whether the content is empty.
    pub fn is_empty(&self) -> bool {
        self.raw_len == 0
    }

    /// Whether the content was read whole when the stream was opened (an
    /// object of a group of several), rather than as it is read.
    #[cfg(test)]
    fn read_whole(&self) -> bool {
        matches!(self.decoder, Decoder::Memory(_))
    }

    /// Reads the stream to its end, keeping nothing, and returns the first
    /// failed check or read as the store's error. `Ok` means the object was
    /// whole when it was read: a second stream of the same id then reads
    /// the same bytes unless the disk fails in between (objects are never
    /// changed in place).
    pub fn verify(mut self) -> Result<()> {
        match io::copy(&mut self, &mut io::sink()) {
            Ok(_) => Ok(()),
            Err(e) => Err(self.store_error(e)),
        }
    }

    /// The store's error for a failed read of this stream: the
    /// [`Error::Corrupt`] a failed check wraps, else an I/O error naming
    /// the file.
    fn store_error(&self, e: io::Error) -> Error {
        let io_error = |source| Error::Io {
            op: "read",
            path: self.path.clone(),
            source,
        };
        if !e.get_ref().is_some_and(|inner| inner.is::<Error>()) {
            return io_error(e);
        }
        let kind = e.kind();
        match e.into_inner().map(|inner| inner.downcast::<Error>()) {
            Some(Ok(error)) => *error,
            // Not reached: the check above saw an `Error` inside.
            Some(Err(other)) => io_error(io::Error::new(kind, other)),
            None => io_error(io::Error::from(kind)),
        }
    }

    /// The error of a failed check at `offset` inside the object.
    fn damage(&self, offset: u64, expected: String, found: String) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            Error::Corrupt {
                path: self.path.clone(),
                offset: Some(self.object_offset + offset),
                expected,
                found,
            },
        )
    }

    /// The checks at the end of the content, once the decoder returned 0.
    fn finish(&mut self) -> io::Result<()> {
        let payload = match &mut self.decoder {
            Decoder::Memory(_) => None,
            Decoder::Raw(payload) => Some(payload),
            Decoder::Zstd(decoder) => {
                // What follows the frame in the payload is damage (the
                // frame ended early, or the payload holds more than one).
                let left = decoder.get_mut().fill_buf()?.len();
                if left > 0 {
                    let at =
                        decoder.get_ref().get_ref().position - left as u64 - self.object_offset;
                    return Err(self.damage(
                        at,
                        "the end of the object after its zstd frame".into(),
                        format!("{left} or more bytes more"),
                    ));
                }
                Some(decoder.get_mut().get_mut())
            }
        };
        let read = payload.map(|p| (p.end, p.position, p.crc.clone().finalize()));
        if let Some((payload_end, payload_position, _)) = read {
            if payload_position != payload_end {
                return Err(self.damage(
                    payload_position - self.object_offset,
                    format!("{} payload bytes", payload_end - self.object_offset),
                    format!("content ending at {payload_position}"),
                ));
            }
        }
        if self.produced != self.raw_len {
            return Err(self.damage(
                HEADER_LEN as u64,
                format!("{} bytes of content", self.raw_len),
                format!("{} bytes", self.produced),
            ));
        }
        if let Some((_, _, found_crc)) = read {
            if found_crc != self.expected_crc {
                return Err(self.damage(
                    16,
                    format!("{} CRC-32 {:08x}", self.unit, self.expected_crc),
                    format!("bytes with CRC-32 {found_crc:08x}"),
                ));
            }
        }
        let actual = BlobId::from_bytes(self.hasher.clone().finalize().into());
        if actual != self.id {
            return Err(self.damage(
                HEADER_LEN as u64,
                format!("content with SHA-256 {}", self.id),
                format!("content with SHA-256 {actual}"),
            ));
        }
        Ok(())
    }

    fn read_checked(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let read = match &mut self.decoder {
            Decoder::Raw(payload) => payload.read(buf),
            Decoder::Zstd(decoder) => decoder.read(buf),
            Decoder::Memory(content) => content.read(buf),
        };
        let n = match read {
            Ok(n) => n,
            // zstd's own errors (a damaged frame) are of kind `Other`; the
            // payload's read errors keep theirs.
            Err(e) if e.kind() == io::ErrorKind::Other => {
                return Err(self.damage(
                    HEADER_LEN as u64,
                    "a zstd frame".into(),
                    format!("bytes zstd cannot decode ({e})"),
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(self.damage(
                    HEADER_LEN as u64,
                    "the whole object".into(),
                    e.to_string(),
                ))
            }
            Err(e) => return Err(e),
        };
        if n == 0 {
            self.finish()?;
            return Ok(0);
        }
        self.produced += n as u64;
        if self.produced > self.raw_len {
            return Err(self.damage(
                8,
                format!("{} bytes of content", self.raw_len),
                "more".into(),
            ));
        }
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

impl Read for BlobStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.state {
            State::Done => return Ok(0),
            State::Failed => {
                return Err(io::Error::other(format!(
                    "blob {}: an earlier read of this stream failed",
                    self.id
                )))
            }
            State::Reading => {}
        }
        if buf.is_empty() {
            return Ok(0);
        }
        match self.read_checked(buf) {
            Ok(0) => {
                self.state = State::Done;
                Ok(0)
            }
            Ok(n) => Ok(n),
            Err(e) => {
                self.state = State::Failed;
                Err(e)
            }
        }
    }
}

impl BlobStore {
    /// Opens the content of `id` for reading as a stream, in bounded memory
    /// whatever its size (see the module's documentation for when its
    /// checks are made). [`Error::NotFound`] when the store does not hold
    /// it; a damaged header is an error here, damage further in an error of
    /// a read.
    ///
    /// A pack merged away between finding the object and opening its file
    /// sends the lookup to the packs listed then, as [`BlobStore::get`]
    /// does; once open, the object's file is read through its descriptor,
    /// so a later merge or sweep does not disturb the stream.
    pub fn open_stream(&self, id: &BlobId) -> Result<BlobStream> {
        const ATTEMPTS: usize = 4;
        for _ in 0..ATTEMPTS {
            let opened = match self.locate(id)? {
                None => break,
                Some(Location::Loose(path)) => self.open_loose_stream(id, &path)?,
                Some(Location::Packed { pack, .. }) => self.open_packed_stream(id, &pack)?,
            };
            if let Some(stream) = opened {
                return Ok(stream);
            }
            // Gone since it was located: look again in the packs there are.
            self.refresh_packs()?;
        }
        // Moved to gc's trash on a shared store (format-spec.md 5.5).
        if let Some(key) = self.loose_in_trash(id)? {
            if let Some(stream) = self.open_loose_stream(id, &key)? {
                return Ok(stream);
            }
        }
        Err(self.not_found(id))
    }

    /// A stream of the loose object at `path`; `None` if it is gone.
    fn open_loose_stream(&self, id: &BlobId, path: &Path) -> Result<Option<BlobStream>> {
        let io = |op, source| Error::Io {
            op,
            path: self.backend().display(path),
            source,
        };
        let file: Arc<dyn ObjectReader> = match self.backend().open(path) {
            Ok(f) => Arc::from(f),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io("open", e)),
        };
        let len = file.len().map_err(|e| io("inspect", e))?;
        match stream_object(self, id, file, path, 0, len) {
            // A version this build does not know: a newer format, or
            // damage, which the whole object tells.
            Err(
                e @ Error::Corrupt {
                    offset: Some(4), ..
                },
            ) => {
                let mut stored = Vec::new();
                if !self.read_stored_at(path, id, &mut stored)? {
                    return Ok(None);
                }
                match crate::object::check_stored(&stored) {
                    Err(d) => Err(self.loose_error(path, &stored, d)),
                    Ok(_) => Err(e),
                }
            }
            other => other.map(Some),
        }
    }

    /// A stream of the object in pack `name`; `None` if the pack is gone.
    fn open_packed_stream(&self, id: &BlobId, name: &str) -> Result<Option<BlobStream>> {
        let Ok(pack) = self.pack_by_name(name) else {
            return Ok(None);
        };
        let entry = match pack.find(id) {
            None => return Ok(None),
            Some(Found::Object(entry)) => entry,
            Some(Found::Grouped(entry)) => return self.open_grouped_stream(&pack, &entry),
        };
        pack.check_entry_bounds(&entry)
            .map_err(|found| Error::Corrupt {
                path: self.backend().display(&pack.index_path),
                offset: None,
                expected: format!("entry for {id} inside the pack"),
                found,
            })?;
        let Some(file) = self.open_pack_file(&pack)? else {
            return Ok(None);
        };
        stream_object(
            self,
            id,
            file,
            &pack.pack_path,
            entry.offset,
            entry.stored_len,
        )
        .map(Some)
    }

    /// The pack's file; `None` if it is gone.
    fn open_pack_file(&self, pack: &Pack) -> Result<Option<Arc<dyn ObjectReader>>> {
        match self.pack_file(pack) {
            Ok(f) => Ok(Some(f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(source) => Err(Error::Io {
                op: "open",
                path: self.backend().display(&pack.pack_path),
                source,
            }),
        }
    }

    /// A stream of an object of a pack of version 2. The group of one
    /// object (as a large blob is stored) is streamed as an object is: its
    /// header read and checked, its payload decompressed as it is read, its
    /// CRC-32 and the content's SHA-256 checked at the end. An object of a
    /// group of several (at most the writer's group target) is read as
    /// [`BlobStore::get`] reads it, through the group cache.
    fn open_grouped_stream(&self, pack: &Pack, e: &GroupedEntry) -> Result<Option<BlobStream>> {
        let max = self.max_group_raw();
        let g = pack
            .check_grouped_bounds(e, max)
            .map_err(|msg| self.grouped_bounds_error(pack, e, msg))?;
        if e.offset != 0 || e.raw_len != g.raw_len {
            let content = match self.read_grouped(pack, e) {
                Ok(content) => content.into_vec(),
                Err(Error::Io { ref source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                    return Ok(None)
                }
                Err(err) => return Err(err),
            };
            return Ok(Some(BlobStream {
                id: e.id,
                raw_len: content.len() as u64,
                decoder: Decoder::Memory(io::Cursor::new(content)),
                produced: 0,
                hasher: Sha256::new(),
                expected_crc: 0,
                path: self.backend().display(&pack.pack_path),
                object_offset: g.offset,
                unit: "group",
                state: State::Reading,
            }));
        }
        let Some(file) = self.open_pack_file(pack)? else {
            return Ok(None);
        };
        let shown = self.backend().display(&pack.pack_path);
        let mut head = [0u8; GROUP_HEADER_LEN];
        read_header(&*file, &mut head, g.offset, &shown)?;
        let header = GroupHeader::decode(&head).map_err(|d| Error::Corrupt {
            path: shown.clone(),
            offset: Some(g.offset + d.offset),
            expected: d.expected,
            found: d.found,
        })?;
        if header.raw_len != g.raw_len || header.payload_len != g.payload_len {
            return Err(Error::Corrupt {
                path: shown,
                offset: Some(g.offset + 8),
                expected: format!(
                    "raw length {} and payload length {} as recorded in the index",
                    g.raw_len, g.payload_len
                ),
                found: format!("{} and {}", header.raw_len, header.payload_len),
            });
        }
        let codec = match header.codec {
            GroupCodec::Raw => Codec::Raw,
            GroupCodec::Zstd => Codec::Zstd,
        };
        stream_payload(
            self,
            Opened {
                id: e.id,
                file,
                shown,
                offset: g.offset,
                stored_len: g.stored_len(),
                head,
                codec,
                raw_len: u64::from(header.raw_len),
                unit: "group",
            },
        )
        .map(Some)
    }
}

/// Reads the 20-byte header at `offset` of `file` (`shown` in errors).
fn read_header(
    file: &dyn ObjectReader,
    head: &mut [u8; HEADER_LEN],
    offset: u64,
    shown: &Path,
) -> Result<()> {
    read_exact_at(file, head, offset).map_err(|e| {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            Error::Corrupt {
                path: shown.to_path_buf(),
                offset: Some(offset),
                expected: format!("a {HEADER_LEN}-byte header"),
                found: "the end of the file".into(),
            }
        } else {
            Error::Io {
                op: "read",
                path: shown.to_path_buf(),
                source: e,
            }
        }
    })
}

/// An object (or a group of one) whose header was read and decoded.
struct Opened {
    id: BlobId,
    file: Arc<dyn ObjectReader>,
    shown: PathBuf,
    offset: u64,
    stored_len: u64,
    head: [u8; HEADER_LEN],
    codec: Codec,
    raw_len: u64,
    unit: &'static str,
}

/// A stream of the object of `stored_len` bytes at `offset` of `file`
/// (`path` in the store): its header read and checked, its payload not yet.
fn stream_object(
    store: &BlobStore,
    id: &BlobId,
    file: Arc<dyn ObjectReader>,
    path: &Path,
    offset: u64,
    stored_len: u64,
) -> Result<BlobStream> {
    let shown = store.backend().display(path);
    if stored_len < HEADER_LEN as u64 {
        return Err(Error::Corrupt {
            path: shown,
            offset: Some(offset),
            expected: format!("a {HEADER_LEN}-byte object header"),
            found: format!("an object of {stored_len} bytes"),
        });
    }
    let mut head = [0u8; HEADER_LEN];
    read_header(&*file, &mut head, offset, &shown)?;
    let header = Header::decode(&head).map_err(|d| Error::Corrupt {
        path: shown.clone(),
        offset: Some(offset + d.offset),
        expected: d.expected,
        found: d.found,
    })?;
    stream_payload(
        store,
        Opened {
            id: *id,
            file,
            shown,
            offset,
            stored_len,
            head,
            codec: header.codec,
            raw_len: header.raw_len,
            unit: "object",
        },
    )
}

/// The stream of an object (or group of one) whose header was read: the
/// raw length checked against the configured maximum, the payload not yet
/// read.
fn stream_payload(store: &BlobStore, o: Opened) -> Result<BlobStream> {
    let Opened {
        id,
        file,
        shown,
        offset,
        stored_len,
        head,
        codec,
        raw_len,
        unit,
    } = o;
    let max = store.options().max_blob_len;
    if raw_len > max {
        return Err(Error::TooLarge {
            id: Some(id),
            path: shown,
            size: raw_len,
            max,
        });
    }
    let payload_len = stored_len - HEADER_LEN as u64;
    if codec == Codec::Raw && payload_len != raw_len {
        return Err(Error::Corrupt {
            path: shown,
            offset: Some(offset + HEADER_LEN as u64),
            expected: format!("{raw_len} payload bytes"),
            found: format!("{payload_len} bytes"),
        });
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&head[..16]);
    let mut want = [0u8; 4];
    want.copy_from_slice(&head[16..20]);
    let payload = Payload {
        file,
        position: offset + HEADER_LEN as u64,
        end: offset + stored_len,
        crc,
    };
    let decoder = match codec {
        Codec::Raw => Decoder::Raw(payload),
        Codec::Zstd => {
            let buffered = BufReader::with_capacity(READ_CHUNK, payload);
            let decoder = zstd::stream::read::Decoder::with_buffer(buffered)
                .map_err(|e| Error::Io {
                    op: "start decompressing",
                    path: shown.clone(),
                    source: e,
                })?
                .single_frame();
            Decoder::Zstd(Box::new(decoder))
        }
    };
    Ok(BlobStream {
        id,
        raw_len,
        decoder,
        produced: 0,
        hasher: Sha256::new(),
        expected_crc: u32::from_le_bytes(want),
        path: shown,
        object_offset: offset,
        unit,
        state: State::Reading,
    })
}

/// The path of loose object `id` below the blob store's base (the layout of
/// format-spec.md 2.1), for the tests that damage one.
#[cfg(test)]
fn loose_path(base: &Path, id: &BlobId) -> PathBuf {
    let hex = id.to_hex();
    base.join(crate::store::OBJECTS_DIR)
        .join(&hex[..2])
        .join(&hex[2..])
}

#[cfg(test)]
mod tests;
