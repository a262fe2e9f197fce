//! The primitives of the binary form: unsigned LEB128 varints, strings (a
//! varint length and UTF-8 bytes), blob references (`c4 20`, the 32-byte
//! id, a varint size), written into a `Vec` and read back by a [`Reader`]
//! that never reads past its slice and says what it found instead.

use jpstore_blobstore::BlobId;

use crate::event::BlobRef;

/// The two bytes before a blob id in aux: MessagePack's `bin 8` of 32
/// bytes, how a version 1 entry writes one, so that gc's search of damaged
/// bytes for id shapes finds ids of both versions (format-spec.md 4.7).
pub const REF_MARK: [u8; 2] = [0xc4, 0x20];

/// Appends `n` as an unsigned LEB128 varint (1 to 10 bytes).
pub fn put_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7f) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Appends a string: its length as a varint, then its UTF-8 bytes.
pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

/// Appends a blob reference: [`REF_MARK`], the 32-byte id, the size as a
/// varint.
pub fn put_ref(out: &mut Vec<u8>, r: &BlobRef) {
    out.extend_from_slice(&REF_MARK);
    out.extend_from_slice(r.id.as_bytes());
    put_varint(out, r.size);
}

/// Reads the primitives from a slice; every error says what was found and
/// where (a position in the slice).
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes, pos: 0 }
    }

    /// Position of the next byte to read.
    pub fn position(&self) -> usize {
        self.pos
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// The bytes not read yet, without moving.
    pub fn rest(&self) -> &'a [u8] {
        self.bytes.get(self.pos..).unwrap_or_default()
    }

    /// An error at the current position.
    pub fn error(&self, what: impl std::fmt::Display) -> String {
        format!("{what} at byte {} of {}", self.pos, self.bytes.len())
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, String> {
        let b = *self
            .bytes
            .get(self.pos)
            .ok_or_else(|| self.error("the end of the bytes where a byte was due"))?;
        self.pos += 1;
        Ok(b)
    }

    /// `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| {
                self.error(format_args!(
                    "a length of {n} where {} bytes remain",
                    self.remaining()
                ))
            })?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// An unsigned LEB128 varint of at most 10 bytes that fits `u64`.
    pub fn varint(&mut self) -> Result<u64, String> {
        let start = self.pos;
        let mut n = 0u64;
        for shift in (0..70).step_by(7) {
            let b = self.u8()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                self.pos = start;
                return Err(self.error("a varint larger than 64 bits"));
            }
            n |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(n);
            }
        }
        self.pos = start;
        Err(self.error("a varint of more than 10 bytes"))
    }

    /// A varint that must fit `u32` (a count or a length).
    pub fn varint_u32(&mut self) -> Result<u32, String> {
        let n = self.varint()?;
        u32::try_from(n).map_err(|_| self.error(format_args!("a count of {n}, beyond 32 bits")))
    }

    /// A length-prefixed UTF-8 string.
    pub fn str(&mut self) -> Result<&'a str, String> {
        let len = self.varint()?;
        let len = usize::try_from(len)
            .map_err(|_| self.error(format_args!("a string length of {len}")))?;
        let bytes = self.take(len)?;
        std::str::from_utf8(bytes).map_err(|e| {
            self.error(format_args!(
                "a string that is not UTF-8 (byte {} of {len})",
                e.valid_up_to()
            ))
        })
    }

    /// A blob reference ([`put_ref`]).
    pub fn blob_ref(&mut self) -> Result<BlobRef, String> {
        let mark = self.take(2)?;
        if mark != REF_MARK {
            return Err(self.error(format_args!(
                "{:02x} {:02x} where a blob reference starts with c4 20",
                mark[0], mark[1]
            )));
        }
        let id = self.blob_id()?;
        let size = self.varint()?;
        Ok(BlobRef { id, size })
    }

    /// A blob id: its 32 bytes.
    pub fn blob_id(&mut self) -> Result<BlobId, String> {
        let id: [u8; 32] = self
            .take(32)?
            .try_into()
            .map_err(|_| self.error("a short blob id"))?;
        Ok(BlobId::from_bytes(id))
    }

    /// Four bytes, a little-endian `u32`.
    pub fn u32_le(&mut self) -> Result<u32, String> {
        let b: [u8; 4] = self.take(4)?.try_into().map_err(|_| self.error("short"))?;
        Ok(u32::from_le_bytes(b))
    }

    /// Eight bytes, a little-endian `i64`.
    pub fn i64_le(&mut self) -> Result<i64, String> {
        let b: [u8; 8] = self.take(8)?.try_into().map_err(|_| self.error("short"))?;
        Ok(i64::from_le_bytes(b))
    }

    /// Fails unless every byte was read.
    pub fn finish(&self, what: &str) -> Result<(), String> {
        if self.is_empty() {
            Ok(())
        } else {
            Err(self.error(format_args!("{} bytes after the {what}", self.remaining())))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_round_trip_and_refuse_overflow() {
        for n in [
            0u64,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX.into(),
            u64::MAX,
        ] {
            let mut out = Vec::new();
            put_varint(&mut out, n);
            let mut r = Reader::new(&out);
            assert_eq!(r.varint(), Ok(n));
            assert!(r.is_empty());
        }
        // 11 continuation bytes; a 10th byte above 1.
        assert!(Reader::new(&[0xff; 11]).varint().is_err());
        let mut big = vec![0xff; 9];
        big.push(0x02);
        assert!(Reader::new(&big).varint().is_err());
        assert!(Reader::new(&[0x80]).varint().is_err());
        assert!(Reader::new(&[]).varint().is_err());
    }

    #[test]
    fn strings_and_references_round_trip_and_refuse_bad_bytes() {
        let r = BlobRef {
            id: BlobId::of(b"x"),
            size: 1234,
        };
        let mut out = Vec::new();
        put_str(&mut out, "héllo");
        put_ref(&mut out, &r);
        let mut reader = Reader::new(&out);
        assert_eq!(reader.str(), Ok("héllo"));
        assert_eq!(reader.blob_ref(), Ok(r));
        assert!(reader.finish("test").is_ok());
        // A length past the end, bytes that are not UTF-8, a bad mark.
        assert!(Reader::new(&[5, b'a']).str().is_err());
        assert!(Reader::new(&[2, 0xc3, 0x28]).str().is_err());
        assert!(Reader::new(&[0xc4, 0x21]).blob_ref().is_err());
        // A hostile length is refused without allocating.
        let mut hostile = Vec::new();
        put_varint(&mut hostile, u64::MAX);
        assert!(Reader::new(&hostile).str().is_err());
    }
}
