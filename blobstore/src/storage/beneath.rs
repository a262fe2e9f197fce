//! Opening a relative path below a directory without following any
//! symbolic link, in any component.
//!
//! `O_NOFOLLOW` only guards the last component of a path: a directory such
//! as `objects/ab` replaced by a link to a directory outside the store would
//! still be walked through. Every name the local backend touches is
//! therefore resolved here, against a descriptor of the store root:
//!
//! - on Linux with `openat2(2)` (5.6 and later) and
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`: the kernel refuses a symbolic
//!   link anywhere on the path, and any escape from the root;
//! - elsewhere, or where `openat2` is missing (`ENOSYS`, as under some
//!   seccomp filters), by a walk opening one component at a time with
//!   `O_NOFOLLOW | O_DIRECTORY` relative to the previous one.
//!
//! Both give a descriptor; the callers then act on the last name with the
//! `*at` calls relative to its parent's descriptor, so the path is never
//! resolved again from a string.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path};
#[cfg(target_os = "linux")]
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags};

/// Flags of the descriptor of an intermediate directory: only used as the
/// base of the next lookup.
#[cfg(target_os = "linux")]
pub(super) const DIR_LOOKUP: OFlags = OFlags::PATH.union(OFlags::DIRECTORY);
#[cfg(not(target_os = "linux"))]
pub(super) const DIR_LOOKUP: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY);

/// Whether `openat2` was found missing; then every later open walks.
#[cfg(target_os = "linux")]
static NO_OPENAT2: AtomicBool = AtomicBool::new(false);

/// The normal components of a relative path (`.` components dropped).
/// The caller has checked the path with [`super::check_relative`].
pub(super) fn components(path: &Path) -> Vec<&OsStr> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// Opens `path` below `dir` with `flags` (`O_NOFOLLOW` and `O_CLOEXEC`
/// added) and, when creating, `mode`. No component may be a symbolic link.
pub(super) fn open(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: OFlags,
    mode: u32,
) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    // openat2 refuses a mode unless it creates.
    let mode = if flags.contains(OFlags::CREATE) {
        Mode::from_raw_mode(mode)
    } else {
        Mode::empty()
    };
    #[cfg(target_os = "linux")]
    if !NO_OPENAT2.load(Ordering::Relaxed) {
        use rustix::fs::ResolveFlags;
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
        // An empty path is not accepted by openat2; "." is the directory.
        let target: &Path = if !path.components().any(|c| matches!(c, Component::Normal(_))) {
            Path::new(".")
        } else {
            path
        };
        match rustix::fs::openat2(dir, target, flags, mode, resolve) {
            Err(rustix::io::Errno::NOSYS) => NO_OPENAT2.store(true, Ordering::Relaxed),
            // Only returned when a concurrent rename may have raced the
            // lookup of `..`, which checked paths never contain; the walk
            // is correct whatever the cause.
            Err(rustix::io::Errno::AGAIN) => {}
            other => return other.map_err(io::Error::from),
        }
    }
    walk(dir, path, flags, mode)
}

/// The fallback of [`open`]: one `openat` per component, each relative to
/// the descriptor of the one before, with `O_NOFOLLOW`.
pub(super) fn walk(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: OFlags,
    mode: Mode,
) -> io::Result<OwnedFd> {
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let names = components(path);
    let Some((last, parents)) = names.split_last() else {
        return Ok(rustix::fs::openat(dir, ".", flags, mode)?);
    };
    let held = open_dirs(dir, parents, None)?;
    let base = held.as_ref().map_or(dir, AsFd::as_fd);
    Ok(rustix::fs::openat(base, *last, flags, mode)?)
}

/// Opens the directories `names` one inside the other below `dir`, each
/// with `O_NOFOLLOW | O_DIRECTORY` relative to the one before; with
/// `create`, each missing one is first made with that mode. Returns the
/// last one's descriptor (`None` for no names).
pub(super) fn open_dirs(
    dir: BorrowedFd<'_>,
    names: &[&OsStr],
    create: Option<Mode>,
) -> io::Result<Option<OwnedFd>> {
    let mut held: Option<OwnedFd> = None;
    for name in names {
        let base = held.as_ref().map_or(dir, AsFd::as_fd);
        if let Some(mode) = create {
            match rustix::fs::mkdirat(base, *name, mode) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(e.into()),
            }
        }
        let flags = DIR_LOOKUP | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        held = Some(rustix::fs::openat(base, *name, flags, Mode::empty())?);
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn root(dir: &Path) -> OwnedFd {
        rustix::fs::open(dir, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).expect("root")
    }

    /// A tree with a real directory `a/b`, a file `a/b/f`, a directory link
    /// `a/l` and a file link `a/b/g`, both pointing outside.
    fn tree() -> (tempfile::TempDir, tempfile::TempDir) {
        let inside = tempfile::tempdir().expect("tempdir");
        let outside = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(inside.path().join("a/b")).expect("mkdir");
        fs::write(inside.path().join("a/b/f"), b"in").expect("write");
        fs::write(outside.path().join("f"), b"out").expect("write");
        symlink(outside.path(), inside.path().join("a/l")).expect("symlink");
        symlink(outside.path().join("f"), inside.path().join("a/b/g")).expect("symlink");
        (inside, outside)
    }

    fn read(fd: OwnedFd) -> Vec<u8> {
        use std::io::Read;
        let mut out = Vec::new();
        fs::File::from(fd).read_to_end(&mut out).expect("read");
        out
    }

    #[test]
    fn no_symbolic_link_is_followed_in_any_component() {
        let (inside, outside) = tree();
        let dir = root(inside.path());
        let by_walk = |p: &str| walk(dir.as_fd(), Path::new(p), OFlags::RDONLY, Mode::empty());
        let by_open = |p: &str| open(dir.as_fd(), Path::new(p), OFlags::RDONLY, 0);
        for open_path in [&by_walk as &dyn Fn(&str) -> io::Result<OwnedFd>, &by_open] {
            assert_eq!(read(open_path("a/b/f").expect("a real file")), b"in");
            assert_eq!(
                read(open_path("./a/./b/f").expect("with . components")),
                b"in"
            );
            for link in ["a/l/f", "a/b/g", "a/l"] {
                let err = open_path(link).expect_err(link);
                let errno = err.raw_os_error();
                assert!(
                    errno == Some(libc::ELOOP) || errno == Some(libc::ENOTDIR),
                    "{link}: {err}"
                );
            }
        }
        // Creating through a linked directory creates nothing outside.
        let create = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL;
        assert!(walk(
            dir.as_fd(),
            Path::new("a/l/new"),
            create,
            Mode::from_raw_mode(0o600)
        )
        .is_err());
        assert!(open(dir.as_fd(), Path::new("a/l/new"), create, 0o600).is_err());
        assert!(!outside.path().join("new").exists());
        assert_eq!(fs::read(outside.path().join("f")).expect("read"), b"out");
    }

    #[test]
    fn the_root_itself_opens_as_dot() {
        let (inside, _outside) = tree();
        let dir = root(inside.path());
        for p in [".", ""] {
            open(
                dir.as_fd(),
                Path::new(p),
                OFlags::RDONLY | OFlags::DIRECTORY,
                0,
            )
            .expect(p);
            walk(
                dir.as_fd(),
                Path::new(p),
                OFlags::RDONLY | OFlags::DIRECTORY,
                Mode::empty(),
            )
            .expect(p);
        }
    }
}
