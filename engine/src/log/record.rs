//! The byte codec of a log: file header, record header, batch payload.
//!
//! Pure functions over byte slices; no I/O. The layout is specified in
//! `format-spec.md` (section 3); every constant here is named there.

/// First bytes of every log file: a byte with the high bit set (catches 7-bit
/// transports), the name, CR LF (catches newline translation).
pub const MAGIC: [u8; 8] = *b"\x89JPLOG\r\n";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Header flag: entries of this log may be packed (several entries
/// compressed into one, format-spec.md 4.2). Set on every log a conversation
/// creates; a build that does not know it refuses the file instead of
/// misreading it.
pub const FLAG_PACKED: u16 = 0x0001;
/// Flags this build knows; any other set bit is refused.
pub const KNOWN_FLAGS: u16 = FLAG_PACKED;
/// Length of the file header; the first record starts here.
pub const FILE_HEADER_LEN: u64 = 16;
/// Length of a record header (payload length, payload crc, header crc).
pub const RECORD_HEADER_LEN: u64 = 12;
/// Smallest payload: a batch count.
pub const MIN_PAYLOAD_LEN: u32 = 4;

/// The file header of a new log with `flags` (known ones only).
pub fn encode_file_header(flags: u16) -> [u8; FILE_HEADER_LEN as usize] {
    let mut h = [0u8; FILE_HEADER_LEN as usize];
    h[..8].copy_from_slice(&MAGIC);
    h[8..10].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[10..12].copy_from_slice(&(flags & KNOWN_FLAGS).to_le_bytes());
    let crc = crc32fast::hash(&h[..12]);
    h[12..16].copy_from_slice(&crc.to_le_bytes());
    h
}

/// What is wrong with a file header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderProblem {
    /// Bytes that are not a log header; `(offset, expected, found)`.
    Damaged(u64, &'static str, String),
    /// A valid header of a version or with flags this build does not know.
    Unsupported {
        /// The version found.
        version: u16,
        /// The flags found.
        flags: u16,
    },
}

/// Checks a file header (`bytes` may be short if the file is); returns its
/// flags.
pub fn check_file_header(bytes: &[u8]) -> Result<u16, HeaderProblem> {
    if bytes.len() < FILE_HEADER_LEN as usize {
        return Err(HeaderProblem::Damaged(
            0,
            "a 16-byte log file header",
            format!("a file of {} bytes", bytes.len()),
        ));
    }
    if bytes[..8] != MAGIC {
        return Err(HeaderProblem::Damaged(
            0,
            "the log magic 89 4a 50 4c 4f 47 0d 0a",
            hex(&bytes[..8]),
        ));
    }
    let stored = le32(&bytes[12..16]);
    let actual = crc32fast::hash(&bytes[..12]);
    if stored != actual {
        return Err(HeaderProblem::Damaged(
            12,
            "a file header checksum matching bytes 0..12",
            format!("{stored:#010x} (computed {actual:#010x})"),
        ));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    let flags = u16::from_le_bytes([bytes[10], bytes[11]]);
    if version != FORMAT_VERSION || flags & !KNOWN_FLAGS != 0 {
        return Err(HeaderProblem::Unsupported { version, flags });
    }
    Ok(flags)
}

/// A record header whose checksum matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    /// Length of the payload that follows the header.
    pub payload_len: u32,
    /// crc32 of the payload.
    pub payload_crc: u32,
}

impl RecordHeader {
    /// Total bytes of the record on disk.
    pub fn record_len(&self) -> u64 {
        RECORD_HEADER_LEN + u64::from(self.payload_len)
    }
}

/// Decodes a record header, or `None` if its checksum does not match (a torn
/// or damaged header: none of its fields may be used).
pub fn decode_record_header(bytes: &[u8; RECORD_HEADER_LEN as usize]) -> Option<RecordHeader> {
    if le32(&bytes[8..12]) != crc32fast::hash(&bytes[..8]) {
        return None;
    }
    Some(RecordHeader {
        payload_len: le32(&bytes[0..4]),
        payload_crc: le32(&bytes[4..8]),
    })
}

/// Encoded payload length of a batch, or `None` beyond `u64` (never in practice).
pub fn payload_len<E: AsRef<[u8]>>(entries: &[E]) -> Option<u64> {
    entries
        .iter()
        .try_fold(u64::from(MIN_PAYLOAD_LEN), |acc, e| {
            acc.checked_add(4)?.checked_add(e.as_ref().len() as u64)
        })
}

/// Encodes a whole record (header and payload) for a batch.
///
/// The caller has checked that [`payload_len`] fits the limit (and so `u32`).
pub fn encode_record<E: AsRef<[u8]>>(entries: &[E]) -> Vec<u8> {
    let payload_len = payload_len(entries).expect("caller checked the batch size");
    let payload_len = u32::try_from(payload_len).expect("caller checked the batch size");
    let count = u32::try_from(entries.len()).expect("each entry takes 4 bytes of a u32 payload");
    let mut rec = Vec::with_capacity(RECORD_HEADER_LEN as usize + payload_len as usize);
    rec.extend_from_slice(&[0u8; RECORD_HEADER_LEN as usize]);
    put_batch(&mut rec, count, entries);
    let payload_crc = crc32fast::hash(&rec[RECORD_HEADER_LEN as usize..]);
    rec[0..4].copy_from_slice(&payload_len.to_le_bytes());
    rec[4..8].copy_from_slice(&payload_crc.to_le_bytes());
    let header_crc = crc32fast::hash(&rec[0..8]);
    rec[8..12].copy_from_slice(&header_crc.to_le_bytes());
    rec
}

/// Encodes a batch (count, then each entry with its length) alone: the
/// payload of a record, and the content of a packed entry.
pub fn encode_batch<E: AsRef<[u8]>>(entries: &[E]) -> Vec<u8> {
    let len = payload_len(entries).unwrap_or(0);
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
    put_batch(&mut out, count, entries);
    out
}

fn put_batch<E: AsRef<[u8]>>(out: &mut Vec<u8>, count: u32, entries: &[E]) {
    out.extend_from_slice(&count.to_le_bytes());
    for e in entries {
        let e = e.as_ref();
        let len = u32::try_from(e.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(e);
    }
}

/// Splits a checksum-valid payload into its entries, or says why it is not a
/// batch (as "found ..." text; the caller adds the offset).
pub fn decode_batch(payload: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut entries = Vec::new();
    walk_batch(payload, |e| entries.push(e.to_vec()))?;
    Ok(entries)
}

/// Checks the batch structure without copying entries; returns the count.
pub fn check_batch(payload: &[u8]) -> Result<u32, String> {
    walk_batch(payload, |_| {})
}

/// Hands each entry of a batch to `each`, or says why the bytes are not a
/// batch.
pub fn walk_batch<'a>(payload: &'a [u8], mut each: impl FnMut(&'a [u8])) -> Result<u32, String> {
    let Some((count, mut rest)) = split_u32(payload) else {
        return Err(format!(
            "a payload of {} bytes, too short for a batch count",
            payload.len()
        ));
    };
    for i in 0..count {
        let Some((len, after)) = split_u32(rest) else {
            return Err(format!(
                "the payload ends inside the length of entry {i} of {count}"
            ));
        };
        let len = len as usize;
        if len > after.len() {
            return Err(format!(
                "entry {i} of {count} claiming {len} bytes where {} remain",
                after.len()
            ));
        }
        each(&after[..len]);
        rest = &after[len..];
    }
    if !rest.is_empty() {
        return Err(format!(
            "{} bytes after the last of {count} entries",
            rest.len()
        ));
    }
    Ok(count)
}

fn split_u32(b: &[u8]) -> Option<(u32, &[u8])> {
    if b.len() < 4 {
        return None;
    }
    Some((le32(&b[..4]), &b[4..]))
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header_of(rec: &[u8]) -> RecordHeader {
        let h: [u8; 12] = rec[..12].try_into().expect("12 bytes");
        decode_record_header(&h).expect("valid header")
    }

    /// The worked example of `format-spec.md` (section 3), byte for byte.
    #[test]
    fn bytes_match_the_spec_example() {
        assert_eq!(
            encode_file_header(0),
            [
                0x89, 0x4a, 0x50, 0x4c, 0x4f, 0x47, 0x0d, 0x0a, 0x01, 0x00, 0x00, 0x00, 0x82, 0x53,
                0x6d, 0x0c
            ]
        );
        let entries: [&[u8]; 2] = [b"hi", b""];
        assert_eq!(
            encode_record(&entries),
            [
                0x0e, 0x00, 0x00, 0x00, 0x5c, 0xf5, 0xa5, 0x44, 0x5f, 0x01, 0xbd, 0xe0, 0x02, 0x00,
                0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x68, 0x69, 0x00, 0x00, 0x00, 0x00
            ]
        );
    }

    #[test]
    fn record_round_trips() {
        let entries: Vec<Vec<u8>> = vec![b"one".to_vec(), Vec::new(), vec![0xff; 300]];
        let rec = encode_record(&entries);
        let h = header_of(&rec);
        assert_eq!(h.record_len(), rec.len() as u64);
        assert_eq!(
            u64::from(h.payload_len),
            payload_len(&entries).expect("len")
        );
        let payload = &rec[12..];
        assert_eq!(crc32fast::hash(payload), h.payload_crc);
        assert_eq!(decode_batch(payload).expect("batch"), entries);
        assert_eq!(check_batch(payload), Ok(3));
    }

    #[test]
    fn any_flipped_header_bit_is_detected() {
        let rec = encode_record(&[b"x".to_vec()]);
        for byte in 0..12 {
            for bit in 0..8 {
                let mut h: [u8; 12] = rec[..12].try_into().expect("12 bytes");
                h[byte] ^= 1 << bit;
                assert_eq!(decode_record_header(&h), None, "byte {byte} bit {bit}");
            }
        }
        assert_eq!(
            decode_record_header(&[0u8; 12]),
            None,
            "zeros pass as a header"
        );
    }

    #[test]
    fn malformed_batches_are_refused() {
        // count 2, one entry of 1 byte: ends inside entry 1's length
        let p = [2, 0, 0, 0, 1, 0, 0, 0, b'a'];
        assert!(decode_batch(&p).is_err());
        // entry claiming more than remains
        let p = [1, 0, 0, 0, 9, 0, 0, 0, b'a'];
        assert!(decode_batch(&p).is_err());
        // trailing bytes
        let p = [1, 0, 0, 0, 1, 0, 0, 0, b'a', b'b'];
        assert!(decode_batch(&p).is_err());
        // hostile count with no room for entries
        let p = [0xff, 0xff, 0xff, 0xff];
        assert!(decode_batch(&p).is_err());
        assert!(decode_batch(&[1, 0]).is_err());
        assert_eq!(decode_batch(&[0, 0, 0, 0]), Ok(Vec::new()));
    }

    #[test]
    fn file_header_is_checked() {
        let h = encode_file_header(0);
        assert_eq!(check_file_header(&h), Ok(0));
        assert_eq!(
            check_file_header(&encode_file_header(FLAG_PACKED)),
            Ok(FLAG_PACKED)
        );
        let mut unknown_flag = encode_file_header(0);
        unknown_flag[10] = 0x02;
        let crc = crc32fast::hash(&unknown_flag[..12]);
        unknown_flag[12..16].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            check_file_header(&unknown_flag),
            Err(HeaderProblem::Unsupported {
                version: 1,
                flags: 2
            })
        );
        assert!(matches!(
            check_file_header(&h[..15]),
            Err(HeaderProblem::Damaged(0, _, _))
        ));
        let mut bad = h;
        bad[3] ^= 1;
        assert!(matches!(
            check_file_header(&bad),
            Err(HeaderProblem::Damaged(0, _, _))
        ));
        let mut bad = h;
        bad[9] ^= 1;
        assert!(matches!(
            check_file_header(&bad),
            Err(HeaderProblem::Damaged(12, _, _))
        ));
        let mut newer = h;
        newer[8] = 2;
        let crc = crc32fast::hash(&newer[..12]);
        newer[12..16].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            check_file_header(&newer),
            Err(HeaderProblem::Unsupported {
                version: 2,
                flags: 0
            })
        );
    }
}
