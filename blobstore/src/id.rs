//! Blob identity: the SHA-256 of the raw (uncompressed) content.

use std::fmt;
use std::str::FromStr;

use sha2::{Digest, Sha256};

/// A string that is not a blob id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid blob id {input:?}: {reason}")]
pub struct IdError {
    /// The offending input (shortened if long).
    pub input: String,
    /// What a blob id must look like.
    pub reason: &'static str,
}

/// The identity of a blob: SHA-256 of its raw bytes.
///
/// Displayed and parsed as 64 lowercase hexadecimal digits. Parsing accepts
/// nothing else (no uppercase, no prefix, no path separators), so an id taken
/// from user input can be used to build a path inside the store.
#[derive(Clone, Copy, Eq)]
pub struct BlobId([u8; 32]);

// Equality and order are those of the 32 bytes (lexicographic), compared as
// four 64-bit words: the derived forms call `memcmp` for every comparison,
// which was a tenth of fsck's log checks (100,000 references and as many
// listed ids walked side by side).
impl PartialEq for BlobId {
    #[inline]
    fn eq(&self, other: &Self) -> bool {
        self.words(u64::from_ne_bytes) == other.words(u64::from_ne_bytes)
    }
}

impl Ord for BlobId {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.words(u64::from_be_bytes)
            .cmp(&other.words(u64::from_be_bytes))
    }
}

// Hashes the bytes, as the derived form did: equal ids have equal bytes.
impl std::hash::Hash for BlobId {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.hash(state);
    }
}

impl PartialOrd for BlobId {
    #[inline]
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl BlobId {
    /// Length of an id in bytes.
    pub const LEN: usize = 32;

    /// The id of `data`.
    pub fn of(data: &[u8]) -> Self {
        BlobId(Sha256::digest(data).into())
    }

    /// An id from its 32 raw bytes.
    pub const fn from_bytes(bytes: [u8; 32]) -> Self {
        BlobId(bytes)
    }

    /// The 32 raw bytes.
    pub const fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 32 bytes as four words, each read by `word` from its 8 bytes.
    #[inline]
    fn words(&self, word: fn([u8; 8]) -> u64) -> [u64; 4] {
        let w = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&self.0[i * 8..i * 8 + 8]);
            word(b)
        };
        [w(0), w(1), w(2), w(3)]
    }

    /// The 64-digit lowercase hex form.
    pub fn to_hex(&self) -> String {
        let digits = self.hex_digits();
        // Only the ASCII digits of `HEX` are written.
        String::from_utf8_lossy(&digits).into_owned()
    }

    /// The 64 lowercase hex digits, without an allocation.
    fn hex_digits(&self) -> [u8; 64] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 64];
        for (pair, b) in out.chunks_exact_mut(2).zip(self.0) {
            pair[0] = HEX[usize::from(b >> 4)];
            pair[1] = HEX[usize::from(b & 0x0f)];
        }
        out
    }

    /// Parses the 64-digit lowercase hex form.
    pub fn parse(s: &str) -> Result<Self, IdError> {
        if s.len() != 64 {
            return Err(IdError {
                input: truncate_for_message(s),
                reason: "a blob id is 64 hexadecimal digits",
            });
        }
        if !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(IdError {
                input: truncate_for_message(s),
                reason: "a blob id has only the digits 0-9 and a-f",
            });
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| IdError {
            input: truncate_for_message(s),
            reason: "not hexadecimal",
        })?;
        Ok(BlobId(out))
    }
}

fn truncate_for_message(s: &str) -> String {
    const MAX: usize = 80;
    if s.len() <= MAX {
        s.to_owned()
    } else {
        let mut end = MAX;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    }
}

impl fmt::Display for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let digits = self.hex_digits();
        f.write_str(std::str::from_utf8(&digits).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for BlobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BlobId({self})")
    }
}

impl FromStr for BlobId {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, IdError> {
        BlobId::parse(s)
    }
}

#[cfg(feature = "serde")]
impl serde::Serialize for BlobId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            let digits = self.hex_digits();
            s.serialize_str(std::str::from_utf8(&digits).map_err(serde::ser::Error::custom)?)
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for BlobId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = BlobId;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a SHA-256 blob id (64 hex digits or 32 bytes)")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<BlobId, E> {
                BlobId::parse(v).map_err(E::custom)
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<BlobId, E> {
                let arr: [u8; 32] = v
                    .try_into()
                    .map_err(|_| E::invalid_length(v.len(), &"32 bytes"))?;
                Ok(BlobId(arr))
            }
        }
        if d.is_human_readable() {
            d.deserialize_str(Visitor)
        } else {
            d.deserialize_bytes(Visitor)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_content_has_the_known_sha256() {
        assert_eq!(
            BlobId::of(b"").to_hex(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn order_and_equality_are_those_of_the_bytes() {
        // Ids differing in one byte at every place, by small and large
        // steps, and digests.
        let mut ids: Vec<BlobId> = (0..200u32).map(|n| BlobId::of(&n.to_le_bytes())).collect();
        for place in 0..32 {
            for value in [0u8, 1, 0x7f, 0x80, 0xfe, 0xff] {
                let mut b = *ids[place].as_bytes();
                b[place] = value;
                ids.push(BlobId::from_bytes(b));
            }
        }
        for a in &ids {
            for b in &ids {
                assert_eq!(a.cmp(b), a.as_bytes().cmp(b.as_bytes()), "{a} {b}");
                assert_eq!(a == b, a.as_bytes() == b.as_bytes(), "{a} {b}");
                assert_eq!(a.partial_cmp(b), Some(a.cmp(b)));
            }
        }
    }

    #[test]
    fn hex_round_trips() {
        let id = BlobId::of(b"hello");
        assert_eq!(BlobId::parse(&id.to_string()).expect("parse"), id);
        assert_eq!(id.to_string(), id.to_hex());
    }

    #[test]
    fn parse_refuses_anything_but_64_lowercase_hex_digits() {
        let good = BlobId::of(b"x").to_hex();
        for bad in [
            String::new(),
            good[..63].to_owned(),
            format!("{good}0"),
            good.to_uppercase(),
            format!("../{}", &good[3..]),
            format!("{}/{}", &good[..2], &good[3..]),
            "g".repeat(64),
        ] {
            assert!(BlobId::parse(&bad).is_err(), "accepted {bad:?}");
        }
    }
}
