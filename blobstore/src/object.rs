//! The object codec: the 20-byte header and the (optionally zstd-compressed)
//! payload that make up every stored object, loose or in a pack.
//!
//! ```text
//! offset  size  field
//!      0     4  magic "jpsb"
//!      4     1  format version (1)
//!      5     1  codec: 0 = raw, 1 = zstd (one frame)
//!      6     2  reserved, zero
//!      8     8  raw length, u64 little endian
//!     16     4  CRC-32 (IEEE) of bytes 0..16 and of the payload, u32 LE
//!     20     -  payload
//! ```
//!
//! The CRC makes every stored bit count: a flip anywhere in the object is
//! found without decompressing ([`check_stored`]), including flips that zstd
//! would ignore. Decoding is bounded: the raw length must not exceed the
//! configured maximum before anything is allocated, and decompression never
//! produces more than the raw length. The decoded bytes are then hashed and
//! compared with the id, so what a read returns is always the content.

use std::cell::RefCell;

use crate::id::BlobId;

/// Magic bytes that start every object.
pub const OBJECT_MAGIC: [u8; 4] = *b"jpsb";
/// Current object format version.
pub const OBJECT_VERSION: u8 = 1;
/// Length of the object header.
pub const HEADER_LEN: usize = 20;

/// How an object's payload is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    /// The payload is the raw content.
    Raw = 0,
    /// The payload is one zstd frame of the raw content.
    Zstd = 1,
}

/// A parsed object header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// Payload encoding.
    pub codec: Codec,
    /// Length of the raw content.
    pub raw_len: u64,
}

/// Why bytes are not a valid object. The caller adds the file and offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Offset of the problem relative to the start of the object.
    pub offset: u64,
    /// What the format requires.
    pub expected: String,
    /// What was found.
    pub found: String,
}

impl DecodeError {
    fn new(offset: u64, expected: impl Into<String>, found: impl Into<String>) -> Self {
        Self {
            offset,
            expected: expected.into(),
            found: found.into(),
        }
    }
}

impl Header {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[..4].copy_from_slice(&OBJECT_MAGIC);
        out[4] = OBJECT_VERSION;
        out[5] = self.codec as u8;
        out[8..16].copy_from_slice(&self.raw_len.to_le_bytes());
        out
    }

    /// Encodes the header with the CRC of `payload`.
    pub fn encode_with_payload(&self, payload: &[u8]) -> [u8; HEADER_LEN] {
        let mut out = self.encode();
        let mut crc = crc32fast::Hasher::new();
        crc.update(&out[..16]);
        crc.update(payload);
        out[16..20].copy_from_slice(&crc.finalize().to_le_bytes());
        out
    }

    /// Decodes and checks a header.
    pub fn decode(bytes: &[u8]) -> Result<Header, DecodeError> {
        if bytes.len() < HEADER_LEN {
            return Err(DecodeError::new(
                bytes.len() as u64,
                format!("a {HEADER_LEN}-byte object header"),
                format!("{} bytes", bytes.len()),
            ));
        }
        if bytes[..4] != OBJECT_MAGIC {
            return Err(DecodeError::new(
                0,
                "object magic \"jpsb\"",
                format!("{:02x?}", &bytes[..4]),
            ));
        }
        if bytes[4] != OBJECT_VERSION {
            return Err(DecodeError::new(
                4,
                format!("object format version {OBJECT_VERSION}"),
                format!("version {}", bytes[4]),
            ));
        }
        let codec = match bytes[5] {
            0 => Codec::Raw,
            1 => Codec::Zstd,
            other => {
                return Err(DecodeError::new(
                    5,
                    "codec 0 (raw) or 1 (zstd)",
                    format!("codec {other}"),
                ))
            }
        };
        if bytes[6..8] != [0, 0] {
            return Err(DecodeError::new(
                6,
                "reserved bytes to be zero",
                format!("{:02x?}", &bytes[6..8]),
            ));
        }
        let mut len = [0u8; 8];
        len.copy_from_slice(&bytes[8..16]);
        Ok(Header {
            codec,
            raw_len: u64::from_le_bytes(len),
        })
    }
}

/// Encodes `data` as an object: zstd at `level`, or raw if compression does not
/// make it smaller. Returns header and payload in one buffer.
pub fn encode(data: &[u8], level: i32) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    encode_into(data, level, &mut out, &mut Vec::new())?;
    Ok(out)
}

/// Appends the encoding of `data` (as [`encode`] makes it) to `out`.
/// `scratch` receives the compressed bytes first; reused from call to call
/// (as `out` can be), encoding many objects allocates nothing per object.
pub fn encode_into(
    data: &[u8],
    level: i32,
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> std::io::Result<()> {
    scratch.clear();
    // Room for the worst case: compression then never fails for lack of it.
    scratch.reserve(zstd::zstd_safe::compress_bound(data.len()));
    with_compressor(level, |c| c.compress_to_buffer(data, scratch))?;
    let (codec, payload) = if scratch.len() < data.len() {
        (Codec::Zstd, scratch.as_slice())
    } else {
        (Codec::Raw, data)
    };
    let header = Header {
        codec,
        raw_len: data.len() as u64,
    };
    out.reserve(HEADER_LEN + payload.len());
    out.extend_from_slice(&header.encode_with_payload(payload));
    out.extend_from_slice(payload);
    Ok(())
}

/// The version of `stored`, the whole stored bytes of a loose object, if it
/// is an object of a newer format than this build reads: its magic, a
/// version above [`OBJECT_VERSION`], and at bytes 16..20 the CRC-32 of
/// bytes 0..16 and of the rest of the file, which every version keeps
/// (format-spec.md 2.1). A version byte damaged into a larger one fails
/// that CRC: damage, not a newer format.
pub fn newer_version(stored: &[u8]) -> Option<u8> {
    if stored.len() < HEADER_LEN || stored[..4] != OBJECT_MAGIC || stored[4] <= OBJECT_VERSION {
        return None;
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&stored[..16]);
    crc.update(&stored[HEADER_LEN..]);
    let mut want = [0u8; 4];
    want.copy_from_slice(&stored[16..20]);
    (crc.finalize() == u32::from_le_bytes(want)).then_some(stored[4])
}

/// Whether an object header names a version above [`OBJECT_VERSION`]
/// (after its magic): a newer format, or damage, which
/// [`newer_version`] tells apart from the whole object.
pub fn names_a_newer_version(header: &[u8]) -> bool {
    header.len() > 4 && header[..4] == OBJECT_MAGIC && header[4] > OBJECT_VERSION
}

/// Checks a whole stored object (header and payload) without decompressing:
/// the header's fields and the CRC over header and payload.
pub fn check_stored(object: &[u8]) -> Result<Header, DecodeError> {
    let header = Header::decode(object)?;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&object[..16]);
    crc.update(&object[HEADER_LEN..]);
    let found = crc.finalize();
    let mut want = [0u8; 4];
    want.copy_from_slice(&object[16..20]);
    let want = u32::from_le_bytes(want);
    if found != want {
        return Err(DecodeError::new(
            16,
            format!("object CRC-32 {want:08x}"),
            format!("bytes with CRC-32 {found:08x}"),
        ));
    }
    Ok(header)
}

/// Decodes a whole object (header and payload) and checks that the content
/// hashes to `id`. `max_len` bounds the raw length before allocation.
pub fn decode(object: &[u8], id: &BlobId, max_len: u64) -> Result<Vec<u8>, DecodeError> {
    let header = check_stored(object)?;
    let mut data = Vec::new();
    match check_content(object, &header, id, max_len, &mut data)? {
        Codec::Raw => Ok(object[HEADER_LEN..].to_vec()),
        Codec::Zstd => Ok(data),
    }
}

/// Checks the content of an object that passed [`check_stored`] (whose
/// header that returned is `header`): the raw length against `max_len`,
/// bounded decompression, and that the content hashes to `id`; the checks
/// of [`decode`] after the CRC, without keeping the content.
///
/// A zstd payload is decompressed into `scratch`, which is left holding the
/// content (reuse it across calls: verifying many objects then allocates
/// once); a raw payload is hashed where it lies. Returns the codec, which
/// says where the content is: the payload (`Raw`) or `scratch` (`Zstd`).
pub fn check_content(
    object: &[u8],
    header: &Header,
    id: &BlobId,
    max_len: u64,
    scratch: &mut Vec<u8>,
) -> Result<Codec, DecodeError> {
    if header.raw_len > max_len {
        return Err(DecodeError::new(
            8,
            format!("a raw length of at most {max_len} bytes (the configured maximum)"),
            format!("{} bytes", header.raw_len),
        ));
    }
    let payload = &object[HEADER_LEN..];
    // Checked above against max_len, which the caller chose to fit in memory.
    let raw_len = usize::try_from(header.raw_len).map_err(|_| {
        DecodeError::new(
            8,
            "a raw length that fits in memory",
            header.raw_len.to_string(),
        )
    })?;
    let content = match header.codec {
        Codec::Raw => {
            if payload.len() != raw_len {
                return Err(DecodeError::new(
                    HEADER_LEN as u64,
                    format!("{raw_len} payload bytes"),
                    format!("{} bytes", payload.len()),
                ));
            }
            payload
        }
        Codec::Zstd => {
            decompress_bounded(payload, raw_len, scratch)?;
            &scratch[..]
        }
    };
    let actual = BlobId::of(content);
    if actual != *id {
        return Err(DecodeError::new(
            HEADER_LEN as u64,
            format!("content with SHA-256 {id}"),
            format!("content with SHA-256 {actual}"),
        ));
    }
    Ok(header.codec)
}

thread_local! {
    /// One zstd compression context per thread and level: creating one per
    /// object cost more than compressing a small object.
    static COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    /// One zstd decompression context per thread, for the same reason.
    static DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// Runs `f` with this thread's compressor for `level` (created on first
/// use). The output is the same as a fresh context's.
pub(crate) fn with_compressor<T>(
    level: i32,
    f: impl FnOnce(&mut zstd::bulk::Compressor<'static>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.as_ref().is_none_or(|(l, _)| *l != level) {
            *slot = Some((level, zstd::bulk::Compressor::new(level)?));
        }
        let result = match slot.as_mut() {
            Some((_, c)) => f(c),
            None => unreachable!("set above"),
        };
        if result.is_err() {
            // Never reuse a context that saw an error.
            *slot = None;
        }
        result
    })
}

/// Decompresses one zstd frame into `out`, which ends up `raw_len` bytes
/// long: the frame must decode to exactly that many bytes, never more (the
/// output buffer is `raw_len` bytes long, so a frame that would expand
/// further fails).
pub(crate) fn decompress_bounded(
    payload: &[u8],
    raw_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(zstd::bulk::Decompressor::new().map_err(|e| {
                DecodeError::new(HEADER_LEN as u64, "a zstd decoder", e.to_string())
            })?);
        }
        let result = match slot.as_mut() {
            Some(dec) => decompress_with(dec, payload, raw_len, out),
            None => unreachable!("set above"),
        };
        if result.is_err() {
            // Never reuse a context that saw damaged input.
            *slot = None;
        }
        result
    })
}

fn decompress_with(
    dec: &mut zstd::bulk::Decompressor<'static>,
    payload: &[u8],
    raw_len: usize,
    out: &mut Vec<u8>,
) -> Result<(), DecodeError> {
    set_len(out, raw_len);
    match dec.decompress_to_buffer(payload, out.as_mut_slice()) {
        Ok(n) if n == raw_len => Ok(()),
        Ok(n) => Err(DecodeError::new(
            HEADER_LEN as u64,
            format!("a zstd frame of {raw_len} raw bytes"),
            format!("{n} bytes"),
        )),
        Err(e) => Err(DecodeError::new(
            HEADER_LEN as u64,
            format!("a valid zstd frame of at most {raw_len} raw bytes"),
            e.to_string(),
        )),
    }
}

/// Makes `buf` `len` bytes long, for reading or decompressing into: a fresh
/// (empty) buffer is allocated zeroed (pages of a large one are mapped
/// zeroed, not written); a reused one only has its growth written.
pub(crate) fn set_len(buf: &mut Vec<u8>, len: usize) {
    if buf.is_empty() {
        *buf = vec![0; len];
    } else {
        buf.resize(len, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 1 << 30;

    #[test]
    fn an_object_of_a_newer_version_is_told_from_a_damaged_one_by_its_crc() {
        let mut obj = encode(b"some content", 3).expect("encode");
        assert_eq!(newer_version(&obj), None, "a current object");
        obj[4] = 2;
        assert_eq!(newer_version(&obj), None, "its CRC fails: damage");
        assert!(names_a_newer_version(&obj[..HEADER_LEN]));
        let mut crc = crc32fast::Hasher::new();
        crc.update(&obj[..16]);
        crc.update(&obj[HEADER_LEN..]);
        let crc = crc.finalize().to_le_bytes();
        obj[16..20].copy_from_slice(&crc);
        assert_eq!(newer_version(&obj), Some(2));
        assert!(check_stored(&obj).is_err(), "never read as version 1");
        obj[4] = 0;
        assert!(!names_a_newer_version(&obj[..HEADER_LEN]));
    }

    /// Rewrites the raw length and fixes the CRC, as a hostile writer would.
    fn forge_raw_len(obj: &mut [u8], len: u64) {
        let codec = if obj[5] == 0 { Codec::Raw } else { Codec::Zstd };
        let header = Header {
            codec,
            raw_len: len,
        }
        .encode_with_payload(&obj[HEADER_LEN..]);
        obj[..HEADER_LEN].copy_from_slice(&header);
    }

    #[test]
    fn compressible_content_is_zstd_and_round_trips() {
        let data = b"fn main() { println!(\"hello\"); }\n".repeat(100);
        let obj = encode(&data, 3).expect("encode");
        assert_eq!(Header::decode(&obj).expect("header").codec, Codec::Zstd);
        assert!(obj.len() < data.len());
        assert_eq!(decode(&obj, &BlobId::of(&data), MAX).expect("decode"), data);
    }

    #[test]
    fn encode_into_appends_what_encode_makes_with_reused_buffers() {
        let texts: Vec<Vec<u8>> = (0..4)
            .map(|i| {
                format!("item {i} compresses, compresses, compresses")
                    .repeat(20 * (i + 1))
                    .into_bytes()
            })
            .collect();
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        let mut expected = Vec::new();
        for t in texts.iter().chain([b"x".to_vec()].iter()) {
            encode_into(t, 3, &mut out, &mut scratch).expect("encode into");
            expected.extend(encode(t, 3).expect("encode"));
        }
        assert_eq!(out, expected);
    }

    #[test]
    fn incompressible_and_empty_content_is_stored_raw() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let data: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        for d in [&data[..], b"", b"x"] {
            let obj = encode(d, 3).expect("encode");
            assert_eq!(Header::decode(&obj).expect("header").codec, Codec::Raw);
            assert_eq!(obj.len(), HEADER_LEN + d.len());
            assert_eq!(decode(&obj, &BlobId::of(d), MAX).expect("decode"), d);
        }
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let data = b"some content that compresses, compresses, compresses".repeat(4);
        let id = BlobId::of(&data);
        let obj = encode(&data, 3).expect("encode");
        for byte in 0..obj.len() {
            for bit in 0..8 {
                let mut bad = obj.clone();
                bad[byte] ^= 1 << bit;
                assert!(
                    decode(&bad, &id, MAX).is_err(),
                    "flip at {byte}.{bit} undetected"
                );
            }
        }
    }

    #[test]
    fn every_truncation_is_detected() {
        let data = b"truncate me, truncate me, truncate me".repeat(8);
        let id = BlobId::of(&data);
        let obj = encode(&data, 3).expect("encode");
        for len in 0..obj.len() {
            assert!(
                decode(&obj[..len], &id, MAX).is_err(),
                "truncation to {len} undetected"
            );
        }
    }

    #[test]
    fn a_forged_huge_raw_length_is_refused_before_allocating() {
        let data = vec![0u8; 1 << 20];
        let mut obj = encode(&data, 3).expect("encode");
        forge_raw_len(&mut obj, u64::MAX);
        let err = decode(&obj, &BlobId::of(&data), MAX).expect_err("accepted");
        assert_eq!(err.offset, 8);
        assert!(err.expected.contains("at most"), "{err:?}");
    }

    #[test]
    fn check_content_with_a_reused_buffer_checks_each_object_alike() {
        let small = b"small object, small object, small object".repeat(3);
        let large = b"a larger object compresses too; ".repeat(500);
        let mut scratch = Vec::new();
        for data in [&small[..], &large[..], &small[..], &large[..]] {
            let obj = encode(data, 3).expect("encode");
            let header = check_stored(&obj).expect("header and CRC");
            let codec = check_content(&obj, &header, &BlobId::of(data), MAX, &mut scratch)
                .expect("content");
            assert_eq!(codec, Codec::Zstd);
            assert_eq!(scratch, data, "the buffer holds exactly the content");
        }
        // Raw content is hashed where it lies; a wrong id is refused.
        let obj = encode(b"x", 3).expect("encode");
        let header = check_stored(&obj).expect("header");
        assert_eq!(
            check_content(&obj, &header, &BlobId::of(b"x"), MAX, &mut scratch),
            Ok(Codec::Raw)
        );
        let err = check_content(&obj, &header, &BlobId::of(b"y"), MAX, &mut scratch)
            .expect_err("wrong id accepted");
        assert_eq!(err.offset, HEADER_LEN as u64);
    }

    #[test]
    fn a_bomb_that_expands_beyond_its_claimed_length_is_refused() {
        // 64 MiB of zeros compresses to a few KiB; claim 1 KiB.
        let data = vec![0u8; 64 << 20];
        let mut obj = encode(&data, 3).expect("encode");
        forge_raw_len(&mut obj, 1024);
        let err = decode(&obj, &BlobId::of(&data), MAX).expect_err("accepted");
        assert_eq!(err.offset, HEADER_LEN as u64);
        // The same with a reused buffer grown by an earlier, larger object.
        let header = check_stored(&obj).expect("the CRC was forged too");
        let mut scratch = vec![7u8; 128 << 20];
        let err = check_content(&obj, &header, &BlobId::of(&data), MAX, &mut scratch)
            .expect_err("accepted with a large buffer");
        assert_eq!(err.offset, HEADER_LEN as u64);
    }
}
