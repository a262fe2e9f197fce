//! A blob's content as a read returns it ([`BlobStore::get_content`](crate::BlobStore::get_content)):
//! bytes of its own, or the range of a decompressed group that the group
//! cache holds too, shared rather than copied. Either way the bytes hashed
//! to the blob's id when they were read.

use std::fmt;
use std::ops::{Deref, Range};
use std::sync::Arc;

use crate::cache::CachedGroup;

/// A blob's content (see the module documentation); derefs to its bytes.
pub struct Content(Repr);

enum Repr {
    Owned(Vec<u8>),
    Group {
        group: Arc<CachedGroup>,
        range: Range<usize>,
    },
}

impl Content {
    /// The bytes `range` of a group's raw content (the caller checked that
    /// the range lies inside it).
    pub(crate) fn of_group(group: Arc<CachedGroup>, range: Range<usize>) -> Content {
        Content(Repr::Group { group, range })
    }

    /// Whether the bytes are UTF-8 text, with the error of the check when
    /// they are not. The range of a shared group is checked once: the
    /// group cache remembers it while it holds the group.
    pub fn check_utf8(&self) -> Result<(), std::str::Utf8Error> {
        match &self.0 {
            Repr::Owned(bytes) => std::str::from_utf8(bytes).map(|_| ()),
            Repr::Group { group, range } => group.check_utf8(range),
        }
    }

    /// The bytes as a vector of their own (copied out of a shared group).
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Owned(bytes) => bytes,
            Repr::Group { .. } => self.to_vec(),
        }
    }
}

impl Deref for Content {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.0 {
            Repr::Owned(bytes) => bytes,
            Repr::Group { group, range } => group.content.get(range.clone()).unwrap_or_default(),
        }
    }
}

impl AsRef<[u8]> for Content {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl From<Vec<u8>> for Content {
    fn from(bytes: Vec<u8>) -> Content {
        Content(Repr::Owned(bytes))
    }
}

impl fmt::Debug for Content {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shared = matches!(self.0, Repr::Group { .. });
        f.debug_struct("Content")
            .field("len", &self.len())
            .field("shared", &shared)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_and_shared_content_give_their_bytes() {
        let owned = Content::from(b"abc".to_vec());
        assert_eq!(&*owned, b"abc");
        assert_eq!(owned.into_vec(), b"abc");
        let group = Arc::new(CachedGroup::new(b"0123456789".to_vec()));
        let shared = Content::of_group(Arc::clone(&group), 2..5);
        assert_eq!(&*shared, b"234");
        assert_eq!(format!("{shared:?}"), "Content { len: 3, shared: true }");
        assert_eq!(shared.into_vec(), b"234");
        // The group outlives the cache's hold on it for as long as a read
        // holds it.
        assert_eq!(Arc::strong_count(&group), 1);
    }

    /// Text is checked as `str::from_utf8` checks it, in owned bytes and in
    /// a shared group's ranges alike; a group remembers the ranges that
    /// passed (a cut inside a character does not pass, the whole does), and
    /// nothing else.
    #[test]
    fn text_is_checked_once_per_range_of_a_group() {
        let text = "añb€c".as_bytes().to_vec();
        assert!(Content::from(text.clone()).check_utf8().is_ok());
        let bad = Content::from(vec![b'a', 0xff]).check_utf8();
        assert_eq!(bad.map_err(|e| e.valid_up_to()), Err(1));
        let group = Arc::new(CachedGroup::new(text.clone()));
        for start in 0..=text.len() {
            for end in start..=text.len() {
                let expected = std::str::from_utf8(&text[start..end]).map(|_| ());
                let shared = Content::of_group(Arc::clone(&group), start..end);
                assert_eq!(shared.check_utf8(), expected, "{start}..{end}");
                // Asked again: the same answer, remembered or checked.
                assert_eq!(shared.check_utf8(), expected, "{start}..{end} again");
                let remembered = group.remembers_utf8(start, end);
                assert_eq!(remembered, expected.is_ok(), "{start}..{end} remembered");
            }
        }
    }
}
