//! Read-only memory maps of immutable files: the only `unsafe` code of jp-store.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::ops::Deref;

/// A read-only view of a whole file: memory-mapped on the local file system,
/// or owned bytes from other backends.
#[derive(Debug)]
pub enum Mapping {
    /// A memory map of a file that is never modified after publication.
    Mapped(memmap2::Mmap),
    /// Bytes read into memory.
    Owned(Vec<u8>),
}

impl Mapping {
    /// Maps `file` read-only.
    pub fn map_file(file: &File) -> io::Result<Self> {
        if file.metadata()?.len() == 0 {
            return Ok(Mapping::Owned(Vec::new()));
        }
        // SAFETY: a mapping is only sound while nobody modifies or truncates the
        // file. jp-store maps only pack indexes and packs, and format-spec.md
        // ("Immutable files") guarantees that a published pack or index is never
        // written, truncated or renamed over: it is created under a temp name,
        // synced, published with a hard link that never replaces an existing
        // name, and only ever removed by unlinking, which leaves an existing
        // mapping valid. A process outside jp-store that truncates a published
        // file breaks that invariant; the store cannot defend against it.
        let map = unsafe { memmap2::Mmap::map(file)? };
        Ok(Mapping::Mapped(map))
    }
}

impl Deref for Mapping {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Mapping::Mapped(m) => m,
            Mapping::Owned(v) => v,
        }
    }
}
