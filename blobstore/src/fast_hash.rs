//! A fast, non-cryptographic hasher for maps keyed by short strings and
//! numbers the store itself decides on (tool call ids, URIs, blob ids of a
//! view; the group cache's groups and the objects checked in them):
//! the multiply-rotate of rustc's `FxHasher`, a few instructions per eight
//! bytes, where the standard library's SipHash costs tens of nanoseconds
//! per key. Not for keys an adversary picks to collide at will in a
//! long-lived map: a view's maps live for one view of one conversation.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// The hasher ([`FastMap`]'s).
#[derive(Debug, Default, Clone, Copy)]
pub struct FastHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(c);
            self.add(u64::from_le_bytes(word));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }

    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }

    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A `HashMap` with the [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A `HashSet` with the [`FastHasher`].
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_work_and_keys_of_different_lengths_differ() {
        let mut m: FastMap<&str, usize> = FastMap::default();
        for (i, k) in ["", "a", "ab", "abcdefgh", "abcdefghi", "call_1", "call_2"]
            .into_iter()
            .enumerate()
        {
            assert!(m.insert(k, i).is_none());
        }
        assert_eq!(m.get("call_2"), Some(&6));
        assert_eq!(m.get("abcdefgh"), Some(&3));
        assert_eq!(m.len(), 7);
    }
}
