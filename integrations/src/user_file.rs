//! Reading the files and streams a user names: the blob store's
//! [`user_file`](jpstore_blobstore::user_file) (opened without blocking,
//! only regular files, bounded), and [`read_file`], whose error names the
//! path as the engine's errors do.

use std::path::Path;

pub use jpstore_blobstore::user_file::*;
use jpstore_engine::error::{Error, Result};

/// [`read`], with an error naming `path` ([`Error::Io`]).
pub fn read_file(path: &Path, max: u64, last_link: LastLink) -> Result<Vec<u8>> {
    read(path, max, last_link).map_err(|source| Error::Io {
        op: "read",
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_typed_form_names_the_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("big");
        std::fs::write(&path, b"12345").expect("write");
        assert_eq!(
            read_file(&path, 5, LastLink::Follow).expect("at the limit"),
            b"12345"
        );
        let e = read_file(&path, 4, LastLink::Follow).expect_err("over the limit");
        assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
        assert!(
            e.to_string().contains("more than the limit of 4 bytes"),
            "{e}"
        );
    }
}
