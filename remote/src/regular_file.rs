//! The files outside a store that the S3 backend reads: the user
//! configuration file (format-spec.md 5.7) and the entries of a cache
//! directory (5.8). Neither may make a command wait or exhaust memory,
//! whatever is found at their names: a file is opened without blocking
//! (`O_NONBLOCK`: opening a FIFO with no writer returns at once), checked
//! by `fstat` on the open descriptor before a byte is read (anything but a
//! regular file is refused, named by its kind), and read up to a limit
//! (a device such as `/dev/zero` never ends; a regular file can grow).

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

use jpstore_blobstore::storage::FileKind;
use rustix::fs::{Mode, OFlags};

/// What was found at a path.
pub(crate) enum Found {
    /// A regular file, open for reading (its times may be set through it),
    /// and its bytes.
    Regular(File, Vec<u8>),
    /// Something else, not read: a FIFO, a device, a directory, or a
    /// symbolic link where links are not followed.
    Other(FileKind),
}

/// Reads the file at `path` if it is a regular file of at most `limit`
/// bytes (a larger one is an error of kind `InvalidData`); a symbolic link
/// at its last component is followed only if `follow_link`.
pub(crate) fn read_regular(path: &Path, follow_link: bool, limit: u64) -> io::Result<Found> {
    let mut flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    if !follow_link {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::LOOP) if !follow_link => return Ok(Found::Other(FileKind::Symlink)),
        Err(e) => return Err(e.into()),
    };
    let file = File::from(fd);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Ok(Found::Other(FileKind::from(meta.file_type())));
    }
    let too_large = |len: u64| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{len} bytes or more, larger than the {limit} bytes allowed"),
        )
    };
    if meta.len() > limit {
        return Err(too_large(meta.len()));
    }
    let mut data = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    // One byte past the limit read, to tell a file that grew past it.
    let mut bounded = (&file).take(limit.saturating_add(1));
    bounded.read_to_end(&mut data)?;
    if data.len() as u64 > limit {
        return Err(too_large(data.len() as u64));
    }
    Ok(Found::Regular(file, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_regular_file_within_the_limit_is_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("file");
        std::fs::write(&file, b"twelve bytes").expect("write");
        let read = |path: &Path, follow, limit| match read_regular(path, follow, limit) {
            Ok(Found::Regular(_, data)) => Ok(data),
            Ok(Found::Other(kind)) => Err(kind.describe().to_string()),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(read(&file, false, 12), Ok(b"twelve bytes".to_vec()));
        let over = read(&file, false, 11).expect_err("over the limit");
        assert!(over.contains("larger than the 11 bytes"), "{over}");

        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).expect("symlink");
        assert_eq!(read(&link, true, 100), Ok(b"twelve bytes".to_vec()));
        assert_eq!(read(&link, false, 100), Err("a symbolic link".into()));

        let fifo = dir.path().join("fifo");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::FileType::Fifo,
            Mode::RUSR | Mode::WUSR,
            0,
        )
        .expect("mkfifo");
        // Not waited on: opening it for reading returns at once.
        assert_eq!(read(&fifo, true, 100), Err("a FIFO".into()));
        assert_eq!(read(dir.path(), true, 100), Err("a directory".into()));
        // A device that never ends is refused before it is read.
        assert_eq!(
            read(Path::new("/dev/zero"), true, 100),
            Err("a character device".into())
        );
        let missing = read(&dir.path().join("missing"), true, 100).expect_err("missing");
        assert!(missing.contains("No such file"), "{missing}");
    }
}
