//! Groups: the unit of compression of a pack of format version 2
//! (format-spec.md 2.12).
//!
//! A group is the raw content of one or more objects laid back to back,
//! compressed together as one zstd frame (or stored raw when that is not
//! smaller), behind a 20-byte header:
//!
//! ```text
//! offset  size  field
//!      0     4  magic "jpsG"
//!      4     1  codec: 0 = raw, 1 = zstd (one frame)
//!      5     3  reserved, zero
//!      8     4  raw length, u32 little endian
//!     12     4  payload length, u32 little endian
//!     16     4  CRC-32 (IEEE) of bytes 0..16 and of the payload, u32 LE
//!     20     -  payload
//! ```
//!
//! Small objects compress far better together than one by one (zstd finds
//! what they share); a read decompresses the whole group, which the store
//! keeps in its group cache. The header carries no object boundaries: they
//! are in the pack's index, which is checksummed, and every object taken out
//! of a group is checked against its SHA-256 id before it is used.
//!
//! Decoding is bounded like an object's: the raw length is checked against
//! the caller's limit before anything is allocated, and decompression never
//! produces more than the raw length.

use crate::object::{self, DecodeError};

/// Magic bytes that start every group.
pub const GROUP_MAGIC: [u8; 4] = *b"jpsG";
/// Length of the group header.
pub const GROUP_HEADER_LEN: usize = 20;
/// The largest group *target* (the raw bytes a writer gathers in a group of
/// several objects): 64 MiB. A group of several objects is never larger;
/// a group of one object is as large as its object.
pub const MAX_GROUP_TARGET: u32 = 64 << 20;
/// zstd levels from this one on compress with a context of their own,
/// dropped after the group: their tables (tens of MiB) are not kept by the
/// thread once the work is done.
const FRESH_CONTEXT_LEVEL: i32 = 10;

/// How a group's payload is encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupCodec {
    /// The payload is the raw content.
    Raw = 0,
    /// The payload is one zstd frame of the raw content.
    Zstd = 1,
}

/// A parsed group header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupHeader {
    /// Payload encoding.
    pub codec: GroupCodec,
    /// Length of the raw content (the objects back to back).
    pub raw_len: u32,
    /// Length of the payload after the header.
    pub payload_len: u32,
}

fn error(offset: u64, expected: impl Into<String>, found: impl Into<String>) -> DecodeError {
    DecodeError {
        offset,
        expected: expected.into(),
        found: found.into(),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut x = [0u8; 4];
    x.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(x)
}

impl GroupHeader {
    /// Encodes the header with the CRC of `payload`.
    pub fn encode_with_payload(&self, payload: &[u8]) -> [u8; GROUP_HEADER_LEN] {
        let mut out = [0u8; GROUP_HEADER_LEN];
        out[..4].copy_from_slice(&GROUP_MAGIC);
        out[4] = self.codec as u8;
        out[8..12].copy_from_slice(&self.raw_len.to_le_bytes());
        out[12..16].copy_from_slice(&self.payload_len.to_le_bytes());
        let mut crc = crc32fast::Hasher::new();
        crc.update(&out[..16]);
        crc.update(payload);
        out[16..20].copy_from_slice(&crc.finalize().to_le_bytes());
        out
    }

    /// Decodes and checks the fields of a header (not its CRC, which
    /// covers the payload: see [`check_group`]).
    pub fn decode(bytes: &[u8]) -> Result<GroupHeader, DecodeError> {
        if bytes.len() < GROUP_HEADER_LEN {
            return Err(error(
                bytes.len() as u64,
                format!("a {GROUP_HEADER_LEN}-byte group header"),
                format!("{} bytes", bytes.len()),
            ));
        }
        if bytes[..4] != GROUP_MAGIC {
            return Err(error(
                0,
                "group magic \"jpsG\"",
                format!("{:02x?}", &bytes[..4]),
            ));
        }
        let codec = match bytes[4] {
            0 => GroupCodec::Raw,
            1 => GroupCodec::Zstd,
            other => {
                return Err(error(
                    4,
                    "codec 0 (raw) or 1 (zstd)",
                    format!("codec {other}"),
                ))
            }
        };
        if bytes[5..8] != [0, 0, 0] {
            return Err(error(
                5,
                "reserved bytes to be zero",
                format!("{:02x?}", &bytes[5..8]),
            ));
        }
        Ok(GroupHeader {
            codec,
            raw_len: u32_at(bytes, 8),
            payload_len: u32_at(bytes, 12),
        })
    }
}

/// Appends the encoding of the group whose raw content is `raw` (header
/// and payload) to `out`: zstd at `level`, or raw if the frame would not be
/// smaller. `scratch` receives the frame first (reuse it from group to
/// group). `raw` must be at most `u32::MAX` bytes long.
pub fn encode_group(
    raw: &[u8],
    level: i32,
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> std::io::Result<()> {
    let raw_len = u32::try_from(raw.len()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("a group of {} bytes, more than 4 GiB", raw.len()),
        )
    })?;
    scratch.clear();
    // Room for the worst case: compression then never fails for lack of it.
    scratch.reserve(zstd::zstd_safe::compress_bound(raw.len()));
    if level >= FRESH_CONTEXT_LEVEL {
        zstd::bulk::Compressor::new(level)?.compress_to_buffer(raw, scratch)?;
    } else {
        object::with_compressor(level, |c| c.compress_to_buffer(raw, scratch))?;
    }
    let (codec, payload) = if scratch.len() < raw.len() {
        (GroupCodec::Zstd, scratch.as_slice())
    } else {
        (GroupCodec::Raw, raw)
    };
    let header = GroupHeader {
        codec,
        raw_len,
        // Never longer than the raw content, which fits.
        payload_len: payload.len() as u32,
    };
    // Never longer stored than raw (format-spec.md 2.12, "Groups").
    assert!(
        header.payload_len <= header.raw_len,
        "a group stored longer than raw"
    );
    let start = out.len();
    out.reserve(GROUP_HEADER_LEN + payload.len());
    out.extend_from_slice(&header.encode_with_payload(payload));
    out.extend_from_slice(payload);
    // Its checksum over what is written (a pass over the payload: checked
    // in debug builds).
    debug_assert_eq!(check_group(&out[start..]).ok(), Some(header));
    Ok(())
}

/// Checks a whole stored group (header and payload) without decompressing:
/// the header's fields, that the payload is as long as the header says,
/// and the CRC over header and payload.
pub fn check_group(stored: &[u8]) -> Result<GroupHeader, DecodeError> {
    let header = GroupHeader::decode(stored)?;
    let payload = &stored[GROUP_HEADER_LEN..];
    if payload.len() as u64 != u64::from(header.payload_len) {
        return Err(error(
            12,
            format!("{} payload bytes", header.payload_len),
            format!("{} bytes", payload.len()),
        ));
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&stored[..16]);
    crc.update(payload);
    let found = crc.finalize();
    let want = u32_at(stored, 16);
    if found != want {
        return Err(error(
            16,
            format!("group CRC-32 {want:08x}"),
            format!("bytes with CRC-32 {found:08x}"),
        ));
    }
    Ok(header)
}

/// The raw content of a group that passed [`check_group`] (whose header
/// that returned is `header`): the payload itself for a raw group, else
/// the payload decompressed into `scratch` (which is left holding exactly
/// the content; reuse it from group to group). `max_raw` bounds the raw
/// length before anything is allocated; decompression never produces more
/// than the raw length, and must produce exactly that.
pub fn group_content<'a>(
    stored: &'a [u8],
    header: &GroupHeader,
    max_raw: u64,
    scratch: &'a mut Vec<u8>,
) -> Result<&'a [u8], DecodeError> {
    if u64::from(header.raw_len) > max_raw {
        return Err(error(
            8,
            format!("a group of at most {max_raw} raw bytes (the configured maximum)"),
            format!("{} bytes", header.raw_len),
        ));
    }
    let payload = stored.get(GROUP_HEADER_LEN..).unwrap_or_default();
    let raw_len = header.raw_len as usize;
    match header.codec {
        GroupCodec::Raw => {
            if payload.len() != raw_len {
                return Err(error(
                    12,
                    format!("a raw payload of {raw_len} bytes (the raw length)"),
                    format!("{} bytes", payload.len()),
                ));
            }
            Ok(payload)
        }
        GroupCodec::Zstd => {
            object::decompress_bounded(payload, raw_len, scratch).map_err(|e| DecodeError {
                offset: GROUP_HEADER_LEN as u64,
                ..e
            })?;
            Ok(&scratch[..])
        }
    }
}

/// The group target and zstd level a pack's writer groups objects with
/// (format-spec.md 2.12): a named setting of [`Compression`] or any other.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupSettings {
    /// zstd level (1-22; negative levels are zstd's fastest).
    pub level: i32,
    /// Raw bytes gathered in a group of several objects, at most; an
    /// object of this size or more is a group of its own. A power of two
    /// from 4 KiB to [`MAX_GROUP_TARGET`].
    pub group_bytes: u32,
}

impl GroupSettings {
    /// The settings clamped into what the format allows: the target a
    /// power of two from 4 KiB to [`MAX_GROUP_TARGET`], the level one zstd
    /// knows.
    pub fn clamped(self) -> Self {
        let group_bytes = self
            .group_bytes
            .clamp(4 << 10, MAX_GROUP_TARGET)
            .next_power_of_two()
            .min(MAX_GROUP_TARGET);
        let level = self.level.clamp(-7, 22);
        Self { level, group_bytes }
    }

    /// log2 of the group target (the byte a pack header records it as).
    pub fn group_log2(&self) -> u8 {
        self.clamped().group_bytes.trailing_zeros() as u8
    }
}

/// The named compression settings of packs (format-spec.md 2.12), for
/// options and command lines. The figures are from
/// `cargo bench --bench pack_settings` (BENCHMARKS.md): the content of 24
/// imported JP conversations, 22 MB of tool output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum Compression {
    /// zstd level 3 in groups of 256 KiB: cheaper to write than each object
    /// compressed alone, and 22% smaller (5.5 MB against 7.1 MB); a cold
    /// read of a small object decompresses at most 256 KiB (about 0.2 ms).
    /// Batch puts (attach, appends) use it.
    #[default]
    Fast,
    /// zstd level 9 in groups of 1 MiB: 13% smaller than `fast` (4.8 MB),
    /// a quarter slower to write; a cold read about 0.8 ms.
    Balanced,
    /// zstd level 19 in groups of 8 MiB: 24% smaller than `fast` (4.2 MB),
    /// writing at about 1 MB/s per core (an import about 20 times as long
    /// as with `fast`); a cold read of a small object decompresses up to
    /// 8 MiB (about 10 ms). Imports use it (and the engine compresses an
    /// import's log records at its level).
    Max,
}

impl Compression {
    /// Every named setting, fastest first.
    pub const ALL: [Compression; 3] = [Compression::Fast, Compression::Balanced, Compression::Max];

    /// Its level and group target.
    pub fn settings(self) -> GroupSettings {
        match self {
            Compression::Fast => GroupSettings {
                level: 3,
                group_bytes: 256 << 10,
            },
            Compression::Balanced => GroupSettings {
                level: 9,
                group_bytes: 1 << 20,
            },
            Compression::Max => GroupSettings {
                level: 19,
                group_bytes: 8 << 20,
            },
        }
    }

    /// Its name (`fast`, `balanced`, `max`).
    pub fn name(self) -> &'static str {
        match self {
            Compression::Fast => "fast",
            Compression::Balanced => "balanced",
            Compression::Max => "max",
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Compression::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .ok_or_else(|| format!("unknown compression {s:?}: fast, balanced or max"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(raw: &[u8], level: i32) -> Vec<u8> {
        let mut out = Vec::new();
        encode_group(raw, level, &mut out, &mut Vec::new()).expect("encode");
        out
    }

    fn decoded(stored: &[u8], max: u64) -> Result<Vec<u8>, DecodeError> {
        let header = check_group(stored)?;
        let mut scratch = Vec::new();
        group_content(stored, &header, max, &mut scratch).map(<[u8]>::to_vec)
    }

    #[test]
    fn compressible_and_incompressible_groups_round_trip() {
        let text = b"fn main() { println!(\"group\"); }\n".repeat(300);
        let mut x = 0x1234_5678_9abc_def1u64;
        let noise: Vec<u8> = (0..5000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 32) as u8
            })
            .collect();
        for (raw, codec) in [
            (&text[..], GroupCodec::Zstd),
            (&noise[..], GroupCodec::Raw),
            (&b""[..], GroupCodec::Raw),
        ] {
            for level in [3, 19] {
                let s = stored(raw, level);
                let h = check_group(&s).expect("check");
                assert_eq!(h.codec, codec);
                assert_eq!(h.raw_len as usize, raw.len());
                assert_eq!(decoded(&s, 1 << 20).expect("decode"), raw);
            }
        }
    }

    #[test]
    fn every_flip_and_truncation_is_detected_before_decompressing() {
        let s = stored(&b"grouped objects, grouped objects".repeat(20), 3);
        for at in 0..s.len() {
            for bit in 0..8 {
                let mut bad = s.clone();
                bad[at] ^= 1 << bit;
                assert!(check_group(&bad).is_err(), "flip at {at}.{bit} undetected");
            }
        }
        for len in 0..s.len() {
            assert!(check_group(&s[..len]).is_err(), "truncation to {len}");
        }
    }

    /// A header with the CRC fixed, as a hostile writer would make it.
    fn forge(s: &mut [u8], raw_len: u32) {
        let h = GroupHeader::decode(s).expect("header");
        let forged = GroupHeader { raw_len, ..h }.encode_with_payload(&s[GROUP_HEADER_LEN..]);
        s[..GROUP_HEADER_LEN].copy_from_slice(&forged);
    }

    #[test]
    fn hostile_raw_lengths_are_refused_before_allocating() {
        let mut s = stored(&vec![0u8; 1 << 20], 3);
        forge(&mut s, u32::MAX);
        let e = decoded(&s, 64 << 20).expect_err("a 4 GiB claim accepted");
        assert_eq!(e.offset, 8);
        // A bomb: the frame expands beyond its claimed length.
        forge(&mut s, 1024);
        let e = decoded(&s, 64 << 20).expect_err("a bomb accepted");
        assert_eq!(e.offset, GROUP_HEADER_LEN as u64);
        // A raw group whose raw length is not its payload's.
        let mut r = stored(b"abc", 3);
        forge(&mut r, 2);
        assert!(decoded(&r, 64 << 20).is_err());
    }

    #[test]
    fn settings_are_clamped_to_what_the_format_allows() {
        let s = GroupSettings {
            level: 40,
            group_bytes: 3,
        }
        .clamped();
        assert_eq!((s.level, s.group_bytes), (22, 4096));
        let s = GroupSettings {
            level: 3,
            group_bytes: u32::MAX,
        }
        .clamped();
        assert_eq!(s.group_bytes, MAX_GROUP_TARGET);
        assert_eq!(Compression::Fast.settings().group_log2(), 18);
        assert_eq!(Compression::Max.settings().group_log2(), 23);
        for c in Compression::ALL {
            assert_eq!(c.name().parse::<Compression>(), Ok(c));
        }
        assert!("fastest".parse::<Compression>().is_err());
    }
}
