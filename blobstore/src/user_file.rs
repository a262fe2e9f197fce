//! Reading the files and streams outside a store that a command is given
//! or looks up: files to attach, a `file://` URI to resolve, the files of
//! a JP conversation to import, `blob put`'s files, a summary file,
//! standard input (`jpstore-integrations`); the user configuration file and
//! the entries of a cache directory of a store on S3 (`jpstore-remote`).
//! Store files are not read here (they go through the storage layer).
//!
//! One rule for all of them, so that no command can hang or exhaust memory
//! on what it is given:
//!
//! - A file is opened without blocking (`O_NONBLOCK`: opening a FIFO with no
//!   writer returns at once instead of waiting for one) and without
//!   becoming a controlling terminal (`O_NOCTTY`), the flag kept (it does
//!   not change reads of a regular file), then checked with
//!   `fstat` on the open descriptor (no race with a rename): anything but a
//!   regular file (a FIFO, a device such as `/dev/zero`, a socket, a
//!   directory) is refused, naming what it is, before a byte is read.
//! - A file larger than the caller's limit is refused before it is read,
//!   from its size. Its read is bounded by the limit too (a file can grow,
//!   and files such as those of `/proc` claim a size of 0).
//! - A stream (standard input, where reading a stream is the point) is read
//!   up to the limit, and refused with a clear error past it.
//!
//! Errors are `io::Error`s that say what was found, without the path, so the
//! callers that collect errors per path (attach's skipped files) and those
//! that report one (naming the path) use the same text.

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use rustix::fs::{Mode, OFlags};

/// Whether a symbolic link at the last component of a path is followed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LastLink {
    /// Followed (the user named the path; a link there is their choice).
    Follow,
    /// Refused (a canonical path, which holds no link, or a file named by a
    /// fixed name inside a directory the user named).
    Refuse,
}

/// Opens the regular file at `path` for reading without blocking, refusing
/// anything else (see the module docs). Returns the file and its size.
pub fn open_regular(path: &Path, last_link: LastLink) -> io::Result<(File, u64)> {
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if last_link == LastLink::Refuse {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|e| {
        if e == rustix::io::Errno::LOOP && last_link == LastLink::Refuse {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "a symbolic link, not a regular file (not followed here)",
            )
        } else {
            io::Error::from(e)
        }
    })?;
    let file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular(kind_name(meta.file_type())));
    }
    // `O_NONBLOCK` stays: the file is only read, and the flag "has no
    // effect for regular files" (Linux's open(2)). Clearing it cost two
    // `fcntl` calls per file, 2,000 of an attach of 1,000 files.
    Ok((file, meta.len()))
}

/// What a file of type `kind` is, for errors ("a FIFO", "a directory").
pub fn kind_name(kind: std::fs::FileType) -> &'static str {
    crate::storage::FileKind::from(kind).describe()
}

/// The error for something that is not a regular file, saying what it is
/// (`found`, from [`kind_name`]).
pub fn not_regular(found: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{found}, not a regular file"),
    )
}

/// Reads the whole regular file at `path`, refusing one larger than `max`
/// bytes (before reading it, from its size).
pub fn read(path: &Path, max: u64, last_link: LastLink) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    read_into(path, max, last_link, &mut bytes)?;
    Ok(bytes)
}

/// [`read`] into `buf` (given empty; its capacity is reused).
pub fn read_into(path: &Path, max: u64, last_link: LastLink, buf: &mut Vec<u8>) -> io::Result<()> {
    let (file, len) = open_regular(path, last_link)?;
    if len > max {
        return Err(too_large(Some(len), max));
    }
    // Reserved to the size found, so that a file that does not grow is
    // read straight into place with no reallocation.
    buf.reserve_exact(usize::try_from(len).unwrap_or(0));
    file.take(max.saturating_add(1)).read_to_end(buf)?;
    if buf.len() as u64 > max {
        return Err(too_large(None, max));
    }
    Ok(())
}

/// Reads a stream to its end, refusing one that holds more than `max` bytes
/// (with an error once `max + 1` bytes are read: no more is taken).
///
/// The buffer grows by doubling but never past `max + 1` bytes, where
/// `read_to_end` would double a buffer of `max` bytes to `2 * max` to hold
/// the byte that proves the stream too long.
pub fn read_stream(mut stream: impl Read, max: u64) -> io::Result<Vec<u8>> {
    let limit = usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX);
    let mut bytes: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    while bytes.len() < limit {
        let want = chunk.len().min(limit - bytes.len());
        let n = match stream.read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if bytes.len() + n > bytes.capacity() {
            let grow = bytes.capacity().max(n).min(limit - bytes.len());
            bytes.reserve_exact(grow);
        }
        bytes.extend_from_slice(&chunk[..n]);
    }
    if bytes.len() as u64 > max {
        return Err(too_large(None, max));
    }
    Ok(bytes)
}

fn too_large(size: Option<u64>, max: u64) -> io::Error {
    let what = match size {
        Some(n) => format!("{n} bytes, more than the limit of {max} bytes"),
        None => format!("more than the limit of {max} bytes"),
    };
    io::Error::new(io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests;
